//! LDS instructions (DS): dword and sub-dword loads and stores, the two-address forms,
//! atomics, and the cross-lane swizzle and permutes; and the LDS accessors `vmem` shares.

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use super::{Wave, unsupported};
use crate::ExecFault;
use crate::decode::Inst;
use crate::meta::{Atomic, MemKind, meta};
use crate::opcodes::op_ds;

pub(super) fn lds_ok(lds: &[u8], a: u32, n: usize) -> bool {
    (a as usize).checked_add(n).is_some_and(|e| e <= lds.len())
}

pub(super) fn lds_read(lds: &[u8], a: u32) -> u32 {
    let a = a as usize;
    lds.get(a..a + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn lds_write(lds: &mut [u8], a: u32, v: u32) {
    if lds_ok(lds, a, 4) {
        lds[a as usize..a as usize + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// The dwords per address (1 or 2) and the byte scale of the offsets of a `ds_*_2addr_*`
/// instruction: offsets count elements, or 64 elements in the `stride64` forms.
pub(crate) fn two_addr_shape(op: u16) -> (usize, u32) {
    use op_ds::*;
    let n = if matches!(
        op,
        DS_LOAD_2ADDR_B64
            | DS_LOAD_2ADDR_STRIDE64_B64
            | DS_STORE_2ADDR_B64
            | DS_STORE_2ADDR_STRIDE64_B64
    ) {
        2
    } else {
        1
    };
    let stride64 = matches!(
        op,
        DS_LOAD_2ADDR_STRIDE64_B32
            | DS_LOAD_2ADDR_STRIDE64_B64
            | DS_STORE_2ADDR_STRIDE64_B32
            | DS_STORE_2ADDR_STRIDE64_B64
    );
    (n, 4 * n as u32 * if stride64 { 64 } else { 1 })
}

/// LDS loads of whole dwords: row `r` of each `(r, o)` in `dst` gets the dword at the lane's
/// address (row `addr_row`) plus `o`, for the lanes in `exec`.
fn ds_gather(wv: &mut Wave, lds: &[u8], exec: u64, addr_row: usize, dst: &[(usize, u32)]) {
    let n = wv.lanes;
    // Addresses are copied first: a destination may be the address register.
    let mut addr = [0u32; 64];
    addr[..n].copy_from_slice(&wv.vgpr[addr_row..addr_row + n]);
    let full = exec == wv.full();
    for &(r, o) in dst {
        let out = &mut wv.vgpr[r..r + n];
        if full {
            for (d, a) in out.iter_mut().zip(&addr) {
                *d = lds_read(lds, a.wrapping_add(o));
            }
        } else {
            for (l, d) in out.iter_mut().enumerate() {
                if exec >> l & 1 != 0 {
                    *d = lds_read(lds, addr[l].wrapping_add(o));
                }
            }
        }
    }
}

/// The operands every DS instruction has: its address row, offset and the lanes it runs.
struct DsOp<'a> {
    i: &'a Inst,
    pc: u64,
    exec: u64,
    /// First VGPR index of the address operand.
    addr_row: usize,
    /// offset0 | offset1 << 8, for the single-address forms.
    off: u32,
}

impl DsOp<'_> {
    /// VGPR index of register `r + k` (a fault when it lies outside the wave's VGPRs).
    #[inline(always)]
    fn row(&self, wv: &Wave, r: u16, k: u16) -> Result<usize, ExecFault> {
        // A non-VGPR operand here (r < 256) wraps to a huge index and is rejected below.
        let r = (r as usize).wrapping_sub(256).wrapping_add(k as usize);
        match super::reg_row(r, wv.nvgpr, wv.acc) {
            Some(r) => Ok(r * wv.lanes),
            None => Err(ExecFault::VgprOutOfRange { address: self.pc }),
        }
    }
    fn active(&self, l: usize) -> bool {
        self.exec >> l & 1 != 0
    }
}

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn ds(wv: &mut Wave, lds: &mut [u8], i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use op_ds::*;
    let mut d = DsOp {
        i,
        pc,
        exec: wv.exec(),
        addr_row: 0,
        off: (i.imm as u32) | (i.imm1 as u32) << 8,
    };
    d.addr_row = d.row(wv, i.src[0], 0)?;
    let m = meta(i);
    let dwords = (m.bytes as usize).div_ceil(4).max(1);
    match i.op {
        DS_LOAD_B32 | DS_LOAD_B64 | DS_LOAD_B96 | DS_LOAD_B128 => load(wv, lds, &d, dwords),
        DS_STORE_B32 | DS_STORE_B64 | DS_STORE_B96 | DS_STORE_B128 => store(wv, lds, &d, dwords),
        DS_LOAD_U8 | DS_LOAD_I8 | DS_LOAD_U16 | DS_LOAD_I16 => load_short(wv, lds, &d),
        DS_STORE_B8 | DS_STORE_B16 => store_short(wv, lds, &d, false),
        DS_STORE_B8_D16_HI | DS_STORE_B16_D16_HI => store_short(wv, lds, &d, true),
        DS_LOAD_U8_D16 | DS_LOAD_U8_D16_HI | DS_LOAD_I8_D16 | DS_LOAD_I8_D16_HI
        | DS_LOAD_U16_D16 | DS_LOAD_U16_D16_HI => load_d16(wv, lds, &d),
        DS_APPEND | DS_CONSUME => append(wv, lds, &d),
        DS_LOAD_2ADDR_B32
        | DS_LOAD_2ADDR_STRIDE64_B32
        | DS_LOAD_2ADDR_B64
        | DS_LOAD_2ADDR_STRIDE64_B64 => load_2addr(wv, lds, &d),
        DS_STORE_2ADDR_B32
        | DS_STORE_2ADDR_STRIDE64_B32
        | DS_STORE_2ADDR_B64
        | DS_STORE_2ADDR_STRIDE64_B64 => store_2addr(wv, lds, &d),
        _ if matches!(m.kind, MemKind::Atomic(_)) && m.bytes == 4 => {
            let MemKind::Atomic(f) = m.kind else {
                return Err(unsupported(i, pc));
            };
            atomic32(wv, lds, &d, f, m.rtn)
        }
        _ if matches!(m.kind, MemKind::Atomic(_)) && m.bytes == 8 => {
            let MemKind::Atomic(f) = m.kind else {
                return Err(unsupported(i, pc));
            };
            atomic64(wv, lds, &d, f, m.rtn)
        }
        DS_NOP => Ok(()),
        DS_SWIZZLE_B32 => swizzle(wv, &d),
        DS_BPERMUTE_B32 | DS_PERMUTE_B32 => permute(wv, &d),
        _ => Err(unsupported(i, pc)),
    }
}

/// `ds_load_b32` .. `ds_load_b128`: `dwords` consecutive dwords per lane.
// The hot loads stay inside `ds` (its frame is paid once).
#[inline(always)]
fn load(wv: &mut Wave, lds: &[u8], d: &DsOp, dwords: usize) -> Result<(), ExecFault> {
    if d.exec == 0 {
        return Ok(());
    }
    let mut dst = [(0usize, 0u32); 4];
    for (k, t) in dst.iter_mut().take(dwords).enumerate() {
        *t = (
            d.row(wv, d.i.dst, k as u16)?,
            d.off.wrapping_add(4 * k as u32),
        );
    }
    ds_gather(wv, lds, d.exec, d.addr_row, &dst[..dwords]);
    Ok(())
}

/// `ds_store_b32` .. `ds_store_b128`: `dwords` consecutive dwords per lane.
fn store(wv: &mut Wave, lds: &mut [u8], d: &DsOp, dwords: usize) -> Result<(), ExecFault> {
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off);
        for k in 0..dwords {
            let r = d.row(wv, d.i.src[1], k as u16)?;
            lds_write(lds, a.wrapping_add(4 * k as u32), wv.vgpr[r + l]);
        }
    }
    Ok(())
}

/// The byte and short loads, zero- or sign-extended to a dword.
fn load_short(wv: &mut Wave, lds: &[u8], d: &DsOp) -> Result<(), ExecFault> {
    use op_ds::*;
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off) as usize;
        let b = |k: usize| lds.get(a + k).copied().unwrap_or(0);
        let v = match d.i.op {
            DS_LOAD_U8 => b(0) as u32,
            DS_LOAD_I8 => b(0) as i8 as i32 as u32,
            DS_LOAD_U16 => u16::from_le_bytes([b(0), b(1)]) as u32,
            _ => u16::from_le_bytes([b(0), b(1)]) as i16 as i32 as u32,
        };
        let r = d.row(wv, d.i.dst, 0)?;
        wv.vgpr[r + l] = v;
    }
    Ok(())
}

/// The byte and short stores: the low bytes of the data dword, or (`hi`, the d16_hi forms)
/// those from bit 16.
fn store_short(wv: &mut Wave, lds: &mut [u8], d: &DsOp, hi: bool) -> Result<(), ExecFault> {
    use op_ds::*;
    let n = if matches!(d.i.op, DS_STORE_B8 | DS_STORE_B8_D16_HI) {
        1
    } else {
        2
    };
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off);
        let v = wv.vgpr[d.row(wv, d.i.src[1], 0)? + l];
        let v = if hi { v >> 16 } else { v }.to_le_bytes();
        if lds_ok(lds, a, n) {
            lds[a as usize..a as usize + n].copy_from_slice(&v[..n]);
        }
    }
    Ok(())
}

/// The d16 loads: a byte (zero- or sign-extended to 16 bits) or a short into one half of the
/// destination, the other half kept.
fn load_d16(wv: &mut Wave, lds: &[u8], d: &DsOp) -> Result<(), ExecFault> {
    use op_ds::*;
    let hi = matches!(
        d.i.op,
        DS_LOAD_U8_D16_HI | DS_LOAD_I8_D16_HI | DS_LOAD_U16_D16_HI
    );
    let r = d.row(wv, d.i.dst, 0)?;
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off) as usize;
        let b = |k: usize| lds.get(a + k).copied().unwrap_or(0);
        let v = match d.i.op {
            DS_LOAD_U8_D16 | DS_LOAD_U8_D16_HI => b(0) as u32,
            DS_LOAD_I8_D16 | DS_LOAD_I8_D16_HI => b(0) as i8 as i16 as u16 as u32,
            _ => u16::from_le_bytes([b(0), b(1)]) as u32,
        };
        wv.vgpr[r + l] = super::vmem::merge_d16(wv.vgpr[r + l], v, hi);
    }
    Ok(())
}

/// `ds_append` / `ds_consume`: the dword at M0 + offset grows (shrinks) by the number of
/// active lanes, once for the wave; every active lane gets the value before.
fn append(wv: &mut Wave, lds: &mut [u8], d: &DsOp) -> Result<(), ExecFault> {
    if d.exec == 0 {
        return Ok(());
    }
    let a = wv.sgpr[crate::decode::src::M0 as usize].wrapping_add(d.off);
    let old = lds_read(lds, a);
    let k = d.exec.count_ones();
    let new = if d.i.op == op_ds::DS_APPEND {
        old.wrapping_add(k)
    } else {
        old.wrapping_sub(k)
    };
    lds_write(lds, a, new);
    let r = d.row(wv, d.i.dst, 0)?;
    for l in 0..wv.lanes {
        if d.active(l) {
            wv.vgpr[r + l] = old;
        }
    }
    Ok(())
}

/// `ds_load_2addr_*`: two elements per lane at offset0 and offset1 (scaled).
#[inline(always)]
fn load_2addr(wv: &mut Wave, lds: &[u8], d: &DsOp) -> Result<(), ExecFault> {
    let (n, scale) = two_addr_shape(d.i.op);
    if d.exec == 0 {
        return Ok(());
    }
    // Destination rows and byte offsets resolved once, not per lane.
    let mut dst = [(0usize, 0u32); 4];
    for (j, t) in dst.iter_mut().take(2 * n).enumerate() {
        let o = if j < n {
            d.i.imm as u32
        } else {
            d.i.imm1 as u32
        };
        *t = (
            d.row(wv, d.i.dst, j as u16)?,
            (o * scale).wrapping_add(4 * (j % n) as u32),
        );
    }
    ds_gather(wv, lds, d.exec, d.addr_row, &dst[..2 * n]);
    Ok(())
}

/// `ds_store_2addr_*`: data0 at offset0 and data1 at offset1 (scaled).
fn store_2addr(wv: &mut Wave, lds: &mut [u8], d: &DsOp) -> Result<(), ExecFault> {
    let (n, scale) = two_addr_shape(d.i.op);
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l];
        for (h, o) in [d.i.imm as u32, d.i.imm1 as u32].into_iter().enumerate() {
            let data = if h == 0 { d.i.src[1] } else { d.i.src[2] };
            for k in 0..n {
                let r = d.row(wv, data, k as u16)?;
                lds_write(
                    lds,
                    a.wrapping_add(o * scale) + 4 * k as u32,
                    wv.vgpr[r + l],
                );
            }
        }
    }
    Ok(())
}

/// The 32-bit atomics, lane by lane in lane order; `rtn` forms return the old value.
fn atomic32(
    wv: &mut Wave,
    lds: &mut [u8],
    d: &DsOp,
    f: Atomic,
    rtn: bool,
) -> Result<(), ExecFault> {
    let i = d.i;
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off);
        let old = lds_read(lds, a);
        let d0 = wv.vgpr[d.row(wv, i.src[1], 0)? + l];
        let d1 = if i.src[2] >= 256 {
            wv.vgpr[d.row(wv, i.src[2], 0)? + l]
        } else {
            0
        };
        lds_write(lds, a, f.apply(old, d0, d1));
        if rtn {
            let r = d.row(wv, i.dst, 0)?;
            wv.vgpr[r + l] = old;
        }
    }
    Ok(())
}

/// The 64-bit atomics, lane by lane in lane order; `rtn` forms return the old value.
fn atomic64(
    wv: &mut Wave,
    lds: &mut [u8],
    d: &DsOp,
    f: Atomic,
    rtn: bool,
) -> Result<(), ExecFault> {
    let i = d.i;
    let read64 = |lds: &[u8], a: u32| {
        lds_read(lds, a) as u64 | (lds_read(lds, a.wrapping_add(4)) as u64) << 32
    };
    for l in 0..wv.lanes {
        if !d.active(l) {
            continue;
        }
        let a = wv.vgpr[d.addr_row + l].wrapping_add(d.off);
        let old = read64(lds, a);
        let pair = |r: u16| -> Result<u64, ExecFault> {
            Ok(wv.vgpr[d.row(wv, r, 0)? + l] as u64 | (wv.vgpr[d.row(wv, r, 1)? + l] as u64) << 32)
        };
        let d0 = pair(i.src[1])?;
        let d1 = if matches!(f, Atomic::CmpSwap) {
            pair(i.src[2])?
        } else {
            0
        };
        let new = f.apply64(old, d0, d1);
        lds_write(lds, a, new as u32);
        lds_write(lds, a.wrapping_add(4), (new >> 32) as u32);
        if rtn {
            let (r0, r1) = (d.row(wv, i.dst, 0)?, d.row(wv, i.dst, 1)?);
            wv.vgpr[r0 + l] = old as u32;
            wv.vgpr[r1 + l] = (old >> 32) as u32;
        }
    }
    Ok(())
}

/// `ds_swizzle_b32`: offset < 0x8000 is the bit-mask mode over groups of 32 lanes (and, or,
/// xor masks), offset >= 0x8000 the quad-permute mode. Inactive source lanes read zero.
fn swizzle(wv: &mut Wave, d: &DsOp) -> Result<(), ExecFault> {
    let (lanes, off) = (wv.lanes, d.off);
    let data = d.row(wv, d.i.src[0], 0)?;
    let dst = d.row(wv, d.i.dst, 0)?;
    let src: Vec<u32> = wv.vgpr[data..data + lanes].to_vec();
    for l in 0..lanes {
        if !d.active(l) {
            continue;
        }
        let sel = if off & 0x8000 != 0 {
            (l & !3) | ((off >> (2 * (l & 3))) & 3) as usize
        } else {
            let (and, or, xor) = (
                (off & 31) as usize,
                ((off >> 5) & 31) as usize,
                ((off >> 10) & 31) as usize,
            );
            (l & !31) | ((((l & 31) & and) | or) ^ xor)
        };
        wv.vgpr[dst + l] = if sel < lanes && d.active(sel) {
            src[sel]
        } else {
            0
        };
    }
    Ok(())
}

/// `ds_bpermute_b32` (each lane reads the lane its address names) and `ds_permute_b32`
/// (each lane writes to it); lanes nothing reaches get zero.
fn permute(wv: &mut Wave, d: &DsOp) -> Result<(), ExecFault> {
    let lanes = wv.lanes;
    let data = d.row(wv, d.i.src[1], 0)?;
    let dst = d.row(wv, d.i.dst, 0)?;
    let mut out = vec![0u32; lanes];
    let mut written = vec![false; lanes];
    for l in 0..lanes {
        if !d.active(l) {
            continue;
        }
        let sel = (wv.vgpr[d.addr_row + l].wrapping_add(d.off) / 4) as usize % lanes;
        if d.i.op == op_ds::DS_BPERMUTE_B32 {
            out[l] = if d.active(sel) {
                wv.vgpr[data + sel]
            } else {
                0
            };
            written[l] = true;
        } else {
            out[sel] = wv.vgpr[data + l];
            written[sel] = true;
        }
    }
    for l in 0..lanes {
        if d.active(l) {
            wv.vgpr[dst + l] = if written[l] { out[l] } else { 0 };
        }
    }
    Ok(())
}
