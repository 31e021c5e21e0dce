//! Vector ALU semantics (VOP1, VOP2, VOPC, VOP3, VOP3SD, VOPD): operand fetch with inline
//! constants, literals, DPP and abs/neg modifiers, then one tight loop over the lanes of a wave.
//!
//! Sources are gathered into per-operand `[u64; 64]` lane arrays (64-bit operands occupy two
//! VGPRs), the operation runs as a monomorphic closure over active lanes, and the result is
//! written back under EXEC. Does not own scalar or memory instructions (see `exec`).

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use std::sync::OnceLock;

use crate::ExecFault;
use crate::decode::{Dpp, Format, Inst, Isa, Sdwa, src};
use crate::disasm::{self, Widths};
use crate::opcodes::op_valu::*;

mod div;
mod dot;
mod mfma;
mod ops;
pub(crate) use ops::{add_f32, f32_class, fcmp, lane_of, mbcnt, min_max_f32, mul_f32};
mod wmma;

/// The part of a wave the VALU touches.
pub(crate) struct WaveRef<'a> {
    pub sgpr: &'a mut [u32; 128],
    pub vgpr: &'a mut [u32],
    pub nvgpr: usize,
    pub acc: crate::exec::AccRegs,
    pub lanes: usize,
    pub scc: &'a mut bool,
    /// COMPUTE_PGM_RSRC1 FLOAT_DENORM_MODE_32 / _16_64 ask to flush denormals (mode 3 keeps
    /// them, the LLVM default; any other mode is treated as flush in and out).
    pub ftz32: bool,
    pub ftz16_64: bool,
    /// COMPUTE_PGM_RSRC1 IEEE_MODE (see [`ieee_mode`]).
    pub ieee: bool,
}

/// COMPUTE_PGM_RSRC1 IEEE_MODE (bit 23 on GFX6-GFX11; LLVM sets it for compute kernels):
/// `v_min_f32`/`v_max_f32` then quiet a signalling NaN source.
pub(crate) fn ieee_mode(rsrc1: u32) -> bool {
    (rsrc1 >> 23) & 1 != 0
}

/// Flushes denormal values of `kind` (see `OpInfo::src_fp`) to signed zero.
fn flush(v: &mut Lanes, n: usize, kind: u8) {
    let (exp, sign) = match kind {
        1 => (0x7f80_0000u64, 0x8000_0000u64),
        2 => (0x7ff0_0000_0000_0000, 0x8000_0000_0000_0000),
        _ => (0x7c00, 0x8000),
    };
    for x in v.iter_mut().take(n) {
        if *x & exp == 0 {
            *x &= sign;
        }
    }
}

#[derive(Clone, Copy)]
struct OpInfo {
    w: Widths,
    f16: bool,
    f64src: bool,
    /// Sources are 16-bit (op_sel picks the half).
    src16: bool,
    /// Destination is 16-bit (the other half of the register is preserved).
    dst16: bool,
    /// Float kind of the sources and of the result, for denormal flushing (0 none, 1 f32,
    /// 2 f64, 3 f16).
    src_fp: u8,
    dst_fp: u8,
}

fn fp_kind(t: Option<&&str>) -> u8 {
    match t.copied() {
        Some("f32") => 1,
        Some("f64") => 2,
        Some("f16") => 3,
        _ => 0,
    }
}

/// Semantic ids of VALU operations lie below this: gfx1100's 1024, GFX12's new ones past
/// them, GFX9's past those (`tables::GFX9_NEW`).
const VALU_IDS: usize = 3072;

fn info(op: u16) -> OpInfo {
    // Each entry computed when first asked for: a first launch pays for its own operations'
    // string work, not for all of them.
    static T: [OnceLock<OpInfo>; VALU_IDS] = [const { OnceLock::new() }; VALU_IDS];
    match T.get(op as usize) {
        Some(e) => *e.get_or_init(|| op_info(op)),
        None => op_info(op),
    }
}

fn op_info(op: u16) -> OpInfo {
    let n = disasm::valu_name(op);
    let t: Vec<&str> = n
        .split('_')
        .filter(|t| {
            t.len() > 1
                && matches!(t.as_bytes()[0], b'f' | b'i' | b'u' | b'b')
                && t[1..].parse::<u32>().is_ok()
        })
        .collect();
    let is16 = |t: Option<&&str>| t.is_some_and(|t| t.ends_with("16") && !t.starts_with("pk"));
    let cmp = n.starts_with("v_cmp");
    let pk = n.contains("_pk_") || n.starts_with("v_pack") || n.contains("dot2");
    // Packed sources, one 16-bit result.
    let dot16 = n == "v_dot2_f16_f16" || n == "v_dot2_bf16_bf16";
    OpInfo {
        w: disasm::valu_widths(op),
        f16: t.last().is_some_and(|t| *t == "f16"),
        f64src: n.ends_with("f64"),
        src16: !pk && is16(t.last()),
        dst16: dot16 || (!pk && !cmp && is16(t.first())),
        // Class tests must see denormals; moves and selects move bits.
        src_fp: if n.contains("class") || pk {
            0
        } else {
            fp_kind(t.last())
        },
        dst_fp: if cmp || pk || n.contains("class") {
            0
        } else {
            fp_kind(t.first())
        },
    }
}

/// One value per lane (64-bit operands whole).
pub(crate) type Lanes = [u64; 64];

fn f(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
fn fb(x: f32) -> u64 {
    x.to_bits() as u64
}
fn h(x: u64) -> f64 {
    half::f16::from_bits(x as u16).to_f64()
}
/// Rounds to f16 once (f64 holds every f16 sum, product and fma exactly enough for that).
fn hb(x: f64) -> u64 {
    half::f16::from_f64(x).to_bits() as u64
}
fn d(x: u64) -> f64 {
    f64::from_bits(x)
}
fn db(x: f64) -> u64 {
    x.to_bits()
}

impl WaveRef<'_> {
    fn full(&self) -> u64 {
        if self.lanes == 32 {
            0xffff_ffff
        } else {
            u64::MAX
        }
    }
    fn exec(&self) -> u64 {
        if self.lanes == 32 {
            self.sgpr[126] as u64
        } else {
            self.sgpr[126] as u64 | (self.sgpr[127] as u64) << 32
        }
    }
    fn sread(&self, s: u16, lit: u32, f16: bool) -> u32 {
        match s {
            0..=123 | 125..=127 => self.sgpr[s as usize],
            124 => 0,
            128..=192 => (s - 128) as u32,
            193..=208 => (-((s - 192) as i32)) as u32,
            240..=248 if f16 => [
                0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118,
            ][(s - 240) as usize],
            240..=247 => {
                [0.5f32, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0][(s - 240) as usize].to_bits()
            }
            248 => 0x3e22_f983,
            235 | 236 => crate::exec::SHARED_APERTURE_HI,
            237 | 238 => crate::exec::PRIVATE_APERTURE_HI,
            251 => (self.mask(src::VCC_LO) == 0) as u32,
            252 => (self.exec() == 0) as u32,
            253 => *self.scc as u32,
            255 => lit,
            _ => 0,
        }
    }
    fn mask(&self, s: u16) -> u64 {
        let lo = self.sread(s, 0, false) as u64;
        if self.lanes == 32 {
            lo
        } else {
            lo | (self.sread(s + 1, 0, false) as u64) << 32
        }
    }
    fn swrite(&mut self, s: u16, v: u32) {
        if s < 128 && s != 124 {
            self.sgpr[s as usize] = v;
        }
        if self.lanes == 32 {
            self.sgpr[127] = 0;
        }
    }
    fn set_mask(&mut self, s: u16, v: u64) {
        self.swrite(s, v as u32);
        // The null register names no pair: M0 after it is not the mask's high half.
        if self.lanes == 64 && s != src::NULL {
            self.swrite(s + 1, (v >> 32) as u32);
        }
    }
    fn row(&self, r: u16, pc: u64) -> Result<usize, ExecFault> {
        // A non-VGPR operand here (r < 256) wraps to a huge index and is rejected below.
        let r = (r as usize).wrapping_sub(256);
        match crate::exec::reg_row(r, self.nvgpr, self.acc) {
            Some(r) => Ok(r * self.lanes),
            None => Err(ExecFault::VgprOutOfRange { address: pc }),
        }
    }
    /// Gathers operand `s` of `width` dwords into lane values.
    fn fetch(
        &self,
        s: u16,
        width: u8,
        lit: u32,
        oi: OpInfo,
        out: &mut Lanes,
        pc: u64,
    ) -> Result<(), ExecFault> {
        let n = self.lanes;
        if s >= 256 {
            let r = self.row(s, pc)?;
            if width == 2 {
                let h = self.row(s + 1, pc)?;
                let (lo, hi) = (&self.vgpr[r..r + n], &self.vgpr[h..h + n]);
                for ((o, a), b) in out.iter_mut().zip(lo).zip(hi) {
                    *o = *a as u64 | (*b as u64) << 32;
                }
            } else {
                for (o, a) in out.iter_mut().zip(&self.vgpr[r..r + n]) {
                    *o = *a as u64;
                }
            }
            return Ok(());
        }
        let v = if width == 2 {
            match s {
                0..=127 if s != 124 => {
                    let b = (s & !1) as usize;
                    self.sgpr[b] as u64 | (self.sgpr[b + 1] as u64) << 32
                }
                128..=208 => self.sread(s, lit, false) as i32 as i64 as u64,
                240..=248 => [
                    0.5f64,
                    -0.5,
                    1.0,
                    -1.0,
                    2.0,
                    -2.0,
                    4.0,
                    -4.0,
                    0.15915494309189532,
                ][(s - 240) as usize]
                    .to_bits(),
                255 if oi.f64src => (lit as u64) << 32,
                235..=238 => {
                    (self.sread(s, lit, false) as u64) << 32
                        | if matches!(s, 236 | 238) {
                            0xffff_ffff
                        } else {
                            0
                        }
                }
                _ => self.sread(s, lit, false) as u64,
            }
        } else {
            self.sread(s, lit, oi.f16) as u64
        };
        out[..n].fill(v);
        Ok(())
    }
}

/// Applies DPP lane selection to `a` (in place); returns lanes whose write is disabled.
fn apply_dpp(dpp: Dpp, a: &mut Lanes, lanes: usize, exec: u64) -> u64 {
    let orig = *a;
    let mut disabled = 0u64;
    match dpp {
        Dpp::Dpp8 { sel, .. } => {
            for l in 0..lanes {
                let s = (l & !7) + ((sel >> (3 * (l & 7))) & 7) as usize;
                a[l] = orig[s];
            }
        }
        Dpp::Dpp16 {
            ctrl,
            row_mask,
            bank_mask,
            bound_ctrl,
            fi,
        } => {
            for l in 0..lanes {
                let row = l & !15;
                let r = l & 15;
                let srcl: Option<usize> = match ctrl {
                    0x000..=0x0ff => Some((l & !3) + ((ctrl >> (2 * (l & 3))) & 3) as usize),
                    0x101..=0x10f => (r + (ctrl & 0xf) as usize)
                        .lt(&16)
                        .then(|| l + (ctrl & 0xf) as usize),
                    0x111..=0x11f => r.checked_sub((ctrl & 0xf) as usize).map(|x| row + x),
                    0x121..=0x12f => Some(row + (r + 16 - (ctrl & 0xf) as usize) % 16),
                    0x140 => Some(row + 15 - r),
                    0x141 => Some((l & !7) + 7 - (l & 7)),
                    0x150..=0x15f => Some(row + (ctrl & 0xf) as usize),
                    // GFX9's wave shifts and rotates by one lane, and row broadcasts.
                    0x130 => Some(l + 1),
                    0x134 => Some((l + 1) % lanes),
                    0x138 => l.checked_sub(1),
                    0x13c => Some((l + lanes - 1) % lanes),
                    0x142 => row.checked_sub(1),
                    0x143 => (l >= 32).then_some(31),
                    _ => Some(row + (r ^ (ctrl & 0xf) as usize)),
                };
                let in_mask = row_mask >> (l / 16) & 1 != 0 && bank_mask >> ((l / 4) & 3) & 1 != 0;
                if !in_mask {
                    disabled |= 1 << l;
                    continue;
                }
                match srcl {
                    Some(s) if s < lanes && (fi || exec >> s & 1 != 0) => a[l] = orig[s],
                    _ if bound_ctrl => a[l] = 0,
                    _ => disabled |= 1 << l,
                }
            }
        }
    }
    disabled
}

/// The abs/neg source modifiers of a float source of `width` dwords (16-bit when `f16`) as
/// masks: the value `x` reads as `(x & and) ^ xor` (abs clears the sign, neg then flips it).
pub(crate) fn sign_masks(width: u8, f16: bool, abs: bool, neg: bool) -> (u64, u64) {
    let bit: u64 = if width == 2 {
        1 << 63
    } else if f16 {
        1 << 15
    } else {
        1 << 31
    };
    (if abs { !bit } else { !0 }, if neg { bit } else { 0 })
}

fn neg_abs(v: &mut Lanes, lanes: usize, width: u8, f16: bool, abs: bool, neg: bool) {
    let (and, xor) = sign_masks(width, f16, abs, neg);
    for x in v.iter_mut().take(lanes) {
        *x = (*x & and) ^ xor;
    }
}

/// A VALU instruction on the general tier (what has no fast form, and DPP, SDWA, flushing
/// modes): gathers the sources, computes the lanes through `prep::Alu` or the opcode's group
/// (`ops`), writes back.
pub(crate) fn valu(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    pc: u64,
) -> Result<(), ExecFault> {
    let oi = info(i.op);
    let exec = w.exec();
    let wr_off = read_sources(w, t, i, oi, exec, pc)?;
    if i.op < 0x100 {
        return ops::compare(w, t, i, exec, wr_off, pc);
    }
    // The operations whose semantics are `prep::Alu`'s (the fast forms'), on the sources as
    // fetched and modified here; the integer add and subtract saturate under clamp (`ops`).
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    let alu = crate::prep::alu_of(i.op, e64)
        .filter(|_| !(i.clamp && matches!(i.op, V_ADD_NC_U32 | V_SUB_NC_U32)));
    let res = match alu {
        Some((f, _)) => {
            let [a, b, c, r] = t;
            for l in 0..w.lanes {
                r[l] = f.eval(a[l] as u32, b[l] as u32, c[l] as u32, w.ieee) as u64;
            }
            ops::Res::Lanes(None)
        }
        None => ops::lanes(w, t, i, exec, pc)?,
    };
    match res {
        ops::Res::Other => Err(unsupported(i, pc)),
        ops::Res::Written => Ok(()),
        ops::Res::Lanes(carry) => {
            let r = &mut t[3];
            output_modifiers(w, r, i, oi, exec);
            write_result(w, r, i, oi, exec & !wr_off, carry, pc)
        }
    }
}

/// Whether the wave's float mode flushes denormals of `kind` (see `OpInfo::src_fp`).
fn flushes(w: &WaveRef, kind: u8) -> bool {
    kind != 0 && ((kind == 1 && w.ftz32) || (kind >= 2 && w.ftz16_64))
}

/// Fetches the sources into `t[0..3]` and applies op_sel halves, DPP, abs/neg and denormal
/// flushing; returns the lanes DPP disables for writing.
fn read_sources(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    oi: OpInfo,
    exec: u64,
    pc: u64,
) -> Result<u64, ExecFault> {
    let n = w.lanes;
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    // Sources present by encoding: VOP2 carry-in/cndmask read VCC implicitly.
    for k in 0..3 {
        let width = oi.w.src[k];
        if width == 0 {
            continue;
        }
        let sk = match (i.format, k) {
            (Format::Vop1 | Format::Vop2 | Format::Vopc, 2) => continue,
            _ => i.src[k],
        };
        w.fetch(sk, width, i.literal, oi, &mut t[k], pc)?;
    }
    let [a, b, c, _] = t;
    if let Some(sd) = i.sdwa {
        for (k, v) in [&mut *a, &mut *b].into_iter().enumerate() {
            let sext = sd.sext >> k & 1 != 0;
            for x in v.iter_mut().take(n) {
                *x = sdwa_select(*x as u32, sd.src_sel[k], sext) as u64;
            }
        }
    }
    if oi.src16 {
        for (k, v) in [&mut *a, &mut *b, &mut *c].into_iter().enumerate() {
            let hi = e64 && i.op_sel >> k & 1 != 0;
            for x in v.iter_mut().take(n) {
                *x = if hi { (*x >> 16) & 0xffff } else { *x & 0xffff };
            }
        }
    }
    let mut wr_off = 0u64;
    if let Some(dpp) = i.dpp {
        wr_off = apply_dpp(dpp, a, n, exec);
    }
    if i.abs != 0 || i.neg != 0 {
        for (k, v) in [&mut *a, &mut *b, &mut *c].into_iter().enumerate() {
            let (ab, ng) = (i.abs >> k & 1 != 0, i.neg >> k & 1 != 0);
            if ab || ng {
                neg_abs(v, n, oi.w.src[k].max(1), oi.f16, ab, ng);
            }
        }
    }
    if flushes(w, oi.src_fp) {
        for v in [&mut *a, &mut *b, &mut *c] {
            flush(v, n, oi.src_fp);
        }
    }
    Ok(wr_off)
}

/// Flushes denormal results and applies clamp and omod to float results of VOP3 encodings.
fn output_modifiers(w: &WaveRef, r: &mut Lanes, i: &Inst, oi: OpInfo, exec: u64) {
    let n = w.lanes;
    if flushes(w, oi.dst_fp) {
        flush(r, n, oi.dst_fp);
    }
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    if !e64 || !(i.clamp || i.omod != 0) || matches!(i.op, V_ADD_NC_U32 | V_SUB_NC_U32) {
        return;
    }
    let is64 = oi.w.dst == 2;
    for l in 0..n {
        if exec >> l & 1 == 0 {
            continue;
        }
        if is64 {
            let mut v = d(r[l]);
            v *= [1.0, 2.0, 4.0, 0.5][i.omod as usize];
            if i.clamp {
                v = v.clamp(0.0, 1.0);
            }
            r[l] = db(v);
        } else {
            r[l] = out_mod_f32(r[l] as u32, i.omod, i.clamp) as u64;
        }
    }
}

/// The VOP3 output modifiers of an f32 result `x`: scaled by omod (1, 2, 4 or 0.5), then,
/// with clamp, clamped to [0, 1].
#[inline(always)]
pub(crate) fn out_mod_f32(x: u32, omod: u8, clamp: bool) -> u32 {
    let mut v = f32::from_bits(x) * [1.0f32, 2.0, 4.0, 0.5][omod as usize & 3];
    if clamp {
        v = v.clamp(0.0, 1.0);
    }
    v.to_bits()
}

/// Writes the lane results `r` (16, 32 or 64 bits wide) and the carry mask, if any, for the
/// lanes in `exec`.
fn write_result(
    w: &mut WaveRef,
    r: &Lanes,
    i: &Inst,
    oi: OpInfo,
    exec: u64,
    carry: Option<u64>,
    pc: u64,
) -> Result<(), ExecFault> {
    let n = w.lanes;
    if let Some(cm) = carry {
        let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
        let dst = if e64 { i.sdst } else { src::VCC_LO };
        w.set_mask(dst, cm & exec);
    }
    let dr = w.row(i.dst, pc)?;
    if let Some(sd) = i.sdwa {
        for l in 0..n {
            if exec >> l & 1 != 0 {
                w.vgpr[dr + l] = sdwa_dst(w.vgpr[dr + l], r[l] as u32, sd);
            }
        }
        return Ok(());
    }
    if oi.dst16 {
        let hi = matches!(i.format, Format::Vop3 | Format::Vop3sd) && i.op_sel & 8 != 0;
        // GFX9 zeroes the high half, but for the operations with op_sel there.
        let keep = i.isa != Isa::Gfx9 || gfx9_keeps_high(i.op);
        for l in 0..n {
            if exec >> l & 1 != 0 {
                let old = w.vgpr[dr + l];
                let v = r[l] as u32 & 0xffff;
                w.vgpr[dr + l] = if hi {
                    (old & 0xffff) | v << 16
                } else if keep {
                    (old & 0xffff_0000) | v
                } else {
                    v
                };
            }
        }
        return Ok(());
    }
    if oi.w.dst == 2 {
        let hr = w.row(i.dst + 1, pc)?;
        for l in 0..n {
            if exec >> l & 1 != 0 {
                w.vgpr[dr + l] = r[l] as u32;
                w.vgpr[hr + l] = (r[l] >> 32) as u32;
            }
        }
    } else if exec == w.full() {
        for (d, v) in w.vgpr[dr..dr + n].iter_mut().zip(r.iter()) {
            *d = *v as u32;
        }
    } else {
        for l in 0..n {
            if exec >> l & 1 != 0 {
                w.vgpr[dr + l] = r[l] as u32;
            }
        }
    }
    Ok(())
}

/// GFX9's 16-bit operations that keep the other half of their destination (those whose VOP3
/// form has op_sel there: the multiply-adds and `v_div_fixup_f16`); the others zero it.
fn gfx9_keeps_high(op: u16) -> bool {
    matches!(
        op,
        V_MAD_U16 | V_MAD_I16 | V_FMA_F16 | V_DIV_FIXUP_F16 | V_FMAC_F16
    )
}

/// An SDWA source select (0-3 a byte, 4-5 a word, 6 the dword) of `x`, zero- or
/// sign-extended.
fn sdwa_select(x: u32, sel: u8, sext: bool) -> u32 {
    let (v, bits) = match sel {
        0..=3 => ((x >> (8 * sel)) & 0xff, 8),
        4 | 5 => ((x >> (16 * (sel - 4))) & 0xffff, 16),
        _ => return x,
    };
    if sext {
        (((v << (32 - bits)) as i32) >> (32 - bits)) as u32
    } else {
        v
    }
}

/// The destination dword of an SDWA result `v` written over `old`: the selected byte or word
/// gets `v`'s low bits; the other bits are zeroed (dst_unused 0), the result's sign above it
/// with zeros below (1) or kept (2).
fn sdwa_dst(old: u32, v: u32, sd: Sdwa) -> u32 {
    let (shift, bits) = match sd.dst_sel {
        0..=3 => (8 * sd.dst_sel as u32, 8),
        4 | 5 => (16 * (sd.dst_sel as u32 - 4), 16),
        _ => return v,
    };
    let mask = ((1u32 << bits) - 1) << shift;
    match sd.dst_unused {
        1 => ((((v << (32 - bits)) as i32) >> (32 - bits)) as u32) << shift,
        2 => (old & !mask) | ((v << shift) & mask),
        _ => (v << shift) & mask,
    }
}

fn unsupported(i: &Inst, pc: u64) -> ExecFault {
    ExecFault::Unsupported {
        address: pc,
        text: i.to_string(),
    }
}

/// Executes a VOPD pair: both halves read their sources before either writes.
pub(crate) fn vopd(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    pc: u64,
) -> Result<(), ExecFault> {
    use crate::opcodes::op_vopdx as x;
    // VOPD opcodes map onto VOP2/VOP1 operations in the unified numbering.
    let map = |o: u16| -> Option<u16> {
        Some(match o {
            x::V_DUAL_FMAC_F32 => V_FMAC_F32,
            x::V_DUAL_FMAAK_F32 => V_FMAAK_F32,
            x::V_DUAL_FMAMK_F32 => V_FMAMK_F32,
            x::V_DUAL_MUL_F32 => V_MUL_F32,
            x::V_DUAL_ADD_F32 => V_ADD_F32,
            x::V_DUAL_SUB_F32 => V_SUB_F32,
            x::V_DUAL_SUBREV_F32 => V_SUBREV_F32,
            x::V_DUAL_MUL_DX9_ZERO_F32 => V_MUL_DX9_ZERO_F32,
            x::V_DUAL_MOV_B32 => V_MOV_B32,
            x::V_DUAL_CNDMASK_B32 => V_CNDMASK_B32,
            x::V_DUAL_MAX_F32 => V_MAX_F32,
            x::V_DUAL_MIN_F32 => V_MIN_F32,
            x::V_DUAL_DOT2ACC_F32_F16 => V_DOT2ACC_F32_F16,
            0x10 => V_ADD_NC_U32,
            0x11 => V_LSHLREV_B32,
            0x12 => V_AND_B32,
            _ => return None,
        })
    };
    let (Some(ox), Some(oy)) = (map(i.op), map(i.opy as u16)) else {
        return Err(unsupported(i, pc));
    };
    let half = |op: u16, dst: u16, s0: u16, s1: u16| {
        let fmt = if op >= 384 {
            Format::Vop1
        } else {
            Format::Vop2
        };
        let mut h = *i;
        h.format = fmt;
        h.op = op;
        h.dst = dst;
        h.src = [s0, s1, 0];
        h.opy = 0;
        h
    };
    let hx = half(ox, i.dst, i.src[0], i.src[1]);
    let hy = half(oy, i.sdst, i.srcy[0], i.srcy[1]);
    // Y may read X's destination: snapshot the one register X overwrites, run Y against it.
    let n = w.lanes;
    let xr = w.row(i.dst, pc)?;
    let saved: Vec<u32> = w.vgpr[xr..xr + n].to_vec();
    valu(w, t, &hx, pc)?;
    let written: Vec<u32> = w.vgpr[xr..xr + n].to_vec();
    w.vgpr[xr..xr + n].copy_from_slice(&saved);
    valu(w, t, &hy, pc)?;
    if i.sdst != i.dst {
        w.vgpr[xr..xr + n].copy_from_slice(&written);
    }
    Ok(())
}

/// Executes a packed-math (VOP3P) instruction: each lane computes a low and a high 16-bit
/// result from the source halves op_sel (low) and op_sel_hi (high) pick, with neg_lo/neg_hi
/// negating f16 halves; the mixed-precision FMAs and dot2 produce one 32-bit or 16-bit result.
pub(crate) fn vop3p(
    w: &mut WaveRef,
    t: &mut [Lanes; 4],
    i: &Inst,
    pc: u64,
) -> Result<(), ExecFault> {
    use crate::opcodes::op_vop3p::*;
    let n = w.lanes;
    let exec = w.exec();
    let oi = OpInfo {
        w: Widths {
            dst: 1,
            src: [1, 1, 1],
        },
        f16: true,
        f64src: false,
        src16: false,
        dst16: false,
        src_fp: 0,
        dst_fp: 0,
    };
    if wmma::wmma(w, i, pc, &|| unsupported(i, pc))?
        || mfma::mfma(w, i, pc, &|| unsupported(i, pc))?
    {
        return Ok(());
    }
    let Some(nsrc) = vop3p_sources(i.op) else {
        return Err(unsupported(i, pc));
    };
    for k in 0..nsrc {
        w.fetch(i.src[k], 1, i.literal, oi, &mut t[k], pc)?;
    }
    let [a, b, c, r] = t;
    let is_mix = matches!(i.op, V_FMA_MIX_F32 | V_FMA_MIXLO_F16 | V_FMA_MIXHI_F16);
    for l in 0..n {
        if exec >> l & 1 == 0 {
            continue;
        }
        let s = [a[l], b[l], c[l]];
        r[l] = if is_mix {
            fma_mix(i, s)
        } else if i.op == V_DOT2_F32_F16 {
            dot2(i, s)
        } else if dot::is_vop3p_dot(i.op) {
            dot::vop3p_dot(i, s)
        } else {
            packed(i, nsrc, s)
        };
    }
    let dr = w.row(i.dst, pc)?;
    for l in 0..n {
        if exec >> l & 1 == 0 {
            continue;
        }
        let old = w.vgpr[dr + l];
        w.vgpr[dr + l] = match i.op {
            V_FMA_MIXLO_F16 => (old & 0xffff_0000) | (r[l] as u32 & 0xffff),
            V_FMA_MIXHI_F16 => (old & 0xffff) | (r[l] as u32) << 16,
            _ => r[l] as u32,
        };
    }
    Ok(())
}

/// How many sources a supported VOP3P opcode reads.
fn vop3p_sources(op: u16) -> Option<usize> {
    use crate::opcodes::op_vop3p::*;
    match op {
        V_PK_MAD_I16 | V_PK_MAD_U16 | V_PK_FMA_F16 | V_DOT2_F32_F16 | V_FMA_MIX_F32
        | V_FMA_MIXLO_F16 | V_FMA_MIXHI_F16 => Some(3),
        op if dot::is_vop3p_dot(op) => Some(3),
        V_PK_MUL_LO_U16 | V_PK_ADD_I16 | V_PK_SUB_I16 | V_PK_LSHLREV_B16 | V_PK_LSHRREV_B16
        | V_PK_ASHRREV_I16 | V_PK_MAX_I16 | V_PK_MIN_I16 | V_PK_ADD_U16 | V_PK_SUB_U16
        | V_PK_MAX_U16 | V_PK_MIN_U16 | V_PK_ADD_F16 | V_PK_MUL_F16 | V_PK_MIN_F16
        | V_PK_MAX_F16 => Some(2),
        _ => None,
    }
}

/// Half `hi` of source `k` (the lane value `v`), after op_sel/op_sel_hi selection and, for
/// float operations, negation by neg_lo/neg_hi.
fn pk_half(i: &Inst, float: bool, v: u64, k: usize, hi: bool) -> u64 {
    let sel = if hi {
        i.op_sel_hi >> k & 1
    } else {
        i.op_sel >> k & 1
    };
    let mut v = (v >> (16 * sel)) & 0xffff;
    let neg = if hi { i.abs >> k & 1 } else { i.neg >> k & 1 };
    if float && neg != 0 {
        v ^= 0x8000;
    }
    v
}

/// v_fma_mix*: op_sel_hi says whether source k is f16 (op_sel picks its half) or f32;
/// neg_lo negates and neg_hi takes the absolute value.
fn fma_mix(i: &Inst, s: [u64; 3]) -> u64 {
    use crate::opcodes::op_vop3p::*;
    let mut v = [0f64; 3];
    for (k, x) in v.iter_mut().enumerate() {
        let raw = s[k];
        let mut f = if i.op_sel_hi >> k & 1 != 0 {
            h(raw >> (16 * (i.op_sel >> k & 1) as u64))
        } else {
            f32::from_bits(raw as u32) as f64
        };
        if i.abs >> k & 1 != 0 {
            f = f.abs();
        }
        if i.neg >> k & 1 != 0 {
            f = -f;
        }
        *x = f;
    }
    let fused = v[0].mul_add(v[1], v[2]);
    match i.op {
        V_FMA_MIX_F32 => {
            // Every source is exactly an f32: an f32 fma rounds once.
            let x = (v[0] as f32).mul_add(v[1] as f32, v[2] as f32);
            let x = if i.clamp { x.clamp(0.0, 1.0) } else { x };
            x.to_bits() as u64
        }
        _ => {
            // The f16 result: f64 fma then one rounding to f16 (double rounding through
            // f64 cannot change an f16 result of an exact-enough fma).
            half::f16::from_f64(if i.clamp {
                fused.clamp(0.0, 1.0)
            } else {
                fused
            })
            .to_bits() as u64
        }
    }
}

/// v_dot2_f32_f16: the two f16 products summed into the f32 accumulator (source 2).
fn dot2(i: &Inst, s: [u64; 3]) -> u64 {
    let half = |k: usize, hi: bool| h(pk_half(i, true, s[k], k, hi));
    let sum = half(0, false) * half(1, false) + half(0, true) * half(1, true);
    let acc = f32::from_bits(s[2] as u32) as f64;
    let mut x = (sum + acc) as f32;
    if i.clamp {
        x = x.clamp(0.0, 1.0);
    }
    x.to_bits() as u64
}

/// The packed 16-bit operations: the low and the high half computed alike.
fn packed(i: &Inst, nsrc: usize, s: [u64; 3]) -> u64 {
    use crate::opcodes::op_vop3p::*;
    let float = matches!(
        i.op,
        V_PK_FMA_F16 | V_PK_ADD_F16 | V_PK_MUL_F16 | V_PK_MIN_F16 | V_PK_MAX_F16
    );
    let mut out = 0u64;
    for hi in [false, true] {
        let (x, y) = (
            pk_half(i, float, s[0], 0, hi),
            pk_half(i, float, s[1], 1, hi),
        );
        let z = if nsrc == 3 {
            pk_half(i, float, s[2], 2, hi)
        } else {
            0
        };
        out |= packed_half(i.op, i.clamp, x, y, z) << if hi { 16 } else { 0 };
    }
    out
}

/// One 16-bit half of a packed operation on the halves `x`, `y`, `z`.
fn packed_half(op: u16, clamp: bool, x: u64, y: u64, z: u64) -> u64 {
    use crate::opcodes::op_vop3p::*;
    let (sx, sy, sz) = (x as u16 as i16, y as u16 as i16, z as u16 as i16);
    match op {
        V_PK_ADD_F16 => hb(h(x) + h(y)),
        V_PK_MUL_F16 => hb(h(x) * h(y)),
        V_PK_FMA_F16 => hb(h(x).mul_add(h(y), h(z))),
        V_PK_MIN_F16 => hb(h(x).min(h(y))),
        V_PK_MAX_F16 => hb(h(x).max(h(y))),
        V_PK_ADD_U16 => {
            if clamp {
                (x + y).min(0xffff)
            } else {
                (x + y) & 0xffff
            }
        }
        V_PK_SUB_U16 => {
            if clamp {
                x.saturating_sub(y)
            } else {
                x.wrapping_sub(y) & 0xffff
            }
        }
        V_PK_ADD_I16 => sx.wrapping_add(sy) as u16 as u64,
        V_PK_SUB_I16 => sx.wrapping_sub(sy) as u16 as u64,
        V_PK_MUL_LO_U16 => (x * y) & 0xffff,
        V_PK_MAD_U16 => (x * y + z) & 0xffff,
        V_PK_MAD_I16 => sx.wrapping_mul(sy).wrapping_add(sz) as u16 as u64,
        V_PK_LSHLREV_B16 => (y << (x & 15)) & 0xffff,
        V_PK_LSHRREV_B16 => y >> (x & 15),
        V_PK_ASHRREV_I16 => (sy >> (x & 15)) as u16 as u64,
        V_PK_MAX_I16 => sx.max(sy) as u16 as u64,
        V_PK_MIN_I16 => sx.min(sy) as u16 as u64,
        V_PK_MAX_U16 => x.max(y),
        _ => x.min(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdwa_selects_extend_and_destinations_pad_sign_extend_or_keep() {
        assert_eq!(sdwa_select(0x8180_7f01, 1, false), 0x7f);
        assert_eq!(sdwa_select(0x8180_7f01, 2, true), 0xffff_ff80);
        assert_eq!(sdwa_select(0x8180_7f01, 5, true), 0xffff_8180);
        assert_eq!(sdwa_select(0x8180_7f01, 4, false), 0x7f01);
        assert_eq!(sdwa_select(0x8180_7f01, 6, true), 0x8180_7f01);
        let sd = |dst_sel, dst_unused| Sdwa {
            dst_sel,
            dst_unused,
            src_sel: [6, 6],
            sext: 0,
            sgpr: 0,
        };
        let old = 0x1234_5678;
        assert_eq!(sdwa_dst(old, 0xabcd_ef99, sd(1, 0)), 0x0000_9900);
        assert_eq!(sdwa_dst(old, 0xabcd_ef99, sd(1, 1)), 0xffff_9900);
        assert_eq!(sdwa_dst(old, 0xabcd_ef99, sd(1, 2)), 0x1234_9978);
        assert_eq!(sdwa_dst(old, 0xabcd_ef99, sd(5, 2)), 0xef99_5678);
        assert_eq!(sdwa_dst(old, 0xabcd_7f99, sd(4, 1)), 0x0000_7f99);
        assert_eq!(sdwa_dst(old, 0xabcd_ef99, sd(6, 0)), 0xabcd_ef99);
    }

    #[test]
    fn the_unified_file_puts_agprs_past_the_accumulator_offset() {
        let acc = crate::exec::AccRegs {
            base: 32,
            count: 16,
        };
        assert_eq!(crate::exec::reg_row(31, 32, acc), Some(31));
        assert_eq!(crate::exec::reg_row(32, 32, acc), None);
        assert_eq!(crate::exec::reg_row(256, 32, acc), Some(32));
        assert_eq!(crate::exec::reg_row(256 + 15, 32, acc), Some(47));
        assert_eq!(crate::exec::reg_row(256 + 16, 32, acc), None);
        // No AGPRs outside GFX9.
        let none = crate::exec::AccRegs::default();
        assert_eq!(crate::exec::reg_row(256, 256, none), None);
    }
}
