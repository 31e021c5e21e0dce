__kernel void atomic_cas(__global int* counter, __global int* slots) {
  uint i = get_global_id(0);
  int old, cur = *counter;
  do { old = cur; cur = atomic_cmpxchg(counter, old, old + 1); } while (cur != old);
  atomic_add(&slots[old % 64], 1);
}
