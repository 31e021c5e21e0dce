__kernel void histogram(__global const uint* a, __global uint* bins) {
  SHARED uint h[16];
  uint l = get_local_id(0);
  if (l < 16) h[l] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  atomic_add(&h[a[get_global_id(0)] & 15], 1u);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l < 16) atomic_add(&bins[l], h[l]);
}
