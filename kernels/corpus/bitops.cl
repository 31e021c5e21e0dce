__kernel void bitops(__global const uint* a, __global uint* pc, __global uint* lz, __global uint* bf) {
  uint i = get_global_id(0);
  uint x = a[i];
  pc[i] = popcount(x);
  lz[i] = clz(x);
  bf[i] = ((x >> (i & 7)) & 0x3ff) | ((x & 0xff) << 20);
}
