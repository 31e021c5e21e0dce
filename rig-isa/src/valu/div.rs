//! The division helpers `v_div_scale`, `v_div_fmas` and `v_div_fixup` (f32, f64; fixup f16),
//! after the RDNA3 ISA guide's pseudocode, so that LLVM's Newton-Raphson division sequence
//! gives the correctly rounded quotient over the whole exponent range.
//!
//! `div_scale` moves a numerator or denominator by 2^±64 (f64: 2^±128) when the quotient, the
//! reciprocal or an intermediate would leave the normal range, and sets VCC when the final
//! quotient must be scaled back; `div_fmas` then computes `fma` times 2^±64 (2^±128), picked by
//! the quotient's exponent, rounded once. Where the guide's pseudocode contradicts itself (a
//! huge denominator with a denormal quotient: "scale the denominator up" would overflow it), the
//! denominator is scaled down, which is the only reading under which `div_fmas` (2^-64 for
//! small quotients) restores the quotient.

/// Biased exponent field of an f32.
fn exp32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

/// Biased exponent field of an f64.
fn exp64(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32
}

fn denorm32(x: f64) -> bool {
    x != 0.0 && x.abs() < f32::MIN_POSITIVE as f64
}

/// Nonzero and below the smallest normal f64.
fn denorm64(x: f64) -> bool {
    x != 0.0 && x.abs() < f64::MIN_POSITIVE
}

/// `v_div_scale_f32 D, VCC, S0, S1 (denominator), S2 (numerator)`: the scaled `S0` and whether
/// the quotient needs scaling back (VCC).
pub(super) fn scale32(s0: f32, den: f32, num: f32) -> (f32, bool) {
    let up = |x: f32| (x as f64 * 2f64.powi(64)) as f32;
    let down = |x: f32| (x as f64 * 2f64.powi(-64)) as f32;
    let (n, d) = (num as f64, den as f64);
    if num == 0.0 || den == 0.0 {
        (f32::NAN, false)
    } else if exp32(num) - exp32(den) >= 96 {
        // N/D near the largest f32: the denominator goes up, the quotient comes back up.
        (if s0 == den { up(s0) } else { s0 }, true)
    } else if exp32(den) == 0 {
        (up(s0), false)
    } else if denorm32(1.0 / d) && denorm32(n / d) {
        (if s0 == den { down(s0) } else { s0 }, true)
    } else if denorm32(1.0 / d) {
        (down(s0), false)
    } else if denorm32(n / d) {
        // A denormal quotient: the numerator goes up, the quotient comes back down.
        (if s0 == num { up(s0) } else { s0 }, true)
    } else if exp32(num) <= 23 {
        // A tiny numerator: both go up (their quotient is unchanged).
        (up(s0), false)
    } else {
        (s0, false)
    }
}

/// `v_div_scale_f64`, as [`scale32`] with 2^±128 and the f64 thresholds.
pub(super) fn scale64(s0: f64, den: f64, num: f64) -> (f64, bool) {
    let up = |x: f64| x * 2f64.powi(128);
    let down = |x: f64| x * 2f64.powi(-128);
    if num == 0.0 || den == 0.0 {
        (f64::NAN, false)
    } else if exp64(num) - exp64(den) >= 768 {
        (if s0 == den { up(s0) } else { s0 }, true)
    } else if exp64(den) == 0 {
        (up(s0), false)
    } else if denorm64(1.0 / den) && quotient_denorm64(num, den) {
        (if s0 == den { down(s0) } else { s0 }, true)
    } else if denorm64(1.0 / den) {
        (down(s0), false)
    } else if quotient_denorm64(num, den) {
        (if s0 == num { up(s0) } else { s0 }, true)
    } else if exp64(num) <= 53 {
        (up(s0), false)
    } else {
        (s0, false)
    }
}

/// Whether `num / den` is below the smallest normal f64 (the quotient is computed scaled so
/// that it does not flush on the way).
fn quotient_denorm64(num: f64, den: f64) -> bool {
    let q = (num * 2f64.powi(200)) / den;
    q != 0.0 && q.abs() < f64::MIN_POSITIVE * 2f64.powi(200)
}

/// The f32 neighbour of `t` towards `toward` (which differs from `t`).
fn step32(t: f32, toward: f64) -> f32 {
    if t == 0.0 {
        let tiny = f32::from_bits(1);
        return if toward > 0.0 { tiny } else { -tiny };
    }
    let b = t.to_bits();
    // Away from zero is one up in the bit pattern, for either sign.
    f32::from_bits(if (toward > t as f64) == (t > 0.0) {
        b + 1
    } else {
        b - 1
    })
}

/// The f64 neighbour of `t` towards `toward` (which differs from `t`).
fn step64(t: f64, toward: f64) -> f64 {
    if t == 0.0 {
        let tiny = f64::from_bits(1);
        return if toward > 0.0 { tiny } else { -tiny };
    }
    let b = t.to_bits();
    f64::from_bits(if (toward > t) == (t > 0.0) {
        b + 1
    } else {
        b - 1
    })
}

/// `v_div_fmas_f32`: `fma(a, b, c)`, times 2^64 or 2^-64 (by `c`'s exponent) when `vcc`,
/// rounded once. The exact `a * b + c` is `s + e` in f64 (the product is exact there); the
/// scaled value is rounded to f32 with the error term breaking what would be a false tie.
pub(super) fn fmas32(a: f32, b: f32, c: f32, vcc: bool) -> f32 {
    if !vcc {
        return a.mul_add(b, c);
    }
    let k = if exp32(c) > 127 { 64 } else { -64 };
    let p = a as f64 * b as f64;
    let s = p + c as f64;
    if !s.is_finite() {
        return (s * 2f64.powi(k)) as f32;
    }
    // TwoSum: p + c == s + e exactly.
    let bb = s - p;
    let e = (p - (s - bb)) + (c as f64 - bb);
    let (s, e) = (s * 2f64.powi(k), e * 2f64.powi(k));
    round32(s, e)
}

/// Rounds the exact value `s + e` (`|e|` at most half an ulp of `s` in f64) to f32.
fn round32(s: f64, e: f64) -> f32 {
    let t = s as f32;
    if e == 0.0 || t as f64 == s || t.is_infinite() {
        return t;
    }
    let o = step32(t, s);
    let mid = (t as f64 + o as f64) / 2.0;
    if mid != s {
        return t;
    }
    // `s` is a tie between `t` and `o`: the error says which side the exact value is on.
    let up = e > 0.0;
    if (o as f64 > t as f64) == up { o } else { t }
}

/// `v_div_fmas_f64`: `fma(a, b, c)`, times 2^128 or 2^-128 (by `c`'s exponent) when `vcc`,
/// rounded once (the error of the fma decides a false tie on the denormal grid).
pub(super) fn fmas64(a: f64, b: f64, c: f64, vcc: bool) -> f64 {
    let s = a.mul_add(b, c);
    if !vcc {
        return s;
    }
    let k = if exp64(c) > 1023 { 128 } else { -128 };
    let t = s * 2f64.powi(k);
    if k > 0 || !s.is_finite() || t * 2f64.powi(-k) == s {
        return t;
    }
    let toward = if s > t * 2f64.powi(-k) {
        f64::INFINITY
    } else {
        f64::NEG_INFINITY
    };
    let o = step64(t, toward);
    let mid = (t * 2f64.powi(-k) + o * 2f64.powi(-k)) / 2.0;
    if mid != s {
        return t;
    }
    // The sign of the fma's rounding error: a * b = p + pl exactly, p + c = u + v exactly.
    let p = a * b;
    let pl = a.mul_add(b, -p);
    let u = p + c;
    let bb = u - p;
    let v = (p - (u - bb)) + (c - bb);
    let err = (u - s) + (v + pl);
    if err == 0.0 {
        return t;
    }
    if (o > t) == (err > 0.0) { o } else { t }
}

/// `v_div_fixup_f32 D, S0 (quotient), S1 (denominator), S2 (numerator)`: the special cases of
/// IEEE division, else the quotient with the right sign.
pub(super) fn fixup32(q: f32, den: f32, num: f32) -> f32 {
    let neg = den.is_sign_negative() != num.is_sign_negative();
    let signed = |x: f32| if neg { -x } else { x };
    if num.is_nan() {
        f32::from_bits(num.to_bits() | 0x0040_0000)
    } else if den.is_nan() {
        f32::from_bits(den.to_bits() | 0x0040_0000)
    } else if (den == 0.0 && num == 0.0) || (den.is_infinite() && num.is_infinite()) {
        f32::from_bits(0xffc0_0000)
    } else if den == 0.0 || num.is_infinite() {
        signed(f32::INFINITY)
    } else if den.is_infinite() || num == 0.0 || exp32(num) - exp32(den) < -150 {
        // x/inf, 0/y, or a quotient below half the smallest denormal (the guide's UNDERFLOW).
        signed(0.0)
    } else if exp32(num) - exp32(den) > 129 {
        // The quotient is at least 2^129: it overflows (the guide's OVERFLOW case).
        signed(f32::INFINITY)
    } else {
        signed(q.abs())
    }
}

/// `v_div_fixup_f64`, as [`fixup32`].
pub(super) fn fixup64(q: f64, den: f64, num: f64) -> f64 {
    let neg = den.is_sign_negative() != num.is_sign_negative();
    let signed = |x: f64| if neg { -x } else { x };
    if num.is_nan() {
        f64::from_bits(num.to_bits() | 0x0008_0000_0000_0000)
    } else if den.is_nan() {
        f64::from_bits(den.to_bits() | 0x0008_0000_0000_0000)
    } else if (den == 0.0 && num == 0.0) || (den.is_infinite() && num.is_infinite()) {
        f64::from_bits(0xfff8_0000_0000_0000)
    } else if den == 0.0 || num.is_infinite() {
        signed(f64::INFINITY)
    } else if den.is_infinite() || num == 0.0 || exp64(num) - exp64(den) < -1075 {
        signed(0.0)
    } else if exp64(num) - exp64(den) > 1025 {
        signed(f64::INFINITY)
    } else {
        signed(q.abs())
    }
}

/// `v_div_fixup_f16` on f16 bit patterns (`q` rounded from the f32 quotient LLVM computes).
pub(super) fn fixup16(q: u16, den: u16, num: u16) -> u16 {
    let (d, n) = (half::f16::from_bits(den), half::f16::from_bits(num));
    let neg = (den ^ num) & 0x8000 != 0;
    let sign = if neg { 0x8000 } else { 0 };
    if n.is_nan() {
        num | 0x0200
    } else if d.is_nan() {
        den | 0x0200
    } else if (d.to_f32() == 0.0 && n.to_f32() == 0.0) || (d.is_infinite() && n.is_infinite()) {
        0xfe00
    } else if d.to_f32() == 0.0 || n.is_infinite() {
        sign | 0x7c00
    } else if d.is_infinite() || n.to_f32() == 0.0 {
        sign
    } else {
        sign | (q & 0x7fff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LLVM's f32 division sequence (with an exactly rounded reciprocal).
    fn div32(num: f32, den: f32) -> f32 {
        let (ds, _) = scale32(den, den, num);
        let (ns, vcc) = scale32(num, den, num);
        let r = 1.0 / ds;
        let e = (-ds).mul_add(r, 1.0);
        let r = e.mul_add(r, r);
        let q = ns * r;
        let f = (-ds).mul_add(q, ns);
        let q = f.mul_add(r, q);
        let f = (-ds).mul_add(q, ns);
        fixup32(fmas32(f, r, q, vcc), den, num)
    }

    /// LLVM's f64 division sequence.
    fn div64(num: f64, den: f64) -> f64 {
        let (ds, _) = scale64(den, den, num);
        let (ns, vcc) = scale64(num, den, num);
        let r = 1.0 / ds;
        let e = (-ds).mul_add(r, 1.0);
        let r = r.mul_add(e, r);
        let e = (-ds).mul_add(r, 1.0);
        let r = r.mul_add(e, r);
        let q = ns * r;
        let f = (-ds).mul_add(q, ns);
        fixup64(fmas64(f, r, q, vcc), den, num)
    }

    fn same32(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn extreme_quotients_are_ieee() {
        let cases: [(f32, f32); 8] = [
            (3.4e38, 0.5),
            (1.7e38, 0.5),
            (1e-3, 1e-39),
            (1e-39, 3.0),
            (1e-45, 7.0),
            (1.0, 3e38),
            (1e-30, 3e38),
            (3e38, 1e-40),
        ];
        for (n, d) in cases {
            assert!(
                same32(div32(n, d), n / d),
                "{n:e} / {d:e}: {:e}",
                div32(n, d)
            );
        }
        let dcases: [(f64, f64); 5] = [
            (1e308, 0.25),
            (1e-300, 1e300),
            (4.9e-324, 3.0),
            (1.0, 1e-310),
            (1e-310, 7.0),
        ];
        for (n, d) in dcases {
            assert_eq!(div64(n, d).to_bits(), (n / d).to_bits(), "{n:e} / {d:e}");
        }
    }

    #[test]
    fn random_quotients_are_ieee() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let v = next();
            let (n, d) = (f32::from_bits(v as u32), f32::from_bits((v >> 32) as u32));
            assert!(same32(div32(n, d), n / d), "{n:e} / {d:e}");
            let (n, d) = (f64::from_bits(next()), f64::from_bits(next()));
            let (g, w) = (div64(n, d), n / d);
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{n:e} / {d:e}"
            );
        }
    }
}
