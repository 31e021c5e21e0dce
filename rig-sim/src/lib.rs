//! The simulated AMD GPU of rig.
//!
//! `rigd` serves this GPU when no AMD GPU is present, and every test of the system runs on it,
//! so it keeps the hardware's contract rather than the client's convenience: it reads the same
//! packets from the same rings in GPU memory, started by doorbell stores into shared memory;
//! every access goes through the client's page table; a bad packet or a fault stops that
//! queue and is reported, never a panic of the daemon.
//!
//! # Model
//!
//! A [`SimGpu`] is one entry of rig-amd's GPU table ([`rig_amd::gpu::Gpu`]): gfx1100 by
//! default, gfx1201, or gfx942 (several dies, AQL compute queue). Its VRAM is sparse
//! ([`SimConfig::vram_bytes`], 16 GiB by default, resident only once touched) and its clock
//! runs as [`SimConfig::clock`] says (100 MHz from its creation by default; an offset, a
//! drift, a read latency, a constant between the source and the stamps and a preempted read
//! can be put into it: [`clock`]).
//!
//! # API (what the daemon's `sim` path builds on)
//!
//! ```text
//! SimGpu::new(SimConfig) -> Result<Arc<SimGpu>>
//!   .model() -> &'static Gpu          .clock() -> ClockRelation     .clock_ticks() -> u64
//!   .read_source() -> SourceRead                                    (the host's read)
//!   .create_address_space() -> Result<AddressSpace>                 (one VMID each)
//! AddressSpace
//!   .alloc_vram(va, bytes)  .map_host(va, &SharedRegion, offset, bytes, writable)
//!   .unmap(va, bytes)  .read(va, &mut [u8])  .write(va, &[u8])  .load_u64 / .store_u64
//!   .create_queue(QueueDesc, on_interrupt, on_fault) -> Result<Queue>
//! Queue
//!   .stop()  .status() -> QueueStatus  .interrupts() -> u64  .id()
//!   .busy_since() -> Option<Instant>
//! ```
//!
//! The daemon chooses every GPU virtual address. Addresses and sizes of mappings are whole
//! 4 KiB pages; host pages come from [`rig_shm::SharedRegion`]s (memfds shared with clients).
//!
//! # Queues
//!
//! A queue reads a ring of a power of two of bytes at `ring_va`; its read position is the
//! 64-bit word at `rptr_va`, which the queue writes, and its write position the 64-bit word at
//! `wptr_va`, which the client writes. Both start at 0 and only grow. Their units are the
//! hardware's: **dwords** for PM4, **bytes** for SDMA, **64-byte packets** for AQL. A queue
//! processes whatever lies between the two once its doorbell ([`rig_shm::Doorbell`]) is rung
//! with any new value; a PM4 or SDMA queue reads its write position from memory, and an AQL
//! queue runs packets while their headers are valid (the doorbell value, the last packet's
//! index, only wakes it). Each queue runs on a thread of its own, which sleeps on the
//! doorbell's futex when it has nothing to do (looking at its stop flag every
//! [`queue::DOORBELL_RECHECK`]): an idle GPU spends next to no CPU.
//!
//! - PM4 ([`pm4`]): NOP, SET_SH_REG, DISPATCH_DIRECT, RELEASE_MEM, WAIT_REG_MEM(64),
//!   ACQUIRE_MEM, WRITE_DATA, COPY_DATA, INDIRECT_BUFFER (chained), EVENT_WRITE; on GFX12 models
//!   the registers they reach include the SQ's performance counters (`perfmon.rs`), which
//!   count a dispatch's waves, instructions and cycles by shader engine.
//! - SDMA ([`sdma`]): NOP, COPY_LINEAR, COPY_LINEAR_SUB_WINDOW, CONST_FILL, FENCE (32 bits),
//!   TRAP, POLL_REGMEM, TIMESTAMP, GCR.
//! - AQL ([`aql`]): kernel dispatch, barrier-AND and barrier-OR, completion signals.
//!
//! A dispatch is handed, fully described, to the [`KernelExecutor`] of the GPU; see
//! [`dispatch`]. On a model of several dies (gfx942's XCCs) each die gets its round-robin
//! share of the workgroups ([`dispatch::spread`]) and the shares run at once. Work runs in
//! queue order: a dispatch completes before the next packet runs, so an end-of-pipe release
//! follows the dispatches before it.
//!
//! **Waits.** WAIT_REG_MEM and POLL_REGMEM and AQL barriers spend no CPU while they wait:
//! each watches the host pages behind the words it reads, and a write by an engine of this
//! GPU (a release, fence, data write, signal update, copy or fill) wakes only the waits
//! watching a page it wrote, in whichever address space maps that page; a kernel's end, whose
//! stores are not followed one by one, wakes those watching any page its address space maps
//! writable. So a write in one address space wakes no wait of another that shares none of
//! its pages. Waits also re-poll memory every millisecond ([`WAIT_POLL`]) for writes no engine
//! of this GPU announces (the host's, another GPU's). [`SimGpu::waits_woken`] counts the
//! wakes. See `watch.rs` for why no wake is lost.
//!
//! **Interrupts and faults.** A release or trap that asks for an interrupt calls the queue's
//! `on_interrupt` with an [`Interrupt`] that carries a per-queue count, so a consumer can tell
//! whether it missed one. The call follows the release's write, on the queue's thread. The
//! GPU wakes no host thread that sleeps on the word a release wrote (no hardware wakes a
//! futex): the receiver of the interrupt does, as a driver's interrupt handler does (rigd's
//! paths, `rigd::path::wake`). A fault (page fault, bad packet, a kernel that could not run) stops
//! that queue alone: it is recorded in [`Queue::status`] before `on_fault` is called, as a
//! typed [`QueueFault`] whose [`FaultReason`] keeps the facts (a [`PageFault`]'s address and
//! direction, a bad packet's position, a kernel's [`ExecFault`] with its instruction).
//!
//! **Stop.** [`Queue::stop`] returns without waiting for the queue's work, and once it has
//! returned the queue's thread has ended, so nothing of the queue touches memory: copies move
//! at most [`memory::CHUNK`] bytes between checks of the stop flag, kernels see the executor's
//! stop flag, and every wait watches it. Stop wakes the thread whatever the client wrote in
//! its doorbell slot, again until the thread has ended, and the thread never sleeps longer
//! than [`queue::DOORBELL_RECHECK`] without looking at its flag, so no client word can keep a
//! stopped queue's thread alive.
//! [`Queue::busy_since`] says, from the simulator's own state, since when a queue has been
//! running without going back to sleep: what a hang bound can trust.
//!
//! **Memory in flight.** A copy or fill holds what it translated for as long as it uses it:
//! VRAM unmapped under a chunk in flight goes back to the arena (zeroed) only when the chunk
//! lets go, and the next chunk faults; see [`memory`]. No VMID is ever given pages that
//! another VMID's work may still read or write.
//!
//! **The PCI function.** [`pci`] is the first block of the register-level model that the PCI
//! path's bring-up is tested against (docs/pci.md): BAR0's registers from rig-amd's tables,
//! VRAM with the IP discovery table, and the PSP's bootloader mailbox. It is not yet joined to
//! [`SimGpu`]'s queues.
//!
//! This crate does not parse packets (rig-amd does) or run instructions (rig-isa does).
#![deny(missing_docs)]

pub mod aql;
pub mod clock;
pub mod dispatch;
pub mod memory;
pub mod pci;
mod perfmon;
pub mod pm4;
pub mod queue;
pub mod sdma;
mod vram;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use rig_amd::gpu::Gpu;
use rig_shm::SharedRegion;

pub use clock::{ClockModel, ClockRelation, SourceRead, Stall};
pub use dispatch::{IsaExecutor, KernelExecutor, KernelFault, NoExecutor};
pub use memory::{MapError, PageFault};
pub use queue::{
    FaultReason, Interrupt, InterruptSource, PacketError, Queue, QueueDesc, QueueFault, QueueStatus,
};
/// What the interpreter reports of a kernel's fault, inside [`KernelFault::Exec`].
pub use rig_isa::ExecFault;

use crate::memory::Vm;
use crate::vram::Vram;
use crate::watch::Events;

/// GPU pages are 4 KiB: the page rig maps GPU memory in.
pub const PAGE: u64 = rig_amd::PAGE_BYTES;

/// How often a waiting packet re-reads memory that only the host may write.
pub const WAIT_POLL: Duration = Duration::from_millis(1);

/// Errors of the simulated GPU's control operations.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The model is not in rig-amd's GPU table.
    #[error(
        "unknown GPU model {0:?}; the simulator models the processors of rig-amd's table, such as gfx1100"
    )]
    UnknownModel(String),
    /// Reserving the VRAM arena failed.
    #[error("cannot reserve {bytes} bytes of address space for simulated VRAM")]
    Vram {
        /// The size asked for.
        bytes: u64,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid simulator configuration: {0}")]
    Config(&'static str),
    /// A mapping change failed.
    #[error(transparent)]
    Map(#[from] MapError),
    /// A queue description is invalid.
    #[error("invalid queue: {0}")]
    Queue(String),
    /// A queue's thread could not start.
    #[error("cannot start a queue thread")]
    Thread(#[source] std::io::Error),
}

/// Result of the simulator's control operations.
pub type Result<T> = std::result::Result<T, SimError>;

/// What to simulate.
#[derive(Clone)]
pub struct SimConfig {
    /// The processor, such as `"gfx1100"`.
    pub model: String,
    /// Bytes of VRAM (virtual: pages are resident only once touched).
    pub vram_bytes: u64,
    /// How its clock runs against the host's.
    pub clock: ClockModel,
    /// Host threads a dispatch may run workgroups on (the queue's own thread and helpers of
    /// rig-isa's process-wide pool; on a model of several dies each die gets
    /// `exec_threads / dies`, at least 1, and the dies run at once).
    pub exec_threads: usize,
    /// What runs kernels: [`IsaExecutor`] by default; [`NoExecutor`] faults every dispatch,
    /// saying why.
    pub executor: Arc<dyn KernelExecutor>,
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimConfig")
            .field("model", &self.model)
            .field("vram_bytes", &self.vram_bytes)
            .field("clock", &self.clock)
            .field("exec_threads", &self.exec_threads)
            .finish_non_exhaustive()
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: "gfx1100".into(),
            vram_bytes: 16 << 30,
            clock: ClockModel::default(),
            exec_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            executor: dispatch::default_executor(),
        }
    }
}

/// A simulated GPU.
#[derive(Debug)]
pub struct SimGpu {
    model: &'static Gpu,
    config: SimConfig,
    vram: Arc<Vram>,
    clock: ClockRelation,
    /// Reads of the source so far.
    source_reads: AtomicU64,
    pub(crate) events: Events,
    /// The SQ's performance counters, on models of GFX12 ([`perfmon`]).
    pub(crate) perfmon: Option<perfmon::Perfmon>,
    next_vmid: AtomicU32,
    pub(crate) next_queue: AtomicU32,
}

impl SimGpu {
    /// Makes a simulated GPU.
    pub fn new(config: SimConfig) -> Result<Arc<SimGpu>> {
        let model = Gpu::by_name(&config.model)
            .ok_or_else(|| SimError::UnknownModel(config.model.clone()))?;
        if config.clock.hz == 0 {
            return Err(SimError::Config("clock.hz must be at least 1"));
        }
        if config.clock.drift_ppm.is_nan() || config.clock.drift_ppm.abs() >= 1e6 {
            return Err(SimError::Config(
                "clock.drift_ppm must lie between -1e6 and 1e6",
            ));
        }
        if config.vram_bytes < PAGE {
            return Err(SimError::Config("vram_bytes must be at least one page"));
        }
        if config.exec_threads == 0 {
            return Err(SimError::Config("exec_threads must be at least 1"));
        }
        let bytes = config.vram_bytes / PAGE * PAGE;
        let vram = Vram::new(bytes).map_err(|source| SimError::Vram { bytes, source })?;
        let clock = ClockRelation::new(&config.clock, clock::monotonic_ns());
        Ok(Arc::new(SimGpu {
            model,
            config,
            vram: Arc::new(vram),
            clock,
            source_reads: AtomicU64::new(0),
            events: Events::default(),
            perfmon: (model.generation() == rig_amd::gpu::Generation::Gfx12)
                .then(|| perfmon::Perfmon::new(model.shader_engines)),
            next_vmid: AtomicU32::new(1),
            next_queue: AtomicU32::new(0),
        }))
    }

    /// The modelled GPU.
    pub fn model(&self) -> &'static Gpu {
        self.model
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Bytes of VRAM.
    pub fn vram_bytes(&self) -> u64 {
        self.vram.bytes()
    }

    /// Bytes of VRAM no address space holds.
    pub fn vram_free(&self) -> u64 {
        self.vram.free_bytes()
    }

    /// Waits of packets (WAIT_REG_MEM, POLL_REGMEM, AQL barriers) that engine writes have
    /// woken so far, each once per write that woke it: a write wakes only the waits watching
    /// a page it wrote (a diagnostic, for tests of how narrow wakes are).
    pub fn waits_woken(&self) -> u64 {
        self.events.woken()
    }

    /// Waits of packets registered now, watching memory for a write (a diagnostic, like
    /// [`SimGpu::waits_woken`]).
    pub fn waits_watching(&self) -> usize {
        self.events.watching()
    }

    /// The GPU clock counter now.
    pub fn clock_ticks(&self) -> u64 {
        self.clock.now()
    }

    /// How the GPU clock relates to the host's `CLOCK_MONOTONIC`.
    pub fn clock(&self) -> ClockRelation {
        self.clock
    }

    /// A read of the GPU's clock by the host, as a register read: it takes the model's
    /// `read_ns`, samples the source's counter (the stamp clock plus the model's constant)
    /// half way through, and says whether the reader is preempted after it ([`clock`]).
    pub fn read_source(&self) -> SourceRead {
        let m = &self.config.clock;
        let n = self.source_reads.fetch_add(1, Ordering::Relaxed) + 1;
        let start = clock::monotonic_ns();
        clock::spin_until(start + m.read_ns / 2);
        let ticks = self.clock.now().saturating_add_signed(m.constant);
        clock::spin_until(start + m.read_ns);
        let stall = m
            .stall
            .filter(|s| s.read == n)
            .map_or(Duration::ZERO, |s| Duration::from_nanos(s.ns));
        SourceRead { ticks, stall }
    }

    /// A new GPU address space with a VMID of its own.
    pub fn create_address_space(self: &Arc<Self>) -> AddressSpace {
        let vmid = self.next_vmid.fetch_add(1, Ordering::Relaxed);
        AddressSpace {
            gpu: self.clone(),
            vm: Arc::new(Vm::new(vmid, self.vram.clone()).with_clock(self.clock)),
        }
    }
}

/// A GPU address space (one VMID): its page table, and the queues that run in it.
///
/// Dropping it unmaps everything once the last queue of it is gone.
#[derive(Debug, Clone)]
pub struct AddressSpace {
    gpu: Arc<SimGpu>,
    vm: Arc<Vm>,
}

impl AddressSpace {
    /// The VMID.
    pub fn vmid(&self) -> u32 {
        self.vm.vmid()
    }

    /// The GPU it belongs to.
    pub fn gpu(&self) -> &Arc<SimGpu> {
        &self.gpu
    }

    /// The page table, which implements [`rig_isa::Memory`].
    pub fn memory(&self) -> &Arc<Vm> {
        &self.vm
    }

    /// Maps `bytes` of new zeroed VRAM at `va` (whole pages, not mapped yet).
    pub fn alloc_vram(&self, va: u64, bytes: u64) -> Result<()> {
        Ok(self.vm.alloc_vram(va, bytes)?)
    }

    /// Maps `bytes` of `region` from `offset` at `va` (whole pages), read-only unless
    /// `writable`.
    pub fn map_host(
        &self,
        va: u64,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
        writable: bool,
    ) -> Result<()> {
        Ok(self.vm.map_host(va, region, offset, bytes, writable)?)
    }

    /// Unmaps whatever is mapped of `bytes` at `va`; returns the bytes that were mapped.
    pub fn unmap(&self, va: u64, bytes: u64) -> Result<u64> {
        Ok(self.vm.unmap(va, bytes)?)
    }

    /// Reads GPU memory as the GPU would.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> std::result::Result<(), PageFault> {
        self.vm.read(va, buf)
    }

    /// Writes GPU memory as the GPU would (not an engine write: waits see it at their poll).
    pub fn write(&self, va: u64, data: &[u8]) -> std::result::Result<(), PageFault> {
        self.vm.write(va, data)
    }

    /// Loads the 64-bit word at `va` (acquire).
    pub fn load_u64(&self, va: u64) -> std::result::Result<u64, PageFault> {
        self.vm.load_u64(va, Ordering::Acquire)
    }

    /// Stores the 64-bit word at `va` (release).
    pub fn store_u64(&self, va: u64, value: u64) -> std::result::Result<(), PageFault> {
        self.vm.store_u64(va, value, Ordering::Release)
    }

    /// Starts a queue in this address space (see the crate docs for its ring and positions).
    pub fn create_queue(
        &self,
        desc: QueueDesc,
        on_interrupt: Arc<dyn Fn(Interrupt) + Send + Sync>,
        on_fault: Arc<dyn Fn(QueueFault) + Send + Sync>,
    ) -> Result<Queue> {
        queue::start(
            self.gpu.clone(),
            self.vm.clone(),
            desc,
            on_interrupt,
            on_fault,
        )
    }
}
