__kernel void u64_arith(__global const ulong* a, __global const ulong* b, __global ulong* c) {
  uint i = get_global_id(0);
  ulong x = a[i], y = b[i];
  c[i] = x * y + (x >> 17) - (y << 5) + (x ^ y);
}
