//! The fast issue forms (`prep::Fast`) run on a wave, inlined into the issue loop: each vector
//! form a loop over a constant 32 or 64 lanes on `u32` rows (the lanes of a VGPR are
//! contiguous), computing every lane and then selecting by EXEC as a bitmask, so the loops
//! compile to vector code; the scalar forms on resolved SGPR indices and values. Semantics are
//! those of the general executor, bit for bit (tested below against it on random states).

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use super::ds::{lds_read, lds_write};
use super::{Wave, mem_fault};
use crate::ExecFault;
use crate::decode::src;
use crate::prep::{
    Alu, AluOp, CarryIn, Cmp32, Cond, Fast, Operand, Operand64, Shift64, Soperand64, SrcMod, VCmp,
};
#[cfg(test)]
use crate::simd::Wide;
use crate::valu::{f32_class, fcmp, lane_of, mbcnt, out_mod_f32};
use crate::window::{Lanes, Tlb, Window};

/// What running a fast form came to.
pub(super) enum Ran {
    Done,
    /// The form does not apply to this wave (a float operation under a flushing denormal
    /// mode): run the general executor.
    General,
    /// The wave ended or waits at a barrier.
    Yield,
    /// A backward branch was taken: the other waves of the group may get their turn.
    MayYield,
}

/// Runs `f` on the wave, compiled for the host's vector unit (the issue loop runs `issue`
/// inside its own such copy).
#[cfg(test)]
pub(super) fn run(
    wide: Wide,
    wv: &mut Wave,
    lds: &mut [u8],
    tlb: &mut Tlb,
    f: &Fast,
    pc: u64,
) -> Result<Ran, ExecFault> {
    wide.run(
        #[inline(always)]
        || {
            let ftz = ftz32(wv);
            if wv.lanes == 32 {
                issue::<32>(wv, lds, tlb, f, pc, ftz)
            } else {
                issue::<64>(wv, lds, tlb, f, pc, ftz)
            }
        },
    )
}

/// Runs `f` on a wave of `N` lanes whose PC already points past the instruction at `pc`;
/// `ftz` is [`ftz32`] of the wave (fixed for its dispatch: the caller asks once).
#[inline(always)]
pub(super) fn issue<const N: usize>(
    wv: &mut Wave,
    lds: &mut [u8],
    tlb: &mut Tlb,
    f: &Fast,
    pc: u64,
    ftz: bool,
) -> Result<Ran, ExecFault> {
    let range = |wv: &Wave, top: u16| {
        if top as usize > wv.nvgpr {
            Err(ExecFault::VgprOutOfRange { address: pc })
        } else {
            Ok(())
        }
    };
    match f {
        Fast::General => return Ok(Ran::General),
        Fast::Nop => {}
        Fast::Salu { f, a, b, d } => {
            let (x, y) = (sread(wv, *a), sread(wv, *b));
            let (r, scc) = super::scalar::salu(*f, x, y, wv.scc);
            wv.scc = scc;
            wv.sgpr[sgpr(*d)] = r;
        }
        Fast::Salu64 { op, a, b, d } => {
            let (x, y) = (sread64(wv, *a), sread64(wv, *b));
            // PANIC: the form is made only for the opcodes `sop2_b64` has.
            let (r, scc) = super::scalar::sop2_b64(*op, x, y, wv.scc).unwrap_or((0, None));
            wv.scc = scc.unwrap_or(r != 0);
            swrite64::<N>(wv, *d, r);
        }
        Fast::Mov64 { a, d } => {
            let v = sread64(wv, *a);
            swrite64::<N>(wv, *d, v);
        }
        Fast::SaveExec { op, a, d, wide } => {
            let (x, e) = (sread64(wv, *a), exec_of::<N>(wv));
            // (The form is made only for the opcodes `saveexec` has.)
            let save = super::scalar::saveexec(*op, x, e).unwrap_or(e) & (u64::MAX >> (64 - N));
            if *wide {
                swrite64::<N>(wv, *d, e);
            } else {
                wv.sgpr[sgpr(*d)] = e as u32;
            }
            set_mask::<N>(wv, src::EXEC_LO as u8, save);
            wv.scc = save != 0;
        }
        Fast::Scmp { c, a, b } => wv.scc = c.eval(sread(wv, *a), sread(wv, *b)),
        Fast::Branch { cond, rel, back } => {
            let take = match cond {
                Cond::Always => true,
                Cond::Scc0 => !wv.scc,
                Cond::Scc1 => wv.scc,
                Cond::Vccz => mask::<N>(wv, src::VCC_LO as u8) == 0,
                Cond::Vccnz => mask::<N>(wv, src::VCC_LO as u8) != 0,
                Cond::Execz => mask::<N>(wv, src::EXEC_LO as u8) == 0,
                Cond::Execnz => mask::<N>(wv, src::EXEC_LO as u8) != 0,
            };
            if take {
                wv.pc = pc.wrapping_add(*rel as i64 as u64);
                if *back {
                    return Ok(Ran::MayYield);
                }
            }
        }
        Fast::End => {
            wv.done = true;
            return Ok(Ran::Yield);
        }
        Fast::Barrier => {
            wv.at_barrier = true;
            return Ok(Ran::Yield);
        }
        Fast::Sload {
            base,
            imm,
            soff,
            d,
            n,
        } => {
            let b = *base as usize;
            let base = (wv.sgpr[b] as u64 | (wv.sgpr[b + 1] as u64) << 32) & 0xffff_ffff_ffff;
            let soff = soff.map_or(0, |s| wv.sgpr[s as usize] as u64);
            s_load::<N>(wv, tlb, base, *imm, soff, *d as usize, *n as usize, pc)?;
        }
        Fast::Alu { op, top } => {
            if ftz && op.f.is_float() {
                return Ok(Ran::General);
            }
            range(wv, *top)?;
            let mut r = [0u32; N];
            alu::<N>(wv, op, &mut r);
            write::<N>(wv, op.d, &r);
        }
        Fast::AluMod {
            op,
            m,
            omod,
            clamp,
            top,
        } => {
            if ftz {
                return Ok(Ran::General);
            }
            range(wv, *top)?;
            let mut r = [0u32; N];
            alu_mod::<N>(wv, op, m, &mut r);
            if *omod != 0 || *clamp {
                for x in r.iter_mut() {
                    *x = out_mod_f32(*x, *omod, *clamp);
                }
            }
            write::<N>(wv, op.d, &r);
        }
        Fast::Dual { x, y, top } => {
            if ftz && (x.f.is_float() || y.f.is_float()) {
                return Ok(Ran::General);
            }
            range(wv, *top)?;
            let (mut rx, mut ry) = ([0u32; N], [0u32; N]);
            alu::<N>(wv, x, &mut rx);
            alu::<N>(wv, y, &mut ry);
            write::<N>(wv, x.d, &rx);
            write::<N>(wv, y.d, &ry);
        }
        Fast::AddCo {
            a,
            b,
            cin,
            d,
            carry,
            top,
        } => {
            range(wv, *top)?;
            add_co::<N>(wv, *a, *b, *cin, *d, *carry);
        }
        Fast::MadU64 {
            a,
            b,
            c,
            d,
            carry,
            src_top,
            top,
        } => {
            range(wv, *src_top)?;
            mad_u64::<N>(wv, *a, *b, *c, *d, *carry, *top, pc)?;
        }
        Fast::Readfirstlane { a, d } => {
            range(wv, *a as u16 + 1)?;
            // The first active lane, lane 0 when none is.
            let e = exec_of::<N>(wv);
            let l = if e == 0 {
                0
            } else {
                e.trailing_zeros() as usize
            };
            wv.sgpr[sgpr(*d)] = vrow::<N>(wv, *a)[l];
        }
        Fast::Readlane { a, lane, d } => {
            range(wv, *a as u16 + 1)?;
            let l = lane_of(sread(wv, *lane), N);
            wv.sgpr[sgpr(*d)] = vrow::<N>(wv, *a)[l];
        }
        Fast::Writelane { s, lane, d } => {
            range(wv, *d as u16 + 1)?;
            let (v, l) = (sread(wv, *s), lane_of(sread(wv, *lane), N));
            wv.vgpr.as_chunks_mut::<N>().0[*d as usize][l] = v;
        }
        Fast::Mbcnt { hi, m, b, d, top } => {
            range(wv, *top)?;
            let (mut tm, mut tb) = (None, None);
            let (mv, bv) = (read::<N>(wv, *m, &mut tm), read::<N>(wv, *b, &mut tb));
            let mut r = [0u32; N];
            for l in 0..N {
                r[l] = mbcnt(*hi, mv[l], bv[l], l);
            }
            write::<N>(wv, *d, &r);
        }
        Fast::Cndmask { a, b, mask, d, top } => {
            range(wv, *top)?;
            cndmask::<N>(wv, *a, *b, *mask, *d);
        }
        Fast::Cmp { c, a, b, m, d, top } => {
            // The f32 compares flush denormal sources under a flushing mode (the general
            // executor's); the class test sees them.
            if ftz && matches!(c, VCmp::F32(_)) {
                return Ok(Ran::General);
            }
            range(wv, *top)?;
            cmp::<N>(wv, *c, *a, *b, m, *d);
        }
        Fast::Shift64 { f, a, b, d, top } => {
            range(wv, *top)?;
            shift64::<N>(wv, *f, *a, *b, *d);
        }
        Fast::GlobalDword {
            load,
            flat,
            addr,
            saddr,
            data,
            rows,
            imm,
            top,
        } => {
            if *flat && !flat_is_global::<N>(wv, *addr, *imm, *top) {
                return Ok(Ran::General);
            }
            range(wv, *top)?;
            global_dword::<N>(wv, tlb, *load, *addr, *saddr, *data, *rows, *imm, pc)?;
        }
        Fast::DsLoad { addr, d, rows, off } => ds_load::<N>(wv, lds, *addr, *d, *rows, off, pc)?,
        Fast::DsStore {
            addr,
            data,
            rows,
            off,
        } => ds_store::<N>(wv, lds, *addr, *data, *rows, *off, pc)?,
    }
    Ok(Ran::Done)
}

/// A scalar source's value.
#[inline(always)]
fn sread(wv: &Wave, s: Operand) -> u32 {
    match s {
        Operand::Sgpr(k) => wv.sgpr[sgpr(k)],
        Operand::Const(c) => c,
        // Scalar forms have no VGPR sources.
        Operand::Vgpr(_) => 0,
    }
}

/// A 64-bit scalar source's value.
#[inline(always)]
fn sread64(wv: &Wave, s: Soperand64) -> u64 {
    match s {
        Soperand64::Pair(k) => wv.sgpr[sgpr(k)] as u64 | (wv.sgpr[sgpr(k + 1)] as u64) << 32,
        Soperand64::Sgpr(k) => wv.sgpr[sgpr(k)] as u64,
        Soperand64::Const(c) => c,
    }
}

/// `v` into the SGPR pair from `d`; in wave32 EXEC_HI stays 0.
#[inline(always)]
fn swrite64<const N: usize>(wv: &mut Wave, d: u8, v: u64) {
    wv.sgpr[sgpr(d)] = v as u32;
    wv.sgpr[sgpr(d + 1)] = (v >> 32) as u32;
    if N == 32 {
        wv.sgpr[127] = 0;
    }
}

/// The lane mask in SGPR `s` (and `s + 1` in wave64).
#[inline(always)]
fn mask<const N: usize>(wv: &Wave, s: u8) -> u64 {
    let lo = wv.sgpr[sgpr(s)] as u64;
    if N == 64 {
        lo | (wv.sgpr[sgpr(s + 1)] as u64) << 32
    } else {
        lo
    }
}

/// A lane mask into SGPR `s` (and `s + 1` in wave64).
#[inline(always)]
fn set_mask<const N: usize>(wv: &mut Wave, s: u8, m: u64) {
    wv.sgpr[sgpr(s)] = m as u32;
    if N == 64 {
        wv.sgpr[sgpr(s + 1)] = (m >> 32) as u32;
    }
}

/// Whether the wave's f32 denormal mode flushes (the float forms then run general).
pub(super) fn ftz32(wv: &Wave) -> bool {
    (wv.rsrc1 >> 16) & 3 != 3
}

/// VGPR `r` as a lane array (the range was checked against the form's `top`).
#[inline(always)]
fn vrow<const N: usize>(wv: &Wave, r: u8) -> &[u32; N] {
    &wv.vgpr.as_chunks::<N>().0[r as usize]
}

/// The lane values of a source: the VGPR in place, or `tmp` filled with the scalar (an
/// `Option`, so the staging is written only for a scalar source, never zeroed first).
#[inline(always)]
fn read<'a, const N: usize>(
    wv: &'a Wave,
    s: Operand,
    tmp: &'a mut Option<[u32; N]>,
) -> &'a [u32; N] {
    match s {
        Operand::Vgpr(r) => vrow::<N>(wv, r),
        Operand::Sgpr(k) => tmp.insert([wv.sgpr[sgpr(k)]; N]),
        Operand::Const(c) => tmp.insert([c; N]),
    }
}

/// The index of SGPR `k` (forms name SGPRs 0-127: the mask is the bounds check).
#[inline(always)]
fn sgpr(k: u8) -> usize {
    k as usize & 127
}

/// EXEC of a wave of `N` lanes.
#[inline(always)]
pub(super) fn exec_of<const N: usize>(wv: &Wave) -> u64 {
    mask::<N>(wv, src::EXEC_LO as u8)
}

/// EXEC as a lane array of all-ones / all-zeros words.
#[inline(always)]
fn lane_mask<const N: usize>(exec: u64) -> [u32; N] {
    crate::simd::unpack_lanes::<N>(exec)
}

/// Writes `r` into VGPR `d` for the lanes in EXEC.
#[inline(always)]
fn write<const N: usize>(wv: &mut Wave, d: u8, r: &[u32; N]) {
    let exec = exec_of::<N>(wv);
    let row = &mut wv.vgpr.as_chunks_mut::<N>().0[d as usize];
    if exec == u64::MAX >> (64 - N) {
        *row = *r;
    } else {
        let m = lane_mask::<N>(exec);
        for l in 0..N {
            row[l] = (r[l] & m[l]) | (row[l] & !m[l]);
        }
    }
}

#[inline(always)]
fn map<const N: usize>(
    r: &mut [u32; N],
    a: &[u32; N],
    b: &[u32; N],
    c: &[u32; N],
    f: impl Fn(u32, u32, u32) -> u32,
) {
    for l in 0..N {
        r[l] = f(a[l], b[l], c[l]);
    }
}

/// Every lane of `op` into `r`.
#[inline(always)]
fn alu<const N: usize>(wv: &Wave, op: &AluOp, r: &mut [u32; N]) {
    let (mut ta, mut tb, mut tc) = (None, None, None);
    let a = read::<N>(wv, op.s[0], &mut ta);
    let b = read::<N>(wv, op.s[1], &mut tb);
    let c = read::<N>(wv, op.s[2], &mut tc);
    alu_lanes::<N>(op.f, a, b, c, r, crate::valu::ieee_mode(wv.rsrc1));
}

/// Every lane of `op` into `r`, the sources read through their modifiers `m`.
#[inline(always)]
fn alu_mod<const N: usize>(wv: &Wave, op: &AluOp, m: &[SrcMod; 3], r: &mut [u32; N]) {
    let mut t = [[0u32; N]; 3];
    for k in 0..3 {
        let mut tk = None;
        let v = read::<N>(wv, op.s[k], &mut tk);
        for l in 0..N {
            t[k][l] = m[k].apply(v[l]);
        }
    }
    alu_lanes::<N>(
        op.f,
        &t[0],
        &t[1],
        &t[2],
        r,
        crate::valu::ieee_mode(wv.rsrc1),
    );
}

/// Makes `alu_lanes` from `prep::alu_list`: one lane loop per operation, each running the
/// operation's `Alu::eval` with the operation a constant (so it folds into the loop).
macro_rules! alu_loops {
    (($x:ident, $y:ident, $z:ident, $ieee:ident) $($(#[$doc:meta])* $v:ident = $e:expr;)*) => {
        /// `f` of every lane of `a`, `b`, `c` into `r` (`ieee`: rsrc1's IEEE_MODE).
        #[inline(always)]
        fn alu_lanes<const N: usize>(
            f: Alu,
            a: &[u32; N],
            b: &[u32; N],
            c: &[u32; N],
            r: &mut [u32; N],
            ieee: bool,
        ) {
            match f {
                $(Alu::$v => map(r, a, b, c, |x, y, z| Alu::$v.eval(x, y, z, ieee)),)*
            }
        }
    };
}
crate::prep::alu_list!(alu_loops);

/// The 32-bit sums into VGPR `d` and the carry-out mask into SGPR `carry` (lanes in EXEC).
#[inline(always)]
fn add_co<const N: usize>(wv: &mut Wave, a: Operand, b: Operand, cin: CarryIn, d: u8, carry: u8) {
    let cin = match cin {
        CarryIn::None => 0,
        CarryIn::Mask(s) => mask::<N>(wv, s),
    };
    let (mut ta, mut tb) = (None, None);
    let (a, b) = (read::<N>(wv, a, &mut ta), read::<N>(wv, b, &mut tb));
    // The carry as an all-ones word per lane (a vector loop), packed once.
    let (mut r, mut co) = ([0u32; N], [0u32; N]);
    if cin == 0 {
        for l in 0..N {
            let (s, o) = a[l].overflowing_add(b[l]);
            r[l] = s;
            co[l] = 0u32.wrapping_sub(o as u32);
        }
    } else {
        let cm = lane_mask::<N>(cin);
        for l in 0..N {
            let (s, o1) = a[l].overflowing_add(b[l]);
            let (s, o2) = s.overflowing_add(cm[l] & 1);
            r[l] = s;
            co[l] = 0u32.wrapping_sub((o1 | o2) as u32);
        }
    }
    let c = crate::simd::pack_lanes::<N>(&co) & exec_of::<N>(wv);
    set_mask::<N>(wv, carry, c);
    write::<N>(wv, d, &r);
}

/// A compare's lane mask into SGPR `d` (and `d + 1` in wave64).
#[inline(always)]
fn cmp<const N: usize>(wv: &mut Wave, c: VCmp, a: Operand, b: Operand, m: &[SrcMod; 2], d: u8) {
    let (mut ta, mut tb) = (None, None);
    let (mut a, mut b) = (read::<N>(wv, a, &mut ta), read::<N>(wv, b, &mut tb));
    // Modified sources, staged once (a constant's modifiers still apply here: one rule).
    let (mut ma, mut mb) = ([0u32; N], [0u32; N]);
    if m[0] != SrcMod::NONE || m[1] != SrcMod::NONE {
        for l in 0..N {
            ma[l] = m[0].apply(a[l]);
            mb[l] = m[1].apply(b[l]);
        }
        (a, b) = (&ma, &mb);
    }
    // One lane loop per relation (chosen once, not per lane, then folded into the loop).
    macro_rules! by_rel {
        ($rel:expr, $f:ident, $($k:literal)*) => {
            match $rel {
                $($k => lane_bits::<N>(a, b, |x, y| $f($k, x, y)),)*
                _ => u64::MAX,
            }
        };
    }
    let bits = match c {
        VCmp::Int(c) if c.signed => {
            let f = |rel: u8, x: u32, y: u32| Cmp32 { rel, signed: true }.eval(x, y);
            by_rel!(c.rel, f, 0 1 2 3 4 5 6)
        }
        VCmp::Int(c) => {
            let f = |rel: u8, x: u32, y: u32| Cmp32 { rel, signed: false }.eval(x, y);
            by_rel!(c.rel, f, 0 1 2 3 4 5 6)
        }
        VCmp::F32(k) => {
            let f = |k: u16, x: u32, y: u32| fcmp(k, f32::from_bits(x), f32::from_bits(y));
            by_rel!(k as u16, f, 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
        }
        VCmp::ClassF32 => lane_bits::<N>(a, b, |x, y| f32_class(x) & y != 0),
    };
    let bits = bits & exec_of::<N>(wv);
    set_mask::<N>(wv, d, bits);
}

/// The lanes of a 64-bit source.
#[inline(always)]
fn read64<const N: usize>(wv: &Wave, b: Operand64) -> [u64; N] {
    let mut v = [0u64; N];
    match b {
        Operand64::Vgpr(r) => {
            let (lo, hi) = (vrow::<N>(wv, r), vrow::<N>(wv, r + 1));
            for l in 0..N {
                v[l] = lo[l] as u64 | (hi[l] as u64) << 32;
            }
        }
        Operand64::Sgpr(k) => {
            let k = k as usize;
            v = [wv.sgpr[k] as u64 | (wv.sgpr[k + 1] as u64) << 32; N];
        }
        Operand64::Const(c) => v = [c; N],
    }
    v
}

/// `a * b + c` (64 bits) into the pair from `d` and the carry-out mask into `carry`, in the
/// general executor's order: the mask is written before the destination is checked.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn mad_u64<const N: usize>(
    wv: &mut Wave,
    a: Operand,
    b: Operand,
    c: Operand64,
    d: u8,
    carry: Option<u8>,
    top: u16,
    pc: u64,
) -> Result<(), ExecFault> {
    let (mut ta, mut tb) = (None, None);
    let (a, b) = (read::<N>(wv, a, &mut ta), read::<N>(wv, b, &mut tb));
    let c = read64::<N>(wv, c);
    let (mut lo, mut hi, mut co) = ([0u32; N], [0u32; N], [0u32; N]);
    for l in 0..N {
        let p = a[l] as u64 * b[l] as u64;
        let (s, o) = p.overflowing_add(c[l]);
        lo[l] = s as u32;
        hi[l] = (s >> 32) as u32;
        co[l] = 0u32.wrapping_sub(o as u32);
    }
    if let Some(k) = carry {
        let m = crate::simd::pack_lanes::<N>(&co) & exec_of::<N>(wv);
        set_mask::<N>(wv, k, m);
    }
    if top as usize > wv.nvgpr {
        return Err(ExecFault::VgprOutOfRange { address: pc });
    }
    write::<N>(wv, d, &lo);
    write::<N>(wv, d + 1, &hi);
    Ok(())
}

/// `b` where the lane's mask bit is set, else `a`, into VGPR `d` (lanes in EXEC).
#[inline(always)]
fn cndmask<const N: usize>(wv: &mut Wave, a: Operand, b: Operand, mask: u8, d: u8) {
    let m = lane_mask::<N>(self::mask::<N>(wv, mask));
    let (mut ta, mut tb) = (None, None);
    let (a, b) = (read::<N>(wv, a, &mut ta), read::<N>(wv, b, &mut tb));
    let mut r = [0u32; N];
    for l in 0..N {
        r[l] = (b[l] & m[l]) | (a[l] & !m[l]);
    }
    write::<N>(wv, d, &r);
}

/// The lane mask of `f` over the lanes of `a` and `b`.
#[inline(always)]
fn lane_bits<const N: usize>(a: &[u32; N], b: &[u32; N], f: impl Fn(u32, u32) -> bool) -> u64 {
    let mut m = [0u32; N];
    for l in 0..N {
        m[l] = 0u32.wrapping_sub(f(a[l], b[l]) as u32);
    }
    crate::simd::pack_lanes::<N>(&m)
}

/// A 64-bit shift into the pair from `d` (lanes in EXEC), on the 32-bit halves: each lane's
/// result from shifts of its low and high words (32-bit lanes, so a vector loop).
#[inline(always)]
fn shift64<const N: usize>(wv: &mut Wave, f: Shift64, a: Operand, b: Operand64, d: u8) {
    let mut ta = None;
    let a = read::<N>(wv, a, &mut ta);
    let (tlo, thi): ([u32; N], [u32; N]);
    let (vlo, vhi) = match b {
        Operand64::Vgpr(r) => (vrow::<N>(wv, r), vrow::<N>(wv, r + 1)),
        Operand64::Sgpr(k) => {
            let k = k as usize;
            (tlo, thi) = ([wv.sgpr[k]; N], [wv.sgpr[k + 1]; N]);
            (&tlo, &thi)
        }
        Operand64::Const(c) => {
            (tlo, thi) = ([c as u32; N], [(c >> 32) as u32; N]);
            (&tlo, &thi)
        }
    };
    // Shifts by 32 or more give 0 (the count may wrap below 0 to a large one).
    let shl = |x: u32, n: u32| if n < 32 { x << n } else { 0 };
    let shr = |x: u32, n: u32| if n < 32 { x >> n } else { 0 };
    let (mut lo, mut hi) = ([0u32; N], [0u32; N]);
    // One lane loop per shift (chosen once, not per lane).
    match f {
        Shift64::Lshlrev => {
            for l in 0..N {
                let s = a[l] & 63;
                lo[l] = shl(vlo[l], s);
                hi[l] = shl(vhi[l], s)
                    | shr(vlo[l], 32u32.wrapping_sub(s))
                    | shl(vlo[l], s.wrapping_sub(32));
            }
        }
        Shift64::Lshrrev => {
            for l in 0..N {
                let s = a[l] & 63;
                hi[l] = shr(vhi[l], s);
                lo[l] = shr(vlo[l], s)
                    | shl(vhi[l], 32u32.wrapping_sub(s))
                    | shr(vhi[l], s.wrapping_sub(32));
            }
        }
        Shift64::Ashrrev => {
            for l in 0..N {
                let s = a[l] & 63;
                let h = vhi[l] as i32;
                hi[l] = (h >> s.min(31)) as u32;
                lo[l] = if s < 32 {
                    shr(vlo[l], s) | shl(vhi[l], 32 - s)
                } else {
                    (h >> (s - 32)) as u32
                };
            }
        }
    }
    write::<N>(wv, d, &lo);
    write::<N>(wv, d + 1, &hi);
}

/// A scalar load of `n` dwords into SGPRs from `d`: one copy from a window of the worker's
/// cache when it holds them all, else through `Memory` (which finds every fault).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn s_load<const N: usize>(
    wv: &mut Wave,
    tlb: &mut Tlb,
    base: u64,
    imm: i32,
    soff: u64,
    d: usize,
    n: usize,
    pc: u64,
) -> Result<(), ExecFault> {
    let addr = base.wrapping_add(imm as i64 as u64).wrapping_add(soff) & !3;
    let mut v = [0u32; 16];
    if n <= v.len()
        && let Some(w) = tlb.find(addr, 4 * n as u64, false)
        && w.load_words(addr, &mut v[..n])
    {
        for (k, &x) in v[..n].iter().enumerate() {
            wv.swrite((d + k) as u16, x);
        }
        return Ok(());
    }
    super::s_load(wv, tlb.mem(), base, imm, soff, d, n, pc)
}

/// Global loads and stores of `rows` dwords per lane: every lane's address first (a load may
/// overwrite its own address register); when every active lane's access lies in one window
/// of the worker's cache, a word copy per lane; else lane by lane in lane order, through a
/// window where one holds the lane's access and through `Memory` otherwise, so a fault names
/// the lane's address as the general executor's does.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn global_dword<const N: usize>(
    wv: &mut Wave,
    tlb: &mut Tlb,
    load: bool,
    addr: u8,
    saddr: Option<u8>,
    data: u8,
    rows: u8,
    imm: i32,
    pc: u64,
) -> Result<(), ExecFault> {
    let exec = exec_of::<N>(wv);
    if exec == 0 {
        return Ok(());
    }
    let imm = imm as i64 as u64;
    let add = match saddr {
        None => imm,
        Some(s) => {
            let s = s as usize;
            let base = wv.sgpr[s] as u64 | (wv.sgpr[s + 1] as u64) << 32;
            base.wrapping_add(imm)
        }
    };
    let (rows, bytes) = (rows as usize, 4 * rows as u64);
    // The unit-stride case on the address registers in place, before any copy.
    if let Some(first) = run_start::<N>(wv, exec, addr, saddr.is_none(), add, rows) {
        let vg = &mut wv.vgpr.as_chunks_mut::<N>().0[data as usize..data as usize + rows];
        if global_run::<N>(tlb, first, vg, load) {
            return Ok(());
        }
    }
    // Copies: a load may overwrite its address registers.
    let lo = *vrow::<N>(wv, addr);
    let hi = saddr.is_none().then(|| *vrow::<N>(wv, addr + 1));
    let vg = &mut wv.vgpr.as_chunks_mut::<N>().0[data as usize..data as usize + rows];
    // The row count as a constant: the lane loop then has no loop inside.
    #[inline(always)]
    fn go<const N: usize, const R: usize>(
        w: &Window,
        at: &Lanes<N>,
        exec: u64,
        vg: &mut [[u32; N]],
        load: bool,
    ) -> bool {
        let Ok(vg) = <&mut [[u32; N]; R]>::try_from(vg) else {
            return false;
        };
        if load {
            w.load_lanes(at, exec, vg)
        } else {
            w.store_lanes(at, exec, vg)
        }
    }
    #[inline(always)]
    fn rows_of<const N: usize>(
        w: &Window,
        at: &Lanes<N>,
        exec: u64,
        vg: &mut [[u32; N]],
        load: bool,
    ) -> bool {
        match vg.len() {
            1 => go::<N, 1>(w, at, exec, vg, load),
            2 => go::<N, 2>(w, at, exec, vg, load),
            3 => go::<N, 3>(w, at, exec, vg, load),
            _ => go::<N, 4>(w, at, exec, vg, load),
        }
    }
    let f = exec.trailing_zeros() as usize;
    let high = hi.map_or(0, |h| (h[f] as u64) << 32);
    let first = (high | lo[f] as u64).wrapping_add(add);
    let split = Lanes::Split {
        lo: &lo,
        hi: hi.as_ref(),
        add,
    };
    if let Some(w) = tlb.find(first, bytes, !load)
        && rows_of(w, &split, exec, vg, load)
    {
        return Ok(());
    }
    let mut at = [0u64; N];
    for l in 0..N {
        let high = hi.map_or(0, |h| (h[l] as u64) << 32);
        at[l] = (high | lo[l] as u64).wrapping_add(add);
    }
    if let Some(w) = tlb.find(first, bytes, !load)
        && rows_of(w, &Lanes::Full(&at), exec, vg, load)
    {
        return Ok(());
    }
    global_lanes::<N>(tlb, exec, &at, vg, load, pc)
}

/// `global_dword`'s lane-by-lane path, out of line (rare: the issue loop stays small).
#[inline(never)]
#[cold]
fn global_lanes<const N: usize>(
    tlb: &mut Tlb,
    exec: u64,
    at: &[u64; N],
    vg: &mut [[u32; N]],
    load: bool,
    pc: u64,
) -> Result<(), ExecFault> {
    let (rows, bytes) = (vg.len(), 4 * vg.len() as u64);
    let mem = tlb.mem();
    for l in 0..N {
        if exec >> l & 1 == 0 {
            continue;
        }
        let a = at[l];
        let w = tlb.find(a, bytes, !load);
        if load {
            let mut v = [0u32; 4];
            let mut ok = false;
            if let Some(w) = w {
                ok = true;
                for (j, x) in v.iter_mut().take(rows).enumerate() {
                    match w.load(a.wrapping_add(4 * j as u64)) {
                        Some(y) => *x = y,
                        None => ok = false,
                    }
                }
            }
            if !ok {
                let mut b = [0u8; 16];
                mem.read(a, &mut b[..rows * 4]).map_err(mem_fault(pc))?;
                for (x, c) in v.iter_mut().zip(b.as_chunks::<4>().0) {
                    *x = u32::from_le_bytes(*c);
                }
            }
            for j in 0..rows {
                vg[j][l] = v[j];
            }
        } else {
            // Word-aligned in a writable window: every word goes through it.
            if let Some(w) = w
                && a.wrapping_sub(w.base()) & 3 == 0
            {
                for j in 0..rows {
                    w.store(a.wrapping_add(4 * j as u64), vg[j][l]);
                }
                continue;
            }
            let mut b = [0u8; 16];
            for (c, r) in b.as_chunks_mut::<4>().0.iter_mut().zip(vg.iter()) {
                *c = r[l].to_le_bytes();
            }
            mem.write(a, &b[..rows * 4]).map_err(mem_fault(pc))?;
        }
    }
    Ok(())
}

/// Whether a flat access runs as the global one: its registers in range (else the general
/// executor's checks, lane by lane, decide) and no active lane's address (the VGPR pair from
/// `addr` plus `imm`) in the LDS or private aperture.
#[inline(always)]
fn flat_is_global<const N: usize>(wv: &Wave, addr: u8, imm: i32, top: u16) -> bool {
    if top as usize > wv.nvgpr {
        return false;
    }
    let m = lane_mask::<N>(exec_of::<N>(wv));
    let (lo, hi) = (vrow::<N>(wv, addr), vrow::<N>(wv, addr + 1));
    let imm = imm as i64 as u64;
    let mut bad = 0u32;
    for l in 0..N {
        let h = ((hi[l] as u64) << 32 | lo[l] as u64).wrapping_add(imm) >> 32;
        let h = h as u32;
        bad |= ((h == super::SHARED_APERTURE_HI) | (h == super::PRIVATE_APERTURE_HI)) as u32 & m[l];
    }
    bad == 0
}

/// Lane 0's address when `global_dword`'s access is unit-stride: every lane active and lane
/// `l` at lane 0's address plus `4 rows l` (one high word, no carry out of the low words).
#[inline(always)]
fn run_start<const N: usize>(
    wv: &Wave,
    exec: u64,
    addr: u8,
    pair: bool,
    add: u64,
    rows: usize,
) -> Option<u64> {
    let all = if N >= 64 { u64::MAX } else { (1u64 << N) - 1 };
    if exec & all != all {
        return None;
    }
    let stride = 4 * rows as u32;
    let lo = vrow::<N>(wv, addr);
    let hi = pair.then(|| vrow::<N>(wv, addr + 1));
    if !crate::simd::unit_stride(lo, hi, stride)
        || lo[0] as u64 + stride as u64 * (N as u64 - 1) > u32::MAX as u64
    {
        return None;
    }
    let high = hi.map_or(0, |h| (h[0] as u64) << 32);
    Some((high | lo[0] as u64).wrapping_add(add))
}

/// The unit-stride access of `vg.len()` dwords per lane from `first` (`run_start`), all in
/// one window, as one copy; false, touching nothing, otherwise (the caller then takes the
/// general path).
#[inline(always)]
fn global_run<const N: usize>(tlb: &mut Tlb, first: u64, vg: &mut [[u32; N]], load: bool) -> bool {
    let stride = 4 * vg.len() as u32;
    let Some(w) = tlb.find(first, stride as u64 * N as u64, !load) else {
        return false;
    };
    #[inline(always)]
    fn go<const N: usize, const R: usize>(
        w: &Window,
        first: u64,
        vg: &mut [[u32; N]],
        load: bool,
    ) -> bool {
        let Ok(vg) = <&mut [[u32; N]; R]>::try_from(vg) else {
            return false;
        };
        if load {
            w.load_run(first, vg)
        } else {
            w.store_run(first, vg)
        }
    }
    match vg.len() {
        1 => go::<N, 1>(w, first, vg, load),
        2 => go::<N, 2>(w, first, vg, load),
        3 => go::<N, 3>(w, first, vg, load),
        _ => go::<N, 4>(w, first, vg, load),
    }
}

/// The lanes an LDS dword access runs on, after its register checks: its address register
/// `addr` must be in range, and (when any lane runs) its data rows `first..first + rows`;
/// `None` when EXEC is empty.
#[inline(always)]
fn ds_lanes<const N: usize>(
    wv: &Wave,
    addr: u8,
    first: u8,
    rows: u8,
    pc: u64,
) -> Result<Option<u64>, ExecFault> {
    let fault = ExecFault::VgprOutOfRange { address: pc };
    if addr as usize >= wv.nvgpr {
        return Err(fault);
    }
    let exec = exec_of::<N>(wv);
    if exec == 0 {
        return Ok(None);
    }
    if first as usize + rows as usize > wv.nvgpr {
        return Err(fault);
    }
    Ok(Some(exec))
}

/// LDS dword stores, lane by lane in lane order (a later lane's store to the same address
/// wins); out-of-range dwords are dropped.
#[inline(always)]
fn ds_store<const N: usize>(
    wv: &mut Wave,
    lds: &mut [u8],
    addr: u8,
    data: u8,
    rows: u8,
    off: u32,
    pc: u64,
) -> Result<(), ExecFault> {
    let Some(exec) = ds_lanes::<N>(wv, addr, data, rows, pc)? else {
        return Ok(());
    };
    let a = vrow::<N>(wv, addr);
    let src = &wv.vgpr.as_chunks::<N>().0[data as usize..data as usize + rows as usize];
    let all = if N == 64 { u64::MAX } else { (1u64 << N) - 1 };
    // Every lane active at consecutive dwords from lane 0's (a tile's row): one copy, its
    // bounds from lane 0's address alone (no wrap: the sum is checked in 64 bits).
    if exec == all && rows == 1 && crate::simd::unit_stride::<N>(a, None, 4) {
        let x = a[0] as u64 + off as u64;
        if x + 4 * N as u64 <= lds.len() as u64 {
            let x = x as usize;
            crate::simd::put_dwords(&mut lds[x..x + 4 * N], &src[0]);
            return Ok(());
        }
    }
    // One bounds check for the whole store when every active lane's dwords fit.
    let m = lane_mask::<N>(exec);
    let mut hi = 0u32;
    for l in 0..N {
        hi = hi.max(a[l] & m[l]);
    }
    let n = 4 * rows as usize;
    if hi as u64 + off as u64 + n as u64 <= lds.len() as u64 {
        for l in 0..N {
            if exec >> l & 1 == 0 {
                continue;
            }
            let x = (a[l] + off) as usize;
            for (k, c) in lds[x..x + n].as_chunks_mut::<4>().0.iter_mut().enumerate() {
                *c = src[k][l].to_le_bytes();
            }
        }
        return Ok(());
    }
    for l in 0..N {
        if exec >> l & 1 == 0 {
            continue;
        }
        let at = a[l].wrapping_add(off);
        for k in 0..rows {
            let v = vrow::<N>(wv, data + k)[l];
            lds_write(lds, at.wrapping_add(4 * k as u32), v);
        }
    }
    Ok(())
}

/// LDS dword loads: the addresses are read first (a destination may be the address register);
/// out-of-range dwords read 0.
#[inline(always)]
fn ds_load<const N: usize>(
    wv: &mut Wave,
    lds: &[u8],
    addr: u8,
    d: u8,
    rows: u8,
    off: &[u32; 4],
    pc: u64,
) -> Result<(), ExecFault> {
    let Some(exec) = ds_lanes::<N>(wv, addr, d, rows, pc)? else {
        return Ok(());
    };
    let a = *vrow::<N>(wv, addr);
    let full = exec == u64::MAX >> (64 - N);
    let rows = rows as usize;
    let vg = &mut wv.vgpr.as_chunks_mut::<N>().0[d as usize..d as usize + rows];
    if crate::simd::lds_load_rows(lds, &a, exec, full, &off[..rows], vg) {
        return Ok(());
    }
    // Some active lane reaches past the LDS: lane by lane.
    let m = lane_mask::<N>(exec);
    for (row, &o) in vg.iter_mut().zip(off) {
        for l in 0..N {
            let v = lds_read(lds, a[l].wrapping_add(o));
            row[l] = (v & m[l]) | (row[l] & !m[l]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Memory;
    use crate::decode::{Format, Inst, decode};
    use crate::exec::{PRIVATE_APERTURE_HI, SHARED_APERTURE_HI};
    use crate::prep::Slot;
    use crate::testing::FlatMemory;

    /// LLVM's encodings (llvm-mc-19 --mcpu=gfx1100) of every kind of fast form, some with
    /// registers beyond the test wave's 16 VGPRs.
    const CASES: &[(&[u32], &str)] = &[
        (&[0x560e1303], "v_fmac_f32 v7, v3, v9"),
        (&[0x560e1205], "v_fmac_f32 v7, s5, v9"),
        (&[0x100e12f2], "v_mul_f32 v7, 1.0, v9"),
        (&[0x060e12ff, 0x40490fdb], "v_add_f32 v7, 0x40490fdb, v9"),
        (&[0x080e0f09], "v_sub_f32 v7, v9, v7"),
        (&[0x0a0e0605], "v_subrev_f32 v7, s5, v3"),
        (&[0x4a0e1303], "v_add_nc_u32 v7, v3, v9"),
        (&[0x4c0e12c7], "v_sub_nc_u32 v7, -7, v9"),
        (&[0x4e0e1303], "v_subrev_nc_u32 v7, v3, v9"),
        (&[0x360e12ff, 0x000003ff], "v_and_b32 v7, 0x3ff, v9"),
        (&[0x380e1205], "v_or_b32 v7, s5, v9"),
        (&[0x3a0e0703], "v_xor_b32 v7, v3, v3"),
        (&[0x300e1285], "v_lshlrev_b32 v7, 5, v9"),
        (&[0x320e1303], "v_lshrrev_b32 v7, v3, v9"),
        (&[0x340e1303], "v_ashrrev_i32 v7, v3, v9"),
        (&[0x260e1303], "v_min_u32 v7, v3, v9"),
        (&[0x280e1205], "v_max_u32 v7, s5, v9"),
        (&[0x220e1303], "v_min_i32 v7, v3, v9"),
        (&[0x240e12c1], "v_max_i32 v7, -1, v9"),
        (&[0x7e0e0205], "v_mov_b32 v7, s5"),
        (&[0x7e0e02c4], "v_mov_b32 v7, -4"),
        (&[0x7e0e0303], "v_mov_b32 v7, v3"),
        (&[0xd5810007, 0x00000103], "v_mov_b32_e64 v7, v3"),
        (&[0xd72c0007, 0x00000b03], "v_mul_lo_u32 v7, v3, s5"),
        (&[0xd6550007, 0x04240b03], "v_add3_u32 v7, v3, s5, v9"),
        (&[0xd6460007, 0x04250903], "v_lshl_add_u32 v7, v3, 4, v9"),
        (&[0xd6560007, 0x00161303], "v_lshl_or_b32 v7, v3, v9, s5"),
        (
            &[0xd6570007, 0x0425ff03, 0x0000ff00],
            "v_and_or_b32 v7, v3, 0xff00, v9",
        ),
        (&[0xd6580007, 0x04240b03], "v_or3_b32 v7, v3, s5, v9"),
        (&[0xd6400007, 0x04260f03], "v_xor3_b32 v7, v3, v7, v9"),
        (&[0xd6100007, 0x04251503], "v_bfe_u32 v7, v3, 10, v9"),
        (&[0xd6130007, 0x04240b03], "v_fma_f32 v7, v3, s5, v9"),
        (&[0xd5250007, 0x00001805], "v_add_nc_u32_e64 v7, s5, s12"),
        (&[0xd5030007, 0x00000b03], "v_add_f32_e64 v7, v3, s5"),
        (&[0xd7006a07, 0x00021205], "v_add_co_u32 v7, vcc_lo, s5, v9"),
        (
            &[0xd7000a07, 0x0001ff03, 0x00012345],
            "v_add_co_u32 v7, s10, v3, 0x12345",
        ),
        (
            &[0x400e1205],
            "v_add_co_ci_u32_e32 v7, vcc_lo, s5, v9, vcc_lo",
        ),
        (
            &[0xd5200a07, 0x00321303],
            "v_add_co_ci_u32_e64 v7, s10, v3, v9, s12",
        ),
        (
            &[0xd5206a07, 0x01a98303],
            "v_add_co_ci_u32_e64 v7, vcc_lo, v3, -1, vcc_lo",
        ),
        (
            &[0xca220080, 0x05020882],
            "v_dual_mov_b32 v5, 0 :: v_dual_lshlrev_b32 v2, 2, v4",
        ),
        (
            &[0xc8061303, 0x07080605],
            "v_dual_fmac_f32 v7, v3, v9 :: v_dual_mul_f32 v8, s5, v3",
        ),
        (
            &[0xca200103, 0x01021701],
            "v_dual_mov_b32 v1, v3 :: v_dual_add_nc_u32 v2, v1, v11",
        ),
        (
            &[0xc9241307, 0x07080704],
            "v_dual_add_f32 v7, v7, v9 :: v_dual_and_b32 v8, v4, v3",
        ),
        (
            &[0xc94c12ff, 0x07080707, 0x40490fdb],
            "v_dual_sub_f32 v7, 0x40490fdb, v9 :: v_dual_subrev_f32 v8, v7, v3",
        ),
        (&[0xd8d80010, 0x07000003], "ds_load_b32 v7, v3 offset:16"),
        (&[0xd9d80000, 0x07000003], "ds_load_b64 v[7:8], v3"),
        (
            &[0xdbf80004, 0x08000003],
            "ds_load_b96 v[8:10], v3 offset:4",
        ),
        (
            &[0xdbfc0004, 0x08000003],
            "ds_load_b128 v[8:11], v3 offset:4",
        ),
        (
            &[0xd8dc1000, 0x07000003],
            "ds_load_2addr_b32 v[7:8], v3 offset1:16",
        ),
        (
            &[0xd8e00903, 0x07000003],
            "ds_load_2addr_stride64_b32 v[7:8], v3 offset0:3 offset1:9",
        ),
        (
            &[0xd9dc0301, 0x08000003],
            "ds_load_2addr_b64 v[8:11], v3 offset0:1 offset1:3",
        ),
        (
            &[0xd9e00201, 0x08000003],
            "ds_load_2addr_stride64_b64 v[8:11], v3 offset0:1 offset1:2",
        ),
        (&[0xd8d80000, 0x03000003], "ds_load_b32 v3, v3"),
        (&[0x4a281303], "v_add_nc_u32 v20, v3, v9"),
        (&[0x560e131e], "v_fmac_f32 v7, v30, v9"),
        (&[0xd9d80000, 0x0f000003], "ds_load_b64 v[15:16], v3"),
        (&[0xd8d80000, 0x07000011], "ds_load_b32 v7, v17"),
        (
            &[0xca100080, 0x05120102],
            "v_dual_mov_b32 v5, 0 :: v_dual_mov_b32 v18, v2",
        ),
        (&[0xd73c0000, 0x00020482], "v_lshlrev_b64 v[0:1], 2, v[2:3]"),
        (
            &[0xd73d0004, 0x00000903],
            "v_lshrrev_b64 v[4:5], v3, s[4:5]",
        ),
        (
            &[0xd73e0004, 0x00020909],
            "v_ashrrev_i64 v[4:5], v9, v[4:5]",
        ),
        (&[0xd73e0006, 0x00018603], "v_ashrrev_i64 v[6:7], s3, -3"),
        (&[0xd8340000, 0x00000c09], "ds_store_b32 v9, v12"),
        (
            &[0xd9340008, 0x00000403],
            "ds_store_b64 v3, v[4:5] offset:8",
        ),
        (
            &[0xdb780002, 0x00000803],
            "ds_store_b96 v3, v[8:10] offset:2",
        ),
        (&[0xdb7c0000, 0x00000803], "ds_store_b128 v3, v[8:11]"),
        (
            &[0xd834ffff, 0x00000f03],
            "ds_store_b32 v3, v15 offset:65535",
        ),
        (
            &[0xd73c000f, 0x00020482],
            "v_lshlrev_b64 v[15:16], 2, v[2:3]",
        ),
        (&[0xd9340000, 0x00000f03], "ds_store_b64 v3, v[15:16]"),
        (&[0x7c980203], "v_cmp_gt_u32 vcc_lo, s3, v1"),
        (&[0x7c8212c1], "v_cmp_lt_i32 vcc_lo, -1, v9"),
        (
            &[0xd44a000a, 0x0001ff03, 0x000003ff],
            "v_cmp_eq_u32_e64 s10, v3, 0x3ff",
        ),
        (&[0xd445000c, 0x00021303], "v_cmp_ne_i32_e64 s12, v3, v9"),
        (&[0xd44e006a, 0x00021205], "v_cmp_ge_u32_e64 vcc_lo, s5, v9"),
        (&[0x7c861303], "v_cmp_le_i32 vcc_lo, v3, v9"),
        (&[0xd4cc007e, 0x00020203], "v_cmpx_gt_u32_e64 s3, v1"),
        (&[0x7d961303], "v_cmpx_le_u32 v3, v9"),
        (&[0x7d8a12c4], "v_cmpx_ne_i32 -4, v9"),
        (&[0x7c9e1303], "v_cmp_t_u32 vcc_lo, v3, v9"),
        (&[0x7c801303], "v_cmp_f_i32 vcc_lo, v3, v9"),
        (&[0x7c982703], "v_cmp_gt_u32 vcc_lo, v3, v19"),
        (&[0xdc520000, 0x077c0002], "global_load_b32 v7, v[2:3], off"),
        (
            &[0xdc521ff8, 0x027c0002],
            "global_load_b32 v2, v[2:3], off offset:-8",
        ),
        (
            &[0xdc520010, 0x07040003],
            "global_load_b32 v7, v3, s[4:5] offset:16",
        ),
        (
            &[0xdc6a0000, 0x007c0902],
            "global_store_b32 v[2:3], v9, off",
        ),
        (
            &[0xdc6a0004, 0x00040903],
            "global_store_b32 v3, v9, s[4:5] offset:4",
        ),
        (
            &[0xdc520000, 0x077c000f],
            "global_load_b32 v7, v[15:16], off",
        ),
        (
            &[0xdc560000, 0x077c0002],
            "global_load_b64 v[7:8], v[2:3], off",
        ),
        (
            &[0xdc5a0010, 0x07040003],
            "global_load_b96 v[7:9], v3, s[4:5] offset:16",
        ),
        (
            &[0xdc5e1ff0, 0x067c0002],
            "global_load_b128 v[6:9], v[2:3], off offset:-16",
        ),
        (
            &[0xdc5e0000, 0x027c0002],
            "global_load_b128 v[2:5], v[2:3], off",
        ),
        (
            &[0xdc5e0000, 0x0d040003],
            "global_load_b128 v[13:16], v3, s[4:5]",
        ),
        (
            &[0xdc6e0000, 0x007c0802],
            "global_store_b64 v[2:3], v[8:9], off",
        ),
        (
            &[0xdc720008, 0x00040803],
            "global_store_b96 v3, v[8:10], s[4:5] offset:8",
        ),
        (
            &[0xdc760004, 0x007c0602],
            "global_store_b128 v[2:3], v[6:9], off offset:4",
        ),
        (
            &[0xdc760000, 0x00040c03],
            "global_store_b128 v3, v[12:15], s[4:5]",
        ),
        (
            &[0xdc760000, 0x00040d03],
            "global_store_b128 v3, v[13:16], s[4:5]",
        ),
        (&[0xdc500000, 0x077c0002], "flat_load_b32 v7, v[2:3]"),
        (
            &[0xdc500010, 0x077c0002],
            "flat_load_b32 v7, v[2:3] offset:16",
        ),
        (&[0xdc540000, 0x077c0002], "flat_load_b64 v[7:8], v[2:3]"),
        (
            &[0xdc580004, 0x077c0002],
            "flat_load_b96 v[7:9], v[2:3] offset:4",
        ),
        (&[0xdc5c0000, 0x067c0002], "flat_load_b128 v[6:9], v[2:3]"),
        (&[0xdc500000, 0x027c0002], "flat_load_b32 v2, v[2:3]"),
        (&[0xdc680000, 0x007c0902], "flat_store_b32 v[2:3], v9"),
        (
            &[0xdc6c0008, 0x007c0802],
            "flat_store_b64 v[2:3], v[8:9] offset:8",
        ),
        (&[0xdc700000, 0x007c0802], "flat_store_b96 v[2:3], v[8:10]"),
        (
            &[0xdc740004, 0x007c0602],
            "flat_store_b128 v[2:3], v[6:9] offset:4",
        ),
        (&[0x80030905], "s_add_u32 s3, s5, s9"),
        (&[0x8106c106], "s_add_i32 s6, s6, -1"),
        (&[0x8083ff05, 0x00012345], "s_sub_u32 s3, s5, 0x12345"),
        (&[0x81830987], "s_sub_i32 s3, 7, s9"),
        (&[0x82030905], "s_addc_u32 s3, s5, s9"),
        (&[0x82830905], "s_subb_u32 s3, s5, s9"),
        (&[0x89030905], "s_min_i32 s3, s5, s9"),
        (&[0x8a83c205], "s_max_u32 s3, s5, -2"),
        (&[0x8402840e], "s_lshl_b32 s2, s14, 4"),
        (&[0x8502090e], "s_lshr_b32 s2, s14, s9"),
        (&[0x86029f0e], "s_ashr_i32 s2, s14, 31"),
        (&[0x8b07ff08, 0x0000ffff], "s_and_b32 s7, s8, 0xffff"),
        (&[0x8c070908], "s_or_b32 s7, s8, s9"),
        (&[0x8d070908], "s_xor_b32 s7, s8, s9"),
        (&[0x8e070908], "s_nand_b32 s7, s8, s9"),
        (&[0x91070908], "s_and_not1_b32 s7, s8, s9"),
        (&[0x92070908], "s_or_not1_b32 s7, s8, s9"),
        (&[0x96070908], "s_mul_i32 s7, s8, s9"),
        (&[0x96870908], "s_mul_hi_u32 s7, s8, s9"),
        (&[0x97070908], "s_mul_hi_i32 s7, s8, s9"),
        (&[0x98078508], "s_cselect_b32 s7, s8, 5"),
        (&[0x87870908], "s_lshl2_add_u32 s7, s8, s9"),
        (&[0x9307ff08, 0x00050004], "s_bfe_u32 s7, s8, 0x50004"),
        (&[0x93870908], "s_bfe_i32 s7, s8, s9"),
        (&[0x95070908], "s_bfm_b32 s7, s8, s9"),
        (&[0x99070908], "s_pack_ll_b32_b16 s7, s8, s9"),
        (&[0x9a070908], "s_pack_hh_b32_b16 s7, s8, s9"),
        (&[0x83070908], "s_absdiff_i32 s7, s8, s9"),
        (&[0xbe880080], "s_mov_b32 s8, 0"),
        (&[0xbe82007e], "s_mov_b32 s2, exec_lo"),
        (&[0xbefe0002], "s_mov_b32 exec_lo, s2"),
        (&[0xbeea00ff, 0x12345678], "s_mov_b32 vcc_lo, 0x12345678"),
        (&[0xb0088001], "s_movk_i32 s8, 0x8001"),
        (&[0xb7887fff], "s_addk_i32 s8, 0x7fff"),
        (&[0xb808fff0], "s_mulk_i32 s8, 0xfff0"),
        (&[0xb1880010], "s_cmpk_eq_i32 s8, 0x10"),
        (&[0xb688fff0], "s_cmpk_lt_u32 s8, 0xfff0"),
        (&[0xb288fff0], "s_cmpk_gt_i32 s8, 0xfff0"),
        (&[0xbf068006], "s_cmp_eq_u32 s6, 0"),
        (&[0xbf090308], "s_cmp_ge_u32 s8, s3"),
        (&[0xbf010308], "s_cmp_lg_i32 s8, s3"),
        (&[0xbf04c508], "s_cmp_lt_i32 s8, -5"),
        (&[0xbf08ff08, 0x80000000], "s_cmp_gt_u32 s8, 0x80000000"),
        (&[0xbf050308], "s_cmp_le_i32 s8, s3"),
        (&[0xbf000303], "s_cmp_eq_i32 s3, s3"),
        (&[0xbf010303], "s_cmp_lg_i32 s3, s3"),
        (&[0xbf020308], "s_cmp_gt_i32 s8, s3"),
        (&[0xbf020303], "s_cmp_gt_i32 s3, s3"),
        (&[0xbf030303], "s_cmp_ge_i32 s3, s3"),
        (&[0xbf030803], "s_cmp_ge_i32 s3, s8"),
        (&[0xbf040303], "s_cmp_lt_i32 s3, s3"),
        (&[0xbf050303], "s_cmp_le_i32 s3, s3"),
        (&[0xbf060303], "s_cmp_eq_u32 s3, s3"),
        (&[0xbf070503], "s_cmp_lg_u32 s3, s5"),
        (&[0xbf080303], "s_cmp_gt_u32 s3, s3"),
        (&[0xbf090303], "s_cmp_ge_u32 s3, s3"),
        (&[0xbf0a0503], "s_cmp_lt_u32 s3, s5"),
        (&[0xbf0a0303], "s_cmp_lt_u32 s3, s3"),
        (&[0xbf0b0303], "s_cmp_le_u32 s3, s3"),
        (&[0xbf0b0503], "s_cmp_le_u32 s3, s5"),
        (&[0xb2080010], "s_cmpk_lg_i32 s8, 0x10"),
        (&[0xb3088000], "s_cmpk_ge_i32 s8, 0x8000"),
        (&[0xb4087fff], "s_cmpk_le_i32 s8, 0x7fff"),
        (&[0xb5080010], "s_cmpk_lg_u32 s8, 0x10"),
        (&[0xb5880010], "s_cmpk_gt_u32 s8, 0x10"),
        (&[0xb608ffff], "s_cmpk_ge_u32 s8, 0xffff"),
        (&[0xb7080020], "s_cmpk_le_u32 s8, 0x20"),
        (&[0x80830505], "s_sub_u32 s3, s5, s5"),
        (&[0x8a030905], "s_max_i32 s3, s5, s9"),
        (&[0x89830905], "s_min_u32 s3, s5, s9"),
        (&[0x8f070908], "s_nor_b32 s7, s8, s9"),
        (&[0x90070908], "s_xnor_b32 s7, s8, s9"),
        (&[0x99870908], "s_pack_lh_b32_b16 s7, s8, s9"),
        (&[0x87070908], "s_lshl1_add_u32 s7, s8, s9"),
        (&[0x88070908], "s_lshl3_add_u32 s7, s8, s9"),
        (&[0x88870908], "s_lshl4_add_u32 s7, s8, s9"),
        (&[0xbfa00002], "s_branch 2"),
        (&[0xbfa1fff9], "s_cbranch_scc0 65529"),
        (&[0xbfa20007], "s_cbranch_scc1 7"),
        (&[0xbfa30003], "s_cbranch_vccz 3"),
        (&[0xbfa4ffff], "s_cbranch_vccnz 65535"),
        (&[0xbfa5001b], "s_cbranch_execz 27"),
        (&[0xbfa6fffe], "s_cbranch_execnz 65534"),
        (&[0xbfb00000], "s_endpgm"),
        (&[0xbfbd0000], "s_barrier"),
        (&[0xf4000200, 0xf800002c], "s_load_b32 s8, s[0:1], 0x2c"),
        (
            &[0xf40c0000, 0xf8000000],
            "s_load_b256 s[0:7], s[0:1], null",
        ),
        (
            &[0xf4080101, 0xf8000010],
            "s_load_b128 s[4:7], s[2:3], 0x10",
        ),
        (
            &[0xf4040281, 0x12000008],
            "s_load_b64 s[10:11], s[2:3], s9 offset:0x8",
        ),
        (
            &[0xf4100402, 0xf8000000],
            "s_load_b512 s[16:31], s[4:5], 0x0",
        ),
        (
            &[0xd6fe7c01, 0x04000e0f],
            "v_mad_u64_u32 v[1:2], null, s15, s7, v[0:1]",
        ),
        (
            &[0xd6fe0a04, 0x041a1303],
            "v_mad_u64_u32 v[4:5], s10, v3, v9, v[6:7]",
        ),
        (
            &[0xd6fe6a04, 0x0011ff03, 0x00012345],
            "v_mad_u64_u32 v[4:5], vcc_lo, v3, 0x12345, s[4:5]",
        ),
        (
            &[0xd6fe7c04, 0x030e1303],
            "v_mad_u64_u32 v[4:5], null, v3, v9, -3",
        ),
        (
            &[0xd6fe7c0f, 0x041a1303],
            "v_mad_u64_u32 v[15:16], null, v3, v9, v[6:7]",
        ),
        (
            &[0xd6fe0c04, 0x043e1303],
            "v_mad_u64_u32 v[4:5], s12, v3, v9, v[15:16]",
        ),
        (&[0x020e1303], "v_cndmask_b32_e32 v7, v3, v9, vcc_lo"),
        (&[0x020e1205], "v_cndmask_b32_e32 v7, s5, v9, vcc_lo"),
        (
            &[0xd5010007, 0x00290103],
            "v_cndmask_b32_e64 v7, v3, 0, s10",
        ),
        (
            &[0xd5010007, 0x003212f2],
            "v_cndmask_b32_e64 v7, 1.0, v9, s12",
        ),
        (&[0x02221303], "v_cndmask_b32_e32 v17, v3, v9, vcc_lo"),
        (&[0x1e0e1303], "v_min_f32 v7, v3, v9"),
        (&[0x200e1205], "v_max_f32 v7, s5, v9"),
        (&[0xd50f0007, 0x00000b03], "v_min_f32_e64 v7, v3, s5"),
        (&[0xd5100007, 0x0001e509], "v_max_f32_e64 v7, v9, 1.0"),
        (&[0x1e0e12f1], "v_min_f32 v7, -0.5, v9"),
        (
            &[0xcad41303, 0x07080605],
            "v_dual_min_f32 v7, v3, v9 :: v_dual_max_f32 v8, s5, v3",
        ),
        (
            &[0xca800709, 0x07081307],
            "v_dual_max_f32 v7, v9, v3 :: v_dual_fmac_f32 v8, v7, v9",
        ),
        (&[0x7e0e0503], "v_readfirstlane_b32 s7, v3"),
        (&[0x7e000509], "v_readfirstlane_b32 s0, v9"),
        (&[0x7e280511], "v_readfirstlane_b32 s20, v17"),
        (
            &[0x580e1303, 0x40490fdb],
            "v_fmamk_f32 v7, v3, 0x40490fdb, v9",
        ),
        (
            &[0x5a0e1205, 0xc0000000],
            "v_fmaak_f32 v7, s5, v9, 0xc0000000",
        ),
        (&[0x7c221303], "v_cmp_lt_f32_e32 vcc_lo, v3, v9"),
        (&[0x7c321205], "v_cmp_nge_f32_e32 vcc_lo, s5, v9"),
        (&[0x7c301303], "v_cmp_u_f32_e32 vcc_lo, v3, v9"),
        (&[0xd41d0207, 0x20021303], "v_cmp_neq_f32_e64 s7, -v3, |v9|"),
        (&[0xd4150107, 0x0001e703], "v_cmp_lg_f32_e64 s7, |v3|, -1.0"),
        (&[0x7d281303], "v_cmpx_gt_f32_e32 v3, v9"),
        (&[0xd493017e, 0x20021303], "v_cmpx_le_f32_e64 -|v3|, v9"),
        (&[0x7cfc1303], "v_cmp_class_f32_e32 vcc_lo, v3, v9"),
        (
            &[0xd47e0007, 0x2001ff03, 0x000003fc],
            "v_cmp_class_f32_e64 s7, -v3, 0x3fc",
        ),
        (&[0x7c2e06f0], "v_cmp_o_f32_e32 vcc_lo, 0.5, v3"),
        (&[0x7c3e1303], "v_cmp_t_f32_e32 vcc_lo, v3, v9"),
        (&[0x7c201303], "v_cmp_f_f32_e32 vcc_lo, v3, v9"),
        (&[0xd41a0007, 0x00000b03], "v_cmp_nlg_f32_e64 s7, v3, s5"),
        (&[0x7c240680], "v_cmp_eq_f32_e32 vcc_lo, 0, v3"),
        (
            &[0xc8821303, 0x07080709, 0x3f800000],
            "v_dual_fmamk_f32 v7, v3, 0x3f800000, v9 :: v_dual_fmaak_f32 v8, v9, v3, 0x3f800000",
        ),
        (&[0x7dfc1303], "v_cmpx_class_f32_e32 v3, v9"),
        (&[0xd7600007, 0x00000b03], "v_readlane_b32 s7, v3, s5"),
        (&[0xd7600007, 0x00014303], "v_readlane_b32 s7, v3, 33"),
        (&[0xd7610007, 0x00000c05], "v_writelane_b32 v7, s5, s6"),
        (&[0xd7610007, 0x00010a91], "v_writelane_b32 v7, 17, 5"),
        (&[0xd71f0007, 0x000100c1], "v_mbcnt_lo_u32_b32 v7, -1, 0"),
        (&[0xd7200007, 0x00020605], "v_mbcnt_hi_u32_b32 v7, s5, v3"),
        (&[0xd71f0007, 0x00021303], "v_mbcnt_lo_u32_b32 v7, v3, v9"),
        (&[0xbe802002], "s_and_saveexec_b32 s0, s2"),
        (&[0xbe83226a], "s_or_saveexec_b32 s3, vcc_lo"),
        (&[0xbe8424c1], "s_xor_saveexec_b32 s4, -1"),
        (&[0xbe863008], "s_and_not1_saveexec_b32 s6, s8"),
        (&[0xbe802102], "s_and_saveexec_b64 s[0:1], s[2:3]"),
        (&[0xbe84017e], "s_mov_b64 s[4:5], exec"),
        (&[0xbefe0106], "s_mov_b64 exec, s[6:7]"),
        (&[0xbe8801ff, 0x00001234], "s_mov_b64 s[8:9], 0x1234"),
        (&[0x8c808502], "s_or_b64 s[0:1], s[2:3], 5"),
        (&[0x84820604], "s_lshl_b64 s[2:3], s[4:5], s6"),
        (&[0x988080c1], "s_cselect_b64 s[0:1], -1, 0"),
        (&[0x8dfe027e], "s_xor_b64 exec, exec, s[2:3]"),
        (&[0x91ea047e], "s_and_not1_b64 vcc, exec, s[4:5]"),
        (&[0xbe800801], "s_ctz_i32_b32 s0, s1"),
        (&[0xbe800880], "s_ctz_i32_b32 s0, 0"),
        (&[0xbe821803], "s_bcnt1_i32_b32 s2, s3"),
        (&[0xbe840405], "s_brev_b32 s4, s5"),
        (&[0x8b887e6a], "s_and_b64 s[8:9], vcc, exec"),
        (
            &[0x9400ff02, 0x00080004],
            "s_bfe_u64 s[0:1], s[2:3], 0x80004",
        ),
        (&[0xd6130207, 0x20161303], "v_fma_f32 v7, -v3, |v9|, s5"),
        (&[0xd5088007, 0x00021303], "v_mul_f32_e64 v7, v3, v9 clamp"),
        (
            &[0xd5030107, 0x0801eb03],
            "v_add_f32_e64 v7, |v3|, -2.0 mul:2",
        ),
        (&[0xd5100007, 0x38021303], "v_max_f32_e64 v7, -v3, v9 div:2"),
        (
            &[0xd5048107, 0x30020605],
            "v_sub_f32_e64 v7, -|s5|, v3 clamp mul:4",
        ),
        (&[0xd50f0307, 0x40020709], "v_min_f32_e64 v7, |v9|, -|v3|"),
        (
            &[0xd6138007, 0x8425ff03, 0x40490fdb],
            "v_fma_f32 v7, v3, 0x40490fdb, -v9 clamp",
        ),
    ];

    /// Flat accesses with registers beyond the test wave's 16 VGPRs: the general executor's
    /// checks, lane by lane, decide their faults, so they run there.
    const FLAT_OUT_OF_RANGE: &[(&[u32], &str)] = &[
        (&[0xdc5c0000, 0x0d7c0002], "flat_load_b128 v[13:16], v[2:3]"),
        (&[0xdc680000, 0x007c090f], "flat_store_b32 v[15:16], v9"),
    ];

    fn mix(k: u32, seed: u32) -> u32 {
        let h = (k ^ seed.wrapping_mul(0x85eb_ca6b)).wrapping_mul(2_654_435_761);
        let h = h ^ h >> 15;
        // Small values, LDS addresses (aligned or not), float-looking values, NaNs and
        // infinities, anything.
        match h >> 29 {
            0 => h & 63,
            1 => h & 0xffc,
            2 => h & 0x1fff,
            // Signed zeros, infinities, quiet and signalling NaNs.
            3 if h & 3 == 0 => h & 0x8000_0000,
            3 => 0x7f80_0000 | (h & 0x8040_0001),
            4 | 5 => (h & 0x8000_0000) | (0x3000_0000 + (h & 0x1fff_ffff)),
            _ => h.wrapping_mul(0x9e37_79b9),
        }
    }

    fn wave(lanes: usize, seed: u32, exec: u64, rsrc1: u32) -> Wave {
        let nvgpr = 16;
        let mut w = Wave {
            sgpr: std::array::from_fn(|k| mix(k as u32 + 0x1000, seed)),
            vgpr: {
                let mut v = super::super::vgpr_file();
                for (k, x) in v[..nvgpr * lanes].iter_mut().enumerate() {
                    *x = mix(k as u32, seed);
                }
                v
            },
            vgpr_used: nvgpr * lanes,
            nvgpr,
            acc: super::super::AccRegs::default(),
            lanes,
            scc: seed & 1 != 0,
            pc: 0,
            done: false,
            at_barrier: false,
            flat_scratch: 0,
            slot: 0,
            tmp: Box::new([[0; 64]; 4]),
            rsrc1,
        };
        w.set_exec(exec);
        w
    }

    /// Global memory of the tests: `MEM_BYTES` from `MEM_BASE`, filled from `seed`.
    const MEM_BASE: u64 = 0x1_0000;
    const MEM_BYTES: usize = 0x8000;

    fn memory(seed: u32) -> FlatMemory {
        let m = FlatMemory::new(MEM_BASE, MEM_BYTES);
        let bytes: Vec<u8> = (0..MEM_BYTES as u32).map(|k| mix(k, seed) as u8).collect();
        m.write(MEM_BASE, &bytes).expect("in range");
        m
    }

    /// The general executor's run of `i` (as the issue loop falls back to it) and the flow it
    /// returns.
    fn general(
        w: &mut Wave,
        lds: &mut [u8],
        mem: &FlatMemory,
        i: &Inst,
        pc: u64,
    ) -> Result<&'static str, ExecFault> {
        let d = crate::Dispatch {
            code_address: 0,
            pgm_rsrc1: w.rsrc1,
            pgm_rsrc2: 0,
            pgm_rsrc3: 0,
            user_sgprs: Vec::new(),
            grid_items: [w.lanes as u32, 1, 1],
            group_size: [w.lanes as u32, 1, 1],
            wave64: w.lanes == 64,
            lds_bytes: 0,
            scratch: None,
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let ctx = super::super::Ctx {
            d: &d,
            isa: crate::Isa::Gfx11,
            stop: &stop,
            lanes: w.lanes,
            nvgpr: w.nvgpr,
            acc: w.acc,
            waves_per_group: 1,
            wave_bytes: 0,
            wide: Wide::detect(),
        };
        let r = super::super::step(&ctx, w, lds, mem, i, pc);
        r.map(|f| match f {
            super::super::Flow::Next => "next",
            super::super::Flow::Yield => "yield",
            super::super::Flow::MayYield => "may yield",
        })
    }

    /// Runs `i`'s fast form on `a` and the general executor on `b` (the same wave, each with
    /// its own copy of `seed`'s memory) and asserts the same outcome: flow or fault, registers,
    /// memory.
    /// Whether the fast form deferred to the general executor (as the issue loop then does).
    fn same_as_general(i: &Inst, mut a: Wave, mut b: Wave, seed: u32, ctx: &str) -> bool {
        let s = Slot::new(*i);
        let (mem_a, mem_b) = (memory(seed), memory(seed));
        let (mut lds_a, mut lds_b) = (vec![0u8; 64], vec![0u8; 64]);
        let pc = 0x1000;
        a.pc = pc + 4 * i.len as u64;
        b.pc = a.pc;
        let mut tlb = Tlb::new(&mem_a);
        let ra = run(Wide::detect(), &mut a, &mut lds_a, &mut tlb, &s.fast, pc);
        let fell_back = matches!(ra, Ok(Ran::General));
        let ra = if fell_back {
            general(&mut a, &mut lds_a, &mem_a, i, pc)
        } else {
            ra.map(|r| match r {
                Ran::Done => "next",
                Ran::Yield => "yield",
                Ran::MayYield => "may yield",
                Ran::General => "general",
            })
        };
        let rb = general(&mut b, &mut lds_b, &mem_b, i, pc);
        assert_eq!(format!("{ra:?}"), format!("{rb:?}"), "{ctx}");
        let first = a.vgpr.iter().zip(b.vgpr.iter()).position(|(x, y)| x != y);
        assert_eq!(first, None, "{ctx}: first differing VGPR word");
        assert_eq!(a.sgpr, b.sgpr, "{ctx}: SGPRs");
        let (mut ma, mut mb) = (vec![0u8; MEM_BYTES], vec![0u8; MEM_BYTES]);
        mem_a.read(MEM_BASE, &mut ma).expect("in range");
        mem_b.read(MEM_BASE, &mut mb).expect("in range");
        assert!(ma == mb, "{ctx}: memory");
        assert!(lds_a == lds_b, "{ctx}: LDS");
        fell_back
    }

    /// The 64-bit shifts on 32-bit halves, by every count 0-63 (one per lane of a wave64, and
    /// counts with high bits set), of values with both halves' top bits set and clear.
    #[test]
    fn shifts64_by_every_count_equal_the_general_executor() {
        type Case = (&'static [u32], &'static str, fn(u64, u32) -> u64);
        let cases: [Case; 3] = [
            (
                &[0xd73c0004, 0x00020d03],
                "v_lshlrev_b64 v[4:5], v3, v[6:7]",
                |v, s| v << s,
            ),
            (
                &[0xd73d0004, 0x00020d03],
                "v_lshrrev_b64 v[4:5], v3, v[6:7]",
                |v, s| v >> s,
            ),
            (
                &[0xd73e0004, 0x00020d03],
                "v_ashrrev_i64 v[4:5], v3, v[6:7]",
                |v, s| ((v as i64) >> s) as u64,
            ),
        ];
        for (words, text, host) in cases {
            let i = decode(words).expect("LLVM's encoding decodes");
            assert!(matches!(Slot::new(i).fast, Fast::Shift64 { .. }), "{text}");
            for (k, (lo, hi)) in [
                (0x8765_4321u32, 0xfedc_ba98u32),
                (0x1234_5678, 0x7654_3210),
                (u32::MAX, 0),
            ]
            .into_iter()
            .enumerate()
            {
                let seed = 9000 + k as u32;
                let (mut a, mut b) = (wave(64, seed, u64::MAX, 0), wave(64, seed, u64::MAX, 0));
                for w in [&mut a, &mut b] {
                    for l in 0..64 {
                        w.vgpr[3 * 64 + l] = l as u32 | if k == 1 { 0xffff_ff00 } else { 0 };
                        w.vgpr[6 * 64 + l] = lo;
                        w.vgpr[7 * 64 + l] = hi;
                    }
                }
                let expect: Vec<u64> = (0..64u32)
                    .map(|s| host((hi as u64) << 32 | lo as u64, s))
                    .collect();
                let mut c = wave(64, seed, u64::MAX, 0);
                c.vgpr.copy_from_slice(&a.vgpr[..]);
                let ctx = format!("{text}, value {hi:#x}:{lo:#x}");
                same_as_general(&i, a, b, seed, &ctx);
                let mut lds = vec![0u8; 64];
                let mem = memory(seed);
                let mut tlb = Tlb::new(&mem);
                let r = run(
                    Wide::detect(),
                    &mut c,
                    &mut lds,
                    &mut tlb,
                    &Slot::new(i).fast,
                    0,
                );
                assert!(matches!(r, Ok(Ran::Done)), "{ctx}");
                for (l, want) in expect.iter().enumerate() {
                    let got = c.vgpr[4 * 64 + l] as u64 | (c.vgpr[5 * 64 + l] as u64) << 32;
                    assert_eq!(got, *want, "{ctx}, count {l}");
                }
            }
        }
    }

    /// LDS loads of a matmul's tile patterns at the end of the (64-byte) LDS: one address
    /// for all lanes at the last dword (its 32-byte load would pass the end), a half-wave's
    /// row ending at the last dword and one dword past it, rows of four broadcasts.
    #[test]
    fn lds_tile_loads_at_the_end_equal_the_general_executor() {
        let mut seed = 7000;
        type Pattern = (&'static str, fn(u32) -> u32);
        let patterns: [Pattern; 4] = [
            ("one address, the last dword", |_| 60),
            ("a row per half-wave, to the end", |l| 4 * (l % 16)),
            ("a row per half-wave, one dword past", |l| 4 + 4 * (l % 16)),
            ("a broadcast per 8 lanes", |l| 48 + 4 * (l / 8 % 4)),
        ];
        for (words, text) in CASES {
            let i = decode(words).expect("LLVM's encoding decodes");
            if !text.starts_with("ds_load") || i.src[0] >= 256 + 16 {
                continue;
            }
            for lanes in [32, 64] {
                for (what, at) in patterns {
                    seed += 1;
                    let full = u64::MAX >> (64 - lanes);
                    let (mut a, mut b) = (wave(lanes, seed, full, 0), wave(lanes, seed, full, 0));
                    let r = (i.src[0] as usize - 256) * lanes;
                    for w in [&mut a, &mut b] {
                        for l in 0..lanes {
                            w.vgpr[r + l] = at(l as u32);
                        }
                    }
                    same_as_general(&i, a, b, seed, &format!("{text}, wave{lanes}, {what}"));
                }
            }
        }
    }

    /// Scalar loads through a window: ending at memory's last word, one word past it (a
    /// fault), unaligned (the address's low bits dropped).
    #[test]
    fn scalar_loads_at_memory_end_equal_the_general_executor() {
        let mut seed = 5000;
        for (words, text) in CASES {
            let i = decode(words).expect("LLVM's encoding decodes");
            if i.format != Format::Smem {
                continue;
            }
            let n = [1u32, 2, 4, 8, 16]
                .into_iter()
                .find(|n| text.contains(&format!("_b{} ", 32 * n)))
                .expect("a dword count");
            let (base, soff) = ((i.src[0] & !1) as usize, i.saddr as usize);
            let end = MEM_BASE as u32 + MEM_BYTES as u32 - 4 * n - i.imm as u32;
            for (what, at) in [
                ("to the end", end),
                ("past it", end + 4),
                ("unaligned", end + 3),
            ] {
                seed += 1;
                let (mut a, mut b) = (wave(32, seed, 1, 0), wave(32, seed, 1, 0));
                for w in [&mut a, &mut b] {
                    w.sgpr[base] = at;
                    w.sgpr[base + 1] = 0;
                    if soff < 106 {
                        w.sgpr[soff] = 0;
                    }
                }
                same_as_general(&i, a, b, seed, &format!("{text}, {what}"));
            }
        }
    }

    /// Global accesses whose lanes lie back to back (the one-copy path) and its edges: the run
    /// ending at memory's last word or one word past it, a base not word-aligned, the low
    /// address words carrying out (lanes past 4 GiB of the base, unmapped), a lane out of
    /// step, partial EXEC; for 64-bit addresses a lane in the LDS or private aperture (a flat
    /// access then runs on the general executor).
    #[test]
    fn global_runs_equal_the_general_executor() {
        let mut seed = 1000;
        for (words, text) in CASES.iter().chain(FLAT_OUT_OF_RANGE) {
            let i = decode(words).expect("LLVM's encoding decodes");
            let flat = i.format == Format::Flat;
            let wide = matches!(Slot::new(i).fast, Fast::GlobalDword { top, .. } if top > 16);
            if !flat && i.format != Format::Global {
                continue;
            }
            let r = (i.src[0] as usize).checked_sub(256).filter(|&r| r < 15);
            let Some(r) = r else { continue };
            let pair = i.saddr == 124;
            let rows = [1u32, 2, 3, 4]
                .into_iter()
                .find(|n| text.contains(&format!("_b{} ", 32 * n)))
                .expect("a dword count");
            for lanes in [32usize, 64] {
                let full = if lanes == 32 {
                    u32::MAX as u64
                } else {
                    u64::MAX
                };
                let span = 4 * rows * lanes as u32;
                let none = usize::MAX;
                let layouts: [(&str, u32, usize, u32); 8] = [
                    ("from 0x100", 0x100, none, 0),
                    ("to the end", MEM_BYTES as u32 - span, none, 0),
                    (
                        "one word past the end",
                        MEM_BYTES as u32 - span + 4,
                        none,
                        0,
                    ),
                    ("unaligned", 0x102, none, 0),
                    ("lane 5 out of step", 0x100, 5, 0),
                    ("carry out of the low word", 0, none, 0),
                    ("lane 3 in the LDS aperture", 0x10, 3, SHARED_APERTURE_HI),
                    (
                        "lane 3 in the private aperture",
                        0x10,
                        3,
                        PRIVATE_APERTURE_HI,
                    ),
                ];
                for (what, start, odd, aperture) in layouts {
                    for exec in [full, full & !1, 0x0ff0] {
                        seed += 1;
                        let (mut a, mut b) =
                            (wave(lanes, seed, exec, 0), wave(lanes, seed, exec, 0));
                        for w in [&mut a, &mut b] {
                            // The scalar base: memory's start, or (for the carry) 64 bytes
                            // below 4 GiB under it, so that lanes past 2^32 - 1 wrap away.
                            let carry = what.starts_with("carry");
                            let sbase = if carry {
                                MEM_BASE.wrapping_sub(0xffff_ffc0)
                            } else {
                                MEM_BASE
                            };
                            w.sgpr[4] = sbase as u32;
                            w.sgpr[5] = (sbase >> 32) as u32;
                            for l in 0..lanes {
                                let mut off = if carry {
                                    0xffff_ffc0u32.wrapping_add(4 * rows * l as u32)
                                } else {
                                    start + 4 * rows * l as u32
                                };
                                if l == odd && aperture == 0 {
                                    off += 4;
                                }
                                if pair {
                                    // 64-bit addresses: the base is in the VGPRs.
                                    // (The carry: lanes below 4 GiB, unmapped, and past it.)
                                    let at = if carry {
                                        off as u64
                                    } else {
                                        sbase.wrapping_add(off as u64)
                                    };
                                    let high = if l == odd && aperture != 0 {
                                        aperture
                                    } else {
                                        (at >> 32) as u32
                                    };
                                    w.vgpr[r * lanes + l] = at as u32;
                                    w.vgpr[(r + 1) * lanes + l] = high;
                                } else {
                                    w.vgpr[r * lanes + l] = off;
                                }
                            }
                        }
                        let ctx = format!("{text}, wave{lanes}, {what}, exec {exec:#x}");
                        let fell_back = same_as_general(&i, a, b, seed, &ctx);
                        let aperture_lane = aperture != 0 && pair && exec >> odd & 1 != 0;
                        assert_eq!(
                            fell_back,
                            flat && (aperture_lane || wide),
                            "{ctx}: fell back"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn fast_forms_equal_the_general_executor() {
        let lds: Vec<u8> = (0..4096u32).map(|k| mix(k, 99) as u8).collect();
        let mut seed = 0;
        for (words, text) in CASES {
            let i = decode(words).expect("LLVM's encoding decodes");
            let s = Slot::new(i);
            assert!(!matches!(s.fast, Fast::General), "{text}: no fast form");
            let mut fell_back = false;
            for lanes in [32, 64] {
                let full = if lanes == 32 {
                    u32::MAX as u64
                } else {
                    u64::MAX
                };
                for exec in [full, 0, 1 << (lanes - 1) | 1, 0x5a5a_a5a5_0ff0_f00f & full] {
                    // Keeping denormals (the fast forms run; IEEE mode off and on) and
                    // flushing them (floats fall back to the general executor).
                    for rsrc1 in [0xf << 16, 0xf << 16 | 1 << 23, 0] {
                        seed += 1;
                        let (mut a, mut b) = (
                            wave(lanes, seed, exec, rsrc1),
                            wave(lanes, seed, exec, rsrc1),
                        );
                        if i.format == Format::Ds && seed % 3 != 2 && i.src[0] < 256 + 16 {
                            // LDS addresses in range for every lane, or for most; every
                            // other time at consecutive dwords (from an aligned base or not).
                            let r = (i.src[0] as usize - 256) * lanes;
                            let m = if seed % 3 == 0 { 0x7ff } else { 0xfff };
                            let next = seed % 4 < 2;
                            for w in [&mut a, &mut b] {
                                for (l, x) in w.vgpr[r..r + lanes].iter_mut().enumerate() {
                                    *x &= m;
                                    // A matmul's tiles: one address per 16 lanes (a row
                                    // broadcast), or each half-wave at the same dwords.
                                    if seed % 4 == 3 && seed / 24 % 3 == 0 {
                                        *x = 0x200 + 64 * (l as u32 / 16);
                                    } else if seed % 4 == 3 && seed / 24 % 3 == 1 {
                                        *x = 0x300 + 4 * (l as u32 % 16);
                                    }
                                    if next {
                                        *x = (seed % 4) * 2 + 0x100 + 4 * l as u32;
                                        if seed % 3 == 1 {
                                            // The highest lanes past the LDS.
                                            *x += 4096 - 4 * lanes as u32;
                                        }
                                    }
                                }
                            }
                        }
                        let vmem = matches!(i.format, Format::Global | Format::Flat);
                        if vmem && seed % 3 != 2 {
                            // Addresses in memory (consecutive dwords, lanes 4 to 16 bytes
                            // apart, or scattered, or at its end so some lanes' accesses
                            // leave it), the scalar base at its start.
                            let stride = 4 * (1 + (seed / 3) % 4);
                            let end = seed % 5 == 0;
                            let (r, pair) = ((i.src[0] as usize - 256) * lanes, i.saddr == 124);
                            let base = if pair { MEM_BASE as u32 } else { 0 };
                            for w in [&mut a, &mut b] {
                                w.sgpr[4] = MEM_BASE as u32;
                                w.sgpr[5] = 0;
                                for l in 0..lanes {
                                    let off = if end {
                                        MEM_BYTES as u32 - 32 + 4 * (l as u32 % 8)
                                    } else if seed % 3 == 0 {
                                        0x100 + stride * l as u32
                                    } else {
                                        mix(l as u32, seed)
                                            & if seed % 7 == 3 { 0x7ff } else { 0x7fc }
                                    };
                                    if r + lanes + l < w.nvgpr * lanes {
                                        w.vgpr[r + l] = base + off;
                                        if pair {
                                            w.vgpr[r + lanes + l] = 0;
                                        }
                                    }
                                }
                            }
                        }
                        if i.format == Format::Smem && seed % 3 != 2 {
                            // A base in memory (not always aligned), a small offset register.
                            let (base, soff) = ((i.src[0] & !1) as usize, i.saddr as usize);
                            for w in [&mut a, &mut b] {
                                w.sgpr[base] = MEM_BASE as u32 + (mix(1, seed) & 0x1fff);
                                w.sgpr[base + 1] = 0;
                                if soff < 106 {
                                    w.sgpr[soff] = mix(2, seed) & 0xff;
                                }
                            }
                        }
                        let (mem_a, mem_b) = (memory(seed), memory(seed));
                        let (mut lds_a, mut lds_b) = (lds.clone(), lds.clone());
                        // The issue loop advances the PC before it issues.
                        let pc = 0x1000;
                        a.pc = pc + 4 * i.len as u64;
                        b.pc = a.pc;
                        let mut tlb = Tlb::new(&mem_a);
                        let ra = run(Wide::detect(), &mut a, &mut lds_a, &mut tlb, &s.fast, pc);
                        if matches!(ra, Ok(Ran::General)) {
                            fell_back = true;
                            continue;
                        }
                        let ra = ra.map(|r| match r {
                            Ran::Done => "next",
                            Ran::Yield => "yield",
                            Ran::MayYield => "may yield",
                            Ran::General => "general",
                        });
                        let rb = general(&mut b, &mut lds_b, &mem_b, &i, pc);
                        let ctx = format!("{text}, wave{lanes}, exec {exec:#x}");
                        assert_eq!(format!("{ra:?}"), format!("{rb:?}"), "{ctx}");
                        assert_eq!(a.pc, b.pc, "{ctx}: PC");
                        assert_eq!(
                            (a.done, a.at_barrier),
                            (b.done, b.at_barrier),
                            "{ctx}: ended, at a barrier"
                        );
                        let first = a.vgpr.iter().zip(b.vgpr.iter()).position(|(x, y)| x != y);
                        assert_eq!(first, None, "{ctx}: first differing VGPR word");
                        assert_eq!(a.sgpr, b.sgpr, "{ctx}: SGPRs");
                        assert_eq!(a.scc, b.scc, "{ctx}: SCC");
                        // A fault ends the dispatch and its groups' LDS with it: only a
                        // completed store's LDS is observable.
                        assert!(rb.is_err() || lds_a == lds_b, "{ctx}: LDS");
                        let (mut ma, mut mb) = (vec![0u8; MEM_BYTES], vec![0u8; MEM_BYTES]);
                        mem_a.read(MEM_BASE, &mut ma).expect("in range");
                        mem_b.read(MEM_BASE, &mut mb).expect("in range");
                        assert!(ma == mb, "{ctx}: memory");
                    }
                }
            }
            // (The class test reads its source's bits, denormal or not.)
            let float = text.contains("_f32") && !text.contains("class");
            assert_eq!(
                fell_back, float,
                "{text}: only float forms defer to a flushing mode"
            );
        }
    }
}
