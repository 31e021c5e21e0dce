//! Instruction decoding: raw dwords to [`Inst`], the pre-decoded form the executor runs and
//! [`crate::disasm`] prints, with one front end per encoding family ([`Isa`]).
//!
//! Each front end owns its encoding-class bit patterns, field extraction, instruction length
//! (64- and 96-bit forms, literals, DPP words) and the rule that an opcode LLVM does not know
//! for its target is rejected; every front end produces the same [`Inst`], whose `op` is the
//! operation's semantic id (see `tables`), so one executor runs them all. The classes GFX11 and
//! GFX12 encode alike (SOP*, VOP*, VOPD, DS) are decoded here, from the generation's tables;
//! `gfx11` and `gfx12` hold the classes each encodes its own way (SMEM, FLAT/GLOBAL/SCRATCH,
//! MUBUF/VBUFFER). It does not own semantics (see `exec`) nor the text form (see `disasm`).
//!
//! The seam for GFX9/CDNA3 (gfx942): a third [`Isa`], its tables generated like GFX12's (with a
//! semantic map onto gfx1100's ids), its own front end for its encodings (VOP3 without op_sel,
//! SDWA and DPP as source modifiers, accumulator VGPRs as a register class, wave64 only), all
//! producing this same [`Inst`].

mod gfx11;
mod gfx12;
pub(crate) mod gfx9;
pub(crate) mod tables;

use tables::{Class, lookup};

/// An encoding family: the instruction words of one hardware generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Isa {
    /// RDNA3 (gfx1100 and the other gfx11 processors).
    #[default]
    Gfx11,
    /// RDNA4 (gfx1200, gfx1201).
    Gfx12,
    /// GFX9/CDNA3 (gfx942, wave64 only).
    Gfx9,
}

/// GFX9's sub-dword addressing (SDWA) second dword of a VOP1/VOP2/VOPC instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sdwa {
    /// Destination select (0-3 bytes, 4-5 words, 6 dword).
    pub dst_sel: u8,
    /// Destination bits outside the select: 0 zero, 1 sign-extend, 2 preserve.
    pub dst_unused: u8,
    /// Source selects of src0 and src1.
    pub src_sel: [u8; 2],
    /// Sign-extension of src0 (bit 0) and src1 (bit 1).
    pub sext: u8,
    /// src0 (bit 0) and src1 (bit 1) are scalar operands.
    pub sgpr: u8,
}

/// Encoding class of an instruction (RDNA3 "microcode format").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Scalar, two sources.
    Sop2,
    /// Scalar with a 16-bit immediate.
    Sopk,
    /// Scalar, one source.
    Sop1,
    /// Scalar compare.
    Sopc,
    /// Scalar program control.
    Sopp,
    /// Scalar memory.
    Smem,
    /// Vector, one source (32-bit encoding).
    Vop1,
    /// Vector, two sources (32-bit encoding).
    Vop2,
    /// Vector compare (32-bit encoding).
    Vopc,
    /// Vector, 64-bit encoding with modifiers.
    Vop3,
    /// VOP3 with a scalar destination (carry out / VCC-like result).
    Vop3sd,
    /// Packed math.
    Vop3p,
    /// Dual issue of two VOP2-like halves.
    Vopd,
    /// LDS / GDS.
    Ds,
    /// Flat address space memory.
    Flat,
    /// Global memory.
    Global,
    /// Private (scratch) memory.
    Scratch,
    /// Buffer memory through a resource descriptor (GFX11 MUBUF, GFX12 VBUFFER; only the
    /// cache invalidations execute).
    Mubuf,
}

/// Data-parallel-primitive source modifier of a VOP1/VOP2/VOPC/VOP3 instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dpp {
    /// DPP16: `ctrl` selects the lane pattern within rows of 16.
    Dpp16 {
        /// dpp_ctrl field.
        ctrl: u16,
        /// Rows written (bit per row of 16 lanes).
        row_mask: u8,
        /// Banks written (bit per group of 4 lanes in a row).
        bank_mask: u8,
        /// Out-of-range source reads zero instead of disabling the write.
        bound_ctrl: bool,
        /// Fetch inactive lanes.
        fi: bool,
    },
    /// DPP8: arbitrary lane selection within groups of 8.
    Dpp8 {
        /// Eight 3-bit selectors.
        sel: u32,
        /// Fetch inactive lanes.
        fi: bool,
    },
}

/// A decoded instruction. Operand fields hold the hardware's 9-bit source encoding
/// (0..=105 SGPRs, 106.. special registers and constants, 255 literal, 256.. VGPRs); VGPR
/// destinations are stored as 256 + n too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inst {
    /// Encoding family the instruction was decoded from.
    pub isa: Isa,
    /// Encoding class.
    pub format: Format,
    /// Semantic id of the operation within its class: gfx1100's opcode for it (VOP1/VOP2/VOPC/
    /// VOP3/VOP3SD in the unified VOP3 numbering), or an id past gfx1100's table for an
    /// operation gfx1100 lacks.
    pub op: u16,
    /// Opcode as encoded in its generation's table (VALU: that generation's unified numbering).
    pub enc: u16,
    /// VOPD Y half: opcode as encoded.
    pub ency: u8,
    /// Length in dwords.
    pub len: u8,
    /// Destination (SGPR encoding, or 256 + VGPR).
    pub dst: u16,
    /// Scalar destination of VOP3SD, or the second destination of a VOPD.
    pub sdst: u16,
    /// Sources in encoding order.
    pub src: [u16; 3],
    /// Literal dword, valid when `has_literal`.
    pub literal: u32,
    /// Whether a literal dword follows (or, for fmaak/fmamk, the K constant).
    pub has_literal: bool,
    /// SOPK/SOPP simm16, SMEM/FLAT/DS offset (sign-extended where the format says so).
    pub imm: i32,
    /// Second DS offset.
    pub imm1: u8,
    /// VOP3 abs bits / VOP3P neg_hi bits.
    pub abs: u8,
    /// Negate bits (VOP3 neg, VOP3P neg_lo).
    pub neg: u8,
    /// op_sel bits (VOP3: bit 3 is the destination).
    pub op_sel: u8,
    /// VOP3P op_sel_hi bits.
    pub op_sel_hi: u8,
    /// Clamp.
    pub clamp: bool,
    /// Output modifier (0 none, 1 *2, 2 *4, 3 /2).
    pub omod: u8,
    /// Cache bits: bit 0 glc, bit 1 slc, bit 2 dlc; DS: bit 0 gds.
    pub cache: u8,
    /// FLAT/GLOBAL/SCRATCH saddr (124 = off); SMEM soffset (124 = none).
    pub saddr: u16,
    /// SCRATCH: address in VGPR (sve).
    pub sve: bool,
    /// DPP modifier of `src[0]`.
    pub dpp: Option<Dpp>,
    /// VOPD Y half: semantic id (dst is `sdst`).
    pub opy: u8,
    /// VOPD Y sources.
    pub srcy: [u16; 2],
    /// GFX9 accumulator VGPRs: bits 0-2 mark `src[0..3]`, bit 3 `dst`, as AGPRs.
    pub acc: u8,
    /// GFX9 SDWA selects.
    pub sdwa: Option<Sdwa>,
}

/// Why a word sequence is not an instruction of the encoding family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The encoding class or opcode is not defined for the target.
    #[error("not an instruction of the target")]
    Illegal,
    /// The instruction runs past the end of the supplied words.
    #[error("instruction runs past the end of the code")]
    Truncated,
}

/// Source operand encodings.
pub mod src {
    /// VCC low half.
    pub const VCC_LO: u16 = 106;
    /// VCC high half.
    pub const VCC_HI: u16 = 107;
    /// Null register (reads zero, writes dropped).
    pub const NULL: u16 = 124;
    /// M0.
    pub const M0: u16 = 125;
    /// EXEC low half.
    pub const EXEC_LO: u16 = 126;
    /// EXEC high half.
    pub const EXEC_HI: u16 = 127;
    /// DPP8 marker in src0.
    pub const DPP8: u16 = 233;
    /// DPP8 with fetch-inactive marker in src0.
    pub const DPP8FI: u16 = 234;
    /// DPP16 marker in src0.
    pub const DPP16: u16 = 250;
    /// Literal constant follows.
    pub const LITERAL: u16 = 255;
    /// First VGPR.
    pub const VGPR0: u16 = 256;
}

impl Inst {
    fn new(isa: Isa, format: Format, op: u16, enc: u16, len: u8) -> Inst {
        Inst {
            isa,
            format,
            op,
            enc,
            ency: 0,
            len,
            dst: src::NULL,
            sdst: src::NULL,
            src: [0; 3],
            literal: 0,
            has_literal: false,
            imm: 0,
            imm1: 0,
            abs: 0,
            neg: 0,
            op_sel: 0,
            op_sel_hi: 0,
            clamp: false,
            omod: 0,
            cache: 0,
            saddr: src::NULL,
            sve: false,
            dpp: None,
            opy: 0,
            srcy: [0; 2],
            acc: 0,
            sdwa: None,
        }
    }

    /// An instruction of `format`/`op` with no operands (for per-opcode tables).
    pub(crate) fn decode_stub(format: Format, op: u16) -> Inst {
        Inst::new(Isa::Gfx11, format, op, op, 1)
    }

    /// LLVM mnemonic of this instruction as printed (with `_e32`/`_e64`/`_dpp` where LLVM adds it).
    pub fn mnemonic(&self) -> String {
        crate::disasm::mnemonic(self)
    }
}

pub(super) fn field(w: u32, lo: u32, bits: u32) -> u32 {
    (w >> lo) & ((1u32 << bits) - 1)
}

/// Fixed bits of an opcode: (mask, value) over word 0 (low half) and word 1 (high half).
type Fixed = (u64, u64);

/// Rejects words whose reserved bits differ from the value LLVM requires for this opcode.
pub(super) fn check_mbz(table: &[Fixed], op: u32, w0: u32, w1: u32) -> Result<(), DecodeError> {
    let (m, v) = table.get(op as usize).copied().unwrap_or((0, 0));
    if (w0 as u64 | (w1 as u64) << 32) & m != v {
        Err(DecodeError::Illegal)
    } else {
        Ok(())
    }
}

pub(super) fn word(words: &[u32], i: usize) -> Result<u32, DecodeError> {
    words.get(i).copied().ok_or(DecodeError::Truncated)
}

/// The mnemonic and semantic id of a non-VALU opcode, or Illegal.
pub(super) fn opcode(isa: Isa, class: Class, op: u32) -> Result<(&'static str, u16), DecodeError> {
    let n = tables::names(isa, class)
        .get(op as usize)
        .copied()
        .flatten()
        .ok_or(DecodeError::Illegal)?;
    let sem = lookup(isa, class, op, op).ok_or(DecodeError::Illegal)?;
    Ok((n, sem))
}

/// Semantic id of a VALU opcode of `class` (encoded `op`, `unified` = its VOP3 number).
fn valu_opcode(isa: Isa, class: Class, op: u32, unified: u32) -> Result<u16, DecodeError> {
    lookup(isa, class, op, unified).ok_or(DecodeError::Illegal)
}

/// Reads a literal for `inst` if any listed source asks for one.
pub(super) fn take_literal(inst: &mut Inst, words: &[u32], uses: bool) -> Result<(), DecodeError> {
    if uses {
        inst.literal = word(words, inst.len as usize)?;
        inst.has_literal = true;
        inst.len += 1;
    }
    Ok(())
}

/// VALU opcodes (unified numbering) that take the VOP3SD encoding.
pub fn is_vop3sd(op: u16) -> bool {
    matches!(op, 0x120..=0x122 | 0x2fc..=0x302)
}

/// Decodes the gfx11 instruction at the start of `words`.
pub fn decode(words: &[u32]) -> Result<Inst, DecodeError> {
    decode_isa(Isa::Gfx11, words)
}

/// Decodes the instruction of encoding family `isa` at the start of `words`.
pub fn decode_isa(isa: Isa, words: &[u32]) -> Result<Inst, DecodeError> {
    if isa == Isa::Gfx9 {
        return gfx9::decode(words);
    }
    let w = word(words, 0)?;
    let top9 = w >> 23;
    if w >> 30 == 0b10 {
        // Scalar ALU: SOP1/SOPC/SOPP/SOPK carve out of the SOP2 space.
        return match top9 {
            0x17d => decode_sop1(isa, w, words),
            0x17e => decode_sopc(isa, w, words),
            0x17f => decode_sopp(isa, w),
            _ if w >> 28 == 0b1011 => decode_sopk(isa, w, words),
            _ => decode_sop2(isa, w, words),
        };
    }
    if w >> 31 == 0 {
        return match w >> 25 {
            0x3f => decode_vop1(isa, w, words),
            0x3e => decode_vopc(isa, w, words),
            _ => decode_vop2(isa, w, words),
        };
    }
    match (w >> 26, isa) {
        (0b111101, Isa::Gfx11) => gfx11::smem(w, words),
        (0b111101, Isa::Gfx12) => gfx12::smem(w, words),
        (0b110101, _) => decode_vop3(isa, w, words),
        (0b110010, _) => decode_vopd(isa, w, words),
        (0b110110, _) => decode_ds(isa, w, words),
        (0b110111, Isa::Gfx11) => gfx11::flat(w, words),
        (0b111000, Isa::Gfx11) => gfx11::mubuf(w, words),
        (0b111011, Isa::Gfx12) => gfx12::vmem(w, words),
        (0b110001, Isa::Gfx12) => gfx12::vbuffer(w, words),
        // VOP3P: bit 23 is reserved (zero).
        (0b110011, _) if w >> 23 == 0xcc << 1 => decode_vop3p(isa, w, words),
        _ => Err(DecodeError::Illegal),
    }
}

fn decode_sop2(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 23, 7);
    let (_, sem) = opcode(isa, Class::Sop2, op)?;
    check_mbz(tables::fixed(isa, Class::Sop2), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Sop2, sem, op as u16, 1);
    i.dst = field(w, 16, 7) as u16;
    i.src[0] = field(w, 0, 8) as u16;
    i.src[1] = field(w, 8, 8) as u16;
    check_ssrc(i.src[0])?;
    check_ssrc(i.src[1])?;
    check_wide(&i)?;
    // GFX12's s_fmaak/s_fmamk always carry their K constant.
    let k = matches!(crate::disasm::base_name(&i), "s_fmaak_f32" | "s_fmamk_f32");
    let lit = k || i.src[0] == src::LITERAL || i.src[1] == src::LITERAL;
    take_literal(&mut i, words, lit)?;
    Ok(i)
}

/// Dwords of data a memory instruction named `n` moves per lane, by its type suffix (GFX12's
/// `_block` loads and stores move 32).
pub(super) fn data_dwords(n: &str) -> u16 {
    match n.rsplit('_').next().unwrap_or("") {
        "block" => 32,
        "b64" | "u64" | "i64" | "f64" => 2,
        "b96" => 3,
        "b128" => 4,
        _ => 1,
    }
}

/// The operand rules both generations' FLAT, GLOBAL and SCRATCH forms share, for `i` named
/// `n`: returned and stored data lie inside the VGPRs, a 64-bit VGPR address is not v255,
/// FLAT takes no SGPR address and GLOBAL none of the reserved ones.
pub(super) fn check_vmem(i: Inst, format: Format, n: &str) -> Result<Inst, DecodeError> {
    let dw = data_dwords(n);
    let data = if n.contains("cmpswap") { 2 * dw } else { dw };
    let load = n.contains("_load");
    let store = n.contains("_store");
    let rtn = load || (!store && i.cache & 1 != 0);
    let wide_addr = format == Format::Flat || (format == Format::Global && i.saddr == src::NULL);
    if (rtn && i.dst - 256 + dw > 256)
        || (!load && i.src[1] - 256 + data > 256)
        || (wide_addr && i.src[0] == 511)
    {
        return Err(DecodeError::Illegal);
    }
    match format {
        Format::Flat if i.saddr != src::NULL => Err(DecodeError::Illegal),
        Format::Global if matches!(i.saddr, 107 | 125 | 127) => Err(DecodeError::Illegal),
        _ => Ok(i),
    }
}

/// 64-bit scalar operands cannot name the odd special registers (vcc_hi, m0, exec_hi).
pub(super) fn check_wide(i: &Inst) -> Result<(), DecodeError> {
    let w = crate::disasm::salu_widths(i);
    let bad = |s: u16, n: u8| n >= 2 && matches!(s, 107 | 125 | 127);
    let has_dst = !matches!(i.format, Format::Sopc);
    let n = crate::disasm::base_name(i);
    let no_src = n == "s_getpc_b64" || n.starts_with("s_sendmsg_rtn");
    let has_dst = has_dst && !matches!(n, "s_setpc_b64" | "s_rfe_b64");
    if (has_dst && bad(i.dst, w.dst))
        || (!no_src && bad(i.src[0], w.src[0]))
        || bad(i.src[1], w.src[1])
    {
        return Err(DecodeError::Illegal);
    }
    Ok(())
}

/// Scalar sources may not name the DPP / VOPD-only encodings.
pub(super) fn check_ssrc(s: u16) -> Result<(), DecodeError> {
    match s {
        0..=105 | 106..=127 | 128..=208 | 235..=248 | 251..=253 | 255 => Ok(()),
        _ => Err(DecodeError::Illegal),
    }
}

fn decode_sopk(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 23, 5);
    let (n, sem) = opcode(isa, Class::Sopk, op)?;
    check_mbz(tables::fixed(isa, Class::Sopk), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Sopk, sem, op as u16, 1);
    i.dst = field(w, 16, 7) as u16;
    i.imm = field(w, 0, 16) as i32;
    if n == "s_call_b64" && matches!(i.dst, 107 | 125 | 127) {
        return Err(DecodeError::Illegal);
    }
    take_literal(&mut i, words, n == "s_setreg_imm32_b32")?;
    Ok(i)
}

fn decode_sop1(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 8, 8);
    let (_, sem) = opcode(isa, Class::Sop1, op)?;
    check_mbz(tables::fixed(isa, Class::Sop1), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Sop1, sem, op as u16, 1);
    i.dst = field(w, 16, 7) as u16;
    i.src[0] = field(w, 0, 8) as u16;
    let n = crate::disasm::base_name(&i);
    if n.starts_with("s_sendmsg_rtn") || n == "s_getpc_b64" {
        // ssrc0 holds a message id (or nothing): no register, no literal.
        check_wide(&i)?;
        return Ok(i);
    }
    // GFX12's barrier operations also take src_lds_direct.
    if !(i.src[0] == 254 && crate::disasm::base_name(&i).contains("barrier")) {
        check_ssrc(i.src[0])?;
    }
    check_wide(&i)?;
    let lit = i.src[0] == src::LITERAL;
    take_literal(&mut i, words, lit)?;
    Ok(i)
}

fn decode_sopc(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    let (_, sem) = opcode(isa, Class::Sopc, op)?;
    check_mbz(tables::fixed(isa, Class::Sopc), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Sopc, sem, op as u16, 1);
    i.src[0] = field(w, 0, 8) as u16;
    i.src[1] = field(w, 8, 8) as u16;
    check_ssrc(i.src[0])?;
    check_ssrc(i.src[1])?;
    check_wide(&i)?;
    let lit = i.src[0] == src::LITERAL || i.src[1] == src::LITERAL;
    take_literal(&mut i, words, lit)?;
    Ok(i)
}

fn decode_sopp(isa: Isa, w: u32) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    let (_, sem) = opcode(isa, Class::Sopp, op)?;
    check_mbz(tables::fixed(isa, Class::Sopp), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Sopp, sem, op as u16, 1);
    i.imm = field(w, 0, 16) as i32;
    Ok(i)
}

fn decode_dpp(i: &mut Inst, words: &[u32], vop3: bool) -> Result<(), DecodeError> {
    let marker = i.src[0];
    let d = word(words, i.len as usize)?;
    i.len += 1;
    i.src[0] = src::VGPR0 + field(d, 0, 8) as u16;
    if marker == src::DPP16 {
        let ctrl = field(d, 8, 9) as u16;
        if !dpp16_ctrl_valid(ctrl) {
            return Err(DecodeError::Illegal);
        }
        i.dpp = Some(Dpp::Dpp16 {
            ctrl,
            fi: field(d, 18, 1) != 0,
            bound_ctrl: field(d, 19, 1) != 0,
            bank_mask: field(d, 24, 4) as u8,
            row_mask: field(d, 28, 4) as u8,
        });
        if !vop3 {
            // The VOP1/VOP2/VOPC DPP word carries the source modifiers.
            i.neg = (field(d, 20, 1) | field(d, 22, 1) << 1) as u8;
            i.abs = (field(d, 21, 1) | field(d, 23, 1) << 1) as u8;
        }
    } else {
        i.dpp = Some(Dpp::Dpp8 {
            sel: d >> 8,
            fi: marker == src::DPP8FI,
        });
    }
    Ok(())
}

/// dpp_ctrl values defined on gfx11 (quad_perm, row shifts/rotates, mirrors, shares, xmasks).
pub fn dpp16_ctrl_valid(c: u16) -> bool {
    matches!(c, 0x000..=0x0ff | 0x101..=0x10f | 0x111..=0x11f | 0x121..=0x12f | 0x140 | 0x141 | 0x150..=0x15f | 0x160..=0x16f)
}

fn vsrc_or_literal(
    i: &mut Inst,
    words: &[u32],
    srcs: usize,
    force_lit: bool,
) -> Result<(), DecodeError> {
    let lit = force_lit || i.src[..srcs].contains(&src::LITERAL);
    take_literal(i, words, lit)
}

/// Scalar destinations LLVM accepts for VALU results written to SGPRs.
fn sgpr_dst_ok(d: u16) -> bool {
    !matches!(d, 209..=234 | 249 | 250 | 254..)
}

fn valu_src_ok(s: u16) -> bool {
    !matches!(s, 209..=232 | 249)
}

/// Operand-width rules LLVM enforces for VALU: 64-bit scalar operands cannot start at the odd
/// special registers, VGPR tuples must end inside the 256 VGPRs, SGPR destinations are SGPRs.
fn check_valu_widths(i: &Inst) -> Result<(), DecodeError> {
    let w = crate::disasm::valu_widths(i.op);
    let srcs = match i.format {
        Format::Vop1 | Format::Vop2 | Format::Vopc => 2,
        _ => 3,
    };
    for k in 0..srcs {
        let (s, n) = (i.src[k], w.src[k] as u16);
        if n >= 2 && (matches!(s, 107 | 125 | 127 | 254) || (s >= 256 && s - 256 + n > 256)) {
            return Err(DecodeError::Illegal);
        }
    }
    let name = crate::disasm::valu_name(i.op);
    let last = name.rsplit('_').next().unwrap_or("");
    let is16 = matches!(last, "f16" | "i16" | "u16" | "b16")
        && !name.contains("_pk_")
        && !name.contains("dot2");
    if is16 && matches!(i.format, Format::Vop2 | Format::Vopc) && i.src[1] >= 256 + 128 {
        // 16-bit e32 forms address only v0..v127 in vsrc1.
        return Err(DecodeError::Illegal);
    }
    if w.dst >= 2 && i.dst >= 256 && i.dst - 256 + w.dst as u16 > 256 {
        return Err(DecodeError::Illegal);
    }
    if crate::disasm::vop3_sgpr_dst(i.op)
        && !matches!(i.format, Format::Vopc)
        && !sgpr_dst_ok(i.dst)
    {
        return Err(DecodeError::Illegal);
    }
    Ok(())
}

fn decode_vop1(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 9, 8);
    let sem = valu_opcode(isa, Class::Vop1, op, 384 + op)?;
    check_mbz(tables::fixed(isa, Class::Vop1), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Vop1, sem, 384 + op as u16, 1);
    // v_readfirstlane_b32 writes an SGPR.
    let op = if sem == 384 + 2 { 2 } else { op };
    i.dst = if op == 2 {
        field(w, 17, 8) as u16
    } else {
        src::VGPR0 + field(w, 17, 8) as u16
    };
    if op == 2 && !sgpr_dst_ok(i.dst) {
        return Err(DecodeError::Illegal);
    }
    i.src[0] = field(w, 0, 9) as u16;
    vop_tail(&mut i, words, 1, false)?;
    Ok(i)
}

fn vop_tail(i: &mut Inst, words: &[u32], srcs: usize, force_lit: bool) -> Result<(), DecodeError> {
    if matches!(crate::disasm::valu_name(i.op), "v_nop" | "v_pipeflush") {
        // No operands: the source field is ignored.
        return Ok(());
    }
    check_valu_widths(i)?;
    if !valu_src_ok(i.src[0]) && !matches!(i.src[0], src::DPP8 | src::DPP8FI | src::DPP16) {
        return Err(DecodeError::Illegal);
    }
    if matches!(i.src[0], src::DPP8 | src::DPP8FI | src::DPP16) {
        if force_lit || !crate::disasm::dpp_allowed(i) {
            return Err(DecodeError::Illegal);
        }
        decode_dpp(i, words, false)?;
        let name = crate::disasm::valu_name(i.op);
        let last = name.rsplit('_').next().unwrap_or("");
        let plain16 = matches!(last, "f16" | "i16" | "u16" | "b16")
            && !name.contains("pk_")
            && !name.contains("dot2")
            && name != "v_mov_b16";
        if plain16 && i.src[0] >= src::VGPR0 + 128 {
            // 16-bit e32 forms address only v0..v127.
            return Err(DecodeError::Illegal);
        }
        let float = crate::disasm::float_src(i.op) || name == "v_cndmask_b32";
        let class = crate::disasm::valu_name(i.op).contains("class");
        let one_src = i.format == Format::Vop1;
        if (i.neg != 0 || i.abs != 0) && !float || (class || one_src) && (i.neg | i.abs) & 2 != 0 {
            return Err(DecodeError::Illegal);
        }
        return Ok(());
    }
    vsrc_or_literal(i, words, srcs, force_lit)
}

fn decode_vop2(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 25, 6);
    let sem = valu_opcode(isa, Class::Vop2, op, 256 + op)?;
    let n = crate::disasm::valu_name(sem);
    check_mbz(tables::fixed(isa, Class::Vop2), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Vop2, sem, 256 + op as u16, 1);
    i.dst = src::VGPR0 + field(w, 17, 8) as u16;
    i.src[0] = field(w, 0, 9) as u16;
    i.src[1] = src::VGPR0 + field(w, 9, 8) as u16;
    let k = n.contains("fmamk") || n.contains("fmaak");
    vop_tail(&mut i, words, 1, k)?;
    Ok(i)
}

fn decode_vopc(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 17, 8);
    let sem = valu_opcode(isa, Class::Vopc, op, op)?;
    check_mbz(tables::fixed(isa, Class::Vopc), op, w, 0)?;
    let mut i = Inst::new(isa, Format::Vopc, sem, op as u16, 1);
    i.dst = src::VCC_LO;
    i.src[0] = field(w, 0, 9) as u16;
    i.src[1] = src::VGPR0 + field(w, 9, 8) as u16;
    vop_tail(&mut i, words, 1, false)?;
    Ok(i)
}

fn decode_vop3(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let enc = field(w, 16, 10) as u16;
    let op = valu_opcode(isa, Class::Vop3, enc as u32, enc as u32)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(isa, Class::Vop3), enc as u32, w, w1)?;
    let sd = is_vop3sd(op);
    let mut i = Inst::new(
        isa,
        if sd { Format::Vop3sd } else { Format::Vop3 },
        op,
        enc,
        2,
    );
    let vdst = field(w, 0, 8) as u16;
    i.dst = if crate::disasm::vop3_sgpr_dst(op) {
        vdst
    } else {
        src::VGPR0 + vdst
    };
    if sd {
        i.sdst = field(w, 8, 7) as u16;
    } else {
        i.abs = field(w, 8, 3) as u8;
        i.op_sel = field(w, 11, 4) as u8;
    }
    i.clamp = field(w, 15, 1) != 0;
    i.src = [
        field(w1, 0, 9) as u16,
        field(w1, 9, 9) as u16,
        field(w1, 18, 9) as u16,
    ];
    i.omod = field(w1, 27, 2) as u8;
    i.neg = field(w1, 29, 3) as u8;
    for s in 1..3 {
        if !valu_src_ok(i.src[s]) || matches!(i.src[s], src::DPP8 | src::DPP8FI | src::DPP16) {
            return Err(DecodeError::Illegal);
        }
    }
    check_valu_widths(&i)?;
    if matches!(i.src[0], src::DPP8 | src::DPP8FI | src::DPP16) {
        if i.src[1] == src::LITERAL || i.src[2] == src::LITERAL || !crate::disasm::dpp_allowed(&i) {
            return Err(DecodeError::Illegal);
        }
        decode_dpp(&mut i, words, true)?;
        return Ok(i);
    }
    if !valu_src_ok(i.src[0]) {
        return Err(DecodeError::Illegal);
    }
    vsrc_or_literal(&mut i, words, 3, false)?;
    Ok(i)
}

fn decode_vop3p(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 16, 7);
    let (_, sem) = opcode(isa, Class::Vop3p, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(isa, Class::Vop3p), op, w, w1)?;
    let mut i = Inst::new(isa, Format::Vop3p, sem, op as u16, 2);
    i.dst = src::VGPR0 + field(w, 0, 8) as u16;
    i.abs = field(w, 8, 3) as u8; // neg_hi
    i.op_sel = field(w, 11, 3) as u8;
    i.op_sel_hi = (field(w1, 27, 2) | field(w, 14, 1) << 2) as u8;
    i.clamp = field(w, 15, 1) != 0;
    i.src = [
        field(w1, 0, 9) as u16,
        field(w1, 9, 9) as u16,
        field(w1, 18, 9) as u16,
    ];
    i.neg = field(w1, 29, 3) as u8;
    let n = crate::disasm::base_name(&i);
    if matches!(i.src[0], src::DPP8 | src::DPP8FI | src::DPP16) {
        // Only the mixed-precision FMAs and the f16 dot product take DPP.
        let ok = n.starts_with("v_fma_mix")
            || n == "v_dot2_f32_f16"
            // GFX12's fp8/bf8 dot products too.
            || (isa == Isa::Gfx12 && n.starts_with("v_dot4_f32_") && n.contains('8'));
        if !ok
            || i.src[1..]
                .iter()
                .any(|&s| s == src::LITERAL || !valu_src_ok(s) || (233..=250).contains(&s))
        {
            return Err(DecodeError::Illegal);
        }
        decode_dpp(&mut i, words, true)?;
        return Ok(i);
    }
    for s in 0..3 {
        if !valu_src_ok(i.src[s]) || matches!(i.src[s], src::DPP8 | src::DPP8FI | src::DPP16) {
            return Err(DecodeError::Illegal);
        }
    }
    if let Some((d, a, b, c)) = crate::disasm::wmma_widths(isa, n) {
        // WMMA operands are VGPR tuples that must fit in the register file.
        let (d, a, b, c) = (d as u16, a as u16, b as u16, c as u16);
        // Sources 1 and 2 may also be constants, never SGPR tuples.
        let ok = |r: u16, w: u16| r >= 256 && r - 256 + w <= 256;
        let ok0 = |r: u16, w: u16| ok(r, w) || matches!(r, 124 | 235..=239 | 251..=253);
        let okc = |r: u16, w: u16| ok(r, w) || r == 124 || (128..=253).contains(&r);
        // GFX12's C operand may also be a literal.
        let lit_c = isa == Isa::Gfx12 && i.src[2] == src::LITERAL;
        if !ok(i.dst, d) || !ok0(i.src[0], a) || !okc(i.src[1], b) || !(lit_c || okc(i.src[2], c)) {
            return Err(DecodeError::Illegal);
        }
    }
    vsrc_or_literal(&mut i, words, 3, false)?;
    Ok(i)
}

fn decode_vopd(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let opx = field(w, 22, 4);
    let opy = field(w, 17, 5);
    let (nx, semx) = opcode(isa, Class::Vopdx, opx)?;
    let (ny, semy) = opcode(isa, Class::Vopdy, opy)?;
    let w1 = word(words, 1)?;
    let mut i = Inst::new(isa, Format::Vopd, semx, opx as u16, 2);
    i.opy = semy as u8;
    i.ency = opy as u8;
    i.src[0] = field(w, 0, 9) as u16;
    i.src[1] = src::VGPR0 + field(w, 9, 8) as u16;
    i.srcy[0] = field(w1, 0, 9) as u16;
    i.srcy[1] = src::VGPR0 + field(w1, 9, 8) as u16;
    let vdstx = field(w1, 24, 8) as u16;
    i.dst = src::VGPR0 + vdstx;
    i.sdst = src::VGPR0 + ((field(w1, 17, 7) << 1) as u16 | (!vdstx & 1));
    for s in [i.src[0], i.srcy[0]] {
        if !valu_src_ok(s) || matches!(s, src::DPP8 | src::DPP8FI | src::DPP16) {
            return Err(DecodeError::Illegal);
        }
    }
    // Unused vsrc1 of a mov half must be zero.
    if (nx.ends_with("mov_b32") && i.src[1] != src::VGPR0)
        || (ny.ends_with("mov_b32") && i.srcy[1] != src::VGPR0)
    {
        return Err(DecodeError::Illegal);
    }
    let k = |n: &str| n.contains("fmaak") || n.contains("fmamk");
    let lit = i.src[0] == src::LITERAL || i.srcy[0] == src::LITERAL || k(nx) || k(ny);
    take_literal(&mut i, words, lit)?;
    Ok(i)
}

fn decode_ds(isa: Isa, w: u32, words: &[u32]) -> Result<Inst, DecodeError> {
    let op = field(w, 18, 8);
    let (_, sem) = opcode(isa, Class::Ds, op)?;
    let w1 = word(words, 1)?;
    check_mbz(tables::fixed(isa, Class::Ds), op, w, w1)?;
    let mut i = Inst::new(isa, Format::Ds, sem, op as u16, 2);
    i.imm = field(w, 0, 8) as i32;
    i.imm1 = field(w, 8, 8) as u8;
    i.cache = field(w, 17, 1) as u8;
    i.src[0] = src::VGPR0 + field(w1, 0, 8) as u16;
    i.src[1] = src::VGPR0 + field(w1, 8, 8) as u16;
    i.src[2] = src::VGPR0 + field(w1, 16, 8) as u16;
    i.dst = src::VGPR0 + field(w1, 24, 8) as u16;
    let n = crate::disasm::base_name(&i);
    let dw = data_dwords(n);
    let two = if n.contains("2addr") { 2 } else { 1 };
    let rtn = if n.contains("_rtn") || n.starts_with("ds_load") {
        dw * two
    } else {
        dw
    };
    let d1 = if n == "ds_bvh_stack_rtn_b32" { 4 } else { dw };
    if i.dst - 256 + rtn > 256 || i.src[1] - 256 + dw > 256 || i.src[2] - 256 + d1 > 256 {
        return Err(DecodeError::Illegal);
    }
    Ok(i)
}
