__kernel void vmul_i32(__global const int* a, __global const int* b, __global int* c) {
  uint i = get_global_id(0);
  c[i] = a[i] * b[i] - (a[i] >> 3) + (b[i] ^ 0x5a5a);
}
