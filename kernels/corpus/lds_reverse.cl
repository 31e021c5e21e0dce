__kernel void lds_reverse(__global const uint* a, __global uint* o) {
  SHARED uint s[64];
  uint l = get_local_id(0), n = get_local_size(0);
  s[l] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  uint v = s[n - 1 - l];
  barrier(CLK_LOCAL_MEM_FENCE);
  s[l] = v * 3;
  barrier(CLK_LOCAL_MEM_FENCE);
  o[get_global_id(0)] = s[(l + 5) % n] + v;
}
