//! The `sim` path: the simulated GPU of `rig-sim`, reached in-process.
//!
//! One [`SimBackend`] per configured simulated GPU; each device opened on it gets a
//! [`SimPath`] over a fresh address space (its own VMID). Memory kinds (`docs/client.md`)
//! map so: Device memory is simulated VRAM; Pinned memory is memfd pages the address space
//! maps and the client maps too; Mapped memory is also memfd pages (the simulator has no
//! BAR), and as much VRAM is reserved for it as it has bytes, in a holding address space no
//! queue runs in, so Mapped memory takes from VRAM what a BAR mapping of VRAM would.
//! Host memory a client passes (`map_host`) is mapped in rigd only for the range asked.
//!
//! Interrupts: a simulated queue calls its interrupt callback on its own thread right after
//! the release's write; the callback is this path's interrupt handler, which wakes the
//! sleepers of the device's word ([`super::wake`]) and then tells the device. Every release
//! carries [`SIM_INTERRUPT`].
//!
//! GPU addresses are chosen here: a bump allocator per address space from
//! [`FIRST_VA`], with an unmapped guard page after each allocation so an overrun faults
//! instead of reaching the next allocation. Freed ranges are not reused; the 47-bit space
//! holds billions of allocations.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use rig_amd::PAGE_BYTES as PAGE;
use rig_amd::aql::AmdQueue;
use rig_proto::messages::{MemoryKind, PathKind, QueueKind};
use rig_shm::SharedRegion;
use rig_sim::{AddressSpace, FaultReason, KernelFault, QueueFault, SimConfig, SimError, SimGpu};

use super::wake::Sleepers;
use super::{
    Backend, DiscoverError, Events, Fault, Found, GpuDescription, MapRefusal, Owner, Path,
    PathMemory, QueueHandle, QueueSpec, Refusal, Stopped, Survey, memory,
};
use crate::config::SimGpuConfig;

/// The first GPU address a device's allocations get (4 GiB: address 0 and its
/// neighbourhood stay unmapped so null-ish pointers fault).
pub const FIRST_VA: u64 = 1 << 32;
/// One past the last GPU address (47 bits, the canonical lower half).
pub const END_VA: u64 = 1 << 47;
/// The interrupt context of a simulated device's releases: the simulated queue hands its
/// interrupts to this path's own callback, which needs no context to find the device, so
/// any nonzero value serves.
pub const SIM_INTERRUPT: u32 = 1;

/// A simulated GPU.
#[derive(Debug)]
pub struct SimBackend {
    gpu: Arc<SimGpu>,
    desc: GpuDescription,
    holding: Arc<Holding>,
}

/// VRAM reserved for Mapped memory: allocated in an address space of its own that no queue
/// runs in and nobody reads, so the pages are never touched (they cost no host memory) yet
/// no Device allocation can have them.
#[derive(Debug)]
struct Holding {
    space: AddressSpace,
    /// Free GPU address ranges of the holding space: start -> bytes.
    free: Mutex<BTreeMap<u64, u64>>,
}

impl Holding {
    fn new(gpu: &Arc<SimGpu>) -> Holding {
        let mut free = BTreeMap::new();
        free.insert(FIRST_VA, END_VA - FIRST_VA);
        Holding {
            space: gpu.create_address_space(),
            free: Mutex::new(free),
        }
    }

    /// Reserves `bytes` of VRAM; returns where they are held.
    fn reserve(&self, bytes: u64) -> Result<u64, Refusal> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (start, len) = free
            .iter()
            .find(|(_, l)| **l >= bytes)
            .map(|(s, l)| (*s, *l))
            .ok_or_else(|| Refusal::Lacking("the gpu has no room to hold Mapped memory".into()))?;
        match self.space.alloc_vram(start, bytes) {
            Ok(()) => {}
            Err(SimError::Map(rig_sim::MapError::OutOfVram { .. })) => {
                return Err(Refusal::Lacking(
                    format!("the simulated gpu has no {bytes} bytes of vram left").into(),
                ));
            }
            Err(e) => return Err(Refusal::Refused(e.to_string().into())),
        }
        free.remove(&start);
        if len > bytes {
            free.insert(start + bytes, len - bytes);
        }
        Ok(start)
    }

    /// Gives back what `reserve` held at `va`.
    fn release(&self, va: u64, bytes: u64) {
        if let Err(e) = self.space.unmap(va, bytes) {
            tracing::warn!(va, bytes, error = %e, "giving back vram held for Mapped memory failed");
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (mut start, mut len) = (va, bytes);
        if let Some((&ps, &pl)) = free.range(..va).next_back()
            && ps + pl == va
        {
            free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(nl) = free.remove(&(va + bytes)) {
            len += nl;
        }
        free.insert(start, len);
    }
}

/// The wire's fault for what a simulated queue reported, with every fact the simulator has:
/// the queue and its VMID always; the address, direction and instruction of a memory fault;
/// the instruction of an illegal or unsupported one and of a trap; a bad packet's position.
/// A device has one queue of each engine, so the queue's index is 0.
fn fault_of(f: &QueueFault) -> rig_proto::Fault {
    use rig_proto::FaultKind as K;
    use rig_sim::ExecFault;
    let mut out = rig_proto::Fault::new(K::Internal, String::new());
    out.queue = Some(rig_proto::QueueRef {
        kind: f.kind,
        index: 0,
    });
    out.vmid = Some(f.vmid);
    let page = |out: &mut rig_proto::Fault, p: &rig_sim::PageFault| {
        out.kind = K::MemoryFault;
        out.vmid = Some(p.vmid);
        out.address = Some(p.address);
        out.write = Some(p.write);
        out.detail = if p.read_only {
            "the page is read-only".into()
        } else {
            "the page is not mapped".into()
        };
    };
    match &f.reason {
        FaultReason::Page(p) | FaultReason::Kernel(KernelFault::Page(p)) => page(&mut out, p),
        FaultReason::BadPacket { position, reason } => {
            out.kind = K::BadPacket;
            out.position = Some(*position);
            out.detail = reason.to_string();
        }
        FaultReason::Kernel(KernelFault::Refused(why)) => {
            out.kind = K::BadPacket;
            out.detail = format!("the dispatch cannot run: {why}");
        }
        FaultReason::Kernel(KernelFault::Unsupported(why)) => {
            out.kind = K::UnsupportedInstruction;
            out.detail = why.clone();
        }
        FaultReason::Kernel(KernelFault::Exec(e)) => match e {
            ExecFault::Memory { fault, pc } => {
                out.kind = K::MemoryFault;
                out.address = Some(fault.address);
                out.write = Some(fault.write);
                out.pc = Some(*pc);
            }
            ExecFault::IllegalInstruction { address, words } => {
                out.kind = K::IllegalInstruction;
                out.pc = Some(*address);
                out.detail = format!("the words {words:08x?}");
            }
            ExecFault::VgprOutOfRange { address } => {
                out.kind = K::IllegalInstruction;
                out.pc = Some(*address);
                out.detail = "it names a VGPR beyond the wave's allocation".into();
            }
            ExecFault::Unsupported { address, text } => {
                out.kind = K::UnsupportedInstruction;
                out.pc = Some(*address);
                out.detail = format!("`{text}` is not simulated");
            }
            ExecFault::Trap { address, code } => {
                out.kind = K::Trap;
                out.pc = Some(*address);
                out.detail = format!("s_trap {code}");
            }
            ExecFault::BadDispatch { reason } => {
                out.kind = K::BadPacket;
                out.detail = format!("the dispatch cannot run: {reason}");
            }
            e @ (ExecFault::Stopped | ExecFault::Internal) => {
                out.detail = format!("the simulator's interpreter: {e}");
            }
        },
        FaultReason::Internal(why) => out.detail = format!("the simulator: {why}"),
    }
    out.bounded()
}

impl SimBackend {
    /// Makes the simulated GPU a `[[sim]]` entry describes.
    pub fn new(c: &SimGpuConfig) -> Result<Self, SimError> {
        let config = SimConfig {
            model: c.processor.clone(),
            vram_bytes: c.memory_bytes,
            clock: c.clock.model(),
            ..SimConfig::default()
        };
        let clock_hz = config.clock.hz;
        let gpu = SimGpu::new(config)?;
        let model = gpu.model().clone();
        // Every work-group processor of every array runs work.
        let wgps = model
            .hal()
            .all_wgps(model.shader_engines, model.compute_units);
        let apart = crate::path::source_apart(&model);
        let desc = GpuDescription {
            gpu: model,
            kind: PathKind::Sim,
            budget: gpu.vram_bytes(),
            host_visible: gpu.vram_bytes(),
            bus: None,
            clock_hz,
            clock: crate::path::ClockSource::Source { apart },
            mec: 0,
            wgps,
            cache_bytes: None,
            hang_ms: Some(u64::from(c.hang_ms)),
            maps_host: true,
            client_cost: None,
            // A simulated queue's state is on rigd's heap and its thread is the device's:
            // nothing besides the ring, and an AQL queue's `amd_queue_t` page.
            queue_memory: crate::path::QueueCosts {
                aql: crate::path::QueueMemory { gpu: 0, host: PAGE },
                ..crate::path::QueueCosts::default()
            },
        };
        let holding = Arc::new(Holding::new(&gpu));
        Ok(Self { gpu, desc, holding })
    }
}

/// The sim path's discovery: the configured `[[sim]]` GPUs; with none configured and no
/// GPU listed before them (no AMD GPU found), one simulated gfx1100, the embedded default,
/// which rigd says in its log.
pub(crate) fn discover(survey: &Survey<'_>) -> Result<Vec<Found>, DiscoverError> {
    let sims: Vec<SimGpuConfig> = if survey.config.sim.is_empty() && survey.listed.is_empty() {
        tracing::info!(
            "no AMD GPU found and no [[sim]] configured: serving the embedded default, one simulated gfx1100"
        );
        vec![SimGpuConfig::embedded_default()]
    } else {
        survey.config.sim.clone()
    };
    sims.iter()
        .map(|s| {
            let backend = SimBackend::new(s).map_err(|e| DiscoverError {
                path: PathKind::Sim,
                what: format!("cannot make the simulated {}", s.processor),
                source: Box::new(e),
            })?;
            let d = backend.description();
            Ok(Found {
                arch: d.gpu.name(),
                path: PathKind::Sim,
                bus: None,
                budget: d.budget,
                simulated: true,
                backend: Ok(Arc::new(backend)),
                firmware: None,
            })
        })
        .collect()
}

impl Backend for SimBackend {
    fn description(&self) -> &GpuDescription {
        &self.desc
    }

    fn open(&self, _: Owner, events: Events) -> Result<Box<dyn Path>, Refusal> {
        let space = self.gpu.create_address_space();
        tracing::debug!(vmid = space.vmid(), "new simulated address space");
        Ok(Box::new(SimPath {
            space,
            events,
            next_va: FIRST_VA,
            next_token: 1,
            held: HashMap::new(),
            queues: HashMap::new(),
            descriptors: HashMap::new(),
            holding: self.holding.clone(),
            stopped: false,
            sleepers: Arc::default(),
        }))
    }
}

/// One device's address space on a simulated GPU.
#[derive(Debug)]
pub struct SimPath {
    space: AddressSpace,
    events: Events,
    next_va: u64,
    next_token: u64,
    /// What each token maps: its address and bytes (to unmap) and, for Mapped memory,
    /// where its VRAM is held.
    held: HashMap<u64, (u64, u64, Option<u64>)>,
    queues: HashMap<u64, rig_sim::Queue>,
    /// Each AQL queue's `amd_queue_t`, by the queue's token: where its processor reads the
    /// scratch of each dispatch, as a KFD queue's does.
    descriptors: HashMap<u64, PathMemory>,
    holding: Arc<Holding>,
    stopped: bool,
    /// The device's word, which every interrupt of its queues wakes.
    sleepers: Arc<Sleepers>,
}

impl SimPath {
    /// The `amd_queue_t` of an AQL queue of `spec`, in a Pinned page of this space.
    fn amd_queue(&mut self, spec: &QueueSpec) -> Result<PathMemory, Refusal> {
        let q = AmdQueue::for_gpu(
            self.space.gpu().model(),
            spec.ring,
            spec.bytes,
            spec.scratch,
        );
        let m = self.alloc(MemoryKind::Pinned, PAGE)?;
        match &m.host {
            Some(host) => host.write(0, &q.to_bytes()),
            None => {
                self.free(m);
                return Err(Refusal::Refused(
                    "Pinned memory without a host mapping".into(),
                ));
            }
        }
        Ok(m)
    }
}

impl SimPath {
    fn reserve(&mut self, bytes: u64) -> Option<u64> {
        let va = self.next_va;
        let end = va.checked_add(bytes)?.checked_add(PAGE)?;
        if end > END_VA {
            return None;
        }
        self.next_va = end;
        Some(va)
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    fn map_region(
        &mut self,
        region: SharedRegion,
        offset: u64,
        bytes: u64,
        kind: Option<MemoryKind>,
        writable: bool,
    ) -> Result<PathMemory, Refusal> {
        let va = self
            .reserve(bytes)
            .ok_or_else(|| Refusal::Lacking("the device's gpu address space is full".into()))?;
        self.space
            .map_host(va, &region, offset, bytes, writable)
            .map_err(|e| Refusal::Refused(e.to_string().into()))?;
        let token = self.token();
        self.held.insert(token, (va, bytes, None));
        Ok(PathMemory {
            address: va,
            bytes,
            kind,
            host: Some(region),
            token,
        })
    }
}

impl Path for SimPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        let bytes = memory::alloc_bytes(bytes)?;
        match kind {
            MemoryKind::Device => {
                let va = self.reserve(bytes).ok_or_else(|| {
                    Refusal::Lacking("the device's gpu address space is full".into())
                })?;
                match self.space.alloc_vram(va, bytes) {
                    Ok(()) => {}
                    Err(SimError::Map(rig_sim::MapError::OutOfVram { .. })) => {
                        return Err(Refusal::Lacking(
                            format!("the simulated gpu has no {bytes} bytes of vram left").into(),
                        ));
                    }
                    Err(e) => return Err(Refusal::Refused(e.to_string().into())),
                }
                let token = self.token();
                self.held.insert(token, (va, bytes, None));
                Ok(PathMemory {
                    address: va,
                    bytes,
                    kind: Some(kind),
                    host: None,
                    token,
                })
            }
            MemoryKind::Pinned | MemoryKind::Mapped => {
                let name = if kind == MemoryKind::Pinned {
                    "rig-pinned"
                } else {
                    "rig-mapped"
                };
                let len = usize::try_from(bytes).map_err(|_| {
                    Refusal::Lacking(
                        format!("{bytes} bytes exceed the host's address space").into(),
                    )
                })?;
                let region = SharedRegion::create(name, len).map_err(|e| {
                    Refusal::Lacking(format!("the host has no memory for it: {e}").into())
                })?;
                let hold = if kind == MemoryKind::Mapped {
                    Some(self.holding.reserve(bytes)?)
                } else {
                    None
                };
                let m = match self.map_region(region, 0, bytes, Some(kind), true) {
                    Ok(m) => m,
                    Err(e) => {
                        if let Some(at) = hold {
                            self.holding.release(at, bytes);
                        }
                        return Err(e);
                    }
                };
                if let Some(entry) = self.held.get_mut(&m.token) {
                    entry.2 = hold;
                }
                Ok(m)
            }
        }
    }

    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        let region = memory::host_region(fd, offset, bytes)?;
        let bytes = region.len() as u64;
        Ok(self.map_region(region, 0, bytes, None, true)?)
    }

    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        // rigd made the region (sealed against shrinking), so no client can truncate it
        // under the mapping; the clone keeps it alive after the other device frees it.
        let bytes = memory::peer_range(region, offset, bytes)?;
        self.map_region(region.clone(), offset, bytes, None, false)
    }

    fn free(&mut self, memory: PathMemory) {
        if let Some((va, bytes, hold)) = self.held.remove(&memory.token) {
            if let Err(e) = self.space.unmap(va, bytes) {
                tracing::warn!(va, bytes, error = %e, "unmapping freed memory failed");
            }
            if let Some(at) = hold {
                self.holding.release(at, bytes);
            }
        }
        // The host mapping (if any) goes with `memory`.
    }

    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        self.space
            .write(memory.address + offset, data)
            .map_err(|f| Fault(f.to_string().into()))
    }

    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        if self.stopped {
            return Err(Refusal::Refused("the device is stopped".into()));
        }
        let descriptor = if spec.kind == QueueKind::Aql {
            Some(self.amd_queue(&spec)?)
        } else {
            None
        };
        let desc = rig_sim::QueueDesc {
            kind: spec.kind,
            ring_va: spec.ring,
            ring_bytes: spec.bytes,
            rptr_va: spec.read,
            wptr_va: spec.write,
            doorbell: spec.doorbell,
            queue_va: descriptor.as_ref().map_or(0, |d| d.address),
            scratch: spec.scratch,
        };
        let irq = self.events.interrupt.clone();
        let fault = self.events.fault.clone();
        let sleepers = self.sleepers.clone();
        let made = self.space.create_queue(
            desc,
            // The path's interrupt handler: the release wrote the word before it
            // interrupted, so its sleepers find the value.
            Arc::new(move |_| {
                sleepers.wake();
                irq()
            }),
            Arc::new(move |f| fault(fault_of(&f))),
        );
        let q = match made {
            Ok(q) => q,
            Err(e) => {
                if let Some(d) = descriptor {
                    self.free(d);
                }
                return Err(match e {
                    SimError::Thread(e) => {
                        Refusal::Lacking(format!("no thread for the queue: {e}").into())
                    }
                    e => Refusal::Refused(e.to_string().into()),
                });
            }
        };
        let token = self.token();
        self.queues.insert(token, q);
        if let Some(d) = descriptor {
            self.descriptors.insert(token, d);
        }
        Ok(QueueHandle(token))
    }

    fn interrupt(&self) -> u32 {
        SIM_INTERRUPT
    }

    fn wake_on_interrupt(&mut self, memory: &PathMemory, offset: u64) -> Result<(), Refusal> {
        self.sleepers.set(memory, offset)
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        match self.queues.remove(&queue.0) {
            Some(q) => {
                q.stop();
                if let Some(d) = self.descriptors.remove(&queue.0) {
                    self.free(d);
                }
                Ok(())
            }
            None => Err(Fault(format!("no queue {} to retire", queue.0).into())),
        }
    }

    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal> {
        let update = AmdQueue::scratch_update(self.space.gpu().model(), address, bytes);
        for host in self.descriptors.values().filter_map(|d| d.host.as_ref()) {
            host.write(AmdQueue::SCRATCH_FIELDS.start, &update);
        }
        Ok(())
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        self.space.gpu().model().most_ring(kind)
    }

    fn clock(&self) -> u64 {
        self.read_clock().gpu
    }

    fn read_clock(&self) -> rig_proto::ClockSample {
        // rigd reads the GPU's counter itself: a preemption of the read (the model's stall)
        // lands between its two readings of the host's clock.
        let before = crate::gpus::monotonic_ns();
        let read = self.space.gpu().read_source();
        if !read.stall.is_zero() {
            std::thread::sleep(read.stall);
        }
        let after = crate::gpus::monotonic_ns();
        rig_proto::ClockSample {
            gpu: read.ticks,
            host_before_ns: before,
            host_after_ns: after,
            gap_ns: 0,
        }
    }

    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        self.stopped = true;
        if let Some(why) = fault {
            tracing::debug!(
                vmid = self.space.vmid(),
                reason = %why,
                "stopping a lost device's queues"
            );
        }
        // rig-sim's stop returns once nothing of the queue writes memory.
        for (_, q) in self.queues.drain() {
            q.stop();
        }
        Stopped::Stopped
    }

    fn busy_since(&self) -> Option<std::time::Instant> {
        self.queues.values().filter_map(|q| q.busy_since()).min()
    }

    fn progress(&self) -> u64 {
        // Queues come and go (growth, retire), so the sum may fall: any change is progress.
        self.queues
            .values()
            .fold(0u64, |sum, q| sum.wrapping_add(q.progress()))
    }

    fn progressed_at(&self) -> Option<std::time::Instant> {
        self.queues.values().filter_map(|q| q.progressed_at()).max()
    }
}

impl Drop for SimPath {
    fn drop(&mut self) {
        for (_, q) in self.queues.drain() {
            q.stop();
        }
        // VRAM held for Mapped memory belongs to the GPU, which outlives this space.
        for (_, (_, bytes, hold)) in self.held.drain() {
            if let Some(at) = hold {
                self.holding.release(at, bytes);
            }
        }
    }
}
