/* Generic (flat) pointers into LDS and global memory: at -O0 the helper uses flat atomics. */
static void bump(int* p, int v) { atomic_add(p, v); }
static void keep_max(int* p, int v) { atomic_max(p, v); }
__kernel void generic_atomics(__global const int* a, __global int* out) {
  SHARED int s[2];
  uint l = get_local_id(0);
  if (l < 2) s[l] = l == 1 ? -2147483647 - 1 : 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  int v = a[get_global_id(0)];
  bump(&s[0], v);
  keep_max(&s[1], v);
  bump(&out[64], 1);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 2) out[2 * get_group_id(0) + l] = s[l];
}
