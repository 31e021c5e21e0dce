// Writes, for each work-item of a 3-D grid, what the hidden arguments told it: the groups
// along each axis, the group size along each axis, and the grid's dimensions.
#include "rig.h"

__kernel void dims(__global uint *out) {
  size_t x = rig_global_id(0), y = rig_global_id(1), z = rig_global_id(2);
  size_t w = (size_t)rig_num_groups(0) * rig_local_size(0);
  size_t h = (size_t)rig_num_groups(1) * rig_local_size(1);
  __global uint *o = out + ((z * h + y) * w + x) * 8;
  o[0] = rig_num_groups(0);
  o[1] = rig_num_groups(1);
  o[2] = rig_num_groups(2);
  o[3] = rig_local_size(0);
  o[4] = rig_local_size(1);
  o[5] = rig_local_size(2);
  o[6] = rig_grid_dims();
  o[7] = (uint)x;
}
