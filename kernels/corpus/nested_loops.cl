__kernel void nested_loops(__global const int* a, __global int* o, uint n) {
  uint i = get_global_id(0);
  int acc = 0;
  for (uint r = 0; r < (i & 7) + 1; r++) {
    for (uint c = 0; c < n; c++) {
      int v = a[(i + r * 3 + c) & 1023];
      if (v < 0) continue;
      acc += v * (int)(r + 1);
      if (acc > 100000) break;
    }
  }
  o[i] = acc;
}
