// printf needs a runtime's printf buffer (and the compiler asks for more services): rig
// refuses such a kernel, so this object is the negative test of that refusal.
#include "rig.h"

__kernel void hello(__global int *out) { printf("hello %d\n", out[id]); }
