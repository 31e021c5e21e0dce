//! The `kfd` path: a GPU reached through Linux's amdgpu driver (`/dev/kfd`), through
//! rig-kfd's system-call seam, so the same code runs on the machine's KFD and on the
//! emulated one (`rig-kfd-emu`).
//!
//! One [`KfdBackend`] per KFD GPU node holds its process's one open of KFD
//! ([`KfdProcess`], `process.rs`: the kernel makes one KFD process per address space, so
//! every device of the process shares its GPU VM; GPU addresses are therefore handed out
//! by the backend, `va.rs`). rigd runs this code in a worker process per client
//! ([`super::worker`]), so a client's devices share a VM with no other client's. It binds
//! the render node's VM (ACQUIRE_VM) and announces the runtime (RUNTIME_ENABLE).
//!
//! Memory kinds (`docs/client.md`) map so: Device is VRAM the host does not address (no
//! PUBLIC flag, so it spends none of the BAR, which is 256 MiB on a GPU without resizable
//! BAR), Pinned is rigd's memfd registered as USERPTR, Mapped is PUBLIC VRAM exported as a
//! dma-buf (KFD 1.12; none where the BAR is small, as the topology's banks say), and
//! map_host registers the client's memfd as USERPTR. `upload` places bytes into Device
//! memory through the path's own staging copy (`staging.rs`). A queue (`queue.rs`) gets its
//! EOP buffer and context-save area as KFD asks ([`rig_kfd::queue`]), second USERPTR
//! mappings of the client's ring and positions where KFD wants them so, an AQL queue its
//! `amd_queue_t`, and a doorbell forwarder ([`crate::path::forward`]) that stores to the
//! GPU's HDP flush register (KFD's MMIO_REMAP page) before each ring, so the client's
//! writes through the BAR are in memory before the command processor reads its packets;
//! without that page Mapped memory is refused. amdgpu does not bound how long a user
//! queue's work runs, so rigd's hang watchdog does ([`HANG_MS`]).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rig_amd::PAGE_BYTES as PAGE;
use rig_amd::aql::AmdQueue;
use rig_kfd::abi;
use rig_kfd::kfd::{Kfd, KfdError};
use rig_kfd::queue::{ContextSave, EOP_BUFFER_BYTES};
use rig_kfd::seam::Pages;
use rig_kfd::topology::Node;
use rig_proto::messages::{ClockSample, ClockSource, MemoryKind, PathKind, QueueKind};
use rig_shm::SharedRegion;

pub mod discover;
mod process;
mod queue;
mod staging;
mod va;

pub use process::KfdProcess;
pub use staging::{STAGING_BOUND, STAGING_BYTES};

use process::{Listener, stamp_epoch};
use queue::{KfdQueue, Undestroyed};
use staging::Staging;
use va::{Held, HostMemory};

use super::memory::{self, page_round};
use super::{
    Backend, Cause, ClientCost, Events, Fault, GpuDescription, MapRefusal, Owner, Path, PathMemory,
    QueueCosts, QueueHandle, QueueMemory, QueueSpec, Refusal, Stopped, Why,
};

/// The hang bound of KFD devices, in milliseconds: amdgpu bounds no user queue's work.
pub const HANG_MS: u64 = 2000;
/// The most bytes of a ring through KFD (its `ring_size` in `linux/kfd_ioctl.h` is 32 bits;
/// the largest power of two below that).
pub const MOST_RING: u64 = 1 << 31;

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
    hdp: Result<(Arc<Pages>, u64), Why>,
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
fn map_hdp(kfd: &Kfd, gpu_id: u32, va: u64) -> Result<(Arc<Pages>, u64), Why> {
    let flags = abi::ALLOC_MEM_FLAGS_MMIO_REMAP
        | abi::ALLOC_MEM_FLAGS_WRITABLE
        | abi::ALLOC_MEM_FLAGS_COHERENT;
    let (handle, offset) = kfd
        .alloc(gpu_id, va, PAGE, flags)
        .map_err(|e| kfd_why(&e))?;
    match kfd.mmap("the HDP flush page", offset, PAGE as usize) {
        Ok(p) => Ok((Arc::new(p), handle)),
        Err(e) => {
            let _ = kfd.free(handle);
            Err(kfd_why(&e))
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

/// What the path says of KFD's error `e`: its sentence, and the errno of the call that
/// gave it.
pub(crate) fn kfd_why(e: &KfdError) -> Why {
    let of = |call: String, errno: &rig_kfd::sys::Errno| {
        Some(Cause::Errno {
            call,
            errno: errno.0,
        })
    };
    let cause = match e {
        KfdError::Open { what, errno } => of(format!("open {what}"), errno),
        KfdError::Ioctl { ioctl, errno } => of((*ioctl).to_owned(), errno),
        KfdError::Mmap { errno, .. } => of("mmap".to_owned(), errno),
        _ => None,
    };
    Why {
        what: e.to_string(),
        cause,
    }
}

/// KFD's refusal `e`, sorted by its errno (which it keeps): ENOMEM is a lack, EPERM a full
/// table, anything else a refusal.
fn refused(e: KfdError) -> Refusal {
    let why = kfd_why(&e);
    match why.errno() {
        Some(libc::ENOMEM) => Refusal::Lacking(why),
        Some(libc::EPERM) => Refusal::Full(why),
        _ => Refusal::Refused(why),
    }
}

impl KfdBackend {
    /// The GPU of topology node `node`, in rigd's KFD process `process`.
    pub fn new(process: Arc<KfdProcess>, node: Node) -> Result<KfdBackend, Why> {
        node.gpu().map_err(|e| Why::from(e.to_string()))?;
        let kfd = &process.kfd;
        let minor = node
            .drm_render_minor()
            .ok_or_else(|| format!("KFD node {} has no render node", node.index))?;
        let render = kfd
            .acquire_vm(node.gpu_id, minor)
            .map_err(|e| kfd_why(&e))?;
        let ap = kfd
            .apertures()
            .map_err(|e| kfd_why(&e))?
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
pub fn describe(node: &Node, clock_hz: u64) -> Result<GpuDescription, Why> {
    let gpu = node.gpu().map_err(|e| Why::from(e.to_string()))?.clone();
    let wgps = node.wgps(gpu.hal());
    let apart = super::source_apart(&gpu);
    Ok(GpuDescription {
        gpu,
        kind: PathKind::Kfd,
        budget: node.vram_bytes(),
        host_visible: node.host_visible_vram_bytes(),
        bus: Some(node.bus()),
        clock: ClockSource::Source { apart },
        clock_hz,
        mec: node.mec_firmware(),
        wgps,
        cache_bytes: node.cache_bytes(),
        hang_ms: Some(HANG_MS),
        maps_host: true,
        client_cost: Some(client_cost(node)),
        queue_memory: queue_costs(node),
    })
}

/// What [`KfdPath::queue`] makes for each kind of queue besides its ring (the second
/// mappings of the ring and positions are the client's pages): a compute queue's EOP buffer
/// and context-save area in VRAM, and an AQL queue's `amd_queue_t` page of host memory.
pub fn queue_costs(node: &Node) -> QueueCosts {
    let compute = QueueMemory {
        gpu: client_cost(node).queue_bytes,
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

/// What a client (one worker process, one KFD process) costs on the GPU of `node`, and
/// how many fit: a compute queue's EOP buffer and the context-save area KFD asks for
/// ([`rig_kfd::queue::ContextSave`]), and [`compute_vmids`] processes at once.
pub fn client_cost(node: &Node) -> ClientCost {
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

/// The most bytes of a ring of a queue of kind `kind` on the GPU of `node`.
pub fn most_ring(node: &Node, kind: QueueKind) -> u64 {
    let k = match kind {
        QueueKind::Pm4 => rig_amd::gpu::QueueKind::Pm4,
        QueueKind::Aql => rig_amd::gpu::QueueKind::Aql,
        QueueKind::Sdma => rig_amd::gpu::QueueKind::Sdma,
    };
    node.gpu().map_or(0, |g| g.most_ring(k)).min(MOST_RING)
}

/// One GET_CLOCK_COUNTERS of GPU `gpu_id`, placed on `CLOCK_MONOTONIC`: KFD samples the
/// host's raw monotonic clock after it reads the GPU's counter, and a pair of readings of
/// `CLOCK_MONOTONIC` around one of the raw clock, taken at once after the call, maps that
/// sample; the sample's interval is the pair's, and the gap before it is bounded by the time
/// from the reading before the call to the mapped sample. A counter KFD cannot read is 0.
fn read_clock(kfd: &Kfd, gpu_id: u32) -> ClockSample {
    let called = crate::gpus::monotonic_ns();
    let Ok(c) = kfd.clock_counters(gpu_id) else {
        return ClockSample {
            gpu: 0,
            host_before_ns: called,
            host_after_ns: crate::gpus::monotonic_ns(),
            gap_ns: 0,
        };
    };
    let m0 = crate::gpus::monotonic_ns();
    let raw = raw_ns();
    let m1 = crate::gpus::monotonic_ns();
    // CLOCK_MONOTONIC less the raw clock, at the pair's middle.
    let offset = i128::from(m0 / 2 + m1 / 2) - i128::from(raw);
    let half = (m1 - m0).div_ceil(2);
    let sample = u64::try_from(i128::from(c.cpu_clock_counter) + offset).unwrap_or(0);
    ClockSample {
        gpu: c.gpu_clock_counter,
        host_before_ns: sample.saturating_sub(half),
        host_after_ns: sample.saturating_add(half),
        gap_ns: sample.saturating_sub(half).saturating_sub(called),
    }
}

/// The host's `CLOCK_MONOTONIC_RAW`, the clock KFD samples, in nanoseconds.
fn raw_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_RAW).map_or(0, |t| {
        u64::try_from(t.tv_sec())
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_nsec()).unwrap_or(0))
    })
}

/// The GPU counter's rate, from two GET_CLOCK_COUNTERS 20 ms apart, to the nearest MHz.
fn measure_clock_hz(kfd: &Kfd, gpu_id: u32) -> Result<u64, Why> {
    let a = kfd.clock_counters(gpu_id).map_err(|e| kfd_why(&e))?;
    std::thread::sleep(Duration::from_millis(20));
    let b = kfd.clock_counters(gpu_id).map_err(|e| kfd_why(&e))?;
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

impl Backend for KfdBackend {
    fn description(&self) -> &GpuDescription {
        &self.desc
    }

    fn open(&self, _: Owner, events: Events) -> Result<Box<dyn Path>, Refusal> {
        let listener = Arc::new(Listener {
            events,
            ranges: Mutex::new(Vec::new()),
            interrupts: AtomicU64::new(0),
            interrupted_at: AtomicU64::new(0),
            sleepers: Default::default(),
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
            undestroyed: Vec::new(),
        }))
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
    /// Queues KFD could not destroy, with the buffers they may still use.
    undestroyed: Vec<Undestroyed>,
}

impl Path for KfdPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        let bytes = memory::alloc_bytes(bytes)?;
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
                    return Err(Refusal::Refused(
                        format!(
                            "the GPU has no Mapped memory: its BAR is smaller than its {} MiB of \
                         VRAM, which KFD lists as private and gives none of to the host \
                         (enable resizable BAR in the machine's firmware for Mapped memory)",
                            self.shared.node.vram_bytes() >> 20
                        )
                        .into(),
                    ));
                }
                // Host writes through the BAR reach the GPU's memory only once the HDP is
                // flushed; without its register, the path cannot promise that.
                if let Err(why) = &self.shared.hdp {
                    return Err(Refusal::Refused(why.clone().within(
                        "Mapped memory needs the GPU's HDP flush register, and KFD gave no \
                         MMIO_REMAP page for it",
                    )));
                }
                let (va, handle, _) =
                    self.alloc_mapped(bytes, vram | abi::ALLOC_MEM_FLAGS_PUBLIC)?;
                let held = Held { handle, va, bytes };
                let region = match self.shared.kfd.export_dmabuf(handle) {
                    Ok(fd) => SharedRegion::from_fd(fd).map_err(|e| {
                        Refusal::Refused(
                            format!("mapping the dma-buf of Mapped memory: {e}").into(),
                        )
                    }),
                    Err(e) => Err(Refusal::Refused(kfd_why(&e).within("Mapped memory"))),
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
                    Refusal::Lacking(
                        format!("{bytes} bytes exceed the host's address space").into(),
                    )
                })?;
                let region = SharedRegion::create("rig-pinned", len).map_err(|e| {
                    Refusal::Lacking(format!("the host has no memory for it: {e}").into())
                })?;
                let held = self.register(&region, 0, 0, bytes, true)?;
                Ok(self.keep(held, Some(kind), Some((region, 0, Some(0)))))
            }
        }
    }

    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        let region = memory::host_region(fd, offset, bytes)?;
        let bytes = region.len() as u64;
        let held = self.register(&region, 0, offset, bytes, true)?;
        Ok(self.keep(held, None, Some((region, 0, Some(offset)))))
    }

    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        let bytes = memory::peer_range(region, offset, bytes)?;
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
            (_, None) => Err(Fault(
                format!("{} bytes at {offset} exceed the memory", data.len()).into(),
            )),
            (Some(r), _) => {
                r.write(offset as usize, data);
                Ok(())
            }
            (None, _) => self.stage(dst, data),
        }
    }

    fn interrupt(&self) -> u32 {
        self.shared.process.interrupt()
    }

    fn wake_on_interrupt(&mut self, memory: &PathMemory, offset: u64) -> Result<(), Refusal> {
        self.listener.sleepers.set(memory, offset)
    }

    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        self.make_queue(spec)
    }

    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal> {
        let gpu = self
            .shared
            .node
            .gpu()
            .map_err(|e| Refusal::Refused(e.to_string().into()))?;
        let update = AmdQueue::scratch_update(gpu, address, bytes);
        for q in self.queues.values() {
            q.hand_scratch(&update);
        }
        Ok(())
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        let q = self
            .queues
            .remove(&queue.0)
            .ok_or_else(|| Fault(format!("no queue {} to retire", queue.0).into()))?;
        self.end_queue(q)
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        most_ring(&self.shared.node, kind)
    }

    fn clock(&self) -> u64 {
        self.read_clock().gpu
    }

    fn read_clock(&self) -> ClockSample {
        read_clock(&self.shared.kfd, self.shared.gpu_id)
    }

    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        if let Some(why) = fault {
            tracing::debug!(reason = %why, "stopping a lost KFD device's queues");
        }
        let mut all = self.end_staging().is_ok();
        for (_, q) in std::mem::take(&mut self.queues) {
            all &= self.end_queue(q).is_ok();
        }
        // Those KFD could not destroy before get one more try each; any left may run.
        for q in std::mem::take(&mut self.undestroyed) {
            all &= self.destroy(q).is_ok();
        }
        if all {
            Stopped::Stopped
        } else {
            Stopped::Unknown
        }
    }

    fn busy_since(&self) -> Option<Instant> {
        // A queue KFD could not destroy may run for ever.
        if let Some(since) = self.undestroyed.iter().map(|q| q.since).min() {
            return Some(since);
        }
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

impl Drop for KfdPath {
    fn drop(&mut self) {
        let _ = self.stop(None);
        // What a queue KFD could not destroy may use stays allocated (until the process's
        // KFD process ends, which destroys its queues first).
        for q in std::mem::take(&mut self.undestroyed) {
            for b in q.buffers {
                self.held.remove(&b.token);
            }
        }
        for (_, h) in std::mem::take(&mut self.held) {
            self.release(&h);
        }
    }
}
