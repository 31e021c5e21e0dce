__kernel void atomic_minmax(__global const int* a, __global int* mn, __global int* mx, __global uint* umx) {
  int v = a[get_global_id(0)];
  atomic_min(mn, v);
  atomic_max(mx, v);
  atomic_max(umx, (uint)v);
}
