__kernel void grid2d(__global uint* o, uint w) {
  uint x = get_global_id(0), y = get_global_id(1);
  o[y * w + x] = x * 1000 + y + get_local_id(0) * 7 + get_group_id(1);
}
