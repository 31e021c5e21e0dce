__kernel void lds_atomic64(__global const ulong* a, __global ulong* out) {
  SHARED ulong acc[4];
  uint l = get_local_id(0);
  if (l < 4) acc[l] = l == 2 ? ~0ul : 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong v = a[get_global_id(0)];
  atomic_add(&acc[0], v);
  atomic_max(&acc[1], v);
  atomic_min(&acc[2], v);
  atomic_xor(&acc[3], v >> 3);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 4) out[4 * get_group_id(0) + l] = acc[l];
}
