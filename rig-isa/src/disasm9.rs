//! Text form of a gfx942 (GFX9/CDNA3) instruction in LLVM's syntax (wave64): the printed name
//! from gfx942's table, operand widths from that name, SDWA/DPP selects, AGPRs, sc0/nt/sc1.
//!
//! Kept apart from `disasm` (the GFX11/GFX12 printer) so neither generation's spelling rules
//! reach into the other's; `Display for Inst` hands a `Isa::Gfx9` instruction here.

use std::fmt::Write;

use crate::decode::tables::{self, Class, strip_suffix};
use crate::decode::{Dpp, Format, Inst, Isa, src};

fn class(i: &Inst) -> Class {
    match i.format {
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

/// The table index of `i`'s opcode in its class (VOP1/VOP2 keep the unified number in `enc`).
fn table_op(i: &Inst) -> usize {
    match i.format {
        Format::Vop1 => i.enc as usize - 0x140,
        Format::Vop2 => i.enc as usize - 0x100,
        _ => i.enc as usize,
    }
}

/// gfx942's printed name of `i` (with LLVM's `_e32`/`_e64` where its table has one).
pub fn printed(i: &Inst) -> &'static str {
    tables::names(Isa::Gfx9, class(i))
        .get(table_op(i))
        .copied()
        .flatten()
        .unwrap_or("unknown")
}

/// gfx942's name of `i` without encoding suffix.
pub fn name(i: &Inst) -> &'static str {
    strip_suffix(printed(i))
}

/// The mnemonic as LLVM prints it for this encoding.
pub fn mnemonic(i: &Inst) -> String {
    let n = printed(i);
    if i.sdwa.is_some() {
        format!("{}_sdwa", strip_suffix(n))
    } else if i.dpp.is_some() {
        format!("{}_dpp", strip_suffix(n))
    } else {
        n.to_string()
    }
}

fn ty(t: &str) -> Option<u8> {
    Some(match t {
        "f64" | "i64" | "u64" | "b64" => 2,
        "f32" | "i32" | "u32" | "b32" | "f16" | "i16" | "u16" | "b16" | "i8" | "u8" | "i4"
        | "u4" | "bf16" | "i24" | "u24" => 1,
        _ => return None,
    })
}

/// (dst, src0, src1, src2) widths in dwords of a scalar or vector operation named `n`.
pub(crate) fn widths(n: &str, format: Format) -> [u8; 4] {
    let t: Vec<u8> = n.split('_').filter_map(ty).collect();
    let first = t.first().copied().unwrap_or(1);
    let last = t.last().copied().unwrap_or(1);
    let mut w = [first, last, last, last];
    let vector = n.starts_with("v_");
    if vector {
        if n.starts_with("v_pk_") && n.ends_with("f32") || n == "v_pk_mov_b32" {
            return [2, 2, 2, 2];
        }
        match n {
            "v_lshlrev_b64" | "v_lshrrev_b64" | "v_ashrrev_i64" => w = [2, 1, 2, 1],
            "v_lshl_add_u64" => w = [2, 2, 1, 2],
            "v_ldexp_f64" | "v_trig_preop_f64" => w = [2, 2, 1, 1],
            "v_cmp_class_f64" | "v_cmpx_class_f64" => w = [1, 2, 1, 1],
            "v_mad_u64_u32" | "v_mad_i64_i32" => w = [2, 1, 1, 2],
            "v_mqsad_pk_u16_u8" | "v_qsad_pk_u16_u8" => w = [2, 2, 1, 2],
            "v_mqsad_u32_u8" => w = [4, 2, 1, 4],
            "v_div_fixup_legacy_f16" => w = [1, 1, 1, 1],
            _ => {}
        }
        if n.starts_with("v_cvt_pk_f32_") {
            w[0] = 2;
        } else if n.contains("_cvt_pk")
            || n.contains("_dot")
            || n.starts_with("v_cvt_f32_") && !n.ends_with("f64")
        {
            w[0] = 1;
        }
        if n.starts_with("v_cmp") {
            w[0] = 2;
        }
        return w;
    }
    let _ = format;
    match n {
        "s_lshl_b64" | "s_lshr_b64" | "s_ashr_i64" | "s_bfe_u64" | "s_bfe_i64" => [2, 2, 1, 1],
        "s_bfm_b64" => [2, 1, 1, 1],
        "s_rfe_restore_b64" => [2, 2, 1, 1],
        "s_bitset0_b64" | "s_bitset1_b64" => [2, 1, 1, 1],
        "s_bitcmp0_b64" | "s_bitcmp1_b64" => [1, 2, 1, 1],
        "s_bcnt0_i32_b64" | "s_bcnt1_i32_b64" | "s_ff0_i32_b64" | "s_ff1_i32_b64"
        | "s_flbit_i32_b64" | "s_flbit_i32_i64" => [1, 2, 2, 2],
        _ => w,
    }
}

/// Whether source `k` of the VALU operation `n` takes float modifiers (neg/abs).
fn float_src(n: &str, k: usize) -> bool {
    let last = n.rsplit('_').next().unwrap_or("");
    let fl = matches!(last, "f16" | "f32" | "f64") || n == "v_cndmask_b32";
    let int_second = k == 1
        && (n.starts_with("v_ldexp")
            || n.contains("class")
            || n.starts_with("v_trig_preop")
            || n.starts_with("v_cvt_sr_"));
    fl && !int_second
}

fn reg(f: &mut String, prefix: &str, base: u16, n: u8) {
    if n <= 1 {
        let _ = write!(f, "{prefix}{base}");
    } else {
        let _ = write!(f, "{prefix}[{}:{}]", base, base + n as u16 - 1);
    }
}

/// Whether a VALU operation named `n` has 16-bit sources, and whether they are f16.
pub(crate) fn sixteen(n: &str) -> (bool, bool) {
    let last = n.rsplit('_').next().unwrap_or("");
    let s16 = matches!(last, "f16" | "i16" | "u16" | "b16")
        && !n.contains("_pk_")
        && !n.contains("dot")
        && !n.starts_with("v_cvt_pkrtz")
        && !n.starts_with("v_pack");
    (s16, s16 && last == "f16")
}

/// A 16-bit source: inline float constants of integer operations print as f16 bit patterns,
/// literals as 16 bits (or the inline integer they equal).
fn operand16(f: &mut String, s: u16, lit: u32, float16: bool) {
    if (240..=248).contains(&s) && !float16 {
        let h = [
            0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118,
        ][(s - 240) as usize];
        let _ = write!(f, "0x{h:x}");
    } else if s == src::LITERAL {
        let v = lit as u16 as i16;
        if (-16..=64).contains(&v) {
            let _ = write!(f, "{v}");
        } else {
            let _ = write!(f, "0x{:x}", lit & 0xffff);
        }
    } else {
        operand(f, s, 1, lit, false);
    }
}

/// Prints operand `s` (shared numbering) of `n` dwords; `acc`: a VGPR operand is an AGPR.
fn operand(f: &mut String, s: u16, n: u8, lit: u32, acc: bool) {
    let n = n.max(1);
    match s {
        0..=101 => reg(f, "s", align(s, n), n),
        102 if n > 1 => f.push_str("flat_scratch"),
        102 => f.push_str("flat_scratch_lo"),
        103 => f.push_str("flat_scratch_hi"),
        104 if n > 1 => f.push_str("xnack_mask"),
        104 => f.push_str("xnack_mask_lo"),
        105 => f.push_str("xnack_mask_hi"),
        106 if n > 1 => f.push_str("vcc"),
        106 => f.push_str("vcc_lo"),
        107 => f.push_str("vcc_hi"),
        108..=123 => reg(f, "ttmp", align(s - 108, n), n),
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
        248 if n > 1 => f.push_str("0.15915494309189532"),
        248 => f.push_str("0.15915494"),
        251 => f.push_str("src_vccz"),
        252 => f.push_str("src_execz"),
        253 => f.push_str("src_scc"),
        254 => f.push_str("src_lds_direct"),
        255 => {
            let fl = [0.5f32, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0];
            if n == 1 && (-16..=64).contains(&(lit as i32)) {
                let _ = write!(f, "{}", lit as i32);
            } else if n == 1
                && let Some(k) = fl.iter().position(|v| v.to_bits() == lit)
            {
                operand(f, 240 + k as u16, 1, 0, false);
            } else if n == 1 && lit == 0x3e22_f983 {
                f.push_str("0.15915494");
            } else {
                let _ = write!(f, "0x{lit:x}");
            }
        }
        256..=511 => reg(f, if acc { "a" } else { "v" }, s - 256, n),
        _ => {
            let _ = write!(f, "<bad {s}>");
        }
    }
}

/// LLVM prints a misaligned SGPR tuple at its aligned base (with a warning).
fn align(s: u16, n: u8) -> u16 {
    match n {
        0..=1 => s,
        2 => s & !1,
        _ => s & !3,
    }
}

struct Ctx<'a> {
    out: String,
    i: &'a Inst,
    /// VALU sources are 16-bit (and f16).
    s16: (bool, bool),
}

impl Ctx<'_> {
    fn sep(&mut self) {
        if !(self.out.ends_with(' ') || self.out.is_empty()) {
            self.out.push_str(", ");
        }
    }
    fn op(&mut self, s: u16, n: u8, acc: bool) {
        self.sep();
        operand(&mut self.out, s, n, self.i.literal, acc);
    }
    /// A VALU source `k` with its neg/abs (and SDWA sext) modifiers.
    fn vsrc(&mut self, k: usize, n: u8) {
        self.sep();
        let i = self.i;
        // DPP v_ldexp_f16's integer src1: its neg bit is sign extension (its abs bit is 0).
        let int1 = k == 1 && i.dpp.is_some() && name(i).starts_with("v_ldexp");
        let fl = (float_src(name(i), k) || i.sdwa.is_some() || i.dpp.is_some()) && !int1;
        let neg = i.neg >> k & 1 != 0 && fl;
        let abs = i.abs >> k & 1 != 0 && fl;
        let sext = i.sdwa.is_some_and(|s| s.sext >> k & 1 != 0) || (int1 && i.neg >> 1 & 1 != 0);
        let mut t = String::new();
        if self.s16.0 && i.src[k] < 256 {
            operand16(&mut t, i.src[k], i.literal, self.s16.1);
        } else {
            operand(&mut t, i.src[k], n, i.literal, i.acc >> k & 1 != 0);
        }
        // LLVM spells a negated immediate `neg(k)`: an integer constant or literal, and in
        // SDWA every inline constant (with abs too, it is `-|k|`).
        let sdwa = i.sdwa.is_some();
        let int_const = if sdwa {
            matches!(i.src[k], 128..=208 | 240..=248)
        } else {
            matches!(i.src[k], 128..=208 | src::LITERAL)
        };
        let negk = neg && int_const && !sext && !abs;
        if negk {
            let _ = write!(self.out, "neg({t})");
            return;
        }
        if neg {
            self.out.push('-');
        }
        if abs {
            self.out.push('|');
        }
        if sext {
            self.out.push_str("sext(");
        }
        self.out.push_str(&t);
        if sext {
            self.out.push(')');
        }
        if abs {
            self.out.push('|');
        }
    }
    fn word(&mut self, w: &str) {
        self.out.push(' ');
        self.out.push_str(w);
    }
}

/// The text of `i` (an `Isa::Gfx9` instruction).
pub(crate) fn text(i: &Inst) -> String {
    let mut c = Ctx {
        out: mnemonic(i),
        i,
        s16: (false, false),
    };
    c.out.push(' ');
    match i.format {
        Format::Sop2 | Format::Sop1 | Format::Sopc => scalar(&mut c),
        Format::Sopk => sopk(&mut c),
        Format::Sopp => sopp(&mut c),
        Format::Smem => smem(&mut c),
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd => valu(&mut c),
        Format::Vop3p => vop3p(&mut c),
        Format::Ds => ds(&mut c),
        Format::Flat | Format::Global | Format::Scratch => flat(&mut c),
        Format::Mubuf => mubuf(&mut c),
        Format::Vopd => {}
    }
    c.out.trim_end().to_string()
}

fn scalar(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let w = widths(n, i.format);
    let no_dst = i.format == Format::Sopc
        || matches!(
            n,
            "s_setpc_b64"
                | "s_rfe_b64"
                | "s_cbranch_join"
                | "s_set_gpr_idx_idx"
                | "s_cbranch_g_fork"
                | "s_rfe_restore_b64"
        );
    let no_src = matches!(n, "s_getpc_b64");
    if !no_dst {
        c.op(i.dst, w[0], false);
    }
    if no_src {
        return;
    }
    if n == "s_set_gpr_idx_on" {
        c.op(i.src[0], 1, false);
        let _ = write!(c.out, ", 0x{:x}", i.imm);
        return;
    }
    if n == "s_cbranch_g_fork" {
        c.out.clear();
        c.out.push_str("s_cbranch_g_fork ");
        c.op(i.src[0], 2, false);
        c.op(i.src[1], 2, false);
        return;
    }
    c.op(i.src[0], w[1], false);
    if matches!(i.format, Format::Sop2 | Format::Sopc) {
        c.op(i.src[1], w[2], false);
    }
}

fn sopk(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let v = i.imm as u16;
    match n {
        "s_getreg_b32" => {
            c.op(i.dst, 1, false);
            let _ = write!(c.out, ", {}", hwreg(v));
        }
        "s_setreg_b32" => {
            let _ = write!(c.out, "{}", hwreg(v));
            c.op(i.dst, 1, false);
        }
        "s_setreg_imm32_b32" => {
            let _ = write!(c.out, "{}, 0x{:x}", hwreg(v), i.literal);
        }
        "s_cbranch_i_fork" | "s_call_b64" => {
            c.op(i.dst, 2, false);
            let _ = write!(c.out, ", {v}");
        }
        _ => {
            c.op(i.dst, 1, false);
            let _ = write!(c.out, ", 0x{v:x}");
        }
    }
}

fn hwreg(v: u16) -> String {
    format!(
        "hwreg({}, {}, {})",
        v & 0x3f,
        (v >> 6) & 0x1f,
        ((v >> 11) & 0x1f) + 1
    )
}

fn sopp(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let v = i.imm as u16;
    match n {
        "s_endpgm"
        | "s_barrier"
        | "s_wakeup"
        | "s_icache_inv"
        | "s_ttracedata"
        | "s_endpgm_saved"
        | "s_set_gpr_idx_off"
        | "s_endpgm_ordered_ps_done" => {
            if v != 0 && n == "s_endpgm" {
                let _ = write!(c.out, "{v}");
            }
        }
        "s_setprio" | "s_ttracedata_imm" | "s_set_gpr_idx_mode" => {
            let _ = write!(c.out, "0x{v:x}");
        }
        "s_nop" | "s_sethalt" | "s_setkill" | "s_sleep" | "s_trap" | "s_incperflevel"
        | "s_decperflevel" => {
            // LLVM's spelling of an unsigned immediate: decimal up to 64, hex above.
            if v <= 64 {
                let _ = write!(c.out, "{v}");
            } else {
                let _ = write!(c.out, "0x{v:x}");
            }
        }
        "s_waitcnt" => {
            let vm = (v & 0xf) | ((v >> 14) & 3) << 4;
            let exp = (v >> 4) & 7;
            let lgkm = (v >> 8) & 0xf;
            let mut parts = Vec::new();
            if vm != 0x3f {
                parts.push(format!("vmcnt({vm})"));
            }
            if exp != 7 {
                parts.push(format!("expcnt({exp})"));
            }
            if lgkm != 0xf {
                parts.push(format!("lgkmcnt({lgkm})"));
            }
            if parts.is_empty() {
                let _ = write!(c.out, "vmcnt(63) expcnt(7) lgkmcnt(15)");
            } else {
                c.out.push_str(&parts.join(" "));
            }
        }
        _ if n.starts_with("s_cbranch") || n == "s_branch" => {
            let _ = write!(c.out, "{v}");
        }
        _ => {
            let _ = write!(c.out, "{v}");
        }
    }
}

fn hex_signed(v: i32) -> String {
    if v < 0 {
        format!("-0x{:x}", -(v as i64))
    } else {
        format!("0x{v:x}")
    }
}

/// (data dwords, base dwords) of an SMEM operation named `n` (0: none).
pub(crate) fn smem_widths(n: &str) -> (u8, u8) {
    let dw: u8 = if n.ends_with("x16") {
        16
    } else if n.ends_with("x8") {
        8
    } else if n.ends_with("x4") {
        4
    } else if n.ends_with("x3") {
        3
    } else if n.ends_with("x2") {
        2
    } else {
        1
    };
    match n {
        "s_dcache_inv" | "s_dcache_wb" | "s_dcache_inv_vol" | "s_dcache_wb_vol" => return (0, 0),
        "s_memtime" | "s_memrealtime" => return (2, 0),
        _ => {}
    }
    let data = if n.contains("atomic") && n.contains("cmpswap") {
        dw * 2
    } else {
        dw
    };
    (data, if n.contains("buffer") { 4 } else { 2 })
}

fn smem(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let dw: u8 = if n.ends_with("x16") {
        16
    } else if n.ends_with("x8") {
        8
    } else if n.ends_with("x4") {
        4
    } else if n.ends_with("x3") {
        3
    } else if n.ends_with("x2") || n.ends_with("_x2") {
        2
    } else {
        1
    };
    match n {
        "s_dcache_inv" | "s_dcache_wb" | "s_dcache_inv_vol" | "s_dcache_wb_vol" => return,
        "s_memtime" | "s_memrealtime" => {
            c.op(i.dst, 2, false);
            return;
        }
        _ => {}
    }
    let atomic = n.contains("atomic");
    let data = if atomic && n.contains("cmpswap") {
        dw * 2
    } else {
        dw
    };
    let sb = if n.contains("buffer") { 4 } else { 2 };
    let data = if n.starts_with("s_memtime") { 2 } else { data };
    if n.starts_with("s_atc_probe") {
        let v = i.dst;
        // (stored through the M0/null swap: undo it for the raw field)
        let v = match v {
            124 => 125,
            125 => 124,
            v => v,
        };
        if v <= 64 {
            let _ = write!(c.out, "{v}");
        } else {
            let _ = write!(c.out, "0x{v:x}");
        }
    } else if !n.starts_with("s_dcache_discard") {
        c.op(i.dst, data, false);
    }
    c.op(i.src[0], sb, false);
    let imm = i.op_sel & 1 != 0;
    let soe = i.op_sel & 2 != 0;
    c.sep();
    if imm && soe {
        operand(&mut c.out, i.saddr, 1, 0, false);
        let _ = write!(c.out, " offset:{}", hex_signed(i.imm));
    } else if imm {
        c.out.push_str(&hex_signed(i.imm));
    } else {
        operand(&mut c.out, i.saddr, 1, 0, false);
    }
    if i.cache & 1 != 0 && !n.starts_with("s_dcache_discard") && !n.starts_with("s_atc_probe") {
        c.word("glc");
    }
}

const SEL: [&str; 8] = [
    "BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD", "?",
];
const UNUSED: [&str; 4] = ["UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE", "UNUSED_PAD"];

fn valu(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    if matches!(n, "v_nop" | "v_clrexcp") {
        return;
    }
    let w = widths(n, i.format);
    let nsrc = valu_srcs(i, n);
    c.s16 = sixteen(n);
    let vopc = n.starts_with("v_cmp");
    // Destination.
    if vopc {
        if i.format == Format::Vopc && i.sdwa.is_none() {
            c.op(src::VCC_LO, 2, false);
        } else {
            c.op(i.dst, 2, false);
        }
    } else if n.starts_with("v_readlane") || n.starts_with("v_readfirstlane") {
        c.op(i.dst, 1, false);
    } else {
        c.op(i.dst, w[0], i.acc & 8 != 0);
    }
    let carry = n.contains("_co_u32");
    if carry {
        c.op(
            if i.format == Format::Vop3sd {
                i.sdst
            } else {
                src::VCC_LO
            },
            2,
            false,
        );
    } else if i.format == Format::Vop3sd {
        c.op(i.sdst, 2, false);
    }
    if n.contains("madmk") || n.contains("fmamk") {
        c.vsrc(0, 1);
        let _ = write!(c.out, ", 0x{:x}", i.literal);
        c.vsrc(1, 1);
        return;
    }
    for k in 0..nsrc {
        let wk = if n.starts_with("v_writelane") || n.starts_with("v_readlane") {
            1
        } else {
            w[k + 1]
        };
        c.vsrc(k, wk);
    }
    if n.contains("madak") || n.contains("fmaak") {
        let _ = write!(c.out, ", 0x{:x}", i.literal);
    }
    let e32_carry_in = matches!(
        n,
        "v_addc_co_u32" | "v_subb_co_u32" | "v_subbrev_co_u32" | "v_cndmask_b32"
    );
    if e32_carry_in && matches!(i.format, Format::Vop2) {
        c.op(src::VCC_LO, 2, false);
    }
    if e32_carry_in && matches!(i.format, Format::Vop3 | Format::Vop3sd) {
        c.op(i.src[2], 2, false);
    }
    let (s16, _) = sixteen(n);
    let opsel_op = i.enc >= 0x1c0
        && (s16
            || n.ends_with("_f16")
            || n.contains("pknorm")
            || n.starts_with("v_pack")
            || n.contains("_u16")
            || n.contains("_i16"));
    if i.format == Format::Vop3 && i.op_sel != 0 && opsel_op {
        let b: Vec<String> = (0..4).map(|k| ((i.op_sel >> k) & 1).to_string()).collect();
        let k = nsrc.min(3);
        let mut v: Vec<String> = b[..k].to_vec();
        v.push(b[3].clone());
        let _ = write!(c.out, " op_sel:[{}]", v.join(","));
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
    if let Some(s) = i.sdwa {
        if !vopc {
            let _ = write!(
                c.out,
                " dst_sel:{} dst_unused:{}",
                SEL[s.dst_sel as usize], UNUSED[s.dst_unused as usize]
            );
        }
        let _ = write!(c.out, " src0_sel:{}", SEL[s.src_sel[0] as usize]);
        if nsrc > 1 {
            let _ = write!(c.out, " src1_sel:{}", SEL[s.src_sel[1] as usize]);
        }
    }
    if let Some(Dpp::Dpp16 {
        ctrl,
        row_mask,
        bank_mask,
        bound_ctrl,
        ..
    }) = i.dpp
    {
        c.out.push(' ');
        c.out.push_str(&dpp_ctrl(ctrl));
        let _ = write!(c.out, " row_mask:0x{row_mask:x} bank_mask:0x{bank_mask:x}");
        if bound_ctrl {
            c.word("bound_ctrl:1");
        }
    }
}

/// The sources printed for a VALU operation (the carry-in of e32 forms aside).
fn valu_srcs(i: &Inst, n: &str) -> usize {
    if matches!(i.format, Format::Vop1) {
        return 1;
    }
    if matches!(i.format, Format::Vop2 | Format::Vopc) {
        return 2;
    }
    let t = tables::names(Isa::Gfx9, Class::Vop3)
        .get(i.enc as usize)
        .copied()
        .flatten()
        .unwrap_or("");
    let _ = t;
    match i.enc {
        0..=0xff => return 2,
        // VOP2 in VOP3: two sources (the carry-in of addc/subb/cndmask printed apart).
        0x100..=0x13f => return 2,
        0x140..=0x1bf => return 1,
        _ => {}
    }
    three_src(n)
}

fn three_src(n: &str) -> usize {
    const TWO: &[&str] = &[
        "v_mul_lo_u32",
        "v_mul_hi_u32",
        "v_mul_hi_i32",
        "v_ldexp_f64",
        "v_ldexp_f32",
        "v_add_f64",
        "v_mul_f64",
        "v_min_f64",
        "v_max_f64",
        "v_lshlrev_b64",
        "v_lshrrev_b64",
        "v_ashrrev_i64",
        "v_readlane_b32",
        "v_writelane_b32",
        "v_bcnt_u32_b32",
        "v_mbcnt_lo_u32_b32",
        "v_mbcnt_hi_u32_b32",
        "v_bfm_b32",
        "v_cvt_pknorm_i16_f32",
        "v_cvt_pknorm_u16_f32",
        "v_cvt_pkrtz_f16_f32",
        "v_cvt_pk_u16_u32",
        "v_cvt_pk_i16_i32",
        "v_trig_preop_f64",
        "v_mul_legacy_f32",
        "v_pack_b32_f16",
        "v_cvt_pknorm_i16_f16",
        "v_cvt_pknorm_u16_f16",
        "v_add_i32",
        "v_sub_i32",
        "v_add_i16",
        "v_sub_i16",
        "v_cvt_pk_fp8_f32",
        "v_cvt_pk_bf8_f32",
        "v_cvt_sr_fp8_f32",
        "v_cvt_sr_bf8_f32",
        "v_interp_p1ll_f16",
    ];
    if TWO.contains(&n) { 2 } else { 3 }
}

fn dpp_ctrl(c: u16) -> String {
    match c {
        0..=0xff => format!(
            "quad_perm:[{},{},{},{}]",
            c & 3,
            (c >> 2) & 3,
            (c >> 4) & 3,
            (c >> 6) & 3
        ),
        0x101..=0x10f => format!("row_shl:{}", c & 0xf),
        0x111..=0x11f => format!("row_shr:{}", c & 0xf),
        0x121..=0x12f => format!("row_ror:{}", c & 0xf),
        0x130 => "wave_shl:1".into(),
        0x134 => "wave_rol:1".into(),
        0x138 => "wave_shr:1".into(),
        0x13c => "wave_ror:1".into(),
        0x140 => "row_mirror".into(),
        0x141 => "row_half_mirror".into(),
        0x142 => "row_bcast:15".into(),
        0x143 => "row_bcast:31".into(),
        0x150..=0x15f => format!("row_newbcast:{}", c & 0xf),
        _ => format!("<bad dpp {c:#x}>"),
    }
}

/// MFMA shapes: (A/B dwords, C/D dwords) of an `v_mfma_*`/`v_smfmac_*` named `n`.
pub(crate) fn mfma_widths(n: &str) -> (u8, u8, u8) {
    // Operands: A (src0), B (src1), C/D by the output tile: M*N*blocks/64 lanes.
    let parts: Vec<&str> = n.split('_').collect();
    let dims = parts
        .iter()
        .find(|p| p.contains('x'))
        .copied()
        .unwrap_or("4x4x1");
    let d: Vec<u32> = dims.split('x').filter_map(|t| t.parse().ok()).collect();
    let (m, nn, k) = (d[0], d[1], d.get(2).copied().unwrap_or(1));
    let blocks: u32 = parts
        .iter()
        .find(|p| p.ends_with('b') && p[..p.len() - 1].parse::<u32>().is_ok())
        .map(|p| p[..p.len() - 1].parse().unwrap())
        .unwrap_or(1);
    let f64 = n.ends_with("f64");
    let out = (m * nn * blocks / 64) * if f64 { 2 } else { 1 };
    let ty = *parts.last().unwrap_or(&"");
    // A/B bits per lane: k*M*blocks elements over 64 lanes (for 1-block shapes, k*M/64).
    let ebits = match ty {
        "f32" | "xf32" => 32,
        "f16" | "bf16" => 16,
        "i8" | "fp8" | "bf8" => 8,
        "f64" => 64,
        _ => 32,
    };
    let per_lane = (k * m * blocks * ebits / 64).div_ceil(32).max(1);
    let ab = per_lane as u8;
    if n.starts_with("v_smfmac") {
        // Sparse A holds half of its K; the index VGPR is src2.
        return ((ab / 2).max(1), ab, out.max(1) as u8);
    }
    (ab, ab, out.max(1) as u8)
}

fn vop3p(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    if n.starts_with("v_accvgpr") {
        c.op(i.dst, 1, i.acc & 8 != 0);
        c.op(i.src[0], 1, i.acc & 1 != 0);
        return;
    }
    if n.starts_with("v_mfma") || n.starts_with("v_smfmac") {
        let (a, b, d) = mfma_widths(n);
        c.op(i.dst, d, i.acc & 8 != 0);
        c.op(i.src[0], a, i.acc & 1 != 0);
        if n.starts_with("v_smfmac") {
            c.op(i.src[1], b, i.acc & 2 != 0);
            c.op(i.src[2], 1, false);
        } else {
            c.op(i.src[1], b, i.acc & 2 != 0);
            c.op(i.src[2], d, i.acc & 4 != 0);
        }
        let cbsz = i.imm & 7;
        let abid = (i.imm >> 3) & 15;
        let blgp = (i.imm >> 7) & 7;
        if cbsz != 0 {
            let _ = write!(c.out, " cbsz:{cbsz}");
        }
        if abid != 0 {
            let _ = write!(c.out, " abid:{abid}");
        }
        if blgp != 0 && n.ends_with("f64") {
            let _ = write!(
                c.out,
                " neg:[{},{},{}]",
                blgp & 1,
                (blgp >> 1) & 1,
                (blgp >> 2) & 1
            );
        } else if blgp != 0 {
            let _ = write!(c.out, " blgp:{blgp}");
        }
        return;
    }
    if n.starts_with("v_fma_mix") {
        c.op(i.dst, 1, false);
        for k in 0..3 {
            c.sep();
            let mut t = String::new();
            operand(&mut t, i.src[k], 1, 0, false);
            let neg = i.neg >> k & 1 != 0;
            let abs = i.abs >> k & 1 != 0;
            // A negated integer constant is `neg(k)`; with abs, `-|k|`.
            let int_const = matches!(i.src[k], 128..=208);
            if neg && int_const && !abs {
                let _ = write!(c.out, "neg({t})");
                continue;
            }
            if neg {
                c.out.push('-');
            }
            if abs {
                let _ = write!(c.out, "|{t}|");
            } else {
                c.out.push_str(&t);
            }
        }
        let bits = |v: u8| {
            (0..3)
                .map(|k| ((v >> k) & 1).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        if i.op_sel & 7 != 0 {
            let _ = write!(c.out, " op_sel:[{}]", bits(i.op_sel));
        }
        if i.op_sel_hi & 7 != 0 {
            let _ = write!(c.out, " op_sel_hi:[{}]", bits(i.op_sel_hi));
        }
        if i.clamp {
            c.word("clamp");
        }
        return;
    }
    let w = widths(n, i.format);
    let nsrc = if matches!(
        n,
        "v_pk_fma_f32" | "v_pk_fma_f16" | "v_pk_mad_i16" | "v_pk_mad_u16"
    ) || n.starts_with("v_fma_mix")
        || n.starts_with("v_dot")
    {
        3
    } else if n == "v_pk_mov_b32" || n.starts_with("v_pk_") {
        2
    } else {
        3
    };
    c.op(i.dst, w[0], false);
    for k in 0..nsrc {
        c.sep();
        operand(&mut c.out, i.src[k], w[k + 1], 0, false);
    }
    let bits = |v: u8| -> String {
        (0..nsrc)
            .map(|k| ((v >> k) & 1).to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let full = (1u8 << nsrc) - 1;
    if i.op_sel & full != 0 {
        let _ = write!(c.out, " op_sel:[{}]", bits(i.op_sel));
    }
    if i.op_sel_hi & full != full {
        let _ = write!(c.out, " op_sel_hi:[{}]", bits(i.op_sel_hi));
    }
    if i.neg & full != 0 {
        let _ = write!(c.out, " neg_lo:[{}]", bits(i.neg));
    }
    if i.abs & full != 0 {
        let _ = write!(c.out, " neg_hi:[{}]", bits(i.abs));
    }
    if i.clamp {
        c.word("clamp");
    }
}

/// Dwords of data a memory operation named `n` moves (by GFX9 suffix).
fn data_dwords(n: &str) -> u8 {
    let last = n.rsplit('_').next().unwrap_or("");
    match last {
        "dwordx4" | "b128" | "xyzw" => 4,
        "dwordx3" | "b96" | "xyz" => 3,
        "dwordx2" | "b64" | "x2" | "xy" | "f64" | "u64" | "i64" => 2,
        _ => 1,
    }
}

/// Data dwords of a MUBUF operation (packed d16 formats hold two components a dword).
pub(crate) fn mubuf_dwords(n: &str) -> u8 {
    let d = data_dwords(n);
    if n.contains("_d16_") && n.contains("format") && !n.contains("d16_hi") {
        d.div_ceil(2)
    } else {
        d
    }
}

/// Register widths of a DS operation's operands (0: not an operand): the returned data, data0
/// and data1.
pub(crate) fn ds_widths(n: &str) -> (u8, u8, u8) {
    let dw = data_dwords(n);
    let two = (n.contains("2_") || n.contains("2st64")) && !n.contains("condxchg32");
    let read = n.starts_with("ds_read")
        || n.contains("_rtn")
        || n.starts_with("ds_wrxchg")
        || n == "ds_consume"
        || n == "ds_append"
        || n == "ds_swizzle_b32"
        || n.contains("permute")
        || n.starts_with("ds_ordered_count");
    let nodata = n.starts_with("ds_read")
        || matches!(n, "ds_consume" | "ds_append" | "ds_nop")
        || n.starts_with("ds_gws");
    let cmp = n.contains("cmpst")
        || n.contains("mskor")
        || n.contains("wrxchg2")
        || n.contains("write2")
        || n.starts_with("ds_wrap");
    let rw = if two && n.starts_with("ds_read2") || n.contains("wrxchg2") {
        dw * 2
    } else {
        dw
    };
    (
        if read { rw } else { 0 },
        if nodata { 0 } else { dw },
        if !nodata && cmp { dw } else { 0 },
    )
}

fn ds(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let acc = i.acc & 2 != 0;
    let two = (n.contains("2_") || n.contains("2st64")) && !n.contains("condxchg32");
    let (rw, d0, d1) = ds_widths(n);
    if n == "ds_nop" {
        return;
    }
    if n.starts_with("ds_gws") {
        // The data operand is in the address field.
        if n != "ds_gws_sema_v" && n != "ds_gws_sema_p" && n != "ds_gws_sema_release_all" {
            c.op(i.src[0], 1, acc);
        }
        let off = i.imm as u32 | (i.imm1 as u32) << 8;
        if off != 0 {
            let _ = write!(c.out, " offset:{off}");
        }
        c.word("gds");
        return;
    }
    if n.contains("addtid") {
        if n.starts_with("ds_read") {
            c.op(i.dst, 1, acc);
        } else {
            c.op(i.src[1], 1, acc);
        }
        let off = i.imm as u32 | (i.imm1 as u32) << 8;
        if off != 0 {
            let _ = write!(c.out, " offset:{off}");
        }
        return;
    }
    if rw > 0 {
        c.op(i.dst, rw, acc);
    }
    if !matches!(n, "ds_consume" | "ds_append") && !n.starts_with("ds_gws") {
        c.op(i.src[0], 1, false);
    }
    if d0 > 0 {
        c.op(i.src[1], d0, acc);
    }
    if d1 > 0 {
        c.op(i.src[2], d1, acc);
    }
    if two {
        if i.imm != 0 {
            let _ = write!(c.out, " offset0:{}", i.imm);
        }
        if i.imm1 != 0 {
            let _ = write!(c.out, " offset1:{}", i.imm1);
        }
    } else {
        let off = i.imm as u32 | (i.imm1 as u32) << 8;
        if off != 0 {
            let _ = write!(c.out, " offset:{off}");
        }
    }
}

fn cache(c: &mut Ctx) {
    let b = c.i.cache;
    if b & 1 != 0 {
        c.word("sc0");
    }
    if b & 2 != 0 {
        c.word("nt");
    }
    if b & 4 != 0 {
        c.word("sc1");
    }
}

fn flat(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    let acc = i.acc & 8 != 0;
    let dw = data_dwords(n);
    let load = n.contains("_load");
    let store = n.contains("_store");
    let atomic = !load && !store;
    let data = if n.contains("cmpswap") { dw * 2 } else { dw };
    let lds = n.contains("_lds_");
    if (load && !lds) || (atomic && i.cache & 1 != 0) {
        c.op(i.dst, dw, acc);
    }
    match i.format {
        Format::Flat => c.op(i.src[0], 2, false),
        Format::Global => {
            if i.saddr == 127 {
                c.op(i.src[0], 2, false);
            } else {
                c.op(i.src[0], 1, false);
            }
        }
        _ => {
            if i.sve {
                c.op(i.src[0], 1, false);
            } else {
                c.sep();
                c.out.push_str("off");
            }
        }
    }
    if !load {
        c.op(i.src[1], data, acc);
    }
    if i.format != Format::Flat {
        c.sep();
        if i.saddr == 127 {
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
    cache(c);
}

fn mubuf(c: &mut Ctx) {
    let i = c.i;
    let n = name(i);
    if matches!(n, "buffer_wbl2" | "buffer_inv") {
        if i.cache & 1 != 0 {
            c.word("sc0");
        }
        if i.cache & 4 != 0 {
            c.word("sc1");
        }
        return;
    }
    if matches!(n, "buffer_wbinvl1" | "buffer_wbinvl1_vol") {
        return;
    }
    let acc = i.acc & 8 != 0;
    let dw = mubuf_dwords(n);
    let load = n.contains("_load");
    let store = n.contains("_store");
    let atomic = !load && !store;
    let data = if n.contains("cmpswap") { dw * 2 } else { dw };
    let lds_op = n.contains("_lds_");
    let lds = i.op_sel & 8 != 0;
    if !(lds_op || lds && load) && (load || store || i.cache & 1 != 0 || atomic) {
        c.op(i.dst, if atomic { data } else { dw }, acc);
    }
    let offen = i.op_sel & 2 != 0;
    let idxen = i.op_sel & 4 != 0;
    c.sep();
    if lds_op {
        c.op(i.src[1], 4, false);
        c.op(i.saddr, 1, false);
        if i.imm != 0 {
            let _ = write!(c.out, " offset:{}", i.imm);
        }
        c.word("lds");
        cache(c);
        return;
    }
    if offen || idxen {
        operand(
            &mut c.out,
            i.src[0],
            if offen && idxen { 2 } else { 1 },
            0,
            false,
        );
    } else {
        c.out.push_str("off");
    }
    c.op(i.src[1], 4, false);
    c.op(i.saddr, 1, false);
    if idxen {
        c.word("idxen");
    }
    if offen {
        c.word("offen");
    }
    if i.imm != 0 {
        let _ = write!(c.out, " offset:{}", i.imm);
    }
    cache(c);
    if lds && !lds_op {
        c.word("lds");
    }
}
