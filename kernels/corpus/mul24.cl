__kernel void mul24(__global const uint* a, __global const uint* b, __global uint* o) {
  uint i = get_global_id(0);
  uint x = a[i] & 0xffffff, y = b[i] & 0xffffff;
  o[i] = x * y + (x >> 3) * (y & 0xff);
}
