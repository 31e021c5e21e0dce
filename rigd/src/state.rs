//! The daemon's state: GPUs, clients, their devices and everything those hold, with
//! ownership, limits and cleanup; and the [`Handler`] seam requests come through.
//!
//! The state's jobs each have their file: the book of clients, tenants and quotas
//! ([`crate::book`]); the device table and its locks ([`crate::table`]); the watch thread
//! ([`crate::watch`]); inspection and the administrator's stop ([`crate::inspect`]); the
//! request table and one file per family of requests ([`crate::cmd`]); and every refusal
//! ([`crate::refusal`]).
//!
//! Locks are per device, not global. [`State`] keeps what is global under one small lock
//! (the book: clients, what each user and all clients are charged, and the device table of
//! `Arc`s), held only for lookups and accounting, never while a path works. Each device
//! sits behind its own mutex, so a request on device A never waits for device B's work.
//! Lock order: a device, then the book; the book is never held while waiting for a device.
//!
//! Requests come through [`Handler::handle`] (waits for the device's lock) or
//! [`State::try_handle`] (answers only if the request cannot block and nothing it needs is
//! busy, else gives it back untouched). The server ([`crate::server`]) runs on tokio's
//! blocking pool the requests whose route says they may block
//! ([`rig_proto::Route::blocks`]), any request whose device is busy, and a disconnect; the
//! rest inline with `try_handle`, so no async worker waits for a queue's thread or another
//! request. The [`Handler`] trait is the seam between sockets and devices, so tests and
//! fuzzers can drive requests without a socket.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rig_proto::messages::{Request, Response};

use crate::book::{Book, Budget, Client};
use crate::config::{Limits, Peer};
use crate::device::Footprint;
use crate::gpus::GpuEntry;
use crate::table::Wait;
use crate::watch::Msg;

/// A connected client, unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub u64);

/// An answer and the descriptors it names.
pub type Reply = (Response, Vec<OwnedFd>);

/// An answer that names no descriptors.
pub(crate) fn none(r: Response) -> Reply {
    (r, Vec::new())
}

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

/// Everything rigd holds.
#[derive(Debug)]
pub struct State {
    pub(crate) gpus: Vec<GpuEntry>,
    /// `daemon.admin_group`'s gid; SIGHUP may change it ([`State::set_admin_gid`]).
    inspect_gid: std::sync::RwLock<Option<u32>>,
    own_uid: u32,
    /// What is global: clients, charges, the device table.
    pub(crate) book: Mutex<Book>,
    next_client: AtomicU64,
    pub(crate) next_device: AtomicU64,
    next_object: AtomicU64,
    /// Where paths report faults, so they reach the watch thread as messages.
    pub(crate) faults: mpsc::Sender<Msg>,
    /// `images.max_bytes`: `LoadImage` refuses a larger image before anything is allocated.
    pub(crate) max_image_bytes: u64,
    /// Devices lost, counted by each device at its loss, for the metrics.
    pub(crate) losses: Arc<crate::metrics::Losses>,
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
            book: Mutex::new(Book::new(limits, budget)),
            next_client: AtomicU64::new(1),
            next_device: AtomicU64::new(1),
            next_object: AtomicU64::new(1),
            faults,
            max_image_bytes: crate::config::Images::default().max_bytes,
            losses: Arc::default(),
        }
    }

    /// A new id for a region or an image.
    pub(crate) fn new_object_id(&self) -> u64 {
        self.next_object.fetch_add(1, Ordering::Relaxed)
    }

    /// The shortest hang bound of the GPUs served, if any has one.
    pub fn shortest_hang_bound(&self) -> Option<Duration> {
        self.gpus
            .iter()
            .filter_map(|g| g.backend.as_ref()?.description().hang_ms)
            .min()
            .map(Duration::from_millis)
    }

    /// Makes `gid` the administrators' group for connections from now on (a reload); says
    /// whether it changed.
    pub fn set_admin_gid(&self, gid: Option<u32>) -> bool {
        let mut g = self.inspect_gid.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, gid) != gid
    }
}

impl State {
    /// A client passed the handshake on grant `grant`'s socket (`None`: rigd's own), its
    /// process in pod `pod`. A connection on a grant's socket is never an administrator.
    pub fn connect_on(
        &self,
        peer: Peer,
        program: Arc<str>,
        grant: Option<crate::grant::GrantOf>,
        pod: Option<rig_proto::PodOf>,
    ) -> ClientId {
        // The server refused a longer name; a caller of the Handler itself gets it cut.
        let program = match rig_proto::cut(&program, rig_proto::MOST_PROGRAM) {
            kept if kept.len() == program.len() => program,
            kept => kept.into(),
        };
        let id = ClientId(self.next_client.fetch_add(1, Ordering::Relaxed));
        let admin_gid = *self.inspect_gid.read().unwrap_or_else(|e| e.into_inner());
        let inspector = grant.is_none()
            && (peer.uid == 0
                || peer.uid == self.own_uid
                || admin_gid.is_some_and(|g| peer.gid == g || peer.groups.contains(&g)));
        let mut book = self.book();
        if let Some(g) = grant.as_ref().and_then(|g| book.grants.get_mut(&g.key)) {
            g.connections += 1;
        }
        book.clients.insert(
            id,
            Client {
                peer,
                program,
                devices: std::collections::BTreeSet::new(),
                opened: false,
                inspector,
                held: Footprint::default(),
                grant,
                pod,
            },
        );
        id
    }
}

impl Handler for State {
    fn connect(&self, peer: Peer, program: Arc<str>) -> ClientId {
        self.connect_on(peer, program, None, None)
    }

    fn handle(&self, client: ClientId, mut request: Request, mut fds: Vec<OwnedFd>) -> Reply {
        let Ok(reply) = self.answer::<Wait>(client, &mut request, &mut fds);
        reply
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
        if let Some(g) = &c.grant {
            // A revoked grant's entry goes with its last connection, all given back.
            let mut book = self.book();
            if let Some(b) = book.grants.get_mut(&g.key) {
                b.connections = b.connections.saturating_sub(1);
                if !b.live && b.connections == 0 {
                    book.grants.remove(&g.key);
                }
            }
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

/// The state, shared by the connection tasks and the watch thread; it locks inside.
pub type Shared = Arc<State>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimGpuConfig;
    use crate::device::Device;
    use crate::path::Backend;
    use crate::path::sim::SimBackend;
    use rig_proto::messages::{DeviceId, ErrorCode, GpuInfo, MemoryKind};
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    fn state(limits: Limits) -> State {
        let backend = SimBackend::new(&SimGpuConfig {
            processor: "gfx1100".into(),
            memory_bytes: 64 << 20,
            hang_ms: 50,
            clock: Default::default(),
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

    /// Once rigd loses every device to stop, a device opened after (a request that was
    /// already answering) is lost as it enters the table: no device outlives the stop live.
    #[test]
    fn a_device_opened_as_rigd_stops_is_lost_with_the_others() {
        let s = state(Limits::default());
        let a = s.connect(peer(1), "a".into());
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(before) = r else {
            panic!("{r:?}")
        };
        assert_eq!(s.lose_all_at_shutdown(), 1);
        let (r, _) = s.handle(a, Request::OpenDevice { gpu: 0 }, Vec::new());
        let Response::DeviceOpened(after) = r else {
            panic!("{r:?}")
        };
        for id in [before.device, after.device] {
            let why = dev(&s, id, |d| d.lost().cloned()).expect("lost");
            assert_eq!(why.detail, crate::watch::SHUTTING_DOWN);
        }
        assert_eq!(
            s.losses
                .counts()
                .get(&(0, crate::metrics::LossReason::Shutdown)),
            Some(&2)
        );
        s.disconnect(a);
        assert_eq!(total(&s), Footprint::default());
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
        // The word reaches it: a tick frees it once the path says no queue runs (a loaded
        // machine may still be starting the device's queue threads).
        host.store_u64(
            rig_shm::layout::TIMELINE_WORD_OFFSET as usize,
            3,
            Ordering::Release,
        );
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while s.watchdog(Instant::now()) && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
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
        let opened = s.book().tenants.get(&(0, None)).unwrap().held.bytes;
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
        let held = s.book().tenants.get(&(0, None)).unwrap().held.bytes;
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
