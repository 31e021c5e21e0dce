__kernel void select_clamp(__global const float* a, __global float* o, float lo, float hi) {
  uint i = get_global_id(0);
  float x = a[i];
  o[i] = x < lo ? lo : (x > hi ? hi : x * 2.0f);
}
