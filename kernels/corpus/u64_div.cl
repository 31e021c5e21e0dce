__kernel void u64_div(__global const ulong* a, __global const ulong* b, __global ulong* q) {
  uint i = get_global_id(0);
  q[i] = a[i] / b[i] + a[i] % b[i];
}
