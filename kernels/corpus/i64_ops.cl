__kernel void i64_ops(__global const long* a, __global const long* b, __global long* o) {
  uint i = get_global_id(0);
  long x = a[i], y = b[i] | 1;
  o[6 * i] = x / y;
  o[6 * i + 1] = x % y;
  o[6 * i + 2] = (x >> (i & 63)) ^ (long)((ulong)y >> (i % 7));
  o[6 * i + 3] = x < y ? x : y;
  o[6 * i + 4] = __builtin_popcountl((ulong)x) + (x == 0 ? 64 : __builtin_clzl((ulong)x));
  o[6 * i + 5] = (x * 3 - y) + ((ulong)x > (ulong)y);
}
