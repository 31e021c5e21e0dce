/* The dot products gfx1100 has, in the forms LLVM emits: v_dot2acc_f32_f16 (VOP2, the
 * accumulating loop), v_dot2_f32_f16 (VOP3P, clamped), v_dot2_f16_f16, v_dot2_bf16_bf16,
 * v_dot2_f32_bf16, v_dot4_u32_u8, v_dot4_i32_iu8, v_dot8_u32_u4, v_dot8_i32_iu4 (signed and
 * unsigned operands, with and without clamp). The host side spells each out; float inputs
 * are small multiples of 1/16, so every sum is exact and only the final rounding counts. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#ifdef __AMDGCN__
typedef half half2v __attribute__((ext_vector_type(2)));
typedef short short2v __attribute__((ext_vector_type(2)));
#define H2(x) __builtin_bit_cast(half2v, (uint)(x))
#define S2(x) __builtin_bit_cast(short2v, (uint)(x))
#define FDOT2(x, y, c, cl) __builtin_amdgcn_fdot2(H2(x), H2(y), (c), (cl))
#define FDOT2_F16(x, y, c) __builtin_bit_cast(ushort, __builtin_amdgcn_fdot2_f16_f16(H2(x), H2(y), __builtin_bit_cast(half, (ushort)(c))))
#define FDOT2_BF16(x, y, c) ((ushort)__builtin_amdgcn_fdot2_bf16_bf16(S2(x), S2(y), (short)(c)))
#define FDOT2_F32_BF16(x, y, c) __builtin_amdgcn_fdot2_f32_bf16(S2(x), S2(y), (c), false)
#define UDOT4(x, y, c, cl) __builtin_amdgcn_udot4((x), (y), (c), (cl))
#define SUDOT4(sa, x, sb, y, c, cl) (uint)__builtin_amdgcn_sudot4((sa), (x), (sb), (y), (int)(c), (cl))
#define UDOT8(x, y, c, cl) __builtin_amdgcn_udot8((x), (y), (c), (cl))
#define SUDOT8(sa, x, sb, y, c, cl) (uint)__builtin_amdgcn_sudot8((sa), (x), (sb), (y), (int)(c), (cl))
#else
static double rig_h(uint x, int k) { ushort b = x >> (16 * k); half h; memcpy(&h, &b, 2); return h; }
static double rig_bf(uint x, int k) { uint b = (x >> (16 * k)) << 16; float f; memcpy(&f, &b, 4); return f; }
static ushort rig_to_bf16(float f) { /* round to nearest even (inputs keep clear of NaN) */
  uint b; memcpy(&b, &f, 4); return (ushort)((b + 0x7fff + ((b >> 16) & 1)) >> 16); }
static uint rig_fbits(float f) { uint b; memcpy(&b, &f, 4); return b; }
static float FDOT2(uint x, uint y, float c, int cl) {
  float r = (float)(rig_h(x, 0) * rig_h(y, 0) + rig_h(x, 1) * rig_h(y, 1) + c);
  return cl ? fminf(fmaxf(r, 0.0f), 1.0f) : r; }
static ushort FDOT2_F16(uint x, uint y, uint c) {
  half r = (half)(rig_h(x, 0) * rig_h(y, 0) + rig_h(x, 1) * rig_h(y, 1) + rig_h(c, 0));
  ushort b; memcpy(&b, &r, 2); return b; }
static ushort FDOT2_BF16(uint x, uint y, uint c) {
  return rig_to_bf16((float)(rig_bf(x, 0) * rig_bf(y, 0) + rig_bf(x, 1) * rig_bf(y, 1) + rig_bf(c, 0))); }
static float FDOT2_F32_BF16(uint x, uint y, float c) {
  return (float)(rig_bf(x, 0) * rig_bf(y, 0) + rig_bf(x, 1) * rig_bf(y, 1) + c); }
static long rig_part(uint x, int k, int bits, int sgn) {
  uint v = (x >> (bits * k)) & ((1u << bits) - 1);
  return sgn && (v >> (bits - 1)) ? (long)v - (1l << bits) : (long)v; }
static uint rig_dot(int sa, uint x, int sb, uint y, uint c, int cl, int bits, int sc) {
  long s = sc ? (long)(int)c : (long)c;
  for (int k = 0; k < 32 / bits; k++) s += rig_part(x, k, bits, sa) * rig_part(y, k, bits, sb);
  if (cl && sc) s = s > 2147483647l ? 2147483647l : s < -2147483648l ? -2147483648l : s;
  if (cl && !sc) s = s > 4294967295l ? 4294967295l : s;
  return (uint)s; }
#define UDOT4(x, y, c, cl) rig_dot(0, (x), 0, (y), (c), (cl), 8, 0)
#define SUDOT4(sa, x, sb, y, c, cl) rig_dot((sa), (x), (sb), (y), (c), (cl), 8, 1)
#define UDOT8(x, y, c, cl) rig_dot(0, (x), 0, (y), (c), (cl), 4, 0)
#define SUDOT8(sa, x, sb, y, c, cl) rig_dot((sa), (x), (sb), (y), (c), (cl), 4, 1)
#endif
#ifdef __AMDGCN__
#define FBITS(f) __builtin_bit_cast(uint, (f))
#else
#define FBITS(f) rig_fbits(f)
#endif
__kernel void dot_ops(__global const uint* h, __global const uint* bf, __global const uint* in,
                      __global const float* c, __global uint* out) {
  uint i = get_global_id(0);
  uint x = h[i], y = h[i + 1], p = bf[i], q = bf[i + 1], u = in[i], v = in[i + 1], w = in[i + 2];
  float acc = c[i];
  for (uint k = 0; k < 4; k++) acc = FDOT2(h[i + 2 + k], y, acc, 0);
  __global uint* o = out + i * 12;
  o[0] = FBITS(acc);
  o[1] = FBITS(FDOT2(x, y, c[i + 1], 1));
  o[2] = FDOT2_F16(x, y, h[i + 2]);
  o[3] = FDOT2_BF16(p, q, bf[i + 2]);
  o[4] = FBITS(FDOT2_F32_BF16(p, q, c[i + 2]));
  o[5] = UDOT4(u, v, w, 0);
  o[6] = UDOT4(u, v, w | 0xfff00000u, 1);
  o[7] = SUDOT4(1, u, 0, v, w, 0);
  o[8] = SUDOT4(1, u, 1, v, w ^ 0x7ffff000u, 1);
  o[9] = UDOT8(u, v, w, 1);
  o[10] = SUDOT8(0, u, 1, v, w, 1);
  o[11] = SUDOT8(1, u, 1, v, w ^ 0x80000000u, 0);
}
