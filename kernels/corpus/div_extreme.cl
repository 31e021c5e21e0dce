/* Division at the edges of the exponent range: quotients that overflow, underflow to
 * denormals, denormal divisors, huge divisors (v_div_scale's cases), f32 and f64. */
__kernel void div_extreme(__global const float* a, __global const float* b, __global float* q,
                          __global const double* c, __global const double* d, __global double* r) {
  uint i = get_global_id(0);
  q[i] = a[i] / b[i];
  r[i] = c[i] / d[i];
}
