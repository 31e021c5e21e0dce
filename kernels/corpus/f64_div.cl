__kernel void f64_div(__global const double* a, __global const double* b, __global double* q) {
  uint i = get_global_id(0);
  q[i] = a[i] / b[i];
}
