//! Per-operation facts the executor needs on every issue, derived once from the semantic names
//! (operand widths, memory access size and kind), so the hot path does no string work. Keyed
//! by format and semantic id, so every generation's encoding of an operation shares them.

use std::sync::OnceLock;

use crate::decode::{Format, Inst};
use crate::disasm::{self, Widths};

/// 32-bit atomic operations shared by LDS and global memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Atomic {
    Add,
    Sub,
    Rsub,
    MinI,
    MaxI,
    MinU,
    MaxU,
    And,
    Or,
    Xor,
    Inc,
    Dec,
    Swap,
    CmpSwap,
    AddF,
    MinF,
    MaxF,
}

impl Atomic {
    /// `d0` is the data operand; for compare-swap `d0` is the new value and `d1` the compare.
    pub(crate) fn apply(self, old: u32, d0: u32, d1: u32) -> u32 {
        match self {
            Atomic::Add => old.wrapping_add(d0),
            Atomic::Sub => old.wrapping_sub(d0),
            Atomic::Rsub => d0.wrapping_sub(old),
            Atomic::MinI => (old as i32).min(d0 as i32) as u32,
            Atomic::MaxI => (old as i32).max(d0 as i32) as u32,
            Atomic::MinU => old.min(d0),
            Atomic::MaxU => old.max(d0),
            Atomic::And => old & d0,
            Atomic::Or => old | d0,
            Atomic::Xor => old ^ d0,
            Atomic::Inc => {
                if old >= d0 {
                    0
                } else {
                    old + 1
                }
            }
            Atomic::Dec => {
                if old == 0 || old > d0 {
                    d0
                } else {
                    old - 1
                }
            }
            Atomic::Swap => d0,
            Atomic::CmpSwap => {
                if old == d1 {
                    d0
                } else {
                    old
                }
            }
            Atomic::AddF => (f32::from_bits(old) + f32::from_bits(d0)).to_bits(),
            Atomic::MinF => f32::from_bits(old).min(f32::from_bits(d0)).to_bits(),
            Atomic::MaxF => f32::from_bits(old).max(f32::from_bits(d0)).to_bits(),
        }
    }

    /// 64-bit variant (float kinds are not defined at 64 bits here).
    pub(crate) fn apply64(self, old: u64, d0: u64, d1: u64) -> u64 {
        match self {
            Atomic::Add => old.wrapping_add(d0),
            Atomic::Sub => old.wrapping_sub(d0),
            Atomic::Rsub => d0.wrapping_sub(old),
            Atomic::MinI => (old as i64).min(d0 as i64) as u64,
            Atomic::MaxI => (old as i64).max(d0 as i64) as u64,
            Atomic::MinU => old.min(d0),
            Atomic::MaxU => old.max(d0),
            Atomic::And => old & d0,
            Atomic::Or => old | d0,
            Atomic::Xor => old ^ d0,
            Atomic::Inc => {
                if old >= d0 {
                    0
                } else {
                    old + 1
                }
            }
            Atomic::Dec => {
                if old == 0 || old > d0 {
                    d0
                } else {
                    old - 1
                }
            }
            Atomic::Swap => d0,
            Atomic::CmpSwap => {
                if old == d1 {
                    d0
                } else {
                    old
                }
            }
            Atomic::AddF => (f64::from_bits(old) + f64::from_bits(d0)).to_bits(),
            Atomic::MinF => f64::from_bits(old).min(f64::from_bits(d0)).to_bits(),
            Atomic::MaxF => f64::from_bits(old).max(f64::from_bits(d0)).to_bits(),
        }
    }
}

/// What a memory instruction does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemKind {
    None,
    Load,
    Store,
    Atomic(Atomic),
}

/// Facts about one opcode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub name: &'static str,
    /// Operand widths (scalar formats).
    pub w: Widths,
    pub kind: MemKind,
    /// Bytes per lane moved by a memory access.
    pub bytes: u8,
    /// Sign-extend sub-dword loads.
    pub signed: bool,
    /// The mnemonic says the old value returns (DS `_rtn`).
    pub rtn: bool,
    /// Format / addtid / lds variants the executor does not implement.
    pub exotic: bool,
    /// A `_d16` load: the value fills one half of the register, the other half is kept.
    pub d16: bool,
    /// `_d16_hi`: the high half (loads fill it, stores store it).
    pub hi: bool,
}

fn atomic_kind(core: &str) -> Option<Atomic> {
    let t = core.rsplit_once('_').map(|x| x.0).unwrap_or(core);
    Some(match t {
        "add" => Atomic::Add,
        "sub" => Atomic::Sub,
        "rsub" => Atomic::Rsub,
        "min" if core.ends_with("i32") || core.ends_with("i64") => Atomic::MinI,
        "max" if core.ends_with("i32") || core.ends_with("i64") => Atomic::MaxI,
        "min" if core.ends_with("f32") || core.ends_with("f64") => Atomic::MinF,
        "max" if core.ends_with("f32") || core.ends_with("f64") => Atomic::MaxF,
        "min" => Atomic::MinU,
        "max" => Atomic::MaxU,
        "and" => Atomic::And,
        "or" => Atomic::Or,
        "xor" => Atomic::Xor,
        "inc" => Atomic::Inc,
        "dec" => Atomic::Dec,
        "swap" | "storexchg" => Atomic::Swap,
        "cmpswap" | "cmpstore" => Atomic::CmpSwap,
        "fmin" => Atomic::MinF,
        "fmax" => Atomic::MaxF,
        _ => return None,
    })
    .map(|a| {
        if t == "add" && core.ends_with("f32") {
            Atomic::AddF
        } else {
            a
        }
    })
}

fn compute(format: Format, op: u16) -> Meta {
    let mut i = Inst::decode_stub(format, op);
    i.op = op;
    let name = disasm::base_name(&i);
    let w = match format {
        Format::Sop1 | Format::Sop2 | Format::Sopc => disasm::salu_widths(&i),
        _ => Widths {
            dst: 0,
            src: [0; 3],
        },
    };
    let mut m = Meta {
        name,
        w,
        kind: MemKind::None,
        bytes: 0,
        signed: false,
        rtn: name.contains("_rtn"),
        exotic: false,
        d16: false,
        hi: false,
    };
    if matches!(
        format,
        Format::Ds | Format::Flat | Format::Global | Format::Scratch | Format::Mubuf
    ) {
        let t = name.rsplit('_').next().unwrap_or("");
        let (b, s) = match t {
            "u8" | "b8" => (1, false),
            "i8" => (1, true),
            "u16" | "b16" => (2, false),
            "i16" => (2, true),
            "b32" | "u32" | "i32" | "f32" => (4, false),
            "b64" | "u64" | "i64" | "f64" => (8, false),
            "b96" => (12, false),
            "b128" => (16, false),
            _ => (0, false),
        };
        m.bytes = b;
        m.signed = s;
        m.exotic = name.contains("_addtid") || name.contains("_lds_") || name.contains("format");
        m.d16 = name.contains("_d16");
        m.hi = name.contains("_d16_hi");
        let core = name
            .split_once('_')
            .map(|x| x.1)
            .unwrap_or("")
            .replace("_rtn", "");
        let core = core.strip_prefix("atomic_").unwrap_or(&core).to_string();
        m.kind = if name.contains("_load") {
            MemKind::Load
        } else if name.contains("_store") && !name.contains("storexchg") {
            MemKind::Store
        } else if let Some(a) = atomic_kind(&core) {
            MemKind::Atomic(a)
        } else {
            MemKind::None
        };
    }
    m
}

/// Semantic ids per format: gfx1100's opcodes and those of operations new in GFX12 (at most
/// 1024 + 1024, for VALU).
const SEM_IDS: usize = 2048;
/// Formats, in `Format`'s order (its last is `Mubuf`).
const FORMATS: usize = Format::Mubuf as usize + 1;

/// One entry per format and semantic id, each computed when first asked for: a dispatch pays
/// for the few operations its code uses, not for every id of every format (about 37,000
/// entries of string work, milliseconds, when the table was built whole at first use).
/// Untouched entries are zero pages of the binary's bss.
static TABLE: [OnceLock<Meta>; FORMATS * SEM_IDS] = [const { OnceLock::new() }; FORMATS * SEM_IDS];

/// Facts about `i`'s opcode.
pub(crate) fn meta(i: &Inst) -> &'static Meta {
    let op = i.op % SEM_IDS as u16;
    TABLE[i.format as usize * SEM_IDS + op as usize].get_or_init(|| compute(i.format, op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_come_from_the_names() {
        use crate::opcodes::{op_ds, op_global};
        let global = |op| meta(&Inst::decode_stub(Format::Global, op));
        let m = global(op_global::GLOBAL_LOAD_I16);
        assert_eq!((m.kind, m.bytes, m.signed), (MemKind::Load, 2, true));
        let m = global(op_global::GLOBAL_STORE_D16_HI_B16);
        assert_eq!(
            (m.kind, m.bytes, m.d16, m.hi),
            (MemKind::Store, 2, true, true)
        );
        let m = global(op_global::GLOBAL_ATOMIC_CMPSWAP_B64);
        assert_eq!((m.kind, m.bytes), (MemKind::Atomic(Atomic::CmpSwap), 8));
        let m = meta(&Inst::decode_stub(Format::Ds, op_ds::DS_MAX_RTN_F32));
        assert_eq!((m.kind, m.rtn), (MemKind::Atomic(Atomic::MaxF), true));
        // Every format's table has its own entries.
        let sop = meta(&Inst::decode_stub(Format::Sop1, 0));
        assert!(!std::ptr::eq(
            sop,
            meta(&Inst::decode_stub(Format::Sop2, 0))
        ));
        assert_eq!(sop.name, meta(&Inst::decode_stub(Format::Sop1, 0)).name);
    }
}
