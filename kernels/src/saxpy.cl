// y = a * x + y over n elements; a grid may be larger than n. Scalar arguments by value.
#include "rig.h"

__kernel void saxpy(float a, __global const float *x, __global float *y, uint n) {
  size_t i = id;
  if (i < n)
    y[i] = a * x[i] + y[i];
}
