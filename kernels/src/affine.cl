// A struct passed by value: y[i] = scale * x[i + shift] + bias[i & 1].
#include "rig.h"

typedef struct {
  float scale;
  int shift;
  float bias[2];
  ulong count;
} affine_t;

__kernel void affine(__global const float *x, __global float *y, affine_t p) {
  size_t i = id;
  if (i < p.count)
    y[i] = p.scale * x[i + p.shift] + p.bias[i & 1];
}
