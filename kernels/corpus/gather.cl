__kernel void gather(__global const uint* idx, __global const float* src, __global float* dst) {
  uint i = get_global_id(0);
  dst[i] = src[idx[i] & 1023] * 0.5f + src[(idx[i] >> 10) & 1023];
}
