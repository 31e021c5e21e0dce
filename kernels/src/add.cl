// The README's demo: y += x, one work-item per element.
#include "rig.h"

__kernel void add(__global const float *x, __global float *y) { size_t i = id; y[i] += x[i]; }
