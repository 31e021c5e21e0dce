//! The `kfd` path: a GPU reached through Linux's amdgpu driver (`/dev/kfd`), through
//! rig-kfd's system-call seam, so the same code runs on the machine's KFD and on the
//! emulated one (`rig-kfd-emu`).
//!
//! One [`KfdBackend`] per KFD GPU node holds its process's one open of KFD (the kernel
//! makes one KFD process per address space, so every device of the process shares its GPU
//! VM; GPU addresses are therefore handed out by the backend). rigd runs this code in a
//! worker process per client ([`super::worker`]), so a client's devices share a VM with
//! no other client's. It binds the render node's VM (ACQUIRE_VM), announces the
//! runtime (RUNTIME_ENABLE), and runs one event thread over three events: the process's
//! signal event (id 1; the kernel keeps id 0), which rig's releases name with interrupt
//! context 0, so that the kernel finds it by searching the written slots, and whose slot the
//! thread arms before each wait (KFD signals an event from an interrupt only if its slot was
//! written);
//! the memory-exception event, whose faulting address picks the device it reaches; and the
//! hardware-exception event, which reaches every device.
//!
//! Memory kinds (`docs/client.md`) map so: Device is VRAM the host does not address (no
//! PUBLIC flag, so it spends none of the BAR, which is 256 MiB on a GPU without resizable
//! BAR), Pinned is rigd's memfd registered as USERPTR, Mapped is PUBLIC VRAM exported as a
//! dma-buf (KFD 1.12; none where the BAR is small, as the topology's banks say), and
//! map_host registers the client's memfd as USERPTR. `upload` places bytes into Device
//! memory through the path's own staging copy: a GTT buffer of [`STAGING_BYTES`] and an
//! SDMA queue of its own, made at the first upload and destroyed at stop, each piece
//! copied by a COPY_LINEAR whose fence the path waits for at most [`STAGING_BOUND`].
//! A queue gets its EOP buffer and
//! context-save area as KFD asks ([`rig_kfd::queue`]), and, where the client keeps its
//! ring and positions in one allocation, second USERPTR mappings of the ring's pages and
//! the positions' page (KFD since Linux 6.12 takes a ring only as a mapping of exactly its
//! size and each position only in a mapping of exactly one page); the client's doorbell (shared
//! memory) is forwarded to the KFD doorbell by a thread per queue, which spins for
//! [`FORWARD_SPIN`] after a forward and otherwise sleeps on the client's doorbell until it
//! is rung; before each forward it stores to the GPU's HDP flush register (KFD's MMIO_REMAP
//! page), so the client's writes through the BAR are in memory before the command processor
//! reads its packets, and without that page Mapped memory is refused. amdgpu does not bound
//! how long a user queue's work runs, so rigd's hang watchdog does ([`HANG_MS`]).
//!
//! An AQL queue also gets its `amd_queue_t` ([`rig_amd::aql::AmdQueue`]), a Pinned page of
//! its own: the ring, and the scratch every kernel gets (the device's, `QueueSpec::scratch`),
//! which the command processor reads there. Its write and read dispatch ids are the queue's
//! write and read pointers for KFD, as ROCr gives them; the forwarder stores the client's
//! write position in the first before it rings (with the last packet's index, as ROCr does)
//! and passes the second on to the client's read position, at each ring and wake and every
//! [`AQL_READ_POLL`] while packets are in flight.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rig_amd::aql::{AmdQueue, amd_queue};
use rig_kfd::abi;
use rig_kfd::kfd::{HostPages, Kfd, KfdError};
use rig_kfd::queue::{ContextSave, EOP_BUFFER_BYTES};
use rig_kfd::seam::{Kernel, Pages};
use rig_kfd::topology::Node;
use rig_proto::messages::{MemoryKind, PathKind, QueueKind};
use rig_shm::SharedRegion;

use super::{
    Backend, Events, Fault, GpuDescription, MapRefusal, Path, PathMemory, QueueCosts, QueueHandle,
    QueueMemory, QueueSpec, Refusal, Stopped,
};

/// The hang bound of KFD devices, in milliseconds: amdgpu bounds no user queue's work.
pub const HANG_MS: u64 = 2000;
/// The most bytes of a ring through KFD (its `ring_size` in `linux/kfd_ioctl.h` is 32 bits;
/// the largest power of two below that).
pub const MOST_RING: u64 = 1 << 31;
/// Bytes of KFD's per-process doorbell page (its doorbell slice).
const DOORBELL_SLICE: u64 = 8192;
/// How long the event thread's wait lasts before it re-checks that its backend lives: an
/// idle client's worker makes one WAIT_EVENTS a second.
const EVENT_WAIT_MS: u32 = 1000;
/// How long a doorbell forwarder spins for the client's next ring after forwarding one,
/// before it sleeps on the doorbell's futex: the ring that comes meanwhile (work in
/// flight) is forwarded without a wake-up, and an idle client costs nothing.
pub const FORWARD_SPIN: Duration = Duration::from_micros(50);
const PAGE: u64 = 4096;
/// Bytes of host memory an upload into Device memory passes through at a time: the path's
/// staging buffer (GTT), reused for every piece of an upload.
pub const STAGING_BYTES: u64 = 1 << 20;
/// How long an upload waits for a staging copy's fence before it reports a fault: the
/// hang bound, as long as any work may run unseen (an SDMA engine copies a MiB in tens of
/// microseconds).
pub const STAGING_BOUND: Duration = Duration::from_millis(HANG_MS);
/// Bytes of the staging queue's SDMA ring.
const STAGING_RING: u64 = 4096;
/// Words of one staging submission: a COPY_LINEAR, a FENCE, NOPs to a 64-byte slot, so the
/// ring's end is always a submission's end.
const STAGING_SLOT_WORDS: usize = 16;
/// Where the staging queue's page of words keeps its read position, write position and
/// fence word (each on a cache line of its own). Ring, words and bytes are allocations of
/// their own: KFD (Linux 6.12+) wants the ring's mapping its size exactly and each
/// position's mapping one page.
const STAGING_RPTR: u64 = 0;
const STAGING_WPTR: u64 = 64;
const STAGING_FENCE: u64 = 128;
/// How often a doorbell forwarder passes an AQL queue's read position on to the client
/// while its packets are in flight (it does at each ring and wake besides).
pub const AQL_READ_POLL: Duration = Duration::from_millis(1);

/// A path's listener of the backend's events: its device's callbacks and address ranges.
#[derive(Debug)]
struct Listener {
    events: Events,
    ranges: Mutex<Vec<(u64, u64)>>,
    interrupts: AtomicU64,
    /// When `interrupts` last grew, as nanoseconds past [`stamp_epoch`] plus one (0: never);
    /// stamped before the count grows, so a reader of the count sees its stamp or a later one.
    interrupted_at: AtomicU64,
}

/// The instant `Listener::interrupted_at` counts from.
fn stamp_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// rigd's one KFD process (the kernel makes one per address space): the open KFD and the
/// event thread every GPU's devices share.
#[derive(Debug)]
pub struct KfdProcess {
    kfd: Kfd,
    /// Every device's listener, with its GPU's id.
    listeners: Mutex<Vec<(u32, Weak<Listener>)>>,
}

impl KfdProcess {
    /// Opens KFD through `kernel`, negotiates its version, announces the runtime and starts
    /// the event thread.
    pub fn open(kernel: Arc<dyn Kernel>) -> Result<Arc<KfdProcess>, String> {
        let kfd = Kfd::open(kernel).map_err(|e| e.to_string())?;
        kfd.runtime_enable().map_err(|e| e.to_string())?;
        let process = Arc::new(KfdProcess {
            kfd,
            listeners: Mutex::new(Vec::new()),
        });
        start_events(&process)?;
        Ok(process)
    }
}

#[derive(Debug)]
struct Shared {
    process: Arc<KfdProcess>,
    kfd: KfdRef,
    gpu_id: u32,
    node: Node,
    _render: OwnedFd,
    next_va: Mutex<(u64, u64)>,
    doorbells: Mutex<Option<Arc<Pages>>>,
    /// The GPU's HDP flush page (MMIO_REMAP) and its handle, or why KFD gave none.
    hdp: Result<(Arc<Pages>, u64), String>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Ok((_, handle)) = &self.hdp
            && let Err(e) = self.kfd.free(*handle)
        {
            tracing::warn!(error = %e, "freeing the HDP flush page failed");
        }
    }
}

/// Allocates and maps the HDP flush page of GPU `gpu_id` at `va` (one page): the
/// register page KFD remaps into the process (`ALLOC_MEM_FLAGS_MMIO_REMAP`, mapped through
/// `/dev/kfd` at the offset the allocation gives), whose `MMIO_REMAP_HDP_MEM_FLUSH_CNTL`
/// the doorbell forwarders store to.
fn map_hdp(kfd: &Kfd, gpu_id: u32, va: u64) -> Result<(Arc<Pages>, u64), String> {
    let flags = abi::ALLOC_MEM_FLAGS_MMIO_REMAP
        | abi::ALLOC_MEM_FLAGS_WRITABLE
        | abi::ALLOC_MEM_FLAGS_COHERENT;
    let (handle, offset) = kfd
        .alloc(gpu_id, va, PAGE, flags)
        .map_err(|e| e.to_string())?;
    match kfd.mmap("the HDP flush page", offset, PAGE as usize) {
        Ok(p) => Ok((Arc::new(p), handle)),
        Err(e) => {
            let _ = kfd.free(handle);
            Err(e.to_string())
        }
    }
}

/// The process's KFD, reached from a GPU's shared state.
#[derive(Debug)]
struct KfdRef(Arc<KfdProcess>);

impl std::ops::Deref for KfdRef {
    type Target = Kfd;
    fn deref(&self) -> &Kfd {
        &self.0.kfd
    }
}

/// A GPU reached through KFD.
#[derive(Debug)]
pub struct KfdBackend {
    shared: Arc<Shared>,
    desc: GpuDescription,
}

fn refused(e: KfdError) -> Refusal {
    match &e {
        KfdError::Ioctl { errno, .. } if errno.0 == libc::ENOMEM => Refusal::Lacking(e.to_string()),
        KfdError::Ioctl { errno, .. } if errno.0 == libc::EPERM => Refusal::Full(e.to_string()),
        _ => Refusal::Refused(e.to_string()),
    }
}

/// CREATE_QUEUE's refusals, each naming what the kernel's errno says of the queue (its
/// ENOSPC is the process's queues on the GPU, its ENOMEM the process's queue ids, not memory).
fn queue_refused(e: KfdError, args: &abi::CreateQueueArgs) -> Refusal {
    match &e {
        KfdError::Ioctl { errno, .. } if errno.0 == libc::ENOSPC => Refusal::Full(format!(
            "KFD allows the process no more queues on this GPU (127 a process, 255 on GC \
             9.4.3; a device takes two): {e}"
        )),
        KfdError::Ioctl { errno, .. } if errno.0 == libc::ENOMEM => Refusal::Full(format!(
            "KFD has no queue id left for the process (1024 across its GPUs): {e}"
        )),
        KfdError::Ioctl { errno, .. } if errno.0 == libc::EPERM => Refusal::Full(format!(
            "the GPU holds as many queues as KFD allows (amdgpu's max_num_of_queues_per_device): {e}"
        )),
        KfdError::Ioctl { errno, .. } if errno.0 == libc::EINVAL => Refusal::Refused(format!(
            "KFD refused the queue's buffers: a {}-byte ring, a {}-byte EOP buffer, a {}-byte \
             context-save area with a {}-byte control stack (rig_kfd::queue's sizes for this \
             GPU, which this kernel does not take), each buffer a mapping of exactly its \
             size and each position one of exactly a page (Linux 6.12's rule){}: {e}",
            args.ring_size,
            args.eop_buffer_size,
            args.ctx_save_restore_size,
            args.ctl_stack_size,
            if args.queue_type == abi::QUEUE_TYPE_COMPUTE_AQL {
                ", read and write pointers in the amd_queue_t's page of their own"
            } else {
                ""
            }
        )),
        _ => refused(e),
    }
}

impl KfdBackend {
    /// The GPU of topology node `node`, in rigd's KFD process `process`.
    pub fn new(process: Arc<KfdProcess>, node: Node) -> Result<KfdBackend, String> {
        node.gpu().map_err(|e| e.to_string())?;
        let kfd = &process.kfd;
        let minor = node
            .drm_render_minor()
            .ok_or_else(|| format!("KFD node {} has no render node", node.index))?;
        let render = kfd
            .acquire_vm(node.gpu_id, minor)
            .map_err(|e| e.to_string())?;
        let ap = kfd
            .apertures()
            .map_err(|e| e.to_string())?
            .into_iter()
            .find(|a| a.gpu_id == node.gpu_id)
            .ok_or_else(|| format!("KFD gave no aperture for GPU {:#x}", node.gpu_id))?;
        let base = ap.gpuvm_base.div_ceil(PAGE) * PAGE;
        // The HDP page takes the aperture's first page (and a guard page after it).
        let hdp = map_hdp(kfd, node.gpu_id, base);
        if let Err(why) = &hdp {
            tracing::info!(gpu = node.gpu_id, %why, "no HDP flush page: Mapped memory is refused");
        }
        let base = base + 2 * PAGE;
        let clock_hz = measure_clock_hz(kfd, node.gpu_id)?;
        let desc = describe(&node, clock_hz)?;
        let shared = Arc::new(Shared {
            kfd: KfdRef(process.clone()),
            process,
            gpu_id: node.gpu_id,
            node,
            _render: render,
            next_va: Mutex::new((base, ap.gpuvm_limit)),
            doorbells: Mutex::new(None),
            hdp,
        });
        Ok(KfdBackend { shared, desc })
    }
}

/// What the path knows of the GPU of topology node `node` whose counter runs at `clock_hz`.
pub fn describe(node: &Node, clock_hz: u64) -> Result<GpuDescription, String> {
    let gpu = node.gpu().map_err(|e| e.to_string())?.clone();
    let wgps = node.wgps(gpu.hal());
    Ok(GpuDescription {
        gpu,
        kind: PathKind::Kfd,
        budget: node.vram_bytes(),
        host_visible: node.host_visible_vram_bytes(),
        bus: Some(node.bus()),
        clock_hz,
        mec: node.mec_firmware(),
        wgps,
        cache_bytes: node.cache_bytes(),
        hang_ms: Some(HANG_MS),
        maps_host: true,
        client_cost: Some(ClientCost::of(node)),
        queue_memory: queue_costs(node),
    })
}

/// What [`KfdPath::queue`] makes for each kind of queue besides its ring (the second
/// mappings of the ring and positions are the client's pages): a compute queue's EOP buffer
/// and context-save area in VRAM, and an AQL queue's `amd_queue_t` page of host memory.
pub fn queue_costs(node: &Node) -> QueueCosts {
    let compute = QueueMemory {
        gpu: ClientCost::of(node).queue_bytes,
        host: 0,
    };
    QueueCosts {
        pm4: compute,
        aql: QueueMemory {
            host: PAGE,
            ..compute
        },
        sdma: QueueMemory::default(),
    }
}

/// Processes KFD's scheduler runs at once on a GPU with graphics (GFX10 to GFX12): amdgpu
/// keeps VMID 0 for the system, 1 to 7 for its own graphics and compute, and 8 to 15 for
/// KFD (`gmc_v11_0_sw_init`, `gmc_v12_0_sw_init`: `adev->vm_manager.first_kfd_vmid = 8`
/// of `AMDGPU_NUM_VMID` 16), one VMID a mapped process.
pub const COMPUTE_VMIDS: u32 = 8;

/// Processes KFD's scheduler runs at once on a compute-only GPU (CDNA: GC 9.4.1, 9.4.2 and
/// the multi-AID 9.4.3 and 9.5.0, so gfx942 and gfx950): `gmc_v9_0_sw_init` sets
/// `first_kfd_vmid` to 3 there ("3 for compute-only GPUs"), leaving VMIDs 3 to 15 to KFD.
pub const COMPUTE_ONLY_VMIDS: u32 = 13;

/// Processes KFD's scheduler runs at once on a GPU of generation `generation`: the VMIDs
/// amdgpu keeps for KFD ([`COMPUTE_VMIDS`], [`COMPUTE_ONLY_VMIDS`]).
pub fn compute_vmids(generation: rig_amd::gpu::Generation) -> u32 {
    match generation {
        // rig's GFX9 GPUs are CDNA3 and CDNA4, which have no graphics.
        rig_amd::gpu::Generation::Gfx9 => COMPUTE_ONLY_VMIDS,
        rig_amd::gpu::Generation::Gfx11 | rig_amd::gpu::Generation::Gfx12 => COMPUTE_VMIDS,
    }
}

/// What a client (one worker process, one KFD process) costs on a GPU, and how many fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCost {
    /// VRAM bytes a compute queue takes besides its ring: its EOP buffer and the
    /// context-save area KFD asks for ([`rig_kfd::queue::ContextSave`]).
    pub queue_bytes: u64,
    /// Clients whose queues the GPU runs at once ([`compute_vmids`]); past it KFD's
    /// scheduler time-slices the processes' queues (oversubscription).
    pub at_once: u32,
    /// Compute queues whose buffers the GPU's VRAM holds, nothing else allocated.
    pub queues_fit: u64,
}

impl ClientCost {
    /// The cost on the GPU of `node`.
    pub fn of(node: &Node) -> ClientCost {
        let queue_bytes =
            EOP_BUFFER_BYTES + page_round(ContextSave::of(node).total_bytes()).unwrap_or(0);
        ClientCost {
            queue_bytes,
            at_once: node
                .gpu()
                .map_or(COMPUTE_VMIDS, |g| compute_vmids(g.generation)),
            queues_fit: node.vram_bytes() / queue_bytes.max(1),
        }
    }
}

/// The most bytes of a ring of a queue of kind `kind` on the GPU of `node`.
pub fn most_ring(node: &Node, kind: QueueKind) -> u64 {
    let k = match kind {
        QueueKind::Pm4 => rig_amd::gpu::QueueKind::Pm4,
        QueueKind::Aql => rig_amd::gpu::QueueKind::Aql,
        QueueKind::Sdma => rig_amd::gpu::QueueKind::Sdma,
    };
    node.gpu().map_or(0, |g| g.most_ring(k)).min(MOST_RING)
}

/// The GPU counter's rate, from two GET_CLOCK_COUNTERS 20 ms apart, to the nearest MHz.
fn measure_clock_hz(kfd: &Kfd, gpu_id: u32) -> Result<u64, String> {
    let a = kfd.clock_counters(gpu_id).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(20));
    let b = kfd.clock_counters(gpu_id).map_err(|e| e.to_string())?;
    let ticks = b.gpu_clock_counter.saturating_sub(a.gpu_clock_counter) as f64;
    let ns = b
        .cpu_clock_counter
        .saturating_sub(a.cpu_clock_counter)
        .max(1) as f64;
    let mhz = (ticks * 1e3 / ns).round() as u64;
    if mhz == 0 {
        return Err("the GPU's clock counter did not move over 20 ms".into());
    }
    Ok(mhz * 1_000_000)
}

fn start_events(process: &Arc<KfdProcess>) -> Result<(), String> {
    let kfd = &process.kfd;
    let signal = kfd
        .create_event(abi::EVENT_SIGNAL, true, 0, 0)
        .map_err(|e| e.to_string())?;
    let page = kfd
        .mmap(
            "the event page",
            signal.event_page_offset,
            abi::SIGNAL_EVENT_LIMIT as usize * 8,
        )
        .map_err(|e| e.to_string())?;
    let memory = kfd
        .create_event(abi::EVENT_MEMORY, true, 0, 0)
        .map_err(|e| e.to_string())?;
    let hw = kfd
        .create_event(abi::EVENT_HW_EXCEPTION, true, 0, 0)
        .map_err(|e| e.to_string())?;
    // Armed before any queue runs: an interrupt (naming context 0) signals it only then.
    page.atomic_u64(signal.event_slot_index as usize * 8)
        .store(1, Ordering::Release);
    let weak = Arc::downgrade(process);
    std::thread::Builder::new()
        .name("rigd-kfd-events".into())
        .spawn(move || {
            event_loop(
                weak,
                page,
                signal.event_slot_index,
                [signal.event_id, memory.event_id, hw.event_id],
            )
        })
        .map_err(|e| format!("no thread for KFD's events: {e}"))?;
    Ok(())
}

fn event_loop(process: Weak<KfdProcess>, page: Pages, slot: u32, ids: [u32; 3]) {
    let slot = slot as usize * 8;
    // Ends once rigd no longer holds the process (every backend dropped).
    while let Some(s) = process.upgrade() {
        let mut wait = ids.map(abi::EventData::waiting_for);
        let result = s.kfd.wait_events(&mut wait, EVENT_WAIT_MS);
        // The devices open now, after the wait: one opened during it gets its wake too.
        let listeners: Vec<(u32, Arc<Listener>)> = s
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|(g, l)| l.upgrade().map(|l| (*g, l)))
            .collect();
        match result {
            Ok(abi::WAIT_RESULT_COMPLETE) => {}
            Ok(_) => continue,
            Err(e) => {
                for (_, l) in &listeners {
                    (l.events.fault)(rig_proto::Fault::new(
                        rig_proto::FaultKind::Internal,
                        format!("waiting for KFD's events failed: {e}"),
                    ));
                }
                return;
            }
        }
        // Re-armed before the devices look at their words: a release whose interrupt KFD
        // dropped while the slot was acknowledged wrote its word before that interrupt,
        // so before this store, so before the devices' checks below.
        page.atomic_u64(slot).store(1, Ordering::Release);
        // Every device checks its own word; an interrupt of one wakes all of them.
        let at = u64::try_from(stamp_epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        for (_, l) in &listeners {
            l.interrupted_at.fetch_max(at, Ordering::Release);
            l.interrupts.fetch_add(1, Ordering::Release);
            (l.events.interrupt)();
        }
        let m = wait[1].memory_exception();
        if m.gpu_id != 0 {
            let read_only = m.failure.read_only != 0;
            let why = rig_proto::Fault {
                address: Some(m.va),
                // A read-only page refuses only writes; KFD does not say which access
                // found a page not present.
                write: read_only.then_some(true),
                ..rig_proto::Fault::new(
                    rig_proto::FaultKind::MemoryFault,
                    if read_only {
                        "write to a read-only page"
                    } else {
                        "page not present"
                    },
                )
            };
            let of_gpu: Vec<&Arc<Listener>> = listeners
                .iter()
                .filter(|(g, _)| *g == m.gpu_id)
                .map(|(_, l)| l)
                .collect();
            let owner: Vec<&Arc<Listener>> = of_gpu
                .iter()
                .copied()
                .filter(|l| {
                    l.ranges
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .any(|(a, b)| m.va >= *a && m.va < *b)
                })
                .collect();
            let to = if owner.is_empty() { of_gpu } else { owner };
            for l in to {
                (l.events.fault)(why.clone());
            }
        }
        let h = wait[2].hw_exception();
        if h.gpu_id != 0 {
            for (_, l) in listeners.iter().filter(|(g, _)| *g == h.gpu_id) {
                (l.events.fault)(rig_proto::Fault::new(
                    rig_proto::FaultKind::Reset,
                    if h.reset_cause == abi::HW_EXCEPTION_ECC {
                        "after an ECC error"
                    } else {
                        "after a hang"
                    },
                ));
            }
        }
    }
}

impl Backend for KfdBackend {
    fn description(&self) -> &GpuDescription {
        &self.desc
    }

    fn open(&self, events: Events) -> Result<Box<dyn Path>, Refusal> {
        let listener = Arc::new(Listener {
            events,
            ranges: Mutex::new(Vec::new()),
            interrupts: AtomicU64::new(0),
            interrupted_at: AtomicU64::new(0),
        });
        let mut ls = self
            .shared
            .process
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        ls.retain(|(_, l)| l.strong_count() > 0);
        ls.push((self.shared.gpu_id, Arc::downgrade(&listener)));
        Ok(Box::new(KfdPath {
            shared: self.shared.clone(),
            listener,
            held: HashMap::new(),
            queues: HashMap::new(),
            hosts: HashMap::new(),
            next_token: 1,
            last_ring: Arc::new(Mutex::new(None)),
            staging: None,
        }))
    }
}

#[derive(Debug)]
struct Held {
    handle: u64,
    va: u64,
    bytes: u64,
}

/// Where the host holds memory the path gave.
#[derive(Debug)]
struct HostMemory {
    va: u64,
    bytes: u64,
    /// The host's mapping, and the offset in it of the memory's first byte.
    region: SharedRegion,
    at: u64,
    /// The offset in the region's file of the memory's first byte, if its pages can be
    /// registered again as USERPTR (memfd pages; not a dma-buf of VRAM).
    pages_at: Option<u64>,
}

/// A host mapping to [`KfdPath::keep`]: the region, the offset of the memory in it, and the
/// offset of the memory in the region's file where those pages can be registered again.
type Host = (SharedRegion, u64, Option<u64>);

/// The path's own way into Device memory: three GTT buffers (an SDMA ring; a page of its
/// positions and a fence word; [`STAGING_BYTES`] of bytes), each with the host's mapping
/// of it (through the render node), and the SDMA queue that reads the ring.
#[derive(Debug)]
struct Staging {
    ring: (Held, Pages),
    words: (Held, Pages),
    data: (Held, Pages),
    queue: u32,
    doorbells: Arc<Pages>,
    /// The queue's doorbell, a byte offset in `doorbells`.
    bell: usize,
    /// Bytes written to the ring (the queue's write position).
    written: u64,
    /// The value of the last fence submitted.
    fence: u32,
}

#[derive(Debug)]
struct KfdQueue {
    id: u32,
    stop: Arc<AtomicBool>,
    doorbell: rig_shm::Doorbell,
    forwarder: Option<std::thread::JoinHandle<()>>,
    buffers: Vec<PathMemory>,
}

/// An AQL queue's words the forwarder keeps: its `amd_queue_t` (the path's page, whose
/// dispatch ids are KFD's read and write pointers) and the client's read position.
#[derive(Debug)]
struct AqlWords {
    queue: SharedRegion,
    read: (SharedRegion, usize),
}

impl AqlWords {
    /// Copies the queue's read dispatch id to the client's read position; returns it.
    fn publish_read(&self) -> u64 {
        let r = self
            .queue
            .load_u64(amd_queue::READ_DISPATCH_ID, Ordering::Acquire);
        self.read.0.store_u64(self.read.1, r, Ordering::Release);
        r
    }

    /// The client's write position `v` becomes the queue's write dispatch id; answers the
    /// doorbell's value: the last packet's index, as ROCr and tinygrad ring an AQL queue.
    fn wrote(&self, v: u64) -> u64 {
        self.queue
            .store_u64(amd_queue::WRITE_DISPATCH_ID, v, Ordering::Release);
        v.wrapping_sub(1)
    }
}

/// One device's share of a KFD GPU.
#[derive(Debug)]
pub struct KfdPath {
    shared: Arc<Shared>,
    listener: Arc<Listener>,
    held: HashMap<u64, Held>,
    queues: HashMap<u64, KfdQueue>,
    /// The host mappings of the memory given, by token: where an AQL queue's read position
    /// reaches the client, and the pages a queue's ring and positions are mapped again from.
    hosts: HashMap<u64, HostMemory>,
    next_token: u64,
    /// When the last doorbell was forwarded, with the device's interrupt count just before:
    /// the path's answer to "since when busy" until an interrupt comes after it.
    last_ring: Arc<Mutex<Option<(Instant, u64)>>>,
    /// The staging copy into Device memory, once an upload needed it.
    staging: Option<Staging>,
}

impl KfdPath {
    fn va(&self, bytes: u64) -> Result<u64, Refusal> {
        let mut v = self
            .shared
            .next_va
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let va = v.0;
        let end = va
            .checked_add(bytes)
            .and_then(|e| e.checked_add(PAGE))
            .filter(|e| *e <= v.1)
            .ok_or_else(|| Refusal::Lacking("the GPU's address space is full".into()))?;
        v.0 = end;
        Ok(va)
    }

    fn keep(&mut self, held: Held, kind: Option<MemoryKind>, host: Option<Host>) -> PathMemory {
        let token = self.next_token;
        self.next_token += 1;
        self.listener
            .ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((held.va, held.va + held.bytes));
        let host = host.map(|(region, at, pages_at)| {
            self.hosts.insert(
                token,
                HostMemory {
                    va: held.va,
                    bytes: held.bytes,
                    region: region.clone(),
                    at,
                    pages_at,
                },
            );
            region
        });
        let m = PathMemory {
            address: held.va,
            bytes: held.bytes,
            kind,
            host,
            token,
        };
        self.held.insert(token, held);
        m
    }

    fn alloc_mapped(&mut self, bytes: u64, flags: u32) -> Result<(u64, u64, u64), Refusal> {
        let va = self.va(bytes)?;
        let kfd = &self.shared.kfd;
        let (handle, offset) = kfd
            .alloc(self.shared.gpu_id, va, bytes, flags)
            .map_err(refused)?;
        if let Err(e) = kfd.map(handle, self.shared.gpu_id) {
            let _ = kfd.free(handle);
            return Err(refused(e));
        }
        Ok((va, handle, offset))
    }

    /// Registers `bytes` of `region` from its offset `at` (its file's offset `offset`) as
    /// USERPTR memory at a new GPU address, mapped.
    fn register(
        &mut self,
        region: &SharedRegion,
        at: u64,
        offset: u64,
        bytes: u64,
        writable: bool,
    ) -> Result<Held, Refusal> {
        let va = self.va(bytes)?;
        let kfd = &self.shared.kfd;
        let flags = if writable {
            abi::ALLOC_MEM_FLAGS_WRITABLE
        } else {
            0
        };
        let handle = kfd
            .alloc_userptr(
                self.shared.gpu_id,
                va,
                bytes,
                HostPages {
                    host: region.as_ptr() as u64 + at,
                    fd: region.fd(),
                    offset,
                },
                flags,
            )
            .map_err(refused)?;
        if let Err(e) = kfd.map(handle, self.shared.gpu_id) {
            let _ = kfd.free(handle);
            return Err(refused(e));
        }
        Ok(Held { handle, va, bytes })
    }

    /// The host mapping of the 8 bytes at `va`, if memory the path gave holds them.
    fn host_word(&self, va: u64) -> Option<(SharedRegion, usize)> {
        self.hosts.values().find_map(|h| {
            let off = va
                .checked_sub(h.va)
                .filter(|o| o.saturating_add(8) <= h.bytes)?;
            Some((h.region.clone(), usize::try_from(h.at + off).ok()?))
        })
    }

    /// The `bytes` (whole pages) of memory the path gave at GPU address `va` (a page's
    /// start), registered again as a USERPTR mapping of exactly those pages at a new GPU
    /// address, through a host mapping of their own: the queue buffers KFD (Linux 6.12+)
    /// wants each in a mapping of its own size, while the client keeps its layout (the CP
    /// reads and writes the same host pages as the client). `what` names them in refusals.
    /// `None` where memory the path gave is those pages exactly, a mapping of its own.
    fn remap(&mut self, va: u64, bytes: u64, what: &str) -> Result<Option<PathMemory>, Refusal> {
        if self.held.values().any(|h| h.va == va && h.bytes == bytes) {
            return Ok(None);
        }
        let found = self.hosts.values().find_map(|h| {
            let off = va
                .checked_sub(h.va)
                .filter(|o| o.checked_add(bytes).is_some_and(|e| e <= h.bytes))?;
            Some((h.region.clone(), h.pages_at.map(|p| p + off)))
        });
        let (region, offset) = match found {
            Some((region, Some(offset))) => (region, offset),
            Some((_, None)) => {
                return Err(Refusal::Refused(format!(
                    "the queue's {what} at {va:#x} is in memory the path cannot register \
                     again as a mapping of its own (Mapped memory, or a peer's read-only \
                     memory): give it Pinned memory"
                )));
            }
            None => {
                return Err(Refusal::Refused(format!(
                    "the queue's {what} ({bytes} bytes at {va:#x}) is not in Pinned or host \
                     memory this path gave"
                )));
            }
        };
        let pages = region
            .dup_fd()
            .and_then(|fd| SharedRegion::from_fd_range_sealed(fd, offset, bytes))
            .map_err(|e| {
                Refusal::Lacking(format!("mapping the queue's {what} again on the host: {e}"))
            })?;
        let held = self.register(&pages, 0, offset, bytes, true)?;
        Ok(Some(self.keep(held, None, Some((pages, 0, Some(offset))))))
    }

    /// An AQL queue's `amd_queue_t`: Pinned memory of one page (KFD wants the read and
    /// write pointers each in a mapping of one page of its own), describing the ring of
    /// `spec` and the scratch every kernel gets (`spec.scratch`, shared by the GPU's wave
    /// slots as rigd sizes it), and where the client reads the queue's read position.
    fn amd_queue(&mut self, spec: &QueueSpec) -> Result<(PathMemory, AqlWords), Refusal> {
        let read = self.host_word(spec.read).ok_or_else(|| {
            Refusal::Refused(format!(
                "the AQL queue's read position at {:#x} is not in memory this path gave",
                spec.read
            ))
        })?;
        let gpu = self
            .shared
            .node
            .gpu()
            .map_err(|e| Refusal::Refused(e.to_string()))?;
        let mut q = AmdQueue::new(spec.ring, spec.bytes);
        q.max_cu_id = gpu.compute_units.saturating_sub(1);
        q.max_wave_id = gpu.waves_per_cu.saturating_sub(1);
        q.set_scratch(
            gpu.hal(),
            spec.scratch.0,
            spec.scratch.1,
            gpu.compute_units.saturating_mul(gpu.waves_per_cu),
        );
        let m = self.alloc(MemoryKind::Pinned, PAGE)?;
        let Some(host) = m.host.clone() else {
            self.free(m);
            return Err(Refusal::Refused(
                "Pinned memory came without a host mapping".into(),
            ));
        };
        host.write(0, &q.to_bytes());
        Ok((m, AqlWords { queue: host, read }))
    }

    fn free_all(&mut self, buffers: Vec<PathMemory>) {
        for b in buffers {
            self.free(b);
        }
    }

    fn release(&self, held: &Held) {
        let kfd = &self.shared.kfd;
        if let Err(e) = kfd.unmap(held.handle, self.shared.gpu_id) {
            tracing::warn!(error = %e, "unmapping freed KFD memory failed");
        }
        if let Err(e) = kfd.free(held.handle) {
            tracing::warn!(error = %e, "freeing KFD memory failed");
        }
        self.listener
            .ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(a, _)| *a != held.va);
    }
}

fn page_round(bytes: u64) -> Option<u64> {
    bytes
        .checked_add(PAGE - 1)
        .map(|b| b / PAGE * PAGE)
        .filter(|b| *b > 0)
}

impl Path for KfdPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        let bytes = page_round(bytes)
            .ok_or_else(|| Refusal::Refused(format!("cannot allocate {bytes} bytes")))?;
        let vram = abi::ALLOC_MEM_FLAGS_VRAM
            | abi::ALLOC_MEM_FLAGS_WRITABLE
            | abi::ALLOC_MEM_FLAGS_EXECUTABLE;
        match kind {
            // Not PUBLIC: amdgpu places it anywhere in VRAM, outside the BAR; uploads reach
            // it through the staging copy.
            MemoryKind::Device => {
                let (va, handle, _) = self.alloc_mapped(bytes, vram)?;
                Ok(self.keep(Held { handle, va, bytes }, Some(kind), None))
            }
            MemoryKind::Mapped => {
                if self.shared.node.host_visible_vram_bytes() == 0 {
                    return Err(Refusal::Refused(format!(
                        "the GPU has no Mapped memory: its BAR is smaller than its {} MiB of \
                         VRAM, which KFD lists as private and gives none of to the host \
                         (enable resizable BAR in the machine's firmware for Mapped memory)",
                        self.shared.node.vram_bytes() >> 20
                    )));
                }
                // Host writes through the BAR reach the GPU's memory only once the HDP is
                // flushed; without its register, the path cannot promise that.
                if let Err(why) = &self.shared.hdp {
                    return Err(Refusal::Refused(format!(
                        "Mapped memory needs the GPU's HDP flush register, and KFD gave no \
                         MMIO_REMAP page for it: {why}"
                    )));
                }
                let (va, handle, _) =
                    self.alloc_mapped(bytes, vram | abi::ALLOC_MEM_FLAGS_PUBLIC)?;
                let held = Held { handle, va, bytes };
                let region = match self.shared.kfd.export_dmabuf(handle) {
                    Ok(fd) => SharedRegion::from_fd(fd).map_err(|e| {
                        Refusal::Refused(format!("mapping the dma-buf of Mapped memory: {e}"))
                    }),
                    Err(e) => Err(Refusal::Refused(format!("Mapped memory: {e}"))),
                };
                match region {
                    Ok(r) => Ok(self.keep(held, Some(kind), Some((r, 0, None)))),
                    Err(e) => {
                        self.release(&held);
                        Err(e)
                    }
                }
            }
            MemoryKind::Pinned => {
                let len = usize::try_from(bytes).map_err(|_| {
                    Refusal::Lacking(format!("{bytes} bytes exceed the host's address space"))
                })?;
                let region = SharedRegion::create("rig-pinned", len)
                    .map_err(|e| Refusal::Lacking(format!("the host has no memory for it: {e}")))?;
                let held = self.register(&region, 0, 0, bytes, true)?;
                Ok(self.keep(held, Some(kind), Some((region, 0, Some(0)))))
            }
        }
    }

    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        let bytes = page_round(bytes).unwrap_or(u64::MAX);
        let region = SharedRegion::from_fd_range_sealed(fd, offset, bytes).map_err(|e| {
            MapRefusal::Never(format!(
                "the descriptor is not shared memory rigd can map for writing: {e}"
            ))
        })?;
        let held = self
            .register(&region, 0, offset, bytes, true)
            .map_err(|r| match r {
                Refusal::Lacking(s) => MapRefusal::NoRoom(s),
                Refusal::Full(s) | Refusal::Refused(s) => MapRefusal::Never(s),
            })?;
        Ok(self.keep(held, None, Some((region, 0, Some(offset)))))
    }

    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        let bytes = page_round(bytes).unwrap_or(u64::MAX);
        if offset % PAGE != 0 || !region.contains(offset, bytes) {
            return Err(Refusal::Refused(format!(
                "{bytes} bytes at offset {offset} are not whole pages of the {}-byte memory",
                region.len()
            )));
        }
        let held = self.register(region, offset, offset, bytes, false)?;
        // Read-only: never mapped again (writable) for a queue's positions.
        Ok(self.keep(held, None, Some((region.clone(), offset, None))))
    }

    fn free(&mut self, memory: PathMemory) {
        self.hosts.remove(&memory.token);
        if let Some(h) = self.held.remove(&memory.token) {
            self.release(&h);
        }
    }

    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        let held = self
            .held
            .get(&memory.token)
            .ok_or_else(|| Fault("upload into memory the path did not give".into()))?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= held.bytes);
        let dst = held.va + offset;
        match (&memory.host, end) {
            (_, None) => Err(Fault(format!(
                "{} bytes at {offset} exceed the memory",
                data.len()
            ))),
            (Some(r), _) => {
                r.write(offset as usize, data);
                Ok(())
            }
            (None, _) => self.stage(dst, data),
        }
    }

    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        let kind = match spec.kind {
            QueueKind::Pm4 => abi::QUEUE_TYPE_COMPUTE,
            QueueKind::Aql => abi::QUEUE_TYPE_COMPUTE_AQL,
            QueueKind::Sdma => abi::QUEUE_TYPE_SDMA,
        };
        let ring_size = u32::try_from(spec.bytes).map_err(|_| {
            Refusal::Refused(format!(
                "a ring of {} bytes exceeds KFD's {MOST_RING}",
                spec.bytes
            ))
        })?;
        let mut args = abi::CreateQueueArgs {
            ring_base_address: spec.ring,
            write_pointer_address: spec.write,
            read_pointer_address: spec.read,
            ring_size,
            gpu_id: self.shared.gpu_id,
            queue_type: kind,
            queue_percentage: abi::MAX_QUEUE_PERCENTAGE,
            queue_priority: 7,
            ..Default::default()
        };
        // KFD (Linux 6.12+, kfd_queue_acquire_buffers) wants the ring the start of a mapping
        // of exactly its size, and each position a mapping of exactly its one page; the
        // client's layout (ring, then a page of positions, in one Pinned allocation) stays,
        // and its pages are mapped again for the queue at addresses of their own.
        let mut buffers = Vec::new();
        if spec.ring % PAGE != 0 {
            return Err(Refusal::Refused(format!(
                "the queue's ring at {:#x} does not begin a page, as KFD wants of a ring",
                spec.ring
            )));
        }
        let ring_pages = page_round(spec.bytes).unwrap_or(PAGE);
        if let Some(ring) = self.remap(spec.ring, ring_pages, "ring")? {
            args.ring_base_address = ring.address;
            buffers.push(ring);
        }
        if spec.kind != QueueKind::Aql {
            // An AQL queue's positions are its amd_queue_t's, in a page of its own (below).
            let (read, write) = (spec.read & !(PAGE - 1), spec.write & !(PAGE - 1));
            let mut pages = vec![read];
            if write != read {
                pages.push(write);
            }
            for page in pages {
                match self.remap(page, PAGE, "positions") {
                    Ok(None) => {}
                    Ok(Some(m)) => {
                        if page == read {
                            args.read_pointer_address = m.address + spec.read % PAGE;
                        }
                        if page == write {
                            args.write_pointer_address = m.address + spec.write % PAGE;
                        }
                        buffers.push(m);
                    }
                    Err(e) => {
                        self.free_all(buffers);
                        return Err(e);
                    }
                }
            }
        }
        if spec.kind != QueueKind::Sdma {
            let cs = ContextSave::of(&self.shared.node);
            let eop = match self.alloc(MemoryKind::Device, EOP_BUFFER_BYTES) {
                Ok(m) => m,
                Err(e) => {
                    self.free_all(buffers);
                    return Err(e);
                }
            };
            args.eop_buffer_address = eop.address;
            args.eop_buffer_size = EOP_BUFFER_BYTES;
            buffers.push(eop);
            let ctx = match self.alloc(MemoryKind::Device, cs.total_bytes()) {
                Ok(m) => m,
                Err(e) => {
                    self.free_all(buffers);
                    return Err(e);
                }
            };
            args.ctx_save_restore_address = ctx.address;
            args.ctx_save_restore_size = cs.cwsr_bytes as u32;
            args.ctl_stack_size = cs.ctl_stack_bytes as u32;
            buffers.push(ctx);
        }
        let mut aql = None;
        if spec.kind == QueueKind::Aql {
            match self.amd_queue(&spec) {
                Ok((m, words)) => {
                    args.read_pointer_address = m.address + amd_queue::READ_DISPATCH_ID as u64;
                    args.write_pointer_address = m.address + amd_queue::WRITE_DISPATCH_ID as u64;
                    buffers.push(m);
                    aql = Some(words);
                }
                Err(e) => {
                    for b in buffers {
                        self.free(b);
                    }
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.shared.kfd.create_queue(&mut args) {
            for b in buffers {
                self.free(b);
            }
            return Err(queue_refused(e, &args));
        }
        let bells = {
            let mut d = self
                .shared
                .doorbells
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match &*d {
                Some(p) => Ok(p.clone()),
                None => self
                    .shared
                    .kfd
                    .mmap(
                        "doorbells",
                        args.doorbell_offset & !(DOORBELL_SLICE - 1),
                        DOORBELL_SLICE as usize,
                    )
                    .map(|p| {
                        let p = Arc::new(p);
                        *d = Some(p.clone());
                        p
                    }),
            }
        };
        let bells = match bells {
            Ok(b) => b,
            Err(e) => {
                let _ = self.shared.kfd.destroy_queue(args.queue_id);
                for b in buffers {
                    self.free(b);
                }
                return Err(refused(e));
            }
        };
        let at = (args.doorbell_offset & (DOORBELL_SLICE - 1)) as usize;
        if let Some(w) = &aql {
            w.queue
                .store_u64(amd_queue::ID, u64::from(args.queue_id), Ordering::Release);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (client, flag, kernel, last, listener) = (
            spec.doorbell.clone(),
            stop.clone(),
            self.shared.kfd.kernel().clone(),
            self.last_ring.clone(),
            self.listener.clone(),
        );
        let hdp = self.shared.hdp.as_ref().ok().map(|(p, _)| p.clone());
        let forwarder = std::thread::Builder::new()
            .name("rigd-kfd-doorbell".into())
            .spawn(move || {
                // A queue's write position starts at 0: any other value, even one rung
                // before this thread ran, is forwarded.
                let mut seen = 0;
                let mut forwarded: Option<Instant> = None;
                loop {
                    // Spins a while after a forward: a client with work in flight rings again
                    // soon, and the spin forwards that ring without a futex wake.
                    let mut v = client.value();
                    while let Some(at) = forwarded
                        && v == seen
                        && at.elapsed() < FORWARD_SPIN
                        && !flag.load(Ordering::Relaxed)
                    {
                        std::hint::spin_loop();
                        v = client.value();
                    }
                    forwarded = None;
                    if v == seen {
                        // An AQL queue's packets still in flight: its read position is
                        // passed on at least every AQL_READ_POLL.
                        let slice = match &aql {
                            Some(w) if w.publish_read() < seen => AQL_READ_POLL,
                            _ => Duration::from_millis(500),
                        };
                        v = client.wait(seen, Some(slice), || flag.load(Ordering::Acquire));
                    }
                    if flag.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(w) = &aql {
                        w.publish_read();
                    }
                    if v != seen {
                        let seen_irqs = listener.interrupts.load(Ordering::Acquire);
                        *last.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some((Instant::now(), seen_irqs));
                        // Every host write the client made through the BAR before ringing is
                        // in memory before the command processor reads its packets.
                        if let Some(h) = &hdp {
                            h.atomic_u32(abi::MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
                                .store(0, Ordering::Release);
                        }
                        let value = match &aql {
                            Some(w) => w.wrote(v),
                            None => v,
                        };
                        kernel.ring(&bells, at, value);
                        seen = v;
                        forwarded = Some(Instant::now());
                    }
                }
            })
            .map_err(|e| Refusal::Lacking(format!("no thread for the queue's doorbell: {e}")))?;
        let token = self.next_token;
        self.next_token += 1;
        self.queues.insert(
            token,
            KfdQueue {
                id: args.queue_id,
                stop,
                doorbell: spec.doorbell,
                forwarder: Some(forwarder),
                buffers,
            },
        );
        Ok(QueueHandle(token))
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        let q = self
            .queues
            .remove(&queue.0)
            .ok_or_else(|| Fault(format!("no queue {} to retire", queue.0)))?;
        self.end_queue(q)
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        most_ring(&self.shared.node, kind)
    }

    fn clock(&self) -> u64 {
        self.shared
            .kfd
            .clock_counters(self.shared.gpu_id)
            .map_or(0, |c| c.gpu_clock_counter)
    }

    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        if let Some(why) = fault {
            tracing::debug!(reason = %why, "stopping a lost KFD device's queues");
        }
        let mut all = self.end_staging().is_ok();
        for (_, q) in std::mem::take(&mut self.queues) {
            all &= self.end_queue(q).is_ok();
        }
        if all {
            Stopped::Stopped
        } else {
            Stopped::Unknown
        }
    }

    fn busy_since(&self) -> Option<Instant> {
        if self.queues.is_empty() {
            return None;
        }
        // KFD tells the path of completed work only by its interrupts (every submission ends
        // with a release that interrupts): a run lasts from the last doorbell until an
        // interrupt after it. Work still running past that interrupt is bounded by the
        // device's word (rigd's other hang bound).
        let last = *self.last_ring.lock().unwrap_or_else(|e| e.into_inner());
        last.filter(|(_, irqs)| *irqs == self.listener.interrupts.load(Ordering::Acquire))
            .map(|(at, _)| at)
    }

    fn progress(&self) -> u64 {
        self.listener.interrupts.load(Ordering::Acquire)
    }

    fn progressed_at(&self) -> Option<Instant> {
        match self.listener.interrupted_at.load(Ordering::Acquire) {
            0 => None,
            n => Some(stamp_epoch() + Duration::from_nanos(n - 1)),
        }
    }
}

impl KfdPath {
    fn end_queue(&mut self, mut q: KfdQueue) -> Result<(), Fault> {
        q.stop.store(true, Ordering::Release);
        q.doorbell.wake();
        if let Some(t) = q.forwarder.take() {
            let _ = t.join();
        }
        let r = self
            .shared
            .kfd
            .destroy_queue(q.id)
            .map_err(|e| Fault(e.to_string()));
        for b in std::mem::take(&mut q.buffers) {
            self.free(b);
        }
        r
    }
}

/// The staging copy: how uploads reach Device memory, which the host does not address.
impl KfdPath {
    /// Copies `data` to GPU address `dst` (Device memory of this path) through the staging
    /// buffer, a piece of at most [`STAGING_BYTES`] at a time, each waited for.
    fn stage(&mut self, dst: u64, data: &[u8]) -> Result<(), Fault> {
        if data.is_empty() {
            return Ok(());
        }
        let mut st = match self.staging.take() {
            Some(st) => st,
            None => self.start_staging()?,
        };
        let r = self.copy_through(&mut st, dst, data);
        self.staging = Some(st);
        if r.is_err() {
            // The queue may yet run: destroyed before its memory goes.
            let _ = self.end_staging();
        }
        r
    }

    /// Copies `data` to `dst` through `st`, piece by piece, each piece's fence waited for.
    fn copy_through(&self, st: &mut Staging, dst: u64, data: &[u8]) -> Result<(), Fault> {
        let gpu = self.shared.node.gpu().map_err(|e| Fault(e.to_string()))?;
        let layout = rig_amd::sdma::Layout::for_gpu(gpu);
        let mut at = dst;
        for piece in data.chunks(STAGING_BYTES as usize) {
            st.data.1.write(0, piece);
            st.fence = st.fence.wrapping_add(1);
            let mut words = [0u32; STAGING_SLOT_WORDS];
            let src = st.data.0.va;
            let copy = rig_amd::sdma::CopyLinear::new(src, at, piece.len() as u64)
                .encode(layout, &mut words)
                .map_err(|e| Fault(format!("encoding the staging copy: {e}")))?;
            let fence = rig_amd::sdma::Fence::new(layout, st.words.0.va + STAGING_FENCE, st.fence)
                .encode(&mut words[copy..])
                .map_err(|e| Fault(format!("encoding the staging copy's fence: {e}")))?;
            rig_amd::sdma::pad(&mut words[copy + fence..]);
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            st.ring
                .1
                .write((st.written % STAGING_RING) as usize, &bytes);
            st.written += bytes.len() as u64;
            st.words
                .1
                .atomic_u64(STAGING_WPTR as usize)
                .store(st.written, Ordering::Release);
            self.shared
                .kfd
                .kernel()
                .ring(&st.doorbells, st.bell, st.written);
            if !fenced(&st.words.1, st.fence) {
                return Err(Fault(format!(
                    "the staging copy of {} bytes into Device memory at {at:#x} did not \
                     finish within {} ms (its SDMA queue never wrote the fence)",
                    piece.len(),
                    STAGING_BOUND.as_millis()
                )));
            }
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// Makes GTT memory of `bytes` for the staging copy, mapped for the host through the
    /// render node; a fault at its addresses is this device's. `what` names it in faults.
    fn staging_buffer(&mut self, bytes: u64, what: &str) -> Result<(Held, Pages), Fault> {
        let flags = abi::ALLOC_MEM_FLAGS_GTT | abi::ALLOC_MEM_FLAGS_WRITABLE;
        let (va, handle, offset) = self.alloc_mapped(bytes, flags).map_err(|e| {
            Fault(format!(
                "no staging {what} for uploads into Device memory: {e}"
            ))
        })?;
        let memory = Held { handle, va, bytes };
        match self
            .shared
            .kfd
            .kernel()
            .mmap(self.shared._render.as_fd(), offset, bytes as usize)
        {
            Ok(host) => {
                self.listener
                    .ranges
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((va, va + bytes));
                Ok((memory, host))
            }
            Err(e) => {
                self.release(&memory);
                Err(Fault(format!("mapping the staging {what}: {e}")))
            }
        }
    }

    /// Makes the staging queue's ring, its page of positions and fence, and its bytes
    /// (three allocations: KFD wants the ring's mapping and each position's of their own
    /// sizes) and the SDMA queue that copies out of them.
    fn start_staging(&mut self) -> Result<Staging, Fault> {
        let ring = self.staging_buffer(STAGING_RING, "ring")?;
        let words = match self.staging_buffer(PAGE, "positions") {
            Ok(w) => w,
            Err(e) => {
                self.release(&ring.0);
                return Err(e);
            }
        };
        let data = match self.staging_buffer(STAGING_BYTES, "buffer") {
            Ok(d) => d,
            Err(e) => {
                self.release(&ring.0);
                self.release(&words.0);
                return Err(e);
            }
        };
        let mut args = abi::CreateQueueArgs {
            ring_base_address: ring.0.va,
            write_pointer_address: words.0.va + STAGING_WPTR,
            read_pointer_address: words.0.va + STAGING_RPTR,
            ring_size: STAGING_RING as u32,
            gpu_id: self.shared.gpu_id,
            queue_type: abi::QUEUE_TYPE_SDMA,
            queue_percentage: abi::MAX_QUEUE_PERCENTAGE,
            queue_priority: 7,
            ..Default::default()
        };
        let made = self
            .shared
            .kfd
            .create_queue(&mut args)
            .map_err(|e| {
                Fault(format!(
                    "no SDMA queue for the staging copy: {}",
                    queue_refused(e, &args)
                ))
            })
            .and_then(|()| {
                doorbell_page(&self.shared, args.doorbell_offset).map_err(|e| {
                    let _ = self.shared.kfd.destroy_queue(args.queue_id);
                    Fault(format!("mapping the staging queue's doorbell: {e}"))
                })
            });
        let doorbells = match made {
            Ok(d) => d,
            Err(e) => {
                for (m, _) in [&ring, &words, &data] {
                    self.release(m);
                }
                return Err(e);
            }
        };
        Ok(Staging {
            ring,
            words,
            data,
            queue: args.queue_id,
            doorbells,
            bell: (args.doorbell_offset & (DOORBELL_SLICE - 1)) as usize,
            written: 0,
            fence: 0,
        })
    }

    /// Destroys the staging queue, then frees its buffers.
    fn end_staging(&mut self) -> Result<(), Fault> {
        let Some(st) = self.staging.take() else {
            return Ok(());
        };
        let r = self
            .shared
            .kfd
            .destroy_queue(st.queue)
            .map_err(|e| Fault(e.to_string()));
        for (m, host) in [st.ring, st.words, st.data] {
            drop(host);
            self.release(&m);
        }
        r
    }
}

/// Whether the staging buffer's fence word reads `want` within [`STAGING_BOUND`]: spins a
/// little (a piece takes microseconds on a GPU), then sleeps between looks.
fn fenced(host: &Pages, want: u32) -> bool {
    let word = host.atomic_u32(STAGING_FENCE as usize);
    let deadline = Instant::now() + STAGING_BOUND;
    let mut looks = 0u32;
    while word.load(Ordering::Acquire) != want {
        if Instant::now() >= deadline {
            return false;
        }
        looks += 1;
        if looks < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    true
}

/// The process's doorbell page of the GPU, mapped at the first queue's `doorbell_offset`.
fn doorbell_page(shared: &Shared, doorbell_offset: u64) -> Result<Arc<Pages>, KfdError> {
    let mut d = shared.doorbells.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*d {
        return Ok(p.clone());
    }
    let p = Arc::new(shared.kfd.mmap(
        "doorbells",
        doorbell_offset & !(DOORBELL_SLICE - 1),
        DOORBELL_SLICE as usize,
    )?);
    *d = Some(p.clone());
    Ok(p)
}

impl Drop for KfdPath {
    fn drop(&mut self) {
        let _ = self.stop(None);
        for (_, h) in std::mem::take(&mut self.held) {
            self.release(&h);
        }
    }
}
