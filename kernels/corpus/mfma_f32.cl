/* The f32 MFMA forms of gfx942 (built for gfx942 alone: gfx942_only), one wave64 a group,
 * each shape's problem per group. A is [block][row][k] and B [block][k][column] in memory;
 * lane l holds A[b][l % M][k] and B[b][k][l % N], with l / M the depth k of the one-block
 * forms and the block b of the multi-block ones (K = 1). C and D: register r of lane l holds
 * element rig_elem(r, l) of [block][row][column]. The host computes each lane's elements;
 * the inputs (multiples of 1/8 and small integers) make every sum exact. */
#ifdef __AMDGCN__
typedef float float4v __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
typedef float float32v __attribute__((ext_vector_type(32)));
#endif
static uint rig_elem(uint m, uint n, uint blocks, uint r, uint l) {
  if (m == 4) return ((l / 4) * 4 + r) * 4 + l % 4;
  uint per = m * n / 64, b = r / per, q = r % per;
  uint row = (q / 4) * (256 / n) + 4 * (l / n) + q % 4;
  return (b * m + row) * n + l % n;
}
#ifdef __AMDGCN__
#define SHAPE(M, K, BL, R, VT, MFMA)                                                    \
  {                                                                                     \
    uint x = l % M, gq = l / M, bb = BL == 1 ? 0 : gq, kk = BL == 1 ? gq : 0;           \
    float av = A[(bb * M + x) * K + kk], bv = B[(bb * K + kk) * M + x];                 \
    VT cv;                                                                              \
    for (uint r = 0; r < R; r++) cv[r] = C[rig_elem(M, M, BL, r, l)];                   \
    VT dv = MFMA(av, bv, cv, 0, 0, 0);                                                  \
    for (uint r = 0; r < R; r++) o[r * 64 + l] = dv[r];                                 \
    o += R * 64;                                                                        \
  }
#else
#define SHAPE(M, K, BL, R, VT, MFMA)                                                    \
  for (uint r = 0; r < R; r++) {                                                        \
    uint e = rig_elem(M, M, BL, r, l), bb = e / (M * M), row = (e / M) % M, col = e % M; \
    double s = 0;                                                                       \
    for (uint kk = 0; kk < K; kk++)                                                     \
      s += (double)A[(bb * M + row) * K + kk] * (double)B[(bb * K + kk) * M + col];     \
    o[r * 64 + l] = (float)(s + C[e]);                                                  \
  }                                                                                     \
  o += R * 64;
#endif
__kernel void mfma_f32(__global const float* a, __global const float* b, __global const float* c,
                       __global float* out) {
  uint g = get_group_id(0), l = get_local_id(0);
  __global const float *A = a + g * 64, *B = b + g * 64, *C = c + g * 2048;
  __global float* o = out + g * 72 * 64;
  SHAPE(32, 1, 2, 32, float32v, __builtin_amdgcn_mfma_f32_32x32x1f32)
  SHAPE(16, 1, 4, 16, float16v, __builtin_amdgcn_mfma_f32_16x16x1f32)
  SHAPE(4, 1, 16, 4, float4v, __builtin_amdgcn_mfma_f32_4x4x1f32)
  SHAPE(32, 2, 1, 16, float16v, __builtin_amdgcn_mfma_f32_32x32x2f32)
  SHAPE(16, 4, 1, 4, float4v, __builtin_amdgcn_mfma_f32_16x16x4f32)
}
