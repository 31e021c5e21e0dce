__kernel void clamp_i32(__global const int* a, __global int* o, int lo, int hi) {
  uint i = get_global_id(0);
  int x = a[i];
  o[i] = min(max(x, lo), hi) + (x < 0 ? -x : x) % 7;
}
