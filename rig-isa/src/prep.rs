//! The issue form: what the executor runs per code address, chosen once when the instruction
//! is decoded (and cached with the decode, see `code`), never per step.
//!
//! Every decoded [`Inst`] becomes a [`Slot`]: the instruction itself (for the general
//! executor, faults and printing) and a [`Fast`] form for the operations that dominate real
//! kernels, with the semantics picked (a dense enum, one `match` per issue) and the operands
//! resolved: VGPRs to register numbers, SGPRs to their index, inline constants and literals to
//! their value. Everything else is [`Fast::General`] and runs through `exec::step`, bit for bit
//! the same semantics (the fast forms are unit-tested against it in `exec::fast`). The 32-bit
//! lane operations are stated here once ([`alu_list`]: [`Alu::eval`]) for both tiers: the
//! fast forms' lane loops are made from the list, and the general executor runs `Alu::eval` for
//! every operation [`alu_of`] names.
//!
//! Register numbers, not row offsets, are kept: a wave's lane count and VGPR allocation are
//! the dispatch's (rsrc1, wave64), and one cached decode serves every dispatch of the code.
//! Each form carries the highest VGPR it touches so the range check is one compare.
//!
//! The seam for GFX9: its front end produces the same [`Inst`]; SDWA/DPP source selection and
//! accumulator VGPRs are further operand kinds of [`Operand`] (or leave the instruction
//! [`Fast::General`]), not new executors.

use crate::decode::{Format, Inst, src};
use crate::meta::{MemKind, meta};
use crate::opcodes::{self, op_ds, op_smem, op_sop1, op_sop2, op_sopc, op_sopk, op_sopp};
use crate::opcodes::{op_valu::*, op_vopdx};

/// A source of a fast form: where each lane's 32-bit value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// VGPR number (0-255).
    Vgpr(u8),
    /// SGPR index (0-127 but the null register), read at issue.
    Sgpr(u8),
    /// An inline constant or literal, resolved at decode.
    Const(u32),
}

/// Declares the 32-bit lane operations from [`alu_list`]: the enum and each operation's
/// semantics (`Alu::eval`, the one statement of them, which the fast forms and the general
/// executor both run).
macro_rules! alu_ops {
    (($x:ident, $y:ident, $z:ident, $ieee:ident) $($(#[$doc:meta])* $v:ident = $e:expr;)*) => {
        /// A 32-bit lane operation of up to three sources (unused sources are `Const(0)`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Alu {
            $($(#[$doc])* $v,)*
        }

        impl Alu {
            /// The operation on one lane's sources; `ieee` is rsrc1's IEEE_MODE.
            #[inline(always)]
            pub(crate) fn eval(self, $x: u32, $y: u32, $z: u32, $ieee: bool) -> u32 {
                match self {
                    $(Alu::$v => $e,)*
                }
            }
        }
    };
}

fn fl(x: u32) -> f32 {
    f32::from_bits(x)
}

/// Sign-extends the low 24 bits.
fn i24(x: u32) -> i64 {
    ((x << 8) as i32 >> 8) as i64
}

/// The 32-bit lane operations, each with its semantics on the lane's sources `x`, `y`, `z`
/// (`ieee`: rsrc1's IEEE_MODE), handed to `$cb!` (`alu_ops` here; `exec::fast` makes its lane
/// loops from the same list).
macro_rules! alu_list {
    ($cb:ident) => {
        $cb! {
                (x, y, z, ieee)
        Mov = x;
        /// `a * b + c` with one rounding (VOP2 fmac reads its destination as `c`).
        Fma = fl(x).mul_add(fl(y), fl(z)).to_bits();
        MulF = crate::valu::mul_f32(x, y);
        AddF = crate::valu::add_f32(x, y);
        SubF = (fl(x) - fl(y)).to_bits();
        SubrevF = (fl(y) - fl(x)).to_bits();
        /// `v_min_f32` / `v_max_f32` (`valu::ops::min_max_f32`).
        MinF = crate::valu::min_max_f32(x, y, false, ieee);
        MaxF = crate::valu::min_max_f32(x, y, true, ieee);
        AddU = x.wrapping_add(y);
        SubU = x.wrapping_sub(y);
        SubrevU = y.wrapping_sub(x);
        And = x & y;
        Or = x | y;
        Xor = x ^ y;
        Not = !x;
        /// `b << a` (the "rev" shifts take the shift count first).
        Lshlrev = y << (x & 31);
        Lshrrev = y >> (x & 31);
        Ashrrev = ((y as i32) >> (x & 31)) as u32;
        MinU = x.min(y);
        MaxU = x.max(y);
        MinI = (x as i32).min(y as i32) as u32;
        MaxI = (x as i32).max(y as i32) as u32;
        Min3U = x.min(y).min(z);
        Max3U = x.max(y).max(z);
        MaxminI = (x as i32).max(y as i32).min(z as i32) as u32;
        MinmaxI = (x as i32).min(y as i32).max(z as i32) as u32;
        MulLo = x.wrapping_mul(y);
        MulHiU = ((x as u64 * y as u64) >> 32) as u32;
        MulHiI = ((x as i32 as i64 * y as i32 as i64) >> 32) as u32;
        MulU24 = (x & 0xff_ffff).wrapping_mul(y & 0xff_ffff);
        MulI24 = (i24(x) * i24(y)) as u32;
        MadU24 = (x & 0xff_ffff).wrapping_mul(y & 0xff_ffff).wrapping_add(z);
        Add3 = x.wrapping_add(y).wrapping_add(z);
        /// `(a ^ b) + c`.
        Xad = (x ^ y).wrapping_add(z);
        /// `(a << b) + c`.
        LshlAdd = (x << (y & 31)).wrapping_add(z);
        /// `(a + b) << c`.
        AddLshl = x.wrapping_add(y) << (z & 31);
        /// `(a << b) | c`.
        LshlOr = (x << (y & 31)) | z;
        AndOr = (x & y) | z;
        Or3 = x | y | z;
        Xor3 = x ^ y ^ z;
        /// Bit-field insert: `b` where `a` has ones, else `c`.
        Bfi = (x & y) | (!x & z);
        /// `({a, b} >> (c & 31))`, low 32 bits.
        Alignbit = (((x as u64) << 32 | y as u64) >> (z & 31)) as u32;
        /// Unsigned bit-field extract: `a >> b` masked to `c` bits.
        BfeU = {
            let w = z & 31;
            if w == 0 { 0 } else { (x >> (y & 31)) & ((1u32 << w) - 1) }
        };
        /// Ones of `a` plus `b`.
        Bcnt = x.count_ones().wrapping_add(y);
        /// Leading zeros, -1 for zero.
        Clz = if x == 0 { u32::MAX } else { x.leading_zeros() };
        CvtF32U32 = (x as f32).to_bits();
        CvtF32I32 = (x as i32 as f32).to_bits();
        /// f32 to u32, saturating, NaN to 0.
        CvtU32F32 = fl(x) as u32;
        /// f32 to i32, saturating, NaN to 0.
        CvtI32F32 = fl(x) as i32 as u32;
        TruncF = fl(x).trunc().to_bits();
        CeilF = fl(x).ceil().to_bits();
        FloorF = fl(x).floor().to_bits();
        RndneF = fl(x).round_ties_even().to_bits();
        /// `1 / a`, exactly rounded (not the hardware's 1-ulp approximation).
        RcpF = (1.0 / fl(x)).to_bits();
        SqrtF = fl(x).sqrt().to_bits();
            }
    };
}
pub(crate) use alu_list;

alu_list!(alu_ops);

impl Alu {
    /// Float operations honour the wave's denormal mode; their fast forms run only when it
    /// keeps denormals (the general path flushes).
    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            Alu::Fma
                | Alu::MulF
                | Alu::AddF
                | Alu::SubF
                | Alu::SubrevF
                | Alu::MinF
                | Alu::MaxF
                | Alu::CvtF32U32
                | Alu::CvtF32I32
                | Alu::CvtU32F32
                | Alu::CvtI32F32
                | Alu::TruncF
                | Alu::CeilF
                | Alu::FloorF
                | Alu::RndneF
                | Alu::RcpF
                | Alu::SqrtF
        )
    }
}

/// The lane operation of the VOP1/VOP2/VOP3 (`e64`) operation `op` of gfx1100's numbering and
/// the sources it reads, for the operations whose semantics are [`Alu::eval`]'s (the general
/// executor runs these through it too). VOP2 fmac and the literal fmas read more than their
/// sources, and are their callers' business.
pub(crate) fn alu_of(op: u16, e64: bool) -> Option<(Alu, usize)> {
    Some(match op {
        V_MOV_B32 => (Alu::Mov, 1),
        V_FMA_F32 => (Alu::Fma, 3),
        V_MUL_F32 => (Alu::MulF, 2),
        V_ADD_F32 => (Alu::AddF, 2),
        V_SUB_F32 => (Alu::SubF, 2),
        V_SUBREV_F32 => (Alu::SubrevF, 2),
        V_MIN_F32 => (Alu::MinF, 2),
        V_MAX_F32 => (Alu::MaxF, 2),
        V_ADD_NC_U32 => (Alu::AddU, 2),
        V_SUB_NC_U32 => (Alu::SubU, 2),
        V_SUBREV_NC_U32 => (Alu::SubrevU, 2),
        V_AND_B32 => (Alu::And, 2),
        V_OR_B32 => (Alu::Or, 2),
        V_XOR_B32 => (Alu::Xor, 2),
        V_NOT_B32 => (Alu::Not, 1),
        V_LSHLREV_B32 => (Alu::Lshlrev, 2),
        V_LSHRREV_B32 => (Alu::Lshrrev, 2),
        V_ASHRREV_I32 => (Alu::Ashrrev, 2),
        V_MIN_U32 => (Alu::MinU, 2),
        V_MAX_U32 => (Alu::MaxU, 2),
        V_MIN_I32 => (Alu::MinI, 2),
        V_MAX_I32 => (Alu::MaxI, 2),
        V_MUL_U32_U24 => (Alu::MulU24, 2),
        V_MUL_I32_I24 => (Alu::MulI24, 2),
        V_MUL_LO_U32 if e64 => (Alu::MulLo, 2),
        V_MUL_HI_U32 if e64 => (Alu::MulHiU, 2),
        V_MUL_HI_I32 if e64 => (Alu::MulHiI, 2),
        V_MAD_U32_U24 if e64 => (Alu::MadU24, 3),
        V_MIN3_U32 if e64 => (Alu::Min3U, 3),
        V_MAX3_U32 if e64 => (Alu::Max3U, 3),
        V_MAXMIN_I32 if e64 => (Alu::MaxminI, 3),
        V_MINMAX_I32 if e64 => (Alu::MinmaxI, 3),
        V_ADD3_U32 if e64 => (Alu::Add3, 3),
        V_XAD_U32 if e64 => (Alu::Xad, 3),
        V_LSHL_ADD_U32 if e64 => (Alu::LshlAdd, 3),
        V_ADD_LSHL_U32 if e64 => (Alu::AddLshl, 3),
        V_LSHL_OR_B32 if e64 => (Alu::LshlOr, 3),
        V_AND_OR_B32 if e64 => (Alu::AndOr, 3),
        V_OR3_B32 if e64 => (Alu::Or3, 3),
        V_XOR3_B32 if e64 => (Alu::Xor3, 3),
        V_BFI_B32 if e64 => (Alu::Bfi, 3),
        V_ALIGNBIT_B32 if e64 => (Alu::Alignbit, 3),
        V_BFE_U32 if e64 => (Alu::BfeU, 3),
        V_BCNT_U32_B32 if e64 => (Alu::Bcnt, 2),
        V_CLZ_I32_U32 => (Alu::Clz, 1),
        V_CVT_F32_U32 => (Alu::CvtF32U32, 1),
        V_CVT_F32_I32 => (Alu::CvtF32I32, 1),
        V_CVT_U32_F32 => (Alu::CvtU32F32, 1),
        V_CVT_I32_F32 => (Alu::CvtI32F32, 1),
        V_TRUNC_F32 => (Alu::TruncF, 1),
        V_CEIL_F32 => (Alu::CeilF, 1),
        V_FLOOR_F32 => (Alu::FloorF, 1),
        V_RNDNE_F32 => (Alu::RndneF, 1),
        V_RCP_F32 | V_RCP_IFLAG_F32 => (Alu::RcpF, 1),
        V_SQRT_F32 => (Alu::SqrtF, 1),
        _ => return None,
    })
}

/// One half of a fast VOPD pair, or a single VALU operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AluOp {
    pub f: Alu,
    pub s: [Operand; 3],
    /// Destination VGPR number.
    pub d: u8,
}

/// A 64-bit source of a fast form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand64 {
    /// The VGPR pair from this number.
    Vgpr(u8),
    /// The SGPR pair from this (even) index.
    Sgpr(u8),
    /// An integer inline constant, sign-extended.
    Const(u64),
}

/// The 64-bit shifts: `b` shifted by `a & 63`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shift64 {
    Lshlrev,
    Lshrrev,
    Ashrrev,
}

/// A 32-bit integer comparison (`v_cmp*_{i,u}32`): the relation, as the low three bits of the
/// compare opcode number it (false, <, ==, <=, >, !=, >=, true), and the signedness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cmp32 {
    pub rel: u8,
    pub signed: bool,
}

impl Cmp32 {
    /// The relation of `a` to `b`.
    #[inline(always)]
    pub(crate) fn eval(self, a: u32, b: u32) -> bool {
        // Signed order is unsigned order with the sign bit flipped.
        let flip = if self.signed { 0x8000_0000 } else { 0 };
        let (x, y) = (a ^ flip, b ^ flip);
        match self.rel {
            0 => false,
            1 => x < y,
            2 => x == y,
            3 => x <= y,
            4 => x > y,
            5 => x != y,
            6 => x >= y,
            _ => true,
        }
    }
}

/// What a vector compare form compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VCmp {
    /// `v_cmp*_{i,u}32`.
    Int(Cmp32),
    /// `v_cmp*_f32`: the relation as the low four bits of the opcode (`valu::fcmp`).
    F32(u8),
    /// `v_cmp_class_f32`.
    ClassF32,
}

/// A 32-bit source's abs/neg modifiers as masks: the lane value `x` reads as
/// `(x & and) ^ xor` (`valu::sign_masks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SrcMod {
    pub and: u32,
    pub xor: u32,
}

impl SrcMod {
    /// No modifier.
    pub(crate) const NONE: SrcMod = SrcMod { and: !0, xor: 0 };

    /// The modifiers of source `k` of `i` (a 32-bit, non-f16 source).
    fn of(i: &Inst, k: usize) -> SrcMod {
        let (and, xor) =
            crate::valu::sign_masks(1, false, i.abs >> k & 1 != 0, i.neg >> k & 1 != 0);
        SrcMod {
            and: and as u32,
            xor: xor as u32,
        }
    }

    /// `x` as the source reads it.
    #[inline(always)]
    pub(crate) fn apply(self, x: u32) -> u32 {
        (x & self.and) ^ self.xor
    }
}

/// A 32-bit scalar ALU operation of two sources: its result and SCC (`exec::scalar::salu`
/// holds the semantics, which the general SOP2 path runs too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Salu {
    /// `a` (SCC kept).
    Mov,
    AddU,
    SubU,
    AddI,
    SubI,
    Addc,
    Subb,
    MinI,
    MinU,
    MaxI,
    MaxU,
    /// `(a << n) + b`, n in 1..=4.
    LshlAdd(u8),
    MulI,
    MulHiU,
    MulHiI,
    AbsDiffI,
    Lshl,
    Lshr,
    Ashr,
    And,
    Or,
    Xor,
    Nand,
    Nor,
    Xnor,
    AndNot1,
    OrNot1,
    BfeU,
    BfeI,
    Bfm,
    Cselect,
    PackLl,
    PackLh,
    PackHh,
    /// `s_ctz_i32_b32` of `a` (SCC kept).
    Ctz,
    /// `s_bcnt1_i32_b32` of `a`.
    Bcnt1,
    /// `s_brev_b32` of `a` (SCC kept).
    Brev,
}

/// A 64-bit (or zero-extended 32-bit) scalar source of a fast form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Soperand64 {
    /// The SGPR pair from this (even) index.
    Pair(u8),
    /// One SGPR, zero-extended.
    Sgpr(u8),
    /// An integer inline constant or literal, as the 64-bit operand reads it.
    Const(u64),
}

/// The 32-bit SOP2 operation of gfx1100's opcode `op`.
pub(crate) fn salu_of_sop2(op: u16) -> Option<Salu> {
    use op_sop2::*;
    Some(match op {
        S_ADD_U32 => Salu::AddU,
        S_SUB_U32 => Salu::SubU,
        S_ADD_I32 => Salu::AddI,
        S_SUB_I32 => Salu::SubI,
        S_ADDC_U32 => Salu::Addc,
        S_SUBB_U32 => Salu::Subb,
        S_MIN_I32 => Salu::MinI,
        S_MIN_U32 => Salu::MinU,
        S_MAX_I32 => Salu::MaxI,
        S_MAX_U32 => Salu::MaxU,
        S_LSHL1_ADD_U32 => Salu::LshlAdd(1),
        S_LSHL2_ADD_U32 => Salu::LshlAdd(2),
        S_LSHL3_ADD_U32 => Salu::LshlAdd(3),
        S_LSHL4_ADD_U32 => Salu::LshlAdd(4),
        S_MUL_I32 => Salu::MulI,
        S_MUL_HI_U32 => Salu::MulHiU,
        S_MUL_HI_I32 => Salu::MulHiI,
        S_ABSDIFF_I32 => Salu::AbsDiffI,
        S_LSHL_B32 => Salu::Lshl,
        S_LSHR_B32 => Salu::Lshr,
        S_ASHR_I32 => Salu::Ashr,
        S_AND_B32 => Salu::And,
        S_OR_B32 => Salu::Or,
        S_XOR_B32 => Salu::Xor,
        S_NAND_B32 => Salu::Nand,
        S_NOR_B32 => Salu::Nor,
        S_XNOR_B32 => Salu::Xnor,
        S_AND_NOT1_B32 => Salu::AndNot1,
        S_OR_NOT1_B32 => Salu::OrNot1,
        S_BFE_U32 => Salu::BfeU,
        S_BFE_I32 => Salu::BfeI,
        S_BFM_B32 => Salu::Bfm,
        S_CSELECT_B32 => Salu::Cselect,
        S_PACK_LL_B32_B16 => Salu::PackLl,
        S_PACK_LH_B32_B16 => Salu::PackLh,
        S_PACK_HH_B32_B16 => Salu::PackHh,
        _ => return None,
    })
}

/// What a scalar branch tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cond {
    Always,
    Scc0,
    Scc1,
    Vccz,
    Vccnz,
    Execz,
    Execnz,
}

/// The carry-in of a fast integer add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CarryIn {
    None,
    /// A lane mask in SGPR `n` (and `n + 1` in wave64); `n` is at most VCC_LO.
    Mask(u8),
}

/// The form an instruction issues in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fast {
    /// Runs through the general executor.
    General,
    /// Only advances the PC (waits, scheduling hints, cache invalidations: memory is coherent
    /// at issue).
    Nop,
    /// One 32-bit lane operation; `top` is one past the highest VGPR it names.
    Alu { op: AluOp, top: u16 },
    /// A 32-bit float lane operation of a VOP3 encoding with modifiers: the sources' abs/neg,
    /// the result's omod and clamp (`valu::out_mod_f32`).
    AluMod {
        op: AluOp,
        m: [SrcMod; 3],
        omod: u8,
        clamp: bool,
        top: u16,
    },
    /// A VOPD pair: both halves read their sources before either writes.
    Dual { x: AluOp, y: AluOp, top: u16 },
    /// `v_add_co_u32` / `v_add_co_ci_u32`: the 32-bit sum and its carry-out mask (into SGPR
    /// `carry`, at most VCC_LO).
    AddCo {
        a: Operand,
        b: Operand,
        cin: CarryIn,
        d: u8,
        carry: u8,
        top: u16,
    },
    /// A 32-bit compare or class test: the lane mask (active lanes' results, others 0) into
    /// SGPR `d` (at most VCC_LO, or EXEC_LO for `v_cmpx`), the sources' abs/neg applied.
    Cmp {
        c: VCmp,
        a: Operand,
        b: Operand,
        m: [SrcMod; 2],
        d: u8,
        top: u16,
    },
    /// `v_lshlrev_b64`, `v_lshrrev_b64`, `v_ashrrev_i64` into the pair from `d`.
    Shift64 {
        f: Shift64,
        a: Operand,
        b: Operand64,
        d: u8,
        top: u16,
    },
    /// LDS stores of whole dwords: `rows` registers from `data` go to the lane's address
    /// (VGPR `addr`) plus `off`, lane by lane in lane order.
    DsStore {
        addr: u8,
        data: u8,
        rows: u8,
        off: u32,
    },
    /// `global_load_b32`..`b128` / `global_store_b32`..`b128`: `rows` dwords per lane
    /// to or from the registers from `data`; the lane's address is the VGPR pair from
    /// `addr`, or the SGPR pair `saddr` plus the VGPR `addr`, plus `imm`. The same for
    /// `flat_load_b32`..`b128` / `flat_store_b32`..`b128` (`flat`, no `saddr`) while every
    /// active lane's address lies outside the LDS and private apertures.
    GlobalDword {
        load: bool,
        flat: bool,
        addr: u8,
        saddr: Option<u8>,
        data: u8,
        rows: u8,
        imm: i32,
        top: u16,
    },
    /// LDS loads of whole dwords: `rows` registers from `d` get the dword at the lane's
    /// address (VGPR `addr`) plus `off[k]`.
    DsLoad {
        addr: u8,
        d: u8,
        rows: u8,
        off: [u32; 4],
    },
    /// A 32-bit scalar ALU operation into SGPR `d` (not the null register nor EXEC_HI), with
    /// SCC.
    Salu {
        f: Salu,
        a: Operand,
        b: Operand,
        d: u8,
    },
    /// A 64-bit SOP2 operation (`exec::scalar::sop2_b64`, gfx1100's opcode `op`) into the
    /// SGPR pair from `d` (below VCC_HI, or EXEC), with SCC.
    Salu64 {
        op: u16,
        a: Soperand64,
        b: Soperand64,
        d: u8,
    },
    /// `s_mov_b64` into the pair from `d`.
    Mov64 { a: Soperand64, d: u8 },
    /// `s_*_saveexec_b32/b64` (`exec::scalar::saveexec`, gfx1100's opcode `op`): EXEC into
    /// `d` (a pair when `wide`), the new EXEC from `a` and the old, SCC.
    SaveExec {
        op: u16,
        a: Soperand64,
        d: u8,
        wide: bool,
    },
    /// A 32-bit scalar compare into SCC.
    Scmp { c: Cmp32, a: Operand, b: Operand },
    /// A scalar branch to the PC plus `rel` bytes when `cond` holds; `back` when that is not
    /// forward (the wave may yield there).
    Branch { cond: Cond, rel: i32, back: bool },
    /// `s_endpgm`.
    End,
    /// `s_barrier`.
    Barrier,
    /// `s_load_b32`..`b512`: `n` dwords from the SGPR pair `base` plus `imm` (and SGPR
    /// `soff`) into SGPRs from `d` (`d + n` at most VCC_LO).
    Sload {
        base: u8,
        imm: i32,
        soff: Option<u8>,
        d: u8,
        n: u8,
    },
    /// `v_mad_u64_u32`: `a * b + c` into the pair from `d`, the carry-out mask into SGPR
    /// `carry` (at most VCC_LO; `None` for the null register). `src_top` covers the sources
    /// (checked before the carry is written), `top` the destination too.
    MadU64 {
        a: Operand,
        b: Operand,
        c: Operand64,
        d: u8,
        carry: Option<u8>,
        src_top: u16,
        top: u16,
    },
    /// `v_readlane_b32`: lane `valu::lane_of(lane)` of VGPR `a` into SGPR `d` (below VCC).
    Readlane { a: u8, lane: Operand, d: u8 },
    /// `v_writelane_b32`: `s` into lane `valu::lane_of(lane)` of VGPR `d`, whatever EXEC.
    Writelane { s: Operand, lane: Operand, d: u8 },
    /// `v_mbcnt_lo_u32_b32` / `v_mbcnt_hi_u32_b32` (`valu::mbcnt`) of the mask `m` plus `b`.
    Mbcnt {
        hi: bool,
        m: Operand,
        b: Operand,
        d: u8,
        top: u16,
    },
    /// `v_readfirstlane_b32` of VGPR `a` into SGPR `d` (below VCC).
    Readfirstlane { a: u8, d: u8 },
    /// `v_cndmask_b32`: `b` where the lane's bit of the mask in SGPR `mask` (at most VCC_LO)
    /// is set, else `a`.
    Cndmask {
        a: Operand,
        b: Operand,
        mask: u8,
        d: u8,
        top: u16,
    },
}

/// An instruction as the issue loop holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub inst: Inst,
    pub fast: Fast,
    /// A vector instruction (counted in lane-instructions).
    pub vector: bool,
    /// `InstClass::index` of the instruction's class (the statistics count by it).
    pub class: u8,
}

impl Slot {
    pub(crate) fn new(inst: Inst) -> Slot {
        let inst = if inst.isa == crate::decode::Isa::Gfx9 {
            crate::lower9::lower(inst)
        } else {
            inst
        };
        Slot {
            fast: select(&inst),
            vector: !matches!(
                inst.format,
                Format::Sop1
                    | Format::Sop2
                    | Format::Sopk
                    | Format::Sopc
                    | Format::Sopp
                    | Format::Smem
            ),
            class: crate::InstClass::of_inst(&inst).index() as u8,
            inst,
        }
    }
}

/// The value of an inline constant or special register that does not change during a
/// dispatch, as a 32-bit source of a non-f16 operation reads it; `None` for registers and
/// for the state bits read at issue (VCCZ, EXECZ, SCC).
pub(crate) fn constant(s: u16, lit: u32, f16: bool) -> Option<u32> {
    Some(match s {
        0..=123 | 125..=127 | 251..=253 | 256.. => return None,
        124 => 0,
        128..=192 => (s - 128) as u32,
        193..=208 => (-((s - 192) as i32)) as u32,
        240..=248 if f16 => [
            0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118,
        ][(s - 240) as usize],
        240..=247 => [0.5f32, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0][(s - 240) as usize].to_bits(),
        248 => 0x3e22_f983,
        235 | 236 => crate::exec::SHARED_APERTURE_HI,
        237 | 238 => crate::exec::PRIVATE_APERTURE_HI,
        255 => lit,
        _ => 0,
    })
}

/// A 32-bit source operand of a non-f16 VALU operation, or `None` when it is read some other
/// way (DPP markers, VCCZ/EXECZ/SCC).
fn operand(s: u16, lit: u32) -> Option<Operand> {
    match s {
        256..=511 => Some(Operand::Vgpr((s - 256) as u8)),
        0..=123 | 125..=127 => Some(Operand::Sgpr(s as u8)),
        src::DPP8 | src::DPP8FI | src::DPP16 => None,
        _ => constant(s, lit, false).map(Operand::Const),
    }
}

fn vgpr(s: u16) -> Option<u8> {
    (256..=511).contains(&s).then(|| (s - 256) as u8)
}

/// One past the highest VGPR among `ops` and the destinations `d`.
fn top(ops: &[Operand], d: &[u8]) -> u16 {
    let v = ops.iter().filter_map(|o| match o {
        Operand::Vgpr(r) => Some(*r),
        _ => None,
    });
    v.chain(d.iter().copied())
        .map(|r| r as u16 + 1)
        .max()
        .unwrap_or(0)
}

/// Picks the issue form of `i`.
pub(crate) fn select(i: &Inst) -> Fast {
    if crate::exec::no_effect(i) {
        return Fast::Nop;
    }
    // GFX9's AGPR operands and SDWA selects: the general executor's.
    if i.acc != 0 || i.sdwa.is_some() {
        return Fast::General;
    }
    match i.format {
        Format::Vop1 | Format::Vop2 | Format::Vop3 => alu(i)
            .map(|op| Fast::Alu {
                op,
                top: top(&op.s, &[op.d]),
            })
            .or_else(|| alu_mod(i))
            .or_else(|| add_co(i))
            .or_else(|| shift64(i))
            .or_else(|| cmp(i))
            .or_else(|| cndmask(i))
            .or_else(|| readfirstlane(i))
            .or_else(|| lanes(i))
            .unwrap_or(Fast::General),
        Format::Vopd => dual(i).unwrap_or(Fast::General),
        Format::Vopc => cmp(i).unwrap_or(Fast::General),
        Format::Vop3sd => add_co(i).or_else(|| mad_u64(i)).unwrap_or(Fast::General),
        Format::Sop1 | Format::Sop2 | Format::Sopk | Format::Sopc => {
            scalar(i).unwrap_or(Fast::General)
        }
        Format::Sopp => sopp(i).unwrap_or(Fast::General),
        Format::Smem => s_load(i).unwrap_or(Fast::General),
        Format::Ds => ds_load(i).or_else(|| ds_store(i)).unwrap_or(Fast::General),
        Format::Global => global_dword(i).unwrap_or(Fast::General),
        Format::Flat => flat_dword(i).unwrap_or(Fast::General),
        _ => Fast::General,
    }
}

/// The VOP1/VOP2/VOP3 operations with a fast form: no DPP, no modifiers.
fn alu(i: &Inst) -> Option<AluOp> {
    if i.dpp.is_some() || i.abs != 0 || i.neg != 0 || i.op_sel != 0 || i.clamp || i.omod != 0 {
        return None;
    }
    // (operation, sources read): fmac's third source is its destination.
    let (f, n) = match (i.format, i.op) {
        (Format::Vop2, V_FMAMK_F32 | V_FMAAK_F32) => {
            return fma_literal(i.op, i.dst, i.src[0], i.src[1], i.literal);
        }
        (Format::Vop2, V_FMAC_F32) => (Alu::Fma, 2),
        (Format::Vop1 | Format::Vop2 | Format::Vop3, op) => alu_of(op, i.format == Format::Vop3)?,
        _ => return None,
    };
    let d = vgpr(i.dst)?;
    let mut s = [Operand::Const(0); 3];
    for (o, &r) in s.iter_mut().zip(&i.src).take(n) {
        *o = operand(r, i.literal)?;
    }
    if f == Alu::Fma && n == 2 {
        s[2] = Operand::Vgpr(d);
    }
    Some(AluOp { f, s, d })
}

/// The float operations of [`alu`] in a VOP3 encoding with abs/neg, omod or clamp (GFX11
/// and GFX12; a modifier of a constant source is applied to it here).
fn alu_mod(i: &Inst) -> Option<Fast> {
    if i.format != Format::Vop3
        || i.isa == crate::decode::Isa::Gfx9
        || i.dpp.is_some()
        || i.op_sel != 0
        || (i.abs == 0 && i.neg == 0 && !i.clamp && i.omod == 0)
    {
        return None;
    }
    let mut op = alu(&Inst {
        abs: 0,
        neg: 0,
        clamp: false,
        omod: 0,
        ..*i
    })?;
    if !op.f.is_float() {
        return None;
    }
    let mut m = [SrcMod::NONE; 3];
    for (k, (s, m)) in op.s.iter_mut().zip(&mut m).enumerate() {
        let sm = SrcMod::of(i, k);
        match s {
            Operand::Const(c) => *c = sm.apply(*c),
            _ => *m = sm,
        }
    }
    Some(Fast::AluMod {
        op,
        m,
        omod: i.omod,
        clamp: i.clamp,
        top: top(&op.s, &[op.d]),
    })
}

/// `v_fmamk_f32` (`a * K + b`) and `v_fmaak_f32` (`a * b + K`) as the fma of three sources,
/// the literal K one of them.
fn fma_literal(op: u16, d: u16, s0: u16, s1: u16, lit: u32) -> Option<AluOp> {
    let (a, b, k) = (operand(s0, lit)?, operand(s1, lit)?, Operand::Const(lit));
    let s = match op {
        V_FMAMK_F32 => [a, k, b],
        V_FMAAK_F32 => [a, b, k],
        _ => return None,
    };
    Some(AluOp {
        f: Alu::Fma,
        s,
        d: vgpr(d)?,
    })
}

/// A VOPD pair whose halves both have fast forms.
fn dual(i: &Inst) -> Option<Fast> {
    let half = |op: u16, d: u16, s0: u16, s1: u16| -> Option<AluOp> {
        let (f, n) = match op {
            op_vopdx::V_DUAL_FMAMK_F32 => return fma_literal(V_FMAMK_F32, d, s0, s1, i.literal),
            op_vopdx::V_DUAL_FMAAK_F32 => return fma_literal(V_FMAAK_F32, d, s0, s1, i.literal),
            op_vopdx::V_DUAL_FMAC_F32 => (Alu::Fma, 2),
            op_vopdx::V_DUAL_MUL_F32 => (Alu::MulF, 2),
            op_vopdx::V_DUAL_ADD_F32 => (Alu::AddF, 2),
            op_vopdx::V_DUAL_SUB_F32 => (Alu::SubF, 2),
            op_vopdx::V_DUAL_SUBREV_F32 => (Alu::SubrevF, 2),
            op_vopdx::V_DUAL_MOV_B32 => (Alu::Mov, 1),
            op_vopdx::V_DUAL_MIN_F32 => (Alu::MinF, 2),
            op_vopdx::V_DUAL_MAX_F32 => (Alu::MaxF, 2),
            // The X-only integer halves (VOPDY ids past the VOPDX table).
            0x10 => (Alu::AddU, 2),
            0x11 => (Alu::Lshlrev, 2),
            0x12 => (Alu::And, 2),
            _ => return None,
        };
        let d = vgpr(d)?;
        let mut s = [Operand::Const(0); 3];
        s[0] = operand(s0, i.literal)?;
        if n == 2 {
            s[1] = operand(s1, i.literal)?;
        }
        if f == Alu::Fma {
            s[2] = Operand::Vgpr(d);
        }
        Some(AluOp { f, s, d })
    };
    let x = half(i.op, i.dst, i.src[0], i.src[1])?;
    let y = half(i.opy as u16, i.sdst, i.srcy[0], i.srcy[1])?;
    let t = top(&x.s, &[x.d]).max(top(&y.s, &[y.d]));
    Some(Fast::Dual { x, y, top: t })
}

/// `v_add_co_u32` (VOP3SD) and `v_add_co_ci_u32` (VOP2, VOP3SD) without modifiers, with
/// the carry masks in SGPRs up to VCC.
fn add_co(i: &Inst) -> Option<Fast> {
    if i.dpp.is_some() || i.clamp || i.omod != 0 || i.neg != 0 || i.abs != 0 {
        return None;
    }
    let mask = |s: u16| (s <= src::VCC_LO).then_some(s as u8);
    let (cin, carry) = match (i.format, i.op) {
        (Format::Vop2, V_ADD_CO_CI_U32) => (CarryIn::Mask(src::VCC_LO as u8), src::VCC_LO as u8),
        (Format::Vop3sd, V_ADD_CO_CI_U32) => (CarryIn::Mask(mask(i.src[2])?), mask(i.sdst)?),
        (Format::Vop3sd, V_ADD_CO_U32) => (CarryIn::None, mask(i.sdst)?),
        _ => return None,
    };
    let (a, b) = (operand(i.src[0], i.literal)?, operand(i.src[1], i.literal)?);
    let d = vgpr(i.dst)?;
    Some(Fast::AddCo {
        a,
        b,
        cin,
        d,
        carry,
        top: top(&[a, b], &[d]),
    })
}

/// The 32-bit integer and f32 compares and the f32 class test (VOPC, or VOP3; the f32 ones
/// with abs/neg), `v_cmpx` too.
fn cmp(i: &Inst) -> Option<Fast> {
    if i.op >= 0x100 || i.dpp.is_some() || i.op_sel != 0 || i.clamp || i.omod != 0 {
        return None;
    }
    let c = match i.op & 0x7f {
        0x40..=0x47 => VCmp::Int(Cmp32 {
            rel: (i.op & 7) as u8,
            signed: true,
        }),
        0x48..=0x4f => VCmp::Int(Cmp32 {
            rel: (i.op & 7) as u8,
            signed: false,
        }),
        // GFX9's v_cmpx also writes its destination: the general executor's.
        0x10..=0x1f if i.isa != crate::decode::Isa::Gfx9 => VCmp::F32((i.op & 0xf) as u8),
        0x7e if i.isa != crate::decode::Isa::Gfx9 => VCmp::ClassF32,
        _ => return None,
    };
    if matches!(c, VCmp::Int(_)) && (i.abs != 0 || i.neg != 0) {
        return None;
    }
    let d = if i.op >= 0x80 {
        src::EXEC_LO
    } else if i.format == Format::Vop3 {
        i.dst
    } else {
        src::VCC_LO
    };
    if d > src::VCC_LO && d != src::EXEC_LO {
        return None;
    }
    let (a, b) = (operand(i.src[0], i.literal)?, operand(i.src[1], i.literal)?);
    Some(Fast::Cmp {
        c,
        a,
        b,
        m: [SrcMod::of(i, 0), SrcMod::of(i, 1)],
        d: d as u8,
        top: top(&[a, b], &[]),
    })
}

/// The 64-bit shifts (VOP3, and GFX12's VOP2) without modifiers, the value a VGPR pair, an
/// SGPR pair or an integer inline constant.
fn shift64(i: &Inst) -> Option<Fast> {
    if !matches!(i.format, Format::Vop3 | Format::Vop2)
        || i.dpp.is_some()
        || i.abs != 0
        || i.neg != 0
        || i.op_sel != 0
        || i.clamp
        || i.omod != 0
    {
        return None;
    }
    let f = match i.op {
        V_LSHLREV_B64 => Shift64::Lshlrev,
        V_LSHRREV_B64 => Shift64::Lshrrev,
        V_ASHRREV_I64 => Shift64::Ashrrev,
        _ => return None,
    };
    let a = operand(i.src[0], i.literal)?;
    let s = i.src[1];
    let b = match s {
        256..=510 => Operand64::Vgpr((s - 256) as u8),
        0..=123 => Operand64::Sgpr((s & !1) as u8),
        128..=208 => Operand64::Const(constant(s, 0, false)? as i32 as i64 as u64),
        _ => return None,
    };
    let d = vgpr(i.dst).filter(|&d| d < 255)?;
    let mut t = top(&[a], &[d + 1]);
    if let Operand64::Vgpr(r) = b {
        t = t.max(r as u16 + 2);
    }
    Some(Fast::Shift64 { f, a, b, d, top: t })
}

/// Global loads and stores of 1 to 4 whole dwords (`global_load_b32`..`b128`,
/// `global_store_b32`..`b128`), the scalar base (if any) an SGPR pair.
fn global_dword(i: &Inst) -> Option<Fast> {
    use crate::opcodes::op_global::*;
    let (load, rows) = match i.op {
        GLOBAL_LOAD_B32 => (true, 1),
        GLOBAL_LOAD_B64 => (true, 2),
        GLOBAL_LOAD_B96 => (true, 3),
        GLOBAL_LOAD_B128 => (true, 4),
        GLOBAL_STORE_B32 => (false, 1),
        GLOBAL_STORE_B64 => (false, 2),
        GLOBAL_STORE_B96 => (false, 3),
        GLOBAL_STORE_B128 => (false, 4),
        _ => return None,
    };
    let m = meta(i);
    let kind = if load { MemKind::Load } else { MemKind::Store };
    if m.kind != kind || m.bytes != 4 * rows || m.exotic || m.d16 {
        return None;
    }
    let addr = vgpr(i.src[0])?;
    let data = vgpr(if load { i.dst } else { i.src[1] })?;
    let saddr = match i.saddr {
        src::NULL => None,
        s @ 0..=105 => Some((s & !1) as u8),
        _ => return None,
    };
    let a_top = addr as u16 + if saddr.is_none() { 2 } else { 1 };
    Some(Fast::GlobalDword {
        load,
        flat: false,
        addr,
        saddr,
        data,
        rows,
        imm: i.imm,
        top: a_top.max(data as u16 + rows as u16),
    })
}

/// Flat loads and stores of 1 to 4 whole dwords (`flat_load_b32`..`b128`,
/// `flat_store_b32`..`b128`): the global form's, on the VGPR pair's address.
fn flat_dword(i: &Inst) -> Option<Fast> {
    use crate::opcodes::op_flat::*;
    let (load, rows) = match i.op {
        FLAT_LOAD_B32 => (true, 1),
        FLAT_LOAD_B64 => (true, 2),
        FLAT_LOAD_B96 => (true, 3),
        FLAT_LOAD_B128 => (true, 4),
        FLAT_STORE_B32 => (false, 1),
        FLAT_STORE_B64 => (false, 2),
        FLAT_STORE_B96 => (false, 3),
        FLAT_STORE_B128 => (false, 4),
        _ => return None,
    };
    let m = meta(i);
    let kind = if load { MemKind::Load } else { MemKind::Store };
    if m.kind != kind || m.bytes != 4 * rows || m.exotic || m.d16 {
        return None;
    }
    let addr = vgpr(i.src[0])?;
    let data = vgpr(if load { i.dst } else { i.src[1] })?;
    Some(Fast::GlobalDword {
        load,
        flat: true,
        addr,
        saddr: None,
        data,
        rows,
        imm: i.imm,
        top: (addr as u16 + 2).max(data as u16 + rows as u16),
    })
}

/// `ds_store_b32`..`b128`.
fn ds_store(i: &Inst) -> Option<Fast> {
    use op_ds::*;
    if !matches!(
        i.op,
        DS_STORE_B32 | DS_STORE_B64 | DS_STORE_B96 | DS_STORE_B128
    ) {
        return None;
    }
    let m = meta(i);
    if m.kind != MemKind::Store {
        return None;
    }
    Some(Fast::DsStore {
        addr: vgpr(i.src[0])?,
        data: vgpr(i.src[1])?,
        rows: (m.bytes as usize).div_ceil(4).clamp(1, 4) as u8,
        off: (i.imm as u32) | (i.imm1 as u32) << 8,
    })
}

/// `ds_load_b32`..`b128` and `ds_load_2addr[_stride64]_b32/b64`.
fn ds_load(i: &Inst) -> Option<Fast> {
    use op_ds::*;
    let (addr, d) = (vgpr(i.src[0])?, vgpr(i.dst)?);
    let mut off = [0u32; 4];
    let rows = match i.op {
        DS_LOAD_B32 | DS_LOAD_B64 | DS_LOAD_B96 | DS_LOAD_B128 => {
            let m = meta(i);
            if m.kind != MemKind::Load {
                return None;
            }
            let n = (m.bytes as usize).div_ceil(4).clamp(1, 4);
            let base = (i.imm as u32) | (i.imm1 as u32) << 8;
            for (k, o) in off.iter_mut().take(n).enumerate() {
                *o = base.wrapping_add(4 * k as u32);
            }
            n
        }
        DS_LOAD_2ADDR_B32
        | DS_LOAD_2ADDR_STRIDE64_B32
        | DS_LOAD_2ADDR_B64
        | DS_LOAD_2ADDR_STRIDE64_B64 => {
            let (n, scale) = crate::exec::two_addr_shape(i.op);
            for (j, o) in off.iter_mut().take(2 * n).enumerate() {
                let e = if j < n { i.imm as u32 } else { i.imm1 as u32 };
                *o = (e * scale).wrapping_add(4 * (j % n) as u32);
            }
            2 * n
        }
        _ => return None,
    };
    Some(Fast::DsLoad {
        addr,
        d,
        rows: rows as u8,
        off,
    })
}

/// A scalar source: an SGPR, an inline constant or a literal (not VCCZ/EXECZ/SCC).
fn soperand(s: u16, lit: u32) -> Option<Operand> {
    (s < 256).then(|| operand(s, lit)).flatten()
}

/// The 32-bit SOP1/SOP2/SOPK/SOPC operations of gfx1100 (semantic ids past its tables are
/// later generations' and stay general).
fn scalar(i: &Inst) -> Option<Fast> {
    let dst = || (i.dst <= 126 && i.dst != src::NULL).then_some(i.dst as u8);
    let cmp = |rel: u8, signed: bool| Cmp32 { rel, signed };
    match i.format {
        Format::Sop2 if (i.op as usize) < opcodes::SOP2.len() => match salu_of_sop2(i.op) {
            Some(f) => Some(Fast::Salu {
                f,
                a: soperand(i.src[0], i.literal)?,
                b: soperand(i.src[1], i.literal)?,
                d: dst()?,
            }),
            None if crate::exec::scalar::is_sop2_b64(i.op) => Some(Fast::Salu64 {
                op: i.op,
                a: soperand64(i.src[0], i.literal, meta(i).w.src[0] == 2)?,
                b: soperand64(i.src[1], i.literal, meta(i).w.src[1] == 2)?,
                d: dst64(i.dst)?,
            }),
            None => None,
        },
        Format::Sop1 if (i.op as usize) < opcodes::SOP1.len() => sop1(i),
        Format::Sopc => {
            use op_sopc::*;
            let c = match i.op {
                S_CMP_EQ_I32 => cmp(2, true),
                S_CMP_LG_I32 => cmp(5, true),
                S_CMP_GT_I32 => cmp(4, true),
                S_CMP_GE_I32 => cmp(6, true),
                S_CMP_LT_I32 => cmp(1, true),
                S_CMP_LE_I32 => cmp(3, true),
                S_CMP_EQ_U32 => cmp(2, false),
                S_CMP_LG_U32 => cmp(5, false),
                S_CMP_GT_U32 => cmp(4, false),
                S_CMP_GE_U32 => cmp(6, false),
                S_CMP_LT_U32 => cmp(1, false),
                S_CMP_LE_U32 => cmp(3, false),
                _ => return None,
            };
            Some(Fast::Scmp {
                c,
                a: soperand(i.src[0], i.literal)?,
                b: soperand(i.src[1], i.literal)?,
            })
        }
        Format::Sopk => {
            use op_sopk::*;
            let k = i.imm as u16;
            let sk = Operand::Const(k as i16 as i32 as u32);
            let uk = Operand::Const(k as u32);
            let d = soperand(i.dst, 0)?;
            let (c, b) = match i.op {
                S_MOVK_I32 => {
                    return Some(Fast::Salu {
                        f: Salu::Mov,
                        a: sk,
                        b: Operand::Const(0),
                        d: dst()?,
                    });
                }
                S_ADDK_I32 | S_MULK_I32 => {
                    let f = if i.op == S_ADDK_I32 {
                        Salu::AddI
                    } else {
                        Salu::MulI
                    };
                    return Some(Fast::Salu {
                        f,
                        a: d,
                        b: sk,
                        d: dst()?,
                    });
                }
                S_CMPK_EQ_I32 => (cmp(2, true), sk),
                S_CMPK_LG_I32 => (cmp(5, true), sk),
                S_CMPK_GT_I32 => (cmp(4, true), sk),
                S_CMPK_GE_I32 => (cmp(6, true), sk),
                S_CMPK_LT_I32 => (cmp(1, true), sk),
                S_CMPK_LE_I32 => (cmp(3, true), sk),
                S_CMPK_EQ_U32 => (cmp(2, false), uk),
                S_CMPK_LG_U32 => (cmp(5, false), uk),
                S_CMPK_GT_U32 => (cmp(4, false), uk),
                S_CMPK_GE_U32 => (cmp(6, false), uk),
                S_CMPK_LT_U32 => (cmp(1, false), uk),
                S_CMPK_LE_U32 => (cmp(3, false), uk),
                _ => return None,
            };
            Some(Fast::Scmp { c, a: d, b })
        }
        _ => None,
    }
}

/// A scalar source of `wide` (two dwords) or one dword zero-extended: SGPRs (a pair from its
/// even index), VCC, EXEC, integer inline constants and literals.
fn soperand64(s: u16, lit: u32, wide: bool) -> Option<Soperand64> {
    Some(match s {
        0..=107 | 126 | 127 if wide => Soperand64::Pair((s & !1) as u8),
        0..=107 | 126 | 127 => Soperand64::Sgpr(s as u8),
        src::NULL => Soperand64::Const(0),
        128..=208 if wide => Soperand64::Const(constant(s, 0, false)? as i32 as i64 as u64),
        128..=208 | 255 => Soperand64::Const(constant(s, lit, false)? as u64),
        _ => return None,
    })
}

/// A scalar pair destination: below VCC_HI, or EXEC.
fn dst64(d: u16) -> Option<u8> {
    (d & 1 == 0 && (d < src::VCC_LO + 1 || d == src::EXEC_LO)).then_some(d as u8)
}

/// The SOP1 operations with fast forms.
fn sop1(i: &Inst) -> Option<Fast> {
    use op_sop1::*;
    let dst = || (i.dst <= 126 && i.dst != src::NULL).then_some(i.dst as u8);
    let unary = |f: Salu| -> Option<Fast> {
        Some(Fast::Salu {
            f,
            a: soperand(i.src[0], i.literal)?,
            b: Operand::Const(0),
            d: dst()?,
        })
    };
    match i.op {
        S_MOV_B32 => unary(Salu::Mov),
        S_CTZ_I32_B32 => unary(Salu::Ctz),
        S_BCNT1_I32_B32 => unary(Salu::Bcnt1),
        S_BREV_B32 => unary(Salu::Brev),
        S_MOV_B64 => Some(Fast::Mov64 {
            a: soperand64(i.src[0], i.literal, true)?,
            d: dst64(i.dst)?,
        }),
        op if crate::exec::scalar::saveexec(op, 0, 0).is_some() => {
            let wide = meta(i).w.dst == 2;
            Some(Fast::SaveExec {
                op,
                a: soperand64(i.src[0], i.literal, wide)?,
                d: if wide { dst64(i.dst)? } else { dst()? },
                wide,
            })
        }
        _ => None,
    }
}

/// The branches, `s_endpgm` and `s_barrier` of gfx1100's SOPP.
fn sopp(i: &Inst) -> Option<Fast> {
    use op_sopp::*;
    if i.op as usize >= opcodes::SOPP.len() {
        return None;
    }
    let cond = match i.op {
        S_ENDPGM => return Some(Fast::End),
        S_BARRIER => return Some(Fast::Barrier),
        S_BRANCH => Cond::Always,
        S_CBRANCH_SCC0 => Cond::Scc0,
        S_CBRANCH_SCC1 => Cond::Scc1,
        S_CBRANCH_VCCZ => Cond::Vccz,
        S_CBRANCH_VCCNZ => Cond::Vccnz,
        S_CBRANCH_EXECZ => Cond::Execz,
        S_CBRANCH_EXECNZ => Cond::Execnz,
        _ => return None,
    };
    let rel = 4 + 4 * (i.imm as u16 as i16 as i32);
    Some(Fast::Branch {
        cond,
        rel,
        back: rel <= 0,
    })
}

/// `s_load_b32`..`b512` from an SGPR pair, into SGPRs below VCC.
fn s_load(i: &Inst) -> Option<Fast> {
    use op_smem::*;
    let n: u8 = match i.op {
        S_LOAD_B32 => 1,
        S_LOAD_B64 => 2,
        S_LOAD_B128 => 4,
        S_LOAD_B256 => 8,
        S_LOAD_B512 => 16,
        _ => return None,
    };
    let base = match i.src[0] {
        s @ 0..=105 => (s & !1) as u8,
        _ => return None,
    };
    let soff = match i.saddr {
        src::NULL => None,
        s @ 0..=105 => Some(s as u8),
        _ => return None,
    };
    let d = i.dst & !(n.min(4) as u16 - 1);
    (d + n as u16 <= src::VCC_LO).then_some(Fast::Sload {
        base,
        imm: i.imm,
        soff,
        d: d as u8,
        n,
    })
}

/// `v_mad_u64_u32` (VOP3SD) without clamp, its addend a VGPR pair, an SGPR pair or an
/// integer inline constant, its carry-out below VCC_HI or the null register.
fn mad_u64(i: &Inst) -> Option<Fast> {
    if i.op != V_MAD_U64_U32
        || i.dpp.is_some()
        || i.clamp
        || i.omod != 0
        || i.neg != 0
        || i.abs != 0
    {
        return None;
    }
    let (a, b) = (operand(i.src[0], i.literal)?, operand(i.src[1], i.literal)?);
    let c = match i.src[2] {
        s @ 256..=510 => Operand64::Vgpr((s - 256) as u8),
        s @ 0..=105 => Operand64::Sgpr((s & !1) as u8),
        s @ 128..=208 => Operand64::Const(constant(s, 0, false)? as i32 as i64 as u64),
        _ => return None,
    };
    let carry = match i.sdst {
        src::NULL => None,
        s if s <= src::VCC_LO => Some(s as u8),
        _ => return None,
    };
    let d = vgpr(i.dst).filter(|&d| d < 255)?;
    let mut src_top = top(&[a, b], &[]);
    if let Operand64::Vgpr(r) = c {
        src_top = src_top.max(r as u16 + 2);
    }
    Some(Fast::MadU64 {
        a,
        b,
        c,
        d,
        carry,
        src_top,
        top: src_top.max(d as u16 + 2),
    })
}

/// `v_cndmask_b32` (VOP2 with VCC, VOP3 with an SGPR mask below VCC_HI) without modifiers.
fn cndmask(i: &Inst) -> Option<Fast> {
    if i.op != V_CNDMASK_B32
        || i.dpp.is_some()
        || i.abs != 0
        || i.neg != 0
        || i.clamp
        || i.omod != 0
        || i.op_sel != 0
    {
        return None;
    }
    let mask = match i.format {
        Format::Vop2 => src::VCC_LO,
        Format::Vop3 if i.src[2] <= src::VCC_LO => i.src[2],
        _ => return None,
    };
    let (a, b) = (operand(i.src[0], i.literal)?, operand(i.src[1], i.literal)?);
    let d = vgpr(i.dst)?;
    Some(Fast::Cndmask {
        a,
        b,
        mask: mask as u8,
        d,
        top: top(&[a, b], &[d]),
    })
}

/// `v_readlane_b32`, `v_writelane_b32` (VOP3, the lane an SGPR or constant) and
/// `v_mbcnt_lo/hi_u32_b32` without modifiers.
fn lanes(i: &Inst) -> Option<Fast> {
    if i.format != Format::Vop3
        || i.isa == crate::decode::Isa::Gfx9
        || i.dpp.is_some()
        || i.abs != 0
        || i.neg != 0
        || i.op_sel != 0
        || i.clamp
        || i.omod != 0
    {
        return None;
    }
    let scalar = |s: u16| soperand(s, i.literal);
    match i.op {
        V_READLANE_B32 => Some(Fast::Readlane {
            a: vgpr(i.src[0])?,
            lane: scalar(i.src[1])?,
            d: (i.dst < src::VCC_LO).then_some(i.dst as u8)?,
        }),
        V_WRITELANE_B32 => Some(Fast::Writelane {
            s: scalar(i.src[0])?,
            lane: scalar(i.src[1])?,
            d: vgpr(i.dst)?,
        }),
        V_MBCNT_LO_U32_B32 | V_MBCNT_HI_U32_B32 => {
            let (m, b, d) = (
                operand(i.src[0], i.literal)?,
                operand(i.src[1], i.literal)?,
                vgpr(i.dst)?,
            );
            Some(Fast::Mbcnt {
                hi: i.op == V_MBCNT_HI_U32_B32,
                m,
                b,
                d,
                top: top(&[m, b], &[d]),
            })
        }
        _ => None,
    }
}

/// `v_readfirstlane_b32` (VOP1) of a VGPR into an SGPR below VCC.
fn readfirstlane(i: &Inst) -> Option<Fast> {
    if i.format != Format::Vop1 || i.op != V_READFIRSTLANE_B32 || i.dpp.is_some() {
        return None;
    }
    let d = (i.dst < src::VCC_LO).then_some(i.dst as u8)?;
    Some(Fast::Readfirstlane {
        a: vgpr(i.src[0])?,
        d,
    })
}

#[cfg(test)]
mod tests {
    use super::Alu;

    /// The lane operations on values whose results the ISA guide and IEEE 754 fix (signed
    /// zeros, NaN, saturation, sign extension), independent of the executors that run them.
    #[test]
    fn lane_operations_give_known_values() {
        let f = |x: f32| x.to_bits();
        let nan = 0x7fc0_0000;
        let cases: &[(Alu, [u32; 3], u32)] = &[
            (Alu::CvtU32F32, [nan, 0, 0], 0),
            (Alu::CvtU32F32, [f(-1.5), 0, 0], 0),
            (Alu::CvtU32F32, [f(5e9), 0, 0], u32::MAX),
            (Alu::CvtU32F32, [f(7.9), 0, 0], 7),
            (Alu::CvtI32F32, [nan, 0, 0], 0),
            (Alu::CvtI32F32, [f(-3e9), 0, 0], i32::MIN as u32),
            (Alu::CvtI32F32, [f(-7.9), 0, 0], -7i32 as u32),
            (Alu::CvtF32U32, [u32::MAX, 0, 0], f(4294967296.0)),
            (Alu::CvtF32I32, [-1i32 as u32, 0, 0], f(-1.0)),
            (Alu::RcpF, [f(-0.0), 0, 0], f(f32::NEG_INFINITY)),
            (Alu::RcpF, [f(4.0), 0, 0], f(0.25)),
            (Alu::SqrtF, [f(-0.0), 0, 0], f(-0.0)),
            (Alu::SqrtF, [f(2.25), 0, 0], f(1.5)),
            (Alu::TruncF, [f(-0.5), 0, 0], f(-0.0)),
            (Alu::CeilF, [f(-0.5), 0, 0], f(-0.0)),
            (Alu::FloorF, [f(-0.5), 0, 0], f(-1.0)),
            (Alu::RndneF, [f(2.5), 0, 0], f(2.0)),
            (Alu::RndneF, [f(-3.5), 0, 0], f(-4.0)),
            (Alu::Clz, [0, 0, 0], u32::MAX),
            (Alu::Clz, [1, 0, 0], 31),
            (Alu::Bcnt, [0xf0f0, 3, 0], 11),
            (Alu::Bfi, [0xff00, 0x1234, 0xabcd], 0x12cd),
            (Alu::Alignbit, [0x1234_5678, 0x9abc_def0, 36], 0x89ab_cdef),
            (Alu::MulI24, [0x00ff_ffff, 2, 0], -2i32 as u32),
            (Alu::MulU24, [0x01ff_ffff, 2, 0], 0x1ff_fffe),
            (Alu::MadU24, [0xff_ffff, 0xff_ffff, 1], 0xfe00_0002),
            (Alu::MulHiU, [u32::MAX, u32::MAX, 0], 0xffff_fffe),
            (Alu::MulHiI, [-1i32 as u32, 1, 0], u32::MAX),
            (Alu::Xad, [0xf0, 0xff, 1], 0x10),
            (Alu::AddLshl, [1, 2, 33], 6),
            (Alu::MaxminI, [-5i32 as u32, 3, 2], 2),
            (Alu::Min3U, [9, 4, 7], 4),
            (Alu::BfeU, [0xabcd, 4, 8], 0xbc),
            (Alu::BfeU, [0xabcd, 4, 32], 0),
            (Alu::Fma, [f(2.0), f(3.0), f(-6.0)], f(0.0)),
            (Alu::SubF, [f(1.0), f(1.0), 0], f(0.0)),
        ];
        for &(op, [x, y, z], want) in cases {
            let got = op.eval(x, y, z, true);
            assert_eq!(
                got, want,
                "{op:?}({x:#x}, {y:#x}, {z:#x}) = {got:#x}, not {want:#x}"
            );
        }
    }
}
