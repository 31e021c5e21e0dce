// Two kernels in one code object.
#include "rig.h"

__kernel void scale(__global float *y, float s) { y[id] *= s; }

__kernel void offset(__global float *y, float d) { y[id] += d; }
