__kernel void udiv_rem(__global const uint* a, __global const uint* b, __global uint* q, __global uint* r) {
  uint i = get_global_id(0);
  q[i] = a[i] / b[i];
  r[i] = a[i] % b[i];
}
