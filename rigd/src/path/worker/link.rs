//! rigd's side of a worker: the link that calls it and reads its messages, the set of
//! workers (one per client), and the backend and path rigd's devices use.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::{Duration, Instant};

use nix::sys::socket::{self};
use rig_kfd::seam;
use rig_kfd::topology::Node;
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::SharedRegion;

use super::protocol::{
    Answer, Call, MAX_FRAME, Message, Reply, Request, UPLOAD_PIECE, Wire, decode, encode,
    unexpected,
};
use super::spawn::{UidLease, Uids};
use super::{WorkerCommand, WorkerError, WorkerUser, lock};
use crate::path::{
    Backend, Events, Fault, GpuDescription, MapRefusal, Owner, Path, PathMemory, QueueHandle,
    QueueSpec, Refusal, Stopped, Why,
};

/// How long rigd waits for a worker's answer before it takes the worker as hung and kills
/// it, in milliseconds (every call is a few KFD ioctls; opening a GPU measures its clock
/// over 20 ms).
pub const REPLY_MS: u64 = 10_000;

/// How long a worker whose socket closed has to exit before rigd kills it, in milliseconds.
pub(super) const EXIT_MS: u64 = 2_000;

/// A running worker, reached from rigd.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) sock: OwnedFd,
    pub(super) pid: u32,
    pub(super) next_id: AtomicU64,
    pub(super) next_device: AtomicU64,
    pub(super) pending: Mutex<HashMap<u64, mpsc::SyncSender<Reply>>>,
    /// Each device's events and the interrupts it was woken by.
    pub(super) devices: Mutex<HashMap<u64, (Events, Arc<AtomicU64>)>>,
    /// Wire the worker is gone, once it is reaped.
    pub(super) dead: Mutex<Option<String>>,
    pub(super) child: Mutex<Child>,
    /// Its dynamic uid, held until it is reaped.
    pub(super) _uid: Option<UidLease>,
}

impl Link {
    pub(super) fn gone(&self) -> Option<String> {
        lock(&self.dead).clone()
    }

    pub(super) fn call(
        &self,
        device: u64,
        request: Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Reply, WorkerError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = encode(&Call {
            id,
            device,
            request,
        })?;
        let (tx, rx) = mpsc::sync_channel(1);
        lock(&self.pending).insert(id, tx);
        // After the insert: a worker reaped before it finds the reason, one reaped after
        // drops the sender.
        if let Some(why) = self.gone() {
            lock(&self.pending).remove(&id);
            return Err(WorkerError::Gone(why));
        }
        if let Err(e) = seam::send(self.sock.as_fd(), &bytes, fds) {
            lock(&self.pending).remove(&id);
            return Err(self.gone().map_or(
                WorkerError::Send {
                    pid: self.pid,
                    errno: e,
                },
                WorkerError::Gone,
            ));
        }
        match rx.recv_timeout(Duration::from_millis(REPLY_MS)) {
            Ok(a) => Ok(a),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(WorkerError::Gone(self.gone().unwrap_or_else(|| {
                    "worker died: its answer was lost".into()
                })))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                lock(&self.pending).remove(&id);
                let _ = lock(&self.child).kill();
                Err(WorkerError::Hung { pid: self.pid })
            }
        }
    }

    /// Reads the worker's frames until its socket closes, then reaps it and loses its
    /// devices.
    pub(super) fn read_loop(self: Arc<Link>) {
        let mut buf = vec![0u8; MAX_FRAME];
        let why = loop {
            match seam::recv(self.sock.as_fd(), &mut buf) {
                Ok(Some((n, fds))) => match decode::<Message>(&buf[..n]) {
                    Ok(Message::Reply { id, answer }) => {
                        if let Some(tx) = lock(&self.pending).remove(&id) {
                            let _ = tx.send((answer, fds));
                        }
                    }
                    Ok(Message::Interrupt { device }) => {
                        let d = lock(&self.devices).get(&device).cloned();
                        if let Some((events, count)) = d {
                            count.fetch_add(1, Ordering::Relaxed);
                            (events.interrupt)();
                        }
                    }
                    Ok(Message::Fault { device, fault }) => {
                        let d = lock(&self.devices).get(&device).cloned();
                        if let Some((events, _)) = d {
                            (events.fault)(fault);
                        }
                    }
                    Err(e) => break format!(" after {e}"),
                },
                Ok(None) => break String::new(),
                Err(e) if e.0 == libc::EINTR => continue,
                Err(e) => break format!(" after its socket failed: {e}"),
            }
        };
        let status = self.reap();
        let reason = format!("worker died: pid {} {status}{why}", self.pid);
        *lock(&self.dead) = Some(reason.clone());
        lock(&self.pending).clear();
        let devices: Vec<Events> = lock(&self.devices)
            .values()
            .map(|(e, _)| e.clone())
            .collect();
        if !devices.is_empty() {
            tracing::warn!(pid = self.pid, devices = devices.len(), "{reason}");
        }
        for e in devices {
            (e.fault)(rig_proto::Fault::new(
                rig_proto::FaultKind::Internal,
                reason.clone(),
            ));
        }
    }

    /// Waits for the worker to exit (killing it past [`EXIT_MS`]) and says how it ended.
    pub(super) fn reap(&self) -> String {
        let deadline = Instant::now() + Duration::from_millis(EXIT_MS);
        loop {
            let mut c = lock(&self.child);
            match c.try_wait() {
                Ok(Some(s)) => return exit_words(s),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = c.kill();
                    return c.wait().map_or_else(
                        |e| format!("could not be reaped ({e})"),
                        |s| format!("{} (killed by rigd)", exit_words(s)),
                    );
                }
                Ok(None) => {}
                Err(e) => return format!("could not be reaped ({e})"),
            }
            drop(c);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

pub(super) fn exit_words(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (_, Some(sig)) => format!(
            "was killed by signal {sig} ({})",
            nix::sys::signal::Signal::try_from(sig).map_or("unknown", |s| s.as_str())
        ),
        _ => format!("ended ({s})"),
    }
}

/// rigd's handle on a worker: the last one dropped closes its socket, which ends it.
#[derive(Debug)]
pub(super) struct Worker {
    pub(super) link: Arc<Link>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its reader sees the end, reaps it and ends.
        let _ = socket::shutdown(self.link.sock.as_raw_fd(), socket::Shutdown::Both);
    }
}

/// rigd's workers: one per client connection with KFD devices, shared by every KFD GPU.
#[derive(Debug)]
pub struct Workers {
    pub(super) command: WorkerCommand,
    pub(super) live: Mutex<HashMap<u64, Weak<Worker>>>,
    pub(super) uids: Arc<Mutex<Uids>>,
}

impl Workers {
    /// Workers started by `command`.
    pub fn new(command: WorkerCommand) -> Arc<Workers> {
        if command.user == WorkerUser::Rigd {
            tracing::warn!(
                uid = nix::unistd::geteuid().as_raw(),
                "KFD workers run as rigd's own user ([kfd] worker_uid = 0, or rigd is not root)"
            );
        }
        Arc::new(Workers {
            command,
            live: Mutex::new(HashMap::new()),
            uids: Arc::default(),
        })
    }

    /// The process ids of the workers running now, with their clients.
    pub fn running(&self) -> Vec<(u64, u32)> {
        lock(&self.live)
            .iter()
            .filter_map(|(c, w)| w.upgrade().map(|w| (*c, w.link.pid)))
            .collect()
    }

    /// Client `client`'s worker, started if it has none (or its last one died).
    fn of(&self, client: u64) -> Result<Arc<Worker>, WorkerError> {
        let mut live = lock(&self.live);
        live.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = live.get(&client).and_then(Weak::upgrade)
            && w.link.gone().is_none()
        {
            return Ok(w);
        }
        let w = Arc::new(Worker::spawn(&self.command, &self.uids).map_err(WorkerError::Gone)?);
        live.insert(client, Arc::downgrade(&w));
        Ok(w)
    }

    /// A backend for each of `nodes`, described through a worker started for that alone
    /// (rigd itself never opens KFD): each GPU's entry, or why the worker could not open it.
    pub fn backends(self: &Arc<Self>, nodes: &[Node]) -> Vec<Result<WorkerBackend, Why>> {
        if nodes.is_empty() {
            return Vec::new();
        }
        let probe = match Worker::spawn(&self.command, &self.uids) {
            Ok(w) => w,
            Err(e) => {
                let why = Why::from(WorkerError::Gone(e));
                return nodes.iter().map(|_| Err(why.clone())).collect();
            }
        };
        nodes
            .iter()
            .map(|node| {
                let clock_hz = match probe.link.call(
                    0,
                    Request::Describe {
                        gpu_id: node.gpu_id,
                    },
                    &[],
                )? {
                    (Answer::Described { clock_hz }, _) => clock_hz,
                    (a, _) => return Err(unexpected(a)),
                };
                let desc = crate::path::kfd::describe(node, clock_hz)?;
                Ok(WorkerBackend {
                    workers: self.clone(),
                    node: node.clone(),
                    desc,
                })
            })
            .collect()
    }
}

/// A KFD GPU whose devices run in their clients' workers.
#[derive(Debug)]
pub struct WorkerBackend {
    pub(super) workers: Arc<Workers>,
    pub(super) node: Node,
    pub(super) desc: GpuDescription,
}

impl WorkerBackend {
    /// The workers its devices run in.
    pub fn workers(&self) -> &Arc<Workers> {
        &self.workers
    }
}

impl Backend for WorkerBackend {
    fn description(&self) -> &GpuDescription {
        &self.desc
    }

    fn open(&self, owner: Owner, events: Events) -> Result<Box<dyn Path>, Refusal> {
        let worker = self
            .workers
            .of(owner.0)
            .map_err(|e| Refusal::Refused(e.into()))?;
        let device = worker.link.next_device.fetch_add(1, Ordering::Relaxed);
        let interrupts = Arc::new(AtomicU64::new(0));
        // Listed before the worker opens it: its first interrupt finds it.
        lock(&worker.link.devices).insert(device, (events, interrupts.clone()));
        let mut path = WorkerPath {
            worker,
            device,
            node: self.node.clone(),
            interrupts,
            interrupt: 0,
        };
        match path.call(
            Request::Open {
                gpu_id: self.node.gpu_id,
            },
            &[],
        ) {
            Ok((Answer::Opened { interrupt }, _)) => {
                path.interrupt = interrupt;
                Ok(Box::new(path))
            }
            Ok((Answer::Refused(w), _)) => Err(w.refusal()),
            Ok((a, _)) => Err(Refusal::Refused(unexpected(a))),
            Err(e) => Err(Refusal::Refused(e.into())),
        }
    }
}

/// One device's KFD path, run in its client's worker.
#[derive(Debug)]
pub struct WorkerPath {
    pub(super) worker: Arc<Worker>,
    pub(super) device: u64,
    pub(super) node: Node,
    pub(super) interrupts: Arc<AtomicU64>,
    /// The interrupt context the worker's KFD process gives the device's releases.
    pub(super) interrupt: u32,
}

impl WorkerPath {
    pub(super) fn call(
        &self,
        request: Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<Reply, WorkerError> {
        self.worker.link.call(self.device, request, fds)
    }

    fn memory(&self, r: Result<Reply, WorkerError>) -> Result<PathMemory, Wire> {
        match r.map_err(|e| Wire::Refused(e.into()))? {
            (
                Answer::Memory {
                    address,
                    bytes,
                    kind,
                    token,
                    host,
                },
                mut fds,
            ) => {
                let host = match (host, fds.pop()) {
                    (false, _) => None,
                    // Pinned memory is a memfd the worker made: sealed against
                    // shrinking before rigd maps it, so no worker takes its pages
                    // from under rigd.
                    (true, Some(fd)) if kind == Some(MemoryKind::Pinned) => {
                        Some(SharedRegion::from_fd_sealed(fd).map_err(|e| {
                            Wire::Refused(format!("sealing the worker's Pinned memfd: {e}").into())
                        })?)
                    }
                    (true, Some(fd)) => Some(SharedRegion::from_fd(fd).map_err(|e| {
                        Wire::Refused(format!("mapping the worker's memory: {e}").into())
                    })?),
                    (true, None) => {
                        return Err(Wire::Refused("the worker sent no memory".into()));
                    }
                };
                Ok(PathMemory {
                    address,
                    bytes,
                    kind,
                    host,
                    token,
                })
            }
            (Answer::Refused(w), _) => Err(w),
            (a, _) => Err(Wire::Refused(unexpected(a))),
        }
    }

    fn done(&self, r: Result<Reply, WorkerError>) -> Result<(), Fault> {
        match r.map_err(|e| Fault(e.into()))? {
            (Answer::Done, _) => Ok(()),
            (a, _) => Err(Fault(unexpected(a))),
        }
    }
}

impl Path for WorkerPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        let r = self.call(Request::Alloc { kind, bytes }, &[]);
        self.memory(r).map_err(Wire::refusal)
    }

    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        let r = self.call(Request::MapHost { offset, bytes }, &[fd.as_fd()]);
        let mut m = self.memory(r).map_err(Wire::map_refusal)?;
        // The worker sealed and mapped it; rigd's own mapping is for its uploads.
        match crate::path::memory::host_region(fd, offset, m.bytes) {
            Ok(region) => {
                m.host = Some(region);
                Ok(m)
            }
            Err(e) => {
                self.free(m);
                Err(e)
            }
        }
    }

    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        let fd = region
            .dup_fd()
            .map_err(|e| Refusal::Lacking(format!("duplicating the peer's memfd: {e}").into()))?;
        let r = self.call(Request::MapPeer { offset, bytes }, &[fd.as_fd()]);
        let mut m = self.memory(r).map_err(Wire::refusal)?;
        m.host = Some(region.clone());
        Ok(m)
    }

    fn free(&mut self, memory: PathMemory) {
        let r = self.call(
            Request::Free {
                token: memory.token,
            },
            &[],
        );
        if let Err(e) = self.done(r) {
            tracing::debug!(error = %e, "freeing memory in the KFD worker");
        }
    }

    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        for (i, piece) in data.chunks(UPLOAD_PIECE).enumerate() {
            let at = offset
                .checked_add((i * UPLOAD_PIECE) as u64)
                .ok_or_else(|| Fault(format!("an upload at {offset} overflows").into()))?;
            let r = self.call(
                Request::Upload {
                    token: memory.token,
                    offset: at,
                    data: piece.to_vec(),
                },
                &[],
            );
            self.done(r)?;
        }
        Ok(())
    }

    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        let page =
            spec.doorbell.region().dup_fd().map_err(|e| {
                Refusal::Lacking(format!("duplicating the doorbell page: {e}").into())
            })?;
        let r = self.call(
            Request::Queue {
                kind: spec.kind,
                ring: spec.ring,
                bytes: spec.bytes,
                read: spec.read,
                write: spec.write,
                doorbell: spec.doorbell.offset() as u64,
                scratch: spec.scratch,
            },
            &[page.as_fd()],
        );
        match r.map_err(|e| Refusal::Refused(e.into()))? {
            (Answer::Queue(q), _) => Ok(QueueHandle(q)),
            (Answer::Refused(w), _) => Err(w.refusal()),
            (a, _) => Err(Refusal::Refused(unexpected(a))),
        }
    }

    fn interrupt(&self) -> u32 {
        self.interrupt
    }

    fn wake_on_interrupt(&mut self, memory: &PathMemory, offset: u64) -> Result<(), Refusal> {
        // The worker receives the interrupts, so the worker wakes the word: its own
        // mapping of the memory it gave.
        let r = self.call(
            Request::Word {
                token: memory.token,
                offset,
            },
            &[],
        );
        match r.map_err(|e| Refusal::Refused(e.into()))? {
            (Answer::Done, _) => Ok(()),
            (Answer::Refused(w), _) => Err(w.refusal()),
            (a, _) => Err(Refusal::Refused(unexpected(a))),
        }
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        let r = self.call(Request::Retire { queue: queue.0 }, &[]);
        self.done(r)
    }

    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal> {
        match self
            .call(Request::HandScratch { address, bytes }, &[])
            .map_err(|e| Refusal::Refused(e.into()))?
        {
            (Answer::Done, _) => Ok(()),
            (Answer::Refused(w), _) => Err(w.refusal()),
            (a, _) => Err(Refusal::Refused(unexpected(a))),
        }
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        crate::path::kfd::most_ring(&self.node, kind)
    }

    fn clock(&self) -> u64 {
        self.read_clock().gpu
    }

    fn read_clock(&self) -> rig_proto::ClockSample {
        // The worker reads the clock and maps KFD's sample itself: the link's round trip is
        // in no interval.
        let before = crate::gpus::monotonic_ns();
        match self.call(Request::Clock, &[]) {
            Ok((Answer::Clock(c), _)) => c,
            _ => rig_proto::ClockSample {
                gpu: 0,
                host_before_ns: before,
                host_after_ns: crate::gpus::monotonic_ns(),
                gap_ns: 0,
            },
        }
    }

    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        match self.call(
            Request::Stop {
                fault: fault.cloned(),
            },
            &[],
        ) {
            Ok((Answer::Stopped(true), _)) => Stopped::Stopped,
            // A reaped worker's KFD process, and every queue of it, is gone.
            Err(_) if self.worker.link.gone().is_some() => Stopped::Stopped,
            _ => Stopped::Unknown,
        }
    }

    fn busy_since(&self) -> Option<Instant> {
        match self.call(Request::Busy, &[]) {
            Ok((Answer::Busy(ns), _)) => {
                ns.and_then(|n| Instant::now().checked_sub(Duration::from_nanos(n)))
            }
            // Not knowing, the queues count as running (the hang bound then applies).
            _ if self.worker.link.gone().is_some() => None,
            _ => Some(Instant::now()),
        }
    }

    fn progress(&self) -> u64 {
        self.interrupts.load(Ordering::Relaxed)
    }
}

impl Drop for WorkerPath {
    fn drop(&mut self) {
        if self.worker.link.gone().is_none()
            && let Err(e) = self.call(Request::Close, &[])
        {
            tracing::debug!(error = %e, "closing a device in its KFD worker");
        }
        lock(&self.worker.link.devices).remove(&self.device);
    }
}
