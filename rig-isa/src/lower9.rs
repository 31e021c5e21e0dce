//! GFX9 lowering: a decoded gfx942 instruction as the one core runs it.
//!
//! The gfx942 front end (`decode::gfx9`) keeps what the encoding says, for printing in
//! LLVM's syntax; the core reads operands one way for every generation. What differs is
//! settled here, once per instruction at decode time (`prep::Slot::new`), so that no
//! semantics are stated twice:
//! - accumulator registers: an operand the encoding marks as an AGPR (`Inst::acc`) becomes
//!   [`AGPR0`] + n, which the core's register lookup (`exec::reg_row`) finds in the unified
//!   file past the kernel descriptor's ACCUM_OFFSET;
//! - `v_accvgpr_read_b32`, `v_accvgpr_write_b32` and `v_accvgpr_mov_b32` are `v_mov_b32`
//!   between the two register classes;
//! - the GLOBAL/SCRATCH `off` address (saddr 0x7f on GFX9) is the core's `null`.
//!
//! What stays GFX9's own and the core honours by `Inst::isa`: SDWA selects (`Inst::sdwa`),
//! the DPP controls GFX9 has and GFX11 dropped (wave shifts and rotates, row broadcasts), the
//! zeroed high half of most 16-bit results, and `v_cmpx` writing its SGPR destination as well
//! as EXEC.

use crate::decode::{Format, Inst, src};
use crate::exec::AGPR0;
use crate::opcodes::op_valu::{V_FMA_F64, V_MOV_B32, V_MUL_DX9_ZERO_F32};
use crate::opcodes_gfx9::{new_valu, new_vop3p};

/// GFX9's `off` in the saddr field of GLOBAL and SCRATCH instructions.
const SADDR_OFF: u16 = 0x7f;

/// `i` (decoded from gfx942 code) as the core runs it.
pub(crate) fn lower(mut i: Inst) -> Inst {
    // AGPR operands: bits 0-2 of `acc` mark src[0..3], bit 3 the destination; only vector
    // register operands move (a MUBUF resource or an MFMA constant stays what it is).
    let agpr = |r: &mut u16| {
        if (src::VGPR0..AGPR0).contains(r) {
            *r += AGPR0 - src::VGPR0;
        }
    };
    for k in 0..3 {
        if i.acc >> k & 1 != 0 {
            agpr(&mut i.src[k]);
        }
    }
    if i.acc & 8 != 0 {
        agpr(&mut i.dst);
    }
    match (i.format, i.op) {
        (Format::Vop3p, new_vop3p::V_ACCVGPR_READ_B32 | new_vop3p::V_ACCVGPR_WRITE_B32)
        | (Format::Vop1 | Format::Vop3, new_valu::V_ACCVGPR_MOV_B32) => {
            // A move between register classes, whatever the encoding's modifier fields.
            let (dst, s0) = (i.dst, i.src[0]);
            i.format = Format::Vop1;
            i.op = V_MOV_B32;
            i.src = [s0, 0, 0];
            i.dst = dst;
            i.abs = 0;
            i.neg = 0;
            i.op_sel = 0;
            i.op_sel_hi = 0;
            i.clamp = false;
            i.omod = 0;
        }
        (Format::Global | Format::Scratch, _) if i.saddr == SADDR_OFF => i.saddr = src::NULL,
        // GFX9's legacy multiply (0 times anything is 0) is GFX11's DX9 one.
        (_, new_valu::V_MUL_LEGACY_F32) => i.op = V_MUL_DX9_ZERO_F32,
        // v_fmac_f64 d, a, b is v_fma_f64 d, a, b, d.
        (Format::Vop2 | Format::Vop3, new_valu::V_FMAC_F64) => {
            i.format = Format::Vop3;
            i.op = V_FMA_F64;
            i.src[2] = i.dst;
        }
        _ => {}
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{Isa, decode_isa};

    #[test]
    fn accvgpr_moves_become_moves_between_register_files() {
        // v_accvgpr_write_b32 a6, v1; v_accvgpr_read_b32 v0, a6 (llvm-objdump-19 --mcpu=gfx942).
        let w = lower(decode_isa(Isa::Gfx9, &[0xD3D94006, 0x18000101]).unwrap());
        assert_eq!(
            (w.format, w.op, w.dst, w.src[0]),
            (Format::Vop1, V_MOV_B32, AGPR0 + 6, 257)
        );
        let r = lower(decode_isa(Isa::Gfx9, &[0xD3D84000, 0x18000106]).unwrap());
        assert_eq!(
            (r.format, r.op, r.dst, r.src[0]),
            (Format::Vop1, V_MOV_B32, 256, AGPR0 + 6)
        );
    }

    #[test]
    fn global_off_is_null() {
        // global_load_dword v6, v[4:5], off
        let g = lower(decode_isa(Isa::Gfx9, &[0xDC508000, 0x067F0004]).unwrap());
        assert_eq!(g.saddr, src::NULL);
    }
}
