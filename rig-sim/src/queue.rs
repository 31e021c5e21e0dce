//! Hardware queues: one thread per queue that sleeps on its doorbell (after polling it for
//! [`DOORBELL_POLL`] past each ring's work, as a hardware CP polls), reads its ring, and
//! reports interrupts and faults to the queue's owner.
//!
//! This module owns a queue's life (start, stop, status), the reading of dword rings (PM4 and
//! SDMA) between the read and write positions, and the delivery of interrupts and faults.
//! The meaning of packets belongs to [`crate::pm4`], [`crate::sdma`] and [`crate::aql`].
//!
//! A queue's thread checks the stop flag between packets and between chunks of a copy, and
//! every wait of a packet (WAIT_REG_MEM, POLL_REGMEM, AQL barriers) and of a kernel watches it.
//! [`Queue::stop`] sets the flag, wakes the thread whatever the client wrote in its doorbell
//! slot, and waits until the thread has ended and let go of everything it held (its address
//! space, its doorbell page): stop waits for one chunk or one packet, not for the queue's
//! work, and afterwards nothing of the queue writes memory.
//!
//! No wait of a queue's thread trusts a word a client can write. A client may clear or set
//! its doorbell slot's `sleeping` word to make a stop's wake miss the thread as it goes to
//! sleep; so stop wakes the thread again every few milliseconds until the thread has ended (a
//! wake of a thread already asleep cannot be missed), and the thread's doorbell sleep is
//! bounded by [`DOORBELL_RECHECK`] besides. The waits of packets poll their memory every
//! millisecond and watch the flag; a stop wakes the waits of its own queue alone. If a
//! thread has not ended [`STOP_WAIT`] after its stop (a bug of the simulator), stop logs it
//! and returns rather than hang its caller.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use rig_amd::gpu::QueueKind;
use rig_shm::Doorbell;
use rig_shm::layout::{MIN_RING_BYTES, RING_BASE_ALIGN};
use rig_shm::ring::{Consumer, Geometry, ReadError, RingMemory, Unit};

use crate::memory::{PageFault, Vm};
use crate::{Result, SimError, SimGpu};

/// Longest a queue's thread sleeps on its doorbell before it looks at its stop flag again.
///
/// A backstop only: [`Queue::stop`] wakes the thread again every few milliseconds until it
/// has ended, and a futex wake reaches a sleeping thread whatever the client wrote in the
/// word, so no client can make a stop wait for this. It bounds a thread that went to sleep
/// after a stop gave up on it ([`STOP_WAIT`]). Long, because every timeout wakes an idle queue
/// for nothing: each wake costs 10-30 us of CPU, and rigd serving 256 clients with 8 devices
/// each holds 4096 queues: at 10 s they cost rigd 100 ms of CPU every 10 s while all sat
/// idle (the scale bench), at 10 minutes under 2 ms.
pub const DOORBELL_RECHECK: Duration = Duration::from_secs(600);

/// How long a queue's thread keeps polling its doorbell after the work of a ring, before it
/// sleeps on the doorbell's futex: as a hardware CP polls its doorbells, so that a client
/// that submits again within this needs no system call to ring and the thread no wake-up
/// (an idle vCPU takes 10-40 us to wake on a VM). The thread spends a core for this long
/// after each ring's work, issuing spin-loop hints and yielding the core about every
/// microsecond (`rig_shm::Doorbell::poll`); an idle queue spends nothing.
pub const DOORBELL_POLL: Duration = Duration::from_micros(100);

/// How long [`Queue::stop`] waits for the queue's thread to end (it takes one copy chunk or
/// one packet, milliseconds) before it logs that the thread did not stop and returns.
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// How often [`Queue::stop`] wakes the thread again while it waits for it to end.
const STOP_REWAKE: Duration = Duration::from_millis(5);

/// Where a queue's ring and positions lie, and its doorbell.
#[derive(Debug, Clone)]
pub struct QueueDesc {
    /// The packets it reads.
    pub kind: QueueKind,
    /// GPU address of the ring, aligned to [`RING_BASE_ALIGN`] (256 bytes).
    pub ring_va: u64,
    /// Bytes of the ring: a power of two, at least [`MIN_RING_BYTES`] (256), at most the
    /// model's bound.
    pub ring_bytes: u64,
    /// GPU address of the 64-bit read position, which the queue writes.
    pub rptr_va: u64,
    /// GPU address of the 64-bit write position, which the client writes.
    pub wptr_va: u64,
    /// The doorbell the client rings after moving the write position.
    pub doorbell: Doorbell,
    /// AQL: GPU address of the queue's `amd_queue_t`, handed to kernels that ask for the
    /// queue pointer; 0 if none. With one, each kernel's scratch is read from it at the
    /// dispatch, as the hardware's packet processor reads it (a KFD queue's, found at its read
    /// pointer: [`rig_amd::aql::AmdQueue::at_read_pointer`]). Other kinds ignore it.
    pub queue_va: u64,
    /// AQL without an `amd_queue_t`: the scratch memory every kernel of the queue gets, as
    /// (GPU address, bytes); (0, 0) if none. Other kinds ignore it (a PM4 dispatch names its
    /// scratch).
    pub scratch: (u64, u64),
}

/// What raised an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptSource {
    /// A PM4 RELEASE_MEM with an INT_SEL that interrupts.
    ReleaseMem,
    /// An SDMA TRAP.
    SdmaTrap,
    /// An AQL completion signal with an event mailbox.
    Signal,
}

/// An interrupt, as delivered to a queue's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupt {
    /// The VMID of the queue.
    pub vmid: u32,
    /// The queue's id.
    pub queue: u32,
    /// What raised it.
    pub source: InterruptSource,
    /// Its context: RELEASE_MEM's INT_CTXID, TRAP's INT_CONTEXT, a signal's event id.
    pub context: u32,
    /// The queue's interrupts so far, this one included: a consumer that saw count n - 1
    /// before lost none.
    pub count: u64,
}

/// Why a queue stopped by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultReason {
    /// An access its page table refused.
    Page(PageFault),
    /// A packet (or ring state) it cannot run: unknown, malformed, or positions out of range.
    BadPacket {
        /// The queue's read position (in its units) at the packet.
        position: u64,
        /// What is wrong with it.
        reason: PacketError,
    },
    /// A dispatch that did not complete: the executor's reason (illegal instruction, no
    /// executor for the model, a page fault inside the kernel...).
    Kernel(crate::dispatch::KernelFault),
    /// A bug of the simulator (a panic while running the queue's packets), caught so that it
    /// stops this queue alone.
    Internal(String),
}

/// What is wrong with a packet a queue cannot run, or with the ring state around it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The PM4 decoder refused it.
    #[error(transparent)]
    Pm4(#[from] rig_amd::pm4::DecodeError),
    /// The AQL decoder refused it.
    #[error(transparent)]
    Aql(#[from] rig_amd::aql::DecodeError),
    /// The SDMA decoder refused it.
    #[error(transparent)]
    Sdma(#[from] rig_amd::sdma::DecodeError),
    /// The producer wrote a write position no producer following the protocol writes.
    #[error(transparent)]
    Ring(#[from] rig_shm::ring::Hostile),
    /// The packet at the read position runs past the write position.
    #[error("the packet runs past the write position")]
    PastWrite,
    /// A packet of an indirect buffer the PM4 decoder refused.
    #[error("in the indirect buffer at {address:#x}, dword {dword}: {error}")]
    Indirect {
        /// The indirect buffer's address.
        address: u64,
        /// The packet's dword within it.
        dword: usize,
        /// What the decoder said.
        error: rig_amd::pm4::DecodeError,
    },
    /// A well-formed packet whose fields the GPU cannot act on (a register window overrun,
    /// an indirect buffer too large or nested too deep, a launch that describes no work).
    #[error("{0}")]
    Unfit(String),
    /// A well-formed packet of a form hardware runs and the simulator does not (a wait on a
    /// register, a copy from a source it does not model).
    #[error("{0} is not simulated")]
    Unsimulated(String),
}

impl From<PageFault> for FaultReason {
    fn from(f: PageFault) -> Self {
        FaultReason::Page(f)
    }
}

/// A queue's fault, as recorded and reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFault {
    /// The VMID of the queue.
    pub vmid: u32,
    /// The queue's id.
    pub queue: u32,
    /// The queue's kind.
    pub kind: QueueKind,
    /// Why it faulted.
    pub reason: FaultReason,
}

impl std::fmt::Display for QueueFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            QueueKind::Pm4 => "PM4",
            QueueKind::Aql => "AQL",
            QueueKind::Sdma => "SDMA",
        };
        write!(f, "{kind} queue {} of vmid {}: ", self.queue, self.vmid)?;
        match &self.reason {
            FaultReason::Page(p) => write!(f, "{p}"),
            FaultReason::BadPacket { position, reason } => {
                write!(f, "bad packet at read position {position:#x}: {reason}")
            }
            FaultReason::Kernel(why) => write!(f, "dispatch failed: {why}"),
            FaultReason::Internal(why) => write!(f, "internal error of the simulator: {why}"),
        }
    }
}

/// A queue's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueStatus {
    /// Running or waiting for its doorbell.
    Running,
    /// Stopped by [`Queue::stop`].
    Stopped,
    /// Stopped by a fault of its work.
    Faulted(QueueFault),
}

type OnInterrupt = Arc<dyn Fn(Interrupt) + Send + Sync>;
type OnFault = Arc<dyn Fn(QueueFault) + Send + Sync>;

/// State shared by a queue's handle and its thread.
pub(crate) struct Shared {
    pub(crate) id: u32,
    pub(crate) kind: QueueKind,
    /// Set by stop and by a fault; shared with the kernel executor.
    pub(crate) stop: Arc<AtomicBool>,
    status: Mutex<QueueStatus>,
    on_interrupt: OnInterrupt,
    on_fault: OnFault,
    interrupts: AtomicU64,
    doorbell: Doorbell,
    /// When the processor began the poll it is still in, as nanoseconds past [`epoch`] plus
    /// one; 0 while it waits for its doorbell. Written by the queue's thread only, so no
    /// client word can make a queue look idle while it runs.
    busy_since: AtomicU64,
    /// Memory writes the queue's engines completed (releases, fences, copies, fills, data
    /// writes, kernels): counted by the simulator, so a client cannot fake progress.
    progress: AtomicU64,
    /// When `progress` last grew, as nanoseconds past [`epoch`] plus one (0: never); stamped
    /// before the count grows, so a reader that sees a count sees its stamp or a later one.
    progressed_at: AtomicU64,
}

impl Shared {
    /// Counts one completed memory write, stamping when.
    fn progressed(&self) {
        let at = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        self.progressed_at.fetch_max(at, Ordering::Release);
        self.progress.fetch_add(1, Ordering::Release);
    }
}

/// The instant `busy_since` and `progressed_at` count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// What a processor works with.
pub(crate) struct Ctx {
    pub(crate) gpu: Arc<SimGpu>,
    pub(crate) vm: Arc<Vm>,
    pub(crate) shared: Arc<Shared>,
}

impl Ctx {
    /// Whether the queue must stop touching memory.
    pub(crate) fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Acquire)
    }

    /// Counts a step of a long operation (a chunk of a copy or fill) as progress; true.
    pub(crate) fn moved(&self) -> bool {
        self.shared.progressed();
        true
    }

    /// Announces this engine's write of `writes` (GPU address and bytes of each run it
    /// wrote, in this address space) to the waits watching those pages.
    pub(crate) fn notify(&self, writes: &[(u64, u64)]) {
        self.shared.progressed();
        if self.gpu.events.idle() {
            return;
        }
        let mut ranges = Vec::with_capacity(writes.len());
        for &(va, bytes) in writes {
            self.vm.host_ranges(va, bytes, &mut ranges);
        }
        self.gpu.events.wake_ranges(&mut ranges);
    }

    /// Announces the end of a kernel, whose stores are not followed one by one, to the waits
    /// watching any page this address space maps writable.
    pub(crate) fn notify_kernel(&self) {
        self.shared.progressed();
        if self.gpu.events.idle() {
            return;
        }
        let mut ranges = Vec::new();
        self.vm.writable_host_ranges(&mut ranges);
        self.gpu.events.wake_ranges(&mut ranges);
    }

    /// Delivers an interrupt to the owner.
    pub(crate) fn interrupt(&self, source: InterruptSource, context: u32) {
        let count = self.shared.interrupts.fetch_add(1, Ordering::SeqCst) + 1;
        (self.shared.on_interrupt)(Interrupt {
            vmid: self.vm.vmid(),
            queue: self.shared.id,
            source,
            context,
            count,
        });
    }

    /// Waits until `check` passes (true) or the queue stops (false), spending no CPU between
    /// polls and the engine writes to what it watches: `watched`, the GPU address and bytes
    /// of each word `check` reads.
    pub(crate) fn wait_until(
        &self,
        watched: &[(u64, u64)],
        check: impl FnMut() -> std::result::Result<bool, PageFault>,
    ) -> std::result::Result<bool, PageFault> {
        let stop = &self.shared.stop;
        let vm = &self.vm;
        let pages = || {
            let mut p: Vec<u64> = watched
                .iter()
                .flat_map(|&(va, bytes)| [va, va.wrapping_add(bytes.max(1) - 1)])
                .filter_map(|va| vm.host_page(va))
                .collect();
            p.sort_unstable();
            p.dedup();
            p
        };
        self.gpu.events.wait_until(
            self.shared.id,
            &pages,
            &|| stop.load(Ordering::Acquire),
            check,
        )
    }
}

/// A packet processor of one queue kind.
pub(crate) trait Processor: Send {
    /// Runs every packet available now. Returns early, with Ok, once the queue is stopped.
    fn poll(&mut self, ctx: &Ctx) -> std::result::Result<(), FaultReason>;
}

/// A hardware queue of the simulated GPU. Dropping it stops it.
pub struct Queue {
    shared: Arc<Shared>,
    gpu: Arc<SimGpu>,
    vmid: u32,
    /// The queue's thread.
    thread: ThreadId,
    /// Until a stop has seen the thread end: its handle, and a channel that disconnects once
    /// the thread has dropped everything it held.
    worker: Mutex<Option<(JoinHandle<()>, mpsc::Receiver<()>)>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("id", &self.shared.id)
            .field("vmid", &self.vmid)
            .field("kind", &self.shared.kind)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// The queue's id, unique on its GPU.
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The queue's VMID.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    /// The queue's kind.
    pub fn kind(&self) -> QueueKind {
        self.shared.kind
    }

    /// Its state; a fault is recorded here before it is reported.
    pub fn status(&self) -> QueueStatus {
        self.shared
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Interrupts delivered so far.
    pub fn interrupts(&self) -> u64 {
        self.shared.interrupts.load(Ordering::SeqCst)
    }

    /// How many memory writes the queue's engines have completed (releases, fences, copies,
    /// fills, data writes, whole kernels). Counted by the simulator itself, never read from
    /// memory a client writes, so a hang bound can tell a queue that runs without getting
    /// anywhere (an indirect buffer chained to itself, a wait that never passes) from one
    /// that works.
    pub fn progress(&self) -> u64 {
        self.shared.progress.load(Ordering::Acquire)
    }

    /// When [`Queue::progress`] last grew, `None` if it never did: read after the count, it
    /// is that count's stamp or a later one's, so a hang bound counted from it is never early.
    pub fn progressed_at(&self) -> Option<Instant> {
        match self.shared.progressed_at.load(Ordering::Acquire) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }

    /// When the queue's processor began the run of packets it is still executing (a poll
    /// that has not found its ring empty yet), or `None` while it waits for its doorbell or
    /// has stopped. Kept by the simulator itself, never read from memory a client writes,
    /// so a hang bound can rest on it.
    pub fn busy_since(&self) -> Option<Instant> {
        match self.shared.busy_since.load(Ordering::Acquire) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }

    /// Stops the queue without waiting for its work: once this returns, the queue's thread
    /// has ended and dropped what it held, so nothing of the queue touches memory. It waits
    /// for the copy chunk or packet in flight, at most [`STOP_WAIT`] (past that it logs the
    /// stuck thread and returns). Called from the queue's own callbacks it only sets the flag,
    /// and the queue stops after the callback.
    pub fn stop(&self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::SeqCst);
        {
            let mut st = s.status.lock().unwrap_or_else(|e| e.into_inner());
            if *st == QueueStatus::Running {
                *st = QueueStatus::Stopped;
            }
        }
        // Orders the flag before the doorbell's sleeping word (see rig_shm::doorbell).
        fence(Ordering::SeqCst);
        self.wake();
        if self.thread == std::thread::current().id() {
            return;
        }
        // Concurrent stops wait here for the first one's join.
        let mut worker = self.worker.lock().unwrap_or_else(|e| e.into_inner());
        let Some((handle, ended)) = worker.take() else {
            return;
        };
        let began = Instant::now();
        loop {
            match ended.recv_timeout(STOP_REWAKE) {
                Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                    // It has dropped everything; what is left is its exit.
                    let _ = handle.join();
                    return;
                }
                Err(RecvTimeoutError::Timeout) if began.elapsed() < STOP_WAIT => {
                    // A wake can be lost to a client writing the sleeping word while the
                    // thread goes to sleep; one sent while it sleeps is not.
                    self.wake();
                }
                Err(RecvTimeoutError::Timeout) => {
                    tracing::error!(
                        queue = s.id,
                        vmid = self.vmid,
                        kind = ?s.kind,
                        waited_ms = STOP_WAIT.as_millis() as u64,
                        "a queue thread of the simulated GPU did not end after its stop; \
                         leaving it (a bug of rig-sim: it keeps its address space alive)"
                    );
                    return;
                }
            }
        }
    }

    /// Wakes the queue's thread wherever it waits, whatever its doorbell slot says.
    fn wake(&self) {
        self.shared.doorbell.wake();
        self.gpu.events.wake_queue(self.shared.id);
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Validates `desc` and starts its queue.
pub(crate) fn start(
    gpu: Arc<SimGpu>,
    vm: Arc<Vm>,
    desc: QueueDesc,
    on_interrupt: OnInterrupt,
    on_fault: OnFault,
) -> Result<Queue> {
    let bad = |why: String| Err(SimError::Queue(why));
    let most = gpu.model().most_ring(desc.kind);
    if !desc.ring_bytes.is_power_of_two()
        || desc.ring_bytes < MIN_RING_BYTES
        || desc.ring_bytes > most
    {
        return bad(format!(
            "ring of {} bytes: it must be a power of two from {MIN_RING_BYTES} bytes to {most}",
            desc.ring_bytes
        ));
    }
    if !desc.ring_va.is_multiple_of(RING_BASE_ALIGN) {
        return bad(format!(
            "ring address {:#x} is not {RING_BASE_ALIGN}-byte aligned",
            desc.ring_va
        ));
    }
    if !desc.rptr_va.is_multiple_of(8) || !desc.wptr_va.is_multiple_of(8) {
        return bad(format!(
            "read and write positions ({:#x}, {:#x}) must be 8-byte aligned",
            desc.rptr_va, desc.wptr_va
        ));
    }
    let processor: Box<dyn Processor> = match desc.kind {
        QueueKind::Pm4 => Box::new(crate::pm4::Pm4::new(&desc, gpu.model())),
        QueueKind::Sdma => Box::new(crate::sdma::Sdma::new(&desc, gpu.model())),
        QueueKind::Aql => Box::new(crate::aql::Aql::new(&desc, gpu.model())),
    };
    let id = gpu.next_queue.fetch_add(1, Ordering::Relaxed);
    let shared = Arc::new(Shared {
        id,
        kind: desc.kind,
        stop: Arc::new(AtomicBool::new(false)),
        status: Mutex::new(QueueStatus::Running),
        on_interrupt,
        on_fault,
        interrupts: AtomicU64::new(0),
        doorbell: desc.doorbell.clone(),
        busy_since: AtomicU64::new(0),
        progress: AtomicU64::new(0),
        progressed_at: AtomicU64::new(0),
    });
    let vmid = vm.vmid();
    let ctx = Ctx {
        gpu: gpu.clone(),
        vm,
        shared: shared.clone(),
    };
    let (ended_tx, ended) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name(format!("rig-sim-q{id}"))
        .spawn(move || {
            // Dropped last, after `run` dropped the context and the processor.
            let _ended = ended_tx;
            run(ctx, processor);
        })
        .map_err(SimError::Thread)?;
    Ok(Queue {
        shared,
        gpu,
        vmid,
        thread: handle.thread().id(),
        worker: Mutex::new(Some((handle, ended))),
    })
}

/// A queue's thread.
fn run(ctx: Ctx, mut processor: Box<dyn Processor>) {
    let s = ctx.shared.clone();
    // The doorbell's value when the thread last went to sleep (or started): a run of
    // packets that began with another value followed a ring.
    let mut rung = s.doorbell.value();
    loop {
        // Read before polling: a ring after the poll read the write position then differs.
        let seen = s.doorbell.value();
        let fault = {
            if ctx.stopped() {
                return;
            }
            let began = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
            s.busy_since.store(began + 1, Ordering::Release);
            // A panic is a bug of the simulator; it must stop this queue, not the daemon.
            let polled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| processor.poll(&ctx)))
                    .unwrap_or_else(|panic| {
                        let why = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a panic".into());
                        Err(FaultReason::Internal(why))
                    });
            s.busy_since.store(0, Ordering::Release);
            match polled {
                Ok(()) => None,
                Err(reason) if !ctx.stopped() => {
                    let fault = QueueFault {
                        vmid: ctx.vm.vmid(),
                        queue: s.id,
                        kind: s.kind,
                        reason,
                    };
                    s.stop.store(true, Ordering::SeqCst);
                    *s.status.lock().unwrap_or_else(|e| e.into_inner()) =
                        QueueStatus::Faulted(fault.clone());
                    Some(fault)
                }
                Err(_) => return,
            }
        };
        if let Some(fault) = fault {
            // Reported after the poll, so the owner may stop other queues from the callback
            // (stopping this one from there only sets its flag).
            (s.on_fault)(fault);
            return;
        }
        // After a ring, poll the doorbell for DOORBELL_POLL, as a hardware CP polls: the
        // next ring of a client that submits again soon costs neither side a wake-up. The
        // poll yields its core often: a spin that did not (tried before) took the CPU from
        // the client on a machine with few cores.
        let stop = || s.stop.load(Ordering::SeqCst);
        if seen != rung && s.doorbell.poll(seen, DOORBELL_POLL, stop).is_some() {
            rung = seen;
            continue;
        }
        rung = seen;
        // Sleep on the doorbell's futex until a ring, bounded (see DOORBELL_RECHECK). Any
        // wake polls: a ring with the value seen (an AQL producer may ring its last index
        // again) still means "look".
        s.doorbell.wait(seen, Some(DOORBELL_RECHECK), stop);
    }
}

/// A ring of dwords (PM4 or SDMA) between a read and a write position: `rig_shm`'s
/// [`Consumer`], reading through the queue's page tables.
#[derive(Debug)]
pub(crate) struct DwordRing {
    ring: Consumer,
    /// The words fetched last, kept so that a fetch allocates only when the ring grew.
    words: Vec<u32>,
}

/// Most dwords fetched from a ring at once.
const FETCH_DWORDS: u64 = 1 << 16;

/// The queue's memory as its ring's consumer reads it.
impl RingMemory for Vm {
    type Fault = PageFault;

    fn load_position(&self, at: u64) -> std::result::Result<u64, PageFault> {
        self.load_u64(at, Ordering::Acquire)
    }

    fn store_position(&self, at: u64, value: u64) -> std::result::Result<(), PageFault> {
        self.store_u64(at, value, Ordering::Release)
    }

    fn read_dwords(&self, at: u64, out: &mut [u32]) -> std::result::Result<(), PageFault> {
        // Through a small buffer on the stack: packets are little-endian dwords.
        let mut bytes = [0u8; 1024];
        for (i, chunk) in out.chunks_mut(bytes.len() / 4).enumerate() {
            let b = &mut bytes[..4 * chunk.len()];
            self.read(at + (i * 1024) as u64, b)?;
            for (w, c) in chunk.iter_mut().zip(b.chunks_exact(4)) {
                *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(())
    }
}

impl DwordRing {
    /// The ring of `desc`, whose positions count `unit`s (PM4 or SDMA).
    pub(crate) fn new(desc: &QueueDesc, unit: Unit) -> DwordRing {
        // PANIC: `start` checked the ring's size against the same bound.
        let geometry = Geometry::new(desc.ring_bytes, unit).expect("a checked ring size");
        DwordRing {
            ring: Consumer::new(geometry, desc.ring_va, desc.rptr_va, desc.wptr_va),
            words: Vec::new(),
        }
    }

    fn bad(&self, reason: PacketError) -> FaultReason {
        FaultReason::BadPacket {
            position: self.ring.position(),
            reason,
        }
    }

    /// Runs packets from the read position up to the write position. `step` decodes and runs
    /// the packet at the start of its words and returns the dwords it took, or None if the
    /// packet runs past the words given.
    pub(crate) fn run(
        &mut self,
        ctx: &Ctx,
        mut step: impl FnMut(&Ctx, &[u32], u64) -> std::result::Result<Option<usize>, FaultReason>,
    ) -> std::result::Result<(), FaultReason> {
        let vm = &*ctx.vm;
        loop {
            if ctx.stopped() {
                return Ok(());
            }
            let avail = match self.ring.available(vm) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(ReadError::Fault(f)) => return Err(f.into()),
                Err(ReadError::Hostile(h)) => return Err(self.bad(h.into())),
            };
            let n = avail.min(FETCH_DWORDS);
            let mut words = std::mem::take(&mut self.words);
            let ran = self.run_words(ctx, &mut words, n, avail, &mut step);
            self.words = words;
            if !ran? {
                return Ok(());
            }
        }
    }

    /// Fetches `n` of the `avail` dwords into `words` and runs their packets; false once the
    /// queue stopped.
    fn run_words(
        &mut self,
        ctx: &Ctx,
        words: &mut Vec<u32>,
        n: u64,
        avail: u64,
        step: &mut impl FnMut(&Ctx, &[u32], u64) -> std::result::Result<Option<usize>, FaultReason>,
    ) -> std::result::Result<bool, FaultReason> {
        let vm = &*ctx.vm;
        self.ring.fetch(vm, n, words)?;
        let mut i = 0usize;
        while i < words.len() {
            if ctx.stopped() {
                return Ok(false);
            }
            let at = self.ring.position();
            match step(ctx, &words[i..], at)? {
                // A packet cut short by a stop is not consumed.
                Some(_) if ctx.stopped() => return Ok(false),
                Some(took) => {
                    i += took;
                    self.ring.advance(vm, took as u64)?;
                }
                None if n < avail && i > 0 => break,
                None => {
                    return Err(self.bad(PacketError::PastWrite));
                }
            }
        }
        Ok(true)
    }
}

impl Ctx {
    /// Runs a launch on the GPU's executor, to completion.
    pub(crate) fn execute(
        &self,
        dispatch: &rig_isa::Dispatch,
    ) -> std::result::Result<(), FaultReason> {
        let config = self.gpu.config();
        let vmid = self.vm.vmid();
        let counted = self
            .gpu
            .perfmon
            .as_ref()
            .and_then(|p| Some((p, p.counting(vmid)?)));
        let r = match counted {
            Some((perfmon, engines)) => crate::dispatch::by_engine(
                config.executor.as_ref(),
                &self.vm,
                dispatch,
                &self.shared.stop,
                self.gpu.model(),
                config.exec_threads,
                engines,
            )
            .map(|per_engine| perfmon.add(vmid, &per_engine)),
            None => crate::dispatch::spread(
                config.executor.as_ref(),
                &self.vm,
                dispatch,
                &self.shared.stop,
                self.gpu.model(),
                config.exec_threads,
            ),
        };
        // Whatever the kernel wrote before it ended may satisfy a wait.
        self.notify_kernel();
        r.map_err(FaultReason::Kernel)
    }
}
