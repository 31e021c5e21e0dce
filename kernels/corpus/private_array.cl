__kernel void private_array(__global const int* a, __global int* o, int k) {
  int t[16];
  uint i = get_global_id(0);
  for (int j = 0; j < 16; j++) t[j] = a[i * 16 + j] * (j + 1);
  o[i] = t[(k + i) & 15] + t[(a[i] >> 4) & 15];
}
