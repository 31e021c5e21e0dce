#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void half_ops(__global const half* a, __global const half* b, __global half* o) {
  uint i = get_global_id(0);
  half x0 = a[2 * i], x1 = a[2 * i + 1], y0 = b[2 * i], y1 = b[2 * i + 1];
  half s0 = x0 + y0;
  half s1 = x1 + y1;
  half p0 = x0 * y0;
  half p1 = x1 * y1;
  half d0 = s0 - p0;
  half d1 = s1 - p1;
  o[4 * i] = s0;
  o[4 * i + 1] = s1;
  o[4 * i + 2] = d0;
  o[4 * i + 3] = d1 > p1 ? d1 : p1;
}
