//! rig-isa: an interpreter of the AMD RDNA3 (gfx1100), RDNA4 (gfx1201) and CDNA3 (gfx942)
//! instruction sets that runs real LLVM-compiled kernels.
//!
//! The crate is pure: it knows nothing of page tables, queues or packets. A dispatch is
//! described by [`Dispatch`] (what the command processor latched from COMPUTE_* registers or an
//! AQL packet) and runs against a [`Memory`] (one VMID's view of GPU virtual memory).
//!
//! Design choices:
//! - each encoding family ([`Isa`]) has its own decoder front end; every instruction is decoded
//!   once into the one pre-decoded form, [`decode::Inst`], whose operation is a semantic id
//!   shared by the generations, and cached by family and address, across dispatches too (a
//!   reused decode is first checked against the code words in memory); with it the decode
//!   keeps the instruction's issue form, its semantics and operands chosen once (the hot
//!   operations run as tight loops over a wave's lanes, the rest through the general
//!   executor);
//! - a wave's VGPR file is structure-of-arrays (`[register][lane]`), so each vector instruction
//!   is a tight loop over the lanes of one register;
//! - waves of a workgroup run cooperatively on one host thread (switching at barriers), which
//!   makes LDS barriers exact without locks; workgroups are spread over the calling thread and
//!   helpers of a process-wide pool ([`parallel`]), never over threads made per dispatch.
//! - an encoding not defined for the target is an [`ExecFault::IllegalInstruction`], never a
//!   guess.
//!
//! Launch state: SGPRs hold `user_sgprs`, then the workgroup ids enabled in rsrc2, the workgroup
//! info word and the private segment wave offset (on GFX12 the ids are also in TTMP9 and TTMP7; on GFX9 FLAT_SCRATCH holds the wave's scratch
//! address); v0 holds the packed work-item ids
//! (x | y << 10 | z << 20); EXEC has the live lanes of each wave. Private memory of lane L in
//! wave slot S lives at `scratch.base + (S * lanes + L) * bytes_per_lane` (the wave's
//! FLAT_SCRATCH is `scratch.base + S * lanes * bytes_per_lane`). Flat addresses whose high half
//! is [`SHARED_APERTURE_HI`] or [`PRIVATE_APERTURE_HI`] reach LDS or private memory.
#![deny(missing_docs)]

pub mod decode;
pub mod disasm;
pub mod disasm9;
// Generated from LLVM's tables: each constant is named by its mnemonic, which says all.
#[allow(clippy::all, missing_docs)]
pub mod opcodes;
// The same for gfx1201, with each opcode's semantic id.
#[allow(clippy::all, missing_docs)]
pub mod opcodes_gfx12;
// The same for gfx942 (GFX9/CDNA3).
#[allow(clippy::all, missing_docs)]
pub mod opcodes_gfx9;

pub use decode::{DecodeError, Format, Inst, Isa, decode, decode_isa};

/// GPU virtual memory as a dispatch sees it (one VMID's page table). Implemented by rig-sim.
pub trait Memory: Sync {
    /// Reads `out.len()` bytes at `addr`.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemoryFault>;
    /// Writes `data` at `addr`.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryFault>;
    /// Atomic read-modify-write of a naturally aligned 4-byte word, atomic against other waves,
    /// other threads and the host. `op` maps the old value to the new; returns the old value.
    fn atomic_u32(&self, addr: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, MemoryFault>;
    /// 8-byte variant of [`Memory::atomic_u32`].
    fn atomic_u64(&self, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, MemoryFault>;
    /// A window onto the mapped run of memory holding `addr`, which the interpreter keeps
    /// during a dispatch and accesses word by word (relaxed atomics) instead of calling
    /// [`Memory::read`]/[`Memory::write`] per lane. `None` (the default) when `addr` is not
    /// mapped or the memory has no host view of it: accesses then go through the per-access
    /// methods, which is also how every fault is found.
    ///
    /// A window must show exactly the words `read` and `write` reach at its addresses while
    /// it is current ([`Window::is_current`]): a memory whose mappings may change during a
    /// dispatch makes its windows with [`Window::until_changed`] and moves that generation at
    /// every unmap, so that later accesses fault; and it keeps the window's memory out of
    /// reuse while the window lives, so that an access racing an unmap reaches nobody else's.
    fn window(&self, addr: u64) -> Option<Window<'_>> {
        let _ = addr;
        None
    }

    /// The GPU's clock now, in ticks: what `s_sendmsg_rtn` REALTIME returns and, in its low 20
    /// bits, what `s_getreg` SHADER_CYCLES reads. rig-sim answers its GPU's clock (the epoch
    /// and rate of the command processor's timestamps); the default, for memories with no GPU
    /// behind them, counts 100 MHz ticks from the first read in the process.
    fn clock_ticks(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let ns = START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos();
        u64::try_from(ns / 10).unwrap_or(u64::MAX)
    }
}

/// An access to an address the dispatch may not touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFault {
    /// Faulting GPU virtual address.
    pub address: u64,
    /// Whether the access was a write.
    pub write: bool,
}

/// Private (scratch) memory of a dispatch, in GPU memory the sim allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scratch {
    /// GPU address of slot 0.
    pub base: u64,
    /// Bytes of private memory per lane.
    pub bytes_per_lane: u32,
    /// Wave slots available (a slot holds `bytes_per_lane * lanes` bytes).
    pub waves: u32,
}

/// A fully described launch, as the command processor hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    /// GPU address of the first instruction (COMPUTE_PGM_LO/HI << 8).
    pub code_address: u64,
    /// COMPUTE_PGM_RSRC1.
    pub pgm_rsrc1: u32,
    /// COMPUTE_PGM_RSRC2.
    pub pgm_rsrc2: u32,
    /// COMPUTE_PGM_RSRC3.
    pub pgm_rsrc3: u32,
    /// Values of COMPUTE_USER_DATA_0.. (count = rsrc2.USER_SGPR).
    pub user_sgprs: Vec<u32>,
    /// Work-items per axis (AQL allows a partial last group).
    pub grid_items: [u32; 3],
    /// Work-items per group per axis.
    pub group_size: [u32; 3],
    /// Wave64 (DISPATCH_INITIATOR CS_W32_EN clear).
    pub wave64: bool,
    /// LDS bytes per workgroup (rsrc2 LDS_SIZE granules plus dynamic).
    pub lds_bytes: u32,
    /// Private memory, if the kernel uses any.
    pub scratch: Option<Scratch>,
}

mod code;
mod exec;
mod lower9;
mod meta;
mod pool;
mod prep;
mod simd;
pub mod testing;
mod valu;
mod window;

pub use exec::{PRIVATE_APERTURE_HI, SHARED_APERTURE_HI};
pub use pool::parallel;
pub use window::Window;

/// A share of a dispatch's workgroups: the linear workgroup ids `first`, `first + stride`,
/// `first + 2 * stride`, ... below the dispatch's workgroup count. Linear ids count x fastest,
/// then y, then z. [`Workgroups::ALL`] is every workgroup; [`Workgroups::round_robin`] is one
/// die's share when workgroups are dealt to dies in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workgroups {
    /// Linear id of the first workgroup of the share.
    pub first: u64,
    /// Distance between consecutive workgroups of the share (at least 1).
    pub stride: u64,
}

impl Workgroups {
    /// Every workgroup of the dispatch.
    pub const ALL: Workgroups = Workgroups {
        first: 0,
        stride: 1,
    };

    /// The share of die `die` of `dies` when workgroup `g` goes to die `g % dies`.
    pub fn round_robin(die: u32, dies: u32) -> Workgroups {
        Workgroups {
            first: u64::from(die),
            stride: u64::from(dies.max(1)),
        }
    }

    /// How many of `total` workgroups are in the share.
    pub fn count(&self, total: u64) -> u64 {
        if self.first >= total || self.stride == 0 {
            0
        } else {
            (total - self.first).div_ceil(self.stride)
        }
    }

    /// The linear ids of the share, out of `total` workgroups.
    pub fn ids(&self, total: u64) -> impl Iterator<Item = u64> + use<> {
        let (first, stride) = (self.first, self.stride.max(1));
        (0..self.count(total)).map(move |j| first + j * stride)
    }
}

impl Dispatch {
    /// Workgroups of the dispatch (per axis: work-items over group size, rounded up), at most
    /// `u64::MAX`: a grid of more (up to 2^96 from three u32 axes) saturates, and executing it
    /// is `ExecFault::BadDispatch`.
    pub fn workgroup_count(&self) -> u64 {
        (0..3)
            .map(|k| u64::from(self.grid_items[k]).div_ceil(u64::from(self.group_size[k].max(1))))
            .fold(1, u64::saturating_mul)
    }
}

/// Why a dispatch stopped before every wave ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecFault {
    /// The words at `address` are not an instruction of the target.
    #[error("illegal instruction {words:08x?} at {address:#x}")]
    IllegalInstruction {
        /// Address of the first word.
        address: u64,
        /// The words read there (first word first).
        words: Vec<u32>,
    },
    /// A memory access faulted.
    #[error("memory fault at {:#x} ({}) by the instruction at {pc:#x}", fault.address, if fault.write { "write" } else { "read" })]
    Memory {
        /// The fault the memory reported.
        fault: MemoryFault,
        /// Address of the instruction.
        pc: u64,
    },
    /// The kernel executed `s_trap`.
    #[error("s_trap {code} at {address:#x}")]
    Trap {
        /// Address of the trap instruction.
        address: u64,
        /// Trap id (simm16).
        code: u16,
    },
    /// The stop flag was raised.
    #[error("dispatch stopped")]
    Stopped,
    /// A defined instruction this interpreter does not implement yet.
    #[error("unsupported instruction `{text}` at {address:#x}")]
    Unsupported {
        /// Address of the instruction.
        address: u64,
        /// The instruction in LLVM syntax.
        text: String,
    },
    /// An instruction named a VGPR beyond the wave's allocation (COMPUTE_PGM_RSRC1.VGPRS).
    #[error("vgpr beyond the wave's allocation at {address:#x}")]
    VgprOutOfRange {
        /// Address of the instruction.
        address: u64,
    },
    /// The dispatch description is inconsistent.
    #[error("bad dispatch: {reason}")]
    BadDispatch {
        /// What is wrong.
        reason: &'static str,
    },
    /// A worker thread panicked (a bug in rig-isa).
    #[error("internal error in the interpreter")]
    Internal,
}

/// Counters of a finished dispatch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecStats {
    /// Workgroups run.
    pub workgroups: u64,
    /// Waves run.
    pub waves: u64,
    /// Instructions issued (per wave).
    pub instructions: u64,
    /// Sum over issued vector instructions (VALU, LDS, vector memory) of active lanes; scalar
    /// instructions are not counted here.
    pub lane_instructions: u64,
    /// Instructions issued (per wave) by class, indexed by [`InstClass::index`].
    pub issued: [u64; InstClass::COUNT],
    /// Of [`ExecStats::issued`], those that ran on the general executor rather than as a fast
    /// form (see [`issue_tier`]), by class.
    pub general: [u64; InstClass::COUNT],
    /// Sum over workgroups of the group's waves times the instructions they issued in all:
    /// the wave-cycles of a machine that issues one instruction a cycle from one wave at a
    /// time and keeps each of a group's waves resident until the whole group has ended (the
    /// simulated SQ's, rig-sim's perfcounters).
    pub wave_cycles: u64,
}

impl ExecStats {
    /// Instructions that ran on the general executor, all classes together.
    pub fn general_total(&self) -> u64 {
        self.general.iter().sum()
    }
}

/// The classes of instructions [`ExecStats`] counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstClass {
    /// Vector ALU: VOP1, VOP2, VOPC, VOP3, VOP3SD, VOP3P, VOPD.
    Valu,
    /// Scalar ALU: SOP1, SOP2, SOPC, SOPK.
    Salu,
    /// Program flow (SOPP) other than branches: waits, barriers, `s_endpgm`, hints.
    Flow,
    /// Scalar memory (SMEM).
    Smem,
    /// LDS (DS).
    Lds,
    /// Vector memory through an address: FLAT, GLOBAL, SCRATCH.
    Vmem,
    /// Branches (SOPP `s_branch` and `s_cbranch_*`), taken or not.
    Branch,
    /// Vector memory through a buffer resource: MUBUF (GFX12's VBUFFER).
    Buffer,
}

impl InstClass {
    /// How many classes there are.
    pub const COUNT: usize = 8;
    /// Every class, in [`InstClass::index`] order.
    pub const ALL: [InstClass; InstClass::COUNT] = [
        InstClass::Valu,
        InstClass::Salu,
        InstClass::Flow,
        InstClass::Smem,
        InstClass::Lds,
        InstClass::Vmem,
        InstClass::Branch,
        InstClass::Buffer,
    ];

    /// The class of `inst` (decoded by [`decode_isa`]): its format's, a branch's for the
    /// branches of SOPP.
    pub fn of_inst(inst: &Inst) -> InstClass {
        use opcodes::op_sopp::{S_BRANCH, S_CBRANCH_CDBGSYS_AND_USER};
        match inst.format {
            // Semantic ids below the gfx1100 table's length are gfx1100's (GFX9's are lowered
            // to them, GFX12's share them).
            Format::Sopp
                if (inst.op as usize) < opcodes::SOPP.len()
                    && (S_BRANCH..=S_CBRANCH_CDBGSYS_AND_USER).contains(&inst.op) =>
            {
                InstClass::Branch
            }
            f => InstClass::of(f),
        }
    }

    /// The class of an instruction of `format` (SOPP's branches are [`InstClass::Branch`]
    /// by their opcode: [`InstClass::of_inst`]).
    pub fn of(format: Format) -> InstClass {
        match format {
            Format::Vop1
            | Format::Vop2
            | Format::Vopc
            | Format::Vop3
            | Format::Vop3sd
            | Format::Vop3p
            | Format::Vopd => InstClass::Valu,
            Format::Sop1 | Format::Sop2 | Format::Sopc | Format::Sopk => InstClass::Salu,
            Format::Sopp => InstClass::Flow,
            Format::Smem => InstClass::Smem,
            Format::Ds => InstClass::Lds,
            Format::Flat | Format::Global | Format::Scratch => InstClass::Vmem,
            Format::Mubuf => InstClass::Buffer,
        }
    }

    /// The class's position in [`InstClass::ALL`] and in the arrays of [`ExecStats`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A short lowercase name (`valu`, `salu`, `flow`, `smem`, `lds`, `vmem`, `branch`,
    /// `buffer`).
    pub fn name(self) -> &'static str {
        match self {
            InstClass::Valu => "valu",
            InstClass::Salu => "salu",
            InstClass::Flow => "flow",
            InstClass::Smem => "smem",
            InstClass::Lds => "lds",
            InstClass::Vmem => "vmem",
            InstClass::Branch => "branch",
            InstClass::Buffer => "buffer",
        }
    }
}

/// How an instruction issues: as a fast form (operands and operation resolved when it is
/// decoded, one vector loop over the wave's lanes) or through the general executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// A fast form. It may still hand one issue to the general executor where the wave's state
    /// asks for it (a flat access with a lane in the LDS or private aperture; a float form under
    /// a flushing denormal mode): [`ExecStats::general`] counts those issues too.
    Fast,
    /// The general executor, at every issue.
    General,
}

/// The tier `inst` (decoded by [`decode_isa`]) issues on.
pub fn issue_tier(inst: &Inst) -> Tier {
    if matches!(prep::Slot::new(*inst).fast, prep::Fast::General) {
        Tier::General
    } else {
        Tier::Fast
    }
}

/// Runs a dispatch to completion over up to `threads` threads: the calling thread and helpers
/// of a process-wide pool (no thread is created per dispatch; a dispatch of one workgroup runs
/// on the calling thread alone).
///
/// Workgroups are handed out in linear order; each worker runs one group at a time. `stop` is
/// polled before each workgroup and every few hundred instructions per worker. The first fault
/// stops the dispatch.
pub fn execute(
    d: &Dispatch,
    mem: &dyn Memory,
    stop: &std::sync::atomic::AtomicBool,
    threads: usize,
) -> Result<ExecStats, ExecFault> {
    exec::execute(Isa::Gfx11, d, Workgroups::ALL, mem, stop, threads)
}

/// [`execute`] for a share of the workgroups only (one die's, say). Each workgroup keeps its
/// id, so running every share of a partition, in any order or at once, computes what
/// [`execute`] computes. Shares that run at once must have disjoint scratch
/// ([`Dispatch::scratch`]): wave slots are numbered from 0 within each call.
pub fn execute_workgroups(
    d: &Dispatch,
    share: Workgroups,
    mem: &dyn Memory,
    stop: &std::sync::atomic::AtomicBool,
    threads: usize,
) -> Result<ExecStats, ExecFault> {
    exec::execute(Isa::Gfx11, d, share, mem, stop, threads)
}

/// [`execute_workgroups`] of code of encoding family `isa` (a GPU of that generation: launch
/// state as its LLVM target expects it, e.g. GFX12's workgroup ids in TTMP7/TTMP9).
pub fn execute_isa(
    isa: Isa,
    d: &Dispatch,
    share: Workgroups,
    mem: &dyn Memory,
    stop: &std::sync::atomic::AtomicBool,
    threads: usize,
) -> Result<ExecStats, ExecFault> {
    exec::execute(isa, d, share, mem, stop, threads)
}
