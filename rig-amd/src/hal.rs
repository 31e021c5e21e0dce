//! What differs between the GFX generations rig drives, stated once: one [`Hal`] per
//! [`Generation`], as Nova's `falcon/hal.rs` gives one HAL per chipset.
//!
//! Every layer asks this table: the client when it encodes a dispatch, the simulator when
//! it decodes one and launches waves, rigd when it sizes a kernel's scratch. Facts of one
//! processor rather than a generation (its LDS size and granule, dies, waves) are in
//! [`crate::gpu::Gpu`]; the limits of an SDMA engine follow its own IP version
//! ([`crate::sdma::Layout`]); register numbers are [`crate::regs`]', packet formats
//! [`crate::pm4`]'s. A [`Hal`] points at those tables; it does not restate them.
//!
//! Sources, per fact:
//! - Scratch: COMPUTE_TMPRING_SIZE.WAVESIZE counts 1024-byte granules on GFX9 (gfx942,
//!   gfx950 included) and 256-byte granules from GFX11 (GFX12 too): Mesa's `ac_gpu_info.c`
//!   sets `scratch_wavesize_granularity_shift = gfx_level >= GFX11 ? 8 : 10`, ROCr and
//!   tinygrad's `ops_amd.py` use `mem_alignment_size = 256 if target >= (11,0,0) else 1024`,
//!   and LLVM's `test/CodeGen/AMDGPU/scratch-buffer` PAL tests check one WAVESIZE for gfx1100
//!   and gfx1200 alike. The field's width is [`crate::regs::tmpring::wavesize`]'s.
//! - Waves: GFX9 runs wave64 only; GFX10 and later run wave32 when the kernel descriptor's
//!   `ENABLE_WAVEFRONT_SIZE32` is set, which a PM4 dispatch states as
//!   COMPUTE_DISPATCH_INITIATOR.CS_W32_EN (AMDGPUUsage, "Kernel Descriptor";
//!   `gc_11_0_0_sh_mask.h`).
//! - Caches: ACQUIRE_MEM takes CP_COHER_CNTL actions on GFX9 (`soc15d.h`) and GCR_CNTL
//!   actions from GFX10 (`nvd.h`); see [`crate::pm4::coher`] and [`crate::pm4::gcr`].

use crate::gpu::Generation;
use crate::pm4::{AcquireMem, coher, gcr};
use crate::regs::{self, Compute, Field, initiator};

/// The facts of one GFX generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hal {
    /// The generation these facts are of.
    pub generation: Generation,
    /// The SH offsets of its COMPUTE_* registers.
    pub compute: &'static Compute,
    /// COMPUTE_TMPRING_SIZE.WAVESIZE: scratch per wave, in [`Hal::scratch_granule`]s.
    pub tmpring_wavesize: Field,
    /// Bytes of one granule of COMPUTE_TMPRING_SIZE.WAVESIZE: 1024 on GFX9, 256 from GFX11.
    pub scratch_granule: u32,
    /// Whether every wave has 64 lanes (GFX9); otherwise the kernel chooses 32 or 64.
    pub wave64_only: bool,
    /// ACQUIRE_MEM over all memory invalidating every cache, the L2 after its write-back.
    pub acquire_all: AcquireMem,
    /// ACQUIRE_MEM over all memory invalidating every cache above the L2.
    pub acquire_above_l2: AcquireMem,
    /// RELEASE_MEM's cache bits that write the L2 back.
    pub release_write_back: u32,
    /// Compute units in one work-group processor: two from GFX10 (RDNA's WGP), one on GFX9
    /// (where CU_MASK-style masks name compute units).
    pub cus_per_wgp: u32,
    /// Shader arrays in one shader engine: one on GFX9 (CDNA), two from GFX10 (RDNA), as
    /// KFD's topology states them (`simd_arrays_per_engine`).
    pub arrays_per_engine: u32,
}

/// The wave64 rule: a kernel runs in waves of 64 lanes on a generation of wave64 only, or
/// when it does not ask for 32.
#[inline]
pub const fn runs_wave64(wave64_only: bool, asks_wave32: bool) -> bool {
    wave64_only || !asks_wave32
}

impl Hal {
    /// Whether a kernel of `kernel_code_properties` runs in waves of 64 lanes.
    #[inline]
    pub const fn wave64(&self, kernel_code_properties: u16) -> bool {
        runs_wave64(
            self.wave64_only,
            kernel_code_properties & crate::code_object::ENABLE_WAVEFRONT_SIZE32 != 0,
        )
    }

    /// Whether a PM4 dispatch of COMPUTE_DISPATCH_INITIATOR `init` runs waves of 64 lanes.
    #[inline]
    pub const fn wave64_of_initiator(&self, init: u32) -> bool {
        runs_wave64(self.wave64_only, init & initiator::CS_W32_EN != 0)
    }

    /// Lanes of a wave: 64 or 32.
    #[inline]
    pub const fn lanes(wave64: bool) -> u32 {
        if wave64 { 64 } else { 32 }
    }

    /// COMPUTE_DISPATCH_INITIATOR of a dispatch of whole groups from workgroup 0, in waves of
    /// 64 lanes or 32.
    #[inline]
    pub const fn initiator(&self, wave64: bool) -> u32 {
        let base = initiator::COMPUTE_SHADER_EN | initiator::FORCE_START_AT_000;
        if self.wave64_only || wave64 {
            base
        } else {
            base | initiator::CS_W32_EN
        }
    }

    /// Bytes of scratch one wave takes for `private` bytes per lane, rounded up to whole
    /// [`Hal::scratch_granule`]s, as COMPUTE_TMPRING_SIZE counts them.
    #[inline]
    pub const fn wave_scratch(&self, private: u32, wave64: bool) -> u64 {
        let g = self.scratch_granule as u64;
        (private as u64 * Self::lanes(wave64) as u64).div_ceil(g) * g
    }

    /// COMPUTE_TMPRING_SIZE for `waves` waves (at most 0xfff are stated) of `wave_bytes`
    /// bytes of scratch each.
    #[inline]
    pub const fn tmpring_size(&self, waves: u32, wave_bytes: u64) -> u32 {
        let waves = if waves > 0xfff { 0xfff } else { waves };
        let granules = wave_bytes.div_ceil(self.scratch_granule as u64);
        regs::tmpring::WAVES.put(waves) | self.tmpring_wavesize.put(granules as u32)
    }

    /// The mask of every work-group processor of a shader array of `cus` compute units (at
    /// least one processor; all 32 bits from 32 on).
    #[inline]
    pub const fn wgp_mask(&self, cus: u32) -> u32 {
        let wgps = cus / self.cus_per_wgp;
        let wgps = if wgps == 0 { 1 } else { wgps };
        if wgps >= 32 {
            u32::MAX
        } else {
            (1 << wgps) - 1
        }
    }

    /// Every work-group processor of a GPU of `shader_engines` engines and `compute_units`
    /// compute units, per shader engine and array ([`Hal::arrays_per_engine`]), the units
    /// split evenly: the mask a path states where no processor is fused off.
    pub fn all_wgps(&self, shader_engines: u32, compute_units: u32) -> Vec<Vec<u32>> {
        let arrays = shader_engines.saturating_mul(self.arrays_per_engine).max(1);
        let mask = self.wgp_mask(compute_units / arrays);
        vec![vec![mask; self.arrays_per_engine as usize]; shader_engines as usize]
    }

    /// Bytes of scratch per wave that COMPUTE_TMPRING_SIZE `tmpring` states.
    #[inline]
    pub const fn tmpring_wave_bytes(&self, tmpring: u32) -> u32 {
        self.tmpring_wavesize.get(tmpring) * self.scratch_granule
    }
}

const fn hal_of(g: Generation) -> Hal {
    let gfx9 = matches!(g, Generation::Gfx9);
    Hal {
        generation: g,
        compute: regs::compute(g),
        tmpring_wavesize: regs::tmpring::wavesize(g),
        scratch_granule: if gfx9 { 1024 } else { 256 },
        wave64_only: gfx9,
        acquire_all: if gfx9 {
            AcquireMem::gfx9(coher::ALL)
        } else {
            AcquireMem::gfx10(gcr::ALL)
        },
        acquire_above_l2: if gfx9 {
            AcquireMem::gfx9(coher::ABOVE_L2)
        } else {
            AcquireMem::gfx10(gcr::ABOVE_L2)
        },
        release_write_back: if gfx9 {
            coher::RELEASE_WRITE_BACK
        } else {
            gcr::RELEASE_WRITE_BACK
        },
        cus_per_wgp: if gfx9 { 1 } else { 2 },
        arrays_per_engine: if gfx9 { 1 } else { 2 },
    }
}

static GFX9: Hal = hal_of(Generation::Gfx9);
static GFX11: Hal = hal_of(Generation::Gfx11);
static GFX12: Hal = hal_of(Generation::Gfx12);

/// The facts of generation `g`.
#[inline]
pub fn hal(g: Generation) -> &'static Hal {
    match g {
        Generation::Gfx9 => &GFX9,
        Generation::Gfx11 => &GFX11,
        Generation::Gfx12 => &GFX12,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_granules_follow_mesa_and_rocr() {
        assert_eq!(hal(Generation::Gfx9).scratch_granule, 1024);
        assert_eq!(hal(Generation::Gfx11).scratch_granule, 256);
        assert_eq!(hal(Generation::Gfx12).scratch_granule, 256);
        let h = hal(Generation::Gfx11);
        assert_eq!(h.wave_scratch(0, false), 0);
        assert_eq!(h.wave_scratch(4, false), 256);
        assert_eq!(h.wave_scratch(48, true), 3072);
        assert_eq!(hal(Generation::Gfx9).wave_scratch(4, false), 1024);
        // 4 waves of 2 KiB on GFX11: WAVESIZE 8.
        let t = h.tmpring_size(4, 2048);
        assert_eq!(t, 4 | 8 << 12);
        assert_eq!(h.tmpring_wave_bytes(t), 2048);
        assert_eq!(
            hal(Generation::Gfx12).tmpring_size(5000, 64),
            0xfff | 1 << 12
        );
    }

    #[test]
    fn the_wave64_rule() {
        use crate::code_object::ENABLE_WAVEFRONT_SIZE32 as W32;
        let (g9, g11) = (hal(Generation::Gfx9), hal(Generation::Gfx11));
        assert!(g9.wave64(W32) && g9.wave64(0));
        assert!(!g11.wave64(W32) && g11.wave64(0));
        assert!(g9.wave64_of_initiator(initiator::CS_W32_EN));
        assert!(!g11.wave64_of_initiator(initiator::CS_W32_EN));
        assert_eq!(g9.initiator(false), 5);
        assert_eq!(g11.initiator(false), 5 | initiator::CS_W32_EN);
        assert_eq!(g11.initiator(true), 5);
    }
}
