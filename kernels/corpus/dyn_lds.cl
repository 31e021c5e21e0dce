__kernel void dyn_lds(__global const int* a, __global int* o, __local int* tmp) {
  uint l = get_local_id(0), n = get_local_size(0);
  tmp[l] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  o[get_global_id(0)] = tmp[n - 1 - l] + tmp[(l + 1) % n];
}
