__kernel void bytes_u16(__global const uint* a, __global uchar* ob, __global ushort* os) {
  uint i = get_global_id(0);
  uint x = a[i];
  ob[i] = (uchar)(x ^ (x >> 8));
  os[i] = (ushort)((x >> 3) + (x >> 19));
}
