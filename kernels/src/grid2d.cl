// A 2-D grid: out[y][x] = x + 1000 * y for a width of w elements.
#include "rig.h"

__kernel void grid2d(__global uint *out, uint w) {
  size_t x = rig_global_id(0), y = rig_global_id(1);
  out[y * w + x] = (uint)(x + 1000 * y);
}
