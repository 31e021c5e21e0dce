//! The emulated kernel: KFD's ioctls with the kernel's validation and errnos, over rig-sim.
//!
//! One [`Kernel`] holds the emulated GPUs (each a [`rig_sim::SimGpu`] shared by every process
//! that opens it). A [`Process`] is one KFD process (one client process, however often it
//! opens `/dev/kfd`: [`crate::server`] finds it): per GPU one GPU VM (a rig-sim address
//! space, made by ACQUIRE_VM), its allocations, queues and doorbell page, and the process's
//! events. The client's exit ends its queues ([`Process::end_queues`], as the kernel's
//! `kfd_process_notifier_release`), and its last reference the rest ([`Process::release`]).
//!
//! The errnos are amdgpu's (`kfd_chardev.c`, `kfd_events.c`, `kfd_queue.c`,
//! `amdgpu_amdkfd_gpuvm.c`): EINVAL for malformed arguments, unknown GPUs and handles,
//! unaligned or overlapping addresses and buffers KFD does not accept; ENOMEM when memory or
//! event slots run out; ENOSPC when the process holds its most queues on the GPU
//! (`pqm_create_queue`); EPERM when the device holds its most queues; EBUSY for freeing memory still mapped or acquiring a second VM; EEXIST for
//! RUNTIME_ENABLE after queues exist; EFAULT for user memory the kernel could not read.
//! A refused call leaves nothing taken: CREATE_QUEUE counts a queue in its GPU's total only
//! once every check without side effects passed, and gives the count back on any later
//! refusal, as the device queue manager counts only the queues it made.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rig_amd::PAGE_BYTES as PAGE;
use rig_amd::aql::AmdQueue;
use rig_kfd::abi::{self, Command};
use rig_kfd::queue::{ContextSave, EOP_BUFFER_BYTES};
use rig_kfd::version::Version;
use rig_shm::{Doorbell, SharedRegion};
use rig_sim::{AddressSpace, SimConfig, SimGpu};
use zerocopy::{FromBytes, IntoBytes};

use crate::tree::NodeFacts;

/// An errno the emulated kernel answers.
pub type Errno = i32;

/// Queues one process may hold on one GPU (`pqm_create_queue`'s `max_queues`).
pub const MAX_QUEUES_PER_PROCESS: usize = 127;
pub use rig_kfd::abi::DOORBELL_SLICE_BYTES;
/// Bytes between two queues' doorbells: rig-shm's doorbell slots, so the emulated queue
/// processors can sleep until rung.
pub const DOORBELL_STRIDE: u64 = rig_shm::layout::DOORBELL_SLOT_BYTES as u64;
/// Bytes of the kernel's signal-event page (8 bytes per signal event).
pub const EVENT_PAGE_BYTES: u64 = abi::SIGNAL_EVENT_LIMIT as u64 * 8;
/// The mmap offset of the kernel's event page on `/dev/kfd`: `KFD_MMAP_TYPE_EVENTS`, the type
/// in the top two bits (what Linux 6.1's CREATE_EVENT answers, seen in the guest test).
pub const EVENT_PAGE_OFFSET: u64 = 2 << 62;
/// The value of a signal slot no one signalled.
pub const UNSIGNALED: u64 = u64::MAX;
/// The first id of events other than signal events: the upper half of the kernel's id space,
/// `(INT_MAX >> 1) + 1` (`KFD_FIRST_NONSIGNAL_EVENT_ID`).
pub const FIRST_NONSIGNAL_EVENT: u32 = (i32::MAX as u32 >> 1) + 1;
/// The first signal event's id: the kernel keeps id 0 for itself (its fast path ignores an
/// interrupt with no context id), so signal events are numbered from 1.
pub const FIRST_SIGNAL_EVENT: u32 = 1;
/// The lowest GPU address a process may allocate at.
pub const GPUVM_BASE: u64 = 1 << 32;
/// The highest (47 bits).
pub const GPUVM_LIMIT: u64 = (1 << 47) - 1;

/// What to emulate.
#[derive(Debug, Clone)]
pub struct Config {
    /// Processors, one GPU each (gfx1100, gfx1201, gfx942 by default).
    pub models: Vec<String>,
    /// VRAM bytes of each GPU.
    pub vram_bytes: u64,
    /// VRAM bytes of each GPU the host reaches through its BAR; `None`: all of it (a
    /// resizable BAR). Less than `vram_bytes` plays a GPU without resizable BAR (256 MiB):
    /// the topology lists its VRAM as private and PUBLIC VRAM is refused, as amdgpu does.
    pub bar_bytes: Option<u64>,
    /// The KFD interface version GET_VERSION answers.
    pub version: Version,
    /// Queues one process may hold on one GPU: the kernel's 127 (`pqm_create_queue`, which
    /// allows 255 on GC 9.4.3; the emulation keeps 127 there too), past which CREATE_QUEUE is
    /// ENOSPC. At most the doorbell page's 128 slots hold doorbells: a larger value lets a
    /// queue past the page be asked for, which is EINVAL.
    pub max_queues_per_process: usize,
    /// Queues one GPU holds across processes (`max_num_of_queues_per_device`).
    pub max_queues_per_device: usize,
    /// Bytes a compute queue's context-save area (`ctx_save_restore_size`) must hold beyond
    /// `rig_kfd::queue::ContextSave`'s, as a kernel or firmware whose rule differs asks (0:
    /// Linux 6.12's rule).
    pub cwsr_extra_bytes: u64,
    /// Whether ALLOC_MEMORY_OF_GPU gives the MMIO_REMAP (HDP flush) page; without it the
    /// allocation answers ENOMEM, as amdgpu does on a GPU whose register page it cannot
    /// remap (pages larger than 4 KiB, SR-IOV functions).
    pub mmio_remap: bool,
    /// How each GPU's clock runs against the host's (its stamps, and the counter
    /// GET_CLOCK_COUNTERS reads: `constant` apart on a GFX12 GPU whose KFD reads another
    /// counter; rig_sim's [`rig_sim::clock`]). Its `stall` is not used: see `clock_stall`.
    pub clock: rig_sim::ClockModel,
    /// Nanoseconds GET_CLOCK_COUNTERS spends between its read of the GPU's counter and its
    /// sample of the host's clocks (the kernel's is a register read's return and a call).
    pub clock_gap_ns: u64,
    /// One GET_CLOCK_COUNTERS preempted in that gap: the `read`th (from 1) of a GPU by the
    /// processes that hold a queue on it (a device's measures, not a discovery's), stalled
    /// `ns` before the host's sample.
    pub clock_stall: Option<rig_sim::Stall>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            models: vec!["gfx1100".into(), "gfx1201".into(), "gfx942".into()],
            vram_bytes: 4 << 30,
            bar_bytes: None,
            version: Version {
                major: 1,
                minor: 14,
            },
            max_queues_per_process: MAX_QUEUES_PER_PROCESS,
            max_queues_per_device: 4096,
            cwsr_extra_bytes: 0,
            mmio_remap: true,
            clock: rig_sim::ClockModel::default(),
            clock_gap_ns: 0,
            clock_stall: None,
        }
    }
}

/// One emulated GPU.
#[derive(Debug)]
pub struct Gpu {
    /// What the topology says of it.
    pub facts: NodeFacts,
    /// Its topology node.
    pub node: rig_kfd::topology::Node,
    /// The simulated GPU every process shares.
    pub sim: Arc<SimGpu>,
    queues: AtomicUsize,
    /// VRAM bytes every process's VRAM allocations reserve (amdgpu reserves at
    /// ALLOC_MEMORY_OF_GPU, host-visible or not, and releases at FREE).
    vram_held: AtomicU64,
    /// GET_CLOCK_COUNTERS of it by processes holding a queue on it (`Config::clock_stall`).
    queued_clock_reads: AtomicU64,
}

impl Gpu {
    /// Reserves `bytes` of its VRAM, or ENOMEM past its size.
    fn reserve_vram(&self, bytes: u64) -> Result<(), Errno> {
        self.vram_held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|h| *h <= self.facts.vram_bytes)
            })
            .map(|_| ())
            .map_err(|_| libc::ENOMEM)
    }

    /// Gives back what a VRAM allocation of `bytes` reserved.
    fn release_vram(&self, bytes: u64) {
        self.vram_held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Takes one of the device's `most` queues (`max_num_of_queues_per_device`), or `None`
    /// when it holds them all; the count goes back when the guard drops, unless kept.
    fn take_queue(&self, most: usize) -> Option<QueueCount<'_>> {
        self.queues
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < most).then_some(n + 1)
            })
            .ok()
            .map(|_| QueueCount(Some(&self.queues)))
    }

    /// Queues every process holds on it now (the device queue manager's
    /// `total_queue_count`).
    pub fn queues(&self) -> usize {
        self.queues.load(Ordering::Acquire)
    }

    /// The VRAM bytes no allocation reserves (AVAILABLE_MEMORY).
    pub fn vram_available(&self) -> u64 {
        self.facts
            .vram_bytes
            .saturating_sub(self.vram_held.load(Ordering::Acquire))
    }
}

/// One queue counted in a GPU's total while a CREATE_QUEUE is under way: given back when
/// dropped (the call refused), unless [`QueueCount::keep`] (the queue was made).
#[derive(Debug)]
struct QueueCount<'a>(Option<&'a AtomicUsize>);

impl QueueCount<'_> {
    /// The queue was made: its count stays until DESTROY_QUEUE or the process's end.
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for QueueCount<'_> {
    fn drop(&mut self) {
        if let Some(count) = self.0 {
            count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The emulated kernel.
#[derive(Debug)]
pub struct Kernel {
    config: Config,
    gpus: Vec<Gpu>,
    /// Render-node files open, by token.
    renders: Mutex<HashMap<u64, Render>>,
    next_token: AtomicUsize,
}

/// An open render node. Its token is a file descriptor of the caller that opened it, and of
/// no one else: the kernel resolves ACQUIRE_VM's `drm_fd` in the calling process's own file
/// table (`fget`), so no process can name another's open render node.
#[derive(Debug, Clone)]
struct Render {
    /// Its GPU's index.
    gpu: usize,
    /// The client process (pid) that opened it: the only caller whose `drm_fd` names it.
    opener: i32,
    /// The process whose VM it was bound to.
    bound: Option<Arc<Process>>,
}

/// The GPU ids the emulation gives (KFD derives them from a hash; any nonzero id works).
fn gpu_id_of(index: usize) -> u32 {
    0x1000 + 0x111 * index as u32
}

impl Kernel {
    /// The kernel emulating `config`'s GPUs.
    pub fn new(config: Config) -> Result<Arc<Kernel>, rig_sim::SimError> {
        let mut gpus = Vec::new();
        for (i, model) in config.models.iter().enumerate() {
            let sim = SimGpu::new(SimConfig {
                model: model.clone(),
                vram_bytes: config.vram_bytes,
                exec_threads: 2,
                clock: rig_sim::ClockModel {
                    stall: None,
                    ..config.clock
                },
                ..SimConfig::default()
            })?;
            let facts = NodeFacts {
                gpu: sim.model(),
                gpu_id: gpu_id_of(i),
                render_minor: 128 + i as u32,
                bus: 3 + i as u32,
                vram_bytes: config.vram_bytes,
                bar_bytes: config.bar_bytes.unwrap_or(config.vram_bytes),
            };
            gpus.push(Gpu {
                node: crate::tree::node(&facts, i as u32 + 1),
                facts,
                sim,
                queues: AtomicUsize::new(0),
                vram_held: AtomicU64::new(0),
                queued_clock_reads: AtomicU64::new(0),
            });
        }
        Ok(Arc::new(Kernel {
            config,
            gpus,
            renders: Mutex::new(HashMap::new()),
            next_token: AtomicUsize::new(1),
        }))
    }

    /// The emulated GPUs.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// What the topology tree holds.
    pub fn facts(&self) -> Vec<NodeFacts> {
        self.gpus.iter().map(|g| g.facts.clone()).collect()
    }

    fn gpu_index(&self, gpu_id: u32) -> Option<usize> {
        self.gpus.iter().position(|g| g.facts.gpu_id == gpu_id)
    }

    /// A new KFD process (the first open of `/dev/kfd` by client process `caller`, a pid).
    pub fn open_kfd(self: &Arc<Self>, caller: i32) -> Arc<Process> {
        Arc::new(Process {
            kernel: self.clone(),
            caller,
            state: Mutex::new(State {
                devices: (0..self.gpus.len()).map(|_| Device::default()).collect(),
                runtime_enabled: false,
                gone: false,
            }),
            events: Arc::new(EventTable::default()),
        })
    }

    /// Opens render node `minor` for client process `caller` (a pid): its token, which only
    /// `caller`'s KFD process can name in ACQUIRE_VM, or ENOENT.
    pub fn open_render(&self, minor: u32, caller: i32) -> Result<u64, Errno> {
        let index = self
            .gpus
            .iter()
            .position(|g| g.facts.render_minor == minor)
            .ok_or(libc::ENOENT)?;
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) as u64;
        lock(&self.renders).insert(
            token,
            Render {
                gpu: index,
                opener: caller,
                bound: None,
            },
        );
        Ok(token)
    }

    /// Closes a render node.
    pub fn close_render(&self, token: u64) {
        lock(&self.renders).remove(&token);
    }

    /// An mmap of the render node file `token` (the file the mapping names, whichever
    /// process holds it now: DRM checks the file, as `drm_vma_node_is_allowed` does, not the
    /// caller): the memfd of the allocation at `offset` of the process its VM is bound to.
    pub fn mmap_render(&self, token: u64, offset: u64, len: u64) -> Result<SharedRegion, Errno> {
        let Render {
            gpu: index, bound, ..
        } = lock(&self.renders)
            .get(&token)
            .cloned()
            .ok_or(libc::EBADF)?;
        let process = bound.ok_or(libc::EINVAL)?;
        let state = lock(&process.state);
        let bo = state.devices[index]
            .bos
            .values()
            .find(|b| b.mmap_offset == offset)
            .ok_or(libc::EINVAL)?;
        match &bo.pages {
            Pages::Host(region, 0) if bo.size == len && region.len() as u64 == len => {
                Ok(region.clone())
            }
            // VRAM without PUBLIC is NO_CPU_ACCESS: amdgpu_gem_object_mmap refuses it.
            Pages::Vram => Err(libc::EPERM),
            _ => Err(libc::EINVAL),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where an allocation's bytes are.
#[derive(Debug)]
enum Pages {
    /// Simulated VRAM (mapped into the VM at map time).
    Vram,
    /// Host pages: a memfd and the offset of the allocation in it.
    Host(SharedRegion, u64),
    /// The process's doorbell page.
    Doorbells,
    /// The MMIO_REMAP page (the HDP flush registers).
    Mmio,
}

#[derive(Debug)]
struct Bo {
    va: u64,
    size: u64,
    flags: u32,
    pages: Pages,
    mmap_offset: u64,
    mapped: bool,
}

#[derive(Debug)]
struct EmuQueue {
    sim: rig_sim::Queue,
    /// Its doorbell's front end (stopped after the queue, when dropped).
    front: crate::hdp::Front,
    slot: usize,
    /// CREATE_QUEUE's `queue_type`.
    kind: u32,
    /// Where an AQL queue's command processor finds its `amd_queue_t`; 0 for other kinds.
    amd_queue: u64,
}

#[derive(Debug, Default)]
struct Device {
    /// The GPU VM, once ACQUIRE_VM bound a render node.
    space: Option<AddressSpace>,
    render: Option<u64>,
    bos: BTreeMap<u32, Bo>,
    next_bo: u32,
    doorbells: Option<SharedRegion>,
    /// The GPU's HDP flush page as this process sees it.
    hdp: Option<Arc<crate::hdp::Hdp>>,
    slots: Vec<bool>,
    queues: BTreeMap<u32, EmuQueue>,
}

#[derive(Debug)]
struct State {
    devices: Vec<Device>,
    runtime_enabled: bool,
    gone: bool,
}

/// One KFD process.
#[derive(Debug)]
pub struct Process {
    kernel: Arc<Kernel>,
    /// The client process (pid) it is the KFD process of: whose file table ACQUIRE_VM's
    /// `drm_fd` is looked up in.
    caller: i32,
    state: Mutex<State>,
    events: Arc<EventTable>,
}

#[derive(Debug)]
struct Event {
    kind: u32,
    auto_reset: bool,
    signaled: bool,
    data: abi::EventData,
}

#[derive(Debug, Default)]
struct Events {
    map: BTreeMap<u32, Event>,
    /// The signal page: the kernel's own, or a GTT allocation the process gave.
    page: Option<SharedRegion>,
    page_is_kernels: bool,
    gone: bool,
}

/// A process's events, signalled from the simulated GPU's threads.
#[derive(Debug, Default)]
struct EventTable {
    inner: Mutex<Events>,
    changed: Condvar,
}

impl EventTable {
    /// A release's interrupt with `context`: KFD signals the event whose id it names if that
    /// event's slot was written, else every signal event whose slot was written; it
    /// acknowledges (resets) each slot it acts on.
    fn interrupt(&self, context: u32) {
        let mut e = lock(&self.inner);
        let Some(page) = e.page.clone() else { return };
        let slot = |id: u32| page.atomic_u64(id as usize * 8);
        let hit = context < abi::SIGNAL_EVENT_LIMIT
            && e.map
                .get(&context)
                .is_some_and(|ev| matches!(ev.kind, abi::EVENT_SIGNAL | abi::EVENT_DEBUG_EVENT))
            && slot(context).load(Ordering::Acquire) != UNSIGNALED;
        let ids: Vec<u32> = if hit {
            vec![context]
        } else {
            e.map
                .iter()
                .filter(|(id, ev)| {
                    matches!(ev.kind, abi::EVENT_SIGNAL | abi::EVENT_DEBUG_EVENT)
                        && slot(**id).load(Ordering::Acquire) != UNSIGNALED
                })
                .map(|(id, _)| *id)
                .collect()
        };
        for id in ids {
            slot(id).store(UNSIGNALED, Ordering::Release);
            if let Some(ev) = e.map.get_mut(&id) {
                ev.signaled = true;
            }
        }
        self.changed.notify_all();
    }

    /// Signals every event of `kind` with `data`.
    fn exception(&self, kind: u32, data: abi::EventData) {
        let mut e = lock(&self.inner);
        for ev in e.map.values_mut().filter(|ev| ev.kind == kind) {
            ev.signaled = true;
            ev.data.payload = data.payload;
        }
        self.changed.notify_all();
    }
}

/// The faulting address of a GPU page fault, and whether its page is mapped read-only: the
/// command processor's own accesses and a kernel's alike raise a VM fault, which KFD reports
/// as a memory exception; any other queue fault is not one.
fn page_fault(
    reason: &rig_sim::FaultReason,
    vm: &std::sync::Weak<rig_sim::memory::Vm>,
) -> Option<(u64, bool)> {
    use rig_sim::FaultReason as R;
    use rig_sim::dispatch::KernelFault as K;
    match reason {
        R::Page(p) | R::Kernel(K::Page(p)) => Some((p.address, p.read_only)),
        R::Kernel(K::Exec(rig_sim::ExecFault::Memory { fault, .. })) => {
            // A write refused at a mapped page was refused for being read-only.
            let read_only = fault.write
                && vm
                    .upgrade()
                    .is_some_and(|vm| vm.check(fault.address, 1, false).is_ok());
            Some((fault.address, read_only))
        }
        _ => None,
    }
}

fn read_args<C: Command>(args: &[u8]) -> C {
    // The kernel zero-extends a smaller block (an older header's) to its own size.
    let mut block = C::default();
    let n = args.len().min(std::mem::size_of::<C>());
    block.as_mut_bytes()[..n].copy_from_slice(&args[..n]);
    block
}

fn write_args<C: Command>(args: &mut [u8], block: &C) {
    let n = args.len().min(std::mem::size_of::<C>());
    args[..n].copy_from_slice(&block.as_bytes()[..n]);
}

/// What an ioctl answers besides its block: an fd to install, at `field` of the block.
#[derive(Debug)]
pub struct NewFd {
    /// The block offset of the u32 that gets the fd's number.
    pub field: usize,
    /// The memfd.
    pub region: SharedRegion,
}

fn page_aligned(x: u64) -> bool {
    x % PAGE == 0
}

fn handle(gpu_id: u32, idr: u32) -> u64 {
    (u64::from(gpu_id) << 32) | u64::from(idr)
}

impl Process {
    /// Handles one ioctl: `args` in and out, `array` the memory a pointer in it names,
    /// `userptr` the memfd and offset of a USERPTR allocation's pages.
    pub fn ioctl(
        self: &Arc<Self>,
        request: u64,
        args: &mut [u8],
        array: &mut [u8],
        userptr: Option<(SharedRegion, u64)>,
    ) -> Result<Option<NewFd>, Errno> {
        let nr = ((request & 0xff) as u8, (request >> 8) & 0xff);
        if nr.1 != u64::from(abi::IOCTL_BASE) {
            return Err(libc::ENOTTY);
        }
        let ioctl = abi::Ioctl::from_nr(nr.0).ok_or(libc::EINVAL)?;
        if self.kernel.config.version < ioctl.since {
            // A number past this kernel's AMDKFD_COMMAND_END.
            return Err(libc::EINVAL);
        }
        match ioctl.nr {
            n if n == abi::GET_VERSION.nr => {
                let v = abi::GetVersionArgs {
                    major_version: self.kernel.config.version.major,
                    minor_version: self.kernel.config.version.minor,
                };
                write_args(args, &v);
                Ok(None)
            }
            n if n == abi::ACQUIRE_VM.nr => self.acquire_vm(read_args(args)).map(|()| None),
            n if n == abi::RUNTIME_ENABLE.nr => {
                let mut s = lock(&self.state);
                if s.devices.iter().any(|d| !d.queues.is_empty()) {
                    return Err(libc::EEXIST);
                }
                s.runtime_enabled = true;
                Ok(None)
            }
            n if n == abi::GET_PROCESS_APERTURES_NEW.nr => {
                let mut a: abi::GetProcessAperturesNewArgs = read_args(args);
                let count = self.kernel.gpus.len() as u32;
                if a.num_of_nodes == 0 {
                    a.num_of_nodes = count;
                    write_args(args, &a);
                    return Ok(None);
                }
                // Asking for more nodes than the topology has GPUs is EINVAL (the kernel's
                // bound, "Add upper bound check for num_of_nodes", in Debian's 6.1 and in
                // the stable kernels since).
                if a.num_of_nodes > count {
                    return Err(libc::EINVAL);
                }
                let n = a.num_of_nodes.min(count) as usize;
                let entry = std::mem::size_of::<abi::ProcessDeviceApertures>();
                if array.len() < n * entry {
                    return Err(libc::EFAULT);
                }
                for (i, g) in self.kernel.gpus.iter().take(n).enumerate() {
                    let ap = abi::ProcessDeviceApertures {
                        lds_base: 0x1_0000_0000_0000 * (i as u64 + 1),
                        lds_limit: 0x1_0000_0000_0000 * (i as u64 + 1) + 0xffff_ffff,
                        scratch_base: 0x2_0000_0000_0000 * (i as u64 + 1),
                        scratch_limit: 0x2_0000_0000_0000 * (i as u64 + 1) + 0xffff_ffff,
                        gpuvm_base: GPUVM_BASE,
                        gpuvm_limit: GPUVM_LIMIT,
                        gpu_id: g.facts.gpu_id,
                        pad: 0,
                    };
                    array[i * entry..(i + 1) * entry].copy_from_slice(ap.as_bytes());
                }
                a.num_of_nodes = n as u32;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::ALLOC_MEMORY_OF_GPU.nr => {
                let mut a: abi::AllocMemoryOfGpuArgs = read_args(args);
                self.alloc(&mut a, userptr)?;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::FREE_MEMORY_OF_GPU.nr => {
                let a: abi::FreeMemoryOfGpuArgs = read_args(args);
                self.free(a.handle).map(|()| None)
            }
            n if n == abi::MAP_MEMORY_TO_GPU.nr || n == abi::UNMAP_MEMORY_FROM_GPU.nr => {
                let mut a: abi::MapMemoryToGpuArgs = read_args(args);
                self.map(&mut a, array, n == abi::MAP_MEMORY_TO_GPU.nr)?;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::AVAILABLE_MEMORY.nr => {
                let mut a: abi::GetAvailableMemoryArgs = read_args(args);
                let i = self.kernel.gpu_index(a.gpu_id).ok_or(libc::EINVAL)?;
                a.available = self.kernel.gpus[i].vram_available();
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::EXPORT_DMABUF.nr => {
                let a: abi::ExportDmabufArgs = read_args(args);
                let s = lock(&self.state);
                let i = self
                    .kernel
                    .gpu_index((a.handle >> 32) as u32)
                    .ok_or(libc::EINVAL)?;
                let bo = s.devices[i]
                    .bos
                    .get(&(a.handle as u32))
                    .ok_or(libc::EINVAL)?;
                match &bo.pages {
                    Pages::Host(region, 0) if region.len() as u64 == bo.size => Ok(Some(NewFd {
                        field: std::mem::offset_of!(abi::ExportDmabufArgs, dmabuf_fd),
                        region: region.clone(),
                    })),
                    _ => Err(libc::EINVAL),
                }
            }
            n if n == abi::CREATE_QUEUE.nr => {
                let mut a: abi::CreateQueueArgs = read_args(args);
                self.create_queue(&mut a)?;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::DESTROY_QUEUE.nr => {
                let a: abi::DestroyQueueArgs = read_args(args);
                self.destroy_queue(a.queue_id).map(|()| None)
            }
            n if n == abi::CREATE_EVENT.nr => {
                let mut a: abi::CreateEventArgs = read_args(args);
                self.create_event(&mut a)?;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::DESTROY_EVENT.nr => {
                let a: abi::DestroyEventArgs = read_args(args);
                let mut e = lock(&self.events.inner);
                e.map.remove(&a.event_id).ok_or(libc::EINVAL)?;
                Ok(None)
            }
            n if n == abi::SET_EVENT.nr => {
                let a: abi::SetEventArgs = read_args(args);
                let mut e = lock(&self.events.inner);
                let ev = e.map.get_mut(&a.event_id).ok_or(libc::EINVAL)?;
                if ev.kind != abi::EVENT_SIGNAL {
                    return Err(libc::EINVAL);
                }
                ev.signaled = true;
                self.events.changed.notify_all();
                Ok(None)
            }
            n if n == abi::WAIT_EVENTS.nr => {
                let mut a: abi::WaitEventsArgs = read_args(args);
                a.wait_result = self.wait_events(&a, array)?;
                write_args(args, &a);
                Ok(None)
            }
            n if n == abi::GET_CLOCK_COUNTERS.nr => {
                let mut a: abi::GetClockCountersArgs = read_args(args);
                // KFD reads the GPU's counter first, then the host's clocks (raw monotonic,
                // boot time); a GPU it does not know reads 0 and the call still succeeds
                // (Linux's kfd_ioctl_get_clock_counters). The gap between the two is where
                // a preemption of the caller delays the host's sample.
                let index = self.kernel.gpu_index(a.gpu_id);
                a.gpu_clock_counter =
                    index.map_or(0, |i| self.kernel.gpus[i].sim.read_source().ticks);
                let gap_from = clock_ns(nix::time::ClockId::CLOCK_MONOTONIC);
                while clock_ns(nix::time::ClockId::CLOCK_MONOTONIC)
                    < gap_from + self.kernel.config.clock_gap_ns
                {
                    std::hint::spin_loop();
                }
                if let Some(i) = index {
                    self.preempt_clock_read(i);
                }
                a.cpu_clock_counter = clock_ns(nix::time::ClockId::CLOCK_MONOTONIC_RAW);
                a.system_clock_counter = clock_ns(nix::time::ClockId::CLOCK_BOOTTIME);
                a.system_clock_freq = 1_000_000_000;
                write_args(args, &a);
                Ok(None)
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// Stalls this GET_CLOCK_COUNTERS of GPU `i` if it is `Config::clock_stall`'s read.
    fn preempt_clock_read(&self, i: usize) {
        let Some(stall) = self.kernel.config.clock_stall else {
            return;
        };
        let holds_queue = lock(&self.state)
            .devices
            .get(i)
            .is_some_and(|d| !d.queues.is_empty());
        if !holds_queue {
            return;
        }
        let n = self.kernel.gpus[i]
            .queued_clock_reads
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if n == stall.read {
            std::thread::sleep(std::time::Duration::from_nanos(stall.ns));
        }
    }

    fn acquire_vm(self: &Arc<Self>, a: abi::AcquireVmArgs) -> Result<(), Errno> {
        let token = u64::from(a.drm_fd);
        let mut renders = lock(&self.kernel.renders);
        // kfd_ioctl_acquire_vm's `fget(args->drm_fd)`, first: a descriptor that is not one
        // of the caller's own (another process's render node, or none) is EINVAL.
        let entry = renders
            .get_mut(&token)
            .filter(|r| r.opener == self.caller)
            .ok_or(libc::EINVAL)?;
        let i = self.kernel.gpu_index(a.gpu_id).ok_or(libc::EINVAL)?;
        if entry.gpu != i {
            return Err(libc::EINVAL);
        }
        let mut s = lock(&self.state);
        let dev = &mut s.devices[i];
        if let Some(bound) = dev.render {
            return if bound == token {
                Ok(())
            } else {
                Err(libc::EBUSY)
            };
        }
        // A file whose VM another KFD process made a compute VM ("Already a compute VM?").
        if entry.bound.as_ref().is_some_and(|p| !Arc::ptr_eq(p, self)) {
            return Err(libc::EINVAL);
        }
        let region = SharedRegion::create("kfd-emu-doorbells", DOORBELL_SLICE_BYTES as usize)
            .map_err(|_| libc::ENOMEM)?;
        dev.space = Some(self.kernel.gpus[i].sim.create_address_space());
        dev.render = Some(token);
        dev.doorbells = Some(region);
        dev.hdp = Some(crate::hdp::Hdp::new().map_err(|_| libc::ENOMEM)?);
        dev.slots = vec![false; self.kernel.config.max_queues_per_process];
        dev.next_bo = 1;
        // The process reaches its allocations' pages through this render node.
        entry.bound = Some(self.clone());
        Ok(())
    }

    fn alloc(
        &self,
        a: &mut abi::AllocMemoryOfGpuArgs,
        userptr: Option<(SharedRegion, u64)>,
    ) -> Result<(), Errno> {
        let i = self.kernel.gpu_index(a.gpu_id).ok_or(libc::EINVAL)?;
        let kinds = a.flags
            & (abi::ALLOC_MEM_FLAGS_VRAM
                | abi::ALLOC_MEM_FLAGS_GTT
                | abi::ALLOC_MEM_FLAGS_USERPTR
                | abi::ALLOC_MEM_FLAGS_DOORBELL
                | abi::ALLOC_MEM_FLAGS_MMIO_REMAP);
        if kinds.count_ones() != 1 {
            return Err(libc::EINVAL);
        }
        if a.size == 0 || !page_aligned(a.size) || !page_aligned(a.va_addr) {
            return Err(libc::EINVAL);
        }
        let end = a.va_addr.checked_add(a.size).ok_or(libc::EINVAL)?;
        if a.va_addr < GPUVM_BASE || end - 1 > GPUVM_LIMIT {
            return Err(libc::EINVAL);
        }
        let mut s = lock(&self.state);
        let dev = &mut s.devices[i];
        if dev.space.is_none() {
            return Err(libc::EINVAL);
        }
        if dev
            .bos
            .values()
            .any(|b| a.va_addr < b.va + b.size && b.va < end)
        {
            return Err(libc::EINVAL);
        }
        let gpu = &self.kernel.gpus[i];
        // kfd_ioctl_alloc_memory_of_gpu: "Alloc host visible vram on small bar is not
        // allowed".
        if kinds == abi::ALLOC_MEM_FLAGS_VRAM
            && a.flags & abi::ALLOC_MEM_FLAGS_PUBLIC != 0
            && !gpu.facts.large_bar()
        {
            return Err(libc::EINVAL);
        }
        let pages = match kinds {
            abi::ALLOC_MEM_FLAGS_VRAM if a.flags & abi::ALLOC_MEM_FLAGS_PUBLIC == 0 => {
                gpu.reserve_vram(a.size)?;
                Pages::Vram
            }
            abi::ALLOC_MEM_FLAGS_VRAM => {
                gpu.reserve_vram(a.size)?;
                let region = usize::try_from(a.size)
                    .ok()
                    .and_then(|len| SharedRegion::create("kfd-emu-bo", len).ok());
                match region {
                    Some(r) => Pages::Host(r, 0),
                    None => {
                        gpu.release_vram(a.size);
                        return Err(libc::ENOMEM);
                    }
                }
            }
            abi::ALLOC_MEM_FLAGS_GTT => {
                let len = usize::try_from(a.size).map_err(|_| libc::ENOMEM)?;
                Pages::Host(
                    SharedRegion::create("kfd-emu-bo", len).map_err(|_| libc::ENOMEM)?,
                    0,
                )
            }
            abi::ALLOC_MEM_FLAGS_USERPTR => {
                if !page_aligned(a.mmap_offset) {
                    return Err(libc::EINVAL);
                }
                let (region, offset) = userptr.ok_or(libc::EFAULT)?;
                if !page_aligned(offset) || !region.contains(offset, a.size) {
                    return Err(libc::EFAULT);
                }
                Pages::Host(region, offset)
            }
            abi::ALLOC_MEM_FLAGS_DOORBELL => {
                if a.size != DOORBELL_SLICE_BYTES {
                    return Err(libc::EINVAL);
                }
                Pages::Doorbells
            }
            // kfd_ioctl_alloc_memory_of_gpu: one page, and ENOMEM where the GPU has no
            // remapped register page.
            abi::ALLOC_MEM_FLAGS_MMIO_REMAP => {
                if a.size != crate::hdp::PAGE_BYTES {
                    return Err(libc::EINVAL);
                }
                if !self.kernel.config.mmio_remap {
                    return Err(libc::ENOMEM);
                }
                Pages::Mmio
            }
            _ => return Err(libc::EINVAL),
        };
        let idr = dev.next_bo;
        let Some(next) = dev.next_bo.checked_add(1) else {
            if kinds == abi::ALLOC_MEM_FLAGS_VRAM {
                gpu.release_vram(a.size);
            }
            return Err(libc::ENOMEM);
        };
        dev.next_bo = next;
        let mmap_offset = ((i as u64 + 1) << 52) | (u64::from(idr) << 12);
        dev.bos.insert(
            idr,
            Bo {
                va: a.va_addr,
                size: a.size,
                flags: a.flags,
                pages,
                mmap_offset,
                mapped: false,
            },
        );
        a.handle = handle(a.gpu_id, idr);
        if kinds == abi::ALLOC_MEM_FLAGS_MMIO_REMAP {
            // "MMIO is mapped through kfd device": KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID.
            a.mmap_offset = mmio_mmap_offset(a.gpu_id);
        } else if kinds != abi::ALLOC_MEM_FLAGS_USERPTR {
            a.mmap_offset = mmap_offset;
        }
        Ok(())
    }

    fn free(&self, h: u64) -> Result<(), Errno> {
        let i = self
            .kernel
            .gpu_index((h >> 32) as u32)
            .ok_or(libc::EINVAL)?;
        let mut s = lock(&self.state);
        let dev = &mut s.devices[i];
        let bo = dev.bos.get(&(h as u32)).ok_or(libc::EINVAL)?;
        if bo.mapped {
            return Err(libc::EBUSY);
        }
        if let Some(bo) = dev.bos.remove(&(h as u32))
            && bo.flags & abi::ALLOC_MEM_FLAGS_VRAM != 0
        {
            self.kernel.gpus[i].release_vram(bo.size);
        }
        Ok(())
    }

    fn map(&self, a: &mut abi::MapMemoryToGpuArgs, array: &[u8], map: bool) -> Result<(), Errno> {
        let n = a.n_devices as usize;
        if n == 0 || n > self.kernel.gpus.len() || a.n_success as usize > n {
            return Err(libc::EINVAL);
        }
        if array.len() < n * 4 {
            return Err(libc::EFAULT);
        }
        let ids: Vec<u32> = array[..n * 4]
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let owner = self
            .kernel
            .gpu_index((a.handle >> 32) as u32)
            .ok_or(libc::EINVAL)?;
        let mut s = lock(&self.state);
        for &id in &ids[a.n_success as usize..] {
            let i = self.kernel.gpu_index(id).ok_or(libc::EINVAL)?;
            // This emulation has no peer mappings: memory maps only on its own GPU.
            if i != owner {
                return Err(libc::EINVAL);
            }
            let dev = &mut s.devices[i];
            let space = dev.space.clone().ok_or(libc::EINVAL)?;
            let doorbells = dev.doorbells.clone();
            let hdp = dev.hdp.clone();
            let bo = dev.bos.get_mut(&(a.handle as u32)).ok_or(libc::EINVAL)?;
            if bo.mapped == map {
                a.n_success += 1;
                continue;
            }
            if map {
                let writable = bo.flags & abi::ALLOC_MEM_FLAGS_WRITABLE != 0;
                let r = match &bo.pages {
                    Pages::Vram => space.alloc_vram(bo.va, bo.size),
                    Pages::Host(region, offset) => {
                        space.map_host(bo.va, region, *offset, bo.size, writable)
                    }
                    Pages::Doorbells => match &doorbells {
                        Some(region) => space.map_host(bo.va, region, 0, bo.size, true),
                        None => return Err(libc::EINVAL),
                    },
                    Pages::Mmio => match &hdp {
                        Some(h) => space.map_host(bo.va, h.page(), 0, bo.size, true),
                        None => return Err(libc::EINVAL),
                    },
                };
                r.map_err(|e| match e {
                    rig_sim::SimError::Map(rig_sim::MapError::OutOfVram { .. }) => libc::ENOMEM,
                    _ => libc::EINVAL,
                })?;
            } else {
                space.unmap(bo.va, bo.size).map_err(|_| libc::EINVAL)?;
            }
            bo.mapped = map;
            a.n_success += 1;
        }
        Ok(())
    }

    /// `kfd_queue_buffer_get` (Linux 6.12+): whether `va`'s page is the first page of a
    /// mapping on the device and, where `expected >> 12` is not 0, that mapping's last page
    /// is `expected`'s last (the mapping is exactly `expected` bytes). KFD takes a reference
    /// on each queue buffer's mapping so that it cannot be unmapped under the queue.
    fn buffer_get(dev: &Device, va: u64, expected: u64) -> bool {
        let page = va / PAGE;
        let pages = expected / PAGE;
        dev.bos.values().any(|b| {
            let (start, last) = (b.va / PAGE, (b.va + b.size) / PAGE - 1);
            b.mapped && b.size > 0 && start == page && (pages == 0 || page + pages - 1 == last)
        })
    }

    fn create_queue(self: &Arc<Self>, a: &mut abi::CreateQueueArgs) -> Result<(), Errno> {
        let i = self.kernel.gpu_index(a.gpu_id).ok_or(libc::EINVAL)?;
        let kind = match a.queue_type {
            abi::QUEUE_TYPE_COMPUTE => rig_amd::gpu::QueueKind::Pm4,
            abi::QUEUE_TYPE_COMPUTE_AQL => rig_amd::gpu::QueueKind::Aql,
            abi::QUEUE_TYPE_SDMA => rig_amd::gpu::QueueKind::Sdma,
            _ => return Err(libc::EINVAL),
        };
        if a.queue_percentage > abi::MAX_QUEUE_PERCENTAGE
            || a.queue_priority > abi::MAX_QUEUE_PRIORITY
            || a.ring_base_address == 0
            || !a.ring_size.is_power_of_two()
        {
            return Err(libc::EINVAL);
        }
        let ring_bytes = u64::from(a.ring_size.max(abi::MIN_QUEUE_RING_SIZE));
        let gpu = &self.kernel.gpus[i];
        let mut s = lock(&self.state);
        let dev = &mut s.devices[i];
        if dev.space.is_none() {
            return Err(libc::EINVAL);
        }
        // Linux 6.12's kfd_queue_acquire_buffers, for every queue type: the write and read
        // pointers each in a mapping of exactly the one page they lie in, and the ring the
        // start of a mapping of exactly its size (AQL rings of GFX7/8 count half).
        let aql = kind == rig_amd::gpu::QueueKind::Aql;
        let gfx = gpu.node.gfx_target_version();
        let ring_expected = if aql && (70000..90000).contains(&gfx) {
            ring_bytes / 2
        } else {
            ring_bytes
        };
        if !(Self::buffer_get(dev, a.write_pointer_address, PAGE)
            && Self::buffer_get(dev, a.read_pointer_address, PAGE)
            && Self::buffer_get(dev, a.ring_base_address, ring_expected))
        {
            return Err(libc::EINVAL);
        }
        // The command processor finds an AQL queue's amd_queue_t at its read pointer and
        // reads each kernel's scratch there.
        let queue_va = if aql {
            AmdQueue::at_read_pointer(a.read_pointer_address).ok_or(libc::EINVAL)?
        } else {
            0
        };
        if kind != rig_amd::gpu::QueueKind::Sdma {
            let want = ContextSave::of(&gpu.node);
            // The EOP buffer a mapping of exactly its size, the context-save area a mapping
            // of exactly its size and the debugger's bytes, per die, in whole pages.
            let cwsr_total = (u64::from(a.ctx_save_restore_size) + want.debug_bytes)
                .saturating_mul(want.dies)
                .next_multiple_of(PAGE);
            if a.eop_buffer_size != EOP_BUFFER_BYTES
                || !Self::buffer_get(dev, a.eop_buffer_address, a.eop_buffer_size)
                || u64::from(a.ctx_save_restore_size)
                    != want.cwsr_bytes + self.kernel.config.cwsr_extra_bytes
                || u64::from(a.ctl_stack_size) != want.ctl_stack_bytes
                || !Self::buffer_get(dev, a.ctx_save_restore_address, cwsr_total)
            {
                return Err(libc::EINVAL);
            }
        }
        // Everything that can refuse without taking anything comes first: the process's
        // slot and queue id, its doorbell and the VM. Then the device's count is taken,
        // held by a guard that gives it back on every later refusal.
        let slot = dev
            .slots
            .iter()
            .position(|used| !used)
            .ok_or(libc::ENOSPC)?;
        let id = (0..u32::MAX)
            .find(|id| !dev.queues.contains_key(id))
            .ok_or(libc::ENOMEM)?;
        let region = dev.doorbells.clone().ok_or(libc::EINVAL)?;
        let bell =
            Doorbell::new(region, slot * DOORBELL_STRIDE as usize).map_err(|_| libc::EINVAL)?;
        let hdp = dev.hdp.clone().ok_or(libc::EINVAL)?;
        let space = dev.space.clone().ok_or(libc::EINVAL)?;
        let counted = gpu
            .take_queue(self.kernel.config.max_queues_per_device)
            .ok_or(libc::EPERM)?;
        let (front, bell) = crate::hdp::Front::start(bell, hdp, if aql { u64::MAX } else { 0 })
            .map_err(|_| libc::ENOMEM)?;
        let events = self.events.clone();
        let faults = self.events.clone();
        let gpu_id = a.gpu_id;
        // The VM whose page tables tell a write to a read-only page from one not present.
        let vm = Arc::downgrade(space.memory());
        let q = space
            .create_queue(
                rig_sim::QueueDesc {
                    kind,
                    ring_va: a.ring_base_address,
                    ring_bytes,
                    rptr_va: a.read_pointer_address,
                    wptr_va: a.write_pointer_address,
                    doorbell: bell,
                    queue_va,
                    scratch: (0, 0),
                },
                Arc::new(move |irq| events.interrupt(irq.context)),
                Arc::new(move |f| {
                    let mut data = abi::EventData::default();
                    match page_fault(&f.reason, &vm) {
                        Some((va, read_only)) => {
                            data.set_memory_exception(&abi::MemoryExceptionData {
                                failure: abi::MemoryExceptionFailure {
                                    not_present: u32::from(!read_only),
                                    read_only: u32::from(read_only),
                                    ..Default::default()
                                },
                                va,
                                gpu_id,
                                error_type: abi::MEM_ERR_NO_RAS,
                            });
                            faults.exception(abi::EVENT_MEMORY, data);
                        }
                        None => {
                            data.set_hw_exception(&abi::HwExceptionData {
                                reset_type: abi::HW_EXCEPTION_PER_ENGINE_RESET,
                                reset_cause: abi::HW_EXCEPTION_GPU_HANG,
                                memory_lost: 0,
                                gpu_id,
                            });
                            faults.exception(abi::EVENT_HW_EXCEPTION, data);
                        }
                    }
                }),
            )
            .map_err(|_| libc::ENOMEM)?;
        // Nothing refuses past here: the queue keeps its count until it is destroyed.
        counted.keep();
        dev.slots[slot] = true;
        dev.queues.insert(
            id,
            EmuQueue {
                sim: q,
                front,
                slot,
                kind: a.queue_type,
                amd_queue: queue_va,
            },
        );
        a.queue_id = id;
        a.doorbell_offset = doorbell_mmap_offset(i) + slot as u64 * DOORBELL_STRIDE;
        Ok(())
    }

    fn destroy_queue(&self, id: u32) -> Result<(), Errno> {
        let mut s = lock(&self.state);
        for (i, dev) in s.devices.iter_mut().enumerate() {
            if let Some(q) = dev.queues.remove(&id) {
                q.sim.stop();
                dev.slots[q.slot] = false;
                self.kernel.gpus[i].queues.fetch_sub(1, Ordering::AcqRel);
                return Ok(());
            }
        }
        Err(libc::EINVAL)
    }

    fn create_event(&self, a: &mut abi::CreateEventArgs) -> Result<(), Errno> {
        let mut e = lock(&self.events.inner);
        match a.event_type {
            // A debug event takes a signal slot as a signal event does.
            abi::EVENT_SIGNAL | abi::EVENT_DEBUG_EVENT => {
                if e.page.is_none() {
                    if a.event_page_offset != 0 {
                        let h = a.event_page_offset;
                        let i = self
                            .kernel
                            .gpu_index((h >> 32) as u32)
                            .ok_or(libc::EINVAL)?;
                        let s = lock(&self.state);
                        let bo = s.devices[i].bos.get(&(h as u32)).ok_or(libc::EINVAL)?;
                        match &bo.pages {
                            Pages::Host(region, 0)
                                if bo.flags & abi::ALLOC_MEM_FLAGS_GTT != 0
                                    && region.len() as u64 >= EVENT_PAGE_BYTES =>
                            {
                                e.page = Some(region.clone());
                            }
                            _ => return Err(libc::EINVAL),
                        }
                        e.page_is_kernels = false;
                    } else {
                        e.page = Some(
                            SharedRegion::create("kfd-emu-events", EVENT_PAGE_BYTES as usize)
                                .map_err(|_| libc::ENOMEM)?,
                        );
                        e.page_is_kernels = true;
                    }
                }
                let id = (FIRST_SIGNAL_EVENT..abi::SIGNAL_EVENT_LIMIT)
                    .find(|id| !e.map.contains_key(id))
                    .ok_or(libc::ENOMEM)?;
                if let Some(page) = &e.page {
                    page.atomic_u64(id as usize * 8)
                        .store(UNSIGNALED, Ordering::Release);
                }
                a.event_id = id;
                a.event_slot_index = id;
                a.event_trigger_data = id;
                a.event_page_offset = if e.page_is_kernels {
                    EVENT_PAGE_OFFSET
                } else {
                    0
                };
            }
            // KFD checks no other type: any is made as an "other" event (which only the
            // kernel can signal; SET_EVENT on it is EINVAL).
            _ => {
                let id = (FIRST_NONSIGNAL_EVENT..=i32::MAX as u32)
                    .find(|id| !e.map.contains_key(id))
                    .ok_or(libc::ENOMEM)?;
                a.event_id = id;
                a.event_trigger_data = id;
            }
        }
        e.map.insert(
            a.event_id,
            Event {
                kind: a.event_type,
                auto_reset: a.auto_reset != 0,
                signaled: false,
                data: abi::EventData::default(),
            },
        );
        Ok(())
    }

    fn wait_events(&self, a: &abi::WaitEventsArgs, array: &mut [u8]) -> Result<u32, Errno> {
        let entry = std::mem::size_of::<abi::EventData>();
        let n = a.num_events as usize;
        // No events: every one of none is signaled, so the kernel answers COMPLETE.
        if n == 0 {
            return Ok(abi::WAIT_RESULT_COMPLETE);
        }
        if n > abi::SIGNAL_EVENT_LIMIT as usize {
            return Err(libc::EINVAL);
        }
        if array.len() < n * entry {
            return Err(libc::EFAULT);
        }
        let mut entries: Vec<abi::EventData> = array[..n * entry]
            .chunks_exact(entry)
            .map(|c| abi::EventData::read_from_bytes(c).unwrap_or_default())
            .collect();
        let deadline = Instant::now() + Duration::from_millis(u64::from(a.timeout));
        let mut e = lock(&self.events.inner);
        if entries.iter().any(|en| !e.map.contains_key(&en.event_id)) {
            return Err(libc::EINVAL);
        }
        let result = loop {
            if e.gone {
                break abi::WAIT_RESULT_FAIL;
            }
            let signaled: Vec<bool> = entries
                .iter()
                .map(|en| e.map.get(&en.event_id).is_some_and(|ev| ev.signaled))
                .collect();
            let done = if a.wait_for_all != 0 {
                signaled.iter().all(|s| *s)
            } else {
                signaled.iter().any(|s| *s)
            };
            if done {
                for (en, was) in entries.iter_mut().zip(signaled) {
                    if !was {
                        continue;
                    }
                    if let Some(ev) = e.map.get_mut(&en.event_id) {
                        en.payload = ev.data.payload;
                        if ev.auto_reset {
                            ev.signaled = false;
                        }
                    }
                }
                break abi::WAIT_RESULT_COMPLETE;
            }
            let now = Instant::now();
            if now >= deadline {
                break abi::WAIT_RESULT_TIMEOUT;
            }
            e = self
                .events
                .changed
                .wait_timeout(e, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        };
        for (i, en) in entries.iter().enumerate() {
            array[i * entry..(i + 1) * entry].copy_from_slice(en.as_bytes());
        }
        Ok(result)
    }

    /// An mmap of the process's `/dev/kfd`: a GPU's doorbell page or the kernel's event page.
    pub fn mmap(&self, offset: u64, len: u64) -> Result<SharedRegion, Errno> {
        if offset == EVENT_PAGE_OFFSET {
            let e = lock(&self.events.inner);
            return match &e.page {
                Some(p) if e.page_is_kernels && len == EVENT_PAGE_BYTES => Ok(p.clone()),
                _ => Err(libc::EINVAL),
            };
        }
        let s = lock(&self.state);
        for (i, dev) in s.devices.iter().enumerate() {
            if offset == mmio_mmap_offset(self.kernel.gpus[i].facts.gpu_id) {
                return match &dev.hdp {
                    Some(h) if self.kernel.config.mmio_remap && len == crate::hdp::PAGE_BYTES => {
                        Ok(h.page().clone())
                    }
                    _ => Err(libc::EINVAL),
                };
            }
            if offset == doorbell_mmap_offset(i) {
                return match &dev.doorbells {
                    Some(r) if len == DOORBELL_SLICE_BYTES => Ok(r.clone()),
                    _ => Err(libc::EINVAL),
                };
            }
        }
        Err(libc::EINVAL)
    }

    /// What the process holds: (queues, allocations, events), for tests of teardown.
    pub fn holdings(&self) -> (usize, usize, usize) {
        let s = lock(&self.state);
        let queues = s.devices.iter().map(|d| d.queues.len()).sum();
        let bos = s.devices.iter().map(|d| d.bos.len()).sum();
        (queues, bos, lock(&self.events.inner).map.len())
    }

    /// The `flags` (`abi::ALLOC_MEM_FLAGS_*`) and bytes of each allocation the process
    /// holds.
    pub fn memory(&self) -> Vec<(u32, u64)> {
        let s = lock(&self.state);
        s.devices
            .iter()
            .flat_map(|d| d.bos.values().map(|b| (b.flags, b.size)))
            .collect()
    }

    /// Per queue the process holds: the doorbells its front end passed on, and how many
    /// of them an HDP flush came before ([`crate::hdp`]).
    pub fn doorbells_flushed(&self) -> Vec<(u64, u64)> {
        let s = lock(&self.state);
        s.devices
            .iter()
            .flat_map(|d| d.queues.values().map(|q| q.front.counts()))
            .collect()
    }

    /// HDP flushes the process's stores asked for and its queues' doorbells took.
    pub fn hdp_flushes(&self) -> u64 {
        let s = lock(&self.state);
        s.devices
            .iter()
            .filter_map(|d| d.hdp.as_ref())
            .map(|h| h.flushes())
            .sum()
    }

    /// The `queue_type` (`abi::QUEUE_TYPE_*`) of each queue the process holds.
    pub fn queue_types(&self) -> Vec<u32> {
        let s = lock(&self.state);
        s.devices
            .iter()
            .flat_map(|d| d.queues.values().map(|q| q.kind))
            .collect()
    }

    /// The `amd_queue_t` of each AQL queue the process holds, as its command processor reads
    /// it now (`None` where its page tables refuse the read), for tests of what a runtime
    /// gave the queue.
    pub fn amd_queues(&self) -> Vec<Option<AmdQueue>> {
        let s = lock(&self.state);
        let mut out = Vec::new();
        for dev in &s.devices {
            for q in dev.queues.values().filter(|q| q.amd_queue != 0) {
                let mut b = [0u8; rig_amd::aql::amd_queue::BYTES];
                let read = dev
                    .space
                    .as_ref()
                    .and_then(|sp| sp.read(q.amd_queue, &mut b).ok());
                out.push(read.map(|()| AmdQueue::from_bytes(&b)));
            }
        }
        out
    }

    /// The process's address space went (`kfd_process_notifier_release`): its queues are
    /// destroyed.
    pub fn end_queues(&self) {
        let mut s = lock(&self.state);
        for (i, dev) in s.devices.iter_mut().enumerate() {
            for (_, q) in std::mem::take(&mut dev.queues) {
                q.sim.stop();
                dev.slots[q.slot] = false;
                self.kernel.gpus[i].queues.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The process's last reference went (its address space and every file of it): stop
    /// its queues, drop its memory and events, and fail its waits.
    pub fn release(&self) {
        self.end_queues();
        let mut s = lock(&self.state);
        s.gone = true;
        for (i, dev) in s.devices.iter_mut().enumerate() {
            for (_, bo) in std::mem::take(&mut dev.bos) {
                if bo.mapped
                    && let Some(space) = &dev.space
                {
                    let _ = space.unmap(bo.va, bo.size);
                }
                if bo.flags & abi::ALLOC_MEM_FLAGS_VRAM != 0 {
                    self.kernel.gpus[i].release_vram(bo.size);
                }
            }
            dev.space = None;
            if let Some(token) = dev.render.take()
                && let Some(entry) = lock(&self.kernel.renders).get_mut(&token)
            {
                entry.bound = None;
            }
        }
        drop(s);
        let mut e = lock(&self.events.inner);
        e.map.clear();
        e.gone = true;
        self.events.changed.notify_all();
    }
}

/// The mmap offset of GPU `gpu_id`'s MMIO_REMAP page on `/dev/kfd`: the kernel's
/// `KFD_MMAP_TYPE_MMIO` (0 in the top two bits) with `KFD_MMAP_GPU_ID` (bits 46 up).
pub fn mmio_mmap_offset(gpu_id: u32) -> u64 {
    u64::from(gpu_id & 0xffff) << 46
}

/// The mmap offset of device `index`'s doorbell page on `/dev/kfd`.
pub fn doorbell_mmap_offset(index: usize) -> u64 {
    (8 | index as u64) << 36
}

fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id).map_or(0, |t| {
        (t.tv_sec() as u64).saturating_mul(1_000_000_000) + t.tv_nsec() as u64
    })
}
