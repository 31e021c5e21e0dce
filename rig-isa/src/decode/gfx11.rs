//! The GFX11 front end's own classes: SMEM (64-bit, 21-bit offset), FLAT/GLOBAL/SCRATCH
//! (64-bit, segment in bits 16-17) and MUBUF.

use super::tables::{self, Class};
use super::{
    DecodeError, Format, Inst, Isa, check_mbz, check_vmem, field, opcode, src, take_literal, word,
};

const ISA: Isa = Isa::Gfx11;

pub(super) fn smem(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 8);
    let (_, sem) = opcode(ISA, Class::Smem, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Smem), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Smem, sem, op as u16, 2);
    i.dst = field(w, 6, 7) as u16;
    i.src[0] = (field(w, 0, 6) * 2) as u16;
    i.cache = (field(w, 14, 1) | field(w, 13, 1) << 2) as u8;
    i.imm = ((w1 << 11) as i32) >> 11;
    i.saddr = field(w1, 25, 7) as u16;
    check_smem_regs(&i)?;
    Ok(i)
}

/// SMEM register tuples must lie inside the SGPRs (or VCC) or inside the trap temporaries.
pub(super) fn check_smem_regs(i: &Inst) -> Result<(), DecodeError> {
    let n = crate::disasm::base_name(i);
    let dw: u16 = match () {
        _ if n.ends_with("b64") => 2,
        _ if n.ends_with("b96") => 3,
        _ if n.ends_with("b128") => 4,
        _ if n.ends_with("b256") => 8,
        _ if n.ends_with("b512") => 16,
        _ => 1,
    };
    let fits = |raw: u16, n: u16| match raw {
        0..=105 => {
            let base = if n >= 3 {
                raw & !3
            } else if n == 2 {
                raw & !1
            } else {
                raw
            };
            base + n - 1 <= 105
        }
        106 => n <= 2,
        108..=123 => {
            let base = if n >= 3 {
                raw & !3
            } else if n == 2 {
                raw & !1
            } else {
                raw
            };
            base + n - 1 <= 123
        }
        124 => true,
        126 => n <= 2,
        _ => n == 1,
    };
    if n.starts_with("s_atc_probe") || n == "s_buffer_prefetch_data" {
        let sb = if n.contains("buffer") { 4 } else { 2 };
        if !(fits(i.src[0], sb) || matches!(i.src[0], 124 | 126)) {
            return Err(DecodeError::Illegal);
        }
    }
    if n.starts_with("s_load") || n.starts_with("s_buffer_load") {
        let sb = if n.starts_with("s_buffer") { 4 } else { 2 };
        let sbase_ok = fits(i.src[0], sb) || matches!(i.src[0], 124 | 126);
        if !fits(i.dst, dw) || !sbase_ok {
            return Err(DecodeError::Illegal);
        }
    }
    Ok(())
}

pub(super) fn flat(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 7);
    let seg = field(w, 16, 2);
    let (format, class) = match seg {
        0 => (Format::Flat, Class::Flat),
        1 => (Format::Scratch, Class::Scratch),
        2 => (Format::Global, Class::Global),
        _ => return Err(DecodeError::Illegal),
    };
    let (_, sem) = opcode(ISA, class, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, class), op, w, w1)?;
    let mut i = Inst::new(ISA, format, sem, op as u16, 2);
    // FLAT offsets are unsigned; GLOBAL and SCRATCH offsets are signed 13-bit.
    i.imm = if format == Format::Flat {
        field(w, 0, 13) as i32
    } else {
        ((w << 19) as i32) >> 19
    };
    i.cache = (field(w, 14, 1) | field(w, 15, 1) << 1 | field(w, 13, 1) << 2) as u8;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.src[1] = src::VGPR0 + field(w1, 8, 8) as u16;
    i.saddr = field(w1, 16, 7) as u16;
    i.sve = field(w1, 23, 1) != 0;
    i.dst = src::VGPR0 + field(w1, 24, 8) as u16;
    let n = crate::disasm::base_name(&i);
    check_vmem(i, format, n)
}

pub(super) fn mubuf(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 8);
    let (_, sem) = opcode(ISA, Class::Mubuf, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Mubuf), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Mubuf, sem, op as u16, 2);
    i.imm = field(w, 0, 12) as i32;
    i.cache = (field(w, 14, 1) | field(w, 12, 1) << 1 | field(w, 13, 1) << 2) as u8;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.dst = src::VGPR0 + field(w1, 8, 8) as u16;
    i.src[1] = (field(w1, 16, 5) * 4) as u16;
    i.saddr = field(w1, 24, 8) as u16;
    // op_sel carries the addressing bits: 1 tfe, 2 offen, 4 idxen.
    i.op_sel = field(w1, 21, 3) as u8;
    let n = crate::disasm::base_name(&i);
    if !n.ends_with("_inv") {
        // soffset is a scalar source (a literal may follow); the resource is four SGPRs or TTMPs.
        if !matches!(i.saddr, 0..=208 | 235..=248 | 251..=253 | 255)
            || !matches!(i.src[1], 0..=100 | 108..=120 | 124)
        {
            return Err(DecodeError::Illegal);
        }
        let lit = i.saddr == src::LITERAL;
        take_literal(&mut i, words, lit)?;
        let (offen, idxen) = (i.op_sel & 2 != 0, i.op_sel & 4 != 0);
        let addr = if offen && idxen { 2 } else { 1 };
        let data = crate::disasm::mubuf_data_width(n, i.op_sel & 1 != 0) as u16;
        let lds = n.contains("_lds_");
        if ((offen || idxen) && i.src[0] - 256 + addr > 256) || (!lds && i.dst - 256 + data > 256) {
            return Err(DecodeError::Illegal);
        }
    }
    Ok(i)
}
