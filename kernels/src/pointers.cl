// A program-scope table of pointers to program-scope variables: the linker leaves
// R_AMDGPU_RELATIVE64 relocations that a loader applies for the image's address.
#include "rig.h"

__global int first = 11;
__global int second = 22;
__global int *__global table[2] = {&first, &second};

__kernel void pick(__global int *out, uint k) { out[id] = *table[(k + id) & 1]; }
