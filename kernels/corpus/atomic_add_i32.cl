__kernel void atomic_add_i32(__global const int* a, __global int* sum) {
  atomic_add(sum, a[get_global_id(0)]);
}
