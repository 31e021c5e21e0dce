__kernel void rotate_bits(__global const uint* a, __global uint* o) {
  uint i = get_global_id(0);
  uint x = a[i], r = i & 31;
  o[i] = ((x << r) | (x >> ((32 - r) & 31))) ^ (x >> 16) ^ (x * 0x9e3779b9u);
}
