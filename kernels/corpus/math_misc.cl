__kernel void math_misc(__global const float* a, __global const float* b, __global float* o, __global int* k) {
  uint i = get_global_id(0);
  float x = a[i], y = b[i];
  if (i % 13 == 0) x = x / 0.0f;          /* +-inf */
  /* NaNs come from the input (generated 0/0 differs in sign between x86 and AMD). */
  if (i % 19 == 0) x = x * 1e-40f;        /* denormal */
  int e = 0;
  __private int* ep = &e;
  o[8 * i] = rint(x * 3.3f);
  o[8 * i + 1] = round(x * 2.5f);
  o[8 * i + 2] = trunc(x) + ceil(y);
  o[8 * i + 3] = copysign(y, x);
  o[8 * i + 4] = ldexp(y, (int)(i % 40) - 20);
  o[8 * i + 5] = frexp(y * 1000.0f, ep);
  o[8 * i + 6] = isnan(x) ? 1.0f : isinf(x) ? 2.0f : 0.0f;
  o[8 * i + 7] = fmin(x, y) + fmax(x, -y);
  k[i] = e;
}
