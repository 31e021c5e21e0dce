__kernel void atomic_u64(__global const ulong* a, __global ulong* sum, __global uint* count) {
  uint i = get_global_id(0);
  __atomic_fetch_add(sum, a[i], __ATOMIC_RELAXED);
  atomic_add(count, 1u);
}
