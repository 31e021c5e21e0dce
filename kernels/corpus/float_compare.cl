__kernel void float_compare(__global const float* a, __global const float* b, __global int* o) {
  uint i = get_global_id(0);
  float x = a[i], y = b[i];
  o[i] = (x < y) | ((x == y) << 1) | ((x >= 0.0f) << 2) | ((x * y > 10.0f) << 3) | ((fabs(x) < 50.0f) << 4);
}
