__kernel void loop_diverge(__global const uint* a, __global uint* o) {
  uint i = get_global_id(0);
  uint x = a[i] % 1000 + 1, steps = 0;
  while (x != 1 && steps < 500) { x = (x & 1) ? 3 * x + 1 : x / 2; steps++; }
  o[i] = steps;
}
