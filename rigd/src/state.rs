//! The daemon's state: GPUs, clients, their devices and everything those hold, with
//! ownership, limits and cleanup.
//!
//! Locks are per device, not global. [`State`] keeps what is global under one small lock
//! (the book: clients, what each user and all clients are charged, and the device table of
//! `Arc`s), held only for lookups and accounting, never while a path works. Each device
//! sits behind its own mutex ([`crate::device::Device`] keeps its own invariants), so a
//! request on device A never waits for device B's work. Lock order: a device, then the
//! book; the book is never held while waiting for a device.
//!
//! Requests come through [`Handler::handle`] (waits for the device's lock) or
//! [`State::try_handle`] (answers only if the request cannot block and nothing it needs is
//! busy, else gives it back untouched). The server ([`crate::server`]) runs on tokio's
//! blocking pool the requests that may block ([`may_block`]: making, growing, stopping and
//! closing devices, which make or join queue threads; loading images; mapping host
//! memory), any request whose device is busy, and a disconnect; the rest inline with
//! `try_handle`, so no async worker waits for a queue's thread or another request. The
//! watch thread ([`spawn_watch`]) takes fault reports from the GPUs' paths and runs the
//! hang watchdog; it skips a device a request holds until its next tick, so a long stop
//! holds up no other device's watch. Its tick also frees quarantined memory once no work
//! can touch it. The [`Handler`] trait is the seam between sockets and devices, so tests
//! and fuzzers can drive requests without a socket.
//!
//! Limits hold per user (uid) across all its connections, and for all clients together
//! ([`Budget`]). A request that makes something reserves what it may cost, checked and
//! charged in one hold of the book (`State::reserve`), so two requests of one user on two
//! devices cannot both pass a check that only one of them fits; once done, the device's
//! charges are brought to its [`Footprint`] and the reservation dropped, again in one hold
//! (`State::settle`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, mpsc};
use std::time::{Duration, Instant};

use rig_proto::messages::{
    ClientInfo, DeviceId, DeviceInfo, DeviceReport, DeviceStatus, ErrorCode, ErrorReply, Facts,
    GpuInfo, MemoryKind, RegionId, Request, Response, Shortage,
};

use crate::config::{Limits, Peer};
use crate::device::{AllocError, Device, FdList, Footprint, MakeError};
use crate::gpus::GpuEntry;
use crate::path::{Events, MapRefusal, Refusal};

/// A connected client, unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// An answer and the descriptors it names.
pub type Reply = (Response, Vec<OwnedFd>);

/// Handles requests for connected clients (the seam between sockets and devices). Shared
/// by every connection: each call locks what it needs, and may block (it waits for locks
/// and for the paths).
pub trait Handler: Send + Sync {
    /// A client passed the handshake; `program` is its hello's name, within
    /// [`rig_proto::MOST_PROGRAM`], kept once for the connection's life.
    fn connect(&self, peer: Peer, program: Arc<str>) -> ClientId;
    /// One request of `client`, with the descriptors that came with it.
    fn handle(&self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Reply;
    /// The client's connection closed (or broke): give back all it holds.
    fn disconnect(&self, client: ClientId);
}

#[derive(Debug)]
struct Client {
    peer: Peer,
    /// Shared, not copied, by every look at the book ([`State::observe`]).
    program: Arc<str>,
    devices: BTreeSet<DeviceId>,
    /// Whether it ever opened a device (its leaving is logged at info then).
    opened: bool,
    inspector: bool,
    /// What this connection's devices hold (running total).
    held: Footprint,
}

/// What one user (uid) holds across all its connections: the limits count these.
#[derive(Debug, Default)]
struct Tenant {
    devices: u32,
    held: Footprint,
    /// Device and Mapped memory it holds, by GPU.
    gpu_bytes: BTreeMap<u32, u64>,
}

/// The limits as they apply while rigd runs: the configured ones with the sized defaults
/// filled in from the process's limits and the machine's memory.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Host memory rigd makes for all clients together.
    pub host_bytes: u64,
    /// Descriptors rigd may hold for one user.
    pub uid_fds: u64,
    /// Mappings rigd may hold for one user.
    pub uid_maps: u64,
    /// Descriptors rigd may hold for all clients: `RLIMIT_NOFILE` less what it keeps.
    pub fds: u64,
    /// Mappings rigd may hold for all clients: `vm.max_map_count` less what it keeps.
    pub maps: u64,
    /// rigd's `RLIMIT_NOFILE` (soft, as raised at start).
    pub nofile: u64,
    /// The system's `vm.max_map_count`.
    pub max_map_count: u64,
}

impl Budget {
    /// Sizes the limits from `limits` and the process's limits as they are now.
    pub fn new(limits: &Limits) -> Budget {
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(65530);
        let host_total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(8 << 30, |kib| kib.saturating_mul(1024));
        Self::sized(limits, nofile, max_map_count, host_total)
    }

    /// Sizes the limits for a process with these limits on a machine of `host_total` bytes.
    pub fn sized(limits: &Limits, nofile: u64, max_map_count: u64, host_total: u64) -> Budget {
        // Kept for connections, passed descriptors in flight, logs and libraries.
        let fds = nofile.saturating_sub(FD_RESERVE + nofile / 16);
        // Kept for libraries, heaps, the runtime's threads and the simulators' VRAM.
        let maps = max_map_count.saturating_sub(MAP_RESERVE + max_map_count / 16);
        let or = |configured: u64, sized: u64| if configured == 0 { sized } else { configured };
        Budget {
            host_bytes: or(limits.host_memory_bytes, host_total / 2),
            uid_fds: or(u64::from(limits.fds), fds / 4),
            uid_maps: or(u64::from(limits.mappings), maps / 4),
            fds,
            maps,
            nofile,
            max_map_count,
        }
    }
}

/// Descriptors rigd keeps for itself beyond `RLIMIT_NOFILE / 16`.
const FD_RESERVE: u64 = 512;
/// Mappings rigd keeps for itself beyond `vm.max_map_count / 16`.
const MAP_RESERVE: u64 = 1024;

/// Everything rigd holds.
#[derive(Debug)]
pub struct State {
    gpus: Vec<GpuEntry>,
    /// `daemon.admin_group`'s gid; SIGHUP may change it ([`State::set_admin_gid`]).
    inspect_gid: std::sync::RwLock<Option<u32>>,
    own_uid: u32,
    /// What is global: clients, charges, the device table.
    book: Mutex<Book>,
    next_client: AtomicU64,
    next_device: AtomicU64,
    next_object: AtomicU64,
    /// Where paths report faults, so they reach the watch thread as messages.
    faults: mpsc::Sender<Msg>,
    /// `images.max_bytes`, for `LoadImage` through [`Handler`] (the server checks it itself).
    pub(crate) max_image_bytes: u64,
}

/// The global part of the state, under [`State`]'s one small lock.
#[derive(Debug)]
struct Book {
    /// The limits in force (SIGHUP replaces them: [`State::set_limits`]) and as sized.
    limits: Limits,
    budget: Budget,
    clients: BTreeMap<ClientId, Client>,
    /// What each user holds, across its connections, reservations included.
    tenants: BTreeMap<u32, Tenant>,
    /// What all clients hold, reservations included.
    total: Footprint,
    devices: BTreeMap<DeviceId, Arc<Slot>>,
}

/// A device in the table: who owns it, on which GPU, and the device behind its own lock.
#[derive(Debug)]
struct Slot {
    owner: ClientId,
    /// The owner's user.
    uid: u32,
    gpu: u32,
    device: Mutex<Device>,
}

/// How a request takes a device's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Waits for it (on a thread that may block).
    Wait,
    /// Gives up at once if another holds it (on an async worker).
    Try,
}

/// A lock a [`Mode::Try`] request would have waited for.
#[derive(Debug)]
struct Busy;

/// Why a request ends early: its answer, or (only with [`Mode::Try`]) a busy lock before it
/// changed anything.
#[derive(Debug)]
pub(crate) enum Halt {
    Busy,
    Answer(Box<Response>),
}

impl Halt {
    /// The answer it carries (a lock found busy where none may be: never, as only
    /// `Mode::Try` finds one busy, and it gives the request back instead).
    fn answer(self) -> Response {
        match self {
            Halt::Answer(r) => *r,
            Halt::Busy => busy_answer(),
        }
    }
}

impl From<Busy> for Halt {
    fn from(_: Busy) -> Halt {
        Halt::Busy
    }
}

impl From<Response> for Halt {
    fn from(r: Response) -> Halt {
        Halt::Answer(Box::new(r))
    }
}

type Answer<T = Reply> = Result<T, Halt>;

impl Slot {
    /// Locks the device, waiting for it. A panic while it was held (a bug) does not stop
    /// rigd: the device is only ever changed by whole operations, so it is taken back as it
    /// is.
    fn wait(&self) -> MutexGuard<'_, Device> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the device as `mode` says.
    fn lock(&self, mode: Mode) -> Result<MutexGuard<'_, Device>, Busy> {
        match mode {
            Mode::Wait => Ok(self.wait()),
            Mode::Try => match self.device.try_lock() {
                Ok(d) => Ok(d),
                Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
                Err(TryLockError::WouldBlock) => Err(Busy),
            },
        }
    }
}

/// A device locked for a request, with what the request reserved for it.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    slot: &'a Slot,
    pub(crate) d: MutexGuard<'a, Device>,
    /// Charged ahead for what the request makes; dropped when the charges are settled.
    reserved: Footprint,
    /// Pieces in quarantine when the request began.
    quarantined: usize,
}

impl<'a> Held<'a> {
    fn new(slot: &'a Slot, mode: Mode) -> Result<Held<'a>, Busy> {
        let d = slot.lock(mode)?;
        let quarantined = d.quarantined();
        Ok(Held {
            slot,
            d,
            reserved: Footprint::default(),
            quarantined,
        })
    }
}

fn err(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply::new(code, message))
}

fn none(r: Response) -> Reply {
    (r, Vec::new())
}

fn no_device(id: DeviceId) -> Response {
    err(
        ErrorCode::NoSuchDevice,
        format!("no device {} belongs to this client; open one first", id.0),
    )
}

/// The user of `client`; `u32::MAX` for one not in the book.
fn uid_of(book: &Book, client: ClientId) -> u32 {
    book.clients.get(&client).map_or(u32::MAX, |c| c.peer.uid)
}

/// `Ok` if `d` is neither lost nor stopped; else the answer saying which.
pub(crate) fn live(d: &Device) -> Result<(), Halt> {
    if let Some(why) = d.lost() {
        return Err(err(
            ErrorCode::Lost,
            format!("device {} is lost: {why}", d.id().0),
        )
        .into());
    }
    if d.is_stopped() {
        return Err(err(
            ErrorCode::Stopped,
            format!("device {} is stopped; close it and open another", d.id().0),
        )
        .into());
    }
    Ok(())
}

/// Whether a request may block its thread: it makes, grows, stops or closes queues (which
/// joins their threads), parses and uploads a code object, or maps a client's memory. The
/// server runs these on its blocking pool, never on an async worker.
pub fn may_block(r: &Request) -> bool {
    matches!(
        r,
        Request::OpenDevice { .. }
            | Request::CloseDevice { .. }
            | Request::Grow { .. }
            | Request::StopDevice { .. }
            | Request::LoadImage { .. }
            | Request::MapHost { .. }
    )
}

impl Book {
    /// Moves the charges of a device of `owner` (of user `uid`) on `gpu` from `was` to
    /// `now`. The user is charged even once the connection is gone (its devices are given
    /// back after it leaves the book).
    fn apply(&mut self, owner: ClientId, uid: u32, gpu: u32, was: Footprint, now: Footprint) {
        self.total = self.total.minus(was).plus(now);
        if let Some(c) = self.clients.get_mut(&owner) {
            c.held = c.held.minus(was).plus(now);
        }
        let t = self.tenants.entry(uid).or_default();
        t.held = t.held.minus(was).plus(now);
        let g = t.gpu_bytes.entry(gpu).or_default();
        *g = g
            .saturating_sub(was.gpu_bytes)
            .saturating_add(now.gpu_bytes);
    }

    /// The device `id` if `client` owns it.
    fn owned(&self, client: ClientId, id: DeviceId) -> Result<Arc<Slot>, Halt> {
        match self.devices.get(&id) {
            Some(s) if s.owner == client => Ok(s.clone()),
            _ => Err(no_device(id).into()),
        }
    }
}

impl State {
    /// A state over `gpus`. `inspect_gid` is the administrators' group
    /// (`daemon.admin_group`), whose members may inspect and stop everyone's work (root and
    /// rigd's own user always may).
    pub fn new(
        gpus: Vec<GpuEntry>,
        limits: Limits,
        inspect_gid: Option<u32>,
        faults: mpsc::Sender<Msg>,
    ) -> Self {
        let budget = Budget::new(&limits);
        tracing::info!(
            memory_bytes = limits.memory_bytes,
            devices = limits.devices,
            objects = limits.objects,
            gpu_share_percent = limits.gpu_share_percent,
            host_memory_bytes = budget.host_bytes,
            fds = budget.uid_fds,
            mappings = budget.uid_maps,
            all_fds = budget.fds,
            all_mappings = budget.maps,
            nofile = budget.nofile,
            max_map_count = budget.max_map_count,
            "limits per user, and for all clients"
        );
        Self {
            gpus,
            inspect_gid: std::sync::RwLock::new(inspect_gid),
            own_uid: nix::unistd::geteuid().as_raw(),
            book: Mutex::new(Book {
                limits,
                budget,
                clients: BTreeMap::new(),
                tenants: BTreeMap::new(),
                total: Footprint::default(),
                devices: BTreeMap::new(),
            }),
            next_client: AtomicU64::new(1),
            next_device: AtomicU64::new(1),
            next_object: AtomicU64::new(1),
            faults,
            max_image_bytes: crate::config::Images::default().max_bytes,
        }
    }

    /// The book, held briefly: never while a path works or a device's lock is awaited.
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn new_object_id(&self) -> u64 {
        self.next_object.fetch_add(1, Ordering::Relaxed)
    }

    fn gpu_infos(&self) -> Vec<GpuInfo> {
        self.gpus.iter().map(|g| g.info.clone()).collect()
    }

    /// The limits in force, as sized.
    pub fn budget(&self) -> Budget {
        self.book().budget
    }

    /// Puts reloaded `[limits]` in force (SIGHUP): later requests are admitted against them;
    /// what clients already hold stays. Says whether they changed.
    pub fn set_limits(&self, limits: Limits) -> bool {
        let mut book = self.book();
        let changed = limits != book.limits;
        book.budget = Budget::new(&limits);
        book.limits = limits;
        changed
    }

    /// The shortest hang bound of the GPUs served, if any has one.
    pub fn shortest_hang_bound(&self) -> Option<Duration> {
        self.gpus
            .iter()
            .filter_map(|g| g.backend.as_ref()?.description().hang_ms)
            .min()
            .map(Duration::from_millis)
    }

    /// One look at everything for [`crate::metrics`] (the sampler and rigctl's figures):
    /// the book briefly, then each device under its own lock.
    pub fn observe(&self) -> crate::metrics::Observed {
        use crate::metrics::{ClientSeen, DeviceSeen, GpuSeen, Observed};
        // Each growth makes a queue of the next generation; retired ones may linger.
        let generations = |d: &Device| {
            let (mut copy, mut compute) = (0u64, 0u64);
            for r in d.rings() {
                let g = if r.kind == rig_proto::messages::QueueKind::Sdma {
                    &mut copy
                } else {
                    &mut compute
                };
                *g = (*g).max(u64::from(r.generation));
            }
            copy + compute
        };
        let (slots, clients) = {
            let book = self.book();
            let slots: Vec<(DeviceId, Arc<Slot>, i32)> = book
                .devices
                .iter()
                .map(|(id, slot)| {
                    let pid = book.clients.get(&slot.owner).map_or(0, |c| c.peer.pid);
                    (*id, slot.clone(), pid)
                })
                .collect();
            let clients: Vec<ClientSeen> = book
                .clients
                .values()
                .map(|c| ClientSeen {
                    pid: c.peer.pid,
                    uid: c.peer.uid,
                    program: c.program.clone(),
                    devices: c.devices.len(),
                    bytes: c.held.bytes,
                })
                .collect();
            (slots, clients)
        };
        let devices = slots
            .into_iter()
            .map(|(id, slot, pid)| {
                let d = slot.wait();
                DeviceSeen {
                    id: id.0,
                    gpu: slot.gpu,
                    pid,
                    uid: slot.uid,
                    held: d.held(),
                    submitted: d.submitted(),
                    reached: d.reached(),
                    generations: generations(&d),
                    faults: d.faults().len(),
                    lost: d.lost().cloned(),
                }
            })
            .collect();
        Observed {
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuSeen {
                    bus: g.info.bus.clone(),
                    simulated: g.info.simulated,
                    index: g.info.index,
                    name: g.info.name.clone(),
                    arch: g.info.arch.clone(),
                    total_bytes: g.info.budget,
                    firmware: g.firmware.clone(),
                    client_cost: g.backend.as_ref().and_then(|b| b.description().client_cost),
                })
                .collect(),
            devices,
            clients,
        }
    }

    /// Reserves `need` (and a device more, if `device`) for `client` on `gpu`: checked
    /// against the limits and charged in one hold of the book, so no other request can
    /// pass the same check on the same room. Else the answer naming the limit that refuses.
    fn reserve(
        &self,
        client: ClientId,
        gpu: u32,
        need: Footprint,
        device: bool,
    ) -> Result<(), Halt> {
        let mut book = self.book();
        if let Some(r) = self.admit(&book, client, gpu, need, device) {
            return Err(crate::device::naming_queues(r, need, uid_of(&book, client)).into());
        }
        let uid = uid_of(&book, client);
        if device {
            book.tenants.entry(uid).or_default().devices += 1;
        }
        book.apply(client, uid, gpu, Footprint::default(), need);
        Ok(())
    }

    /// Reserves `need` for the request holding `h` (see [`State::reserve`]).
    pub(crate) fn reserve_for(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        need: Footprint,
    ) -> Answer<()> {
        self.reserve(client, h.slot.gpu, need, false)?;
        h.reserved = h.reserved.plus(need);
        Ok(())
    }

    /// Reserves `bytes` more bytes of Device memory and one more object on the GPU of the
    /// device `h` holds.
    pub(crate) fn reserve_memory(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        bytes: u64,
    ) -> Answer<()> {
        let need = Footprint {
            bytes,
            objects: 1,
            gpu_bytes: bytes,
            ..Footprint::default()
        };
        self.reserve_for(client, h, need)
    }

    /// Brings the charges of the device `h` holds up to what it holds now, and drops what
    /// the request reserved, in one hold of the book. Wakes the watch thread if the request
    /// put memory in quarantine, so its release comes within a busy tick.
    fn settle(&self, h: &mut Held<'_>) {
        let (was, now) = h.d.recharge();
        let reserved = std::mem::take(&mut h.reserved);
        if was != now || reserved != Footprint::default() {
            let s = h.slot;
            self.book()
                .apply(s.owner, s.uid, s.gpu, was.plus(reserved), now);
        }
        if h.d.quarantined() > h.quarantined {
            let _ = self.faults.send(Msg::Wake);
        }
    }

    /// `None` if `client` may take `need` more (and a device more, if `device`) on `gpu`;
    /// else the answer naming the limit that refuses it.
    fn admit(
        &self,
        book: &Book,
        client: ClientId,
        gpu: u32,
        need: Footprint,
        device: bool,
    ) -> Option<Response> {
        let uid = uid_of(book, client);
        let none = Tenant::default();
        let t = book.tenants.get(&uid).unwrap_or(&none);
        let total = &book.total;
        let l = &book.limits;
        let b = &book.budget;
        let refuse = |message: String| {
            tracing::info!(
                uid,
                client = client.0,
                "client refused for a limit: {message}"
            );
            Some(err(ErrorCode::Quota, message))
        };
        if device && t.devices >= l.devices {
            return refuse(format!(
                "user {uid} has {} devices open across its connections, the most rigd's limits.devices ({}) allows; close one first",
                t.devices, l.devices
            ));
        }
        if need.objects > 0 && t.held.objects.saturating_add(need.objects) > u64::from(l.objects) {
            return refuse(format!(
                "user {uid} holds {} allocations, mappings and images across its connections, the most rigd's limits.objects ({}) allows; free some first",
                t.held.objects, l.objects
            ));
        }
        if need.fds > 0 && t.held.fds.saturating_add(need.fds) > b.uid_fds {
            return refuse(format!(
                "rigd holds {} file descriptors for user {uid}'s memory and devices and needs {} more, beyond rigd's limits.fds ({}); free Pinned or Mapped allocations or host mappings, or make fewer larger ones",
                t.held.fds, need.fds, b.uid_fds
            ));
        }
        if need.fds > 0 && total.fds.saturating_add(need.fds) > b.fds {
            return refuse(format!(
                "rigd holds {} file descriptors for all clients, the most its RLIMIT_NOFILE ({}) leaves after what it keeps for connections ({}); retry once others free memory, or raise LimitNOFILE",
                total.fds, b.nofile, b.fds
            ));
        }
        if need.maps > 0 && t.held.maps.saturating_add(need.maps) > b.uid_maps {
            return refuse(format!(
                "rigd holds {} memory mappings for user {uid} and needs {} more, beyond rigd's limits.mappings ({}); free Pinned or Mapped allocations, host mappings or devices, or make fewer larger ones",
                t.held.maps, need.maps, b.uid_maps
            ));
        }
        if need.maps > 0 && total.maps.saturating_add(need.maps) > b.maps {
            return refuse(format!(
                "rigd holds {} memory mappings for all clients, the most vm.max_map_count ({}) leaves after what rigd keeps for itself ({}); retry once others free memory, or raise vm.max_map_count",
                total.maps, b.max_map_count, b.maps
            ));
        }
        let short = |limit: &str, value: u64, held: u64, shortage: Shortage| {
            let missing = held.saturating_add(need.bytes).saturating_sub(value);
            tracing::info!(
                uid,
                client = client.0,
                asked = need.bytes,
                missing,
                limit,
                value,
                "client refused memory for a limit"
            );
            Some(Response::NoMemory {
                bytes: need.bytes,
                shortage,
                limit: Some(rig_proto::Limit {
                    name: limit.to_owned(),
                    value,
                    missing,
                }),
            })
        };
        if t.held.bytes.saturating_add(need.bytes) > l.memory_bytes {
            return short(
                "limits.memory_bytes",
                l.memory_bytes,
                t.held.bytes,
                Shortage::Quota,
            );
        }
        // At 100 percent the GPU's own memory is the bound, and the GPU refuses.
        if need.gpu_bytes > 0 && l.gpu_share_percent < 100 {
            let g = gpu;
            let budget = self.gpus.get(g as usize).map_or(0, |e| e.info.budget);
            let share = budget / 100 * u64::from(l.gpu_share_percent)
                + budget % 100 * u64::from(l.gpu_share_percent) / 100;
            let held = t.gpu_bytes.get(&g).copied().unwrap_or(0);
            if held.saturating_add(need.gpu_bytes) > share {
                return short("limits.gpu_share_percent", share, held, Shortage::Quota);
            }
        }
        if need.host_bytes > 0 && total.host_bytes.saturating_add(need.host_bytes) > b.host_bytes {
            return short(
                "limits.host_memory_bytes",
                b.host_bytes,
                total.host_bytes,
                Shortage::Host,
            );
        }
        None
    }

    /// Takes device `id` out of the table, gives back all it holds and its charges, and
    /// drops the mappings of its word that the owner's other devices hold. Waits for the
    /// device's lock: run where a thread may block.
    fn remove_device(&self, id: DeviceId) {
        let (slot, peers) = {
            let mut book = self.book();
            let Some(slot) = book.devices.remove(&id) else {
                return;
            };
            let mut others = Vec::new();
            if let Some(c) = book.clients.get_mut(&slot.owner) {
                c.devices.remove(&id);
                others.extend(c.devices.iter().copied());
            }
            if let Some(t) = book.tenants.get_mut(&slot.uid) {
                t.devices = t.devices.saturating_sub(1);
            }
            let peers: Vec<Arc<Slot>> = others
                .iter()
                .filter_map(|p| book.devices.get(p).cloned())
                .collect();
            (slot, peers)
        };
        {
            let mut d = slot.wait();
            let charged = d.close();
            self.book().apply(
                slot.owner,
                slot.uid,
                slot.gpu,
                charged,
                Footprint::default(),
            );
        }
        for p in peers {
            let mut h = Held::waited(&p);
            h.d.drop_peer_word(id);
            self.settle(&mut h);
        }
    }

    fn open_device(&self, client: ClientId, gpu: u32) -> Answer {
        let Some(entry) = self.gpus.get(gpu as usize) else {
            return Err(err(
                ErrorCode::NoSuchGpu,
                format!(
                    "no gpu {gpu}: rigd serves {} gpus; `rigctl gpus` lists them",
                    self.gpus.len()
                ),
            )
            .into());
        };
        let Some(backend) = entry.backend.clone() else {
            return Err(err(
                ErrorCode::NoSuchGpu,
                format!(
                    "gpu {gpu} ({}) is not drivable yet: {}",
                    entry.info.name,
                    entry
                        .why_not
                        .as_deref()
                        .unwrap_or("rigd has no path for it")
                ),
            )
            .into());
        };
        let reserved = Footprint::opening_on(backend.description());
        self.reserve(client, gpu, reserved, true)?;
        let id = DeviceId(self.next_device.fetch_add(1, Ordering::Relaxed));
        let made = self.make_device(client, id, gpu, backend.as_ref());
        let mut book = self.book();
        let uid = uid_of(&book, client);
        let (mut device, reply) = match made {
            Ok(x) => x,
            Err(r) => {
                // Nothing was made: the reservation goes back.
                book.apply(client, uid, gpu, reserved, Footprint::default());
                if let Some(t) = book.tenants.get_mut(&uid) {
                    t.devices = t.devices.saturating_sub(1);
                }
                return Err(r);
            }
        };
        let (_, now) = device.recharge();
        book.apply(client, uid, gpu, reserved, now);
        if let Some(c) = book.clients.get_mut(&client) {
            c.devices.insert(id);
            c.opened = true;
            tracing::info!(
                client = client.0,
                pid = c.peer.pid,
                uid = c.peer.uid,
                program = %crate::logging::client_text(&c.program),
                device = id.0,
                gpu,
                "device opened"
            );
        }
        book.devices.insert(
            id,
            Arc::new(Slot {
                owner: client,
                uid,
                gpu,
                device: Mutex::new(device),
            }),
        );
        Ok(reply)
    }

    /// Makes device `id` on `backend` and the reply that hands it over; touches no lock.
    fn make_device(
        &self,
        client: ClientId,
        id: DeviceId,
        gpu: u32,
        backend: &dyn crate::path::Backend,
    ) -> Result<(Device, Reply), Halt> {
        let interrupt = crate::device::interrupt_fd()
            .map_err(|e| Halt::from(err(ErrorCode::Internal, e.to_string())))?;
        let on_irq = interrupt.clone();
        let on_fault = interrupt.clone();
        let faults = self.faults.clone();
        let events = Events {
            client: client.0,
            interrupt: Arc::new(move || {
                let _ = on_irq.write(1);
            }),
            fault: Arc::new(move |fault| {
                let _ = faults.send(Msg::Fault { device: id, fault });
                let _ = on_fault.write(1);
            }),
        };
        let path = match backend.open(events) {
            Ok(p) => p,
            Err(Refusal::Lacking(r)) => {
                tracing::debug!(reason = %r, "the gpu has no room for another address space");
                return Err(Response::NoMemory {
                    bytes: 0,
                    shortage: Shortage::Gpu,
                    limit: None,
                }
                .into());
            }
            Err(r) => {
                return Err(err(
                    ErrorCode::Fault,
                    format!("the gpu refused a new address space: {r}"),
                )
                .into());
            }
        };
        let desc = backend.description().clone();
        let device = match Device::make(id, gpu, desc, path, interrupt) {
            Ok(d) => d,
            Err(MakeError::Short { .. }) => {
                return Err(Response::NoMemory {
                    bytes: Footprint::opening_on(backend.description()).bytes,
                    shortage: Shortage::Gpu,
                    limit: None,
                }
                .into());
            }
            Err(e) => return Err(err(ErrorCode::Fault, e.to_string()).into()),
        };
        let facts = facts(&device);
        let (opened, fds) = device.opened(facts).map_err(|e| {
            Halt::from(err(
                ErrorCode::Internal,
                format!("cannot share the device's memory: {e}"),
            ))
        })?;
        Ok((device, (Response::DeviceOpened(Box::new(opened)), fds)))
    }

    fn close_device(&self, client: ClientId, id: DeviceId) -> Answer<Response> {
        self.book().owned(client, id)?;
        self.remove_device(id);
        tracing::debug!(client = client.0, device = id.0, "device closed");
        Ok(Response::Done)
    }

    fn alloc(&self, client: ClientId, h: &mut Held<'_>, kind: MemoryKind, bytes: u64) -> Answer {
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        live(&h.d)?;
        let hosted = u64::from(kind != MemoryKind::Device);
        let need = Footprint {
            bytes: rounded,
            objects: 1,
            fds: hosted,
            maps: hosted,
            host_bytes: hosted * rounded,
            gpu_bytes: if kind == MemoryKind::Pinned {
                0
            } else {
                rounded
            },
            queue_bytes: 0,
        };
        self.reserve_for(client, h, need)?;
        let region = RegionId(self.new_object_id());
        let mut fds = FdList::default();
        Ok(match h.d.alloc(region, kind, rounded, &mut fds) {
            Ok((gpu_address, host)) => (
                Response::Allocated {
                    region,
                    gpu_address,
                    host,
                },
                fds.into_fds(),
            ),
            Err(AllocError::Refused(Refusal::Lacking(_))) => none(Response::NoMemory {
                bytes: rounded,
                shortage: Shortage::Gpu,
                limit: None,
            }),
            Err(AllocError::Refused(Refusal::Full(r) | Refusal::Refused(r))) => {
                none(Response::Never { reason: r })
            }
            Err(e @ AllocError::Share(_)) => none(err(ErrorCode::Internal, e.to_string())),
        })
    }

    fn free(h: &mut Held<'_>, region: RegionId) -> Response {
        // Work submitted before the free may still use the memory: it is reused only once
        // none can (the device's quarantine).
        if h.d.free(region) {
            Response::Done
        } else {
            err(
                ErrorCode::NoSuchRegion,
                format!("device {} has no region {}", h.d.id().0, region.0),
            )
        }
    }

    fn map_host(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        bytes: u64,
        offset: u64,
        fd: OwnedFd,
    ) -> Answer<Response> {
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        live(&h.d)?;
        if !h.d.description().maps_host {
            return Ok(Response::Never {
                reason: "this gpu's path maps no host memory".into(),
            });
        }
        let need = Footprint {
            bytes: rounded,
            objects: 1,
            fds: 1,
            maps: 1,
            ..Footprint::default()
        };
        self.reserve_for(client, h, need)?;
        let region = RegionId(self.new_object_id());
        Ok(match h.d.map_host(region, fd, offset, rounded) {
            Ok(gpu_address) => Response::Mapped {
                region,
                gpu_address,
            },
            Err(MapRefusal::NoRoom(_)) => Response::NoMemory {
                bytes: rounded,
                shortage: Shortage::Gpu,
                limit: None,
            },
            Err(MapRefusal::Never(reason)) => Response::Never { reason },
            Err(MapRefusal::Unfit(why)) => err(ErrorCode::InvalidArgument, why),
        })
    }

    fn grow(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        sizes: (u64, u64, u64),
        installed: rig_proto::messages::Generations,
    ) -> Answer {
        live(&h.d)?;
        let want = match h.d.growth_bytes(sizes.0, sizes.1, sizes.2) {
            Ok(w) => w,
            Err(e) => {
                return Ok(none(Response::Never {
                    reason: e.to_string(),
                }));
            }
        };
        if want > 0 {
            let queues = h.d.growth_queues(sizes.0, sizes.1);
            self.reserve_for(client, h, Footprint::growth(want).plus(queues))?;
        }
        Ok(match h.d.grow(sizes.0, sizes.1, sizes.2, installed) {
            Ok((g, fds)) => (Response::Grown(g), fds),
            Err(MakeError::Short { .. }) => none(Response::NoMemory {
                bytes: want,
                shortage: Shortage::Gpu,
                limit: None,
            }),
            Err(e @ MakeError::Never { .. }) => none(Response::Never {
                reason: e.to_string(),
            }),
            Err(e) => none(err(ErrorCode::Fault, e.to_string())),
        })
    }

    /// Maps `peer`'s timeline word read-only into `id`'s address space (once per pair).
    fn map_peer_word(
        &self,
        client: ClientId,
        id: DeviceId,
        peer: DeviceId,
        mode: Mode,
    ) -> Answer<Response> {
        let (peer_slot, slot) = {
            let book = self.book();
            (book.owned(client, peer)?, book.owned(client, id)?)
        };
        let (peer_gpu, control) = {
            let p = peer_slot.lock(mode)?;
            // A clone of the page keeps it alive after the peer closes; rigd made and
            // sealed it, so nobody can shrink it under the mapping.
            match p.word() {
                Some((page, _)) => (p.gpu(), page.clone()),
                None => {
                    return Ok(err(
                        ErrorCode::Internal,
                        "the peer device has no control page",
                    ));
                }
            }
        };
        let mut h = Held::new(&slot, mode)?;
        let r = self.map_peer_word_held(client, &mut h, peer, peer_gpu, &control);
        self.settle(&mut h);
        r
    }

    fn map_peer_word_held(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        peer: DeviceId,
        peer_gpu: u32,
        control: &rig_shm::SharedRegion,
    ) -> Answer<Response> {
        live(&h.d)?;
        if peer == h.d.id() {
            return Ok(match h.d.word() {
                Some((_, gpu_address)) => Response::PeerWord { gpu_address },
                None => err(ErrorCode::Internal, "the device has no control page"),
            });
        }
        // A GPU reaches the words of its own devices only: a queue of another GPU would
        // read its host memory over paths rigd does not set up.
        let gpu = h.d.gpu();
        if peer_gpu != gpu {
            return Ok(Response::Never {
                reason: format!(
                    "gpu {gpu} does not reach the word of device {} on gpu {peer_gpu}; wait on the host",
                    peer.0
                ),
            });
        }
        if !h.d.maps_peer_word(peer) {
            self.reserve_for(client, h, Footprint::PEER_WORD)?;
        }
        Ok(match h.d.map_peer_word(peer, control) {
            Ok(gpu_address) => Response::PeerWord { gpu_address },
            Err(Refusal::Lacking(_)) => Response::NoMemory {
                bytes: rig_shm::layout::CONTROL_PAGE_BYTES,
                shortage: Shortage::Gpu,
                limit: None,
            },
            Err(r) => Response::Never {
                reason: r.to_string(),
            },
        })
    }

    fn inspector(&self, client: ClientId) -> bool {
        self.book()
            .clients
            .get(&client)
            .is_some_and(|c| c.inspector)
    }

    /// Whether `client` is an administrator: may inspect others and stop their work
    /// ([`crate::admin`]). Decided at connect from the socket's credentials.
    pub fn is_inspector(&self, client: ClientId) -> bool {
        self.inspector(client)
    }

    /// Makes `gid` the administrators' group for connections from now on (a reload); says
    /// whether it changed.
    pub fn set_admin_gid(&self, gid: Option<u32>) -> bool {
        let mut g = self.inspect_gid.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, gid) != gid
    }

    /// Loses `id` as stopped by the administrator, whoever owns it ([`crate::admin`]); an
    /// unknown or already lost device is the error answer.
    pub fn admin_stop(&self, id: DeviceId) -> Result<(), ErrorReply> {
        let Some(slot) = self.book().devices.get(&id).cloned() else {
            return Err(ErrorReply::new(
                ErrorCode::NoSuchDevice,
                format!("no device {}; `rigctl devices` lists them", id.0),
            ));
        };
        let mut h = Held::waited(&slot);
        if let Some(why) = h.d.lost() {
            return Err(ErrorReply::new(
                ErrorCode::Lost,
                format!("device {} is already lost: {why}", id.0),
            ));
        }
        h.d.lose(rig_proto::Fault::new(
            rig_proto::FaultKind::StoppedByAdministrator,
            String::new(),
        ));
        // The stop gave back its queues' threads and what it had quarantined.
        self.settle(&mut h);
        Ok(())
    }

    /// The devices the connections of process `pid` hold.
    pub fn devices_of_pid(&self, pid: i32) -> Vec<DeviceId> {
        let book = self.book();
        book.devices
            .iter()
            .filter(|(_, slot)| {
                book.clients
                    .get(&slot.owner)
                    .is_some_and(|c| c.peer.pid == pid)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    fn denied() -> Response {
        err(ErrorCode::PermissionDenied, crate::admin::NOT_ADMIN)
    }

    fn list_clients(&self, client: ClientId) -> Response {
        if !self.inspector(client) {
            return Self::denied();
        }
        Response::Clients(
            self.book()
                .clients
                .values()
                .map(|c| ClientInfo {
                    pid: u32::try_from(c.peer.pid).unwrap_or(0),
                    uid: c.peer.uid,
                    gid: c.peer.gid,
                    program: c.program.to_string(),
                    devices: c.devices.iter().copied().collect(),
                    bytes: c.held.bytes,
                })
                .collect(),
        )
    }

    /// The devices, each with its owner's pid, as the table holds them now.
    fn snapshot(&self) -> Vec<(Arc<Slot>, u32)> {
        let book = self.book();
        book.devices
            .values()
            .map(|s| {
                let pid = book
                    .clients
                    .get(&s.owner)
                    .map_or(0, |c| u32::try_from(c.peer.pid).unwrap_or(0));
                (s.clone(), pid)
            })
            .collect()
    }

    fn list_devices(&self, client: ClientId, mode: Mode) -> Answer<Response> {
        // A non-administrator sees its own user's devices only: those of its connections.
        let mine: Option<BTreeSet<ClientId>> = (!self.inspector(client)).then(|| {
            let book = self.book();
            let uid = uid_of(&book, client);
            book.clients
                .iter()
                .filter(|(_, c)| c.peer.uid == uid)
                .map(|(id, _)| *id)
                .collect()
        });
        let mut out = Vec::new();
        for (slot, pid) in self.snapshot() {
            if mine.as_ref().is_some_and(|m| !m.contains(&slot.owner)) {
                continue;
            }
            let d = slot.lock(mode)?;
            out.push(info(pid, &d));
        }
        Ok(Response::Devices(out))
    }

    fn show_device(&self, client: ClientId, id: DeviceId, mode: Mode) -> Answer<Response> {
        let (slot, pid, allowed) = {
            let book = self.book();
            let Some(slot) = book.devices.get(&id).cloned() else {
                return Ok(err(
                    ErrorCode::NoSuchDevice,
                    format!("no device {}; `rigctl devices` lists them", id.0),
                ));
            };
            let owner = book.clients.get(&slot.owner);
            let pid = owner.map_or(0, |c| u32::try_from(c.peer.pid).unwrap_or(0));
            let asker = book.clients.get(&client);
            let allowed = slot.owner == client
                || asker.is_some_and(|c| {
                    c.inspector || owner.is_some_and(|o| o.peer.uid == c.peer.uid)
                });
            (slot, pid, allowed)
        };
        if !allowed {
            return Ok(Self::denied());
        }
        let d = slot.lock(mode)?;
        Ok(Response::Device(Box::new(DeviceReport {
            info: info(pid, &d),
            facts: facts(&d),
            rings: d.rings(),
            images: u32::try_from(d.image_count()).unwrap_or(u32::MAX),
            regions: u32::try_from(d.region_count()).unwrap_or(u32::MAX),
            submitted: d.submitted(),
            reached: d.reached(),
            faults: d.faults().to_vec(),
        })))
    }

    /// A fault reported by device `id`'s path: the device is lost. With `Mode::Try`, gives
    /// `why` back if a request holds the device.
    fn fault_in(
        &self,
        id: DeviceId,
        why: rig_proto::Fault,
        mode: Mode,
    ) -> Result<(), rig_proto::Fault> {
        let Some(slot) = self.book().devices.get(&id).cloned() else {
            return Ok(());
        };
        let Ok(mut h) = Held::new(&slot, mode) else {
            return Err(why);
        };
        h.d.lose(why);
        // The stop gave back its queues' threads and what it had quarantined.
        self.settle(&mut h);
        Ok(())
    }

    /// A fault reported by device `id`'s path: the device is lost.
    pub fn fault(&self, id: DeviceId, why: rig_proto::Fault) {
        let _ = self.fault_in(id, why, Mode::Wait);
    }

    /// The hang watchdog: one look at every device ([`Device::watch`]), then its charges
    /// brought up to date where that changed them. A device a request holds is skipped
    /// until the next look (and counts as busy). Returns whether any device has
    /// outstanding work or quarantined memory (so the owner knows whether to keep
    /// ticking).
    pub fn watchdog(&self, now: Instant) -> bool {
        let mut busy = false;
        for (slot, _) in self.snapshot() {
            let Ok(mut h) = Held::new(&slot, Mode::Try) else {
                busy = true;
                continue;
            };
            let seen = h.d.watch(now);
            busy |= seen.busy;
            if seen.changed {
                self.settle(&mut h);
            }
        }
        busy
    }

    /// Stops every device and gives back everything (at shutdown).
    pub fn shutdown(&self) {
        let slots = {
            let mut book = self.book();
            book.clients.clear();
            book.tenants.clear();
            book.total = Footprint::default();
            std::mem::take(&mut book.devices)
        };
        let n = slots.len();
        for slot in slots.into_values() {
            let mut d = slot.wait();
            // A client waiting on work that will never run must see a loss, not a completion.
            // rigd stops only when its administrator (or the system) tells it to.
            d.lose(rig_proto::Fault::new(
                rig_proto::FaultKind::StoppedByAdministrator,
                SHUTTING_DOWN,
            ));
            d.close();
        }
        tracing::info!(
            devices = n,
            "every device stopped and its memory given back"
        );
    }

    /// The total memory held across all devices (for tests and the log). Waits for every
    /// device's lock.
    pub fn held_bytes(&self) -> u64 {
        self.snapshot()
            .iter()
            .map(|(s, _)| s.wait().held().total())
            .sum()
    }

    /// The half of `LoadImage` after parsing ([`crate::image::Prepared`]): places the image
    /// on device `id`, waiting for its lock.
    pub fn place_image(
        &self,
        client: ClientId,
        id: DeviceId,
        prepared: Result<crate::image::Prepared, crate::image::ImageError>,
    ) -> Response {
        let slot = match self.book().owned(client, id) {
            Ok(s) => s,
            Err(e) => return e.answer(),
        };
        let mut h = Held::waited(&slot);
        let r = self.place(client, &mut h, prepared);
        self.settle(&mut h);
        r.unwrap_or_else(Halt::answer)
    }

    /// A request on the one device it names.
    fn on_device(
        &self,
        client: ClientId,
        request: &Request,
        mut fds: Vec<OwnedFd>,
        mode: Mode,
    ) -> Answer {
        // Checks of the request's own words come before the device's.
        match request {
            Request::Alloc { bytes, .. } if *bytes == 0 || bytes % 4 != 0 => {
                return Err(err(
                    ErrorCode::InvalidArgument,
                    format!(
                        "cannot allocate {bytes} bytes: the size must be positive and a multiple of 4"
                    ),
                )
                .into());
            }
            Request::MapHost { bytes, offset, .. } if *bytes == 0 || offset % 4096 != 0 => {
                return Err(err(
                    ErrorCode::InvalidArgument,
                    format!(
                        "cannot map {bytes} bytes at offset {offset}: the size must be positive and the offset a multiple of 4096"
                    ),
                )
                .into());
            }
            _ => {}
        }
        let map_fd = match request {
            Request::MapHost { .. } => match fds.pop() {
                Some(fd) => Some(fd),
                None => {
                    return Err(err(
                        ErrorCode::BadRequest,
                        "map-host needs the memfd to map passed with it",
                    )
                    .into());
                }
            },
            _ => None,
        };
        let Some(id) = named_device(request) else {
            return Err(err(ErrorCode::Internal, "the request names no device").into());
        };
        let slot = self.book().owned(client, id)?;
        let mut h = Held::new(&slot, mode)?;
        let r = self.on_held(client, &mut h, request, map_fd);
        self.settle(&mut h);
        r
    }

    fn on_held(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        request: &Request,
        map_fd: Option<OwnedFd>,
    ) -> Answer {
        Ok(match request {
            Request::Alloc { memory, bytes, .. } => return self.alloc(client, h, *memory, *bytes),
            Request::Free { region, .. } => none(Self::free(h, *region)),
            Request::MapHost { bytes, offset, .. } => match map_fd {
                Some(fd) => none(self.map_host(client, h, *bytes, *offset, fd)?),
                None => none(err(ErrorCode::Internal, "no memfd to map")),
            },
            Request::LoadImage { code_object, .. } => {
                let prepared = crate::image::Prepared::new(code_object, self.max_image_bytes);
                none(self.place(client, h, prepared)?)
            }
            Request::ResolveEntry { image, name, .. } => {
                none(self.resolve_entry(client, h, *image, name)?)
            }
            Request::Prepare { image, name, .. } => {
                // Prepare reports nothing, failures included.
                let _ = self.resolve_entry(client, h, *image, name);
                none(Response::Done)
            }
            Request::Unload { image, .. } => none(if h.d.unload(*image) {
                Response::Done
            } else {
                err(
                    ErrorCode::NoSuchImage,
                    format!("device {} has no image {}", h.d.id().0, image.0),
                )
            }),
            Request::Grow {
                compute_bytes,
                copy_bytes,
                segment_bytes,
                installed,
                ..
            } => {
                return self.grow(
                    client,
                    h,
                    (*compute_bytes, *copy_bytes, *segment_bytes),
                    *installed,
                );
            }
            Request::Facts { .. } => none(Response::Facts(Box::new(facts(&h.d)))),
            Request::SampleClock { .. } => {
                live(&h.d)?;
                let before = crate::gpus::monotonic_ns();
                let gpu = h.d.clock();
                let after = crate::gpus::monotonic_ns();
                none(Response::Clock(rig_proto::messages::ClockSample {
                    gpu,
                    host_before_ns: before,
                    host_after_ns: after,
                }))
            }
            Request::StopDevice { last, fault, .. } => none(if h.d.is_stopped() {
                err(
                    ErrorCode::Stopped,
                    format!("device {} is already stopped", h.d.id().0),
                )
            } else {
                // A stop with a reason is the client's own verdict that the device is lost
                // (a consumer of a lost producer): rigctl and later requests show it.
                match fault {
                    Some(why) => h.d.lose_at(
                        rig_proto::Fault::new(rig_proto::FaultKind::StoppedByClient, why.clone()),
                        *last,
                    ),
                    None => {
                        h.d.stop(*last, None);
                    }
                }
                Response::Done
            }),
            Request::DeviceStatus { .. } => none(Response::Status(DeviceStatus {
                lost: h.d.lost().cloned(),
                stopped: h.d.is_stopped(),
                submitted: h.d.submitted(),
                reached: h.d.reached(),
            })),
            _ => none(err(ErrorCode::Internal, "the request names no device")),
        })
    }

    /// Answers `request`, taking device locks as `mode` says; `Err(Busy)` only with
    /// `Mode::Try`, before anything changed.
    fn answer(
        &self,
        client: ClientId,
        request: &Request,
        fds: Vec<OwnedFd>,
        mode: Mode,
    ) -> Result<Reply, Busy> {
        // The server checked at decode; the Handler is also called directly (an embedded
        // rigd, the fuzzers).
        if let Err(e) = request.check_bounds() {
            return Ok(none(Response::Error(e.into())));
        }
        let r = match request {
            Request::ListGpus => Ok(none(Response::Gpus(self.gpu_infos()))),
            Request::OpenDevice { gpu } => self.open_device(client, *gpu),
            Request::CloseDevice { device } => self.close_device(client, *device).map(none),
            Request::ListClients => Ok(none(self.list_clients(client))),
            Request::ListDevices => self.list_devices(client, mode).map(none),
            Request::ShowDevice { device } => self.show_device(client, *device, mode).map(none),
            Request::MapPeerWord { device, peer } => {
                self.map_peer_word(client, *device, *peer, mode).map(none)
            }
            r => self.on_device(client, r, fds, mode),
        };
        let reply = match r {
            Ok(reply) => reply,
            Err(Halt::Answer(r)) => none(*r),
            Err(Halt::Busy) => return Err(Busy),
        };
        if let Response::Error(e) = &reply.0 {
            tracing::debug!(client = client.0, request = request.name(), code = ?e.code, error = %crate::logging::client_text(&e.message), "request refused");
        }
        Ok(reply)
    }

    /// Answers `request` if it may not block ([`may_block`]) and no lock it needs is held;
    /// else gives it back untouched, for [`Handler::handle`] on a thread that may block.
    // The error gives the request back whole.
    #[allow(clippy::result_large_err)]
    pub fn try_handle(
        &self,
        client: ClientId,
        request: Request,
        fds: Vec<OwnedFd>,
    ) -> Result<Reply, (Request, Vec<OwnedFd>)> {
        if may_block(&request) || !fds.is_empty() {
            return Err((request, fds));
        }
        match self.answer(client, &request, Vec::new(), Mode::Try) {
            Ok(reply) => Ok(reply),
            Err(Busy) => Err((request, fds)),
        }
    }
}

impl<'a> Held<'a> {
    /// Holds `slot`'s device, waiting for it.
    fn waited(slot: &'a Slot) -> Held<'a> {
        let d = slot.wait();
        let quarantined = d.quarantined();
        Held {
            slot,
            d,
            reserved: Footprint::default(),
            quarantined,
        }
    }
}

/// The answer to a request that found a lock busy where it may not (never: only
/// `Mode::Try` finds one busy, and it gives the request back instead).
fn busy_answer() -> Response {
    err(ErrorCode::Internal, "a lock was busy")
}

fn facts(d: &Device) -> Facts {
    crate::gpus::facts(d.description(), d)
}

fn info(owner_pid: u32, d: &Device) -> DeviceInfo {
    DeviceInfo {
        device: d.id(),
        gpu: d.gpu(),
        owner_pid,
        memory: d.held(),
        lost: d.lost().cloned(),
    }
}

impl Handler for State {
    fn connect(&self, peer: Peer, program: Arc<str>) -> ClientId {
        // The server refused a longer name; a caller of the Handler itself gets it cut.
        let program = match rig_proto::cut(&program, rig_proto::MOST_PROGRAM) {
            kept if kept.len() == program.len() => program,
            kept => kept.into(),
        };
        let id = ClientId(self.next_client.fetch_add(1, Ordering::Relaxed));
        let admin_gid = *self.inspect_gid.read().unwrap_or_else(|e| e.into_inner());
        let inspector = peer.uid == 0
            || peer.uid == self.own_uid
            || admin_gid.is_some_and(|g| peer.gid == g || peer.groups.contains(&g));
        self.book().clients.insert(
            id,
            Client {
                peer,
                program,
                devices: BTreeSet::new(),
                opened: false,
                inspector,
                held: Footprint::default(),
            },
        );
        id
    }

    fn handle(&self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Reply {
        self.answer(client, &request, fds, Mode::Wait)
            .unwrap_or_else(|Busy| none(busy_answer()))
    }

    fn disconnect(&self, client: ClientId) {
        // The client leaves the book first, as it left the socket; its devices follow,
        // charged to its user until each is given back.
        let Some(c) = self.book().clients.remove(&client) else {
            return;
        };
        let n = c.devices.len();
        for id in &c.devices {
            self.remove_device(*id);
        }
        // A connection that never held a device (inspection, such as rigctl) leaves at debug.
        if c.opened {
            tracing::info!(
                client = client.0,
                pid = c.peer.pid,
                uid = c.peer.uid,
                devices = n,
                "client gone; everything it held given back"
            );
        } else {
            tracing::debug!(client = client.0, pid = c.peer.pid, "client gone");
        }
    }
}

/// The detail of the loss of every device still open when rigd stops.
pub const SHUTTING_DOWN: &str = "rigd is shutting down";

/// The device a request names.
fn named_device(r: &Request) -> Option<DeviceId> {
    match r {
        Request::Alloc { device, .. }
        | Request::Free { device, .. }
        | Request::MapHost { device, .. }
        | Request::LoadImage { device, .. }
        | Request::ResolveEntry { device, .. }
        | Request::Prepare { device, .. }
        | Request::Unload { device, .. }
        | Request::Grow { device, .. }
        | Request::StopDevice { device, .. }
        | Request::Facts { device }
        | Request::SampleClock { device }
        | Request::DeviceStatus { device }
        | Request::MapPeerWord { device, .. } => Some(*device),
        _ => None,
    }
}

/// The state, shared by the connection tasks and the watch thread; it locks inside.
pub type Shared = Arc<State>;

/// What the watch thread receives.
#[derive(Debug)]
pub enum Msg {
    /// A path reported a fault of a device's work.
    Fault {
        /// The device.
        device: DeviceId,
        /// The fault, as the path's GPU reported it.
        fault: rig_proto::Fault,
    },
    /// Look now: something changed that the next tick must not wait for (memory went into
    /// quarantine).
    Wake,
    /// Stop everything and end the watch.
    Shutdown,
}

/// How often the watchdog looks while some device has outstanding work.
const BUSY_TICK: Duration = Duration::from_millis(10);
/// How often it looks otherwise, at first: work is submitted with plain stores rigd does not
/// see, so it must look. Each idle look doubles the next tick, up to [`IDLE_TICK_MOST`] or a
/// quarter of the shortest hang bound, so that a daemon whose clients all sit idle (256 of
/// them holding 8 devices each, 2048 devices) spends no measurable CPU looking at them; a
/// look that finds work outstanding brings the tick back to [`BUSY_TICK`]. The first look at
/// work submitted after a long idle may come that late, but a hang bound counts from when
/// the stall began as far as the path can tell ([`Device::watch`]), not from that look.
const IDLE_TICK: Duration = Duration::from_millis(200);
/// The longest idle tick.
const IDLE_TICK_MOST: Duration = Duration::from_millis(1600);

/// The longest idle tick for hang bounds as short as `shortest`: a quarter of it, so that a
/// stall seen first after an idle spell is lost at most a quarter of its bound late.
fn idle_tick_most(shortest: Option<Duration>) -> Duration {
    shortest.map_or(IDLE_TICK_MOST, |b| (b / 4).clamp(BUSY_TICK, IDLE_TICK_MOST))
}

/// Runs the watch thread: fault reports from paths and the hang watchdog. A fault on a
/// device a request holds is handled at a later tick, so the thread never waits for a
/// request. `on_work` hears every look that found work outstanding (the metrics sampler
/// sleeps until then). It ends after [`Msg::Shutdown`] (stopping every device) or when
/// every sender is gone.
pub fn spawn_watch(
    shared: Shared,
    rx: mpsc::Receiver<Msg>,
    on_work: Box<dyn Fn() + Send>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("rigd-watch".into())
        .spawn(move || {
            let most = idle_tick_most(shared.shortest_hang_bound());
            let first = IDLE_TICK.min(most);
            let mut tick = first;
            let mut pending: Vec<(DeviceId, rig_proto::Fault)> = Vec::new();
            loop {
                match rx.recv_timeout(tick) {
                    Ok(Msg::Fault { device, fault }) => pending.push((device, fault)),
                    Ok(Msg::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                pending = std::mem::take(&mut pending)
                    .into_iter()
                    .filter_map(|(device, why)| {
                        shared
                            .fault_in(device, why, Mode::Try)
                            .err()
                            .map(|why| (device, why))
                    })
                    .collect();
                let working = shared.watchdog(Instant::now());
                if working {
                    // Work the metrics sampler, asleep while all was idle, must time.
                    on_work();
                }
                let busy = working || !pending.is_empty();
                tick = match (busy, tick) {
                    (true, _) => BUSY_TICK,
                    (false, t) if t < first => first,
                    (false, t) => (t * 2).min(most),
                };
            }
            shared.shutdown();
        })
        // PANIC: spawning the one watch thread at start fails only if the system has no
        // threads left, when rigd cannot run at all.
        .expect("spawn the watch thread")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimGpuConfig;
    use crate::path::Backend;
    use crate::path::sim::SimBackend;
    use std::sync::atomic::Ordering;

    fn state(limits: Limits) -> State {
        let backend = SimBackend::new(&SimGpuConfig {
            processor: "gfx1100".into(),
            memory_bytes: 64 << 20,
            hang_ms: 50,
        })
        .unwrap();
        let info = GpuInfo {
            index: 0,
            name: "AMD:0".into(),
            arch: "gfx1100".into(),
            path: rig_proto::messages::PathKind::Sim,
            bus: None,
            budget: backend.description().budget,
            simulated: true,
            unavailable: None,
        };
        let (tx, _rx) = mpsc::channel();
        let gpus = vec![GpuEntry {
            info,
            backend: Some(Arc::new(backend)),
            why_not: None,
            firmware: None,
        }];
        State::new(gpus, limits, None, tx)
    }

    /// What the book charges all clients.
    fn total(s: &State) -> Footprint {
        s.book().total
    }

    /// `f` of device `id`, under its lock.
    fn dev<R>(s: &State, id: DeviceId, f: impl FnOnce(&Device) -> R) -> R {
        let slot = s.book().devices.get(&id).cloned().unwrap();
        f(&slot.wait())
    }

    fn peer(pid: i32) -> Peer {
        Peer {
            pid,
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    #[test]
    fn a_disconnect_gives_back_everything_and_touches_no_one_else() {
        let s = state(Limits::default());
        let a = s.connect(peer(1), "a".into());
        let b = s.connect(peer(2), "b".into());
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(da) = r else {
            panic!("{r:?}")
        };
        let (r, _) = s.handle(b, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(db) = r else {
            panic!("{r:?}")
        };
        let alloc = Request::Alloc {
            device: da.device,
            memory: MemoryKind::Device,
            bytes: 1 << 20,
        };
        assert!(matches!(
            s.handle(a, alloc, Vec::new()).0,
            Response::Allocated { .. }
        ));
        // b cannot name a's device.
        let (r, _) = s.handle(b, Request::Facts { device: da.device }, Vec::new());
        assert!(matches!(r, Response::Error(e) if e.code == ErrorCode::NoSuchDevice));
        let before_b = dev(&s, db.device, |d| d.held().total());
        s.disconnect(a);
        assert!(!s.book().devices.contains_key(&da.device));
        assert_eq!(s.held_bytes(), before_b);
        s.disconnect(b);
        assert_eq!(s.held_bytes(), 0);
    }

    #[test]
    fn the_watchdog_loses_a_device_whose_word_stays_below() {
        let s = state(Limits::default());
        let a = s.connect(peer(1), "a".into());
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(d) = r else {
            panic!()
        };
        // A new queue polls its ring once as its thread starts (busy for a moment): a fresh
        // device is idle once that is over.
        let start = Instant::now();
        while s.watchdog(Instant::now()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "a fresh device never went idle"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        let host = dev(&s, d.device, |d| d.word().unwrap().0.clone());
        host.store_u64(
            rig_shm::layout::SUBMITTED_OFFSET as usize,
            3,
            std::sync::atomic::Ordering::Release,
        );
        assert!(s.watchdog(t0), "work outstanding");
        assert!(s.watchdog(t0 + Duration::from_millis(49)));
        assert!(dev(&s, d.device, |d| d.lost().is_none()));
        s.watchdog(t0 + Duration::from_millis(50));
        let (lost, reached) = dev(&s, d.device, |d| {
            (d.lost().map(|f| f.to_string()), d.reached())
        });
        assert!(lost.as_deref().unwrap().starts_with("hang"));
        assert_eq!(reached, 3);
    }

    /// What the running totals say all devices hold, recounted from the devices.
    fn recount(s: &State) -> Footprint {
        s.snapshot()
            .iter()
            .fold(Footprint::default(), |f, (slot, _)| {
                f.plus(slot.wait().footprint())
            })
    }

    #[test]
    fn limits_are_sized_from_the_process_limits() {
        let b = Budget::sized(&Limits::default(), 1024, 65530, 16 << 30);
        assert_eq!(b.fds, 1024 - 512 - 64);
        assert_eq!(b.uid_fds, b.fds / 4);
        assert_eq!(b.maps, 65530 - 1024 - 4095);
        assert_eq!(b.uid_maps, b.maps / 4);
        assert_eq!(b.host_bytes, 8 << 30);
        let set = Limits {
            fds: 10,
            mappings: 20,
            host_memory_bytes: 30,
            ..Limits::default()
        };
        let b = Budget::sized(&set, 1024, 65530, 16 << 30);
        assert_eq!((b.uid_fds, b.uid_maps, b.host_bytes), (10, 20, 30));
    }

    #[test]
    fn freed_memory_waits_for_the_work_submitted_before_the_free() {
        let s = state(Limits::default());
        let a = s.connect(peer(1), "a".into());
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(d) = r else {
            panic!("{r:?}")
        };
        let (r, _) = s.handle(
            a,
            Request::Alloc {
                device: d.device,
                memory: MemoryKind::Device,
                bytes: 1 << 20,
            },
            Vec::new(),
        );
        let Response::Allocated { region, .. } = r else {
            panic!("{r:?}")
        };
        let held = s.held_bytes();
        let host = { dev(&s, d.device, |d| d.word().unwrap().0.clone()) };
        // Work up to 3 was submitted and the word is at 2: the free keeps the memory.
        host.store_u64(
            rig_shm::layout::SUBMITTED_OFFSET as usize,
            3,
            Ordering::Release,
        );
        host.store_u64(
            rig_shm::layout::TIMELINE_WORD_OFFSET as usize,
            2,
            Ordering::Release,
        );
        let (r, _) = s.handle(
            a,
            Request::Free {
                device: d.device,
                region,
            },
            Vec::new(),
        );
        assert_eq!(r, Response::Done);
        assert_eq!(s.held_bytes(), held, "still held while work may use it");
        assert_eq!(total(&s), recount(&s));
        assert!(s.watchdog(Instant::now()));
        assert_eq!(s.held_bytes(), held);
        // The word reaches it: the next tick frees it.
        host.store_u64(
            rig_shm::layout::TIMELINE_WORD_OFFSET as usize,
            3,
            Ordering::Release,
        );
        s.watchdog(Instant::now());
        assert_eq!(s.held_bytes(), held - (1 << 20));
        assert_eq!(total(&s), recount(&s));
        s.disconnect(a);
        assert_eq!(total(&s), Footprint::default());
    }

    #[test]
    fn connections_of_one_user_share_its_limits() {
        let s = state(Limits {
            devices: 2,
            ..Limits::default()
        });
        let a = s.connect(peer(1), "a".into());
        let b = s.connect(peer(2), "b".into());
        let open = |s: &State, c| s.handle(c, Request::OpenDevice { gpu: 0 }, Vec::new()).0;
        assert!(matches!(open(&s, a), Response::DeviceOpened(_)));
        assert!(matches!(open(&s, b), Response::DeviceOpened(_)));
        let r = open(&s, a);
        assert!(
            matches!(&r, Response::Error(e) if e.code == ErrorCode::Quota && e.message.contains("limits.devices (2)")),
            "{r:?}"
        );
        s.disconnect(b);
        assert!(matches!(open(&s, a), Response::DeviceOpened(_)));
    }

    #[test]
    fn concurrent_allocations_of_one_user_never_pass_its_limit() {
        // Four connections of one user, each with a device, allocate at once: the memory
        // limit leaves room for exactly `room` allocations among them all.
        let (threads, size, room) = (4usize, 1u64 << 20, 6u64);
        let limit = Footprint::opening().bytes * threads as u64 + room * size;
        let s = state(Limits {
            memory_bytes: limit,
            ..Limits::default()
        });
        let devices: Vec<(ClientId, DeviceId)> = (0..threads)
            .map(|i| {
                let c = s.connect(peer(i as i32 + 1), "p".into());
                let (r, _) = s.handle(c, Request::OpenDevice { gpu: 0 }, Vec::new());
                let Response::DeviceOpened(d) = r else {
                    panic!("{r:?}")
                };
                (c, d.device)
            })
            .collect();
        let opened = s.book().tenants.get(&0).unwrap().held.bytes;
        assert!(opened <= Footprint::opening().bytes * threads as u64);
        let start = std::sync::Barrier::new(threads);
        let granted = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for &(c, device) in &devices {
                let (s, start, granted) = (&s, &start, &granted);
                scope.spawn(move || {
                    start.wait();
                    for _ in 0..room {
                        let alloc = Request::Alloc {
                            device,
                            memory: MemoryKind::Device,
                            bytes: size,
                        };
                        match s.handle(c, alloc, Vec::new()).0 {
                            Response::Allocated { .. } => {
                                granted.fetch_add(1, Ordering::Relaxed);
                            }
                            Response::NoMemory { .. } => {}
                            r => panic!("{r:?}"),
                        }
                    }
                });
            }
        });
        let held = s.book().tenants.get(&0).unwrap().held.bytes;
        assert!(
            held <= limit,
            "user holds {held} bytes, beyond its limit {limit}"
        );
        // Exactly what fits was granted: no more (no check-then-charge race), no less
        // (a refused request's reservation goes back).
        assert_eq!(
            granted.load(Ordering::Relaxed),
            (limit - opened) / size,
            "granted allocations"
        );
        assert_eq!(total(&s), recount(&s));
        for (c, _) in devices {
            s.disconnect(c);
        }
        assert_eq!(total(&s), Footprint::default());
    }

    #[test]
    fn a_request_on_a_held_device_is_given_back_untouched() {
        let s = state(Limits::default());
        let a = s.connect(peer(1), "a".into());
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(d) = r else {
            panic!("{r:?}")
        };
        let alloc = Request::Alloc {
            device: d.device,
            memory: MemoryKind::Device,
            bytes: 4096,
        };
        let slot = s.book().devices.get(&d.device).cloned().unwrap();
        let held = slot.wait();
        let back = s.try_handle(a, alloc.clone(), Vec::new());
        assert!(matches!(&back, Err((r, _)) if *r == alloc), "{back:?}");
        // Another client's request does not wait for that device.
        let b = s.connect(peer(2), "b".into());
        assert!(matches!(
            s.try_handle(b, Request::ListGpus, Vec::new()),
            Ok((Response::Gpus(_), _))
        ));
        // A request that may block is never answered inline.
        assert!(
            s.try_handle(b, Request::OpenDevice { gpu: 0 }, Vec::new())
                .is_err()
        );
        drop(held);
        assert!(matches!(
            s.try_handle(a, alloc, Vec::new()),
            Ok((Response::Allocated { .. }, _))
        ));
        s.disconnect(a);
        s.disconnect(b);
        assert_eq!(total(&s), Footprint::default());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, failure_persistence: None, ..Default::default() })]

        /// Whatever a client asks, with whatever numbers, the state answers without panicking
        /// and a disconnect gives everything back.
        #[test]
        fn any_requests_any_numbers(ops in proptest::collection::vec((0u8..10, proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>()), 1..24), junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let s = state(Limits { memory_bytes: 32 << 20, devices: 2, objects: 16, ..Limits::default() });
            let c = s.connect(peer(1), "p".into());
            let mut devices = vec![DeviceId(0)];
            let mut regions = vec![rig_proto::messages::RegionId(0)];
            for (op, x, y) in ops {
                let device = devices[(x as usize) % devices.len()];
                let req = match op {
                    0 => Request::OpenDevice { gpu: (y % 3) as u32 },
                    1 => Request::Alloc { device, memory: [MemoryKind::Device, MemoryKind::Pinned, MemoryKind::Mapped][(y % 3) as usize], bytes: y >> (x % 64) },
                    2 => Request::Free { device, region: regions[(y as usize) % regions.len()] },
                    3 => Request::Grow { device, compute_bytes: x >> 40, copy_bytes: y >> (x % 64), segment_bytes: y >> 44, installed: rig_proto::messages::Generations { compute: (x % 3) as u32, copy: (y % 3) as u32, args: 0 } },
                    4 => Request::StopDevice { device, last: y, fault: None },
                    5 => Request::LoadImage { device, code_object: junk.clone() },
                    6 => Request::CloseDevice { device },
                    7 => Request::ShowDevice { device },
                    8 => Request::MapPeerWord { device, peer: devices[(y as usize) % devices.len()] },
                    _ => Request::MapHost { device, bytes: y >> (x % 64), offset: x % (1 << 20) },
                };
                let fds = if req.fds_needed() == 1 {
                    let r = rig_shm::SharedRegion::create("prop", 1 << 16).unwrap();
                    vec![r.dup_fd().unwrap()]
                } else {
                    Vec::new()
                };
                match s.handle(c, req, fds).0 {
                    Response::DeviceOpened(d) => devices.push(d.device),
                    Response::Allocated { region, .. } | Response::Mapped { region, .. } => regions.push(region),
                    _ => {}
                }
            }
            proptest::prop_assert_eq!(total(&s), recount(&s));
            s.disconnect(c);
            proptest::prop_assert_eq!(s.held_bytes(), 0);
            proptest::prop_assert!(s.book().devices.is_empty());
        }
    }
}
