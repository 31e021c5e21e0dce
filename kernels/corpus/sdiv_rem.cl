__kernel void sdiv_rem(__global const int* a, __global const int* b, __global int* q, __global int* r) {
  uint i = get_global_id(0);
  q[i] = a[i] / b[i];
  r[i] = a[i] % b[i];
}
