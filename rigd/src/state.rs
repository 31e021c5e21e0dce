//! The daemon's state and the one owner that changes it: GPUs, clients, their devices and
//! everything those hold, with ownership, limits and cleanup.
//!
//! One lock owns it ([`Shared`]): a connection task decodes a request and runs it through
//! the [`Handler`] trait under the lock, so requests are handled one at a time and a
//! client's disconnect (run by its own task after its last request) never races a request
//! of the same client. Handling in the connection task, rather than handing each request
//! to an owner thread and back, saves two thread wake-ups per request, which were most of
//! a request's cost. The watch thread ([`spawn_watch`]) takes fault reports from the GPUs'
//! paths and runs the hang watchdog under the same lock; its tick also frees quarantined
//! memory once no work can touch it. The [`Handler`] trait is the seam between sockets and
//! devices, so tests and fuzzers can drive requests without a socket.
//!
//! Limits hold per user (uid) across all its connections, and for all clients together
//! ([`Budget`]): each device's [`Footprint`] is charged to its connection, its user and
//! the totals whenever a request changed it (`State::recharge`), and every request that
//! makes something is admitted first against what is charged (`State::admit`).

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rig_proto::messages::{
    ClientInfo, DeviceId, DeviceInfo, DeviceReport, DeviceStatus, ErrorCode, ErrorReply, Facts,
    GpuInfo, MemoryKind, Request, Response, Shortage,
};

use crate::config::{Limits, Peer};
use crate::device::{Device, Footprint, MakeError, Region};
use crate::gpus::GpuEntry;
use crate::path::{Events, MapRefusal, Refusal};

/// A connected client, unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// An answer and the descriptors it names.
pub type Reply = (Response, Vec<OwnedFd>);

/// Handles requests for connected clients (the seam between sockets and devices).
pub trait Handler: Send {
    /// A client passed the handshake.
    fn connect(&mut self, peer: Peer, program: String) -> ClientId;
    /// One request of `client`, with the descriptors that came with it.
    fn handle(&mut self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Reply;
    /// The client's connection closed (or broke): give back all it holds.
    fn disconnect(&mut self, client: ClientId);
}

#[derive(Debug)]
struct Client {
    peer: Peer,
    program: String,
    devices: BTreeSet<DeviceId>,
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
    limits: Limits,
    budget: Budget,
    inspect_gid: Option<u32>,
    own_uid: u32,
    clients: BTreeMap<ClientId, Client>,
    /// What each user holds, across its connections.
    tenants: BTreeMap<u32, Tenant>,
    /// What all clients hold.
    total: Footprint,
    /// The device the request being handled names, for [`State::quota_for`].
    serving: Option<DeviceId>,
    devices: BTreeMap<DeviceId, (ClientId, Device)>,
    next_client: u64,
    next_device: u64,
    next_object: u64,
    /// Where paths report faults, so they reach the watch thread as messages.
    faults: mpsc::Sender<Msg>,
    /// `images.max_bytes`, for `LoadImage` through [`Handler`] (the server checks it itself).
    pub(crate) max_image_bytes: u64,
}

fn err(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error(ErrorReply::new(code, message))
}

fn none(r: Response) -> Reply {
    (r, Vec::new())
}

impl State {
    /// A state over `gpus`. `inspect_gid` is the group whose members may run rigctl's
    /// queries over everyone (root and rigd's own user always may).
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
            limits,
            budget,
            inspect_gid,
            own_uid: nix::unistd::geteuid().as_raw(),
            clients: BTreeMap::new(),
            tenants: BTreeMap::new(),
            total: Footprint::default(),
            serving: None,
            devices: BTreeMap::new(),
            next_client: 1,
            next_device: 1,
            next_object: 1,
            faults,
            max_image_bytes: crate::config::Images::default().max_bytes,
        }
    }

    pub(crate) fn new_object_id(&mut self) -> u64 {
        let id = self.next_object;
        self.next_object += 1;
        id
    }

    fn gpu_infos(&self) -> Vec<GpuInfo> {
        self.gpus.iter().map(|g| g.info.clone()).collect()
    }

    /// Bytes `client` (this connection) holds across its devices.
    fn usage(&self, client: ClientId) -> u64 {
        self.clients.get(&client).map_or(0, |c| c.held.bytes)
    }

    /// The limits as sized at start.
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// One look at everything for [`crate::metrics`] (the sampler and rigctl's figures).
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
                })
                .collect(),
            devices: self
                .devices
                .iter()
                .map(|(id, (owner, d))| {
                    let peer = self.clients.get(owner).map(|c| &c.peer);
                    DeviceSeen {
                        id: id.0,
                        gpu: d.gpu,
                        pid: peer.map_or(0, |p| p.pid),
                        uid: peer.map_or(0, |p| p.uid),
                        held: d.held(),
                        submitted: d.submitted(),
                        reached: d.reached(),
                        generations: generations(d),
                        faults: d.faults.len(),
                        lost: d.lost.clone(),
                    }
                })
                .collect(),
            clients: self
                .clients
                .iter()
                .map(|(id, c)| ClientSeen {
                    pid: c.peer.pid,
                    uid: c.peer.uid,
                    program: c.program.clone(),
                    devices: c.devices.len(),
                    bytes: self.usage(*id),
                })
                .collect(),
        }
    }

    /// Puts reloaded `[limits]` in force (SIGHUP): later requests are admitted against them;
    /// what clients already hold stays. Says whether they changed.
    pub fn set_limits(&mut self, limits: Limits) -> bool {
        let changed = limits != self.limits;
        self.budget = Budget::new(&limits);
        self.limits = limits;
        changed
    }

    /// `None` if `client` may take `bytes` more bytes of Device memory and one more object
    /// on the GPU of the device the request names; else the answer.
    pub(crate) fn quota_for(&self, client: ClientId, bytes: u64) -> Option<Response> {
        let gpu = self
            .serving
            .and_then(|d| self.devices.get(&d))
            .map(|(_, d)| d.gpu);
        let need = Footprint {
            bytes,
            objects: 1,
            gpu_bytes: if gpu.is_some() { bytes } else { 0 },
            ..Footprint::default()
        };
        self.admit(client, gpu, need, false)
    }

    /// `None` if `client` may take `need` more (and a device more, if `device`) on `gpu`;
    /// else the answer naming the limit that refuses it.
    pub(crate) fn admit(
        &self,
        client: ClientId,
        gpu: Option<u32>,
        need: Footprint,
        device: bool,
    ) -> Option<Response> {
        let uid = self.clients.get(&client).map_or(u32::MAX, |c| c.peer.uid);
        let none = Tenant::default();
        let t = self.tenants.get(&uid).unwrap_or(&none);
        let l = &self.limits;
        let b = &self.budget;
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
        if need.fds > 0 && self.total.fds.saturating_add(need.fds) > b.fds {
            return refuse(format!(
                "rigd holds {} file descriptors for all clients, the most its RLIMIT_NOFILE ({}) leaves after what it keeps for connections ({}); retry once others free memory, or raise LimitNOFILE",
                self.total.fds, b.nofile, b.fds
            ));
        }
        if need.maps > 0 && t.held.maps.saturating_add(need.maps) > b.uid_maps {
            return refuse(format!(
                "rigd holds {} memory mappings for user {uid} and needs {} more, beyond rigd's limits.mappings ({}); free Pinned or Mapped allocations, host mappings or devices, or make fewer larger ones",
                t.held.maps, need.maps, b.uid_maps
            ));
        }
        if need.maps > 0 && self.total.maps.saturating_add(need.maps) > b.maps {
            return refuse(format!(
                "rigd holds {} memory mappings for all clients, the most vm.max_map_count ({}) leaves after what rigd keeps for itself ({}); retry once others free memory, or raise vm.max_map_count",
                self.total.maps, b.max_map_count, b.maps
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
        if let Some(g) = gpu.filter(|_| need.gpu_bytes > 0 && l.gpu_share_percent < 100) {
            let budget = self.gpus.get(g as usize).map_or(0, |e| e.info.budget);
            let share = budget / 100 * u64::from(l.gpu_share_percent)
                + budget % 100 * u64::from(l.gpu_share_percent) / 100;
            let held = t.gpu_bytes.get(&g).copied().unwrap_or(0);
            if held.saturating_add(need.gpu_bytes) > share {
                return short("limits.gpu_share_percent", share, held, Shortage::Quota);
            }
        }
        if need.host_bytes > 0
            && self.total.host_bytes.saturating_add(need.host_bytes) > b.host_bytes
        {
            return short(
                "limits.host_memory_bytes",
                b.host_bytes,
                self.total.host_bytes,
                Shortage::Host,
            );
        }
        None
    }

    /// Brings the charges of device `id` up to what it holds now.
    pub(crate) fn recharge(&mut self, id: DeviceId) {
        let Some((owner, d)) = self.devices.get_mut(&id) else {
            return;
        };
        let now = d.footprint();
        let was = std::mem::replace(&mut d.charged, now);
        if was != now {
            let (owner, gpu) = (*owner, d.gpu);
            self.apply(owner, gpu, was, now);
        }
    }

    /// Moves the charges of a device of `owner` on `gpu` from `was` to `now`.
    fn apply(&mut self, owner: ClientId, gpu: u32, was: Footprint, now: Footprint) {
        self.total = self.total.minus(was).plus(now);
        let Some(c) = self.clients.get_mut(&owner) else {
            return;
        };
        c.held = c.held.minus(was).plus(now);
        let t = self.tenants.entry(c.peer.uid).or_default();
        t.held = t.held.minus(was).plus(now);
        let g = t.gpu_bytes.entry(gpu).or_default();
        *g = g
            .saturating_sub(was.gpu_bytes)
            .saturating_add(now.gpu_bytes);
    }

    /// Takes device `id` out of the state, gives back all it holds and its charges, and
    /// drops the mappings of its word that other devices hold.
    fn remove_device(&mut self, id: DeviceId) {
        let Some((owner, mut d)) = self.devices.remove(&id) else {
            return;
        };
        d.release_all();
        self.apply(owner, d.gpu, d.charged, Footprint::default());
        let mut peers = Vec::new();
        if let Some(c) = self.clients.get_mut(&owner) {
            c.devices.remove(&id);
            peers.extend(c.devices.iter().copied());
            if let Some(t) = self.tenants.get_mut(&c.peer.uid) {
                t.devices = t.devices.saturating_sub(1);
            }
        }
        for p in peers {
            if let Some((_, pd)) = self.devices.get_mut(&p) {
                pd.drop_peer_word(id);
            }
            self.recharge(p);
        }
    }

    /// The device `id` if `client` owns it.
    // The error is the request's reply itself, built at most once per request.
    #[allow(clippy::result_large_err)]
    pub(crate) fn owned_device(
        &mut self,
        client: ClientId,
        id: DeviceId,
    ) -> Result<&mut Device, Response> {
        match self.devices.get_mut(&id) {
            Some((owner, d)) if *owner == client => Ok(d),
            _ => Err(err(
                ErrorCode::NoSuchDevice,
                format!("no device {} belongs to this client; open one first", id.0),
            )),
        }
    }

    /// The device `id` if `client` owns it and it is neither lost nor stopped.
    #[allow(clippy::result_large_err)]
    pub(crate) fn live_device(
        &mut self,
        client: ClientId,
        id: DeviceId,
    ) -> Result<&mut Device, Response> {
        let d = self.owned_device(client, id)?;
        if let Some(why) = &d.lost {
            return Err(err(
                ErrorCode::Lost,
                format!("device {} is lost: {why}", id.0),
            ));
        }
        if d.stopped {
            return Err(err(
                ErrorCode::Stopped,
                format!("device {} is stopped; close it and open another", id.0),
            ));
        }
        Ok(d)
    }

    fn facts(d: &Device) -> Facts {
        crate::gpus::facts(&d.desc, d)
    }

    fn open_device(&mut self, client: ClientId, gpu: u32) -> Reply {
        let Some(entry) = self.gpus.get(gpu as usize) else {
            return none(err(
                ErrorCode::NoSuchGpu,
                format!(
                    "no gpu {gpu}: rigd serves {} gpus; `rigctl gpus` lists them",
                    self.gpus.len()
                ),
            ));
        };
        let Some(backend) = entry.backend.clone() else {
            return none(err(
                ErrorCode::NoSuchGpu,
                format!(
                    "gpu {gpu} ({}) is not drivable yet: {}",
                    entry.info.name,
                    entry
                        .why_not
                        .as_deref()
                        .unwrap_or("rigd has no path for it")
                ),
            ));
        };
        if let Some(r) = self.admit(client, Some(gpu), Footprint::opening(), true) {
            return none(r);
        }
        let id = DeviceId(self.next_device);
        self.next_device += 1;
        let interrupt = match crate::device::interrupt_fd() {
            Ok(e) => e,
            Err(e) => return none(err(ErrorCode::Internal, e.to_string())),
        };
        let on_irq = interrupt.clone();
        let on_fault = interrupt.clone();
        let faults = self.faults.clone();
        let events = Events {
            interrupt: Arc::new(move || {
                let _ = on_irq.write(1);
            }),
            fault: Arc::new(move |why| {
                let _ = faults.send(Msg::Fault { device: id, why });
                let _ = on_fault.write(1);
            }),
        };
        let path = match backend.open(events) {
            Ok(p) => p,
            Err(Refusal::Lacking(r)) => {
                tracing::debug!(reason = %r, "the gpu has no room for another address space");
                return none(Response::NoMemory {
                    bytes: 0,
                    shortage: Shortage::Gpu,
                    limit: None,
                });
            }
            Err(r) => {
                return none(err(
                    ErrorCode::Fault,
                    format!("the gpu refused a new address space: {r}"),
                ));
            }
        };
        let desc = backend.description().clone();
        let device = match Device::make(id, gpu, desc, path, interrupt) {
            Ok(d) => d,
            Err(MakeError::Short { .. }) => {
                return none(Response::NoMemory {
                    bytes: Footprint::opening().bytes,
                    shortage: Shortage::Gpu,
                    limit: None,
                });
            }
            Err(e) => return none(err(ErrorCode::Fault, e.to_string())),
        };
        let facts = Self::facts(&device);
        let (opened, fds) = match device.opened(facts) {
            Ok(x) => x,
            Err(e) => {
                return none(err(
                    ErrorCode::Internal,
                    format!("cannot share the device's memory: {e}"),
                ));
            }
        };
        if let Some(c) = self.clients.get_mut(&client) {
            c.devices.insert(id);
            self.tenants.entry(c.peer.uid).or_default().devices += 1;
            tracing::info!(
                client = client.0,
                pid = c.peer.pid,
                uid = c.peer.uid,
                program = %c.program,
                device = id.0,
                gpu,
                "device opened"
            );
        }
        self.devices.insert(id, (client, device));
        self.recharge(id);
        (Response::DeviceOpened(Box::new(opened)), fds)
    }

    fn close_device(&mut self, client: ClientId, id: DeviceId) -> Response {
        if let Err(e) = self.owned_device(client, id) {
            return e;
        }
        self.remove_device(id);
        tracing::debug!(client = client.0, device = id.0, "device closed");
        Response::Done
    }

    fn alloc(&mut self, client: ClientId, id: DeviceId, kind: MemoryKind, bytes: u64) -> Reply {
        if bytes == 0 || bytes % 4 != 0 {
            return none(err(
                ErrorCode::InvalidArgument,
                format!(
                    "cannot allocate {bytes} bytes: the size must be positive and a multiple of 4"
                ),
            ));
        }
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        let gpu = match self.live_device(client, id) {
            Ok(d) => d.gpu,
            Err(e) => return none(e),
        };
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
        };
        if let Some(r) = self.admit(client, Some(gpu), need, false) {
            return none(r);
        }
        let region = rig_proto::messages::RegionId(self.new_object_id());
        let Ok(d) = self.live_device(client, id) else {
            return none(err(ErrorCode::Internal, "device vanished"));
        };
        match d.path.alloc(kind, rounded) {
            Ok(m) => {
                let mut fds = crate::device::FdList::default();
                let host = match &m.host {
                    Some(h) => match h.dup_fd() {
                        Ok(fd) => {
                            let i = fds.push(&fd);
                            match i {
                                Ok(i) => Some(rig_proto::messages::Share {
                                    fd: i,
                                    offset: 0,
                                    bytes: m.bytes,
                                }),
                                Err(e) => {
                                    d.path.free(m);
                                    return none(err(ErrorCode::Internal, e.to_string()));
                                }
                            }
                        }
                        Err(e) => {
                            d.path.free(m);
                            return none(err(ErrorCode::Internal, e.to_string()));
                        }
                    },
                    None => None,
                };
                let gpu_address = m.address;
                d.regions.insert(
                    region,
                    Region {
                        memory: m,
                        image: None,
                    },
                );
                (
                    Response::Allocated {
                        region,
                        gpu_address,
                        host,
                    },
                    fds.into_fds(),
                )
            }
            Err(Refusal::Lacking(_)) => none(Response::NoMemory {
                bytes: rounded,
                shortage: Shortage::Gpu,
                limit: None,
            }),
            Err(Refusal::Full(r) | Refusal::Refused(r)) => none(Response::Never { reason: r }),
        }
    }

    fn free(
        &mut self,
        client: ClientId,
        id: DeviceId,
        region: rig_proto::messages::RegionId,
    ) -> Response {
        let d = match self.owned_device(client, id) {
            Ok(d) => d,
            Err(e) => return e,
        };
        match d.regions.remove(&region) {
            Some(r) => {
                if let Some(image) = r.image {
                    d.images.remove(&image);
                }
                // Work submitted before the free may still use the memory: it is reused
                // only once none can (see Device::give_back).
                let cost = Footprint::region(&r.memory);
                d.give_back(r.memory, cost, true);
                Response::Done
            }
            None => err(
                ErrorCode::NoSuchRegion,
                format!("device {} has no region {}", id.0, region.0),
            ),
        }
    }

    fn map_host(
        &mut self,
        client: ClientId,
        id: DeviceId,
        bytes: u64,
        offset: u64,
        mut fds: Vec<OwnedFd>,
    ) -> Response {
        if bytes == 0 || offset % 4096 != 0 {
            return err(
                ErrorCode::InvalidArgument,
                format!(
                    "cannot map {bytes} bytes at offset {offset}: the size must be positive and the offset a multiple of 4096"
                ),
            );
        }
        let Some(fd) = fds.pop() else {
            return err(
                ErrorCode::BadRequest,
                "map-host needs the memfd to map passed with it",
            );
        };
        let rounded = bytes.div_ceil(4096).saturating_mul(4096);
        match self.live_device(client, id) {
            Ok(d) if !d.desc.maps_host => {
                return Response::Never {
                    reason: "this gpu's path maps no host memory".into(),
                };
            }
            Ok(_) => {}
            Err(e) => return e,
        }
        let need = Footprint {
            bytes: rounded,
            objects: 1,
            fds: 1,
            maps: 1,
            ..Footprint::default()
        };
        if let Some(r) = self.admit(client, None, need, false) {
            return r;
        }
        let region = rig_proto::messages::RegionId(self.new_object_id());
        let Ok(d) = self.live_device(client, id) else {
            return err(ErrorCode::Internal, "device vanished");
        };
        match d.path.map_host(fd, offset, rounded) {
            Ok(m) => {
                let gpu_address = m.address;
                d.regions.insert(
                    region,
                    Region {
                        memory: m,
                        image: None,
                    },
                );
                Response::Mapped {
                    region,
                    gpu_address,
                }
            }
            Err(MapRefusal::NoRoom(_)) => Response::NoMemory {
                bytes: rounded,
                shortage: Shortage::Gpu,
                limit: None,
            },
            Err(MapRefusal::Never(reason)) => Response::Never { reason },
            Err(MapRefusal::Unfit(why)) => err(ErrorCode::InvalidArgument, why),
        }
    }

    fn grow(
        &mut self,
        client: ClientId,
        id: DeviceId,
        sizes: (u64, u64, u64),
        installed: rig_proto::messages::Generations,
    ) -> Reply {
        let want = match self.live_device(client, id) {
            Ok(d) => match d.growth_bytes(sizes.0, sizes.1, sizes.2) {
                Ok(w) => w,
                Err(e) => {
                    return none(Response::Never {
                        reason: e.to_string(),
                    });
                }
            },
            Err(e) => return none(e),
        };
        if want > 0 {
            if let Some(r) = self.admit(client, None, Footprint::growth(want), false) {
                return none(r);
            }
        }
        let Ok(d) = self.live_device(client, id) else {
            return none(err(ErrorCode::Internal, "device vanished"));
        };
        match d.grow(sizes.0, sizes.1, sizes.2, installed) {
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
        }
    }

    /// Maps `peer`'s timeline word read-only into `id`'s address space (once per pair).
    fn map_peer_word(&mut self, client: ClientId, id: DeviceId, peer: DeviceId) -> Response {
        let (peer_gpu, control) = match self.owned_device(client, peer) {
            // A clone of the page keeps it alive after the peer closes; rigd made and
            // sealed it, so nobody can shrink it under the mapping.
            Ok(p) => match p.word() {
                Some((page, _)) => (p.gpu, page.clone()),
                None => return err(ErrorCode::Internal, "the peer device has no control page"),
            },
            Err(e) => return e,
        };
        let d = match self.live_device(client, id) {
            Ok(d) => d,
            Err(e) => return e,
        };
        if peer == id {
            return match d.word() {
                Some((_, gpu_address)) => Response::PeerWord { gpu_address },
                None => err(ErrorCode::Internal, "the device has no control page"),
            };
        }
        // A GPU reaches the words of its own devices only: a queue of another GPU would
        // read its host memory over paths rigd does not set up.
        if peer_gpu != d.gpu {
            return Response::Never {
                reason: format!(
                    "gpu {} does not reach the word of device {} on gpu {peer_gpu}; wait on the host",
                    d.gpu, peer.0
                ),
            };
        }
        if !d.peer_words.contains_key(&peer) {
            if let Some(r) = self.admit(client, None, Footprint::PEER_WORD, false) {
                return r;
            }
        }
        let Ok(d) = self.live_device(client, id) else {
            return err(ErrorCode::Internal, "device vanished");
        };
        match d.map_peer_word(peer, &control) {
            Ok(gpu_address) => Response::PeerWord { gpu_address },
            Err(crate::path::Refusal::Lacking(_)) => Response::NoMemory {
                bytes: rig_shm::layout::CONTROL_PAGE_BYTES,
                shortage: Shortage::Gpu,
                limit: None,
            },
            Err(r) => Response::Never {
                reason: r.to_string(),
            },
        }
    }

    fn status(d: &Device) -> DeviceStatus {
        DeviceStatus {
            lost: d.lost.clone(),
            stopped: d.stopped,
            submitted: d.submitted(),
            reached: d.reached(),
        }
    }

    fn info(&self, id: DeviceId, owner: ClientId, d: &Device) -> DeviceInfo {
        DeviceInfo {
            device: id,
            gpu: d.gpu,
            owner_pid: self
                .clients
                .get(&owner)
                .map_or(0, |c| u32::try_from(c.peer.pid).unwrap_or(0)),
            memory: d.held(),
            lost: d.lost.clone(),
        }
    }

    fn inspector(&self, client: ClientId) -> bool {
        self.clients.get(&client).is_some_and(|c| c.inspector)
    }

    /// Whether `client` may inspect others (and administer: [`crate::admin`]).
    pub fn is_inspector(&self, client: ClientId) -> bool {
        self.inspector(client)
    }

    /// Loses `id` for `why`, whoever owns it ([`crate::admin`]); an unknown or already lost
    /// device is the error answer.
    pub fn admin_stop(&mut self, id: DeviceId, why: &str) -> Result<(), ErrorReply> {
        match self.devices.get(&id) {
            None => Err(ErrorReply::new(
                ErrorCode::NoSuchDevice,
                format!("no device {}; `rigctl devices` lists them", id.0),
            )),
            Some((_, d)) if d.lost.is_some() => Err(ErrorReply::new(
                ErrorCode::Lost,
                format!(
                    "device {} is already lost: {}",
                    id.0,
                    d.lost.as_deref().unwrap_or_default()
                ),
            )),
            Some(_) => {
                self.fault(id, why.to_owned());
                Ok(())
            }
        }
    }

    /// The devices the connections of process `pid` hold.
    pub fn devices_of_pid(&self, pid: i32) -> Vec<DeviceId> {
        self.devices
            .iter()
            .filter(|(_, (owner, _))| self.clients.get(owner).is_some_and(|c| c.peer.pid == pid))
            .map(|(id, _)| *id)
            .collect()
    }

    fn denied() -> Response {
        err(
            ErrorCode::PermissionDenied,
            "only root, rigd's user and members of rigd's socket group may inspect other clients",
        )
    }

    /// A fault reported by a device's path: the device is lost.
    pub fn fault(&mut self, id: DeviceId, why: String) {
        if let Some((_, d)) = self.devices.get_mut(&id) {
            d.lose(why);
        }
        // The stop gave back its queues' threads and what it had quarantined.
        self.recharge(id);
    }

    /// The hang watchdog: loses every device whose word has stayed below its submitted
    /// value for its hang bound, and every device whose queues ran that long without its
    /// word moving, whatever its submitted value says (the path, not a client word, tells
    /// whether a queue runs). Then frees the quarantined memory no work can touch any more.
    /// Returns whether any device has outstanding work or quarantined memory (so the owner
    /// knows whether to keep ticking).
    pub fn watchdog(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let mut recharge = Vec::new();
        for (id, (_, d)) in self.devices.iter_mut() {
            if !d.quarantine.is_empty() {
                let before = d.quarantine.len();
                busy |= d.release_quarantine();
                if d.quarantine.len() != before {
                    recharge.push(*id);
                }
            }
            if d.stopped || d.lost.is_some() {
                continue;
            }
            let Some(hang_ms) = d.desc.hang_ms else {
                continue;
            };
            let (reached, submitted) = (d.reached(), d.submitted());
            let running = d.path.busy_since();
            let below = reached < submitted;
            if !below {
                d.progress = None;
            }
            if running.is_none() {
                d.work = None;
            }
            if !below && running.is_none() {
                continue;
            }
            busy = true;
            let bound = Duration::from_millis(hang_ms);
            // Two bounds, each late by at most a tick and never early. The word's: it stayed
            // below the submitted value (both written by the client, so it can only lose
            // itself by them). The path's: queues ran without completing any work, counted
            // from the later of the run's start and the last completed work; a client cannot
            // fake that count, nor keep a queue running by leaving `submitted` unpublished
            // or by writing its own word.
            let mut why = None;
            if below {
                let since = match d.progress {
                    Some((seen, since)) if seen == reached => since,
                    _ => {
                        d.progress = Some((reached, now));
                        now
                    }
                };
                let still = now.saturating_duration_since(since);
                if still >= bound {
                    why = Some(format!(
                        "hang: the timeline stayed at {reached} below the submitted {submitted} for {} ms",
                        still.as_millis()
                    ));
                }
            }
            if let (None, Some(run)) = (&why, running) {
                let work = d.path.progress();
                let seen = match d.work {
                    Some((count, since)) if count == work => since,
                    _ => {
                        d.work = Some((work, now));
                        now
                    }
                };
                let still = now.saturating_duration_since(seen.max(run));
                if still >= bound {
                    why = Some(format!(
                        "hang: the queues ran for {} ms without completing any work (the timeline at {reached})",
                        still.as_millis()
                    ));
                }
            }
            if let Some(why) = why {
                d.lose(why);
                recharge.push(*id);
            }
        }
        for id in recharge {
            self.recharge(id);
        }
        busy
    }

    /// Stops every device and gives back everything (at shutdown).
    pub fn shutdown(&mut self) {
        let n = self.devices.len();
        for (_, (_, mut d)) in std::mem::take(&mut self.devices) {
            // A client waiting on work that will never run must see a loss, not a completion.
            d.lose("rigd is shutting down".into());
            d.release_all();
        }
        self.clients.clear();
        self.tenants.clear();
        self.total = Footprint::default();
        tracing::info!(
            devices = n,
            "every device stopped and its memory given back"
        );
    }

    /// The total memory held across all devices (for tests and the log).
    pub fn held_bytes(&self) -> u64 {
        self.devices.values().map(|(_, d)| d.held().total()).sum()
    }
}

impl Handler for State {
    fn connect(&mut self, peer: Peer, program: String) -> ClientId {
        let id = ClientId(self.next_client);
        self.next_client += 1;
        let inspector = peer.uid == 0
            || peer.uid == self.own_uid
            || self
                .inspect_gid
                .is_some_and(|g| peer.gid == g || peer.groups.contains(&g));
        self.clients.insert(
            id,
            Client {
                peer,
                program,
                devices: BTreeSet::new(),
                inspector,
                held: Footprint::default(),
            },
        );
        id
    }

    fn handle(&mut self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Reply {
        let name = request.name();
        self.serving = named_device(&request);
        let held_back = self
            .serving
            .and_then(|id| self.devices.get(&id))
            .map_or(0, |(_, d)| d.quarantine.len());
        let reply = match request {
            Request::ListGpus => none(Response::Gpus(self.gpu_infos())),
            Request::OpenDevice { gpu } => self.open_device(client, gpu),
            Request::CloseDevice { device } => none(self.close_device(client, device)),
            Request::Alloc {
                device,
                memory,
                bytes,
            } => self.alloc(client, device, memory, bytes),
            Request::Free { device, region } => none(self.free(client, device, region)),
            Request::MapHost {
                device,
                bytes,
                offset,
            } => none(self.map_host(client, device, bytes, offset, fds)),
            Request::LoadImage {
                device,
                code_object,
            } => none(self.load_image(client, device, &code_object)),
            Request::ResolveEntry {
                device,
                image,
                name,
            } => none(self.resolve_entry(client, device, image, &name)),
            Request::Prepare {
                device,
                image,
                name,
            } => {
                // Prepare reports nothing, failures included.
                let _ = self.resolve_entry(client, device, image, &name);
                none(Response::Done)
            }
            Request::Unload { device, image } => none(self.unload(client, device, image)),
            Request::Grow {
                device,
                compute_bytes,
                copy_bytes,
                segment_bytes,
                installed,
            } => self.grow(
                client,
                device,
                (compute_bytes, copy_bytes, segment_bytes),
                installed,
            ),
            Request::Facts { device } => none(match self.owned_device(client, device) {
                Ok(d) => Response::Facts(Box::new(Self::facts(d))),
                Err(e) => e,
            }),
            Request::SampleClock { device } => none(match self.live_device(client, device) {
                Ok(d) => {
                    let before = crate::gpus::monotonic_ns();
                    let gpu = d.path.clock();
                    let after = crate::gpus::monotonic_ns();
                    Response::Clock(rig_proto::messages::ClockSample {
                        gpu,
                        host_before_ns: before,
                        host_after_ns: after,
                    })
                }
                Err(e) => e,
            }),
            Request::StopDevice {
                device,
                last,
                fault,
            } => none(match self.owned_device(client, device) {
                Ok(d) if d.stopped => err(
                    ErrorCode::Stopped,
                    format!("device {} is already stopped", device.0),
                ),
                Ok(d) => {
                    // A stop with a reason is the client's own verdict that the device is
                    // lost (a consumer of a lost producer): rigctl and later requests show it.
                    match fault {
                        Some(why) => d.lose_at(client_reason(why), last),
                        None => {
                            d.stop(last, None);
                        }
                    }
                    Response::Done
                }
                Err(e) => e,
            }),
            Request::DeviceStatus { device } => none(match self.owned_device(client, device) {
                Ok(d) => Response::Status(Self::status(d)),
                Err(e) => e,
            }),
            Request::ListClients => none(if self.inspector(client) {
                Response::Clients(
                    self.clients
                        .iter()
                        .map(|(id, c)| ClientInfo {
                            pid: u32::try_from(c.peer.pid).unwrap_or(0),
                            uid: c.peer.uid,
                            gid: c.peer.gid,
                            program: c.program.clone(),
                            devices: c.devices.iter().copied().collect(),
                            bytes: self.usage(*id),
                        })
                        .collect(),
                )
            } else {
                Self::denied()
            }),
            Request::ListDevices => none(if self.inspector(client) {
                Response::Devices(
                    self.devices
                        .iter()
                        .map(|(id, (owner, d))| self.info(*id, *owner, d))
                        .collect(),
                )
            } else {
                Self::denied()
            }),
            Request::ShowDevice { device } => none(match self.devices.get(&device) {
                Some((owner, d)) if *owner == client || self.inspector(client) => {
                    Response::Device(Box::new(DeviceReport {
                        info: self.info(device, *owner, d),
                        facts: Self::facts(d),
                        rings: d.rings(),
                        images: u32::try_from(d.images.len()).unwrap_or(u32::MAX),
                        regions: u32::try_from(d.regions.len()).unwrap_or(u32::MAX),
                        submitted: d.submitted(),
                        reached: d.reached(),
                        faults: d.faults.clone(),
                    }))
                }
                Some(_) => Self::denied(),
                None => err(
                    ErrorCode::NoSuchDevice,
                    format!("no device {}; `rigctl devices` lists them", device.0),
                ),
            }),
            Request::MapPeerWord { device, peer } => none(self.map_peer_word(client, device, peer)),
            // Answered by crate::admin before the state is asked (server.rs).
            r @ (Request::DaemonStatus
            | Request::GpuStatus
            | Request::ListProcesses
            | Request::AdminStop { .. }
            | Request::Evict { .. }) => none(err(
                ErrorCode::BadRequest,
                format!("{} is answered by rigd's server, not its state", r.name()),
            )),
        };
        if let Some(id) = self.serving.take() {
            self.recharge(id);
            // Memory this request put in quarantine is released by the watch thread, which
            // may be sleeping its idle tick: wake it (once per request that added some) so the
            // release comes within a busy tick.
            if self
                .devices
                .get(&id)
                .is_some_and(|(_, d)| d.quarantine.len() > held_back)
            {
                let _ = self.faults.send(Msg::Wake);
            }
        }
        if let Response::Error(e) = &reply.0 {
            tracing::debug!(client = client.0, request = name, code = ?e.code, error = %e.message, "request refused");
        }
        reply
    }

    fn disconnect(&mut self, client: ClientId) {
        let Some(ids) = self.clients.get(&client).map(|c| c.devices.clone()) else {
            return;
        };
        let n = ids.len();
        for id in ids {
            self.remove_device(id);
        }
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        // A connection that held nothing (inspection, such as rigctl) leaves at debug.
        if n > 0 {
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

/// The most bytes of a reason a client gives with its stop that rigd keeps: the reason is
/// held (and shown by rigctl) as long as the device, charged to no quota, so a frame's
/// 16 MiB of it must not be.
pub const MOST_CLIENT_REASON: usize = 1024;

/// `why` cut to [`MOST_CLIENT_REASON`] bytes at a character boundary, marked when cut.
fn client_reason(mut why: String) -> String {
    if why.len() > MOST_CLIENT_REASON {
        let mut end = MOST_CLIENT_REASON;
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        why.truncate(end);
        why.push_str(" (cut)");
    }
    why
}

/// The device a request names, whose charges change with it.
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
        | Request::MapPeerWord { device, .. } => Some(*device),
        _ => None,
    }
}

/// The state, shared by the connection tasks (each request runs under the lock, so requests
/// are handled one at a time in lock order) and the watch thread.
pub type Shared = std::sync::Arc<std::sync::Mutex<State>>;

/// Locks the state. A panic while it was held (a bug) does not stop rigd: the state is
/// only ever changed by whole operations, so it is taken back as it is.
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the watch thread receives.
#[derive(Debug)]
pub enum Msg {
    /// A path reported a fault of a device's work.
    Fault {
        /// The device.
        device: DeviceId,
        /// The path's report.
        why: String,
    },
    /// Look now: something changed that the next tick must not wait for (memory went into
    /// quarantine).
    Wake,
    /// Stop everything and end the watch.
    Shutdown,
}

/// How often the watchdog looks while some device has outstanding work.
const BUSY_TICK: Duration = Duration::from_millis(10);
/// How often it looks otherwise: work is submitted with plain stores rigd does not see, so
/// it must look, but rarely enough to cost nothing measurable.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// Runs the watch thread: fault reports from paths and the hang watchdog. It ends after
/// [`Msg::Shutdown`] (stopping every device) or when every sender is gone.
pub fn spawn_watch(shared: Shared, rx: mpsc::Receiver<Msg>) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("rigd-watch".into())
        .spawn(move || {
            let mut tick = IDLE_TICK;
            loop {
                match rx.recv_timeout(tick) {
                    Ok(Msg::Fault { device, why }) => lock(&shared).fault(device, why),
                    Ok(Msg::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Ok(Msg::Wake) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                let busy = lock(&shared).watchdog(Instant::now());
                tick = if busy { BUSY_TICK } else { IDLE_TICK };
            }
            lock(&shared).shutdown();
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
        }];
        State::new(gpus, limits, None, tx)
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
        let mut s = state(Limits::default());
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
        let before_b = s.devices.get(&db.device).unwrap().1.held().total();
        s.disconnect(a);
        assert!(!s.devices.contains_key(&da.device));
        assert_eq!(s.held_bytes(), before_b);
        s.disconnect(b);
        assert_eq!(s.held_bytes(), 0);
    }

    #[test]
    fn the_watchdog_loses_a_device_whose_word_stays_below() {
        let mut s = state(Limits::default());
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
        let dev = &s.devices.get(&d.device).unwrap().1;
        let host = dev.control.as_ref().unwrap().host.as_ref().unwrap();
        host.store_u64(
            rig_shm::layout::SUBMITTED_OFFSET as usize,
            3,
            std::sync::atomic::Ordering::Release,
        );
        assert!(s.watchdog(t0), "work outstanding");
        assert!(s.watchdog(t0 + Duration::from_millis(49)));
        assert!(s.devices.get(&d.device).unwrap().1.lost.is_none());
        s.watchdog(t0 + Duration::from_millis(50));
        let dev = &s.devices.get(&d.device).unwrap().1;
        assert!(dev.lost.as_deref().unwrap().starts_with("hang"));
        assert_eq!(dev.reached(), 3);
    }

    /// What the running totals say all devices hold, recounted from the devices.
    fn recount(s: &State) -> Footprint {
        s.devices
            .values()
            .fold(Footprint::default(), |f, (_, d)| f.plus(d.footprint()))
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
        let mut s = state(Limits::default());
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
        let host = {
            let dev = &s.devices.get(&d.device).unwrap().1;
            dev.control.as_ref().unwrap().host.clone().unwrap()
        };
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
        assert_eq!(s.total, recount(&s));
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
        assert_eq!(s.total, recount(&s));
        s.disconnect(a);
        assert_eq!(s.total, Footprint::default());
    }

    #[test]
    fn connections_of_one_user_share_its_limits() {
        let mut s = state(Limits {
            devices: 2,
            ..Limits::default()
        });
        let a = s.connect(peer(1), "a".into());
        let b = s.connect(peer(2), "b".into());
        let open = |s: &mut State, c| s.handle(c, Request::OpenDevice { gpu: 0 }, Vec::new()).0;
        assert!(matches!(open(&mut s, a), Response::DeviceOpened(_)));
        assert!(matches!(open(&mut s, b), Response::DeviceOpened(_)));
        let r = open(&mut s, a);
        assert!(
            matches!(&r, Response::Error(e) if e.code == ErrorCode::Quota && e.message.contains("limits.devices (2)")),
            "{r:?}"
        );
        s.disconnect(b);
        assert!(matches!(open(&mut s, a), Response::DeviceOpened(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, failure_persistence: None, ..Default::default() })]

        /// Whatever a client asks, with whatever numbers, the state answers without panicking
        /// and a disconnect gives everything back.
        #[test]
        fn any_requests_any_numbers(ops in proptest::collection::vec((0u8..10, proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>()), 1..24), junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let mut s = state(Limits { memory_bytes: 32 << 20, devices: 2, objects: 16, ..Limits::default() });
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
            proptest::prop_assert_eq!(s.total, recount(&s));
            s.disconnect(c);
            proptest::prop_assert_eq!(s.held_bytes(), 0);
            proptest::prop_assert!(s.devices.is_empty());
        }
    }
}
