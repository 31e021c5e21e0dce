#define T 16
__kernel void matmul(__global const float* a, __global const float* b, __global float* c, uint n) {
  SHARED float ta[T][T], tb[T][T];
  uint lx = get_local_id(0), ly = get_local_id(1);
  uint col = get_group_id(0) * T + lx, row = get_group_id(1) * T + ly;
  float acc = 0.0f;
  for (uint t = 0; t < n; t += T) {
    ta[ly][lx] = a[row * n + t + lx];
    tb[ly][lx] = b[(t + ly) * n + col];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = 0; k < T; k++) acc = fma(ta[ly][k], tb[k][lx], acc);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  c[row * n + col] = acc;
}
