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
//! [`WorkerPath`] is the [`crate::path::Path`] rigd's devices use: each call is a frame on a
//! `SOCK_SEQPACKET` socketpair (bincode, at most [`MAX_FRAME`] bytes, descriptors passed
//! with `SCM_RIGHTS`): Pinned memory's memfd and Mapped memory's dma-buf come back from the
//! worker; a host mapping's memfd, a peer's Pinned memfd and the client's doorbell page go
//! to it. The worker's KFD threads send the device's interrupts and faults back as frames,
//! which reach the device's [`crate::path::Events`]. The hardware doorbell is the worker's: its
//! forwarder thread sleeps on the client's shared doorbell word (a futex, shared across
//! processes) and stores each new value into KFD's doorbell.
//!
//! The worker's protocol is `protocol.rs`; rigd's side of it (the link, the backend and
//! path rigd's devices use) `link.rs`; starting a worker `spawn.rs`; the worker's own side
//! `serve.rs`.
//!
//! A worker that dies (or stops answering for [`REPLY_MS`], when rigd kills it) loses its
//! client's devices, each with an `Internal` fault "worker died: ..." naming how it ended;
//! other clients' workers go on. Its KFD process, queues and memory went with it, so a
//! stop of a lost device answers [`crate::path::Stopped::Stopped`] once the process is reaped.

mod link;
mod protocol;
mod serve;
mod spawn;

pub use link::{REPLY_MS, WorkerBackend, WorkerPath, Workers};
pub use protocol::MAX_FRAME;
pub use serve::{confine, main, serve};

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rig_kfd::seam::{self, Kernel};

use crate::path::{Cause, Why};

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

/// `[kfd] worker`'s default: `rig-worker` beside rigd's own executable (where packages
/// install both).
pub fn default_program() -> PathBuf {
    std::env::current_exe()
        .unwrap_or_default()
        .with_file_name("rig-worker")
}
