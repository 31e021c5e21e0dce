//! The COMPUTE_* registers a PM4 dispatch sets, per GFX generation, and their fields.
//!
//! A dispatch on a PM4 queue is register writes followed by DISPATCH_DIRECT: SET_SH_REG packets
//! load the kernel's code address (COMPUTE_PGM_LO/HI), its resource words (COMPUTE_PGM_RSRC1/2/3,
//! copied from the kernel descriptor), the workgroup size (COMPUTE_NUM_THREAD_X/Y/Z), the scratch
//! size and base, and the user SGPRs (COMPUTE_USER_DATA_0..15, such as the kernarg pointer); the
//! CP then launches with those values.
//!
//! Three numberings of one register exist, and this module gives the one packets use:
//! - Linux's `gc_*_offset.h` give a *segment* dword offset with a `_BASE_IDX` (0 for all of
//!   these), as the headers define them per IP block;
//! - adding the GC block's segment-0 base (`GC_BASE__INST0_SEG0`: 0x2000 on GFX9 in
//!   `vega10_ip_offset.h`, 0x1260 on GFX10+ in the navi/soc21 IP offset headers) gives the
//!   *absolute* dword offset, the register's MMIO address divided by 4;
//! - SET_SH_REG names a register by its absolute offset less 0x2c00
//!   (`PACKET3_SET_SH_REG_START`), an SH offset in 0..0x400.
//!
//! So gfx11's COMPUTE_PGM_LO, segment offset 0x1bac (`gc_11_0_0_offset.h`, and tinygrad's
//! mockgpu), is absolute 0x1bac + 0x1260 = 0x2e0c and SH offset 0x20c. The layout is the same on
//! all three generations except COMPUTE_PGM_RSRC3: SH 0x22d on GFX9.4.3, 0x228 on GFX11/12.
//!
//! Field positions come from `gc_9_4_3_sh_mask.h`, `gc_11_0_0_sh_mask.h` and
//! `gc_12_0_0_sh_mask.h`. This module owns register numbers and fields, not packet formats
//! ([`crate::pm4`]) or the kernel descriptor ([`crate::code_object`]).

use crate::gpu::Generation;
use crate::pm4::SH_REG_START;

/// A bit field of a register: `bits` bits from bit `shift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Field {
    /// The lowest bit.
    pub shift: u32,
    /// Its width in bits (1 to 32).
    pub bits: u32,
}

impl Field {
    /// The field of `bits` bits from `shift`.
    pub const fn new(shift: u32, bits: u32) -> Self {
        Self { shift, bits }
    }

    /// The field's mask in place.
    pub const fn mask(self) -> u32 {
        (u32::MAX >> (32 - self.bits)) << self.shift
    }

    /// The field's value in `word`.
    pub const fn get(self, word: u32) -> u32 {
        (word & self.mask()) >> self.shift
    }

    /// `value` in place; bits above the field's width are dropped.
    pub const fn put(self, value: u32) -> u32 {
        (value << self.shift) & self.mask()
    }

    /// `word` with the field set to `value`.
    pub const fn set(self, word: u32, value: u32) -> u32 {
        (word & !self.mask()) | self.put(value)
    }
}

/// The SH offsets (absolute dword offset less 0x2c00) of the COMPUTE_* registers of one
/// generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compute {
    /// COMPUTE_DISPATCH_INITIATOR.
    pub dispatch_initiator: u16,
    /// COMPUTE_DIM_X (Y and Z follow).
    pub dim_x: u16,
    /// COMPUTE_START_X (Y and Z follow).
    pub start_x: u16,
    /// COMPUTE_NUM_THREAD_X (Y and Z follow).
    pub num_thread_x: u16,
    /// COMPUTE_PGM_LO (the code address bits 39:8); COMPUTE_PGM_HI follows.
    pub pgm_lo: u16,
    /// COMPUTE_DISPATCH_PKT_ADDR_LO; _HI follows.
    pub dispatch_pkt_addr_lo: u16,
    /// COMPUTE_DISPATCH_SCRATCH_BASE_LO (scratch address bits 39:8); _HI follows.
    pub dispatch_scratch_base_lo: u16,
    /// COMPUTE_PGM_RSRC1; COMPUTE_PGM_RSRC2 follows.
    pub pgm_rsrc1: u16,
    /// COMPUTE_PGM_RSRC2.
    pub pgm_rsrc2: u16,
    /// COMPUTE_PGM_RSRC3.
    pub pgm_rsrc3: u16,
    /// COMPUTE_VMID.
    pub vmid: u16,
    /// COMPUTE_RESOURCE_LIMITS.
    pub resource_limits: u16,
    /// COMPUTE_TMPRING_SIZE.
    pub tmpring_size: u16,
    /// COMPUTE_RESTART_X (Y and Z follow).
    pub restart_x: u16,
    /// COMPUTE_USER_DATA_0 (1 to 15 follow).
    pub user_data_0: u16,
}

/// Number of COMPUTE_USER_DATA registers.
pub const USER_DATA_COUNT: u16 = 16;

/// The GC segment-0 base of `g` (`GC_BASE__INST0_SEG0`): segment offset + base = absolute.
pub const fn gc_seg0_base(g: Generation) -> u32 {
    match g {
        Generation::Gfx9 => 0x2000,
        Generation::Gfx11 | Generation::Gfx12 => 0x1260,
    }
}

/// The SH offset of a register at segment-0 offset `seg` (`_BASE_IDX` 0) on `g`.
const fn sh(g: Generation, seg: u32) -> u16 {
    (seg + gc_seg0_base(g) - SH_REG_START) as u16
}

// gc_9_4_3_offset.h: regCOMPUTE_DISPATCH_INITIATOR 0x0e00 ... regCOMPUTE_USER_DATA_0 0x0e40.
const GFX9: Compute = Compute {
    dispatch_initiator: sh(Generation::Gfx9, 0x0e00),
    dim_x: sh(Generation::Gfx9, 0x0e01),
    start_x: sh(Generation::Gfx9, 0x0e04),
    num_thread_x: sh(Generation::Gfx9, 0x0e07),
    pgm_lo: sh(Generation::Gfx9, 0x0e0c),
    dispatch_pkt_addr_lo: sh(Generation::Gfx9, 0x0e0e),
    dispatch_scratch_base_lo: sh(Generation::Gfx9, 0x0e10),
    pgm_rsrc1: sh(Generation::Gfx9, 0x0e12),
    pgm_rsrc2: sh(Generation::Gfx9, 0x0e13),
    pgm_rsrc3: sh(Generation::Gfx9, 0x0e2d),
    vmid: sh(Generation::Gfx9, 0x0e14),
    resource_limits: sh(Generation::Gfx9, 0x0e15),
    tmpring_size: sh(Generation::Gfx9, 0x0e18),
    restart_x: sh(Generation::Gfx9, 0x0e1b),
    user_data_0: sh(Generation::Gfx9, 0x0e40),
};

// gc_11_0_0_offset.h (and gc_12_0_0_offset.h, identical for these): regCOMPUTE_DISPATCH_INITIATOR
// 0x1ba0, regCOMPUTE_NUM_THREAD_X 0x1ba7, regCOMPUTE_PGM_LO 0x1bac, regCOMPUTE_PGM_RSRC3 0x1bc8,
// regCOMPUTE_USER_DATA_0 0x1be0.
const fn gfx10_plus(g: Generation) -> Compute {
    Compute {
        dispatch_initiator: sh(g, 0x1ba0),
        dim_x: sh(g, 0x1ba1),
        start_x: sh(g, 0x1ba4),
        num_thread_x: sh(g, 0x1ba7),
        pgm_lo: sh(g, 0x1bac),
        dispatch_pkt_addr_lo: sh(g, 0x1bae),
        dispatch_scratch_base_lo: sh(g, 0x1bb0),
        pgm_rsrc1: sh(g, 0x1bb2),
        pgm_rsrc2: sh(g, 0x1bb3),
        pgm_rsrc3: sh(g, 0x1bc8),
        vmid: sh(g, 0x1bb4),
        resource_limits: sh(g, 0x1bb5),
        tmpring_size: sh(g, 0x1bb8),
        restart_x: sh(g, 0x1bbb),
        user_data_0: sh(g, 0x1be0),
    }
}

const GFX11: Compute = gfx10_plus(Generation::Gfx11);
const GFX12: Compute = gfx10_plus(Generation::Gfx12);

/// The COMPUTE_* registers of generation `g`.
pub const fn compute(g: Generation) -> &'static Compute {
    match g {
        Generation::Gfx9 => &GFX9,
        Generation::Gfx11 => &GFX11,
        Generation::Gfx12 => &GFX12,
    }
}

impl Compute {
    /// The absolute dword offset of SH offset `sh`.
    pub const fn absolute(sh: u16) -> u32 {
        SH_REG_START + sh as u32
    }

    /// The name of the register at SH offset `sh`, if it is one of this table's (for the
    /// simulator's messages).
    pub fn name(&self, sh: u16) -> Option<&'static str> {
        const USER: [&str; 16] = [
            "COMPUTE_USER_DATA_0",
            "COMPUTE_USER_DATA_1",
            "COMPUTE_USER_DATA_2",
            "COMPUTE_USER_DATA_3",
            "COMPUTE_USER_DATA_4",
            "COMPUTE_USER_DATA_5",
            "COMPUTE_USER_DATA_6",
            "COMPUTE_USER_DATA_7",
            "COMPUTE_USER_DATA_8",
            "COMPUTE_USER_DATA_9",
            "COMPUTE_USER_DATA_10",
            "COMPUTE_USER_DATA_11",
            "COMPUTE_USER_DATA_12",
            "COMPUTE_USER_DATA_13",
            "COMPUTE_USER_DATA_14",
            "COMPUTE_USER_DATA_15",
        ];
        let table: [(u16, &'static str); 24] = [
            (self.dispatch_initiator, "COMPUTE_DISPATCH_INITIATOR"),
            (self.dim_x, "COMPUTE_DIM_X"),
            (self.dim_x + 1, "COMPUTE_DIM_Y"),
            (self.dim_x + 2, "COMPUTE_DIM_Z"),
            (self.start_x, "COMPUTE_START_X"),
            (self.start_x + 1, "COMPUTE_START_Y"),
            (self.start_x + 2, "COMPUTE_START_Z"),
            (self.num_thread_x, "COMPUTE_NUM_THREAD_X"),
            (self.num_thread_x + 1, "COMPUTE_NUM_THREAD_Y"),
            (self.num_thread_x + 2, "COMPUTE_NUM_THREAD_Z"),
            (self.pgm_lo, "COMPUTE_PGM_LO"),
            (self.pgm_lo + 1, "COMPUTE_PGM_HI"),
            (self.dispatch_pkt_addr_lo, "COMPUTE_DISPATCH_PKT_ADDR_LO"),
            (
                self.dispatch_pkt_addr_lo + 1,
                "COMPUTE_DISPATCH_PKT_ADDR_HI",
            ),
            (
                self.dispatch_scratch_base_lo,
                "COMPUTE_DISPATCH_SCRATCH_BASE_LO",
            ),
            (
                self.dispatch_scratch_base_lo + 1,
                "COMPUTE_DISPATCH_SCRATCH_BASE_HI",
            ),
            (self.pgm_rsrc1, "COMPUTE_PGM_RSRC1"),
            (self.pgm_rsrc2, "COMPUTE_PGM_RSRC2"),
            (self.pgm_rsrc3, "COMPUTE_PGM_RSRC3"),
            (self.vmid, "COMPUTE_VMID"),
            (self.resource_limits, "COMPUTE_RESOURCE_LIMITS"),
            (self.tmpring_size, "COMPUTE_TMPRING_SIZE"),
            (self.restart_x, "COMPUTE_RESTART_X"),
            (self.user_data_0, "COMPUTE_USER_DATA_0"),
        ];
        // `get` keeps offsets past the sixteenth user register out.
        if let Some(name) = sh
            .checked_sub(self.user_data_0)
            .and_then(|i| USER.get(i as usize))
        {
            return Some(name);
        }
        table.iter().find(|(o, _)| *o == sh).map(|(_, n)| *n)
    }
}

/// Fields of COMPUTE_DISPATCH_INITIATOR.
pub mod initiator {
    /// COMPUTE_SHADER_EN (bit 0): launch the compute shader.
    pub const COMPUTE_SHADER_EN: u32 = 1 << 0;
    /// PARTIAL_TG_EN (bit 1).
    pub const PARTIAL_TG_EN: u32 = 1 << 1;
    /// FORCE_START_AT_000 (bit 2): the grid starts at workgroup (0, 0, 0), ignoring START_*.
    pub const FORCE_START_AT_000: u32 = 1 << 2;
    /// USE_THREAD_DIMENSIONS (bit 5): DIM_* count work-items, not workgroups.
    pub const USE_THREAD_DIMENSIONS: u32 = 1 << 5;
    /// ORDER_MODE (bit 6).
    pub const ORDER_MODE: u32 = 1 << 6;
    /// SCALAR_L1_INV_VOL (bit 10).
    pub const SCALAR_L1_INV_VOL: u32 = 1 << 10;
    /// VECTOR_L1_INV_VOL (bit 11).
    pub const VECTOR_L1_INV_VOL: u32 = 1 << 11;
    /// RESTORE (bit 14).
    pub const RESTORE: u32 = 1 << 14;
    /// CS_W32_EN (bit 15, GFX10+): waves of 32 lanes, not 64.
    pub const CS_W32_EN: u32 = 1 << 15;
}

/// Fields of COMPUTE_PGM_RSRC1 (the same positions on GFX9.4.3, GFX11 and GFX12).
pub mod rsrc1 {
    use super::Field;
    /// VGPRS (bits 5:0): VGPR blocks less one (granularity per generation and wave size).
    pub const VGPRS: Field = Field::new(0, 6);
    /// SGPRS (bits 9:6): SGPR blocks less one (GFX9; ignored from GFX10).
    pub const SGPRS: Field = Field::new(6, 4);
    /// PRIORITY (bits 11:10).
    pub const PRIORITY: Field = Field::new(10, 2);
    /// FLOAT_MODE (bits 19:12): rounding and denormal modes of the MODE register.
    pub const FLOAT_MODE: Field = Field::new(12, 8);
    /// PRIV (bit 20).
    pub const PRIV: Field = Field::new(20, 1);
    /// DX10_CLAMP (bit 21, GFX9 and GFX11; WG_RR_EN on GFX12).
    pub const DX10_CLAMP: Field = Field::new(21, 1);
    /// IEEE_MODE (bit 23, GFX9 and GFX11; DISABLE_PERF on GFX12).
    pub const IEEE_MODE: Field = Field::new(23, 1);
    /// FP16_OVFL (bit 26).
    pub const FP16_OVFL: Field = Field::new(26, 1);
    /// WGP_MODE (bit 29, GFX10+).
    pub const WGP_MODE: Field = Field::new(29, 1);
    /// MEM_ORDERED (bit 30, GFX10+).
    pub const MEM_ORDERED: Field = Field::new(30, 1);
    /// FWD_PROGRESS (bit 31, GFX10+).
    pub const FWD_PROGRESS: Field = Field::new(31, 1);
}

/// Fields of COMPUTE_PGM_RSRC2 (the same positions on GFX9.4.3, GFX11 and GFX12).
pub mod rsrc2 {
    use super::Field;
    /// SCRATCH_EN (bit 0): the kernel uses private memory.
    pub const SCRATCH_EN: Field = Field::new(0, 1);
    /// USER_SGPR (bits 5:1): user SGPRs loaded from COMPUTE_USER_DATA_*.
    pub const USER_SGPR: Field = Field::new(1, 5);
    /// TRAP_PRESENT (bit 6, GFX9/11; DYNAMIC_VGPR on GFX12).
    pub const TRAP_PRESENT: Field = Field::new(6, 1);
    /// TGID_X_EN (bit 7): load the workgroup id x into an SGPR.
    pub const TGID_X_EN: Field = Field::new(7, 1);
    /// TGID_Y_EN (bit 8).
    pub const TGID_Y_EN: Field = Field::new(8, 1);
    /// TGID_Z_EN (bit 9).
    pub const TGID_Z_EN: Field = Field::new(9, 1);
    /// TG_SIZE_EN (bit 10): load the workgroup info SGPR.
    pub const TG_SIZE_EN: Field = Field::new(10, 1);
    /// TIDIG_COMP_CNT (bits 12:11): work-item id components loaded, less one.
    pub const TIDIG_COMP_CNT: Field = Field::new(11, 2);
    /// EXCP_EN_MSB (bits 14:13).
    pub const EXCP_EN_MSB: Field = Field::new(13, 2);
    /// LDS_SIZE (bits 23:15): LDS granules a workgroup allocates.
    pub const LDS_SIZE: Field = Field::new(15, 9);
    /// EXCP_EN (bits 30:24).
    pub const EXCP_EN: Field = Field::new(24, 7);
}

/// Fields of COMPUTE_PGM_RSRC3, which differ per generation.
pub mod rsrc3 {
    use super::Field;
    /// ACCUM_OFFSET (bits 5:0, GFX9.4): the first AccVGPR, in 4-register blocks less one.
    pub const GFX9_ACCUM_OFFSET: Field = Field::new(0, 6);
    /// TG_SPLIT (bit 16, GFX9.4).
    pub const GFX9_TG_SPLIT: Field = Field::new(16, 1);
    /// SHARED_VGPR_CNT (bits 3:0, GFX11 and GFX12).
    pub const SHARED_VGPR_CNT: Field = Field::new(0, 4);
    /// INST_PREF_SIZE (bits 9:4 on GFX11).
    pub const GFX11_INST_PREF_SIZE: Field = Field::new(4, 6);
    /// INST_PREF_SIZE (bits 11:4 on GFX12).
    pub const GFX12_INST_PREF_SIZE: Field = Field::new(4, 8);
    /// TRAP_ON_START (bit 10, GFX9.4 and GFX11).
    pub const TRAP_ON_START: Field = Field::new(10, 1);
    /// TRAP_ON_END (bit 11, GFX9.4 and GFX11).
    pub const TRAP_ON_END: Field = Field::new(11, 1);
    /// IMAGE_OP (bit 31, GFX11 and GFX12).
    pub const IMAGE_OP: Field = Field::new(31, 1);
}

/// Fields of COMPUTE_TMPRING_SIZE, the scratch each wave takes.
pub mod tmpring {
    use super::Field;
    use crate::gpu::Generation;

    /// WAVES (bits 11:0): waves that may hold scratch at once.
    pub const WAVES: Field = Field::new(0, 12);

    /// WAVESIZE: scratch per wave, in the generation's granules; 13 bits on GFX9.4.3, 15 on
    /// GFX11, 18 on GFX12, all from bit 12.
    pub const fn wavesize(g: Generation) -> Field {
        match g {
            Generation::Gfx9 => Field::new(12, 13),
            Generation::Gfx11 => Field::new(12, 15),
            Generation::Gfx12 => Field::new(12, 18),
        }
    }
}

/// Fields of COMPUTE_RESOURCE_LIMITS.
pub mod resource_limits {
    use super::Field;
    /// WAVES_PER_SH (bits 9:0): 0 for no limit.
    pub const WAVES_PER_SH: Field = Field::new(0, 10);
    /// TG_PER_CU (bits 15:12): 0 for no limit.
    pub const TG_PER_CU: Field = Field::new(12, 4);
    /// LOCK_THRESHOLD (bits 21:16).
    pub const LOCK_THRESHOLD: Field = Field::new(16, 6);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx11_matches_the_mockgpu_offsets() {
        // tinygrad's mockgpu: COMPUTE_PGM_LO 0x1bac, NUM_THREAD_X 0x1ba7, USER_DATA_0 0x1be0
        // as segment-0 offsets; the SH window starts at absolute 0x2c00.
        let c = compute(Generation::Gfx11);
        assert_eq!(
            Compute::absolute(c.pgm_lo) - gc_seg0_base(Generation::Gfx11),
            0x1bac
        );
        assert_eq!(Compute::absolute(c.num_thread_x) - 0x1260, 0x1ba7);
        assert_eq!(Compute::absolute(c.user_data_0) - 0x1260, 0x1be0);
        assert_eq!(Compute::absolute(c.dispatch_initiator), 0x2e00);
        assert_eq!(c.pgm_lo, 0x20c);
        assert_eq!(c.user_data_0, 0x240);
        assert_eq!(c.pgm_rsrc3, 0x228);
        assert_eq!(compute(Generation::Gfx12), c);
    }

    #[test]
    fn gfx9_has_the_same_layout_but_rsrc3() {
        let a = compute(Generation::Gfx9);
        let b = compute(Generation::Gfx11);
        assert_eq!(a.pgm_rsrc3, 0x22d);
        assert_eq!(
            Compute {
                pgm_rsrc3: b.pgm_rsrc3,
                ..*a
            },
            *b
        );
        for c in [a, b] {
            assert!(c.user_data_0 + USER_DATA_COUNT <= 0x400);
            assert_eq!(c.name(c.pgm_rsrc2), Some("COMPUTE_PGM_RSRC2"));
            assert_eq!(c.name(c.user_data_0 + 15), Some("COMPUTE_USER_DATA_15"));
            assert_eq!(c.name(0x3ff), None);
        }
    }

    #[test]
    fn fields_put_and_get() {
        let w = rsrc2::USER_SGPR.put(6) | rsrc2::TGID_X_EN.put(1) | rsrc2::LDS_SIZE.put(0x1ff);
        assert_eq!(w, 6 << 1 | 1 << 7 | 0x1ff << 15);
        assert_eq!(rsrc2::USER_SGPR.get(w), 6);
        assert_eq!(rsrc2::LDS_SIZE.get(w), 0x1ff);
        assert_eq!(rsrc1::FWD_PROGRESS.mask(), 1 << 31);
        assert_eq!(rsrc1::VGPRS.set(u32::MAX, 0), !0x3f);
        assert_eq!(tmpring::wavesize(Generation::Gfx12).mask(), 0x3fff_f000);
    }
}
