__kernel void lds_reduce_f32(__global const float* a, __global float* out) {
  SHARED float s[128];
  uint l = get_local_id(0);
  s[l] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint k = 64; k > 0; k >>= 1) {
    if (l < k) s[l] = s[l] + s[l + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (l == 0) out[get_group_id(0)] = s[0];
}
