//! The daemon's state and the one owner that changes it: GPUs, clients, their devices and
//! everything those hold, with ownership, limits and cleanup.
//!
//! One lock owns it ([`Shared`]): a connection task decodes a request and runs it through
//! the [`Handler`] trait under the lock, so requests are handled one at a time and a
//! client's disconnect (run by its own task after its last request) never races a request
//! of the same client. Handling in the connection task, rather than handing each request
//! to an owner thread and back, saves two thread wake-ups per request, which were most of
//! a request's cost. The watch thread ([`spawn_watch`]) takes fault reports from the GPUs'
//! paths and runs the hang watchdog under the same lock. The [`Handler`] trait is the seam
//! between sockets and devices, so tests and fuzzers can drive requests without a socket.

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
use crate::device::{Device, MakeError, Region};
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
}

/// Everything rigd holds.
#[derive(Debug)]
pub struct State {
    gpus: Vec<GpuEntry>,
    limits: Limits,
    inspect_gid: Option<u32>,
    own_uid: u32,
    clients: BTreeMap<ClientId, Client>,
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
        Self {
            gpus,
            limits,
            inspect_gid,
            own_uid: nix::unistd::geteuid().as_raw(),
            clients: BTreeMap::new(),
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

    /// Bytes and objects `client` holds across its devices.
    fn usage(&self, client: ClientId) -> (u64, u32) {
        let Some(c) = self.clients.get(&client) else {
            return (0, 0);
        };
        c.devices
            .iter()
            .filter_map(|d| self.devices.get(d))
            .fold((0, 0), |(b, o), (_, d)| {
                (
                    b + d.held().total(),
                    // An image lies in a region of its own, so regions count both.
                    o + u32::try_from(d.regions.len()).unwrap_or(u32::MAX),
                )
            })
    }

    /// `None` if `client` may take `bytes` more bytes and one more object; else the answer.
    pub(crate) fn quota_for(&self, client: ClientId, bytes: u64) -> Option<Response> {
        let (held, objects) = self.usage(client);
        if objects >= self.limits.objects {
            return Some(err(
                ErrorCode::Quota,
                format!(
                    "this client holds {objects} allocations, mappings and images, the most rigd's limits.objects allows; free some first"
                ),
            ));
        }
        if held.saturating_add(bytes) > self.limits.memory_bytes {
            return Some(Response::NoMemory {
                bytes: held.saturating_add(bytes) - self.limits.memory_bytes,
                shortage: Shortage::Quota,
            });
        }
        None
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
        let open = self.clients.get(&client).map_or(0, |c| c.devices.len());
        if open >= self.limits.devices as usize {
            return none(err(
                ErrorCode::Quota,
                format!(
                    "this client has {open} devices open, the most rigd's limits.devices allows; close one first"
                ),
            ));
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
            Err(MakeError::Short { bytes, .. }) => {
                return none(Response::NoMemory {
                    bytes,
                    shortage: Shortage::Gpu,
                });
            }
            Err(e) => return none(err(ErrorCode::Fault, e.to_string())),
        };
        let held = device.held().total();
        let (used, _) = self.usage(client);
        if used.saturating_add(held) > self.limits.memory_bytes {
            return none(Response::NoMemory {
                bytes: used.saturating_add(held) - self.limits.memory_bytes,
                shortage: Shortage::Quota,
            });
        }
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
            tracing::info!(
                client = client.0,
                pid = c.peer.pid,
                device = id.0,
                gpu,
                "device opened"
            );
        }
        self.devices.insert(id, (client, device));
        (Response::DeviceOpened(Box::new(opened)), fds)
    }

    fn close_device(&mut self, client: ClientId, id: DeviceId) -> Response {
        if let Err(e) = self.owned_device(client, id) {
            return e;
        }
        if let Some((_, mut d)) = self.devices.remove(&id) {
            d.release_all();
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.devices.remove(&id);
        }
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
        if let Err(e) = self.live_device(client, id) {
            return none(e);
        }
        if let Some(r) = self.quota_for(client, rounded) {
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
                d.path.free(r.memory);
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
        if let Some(r) = self.quota_for(client, rounded) {
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
        if let Some(r) = self.quota_for(client, want) {
            return none(r);
        }
        let Ok(d) = self.live_device(client, id) else {
            return none(err(ErrorCode::Internal, "device vanished"));
        };
        match d.grow(sizes.0, sizes.1, sizes.2, installed) {
            Ok((g, fds)) => (Response::Grown(g), fds),
            Err(MakeError::Short { bytes, .. }) => none(Response::NoMemory {
                bytes,
                shortage: Shortage::Gpu,
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
        match d.map_peer_word(peer, &control) {
            Ok(gpu_address) => Response::PeerWord { gpu_address },
            Err(crate::path::Refusal::Lacking(_)) => Response::NoMemory {
                bytes: crate::device::CONTROL_BYTES,
                shortage: Shortage::Gpu,
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
    }

    /// The hang watchdog: loses every device whose word has stayed below its submitted
    /// value for its hang bound. Returns whether any device has outstanding work (so the
    /// owner knows whether to keep ticking).
    pub fn watchdog(&mut self, now: Instant) -> bool {
        let mut busy = false;
        for (_, d) in self.devices.values_mut() {
            if d.stopped || d.lost.is_some() {
                continue;
            }
            let Some(hang_ms) = d.desc.hang_ms else {
                continue;
            };
            let (reached, submitted) = (d.reached(), d.submitted());
            if reached >= submitted {
                d.progress = None;
                continue;
            }
            busy = true;
            // The stall counts from when the watchdog first saw the word below the
            // submitted value, or last saw it move: late by at most a tick, never early.
            let since = match d.progress {
                Some((seen, since)) if seen == reached => since,
                _ => {
                    d.progress = Some((reached, now));
                    now
                }
            };
            let still = now.saturating_duration_since(since);
            if still >= Duration::from_millis(hang_ms) {
                d.lose(format!(
                    "hang: the timeline stayed at {reached} below the submitted {submitted} for {} ms",
                    still.as_millis()
                ));
            }
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
            },
        );
        id
    }

    fn handle(&mut self, client: ClientId, request: Request, fds: Vec<OwnedFd>) -> Reply {
        let name = request.name();
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
                    d.stop(last, fault.as_deref());
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
                            bytes: self.usage(*id).0,
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
        };
        if let Response::Error(e) = &reply.0 {
            tracing::debug!(client = client.0, request = name, code = ?e.code, error = %e.message, "request refused");
        }
        reply
    }

    fn disconnect(&mut self, client: ClientId) {
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        let n = c.devices.len();
        for id in c.devices {
            if let Some((_, mut d)) = self.devices.remove(&id) {
                d.release_all();
            }
        }
        tracing::info!(
            client = client.0,
            pid = c.peer.pid,
            devices = n,
            "client gone; everything it held given back"
        );
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
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
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
        let t0 = Instant::now();
        assert!(!s.watchdog(t0), "nothing outstanding");
        let dev = &s.devices.get(&d.device).unwrap().1;
        let host = dev.control.as_ref().unwrap().host.as_ref().unwrap();
        host.store_u64(
            crate::device::SUBMITTED_OFFSET as usize,
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, failure_persistence: None, ..Default::default() })]

        /// Whatever a client asks, with whatever numbers, the state answers without panicking
        /// and a disconnect gives everything back.
        #[test]
        fn any_requests_any_numbers(ops in proptest::collection::vec((0u8..10, proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>()), 1..24), junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let mut s = state(Limits { memory_bytes: 32 << 20, devices: 2, objects: 16 });
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
            s.disconnect(c);
            proptest::prop_assert_eq!(s.held_bytes(), 0);
            proptest::prop_assert!(s.devices.is_empty());
        }
    }
}
