/* What plain `half` code compiles to beyond + - * fma: division (v_rcp_f32, v_fma_mix,
 * v_div_fixup_f16), exp2/log2/sin/cos (revolutions)/fract/frexp, and the three-operand
 * 16-bit integer min/max/median (v_max3/min3/med3_i16/u16: clang-19 promotes 16-bit
 * integer min/max to 32 bits, so those are inline assembly). The host rounds the f64 result
 * of the same function once to half, which is what rig-isa computes. */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#ifdef __AMDGCN__
#define EXP2H(x) __builtin_exp2f16(x)
#define LOG2H(x) __builtin_log2f16(x)
#define SINH(x) __builtin_amdgcn_sinh(x)
#define COSH(x) __builtin_amdgcn_cosh(x)
#define FRACTH(x) __builtin_amdgcn_fracth(x)
#define MANTH(x) __builtin_amdgcn_frexp_manth(x)
#define EXPH(x) __builtin_amdgcn_frexp_exph(x)
#define OP3(op, a, b, c) ({ uint rig_d; __asm__(op " %0, %1, %2, %3" : "=v"(rig_d) : "v"((uint)(a)), "v"((uint)(b)), "v"((uint)(c))); (ushort)rig_d; })
#define MAX3_I16(a, b, c) OP3("v_max3_i16", a, b, c)
#define MIN3_I16(a, b, c) OP3("v_min3_i16", a, b, c)
#define MED3_I16(a, b, c) OP3("v_med3_i16", a, b, c)
#define MAX3_U16(a, b, c) OP3("v_max3_u16", a, b, c)
#define MIN3_U16(a, b, c) OP3("v_min3_u16", a, b, c)
#define MED3_U16(a, b, c) OP3("v_med3_u16", a, b, c)
#else
#define EXP2H(x) ((half)exp2((double)(x)))
#define LOG2H(x) ((half)log2((double)(x)))
#define SINH(x) ((half)sin((double)(x) * 6.283185307179586))
#define COSH(x) ((half)cos((double)(x) * 6.283185307179586))
static half FRACTH(half x) { half f = (half)((double)x - floor((double)x)); return f > (half)0.99951171875 ? (half)0.99951171875 : f; }
static half MANTH(half x) { int e; return (half)frexp((double)x, &e); }
static short EXPH(half x) { int e; frexp((double)x, &e); return (short)e; }
#define MAX16(a, b) ((a) > (b) ? (a) : (b))
#define MIN16(a, b) ((a) < (b) ? (a) : (b))
#define MAX3_I16(a, b, c) MAX16(MAX16((short)(a), (short)(b)), (short)(c))
#define MIN3_I16(a, b, c) MIN16(MIN16((short)(a), (short)(b)), (short)(c))
#define MED3_I16(a, b, c) MAX16(MIN16((short)(a), (short)(b)), MIN16(MAX16((short)(a), (short)(b)), (short)(c)))
#define MAX3_U16(a, b, c) MAX16(MAX16((ushort)(a), (ushort)(b)), (ushort)(c))
#define MIN3_U16(a, b, c) MIN16(MIN16((ushort)(a), (ushort)(b)), (ushort)(c))
#define MED3_U16(a, b, c) MAX16(MIN16((ushort)(a), (ushort)(b)), MIN16(MAX16((ushort)(a), (ushort)(b)), (ushort)(c)))
#endif
__kernel void half_math(__global const half* a, __global const half* b, __global half* o,
                        __global const short* s, __global short* so) {
  uint i = get_global_id(0);
  half x = a[i], y = b[i];
  o[i * 8 + 0] = x / y;
  o[i * 8 + 1] = EXP2H(x);
  o[i * 8 + 2] = LOG2H(y);
  o[i * 8 + 3] = SINH(x);
  o[i * 8 + 4] = COSH(x);
  o[i * 8 + 5] = FRACTH(x);
  o[i * 8 + 6] = MANTH(x);
  o[i * 8 + 7] = (half)EXPH(y);
  short p = s[3 * i], q = s[3 * i + 1], r = s[3 * i + 2];
  so[i * 6 + 0] = MAX3_I16(p, q, r);
  so[i * 6 + 1] = MIN3_I16(p, q, r);
  so[i * 6 + 2] = MED3_I16(p, q, r);
  so[i * 6 + 3] = MAX3_U16(p, q, r);
  so[i * 6 + 4] = MIN3_U16(p, q, r);
  so[i * 6 + 5] = MED3_U16(p, q, r);
}
