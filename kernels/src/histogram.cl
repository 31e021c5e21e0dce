// Counts bytes into 256 bins with global atomics.
#include "rig.h"

__kernel void histogram(__global const uchar *data, uint n, __global uint *bins) {
  size_t i = id;
  if (i < n)
    __atomic_fetch_add(&bins[data[i]], 1u, __ATOMIC_RELAXED);
}
