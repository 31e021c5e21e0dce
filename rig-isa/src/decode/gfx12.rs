//! The GFX12 front end's own classes: SMEM (op in bits 13-20, 24-bit signed offset, th/scope
//! cache policy), the 96-bit VFLAT/VSCRATCH/VGLOBAL and VBUFFER words.
//!
//! Cache policy is kept as `th | scope << 3` in [`Inst::cache`]: bit 0 of `th` is an atomic's
//! TH_ATOMIC_RETURN, which is where GFX11 keeps GLC (return the old value), so the executor
//! reads both alike.

use super::gfx11::check_smem_regs;
use super::tables::{self, Class};
use super::{DecodeError, Format, Inst, Isa, check_mbz, check_vmem, field, opcode, src, word};

const ISA: Isa = Isa::Gfx12;

fn sext24(v: u32) -> i32 {
    ((v << 8) as i32) >> 8
}

pub(super) fn smem(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 13, 8);
    let (_, sem) = opcode(ISA, Class::Smem, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(ISA, Class::Smem), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Smem, sem, op as u16, 2);
    i.dst = field(w, 6, 7) as u16;
    i.src[0] = (field(w, 0, 6) * 2) as u16;
    // th is two bits here (bit 25 is ignored).
    i.cache = (field(w, 23, 2) | field(w, 21, 2) << 3) as u8;
    i.imm = sext24(field(w1, 0, 24));
    i.saddr = field(w1, 25, 7) as u16;
    let n = crate::disasm::base_name(&i);
    if (n.contains("prefetch") || n.starts_with("s_atc_probe")) && i.dst >= 32 {
        // Their sdata field is a 5-bit count or probe mode.
        return Err(DecodeError::Illegal);
    }
    check_smem_regs(&i)?;
    Ok(i)
}

pub(super) fn vmem(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 14, 8);
    let (format, class) = match field(w, 24, 2) {
        0 => (Format::Flat, Class::Flat),
        1 => (Format::Scratch, Class::Scratch),
        2 => (Format::Global, Class::Global),
        _ => return Err(DecodeError::Illegal),
    };
    let (n, sem) = opcode(ISA, class, op)?;
    let w1 = word(words, 1)?;
    let w2 = word(words, 2)?;
    check_mbz(tables::fixed(ISA, class), op, w, w1)?;
    let mut i = Inst::new(ISA, format, sem, op as u16, 3);
    i.saddr = field(w, 0, 7) as u16;
    i.dst = src::VGPR0 + field(w1, 0, 8) as u16;
    i.sve = field(w1, 17, 1) != 0;
    i.cache = (field(w1, 20, 3) | field(w1, 18, 2) << 3) as u8;
    i.src[1] = src::VGPR0 + field(w1, 23, 8) as u16;
    i.src[0] = src::VGPR0 + field(w2, 0, 8) as u16;
    i.imm = sext24(field(w2, 8, 24));
    if matches!(n, "global_inv" | "global_wb" | "global_wbinv") {
        // No operands: only saddr must be null.
        return if i.saddr == src::NULL {
            Ok(i)
        } else {
            Err(DecodeError::Illegal)
        };
    }
    check_vmem(i, format, n)
}

pub(super) fn vbuffer(w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 14, 8);
    let (n, sem) = opcode(ISA, Class::Mubuf, op)?;
    let w1 = word(words, 1)?;
    let w2 = word(words, 2)?;
    check_mbz(tables::fixed(ISA, Class::Mubuf), op, w, w1)?;
    let mut i = Inst::new(ISA, Format::Mubuf, sem, op as u16, 3);
    i.saddr = field(w, 0, 7) as u16;
    i.dst = src::VGPR0 + field(w1, 0, 8) as u16;
    i.src[1] = field(w1, 9, 7) as u16;
    i.cache = (field(w1, 20, 3) | field(w1, 18, 2) << 3) as u8;
    i.imm1 = field(w1, 23, 7) as u8;
    // op_sel carries the addressing bits: 1 tfe, 2 offen, 4 idxen.
    i.op_sel = (field(w, 22, 1) | field(w1, 30, 1) << 1 | field(w1, 31, 1) << 2) as u8;
    i.src[0] = src::VGPR0 + field(w2, 0, 8) as u16;
    i.imm = sext24(field(w2, 8, 24));
    if !n.ends_with("_inv") {
        // The resource is four SGPRs or TTMPs.
        if !matches!(i.src[1], 0..=103 | 108..=123 | 124) {
            return Err(DecodeError::Illegal);
        }
        let (offen, idxen) = (i.op_sel & 2 != 0, i.op_sel & 4 != 0);
        let addr = if offen && idxen { 2 } else { 1 };
        let data = crate::disasm::mubuf_data_width(n, i.op_sel & 1 != 0) as u16;
        if ((offen || idxen) && i.src[0] - 256 + addr > 256) || i.dst - 256 + data > 256 {
            return Err(DecodeError::Illegal);
        }
    }
    Ok(i)
}
