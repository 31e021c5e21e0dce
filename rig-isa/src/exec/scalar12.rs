//! Scalar operations GFX12 brought (semantic ids past gfx1100's tables): 64-bit adds and
//! multiplies without carry, scalar f32 arithmetic, conversions and compares, the split
//! `s_wait_*` counters and the split barrier (`s_barrier_signal` / `s_barrier_wait`).
//!
//! Memory is performed at issue, so every wait is a no-op. Waves of a group switch at
//! `s_barrier_wait`: it parks the wave until every live wave of the group waits, which is what
//! LLVM's signal-then-wait pairs of the workgroup barrier (-1) need; signalling is a no-op.

use super::{Flow, Wave, unsupported};
use crate::ExecFault;
use crate::decode::Inst;
use crate::opcodes_gfx12::{new_sop1, new_sop2, new_sopc, new_sopp};

fn f(v: u32) -> f32 {
    f32::from_bits(v)
}

/// SOP2 operations new in GFX12.
pub(super) fn sop2(wv: &mut Wave, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use new_sop2::*;
    match i.op {
        S_ADD_NC_U64 | S_SUB_NC_U64 | S_MUL_U64 => {
            let a = wv.sread64(i.src[0], i.literal, false);
            let b = wv.sread64(i.src[1], i.literal, false);
            let r = match i.op {
                S_ADD_NC_U64 => a.wrapping_add(b),
                S_SUB_NC_U64 => a.wrapping_sub(b),
                _ => a.wrapping_mul(b),
            };
            wv.swrite64(i.dst, r);
        }
        S_ADD_F32 | S_SUB_F32 | S_MUL_F32 | S_MIN_NUM_F32 | S_MAX_NUM_F32 | S_FMAC_F32 => {
            let a = f(wv.sread(i.src[0], i.literal));
            let b = f(wv.sread(i.src[1], i.literal));
            let r = match i.op {
                S_ADD_F32 => a + b,
                S_SUB_F32 => a - b,
                S_MUL_F32 => a * b,
                S_MIN_NUM_F32 => a.min(b),
                S_MAX_NUM_F32 => a.max(b),
                _ => a.mul_add(b, f(wv.sread(i.dst, 0))),
            };
            wv.swrite(i.dst, r.to_bits());
        }
        _ => return Err(unsupported(i, pc)),
    }
    Ok(())
}

/// SOP1 operations new in GFX12.
pub(super) fn sop1(wv: &mut Wave, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use new_sop1::*;
    let a = wv.sread(i.src[0], i.literal);
    let r = match i.op {
        S_BARRIER_SIGNAL | S_SLEEP_VAR => return Ok(()),
        S_CVT_F32_I32 => (a as i32 as f32).to_bits(),
        S_CVT_F32_U32 => (a as f32).to_bits(),
        // Rust's float-to-int casts saturate and map NaN to 0, as the hardware does.
        S_CVT_I32_F32 => f(a) as i32 as u32,
        S_CVT_U32_F32 => f(a) as u32,
        S_CEIL_F32 => f(a).ceil().to_bits(),
        S_FLOOR_F32 => f(a).floor().to_bits(),
        S_TRUNC_F32 => f(a).trunc().to_bits(),
        S_RNDNE_F32 => f(a).round_ties_even().to_bits(),
        _ => return Err(unsupported(i, pc)),
    };
    wv.swrite(i.dst, r);
    Ok(())
}

/// SOPC operations new in GFX12: f32 compares into SCC.
pub(super) fn sopc(wv: &mut Wave, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use new_sopc::*;
    let a = f(wv.sread(i.src[0], i.literal));
    let b = f(wv.sread(i.src[1], i.literal));
    let un = a.is_nan() || b.is_nan();
    wv.scc = match i.op {
        S_CMP_LT_F32 => a < b,
        S_CMP_EQ_F32 => a == b,
        S_CMP_LE_F32 => a <= b,
        S_CMP_GT_F32 => a > b,
        S_CMP_LG_F32 => !un && a != b,
        S_CMP_GE_F32 => a >= b,
        S_CMP_O_F32 => !un,
        S_CMP_U_F32 => un,
        S_CMP_NGE_F32 => un || a < b,
        S_CMP_NLG_F32 => un || a == b,
        S_CMP_NGT_F32 => un || a <= b,
        S_CMP_NLE_F32 => un || a > b,
        S_CMP_NEQ_F32 => a != b,
        S_CMP_NLT_F32 => un || a >= b,
        _ => return Err(unsupported(i, pc)),
    };
    Ok(())
}

/// GFX12's SOPP operations that only advance the PC here (the split wait counters: memory is
/// performed at issue).
pub(super) fn sopp_nop(op: u16) -> bool {
    use new_sopp::*;
    matches!(
        op,
        S_WAIT_ALU
            | S_SINGLEUSE_VDST
            | S_WAIT_LOADCNT
            | S_WAIT_STORECNT
            | S_WAIT_SAMPLECNT
            | S_WAIT_BVHCNT
            | S_WAIT_EXPCNT
            | S_WAIT_DSCNT
            | S_WAIT_KMCNT
            | S_WAIT_LOADCNT_DSCNT
            | S_WAIT_STORECNT_DSCNT
    )
}

/// SOPP operations new in GFX12.
pub(super) fn sopp(wv: &mut Wave, i: &Inst, pc: u64) -> Result<Flow, ExecFault> {
    use new_sopp::*;
    match i.op {
        op if sopp_nop(op) => Ok(Flow::Next),
        S_BARRIER_WAIT => {
            wv.at_barrier = true;
            Ok(Flow::Yield)
        }
        _ => Err(unsupported(i, pc)),
    }
}
