struct params { float scale; int offset; uint n; float bias; };
__kernel void struct_param(__global const float* a, __global float* o, struct params p) {
  uint i = get_global_id(0);
  if (i < p.n) o[i] = a[i] * p.scale + (float)p.offset + p.bias;
}
