//! WMMA: the 16x16x16 matrix multiply-accumulates of gfx11 (`v_wmma_f32_16x16x16_f16`,
//! `_bf16`, `v_wmma_f16_16x16x16_f16`, `v_wmma_bf16_16x16x16_bf16`,
//! `v_wmma_i32_16x16x16_iu8`, `_iu4`), D = A x B + C over the whole wave.
//!
//! Register layout (the RDNA3 one): lane `l` of lanes 0-15 holds row `l` of A and column `l`
//! of B, 16 elements packed in its A/B registers (8 VGPRs of f16/bf16 pairs, 4 of bytes, 2 of
//! nibbles; the other lanes hold copies, which are not read). C and D hold element
//! (`r * lanes / 16 + l / 16`, `l % 16`) in VGPR `r` of lane `l`: 8 VGPRs in wave32, 4 in
//! wave64; f16/bf16 results use the low halves, or the high ones with op_sel[2], and keep the
//! other half. Float sums are exact products added in f64 and rounded once; integer sums
//! saturate under clamp. The `iu` forms take signedness from neg_lo (bit 0 A, bit 1 B).

use super::{WaveRef, h, hb};
use crate::ExecFault;
use crate::decode::Inst;
use crate::opcodes::op_vop3p::*;

/// Element kinds of A/B.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    F16,
    Bf16,
    I8,
    I4,
}

/// Runs `i` if it is a WMMA; `Ok(false)` for other opcodes. `unsupported` builds the fault
/// for operand forms this does not run (non-VGPR operands, float modifiers).
pub(super) fn wmma(
    w: &mut WaveRef,
    i: &Inst,
    pc: u64,
    unsupported: &dyn Fn() -> ExecFault,
) -> Result<bool, ExecFault> {
    let (kind, out) = match i.op {
        V_WMMA_F32_16X16X16_F16 => (Kind::F16, Kind::F16),
        V_WMMA_F32_16X16X16_BF16 => (Kind::Bf16, Kind::F16),
        V_WMMA_F16_16X16X16_F16 => (Kind::F16, Kind::F16),
        V_WMMA_BF16_16X16X16_BF16 => (Kind::Bf16, Kind::Bf16),
        V_WMMA_I32_16X16X16_IU8 => (Kind::I8, Kind::I8),
        V_WMMA_I32_16X16X16_IU4 => (Kind::I4, Kind::I8),
        _ => return Ok(false),
    };
    // `out`: F16 here means "f32 or f16 result", told apart by `half_out`.
    let half_out = matches!(i.op, V_WMMA_F16_16X16X16_F16 | V_WMMA_BF16_16X16X16_BF16);
    let int = matches!(kind, Kind::I8 | Kind::I4);
    let float_mods = !int && (i.neg != 0 || i.abs != 0 || i.clamp);
    if i.src.iter().any(|&s| s < 256) || i.dst < 256 || float_mods {
        return Err(unsupported());
    }
    let n = w.lanes;
    let ab_regs: u16 = match kind {
        Kind::F16 | Kind::Bf16 => 8,
        Kind::I8 => 4,
        Kind::I4 => 2,
    };
    let cd_regs = (8 * 32 / n) as u16;
    let rows = |base: u16, count: u16| -> Result<Vec<usize>, ExecFault> {
        (0..count).map(|k| w.row(base + k, pc)).collect()
    };
    let (ra, rb, rc, rd) = (
        rows(i.src[0], ab_regs)?,
        rows(i.src[1], ab_regs)?,
        rows(i.src[2], cd_regs)?,
        rows(i.dst, cd_regs)?,
    );
    // Element k of the A row / B column that lane `l` (0..16) holds, as f64 or i64.
    let elem = |regs: &[usize], l: usize, k: usize, signed: bool| -> (f64, i64) {
        let (per, bits) = match kind {
            Kind::F16 | Kind::Bf16 => (2, 16),
            Kind::I8 => (4, 8),
            Kind::I4 => (8, 4),
        };
        let v = w.vgpr[regs[k / per] + l] >> (bits * (k % per)) & ((1u64 << bits) - 1) as u32;
        match kind {
            Kind::F16 => (h(v as u64), 0),
            Kind::Bf16 => (f32::from_bits(v << 16) as f64, 0),
            _ => {
                let x = if signed && v >> (bits - 1) != 0 {
                    v as i64 - (1 << bits)
                } else {
                    v as i64
                };
                (0.0, x)
            }
        }
    };
    let (sa, sb) = (i.neg & 1 != 0, i.neg & 2 != 0);
    let hi = i.op_sel & 4 != 0;
    let per_reg = n / 16;
    let mut res = vec![0u32; cd_regs as usize * n];
    for r in 0..cd_regs as usize {
        for l in 0..n {
            let (row, col) = (r * per_reg + l / 16, l % 16);
            let c = w.vgpr[rc[r] + l];
            res[r * n + l] = if int {
                let mut s = c as i32 as i64;
                for k in 0..16 {
                    s += elem(&ra, row, k, sa).1 * elem(&rb, col, k, sb).1;
                }
                if i.clamp {
                    s = s.clamp(i32::MIN as i64, i32::MAX as i64);
                }
                s as u32
            } else {
                let mut s = 0f64;
                for k in 0..16 {
                    s += elem(&ra, row, k, false).0 * elem(&rb, col, k, false).0;
                }
                let half = (c >> if hi { 16 } else { 0 }) & 0xffff;
                let old = w.vgpr[rd[r] + l];
                let put = |v: u32| {
                    if hi {
                        (old & 0xffff) | v << 16
                    } else {
                        (old & 0xffff_0000) | v
                    }
                };
                match (half_out, out) {
                    (false, _) => ((s + f32::from_bits(c) as f64) as f32).to_bits(),
                    (true, Kind::Bf16) => {
                        let cv = f32::from_bits(half << 16) as f64;
                        put(super::dot::to_bf16(s + cv) as u32)
                    }
                    (true, _) => put(hb(s + h(half as u64)) as u32),
                }
            };
        }
    }
    let exec = w.exec();
    for r in 0..cd_regs as usize {
        for l in 0..n {
            if exec >> l & 1 != 0 {
                w.vgpr[rd[r] + l] = res[r * n + l];
            }
        }
    }
    Ok(true)
}
