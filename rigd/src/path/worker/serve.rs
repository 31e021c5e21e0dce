//! The worker's own side: its `main`, its confinement, and the loop that answers rigd's
//! calls against KFD.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use rig_kfd::seam::{self, Kernel};
use rig_shm::{Doorbell, SharedRegion};

use super::protocol::{Answer, Call, KERNEL_FRAME, MAX_FRAME, Message, Request, decode, encode};
use super::{KernelSpec, WorkerError};
use crate::path::kfd::{KfdBackend, KfdProcess};
use crate::path::{
    Backend, Events, Owner, Path, PathMemory, QueueHandle, QueueSpec, Refusal, Stopped, Why,
};

/// The arguments rigd starts a worker with.
#[derive(Debug, clap::Parser)]
#[command(
    version,
    about = "One rig client's KFD process (started by rigd, never by hand)."
)]
pub(super) struct WorkerCli {
    /// rigd's pid: the worker ends if rigd is gone.
    #[arg(long)]
    pub(super) parent: u32,
    /// Open the machine's /dev/kfd.
    #[arg(long, conflicts_with = "emulated")]
    pub(super) host: bool,
    /// Open the emulated KFD serving this socket instead.
    #[arg(long, requires = "topology")]
    pub(super) emulated: Option<PathBuf>,
    /// The emulated KFD's topology tree.
    #[arg(long)]
    pub(super) topology: Option<PathBuf>,
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

/// The emulated KFD rigd passed on `sock`, reached through the descriptors' /proc links
/// (kept open: every KFD call connects a channel of its own).
pub(super) fn passed_kernel(sock: BorrowedFd<'_>) -> Result<KernelSpec, String> {
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
pub(super) struct Served {
    pub(super) kernel: Arc<dyn Kernel>,
    pub(super) sock: Arc<OwnedFd>,
    pub(super) process: Option<Arc<KfdProcess>>,
    pub(super) backends: HashMap<u32, KfdBackend>,
    pub(super) paths: HashMap<u64, Box<dyn Path>>,
    pub(super) memory: HashMap<(u64, u64), PathMemory>,
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
                        let interrupt = p.interrupt();
                        self.paths.insert(device, p);
                        Answer::Opened { interrupt }
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
                    Request::Word { token, offset } => {
                        none(match self.memory.get(&(device, token)) {
                            Some(m) => match path.wake_on_interrupt(m, offset) {
                                Ok(()) => Answer::Done,
                                Err(r) => Answer::Refused(r.into()),
                            },
                            None => Answer::Failed(
                                "the device's word is not in memory the path gave".into(),
                            ),
                        })
                    }
                    Request::HandScratch { address, bytes } => {
                        none(match path.hand_scratch(address, bytes) {
                            Ok(()) => Answer::Done,
                            Err(r) => Answer::Refused(r.into()),
                        })
                    }
                    Request::Clock => none(Answer::Clock(path.read_clock())),
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
            Err(e) => break Err(e.to_string()),
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
