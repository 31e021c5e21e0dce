//! Dot products: the VOP2/VOP3 forms (`v_dot2acc_f32_f16`, `v_dot2_f16_f16`,
//! `v_dot2_bf16_bf16`) as a VALU group, and the per-lane VOP3P forms (`v_dot2_f32_bf16`,
//! `v_dot4_u32_u8`, `v_dot4_i32_iu8`, `v_dot8_u32_u4`, `v_dot8_i32_iu4`) `vop3p` calls.
//!
//! Float dot products sum the exact products and the addend and round once (f64 holds the
//! sum of two f16 or bf16 products and an f32 exactly for operands of similar magnitude);
//! integer ones sum in i64 and saturate under clamp. The `iu` forms take each operand's
//! signedness from neg_lo (bit 0: the first source, bit 1: the second).

use super::ops::Res;
use super::{Lanes, WaveRef, h, hb};
use crate::ExecFault;
use crate::decode::Inst;
use crate::opcodes::op_valu::*;

/// bf16 half `k` of `x` as f64.
fn bf(x: u64, k: u32) -> f64 {
    f32::from_bits(((x >> (16 * k)) as u32 & 0xffff) << 16) as f64
}

/// Rounds to bf16, nearest even (NaN stays NaN, quiet).
pub(super) fn to_bf16(x: f64) -> u64 {
    let f = x as f32;
    if f.is_nan() {
        return ((f.to_bits() >> 16) | 0x40) as u64;
    }
    // f64 -> f32 -> bf16 rounds twice; round from f64 directly through the f32 error term.
    let b = f.to_bits();
    let rest = b & 0xffff;
    let mut hi = b >> 16;
    let err = x - f as f64;
    let up = match rest.cmp(&0x8000) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        // A tie in f32 is a tie only if f32 was exact; otherwise the error decides.
        std::cmp::Ordering::Equal => {
            if err == 0.0 {
                hi & 1 != 0
            } else {
                (err > 0.0) == (f > 0.0)
            }
        }
    };
    if up {
        hi += 1;
    }
    hi as u64
}

/// f16 half `k` of `x` as f64.
fn hk(x: u64, k: u32) -> f64 {
    h((x >> (16 * k)) & 0xffff)
}

/// The VOP2/VOP3 dot products.
pub(super) fn dot_ops(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    _exec: u64,
    pc: u64,
) -> Result<Res, ExecFault> {
    let n = w.lanes;
    let [a, b, c, r] = t;
    // The 16-bit addend of the VOP3 forms is the half op_sel[2] picks.
    let c16 = |x: u64| (x >> if i.op_sel & 4 != 0 { 16 } else { 0 }) & 0xffff;
    match i.op {
        V_DOT2ACC_F32_F16 => {
            let dr = w.row(i.dst, pc)?;
            for l in 0..n {
                let acc = f32::from_bits(w.vgpr[dr + l]) as f64;
                let s = hk(a[l], 0) * hk(b[l], 0) + hk(a[l], 1) * hk(b[l], 1);
                r[l] = ((s + acc) as f32).to_bits() as u64;
            }
        }
        V_DOT2_F16_F16 => {
            for l in 0..n {
                let s = hk(a[l], 0) * hk(b[l], 0) + hk(a[l], 1) * hk(b[l], 1);
                r[l] = hb(s + h(c16(c[l])));
            }
        }
        V_DOT2_BF16_BF16 => {
            for l in 0..n {
                let s = bf(a[l], 0) * bf(b[l], 0) + bf(a[l], 1) * bf(b[l], 1);
                r[l] = to_bf16(s + bf(c16(c[l]), 0));
            }
        }
        _ => return Ok(Res::Other),
    }
    Ok(Res::Lanes(None))
}

/// Whether `op` is a VOP3P dot product this module computes.
pub(super) fn is_vop3p_dot(op: u16) -> bool {
    use crate::opcodes::op_vop3p::*;
    matches!(
        op,
        V_DOT2_F32_BF16 | V_DOT4_U32_U8 | V_DOT4_I32_IU8 | V_DOT8_U32_U4 | V_DOT8_I32_IU4
    )
}

/// One lane of a VOP3P dot product on the sources `s`.
pub(super) fn vop3p_dot(i: &Inst, s: [u64; 3]) -> u64 {
    use crate::opcodes::op_vop3p::*;
    let (bits, unsigned) = match i.op {
        V_DOT2_F32_BF16 => {
            let neg = |k: usize, hi: bool| {
                let m = if hi { i.abs } else { i.neg };
                if m >> k & 1 != 0 { -1.0 } else { 1.0 }
            };
            let sel = |k: usize, hi: bool| {
                let m = if hi { i.op_sel_hi } else { i.op_sel };
                (m >> k & 1) as u32
            };
            let mut sum = 0.0;
            for hi in [false, true] {
                sum += neg(0, hi) * bf(s[0], sel(0, hi)) * neg(1, hi) * bf(s[1], sel(1, hi));
            }
            let x = (sum + f32::from_bits(s[2] as u32) as f64) as f32;
            let x = if i.clamp { x.clamp(0.0, 1.0) } else { x };
            return x.to_bits() as u64;
        }
        V_DOT4_U32_U8 => (8, true),
        V_DOT8_U32_U4 => (4, true),
        V_DOT4_I32_IU8 => (8, false),
        _ => (4, false),
    };
    let signed = |k: usize| !unsigned && i.neg >> k & 1 != 0;
    let part = |x: u64, k: u32, sgn: bool| -> i64 {
        let v = (x >> (bits * k)) & ((1 << bits) - 1);
        if sgn && v >> (bits - 1) != 0 {
            v as i64 - (1 << bits)
        } else {
            v as i64
        }
    };
    let mut sum = if unsigned {
        s[2] as u32 as i64
    } else {
        s[2] as u32 as i32 as i64
    };
    for k in 0..32 / bits {
        sum += part(s[0], k, signed(0)) * part(s[1], k, signed(1));
    }
    if i.clamp {
        sum = if unsigned {
            sum.clamp(0, u32::MAX as i64)
        } else {
            sum.clamp(i32::MIN as i64, i32::MAX as i64)
        };
    }
    sum as u32 as u64
}
