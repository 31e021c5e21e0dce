//! MFMA: CDNA3's matrix fused multiply-adds over the whole wave64, D = A x B + C, the f32
//! forms (`v_mfma_f32_32x32x2_f32`, `_16x16x4_f32`, and the multi-block `_32x32x1_2b_f32`,
//! `_16x16x1_4b_f32`, `_4x4x1_16b_f32`).
//!
//! Register layout (the CDNA3 ISA guide's): A and B are one register per lane, each lane one
//! element: lane `l` holds A[i][k] with `i = l % M` and B[k][j] with `j = l % N`, where `l / M`
//! is `k` for the one-block forms and the block for the multi-block ones (whose K is 1).
//! C and D hold M x N x blocks / 64 registers a lane: for the 32x32 and 16x16 shapes, block
//! `b` is registers `b * M * N / 64..`, and its register `r` of lane `l` holds element
//! (`(r / 4) * (256 / N) + 4 * (l / N) + r % 4`, `l % N`); for 4x4 (16 blocks), lane `l`
//! holds block `l / 4`, register `r` its element (`r`, `l % 4`). Any operand may be a VGPR or
//! an AGPR tuple; C may be an inline constant, the value of every element.
//!
//! Each element is C plus the exact products summed in f64, rounded once to f32. All lanes
//! are read; D is written for the lanes in EXEC. The broadcast controls (cbsz, abid, blgp)
//! other than 0 are `Unsupported`.

use super::WaveRef;
use crate::ExecFault;
use crate::decode::Inst;
use crate::opcodes_gfx9::new_vop3p::*;

/// The shape of an MFMA: rows, columns, depth and blocks.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    blocks: usize,
}

/// Runs `i` if it is an f32 MFMA; `Ok(false)` for other opcodes. `unsupported` builds the
/// fault for the forms this does not run.
pub(super) fn mfma(
    w: &mut WaveRef,
    i: &Inst,
    pc: u64,
    unsupported: &dyn Fn() -> ExecFault,
) -> Result<bool, ExecFault> {
    let (m, n, k, blocks) = match i.op {
        V_MFMA_F32_32X32X1_2B_F32 => (32, 32, 1, 2),
        V_MFMA_F32_16X16X1_4B_F32 => (16, 16, 1, 4),
        V_MFMA_F32_4X4X1_16B_F32 => (4, 4, 1, 16),
        V_MFMA_F32_32X32X2_F32 => (32, 32, 2, 1),
        V_MFMA_F32_16X16X4_F32 => (16, 16, 4, 1),
        _ => return Ok(false),
    };
    let s = Shape { m, n, k, blocks };
    if w.lanes != 64 || i.imm != 0 || i.src[0] < 256 || i.src[1] < 256 || i.dst < 256 {
        return Err(unsupported());
    }
    let regs = m * n * blocks / 64;
    let (ra, rb) = (w.row(i.src[0], pc)?, w.row(i.src[1], pc)?);
    let rows = |base: u16| -> Result<Vec<usize>, ExecFault> {
        (0..regs as u16).map(|r| w.row(base + r, pc)).collect()
    };
    let rd = rows(i.dst)?;
    // C: a register tuple, or an inline constant for every element.
    let rc = if i.src[2] >= 256 {
        Some(rows(i.src[2])?)
    } else {
        None
    };
    let konst = f32::from_bits(w.sread(i.src[2], 0, false)) as f64;
    let a = |b: usize, row: usize, kk: usize| lane_of(s, b, row, kk, s.m);
    let bl = |b: usize, kk: usize, col: usize| lane_of(s, b, col, kk, s.n);
    let mut res = vec![0u32; regs * 64];
    for r in 0..regs {
        for l in 0..64 {
            let (b, row, col) = element(s, r, l);
            let c = rc
                .as_ref()
                .map_or(konst, |rc| f32::from_bits(w.vgpr[rc[r] + l]) as f64);
            let mut sum = 0f64;
            for kk in 0..s.k {
                let x = f32::from_bits(w.vgpr[ra + a(b, row, kk)]) as f64;
                let y = f32::from_bits(w.vgpr[rb + bl(b, kk, col)]) as f64;
                sum += x * y;
            }
            res[r * 64 + l] = ((sum + c) as f32).to_bits();
        }
    }
    let exec = w.exec();
    for r in 0..regs {
        for l in 0..64 {
            if exec >> l & 1 != 0 {
                w.vgpr[rd[r] + l] = res[r * 64 + l];
            }
        }
    }
    Ok(true)
}

/// The lane holding element `x` (a row of A or a column of B, below `len`) at depth `k` of
/// block `b`.
fn lane_of(s: Shape, b: usize, x: usize, k: usize, len: usize) -> usize {
    let group = if s.blocks == 1 { k } else { b };
    x + len * group
}

/// The (block, row, column) of D that register `r` of lane `l` holds.
fn element(s: Shape, r: usize, l: usize) -> (usize, usize, usize) {
    if s.m == 4 {
        return (l / 4, r, l % 4);
    }
    let per_block = s.m * s.n / 64;
    let (b, r) = (r / per_block, r % per_block);
    let row = (r / 4) * (256 / s.n) + 4 * (l / s.n) + r % 4;
    (b, row, l % s.n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of D is held once, by some register and lane.
    #[test]
    fn each_shape_covers_its_output_once() {
        for (m, n, k, blocks) in [
            (32, 32, 1, 2),
            (16, 16, 1, 4),
            (4, 4, 1, 16),
            (32, 32, 2, 1),
            (16, 16, 4, 1),
        ] {
            let s = Shape { m, n, k, blocks };
            let regs = m * n * blocks / 64;
            let mut seen = vec![false; m * n * blocks];
            for r in 0..regs {
                for l in 0..64 {
                    let (b, row, col) = element(s, r, l);
                    assert!(row < m && col < n && b < blocks);
                    let e = (b * m + row) * n + col;
                    assert!(!seen[e], "{m}x{n}x{k} b{blocks}: element {e} twice");
                    seen[e] = true;
                }
            }
            assert!(seen.iter().all(|&x| x));
            // A and B: 64 lanes hold the M x K x blocks elements once each.
            let mut lanes = [false; 64];
            for b in 0..blocks {
                for x in 0..m {
                    for kk in 0..k {
                        let l = lane_of(s, b, x, kk, m);
                        assert!(!lanes[l]);
                        lanes[l] = true;
                    }
                }
            }
            assert!(lanes.iter().all(|&x| x));
        }
    }
}
