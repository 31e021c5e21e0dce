//! The `sim` path: the simulated GPU of `rig-sim`, reached in-process.
//!
//! One [`SimBackend`] per configured simulated GPU; each device opened on it gets a
//! [`SimPath`] over a fresh address space (its own VMID). Memory kinds map as design.md
//! says: Device memory is simulated VRAM; Pinned memory is memfd pages the address space
//! maps and the client maps too; Mapped memory is also memfd pages (the simulator has no
//! BAR), counted against the VRAM budget.
//!
//! GPU addresses are chosen here: a bump allocator per address space from
//! [`FIRST_VA`], with an unmapped guard page after each allocation so an overrun faults
//! instead of reaching the next allocation. Freed ranges are not reused; the 47-bit space
//! holds billions of allocations.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rig_proto::messages::{MemoryKind, PathKind, QueueKind};
use rig_shm::SharedRegion;
use rig_sim::{AddressSpace, SimConfig, SimError, SimGpu};

use super::{
    Backend, Events, Fault, GpuDescription, MapRefusal, Path, PathMemory, QueueHandle, QueueSpec,
    Refusal, Stopped,
};
use crate::config::SimGpuConfig;

/// The first GPU address a device's allocations get (4 GiB: address 0 and its
/// neighbourhood stay unmapped so null-ish pointers fault).
pub const FIRST_VA: u64 = 1 << 32;
/// One past the last GPU address (47 bits, the canonical lower half).
pub const END_VA: u64 = 1 << 47;
const PAGE: u64 = 4096;

/// A simulated GPU.
#[derive(Debug)]
pub struct SimBackend {
    gpu: Arc<SimGpu>,
    desc: GpuDescription,
}

fn to_amd(kind: QueueKind) -> rig_amd::gpu::QueueKind {
    match kind {
        QueueKind::Pm4 => rig_amd::gpu::QueueKind::Pm4,
        QueueKind::Aql => rig_amd::gpu::QueueKind::Aql,
        QueueKind::Sdma => rig_amd::gpu::QueueKind::Sdma,
    }
}

impl SimBackend {
    /// Makes the simulated GPU a `[[sim]]` entry describes.
    pub fn new(c: &SimGpuConfig) -> Result<Self, String> {
        let config = SimConfig {
            model: c.processor.clone(),
            vram_bytes: c.memory_bytes,
            ..SimConfig::default()
        };
        let clock_hz = config.clock_hz;
        let gpu = SimGpu::new(config).map_err(|e| e.to_string())?;
        let model = gpu.model().clone();
        // Every work-group processor of every array runs work: shader engines each with
        // two arrays, the compute units split evenly, two CUs per WGP.
        let arrays = 2u32;
        let wgps_per_array =
            (model.compute_units / model.shader_engines.max(1) / arrays / 2).max(1);
        let mask = if wgps_per_array >= 32 {
            u32::MAX
        } else {
            (1u32 << wgps_per_array) - 1
        };
        let wgps = vec![vec![mask; arrays as usize]; model.shader_engines as usize];
        let desc = GpuDescription {
            gpu: model,
            kind: PathKind::Sim,
            budget: gpu.vram_bytes(),
            bus: None,
            clock_hz,
            mec: 0,
            wgps,
            cache_bytes: None,
            hang_ms: Some(u64::from(c.hang_ms)),
            maps_host: true,
        };
        Ok(Self { gpu, desc })
    }
}

impl Backend for SimBackend {
    fn description(&self) -> &GpuDescription {
        &self.desc
    }

    fn open(&self, events: Events) -> Result<Box<dyn Path>, Refusal> {
        let space = self.gpu.create_address_space();
        tracing::debug!(vmid = space.vmid(), "new simulated address space");
        Ok(Box::new(SimPath {
            space,
            events,
            next_va: FIRST_VA,
            next_token: 1,
            held: HashMap::new(),
            queues: HashMap::new(),
            mapped_bytes: 0,
            stopped: false,
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
    /// What each token maps: its address and bytes (to unmap) and whether it is Mapped
    /// memory (counted against VRAM).
    held: HashMap<u64, (u64, u64, bool)>,
    queues: HashMap<u64, rig_sim::Queue>,
    mapped_bytes: u64,
    stopped: bool,
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
            .map_err(|e| Refusal::Refused(e.to_string()))?;
        let token = self.token();
        let is_mapped = kind == Some(MemoryKind::Mapped);
        self.held.insert(token, (va, bytes, is_mapped));
        Ok(PathMemory {
            address: va,
            bytes,
            kind,
            host: Some(region),
            token,
        })
    }
}

fn page_round(bytes: u64) -> Option<u64> {
    bytes.checked_add(PAGE - 1).map(|b| b / PAGE * PAGE)
}

impl Path for SimPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        let bytes = page_round(bytes)
            .filter(|b| *b > 0)
            .ok_or_else(|| Refusal::Refused(format!("cannot allocate {bytes} bytes")))?;
        match kind {
            MemoryKind::Device => {
                let va = self.reserve(bytes).ok_or_else(|| {
                    Refusal::Lacking("the device's gpu address space is full".into())
                })?;
                match self.space.alloc_vram(va, bytes) {
                    Ok(()) => {}
                    Err(SimError::Map(rig_sim::MapError::OutOfVram { .. })) => {
                        return Err(Refusal::Lacking(format!(
                            "the simulated gpu has no {bytes} bytes of vram left"
                        )));
                    }
                    Err(e) => return Err(Refusal::Refused(e.to_string())),
                }
                let token = self.token();
                self.held.insert(token, (va, bytes, false));
                Ok(PathMemory {
                    address: va,
                    bytes,
                    kind: Some(kind),
                    host: None,
                    token,
                })
            }
            MemoryKind::Pinned | MemoryKind::Mapped => {
                if kind == MemoryKind::Mapped && self.space.gpu().vram_free() < bytes {
                    return Err(Refusal::Lacking(format!(
                        "the simulated gpu has no {bytes} bytes of vram left"
                    )));
                }
                let name = if kind == MemoryKind::Pinned {
                    "rig-pinned"
                } else {
                    "rig-mapped"
                };
                let len = usize::try_from(bytes).map_err(|_| {
                    Refusal::Lacking(format!("{bytes} bytes exceed the host's address space"))
                })?;
                let region = SharedRegion::create(name, len)
                    .map_err(|e| Refusal::Lacking(format!("the host has no memory for it: {e}")))?;
                let m = self.map_region(region, 0, bytes, Some(kind), true)?;
                if kind == MemoryKind::Mapped {
                    self.mapped_bytes += bytes;
                }
                Ok(m)
            }
        }
    }

    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        // Sealed against shrinking before it is mapped: a client that could truncate it
        // later would make the GPU's (rigd's) next access a SIGBUS. See docs/security.md.
        let region = SharedRegion::from_fd_sealed(fd).map_err(|e| match &e {
            rig_shm::ShmError::Unsealable(source) => MapRefusal::Unfit(format!(
                "{e} ({source}); rig-shm's SharedRegion::create makes such memfds"
            )),
            _ => MapRefusal::Never(format!(
                "the descriptor is not shared memory rigd can map for writing: {e}"
            )),
        })?;
        let bytes = page_round(bytes).unwrap_or(u64::MAX);
        if !region.contains(offset, bytes) {
            return Err(MapRefusal::Never(format!(
                "{bytes} bytes at offset {offset} lie outside the {}-byte memfd",
                region.len()
            )));
        }
        self.map_region(region, offset, bytes, None, true)
            .map_err(|r| match r {
                Refusal::Lacking(s) => MapRefusal::NoRoom(s),
                Refusal::Full(s) | Refusal::Refused(s) => MapRefusal::Never(s),
            })
    }

    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        // rigd made the region (sealed against shrinking), so no client can truncate it
        // under the mapping; the clone keeps it alive after the other device frees it.
        let bytes = page_round(bytes).unwrap_or(u64::MAX);
        if offset % PAGE != 0 || !region.contains(offset, bytes) {
            return Err(Refusal::Refused(format!(
                "{bytes} bytes at offset {offset} are not whole pages of the {}-byte memory",
                region.len()
            )));
        }
        self.map_region(region.clone(), offset, bytes, None, false)
    }

    fn free(&mut self, memory: PathMemory) {
        if let Some((va, bytes, mapped)) = self.held.remove(&memory.token) {
            if let Err(e) = self.space.unmap(va, bytes) {
                tracing::warn!(va, bytes, error = %e, "unmapping freed memory failed");
            }
            if mapped {
                self.mapped_bytes = self.mapped_bytes.saturating_sub(bytes);
            }
        }
        // The host mapping (if any) goes with `memory`.
    }

    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        self.space
            .write(memory.address + offset, data)
            .map_err(|f| Fault(f.to_string()))
    }

    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        if self.stopped {
            return Err(Refusal::Refused("the device is stopped".into()));
        }
        let desc = rig_sim::QueueDesc {
            kind: to_amd(spec.kind),
            ring_va: spec.ring,
            ring_bytes: spec.bytes,
            rptr_va: spec.read,
            wptr_va: spec.write,
            doorbell: spec.doorbell,
            queue_va: 0,
            scratch: spec.scratch,
        };
        let irq = self.events.interrupt.clone();
        let fault = self.events.fault.clone();
        let q = self
            .space
            .create_queue(
                desc,
                Arc::new(move |_| irq()),
                Arc::new(move |f| fault(f.to_string())),
            )
            .map_err(|e| match e {
                SimError::Thread(e) => Refusal::Lacking(format!("no thread for the queue: {e}")),
                e => Refusal::Refused(e.to_string()),
            })?;
        let token = self.token();
        self.queues.insert(token, q);
        Ok(QueueHandle(token))
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        match self.queues.remove(&queue.0) {
            Some(q) => {
                q.stop();
                Ok(())
            }
            None => Err(Fault(format!("no queue {} to retire", queue.0))),
        }
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        self.space.gpu().model().most_ring(to_amd(kind))
    }

    fn clock(&self) -> u64 {
        self.space.gpu().clock_ticks()
    }

    fn stop(&mut self, fault: Option<&str>) -> Stopped {
        self.stopped = true;
        if let Some(why) = fault {
            tracing::debug!(
                vmid = self.space.vmid(),
                reason = why,
                "stopping a lost device's queues"
            );
        }
        // rig-sim's stop returns once nothing of the queue writes memory.
        for (_, q) in self.queues.drain() {
            q.stop();
        }
        Stopped::Stopped
    }
}

impl Drop for SimPath {
    fn drop(&mut self) {
        for (_, q) in self.queues.drain() {
            q.stop();
        }
    }
}
