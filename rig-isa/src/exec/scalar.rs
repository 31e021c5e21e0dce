//! Scalar ALU semantics: SOP2, SOP1, SOPC, SOPK and SOPP (branches, barriers, the end of a
//! program), on the wave's SGPRs, SCC, EXEC and PC.

use super::{Flow, Wave, unsupported};
use crate::decode::Inst;
use crate::meta::meta;
use crate::opcodes::{op_sop1, op_sop2, op_sopc, op_sopk, op_sopp};
use crate::prep::{Salu, salu_of_sop2};
use crate::{ExecFault, Memory};

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn sop2(wv: &mut Wave, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    let wd = meta(i).w;
    if wd.src[0] == 2 || wd.dst == 2 {
        let a = wv.sread64(i.src[0], i.literal, false);
        let b = if wd.src[1] == 2 {
            wv.sread64(i.src[1], i.literal, false)
        } else {
            wv.sread(i.src[1], i.literal) as u64
        };
        let (r, scc) = sop2_b64(i.op, a, b, wv.scc).ok_or_else(|| unsupported(i, pc))?;
        wv.scc = scc.unwrap_or(r != 0);
        wv.swrite64(i.dst, r);
        return Ok(());
    }
    let a = wv.sread(i.src[0], i.literal);
    let b = wv.sread(i.src[1], i.literal);
    let f = salu_of_sop2(i.op).ok_or_else(|| unsupported(i, pc))?;
    let (r, scc) = salu(f, a, b, wv.scc);
    wv.scc = scc;
    wv.swrite(i.dst, r);
    Ok(())
}

/// Whether gfx1100's SOP2 opcode `op` is one of [`sop2_b64`]'s.
pub(crate) fn is_sop2_b64(op: u16) -> bool {
    sop2_b64(op, 0, 0, false).is_some()
}

/// The 64-bit SOP2 operations: the result and SCC (None: SCC says whether it is nonzero).
#[inline(always)]
pub(crate) fn sop2_b64(op: u16, a: u64, b: u64, scc: bool) -> Option<(u64, Option<bool>)> {
    use op_sop2::*;
    Some(match op {
        S_LSHL_B64 => (a << (b & 63), None),
        S_LSHR_B64 => (a >> (b & 63), None),
        S_ASHR_I64 => (((a as i64) >> (b & 63)) as u64, None),
        S_AND_B64 => (a & b, None),
        S_OR_B64 => (a | b, None),
        S_XOR_B64 => (a ^ b, None),
        S_NAND_B64 => (!(a & b), None),
        S_NOR_B64 => (!(a | b), None),
        S_XNOR_B64 => (!(a ^ b), None),
        S_AND_NOT1_B64 => (a & !b, None),
        S_OR_NOT1_B64 => (a | !b, None),
        S_CSELECT_B64 => (if scc { a } else { b }, Some(scc)),
        S_BFM_B64 => {
            let (w, o) = (a & 63, b & 63);
            ((((1u128 << w) - 1) as u64) << o, Some(scc))
        }
        S_BFE_U64 | S_BFE_I64 => {
            let o = b & 63;
            let w = (b >> 16) & 127;
            let v = if w == 0 {
                0
            } else if w >= 64 {
                a >> o
            } else {
                (a >> o) & ((1u64 << w) - 1)
            };
            let v = if op == S_BFE_I64 && w > 0 && w < 64 {
                ((v << (64 - w)) as i64 >> (64 - w)) as u64
            } else {
                v
            };
            (v, None)
        }
        _ => return None,
    })
}

/// The 32-bit scalar ALU operations: the result and SCC from `a`, `b` and the old SCC.
#[inline(always)]
pub(crate) fn salu(f: Salu, a: u32, b: u32, scc: bool) -> (u32, bool) {
    let nz = |r: u32| (r, r != 0);
    match f {
        Salu::Mov => (a, scc),
        Salu::AddU => a.overflowing_add(b),
        Salu::SubU => a.overflowing_sub(b),
        Salu::AddI => {
            let (r, o) = (a as i32).overflowing_add(b as i32);
            (r as u32, o)
        }
        Salu::SubI => {
            let (r, o) = (a as i32).overflowing_sub(b as i32);
            (r as u32, o)
        }
        Salu::Addc => {
            let s = a as u64 + b as u64 + scc as u64;
            (s as u32, s >> 32 != 0)
        }
        Salu::Subb => {
            let s = (a as u64).wrapping_sub(b as u64).wrapping_sub(scc as u64);
            (s as u32, (b as u64 + scc as u64) > a as u64)
        }
        Salu::MinI => ((a as i32).min(b as i32) as u32, (a as i32) < (b as i32)),
        Salu::MinU => (a.min(b), a < b),
        Salu::MaxI => ((a as i32).max(b as i32) as u32, (a as i32) > (b as i32)),
        Salu::MaxU => (a.max(b), a > b),
        Salu::LshlAdd(sh) => {
            let s = ((a as u64) << sh) + b as u64;
            (s as u32, s >> 32 != 0)
        }
        Salu::MulI => ((a as i32).wrapping_mul(b as i32) as u32, scc),
        Salu::MulHiU => (((a as u64 * b as u64) >> 32) as u32, scc),
        Salu::MulHiI => (((a as i32 as i64 * b as i32 as i64) >> 32) as u32, scc),
        Salu::AbsDiffI => nz((a as i32).wrapping_sub(b as i32).unsigned_abs()),
        Salu::Lshl => nz(a << (b & 31)),
        Salu::Lshr => nz(a >> (b & 31)),
        Salu::Ashr => nz(((a as i32) >> (b & 31)) as u32),
        Salu::And => nz(a & b),
        Salu::Or => nz(a | b),
        Salu::Xor => nz(a ^ b),
        Salu::Nand => nz(!(a & b)),
        Salu::Nor => nz(!(a | b)),
        Salu::Xnor => nz(!(a ^ b)),
        Salu::AndNot1 => nz(a & !b),
        Salu::OrNot1 => nz(a | !b),
        Salu::BfeU | Salu::BfeI => {
            let o = b & 31;
            let w = (b >> 16) & 127;
            let v = if w == 0 {
                0
            } else if w >= 32 {
                a >> o
            } else {
                (a >> o) & ((1u32 << w) - 1)
            };
            let v = if f == Salu::BfeI && w > 0 && w < 32 {
                ((v << (32 - w)) as i32 >> (32 - w)) as u32
            } else {
                v
            };
            nz(v)
        }
        Salu::Bfm => ((((1u64 << (a & 31)) - 1) as u32) << (b & 31), scc),
        Salu::Cselect => (if scc { a } else { b }, scc),
        Salu::PackLl => ((a & 0xffff) | b << 16, scc),
        Salu::PackLh => ((a & 0xffff) | (b & 0xffff_0000), scc),
        Salu::PackHh => ((a >> 16) | (b & 0xffff_0000), scc),
        Salu::Ctz => (if a == 0 { u32::MAX } else { a.trailing_zeros() }, scc),
        Salu::Bcnt1 => nz(a.count_ones()),
        Salu::Brev => (a.reverse_bits(), scc),
    }
}

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn sop1(wv: &mut Wave, mem: &dyn Memory, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    let wd = meta(i).w;
    let wide = wd.dst == 2;
    let a = if wd.src[0] == 2 {
        wv.sread64(i.src[0], i.literal, false)
    } else {
        wv.sread(i.src[0], i.literal) as u64
    };
    if sop1_move(wv, mem, i, a, wide)
        || sop1_bits(wv, i, a, wide)
        || sop1_exec(wv, i, a, wide)
        || sop1_pc(wv, i, a)
    {
        Ok(())
    } else {
        Err(unsupported(i, pc))
    }
}

/// Moves, conditional moves and message returns; false for other opcodes.
fn sop1_move(wv: &mut Wave, mem: &dyn Memory, i: &Inst, a: u64, wide: bool) -> bool {
    use op_sop1::*;
    match i.op {
        S_MOV_B32 | S_MOV_B64 => wv.swrite_sized(i.dst, a, wide),
        S_CMOV_B32 | S_CMOV_B64 => {
            if wv.scc {
                wv.swrite_sized(i.dst, a, wide)
            }
        }
        S_SENDMSG_RTN_B32 | S_SENDMSG_RTN_B64 => {
            // MSG_RTN_GET_REALTIME returns the GPU's clock; other messages return zero.
            let v = if i.src[0] == MSG_RTN_GET_REALTIME {
                mem.clock_ticks()
            } else {
                0
            };
            wv.swrite_sized(i.dst, v, wide)
        }
        _ => return false,
    }
    true
}

/// Bit operations: not, reverse, counts, sign extension, abs, bit set, quad masks; false for
/// other opcodes.
fn sop1_bits(wv: &mut Wave, i: &Inst, a: u64, wide: bool) -> bool {
    use op_sop1::*;
    match i.op {
        S_NOT_B32 | S_NOT_B64 => {
            let r = if wide { !a } else { !a & 0xffff_ffff };
            wv.scc = r != 0;
            wv.swrite_sized(i.dst, r, wide)
        }
        S_BREV_B32 | S_CTZ_I32_B32 | S_BCNT1_I32_B32 => {
            let f = match i.op {
                S_BREV_B32 => Salu::Brev,
                S_CTZ_I32_B32 => Salu::Ctz,
                _ => Salu::Bcnt1,
            };
            let (r, scc) = salu(f, a as u32, 0, wv.scc);
            wv.scc = scc;
            wv.swrite(i.dst, r)
        }
        S_BREV_B64 => wv.swrite64(i.dst, a.reverse_bits()),
        S_BCNT1_I32_B64 => {
            let r = a.count_ones();
            wv.scc = r != 0;
            wv.swrite(i.dst, r)
        }
        S_BCNT0_I32_B32 => {
            let r = (a as u32).count_zeros();
            wv.scc = r != 0;
            wv.swrite(i.dst, r)
        }
        S_CTZ_I32_B64 => wv.swrite(i.dst, if a == 0 { u32::MAX } else { a.trailing_zeros() }),
        S_CLZ_I32_U32 => wv.swrite(
            i.dst,
            if a as u32 == 0 {
                u32::MAX
            } else {
                (a as u32).leading_zeros()
            },
        ),
        S_CLZ_I32_U64 => wv.swrite(i.dst, if a == 0 { u32::MAX } else { a.leading_zeros() }),
        S_SEXT_I32_I8 => wv.swrite(i.dst, a as u8 as i8 as i32 as u32),
        S_SEXT_I32_I16 => wv.swrite(i.dst, a as u16 as i16 as i32 as u32),
        S_ABS_I32 => {
            let r = (a as i32).unsigned_abs();
            wv.scc = r != 0;
            wv.swrite(i.dst, r)
        }
        S_BITSET0_B32 => {
            let v = wv.sread(i.dst, 0) & !(1 << (a & 31));
            wv.swrite(i.dst, v)
        }
        S_BITSET1_B32 => {
            let v = wv.sread(i.dst, 0) | 1 << (a & 31);
            wv.swrite(i.dst, v)
        }
        S_QUADMASK_B32 | S_QUADMASK_B64 => {
            let mut r = 0u64;
            for q in 0..16 {
                if (a >> (4 * q)) & 0xf != 0 {
                    r |= 1 << q;
                }
            }
            wv.scc = r != 0;
            wv.swrite_sized(i.dst, r, wide)
        }
        S_WQM_B32 | S_WQM_B64 => {
            let mut r = 0u64;
            for q in 0..16 {
                if (a >> (4 * q)) & 0xf != 0 {
                    r |= 0xf << (4 * q);
                }
            }
            wv.scc = r != 0;
            wv.swrite_sized(i.dst, r, wide)
        }
        _ => return false,
    }
    true
}

/// The EXEC updates: `s_*_saveexec` (old EXEC to the destination) and `s_*_wrexec` (new
/// EXEC to the destination); false for other opcodes.
fn sop1_exec(wv: &mut Wave, i: &Inst, a: u64, wide: bool) -> bool {
    use op_sop1::*;
    let e = wv.exec();
    let r = match i.op {
        S_AND_NOT1_WREXEC_B32 | S_AND_NOT1_WREXEC_B64 => a & !e,
        S_AND_NOT0_WREXEC_B32 | S_AND_NOT0_WREXEC_B64 => !a & e,
        op => match saveexec(op, a, e) {
            Some(save) => {
                let save = save & wv.full();
                wv.swrite_sized(i.dst, e, wide);
                wv.set_exec(save);
                wv.scc = save != 0;
                return true;
            }
            None => return false,
        },
    } & wv.full();
    wv.set_exec(r);
    wv.scc = r != 0;
    wv.swrite_sized(i.dst, r, wide);
    true
}

/// The new EXEC of `s_*_saveexec_b32/b64` (gfx1100's SOP1 opcode `op`) from the source `a`
/// and the old EXEC `e` (before masking to the wave's lanes); `None` for other opcodes.
#[inline(always)]
pub(crate) fn saveexec(op: u16, a: u64, e: u64) -> Option<u64> {
    use op_sop1::*;
    Some(match op {
        S_AND_SAVEEXEC_B32 | S_AND_SAVEEXEC_B64 => a & e,
        S_OR_SAVEEXEC_B32 | S_OR_SAVEEXEC_B64 => a | e,
        S_XOR_SAVEEXEC_B32 | S_XOR_SAVEEXEC_B64 => a ^ e,
        S_AND_NOT1_SAVEEXEC_B32 | S_AND_NOT1_SAVEEXEC_B64 => a & !e,
        S_OR_NOT1_SAVEEXEC_B32 | S_OR_NOT1_SAVEEXEC_B64 => a | !e,
        S_AND_NOT0_SAVEEXEC_B32 | S_AND_NOT0_SAVEEXEC_B64 => !a & e,
        S_OR_NOT0_SAVEEXEC_B32 | S_OR_NOT0_SAVEEXEC_B64 => !a | e,
        S_NAND_SAVEEXEC_B32 | S_NAND_SAVEEXEC_B64 => !(a & e),
        S_NOR_SAVEEXEC_B32 | S_NOR_SAVEEXEC_B64 => !(a | e),
        S_XNOR_SAVEEXEC_B32 | S_XNOR_SAVEEXEC_B64 => !(a ^ e),
        _ => return None,
    })
}

/// Program-counter reads and jumps; false for other opcodes.
fn sop1_pc(wv: &mut Wave, i: &Inst, a: u64) -> bool {
    use op_sop1::*;
    match i.op {
        S_GETPC_B64 => wv.swrite64(i.dst, wv.pc),
        S_SETPC_B64 => wv.pc = a,
        S_SWAPPC_B64 => {
            let ret = wv.pc;
            wv.pc = a;
            wv.swrite64(i.dst, ret);
        }
        _ => return false,
    }
    true
}

/// `s_sendmsg_rtn` message id of the realtime clock.
const MSG_RTN_GET_REALTIME: u16 = 0x83;
/// `s_getreg` hardware register id of the shader cycle counter (20 bits).
const HW_REG_SHADER_CYCLES: u16 = 29;

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn sopc(wv: &mut Wave, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use op_sopc::*;
    if matches!(i.op, S_CMP_EQ_U64 | S_CMP_LG_U64) {
        let a = wv.sread64(i.src[0], i.literal, false);
        let b = wv.sread64(i.src[1], i.literal, false);
        wv.scc = if i.op == S_CMP_EQ_U64 { a == b } else { a != b };
        return Ok(());
    }
    if matches!(i.op, S_BITCMP0_B64 | S_BITCMP1_B64) {
        let a = wv.sread64(i.src[0], i.literal, false);
        let b = wv.sread(i.src[1], i.literal);
        let bit = (a >> (b & 63)) & 1;
        wv.scc = (bit == 1) == (i.op == S_BITCMP1_B64);
        return Ok(());
    }
    let a = wv.sread(i.src[0], i.literal);
    let b = wv.sread(i.src[1], i.literal);
    let (x, y) = (a as i32, b as i32);
    wv.scc = match i.op {
        S_CMP_EQ_I32 | S_CMP_EQ_U32 => a == b,
        S_CMP_LG_I32 | S_CMP_LG_U32 => a != b,
        S_CMP_GT_I32 => x > y,
        S_CMP_GE_I32 => x >= y,
        S_CMP_LT_I32 => x < y,
        S_CMP_LE_I32 => x <= y,
        S_CMP_GT_U32 => a > b,
        S_CMP_GE_U32 => a >= b,
        S_CMP_LT_U32 => a < b,
        S_CMP_LE_U32 => a <= b,
        S_BITCMP0_B32 => (a >> (b & 31)) & 1 == 0,
        S_BITCMP1_B32 => (a >> (b & 31)) & 1 == 1,
        _ => return Err(unsupported(i, pc)),
    };
    Ok(())
}

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn sopk(wv: &mut Wave, mem: &dyn Memory, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use op_sopk::*;
    let k = i.imm as u16;
    let sk = k as i16 as i32 as u32;
    let d = wv.sread(i.dst, 0);
    match i.op {
        S_MOVK_I32 => wv.swrite(i.dst, sk),
        S_CMOVK_I32 => {
            if wv.scc {
                wv.swrite(i.dst, sk)
            }
        }
        S_ADDK_I32 => {
            let (r, o) = (d as i32).overflowing_add(sk as i32);
            wv.scc = o;
            wv.swrite(i.dst, r as u32)
        }
        S_MULK_I32 => wv.swrite(i.dst, (d as i32).wrapping_mul(sk as i32) as u32),
        S_CMPK_EQ_I32 => wv.scc = d as i32 == sk as i32,
        S_CMPK_LG_I32 => wv.scc = d as i32 != sk as i32,
        S_CMPK_GT_I32 => wv.scc = d as i32 > sk as i32,
        S_CMPK_GE_I32 => wv.scc = d as i32 >= sk as i32,
        S_CMPK_LT_I32 => wv.scc = (d as i32) < sk as i32,
        S_CMPK_LE_I32 => wv.scc = d as i32 <= sk as i32,
        S_CMPK_EQ_U32 => wv.scc = d == k as u32,
        S_CMPK_LG_U32 => wv.scc = d != k as u32,
        S_CMPK_GT_U32 => wv.scc = d > k as u32,
        S_CMPK_GE_U32 => wv.scc = d >= k as u32,
        S_CMPK_LT_U32 => wv.scc = d < k as u32,
        S_CMPK_LE_U32 => wv.scc = d <= k as u32,
        S_VERSION | S_WAITCNT_VSCNT | S_WAITCNT_VMCNT | S_WAITCNT_EXPCNT | S_WAITCNT_LGKMCNT => {}
        S_CALL_B64 => {
            wv.swrite64(i.dst, wv.pc);
            wv.pc = (pc as i64 + 4 + 4 * (k as i16 as i64)) as u64;
        }
        S_GETREG_B32 => {
            // simm16: register id [5:0], bit offset [10:6], size - 1 [15:11]. SHADER_CYCLES is
            // the GPU clock's low 20 bits; MODE and the rest read as zero (the sim runs with
            // default rounding and denormals).
            let (id, off, size) = (k & 0x3f, (k >> 6) & 0x1f, ((k >> 11) & 0x1f) + 1);
            let reg = if id == HW_REG_SHADER_CYCLES {
                (mem.clock_ticks() & 0xf_ffff) as u32
            } else {
                0
            };
            let mask = if size >= 32 {
                u32::MAX
            } else {
                (1 << size) - 1
            };
            wv.swrite(i.dst, (reg >> off) & mask)
        }
        S_SETREG_B32 | S_SETREG_IMM32_B32 => {}
        _ => return Err(unsupported(i, pc)),
    }
    Ok(())
}

// Small and on every branch: inlined into `step` as it was before it moved here.
#[inline]
/// SOPP operations that only advance the PC here: waits (memory is performed at issue),
/// hints, messages without a return, mode changes the model ignores.
pub(super) fn sopp_nop(op: u16) -> bool {
    use op_sopp::*;
    matches!(
        op,
        S_NOP
            | S_WAITCNT
            | S_DELAY_ALU
            | S_CLAUSE
            | S_SET_INST_PREFETCH_DISTANCE
            | S_SETPRIO
            | S_SENDMSG
            | S_ICACHE_INV
            | S_WAITCNT_DEPCTR
            | S_CODE_END
            | S_SETHALT
            | S_DENORM_MODE
            | S_ROUND_MODE
            | S_WAKEUP
            | S_TTRACEDATA
            | S_TTRACEDATA_IMM
            | S_INCPERFLEVEL
            | S_DECPERFLEVEL
            | S_SETKILL
            | S_WAIT_IDLE
            | S_WAIT_EVENT
    )
}

pub(super) fn sopp(wv: &mut Wave, i: &Inst, pc: u64) -> Result<Flow, ExecFault> {
    use op_sopp::*;
    let target = (pc as i64 + 4 + 4 * (i.imm as u16 as i16 as i64)) as u64;
    let take = match i.op {
        S_BRANCH => true,
        S_CBRANCH_SCC0 => !wv.scc,
        S_CBRANCH_SCC1 => wv.scc,
        S_CBRANCH_VCCZ => wv.vcc() == 0,
        S_CBRANCH_VCCNZ => wv.vcc() != 0,
        S_CBRANCH_EXECZ => wv.exec() == 0,
        S_CBRANCH_EXECNZ => wv.exec() != 0,
        S_ENDPGM | S_ENDPGM_SAVED => {
            wv.done = true;
            return Ok(Flow::Yield);
        }
        S_BARRIER => {
            wv.at_barrier = true;
            return Ok(Flow::Yield);
        }
        S_SLEEP => return Ok(Flow::MayYield),
        S_TRAP => {
            return Err(ExecFault::Trap {
                address: pc,
                code: i.imm as u16,
            });
        }
        op if sopp_nop(op) => false,
        // No debugger is attached: the debug-condition branches fall through.
        S_CBRANCH_CDBGSYS
        | S_CBRANCH_CDBGUSER
        | S_CBRANCH_CDBGSYS_OR_USER
        | S_CBRANCH_CDBGSYS_AND_USER => false,
        _ => return Err(unsupported(i, pc)),
    };
    if take {
        wv.pc = target;
        if target <= pc {
            return Ok(Flow::MayYield);
        }
    }
    Ok(Flow::Next)
}
