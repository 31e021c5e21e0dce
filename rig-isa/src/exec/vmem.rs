//! Vector memory instructions (FLAT, GLOBAL, SCRATCH): loads, stores and atomics, with flat
//! addresses resolved to global memory, the LDS or the wave's private (scratch) slot.

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use super::{
    Ctx, PRIVATE_APERTURE_HI, SHARED_APERTURE_HI, Wave, lds_ok, lds_read, lds_write, mem_fault,
    unsupported,
};
use crate::decode::{Format, Inst, src};
use crate::meta::{Atomic, MemKind, meta};
use crate::{ExecFault, Memory, MemoryFault};

/// Where a flat address points.
enum Target {
    Global(u64),
    Lds(u32),
    Private(u64),
}

/// What every lane of a vector memory instruction needs to find its address.
struct VmOp<'a> {
    i: &'a Inst,
    pc: u64,
    exec: u64,
    /// Scratch bytes per lane (0 without scratch).
    per_lane: u64,
}

impl VmOp<'_> {
    /// VGPR index of register `r + k` (a fault when it lies outside the wave's VGPRs).
    #[inline(always)]
    fn row(&self, wv: &Wave, r: u16, k: u16) -> Result<usize, ExecFault> {
        let r = (r as usize).wrapping_sub(256).wrapping_add(k as usize);
        match super::reg_row(r, wv.nvgpr, wv.acc) {
            Some(r) => Ok(r * wv.lanes),
            None => Err(ExecFault::VgprOutOfRange { address: self.pc }),
        }
    }

    /// VGPR index of a 64-bit address held in the pair `src0`, `src0 + 1`: both registers
    /// must lie inside the wave's VGPRs.
    #[inline(always)]
    fn address_pair(&self, wv: &Wave) -> Result<usize, ExecFault> {
        self.row(wv, self.i.src[0], 1)?;
        self.row(wv, self.i.src[0], 0)
    }

    fn active(&self, l: usize) -> bool {
        self.exec >> l & 1 != 0
    }

    /// The address of lane `l` and what it points to.
    fn target(&self, wv: &Wave, l: usize) -> Result<Target, ExecFault> {
        let (i, lanes) = (self.i, wv.lanes);
        match i.format {
            Format::Global => {
                let a = if i.saddr == src::NULL {
                    let r = self.address_pair(wv)?;
                    wv.vgpr[r + l] as u64 | (wv.vgpr[r + lanes + l] as u64) << 32
                } else {
                    wv.sread64(i.saddr, 0, false)
                        .wrapping_add(wv.vgpr[self.row(wv, i.src[0], 0)? + l] as u64)
                };
                Ok(Target::Global(a.wrapping_add(i.imm as i64 as u64)))
            }
            Format::Scratch => {
                let mut o = i.imm as i64 as u64;
                if i.saddr != src::NULL {
                    o = o.wrapping_add(wv.sread(i.saddr, 0) as u64);
                }
                if i.sve {
                    o = o.wrapping_add(wv.vgpr[self.row(wv, i.src[0], 0)? + l] as u64);
                }
                Ok(Target::Private(o & 0xffff_ffff))
            }
            _ => {
                let r = self.address_pair(wv)?;
                let a = (wv.vgpr[r + l] as u64 | (wv.vgpr[r + lanes + l] as u64) << 32)
                    .wrapping_add(i.imm as i64 as u64);
                Ok(match (a >> 32) as u32 {
                    SHARED_APERTURE_HI => Target::Lds(a as u32),
                    PRIVATE_APERTURE_HI => Target::Private(a & 0xffff_ffff),
                    _ => Target::Global(a),
                })
            }
        }
    }

    /// Resolves a private offset of lane `l` to GPU memory (lane-major layout in the wave's
    /// slot); `n` bytes must fit in the lane's share.
    fn private(&self, wv: &Wave, l: usize, o: u64, n: u64) -> Result<u64, ExecFault> {
        if o + n > self.per_lane {
            return Err(ExecFault::Memory {
                fault: MemoryFault {
                    address: o,
                    write: false,
                },
                pc: self.pc,
            });
        }
        Ok(wv.flat_scratch + l as u64 * self.per_lane + o)
    }
}

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn vmem(
    ctx: &Ctx,
    wv: &mut Wave,
    lds: &mut [u8],
    mem: &dyn Memory,
    i: &Inst,
    pc: u64,
) -> Result<(), ExecFault> {
    let m = meta(i);
    let op = VmOp {
        i,
        pc,
        exec: wv.exec(),
        per_lane: ctx.d.scratch.map(|s| s.bytes_per_lane as u64).unwrap_or(0),
    };
    let load = m.kind == MemKind::Load;
    let store = m.kind == MemKind::Store;
    let (bytes, signed) = (m.bytes as usize, m.signed);
    if bytes == 0 || m.exotic {
        return Err(unsupported(i, pc));
    }
    if (load || store) && i.format == Format::Global && matches!(bytes, 4 | 8 | 12 | 16) && !m.d16 {
        return global_dwords(wv, mem, &op, load, bytes / 4);
    }
    if load {
        return self::load(wv, lds, mem, &op, bytes, signed, m);
    }
    if store {
        return self::store(wv, lds, mem, &op, bytes, m.hi);
    }
    let rtn = i.cache & 1 != 0;
    let MemKind::Atomic(kind) = m.kind else {
        return Err(unsupported(i, pc));
    };
    if bytes == 8 {
        atomic64(wv, lds, mem, &op, kind, rtn)
    } else {
        atomic32(wv, lds, mem, &op, kind, rtn)
    }
}

/// Global loads and stores of `rows` whole dwords per lane, their registers checked first
/// (as the fast form does). Dwords: runs of active lanes touching consecutive dwords are one
/// access each, a run that faults redone lane by lane so the fault names the exact lane
/// address; wider accesses lane by lane.
#[inline(always)]
fn global_dwords(
    wv: &mut Wave,
    mem: &dyn Memory,
    op: &VmOp,
    load: bool,
    rows: usize,
) -> Result<(), ExecFault> {
    let (i, pc, lanes) = (op.i, op.pc, wv.lanes);
    let ar = if i.saddr == src::NULL {
        op.address_pair(wv)?
    } else {
        op.row(wv, i.src[0], 0)?
    };
    let data = if load { i.dst } else { i.src[1] };
    op.row(wv, data, rows as u16 - 1)?;
    let vr = op.row(wv, data, 0)?;
    let sbase = if i.saddr == src::NULL {
        0
    } else {
        wv.sread64(i.saddr, 0, false)
    };
    let addr = |wv: &Wave, l: usize| -> u64 {
        let a = if i.saddr == src::NULL {
            wv.vgpr[ar + l] as u64 | (wv.vgpr[ar + lanes + l] as u64) << 32
        } else {
            sbase.wrapping_add(wv.vgpr[ar + l] as u64)
        };
        a.wrapping_add(i.imm as i64 as u64)
    };
    if rows > 1 {
        let n = 4 * rows;
        for l in (0..lanes).filter(|&l| op.active(l)) {
            let mut b = [0u8; 16];
            if load {
                mem.read(addr(wv, l), &mut b[..n]).map_err(mem_fault(pc))?;
                for (k, c) in b[..n].as_chunks::<4>().0.iter().enumerate() {
                    wv.vgpr[vr + k * lanes + l] = u32::from_le_bytes(*c);
                }
            } else {
                for (k, c) in b[..n].as_chunks_mut::<4>().0.iter_mut().enumerate() {
                    *c = wv.vgpr[vr + k * lanes + l].to_le_bytes();
                }
                mem.write(addr(wv, l), &b[..n]).map_err(mem_fault(pc))?;
            }
        }
        return Ok(());
    }
    let mut buf = [0u8; 256];
    let mut l = 0;
    while l < lanes {
        if !op.active(l) {
            l += 1;
            continue;
        }
        let (start, a0) = (l, addr(wv, l));
        while l + 1 < lanes
            && op.active(l + 1)
            && addr(wv, l + 1) == a0.wrapping_add(4 * (l + 1 - start) as u64)
        {
            l += 1;
        }
        let end = l + 1;
        let run = &mut buf[..4 * (end - start)];
        if load {
            let ok = mem.read(a0, run).is_ok();
            for k in start..end {
                if ok {
                    let c = &run[4 * (k - start)..4 * (k - start) + 4];
                    wv.vgpr[vr + k] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                } else {
                    let mut b4 = [0u8; 4];
                    mem.read(addr(wv, k), &mut b4).map_err(mem_fault(pc))?;
                    wv.vgpr[vr + k] = u32::from_le_bytes(b4);
                }
            }
        } else {
            for (c, v) in run.chunks_exact_mut(4).zip(&wv.vgpr[vr + start..vr + end]) {
                c.copy_from_slice(&v.to_le_bytes());
            }
            if mem.write(a0, run).is_err() {
                for k in start..end {
                    mem.write(addr(wv, k), &wv.vgpr[vr + k].to_le_bytes())
                        .map_err(mem_fault(pc))?;
                }
            }
        }
        l = end;
    }
    Ok(())
}

/// Loads of 1 to 16 bytes per lane, lane by lane (sub-dword loads zero- or sign-extend; the
/// d16 forms extend to 16 bits into one half of the register and keep the other).
fn load(
    wv: &mut Wave,
    lds: &[u8],
    mem: &dyn Memory,
    op: &VmOp,
    bytes: usize,
    signed: bool,
    m: &crate::meta::Meta,
) -> Result<(), ExecFault> {
    let (i, pc) = (op.i, op.pc);
    let n = bytes.div_ceil(4);
    for l in 0..wv.lanes {
        if !op.active(l) {
            continue;
        }
        let mut buf = [0u8; 16];
        match op.target(wv, l)? {
            Target::Global(a) => mem.read(a, &mut buf[..bytes]).map_err(mem_fault(pc))?,
            Target::Private(o) => {
                let a = op.private(wv, l, o, bytes as u64)?;
                mem.read(a, &mut buf[..bytes]).map_err(mem_fault(pc))?
            }
            Target::Lds(a) => {
                if lds_ok(lds, a, bytes) {
                    buf[..bytes].copy_from_slice(&lds[a as usize..a as usize + bytes]);
                }
            }
        }
        let mut vals = [0u32; 4];
        for (k, v) in vals.iter_mut().enumerate().take(n) {
            *v = u32::from_le_bytes([buf[4 * k], buf[4 * k + 1], buf[4 * k + 2], buf[4 * k + 3]]);
        }
        if signed {
            vals[0] = if bytes == 1 {
                vals[0] as u8 as i8 as i32 as u32
            } else {
                vals[0] as u16 as i16 as i32 as u32
            };
        }
        if m.d16 {
            let r = op.row(wv, i.dst, 0)?;
            wv.vgpr[r + l] = merge_d16(wv.vgpr[r + l], vals[0], m.hi);
            continue;
        }
        for (k, v) in vals.iter().enumerate().take(n) {
            let r = op.row(wv, i.dst, k as u16)?;
            wv.vgpr[r + l] = *v;
        }
    }
    Ok(())
}

/// The register `old` with the low 16 bits of `v` in its high (`hi`) or low half.
pub(super) fn merge_d16(old: u32, v: u32, hi: bool) -> u32 {
    if hi {
        (old & 0xffff) | v << 16
    } else {
        (old & 0xffff_0000) | (v & 0xffff)
    }
}

/// Stores of 1 to 16 bytes per lane, lane by lane (`hi`: the d16_hi forms store from bit 16).
fn store(
    wv: &mut Wave,
    lds: &mut [u8],
    mem: &dyn Memory,
    op: &VmOp,
    bytes: usize,
    hi: bool,
) -> Result<(), ExecFault> {
    let (i, pc) = (op.i, op.pc);
    let n = bytes.div_ceil(4);
    for l in 0..wv.lanes {
        if !op.active(l) {
            continue;
        }
        let t = op.target(wv, l)?;
        let mut buf = [0u8; 16];
        for k in 0..n {
            let v = wv.vgpr[op.row(wv, i.src[1], k as u16)? + l];
            let v = if hi { v >> 16 } else { v };
            buf[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
        }
        match t {
            Target::Global(a) => mem.write(a, &buf[..bytes]).map_err(mem_fault(pc))?,
            Target::Private(o) => {
                let a = op.private(wv, l, o, bytes as u64)?;
                mem.write(a, &buf[..bytes]).map_err(mem_fault(pc))?
            }
            Target::Lds(a) => {
                if lds_ok(lds, a, bytes) {
                    lds[a as usize..a as usize + bytes].copy_from_slice(&buf[..bytes]);
                }
            }
        }
    }
    Ok(())
}

/// 64-bit atomics, lane by lane; `rtn` forms return the old value.
fn atomic64(
    wv: &mut Wave,
    lds: &mut [u8],
    mem: &dyn Memory,
    op: &VmOp,
    kind: Atomic,
    rtn: bool,
) -> Result<(), ExecFault> {
    let (i, pc) = (op.i, op.pc);
    let cmp = matches!(kind, Atomic::CmpSwap);
    for l in 0..wv.lanes {
        if !op.active(l) {
            continue;
        }
        let t = op.target(wv, l)?;
        let d = |k: u16| -> Result<u64, ExecFault> {
            let r0 = op.row(wv, i.src[1], k)?;
            let r1 = op.row(wv, i.src[1], k + 1)?;
            Ok(wv.vgpr[r0 + l] as u64 | (wv.vgpr[r1 + l] as u64) << 32)
        };
        let d0 = d(0)?;
        let d1 = if cmp { d(2)? } else { 0 };
        let old = match t {
            Target::Global(a) => mem
                .atomic_u64(a, &|o| kind.apply64(o, d0, d1))
                .map_err(mem_fault(pc))?,
            Target::Lds(a) => {
                let o = lds_read(lds, a) as u64 | (lds_read(lds, a.wrapping_add(4)) as u64) << 32;
                let n = kind.apply64(o, d0, d1);
                lds_write(lds, a, n as u32);
                lds_write(lds, a.wrapping_add(4), (n >> 32) as u32);
                o
            }
            Target::Private(o) => {
                // Private memory belongs to this lane alone: a plain read-modify-write.
                let a = op.private(wv, l, o, 8)?;
                let mut b = [0u8; 8];
                mem.read(a, &mut b).map_err(mem_fault(pc))?;
                let old = u64::from_le_bytes(b);
                mem.write(a, &kind.apply64(old, d0, d1).to_le_bytes())
                    .map_err(mem_fault(pc))?;
                old
            }
        };
        if rtn {
            let r0 = op.row(wv, i.dst, 0)?;
            let r1 = op.row(wv, i.dst, 1)?;
            wv.vgpr[r0 + l] = old as u32;
            wv.vgpr[r1 + l] = (old >> 32) as u32;
        }
    }
    Ok(())
}

/// 32-bit atomics, lane by lane; `rtn` forms return the old value.
fn atomic32(
    wv: &mut Wave,
    lds: &mut [u8],
    mem: &dyn Memory,
    op: &VmOp,
    kind: Atomic,
    rtn: bool,
) -> Result<(), ExecFault> {
    let (i, pc) = (op.i, op.pc);
    for l in 0..wv.lanes {
        if !op.active(l) {
            continue;
        }
        let d0 = wv.vgpr[op.row(wv, i.src[1], 0)? + l];
        let d1 = if matches!(kind, Atomic::CmpSwap) {
            wv.vgpr[op.row(wv, i.src[1], 1)? + l]
        } else {
            0
        };
        // Global cmpswap data is {new, cmp}; Atomic::apply takes (new, cmp).
        let old = match op.target(wv, l)? {
            Target::Global(a) => mem
                .atomic_u32(a, &|o| kind.apply(o, d0, d1))
                .map_err(mem_fault(pc))?,
            Target::Lds(a) => {
                let o = lds_read(lds, a);
                lds_write(lds, a, kind.apply(o, d0, d1));
                o
            }
            Target::Private(o) => {
                // Private memory belongs to this lane alone: a plain read-modify-write.
                let a = op.private(wv, l, o, 4)?;
                let mut b = [0u8; 4];
                mem.read(a, &mut b).map_err(mem_fault(pc))?;
                let old = u32::from_le_bytes(b);
                mem.write(a, &kind.apply(old, d0, d1).to_le_bytes())
                    .map_err(mem_fault(pc))?;
                old
            }
        };
        if rtn {
            let r = op.row(wv, i.dst, 0)?;
            wv.vgpr[r + l] = old;
        }
    }
    Ok(())
}
