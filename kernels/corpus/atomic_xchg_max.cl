__kernel void atomic_xchg_max(__global uint* slots, __global uint* best) {
  uint i = get_global_id(0);
  uint v = (i * 2654435761u) >> 8;
  atomic_max(best, v);
  atomic_or(&slots[i & 7], 1u << (i & 31));
}
