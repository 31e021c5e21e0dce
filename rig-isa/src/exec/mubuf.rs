//! Buffer memory: MUBUF loads, stores and atomics, and `s_buffer_load`, through a buffer
//! resource (V#) in four SGPRs, with the RDNA3 addressing and range checks.
//!
//! The resource: base address (dword 0, dword 1 bits 15:0), stride (dword 1 bits 29:16),
//! swizzle enable (dword 1 bits 31:30: element of 4, 8 or 16 bytes), num_records (dword 2),
//! index stride (dword 3 bits 22:21: 8 << n), add_tid_enable (dword 3 bit 23) and the
//! out-of-range select (dword 3 bits 29:28). A lane's index is its VGPR index (idxen) plus its
//! lane id (add_tid); its offset is the instruction offset plus its VGPR offset (offen). The
//! range check, per the select: 0 (structured with offset) index >= num_records or offset
//! past the stride; 1 (structured) index >= num_records; 2 only num_records == 0; 3 (raw)
//! soffset + offset + index * stride + the access past num_records, dword by dword for
//! accesses wider than a dword. Out-of-range loads read 0, stores and atomics do nothing
//! (atomics return 0). The typed `format` forms, the LDS-direct forms and tfe are not
//! executed.

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use super::{Wave, mem_fault, unsupported};
use crate::decode::Inst;
use crate::meta::{Atomic, MemKind, meta};
use crate::{ExecFault, Memory};

/// A buffer resource descriptor, decoded.
#[derive(Clone, Copy)]
struct Rsrc {
    base: u64,
    stride: u64,
    /// Swizzle element bytes (0: no swizzle).
    elem: u64,
    num_records: u64,
    index_stride: u64,
    add_tid: bool,
    oob: u32,
}

impl Rsrc {
    fn read(wv: &Wave, s: u16) -> Rsrc {
        let d = |k: u16| wv.sread(s + k, 0);
        let (d1, d3) = (d(1), d(3));
        Rsrc {
            base: d(0) as u64 | ((d1 & 0xffff) as u64) << 32,
            stride: ((d1 >> 16) & 0x3fff) as u64,
            elem: [0, 4, 8, 16][(d1 >> 30) as usize],
            num_records: d(2) as u64,
            index_stride: 8 << ((d3 >> 21) & 3),
            add_tid: d3 >> 23 & 1 != 0,
            oob: (d3 >> 28) & 3,
        }
    }

    /// Whether `size` bytes at buffer offset `offset` of record `index` (`soffset` added)
    /// are in range.
    fn in_range(&self, index: u64, offset: u64, soffset: u64, size: u64) -> bool {
        match self.oob {
            0 => index < self.num_records && offset + size <= self.stride.max(1),
            1 => index < self.num_records,
            2 => self.num_records != 0,
            _ => soffset + index * self.stride + offset + size <= self.num_records,
        }
    }

    /// The memory address of buffer offset `offset` of record `index`.
    fn address(&self, index: u64, offset: u64, soffset: u64) -> u64 {
        let rel = if self.elem == 0 {
            index * self.stride + offset
        } else {
            let (ie, e) = (self.index_stride, self.elem);
            (index / ie * self.stride + offset / e * e) * ie + index % ie * e + offset % e
        };
        self.base.wrapping_add(soffset).wrapping_add(rel)
    }
}

/// What each lane of a MUBUF instruction accesses.
struct Lane {
    index: u64,
    offset: u64,
}

/// The cache invalidations (`buffer_gl0_inv`, `buffer_gl1_inv`, GFX9's `buffer_inv`) and
/// GFX9's writebacks (`buffer_wbl2`, `buffer_wbinvl1`, `buffer_wbinvl1_vol`): nothing to do,
/// memory is coherent at issue.
pub(super) fn is_cache_inv(i: &Inst) -> bool {
    let n = meta(i).name;
    n.ends_with("_inv") || n.starts_with("buffer_wb")
}

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
pub(super) fn mubuf(wv: &mut Wave, mem: &dyn Memory, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    let m = meta(i);
    if is_cache_inv(i) {
        return Ok(());
    }
    let tfe = i.op_sel & 1 != 0;
    if m.bytes == 0 || m.exotic || tfe {
        return Err(unsupported(i, pc));
    }
    let (offen, idxen) = (i.op_sel & 2 != 0, i.op_sel & 4 != 0);
    let r = Rsrc::read(wv, i.src[1]);
    let soffset = wv.sread(i.saddr, i.literal) as u64;
    let exec = wv.exec();
    let row = |wv: &Wave, reg: u16, k: u16| -> Result<usize, ExecFault> {
        let x = (reg as usize).wrapping_sub(256).wrapping_add(k as usize);
        match super::reg_row(x, wv.nvgpr, wv.acc) {
            Some(x) => Ok(x * wv.lanes),
            None => Err(ExecFault::VgprOutOfRange { address: pc }),
        }
    };
    let lane = |wv: &Wave, l: usize| -> Result<Lane, ExecFault> {
        let mut index = if r.add_tid { l as u64 } else { 0 };
        let mut offset = i.imm as u32 as u64;
        if idxen {
            index += wv.vgpr[row(wv, i.src[0], 0)? + l] as u64;
        }
        if offen {
            offset += wv.vgpr[row(wv, i.src[0], idxen as u16)? + l] as u64;
        }
        Ok(Lane { index, offset })
    };
    let bytes = m.bytes as u64;
    let dwords = bytes.div_ceil(4) as u16;
    for l in 0..wv.lanes {
        if exec >> l & 1 == 0 {
            continue;
        }
        let p = lane(wv, l)?;
        // One piece per dword (sub-dword accesses are one piece).
        let piece = |k: u64| -> Option<u64> {
            let (o, n) = (p.offset + 4 * k, bytes.min(4));
            r.in_range(p.index, o, soffset, n)
                .then(|| r.address(p.index, o, soffset))
        };
        match m.kind {
            MemKind::Load => {
                for k in 0..dwords {
                    let mut b = [0u8; 4];
                    if let Some(a) = piece(k as u64) {
                        mem.read(a, &mut b[..bytes.min(4) as usize])
                            .map_err(mem_fault(pc))?;
                    }
                    let mut v = u32::from_le_bytes(b);
                    if m.signed {
                        v = if bytes == 1 {
                            v as u8 as i8 as i32 as u32
                        } else {
                            v as u16 as i16 as i32 as u32
                        };
                    }
                    let dr = row(wv, i.dst, k)?;
                    wv.vgpr[dr + l] = if m.d16 {
                        super::vmem::merge_d16(wv.vgpr[dr + l], v, m.hi)
                    } else {
                        v
                    };
                }
            }
            MemKind::Store => {
                for k in 0..dwords {
                    let v = wv.vgpr[row(wv, i.dst, k)? + l];
                    let v = if m.hi { v >> 16 } else { v };
                    if let Some(a) = piece(k as u64) {
                        mem.write(a, &v.to_le_bytes()[..bytes.min(4) as usize])
                            .map_err(mem_fault(pc))?;
                    }
                }
            }
            MemKind::Atomic(kind) => atomic(wv, mem, i, pc, &r, &p, soffset, kind, l, &row)?,
            MemKind::None => return Err(unsupported(i, pc)),
        }
    }
    Ok(())
}

/// One lane of a buffer atomic: data in vdata (`{new, cmp}` for compare-swap), the old value
/// back into vdata with glc.
#[allow(clippy::too_many_arguments)]
fn atomic(
    wv: &mut Wave,
    mem: &dyn Memory,
    i: &Inst,
    pc: u64,
    r: &Rsrc,
    p: &Lane,
    soffset: u64,
    kind: Atomic,
    l: usize,
    row: &dyn Fn(&Wave, u16, u16) -> Result<usize, ExecFault>,
) -> Result<(), ExecFault> {
    let wide = meta(i).bytes == 8;
    let size = if wide { 8 } else { 4 };
    let cmp = matches!(kind, Atomic::CmpSwap);
    let w = if wide { 2 } else { 1 };
    let get = |k: u16| -> Result<u64, ExecFault> {
        let lo = wv.vgpr[row(wv, i.dst, k)? + l] as u64;
        Ok(if wide {
            lo | (wv.vgpr[row(wv, i.dst, k + 1)? + l] as u64) << 32
        } else {
            lo
        })
    };
    let d0 = get(0)?;
    let d1 = if cmp { get(w)? } else { 0 };
    let old = if r.in_range(p.index, p.offset, soffset, size) {
        let a = r.address(p.index, p.offset, soffset);
        if wide {
            mem.atomic_u64(a, &|o| kind.apply64(o, d0, d1))
                .map_err(mem_fault(pc))?
        } else {
            mem.atomic_u32(a, &|o| kind.apply(o, d0 as u32, d1 as u32))
                .map_err(mem_fault(pc))? as u64
        }
    } else {
        0
    };
    if i.cache & 1 != 0 {
        let r0 = row(wv, i.dst, 0)?;
        wv.vgpr[r0 + l] = old as u32;
        if wide {
            let r1 = row(wv, i.dst, 1)?;
            wv.vgpr[r1 + l] = (old >> 32) as u32;
        }
    }
    Ok(())
}

/// `s_buffer_load_b32` .. `_b512`: `n` dwords at the resource's base plus the offset (and
/// soffset), each dword past num_records reading 0.
pub(super) fn s_buffer_load(
    wv: &mut Wave,
    mem: &dyn Memory,
    i: &Inst,
    pc: u64,
    n: usize,
) -> Result<(), ExecFault> {
    let r = Rsrc::read(wv, i.src[0]);
    let soff = if i.saddr == crate::decode::src::NULL {
        0
    } else {
        wv.sread(i.saddr, 0) as u64
    };
    let off = (i.imm as i64 as u64).wrapping_add(soff) & 0xffff_fffc;
    let d = if n >= 4 {
        i.dst & !3
    } else if n == 2 {
        i.dst & !1
    } else {
        i.dst
    };
    for k in 0..n as u64 {
        let o = off + 4 * k;
        let mut b = [0u8; 4];
        if o + 4 <= r.num_records {
            mem.read(r.base.wrapping_add(o), &mut b)
                .map_err(mem_fault(pc))?;
        }
        wv.swrite(d + k as u16, u32::from_le_bytes(b));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rsrc(stride: u64, elem: u64, num_records: u64, oob: u32) -> Rsrc {
        Rsrc {
            base: 0x1000,
            stride,
            elem,
            num_records,
            index_stride: 8,
            add_tid: false,
            oob,
        }
    }

    #[test]
    fn raw_range_counts_soffset_and_the_access() {
        let r = rsrc(0, 0, 4000, 3);
        assert!(r.in_range(0, 3996, 0, 4));
        assert!(!r.in_range(0, 3997, 0, 4));
        assert!(!r.in_range(0, 3996, 4, 4));
        assert!(!rsrc(0, 0, 0, 2).in_range(0, 0, 0, 1));
        assert!(rsrc(0, 0, 1, 2).in_range(0, 1 << 20, 0, 4));
    }

    #[test]
    fn structured_range_checks_the_index() {
        let r = rsrc(16, 0, 100, 1);
        assert!(r.in_range(99, 1 << 20, 0, 4));
        assert!(!r.in_range(100, 0, 0, 4));
        let r = rsrc(16, 0, 100, 0);
        assert!(r.in_range(99, 12, 0, 4));
        assert!(!r.in_range(99, 13, 0, 4));
        assert_eq!(r.address(3, 4, 8), 0x1000 + 8 + 3 * 16 + 4);
    }

    #[test]
    fn swizzled_address_interleaves_records() {
        // Elements of 4 bytes, 8 records interleaved: record 9 = group 1, slot 1; offset 5 =
        // element 1, byte 1.
        let r = rsrc(16, 4, 100, 1);
        assert_eq!(r.address(9, 5, 0), 0x1000 + (16 + 4) * 8 + 4 + 1);
    }
}
