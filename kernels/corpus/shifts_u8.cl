__kernel void shifts_u8(__global const uchar* a, __global const short* b, __global int* o) {
  uint i = get_global_id(0);
  o[i] = (a[i] << 3) + b[i] * (int)a[i] - (b[i] >> 2);
}
