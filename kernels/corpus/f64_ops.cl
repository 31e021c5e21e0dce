__kernel void f64_ops(__global const double* a, __global const double* b, __global double* c) {
  uint i = get_global_id(0);
  c[i] = a[i] * b[i] + a[i] - b[i] * 0.5;
}
