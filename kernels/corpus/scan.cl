__kernel void scan(__global const int* in, __global int* out) {
  SHARED int s[256];
  uint l = get_local_id(0), n = get_local_size(0);
  s[l] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint off = 1; off < n; off <<= 1) {
    int t = l >= off ? s[l - off] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    s[l] += t;
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  out[get_global_id(0)] = s[l];
}
