__kernel void ptr64(__global const uint* base, __global ulong* out, ulong stride) {
  uint i = get_global_id(0);
  __global const uint* p = (__global const uint*)((__global const uchar*)base + (ulong)i * stride);
  out[i] = (ulong)(p - base) * 3 + *p;
}
