// Sums each group's 256 elements through a static local array (group segment of 1 KiB).
#include "rig.h"

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void reduce(__global const float *x, __global float *sums) {
  __local float part[256];
  uint l = rig_local_id(0);
  part[l] = x[id];
  for (uint s = 128; s > 0; s >>= 1) {
    rig_barrier();
    if (l < s)
      part[l] += part[l + s];
  }
  if (l == 0)
    sums[rig_group_id(0)] = part[0];
}
