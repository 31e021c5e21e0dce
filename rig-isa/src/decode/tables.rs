//! The generated opcode tables of each encoding family, looked up by class, and the semantic
//! ids the decoders give instructions.
//!
//! A semantic id names an operation, whatever generation encodes it: the gfx1100 opcode of the
//! operation within its class (VALU in the unified VOP3 numbering), or, for an operation
//! gfx1100 lacks, the gfx1100 table's length plus the opcode of the generation that brought it
//! (`opcodes_gfx12::NEW_*`). The executor matches on semantic ids only; the disassembler prints
//! the encoding's own name (`Inst::enc`).

use super::Isa;
use crate::{opcodes as g11, opcodes_gfx9 as g9, opcodes_gfx12 as g12};

/// An opcode table of an encoding family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Sop2,
    Sopk,
    Sop1,
    Sopc,
    Sopp,
    Smem,
    Vop1,
    Vop2,
    Vopc,
    Vop3,
    /// VOPC, VOP2, VOP1 and VOP3 in the unified VOP3 numbering.
    Valu,
    Vop3p,
    Vopdx,
    Vopdy,
    Ds,
    Flat,
    Scratch,
    Global,
    Mubuf,
}

type Names = &'static [Option<&'static str>];
type Fixed = &'static [(u64, u64)];

/// Mnemonics of `class` in `isa`, by encoded opcode.
pub(crate) fn names(isa: Isa, class: Class) -> Names {
    use Class::*;
    match isa {
        Isa::Gfx11 => match class {
            Sop2 => &g11::SOP2,
            Sopk => &g11::SOPK,
            Sop1 => &g11::SOP1,
            Sopc => &g11::SOPC,
            Sopp => &g11::SOPP,
            Smem => &g11::SMEM,
            Vop1 => &g11::VOP1,
            Vop2 => &g11::VOP2,
            Vopc => &g11::VOPC,
            Vop3 => &g11::VOP3,
            Valu => &g11::VALU,
            Vop3p => &g11::VOP3P,
            Vopdx => &g11::VOPDX,
            Vopdy => &g11::VOPDY,
            Ds => &g11::DS,
            Flat => &g11::FLAT,
            Scratch => &g11::SCRATCH,
            Global => &g11::GLOBAL,
            Mubuf => &g11::MUBUF,
        },
        Isa::Gfx12 => match class {
            Sop2 => &g12::SOP2,
            Sopk => &g12::SOPK,
            Sop1 => &g12::SOP1,
            Sopc => &g12::SOPC,
            Sopp => &g12::SOPP,
            Smem => &g12::SMEM,
            Vop1 => &g12::VOP1,
            Vop2 => &g12::VOP2,
            Vopc => &g12::VOPC,
            Vop3 => &g12::VOP3,
            Valu => &g12::VALU,
            Vop3p => &g12::VOP3P,
            Vopdx => &g12::VOPDX,
            Vopdy => &g12::VOPDY,
            Ds => &g12::DS,
            Flat => &g12::FLAT,
            Scratch => &g12::SCRATCH,
            Global => &g12::GLOBAL,
            Mubuf => &g12::MUBUF,
        },
        Isa::Gfx9 => match class {
            Sop2 => &g9::SOP2,
            Sopk => &g9::SOPK,
            Sop1 => &g9::SOP1,
            Sopc => &g9::SOPC,
            Sopp => &g9::SOPP,
            Smem => &g9::SMEM,
            Vop1 => &g9::VOP1,
            Vop2 => &g9::VOP2,
            Vopc => &g9::VOPC,
            Vop3 => &g9::VOP3,
            Valu => &g9::VALU,
            Vop3p => &g9::VOP3P,
            Ds => &g9::DS,
            Flat => &g9::FLAT,
            Scratch => &g9::SCRATCH,
            Global => &g9::GLOBAL,
            Mubuf => &g9::MUBUF,
            Vopdx | Vopdy => &[],
        },
    }
}

/// Fixed (reserved) bits per encoded opcode of `class` in `isa` (empty: none probed).
pub(crate) fn fixed(isa: Isa, class: Class) -> Fixed {
    use Class::*;
    match isa {
        Isa::Gfx11 => match class {
            Sop2 => &g11::FIXED_SOP2,
            Sopk => &g11::FIXED_SOPK,
            Sop1 => &g11::FIXED_SOP1,
            Sopc => &g11::FIXED_SOPC,
            Sopp => &g11::FIXED_SOPP,
            Smem => &g11::FIXED_SMEM,
            Vop1 => &g11::FIXED_VOP1,
            Vop2 => &g11::FIXED_VOP2,
            Vopc => &g11::FIXED_VOPC,
            Vop3 => &g11::FIXED_VOP3,
            Vop3p => &g11::FIXED_VOP3P,
            Ds => &g11::FIXED_DS,
            Flat => &g11::FIXED_FLAT,
            Scratch => &g11::FIXED_SCRATCH,
            Global => &g11::FIXED_GLOBAL,
            Mubuf => &g11::FIXED_MUBUF,
            Valu | Vopdx | Vopdy => &[],
        },
        Isa::Gfx12 => match class {
            Sop2 => &g12::FIXED_SOP2,
            Sopk => &g12::FIXED_SOPK,
            Sop1 => &g12::FIXED_SOP1,
            Sopc => &g12::FIXED_SOPC,
            Sopp => &g12::FIXED_SOPP,
            Smem => &g12::FIXED_SMEM,
            Vop1 => &g12::FIXED_VOP1,
            Vop2 => &g12::FIXED_VOP2,
            Vopc => &g12::FIXED_VOPC,
            Vop3 => &g12::FIXED_VOP3,
            Vop3p => &g12::FIXED_VOP3P,
            Ds => &g12::FIXED_DS,
            Flat => &g12::FIXED_FLAT,
            Scratch => &g12::FIXED_SCRATCH,
            Global => &g12::FIXED_GLOBAL,
            Mubuf => &g12::FIXED_MUBUF,
            Valu | Vopdx | Vopdy => &[],
        },
        Isa::Gfx9 => match class {
            Sop2 => &g9::FIXED_SOP2,
            Sopk => &g9::FIXED_SOPK,
            Sop1 => &g9::FIXED_SOP1,
            Sopc => &g9::FIXED_SOPC,
            Sopp => &g9::FIXED_SOPP,
            Smem => &g9::FIXED_SMEM,
            Vop1 => &g9::FIXED_VOP1,
            Vop2 => &g9::FIXED_VOP2,
            Vopc => &g9::FIXED_VOPC,
            Vop3 => &g9::FIXED_VOP3,
            Vop3p => &g9::FIXED_VOP3P,
            Ds => &g9::FIXED_DS,
            Flat => &g9::FIXED_FLAT,
            Scratch => &g9::FIXED_SCRATCH,
            Global => &g9::FIXED_GLOBAL,
            Mubuf => &g9::FIXED_MUBUF,
            Valu | Vopdx | Vopdy => &[],
        },
    }
}

/// The generation's semantic map of `class` (None: the class is gfx1100's own numbering).
fn sem_map(isa: Isa, class: Class) -> Option<&'static [u16]> {
    use Class::*;
    match isa {
        Isa::Gfx11 => None,
        Isa::Gfx12 => Some(match class {
            Sop2 => &g12::SEM_SOP2,
            Sopk => &g12::SEM_SOPK,
            Sop1 => &g12::SEM_SOP1,
            Sopc => &g12::SEM_SOPC,
            Sopp => &g12::SEM_SOPP,
            Smem => &g12::SEM_SMEM,
            Vop1 | Vop2 | Vopc | Vop3 | Valu => &g12::SEM_VALU,
            Vop3p => &g12::SEM_VOP3P,
            Vopdx => &g12::SEM_VOPDX,
            Vopdy => &g12::SEM_VOPDY,
            Ds => &g12::SEM_DS,
            Flat => &g12::SEM_FLAT,
            Scratch => &g12::SEM_SCRATCH,
            Global => &g12::SEM_GLOBAL,
            Mubuf => &g12::SEM_MUBUF,
        }),
        Isa::Gfx9 => Some(match class {
            Sop2 => &g9::SEM_SOP2,
            Sopk => &g9::SEM_SOPK,
            Sop1 => &g9::SEM_SOP1,
            Sopc => &g9::SEM_SOPC,
            Sopp => &g9::SEM_SOPP,
            Smem => &g9::SEM_SMEM,
            Vop1 | Vop2 | Vopc | Vop3 | Valu => &g9::SEM_VALU,
            Vop3p => &g9::SEM_VOP3P,
            Ds => &g9::SEM_DS,
            Flat => &g9::SEM_FLAT,
            Scratch => &g9::SEM_SCRATCH,
            Global => &g9::SEM_GLOBAL,
            Mubuf => &g9::SEM_MUBUF,
            Vopdx | Vopdy => &[],
        }),
    }
}

/// The mnemonic and semantic id of encoded opcode `op` of `class` (VALU classes: `op` in the
/// generation's unified numbering), or None when `isa` has no such instruction.
pub(crate) fn lookup(isa: Isa, class: Class, table_op: u32, sem_op: u32) -> Option<u16> {
    names(isa, class)
        .get(table_op as usize)
        .copied()
        .flatten()?;
    match sem_map(isa, class) {
        None => Some(sem_op as u16),
        Some(m) => m.get(sem_op as usize).copied().filter(|&s| s != 0xffff),
    }
}

/// The name of semantic id `op` of `class` (VALU classes: the unified numbering).
pub(crate) fn sem_name(class: Class, op: u16) -> Option<&'static str> {
    use Class::*;
    let class = match class {
        Vop1 | Vop2 | Vopc | Vop3 => Valu,
        c => c,
    };
    let base = names(Isa::Gfx11, class);
    if let Some(n) = base.get(op as usize) {
        return *n;
    }
    if op as usize >= base.len() + GFX9_NEW {
        let new: Names = match class {
            Sop2 => &g9::NEW_SOP2,
            Sopk => &g9::NEW_SOPK,
            Sop1 => &g9::NEW_SOP1,
            Sopc => &g9::NEW_SOPC,
            Sopp => &g9::NEW_SOPP,
            Smem => &g9::NEW_SMEM,
            Valu => &g9::NEW_VALU,
            Vop3p => &g9::NEW_VOP3P,
            Ds => &g9::NEW_DS,
            Flat => &g9::NEW_FLAT,
            Scratch => &g9::NEW_SCRATCH,
            Global => &g9::NEW_GLOBAL,
            Mubuf => &g9::NEW_MUBUF,
            _ => return None,
        };
        return new
            .get(op as usize - base.len() - GFX9_NEW)
            .copied()
            .flatten();
    }
    let new: Names = match class {
        Sop2 => &g12::NEW_SOP2,
        Sopk => &g12::NEW_SOPK,
        Sop1 => &g12::NEW_SOP1,
        Sopc => &g12::NEW_SOPC,
        Sopp => &g12::NEW_SOPP,
        Smem => &g12::NEW_SMEM,
        Valu => &g12::NEW_VALU,
        Vop3p => &g12::NEW_VOP3P,
        Vopdx => &g12::NEW_VOPDX,
        Vopdy => &g12::NEW_VOPDY,
        Ds => &g12::NEW_DS,
        Flat => &g12::NEW_FLAT,
        Scratch => &g12::NEW_SCRATCH,
        Global => &g12::NEW_GLOBAL,
        Mubuf => &g12::NEW_MUBUF,
        Vop1 | Vop2 | Vopc | Vop3 => return None,
    };
    new.get(op as usize - base.len()).copied().flatten()
}

/// Offset past a base table of the ids of operations gfx942 has and gfx1100 lacks (past
/// GFX12's, which start at the base table's length).
pub(crate) const GFX9_NEW: usize = 1024;

/// A printed mnemonic without its encoding suffix (`_e32`, `_e64`, `_dpp`, `_sdwa`).
pub(crate) fn strip_suffix(n: &str) -> &str {
    for s in ["_e32", "_e64", "_dpp", "_sdwa"] {
        if let Some(b) = n.strip_suffix(s) {
            return b;
        }
    }
    n
}

/// VOP3 op_sel bits LLVM prints per encoded opcode (gfx942's: also the number of entries
/// printed, in bits 4-7).
pub(crate) fn vop3_opsel(isa: Isa) -> &'static [u8; 1024] {
    match isa {
        Isa::Gfx11 => &g11::VOP3_OPSEL,
        Isa::Gfx12 => &g12::VOP3_OPSEL,
        Isa::Gfx9 => &g9::VOP3_OPSEL,
    }
}

/// VOP3 source modifiers LLVM prints per encoded opcode.
pub(crate) fn vop3_mods(isa: Isa) -> &'static [u8; 1024] {
    match isa {
        Isa::Gfx11 => &g11::VOP3_MODS,
        Isa::Gfx12 | Isa::Gfx9 => &g12::VOP3_MODS,
    }
}
