//! The device maker and what a made device holds.
//!
//! A device is one client's open of one GPU, made through its [`Path`]: the compute ring
//! (PM4 on one die, AQL on several) and the copy ring (SDMA), each with its read and write
//! positions; the argument segment; the control page holding the timeline word; a doorbell
//! page; and an eventfd that rigd signals on the device's interrupts. All of it is memory
//! shared with the client by memfd. This module makes, grows, stops and loses devices; who
//! owns them and the limits on them are [`crate::state`]'s, counted from each device's
//! [`Footprint`] (kept with running totals, so a request's cost does not grow with the
//! regions a client holds).
//!
//! A [`Device`]'s fields are private: every change is a method (alloc, map, free, image,
//! scratch, growth, stop, loss, close, the watchdog's look) that keeps its regions and their
//! totals, its quarantine and its cost, its queues, segments and what was charged for it
//! consistent with each other. The state holds each device behind a lock of its own.
//!
//! Memory a client gives back (a `Free`, a replaced segment, a peer word whose device
//! closed) is never freed while work that may touch it can run: it goes to the device's
//! quarantine, still mapped in its address space and charged to its user, until the
//! device's word reached the value submitted when it was given back and the path says no
//! queue of the device runs, or until the device stopped ([`Device::free`]).
//!
//! # Shared layouts
//!
//! A queue's memfd holds its ring, then one page of positions; the control page holds the
//! timeline word, the submitted value and the lost flag. Where each lies is
//! [`rig_shm::layout`]'s.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use nix::sys::eventfd::{EfdFlags, EventFd};
use rig_amd::PAGE_BYTES as PAGE;
use rig_proto::messages::{
    DeviceId, DeviceOpened, FdIndex, GpuShare, Grown, ImageId, MemoryHeld, MemoryKind, QueueKind,
    QueueShare, RegionId, RingState, SegmentShare, Share, WordShare,
};
use rig_shm::layout::{
    CONTROL_PAGE_BYTES, DOORBELL_PAGE_BYTES, DOORBELL_SLOT_BYTES, DOORBELLS_PER_PAGE, LOST_BYTES,
    LOST_OFFSET, MIN_RING_BYTES, MIN_SEGMENT_BYTES, POSITIONS_PAGE_BYTES, READ_AFTER_RING,
    SUBMITTED_BYTES, SUBMITTED_OFFSET, TIMELINE_FUTEX_OFFSET, TIMELINE_WORD_BYTES,
    TIMELINE_WORD_OFFSET, WRITE_AFTER_RING,
};
use rig_shm::{Doorbell, SharedRegion};

use crate::path::{
    Fault, GpuDescription, Path, PathMemory, QueueHandle, QueueMemory, QueueSpec, Refusal, Stopped,
};

/// Bytes of a ring made at open, and of the argument segment made at open.
pub const FIRST_RING_BYTES: u64 = 64 << 10;
/// Bytes of the argument segment made at open.
pub const FIRST_SEGMENT_BYTES: u64 = 64 << 10;
// Growth starts at a page: no smaller than the smallest ring or segment anyone accepts.
const _: () = assert!(PAGE >= MIN_RING_BYTES && PAGE >= MIN_SEGMENT_BYTES);
const _: () = assert!(FIRST_RING_BYTES >= MIN_RING_BYTES && FIRST_RING_BYTES.is_power_of_two());
const _: () = assert!(FIRST_SEGMENT_BYTES >= MIN_SEGMENT_BYTES);

/// Why a device could not be made or grown.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    /// The path lacked memory or another resource: retrying after freeing may succeed.
    #[error("the gpu lacks memory for the {what}: {reason}")]
    Short {
        /// What the memory was for.
        what: &'static str,
        /// Bytes asked.
        bytes: u64,
        /// The path's words.
        reason: String,
    },
    /// Every slot the path has for queues of the kind holds one; a retire frees one.
    #[error("the gpu has no queue slot left for the {what}: {reason}")]
    Full {
        /// What the queue was for.
        what: &'static str,
        /// The path's words.
        reason: String,
    },
    /// The path refused.
    #[error("the gpu refused the {what}: {reason}")]
    Refused {
        /// What was refused.
        what: &'static str,
        /// The path's words.
        reason: String,
    },
    /// Pinned memory without a host address.
    #[error("the path gave pinned memory with no host address for the {0}")]
    NoHost(&'static str),
    /// The path's interrupt context is 0, which no release may carry (a bug of the path).
    #[error("the path gave interrupt context 0, which names no interrupt of a release")]
    NoContext,
    /// A host resource (memfd, eventfd) failed.
    #[error("cannot make the device's {what}")]
    Host {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path could not destroy a queue the device retired: the device is lost.
    #[error("the gpu could not destroy a retired queue: {reason}")]
    Retire {
        /// The path's words.
        reason: String,
    },
    /// A submission that no ring the path makes can hold.
    #[error(
        "a submission of {need} bytes on {queue} exceeds the largest ring this gpu makes ({most} bytes)"
    )]
    Never {
        /// The queue or segment.
        queue: &'static str,
        /// Bytes it needs.
        need: u64,
        /// The most a ring holds.
        most: u64,
    },
}

/// Descriptors to send with a reply, and the indices the reply names them by.
#[derive(Debug, Default)]
pub struct FdList {
    fds: Vec<OwnedFd>,
}

impl FdList {
    /// Adds a duplicate of `fd`.
    pub fn push(&mut self, fd: impl AsFd) -> std::io::Result<FdIndex> {
        let owned = fd.as_fd().try_clone_to_owned()?;
        self.fds.push(owned);
        Ok(FdIndex(
            u32::try_from(self.fds.len() - 1).unwrap_or(u32::MAX),
        ))
    }

    /// The descriptors, in index order.
    pub fn into_fds(self) -> Vec<OwnedFd> {
        self.fds
    }
}

fn host_share(
    fds: &mut FdList,
    region: &SharedRegion,
    offset: u64,
    bytes: u64,
) -> std::io::Result<Share> {
    let index = match region.dup_fd() {
        Ok(fd) => {
            fds.fds.push(fd);
            FdIndex(u32::try_from(fds.fds.len() - 1).unwrap_or(u32::MAX))
        }
        Err(e) => return Err(std::io::Error::other(e)),
    };
    Ok(Share {
        fd: index,
        offset,
        bytes,
    })
}

/// A hardware queue of the device and the memory it reads.
#[derive(Debug)]
struct Queue {
    /// The packets it reads.
    kind: QueueKind,
    /// 0 at open, then one more per growth.
    generation: u32,
    /// The ring's bytes.
    ring_bytes: u64,
    /// The ring and its positions page.
    memory: PathMemory,
    /// The path's queue, until retired or stopped.
    handle: Option<QueueHandle>,
    /// What the path made for the queue besides its ring, charged while `handle` is some.
    own: QueueMemory,
    /// Its doorbell slot in the device's doorbell page.
    slot: usize,
}

impl Queue {
    fn host(&self) -> &SharedRegion {
        // PANIC: queues are made only from Pinned memory with a host region (checked in make).
        self.memory
            .host
            .as_ref()
            .expect("queue memory has a host mapping")
    }

    /// The read and write positions as the queue's memory holds them.
    fn positions(&self) -> (u64, u64) {
        let h = self.host();
        let r = h.load_u64(
            (self.ring_bytes + READ_AFTER_RING) as usize,
            Ordering::Acquire,
        );
        let w = h.load_u64(
            (self.ring_bytes + WRITE_AFTER_RING) as usize,
            Ordering::Acquire,
        );
        (r, w)
    }

    fn share(&self, fds: &mut FdList, doorbells: &SharedRegion) -> std::io::Result<QueueShare> {
        let ring_fd = host_share(fds, self.host(), 0, self.ring_bytes)?;
        let at = |offset: u64, bytes: u64| GpuShare {
            host: Share {
                fd: ring_fd.fd,
                offset,
                bytes,
            },
            gpu_address: self.memory.address + offset,
        };
        let bell = host_share(fds, doorbells, (self.slot * DOORBELL_SLOT_BYTES) as u64, 8)?;
        Ok(QueueShare {
            kind: self.kind,
            generation: self.generation,
            ring: at(0, self.ring_bytes),
            read: at(self.ring_bytes + READ_AFTER_RING, 8),
            write: at(self.ring_bytes + WRITE_AFTER_RING, 8),
            doorbell: bell,
        })
    }
}

/// The argument segment.
#[derive(Debug)]
struct Segment {
    /// 0 at open, then one more per growth.
    generation: u32,
    /// Its memory.
    memory: PathMemory,
}

/// A region the client holds: memory it allocated or host memory it mapped.
#[derive(Debug)]
struct Region {
    /// The path's memory.
    memory: PathMemory,
    /// The image it holds, if `LoadImage` made it.
    image: Option<ImageId>,
}

/// What something makes rigd hold, as the limits count it: bytes charged to its user,
/// objects, descriptors and mappings in rigd's process, host memory rigd made for it, and
/// memory of its GPU (Device and Mapped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes charged against the user's `limits.memory_bytes`.
    pub bytes: u64,
    /// Allocations, host mappings, images and peer-word mappings (`limits.objects`).
    pub objects: u64,
    /// File descriptors rigd holds (`limits.fds`).
    pub fds: u64,
    /// Memory mappings in rigd's address space (`limits.mappings`).
    pub maps: u64,
    /// Host memory rigd made (`limits.host_memory_bytes`).
    pub host_bytes: u64,
    /// Memory of the device's GPU (`limits.gpu_share_percent`).
    pub gpu_bytes: u64,
    /// Of `bytes`, those the path makes on its own for queues ([`QueueMemory`]): named in
    /// a refusal, so the user learns what took its memory.
    pub queue_bytes: u64,
}

impl Footprint {
    /// What one piece of path memory costs (an object only where the caller says so).
    pub fn of(m: &PathMemory) -> Footprint {
        let hosted = u64::from(m.host.is_some());
        Footprint {
            bytes: m.bytes,
            objects: 0,
            fds: hosted,
            maps: hosted,
            queue_bytes: 0,
            host_bytes: match m.kind {
                Some(MemoryKind::Pinned | MemoryKind::Mapped) => m.bytes,
                _ => 0,
            },
            gpu_bytes: match m.kind {
                Some(MemoryKind::Device | MemoryKind::Mapped) => m.bytes,
                _ => 0,
            },
        }
    }

    /// What a region the client names costs: its memory and one object.
    pub fn region(m: &PathMemory) -> Footprint {
        Footprint {
            objects: 1,
            ..Footprint::of(m)
        }
    }

    /// A peer-word mapping: one object, and the descriptor and mapping of the other device's
    /// control page that it keeps alive; its bytes are the other device's.
    pub const PEER_WORD: Footprint = Footprint {
        bytes: 0,
        objects: 1,
        fds: 1,
        maps: 1,
        host_bytes: 0,
        gpu_bytes: 0,
        queue_bytes: 0,
    };

    /// What the path makes for a queue besides its ring.
    pub fn queue(own: QueueMemory) -> Footprint {
        Footprint {
            bytes: own.total(),
            host_bytes: own.host,
            gpu_bytes: own.gpu,
            queue_bytes: own.total(),
            ..Footprint::default()
        }
    }

    /// What opening a device on the GPU `desc` describes costs at most before it is made:
    /// [`Footprint::opening`] and what the path makes for its first compute and copy queues.
    pub fn opening_on(desc: &GpuDescription) -> Footprint {
        let q = &desc.queue_memory;
        Footprint::opening()
            .plus(Footprint::queue(q.of(desc.gpu.compute_queue())))
            .plus(Footprint::queue(q.of(QueueKind::Sdma)))
    }

    /// What opening a device costs at most before it is made, besides what its path makes
    /// for queues: its control page, first rings and segment (one memfd and mapping each),
    /// doorbell page, eventfd and queue threads.
    pub fn opening() -> Footprint {
        let pinned = CONTROL_PAGE_BYTES
            + 2 * (FIRST_RING_BYTES + POSITIONS_PAGE_BYTES)
            + FIRST_SEGMENT_BYTES;
        Footprint {
            bytes: pinned,
            objects: 0,
            fds: 4 + 2,
            maps: 4 + 1 + 2 * THREAD_MAPS,
            host_bytes: pinned + DOORBELL_PAGE_BYTES as u64,
            gpu_bytes: 0,
            queue_bytes: 0,
        }
    }

    /// What a growth making `bytes` of rings and segment costs at most (each part one memfd
    /// and mapping, each queue a thread).
    pub fn growth(bytes: u64) -> Footprint {
        Footprint {
            bytes,
            objects: 0,
            fds: 3,
            maps: 3 + 2 * THREAD_MAPS,
            host_bytes: bytes,
            gpu_bytes: 0,
            queue_bytes: 0,
        }
    }

    /// The sum.
    pub fn plus(self, o: Footprint) -> Footprint {
        Footprint {
            bytes: self.bytes.saturating_add(o.bytes),
            objects: self.objects.saturating_add(o.objects),
            fds: self.fds.saturating_add(o.fds),
            maps: self.maps.saturating_add(o.maps),
            host_bytes: self.host_bytes.saturating_add(o.host_bytes),
            gpu_bytes: self.gpu_bytes.saturating_add(o.gpu_bytes),
            queue_bytes: self.queue_bytes.saturating_add(o.queue_bytes),
        }
    }

    /// The difference, stopping at zero.
    pub fn minus(self, o: Footprint) -> Footprint {
        Footprint {
            bytes: self.bytes.saturating_sub(o.bytes),
            objects: self.objects.saturating_sub(o.objects),
            fds: self.fds.saturating_sub(o.fds),
            maps: self.maps.saturating_sub(o.maps),
            host_bytes: self.host_bytes.saturating_sub(o.host_bytes),
            gpu_bytes: self.gpu_bytes.saturating_sub(o.gpu_bytes),
            queue_bytes: self.queue_bytes.saturating_sub(o.queue_bytes),
        }
    }
}

/// Mappings a queue's thread costs rigd (its stack and the stack's guard).
const THREAD_MAPS: u64 = 2;

/// The regions a client holds on a device, by id, with running totals of what they hold,
/// so that no request's cost grows with the number of regions a client holds.
#[derive(Debug, Default)]
struct Regions {
    map: HashMap<RegionId, Region>,
    held: MemoryHeld,
    cost: Footprint,
}

fn held_minus(a: &mut MemoryHeld, kind: Option<MemoryKind>, bytes: u64) {
    let f = match kind {
        Some(MemoryKind::Device) => &mut a.device,
        Some(MemoryKind::Pinned) => &mut a.pinned,
        Some(MemoryKind::Mapped) => &mut a.mapped,
        None => &mut a.host,
    };
    *f = f.saturating_sub(bytes);
}

impl Regions {
    /// Adds a region (replacing one of the same id, which ids never repeat).
    pub fn insert(&mut self, id: RegionId, region: Region) -> Option<Region> {
        kind_bytes(region.memory.kind, &mut self.held, region.memory.bytes);
        self.cost = self.cost.plus(Footprint::region(&region.memory));
        let old = self.map.insert(id, region);
        if let Some(o) = &old {
            self.forget(o);
        }
        old
    }

    fn forget(&mut self, r: &Region) {
        held_minus(&mut self.held, r.memory.kind, r.memory.bytes);
        self.cost = self.cost.minus(Footprint::region(&r.memory));
    }

    /// Takes a region out.
    pub fn remove(&mut self, id: &RegionId) -> Option<Region> {
        let r = self.map.remove(id)?;
        self.forget(&r);
        Some(r)
    }

    /// A region, to change its `image` (its memory must stay as it is: the totals count it).
    pub fn get_mut(&mut self, id: &RegionId) -> Option<&mut Region> {
        self.map.get_mut(id)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Takes every region out.
    pub fn drain(&mut self) -> impl Iterator<Item = (RegionId, Region)> + '_ {
        self.held = MemoryHeld::default();
        self.cost = Footprint::default();
        self.map.drain()
    }
}

/// Memory the client gave back, kept (mapped, and charged to it) until no work of the
/// device can touch it.
#[derive(Debug)]
struct Quarantined {
    /// The memory.
    memory: PathMemory,
    /// The submitted value when it was given back: work up to it may use the memory.
    until: u64,
    /// What it costs while kept.
    cost: Footprint,
    /// Whether its bytes count in [`Device::held`] (a peer word's are another device's).
    held: bool,
}

/// A device, as rigd holds it for one client.
#[derive(Debug)]
pub struct Device {
    /// Its id.
    id: DeviceId,
    /// The GPU's index.
    gpu: u32,
    /// The GPU's description.
    desc: GpuDescription,
    /// Its address space on the GPU.
    path: Box<dyn Path>,
    /// The control page (timeline word, submitted value, lost flag).
    control: Option<PathMemory>,
    /// The doorbell page.
    doorbells: SharedRegion,
    /// Compute queues, the newest last; older ones run until retired.
    compute: Vec<Queue>,
    /// Copy queues, the newest last.
    copy: Vec<Queue>,
    /// Argument segments, the newest last.
    segments: Vec<Segment>,
    /// Rings of queues that were retired or stopped, kept until the client closes since
    /// the client still maps them.
    spent: Vec<PathMemory>,
    /// Signalled on every interrupt and on loss.
    interrupt: Arc<EventFd>,
    /// Memory the client allocated or mapped, by id.
    regions: Regions,
    /// Memory given back while work that may touch it could still run: freed through the
    /// path once the device reached what was submitted when it was given back and no queue
    /// runs, or once the device stopped ([`Device::release_quarantine`]).
    quarantine: Vec<Quarantined>,
    quarantine_cost: Footprint,
    /// Images loaded, by id.
    images: HashMap<ImageId, crate::image::Image>,
    /// What their kernels cost, kept for the user ([`crate::image::Kernels::cost`]).
    images_cost: Footprint,
    /// The scratch memory entries grew, if any.
    scratch: Option<PathMemory>,
    /// Why rigd lost it, once it did.
    lost: Option<rig_proto::Fault>,
    /// True once stopped (by the client, by loss or at close).
    stopped: bool,
    /// True once the path said, at a stop, that no queue of the device runs or can write
    /// memory any more: from then on memory given back is free to reuse at once.
    halted: bool,
    /// True once a stop answered that a queue may still run (`Stopped::Unknown`): nothing
    /// given back, before or after, is freed while the device lives, whatever the word or
    /// the path's `busy_since` says (the queue the path could not destroy is no longer one
    /// it counts as running).
    unstopped: bool,
    /// Faults reported for its work, oldest first.
    faults: Vec<rig_proto::Fault>,
    /// Where its loss is counted, once.
    losses: Arc<crate::metrics::Losses>,
    /// The word's value at open; values start after it.
    first: u64,
    /// Watchdog: the word's value while below the submitted one, and since when it was seen
    /// there.
    progress: Option<(u64, Instant)>,
    /// Watchdog: the path's count of completed work, and since when it has stood there (as
    /// the path stamped its change, else the look that saw it). Followed while queues idle
    /// too, so a run after an idle spell counts from its own start, whatever the tick.
    work: Option<(u64, Instant)>,
    /// Watchdog: when it last looked at the device.
    looked: Option<Instant>,
    /// Other devices' control pages mapped read-only for waits on their words, by device.
    /// Each holds the other device's memory until this device closes; it is not counted in
    /// [`Device::held`], being the other device's page.
    peer_words: HashMap<DeviceId, PathMemory>,
    /// What the state last charged to the device's user for it ([`Device::footprint`] then).
    charged: Footprint,
    /// True once closed: it holds nothing and is charged nothing.
    closed: bool,
    next_slot: usize,
}

fn kind_bytes(kind: Option<MemoryKind>, held: &mut MemoryHeld, bytes: u64) {
    match kind {
        Some(MemoryKind::Device) => held.device += bytes,
        Some(MemoryKind::Pinned) => held.pinned += bytes,
        Some(MemoryKind::Mapped) => held.mapped += bytes,
        None => held.host += bytes,
    }
}

fn short(what: &'static str, bytes: u64) -> impl FnOnce(Refusal) -> MakeError {
    move |r| match r {
        Refusal::Lacking(why) => MakeError::Short {
            what,
            bytes,
            reason: why.to_string(),
        },
        Refusal::Full(why) => MakeError::Full {
            what,
            reason: why.to_string(),
        },
        Refusal::Refused(why) => MakeError::Refused {
            what,
            reason: why.to_string(),
        },
    }
}

/// The ring bytes a growth makes for `need` bytes: the first power of two from 4096 that
/// holds twice `need`.
pub fn grown_bytes(need: u64) -> Option<u64> {
    need.checked_mul(2)?.max(PAGE).checked_next_power_of_two()
}

impl Device {
    /// Makes a device through `path`: rings, segment, control page,
    /// doorbells and queues; its loss, if it comes, is counted in `losses`. On failure,
    /// what it made goes back.
    pub fn make(
        id: DeviceId,
        gpu: u32,
        desc: GpuDescription,
        path: Box<dyn Path>,
        interrupt: Arc<EventFd>,
        losses: Arc<crate::metrics::Losses>,
    ) -> Result<Device, MakeError> {
        let doorbells =
            SharedRegion::create("rig-doorbells", DOORBELL_PAGE_BYTES).map_err(|e| {
                MakeError::Host {
                    what: "doorbell page",
                    source: std::io::Error::other(e),
                }
            })?;
        let mut d = Device {
            id,
            gpu,
            desc,
            path,
            control: None,
            doorbells,
            compute: Vec::new(),
            copy: Vec::new(),
            segments: Vec::new(),
            spent: Vec::new(),
            interrupt,
            regions: Regions::default(),
            quarantine: Vec::new(),
            quarantine_cost: Footprint::default(),
            images: HashMap::new(),
            images_cost: Footprint::default(),
            scratch: None,
            lost: None,
            stopped: false,
            halted: false,
            unstopped: false,
            faults: Vec::new(),
            losses,
            first: 0,
            progress: None,
            work: None,
            looked: None,
            peer_words: HashMap::new(),
            charged: Footprint::default(),
            closed: false,
            next_slot: 0,
        };
        match d.make_parts() {
            Ok(()) => Ok(d),
            Err(e) => {
                d.release_all();
                Err(e)
            }
        }
    }

    fn make_parts(&mut self) -> Result<(), MakeError> {
        if self.path.interrupt() == 0 {
            return Err(MakeError::NoContext);
        }
        let control = self.pinned("control page", CONTROL_PAGE_BYTES)?;
        // Clients sleep on the word's low half; the path's interrupt handler wakes them.
        let woken = self.path.wake_on_interrupt(&control, TIMELINE_FUTEX_OFFSET);
        self.control = Some(control);
        woken.map_err(|r| MakeError::Refused {
            what: "timeline word's wake",
            reason: r.to_string(),
        })?;
        let compute_kind = self.desc.gpu.compute_queue();
        let q = self.make_queue(compute_kind, FIRST_RING_BYTES, 0)?;
        self.compute.push(q);
        let q = self.make_queue(QueueKind::Sdma, FIRST_RING_BYTES, 0)?;
        self.copy.push(q);
        let memory = self.pinned("argument segment", FIRST_SEGMENT_BYTES)?;
        self.segments.push(Segment {
            generation: 0,
            memory,
        });
        Ok(())
    }

    fn pinned(&mut self, what: &'static str, bytes: u64) -> Result<PathMemory, MakeError> {
        let m = self
            .path
            .alloc(MemoryKind::Pinned, bytes)
            .map_err(short(what, bytes))?;
        if m.host.is_none() {
            self.path.free(m);
            return Err(MakeError::NoHost(what));
        }
        Ok(m)
    }

    fn make_queue(
        &mut self,
        kind: QueueKind,
        ring_bytes: u64,
        generation: u32,
    ) -> Result<Queue, MakeError> {
        let what = match kind {
            QueueKind::Sdma => "copy ring",
            _ => "compute ring",
        };
        let memory = self.pinned(what, ring_bytes + POSITIONS_PAGE_BYTES)?;
        if kind == QueueKind::Aql
            && let Some(host) = &memory.host
        {
            // Every slot starts INVALID, as a runtime sets an AQL ring up: the packet
            // processor stops at the first one, and a zeroed slot would be a vendor packet.
            let invalid = u32::from(rig_amd::aql::TYPE_INVALID);
            for slot in 0..ring_bytes / rig_amd::aql::BYTES as u64 {
                host.store_u32(
                    slot as usize * rig_amd::aql::BYTES,
                    invalid,
                    Ordering::Relaxed,
                );
            }
        }
        // Slots cycle through the page; a device holds far fewer than 64 queues at once, as
        // growth retires the older ones.
        let slot = self.next_slot % DOORBELLS_PER_PAGE;
        self.next_slot += 1;
        let doorbells = self.doorbells.clone();
        doorbells.store_u64(slot * DOORBELL_SLOT_BYTES, 0, Ordering::Release);
        let bell = match Doorbell::new(doorbells, slot * DOORBELL_SLOT_BYTES) {
            Ok(b) => b,
            Err(e) => {
                self.path.free(memory);
                return Err(MakeError::Refused {
                    what,
                    reason: e.to_string(),
                });
            }
        };
        let spec = QueueSpec {
            kind,
            ring: memory.address,
            bytes: ring_bytes,
            read: memory.address + ring_bytes + READ_AFTER_RING,
            write: memory.address + ring_bytes + WRITE_AFTER_RING,
            doorbell: bell,
            scratch: self
                .scratch
                .as_ref()
                .map_or((0, 0), |s| (s.address, s.bytes)),
        };
        match self.path.queue(spec) {
            Ok(h) => Ok(Queue {
                kind,
                generation,
                ring_bytes,
                memory,
                handle: Some(h),
                own: self.desc.queue_memory.of(kind),
                slot,
            }),
            Err(r) => {
                self.path.free(memory);
                Err(short(what, ring_bytes)(r))
            }
        }
    }

    /// The control page's host mapping.
    fn control_host(&self) -> Option<&SharedRegion> {
        self.control.as_ref().and_then(|c| c.host.as_ref())
    }

    /// The control page's memory and the word's GPU address in this device's address space.
    pub fn word(&self) -> Option<(&SharedRegion, u64)> {
        let c = self.control.as_ref()?;
        Some((c.host.as_ref()?, c.address + TIMELINE_WORD_OFFSET))
    }

    /// The GPU address, in this device's address space, of the timeline word of device
    /// `peer` whose control page is `control`: mapped read-only at the first call for
    /// `peer` and kept until this device closes.
    pub fn map_peer_word(
        &mut self,
        peer: DeviceId,
        control: &SharedRegion,
    ) -> Result<u64, Refusal> {
        if let Some(m) = self.peer_words.get(&peer) {
            return Ok(m.address + TIMELINE_WORD_OFFSET);
        }
        let m = self.path.map_peer(control, 0, CONTROL_PAGE_BYTES)?;
        let address = m.address + TIMELINE_WORD_OFFSET;
        self.peer_words.insert(peer, m);
        Ok(address)
    }

    /// The value the timeline word holds.
    pub fn reached(&self) -> u64 {
        self.control_host().map_or(0, |h| {
            h.load_u64(TIMELINE_WORD_OFFSET as usize, Ordering::Acquire)
        })
    }

    /// The last value the client published as submitted.
    pub fn submitted(&self) -> u64 {
        self.control_host().map_or(0, |h| {
            h.load_u64(SUBMITTED_OFFSET as usize, Ordering::Acquire)
        })
    }

    /// The message that hands the device to its client, and its descriptors.
    pub fn opened(
        &self,
        facts: rig_proto::messages::Facts,
    ) -> std::io::Result<(DeviceOpened, Vec<OwnedFd>)> {
        let mut fds = FdList::default();
        let compute = self.compute[self.compute.len() - 1].share(&mut fds, &self.doorbells)?;
        let copy = self.copy[self.copy.len() - 1].share(&mut fds, &self.doorbells)?;
        let args = self.segment_share(&mut fds, &self.segments[self.segments.len() - 1])?;
        // PANIC: a made device has its control page.
        let control = self
            .control
            .as_ref()
            .expect("made device has a control page");
        let host = control.host.as_ref().expect("control page is pinned");
        let word_share = host_share(&mut fds, host, TIMELINE_WORD_OFFSET, TIMELINE_WORD_BYTES)?;
        let word = WordShare {
            memory: GpuShare {
                host: word_share,
                gpu_address: control.address + TIMELINE_WORD_OFFSET,
            },
            first: self.first,
        };
        let submitted = Share {
            fd: word_share.fd,
            offset: SUBMITTED_OFFSET,
            bytes: SUBMITTED_BYTES,
        };
        let interrupt = fds.push(self.interrupt.as_fd())?;
        Ok((
            DeviceOpened {
                device: self.id,
                facts,
                compute,
                copy,
                args,
                word,
                submitted,
                interrupt,
                lost: Share {
                    fd: word_share.fd,
                    offset: LOST_OFFSET,
                    bytes: LOST_BYTES,
                },
                context: self.path.interrupt(),
            },
            fds.into_fds(),
        ))
    }

    fn segment_share(&self, fds: &mut FdList, s: &Segment) -> std::io::Result<SegmentShare> {
        // PANIC: segments are Pinned memory with a host mapping (checked in `pinned`).
        let host = s.memory.host.as_ref().expect("segment is pinned");
        let share = host_share(fds, host, 0, s.memory.bytes)?;
        Ok(SegmentShare {
            generation: s.generation,
            memory: GpuShare {
                host: share,
                gpu_address: s.memory.address,
            },
        })
    }

    /// Memory the device holds, by kind: its regions, its own rings, segment and control
    /// page (Pinned), and its scratch (Device).
    pub fn held(&self) -> MemoryHeld {
        let mut held = self.regions.held;
        for q in self.quarantine.iter().filter(|q| q.held) {
            kind_bytes(q.memory.kind, &mut held, q.memory.bytes);
        }
        let own = self
            .compute
            .iter()
            .chain(&self.copy)
            .map(|q| &q.memory)
            .chain(self.segments.iter().map(|s| &s.memory))
            .chain(&self.spent)
            .chain(&self.control)
            .chain(&self.scratch);
        for m in own {
            kind_bytes(m.kind, &mut held, m.bytes);
        }
        // What the path made for live queues: VRAM as Device memory, host memory as Pinned.
        for q in self.live_queues() {
            held.device += q.own.gpu;
            held.pinned += q.own.host;
        }
        held
    }

    fn live_queues(&self) -> impl Iterator<Item = &Queue> {
        self.compute
            .iter()
            .chain(&self.copy)
            .filter(|q| q.handle.is_some())
    }

    /// What the path makes for the queues a growth for these sizes makes, besides their
    /// rings: charged with [`Footprint::growth`] before the growth.
    pub fn growth_queues(&self, compute_bytes: u64, copy_bytes: u64) -> Footprint {
        let mut f = Footprint::default();
        for (need, queues, half) in [
            (compute_bytes, &self.compute, false),
            (copy_bytes, &self.copy, true),
        ] {
            let Some(newest) = queues.last() else {
                continue;
            };
            let holds = if half {
                newest.ring_bytes / 2
            } else {
                newest.ring_bytes.saturating_sub(1)
            };
            if need > holds {
                f = f.plus(Footprint::queue(self.desc.queue_memory.of(newest.kind)));
            }
        }
        f
    }

    /// What the device makes rigd hold, for the limits. Its cost does not grow with the
    /// regions it holds (their totals run); its own parts are a few rings and segments.
    pub fn footprint(&self) -> Footprint {
        let own = self
            .compute
            .iter()
            .chain(&self.copy)
            .map(|q| &q.memory)
            .chain(self.segments.iter().map(|s| &s.memory))
            .chain(&self.spent)
            .chain(&self.control)
            .chain(&self.scratch)
            .fold(Footprint::default(), |f, m| f.plus(Footprint::of(m)));
        let threads = self.live_queues().count() as u64;
        let queues = self
            .live_queues()
            .fold(Footprint::default(), |f, q| f.plus(Footprint::queue(q.own)));
        let peers = self.peer_words.len() as u64;
        let base = Footprint {
            // The doorbell page's memfd and the interrupt eventfd.
            fds: 2 + peers * Footprint::PEER_WORD.fds,
            maps: 1 + threads * THREAD_MAPS + peers * Footprint::PEER_WORD.maps,
            objects: peers * Footprint::PEER_WORD.objects,
            host_bytes: DOORBELL_PAGE_BYTES as u64,
            ..Footprint::default()
        };
        own.plus(base)
            .plus(queues)
            .plus(self.regions.cost)
            .plus(self.quarantine_cost)
            .plus(self.images_cost)
    }

    /// Gives `memory` back through the path once no work of the device can touch it: at
    /// once if the device is stopped or idle with its work reached, else at a later
    /// [`Device::release_quarantine`]. Until then it stays mapped and costs `cost`.
    fn give_back(&mut self, memory: PathMemory, cost: Footprint, held: bool) {
        if self.halted {
            self.path.free(memory);
            return;
        }
        let until = self.submitted();
        self.quarantine_cost = self.quarantine_cost.plus(cost);
        self.quarantine.push(Quarantined {
            memory,
            until,
            cost,
            held,
        });
        self.release_quarantine();
    }

    /// Frees the quarantined memory no work can touch any more: all of it once the path
    /// said at a stop that nothing of the device runs; none of it once a stop said a queue
    /// may still run; else, while no queue runs (the path says so, not a client word), what
    /// was given back when the device had submitted no more than its word reached. Returns
    /// whether some stays quarantined that a later look may free.
    fn release_quarantine(&mut self) -> bool {
        if self.quarantine.is_empty() || self.unstopped {
            return false;
        }
        if !self.halted && self.path.busy_since().is_some() {
            return true;
        }
        let reached = self.reached();
        let stopped = self.halted;
        let (go, keep): (Vec<Quarantined>, Vec<Quarantined>) = std::mem::take(&mut self.quarantine)
            .into_iter()
            .partition(|q| stopped || reached >= q.until);
        self.quarantine = keep;
        for q in go {
            self.quarantine_cost = self.quarantine_cost.minus(q.cost);
            self.path.free(q.memory);
        }
        !self.quarantine.is_empty()
    }

    /// Gives back the quarantined memory no work can touch any more, now rather than at the
    /// watch thread's next look: whether any went back.
    pub fn reclaim(&mut self) -> bool {
        let before = self.quarantine.len();
        self.release_quarantine();
        self.quarantine.len() < before
    }

    /// Drops the mapping of `peer`'s word (the peer closed): given back as quarantined
    /// memory, since this device's queues may be reading it.
    pub fn drop_peer_word(&mut self, peer: DeviceId) {
        if let Some(m) = self.peer_words.remove(&peer) {
            self.give_back(m, Footprint::PEER_WORD, false);
        }
    }

    /// The rings and their positions, for `rigctl show`.
    pub fn rings(&self) -> Vec<RingState> {
        let name = |k: QueueKind| {
            if k == QueueKind::Sdma {
                "COPY:0"
            } else {
                "COMPUTE:0"
            }
        };
        self.compute
            .iter()
            .chain(&self.copy)
            .map(|q| {
                let (read, write) = q.positions();
                RingState {
                    queue: name(q.kind).into(),
                    kind: q.kind,
                    generation: q.generation,
                    bytes: q.ring_bytes,
                    read,
                    write,
                }
            })
            .collect()
    }

    /// The bytes a growth for these sizes would make, or why none ever can.
    pub fn growth_bytes(
        &self,
        compute_bytes: u64,
        copy_bytes: u64,
        segment_bytes: u64,
    ) -> Result<u64, MakeError> {
        let mut total = 0u64;
        let compute = &self.compute[self.compute.len() - 1];
        let copy = &self.copy[self.copy.len() - 1];
        let seg = &self.segments[self.segments.len() - 1];
        for (need, holds, kind, name) in [
            (
                compute_bytes,
                compute.ring_bytes.saturating_sub(1),
                compute.kind,
                "COMPUTE:0",
            ),
            (copy_bytes, copy.ring_bytes / 2, QueueKind::Sdma, "COPY:0"),
            (
                segment_bytes,
                seg.memory.bytes / 2,
                QueueKind::Sdma,
                "argument segment",
            ),
        ] {
            if need == 0 || need <= holds {
                continue;
            }
            let most = self.path.most_ring(kind);
            let bytes = grown_bytes(need)
                .filter(|b| *b <= most)
                .ok_or(MakeError::Never {
                    queue: name,
                    need,
                    most,
                })?;
            total = total
                .saturating_add(bytes)
                .saturating_add(POSITIONS_PAGE_BYTES);
        }
        Ok(total)
    }

    /// Makes what a submission of these sizes needs.
    ///
    /// Retires queues older than the ones the client installed, replaces a grown queue no
    /// work ran on when it is too small, and makes rings or a segment for parts the newest
    /// ones cannot hold. Returns the new shares and their descriptors.
    pub fn grow(
        &mut self,
        compute_bytes: u64,
        copy_bytes: u64,
        segment_bytes: u64,
        installed: rig_proto::messages::Generations,
    ) -> Result<(Grown, Vec<OwnedFd>), MakeError> {
        self.retire_before(installed.compute, installed.copy)?;
        // Segments older than the installed one are no longer written by the client.
        let (old, keep): (Vec<Segment>, Vec<Segment>) = std::mem::take(&mut self.segments)
            .into_iter()
            .partition(|s| s.generation < installed.args);
        self.segments = keep;
        if self.segments.is_empty() {
            // The client named a generation that does not exist; keep every segment.
            self.segments = old;
        } else {
            self.spent.extend(old.into_iter().map(|s| s.memory));
        }
        let mut grown = Grown::default();
        let mut fds = FdList::default();
        let io = |source| MakeError::Host {
            what: "shares of the grown queues",
            source,
        };
        let compute_kind = self.compute[self.compute.len() - 1].kind;
        // A submission takes fewer bytes than the compute ring holds, and at most half the
        // copy ring and half the segment.
        if let Some(q) = self.grow_queue(compute_kind, compute_bytes, installed.compute, false)? {
            self.compute.push(q);
            grown.compute = Some(
                self.compute[self.compute.len() - 1]
                    .share(&mut fds, &self.doorbells)
                    .map_err(io)?,
            );
        }
        if let Some(q) = self.grow_queue(QueueKind::Sdma, copy_bytes, installed.copy, true)? {
            self.copy.push(q);
            grown.copy = Some(
                self.copy[self.copy.len() - 1]
                    .share(&mut fds, &self.doorbells)
                    .map_err(io)?,
            );
        }
        let seg = &self.segments[self.segments.len() - 1];
        if segment_bytes > 0 && segment_bytes > seg.memory.bytes / 2 {
            let most = self.path.most_ring(QueueKind::Sdma);
            let bytes =
                grown_bytes(segment_bytes)
                    .filter(|b| *b <= most)
                    .ok_or(MakeError::Never {
                        queue: "argument segment",
                        need: segment_bytes,
                        most,
                    })?;
            let generation = seg.generation + 1;
            if seg.generation > installed.args {
                // A segment a growth made and nobody installed: replace it.
                if let Some(old) = self.segments.pop() {
                    let cost = Footprint::of(&old.memory);
                    self.give_back(old.memory, cost, true);
                }
            }
            let memory = self.pinned("argument segment", bytes)?;
            self.segments.push(Segment { generation, memory });
            let s = &self.segments[self.segments.len() - 1];
            grown.args = Some(self.segment_share(&mut fds, s).map_err(io)?);
        }
        Ok((grown, fds.into_fds()))
    }

    fn grow_queue(
        &mut self,
        kind: QueueKind,
        need: u64,
        installed: u32,
        half: bool,
    ) -> Result<Option<Queue>, MakeError> {
        let queues = if kind == QueueKind::Sdma {
            &self.copy
        } else {
            &self.compute
        };
        let newest = &queues[queues.len() - 1];
        let holds = if half {
            newest.ring_bytes / 2
        } else {
            newest.ring_bytes.saturating_sub(1)
        };
        if need == 0 || need <= holds {
            return Ok(None);
        }
        let most = self.path.most_ring(kind);
        let name = if kind == QueueKind::Sdma {
            "COPY:0"
        } else {
            "COMPUTE:0"
        };
        let bytes = grown_bytes(need)
            .filter(|b| *b <= most)
            .ok_or(MakeError::Never {
                queue: name,
                need,
                most,
            })?;
        let generation = newest.generation + 1;
        let mut replace = newest.generation > installed;
        // Make the new queue first, then destroy the one it replaces (which ran no work).
        // Where the path has no slot for it, the replaced one goes first and the new one
        // takes its slot.
        let q = match self.make_queue(kind, bytes, generation) {
            Err(MakeError::Full { .. }) if replace => {
                replace = false;
                if let Some(old) = self.queues_of(kind).pop() {
                    self.retire_queue(old)?;
                }
                self.make_queue(kind, bytes, generation)?
            }
            r => r?,
        };
        if replace
            && let Some(old) = self.queues_of(kind).pop()
            && let Err(e) = self.retire_queue(old)
        {
            // The device is lost and stopped: the new queue's ring is kept as spent.
            let _ = self.retire_queue(q);
            return Err(e);
        }
        Ok(Some(q))
    }

    /// The device's queues of `kind`, oldest first.
    fn queues_of(&mut self, kind: QueueKind) -> &mut Vec<Queue> {
        if kind == QueueKind::Sdma {
            &mut self.copy
        } else {
            &mut self.compute
        }
    }

    /// Retires queue `q` through the path and keeps its ring for the client's mapping. A
    /// queue the path could not destroy may still run: the device is lost with the path's
    /// fault (its stop then says whether anything runs), and the growth fails with it.
    fn retire_queue(&mut self, mut q: Queue) -> Result<(), MakeError> {
        let handle = q.handle.take();
        self.spent.push(q.memory);
        let Some(h) = handle.filter(|_| !self.stopped) else {
            return Ok(());
        };
        self.path.retire(h).map_err(|f| {
            tracing::warn!(device = self.id.0, fault = %f, "the path could not destroy a retired queue");
            let reason = f.to_string();
            self.lose(rig_proto::Fault::new(
                rig_proto::FaultKind::Internal,
                format!("the path could not destroy a retired queue: {reason}"),
            ));
            MakeError::Retire { reason }
        })
    }

    /// Retires queues older than the installed generations: the client moved off them
    /// once the device reached every value submitted to them.
    fn retire_before(&mut self, compute: u32, copy: u32) -> Result<(), MakeError> {
        // Every old queue's ring is kept as spent, also past a failure (which lost the
        // device, so the later ones are not asked of the path).
        let mut done = Ok(());
        for (is_copy, installed) in [(false, compute), (true, copy)] {
            let queues = if is_copy {
                &mut self.copy
            } else {
                &mut self.compute
            };
            let (old, keep): (Vec<Queue>, Vec<Queue>) =
                queues.drain(..).partition(|q| q.generation < installed);
            *queues = keep;
            if queues.is_empty() {
                // The client named a generation that does not exist; keep the newest.
                let mut old = old;
                if let Some(last) = old.pop() {
                    let queues = if is_copy {
                        &mut self.copy
                    } else {
                        &mut self.compute
                    };
                    queues.push(last);
                }
                for q in old {
                    done = done.and(self.retire_queue(q));
                }
            } else {
                for q in old {
                    done = done.and(self.retire_queue(q));
                }
            }
        }
        done
    }

    /// Stops the device: the path destroys its queues; once none runs, the
    /// word is made to read `last`. Returns whether the path stopped everything.
    pub fn stop(&mut self, last: u64, fault: Option<&rig_proto::Fault>) -> Stopped {
        if self.stopped {
            return Stopped::Stopped;
        }
        self.stopped = true;
        let s = self.path.stop(fault);
        for q in self.compute.iter_mut().chain(self.copy.iter_mut()) {
            q.handle = None;
        }
        if s == Stopped::Stopped {
            if let Some(h) = self.control_host() {
                h.store_u64(TIMELINE_WORD_OFFSET as usize, last, Ordering::Release);
                // Clients sleep on the word's futex (rig_shm::layout's control page).
                rig_shm::futex::wake_all(
                    h.atomic_u32(rig_shm::layout::TIMELINE_FUTEX_OFFSET as usize),
                );
            }
            // Nothing of the device runs any more: what it gave back is free to reuse.
            self.halted = true;
            self.release_quarantine();
        } else {
            tracing::error!(
                device = self.id.0,
                "the path could not say that the device's queues stopped: what the device gave back and gives back is kept from reuse while it lives"
            );
            self.unstopped = true;
        }
        // Wake any sleeper so it reads the word again.
        let _ = self.interrupt.write(1);
        s
    }

    /// Loses the device: stops it with `why`, writes the last submitted value into its word,
    /// raises the lost flag and wakes the client.
    pub fn lose(&mut self, why: rig_proto::Fault) {
        let last = self.submitted().max(self.reached());
        self.lose_at(why, last);
    }

    /// Loses the device as [`Device::lose`] does, with `last` as the value its stop writes
    /// into the word: for a client that lost the device itself (a consumer of a lost
    /// producer) and says so with its stop.
    pub fn lose_at(&mut self, why: rig_proto::Fault, last: u64) {
        if self.lost.is_some() {
            return;
        }
        let why = why.bounded();
        let cause = crate::metrics::LossReason::of(&why);
        // The reason may be the client's own (a stop's).
        tracing::warn!(device = self.id.0, gpu = self.gpu, %cause, reason = %crate::logging::client_text(&why.to_string()), "device lost");
        self.losses.count(self.gpu, &why);
        self.faults.push(why.clone());
        self.lost = Some(why.clone());
        // The flag goes up before the stop writes the last value into the word, so a client
        // that sees the word reach its value and then reads the flag knows it was a loss.
        if let Some(h) = self.control_host() {
            h.store_u32(LOST_OFFSET as usize, 1, Ordering::Release);
            // Clients sleep on the flag's futex too, so the loss wakes them at once.
            rig_shm::futex::wake_all(h.atomic_u32(LOST_OFFSET as usize));
        }
        if !self.stopped {
            let _ = self.stop(last, Some(&why));
        }
        let _ = self.interrupt.write(1);
    }

    /// Gives back everything the device holds through its path. Stops it first if needed.
    fn release_all(&mut self) {
        if !self.stopped && (!self.compute.is_empty() || !self.copy.is_empty()) {
            let last = self.submitted().max(self.reached());
            let _ = self.stop(last, None);
        }
        // A queue the path could not say stopped may still touch any of it.
        let quiet =
            !self.unstopped && (self.halted || (self.compute.is_empty() && self.copy.is_empty()));
        let mut all: Vec<PathMemory> = Vec::new();
        all.extend(self.regions.drain().map(|(_, r)| r.memory));
        all.extend(self.quarantine.drain(..).map(|q| q.memory));
        self.quarantine_cost = Footprint::default();
        self.images.clear();
        self.images_cost = Footprint::default();
        all.extend(self.compute.drain(..).map(|q| q.memory));
        all.extend(self.copy.drain(..).map(|q| q.memory));
        all.extend(self.segments.drain(..).map(|s| s.memory));
        all.append(&mut self.spent);
        all.extend(self.scratch.take());
        all.extend(self.control.take());
        all.extend(self.peer_words.drain().map(|(_, m)| m));
        if !quiet && !all.is_empty() {
            tracing::error!(
                device = self.id.0,
                "the path could not say that the device's queues stopped: its memory is kept from reuse for the life of its address space"
            );
            return;
        }
        for m in all {
            self.path.free(m);
        }
    }
}

/// What one look of the hang watchdog found on a device ([`Device::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watched {
    /// The device has outstanding work or quarantined memory: look again soon.
    pub busy: bool,
    /// What it holds changed (quarantine released, or the device was lost and stopped):
    /// its charges need bringing up to date.
    pub changed: bool,
}

/// Why an allocation failed.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// The path refused.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Its memfd could not be shared.
    #[error("cannot share the allocation's memory")]
    Share(#[source] std::io::Error),
}

/// The device as its owner and rigctl see it, and the changes requests make, each keeping
/// the device's totals, quarantine and charges consistent.
impl Device {
    /// Its id.
    pub fn id(&self) -> DeviceId {
        self.id
    }

    /// The GPU's index.
    pub fn gpu(&self) -> u32 {
        self.gpu
    }

    /// The GPU's description.
    pub fn description(&self) -> &GpuDescription {
        &self.desc
    }

    /// Why rigd lost it, once it did.
    pub fn lost(&self) -> Option<&rig_proto::Fault> {
        self.lost.as_ref()
    }

    /// Whether it stopped (by the client, by loss or at close).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Faults reported for its work, oldest first.
    pub fn faults(&self) -> &[rig_proto::Fault] {
        &self.faults
    }

    /// How many images it holds loaded.
    pub fn image_count(&self) -> usize {
        self.images.len()
    }

    /// How many regions it holds.
    pub fn region_count(&self) -> usize {
        self.regions.len()
    }

    /// How many pieces of memory wait in quarantine.
    pub fn quarantined(&self) -> usize {
        self.quarantine.len()
    }

    /// The most bytes of a ring of a queue of `kind` its path makes.
    pub fn most_ring(&self, kind: QueueKind) -> u64 {
        self.path.most_ring(kind)
    }

    /// The GPU's clock, in ticks of the description's `clock_hz`.
    pub fn clock(&self) -> u64 {
        self.path.clock()
    }

    /// What the state last charged for the device.
    pub fn charged(&self) -> Footprint {
        self.charged
    }

    /// Records that the device's charges are brought up to what it holds now (nothing once
    /// closed), and returns what was charged before and what is charged from now on.
    pub fn recharge(&mut self) -> (Footprint, Footprint) {
        let now = if self.closed {
            Footprint::default()
        } else {
            self.footprint()
        };
        (std::mem::replace(&mut self.charged, now), now)
    }

    /// Closes the device: stops it if needed, gives back everything it holds through its path and
    /// returns what was charged for it; from now on it is charged nothing.
    pub fn close(&mut self) -> Footprint {
        self.release_all();
        self.closed = true;
        std::mem::take(&mut self.charged)
    }

    /// Whether it maps `peer`'s word already.
    pub fn maps_peer_word(&self, peer: DeviceId) -> bool {
        self.peer_words.contains_key(&peer)
    }

    /// Allocates `bytes` of `kind` as region `region`, the memory's descriptor (Pinned and
    /// Mapped) added to `fds`. Returns its GPU address and host share.
    pub fn alloc(
        &mut self,
        region: RegionId,
        kind: MemoryKind,
        bytes: u64,
        fds: &mut FdList,
    ) -> Result<(u64, Option<Share>), AllocError> {
        let m = self.path.alloc(kind, bytes)?;
        let host = match &m.host {
            Some(h) => match h
                .dup_fd()
                .map_err(std::io::Error::other)
                .and_then(|fd| fds.push(&fd))
            {
                Ok(fd) => Some(Share {
                    fd,
                    offset: 0,
                    bytes: m.bytes,
                }),
                Err(e) => {
                    // Never shared: nothing can touch it.
                    self.path.free(m);
                    return Err(AllocError::Share(e));
                }
            },
            None => None,
        };
        let address = m.address;
        self.regions.insert(
            region,
            Region {
                memory: m,
                image: None,
            },
        );
        Ok((address, host))
    }

    /// Maps `bytes` at `offset` of the client's memfd `fd` as region `region`; returns its
    /// GPU address.
    pub fn map_host(
        &mut self,
        region: RegionId,
        fd: OwnedFd,
        offset: u64,
        bytes: u64,
    ) -> Result<u64, crate::path::MapRefusal> {
        let m = self.path.map_host(fd, offset, bytes)?;
        let address = m.address;
        self.regions.insert(
            region,
            Region {
                memory: m,
                image: None,
            },
        );
        Ok(address)
    }

    /// Frees region `region` (and the image it holds): quarantined until no work submitted
    /// before the free can touch it (the device's quarantine). False if there is none.
    pub fn free(&mut self, region: RegionId) -> bool {
        let Some(r) = self.regions.remove(&region) else {
            return false;
        };
        if let Some(img) = r.image.and_then(|image| self.images.remove(&image)) {
            self.images_cost = self.images_cost.minus(img.kernels.cost());
        }
        let cost = Footprint::region(&r.memory);
        self.give_back(r.memory, cost, true);
        true
    }

    /// Device memory for an image, not yet a region: placed with [`Device::upload`] and
    /// kept with [`Device::add_image`], or handed back with [`Device::discard`].
    pub fn image_memory(&mut self, bytes: u64) -> Result<PathMemory, Refusal> {
        self.path.alloc(MemoryKind::Device, bytes)
    }

    /// Writes `data` at `offset` of memory from [`Device::image_memory`].
    pub fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        self.path.upload(memory, offset, data)
    }

    /// Gives back memory from [`Device::image_memory`] that was never shared nor named to
    /// the client, so no work can touch it.
    pub fn discard(&mut self, memory: PathMemory) {
        self.path.free(memory);
    }

    /// Keeps `memory` as region `region` holding image `id`, placed at its start, whose
    /// entries need `kernels`.
    pub fn add_image(
        &mut self,
        region: RegionId,
        id: ImageId,
        memory: PathMemory,
        kernels: crate::image::Kernels,
    ) {
        let address = memory.address;
        self.regions.insert(
            region,
            Region {
                memory,
                image: Some(id),
            },
        );
        self.images_cost = self.images_cost.plus(kernels.cost());
        self.images.insert(
            id,
            crate::image::Image {
                region,
                address,
                kernels,
            },
        );
    }

    /// Image `id`, if loaded.
    pub fn image(&self, id: ImageId) -> Option<&crate::image::Image> {
        self.images.get(&id)
    }

    /// Unloads image `id`: its entries go, its region stays until freed. False if there is
    /// none.
    pub fn unload(&mut self, id: ImageId) -> bool {
        let Some(img) = self.images.remove(&id) else {
            return false;
        };
        self.images_cost = self.images_cost.minus(img.kernels.cost());
        if let Some(r) = self.regions.get_mut(&img.region) {
            r.image = None;
        }
        true
    }

    /// The scratch memory entries grew, as (GPU address, bytes).
    pub fn scratch(&self) -> Option<(u64, u64)> {
        self.scratch.as_ref().map(|s| (s.address, s.bytes))
    }

    /// Makes `bytes` of Device memory the device's scratch. Work already submitted may
    /// still use the old scratch: it is kept until the device closes.
    ///
    /// An AQL queue hands the device's scratch to every kernel itself: the path gives the
    /// new scratch to the queues made before the growth too.
    pub fn grow_scratch(&mut self, bytes: u64) -> Result<(), Refusal> {
        let m = self.path.alloc(MemoryKind::Device, bytes)?;
        if self.desc.gpu.compute_queue() == QueueKind::Aql
            && let Err(r) = self.path.hand_scratch(m.address, m.bytes)
        {
            self.path.free(m);
            return Err(r);
        }
        if let Some(old) = self.scratch.replace(m) {
            self.spent.push(old);
        }
        Ok(())
    }

    /// One look of the hang watchdog at `now`: loses the device if its word has stayed
    /// below its submitted value for its hang bound, or its queues ran that long without
    /// completing work, whatever its submitted value says (the path, not a client word,
    /// tells whether a queue runs); and frees the quarantined memory no work can touch.
    pub fn watch(&mut self, now: Instant) -> Watched {
        let mut seen = Watched::default();
        if !self.quarantine.is_empty() {
            let before = self.quarantine.len();
            seen.busy |= self.release_quarantine();
            seen.changed |= self.quarantine.len() != before;
        }
        if self.stopped || self.lost.is_some() {
            return seen;
        }
        let Some(hang_ms) = self.desc.hang_ms else {
            return seen;
        };
        let (reached, submitted) = (self.reached(), self.submitted());
        let running = self.path.busy_since();
        let work = self.path.progress();
        let previous_look = self.looked.replace(now);
        if self.work.is_none_or(|(count, _)| count != work) {
            let at = self.path.progressed_at().filter(|at| *at <= now);
            self.work = Some((work, at.unwrap_or(now)));
        }
        let below = reached < submitted;
        if !below {
            self.progress = None;
        }
        if !below && running.is_none() {
            return seen;
        }
        seen.busy = true;
        let bound = std::time::Duration::from_millis(hang_ms);
        // Two bounds, never early, each counted from when its stall began as far as rigd can
        // know it, not from the look that first saw it: a look after an idle spell may come
        // a whole idle tick late, and the bound must not grow by it. The word's: it stayed
        // below the submitted value (both written by the client, so it can only lose itself
        // by them). The path's: queues ran without completing any work, counted from the
        // later of the run's start and the last completed work; a client cannot fake that
        // count, nor keep a queue running by leaving `submitted` unpublished or by writing
        // its own word.
        let mut why = None;
        if below {
            let since = match self.progress {
                Some((seen, since)) if seen == reached => since,
                _ => {
                    // The last look saw the word elsewhere, so the stall began after it: at a
                    // completion the path stamped since then, or at a run that began since
                    // then (at a doorbell, after the work was published); else now.
                    let after_look =
                        |at: Instant| previous_look.is_some_and(|p| at >= p) && at <= now;
                    let from = match self.progress {
                        Some(_) => self.path.progressed_at().filter(|at| after_look(*at)),
                        None => running.filter(|run| after_look(*run)),
                    };
                    let from = from.unwrap_or(now);
                    self.progress = Some((reached, from));
                    from
                }
            };
            let still = now.saturating_duration_since(since);
            if still >= bound {
                why = Some(format!(
                    "the timeline stayed at {reached} below the submitted {submitted} for {} ms",
                    still.as_millis()
                ));
            }
        }
        if let (None, Some(run), Some((_, since))) = (&why, running, self.work) {
            let still = now.saturating_duration_since(since.max(run));
            if still >= bound {
                why = Some(format!(
                    "the queues ran for {} ms without completing any work (the timeline at {reached})",
                    still.as_millis()
                ));
            }
        }
        if let Some(why) = why {
            self.lose(rig_proto::Fault::new(rig_proto::FaultKind::Hang, why));
            seen.changed = true;
        }
        seen
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// A fresh eventfd for a device's interrupts: nonblocking, close-on-exec.
pub fn interrupt_fd() -> Result<Arc<EventFd>, MakeError> {
    EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
        .map(Arc::new)
        .map_err(|e| MakeError::Host {
            what: "interrupt eventfd",
            source: e.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_sizes() {
        assert_eq!(grown_bytes(1), Some(4096));
        assert_eq!(grown_bytes(2048), Some(4096));
        assert_eq!(grown_bytes(2049), Some(8192));
        assert_eq!(grown_bytes(1 << 20), Some(2 << 20));
        assert_eq!(grown_bytes(u64::MAX), None);
    }
}
