//! Starting a worker: its user (a dynamic uid leased from `[kfd] worker_uids`), its
//! socket and the emulated KFD's descriptors, from a thread that lasts as long as rigd.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};

use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};
use rig_kfd::seam;

use super::link::{Link, Worker};
use super::protocol::KERNEL_FRAME;
use super::{KernelSpec, WorkerCommand, WorkerUser, lock};

/// The uids of dynamic users that workers hold, and where the next search starts.
#[derive(Debug, Default)]
pub(super) struct Uids {
    pub(super) held: std::collections::BTreeSet<u32>,
    pub(super) next: u32,
}

/// A worker's dynamic uid, given back when its worker is reaped (the [`Link`] drops).
#[derive(Debug)]
pub(super) struct UidLease {
    pub(super) uid: u32,
    pub(super) pool: Arc<Mutex<Uids>>,
}

impl Drop for UidLease {
    fn drop(&mut self) {
        lock(&self.pool).held.remove(&self.uid);
    }
}

/// A uid of `first..=last` no worker holds and the user database does not name (a
/// systemd dynamic user, or any account, shares the range).
pub(super) fn lease_uid(
    pool: &Arc<Mutex<Uids>>,
    first: u32,
    last: u32,
) -> Result<UidLease, String> {
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

impl Worker {
    pub(super) fn spawn(cmd: &WorkerCommand, uids: &Arc<Mutex<Uids>>) -> Result<Worker, String> {
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
pub(super) type Spawn = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts `c` from a thread that lives as long as rigd. The worker's `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked it exits, not the process; requests run on tokio's
/// blocking threads, which end after 10 s idle, and would take their workers with them.
pub(super) fn spawn_from_a_lasting_thread(c: Command) -> std::io::Result<Child> {
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
