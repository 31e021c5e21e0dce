__kernel void fma_minmax(__global const float* a, __global const float* b, __global const float* c, __global float* o) {
  uint i = get_global_id(0);
  float x = a[i], y = b[i], z = c[i];
  o[4 * i] = fma(x, y, z);
  o[4 * i + 1] = fmin(x, y);
  o[4 * i + 2] = fmax(y, z);
  o[4 * i + 3] = fabs(x - z);
}
