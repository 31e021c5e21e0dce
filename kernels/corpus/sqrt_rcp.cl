__kernel void sqrt_rcp(__global const float* a, __global float* s, __global float* r) {
  uint i = get_global_id(0);
  s[i] = sqrt(a[i]);
  r[i] = 1.0f / a[i];
}
