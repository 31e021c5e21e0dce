//! The table of AMD GPUs rig drives, and how to tell an AMD GPU among PCI functions.
//!
//! An AMD GPU carries two versions. Its *processor* (such as gfx942) names the code objects it
//! runs: the name is `gfx` then the major version in decimal, then minor and stepping each as one
//! hexadecimal digit (so 9.0.10 is gfx90a). Its *GC* version (such as 9.4.3) names the graphics and
//! compute block whose registers and packets the command processor follows. The two differ on
//! several chips (gfx942 is GC 9.4.3, gfx1101 is GC 11.0.3), so the table keeps both.
//!
//! This module owns the facts of each chip that every layer needs: dies, shader engines, compute
//! units, wave size, local data share, which packets its compute queue reads, the bounds of its
//! rings, and the bytes one linear SDMA copy packet moves. It does not own register offsets
//! ([`crate::regs`]) or packet formats ([`crate::pm4`], [`crate::sdma`], [`crate::aql`]).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A three-part IP version: major, minor, stepping. rig's protocol carries it in a wire form
/// of its own (`rig_proto::wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IpVersion {
    /// Major version.
    pub major: u8,
    /// Minor version.
    pub minor: u8,
    /// Stepping (revision).
    pub stepping: u8,
}

impl IpVersion {
    /// The version `major.minor.stepping`.
    pub const fn new(major: u8, minor: u8, stepping: u8) -> Self {
        Self {
            major,
            minor,
            stepping,
        }
    }
}

impl fmt::Display for IpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.stepping)
    }
}

/// The packets a GPU's compute queue reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputePackets {
    /// PM4 type-3 packets, on a GPU of one die.
    Pm4,
    /// HSA AQL packets, which every die of a GPU of several dies runs.
    Aql,
}

/// The kinds of hardware queue rig makes. rig's protocol carries it in a wire form of its own
/// (`rig_proto::wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QueueKind {
    /// A compute queue reading PM4 packets.
    Pm4,
    /// A compute queue reading AQL packets.
    Aql,
    /// A copy queue reading SDMA packets.
    Sdma,
}

/// The GFX generation, which decides packet and register formats ([`crate::hal`] holds what
/// differs between them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generation {
    /// GFX9.4 and GFX9.5 (CDNA3, CDNA4): gfx942, gfx950.
    Gfx9,
    /// GFX11 (RDNA3, RDNA3.5).
    Gfx11,
    /// GFX12 (RDNA4).
    Gfx12,
}

impl Generation {
    /// The generation of a GC (or processor) of major version `major`: 9, 11 or 12. Other
    /// majors (GFX10 among them) are not generations rig drives: `None`.
    pub const fn of_major(major: u8) -> Option<Self> {
        match major {
            9 => Some(Self::Gfx9),
            11 => Some(Self::Gfx11),
            12 => Some(Self::Gfx12),
            _ => None,
        }
    }

    /// The generation of GC version `gc`, as [`Generation::of_major`].
    pub const fn of_gc(gc: IpVersion) -> Option<Self> {
        Self::of_major(gc.major)
    }

    /// What differs in this generation.
    pub fn hal(self) -> &'static crate::hal::Hal {
        crate::hal::hal(self)
    }
}

/// One AMD GPU model: the facts rig needs of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The processor version, which names code objects (`gfx` + major + minor + stepping).
    pub processor: IpVersion,
    /// The GC (graphics and compute) IP version.
    pub gc: IpVersion,
    /// The SDMA IP version of its copy engines.
    pub sdma: IpVersion,
    /// Dies (XCCs) that run compute work.
    pub dies: u32,
    /// Shader engines across all dies.
    pub shader_engines: u32,
    /// Compute units across all dies.
    pub compute_units: u32,
    /// The wave size its compilers target by default (32 or 64).
    pub wave_size: u32,
    /// Local data share one workgroup may take, in bytes.
    pub lds_bytes: u32,
    /// Bytes of one granule of COMPUTE_PGM_RSRC2.LDS_SIZE: 512 (128 dwords), but 1280 (320
    /// dwords) on gfx950 (AMDGPUUsage, "compute_pgm_rsrc2", GRANULATED_LDS_SIZE:
    /// "GFX7-GFX11 roundup(lds-size / (128 * 4))", "GFX950 roundup(lds-size / (320 * 4))";
    /// LLVM's `getLdsDwGranularity`; GFX12 as GFX11).
    pub lds_granule: u32,
    /// Its GFX generation, from its GC version ([`Generation::of_gc`]).
    pub generation: Generation,
    /// Waves one compute unit runs concurrently.
    pub waves_per_cu: u32,
    /// A marketing name, for logs and `rigctl`.
    pub marketing: &'static str,
}

/// 1 KiB.
const KIB: u64 = 1 << 10;
/// 1 MiB.
#[cfg(test)]
const MIB: u64 = 1 << 20;
/// 1 GiB.
const GIB: u64 = 1 << 30;

impl Gpu {
    /// The processor's name, such as `gfx1100` or `gfx90a`.
    pub fn name(&self) -> String {
        processor_name(self.processor)
    }

    /// The GFX generation of its GC.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// What differs in its generation.
    pub fn hal(&self) -> &'static crate::hal::Hal {
        crate::hal::hal(self.generation)
    }

    /// LDS granules (COMPUTE_PGM_RSRC2.LDS_SIZE) that hold `bytes`.
    pub const fn lds_granules(&self, bytes: u32) -> u32 {
        bytes.div_ceil(self.lds_granule)
    }

    /// Bytes of LDS that COMPUTE_PGM_RSRC2 `rsrc2` allocates.
    pub const fn lds_of_rsrc2(&self, rsrc2: u32) -> u32 {
        crate::regs::rsrc2::LDS_SIZE.get(rsrc2) * self.lds_granule
    }

    /// The packets its compute queue reads: PM4 on one die, AQL on several.
    pub fn compute_packets(&self) -> ComputePackets {
        if self.dies > 1 {
            ComputePackets::Aql
        } else {
            ComputePackets::Pm4
        }
    }

    /// The compute queue kind rig makes for it.
    pub fn compute_queue(&self) -> QueueKind {
        match self.compute_packets() {
            ComputePackets::Pm4 => QueueKind::Pm4,
            ComputePackets::Aql => QueueKind::Aql,
        }
    }

    /// The most bytes of a ring of a queue of kind `kind` that the queue's registers allow:
    /// 16 GiB for compute queues, 8 GiB for SDMA queues, except 16 MiB on SDMA 4, whose one
    /// queue keeps the ring it opens with. A path may bound it further (its interface's limit).
    pub fn most_ring(&self, kind: QueueKind) -> u64 {
        match kind {
            QueueKind::Pm4 | QueueKind::Aql => 16 * GIB,
            QueueKind::Sdma => crate::sdma::Layout::for_gpu(self).most_ring(),
        }
    }

    /// The most bytes one linear SDMA copy packet moves: 1 GiB, but 4 MiB on SDMA engines
    /// before 4.4.2 and on 5.0 and 5.1, whose count field is 22 bits
    /// ([`crate::sdma::Layout::count_bits`]).
    pub fn linear_copy_bytes(&self) -> u64 {
        crate::sdma::Layout::for_gpu(self).most_bytes()
    }

    /// Whether the compute queue compares 64-bit memory words in WAIT_REG_MEM, so that a
    /// submission may wait on another device's timeline on the GPU. Every processor in
    /// this table has a 64-bit WAIT_REG_MEM (PM4 on GFX11/12, AQL barrier-value on GFX9.4+).
    pub fn waits_64(&self) -> bool {
        true
    }

    /// The table entry for processor `name`, such as `"gfx1100"`.
    pub fn by_name(name: &str) -> Option<&'static Gpu> {
        GPUS.iter().find(|g| g.name() == name)
    }

    /// The table entry for GC version `gc`.
    pub fn by_gc(gc: IpVersion) -> Option<&'static Gpu> {
        GPUS.iter().find(|g| g.gc == gc)
    }
}

/// The name of processor version `v`: `gfx`, major in decimal, minor and stepping in hex.
pub fn processor_name(v: IpVersion) -> String {
    format!("gfx{}{:x}{:x}", v.major, v.minor, v.stepping)
}

/// Parses a processor name such as `gfx90a` or `gfx1201` into its version.
///
/// The last two characters are minor and stepping in hex; the rest is the major in decimal.
pub fn parse_processor(name: &str) -> Option<IpVersion> {
    let digits = name.strip_prefix("gfx")?;
    if digits.len() < 3 || !digits.is_ascii() {
        return None;
    }
    let (major, rest) = digits.split_at(digits.len() - 2);
    let major: u8 = major.parse().ok()?;
    let mut hex = rest.chars().map(|c| c.to_digit(16));
    let minor = u8::try_from(hex.next()??).ok()?;
    let stepping = u8::try_from(hex.next()??).ok()?;
    Some(IpVersion::new(major, minor, stepping))
}

const fn v(major: u8, minor: u8, stepping: u8) -> IpVersion {
    IpVersion::new(major, minor, stepping)
}

const fn gpu(
    processor: IpVersion,
    gc: IpVersion,
    sdma: IpVersion,
    dies: u32,
    shader_engines: u32,
    compute_units: u32,
    marketing: &'static str,
) -> Gpu {
    let Some(generation) = Generation::of_gc(gc) else {
        panic!("a GPU of the table has a GC of no generation rig drives");
    };
    let gfx9 = matches!(generation, Generation::Gfx9);
    let gfx950 = gc.major == 9 && gc.minor == 5;
    Gpu {
        processor,
        gc,
        sdma,
        dies,
        shader_engines,
        compute_units,
        wave_size: if gfx9 { 64 } else { 32 },
        // CDNA4 (GC 9.5) widened the LDS to 160 KiB; every other chip here has 64 KiB.
        lds_bytes: if gfx950 {
            160 * KIB as u32
        } else {
            64 * KIB as u32
        },
        lds_granule: if gfx950 { 320 * 4 } else { 128 * 4 },
        generation,
        waves_per_cu: 32,
        marketing,
    }
}

/// Every GPU rig drives: gfx942, gfx950, the GFX11 processors and the GFX12 processors.
///
/// Counts are those of the largest part of each chip (such as the MI300X for gfx942); a path
/// that reads the GPU's own topology reports the part it found.
pub static GPUS: &[Gpu] = &[
    gpu(
        v(9, 4, 2),
        v(9, 4, 3),
        v(4, 4, 2),
        8,
        32,
        304,
        "AMD Instinct MI300X",
    ),
    gpu(
        v(9, 5, 0),
        v(9, 5, 0),
        v(4, 4, 5),
        8,
        32,
        256,
        "AMD Instinct MI355X",
    ),
    gpu(
        v(11, 0, 0),
        v(11, 0, 0),
        v(6, 0, 0),
        1,
        6,
        96,
        "Radeon RX 7900 XTX",
    ),
    gpu(
        v(11, 0, 1),
        v(11, 0, 3),
        v(6, 0, 2),
        1,
        3,
        60,
        "Radeon RX 7800 XT",
    ),
    gpu(
        v(11, 0, 2),
        v(11, 0, 2),
        v(6, 0, 3),
        1,
        2,
        32,
        "Radeon RX 7600",
    ),
    gpu(
        v(11, 0, 3),
        v(11, 0, 1),
        v(6, 0, 1),
        1,
        1,
        12,
        "Radeon 780M",
    ),
    gpu(
        v(11, 5, 0),
        v(11, 5, 0),
        v(6, 1, 0),
        1,
        1,
        16,
        "Radeon 890M",
    ),
    gpu(
        v(11, 5, 1),
        v(11, 5, 1),
        v(6, 1, 1),
        1,
        2,
        40,
        "Radeon 8060S",
    ),
    gpu(v(11, 5, 2), v(11, 5, 2), v(6, 1, 2), 1, 1, 8, "Radeon 860M"),
    gpu(
        v(12, 0, 0),
        v(12, 0, 0),
        v(7, 0, 0),
        1,
        2,
        32,
        "Radeon RX 9060 XT",
    ),
    gpu(
        v(12, 0, 1),
        v(12, 0, 1),
        v(7, 0, 1),
        1,
        4,
        64,
        "Radeon RX 9070 XT",
    ),
];

/// AMD's PCI vendor id.
pub const AMD_VENDOR: u16 = 0x1002;

/// Whether a PCI function of vendor `vendor` and 24-bit class code `class` is an AMD GPU:
/// AMD's vendor and a display controller (base class 0x03) or a processing accelerator
/// (base class 0x12). Every path numbers a machine's GPUs 0, 1, ... in bus order among them.
pub fn is_gpu(vendor: u16, class: u32) -> bool {
    let base = (class >> 16) & 0xff;
    vendor == AMD_VENDOR && (base == 0x03 || base == 0x12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_processor_version() {
        assert_eq!(processor_name(v(9, 0, 10)), "gfx90a");
        assert_eq!(processor_name(v(9, 4, 2)), "gfx942");
        assert_eq!(processor_name(v(11, 0, 0)), "gfx1100");
        assert_eq!(processor_name(v(12, 0, 1)), "gfx1201");
        for g in GPUS {
            assert_eq!(parse_processor(&g.name()), Some(g.processor));
        }
        assert_eq!(parse_processor("gfx90a"), Some(v(9, 0, 10)));
        assert_eq!(parse_processor("gfx"), None);
        assert_eq!(parse_processor("gfx1z0"), None);
        assert_eq!(parse_processor("sm_90"), None);
    }

    #[test]
    fn the_seed_processors_are_in_the_table() {
        let gfx942 = Gpu::by_name("gfx942").unwrap();
        assert_eq!(gfx942.gc, v(9, 4, 3));
        assert_eq!(gfx942.compute_packets(), ComputePackets::Aql);
        assert_eq!(gfx942.wave_size, 64);
        let gfx950 = Gpu::by_name("gfx950").unwrap();
        assert_eq!(gfx950.gc, v(9, 5, 0));
        assert_eq!(gfx950.lds_bytes, 160 * 1024);
        let gfx1100 = Gpu::by_name("gfx1100").unwrap();
        assert_eq!(gfx1100.gc, v(11, 0, 0));
        assert_eq!(gfx1100.compute_packets(), ComputePackets::Pm4);
        assert_eq!(gfx1100.generation(), Generation::Gfx11);
        assert_eq!(Gpu::by_name("gfx1200").unwrap().gc, v(12, 0, 0));
        assert_eq!(Gpu::by_name("gfx1201").unwrap().gc, v(12, 0, 1));
        assert_eq!(Gpu::by_gc(v(11, 0, 3)).unwrap().name(), "gfx1101");
        assert!(Gpu::by_name("gfx90a").is_none());
    }

    #[test]
    fn every_gpu_has_its_generation_and_granules() {
        for g in GPUS {
            assert_eq!(Generation::of_gc(g.gc), Some(g.generation), "{}", g.name());
            assert_eq!(Generation::of_major(g.processor.major), Some(g.generation));
            assert_eq!(Gpu::by_gc(g.gc).map(Gpu::name), Some(g.name()));
        }
        assert_eq!(Generation::of_major(10), None);
        let gfx950 = Gpu::by_name("gfx950").unwrap();
        assert_eq!(gfx950.lds_granule, 1280);
        assert_eq!(gfx950.lds_granules(160 * 1024), 128);
        let gfx1100 = Gpu::by_name("gfx1100").unwrap();
        assert_eq!(gfx1100.lds_granule, 512);
        assert_eq!(gfx1100.lds_of_rsrc2(2 << 15), 1024);
        assert_eq!(Gpu::by_name("gfx942").unwrap().lds_granule, 512);
    }

    #[test]
    fn linear_copy_packets_follow_the_sdma_version() {
        let mut g = Gpu::by_name("gfx1100").unwrap().clone();
        assert_eq!(g.linear_copy_bytes(), GIB);
        for (sdma, bytes) in [
            (v(4, 0, 0), 4 * MIB),
            (v(4, 4, 0), 4 * MIB),
            (v(4, 4, 2), GIB),
            (v(5, 0, 0), 4 * MIB),
            (v(5, 1, 0), 4 * MIB),
            (v(5, 2, 0), GIB),
            (v(7, 0, 0), GIB),
        ] {
            g.sdma = sdma;
            assert_eq!(g.linear_copy_bytes(), bytes, "sdma {sdma}");
        }
    }

    #[test]
    fn ring_bounds() {
        let g = Gpu::by_name("gfx1100").unwrap();
        assert_eq!(g.most_ring(QueueKind::Pm4), 16 * GIB);
        assert_eq!(g.most_ring(QueueKind::Sdma), 8 * GIB);
        let g = Gpu::by_name("gfx942").unwrap();
        assert_eq!(g.most_ring(QueueKind::Sdma), 16 * MIB);
        for g in GPUS {
            assert!(g.most_ring(QueueKind::Sdma).is_power_of_two());
            assert!(g.most_ring(g.compute_queue()).is_power_of_two());
        }
    }

    #[test]
    fn is_gpu_takes_amd_display_and_accelerators() {
        assert!(is_gpu(0x1002, 0x030000));
        assert!(is_gpu(0x1002, 0x038000));
        assert!(is_gpu(0x1002, 0x120000));
        assert!(!is_gpu(0x1002, 0x040300)); // the GPU's HDMI audio function
        assert!(!is_gpu(0x10de, 0x030000));
        assert!(!is_gpu(0x1022, 0x120000));
    }
}
