// rig's math for kernels built without ROCm's device libraries (-nogpulib): the float
// functions of OpenCL C and HIP that LLVM cannot lower by itself, in C that both languages
// compile. rig.h and rig_hip.h include it after defining RIG_MATH_FN (the qualifiers of a
// helper) and give the languages' names for it; it is also rig_kernels::MATH_PRELUDE.
//
// Where LLVM's AMDGPU lowering of an intrinsic meets OpenCL's precision (exp, exp2, exp10,
// log, log2, log10 of float: within 2 ulp, OpenCL allows 3) the functions are that
// intrinsic. sin, cos and tan
// reduce their argument by pi/2 in double (Cody and Waite's three-part pi/2 below 2^24,
// Payne and Hanek's reduction with 224 bits of 2/pi above) and evaluate Taylor polynomials
// in double: within 1 ulp over every float. pow takes log2 and exp2 in double (within 1
// ulp where the result is a normal float), with C99's special cases. rsqrt is 1/sqrt in
// double (correctly rounded but for the final rounding).
#ifndef RIG_MATH_H
#define RIG_MATH_H

// Word i of 2/pi's bits, 32 a word: word 0 is its integer part (0), word 1 the first 32
// bits after the binary point. Selects, not an array, so no kernel needs scratch memory.
RIG_MATH_FN unsigned int rig_two_over_pi_word(int i) {
  return i == 1 ? 0xA2F9836Eu : i == 2 ? 0x4E441529u : i == 3 ? 0xFC2757D1u
       : i == 4 ? 0xF534DDC0u : i == 5 ? 0xDB629599u : i == 6 ? 0x3C439041u
       : i == 7 ? 0xFE5163ABu : 0u;
}

// sin and cos of |r| <= pi/4: Taylor series to r^13 and r^14, whose next terms are below
// 2^-56 of the result there.
RIG_MATH_FN double rig_sin_poly(double r) {
  double s = r * r;
  return r + r * s * (-1.0 / 6 + s * (1.0 / 120 + s * (-1.0 / 5040 + s * (1.0 / 362880 +
         s * (-1.0 / 39916800 + s * (1.0 / 6227020800.0))))));
}

RIG_MATH_FN double rig_cos_poly(double r) {
  double s = r * r;
  return 1.0 + s * (-1.0 / 2 + s * (1.0 / 24 + s * (-1.0 / 720 + s * (1.0 / 40320 +
         s * (-1.0 / 3628800 + s * (1.0 / 479001600.0 + s * (-1.0 / 87178291200.0)))))));
}

// x (finite) as n * pi/2 + *r with |*r| <= pi/4; returns n mod 4.
RIG_MATH_FN int rig_reduce_pio2(float x, double *r) {
  double d = (double)x;
  if (__builtin_fabs(d) < 0x1p24) {
    double n = __builtin_rint(d * 0x1.45f306dc9c883p-1);
    double t = __builtin_fma(-n, 0x1.921fb54442d18p+0, d);
    t = __builtin_fma(-n, 0x1.1a62633145c07p-54, t);
    *r = __builtin_fma(-n, -0x1.f1976b7ed8fbcp-110, t);
    return (int)n & 3;
  }
  // |x| = m * 2^e with m < 2^24 and e >= 1: only the bits of 2/pi from weight 2^-(e-1)
  // on matter to x * 2/pi mod 4; 96 of them give its fraction to 2^-72.
  unsigned int ix = __builtin_bit_cast(unsigned int, x) & 0x7fffffffu;
  int e = (int)(ix >> 23) - 150;
  unsigned long m = (ix & 0x7fffffu) | 0x800000u;
  int at = e + 30;
  int k = at / 32, s = at % 32;
  unsigned int b0 = rig_two_over_pi_word(k), b1 = rig_two_over_pi_word(k + 1),
               b2 = rig_two_over_pi_word(k + 2), b3 = rig_two_over_pi_word(k + 3);
  unsigned int w0 = s == 0 ? b0 : (b0 << s) | (b1 >> (32 - s));
  unsigned int w1 = s == 0 ? b1 : (b1 << s) | (b2 >> (32 - s));
  unsigned int w2 = s == 0 ? b2 : (b2 << s) | (b3 >> (32 - s));
  unsigned long p0 = m * w2;
  unsigned long p1 = m * w1 + (p0 >> 32);
  unsigned long p2 = m * w0 + (p1 >> 32);
  // The product is p2 * 2^64 + ..., worth 2^-94 a unit: its bits from 94 on are n.
  int n = (int)(p2 >> 30) & 3;
  unsigned long f = ((p2 & 0x3fffffffu) << 32) | (p1 & 0xffffffffu);
  double frac = (double)f * 0x1p-62 + (double)(p0 & 0xffffffffu) * 0x1p-94;
  if (frac >= 0.5) {
    frac -= 1.0;
    n = (n + 1) & 3;
  }
  *r = frac * 0x1.921fb54442d18p+0;
  if (x < 0) {
    *r = -*r;
    n = (4 - n) & 3;
  }
  return n;
}

RIG_MATH_FN float rig_sinf(float x) {
  if (__builtin_fabsf(x) < 0x1p-12f) return x; // x^3/6 is below half an ulp of x
  if (__builtin_isinf(x) || __builtin_isnan(x)) return x - x;
  double r;
  int n = rig_reduce_pio2(x, &r);
  double v = (n & 1) ? rig_cos_poly(r) : rig_sin_poly(r);
  return (float)((n & 2) ? -v : v);
}

RIG_MATH_FN float rig_cosf(float x) {
  if (__builtin_isinf(x) || __builtin_isnan(x)) return x - x;
  double r;
  int n = rig_reduce_pio2(x, &r);
  double v = (n & 1) ? rig_sin_poly(r) : rig_cos_poly(r);
  return (float)((n == 1 || n == 2) ? -v : v);
}

RIG_MATH_FN float rig_tanf(float x) {
  if (__builtin_fabsf(x) < 0x1p-12f) return x; // x^3/3 is below half an ulp of x
  if (__builtin_isinf(x) || __builtin_isnan(x)) return x - x;
  double r;
  int n = rig_reduce_pio2(x, &r);
  double s = rig_sin_poly(r), c = rig_cos_poly(r);
  return (float)((n & 1) ? -c / s : s / c);
}

// log2 of a positive, finite, normal double: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh((m - 1) / (m + 1)) by its series (|s| < 0.172: 13 terms).
RIG_MATH_FN double rig_log2_d(double x) {
  int e;
  double m = __builtin_frexp(x, &e);
  if (m < 0x1.6a09e667f3bcdp-1) {
    m *= 2.0;
    e -= 1;
  }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s, sum = 0.0;
  for (int k = 25; k >= 3; k -= 2) sum = s2 * (1.0 / k + sum);
  double ln = 2.0 * s * (1.0 + sum);
  return (double)e + ln * 0x1.71547652b82fep+0;
}

// 2^t for a double t: 2^n * e^(f ln 2) with n = rint(t), |f| <= 1/2, the exponential's
// Taylor series to the 15th power.
RIG_MATH_FN double rig_exp2_d(double t) {
  if (t > 1100.0) return __builtin_inf();
  if (t < -1100.0) return 0.0;
  double n = __builtin_rint(t);
  double g = (t - n) * 0x1.62e42fefa39efp-1, p = 1.0;
  for (int k = 15; k >= 1; k--) p = 1.0 + p * g / k;
  return __builtin_ldexp(p, (int)n);
}

// pow with C99's (and OpenCL's) special cases; otherwise 2^(y log2 |x|) in double.
RIG_MATH_FN float rig_powf(float x, float y) {
  if (y == 0.0f || x == 1.0f) return 1.0f;
  if (__builtin_isnan(x) || __builtin_isnan(y)) return x + y;
  float ax = __builtin_fabsf(x), ay = __builtin_fabsf(y);
  int integer = __builtin_rintf(y) == y;
  int odd = integer && ay < 0x1p24f && ((int)ay & 1);
  if (x < 0.0f && !integer) return __builtin_nanf("");
  if (__builtin_isinf(y)) {
    if (ax == 1.0f) return 1.0f;
    return (ax < 1.0f) == (y < 0.0f) ? __builtin_inff() : 0.0f;
  }
  float r;
  if (ax == 0.0f) {
    r = y < 0.0f ? __builtin_inff() : 0.0f;
  } else if (__builtin_isinf(x)) {
    r = y < 0.0f ? 0.0f : __builtin_inff();
  } else {
    r = (float)rig_exp2_d((double)y * rig_log2_d((double)ax));
  }
  return odd ? __builtin_copysignf(r, x) : r;
}

RIG_MATH_FN float rig_rsqrtf(float x) { return (float)(1.0 / __builtin_sqrt((double)x)); }

#endif
