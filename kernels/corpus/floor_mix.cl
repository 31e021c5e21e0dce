__kernel void floor_mix(__global const float* a, __global float* o, __global int* k) {
  uint i = get_global_id(0);
  float x = a[i] * 3.7f;
  o[i] = floor(x) + (x - floor(x)) * 0.25f;
  k[i] = (int)floor(x);
}
