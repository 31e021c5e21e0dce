//! The GFX9/CDNA3 (gfx942) front end: its own class dispatch and field layouts, producing the
//! shared [`Inst`] with semantic ids from `opcodes_gfx9`'s map.
//!
//! What differs from GFX11/GFX12 and is settled here:
//! - operand numbering: GFX9 encodes M0 as 124 and `null` as 125 (GFX11 swapped them); the
//!   decoder stores the GFX11 numbering (M0 = 125, null = 124), so the executor reads one
//!   scheme; 102/103 are FLAT_SCRATCH and 104/105 XNACK_MASK (SGPR slots in GFX11's file);
//! - VALU: VOP3 takes no literal; its opcodes are GFX9's (VOPC 0-0xff, VOP2 0x100+, VOP1
//!   0x140+, VOP3P from 0x380); SDWA (src0 = 249) and DPP (src0 = 250) are a second dword of
//!   source/destination selects ([`Sdwa`]) and the DPP16 controls ([`Dpp`]);
//! - accumulator VGPRs: an operand's AGPR-ness is a bit of [`Inst::acc`] (bit 0-2 sources, bit
//!   3 the destination), from the opcode (`v_accvgpr_*`) or the encoding's acc bits (MFMA's
//!   acc_cd and acc, the memory classes' acc bit); MFMA's cbsz/abid/blgp are kept in `imm`
//!   (cbsz | abid << 3 | blgp << 7);
//! - SMEM (imm/soe/glc in word 0, 21-bit signed offset), DS (acc at bit 25), FLAT/GLOBAL/
//!   SCRATCH (seg in bits 14-15, sve at bit 13 for scratch, sc0/nt/sc1 cache bits), MUBUF.
//!
//! Cache bits in [`Inst::cache`]: bit 0 sc0 (GLC), bit 1 nt (SLC), bit 2 sc1.

use super::tables::{self, Class};
use super::{DecodeError, Dpp, Format, Inst, Isa, Sdwa, check_mbz, field, src, word};

const ISA: Isa = Isa::Gfx9;

/// GFX9's operand number to the shared numbering (M0 and null swap places).
pub(crate) fn s9(raw: u32) -> u16 {
    match raw {
        124 => src::M0,
        125 => src::NULL,
        r => r as u16,
    }
}

/// Whether scalar operand `s` (shared numbering) can be an `n`-dword operand: SGPR and TTMP
/// tuples must end inside their file; the odd special registers, M0 and the scalar flags are
/// not the start of a 64-bit operand.
pub(crate) fn tuple_ok(s: u16, n: u8) -> bool {
    if n <= 1 {
        return true;
    }
    let a = |b: u16| if n == 2 { b & !1 } else { b & !3 };
    match s {
        0..=101 => a(s) + n as u16 - 1 <= 103,
        102 | 104 | 106 | 126 => n == 2,
        108..=123 => a(s - 108) + n as u16 <= 16,
        124 | 128..=208 | 235..=248 | 251..=253 | 255 => true,
        256..=511 => s + n as u16 - 1 <= 511,
        _ => false,
    }
}

fn name(class: Class, op: u32) -> Result<&'static str, DecodeError> {
    tables::names(ISA, class)
        .get(op as usize)
        .copied()
        .flatten()
        .ok_or(DecodeError::Illegal)
}

fn sem(class: Class, op: u32) -> Result<u16, DecodeError> {
    tables::lookup(ISA, class, op, op).ok_or(DecodeError::Illegal)
}

/// A scalar source (SOP*, VALU src0..2 in the shared numbering): not the reserved codes.
fn ssrc_ok(s: u16) -> bool {
    !matches!(s, 209..=234 | 249 | 250)
}

/// Decodes the gfx942 instruction at the start of `words`.
pub(super) fn decode(words: &[u32]) -> Result<Inst, DecodeError> {
    let w = word(words, 0)?;
    if w >> 30 == 0b10 {
        return match w >> 23 {
            0x17d => sop1(w, words),
            0x17e => sopc(w, words),
            0x17f => sopp(w),
            _ if w >> 28 == 0b1011 => sopk(w, words),
            _ => sop2(w, words),
        };
    }
    if w >> 31 == 0 {
        return match w >> 25 {
            0x3f => vop1(w, words),
            0x3e => vopc(w, words),
            _ => vop2(w, words),
        };
    }
    match w >> 26 {
        0b110000 => smem(w, words),
        0b110100 if field(w, 23, 3) == 0b111 => vop3p(w, words),
        0b110100 => vop3(w, words),
        0b110110 => ds(w, words),
        0b110111 => flat(w, words),
        0b111000 => mubuf(w, words),
        _ => Err(DecodeError::Illegal),
    }
}

fn literal(i: &mut Inst, words: &[u32]) -> Result<(), DecodeError> {
    i.literal = word(words, i.len as usize)?;
    i.has_literal = true;
    i.len += 1;
    Ok(())
}

fn scalar_lit(i: &mut Inst, words: &[u32], n: usize) -> Result<(), DecodeError> {
    for k in 0..n {
        if !ssrc_ok(i.src[k]) || i.src[k] == 254 {
            return Err(DecodeError::Illegal);
        }
    }
    if i.src[..n].contains(&src::LITERAL) {
        literal(i, words)?;
    }
    Ok(())
}

fn sop2(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 23, 7);
    name(Class::Sop2, op)?;
    check_mbz(tables::fixed(ISA, Class::Sop2), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Sop2, sem(Class::Sop2, op)?, op as u16, 1);
    i.dst = s9(field(w, 16, 7));
    i.src[0] = s9(field(w, 0, 8));
    i.src[1] = s9(field(w, 8, 8));
    scalar_lit(&mut i, words, 2)?;
    salu_tuples(&i, 2, true)?;
    Ok(i)
}

/// SALU operand widths against the tuple rule (`nsrc` sources, `dst` whether one is written).
fn salu_tuples(i: &Inst, nsrc: usize, dst: bool) -> Result<(), DecodeError> {
    let n = crate::disasm9::name(i);
    let w = crate::disasm9::widths(n, i.format);
    let no_dst = matches!(
        n,
        "s_setpc_b64"
            | "s_rfe_b64"
            | "s_cbranch_join"
            | "s_set_gpr_idx_idx"
            | "s_cbranch_g_fork"
            | "s_rfe_restore_b64"
    );
    let (ws, wd) = if n == "s_cbranch_g_fork" {
        ([2, 2], 1)
    } else {
        ([w[1], w[2]], w[0])
    };
    if dst && !no_dst && !tuple_ok(i.dst, wd) {
        return Err(DecodeError::Illegal);
    }
    if n == "s_getpc_b64" {
        return Ok(());
    }
    if i.src[..nsrc].iter().zip(ws).any(|(&s, w)| !tuple_ok(s, w)) {
        return Err(DecodeError::Illegal);
    }
    Ok(())
}

fn sopk(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 23, 5);
    let n = name(Class::Sopk, op)?;
    check_mbz(tables::fixed(ISA, Class::Sopk), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Sopk, sem(Class::Sopk, op)?, op as u16, 1);
    i.dst = s9(field(w, 16, 7));
    i.imm = field(w, 0, 16) as i32;
    if n == "s_setreg_imm32_b32" {
        literal(&mut i, words)?;
    }
    if matches!(n, "s_call_b64" | "s_cbranch_i_fork") && !tuple_ok(i.dst, 2) {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}

fn sop1(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 8, 8);
    name(Class::Sop1, op)?;
    check_mbz(tables::fixed(ISA, Class::Sop1), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Sop1, sem(Class::Sop1, op)?, op as u16, 1);
    i.dst = s9(field(w, 16, 7));
    i.src[0] = s9(field(w, 0, 8));
    if name(Class::Sop1, op)? == "s_getpc_b64" {
        i.src[0] = 128;
    }
    scalar_lit(&mut i, words, 1)?;
    salu_tuples(&i, 1, true)?;
    Ok(i)
}

fn sopc(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    name(Class::Sopc, op)?;
    check_mbz(tables::fixed(ISA, Class::Sopc), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Sopc, sem(Class::Sopc, op)?, op as u16, 1);
    i.src[0] = s9(field(w, 0, 8));
    i.src[1] = s9(field(w, 8, 8));
    if name(Class::Sopc, op)?.starts_with("s_set_gpr_idx_on") {
        i.imm = field(w, 8, 8) as i32;
        i.src[1] = 128;
    }
    scalar_lit(&mut i, words, 2)?;
    salu_tuples(&i, 2, false)?;
    Ok(i)
}

fn sopp(w: u32) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    name(Class::Sopp, op)?;
    check_mbz(tables::fixed(ISA, Class::Sopp), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Sopp, sem(Class::Sopp, op)?, op as u16, 1);
    i.imm = field(w, 0, 16) as i32;
    Ok(i)
}

fn smem(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 8);
    name(Class::Smem, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Smem), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Smem, sem(Class::Smem, op)?, op as u16, 2);
    i.src[0] = s9(field(w, 0, 6) * 2);
    i.dst = s9(field(w, 6, 7));
    let soe = field(w, 14, 1) != 0;
    let imm = field(w, 17, 1) != 0;
    i.cache = (field(w, 16, 1) | field(w, 15, 1) << 3) as u8;
    // op_sel: bit 0 imm, bit 1 soe.
    i.op_sel = (imm as u8) | (soe as u8) << 1;
    i.saddr = src::NULL;
    if imm {
        i.imm = ((w1 << 11) as i32) >> 11;
        if soe {
            i.saddr = s9(field(w1, 25, 7));
        }
    } else if soe {
        i.saddr = s9(field(w1, 25, 7));
        i.imm = 0;
    } else {
        i.saddr = s9(field(w1, 0, 7));
    }
    let n = crate::disasm9::name(&i);
    let (data, sb) = crate::disasm9::smem_widths(n);
    let probe = n.starts_with("s_atc_probe") || n.starts_with("s_dcache_discard");
    if (data > 0 && !probe && !tuple_ok(i.dst, data))
        || (sb > 0 && (!tuple_ok(i.src[0], sb) || matches!(i.src[0], 124 | 128..)))
    {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}

fn valu_sem(unified: u32) -> Result<u16, DecodeError> {
    tables::lookup(ISA, Class::Valu, unified, unified).ok_or(DecodeError::Illegal)
}

/// AGPR operands an opcode implies by name (`v_accvgpr_*`).
fn implied_acc(n: &str) -> u8 {
    match n {
        "v_accvgpr_read_b32" => 1,
        "v_accvgpr_write_b32" => 8,
        "v_accvgpr_mov_b32" => 9,
        _ => 0,
    }
}

/// SDWA and DPP second dwords of a 32-bit VALU encoding; `srcs` sources, `vopc` for VOPC.
fn vop_tail(i: &mut Inst, words: &[u32], vopc: bool) -> Result<(), DecodeError> {
    if matches!(crate::disasm9::name(i), "v_nop" | "v_clrexcp") {
        // No operands: the source field is ignored.
        return Ok(());
    }
    match i.src[0] {
        249 => {
            let d = word(words, 1)?;
            i.len = 2;
            // VOP1 has no src1: its select, sign extension, modifiers and SGPR bit are 0.
            if i.format == Format::Vop1 && field(d, 24, 8) != 0 {
                return Err(DecodeError::Illegal);
            }
            let s0 = field(d, 23, 1) != 0;
            let s1 = field(d, 31, 1) != 0;
            i.src[0] = if s0 {
                s9(field(d, 0, 8))
            } else {
                src::VGPR0 + field(d, 0, 8) as u16
            };
            if s1 && i.format != Format::Vop1 {
                i.src[1] = s9(i.src[1] as u32 - 256);
            }
            let mut s = Sdwa {
                dst_sel: field(d, 8, 3) as u8,
                dst_unused: field(d, 11, 2) as u8,
                src_sel: [field(d, 16, 3) as u8, field(d, 24, 3) as u8],
                sext: (field(d, 19, 1) | field(d, 27, 1) << 1) as u8,
                sgpr: (s0 as u8) | (s1 as u8) << 1,
            };
            i.neg = (field(d, 20, 1) | field(d, 28, 1) << 1) as u8;
            i.abs = (field(d, 21, 1) | field(d, 29, 1) << 1) as u8;
            if vopc {
                if field(d, 15, 1) != 0 {
                    i.dst = s9(field(d, 8, 7));
                } else {
                    i.dst = src::VCC_LO;
                }
                s.dst_sel = 6;
                s.dst_unused = 0;
            } else {
                i.clamp = field(d, 13, 1) != 0;
                i.omod = field(d, 14, 2) as u8;
            }
            i.sdwa = Some(s);
            sdwa_dpp_ok(i, true)?;
        }
        250 => {
            let d = word(words, 1)?;
            i.len = 2;
            i.src[0] = src::VGPR0 + field(d, 0, 8) as u16;
            if i.format == Format::Vopc || (i.format == Format::Vop1 && field(d, 22, 2) != 0) {
                return Err(DecodeError::Illegal);
            }
            i.neg = (field(d, 20, 1) | field(d, 22, 1) << 1) as u8;
            i.abs = (field(d, 21, 1) | field(d, 23, 1) << 1) as u8;
            if matches!(
                crate::disasm9::name(i),
                "v_dot2c_i32_i16" | "v_dot4c_i32_i8" | "v_dot8c_i32_i4"
            ) {
                // Their DPP forms have no source modifiers: LLVM ignores the bits.
                i.neg = 0;
                i.abs = 0;
            }
            if crate::disasm9::name(i).starts_with("v_ldexp") {
                // src1 is an integer: its neg bit is sign extension, its abs bit ignored.
                i.abs &= 1;
            }
            i.dpp = Some(Dpp::Dpp16 {
                ctrl: field(d, 8, 9) as u16,
                row_mask: field(d, 28, 4) as u8,
                bank_mask: field(d, 24, 4) as u8,
                bound_ctrl: field(d, 19, 1) != 0,
                fi: false,
            });
            sdwa_dpp_ok(i, false)?;
        }
        _ if matches!(crate::disasm9::name(i), "v_nop" | "v_clrexcp") => {}
        s if !ssrc_ok(s) => return Err(DecodeError::Illegal),
        src::LITERAL => literal(i, words)?,
        _ => {}
    }
    valu_tuples(i)
}

/// VALU operand widths against the tuple rule; LDS-direct is not a 64-bit source.
fn valu_tuples(i: &Inst) -> Result<(), DecodeError> {
    let n = crate::disasm9::name(i);
    if n.starts_with("v_mfma") || n.starts_with("v_smfmac") || matches!(n, "v_nop" | "v_clrexcp") {
        return Ok(());
    }
    let w = crate::disasm9::widths(n, i.format);
    let nsrc = match i.format {
        Format::Vop1 => 1,
        Format::Vop2 | Format::Vopc => 2,
        _ => 3,
    };
    for k in 0..nsrc {
        if !tuple_ok(i.src[k], w[k + 1]) || (w[k + 1] > 1 && i.src[k] == 254) {
            return Err(DecodeError::Illegal);
        }
    }
    if i.dst >= 256 && !tuple_ok(i.dst, w[0]) {
        return Err(DecodeError::Illegal);
    }
    if i.dst < 256 && n.starts_with("v_cmp") && !tuple_ok(i.dst, 2) {
        return Err(DecodeError::Illegal);
    }
    Ok(())
}

/// The operand rules LLVM holds SDWA and DPP forms to: 32-bit operations only, float
/// modifiers on float operations, sign extension on integer ones, defined selects and DPP
/// controls, no reserved source codes.
fn sdwa_dpp_ok(i: &Inst, sdwa: bool) -> Result<(), DecodeError> {
    let n = crate::disasm9::name(i);
    let w = crate::disasm9::widths(n, i.format);
    let nsrc = match i.format {
        Format::Vop1 => 1,
        _ => 2,
    };
    let wide = (i.format != Format::Vopc && w[0] > 1) || w[1..=nsrc].iter().any(|&x| x > 1);
    let last = n.rsplit('_').next().unwrap_or("");
    // By the source type: the conversions to a float from integers (`v_cvt_f32_u32`,
    // `v_cvt_f32_ubyte0`, `v_cvt_f32_fp8`) take sign extension, not float modifiers.
    let float = matches!(last, "f16" | "f32" | "f64") || n == "v_cndmask_b32";
    let bad_mods = !float && (i.neg | i.abs) != 0;
    // 64-bit operands only in DPP, with row_newbcast (LLVM flags the other controls).
    let newbcast = matches!(
        i.dpp,
        Some(Dpp::Dpp16 {
            ctrl: 0x150..=0x15f,
            ..
        })
    );
    if (wide && !newbcast) || bad_mods || n.starts_with("v_accvgpr") {
        return Err(DecodeError::Illegal);
    }
    if !ssrc_ok(i.src[0]) || i.src[0] == src::LITERAL || (nsrc > 1 && !ssrc_ok(i.src[1])) {
        return Err(DecodeError::Illegal);
    }
    if let Some(s) = i.sdwa {
        // dst_unused 3 is taken (LLVM prints it UNUSED_PAD).
        if s.dst_sel > 6 || s.src_sel[0] > 6 || s.src_sel[1] > 6 {
            return Err(DecodeError::Illegal);
        }
        // src1 of v_cmp*_class and v_ldexp is an integer: sign extension, no float modifiers.
        let int1 = n.contains("_class_") || n.starts_with("v_ldexp");
        let float_srcs = if int1 { 1 } else { 3 };
        if float && s.sext & float_srcs != 0 {
            return Err(DecodeError::Illegal);
        }
        if int1 && (i.neg | i.abs) & 2 != 0 {
            return Err(DecodeError::Illegal);
        }
        // An output modifier only on a float result.
        if i.omod != 0 && !float_dst(n) {
            return Err(DecodeError::Illegal);
        }
        // No SDWA form of the operations that accumulate into their destination.
        if mac(n) {
            return Err(DecodeError::Illegal);
        }
    } else if matches!(n, "v_pk_fmac_f16" | "v_readfirstlane_b32" | "v_swap_b32") {
        // Nor a DPP form of v_pk_fmac_f16, v_readfirstlane_b32 and v_swap_b32.
        return Err(DecodeError::Illegal);
    }
    if !sdwa {
        let Some(Dpp::Dpp16 { ctrl, .. }) = i.dpp else {
            return Err(DecodeError::Illegal);
        };
        let ok = matches!(ctrl, 0..=0xff | 0x101..=0x10f | 0x111..=0x11f | 0x121..=0x12f | 0x130 | 0x134 | 0x138 | 0x13c | 0x140..=0x143 | 0x150..=0x15f);
        if !ok {
            return Err(DecodeError::Illegal);
        }
    }
    Ok(())
}

/// The VOP2 operations that accumulate into their destination (`v_mac_f16`, `v_fmac_f32`,
/// `v_pk_fmac_f16`, `v_dot2c_f32_f16`, `v_dot4c_i32_i8`...): gfx942 has no SDWA form of them.
fn mac(n: &str) -> bool {
    n.starts_with("v_mac_") || n.starts_with("v_fmac_") || n.starts_with("v_pk_fmac_") || {
        n.starts_with("v_dot") && n.split('_').nth(1).is_some_and(|t| t.ends_with('c'))
    }
}

/// Whether the result of `n` is a float: a conversion's first type, else the last one.
fn float_dst(n: &str) -> bool {
    let ty = |t: &&str| {
        matches!(
            *t,
            "f16" | "f32" | "f64" | "i16" | "u16" | "i32" | "u32" | "i24" | "u24" | "b16" | "b32"
        )
    };
    let t = if n.starts_with("v_cvt_") {
        n.split('_').find(ty)
    } else {
        n.rsplit('_').next()
    };
    matches!(t, Some("f16" | "f32" | "f64"))
}

fn vop1(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 9, 8);
    let n = name(Class::Vop1, op)?;
    let first = n.starts_with("v_readfirstlane");
    // The generated table holds v_readfirstlane's SGPR destination to 7 bits; LLVM decodes the
    // 8th too (the source-only registers; constants flagged invalid), and rejects what a
    // scalar source rejects and the literal.
    let w_fixed = if first { w & !(1 << 24) } else { w };
    check_mbz(tables::fixed(ISA, Class::Vop1), op, w_fixed, 0)?;
    if first && matches!(field(w, 17, 8), 209..=234 | 249 | 250 | 255) {
        return Err(DecodeError::Illegal);
    }
    let mut i = Inst::new(
        ISA,
        Format::Vop1,
        valu_sem(0x140 + op)?,
        0x140 + op as u16,
        1,
    );
    i.dst = if first {
        s9(field(w, 17, 8))
    } else {
        src::VGPR0 + field(w, 17, 8) as u16
    };
    i.src[0] = s9(field(w, 0, 9));
    i.acc = implied_acc(super::tables::strip_suffix(n));
    vop_tail(&mut i, words, false)?;
    Ok(i)
}

fn vop2(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 25, 6);
    let n = name(Class::Vop2, op)?;
    check_mbz(tables::fixed(ISA, Class::Vop2), op, w, 0)?;
    let mut i = Inst::new(
        ISA,
        Format::Vop2,
        valu_sem(0x100 + op)?,
        0x100 + op as u16,
        1,
    );
    i.dst = src::VGPR0 + field(w, 17, 8) as u16;
    i.src[0] = s9(field(w, 0, 9));
    i.src[1] = src::VGPR0 + field(w, 9, 8) as u16;
    let n = super::tables::strip_suffix(n);
    if n.contains("_co_") {
        i.sdst = src::VCC_LO;
    }
    let k =
        n.contains("madmk") || n.contains("madak") || n.contains("fmamk") || n.contains("fmaak");
    if k {
        if matches!(i.src[0], 249 | 250) {
            return Err(DecodeError::Illegal);
        }
        // A literal src0 is the constant K as well (one literal dword).
        literal(&mut i, words)?;
        if !ssrc_ok(i.src[0]) {
            return Err(DecodeError::Illegal);
        }
        return Ok(i);
    }
    vop_tail(&mut i, words, false)?;
    Ok(i)
}

fn vopc(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 17, 8);
    name(Class::Vopc, op)?;
    check_mbz(tables::fixed(ISA, Class::Vopc), op, w, 0)?;
    let mut i = Inst::new(ISA, Format::Vopc, valu_sem(op)?, op as u16, 1);
    i.dst = src::VCC_LO;
    i.src[0] = s9(field(w, 0, 9));
    i.src[1] = src::VGPR0 + field(w, 9, 8) as u16;
    vop_tail(&mut i, words, true)?;
    Ok(i)
}

/// GFX9's VOP3b operations (a scalar carry or flag destination in bits 8-14).
pub(crate) fn vop3b(n: &str) -> bool {
    n.contains("_co_u32")
        || n.starts_with("v_div_scale")
        || n.starts_with("v_mad_u64")
        || n.starts_with("v_mad_i64")
}

fn vop3(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 10);
    let n = name(Class::Vop3, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Vop3), op, w, w1)?;
    let n = super::tables::strip_suffix(n);
    let sd = vop3b(n);
    let f = if sd { Format::Vop3sd } else { Format::Vop3 };
    let mut i = Inst::new(ISA, f, valu_sem(op)?, op as u16, 2);
    let vdst = field(w, 0, 8);
    let sdst = op < 0x100 || n.starts_with("v_readlane") || n.starts_with("v_readfirstlane");
    i.dst = if sdst {
        s9(vdst)
    } else {
        src::VGPR0 + vdst as u16
    };
    if sd {
        i.sdst = s9(field(w, 8, 7));
    } else {
        i.abs = field(w, 8, 3) as u8;
        i.op_sel = field(w, 11, 4) as u8;
    }
    i.clamp = field(w, 15, 1) != 0;
    i.src = [
        s9(field(w1, 0, 9)),
        s9(field(w1, 9, 9)),
        s9(field(w1, 18, 9)),
    ];
    i.omod = field(w1, 27, 2) as u8;
    i.neg = field(w1, 29, 3) as u8;
    i.acc = implied_acc(n);
    if i.src.iter().any(|&s| !ssrc_ok(s) || s == src::LITERAL) {
        return Err(DecodeError::Illegal);
    }
    valu_tuples(&i)?;
    Ok(i)
}

fn vop3p(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    let n = name(Class::Vop3p, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Vop3p), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Vop3p, sem(Class::Vop3p, op)?, op as u16, 2);
    i.dst = src::VGPR0 + field(w, 0, 8) as u16;
    i.src = [
        s9(field(w1, 0, 9)),
        s9(field(w1, 9, 9)),
        s9(field(w1, 18, 9)),
    ];
    let mai = n.starts_with("v_mfma") || n.starts_with("v_smfmac");
    if mai {
        let acc_cd = field(w, 15, 1) as u8;
        let acc = field(w1, 27, 2) as u8;
        i.acc = acc | acc_cd << 2 | acc_cd << 3;
        i.imm = (field(w, 8, 3) | field(w, 11, 4) << 3 | field(w1, 29, 3) << 7) as i32;
        let (a, b, d) = crate::disasm9::mfma_widths(n);
        let vreg = |s: u16, n: u8| (256..=511).contains(&s) && s + n as u16 - 1 <= 511;
        let smfmac = n.starts_with("v_smfmac");
        let c_ok = if smfmac {
            vreg(i.src[2], 1)
        } else {
            vreg(i.src[2], d) || matches!(i.src[2], 128..=208 | 240..=248)
        };
        if !vreg(i.src[0], a) || !vreg(i.src[1], b) || !c_ok || !vreg(i.dst, d) {
            return Err(DecodeError::Illegal);
        }
    } else if n.starts_with("v_accvgpr") {
        i.acc = implied_acc(n);
    } else {
        i.neg = field(w1, 29, 3) as u8;
        i.abs = field(w, 8, 3) as u8;
        i.op_sel = field(w, 11, 3) as u8;
        i.op_sel_hi = (field(w1, 27, 2) | field(w, 14, 1) << 2) as u8;
        i.clamp = field(w, 15, 1) != 0;
    }
    if i.src.iter().any(|&s| !ssrc_ok(s) || s == src::LITERAL) {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}

fn ds(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 17, 8);
    name(Class::Ds, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Ds), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Ds, sem(Class::Ds, op)?, op as u16, 2);
    i.imm = field(w, 0, 8) as i32;
    i.imm1 = field(w, 8, 8) as u8;
    i.cache = field(w, 16, 1) as u8;
    let acc = field(w, 25, 1) as u8;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.src[1] = src::VGPR0 + field(w1, 8, 8) as u16;
    i.src[2] = src::VGPR0 + field(w1, 16, 8) as u16;
    i.dst = src::VGPR0 + field(w1, 24, 8) as u16;
    // acc: the data and the returned value are AGPRs.
    i.acc = acc * 0b1110;
    let (rw, d0, d1) = crate::disasm9::ds_widths(crate::disasm9::name(&i));
    if (rw > 0 && !tuple_ok(i.dst, rw)) || !tuple_ok(i.src[1], d0) || !tuple_ok(i.src[2], d1) {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}

fn flat(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 7);
    let seg = field(w, 14, 2);
    let (format, class) = match seg {
        0 => (Format::Flat, Class::Flat),
        1 => (Format::Scratch, Class::Scratch),
        2 => (Format::Global, Class::Global),
        _ => return Err(DecodeError::Illegal),
    };
    name(class, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, class), op, w, w1)?;
    let mut i = Inst::new(ISA, format, sem(class, op)?, op as u16, 2);
    i.imm = if format == Format::Flat {
        field(w, 0, 13) as i32
    } else {
        ((w << 19) as i32) >> 19
    };
    i.cache = (field(w, 16, 1) | field(w, 17, 1) << 1 | field(w, 25, 1) << 2) as u8;
    i.sve = field(w, 13, 1) != 0;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.src[1] = src::VGPR0 + field(w1, 8, 8) as u16;
    i.saddr = s9(field(w1, 16, 7));
    i.acc = field(w1, 23, 1) as u8 * 0b1010;
    i.dst = src::VGPR0 + field(w1, 24, 8) as u16;
    let n = crate::disasm9::name(&i);
    let dw = crate::disasm9::mubuf_dwords(n);
    let data = if n.contains("cmpswap") { dw * 2 } else { dw };
    let wide = format == Format::Flat || (format == Format::Global && i.saddr == 127);
    let saddr_ok = match format {
        Format::Global => i.saddr == 127 || tuple_ok(i.saddr, 2) && i.saddr < 128,
        Format::Scratch => i.saddr == 127 || i.saddr < 128,
        _ => true,
    };
    let load = n.contains("_load");
    let rtn = load || (!n.contains("_store") && i.cache & 1 != 0);
    if (rtn && !tuple_ok(i.dst, dw))
        || (!load && !tuple_ok(i.src[1], data))
        || (wide && !tuple_ok(i.src[0], 2))
        || !saddr_ok
    {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}

fn mubuf(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 7);
    name(Class::Mubuf, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Mubuf), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Mubuf, sem(Class::Mubuf, op)?, op as u16, 2);
    i.imm = field(w, 0, 12) as i32;
    // op_sel carries the addressing bits: 1 tfe (unused on gfx942), 2 offen, 4 idxen, 8 lds.
    i.op_sel = (field(w, 12, 1) << 1 | field(w, 13, 1) << 2 | field(w, 16, 1) << 3) as u8;
    i.cache = (field(w, 14, 1) | field(w, 17, 1) << 1 | field(w, 15, 1) << 2) as u8;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.dst = src::VGPR0 + field(w1, 8, 8) as u16;
    i.src[1] = (field(w1, 16, 5) * 4) as u16;
    i.acc = field(w1, 23, 1) as u8 * 0b1010;
    i.saddr = s9(field(w1, 24, 8));
    let n = crate::disasm9::name(&i);
    if matches!(
        n,
        "buffer_wbl2" | "buffer_inv" | "buffer_wbinvl1" | "buffer_wbinvl1_vol"
    ) {
        return Ok(i);
    }
    if !ssrc_ok(i.saddr) || i.saddr == src::LITERAL {
        return Err(DecodeError::Illegal);
    }
    let dw = crate::disasm9::mubuf_dwords(n);
    let data = if n.contains("cmpswap") { dw * 2 } else { dw };
    let (offen, idxen) = (i.op_sel & 2 != 0, i.op_sel & 4 != 0);
    let addr = if offen && idxen { 2 } else { 1 };
    let lds_bit = i.op_sel & 8 != 0;
    if ((offen || idxen) && !tuple_ok(i.src[0], addr))
        || !tuple_ok(i.dst, data)
        || !tuple_ok(i.src[1], 4)
        || (lds_bit && n.contains("_load"))
    {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}
