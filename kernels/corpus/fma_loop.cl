/* The interpreter bench's FMA loop: each work-item runs `iters` dependent FMAs. */
__kernel void fma_loop(__global const float* x, __global float* y, float a, float b, uint iters) {
  uint i = get_global_id(0);
  float v = x[i];
  for (uint k = 0; k < iters; k++) v = fma(v, a, b);
  y[i] = v;
}
