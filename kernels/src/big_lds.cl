// 48 KiB of static local data share, for the check of a kernel's LDS against a GPU's.
#include "rig.h"

__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void big_lds(__global const uint *in, __global uint *out) {
  __local uint big[12288];
  uint l = rig_local_id(0);
  for (uint k = l; k < 12288; k += 64)
    big[k] = in[k];
  rig_barrier();
  out[id] = big[(in[id] * 131u) % 12288u];
}
