/* WMMA in wave64 (built only as the W64 variant; the wave32 build is empty): C and D are 4
 * registers, element (4r + l / 16, l % 16) in register r of lane l; A and B as in wave32. The
 * host computes each lane's elements; inputs as in wmma_ops (exact sums). */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#ifdef __AMDGCN__
typedef half half16 __attribute__((ext_vector_type(16)));
typedef half half8 __attribute__((ext_vector_type(8)));
typedef float float4v __attribute__((ext_vector_type(4)));
typedef int int4v __attribute__((ext_vector_type(4)));
#else
static uint rig_hbits(half h) { ushort b; memcpy(&b, &h, 2); return b; }
static uint rig_fbits(float f) { uint b; memcpy(&b, &f, 4); return b; }
#endif
__kernel void wmma_w64(__global const half* a, __global const half* b, __global const float* c,
                       __global const uchar* ia, __global const uchar* ib, __global const int* ic,
                       __global uint* out) {
  uint g = get_group_id(0), lid = get_local_id(0), l = lid % 64, col = l % 16;
  uint base = (g * 2 + lid / 64) * 256;
  __global uint* o = out + (g * get_local_size(0) + lid) * 12;
#if defined(__AMDGCN__) && __AMDGCN_WAVEFRONT_SIZE == 64
  half16 x, y;
  half8 zh;
  float4v z;
  int4v zi, ax = 0, bx = 0;
  for (int k = 0; k < 16; k++) {
    x[k] = a[base + col * 16 + k];
    y[k] = b[base + k * 16 + col];
    ax[k / 4] |= (int)ia[base + col * 16 + k] << (8 * (k % 4));
    bx[k / 4] |= (int)ib[base + k * 16 + col] << (8 * (k % 4));
  }
  for (int r = 0; r < 4; r++) {
    uint e = base + (4 * r + l / 16) * 16 + col;
    z[r] = c[e];
    zh[2 * r] = (half)c[e];
    zh[2 * r + 1] = (half)(c[e] * 0.5f);
    zi[r] = ic[e];
  }
  float4v d = __builtin_amdgcn_wmma_f32_16x16x16_f16_w64(x, y, z);
  half8 e1 = __builtin_amdgcn_wmma_f16_16x16x16_f16_w64(x, y, zh, true);
  int4v m = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w64(true, ax, true, bx, zi, false);
  for (int r = 0; r < 4; r++) {
    float dr = d[r];
    int mr = m[r];
    o[r] = __builtin_bit_cast(uint, dr);
    o[4 + r] = __builtin_bit_cast(uint, (half2)(e1[2 * r], e1[2 * r + 1]));
    o[8 + r] = (uint)mr;
  }
#elif !defined(__AMDGCN__)
  for (int r = 0; r < 4; r++) {
    uint row = 4 * r + l / 16, e = base + row * 16 + col;
    double s = 0;
    long si = ic[e];
    for (int k = 0; k < 16; k++) {
      s += (double)a[base + row * 16 + k] * (double)b[base + k * 16 + col];
      si += (long)(signed char)ia[base + row * 16 + k] * (long)(signed char)ib[base + k * 16 + col];
    }
    o[r] = rig_fbits((float)(s + c[e]));
    o[4 + r] = rig_hbits((half)c[e]) | rig_hbits((half)(s + (double)(half)(c[e] * 0.5f))) << 16;
    o[8 + r] = (uint)si;
  }
#endif
}
