//! The kfd path in a worker process per client: one KFD process, so one GPU address space,
//! per client (the kernel keys a KFD process by its `mm`; a worker is a process of its own).
//!
//! rigd never opens KFD to serve. For each client connection that opens a device on a KFD
//! GPU, [`Workers`] starts the `rig-worker` program (`[kfd] worker`), which confines itself
//! ([`confine`]: no new privileges, killed when rigd dies, no descriptor but its socket,
//! optionally another uid and gid), opens KFD through the same [`Kernel`] seam rigd would
//! (the machine's `/dev/kfd` or the emulated KFD's socket) and runs [`super::kfd`]'s
//! `KfdBackend`/`KfdPath` for that client's devices alone ([`serve`]). All of the client's
//! devices, on every GPU, share its worker; the worker ends when the client's last device
//! does (and so when the client disconnects or dies).
//!
//! [`WorkerPath`] is the [`Path`] rigd's devices use: each call is a frame on a
//! `SOCK_SEQPACKET` socketpair (bincode, at most [`MAX_FRAME`] bytes, descriptors passed
//! with `SCM_RIGHTS`): Pinned memory's memfd and Mapped memory's dma-buf come back from the
//! worker; a host mapping's memfd, a peer's Pinned memfd and the client's doorbell page go
//! to it. The worker's KFD threads send the device's interrupts and faults back as frames,
//! which reach the device's [`Events`]. The hardware doorbell is the worker's: its
//! forwarder thread sleeps on the client's shared doorbell word (a futex, shared across
//! processes) and stores each new value into KFD's doorbell.
//!
//! A worker that dies (or stops answering for [`REPLY_MS`], when rigd kills it) loses its
//! client's devices, each with an `Internal` fault "worker died: ..." naming how it ended;
//! other clients' workers go on. Its KFD process, queues and memory went with it, so a
//! stop of a lost device answers [`Stopped::Stopped`] once the process is reaped.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::{Duration, Instant};

use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};
use rig_kfd::seam::{self, Kernel};
use rig_kfd::topology::Node;
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use serde::{Deserialize, Serialize};

use super::Cause;
use super::kfd::{KfdBackend, KfdProcess};
use super::{
    Backend, Events, Fault, GpuDescription, MapRefusal, Owner, Path, PathMemory, QueueHandle,
    QueueSpec, Refusal, Stopped, Why,
};

/// The most bytes of one frame on a worker's socket.
pub const MAX_FRAME: usize = 64 * 1024;
/// Bytes of an upload's piece: one frame carries one with its header.
const UPLOAD_PIECE: usize = 48 * 1024;
/// How long rigd waits for a worker's answer before it takes the worker as hung and kills
/// it, in milliseconds (every call is a few KFD ioctls; opening a GPU measures its clock
/// over 20 ms).
pub const REPLY_MS: u64 = 10_000;
/// How long a worker whose socket closed has to exit before rigd kills it, in milliseconds.
const EXIT_MS: u64 = 2_000;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a call on a worker got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// The worker is gone (or rigd could not start it): how it ended, or why not.
    #[error("{0}")]
    Gone(String),
    /// The call does not fit a frame.
    #[error("{0}")]
    Frame(String),
    /// The worker's socket refused the call.
    #[error("sending to the worker (pid {pid}): {errno}")]
    Send {
        /// The worker's pid.
        pid: u32,
        /// The socket's answer.
        errno: rig_kfd::sys::Errno,
    },
    /// The worker did not answer in time, and rigd killed it.
    #[error("worker died: pid {pid} did not answer within {REPLY_MS} ms and rigd killed it")]
    Hung {
        /// The worker's pid.
        pid: u32,
    },
}

impl From<WorkerError> for Why {
    fn from(e: WorkerError) -> Why {
        Why::caused(e.to_string(), Cause::Worker)
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WorkerError> {
    let bytes = bincode::serde::encode_to_vec(v, bincode::config::standard())
        .map_err(|e| WorkerError::Frame(format!("encoding a worker frame: {e}")))?;
    if bytes.len() > MAX_FRAME {
        return Err(WorkerError::Frame(format!(
            "a worker frame of {} bytes exceeds the limit of {MAX_FRAME}",
            bytes.len()
        )));
    }
    Ok(bytes)
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard().with_limit::<MAX_FRAME>())
        .map(|(v, _)| v)
        .map_err(|e| format!("a worker frame that does not decode: {e}"))
}

/// One call of rigd on a worker, for its device `device`.
#[derive(Debug, Serialize, Deserialize)]
struct Call {
    id: u64,
    device: u64,
    request: Request,
}

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    /// The GPU's clock rate (the worker opens it).
    Describe {
        gpu_id: u32,
    },
    /// A new device on the GPU.
    Open {
        gpu_id: u32,
    },
    /// The device ends: its path is dropped.
    Close,
    Alloc {
        kind: MemoryKind,
        bytes: u64,
    },
    /// With the client's memfd.
    MapHost {
        offset: u64,
        bytes: u64,
    },
    /// With the peer's Pinned memfd.
    MapPeer {
        offset: u64,
        bytes: u64,
    },
    Free {
        token: u64,
    },
    Upload {
        token: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// With the client's doorbell page.
    Queue {
        kind: QueueKind,
        ring: u64,
        bytes: u64,
        read: u64,
        write: u64,
        doorbell: u64,
        scratch: (u64, u64),
    },
    Retire {
        queue: u64,
    },
    Clock,
    Stop {
        fault: Option<rig_proto::Fault>,
    },
    Busy,
}

#[derive(Debug, Serialize, Deserialize)]
enum Answer {
    Described {
        clock_hz: u64,
    },
    Done,
    /// With the host memfd (Pinned) or dma-buf (Mapped) where `host` is set.
    Memory {
        address: u64,
        bytes: u64,
        kind: Option<MemoryKind>,
        token: u64,
        host: bool,
    },
    Queue(u64),
    Clock(u64),
    Stopped(bool),
    /// Nanoseconds since the device's queues have been busy.
    Busy(Option<u64>),
    Refused(Wire),
    Failed(Why),
}

#[derive(Debug, Serialize, Deserialize)]
/// A refusal as it crosses the worker's socket: [`Refusal`]'s and [`MapRefusal`]'s kinds,
/// each with what the path said and its cause.
enum Wire {
    Lacking(Why),
    Full(Why),
    Refused(Why),
    NoRoom(Why),
    Never(Why),
    Unfit(Why),
}

impl From<Refusal> for Wire {
    fn from(r: Refusal) -> Wire {
        match r {
            Refusal::Lacking(s) => Wire::Lacking(s),
            Refusal::Full(s) => Wire::Full(s),
            Refusal::Refused(s) => Wire::Refused(s),
        }
    }
}

impl From<MapRefusal> for Wire {
    fn from(r: MapRefusal) -> Wire {
        match r {
            MapRefusal::NoRoom(s) => Wire::NoRoom(s),
            MapRefusal::Never(s) => Wire::Never(s),
            MapRefusal::Unfit(s) => Wire::Unfit(s),
        }
    }
}

impl Wire {
    fn refusal(self) -> Refusal {
        match self {
            Wire::Lacking(s) | Wire::NoRoom(s) => Refusal::Lacking(s),
            Wire::Full(s) => Refusal::Full(s),
            Wire::Refused(s) | Wire::Never(s) | Wire::Unfit(s) => Refusal::Refused(s),
        }
    }

    fn map_refusal(self) -> MapRefusal {
        match self {
            Wire::Lacking(s) | Wire::NoRoom(s) => MapRefusal::NoRoom(s),
            Wire::Unfit(s) => MapRefusal::Unfit(s),
            Wire::Full(s) | Wire::Refused(s) | Wire::Never(s) => MapRefusal::Never(s),
        }
    }
}

/// What a worker sends rigd.
#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Reply {
        id: u64,
        answer: Answer,
    },
    Interrupt {
        device: u64,
    },
    Fault {
        device: u64,
        fault: rig_proto::Fault,
    },
}

/// Where a worker opens KFD: the machine's kernel, or the emulated KFD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSpec {
    /// `/dev/kfd` and the machine's sysfs topology.
    Host,
    /// The emulated KFD serving `socket`, whose topology tree is `topology`.
    Emulated {
        /// Its socket.
        socket: PathBuf,
        /// Its topology tree.
        topology: PathBuf,
    },
}

impl KernelSpec {
    /// The kernel it names.
    pub fn kernel(&self) -> Arc<dyn Kernel> {
        match self {
            KernelSpec::Host => Arc::new(seam::Host::new()),
            KernelSpec::Emulated { socket, topology } => {
                Arc::new(seam::Emulated::new(socket, topology))
            }
        }
    }
}

/// How rigd starts a worker.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The `rig-worker` program.
    pub program: PathBuf,
    /// Where it opens KFD.
    pub kernel: KernelSpec,
    /// Whom it runs as.
    pub user: WorkerUser,
}

/// `[kfd] worker_uids`' default: the range systemd gives its dynamic users
/// (`DynamicUser=`); rigd skips any uid of it the system's user database names.
pub const DEFAULT_WORKER_UIDS: (u32, u32) = (61184, 65519);

/// Whom a worker runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerUser {
    /// rigd's own uid and gid: where rigd is not root (it cannot be anyone else, and is no
    /// one privileged), or `[kfd] worker_uid = 0` (unsafe: a client's worker holds root).
    Rigd,
    /// One uid and gid for every worker (`[kfd] worker_uid`, `worker_gid`).
    Fixed {
        /// Its uid.
        uid: u32,
        /// Its gid.
        gid: u32,
    },
    /// A uid of its own for each worker, free while no other worker runs as it
    /// (`[kfd] worker_uids`); its gid `gid`, or the uid's own number.
    Dynamic {
        /// The first uid of the range.
        first: u32,
        /// The last uid of the range.
        last: u32,
        /// The gid every worker runs as (the group that may open `/dev/kfd`), if any.
        gid: Option<u32>,
    },
}

impl WorkerUser {
    /// Whom `[kfd]` says workers run as, for rigd running as `euid`: by default a dynamic
    /// uid of `worker_uids` when rigd is root; with the group of `[kfd] device` where that
    /// group may read and write it (the worker opens `/dev/kfd` itself: the kernel binds a
    /// KFD process to the `mm` that opened it).
    pub fn of(config: &crate::config::KfdConfig, euid: u32) -> Result<WorkerUser, String> {
        let device_group = || {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&config.device).ok()?;
            (config.emulated.is_none() && m.mode() & 0o060 == 0o060).then(|| m.gid())
        };
        Ok(match config.worker_uid {
            Some(0) => WorkerUser::Rigd,
            Some(uid) => WorkerUser::Fixed {
                uid,
                gid: config.worker_gid.or_else(device_group).unwrap_or(uid),
            },
            None if euid != 0 => WorkerUser::Rigd,
            None => {
                let (first, last) = parse_uids(&config.worker_uids)?;
                WorkerUser::Dynamic {
                    first,
                    last,
                    gid: config.worker_gid.or_else(device_group),
                }
            }
        })
    }
}

/// `first-last`, as `[kfd] worker_uids` writes a range of uids (none of them 0).
pub fn parse_uids(range: &str) -> Result<(u32, u32), String> {
    let bad =
        || format!("[kfd] worker_uids = {range:?} is not a range of uids such as \"61184-65519\"");
    let (a, b) = range.trim().split_once('-').ok_or_else(bad)?;
    let first: u32 = a.trim().parse().map_err(|_| bad())?;
    let last: u32 = b.trim().parse().map_err(|_| bad())?;
    if first == 0 || first > last || last == u32::MAX {
        return Err(format!(
            "{}: it must begin above 0 (root) and end at or after its start",
            bad()
        ));
    }
    Ok((first, last))
}

/// The uids of dynamic users that workers hold, and where the next search starts.
#[derive(Debug, Default)]
struct Uids {
    held: std::collections::BTreeSet<u32>,
    next: u32,
}

/// A worker's dynamic uid, given back when its worker is reaped (the [`Link`] drops).
#[derive(Debug)]
struct UidLease {
    uid: u32,
    pool: Arc<Mutex<Uids>>,
}

impl Drop for UidLease {
    fn drop(&mut self) {
        lock(&self.pool).held.remove(&self.uid);
    }
}

/// A uid of `first..=last` no worker holds and the user database does not name (a
/// systemd dynamic user, or any account, shares the range).
fn lease_uid(pool: &Arc<Mutex<Uids>>, first: u32, last: u32) -> Result<UidLease, String> {
    let mut p = lock(pool);
    let span = u64::from(last - first) + 1;
    let start = p.next.clamp(first, last);
    for i in 0..span {
        let uid = first + ((u64::from(start - first) + i) % span) as u32;
        if p.held.contains(&uid) {
            continue;
        }
        if let Ok(Some(_)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            continue;
        }
        p.held.insert(uid);
        p.next = if uid == last { first } else { uid + 1 };
        return Ok(UidLease {
            uid,
            pool: pool.clone(),
        });
    }
    Err(format!(
        "no uid of [kfd] worker_uids ({first}-{last}) is free: {} workers hold one and the \
         rest are named by the user database; widen the range",
        p.held.len()
    ))
}

/// The arguments rigd starts a worker with.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    about = "One rig client's KFD process (started by rigd, never by hand)."
)]
struct WorkerCli {
    /// rigd's pid: the worker ends if rigd is gone.
    #[arg(long)]
    parent: u32,
    /// Open the machine's /dev/kfd.
    #[arg(long, conflicts_with = "emulated")]
    host: bool,
    /// Open the emulated KFD serving this socket instead.
    #[arg(long, requires = "topology")]
    emulated: Option<PathBuf>,
    /// The emulated KFD's topology tree.
    #[arg(long)]
    topology: Option<PathBuf>,
}

/// The worker program's `main` (the `rig-worker` binary is this alone; a test crate can
/// build the same program under its own name): parses rigd's arguments, confines the
/// process, opens KFD and serves rigd on stdin until rigd closes it or dies.
pub fn main() -> std::process::ExitCode {
    use clap::Parser as _;
    use std::process::ExitCode;
    let cli = WorkerCli::parse();
    if let Err(e) = confine(cli.parent) {
        eprintln!("rig-worker: {e}");
        return ExitCode::FAILURE;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let sock = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rig-worker: no socket on stdin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spec = match (cli.host, cli.emulated, cli.topology) {
        (false, Some(_), Some(_)) => match passed_kernel(sock.as_fd()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rig-worker: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => KernelSpec::Host,
    };
    match serve(sock, spec.kernel()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("rig-worker ends: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The first frame rigd sends a worker of the emulated KFD, with O_PATH descriptors of the
/// emulation's socket and topology tree: the worker's user may not reach their directory.
const KERNEL_FRAME: &[u8] = b"rig-worker: emulated kfd";

/// The emulated KFD rigd passed on `sock`, reached through the descriptors' /proc links
/// (kept open: every KFD call connects a channel of its own).
fn passed_kernel(sock: BorrowedFd<'_>) -> Result<KernelSpec, String> {
    let mut buf = [0u8; 64];
    let (n, fds) = seam::recv(sock, &mut buf)
        .map_err(|e| format!("reading rigd's socket: {e}"))?
        .ok_or("rigd closed its socket before passing the emulated KFD")?;
    let [socket, topology] = <[OwnedFd; 2]>::try_from(fds).map_err(|f| {
        format!(
            "rigd passed {} descriptors for the emulated KFD, not 2",
            f.len()
        )
    })?;
    if &buf[..n] != KERNEL_FRAME {
        return Err("rigd's first frame is not the emulated KFD".into());
    }
    // Held for the process's life: the links name them.
    let link = |fd: OwnedFd| PathBuf::from(format!("/proc/self/fd/{}", fd.into_raw_fd()));
    Ok(KernelSpec::Emulated {
        socket: link(socket),
        topology: link(topology),
    })
}

/// `[kfd] worker`'s default: `rig-worker` beside rigd's own executable (where packages
/// install both).
pub fn default_program() -> PathBuf {
    std::env::current_exe()
        .unwrap_or_default()
        .with_file_name("rig-worker")
}

/// An answer and the descriptors that came with it.
type Reply = (Answer, Vec<OwnedFd>);

/// A running worker, reached from rigd.
#[derive(Debug)]
struct Link {
    sock: OwnedFd,
    pid: u32,
    next_id: AtomicU64,
    next_device: AtomicU64,
    pending: Mutex<HashMap<u64, mpsc::SyncSender<Reply>>>,
    /// Each device's events and the interrupts it was woken by.
    devices: Mutex<HashMap<u64, (Events, Arc<AtomicU64>)>>,
    /// Wire the worker is gone, once it is reaped.
    dead: Mutex<Option<String>>,
    child: Mutex<Child>,
    /// Its dynamic uid, held until it is reaped.
    _uid: Option<UidLease>,
}

impl Link {
    fn gone(&self) -> Option<String> {
        lock(&self.dead).clone()
    }

    fn call(
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
    fn read_loop(self: Arc<Link>) {
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
    fn reap(&self) -> String {
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

fn exit_words(s: std::process::ExitStatus) -> String {
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
struct Worker {
    link: Arc<Link>,
}

impl Worker {
    fn spawn(cmd: &WorkerCommand, uids: &Arc<Mutex<Uids>>) -> Result<Worker, String> {
        // Opened before anything else: a path the worker's user cannot reach is passed as an
        // O_PATH descriptor, whose /proc/self/fd link the worker opens through.
        let passed = match &cmd.kernel {
            KernelSpec::Host => Vec::new(),
            KernelSpec::Emulated { socket, topology } => {
                let o_path = |p: &std::path::Path| {
                    use std::os::unix::fs::OpenOptionsExt;
                    std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_PATH)
                        .open(p)
                        .map(OwnedFd::from)
                        .map_err(|e| format!("opening {} for a worker: {e}", p.display()))
                };
                vec![o_path(socket)?, o_path(topology)?]
            }
        };
        let (ours, theirs) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| format!("no socketpair for a worker: {e}"))?;
        let mut c = Command::new(&cmd.program);
        c.arg("--parent").arg(std::process::id().to_string());
        match &cmd.kernel {
            KernelSpec::Host => {
                c.arg("--host");
            }
            KernelSpec::Emulated { socket, topology } => {
                c.arg("--emulated")
                    .arg(socket)
                    .arg("--topology")
                    .arg(topology);
            }
        }
        // The socket is the worker's stdin; every other rigd descriptor is close-on-exec,
        // and the worker closes any that is not.
        c.stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env_clear();
        if let Ok(f) = std::env::var("RUST_LOG") {
            c.env("RUST_LOG", f);
        }
        // Setting a uid as root also drops every supplementary group (std calls
        // setgroups(0) before setuid), and the kernel clears a non-root uid's capabilities.
        let lease = match &cmd.user {
            WorkerUser::Rigd => None,
            WorkerUser::Fixed { uid, gid } => {
                std::os::unix::process::CommandExt::gid(&mut c, *gid);
                std::os::unix::process::CommandExt::uid(&mut c, *uid);
                None
            }
            WorkerUser::Dynamic { first, last, gid } => {
                let lease = lease_uid(uids, *first, *last)?;
                std::os::unix::process::CommandExt::gid(&mut c, gid.unwrap_or(lease.uid));
                std::os::unix::process::CommandExt::uid(&mut c, lease.uid);
                Some(lease)
            }
        };
        let uid = lease.as_ref().map(|l| l.uid);
        let child = spawn_from_a_lasting_thread(c).map_err(|e| {
            format!(
                "cannot start the KFD worker {} ([kfd] worker): {e}",
                cmd.program.display()
            )
        })?;
        let link = Arc::new(Link {
            sock: ours,
            pid: child.id(),
            next_id: AtomicU64::new(1),
            next_device: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            devices: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            child: Mutex::new(child),
            _uid: lease,
        });
        if !passed.is_empty() {
            let passed: Vec<BorrowedFd<'_>> = passed.iter().map(AsFd::as_fd).collect();
            if let Err(e) = seam::send(link.sock.as_fd(), KERNEL_FRAME, &passed) {
                let mut c = lock(&link.child);
                let _ = c.kill();
                let _ = c.wait();
                return Err(format!("passing a worker its KFD: {e}"));
            }
        }
        let reader = link.clone();
        std::thread::Builder::new()
            .name("rigd-worker-link".into())
            .spawn(move || reader.read_loop())
            .map_err(|e| {
                let _ = lock(&link.child).kill();
                format!("no thread for a worker's socket: {e}")
            })?;
        tracing::debug!(pid = link.pid, uid, "started a KFD worker");
        Ok(Worker { link })
    }
}

/// A command to start, and where its child goes.
type Spawn = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `c` from a thread that lives as long as rigd. The worker's `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked it exits, not the process; requests run on tokio's
/// blocking threads, which end after 10 s idle, and would take their workers with them.
fn spawn_from_a_lasting_thread(c: Command) -> std::io::Result<Child> {
    static SPAWNER: std::sync::OnceLock<Mutex<mpsc::Sender<Spawn>>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Spawn>();
        let started = std::thread::Builder::new()
            .name("rigd-worker-spawner".into())
            .spawn(move || {
                for (mut c, back) in rx {
                    let _ = back.send(c.spawn());
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "no thread to start KFD workers from");
        }
        Mutex::new(tx)
    });
    let (back, child) = mpsc::channel();
    lock(spawner)
        .send((c, back))
        .map_err(|_| std::io::Error::other("rigd's worker-spawning thread is gone"))?;
    child
        .recv()
        .map_err(|_| std::io::Error::other("rigd's worker-spawning thread is gone"))?
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
    command: WorkerCommand,
    live: Mutex<HashMap<u64, Weak<Worker>>>,
    uids: Arc<Mutex<Uids>>,
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
                let desc = super::kfd::describe(node, clock_hz)?;
                Ok(WorkerBackend {
                    workers: self.clone(),
                    node: node.clone(),
                    desc,
                })
            })
            .collect()
    }
}

/// What an answer that is not the one asked for says.
fn unexpected(a: Answer) -> Why {
    match a {
        Answer::Failed(why) => why,
        Answer::Refused(w) => w.refusal().why().clone(),
        a => Why::caused(
            format!("the worker answered {a:?} out of turn"),
            Cause::Worker,
        ),
    }
}

/// A KFD GPU whose devices run in their clients' workers.
#[derive(Debug)]
pub struct WorkerBackend {
    workers: Arc<Workers>,
    node: Node,
    desc: GpuDescription,
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
        let path = WorkerPath {
            worker,
            device,
            node: self.node.clone(),
            interrupts,
        };
        match path.call(
            Request::Open {
                gpu_id: self.node.gpu_id,
            },
            &[],
        ) {
            Ok((Answer::Done, _)) => Ok(Box::new(path)),
            Ok((Answer::Refused(w), _)) => Err(w.refusal()),
            Ok((a, _)) => Err(Refusal::Refused(unexpected(a).into())),
            Err(e) => Err(Refusal::Refused(e.into())),
        }
    }
}

/// One device's KFD path, run in its client's worker.
#[derive(Debug)]
pub struct WorkerPath {
    worker: Arc<Worker>,
    device: u64,
    node: Node,
    interrupts: Arc<AtomicU64>,
}

impl WorkerPath {
    fn call(&self, request: Request, fds: &[BorrowedFd<'_>]) -> Result<Reply, WorkerError> {
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
            (a, _) => Err(Fault(unexpected(a).into())),
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
        match super::memory::host_region(fd, offset, m.bytes) {
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
            (a, _) => Err(Refusal::Refused(unexpected(a).into())),
        }
    }

    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        let r = self.call(Request::Retire { queue: queue.0 }, &[]);
        self.done(r)
    }

    fn most_ring(&self, kind: QueueKind) -> u64 {
        super::kfd::most_ring(&self.node, kind)
    }

    fn clock(&self) -> u64 {
        match self.call(Request::Clock, &[]) {
            Ok((Answer::Clock(c), _)) => c,
            _ => 0,
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

/// Confines the worker process: killed when rigd (`parent`) dies, no new privileges, and no
/// descriptor open but its standard ones (its socket is stdin). Fails if rigd is already
/// gone.
pub fn confine(parent: u32) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    // Set after the fork: a rigd that died before it left the worker to another parent.
    if nix::unistd::getppid().as_raw() as u32 != parent {
        return Err(format!("rigd (pid {parent}) is gone"));
    }
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("PR_SET_NO_NEW_PRIVS: {e}"))?;
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("listing /proc/self/fd: {e}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in open {
        // The directory's own descriptor is among them, already closed: EBADF.
        let _ = nix::unistd::close(fd);
    }
    Ok(())
}

/// The worker's state: its KFD process, its GPUs and the client's devices.
struct Served {
    kernel: Arc<dyn Kernel>,
    sock: Arc<OwnedFd>,
    process: Option<Arc<KfdProcess>>,
    backends: HashMap<u32, KfdBackend>,
    paths: HashMap<u64, Box<dyn Path>>,
    memory: HashMap<(u64, u64), PathMemory>,
}

impl Served {
    fn backend(&mut self, gpu_id: u32) -> Result<&KfdBackend, Why> {
        if !self.backends.contains_key(&gpu_id) {
            let process = match &self.process {
                Some(p) => p.clone(),
                None => {
                    let p = KfdProcess::open(self.kernel.clone())?;
                    self.process = Some(p.clone());
                    p
                }
            };
            let node = rig_kfd::topology::read(self.kernel.topology())
                .map_err(|e| Why::from(e.to_string()))?
                .into_iter()
                .find(|n| n.is_gpu() && n.gpu_id == gpu_id)
                .ok_or_else(|| Why::from(format!("KFD has no GPU {gpu_id:#x}")))?;
            let b = KfdBackend::new(process, node)?;
            self.backends.insert(gpu_id, b);
        }
        self.backends
            .get(&gpu_id)
            .ok_or_else(|| format!("KFD has no GPU {gpu_id:#x}").into())
    }

    fn events(&self, device: u64) -> Events {
        let (a, b) = (self.sock.clone(), self.sock.clone());
        Events {
            interrupt: Arc::new(move || {
                if let Ok(m) = encode(&Message::Interrupt { device }) {
                    let _ = seam::send(a.as_fd(), &m, &[]);
                }
            }),
            fault: Arc::new(move |fault| {
                if let Ok(m) = encode(&Message::Fault { device, fault }) {
                    let _ = seam::send(b.as_fd(), &m, &[]);
                }
            }),
        }
    }

    fn keep(&mut self, device: u64, m: PathMemory) -> (Answer, Vec<OwnedFd>) {
        let fds: Vec<OwnedFd> = m
            .host
            .as_ref()
            .and_then(|r| r.dup_fd().ok())
            .into_iter()
            .collect();
        let a = Answer::Memory {
            address: m.address,
            bytes: m.bytes,
            kind: m.kind,
            token: m.token,
            host: !fds.is_empty() && m.kind.is_some(),
        };
        self.memory.insert((device, m.token), m);
        let fds = if matches!(a, Answer::Memory { host: true, .. }) {
            fds
        } else {
            Vec::new()
        };
        (a, fds)
    }

    fn handle(
        &mut self,
        device: u64,
        request: Request,
        mut fds: Vec<OwnedFd>,
    ) -> (Answer, Vec<OwnedFd>) {
        let none = |a: Answer| (a, Vec::new());
        match request {
            Request::Describe { gpu_id } => none(match self.backend(gpu_id) {
                Ok(b) => Answer::Described {
                    clock_hz: b.description().clock_hz,
                },
                Err(e) => Answer::Failed(e),
            }),
            Request::Open { gpu_id } => {
                let events = self.events(device);
                let path = self
                    .backend(gpu_id)
                    .map_err(Refusal::Refused)
                    // The worker serves one client: every device is its.
                    .and_then(|b| b.open(Owner(0), events));
                none(match path {
                    Ok(p) => {
                        self.paths.insert(device, p);
                        Answer::Done
                    }
                    Err(r) => Answer::Refused(r.into()),
                })
            }
            Request::Close => {
                self.memory.retain(|(d, _), _| *d != device);
                self.paths.remove(&device);
                none(Answer::Done)
            }
            request => {
                let Some(path) = self.paths.get_mut(&device) else {
                    return none(Answer::Failed(
                        format!("the worker has no device {device}").into(),
                    ));
                };
                match request {
                    Request::Alloc { kind, bytes } => match path.alloc(kind, bytes) {
                        Ok(m) => self.keep(device, m),
                        Err(r) => none(Answer::Refused(r.into())),
                    },
                    Request::MapHost { offset, bytes } => {
                        let Some(fd) = fds.pop() else {
                            return none(Answer::Failed("MapHost without its memfd".into()));
                        };
                        match path.map_host(fd, offset, bytes) {
                            Ok(m) => self.keep(device, m),
                            Err(r) => none(Answer::Refused(r.into())),
                        }
                    }
                    Request::MapPeer { offset, bytes } => {
                        let region = match fds.pop().map(SharedRegion::from_fd) {
                            Some(Ok(r)) => r,
                            Some(Err(e)) => {
                                return none(Answer::Failed(
                                    format!("mapping the peer's memfd: {e}").into(),
                                ));
                            }
                            None => {
                                return none(Answer::Failed("MapPeer without its memfd".into()));
                            }
                        };
                        match path.map_peer(&region, offset, bytes) {
                            Ok(m) => self.keep(device, m),
                            Err(r) => none(Answer::Refused(r.into())),
                        }
                    }
                    Request::Free { token } => {
                        if let Some(m) = self.memory.remove(&(device, token)) {
                            path.free(m);
                        }
                        none(Answer::Done)
                    }
                    Request::Upload {
                        token,
                        offset,
                        data,
                    } => none(match self.memory.get(&(device, token)) {
                        Some(m) => match path.upload(m, offset, &data) {
                            Ok(()) => Answer::Done,
                            Err(f) => Answer::Failed(f.0),
                        },
                        None => Answer::Failed("upload into memory the path did not give".into()),
                    }),
                    Request::Queue {
                        kind,
                        ring,
                        bytes,
                        read,
                        write,
                        doorbell,
                        scratch,
                    } => {
                        let bell = fds
                            .pop()
                            .ok_or_else(|| "a queue without its doorbell page".to_string())
                            .and_then(|fd| SharedRegion::from_fd(fd).map_err(|e| e.to_string()))
                            .and_then(|r| {
                                Doorbell::new(r, doorbell as usize).map_err(|e| e.to_string())
                            });
                        let bell = match bell {
                            Ok(b) => b,
                            Err(e) => {
                                return none(Answer::Failed(
                                    format!("the queue's doorbell: {e}").into(),
                                ));
                            }
                        };
                        none(
                            match path.queue(QueueSpec {
                                kind,
                                ring,
                                bytes,
                                read,
                                write,
                                doorbell: bell,
                                scratch,
                            }) {
                                Ok(q) => Answer::Queue(q.0),
                                Err(r) => Answer::Refused(r.into()),
                            },
                        )
                    }
                    Request::Retire { queue } => none(match path.retire(QueueHandle(queue)) {
                        Ok(()) => Answer::Done,
                        Err(f) => Answer::Failed(f.0),
                    }),
                    Request::Clock => none(Answer::Clock(path.clock())),
                    Request::Stop { fault } => none(Answer::Stopped(
                        path.stop(fault.as_ref()) == Stopped::Stopped,
                    )),
                    Request::Busy => {
                        none(Answer::Busy(path.busy_since().map(|t| {
                            u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
                        })))
                    }
                    Request::Describe { .. } | Request::Open { .. } | Request::Close => {
                        none(Answer::Failed("out of turn".into()))
                    }
                }
            }
        }
    }
}

/// The worker's main loop: answers rigd's calls on `sock` against KFD through `kernel`
/// until rigd closes the socket, then ends the client's devices.
pub fn serve(sock: OwnedFd, kernel: Arc<dyn Kernel>) -> Result<(), String> {
    let sock = Arc::new(sock);
    let mut s = Served {
        kernel,
        sock: sock.clone(),
        process: None,
        backends: HashMap::new(),
        paths: HashMap::new(),
        memory: HashMap::new(),
    };
    let mut buf = vec![0u8; MAX_FRAME];
    let out = loop {
        let (n, fds) = match seam::recv(sock.as_fd(), &mut buf) {
            Ok(Some(x)) => x,
            Ok(None) => break Ok(()),
            Err(e) if e.0 == libc::EINTR => continue,
            Err(e) => break Err(format!("reading rigd's socket: {e}")),
        };
        let call: Call = match decode(&buf[..n]) {
            Ok(c) => c,
            Err(e) => break Err(e),
        };
        let (answer, fds) = s.handle(call.device, call.request, fds);
        let fds: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
        let sent = encode(&Message::Reply {
            id: call.id,
            answer,
        })
        .and_then(|m| {
            seam::send(sock.as_fd(), &m, &fds).map_err(|errno| WorkerError::Send {
                pid: std::process::id(),
                errno,
            })
        });
        if let Err(e) = sent {
            break Err(format!("answering rigd: {e}"));
        }
    };
    // The devices end before their GPUs and the process (queues, then memory).
    s.memory.clear();
    s.paths.clear();
    s.backends.clear();
    out
}
