__kernel void convert(__global const float* a, __global const int* b, __global int* fi, __global float* itf, __global uint* fu, __global float* utf) {
  uint i = get_global_id(0);
  fi[i] = (int)a[i];
  itf[i] = (float)b[i];
  fu[i] = (uint)fabs(a[i]);
  utf[i] = (float)(uint)b[i];
}
