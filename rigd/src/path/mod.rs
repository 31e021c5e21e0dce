//! Paths: the ways rigd reaches a GPU, as two traits.
//!
//! A [`Backend`] is one GPU reached one way; it describes the GPU ([`GpuDescription`]) and
//! opens address spaces on it. A [`Path`] is one device's GPU address space on that GPU (a
//! VMID in the simulator and over VFIO, a KFD process over kfd): everything the device
//! maker and the sessions ask of the hardware goes through it, so the same device is made
//! from any path. Each client device gets its own `Path`, which is what keeps one client's
//! memory and faults away from another's.
//!
//! Implemented: [`sim`] (the simulated GPU), [`kfd`] (amdgpu's KFD, in rigd's own process)
//! and [`worker`] (the kfd path run in a worker process per client, which is how rigd
//! serves KFD's GPUs). [`vfio`] (the PCI function through VFIO) is its configuration and
//! discovery only: it lists its functions, and serves none until the AMD bring-up exists.
//!
//! A path is a folder of this module plus its configuration section: it states itself in
//! [`PATHS`] (its kind, how it reaches GPUs, its discovery), and [`crate::gpus`] folds over
//! that list; nothing outside the folder names the path. What every path checks the same
//! way (page rounding, a peer mapping's range, a refusal's meaning for host mappings) is
//! [`memory`]'s; the doorbell forwarder a path with hardware doorbells runs is
//! [`forward`]'s; the sleepers of a device's word, which every path's interrupt handler
//! wakes, are [`wake`]'s.
//!
//! This module owns the contract only; the rings, segment and word a device is made of are
//! [`crate::device`]'s.

pub mod forward;
pub mod kfd;
pub mod memory;
pub mod sim;
pub mod vfio;
pub mod wake;
pub mod worker;

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::Path as FsPath;
use std::sync::Arc;

use rig_proto::messages::{ClockSample, ClockSource, MemoryKind, PathKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};

/// Whether the counter a path's source reads on `gpu` is another counter of the clock's
/// rate, a constant apart from the one the GPU's stamps write: on GFX12, where KFD reads
/// the SoC's reference counter and the stamps (COPY_DATA and RELEASE_MEM of the GPU clock,
/// SDMA TIMESTAMP) the GC's.
pub fn source_apart(gpu: &rig_amd::gpu::Gpu) -> bool {
    gpu.gc.major == 12
}

/// What a path knows of its GPU that does not change while it runs.
#[derive(Debug, Clone)]
pub struct GpuDescription {
    /// The GPU's table entry (processor, GC and SDMA versions, dies, LDS, waves).
    pub gpu: rig_amd::gpu::Gpu,
    /// How it is reached.
    pub kind: PathKind,
    /// The bytes of its own memory.
    pub budget: u64,
    /// The bytes of its memory the host addresses through its BAR: the most Mapped memory
    /// there can be (0 where the BAR is smaller than the VRAM and KFD gives the host none).
    pub host_visible: u64,
    /// Its PCI function, if it has one.
    pub bus: Option<String>,
    /// The frequency of its clock, in hertz.
    pub clock_hz: u64,
    /// How a device reads that clock against the host's ([`Path::read_clock`]).
    pub clock: ClockSource,
    /// The version of its compute queues' firmware.
    pub mec: u32,
    /// Work-group processors that run work, per shader engine and array.
    pub wgps: Vec<Vec<u32>>,
    /// Bytes of L2 and MALL, if known.
    pub cache_bytes: Option<u64>,
    /// Milliseconds after which work whose word has not moved hung, where nothing else
    /// bounds the GPU's work.
    pub hang_ms: Option<u64>,
    /// Whether the GPU maps host memory (`map_host`).
    pub maps_host: bool,
    /// What a client costs and how many fit, where the path gives each client an address
    /// space of its own that the GPU holds a limited number of (`None` where it does not).
    pub client_cost: Option<ClientCost>,
    /// Memory the path makes on its own for each queue it makes, by kind: what a device
    /// charges its user for a queue besides the ring, before the queue is made and for as
    /// long as it lives.
    pub queue_memory: QueueCosts,
}

/// What a client costs on a GPU whose path gives each client an address space of its own
/// (a KFD process), and how many fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCost {
    /// GPU memory bytes a compute queue takes besides its ring (its firmware's buffers).
    pub queue_bytes: u64,
    /// Clients whose queues the GPU runs at once (its address spaces, VMIDs); past it the
    /// GPU's scheduler time-slices the clients' queues (oversubscription).
    pub at_once: u32,
    /// Compute queues whose buffers the GPU's memory holds, nothing else allocated.
    pub queues_fit: u64,
}

/// Memory a path makes on its own for one queue, besides the ring and positions the device
/// gives it (KFD's EOP buffer and context-save area, an AQL queue's `amd_queue_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueMemory {
    /// Bytes of the GPU's own memory (counted in the user's GPU share).
    pub gpu: u64,
    /// Bytes of host memory (counted in the host cap).
    pub host: u64,
}

impl QueueMemory {
    /// All its bytes (counted in the user's `limits.memory_bytes`).
    pub fn total(&self) -> u64 {
        self.gpu.saturating_add(self.host)
    }
}

/// What each kind of queue costs a path besides its ring ([`QueueMemory`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCosts {
    /// A PM4 compute queue.
    pub pm4: QueueMemory,
    /// An AQL compute queue.
    pub aql: QueueMemory,
    /// An SDMA copy queue.
    pub sdma: QueueMemory,
}

impl QueueCosts {
    /// What a queue of `kind` costs.
    pub fn of(&self, kind: QueueKind) -> QueueMemory {
        match kind {
            QueueKind::Pm4 => self.pm4,
            QueueKind::Aql => self.aql,
            QueueKind::Sdma => self.sdma,
        }
    }
}

/// What a path says of a refusal or failure: a sentence for whoever can act on it, and the
/// cause the path was given, kept as data (a KFD ioctl's errno stays an errno through the
/// worker and up to rigd's answer), so a caller can tell causes apart without reading
/// English.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Why {
    /// The sentence (it names the cause too: it is what reaches the client).
    pub what: String,
    /// The cause, where the kernel or the path's own machinery gave one.
    pub cause: Option<Cause>,
}

/// What a path was given as the cause of a refusal or failure.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Cause {
    /// A system call answered an errno.
    Errno {
        /// The call (an ioctl's name, `mmap`).
        call: String,
        /// Its errno.
        errno: i32,
    },
    /// The worker process that runs the path could not be reached or answered out of turn.
    Worker,
}

impl Why {
    /// `what`, with `cause`.
    pub fn caused(what: impl Into<String>, cause: Cause) -> Why {
        Why {
            what: what.into(),
            cause: Some(cause),
        }
    }

    /// This, said as part of `what`: `what: this`, with its cause.
    pub fn within(self, what: impl fmt::Display) -> Why {
        Why {
            what: format!("{what}: {}", self.what),
            cause: self.cause,
        }
    }

    /// The errno of the system call that caused it, if one did.
    pub fn errno(&self) -> Option<i32> {
        match &self.cause {
            Some(Cause::Errno { errno, .. }) => Some(*errno),
            _ => None,
        }
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl From<String> for Why {
    fn from(what: String) -> Why {
        Why { what, cause: None }
    }
}

impl From<&str> for Why {
    fn from(what: &str) -> Why {
        Why::from(what.to_owned())
    }
}

/// A path's refusal of a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The path, its kernel driver or the GPU lacked memory or another resource.
    #[error("{0}")]
    Lacking(Why),
    /// Every slot for queues of the kind holds a queue; a retire frees one.
    #[error("{0}")]
    Full(Why),
    /// Any other refusal.
    #[error("{0}")]
    Refused(Why),
}

impl Refusal {
    /// What the path said.
    pub fn why(&self) -> &Why {
        match self {
            Refusal::Lacking(w) | Refusal::Full(w) | Refusal::Refused(w) => w,
        }
    }
}

/// A refusal to map host pages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapRefusal {
    /// The path lacked the room to map them.
    #[error("{0}")]
    NoRoom(Why),
    /// The path never maps these pages (read-only pages, a path that maps no host memory).
    #[error("{0}")]
    Never(Why),
    /// The descriptor is unfit as passed, and the client can fix that (a memfd that cannot
    /// be sealed against shrinking).
    #[error("{0}")]
    Unfit(Why),
}

/// A failure of the GPU or the path itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Fault(pub Why);

/// Memory a path gave.
#[derive(Debug)]
pub struct PathMemory {
    /// The GPU address of its first byte, a multiple of 4096.
    pub address: u64,
    /// Its bytes, a multiple of 4096.
    pub bytes: u64,
    /// Its kind; `None` for a mapping of the client's host memory.
    pub kind: Option<MemoryKind>,
    /// The memfd the host reaches it through (Pinned and Mapped memory, host mappings).
    pub host: Option<SharedRegion>,
    /// The path's own handle for it.
    pub token: u64,
}

/// What a queue reads and where it keeps its positions.
#[derive(Debug)]
pub struct QueueSpec {
    /// The packets it reads.
    pub kind: QueueKind,
    /// The GPU address of its ring, Pinned memory.
    pub ring: u64,
    /// The ring's bytes, a power of two of at most [`Path::most_ring`].
    pub bytes: u64,
    /// The GPU address of the 64-bit word it writes its read position to.
    pub read: u64,
    /// The GPU address of the 64-bit word it reads its write position from.
    pub write: u64,
    /// The doorbell whose stores tell it to read up to the stored position.
    pub doorbell: Doorbell,
    /// AQL: the device's scratch (GPU address, bytes) the queue hands every kernel; (0, 0)
    /// if none. A PM4 dispatch names its scratch itself.
    pub scratch: (u64, u64),
}

/// A queue a path made, for [`Path::retire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueHandle(pub u64);

/// How a stop ended: stopped, or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// No queue of the device runs or can write memory any more.
    Stopped,
    /// A queue may still run.
    Unknown,
}

/// What the GPU tells a device: the path calls it from its own threads.
#[derive(Clone)]
pub struct Events {
    /// A release's interrupt (or any wake-worthy event).
    pub interrupt: Arc<dyn Fn() + Send + Sync>,
    /// A fault of the device's work, as the path's GPU reported it.
    pub fault: Arc<dyn Fn(rig_proto::Fault) + Send + Sync>,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Events")
    }
}

/// The client connection a device is opened for: a path that keeps one address space per
/// client (kfd's worker processes) groups a client's devices by it; others need not look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(pub u64);

/// What one path's discovery is given.
#[derive(Debug)]
pub struct Survey<'a> {
    /// rigd's configuration (each path reads its own section).
    pub config: &'a crate::config::Config,
    /// The sysfs tree scanned (`/sys`, or a test's tree).
    pub sysfs: &'a FsPath,
    /// The GPUs listed before this path's: the paths before it in [`PATHS`], and, for a
    /// simulated path, the AMD PCI functions no path reached.
    pub listed: &'a [Found],
}

/// A GPU a path's discovery lists: served, or with why not.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its processor (or what is known of it).
    pub arch: String,
    /// The path that lists it.
    pub path: PathKind,
    /// Its PCI function, if it has one.
    pub bus: Option<String>,
    /// The bytes of its own memory.
    pub budget: u64,
    /// Whether it is simulated.
    pub simulated: bool,
    /// What drives it, or why nothing does.
    pub backend: Result<Arc<dyn Backend>, String>,
    /// Its firmware versions as discovery found them (such as `mec N, sdma M`).
    pub firmware: Option<String>,
}

/// How a path reaches its GPUs.
#[derive(Debug, Clone, Copy)]
pub enum Reach {
    /// Real GPUs, PCI functions bound to one of these kernel drivers.
    Hardware {
        /// The drivers (`amdgpu` for kfd).
        drivers: &'static [&'static str],
        /// Why the path does not reach an AMD GPU bound to one of `drivers` that its
        /// discovery did not list.
        unreached: fn(&crate::discover::PciGpu) -> String,
    },
    /// GPUs it simulates; their discovery comes after every real GPU's.
    Simulated,
}

/// One path as discovery knows it.
#[derive(Debug)]
pub struct PathInfo {
    /// Its kind.
    pub kind: PathKind,
    /// How it reaches GPUs.
    pub reach: Reach,
    /// The GPUs it lists, in its order.
    pub discover: fn(&Survey<'_>) -> Result<Vec<Found>, DiscoverError>,
}

/// Every path, in the order their GPUs are listed (real GPUs first; the simulated after
/// the AMD PCI functions no path reached).
pub static PATHS: &[PathInfo] = &[
    PathInfo {
        kind: PathKind::Kfd,
        reach: Reach::Hardware {
            drivers: &["amdgpu"],
            unreached: kfd::discover::unreached,
        },
        discover: kfd::discover::discover,
    },
    PathInfo {
        kind: PathKind::Vfio,
        reach: Reach::Hardware {
            drivers: &[rig_vfio::sysfs::VFIO_PCI],
            unreached: vfio::discover::unreached,
        },
        discover: vfio::discover::discover,
    },
    PathInfo {
        kind: PathKind::Sim,
        reach: Reach::Simulated,
        discover: sim::discover,
    },
];

/// A path's discovery failed: rigd does not start.
#[derive(Debug, thiserror::Error)]
#[error("{what} ({path:?} path)")]
pub struct DiscoverError {
    /// The path.
    pub path: PathKind,
    /// What failed.
    pub what: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// One GPU, reached one way.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The GPU.
    fn description(&self) -> &GpuDescription;

    /// A new address space on the GPU for one device of `owner`, whose events go to
    /// `events`.
    fn open(&self, owner: Owner, events: Events) -> Result<Box<dyn Path>, Refusal>;
}

/// One device's address space on a GPU: what a path does for it.
///
/// Only the daemon's state owner calls it, so methods take `&mut self`; the path's own
/// threads (a simulated queue, an interrupt handler) report through [`Events`].
pub trait Path: Send + fmt::Debug {
    /// `bytes` new bytes of `kind`, whole pages at a page-aligned GPU address. The memory
    /// reads as zero, to the GPU and (where it is shared) to the host: nothing of an earlier
    /// owner shows, and rigd relies on it to place an image by uploading only its file bytes
    /// (the sim's VRAM pages are given back with `MADV_DONTNEED` and its host memory is new
    /// memfd pages, both zero).
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal>;

    /// Maps for the GPU the `bytes` bytes at `offset` of the client's memfd `fd`.
    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal>;

    /// Maps read-only for the GPU the `bytes` bytes at `offset` (whole pages) of `region`,
    /// Pinned memory another device's path on the same GPU gave, so this address space's
    /// queues read another device's timeline word. The mapping holds the memory until freed.
    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal>;

    /// Gives back what `alloc`, `map_host` or `map_peer` gave.
    fn free(&mut self, memory: PathMemory);

    /// Writes `data` at `offset` into memory the host may not address (placing an image in
    /// Device memory).
    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault>;

    /// The nonzero context the interrupt of each of the device's releases carries
    /// (RELEASE_MEM's INT_CTXID, SDMA TRAP's INT_CONTEXT): what the path's interrupt handler
    /// knows the device's interrupts by (through KFD, the id of the signal event the path
    /// waits on, which the kernel then finds at once).
    fn interrupt(&self) -> u32;

    /// Names the device's word: from now on, each interrupt of the device's work that the
    /// path receives wakes the threads sleeping on the 32-bit word at `offset` of `memory`
    /// (Pinned memory this path gave: the timeline word's low half), in any process, as a
    /// driver's interrupt handler wakes its waiters ([`wake`]). The device calls it once,
    /// before it makes a queue; no GPU wakes the word by itself.
    fn wake_on_interrupt(&mut self, memory: &PathMemory, offset: u64) -> Result<(), Refusal>;

    /// Makes a hardware queue.
    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal>;

    /// Destroys a queue that read every packet up to its write position.
    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault>;

    /// Hands the device's grown scratch, `bytes` at `address` (Device memory of this space),
    /// to every AQL queue it made (their `amd_queue_t`'s scratch fields, read at each
    /// dispatch); queues made later get it in their [`QueueSpec`]. A path whose queues are
    /// all PM4 and SDMA has nothing to do: a PM4 dispatch names its scratch.
    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal>;

    /// The most bytes of a ring of a queue of kind `kind`, a power of two.
    fn most_ring(&self, kind: QueueKind) -> u64;

    /// The GPU's clock as its source reads it, in ticks of the description's `clock_hz`
    /// (0 where the source cannot be read).
    fn clock(&self) -> u64;

    /// One read of the GPU's clock through its source, placed on the host's
    /// `CLOCK_MONOTONIC` ([`ClockSample`]): by default [`Path::clock`] between two readings
    /// of rigd's own. A path whose source samples the host's clock itself (KFD's
    /// `GET_CLOCK_COUNTERS`) maps that sample instead.
    fn read_clock(&self) -> ClockSample {
        let before = crate::gpus::monotonic_ns();
        let gpu = self.clock();
        let after = crate::gpus::monotonic_ns();
        ClockSample {
            gpu,
            host_before_ns: before,
            host_after_ns: after,
            gap_ns: 0,
        }
    }

    /// Destroys every queue without waiting for its work; `fault` is why the device was lost.
    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped;

    /// Since when a queue of the device has been running work without pause: the earliest
    /// start of the runs its queues are still in, `None` while every queue waits for its
    /// doorbell (or none is left). Known by the path itself, never read from memory a
    /// client writes, so the hang bound and the reuse of freed memory can rest on it. A
    /// path that cannot tell must answer as if its queues always ran.
    fn busy_since(&self) -> Option<std::time::Instant>;

    /// A count that changes whenever the device's queues complete work (a release, a fence,
    /// a copy, a kernel), known by the path itself like [`Path::busy_since`]: the hang bound
    /// asks it rather than the timeline word, which the client can write. Only changes
    /// matter, not the value. A path that cannot tell answers a constant, so running queues
    /// count as stalled after the hang bound.
    fn progress(&self) -> u64;

    /// When [`Path::progress`] last changed, if the path knows, read after it: the hang bound
    /// counts a stall from it whatever the watchdog's tick was then. `None` makes the
    /// watchdog count from the look that saw the change.
    fn progressed_at(&self) -> Option<std::time::Instant> {
        None
    }
}
