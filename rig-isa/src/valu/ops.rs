//! What each VALU operation computes, one function per operand class (compares, moves, f32,
//! 32-bit integer adds, multiplies, min/max, bit operations, conversions, carries, f64, f16,
//! 16-bit integer, cross-lane, and the operations gfx942 has and gfx1100 lacks).
//!
//! `valu::valu` has fetched and modified the sources into `t[0..3]`; a group computes the
//! results into `t[3]` for the opcodes it owns and says so with a `Res`, or returns
//! `Res::Other` for the rest. The groups own disjoint opcode sets (a test checks it). The
//! 32-bit operations with fast forms are `prep::Alu`'s, stated there once for both tiers.

use super::dot::dot_ops;
use super::{Lanes, WaveRef, d, db, div, f, fb, h, hb, unsupported};
use crate::ExecFault;
use crate::decode::{Format, Inst, Isa, src};
use crate::opcodes::op_valu::*;
use crate::opcodes_gfx9::new_valu;

/// What a group did with an instruction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Res {
    /// Not one of the group's opcodes.
    Other,
    /// The results are in `t[3]`, with the carry-out (or compare-like) lane mask to write to
    /// VCC or SDST, if the operation has one.
    Lanes(Option<u64>),
    /// The operation wrote its own result (a scalar or one lane), or has none.
    Written,
}

/// One group: `(wave, lanes, instruction, exec, pc)`.
#[cfg(test)]
type Group = fn(&mut WaveRef, &mut [Lanes; 4], &Inst, u64, u64) -> Result<Res, ExecFault>;

/// Names the groups once: `lanes` asks them in this order (the common ones first) with direct
/// calls (a loop over a table of pointers would call through them), and the tests see the
/// same list as `GROUPS`.
macro_rules! groups {
    ($($group:ident),* $(,)?) => {
        #[cfg(test)]
        const GROUPS: &[Group] = &[$($group),*];

        /// Computes a non-compare VALU operation through the group that owns its opcode.
        pub(super) fn lanes(
            w: &mut WaveRef,
            t: &mut [Lanes; 4],
            i: &Inst,
            exec: u64,
            pc: u64,
        ) -> Result<Res, ExecFault> {
            $(
                let res = $group(w, t, i, exec, pc)?;
                if res != Res::Other {
                    return Ok(res);
                }
            )*
            Ok(Res::Other)
        }
    };
}

groups!(
    move_ops,
    f32_ops,
    int32_ops,
    bit_ops,
    int_mul_ops,
    cvt_ops,
    carry_ops,
    int_minmax_ops,
    f64_ops,
    f16_ops,
    int16_ops,
    cross_lane_ops,
    dot_ops,
    gfx9_ops,
);

/// Computes `$e` for every lane (inactive lanes too: the operations are pure and the results
/// of inactive lanes are never written back), so the loop has no branches and vectorizes.
macro_rules! map {
    ($n:expr, $exec:expr, $r:ident, $a:ident, $b:ident, $c:ident, |$x:ident, $y:ident, $z:ident| $e:expr) => {{
        let _ = $exec;
        for l in 0..$n {
            let ($x, $y, $z) = ($a[l], $b[l], $c[l]);
            $r[l] = $e;
        }
    }};
}

/// The lane `v_readlane_b32`/`v_writelane_b32` name by the scalar `sel`, in a wave of `n`.
#[inline(always)]
pub(crate) fn lane_of(sel: u32, n: usize) -> usize {
    sel as usize % n
}

/// `v_mbcnt_lo_u32_b32` (`hi` false) / `v_mbcnt_hi_u32_b32` of lane `l`: the set bits of the
/// mask `m` in the lanes below `l` (lo: those of lanes 0..31, hi: of lanes 32..63), plus `y`.
#[inline(always)]
pub(crate) fn mbcnt(hi: bool, m: u32, y: u32, l: usize) -> u32 {
    let below = match (hi, l) {
        (false, 32..) => m.count_ones(),
        (false, _) => (m & ((1u64 << l) - 1) as u32).count_ones(),
        (true, 0..32) => 0,
        (true, _) => (m & ((1u64 << (l - 32)) - 1) as u32).count_ones(),
    };
    below.wrapping_add(y)
}

/// The float compares, by the low four bits of the compare opcode: false, <, ==, <=, >,
/// <> (ordered, not equal), >=, ordered, unordered, and the negations of the ordered ones
/// (true when a source is NaN: !>=, !<>, !>, !<=, !=, !<), true. The one statement for
/// f16, f32 and f64 (IEEE order: -0 == +0, NaN unordered).
#[inline(always)]
pub(crate) fn fcmp<T: PartialOrd>(kind: u16, a: T, b: T) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let o = a.partial_cmp(&b);
    match kind {
        0 => false,
        1 => o == Some(Less),
        2 => o == Some(Equal),
        3 => matches!(o, Some(Less | Equal)),
        4 => o == Some(Greater),
        5 => matches!(o, Some(Less | Greater)),
        6 => matches!(o, Some(Greater | Equal)),
        7 => o.is_some(),
        8 => o.is_none(),
        9 => !matches!(o, Some(Greater | Equal)),
        10 => !matches!(o, Some(Less | Greater)),
        11 => o != Some(Greater),
        12 => !matches!(o, Some(Less | Equal)),
        13 => o != Some(Equal),
        14 => o != Some(Less),
        _ => true,
    }
}

fn icmp<T: Ord>(kind: u16, a: T, b: T) -> bool {
    match kind {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => a != b,
        6 => a >= b,
        _ => true,
    }
}

fn class_bits(x: f64, sig_nan: bool) -> u32 {
    // Bits: 0 sNaN, 1 qNaN, 2 -inf, 3 -normal, 4 -denorm, 5 -0, 6 +0, 7 +denorm, 8 +normal, 9 +inf.
    if x.is_nan() {
        return if sig_nan { 1 } else { 2 };
    }
    let neg = x.is_sign_negative();
    let k = if x.is_infinite() {
        if neg { 2 } else { 9 }
    } else if x == 0.0 {
        if neg { 5 } else { 6 }
    } else if x.is_subnormal() {
        if neg { 4 } else { 7 }
    } else if neg {
        3
    } else {
        8
    };
    1 << k
}

/// The class bits of an f32 (`v_cmp_class_f32`'s mask).
pub(crate) fn f32_class(x: u32) -> u32 {
    let v = f32::from_bits(x);
    if v.is_subnormal() {
        return if v.is_sign_negative() { 1 << 4 } else { 1 << 7 };
    }
    class_bits(v as f64, v.is_nan() && x & 0x0040_0000 == 0)
}

fn f64_class(x: u64) -> u32 {
    let v = f64::from_bits(x);
    class_bits(v, v.is_nan() && x & 0x0008_0000_0000_0000 == 0)
}

fn frexp32(x: f32) -> (f32, i32) {
    if x == 0.0 || x.is_nan() || x.is_infinite() {
        return (x, 0);
    }
    let (m, e) = frexp64(x as f64);
    (m as f32, e)
}

fn frexp64(x: f64) -> (f64, i32) {
    if x == 0.0 || x.is_nan() || x.is_infinite() {
        return (x, 0);
    }
    let mut e = ((x.to_bits() >> 52) & 0x7ff) as i32;
    let mut v = x;
    if e == 0 {
        v *= 2f64.powi(64);
        e = ((v.to_bits() >> 52) & 0x7ff) as i32 - 64;
    }
    let m = f64::from_bits((v.to_bits() & !(0x7ff << 52)) | (1022u64 << 52));
    (m, e - 1022)
}

fn ldexp64(x: f64, e: i32) -> f64 {
    let e = e.clamp(-2200, 2200);
    let mut v = x;
    let mut e = e;
    while e > 1000 {
        v *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        v *= 2f64.powi(-1000);
        e += 1000;
    }
    v * 2f64.powi(e)
}

fn cvt_i32(x: f32) -> u32 {
    if x.is_nan() { 0 } else { x as i32 as u32 }
}

fn med3<T: PartialOrd + Copy>(a: T, b: T, c: T) -> T {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    if c < lo {
        lo
    } else if c > hi {
        hi
    } else {
        c
    }
}

/// The quiet form of the first NaN source (S0 tested first) when there is one, else `r`, the
/// host's result. The host's choice of NaN is not fixed: x86 returns its instruction's first
/// operand, LLVM may swap the operands of a commutative `+` or `*` (so one build of a lane
/// loop gave S1's NaN where another gave S0's), and constant folding gives its own NaN. With
/// this the general executor and the fast forms (`exec::fast`) agree in every build.
#[inline(always)]
fn nan_first(x: u32, y: u32, r: f32) -> u32 {
    let nan = |v: u32| v & 0x7fff_ffff > 0x7f80_0000;
    if nan(x) {
        x | 0x0040_0000
    } else if nan(y) {
        y | 0x0040_0000
    } else {
        r.to_bits()
    }
}

/// `v_add_f32` on bits; a NaN source gives its quiet form, S0 first ([`nan_first`]).
#[inline(always)]
pub(crate) fn add_f32(x: u32, y: u32) -> u32 {
    nan_first(x, y, f32::from_bits(x) + f32::from_bits(y))
}

/// `v_mul_f32` on bits; a NaN source gives its quiet form, S0 first ([`nan_first`]).
#[inline(always)]
pub(crate) fn mul_f32(x: u32, y: u32) -> u32 {
    nan_first(x, y, f32::from_bits(x) * f32::from_bits(y))
}

/// `v_min_f32` / `v_max_f32` on bits (`max` picks which), as the RDNA3 ISA guide's pseudocode
/// defines them: in IEEE mode a signalling NaN source (S0 tested first) gives its quiet form;
/// then a NaN S1 gives S0 and a NaN S0 gives S1; else the lesser (greater), with -0 below +0,
/// and S1 when equal. Denormals are the caller's (flushed before and after in a flushing mode).
/// The general executor and the fast forms (`exec::fast`) both run this.
#[inline(always)]
pub(crate) fn min_max_f32(x: u32, y: u32, max: bool, ieee: bool) -> u32 {
    const QUIET: u32 = 0x0040_0000;
    let nan = |v: u32| v & 0x7fff_ffff > 0x7f80_0000;
    if ieee {
        if nan(x) && x & QUIET == 0 {
            return x | QUIET;
        }
        if nan(y) && y & QUIET == 0 {
            return y | QUIET;
        }
    }
    if nan(y) {
        return x;
    }
    if nan(x) {
        return y;
    }
    // Sign-magnitude to an unsigned order in which -0 is below +0.
    let key = |v: u32| if v >> 31 != 0 { !v } else { v | 0x8000_0000 };
    let x_first = if max {
        key(x) > key(y)
    } else {
        key(x) < key(y)
    };
    if x_first { x } else { y }
}
/// `Alu::Fma` on 32-bit lane values.
fn fma(x: u64, y: u64, z: u64) -> u64 {
    crate::prep::Alu::Fma.eval(x as u32, y as u32, z as u32, false) as u64
}

fn fmin(a: u64, b: u64, ieee: bool) -> u64 {
    min_max_f32(a as u32, b as u32, false, ieee) as u64
}
fn fmax(a: u64, b: u64, ieee: bool) -> u64 {
    min_max_f32(a as u32, b as u32, true, ieee) as u64
}

/// The VOPC compares and class tests (opcodes below 0x100): writes the lane mask to VCC,
/// SDST or (v_cmpx) EXEC.
pub(super) fn compare(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    wr_off: u64,
    pc: u64,
) -> Result<(), ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    let [a, b, ..] = t;
    let kind = op & 0xf;
    let mut bits = 0u64;
    for l in 0..n {
        if exec >> l & 1 == 0 {
            continue;
        }
        let (x, y) = (a[l], b[l]);
        let r = match op & 0x7f {
            0x00..=0x0f => fcmp(
                kind,
                half::f16::from_bits(x as u16).to_f64(),
                half::f16::from_bits(y as u16).to_f64(),
            ),
            0x10..=0x1f => fcmp(kind, f(x), f(y)),
            0x20..=0x2f => fcmp(kind, d(x), d(y)),
            0x30..=0x37 => icmp(kind & 7, x as u16 as i16, y as u16 as i16),
            0x38..=0x3f => icmp(kind & 7, x as u16, y as u16),
            0x40..=0x47 => icmp(kind & 7, x as u32 as i32, y as u32 as i32),
            0x48..=0x4f => icmp(kind & 7, x as u32, y as u32),
            0x50..=0x57 => icmp(kind & 7, x as i64, y as i64),
            0x58..=0x5f => icmp(kind & 7, x, y),
            0x7d => {
                let h = half::f16::from_bits(x as u16);
                class_bits(h.to_f64(), h.is_nan() && x & 0x200 == 0) & y as u32 != 0
            }
            0x7e => f32_class(x as u32) & y as u32 != 0,
            0x7f => f64_class(x) & y as u32 != 0,
            _ => return Err(unsupported(i, pc)),
        };
        bits |= (r as u64) << l;
    }
    bits &= !wr_off;
    // GFX9's VOPC names its destination (VCC, or an SDWA form's SGPRs).
    let dst = if e64 || i.isa == Isa::Gfx9 {
        i.dst
    } else {
        src::VCC_LO
    };
    if op >= 0x80 {
        if i.isa == Isa::Gfx9 {
            // GFX9's v_cmpx writes its destination too.
            w.set_mask(dst, bits);
        }
        // v_cmpx: result replaces EXEC (inactive lanes read as 0).
        w.set_mask(src::EXEC_LO, bits);
    } else {
        w.set_mask(dst, bits);
    }
    Ok(())
}

/// The operations gfx942 (CDNA3) has and gfx1100 lacks: 64-bit moves and address arithmetic.
fn gfx9_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let n = w.lanes;
    let [a, b, c, r] = t;
    match i.op {
        new_valu::V_MOV_B64 => map!(n, exec, r, a, b, c, |x, _y, _z| x),
        // D = (S0 << S1[2:0]) + S2, in 64 bits.
        new_valu::V_LSHL_ADD_U64 => map!(n, exec, r, a, b, c, |x, y, z| (x << (y & 7))
            .wrapping_add(z)),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Moves, selects and no-ops.
fn move_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    let [a, b, c, r] = t;
    match op {
        V_CNDMASK_B32 => {
            let m = if e64 {
                w.mask(i.src[2])
            } else {
                w.mask(src::VCC_LO)
            };
            map!(n, exec, r, a, b, c, |x, _y, _z| x);
            for l in 0..n {
                if m >> l & 1 != 0 {
                    r[l] = b[l];
                }
            }
        }
        V_NOP | V_PIPEFLUSH => return Ok(Res::Written),
        V_MOV_B16 => map!(n, exec, r, a, b, c, |x, _y, _z| x),
        V_CNDMASK_B16 => {
            let m = w.mask(i.src[2]);
            map!(n, exec, r, a, b, c, |x, _y, _z| x);
            for l in 0..n {
                if m >> l & 1 != 0 {
                    r[l] = b[l];
                }
            }
        }
        V_PACK_B32_F16 => map!(n, exec, r, a, b, c, |x, y, _z| {
            let lo = if i.op_sel & 1 != 0 { x >> 16 } else { x } & 0xffff;
            let hi = if i.op_sel & 2 != 0 { y >> 16 } else { y } & 0xffff;
            lo | hi << 16
        }),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// f32 arithmetic, min/max, transcendentals and the division helpers.
fn f32_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op, ieee) = (w.lanes, i.op, w.ieee);
    let [a, b, c, r] = t;
    match op {
        V_MUL_DX9_ZERO_F32 => {
            map!(
                n,
                exec,
                r,
                a,
                b,
                c,
                |x, y, _z| if f(x) == 0.0 || f(y) == 0.0 {
                    0
                } else {
                    fb(f(x) * f(y))
                }
            )
        }
        V_FMAC_F32 => {
            let dr = w.row(i.dst, pc)?;
            for l in 0..n {
                c[l] = w.vgpr[dr + l] as u64;
            }
            map!(n, exec, r, a, b, c, |x, y, z| fma(x, y, z))
        }
        V_FMAMK_F32 => {
            let k = i.literal as u64;
            map!(n, exec, r, a, b, c, |x, y, _z| fma(x, k, y))
        }
        V_FMAAK_F32 => {
            let k = i.literal as u64;
            map!(n, exec, r, a, b, c, |x, y, _z| fma(x, y, k))
        }
        V_MIN3_F32 => map!(n, exec, r, a, b, c, |x, y, z| fmin(
            fmin(x, y, ieee),
            z,
            ieee
        )),
        V_MAX3_F32 => map!(n, exec, r, a, b, c, |x, y, z| fmax(
            fmax(x, y, ieee),
            z,
            ieee
        )),
        V_MED3_F32 => map!(n, exec, r, a, b, c, |x, y, z| fb(med3(f(x), f(y), f(z)))),
        V_MAXMIN_F32 => map!(n, exec, r, a, b, c, |x, y, z| fmin(
            fmax(x, y, ieee),
            z,
            ieee
        )),
        V_MINMAX_F32 => map!(n, exec, r, a, b, c, |x, y, z| fmax(
            fmin(x, y, ieee),
            z,
            ieee
        )),
        V_RSQ_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(1.0 / f(x).sqrt())),
        V_EXP_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(f(x).exp2())),
        V_LOG_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(f(x).log2())),
        V_SIN_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb((f(x)
            * std::f32::consts::TAU)
            .sin())),
        V_COS_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb((f(x)
            * std::f32::consts::TAU)
            .cos())),
        V_FRACT_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| {
            let v = f(x);
            if v.is_infinite() {
                fb(f32::NAN)
            } else {
                fb((v - v.floor()).min(f32::from_bits(0x3f7f_ffff)))
            }
        }),
        V_FREXP_MANT_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(frexp32(f(x)).0)),
        V_FREXP_EXP_I32_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| frexp32(f(x)).1 as u32
            as u64),
        V_LDEXP_F32 => map!(n, exec, r, a, b, c, |x, y, _z| fb(
            ldexp64(f(x) as f64, y as u32 as i32) as f32
        )),
        V_DIV_SCALE_F32 => {
            let mut vcc = 0u64;
            for l in 0..n {
                let (v, scale) = div::scale32(f(a[l]), f(b[l]), f(c[l]));
                r[l] = fb(v);
                vcc |= (scale as u64) << l;
            }
            return Ok(Res::Lanes(Some(vcc)));
        }
        V_DIV_SCALE_F64 => {
            let mut vcc = 0u64;
            for l in 0..n {
                let (v, scale) = div::scale64(d(a[l]), d(b[l]), d(c[l]));
                r[l] = db(v);
                vcc |= (scale as u64) << l;
            }
            return Ok(Res::Lanes(Some(vcc)));
        }
        V_DIV_FMAS_F32 => {
            let vcc = w.mask(src::VCC_LO);
            for l in 0..n {
                r[l] = fb(div::fmas32(f(a[l]), f(b[l]), f(c[l]), vcc >> l & 1 != 0));
            }
        }
        V_DIV_FIXUP_F32 => map!(n, exec, r, a, b, c, |x, y, z| fb(div::fixup32(
            f(x),
            f(y),
            f(z)
        ))),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// 32-bit integer adds and subtracts, with the three-operand and shift-add forms.
fn int32_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        // With clamp: saturating (without, `Alu::AddU`/`SubU`, see `valu::valu`).
        V_ADD_NC_U32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as u32).saturating_add(y as u32) as u64
        ),
        V_SUB_NC_U32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as u32).saturating_sub(y as u32) as u64
        ),
        V_ADD_NC_I32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as i32).wrapping_add(y as i32) as u32 as u64
        ),
        V_SUB_NC_I32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as i32).wrapping_sub(y as i32) as u32 as u64
        ),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// 32-bit integer min, max, med3 and their three-operand combinations.
fn int_minmax_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_MIN3_I32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| (x as i32).min(y as i32).min(z as i32) as u32 as u64
        ),
        V_MAX3_I32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| (x as i32).max(y as i32).max(z as i32) as u32 as u64
        ),
        V_MED3_I32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| med3(x as i32, y as i32, z as i32) as u32 as u64
        ),
        V_MED3_U32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| med3(x as u32, y as u32, z as u32) as u64
        ),
        V_MAXMIN_U32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| (x as u32).max(y as u32).min(z as u32) as u64
        ),
        V_MINMAX_U32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, z| (x as u32).min(y as u32).max(z as u32) as u64
        ),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Integer multiplies and multiply-adds (32-bit, 24-bit, and 64-bit results with a carry).
fn int_mul_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_MUL_HI_U32_U24 => map!(n, exec, r, a, b, c, |x, y, _z| ((x & 0xff_ffff)
            * (y & 0xff_ffff))
            >> 32),
        V_MUL_HI_I32_I24 => map!(n, exec, r, a, b, c, |x, y, _z| {
            let p = (((x as u32) << 8) as i32 >> 8) as i64 * (((y as u32) << 8) as i32 >> 8) as i64;
            (p >> 32) as u32 as u64
        }),
        V_MAD_I32_I24 => map!(n, exec, r, a, b, c, |x, y, z| {
            let p = (((x as u32) << 8) as i32 >> 8) as i64 * (((y as u32) << 8) as i32 >> 8) as i64;
            (p as u32).wrapping_add(z as u32) as u64
        }),
        V_MAD_U64_U32 | V_MAD_I64_I32 => {
            let mut cm = 0u64;
            for l in 0..n {
                if exec >> l & 1 == 0 {
                    continue;
                }
                if op == V_MAD_U64_U32 {
                    let p = a[l] as u32 as u128 * b[l] as u32 as u128 + c[l] as u128;
                    r[l] = p as u64;
                    cm |= ((p >> 64) as u64 & 1) << l;
                } else {
                    let p = a[l] as u32 as i32 as i128 * b[l] as u32 as i32 as i128
                        + c[l] as i64 as i128;
                    r[l] = p as u64;
                    cm |= ((p > i64::MAX as i128 || p < i64::MIN as i128) as u64) << l;
                }
            }
            return Ok(Res::Lanes(Some(cm)));
        }
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Shifts, logic, bit counts, bit-field and byte-permute operations (32 and 64 bits).
fn bit_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_LSHLREV_B64 => map!(n, exec, r, a, b, c, |x, y, _z| y << (x & 63)),
        V_LSHRREV_B64 => map!(n, exec, r, a, b, c, |x, y, _z| y >> (x & 63)),
        V_ASHRREV_I64 => map!(n, exec, r, a, b, c, |x, y, _z| ((y as i64) >> (x & 63))
            as u64),
        V_XNOR_B32 => map!(n, exec, r, a, b, c, |x, y, _z| !(x ^ y) & 0xffff_ffff),
        V_BFREV_B32 => map!(n, exec, r, a, b, c, |x, _y, _z| (x as u32).reverse_bits()
            as u64),
        V_CTZ_I32_B32 => map!(n, exec, r, a, b, c, |x, _y, _z| if x as u32 == 0 {
            0xffff_ffff
        } else {
            (x as u32).trailing_zeros() as u64
        }),
        V_BFM_B32 => map!(n, exec, r, a, b, c, |x, y, _z| (((1u64 << (x & 31)) - 1)
            << (y & 31))
            & 0xffff_ffff),
        V_ALIGNBYTE_B32 => map!(n, exec, r, a, b, c, |x, y, z| (((x & 0xffff_ffff) << 32
            | (y & 0xffff_ffff))
            >> (8 * (z & 3)))
            & 0xffff_ffff),
        V_PERM_B32 => map!(n, exec, r, a, b, c, |x, y, z| {
            let bytes = ((x & 0xffff_ffff) << 32 | (y & 0xffff_ffff)).to_le_bytes();
            let mut out = 0u32;
            for k in 0..4 {
                let sel = ((z >> (8 * k)) & 0xff) as usize;
                let v: u32 = match sel {
                    0..=7 => bytes[sel] as u32,
                    8..=11 => {
                        let hb = bytes[2 * (sel - 8) + 1];
                        if hb & 0x80 != 0 { 0xff } else { 0 }
                    }
                    12 => 0,
                    _ => 0xff,
                };
                out |= v << (8 * k);
            }
            out as u64
        }),
        V_CLS_I32 => map!(n, exec, r, a, b, c, |x, _y, _z| {
            let v = x as u32 as i32;
            if v == 0 || v == -1 {
                0xffff_ffff
            } else {
                (if v < 0 { !v } else { v }).leading_zeros() as u64
            }
        }),
        V_BFE_I32 => map!(n, exec, r, a, b, c, |x, y, z| {
            let (o, wd) = (y & 31, z & 31);
            if wd == 0 {
                0
            } else {
                ((((x as u32) >> o) << (32 - wd)) as i32 >> (32 - wd)) as u32 as u64
            }
        }),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Conversions between integer and float types.
fn cvt_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_CVT_FLOOR_I32_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| cvt_i32(f(x).floor())
            as u64),
        V_CVT_NEAREST_I32_F32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, _y, _z| cvt_i32((f(x) + 0.5).floor()) as u64
        ),
        V_CVT_F32_UBYTE0 => map!(n, exec, r, a, b, c, |x, _y, _z| fb((x & 0xff) as f32)),
        V_CVT_F32_UBYTE1 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, _y, _z| fb(((x >> 8) & 0xff) as f32)
        ),
        V_CVT_F32_UBYTE2 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(
            ((x >> 16) & 0xff) as f32
        )),
        V_CVT_F32_UBYTE3 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(
            ((x >> 24) & 0xff) as f32
        )),
        V_CVT_F64_U32 => map!(n, exec, r, a, b, c, |x, _y, _z| db(x as u32 as f64)),
        V_CVT_F64_I32 => map!(n, exec, r, a, b, c, |x, _y, _z| db(x as u32 as i32 as f64)),
        V_CVT_U32_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| if d(x).is_nan() {
            0
        } else {
            d(x) as u32 as u64
        }),
        V_CVT_I32_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| if d(x).is_nan() {
            0
        } else {
            d(x) as i32 as u32 as u64
        }),
        V_CVT_F32_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(d(x) as f32)),
        V_CVT_F64_F32 => map!(n, exec, r, a, b, c, |x, _y, _z| db(f(x) as f64)),
        V_CVT_F16_F32 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, _y, _z| half::f16::from_f32(f(x)).to_bits() as u64
        ),
        V_CVT_F32_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| fb(half::f16::from_bits(
            x as u16
        )
        .to_f32())),
        V_CVT_PK_RTZ_F16_F32 => map!(n, exec, r, a, b, c, |x, y, _z| {
            let h = |v: f32| {
                let t = half::f16::from_f32(v);
                // Round toward zero: step back one ulp if rounding went away from zero.
                if t.to_f32().abs() > v.abs() && t.is_finite() {
                    half::f16::from_bits(t.to_bits() - 1)
                } else {
                    t
                }
            };
            (h(f(x)).to_bits() as u64) | (h(f(y)).to_bits() as u64) << 16
        }),
        V_CVT_F16_U16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb((x & 0xffff) as f64)),
        V_CVT_F16_I16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(x as u16 as i16 as f64)),
        V_CVT_U16_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| if h(x).is_nan() {
            0
        } else {
            h(x) as u16 as u64
        }),
        V_CVT_I16_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| if h(x).is_nan() {
            0
        } else {
            h(x) as i16 as u16 as u64
        }),
        V_CVT_U32_U16 => map!(n, exec, r, a, b, c, |x, _y, _z| x),
        V_CVT_I32_I16 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, _y, _z| x as u16 as i16 as i32 as u32 as u64
        ),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Adds and subtracts with a carry-out lane mask (and carry-in).
fn carry_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    let [a, b, c, r] = t;
    if !matches!(
        op,
        V_ADD_CO_U32
            | V_SUB_CO_U32
            | V_SUBREV_CO_U32
            | V_ADD_CO_CI_U32
            | V_SUB_CO_CI_U32
            | V_SUBREV_CO_CI_U32
    ) {
        return Ok(Res::Other);
    }
    let cin = match op {
        V_ADD_CO_CI_U32 | V_SUB_CO_CI_U32 | V_SUBREV_CO_CI_U32 => {
            if e64 {
                w.mask(i.src[2])
            } else {
                w.mask(src::VCC_LO)
            }
        }
        _ => 0,
    };
    // Every lane is computed (one loop per op, no branch per lane); results of lanes
    // outside EXEC are never written back, and their carries are masked off.
    // The carry of lane l is bit 32 of the 64-bit sum or difference (a borrow sets
    // every high bit), so one vectorisable loop computes both; a second packs them.
    if matches!(op, V_SUBREV_CO_U32 | V_SUBREV_CO_CI_U32) {
        std::mem::swap(a, b);
    }
    let add = matches!(op, V_ADD_CO_U32 | V_ADD_CO_CI_U32);
    for l in 0..n {
        let ci = cin >> l & 1;
        let (x, y) = (a[l] & 0xffff_ffff, b[l] & 0xffff_ffff);
        c[l] = if add {
            x + y + ci
        } else {
            x.wrapping_sub(y).wrapping_sub(ci)
        };
    }
    let mut cm = 0u64;
    for l in 0..n {
        r[l] = c[l] & 0xffff_ffff;
        cm |= (c[l] >> 32 & 1) << l;
    }
    Ok(Res::Lanes(Some(cm & exec)))
}

/// f64 arithmetic.
fn f64_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_ADD_F64 => map!(n, exec, r, a, b, c, |x, y, _z| db(d(x) + d(y))),
        V_MUL_F64 => map!(n, exec, r, a, b, c, |x, y, _z| db(d(x) * d(y))),
        V_FMA_F64 => map!(n, exec, r, a, b, c, |x, y, z| db(d(x).mul_add(d(y), d(z)))),
        V_MIN_F64 => map!(n, exec, r, a, b, c, |x, y, _z| db(d(x).min(d(y)))),
        V_MAX_F64 => map!(n, exec, r, a, b, c, |x, y, _z| db(d(x).max(d(y)))),
        V_LDEXP_F64 => map!(n, exec, r, a, b, c, |x, y, _z| db(ldexp64(
            d(x),
            y as u32 as i32
        ))),
        V_RCP_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(1.0 / d(x))),
        V_RSQ_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(1.0 / d(x).sqrt())),
        V_SQRT_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(d(x).sqrt())),
        V_TRUNC_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(d(x).trunc())),
        V_CEIL_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(d(x).ceil())),
        V_FLOOR_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(d(x).floor())),
        V_RNDNE_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(d(x).round_ties_even())),
        V_FRACT_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(
            (d(x) - d(x).floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff))
        )),
        V_FREXP_MANT_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| db(frexp64(d(x)).0)),
        V_FREXP_EXP_I32_F64 => map!(n, exec, r, a, b, c, |x, _y, _z| frexp64(d(x)).1 as u32
            as u64),
        V_DIV_FMAS_F64 => {
            let vcc = w.mask(src::VCC_LO);
            for l in 0..n {
                r[l] = db(div::fmas64(d(a[l]), d(b[l]), d(c[l]), vcc >> l & 1 != 0));
            }
        }
        V_DIV_FIXUP_F64 => map!(n, exec, r, a, b, c, |x, y, z| db(div::fixup64(
            d(x),
            d(y),
            d(z)
        ))),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// f16 arithmetic (one half of the register; `info` says which).
fn f16_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_ADD_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x) + h(y))),
        V_SUB_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x) - h(y))),
        V_SUBREV_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(y) - h(x))),
        V_MUL_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x) * h(y))),
        V_FMA_F16 => map!(n, exec, r, a, b, c, |x, y, z| hb(h(x).mul_add(h(y), h(z)))),
        V_FMAC_F16 => {
            let dr = w.row(i.dst, pc)?;
            for l in 0..n {
                c[l] = (w.vgpr[dr + l] & 0xffff) as u64;
            }
            map!(n, exec, r, a, b, c, |x, y, z| hb(h(x).mul_add(h(y), h(z))))
        }
        V_FMAMK_F16 => {
            let k = (i.literal & 0xffff) as u64;
            map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x).mul_add(h(k), h(y))))
        }
        V_FMAAK_F16 => {
            let k = (i.literal & 0xffff) as u64;
            map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x).mul_add(h(y), h(k))))
        }
        V_MAX_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x).max(h(y)))),
        V_MIN_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(h(x).min(h(y)))),
        V_MAX3_F16 => map!(n, exec, r, a, b, c, |x, y, z| hb(h(x).max(h(y)).max(h(z)))),
        V_MIN3_F16 => map!(n, exec, r, a, b, c, |x, y, z| hb(h(x).min(h(y)).min(h(z)))),
        V_MED3_F16 => map!(n, exec, r, a, b, c, |x, y, z| hb(med3(h(x), h(y), h(z)))),
        V_LDEXP_F16 => map!(n, exec, r, a, b, c, |x, y, _z| hb(ldexp64(
            h(x),
            y as u16 as i16 as i32
        ))),
        V_SQRT_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).sqrt())),
        V_RCP_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(1.0 / h(x))),
        V_RSQ_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(1.0 / h(x).sqrt())),
        V_TRUNC_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).trunc())),
        V_FLOOR_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).floor())),
        V_CEIL_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).ceil())),
        V_RNDNE_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).round_ties_even())),
        V_EXP_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).exp2())),
        V_LOG_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(h(x).log2())),
        V_SIN_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb((h(x)
            * std::f64::consts::TAU)
            .sin())),
        V_COS_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb((h(x)
            * std::f64::consts::TAU)
            .cos())),
        V_FRACT_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| {
            let v = h(x);
            if v.is_nan() {
                x | 0x200
            } else if v.is_infinite() {
                hb(f64::NAN)
            } else {
                // Below 1 by at least an ulp of f16.
                hb(v - v.floor()).min(0x3bff)
            }
        }),
        V_FREXP_MANT_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| hb(frexp64(h(x)).0)),
        V_FREXP_EXP_I16_F16 => map!(n, exec, r, a, b, c, |x, _y, _z| frexp64(h(x)).1 as u16
            as u64),
        V_DIV_FIXUP_F16 => map!(n, exec, r, a, b, c, |x, y, z| div::fixup16(
            x as u16, y as u16, z as u16
        ) as u64),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// 16-bit integer arithmetic, shifts and logic.
fn int16_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    _pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_ADD_NC_U16 => map!(n, exec, r, a, b, c, |x, y, _z| if i.clamp {
            (x + y).min(0xffff)
        } else {
            (x + y) & 0xffff
        }),
        V_SUB_NC_U16 => map!(n, exec, r, a, b, c, |x, y, _z| if i.clamp {
            x.saturating_sub(y)
        } else {
            x.wrapping_sub(y) & 0xffff
        }),
        V_ADD_NC_I16 => map!(n, exec, r, a, b, c, |x, y, _z| (x as u16 as i16)
            .wrapping_add(y as u16 as i16)
            as u16 as u64),
        V_SUB_NC_I16 => map!(n, exec, r, a, b, c, |x, y, _z| (x as u16 as i16)
            .wrapping_sub(y as u16 as i16)
            as u16 as u64),
        V_MUL_LO_U16 => map!(n, exec, r, a, b, c, |x, y, _z| (x * y) & 0xffff),
        V_MAD_U16 => map!(n, exec, r, a, b, c, |x, y, z| (x * y + z) & 0xffff),
        V_MAD_I16 => map!(n, exec, r, a, b, c, |x, y, z| (x as u16 as i16)
            .wrapping_mul(y as u16 as i16)
            .wrapping_add(z as u16 as i16)
            as u16 as u64),
        V_MAD_U32_U16 => map!(n, exec, r, a, b, c, |x, y, z| (x * y + z) & 0xffff_ffff),
        V_MAD_I32_I16 => map!(n, exec, r, a, b, c, |x, y, z| (x as u16 as i16 as i32
            * y as u16 as i16 as i32)
            .wrapping_add(z as u32 as i32)
            as u32 as u64),
        V_LSHLREV_B16 => map!(n, exec, r, a, b, c, |x, y, _z| (y << (x & 15)) & 0xffff),
        V_LSHRREV_B16 => map!(n, exec, r, a, b, c, |x, y, _z| y >> (x & 15)),
        V_ASHRREV_I16 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| ((y as u16 as i16) >> (x & 15)) as u16 as u64
        ),
        V_AND_B16 => map!(n, exec, r, a, b, c, |x, y, _z| x & y),
        V_OR_B16 => map!(n, exec, r, a, b, c, |x, y, _z| x | y),
        V_XOR_B16 => map!(n, exec, r, a, b, c, |x, y, _z| x ^ y),
        V_NOT_B16 => map!(n, exec, r, a, b, c, |x, _y, _z| !x & 0xffff),
        V_MAX_U16 => map!(n, exec, r, a, b, c, |x, y, _z| x.max(y)),
        V_MAX3_U16 => map!(n, exec, r, a, b, c, |x, y, z| x.max(y).max(z)),
        V_MIN3_U16 => map!(n, exec, r, a, b, c, |x, y, z| x.min(y).min(z)),
        V_MED3_U16 => map!(n, exec, r, a, b, c, |x, y, z| med3(x, y, z)),
        V_MAX3_I16 => map!(n, exec, r, a, b, c, |x, y, z| (x as u16 as i16)
            .max(y as u16 as i16)
            .max(z as u16 as i16) as u16
            as u64),
        V_MIN3_I16 => map!(n, exec, r, a, b, c, |x, y, z| (x as u16 as i16)
            .min(y as u16 as i16)
            .min(z as u16 as i16) as u16
            as u64),
        V_MED3_I16 => map!(n, exec, r, a, b, c, |x, y, z| med3(
            x as u16 as i16,
            y as u16 as i16,
            z as u16 as i16
        ) as u16 as u64),
        V_MIN_U16 => map!(n, exec, r, a, b, c, |x, y, _z| x.min(y)),
        V_MAX_I16 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as u16 as i16).max(y as u16 as i16) as u16 as u64
        ),
        V_MIN_I16 => map!(
            n,
            exec,
            r,
            a,
            b,
            c,
            |x, y, _z| (x as u16 as i16).min(y as u16 as i16) as u16 as u64
        ),
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Operations that read other lanes or scalars: lane reads and writes, mbcnt, permlane.
fn cross_lane_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    exec: u64,
    pc: u64,
) -> Result<Res, ExecFault> {
    let (n, op) = (w.lanes, i.op);
    let [a, b, c, r] = t;
    match op {
        V_READFIRSTLANE_B32 => {
            let l = if exec == 0 {
                0
            } else {
                exec.trailing_zeros() as usize
            };
            w.swrite(i.dst, a[l] as u32);
            return Ok(Res::Written);
        }
        V_READLANE_B32 => {
            let l = lane_of(b[0] as u32, n);
            w.swrite(i.dst, a[l] as u32);
            return Ok(Res::Written);
        }
        V_WRITELANE_B32 => {
            let l = lane_of(b[0] as u32, n);
            let dr = w.row(i.dst, pc)?;
            w.vgpr[dr + l] = a[0] as u32;
            return Ok(Res::Written);
        }
        V_MBCNT_LO_U32_B32 | V_MBCNT_HI_U32_B32 => {
            for l in 0..n {
                if exec >> l & 1 == 0 {
                    continue;
                }
                r[l] = mbcnt(op == V_MBCNT_HI_U32_B32, a[l] as u32, b[l] as u32, l) as u64;
            }
        }
        V_PERMLANE16_B32 | V_PERMLANEX16_B32 => {
            // Lane l of each row of 16 reads lane sel(l) of its own row (permlane16) or of the
            // other row of its 32-lane half (permlanex16); sel comes from {src2, src1} nibbles.
            // op_sel bit 0 is fetch-inactive, bit 1 bound_ctrl (out-of-range reads keep dst).
            let sel = (c[0] & 0xffff_ffff) << 32 | (b[0] & 0xffff_ffff);
            let fi = i.op_sel & 1 != 0;
            let dr = w.row(i.dst, pc)?;
            let old: Vec<u32> = w.vgpr[dr..dr + n].to_vec();
            for l in 0..n {
                let nib = ((sel >> (4 * (l & 15))) & 15) as usize;
                let row = if op == V_PERMLANEX16_B32 {
                    (l & !31) | ((l & 16) ^ 16)
                } else {
                    l & !15
                };
                let s = row + nib;
                r[l] = if fi || exec >> s & 1 != 0 {
                    a[s]
                } else {
                    old[l] as u64
                };
            }
        }
        V_PERMLANE64_B32 => {
            if n == 64 {
                map!(n, exec, r, a, b, c, |x, _y, _z| x);
                let a2 = *a;
                for l in 0..64 {
                    r[l] = a2[l ^ 32];
                }
            } else {
                map!(n, exec, r, a, b, c, |x, _y, _z| x);
            }
        }
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VOP3 instruction of `op` reading v0..v2 into v4 (v4..v5 for 64-bit results).
    fn inst(op: u16) -> Inst {
        let mut i = crate::decode::decode(&[0xd655_0004, 0x040a_0300]).expect("a VOP3 encoding");
        i.op = op;
        i
    }

    #[test]
    fn each_opcode_belongs_to_at_most_one_group() {
        let mut sgpr = [0u32; 128];
        let mut vgpr = vec![0u32; 16 * 64];
        let mut scc = false;
        let mut t = Box::new([[0u64; 64]; 4]);
        let mut owned = 0;
        for op in 0x100..0x400u16 {
            let i = inst(op);
            let mut w = WaveRef {
                sgpr: &mut sgpr,
                vgpr: &mut vgpr,
                nvgpr: 16,
                acc: crate::exec::AccRegs::default(),
                lanes: 64,
                scc: &mut scc,
                ftz32: false,
                ieee: true,
                ftz16_64: false,
            };
            let mut owners = (GROUPS.iter().enumerate())
                .filter(|(_, g)| g(&mut w, &mut t, &i, u64::MAX, 0).unwrap() != Res::Other)
                .map(|(k, _)| k)
                .collect::<Vec<_>>();
            // `prep::Alu` owns the operations it states (the groups keep the integer add and
            // subtract under clamp, which saturate).
            if crate::prep::alu_of(op, true).is_some() && !matches!(op, V_ADD_NC_U32 | V_SUB_NC_U32)
            {
                owners.push(GROUPS.len());
            }
            assert!(
                owners.len() <= 1,
                "op {op:#x} is owned by groups {owners:?} (`Alu` is {})",
                GROUPS.len()
            );
            owned += owners.len();
        }
        // Every VALU operation the interpreter runs, but the compares (below 0x100).
        assert!(owned > 200, "only {owned} opcodes are owned");
    }

    #[test]
    fn nan_sources_give_the_first_quieted() {
        let (q0, q1, s1) = (0x7fc0_0000u32, 0xffc0_1234u32, 0x7f80_0005u32);
        for (x, y, want) in [
            (q0, q1, q0),
            (q1, q0, q1),
            (s1, q0, s1 | 0x40_0000),
            (q0, s1, q0),
        ] {
            assert_eq!(add_f32(x, y), want, "add {x:#x} {y:#x}");
            assert_eq!(mul_f32(x, y), want, "mul {x:#x} {y:#x}");
        }
        // One NaN source gives its quiet form; numbers add and multiply as the host's.
        assert_eq!(add_f32(1.0f32.to_bits(), s1), s1 | 0x40_0000);
        assert_eq!(mul_f32(s1, 2.0f32.to_bits()), s1 | 0x40_0000);
        assert_eq!(
            add_f32(1.5f32.to_bits(), 2.0f32.to_bits()),
            3.5f32.to_bits()
        );
        assert_eq!(
            mul_f32(1.5f32.to_bits(), 2.0f32.to_bits()),
            3.0f32.to_bits()
        );
    }

    #[test]
    fn min_max_f32_follow_the_isa_guide() {
        let (pz, nz, one) = (0x0000_0000u32, 0x8000_0000u32, 1.0f32.to_bits());
        let (qnan, snan) = (0x7fc0_0001u32, 0x7f80_0001u32);
        // (S0, S1, IEEE mode, min, max)
        let cases = [
            // -0 orders below +0, whichever source holds it.
            (pz, nz, true, nz, pz),
            (nz, pz, true, nz, pz),
            (nz, pz, false, nz, pz),
            (one, nz, true, nz, one),
            // A quiet NaN loses to the other source; two NaNs give S0.
            (qnan, one, true, one, one),
            (one, qnan, false, one, one),
            (qnan, 0xffc0_0000, true, qnan, qnan),
            // A signalling NaN: quieted in IEEE mode (S0 first), else like a quiet one.
            (snan, one, true, snan | 0x40_0000, snan | 0x40_0000),
            (one, snan, true, snan | 0x40_0000, snan | 0x40_0000),
            (qnan, snan, true, snan | 0x40_0000, snan | 0x40_0000),
            (snan, one, false, one, one),
            (one, snan, false, one, one),
            // Ordinary values, infinities.
            (0xc000_0000, one, true, 0xc000_0000, one),
            (0x7f80_0000, 0xff80_0000, true, 0xff80_0000, 0x7f80_0000),
        ];
        for (x, y, ieee, lo, hi) in cases {
            let ctx = format!("{x:#x}, {y:#x}, IEEE {ieee}");
            assert_eq!(min_max_f32(x, y, false, ieee), lo, "min {ctx}");
            assert_eq!(min_max_f32(x, y, true, ieee), hi, "max {ctx}");
        }
    }
}
