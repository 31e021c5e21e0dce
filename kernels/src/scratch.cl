// A private array indexed by data, which the compiler must keep in scratch memory, so the
// kernel's private segment is not empty.
#include "rig.h"

__kernel void scratch(__global const uint *in, __global uint *out) {
  uint t[320];
  size_t i = id;
  uint seed = in[i];
  for (uint k = 0; k < 320; k++)
    t[k] = seed * k + (uint)i;
  uint acc = 0;
  for (uint k = 0; k < 64; k++)
    acc += t[(seed + k * 37u) % 320u];
  out[i] = acc;
}
