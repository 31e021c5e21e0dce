//! Text form of a decoded instruction in LLVM's assembler syntax of its target (gfx1100 or
//! gfx1201, wave32), and the per-opcode operand facts (register widths, which operands exist)
//! that printing and execution share.
//!
//! Owns mnemonics, operand widths and `Display`. Operand facts are read off the semantic name
//! (`base_name`, gfx1100's spelling of the operation); what is printed is the encoding's own
//! name (`Inst::enc` in its generation's table) and, on GFX12, its cache policy (th/scope). Special immediates whose LLVM spelling is
//! symbolic (`hwreg(...)`, `sendmsg(...)`, `s_delay_alu`, `s_waitcnt_depctr`, DS swizzle
//! patterns) are printed numerically; the decoding oracle knows this.

use std::fmt::{self, Write};

use crate::decode::tables::{self, Class};
use crate::decode::{Dpp, Format, Inst, Isa, src};

/// The base (unsuffixed) name of a VALU operation by semantic id (unified numbering).
pub fn valu_name(op: u16) -> &'static str {
    strip(tables::sem_name(Class::Valu, op).unwrap_or("v_unknown"))
}

/// The opcode table class of an encoding format.
fn class(f: Format) -> Class {
    match f {
        Format::Sop2 => Class::Sop2,
        Format::Sopk => Class::Sopk,
        Format::Sop1 => Class::Sop1,
        Format::Sopc => Class::Sopc,
        Format::Sopp => Class::Sopp,
        Format::Smem => Class::Smem,
        Format::Vop1 => Class::Vop1,
        Format::Vop2 => Class::Vop2,
        Format::Vopc => Class::Vopc,
        Format::Vop3 | Format::Vop3sd => Class::Vop3,
        Format::Vop3p => Class::Vop3p,
        Format::Vopd => Class::Vopdx,
        Format::Ds => Class::Ds,
        Format::Flat => Class::Flat,
        Format::Global => Class::Global,
        Format::Scratch => Class::Scratch,
        Format::Mubuf => Class::Mubuf,
    }
}

/// The name the instruction's own generation gives it, as its table spells it (VALU: with
/// LLVM's `_e32`/`_e64` where the table has one).
fn enc_printed(i: &Inst) -> Option<&'static str> {
    let (c, op) = match i.format {
        Format::Vop1 => (Class::Vop1, i.enc.wrapping_sub(384)),
        Format::Vop2 => (Class::Vop2, i.enc.wrapping_sub(256)),
        f => (class(f), i.enc),
    };
    tables::names(i.isa, c).get(op as usize).copied().flatten()
}

/// The unsuffixed name the instruction's own generation gives it.
pub fn enc_name(i: &Inst) -> &'static str {
    strip(enc_printed(i).unwrap_or("unknown"))
}

fn strip(n: &str) -> &str {
    for s in ["_e32", "_e64", "_dpp"] {
        if let Some(b) = n.strip_suffix(s) {
            return b;
        }
    }
    n
}

/// Semantic base name of any instruction (gfx1100's spelling of the operation).
pub fn base_name(i: &Inst) -> &'static str {
    match i.format {
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd => {
            valu_name(i.op)
        }
        f => tables::sem_name(class(f), i.op).unwrap_or("unknown"),
    }
}

/// Mnemonic as LLVM prints it.
pub fn mnemonic(i: &Inst) -> String {
    if i.isa == Isa::Gfx9 {
        return crate::disasm9::mnemonic(i);
    }
    let (printed, dpp_base) = match i.format {
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd => {
            (enc_printed(i), true)
        }
        Format::Vop3p if i.dpp.is_some() => return format!("{}_e64_dpp", enc_name(i)),
        _ => (None, false),
    };
    match (printed, dpp_base) {
        (Some(p), true) if i.dpp.is_some() => {
            if i.format == Format::Vopc {
                strip(p).to_string()
            } else if matches!(i.format, Format::Vop3 | Format::Vop3sd) {
                format!("{}_e64_dpp", strip(p))
            } else {
                format!("{}_dpp", strip(p))
            }
        }
        (Some(p), true) => p.to_string(),
        _ => enc_name(i).to_string(),
    }
}

/// Whether a VOP3-encoded VALU operation writes an SGPR (compares, readlane, GFX12's
/// scalar-result transcendentals `v_s_*`).
pub fn vop3_sgpr_dst(op: u16) -> bool {
    op < 0x80 || op == 0x182 || op == 0x360 || (op >= 1024 && valu_name(op).starts_with("v_s_"))
}

/// Whether the VALU opcode's sources are floating point (so abs/neg modifiers apply).
pub fn float_src(op: u16) -> bool {
    let n = valu_name(op);
    let t: Vec<&str> = n.split('_').filter(|t| ty_width(t).is_some()).collect();
    let src = if n.starts_with("v_cvt_") && t.len() == 1 && !n.contains("_pk_") {
        None
    } else {
        t.last().copied()
    };
    // GFX12's conversions to fp8/bf8 take f32 sources.
    let to_f8 = n.starts_with("v_cvt_sr_")
        || n.starts_with("v_cvt_pk_fp8")
        || n.starts_with("v_cvt_pk_bf8");
    to_f8 || n.contains("bf16") || src.is_some_and(|t| t.starts_with('f'))
}

/// Whether the opcode accepts DPP (LLVM rejects DPP on 64-bit and a few special ops).
pub fn dpp_allowed(i: &Inst) -> bool {
    let n = valu_name(i.op);
    if n == "v_frexp_exp_i32_f32" && i.format == Format::Vop1 && i.src[0] == src::DPP16 {
        return false;
    }
    let w = valu_widths(i.op);
    if w.dst > 1 || w.src.iter().any(|&s| s > 1) || n.starts_with("v_s_") {
        return false;
    }
    if n.starts_with("v_cmp") && n.ends_with("64") {
        return false;
    }
    !matches!(
        n,
        "v_readfirstlane_b32"
            | "v_readlane_b32"
            | "v_writelane_b32"
            | "v_nop"
            | "v_pipeflush"
            | "v_swap_b32"
            | "v_swaprel_b32"
            | "v_permlane64_b32"
            | "v_permlane16_b32"
            | "v_permlanex16_b32"
            | "v_permlane16_var_b32"
            | "v_permlanex16_var_b32"
            | "v_fma_dx9_zero_f32"
            | "v_fmamk_f32"
            | "v_fmaak_f32"
            | "v_fmamk_f16"
            | "v_fmaak_f16"
            | "v_div_fixup_f32"
            | "v_mul_hi_i32"
            | "v_mul_hi_u32"
            | "v_mul_lo_u32"
            | "v_fmac_dx9_zero_f32"
            | "v_mad_u64_u32"
            | "v_mad_i64_i32"
            | "v_div_scale_f32"
            | "v_div_fmas_f32"
            | "v_mqsad_u32_u8"
            | "v_qsad_pk_u16_u8"
            | "v_mqsad_pk_u16_u8"
    )
}

/// Operand widths in dwords: destination and up to three sources (0 = operand absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Widths {
    /// Destination dwords (0: none).
    pub dst: u8,
    /// Source dwords.
    pub src: [u8; 3],
}

fn ty_width(t: &str) -> Option<u8> {
    let b = t.get(1..)?;
    if !matches!(t.as_bytes().first(), Some(b'f' | b'i' | b'u' | b'b')) {
        return None;
    }
    match b {
        "8" | "16" | "24" | "32" => Some(1),
        "64" => Some(2),
        "96" => Some(3),
        "128" => Some(4),
        _ => None,
    }
}

fn types(n: &str) -> Vec<u8> {
    n.split('_').filter_map(ty_width).collect()
}

/// Number of VALU sources by opcode range and name.
fn valu_nsrc(op: u16, n: &str) -> usize {
    // Ids of operations new in GFX12 keep their encoding's range below 1024; those new in
    // GFX9 are in GFX9's numbering (VOPC, VOP2 from 0x100, VOP1 from 0x140, VOP3 from 0x1c0),
    // here moved to GFX11's ranges.
    let gfx9 = crate::opcodes::VALU.len() + tables::GFX9_NEW;
    let enc = match (op as usize).checked_sub(gfx9) {
        Some(e @ 0x140..=0x1bf) => 0x180 + (e - 0x140) as u16,
        Some(e @ 0x1c0..) => 0x200 | e as u16,
        Some(e) => e as u16,
        None => op,
    };
    match enc & 0x3ff {
        0..=0xff => 2,
        0x100..=0x17f => {
            if matches!(
                n,
                "v_cndmask_b32" | "v_add_co_ci_u32" | "v_sub_co_ci_u32" | "v_subrev_co_ci_u32"
            ) || n.starts_with("v_fmam")
                || n.starts_with("v_fmaa")
            {
                3
            } else {
                2
            }
        }
        0x180..=0x1ff => {
            if matches!(n, "v_nop" | "v_pipeflush") {
                0
            } else {
                1
            }
        }
        _ => {
            if (n.starts_with("v_cvt_pk_") || n.starts_with("v_cvt_pknorm"))
                && n != "v_cvt_pk_u8_f32"
            {
                2
            } else {
                match n {
                    "v_lshlrev_b64"
                    | "v_lshrrev_b64"
                    | "v_ashrrev_i64"
                    | "v_add_f64"
                    | "v_mul_f64"
                    | "v_min_f64"
                    | "v_max_f64"
                    | "v_ldexp_f64"
                    | "v_mul_lo_u32"
                    | "v_mul_hi_u32"
                    | "v_mul_hi_i32"
                    | "v_trig_preop_f64"
                    | "v_readlane_b32"
                    | "v_writelane_b32"
                    | "v_ldexp_f32"
                    | "v_bfm_b32"
                    | "v_bcnt_u32_b32"
                    | "v_mbcnt_lo_u32_b32"
                    | "v_mbcnt_hi_u32_b32"
                    | "v_add_co_u32"
                    | "v_sub_co_u32"
                    | "v_subrev_co_u32"
                    | "v_add_nc_u16"
                    | "v_sub_nc_u16"
                    | "v_mul_lo_u16"
                    | "v_max_u16"
                    | "v_max_i16"
                    | "v_min_u16"
                    | "v_min_i16"
                    | "v_add_nc_i16"
                    | "v_sub_nc_i16"
                    | "v_add_nc_i32"
                    | "v_sub_nc_i32"
                    | "v_pack_b32_f16"
                    | "v_lshlrev_b16"
                    | "v_lshrrev_b16"
                    | "v_ashrrev_i16"
                    | "v_cvt_pk_i16_i32"
                    | "v_cvt_pk_u16_u32"
                    | "v_and_b16"
                    | "v_or_b16"
                    | "v_xor_b16"
                    | "v_interp_p1_f32"
                    | "v_interp_p2_f32"
                    | "v_cvt_pk_norm_i16_f16"
                    | "v_cvt_pk_norm_u16_f16"
                    | "v_cvt_pk_norm_i16_f32"
                    | "v_cvt_pk_norm_u16_f32"
                    | "v_minimum_f32"
                    | "v_maximum_f32"
                    | "v_minimum_f16"
                    | "v_maximum_f16"
                    | "v_minimum_f64"
                    | "v_maximum_f64"
                    | "v_cvt_sr_fp8_f32"
                    | "v_cvt_sr_bf8_f32"
                    | "v_cvt_pk_fp8_f32"
                    | "v_cvt_pk_bf8_f32"
                    | "v_permlane16_var_b32"
                    | "v_permlanex16_var_b32" => 2,
                    _ if n.starts_with("v_s_") => 1,
                    _ => 3,
                }
            }
        }
    }
}

/// Operand widths of a VALU opcode in the unified numbering.
pub fn valu_widths(op: u16) -> Widths {
    let n = valu_name(op);
    let ns = valu_nsrc(op, n);
    let t = types(n);
    let (d, s) = match t.len() {
        0 => (1, 1),
        1 => (t[0], t[0]),
        _ => (t[0], t[t.len() - 1]),
    };
    let mut w = Widths {
        dst: d,
        src: [0; 3],
    };
    for k in 0..ns {
        w.src[k] = s;
    }
    if n.starts_with("v_cmp") {
        w.dst = if n.starts_with("v_cmpx") { 0 } else { 1 };
        w.src = [s, s, 0];
        if n.contains("class") {
            w.src[1] = 1;
        }
    }
    match n {
        "v_mad_u64_u32" | "v_mad_i64_i32" => {
            w = Widths {
                dst: 2,
                src: [1, 1, 2],
            }
        }
        "v_lshlrev_b64" | "v_lshrrev_b64" | "v_ashrrev_i64" => w.src = [1, 2, 0],
        "v_lshl_add_u64" => w.src = [2, 1, 2],
        "v_ldexp_f64" | "v_trig_preop_f64" => w.src = [2, 1, 0],
        "v_qsad_pk_u16_u8" | "v_mqsad_pk_u16_u8" => {
            w = Widths {
                dst: 2,
                src: [2, 1, 2],
            }
        }
        "v_mqsad_u32_u8" => {
            w = Widths {
                dst: 4,
                src: [2, 1, 4],
            }
        }
        "v_div_fixup_f64" | "v_div_fmas_f64" | "v_div_scale_f64" | "v_fma_f64" => {
            w = Widths {
                dst: 2,
                src: [2, 2, 2],
            }
        }
        "v_cvt_pk_rtz_f16_f32" | "v_cvt_pk_u8_f32" => w.dst = 1,
        "v_cvt_pk_f32_fp8" | "v_cvt_pk_f32_bf8" => w.dst = 2,
        "v_nop" | "v_pipeflush" => {
            w = Widths {
                dst: 0,
                src: [0; 3],
            }
        }
        _ => {}
    }
    if vop3_sgpr_dst(op) {
        // Compare results and readlane land in SGPRs: one dword in wave32.
        if !n.starts_with("v_cmpx") {
            w.dst = 1;
        }
    }
    w
}

/// Operand widths of scalar opcodes: (dst, src0, src1).
pub fn salu_widths(i: &Inst) -> Widths {
    let n = base_name(i);
    let t = types(n);
    let (d, s) = match t.len() {
        0 => (1, 1),
        1 => (t[0], t[0]),
        _ => (t[0], t[t.len() - 1]),
    };
    let mut w = Widths {
        dst: d,
        src: [s, s, 0],
    };
    match i.format {
        Format::Sop1 => w.src[1] = 0,
        Format::Sopc => w.dst = 0,
        _ => {}
    }
    if n.starts_with("s_lshl")
        || n.starts_with("s_lshr")
        || n.starts_with("s_ashr")
        || n.starts_with("s_bfe_")
        || n.starts_with("s_bitcmp")
    {
        w.src[1] = 1;
    }
    if matches!(n, "s_bfm_b64") {
        w.src = [1, 1, 0];
    }
    if n.starts_with("s_bitset") {
        w.src[0] = 1;
    }
    if n.starts_with("s_cselect") || n.contains("saveexec") || n.contains("wrexec") {
        w.src[1] = if i.format == Format::Sop2 { d } else { 0 };
        w.src[0] = d;
    }
    w
}

fn reg(f: &mut String, prefix: &str, base: u16, n: u8) {
    if n <= 1 {
        let _ = write!(f, "{prefix}{base}");
    } else {
        let _ = write!(f, "{prefix}[{}:{}]", base, base + n as u16 - 1);
    }
}

/// Prints a 9-bit source operand of `n` dwords.
fn operand(f: &mut String, s: u16, n: u8, lit: u32, fp64: bool) {
    operand_k(f, s, n, lit, fp64, false)
}

/// `int16`: the operand is a 16-bit integer, whose inline float constants LLVM prints as the
/// half-precision bit pattern.
fn operand_k(f: &mut String, s: u16, n: u8, lit: u32, fp64: bool, int16: bool) {
    operand_x(f, s, n, lit, fp64, int16, false)
}

/// `int16`: a 16-bit operand (literal printed as 16 bits, integer operands' float constants as
/// their f16 bits); `float16`: f16 operands, whose inline constants keep their float spelling.
fn operand_x(f: &mut String, s: u16, n: u8, lit: u32, fp64: bool, int16: bool, float16: bool) {
    let n = n.max(1);
    if int16 && (240..=248).contains(&s) && !float16 {
        let h = [
            0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118,
        ][(s - 240) as usize];
        let _ = write!(f, "0x{h:x}");
        return;
    }
    match s {
        0..=105 => {
            let b = if n >= 4 {
                s & !3
            } else if n > 1 {
                s & !1
            } else {
                s
            };
            reg(f, "s", b, n)
        }
        106 if n > 1 => f.push_str("vcc"),
        106 => f.push_str("vcc_lo"),
        107 => f.push_str("vcc_hi"),
        108..=123 => {
            let b = s - 108;
            let b = if n > 1 {
                b & !((n as u16).min(4) - 1)
            } else {
                b
            };
            reg(f, "ttmp", b, n)
        }
        124 => f.push_str("null"),
        125 => f.push_str("m0"),
        126 if n > 1 => f.push_str("exec"),
        126 => f.push_str("exec_lo"),
        127 => f.push_str("exec_hi"),
        128..=192 => {
            let _ = write!(f, "{}", s - 128);
        }
        193..=208 => {
            let _ = write!(f, "-{}", s - 192);
        }
        235 => f.push_str("src_shared_base"),
        236 => f.push_str("src_shared_limit"),
        237 => f.push_str("src_private_base"),
        238 => f.push_str("src_private_limit"),
        239 => f.push_str("src_pops_exiting_wave_id"),
        240 => f.push_str("0.5"),
        241 => f.push_str("-0.5"),
        242 => f.push_str("1.0"),
        243 => f.push_str("-1.0"),
        244 => f.push_str("2.0"),
        245 => f.push_str("-2.0"),
        246 => f.push_str("4.0"),
        247 => f.push_str("-4.0"),
        248 if fp64 => f.push_str("0.15915494309189532"),
        248 => f.push_str("0.15915494"),
        251 => f.push_str("src_vccz"),
        254 => f.push_str("src_lds_direct"),
        252 => f.push_str("src_execz"),
        253 => f.push_str("src_scc"),
        255 if int16 => {
            // A 16-bit literal that equals an inline integer prints as that integer.
            let v = lit as u16 as i16;
            if (-16..=64).contains(&v) {
                let _ = write!(f, "{v}");
            } else {
                let _ = write!(f, "0x{:x}", lit & 0xffff);
            }
        }
        255 if n == 1 => {
            // A 32-bit literal holding an inline-constant value prints as that constant.
            let fl = [0.5f32, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0];
            if (-16..=64).contains(&(lit as i32)) {
                let _ = write!(f, "{}", lit as i32);
            } else if let Some(k) = fl.iter().position(|v| v.to_bits() == lit) {
                operand_x(f, 240 + k as u16, 1, 0, false, false, false);
            } else if lit == 0x3e22_f983 {
                f.push_str("0.15915494");
            } else {
                let _ = write!(f, "0x{lit:x}");
            }
        }
        255 => {
            let _ = write!(f, "0x{lit:x}");
        }
        256..=511 => reg(f, "v", s - 256, n),
        _ => {
            let _ = write!(f, "<bad {s}>");
        }
    }
}

struct Ctx<'a> {
    out: String,
    i: &'a Inst,
    /// Sources are 16-bit.
    int16: bool,
    /// Sources are f16.
    float16: bool,
}

impl Ctx<'_> {
    fn sep(&mut self) {
        if self.out.ends_with(' ') || self.out.is_empty() {
            return;
        }
        if !self.out.ends_with(' ') {
            self.out.push_str(", ");
        }
    }
    fn op(&mut self, s: u16, n: u8) {
        self.sep();
        if s == src::LITERAL
            && self.i.isa == Isa::Gfx12
            && self.i.format == Format::Vopc
            && self.int16
            && !self.float16
        {
            // GFX12 prints a VOPC 16-bit integer literal in hex, inline value or not.
            let _ = write!(self.out, "0x{:x}", self.i.literal & 0xffff);
            return;
        }
        operand_x(
            &mut self.out,
            s,
            n,
            self.i.literal,
            n == 2,
            self.int16 && s != self.i.dst,
            self.float16,
        );
    }
    fn vmod(&mut self, s: u16, n: u8, k: usize) {
        self.sep();
        // GFX12 prints VOP3 DPP sources' modifiers where the opcode takes them at all.
        let shown = if matches!(self.i.format, Format::Vop3 | Format::Vop3sd)
            && (self.i.dpp.is_none() || self.i.isa == Isa::Gfx12)
        {
            tables::vop3_mods(self.i.isa)[self.i.enc as usize & 1023]
        } else {
            0xff
        };
        // The 32-bit addend of the 16-bit multiply-adds is not a 16-bit operand.
        let saved16 = self.int16;
        if k == 2 && matches!(valu_name(self.i.op), "v_mad_u32_u16" | "v_mad_i32_i16") {
            self.int16 = false;
        }
        self.vmod_inner(s, n, k, shown);
        self.int16 = saved16;
    }

    fn vmod_inner(&mut self, s: u16, n: u8, k: usize, shown: u8) {
        let neg = self.i.neg >> k & 1 != 0 && shown >> (4 + k) & 1 != 0;
        let abs = self.i.abs >> k & 1 != 0 && shown >> k & 1 != 0;
        // Integer operands of VOP3 take sign extension where LLVM allows a modifier at all.
        let name = valu_name(self.i.op);
        let vop3 = matches!(self.i.format, Format::Vop3 | Format::Vop3sd);
        // An integer source of an instruction that takes float modifiers elsewhere spells its
        // neg bit sext(); so do the integer sources of VOP3 DPP forms.
        let mods = tables::vop3_mods(self.i.isa)[self.i.enc as usize & 1023];
        let int_src = mods != 0 && mods >> (4 + k) & 1 == 0;
        let _ = name;
        let g12dpp = self.i.isa == Isa::Gfx12 && self.i.dpp.is_some();
        let sext = if g12dpp {
            // GFX12: an integer source of a DPP form spells neg sext(), VOP3 or not.
            let int_operand =
                name == "v_ldexp_f32" || name == "v_ldexp_f16" || name == "v_cvt_pk_u8_f32";
            let float =
                name.starts_with("v_cndmask") || (float_src(self.i.op) && !(k > 0 && int_operand));
            self.i.neg >> k & 1 != 0 && !float
        } else {
            vop3 && self.i.neg >> k & 1 != 0
                && ((self.i.dpp.is_none() && int_src)
                    || (self.i.dpp.is_some() && !float_src(self.i.op)))
        };
        if sext {
            self.out.push_str("sext(");
            operand_x(
                &mut self.out,
                s,
                n,
                self.i.literal,
                n == 2,
                self.int16,
                self.float16,
            );
            self.out.push(')');
            return;
        }
        let (neg, abs) = if vop3 && !g12dpp && self.i.dpp.is_some() && !float_src(self.i.op) {
            (false, false)
        } else {
            (neg, abs)
        };
        if neg && !abs && matches!(s, 128..=208 | 240..=248 | 255) {
            // LLVM spells a negated integer inline constant neg(N) to keep it apart from -N.
            self.out.push_str("neg(");
            operand_x(
                &mut self.out,
                s,
                n,
                self.i.literal,
                n == 2,
                self.int16,
                self.float16,
            );
            self.out.push(')');
            return;
        }
        if neg {
            self.out.push('-');
        }
        if abs {
            self.out.push('|');
        }
        operand_x(
            &mut self.out,
            s,
            n,
            self.i.literal,
            n == 2,
            self.int16,
            self.float16,
        );
        if abs {
            self.out.push('|');
        }
    }
    fn word(&mut self, s: &str) {
        self.out.push(' ');
        self.out.push_str(s);
    }
}

impl fmt::Display for Inst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.isa == Isa::Gfx9 {
            return f.write_str(&crate::disasm9::text(self));
        }
        // GFX12's scalar f16 operations print their constants as 16-bit patterns.
        let salu16 =
            matches!(self.format, Format::Sop2 | Format::Sopc) && base_name(self).ends_with("_f16");
        // GFX12 spells the f16 packed-norm conversions' literal as 16 bits too.
        let norm16 = self.isa == Isa::Gfx12
            && matches!(
                valu_name(self.op),
                "v_cvt_pk_norm_i16_f16" | "v_cvt_pk_norm_u16_f16"
            );
        let int16 = salu16
            || norm16
            || matches!(
                self.format,
                Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd
            ) && {
                let n = valu_name(self.op);
                let t: Vec<&str> = n.split('_').filter(|t| ty_width(t).is_some()).collect();
                t.last()
                    .is_some_and(|t| matches!(*t, "i16" | "u16" | "b16" | "f16"))
                    && !n.starts_with("v_sat_pk")
                    && !n.contains("_pk_")
                    && !n.contains("dot2")
                    && n != "v_sad_u16"
            };
        // f16 sources, and the 16-bit multiply-adds with 32-bit results, spell inline constants
        // as floats while still printing 16-bit literals.
        let float16 = if salu16 {
            // Compares print them as bit patterns, arithmetic as floats.
            self.format != Format::Sopc
        } else {
            int16 && (valu_name(self.op).ends_with("f16"))
        };
        let mut c = Ctx {
            out: mnemonic(self),
            i: self,
            int16,
            float16,
        };
        c.out.push(' ');
        match self.format {
            Format::Sop2 | Format::Sop1 | Format::Sopc => scalar(&mut c),
            Format::Sopk => sopk(&mut c),
            Format::Sopp => sopp(&mut c),
            Format::Smem => smem(&mut c),
            Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd => {
                valu(&mut c)
            }
            Format::Vop3p => vop3p(&mut c),
            Format::Vopd => vopd(&mut c),
            Format::Ds => ds(&mut c),
            Format::Flat | Format::Global | Format::Scratch => flat(&mut c),
            Format::Mubuf => mubuf(&mut c),
        }
        f.write_str(c.out.trim_end())
    }
}

fn scalar(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    let w = salu_widths(i);
    match n {
        "s_getpc_b64" => return c.op(i.dst, 2),
        "s_setpc_b64" | "s_rfe_b64" => return c.op(i.src[0], 2),
        "s_sendmsg_rtn_b32" | "s_sendmsg_rtn_b64" => {
            c.op(i.dst, w.dst);
            c.sep();
            let _ = write!(c.out, "sendmsg({})", i.src[0]);
            return;
        }
        _ => {}
    }
    // GFX12's barrier and sleep operations take a source and no destination.
    let no_dst = matches!(
        n,
        "s_barrier_signal"
            | "s_barrier_signal_isfirst"
            | "s_barrier_init"
            | "s_barrier_join"
            | "s_wakeup_barrier"
            | "s_sleep_var"
    );
    if i.format != Format::Sopc && !no_dst {
        c.op(i.dst, w.dst);
    }
    if matches!(n, "s_fmaak_f32" | "s_fmamk_f32") {
        // GFX12's scalar FMAs with a K constant (the literal dword).
        let k = format!("0x{:x}", i.literal);
        c.op(i.src[0], 1);
        c.sep();
        if n == "s_fmamk_f32" {
            c.out.push_str(&k);
            c.op(i.src[1], 1);
        } else {
            c.op(i.src[1], 1);
            c.sep();
            c.out.push_str(&k);
        }
        return;
    }
    c.op(i.src[0], w.src[0]);
    if i.format != Format::Sop1 {
        c.op(i.src[1], w.src[1]);
    }
}

fn sopk(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    let imm = i.imm as u16;
    let hw = |imm: u16| {
        format!(
            "hwreg({}, {}, {})",
            imm & 0x3f,
            (imm >> 6) & 0x1f,
            ((imm >> 11) & 0x1f) + 1
        )
    };
    match n {
        "s_version" => c.out.push_str(&u16_imm(imm)),
        "s_getreg_b32" => {
            c.op(i.dst, 1);
            c.sep();
            c.out.push_str(&hw(imm));
        }
        "s_setreg_b32" => {
            c.out.push_str(&hw(imm));
            c.op(i.dst, 1);
        }
        "s_setreg_imm32_b32" => {
            c.out.push_str(&hw(imm));
            let _ = write!(c.out, ", {}", i.literal);
        }
        "s_call_b64" => {
            c.op(i.dst, 2);
            let _ = write!(c.out, ", {imm}");
        }
        "s_subvector_loop_begin" | "s_subvector_loop_end" => {
            c.op(i.dst, 1);
            let _ = write!(c.out, ", {imm}");
        }
        _ => {
            c.op(i.dst, 1);
            let _ = write!(c.out, ", 0x{imm:x}");
        }
    }
}

/// LLVM prints small unsigned immediates in decimal and the rest in hex.
fn u16_imm(v: u16) -> String {
    if v <= 64 {
        v.to_string()
    } else {
        format!("0x{v:x}")
    }
}

fn signed_hex(v: i32) -> String {
    if v < 0 {
        format!("-0x{:x}", -(v as i64))
    } else {
        format!("0x{v:x}")
    }
}

fn sopp(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    let imm = i.imm as u16;
    match n {
        "s_endpgm" if imm != 0 => {
            let _ = write!(c.out, "{imm}");
        }
        "s_endpgm"
        | "s_endpgm_saved"
        | "s_wakeup"
        | "s_barrier"
        | "s_code_end"
        | "s_icache_inv"
        | "s_ttracedata"
        | "s_wait_idle"
        | "s_barrier_leave"
        | "s_endpgm_ordered_ps_done" => {}
        _ if n.starts_with("s_branch") || n.starts_with("s_cbranch") => {
            let _ = write!(c.out, "{imm}");
        }
        "s_waitcnt" => {
            let vm = (imm >> 10) & 0x3f;
            let exp = imm & 7;
            let lgkm = (imm >> 4) & 0x3f;
            let mut parts = Vec::new();
            let all = vm == 0x3f && exp == 7 && lgkm == 0x3f;
            if vm != 0x3f || all {
                parts.push(format!("vmcnt({vm})"));
            }
            if exp != 7 || all {
                parts.push(format!("expcnt({exp})"));
            }
            if lgkm != 0x3f || all {
                parts.push(format!("lgkmcnt({lgkm})"));
            }
            c.out.push_str(&parts.join(" "));
        }
        "s_nop" | "s_sleep" | "s_setprio" | "s_trap" | "s_setkill" | "s_sethalt"
        | "s_denorm_mode" | "s_incperflevel" | "s_decperflevel" | "s_delay_alu"
        | "s_waitcnt_depctr" | "s_barrier_wait" => c.out.push_str(&u16_imm(imm)),
        "s_sendmsg" | "s_sendmsghalt" => {
            let _ = write!(c.out, "sendmsg({imm})");
        }
        _ => {
            let _ = write!(c.out, "0x{imm:x}");
        }
    }
}

fn smem(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    if matches!(n, "s_gl1_inv" | "s_dcache_inv") {
        return;
    }
    if n.contains("prefetch") {
        // GFX12's prefetches: base (none when PC-relative), offset, soffset, the sdata field
        // as a count; no cache policy.
        if !n.ends_with("pc_rel") {
            let buffer = n.contains("buffer");
            c.op(
                if buffer { i.src[0] & !3 } else { i.src[0] },
                if buffer { 4 } else { 2 },
            );
        }
        c.sep();
        c.out.push_str(&signed_hex(i.imm));
        c.op(i.saddr, 1);
        let _ = write!(c.out, ", {}", i.dst);
        return;
    }
    let dw = match n {
        _ if n.ends_with("b64") => 2,
        _ if n.ends_with("b96") => 3,
        _ if n.ends_with("b128") => 4,
        _ if n.ends_with("b256") => 8,
        _ if n.ends_with("b512") => 16,
        _ => 1,
    };
    if n.starts_with("s_atc_probe") {
        c.out.push_str(&u16_imm(i.dst));
    } else {
        c.op(if dw >= 3 { i.dst & !3 } else { i.dst }, dw);
    }
    let sb = if n.contains("buffer") {
        i.src[0] & !3
    } else {
        i.src[0]
    };
    c.op(sb, if n.contains("buffer") { 4 } else { 2 });
    if i.saddr != src::NULL {
        c.op(i.saddr, 1);
        if i.imm != 0 {
            let _ = write!(c.out, " offset:{}", signed_hex(i.imm));
        }
    } else if i.imm != 0 || i.isa == Isa::Gfx12 {
        c.sep();
        c.out.push_str(&signed_hex(i.imm));
    } else {
        c.sep();
        c.out.push_str("null");
    }
    if !n.starts_with("s_atc_probe") {
        cache_bits(c, i.cache);
    }
}

fn cache_bits(c: &mut Ctx, bits: u8) {
    if c.i.isa == Isa::Gfx12 {
        return cache_policy(c, bits);
    }
    if bits & 1 != 0 {
        c.word("glc");
    }
    if bits & 2 != 0 {
        c.word("slc");
    }
    if bits & 4 != 0 {
        c.word("dlc");
    }
}

fn valu(c: &mut Ctx) {
    let i = c.i;
    let n = valu_name(i.op);
    let w = valu_widths(i.op);
    let e64 = matches!(i.format, Format::Vop3 | Format::Vop3sd);
    let nsrc = w.src.iter().filter(|&&x| x > 0).count();
    if n == "v_nop" || n == "v_pipeflush" {
        return;
    }
    if n == "v_mov_b16" {
        let half = |c: &mut Ctx, r: u16, hi: bool| {
            c.sep();
            if r >= 256 {
                let (v, h) = if e64 {
                    (r - 256, hi)
                } else {
                    ((r - 256) & 127, (r - 256) & 128 != 0)
                };
                let _ = write!(c.out, "v{v}.{}", if h { 'h' } else { 'l' });
            } else {
                operand_k(&mut c.out, r, 1, i.literal, false, true);
            }
        };
        half(c, i.dst, i.op_sel & 8 != 0);
        half(c, i.src[0], i.op_sel & 1 != 0);
        dpp_text(c);
        return;
    }
    // Destination(s).
    if w.dst > 0 {
        if i.op < 0x100 && !e64 {
            c.op(src::VCC_LO, 1);
        } else {
            c.op(i.dst, w.dst);
        }
    }
    if i.format == Format::Vop3sd {
        c.op(i.sdst, 1);
    } else if !e64
        && matches!(
            n,
            "v_add_co_ci_u32" | "v_sub_co_ci_u32" | "v_subrev_co_ci_u32"
        )
    {
        c.op(src::VCC_LO, 1);
    }
    let k = n.starts_with("v_fmamk") || n.starts_with("v_fmaak");
    let srcs: usize = if k
        || !e64
            && matches!(
                n,
                "v_cndmask_b32" | "v_add_co_ci_u32" | "v_sub_co_ci_u32" | "v_subrev_co_ci_u32"
            ) {
        2
    } else {
        nsrc
    };
    for s in 0..srcs {
        if n.starts_with("v_fmamk") && s == 1 {
            c.sep();
            let _ = write!(c.out, "0x{:x}", i.literal);
        }
        let width = w.src[s];
        if e64 || (i.dpp.is_some() && s < 2) {
            c.vmod(i.src[s], width, s);
        } else {
            c.op(i.src[s], width);
        }
    }
    if n.starts_with("v_fmaak") {
        c.sep();
        let _ = write!(c.out, "0x{:x}", i.literal);
    }
    let abs_vcc = i.isa == Isa::Gfx12
        && !e64
        && i.dpp.is_some()
        && n == "v_cndmask_b32"
        && i.abs & 2 != 0
        && c.out.ends_with('|');
    if abs_vcc {
        // GFX12's LLVM closes src1's |abs| after the implicit vcc_lo.
        c.out.pop();
        c.out.push_str(", vcc_lo|");
    } else if !e64
        && matches!(
            n,
            "v_cndmask_b32" | "v_add_co_ci_u32" | "v_sub_co_ci_u32" | "v_subrev_co_ci_u32"
        )
    {
        c.op(src::VCC_LO, 1);
    }
    // GFX12's fp8/bf8 conversions spell op_sel as the byte they read or write.
    let byte_sel = match n {
        "v_cvt_f32_fp8" | "v_cvt_f32_bf8" => Some((i.op_sel & 1) << 1 | (i.op_sel >> 1 & 1)),
        "v_cvt_sr_fp8_f32" | "v_cvt_sr_bf8_f32" => {
            Some((i.op_sel >> 3 & 1) << 1 | (i.op_sel >> 2 & 1))
        }
        _ => None,
    };
    if e64 {
        let shown = tables::vop3_opsel(i.isa)[i.enc as usize & 1023];
        if let Some(b) = byte_sel {
            if b != 0 {
                let _ = write!(c.out, " byte_sel:{b}");
            }
        } else if i.op_sel & shown != 0 {
            let sel = i.op_sel & shown;
            // fmac's tied accumulator takes an op_sel position of its own.
            let slots = if n.starts_with("v_fmac") { 3 } else { nsrc };
            let mut bits: Vec<String> = (0..slots).map(|k| (sel >> k & 1).to_string()).collect();
            if n.starts_with("v_permlane") {
                // op_sel carries fi and bound_ctrl here: two flags, no destination bit.
                bits.truncate(2);
            } else {
                bits.push((sel >> 3 & 1).to_string());
            }
            let _ = write!(c.out, " op_sel:[{}]", bits.join(","));
        }
        if i.clamp {
            c.word("clamp");
        }
        match i.omod {
            1 => c.word("mul:2"),
            2 => c.word("mul:4"),
            3 => c.word("div:2"),
            _ => {}
        }
    }
    dpp_text(c);
}

fn dpp_text(c: &mut Ctx) {
    match c.i.dpp {
        None => {}
        Some(Dpp::Dpp8 { sel, fi }) => {
            let s: Vec<String> = (0..8).map(|k| ((sel >> (3 * k)) & 7).to_string()).collect();
            let _ = write!(c.out, " dpp8:[{}]", s.join(","));
            if fi {
                c.word("fi:1");
            }
        }
        Some(Dpp::Dpp16 {
            ctrl,
            row_mask,
            bank_mask,
            bound_ctrl,
            fi,
        }) => {
            let t = match ctrl {
                0x000..=0x0ff => {
                    let q: Vec<String> = (0..4)
                        .map(|k| ((ctrl >> (2 * k)) & 3).to_string())
                        .collect();
                    format!("quad_perm:[{}]", q.join(","))
                }
                0x101..=0x10f => format!("row_shl:{}", ctrl & 0xf),
                0x111..=0x11f => format!("row_shr:{}", ctrl & 0xf),
                0x121..=0x12f => format!("row_ror:{}", ctrl & 0xf),
                0x140 => "row_mirror".to_string(),
                0x141 => "row_half_mirror".to_string(),
                0x150..=0x15f => format!("row_share:{}", ctrl & 0xf),
                _ => format!("row_xmask:{}", ctrl & 0xf),
            };
            let _ = write!(
                c.out,
                " {t} row_mask:0x{row_mask:x} bank_mask:0x{bank_mask:x}"
            );
            if bound_ctrl {
                c.word("bound_ctrl:1");
            }
            if fi {
                c.word("fi:1");
            }
        }
    }
}

fn vop3p(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    let nsrc = if n.contains("fma")
        || n.contains("mad")
        || n.contains("dot")
        || n.starts_with("v_wmma")
        || n.starts_with("v_swmmac")
    {
        3
    } else {
        2
    };
    let bits = |v: u8| {
        (0..nsrc)
            .map(|k| (v >> k & 1).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if n.starts_with("v_fma_mix") {
        // Mixed precision: neg_lo/neg_hi act as neg/abs source modifiers; op_sel_hi defaults to 0.
        c.op(i.dst, 1);
        for k in 0..3 {
            c.sep();
            let (neg, abs) = (i.neg >> k & 1 != 0, i.abs >> k & 1 != 0);
            if neg && !abs && matches!(i.src[k], 128..=208 | 240..=248 | 255) {
                c.out.push_str("neg(");
                operand_x(&mut c.out, i.src[k], 1, i.literal, false, true, true);
                c.out.push(')');
                continue;
            }
            if neg {
                c.out.push('-');
            }
            if abs {
                c.out.push('|');
            }
            // LLVM prints the literal of a mixed-precision FMA as 16 bits.
            operand_x(&mut c.out, i.src[k], 1, i.literal, false, true, true);
            if abs {
                c.out.push('|');
            }
        }
        if i.op_sel & 7 != 0 {
            let _ = write!(c.out, " op_sel:[{}]", bits(i.op_sel));
        }
        if i.op_sel_hi & 7 != 0 {
            let _ = write!(c.out, " op_sel_hi:[{}]", bits(i.op_sel_hi));
        }
        if i.clamp {
            c.word("clamp");
        }
        dpp_text(c);
        return;
    }
    let (wd, ws): (u8, [u8; 3]) = match wmma_widths(i.isa, n) {
        Some((d, a, b, c)) => (d, [a, b, c]),
        None => (1, [1, 1, 1]),
    };
    c.op(i.dst, wd);
    for (s, w) in ws.iter().enumerate().take(nsrc) {
        c.sep();
        let f16_c = s == 2
            && i.isa == Isa::Gfx12
            && (n.starts_with("v_wmma_f16") || n.starts_with("v_wmma_bf16"));
        if f16_c && i.src[s] == src::LITERAL {
            // GFX12 prints a 16-bit accumulator's literal as 16 bits.
            let _ = write!(c.out, "0x{:x}", i.literal & 0xffff);
            continue;
        }
        // GFX11 spells a wide operand's inline constant in f64; GFX12 in f32.
        operand(
            &mut c.out,
            i.src[s],
            *w,
            i.literal,
            *w >= 2 && i.isa == Isa::Gfx11,
        );
    }
    if n.starts_with("v_swmmac") {
        // The sparse index register's key (which of its halves or bytes) lives in op_sel.
        if i.op_sel & 3 != 0 {
            let _ = write!(c.out, " index_key:{}", i.op_sel & 3);
        }
    } else if i.op_sel != 0 {
        let _ = write!(c.out, " op_sel:[{}]", bits(i.op_sel));
    }
    let full = (1u8 << nsrc) - 1;
    let wide_result = n.starts_with("v_wmma_f32") || n.starts_with("v_wmma_i32");
    if i.op_sel_hi & full != full && !wide_result {
        let _ = write!(c.out, " op_sel_hi:[{}]", bits(i.op_sel_hi));
    }
    if i.neg != 0 {
        let _ = write!(c.out, " neg_lo:[{}]", bits(i.neg));
    }
    if i.abs != 0 {
        let _ = write!(c.out, " neg_hi:[{}]", bits(i.abs));
    }
    if i.clamp {
        c.word("clamp");
    }
    dpp_text(c);
}

fn vopd(c: &mut Ctx) {
    let i = c.i;
    let half = |c: &mut Ctx, name: &str, dst: u16, s0: u16, s1: u16| {
        c.out.push_str(name);
        c.out.push(' ');
        c.op(dst, 1);
        c.op(s0, 1);
        if name.ends_with("fmamk_f32") {
            c.sep();
            let _ = write!(c.out, "0x{:x}", i.literal);
        }
        if !name.ends_with("mov_b32") {
            c.op(s1, 1);
        }
        if name.ends_with("fmaak_f32") {
            c.sep();
            let _ = write!(c.out, "0x{:x}", i.literal);
        }
    };
    c.out.clear();
    let name = |c, op: u8| {
        tables::names(i.isa, c)
            .get(op as usize)
            .copied()
            .flatten()
            .unwrap_or("?")
    };
    let nx = name(Class::Vopdx, i.enc as u8);
    let ny = name(Class::Vopdy, i.ency);
    half(c, nx, i.dst, i.src[0], i.src[1]);
    c.out.push_str(" :: ");
    half(c, ny, i.sdst, i.srcy[0], i.srcy[1]);
}

/// DS operand shape: (has vdst, data operands, data dwords, dst dwords, two offsets).
fn ds_shape(n: &str) -> (bool, usize, u8, u8, bool) {
    let t = types(n);
    let w = *t.last().unwrap_or(&1);
    let two = n.contains("2addr");
    let rtn = n.contains("_rtn")
        || n.starts_with("ds_load")
        || n.contains("permute")
        || n == "ds_swizzle_b32"
        || n.starts_with("ds_consume")
        || n.starts_with("ds_append")
        || n.starts_with("ds_bvh")
        || n == "ds_ordered_count";
    let ndata = if n.starts_with("ds_load")
        || n == "ds_swizzle_b32"
        || n == "ds_ordered_count"
        || n.starts_with("ds_consume")
        || n.starts_with("ds_append")
        || n == "ds_nop"
    {
        0
    } else if n.contains("cmpstore")
        || n.contains("mskor")
        || (two && !n.starts_with("ds_load"))
        || n.starts_with("ds_wrap")
    {
        2
    } else {
        1
    };
    let dstw = if two && (n.starts_with("ds_load") || rtn) {
        w * 2
    } else if n.contains("condxchg") {
        2
    } else {
        w
    };
    (rtn, ndata, w, dstw, two)
}

fn ds(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    if n == "ds_nop" {
        return;
    }
    let (rtn, ndata, w, dstw, two) = ds_shape(n);
    if rtn {
        c.op(i.dst, dstw);
    }
    if !(n.starts_with("ds_consume") || n.starts_with("ds_append") || n.contains("addtid")) {
        c.op(i.src[0], 1);
    }
    for k in 0..ndata {
        c.op(i.src[1 + k], w);
    }
    if n == "ds_bvh_stack_rtn_b32" {
        c.op(i.src[2], 4);
    }
    if two {
        if i.imm != 0 {
            let _ = write!(c.out, " offset0:{}", i.imm);
        }
        if i.imm1 != 0 {
            let _ = write!(c.out, " offset1:{}", i.imm1);
        }
    } else {
        let off = (i.imm as u32) | (i.imm1 as u32) << 8;
        if off != 0 {
            let _ = write!(c.out, " offset:{off}");
        }
    }
    if i.cache & 1 != 0 {
        c.word("gds");
    }
}

fn flat(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    if matches!(n, "global_inv" | "global_wb" | "global_wbinv") {
        // GFX12's cache controls: no operands, only the policy.
        return cache_bits(c, i.cache);
    }
    let t = types(n);
    // GFX12's block loads and stores move 32 VGPRs.
    let w = if n.ends_with("_block") {
        32
    } else {
        *t.last().unwrap_or(&1)
    };
    let load = n.contains("load");
    let store = n.contains("store");
    let atomic = !load && !store;
    let rtn = load || (atomic && i.cache & 1 != 0);
    if rtn {
        c.op(i.dst, w);
    }
    let addr_w = match i.format {
        Format::Flat => 2,
        Format::Global if i.saddr == src::NULL => 2,
        _ => 1,
    };
    if n.contains("addtid") {
        // No address VGPR: the lane id supplies the offset.
    } else if i.format == Format::Scratch && !i.sve {
        c.sep();
        c.out.push_str("off");
    } else {
        c.op(i.src[0], addr_w);
    }
    if !load {
        c.op(i.src[1], if n.contains("cmpswap") { w * 2 } else { w });
    }
    if i.format != Format::Flat {
        c.sep();
        if i.saddr == src::NULL {
            c.out.push_str("off");
        } else {
            operand(
                &mut c.out,
                i.saddr,
                if i.format == Format::Global { 2 } else { 1 },
                0,
                false,
            );
        }
    }
    if i.imm != 0 {
        let _ = write!(c.out, " offset:{}", i.imm);
    }
    cache_bits(c, i.cache);
}

/// Data registers of a MUBUF instruction (`tfe` adds the status dword).
pub fn mubuf_data_width(n: &str, tfe: bool) -> u8 {
    let t = types(n);
    let mut w = *t.last().unwrap_or(&1);
    if let Some(f) = n.rsplit('_').next().filter(|_| n.contains("format")) {
        w = (f.len() as u8).max(1);
        if n.contains("d16") {
            w = w.div_ceil(2);
        }
    }
    if n.contains("cmpswap") {
        w *= 2;
    }
    w + tfe as u8
}

fn mubuf(c: &mut Ctx) {
    let i = c.i;
    let n = base_name(i);
    if n.ends_with("_inv") {
        return;
    }
    let w = mubuf_data_width(n, i.op_sel & 1 != 0);
    if !n.contains("_lds_") {
        c.op(i.dst, w);
    }
    let (offen, idxen) = (i.op_sel & 2 != 0, i.op_sel & 4 != 0);
    if offen || idxen {
        c.op(i.src[0], if offen && idxen { 2 } else { 1 });
    } else {
        c.sep();
        c.out.push_str("off");
    }
    c.op(i.src[1], 4);
    c.op(i.saddr, 1);
    if i.isa == Isa::Gfx12 && n.starts_with("tbuffer") && i.imm1 != 1 {
        // GFX12's buffer format (1 is the default); printed by number.
        let _ = write!(c.out, " format:{}", i.imm1);
    }
    if idxen {
        c.word("idxen");
    }
    if offen {
        c.word("offen");
    }
    if i.imm != 0 {
        let _ = write!(c.out, " offset:{}", i.imm);
    }
    cache_bits(c, i.cache);
    if i.op_sel & 1 != 0 {
        c.word("tfe");
    }
}

/// GFX12's cache policy, `th | scope << 3`, as LLVM spells it for loads, stores and atomics.
fn cache_policy(c: &mut Ctx, bits: u8) {
    let n = enc_name(c.i);
    let (th, scope) = (bits & 7, bits >> 3 & 3);
    let kind = if n.contains("store") {
        "STORE"
    } else if n.contains("load") || c.i.format == Format::Smem || !n.contains("atomic") {
        "LOAD"
    } else {
        "ATOMIC"
    };
    let t = match (kind, th) {
        (_, 0) => String::new(),
        ("ATOMIC", 1) => "TH_ATOMIC_RETURN".into(),
        ("ATOMIC", 2) => "TH_ATOMIC_NT".into(),
        ("ATOMIC", 3) => "TH_ATOMIC_NT_RETURN".into(),
        ("ATOMIC", 4 | 5) if scope >= 2 => "TH_ATOMIC_CASCADE_RT".into(),
        ("ATOMIC", 6 | 7) if scope >= 2 => "TH_ATOMIC_CASCADE_NT".into(),
        ("ATOMIC", t) => format!("TH_ATOMIC_0x{t:x}"),
        (k, 1) => format!("TH_{k}_NT"),
        (k, 2) => format!("TH_{k}_HT"),
        (k, 3) if scope == 3 => format!("TH_{k}_BYPASS"),
        ("LOAD", 3) => "TH_LOAD_LU".into(),
        (_, 3) => "TH_STORE_RT_WB".into(),
        (k, 4) => format!("TH_{k}_NT_RT"),
        (k, 5) => format!("TH_{k}_RT_NT"),
        (k, 6) => format!("TH_{k}_NT_HT"),
        ("LOAD", _) => "0x7".into(),
        _ => "TH_STORE_NT_WB".into(),
    };
    if !t.is_empty() {
        c.word(&format!("th:{t}"));
    }
    if scope != 0 {
        c.word(["", "scope:SCOPE_SE", "scope:SCOPE_DEV", "scope:SCOPE_SYS"][scope as usize]);
    }
}

/// VGPRs of a (sparse) matrix multiply's operands (D, A, B, C; for SWMMAC C is the index
/// register), wave32: GFX11 holds A and B twice over (16-bit elements: 8 VGPRs), GFX12 once.
pub fn wmma_widths(isa: Isa, n: &str) -> Option<(u8, u8, u8, u8)> {
    if !n.starts_with("v_wmma") && !n.starts_with("v_swmmac") {
        return None;
    }
    if isa == Isa::Gfx11 {
        let s = if n.ends_with("iu8") {
            4
        } else if n.ends_with("iu4") {
            2
        } else {
            8
        };
        return Some((8, s, s, 8));
    }
    // Output: f16/bf16 results pack two per VGPR.
    let d = if n.starts_with("v_wmma_f16")
        || n.starts_with("v_wmma_bf16")
        || n.starts_with("v_swmmac_f16")
        || n.starts_with("v_swmmac_bf16")
    {
        4
    } else {
        8
    };
    // A: 16 elements of the K slice per lane (x16) or 32 (x32/x64 sparse halves).
    let a = if n.ends_with("iu4") {
        if n.contains("x64") { 2 } else { 1 }
    } else if n.ends_with("iu8") || n.contains("fp8") || n.contains("bf8") {
        2
    } else {
        4
    };
    let a = if n.starts_with("v_wmma_i32_16x16x32_iu4") {
        2
    } else {
        a
    };
    if n.starts_with("v_swmmac") {
        return Some((d, a, 2 * a, 1));
    }
    Some((d, a, a, d))
}
