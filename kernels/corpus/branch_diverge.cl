__kernel void branch_diverge(__global const int* a, __global int* o) {
  uint i = get_global_id(0);
  int x = a[i];
  int r;
  if (x & 1) r = x * 3 + 1; else if (x & 2) r = x / 2; else r = -x;
  o[i] = r;
}
