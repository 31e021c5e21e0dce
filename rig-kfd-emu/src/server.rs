//! The emulation's socket: each connection is an open file of a client process, and each
//! client process (the kernel's word for it: the pid the socket's credentials carry) is one
//! KFD process.
//!
//! A connection's first message opens `/dev/kfd`, a render node, or a further channel of a
//! KFD file the client opened (so its threads can be in calls at once, as they can in the
//! kernel). Then each message is one call, each answer its result ([`rig_kfd::seam::wire`]).
//!
//! The kernel's rules (`kfd_chardev.c`, `kfd_process.c`), which this module holds the
//! emulation to:
//!
//! - `kfd_open` finds the caller's KFD process by its address space (`current->mm`) or makes
//!   one: every open of `/dev/kfd` by one process reaches the same KFD process. Here the
//!   caller is the sender's pid, which the socket layer writes into every message
//!   (`SO_PASSCRED`), not anything the caller says.
//! - `kfd_ioctl` answers EBADF to a caller other than the process that opened the file (a
//!   forked child using an inherited descriptor); `kfd_mmap` maps the caller's own process's
//!   pages (EINVAL if it has none), whatever file it names.
//! - `kfd_ioctl_acquire_vm` resolves `drm_fd` in the caller's own file table (`fget`): a
//!   render node opened here belongs to the client process that opened it, and another
//!   process's ACQUIRE_VM naming its token gets EINVAL, as a descriptor it does not hold
//!   does. An mmap of a render node goes through the render file the caller sends it on (a
//!   connection it holds), never through a token it names: DRM checks the file.
//! - The KFD process ends with the address space, not with the file: when the process
//!   exits (a pidfd, readable at exit), its queues are destroyed; its memory and events go
//!   once no file of it is open either (the kernel's last reference). A process that closes
//!   its files and lives on keeps its KFD process, and its next open finds it again.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::sys::socket::{self, sockopt};
use rig_kfd::seam::{self, wire};
use rig_shm::SharedRegion;

use crate::kernel::{Kernel, Process};

/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 1024;

/// The emulation's server.
#[derive(Debug)]
pub struct Server {
    kernel: Arc<Kernel>,
    table: Mutex<Table>,
    next: AtomicU64,
    connections: AtomicU64,
}

/// KFD processes: the kernel's table (by address space; here by pid) and every process
/// whose memory or events are not yet released.
#[derive(Debug, Default)]
struct Table {
    /// Live client processes to their KFD process's token.
    by_pid: HashMap<i32, u64>,
    /// Token to KFD process.
    processes: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    process: Arc<Process>,
    /// The client process that made it.
    pid: i32,
    /// Its open `/dev/kfd` files.
    files: usize,
    /// Whether the client process exited (its address space is gone).
    exited: bool,
}

/// One message received: its length, the descriptors it carried and the sender's pid, as
/// the kernel wrote it (0 if none came).
type Received = (usize, Vec<OwnedFd>, i32);

/// Receives one message with its sender's credentials; `Ok(None)` when the peer closed. A
/// message longer than `buf`, or whose control data the kernel cut, is `EMSGSIZE` (its
/// descriptors closed).
fn recv_from(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Option<Received>, nix::Error> {
    let got = rig_proto::fdpass::recv(sock, buf, false)
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    if got.cut || got.truncated {
        return Err(nix::errno::Errno::EMSGSIZE);
    }
    if got.bytes == 0 {
        return Ok(None);
    }
    Ok(Some((got.bytes, got.fds, got.sender.unwrap_or(0))))
}

fn answer(sock: BorrowedFd<'_>, code: i32, a: u64, args: &[u8], array: &[u8], fds: &[OwnedFd]) {
    let head = wire::Header {
        code: code as u32,
        args_len: args.len() as u32,
        array_len: array.len() as u32,
        a,
        ..Default::default()
    };
    let mut msg = head.encode().to_vec();
    msg.extend_from_slice(args);
    msg.extend_from_slice(array);
    let fds: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    // A client that went away gets no answer; its connection's EOF ends the serving.
    let _ = seam::send(sock, &msg, &fds);
}

fn fail(sock: BorrowedFd<'_>, errno: i32) {
    answer(sock, errno, wire::NO_FD_FIELD, &[], &[], &[]);
}

impl Server {
    /// A server of `kernel`.
    pub fn new(kernel: Arc<Kernel>) -> Arc<Server> {
        Arc::new(Server {
            kernel,
            table: Mutex::new(Table::default()),
            next: AtomicU64::new(1),
            connections: AtomicU64::new(0),
        })
    }

    /// The emulated kernel.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// The KFD processes that hold anything: every live client process's, and an exited
    /// one's until its last file closes.
    pub fn processes(&self) -> Vec<Arc<Process>> {
        let t = self.lock();
        t.processes.values().map(|e| e.process.clone()).collect()
    }

    /// Binds `path` and serves it on a thread of its own until the process exits.
    pub fn listen(self: &Arc<Self>, path: &Path) -> std::io::Result<std::thread::JoinHandle<()>> {
        let _ = std::fs::remove_file(path);
        let sock = socket::socket(
            socket::AddressFamily::Unix,
            socket::SockType::SeqPacket,
            socket::SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        // Every message then carries its sender's pid, written by the kernel; accepted
        // sockets inherit it, and a message sent before the accept carries it too.
        socket::setsockopt(&sock, sockopt::PassCred, &true)?;
        let addr = socket::UnixAddr::new(path)?;
        socket::bind(sock.as_raw_fd(), &addr)?;
        // Any process may open it, as /dev/kfd where udev makes it 0666: who reaches it is
        // its directory's say (rigd passes its workers, which run as other users, an
        // O_PATH descriptor of it).
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
        socket::listen(
            &sock,
            socket::Backlog::new(64).unwrap_or(socket::Backlog::MAXCONN),
        )?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("kfd-emu-accept".into())
            .spawn(move || me.accept_loop(sock))
    }

    fn accept_loop(self: Arc<Self>, listener: OwnedFd) {
        loop {
            let raw = match socket::accept4(listener.as_raw_fd(), socket::SockFlag::SOCK_CLOEXEC) {
                Ok(fd) => fd,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "accept failed; the emulation stops serving");
                    return;
                }
            };
            let conn = rig_kfd::sys::own_received_fd(raw);
            if self.connections.load(Ordering::Relaxed) >= MAX_CONNECTIONS as u64 {
                tracing::warn!(
                    limit = MAX_CONNECTIONS,
                    "refusing a connection past the limit"
                );
                continue;
            }
            self.connections.fetch_add(1, Ordering::Relaxed);
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("kfd-emu-conn".into())
                .spawn(move || {
                    me.serve(conn);
                    me.connections.fetch_sub(1, Ordering::Relaxed);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no thread for a connection");
                self.connections.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn serve(self: &Arc<Self>, conn: OwnedFd) {
        let sock = conn.as_fd();
        if socket::setsockopt(&conn, sockopt::PassCred, &true).is_err() {
            return;
        }
        let mut buf = vec![0u8; wire::HEADER_BYTES + wire::MAX_ARGS + wire::MAX_ARRAY];
        let Ok(Some((n, _, pid))) = recv_from(sock, &mut buf) else {
            return;
        };
        let Some((h, _, _)) = wire::Header::decode(&buf[..n]) else {
            return fail(sock, libc::EINVAL);
        };
        if h.code != wire::OP_OPEN {
            return fail(sock, libc::EINVAL);
        }
        match h.a {
            0 => match self.open_kfd(pid) {
                Ok((token, process)) => {
                    answer(sock, 0, token, &[], &[], &[]);
                    self.serve_process(sock, token, &process, &mut buf);
                    self.closed(token);
                }
                Err(e) => fail(sock, e),
            },
            1 => {
                let Ok(minor) = u32::try_from(h.b) else {
                    return fail(sock, libc::ENOENT);
                };
                if pid <= 0 {
                    // No credentials: a caller whose file table the emulation cannot name.
                    return fail(sock, libc::EPERM);
                }
                match self.kernel.open_render(minor, pid) {
                    Ok(token) => {
                        answer(sock, 0, token, &[], &[], &[]);
                        self.serve_render(sock, token, &mut buf);
                        self.kernel.close_render(token);
                    }
                    Err(e) => fail(sock, e),
                }
            }
            2 => {
                // A channel is the emulation's, not the kernel's: it is the file it names,
                // and each call on it is checked as a call on that file.
                let found = self.lock().processes.get(&h.b).map(|e| e.process.clone());
                match found {
                    Some(process) => {
                        answer(sock, 0, h.b, &[], &[], &[]);
                        self.serve_process(sock, h.b, &process, &mut buf);
                    }
                    None => fail(sock, libc::EBADF),
                }
            }
            _ => fail(sock, libc::EINVAL),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `kfd_open` by client process `pid`: its KFD process (found or made) and token.
    fn open_kfd(self: &Arc<Self>, pid: i32) -> Result<(u64, Arc<Process>), i32> {
        if pid <= 0 {
            // No credentials: a sender the emulation cannot name.
            return Err(libc::EPERM);
        }
        let mut t = self.lock();
        if let Some(token) = t.by_pid.get(&pid).copied()
            && let Some(e) = t.processes.get_mut(&token)
        {
            e.files += 1;
            return Ok((token, e.process.clone()));
        }
        // Watches the process's exit, as the kernel's MMU notifier sees its mm go.
        let pidfd = rustix::process::Pid::from_raw(pid)
            .ok_or(libc::EPERM)
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                    .map_err(|e| e.raw_os_error())
            })?;
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let me = self.clone();
        std::thread::Builder::new()
            .name("kfd-emu-exit".into())
            .spawn(move || {
                let mut fds = [nix::poll::PollFd::new(
                    pidfd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                while let Err(nix::errno::Errno::EINTR) =
                    nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE)
                {}
                me.exited(token);
            })
            .map_err(|_| libc::ENOMEM)?;
        let process = self.kernel.open_kfd(pid);
        t.by_pid.insert(pid, token);
        t.processes.insert(
            token,
            Entry {
                process: process.clone(),
                pid,
                files: 1,
                exited: false,
            },
        );
        Ok((token, process))
    }

    /// The client process of `token` exited: its queues go now (`kfd_process_notifier_release`),
    /// the rest once its files are closed.
    fn exited(&self, token: u64) {
        let mut t = self.lock();
        let Some(e) = t.processes.get_mut(&token) else {
            return;
        };
        e.exited = true;
        let (pid, process, files) = (e.pid, e.process.clone(), e.files);
        if t.by_pid.get(&pid) == Some(&token) {
            t.by_pid.remove(&pid);
        }
        process.end_queues();
        if files == 0 {
            // Released before it leaves the table: a process listed holds what it says.
            process.release();
            t.processes.remove(&token);
        }
    }

    /// A `/dev/kfd` file of `token` closed.
    fn closed(&self, token: u64) {
        let mut t = self.lock();
        let Some(e) = t.processes.get_mut(&token) else {
            return;
        };
        e.files = e.files.saturating_sub(1);
        if !(e.exited && e.files == 0) {
            return;
        }
        e.process.release();
        t.processes.remove(&token);
    }

    /// The KFD process of client process `pid`, if it has one.
    fn process_of(&self, pid: i32) -> Option<Arc<Process>> {
        let t = self.lock();
        let token = t.by_pid.get(&pid)?;
        t.processes.get(token).map(|e| e.process.clone())
    }

    fn serve_process(
        &self,
        sock: BorrowedFd<'_>,
        token: u64,
        process: &Arc<Process>,
        buf: &mut [u8],
    ) {
        let owner = self.lock().processes.get(&token).map_or(0, |e| e.pid);
        while let Ok(Some((n, mut fds, pid))) = recv_from(sock, buf) {
            let Some((h, args, array)) = wire::Header::decode(&buf[..n]) else {
                fail(sock, libc::EINVAL);
                continue;
            };
            match h.code {
                // The kernel's `kfd_ioctl`: "Using KFD FD in wrong process".
                wire::OP_IOCTL if pid != owner => fail(sock, libc::EBADF),
                wire::OP_IOCTL => {
                    let mut args = args.to_vec();
                    let mut array = array.to_vec();
                    let userptr = match fds.pop() {
                        Some(fd) => match SharedRegion::from_fd(fd) {
                            Ok(region) => Some((region, h.b)),
                            Err(_) => {
                                fail(sock, libc::EFAULT);
                                continue;
                            }
                        },
                        None => None,
                    };
                    match process.ioctl(h.a, &mut args, &mut array, userptr) {
                        Ok(None) => answer(sock, 0, wire::NO_FD_FIELD, &args, &array, &[]),
                        Ok(Some(new)) => match new.region.dup_fd() {
                            Ok(fd) => answer(sock, 0, new.field as u64, &args, &array, &[fd]),
                            Err(_) => fail(sock, libc::EMFILE),
                        },
                        Err(e) => fail(sock, e),
                    }
                }
                // `kfd_mmap` maps the caller's own process's pages.
                wire::OP_MMAP => match if pid == owner {
                    Some(process.clone())
                } else {
                    self.process_of(pid)
                }
                .ok_or(libc::EINVAL)
                .and_then(|p| p.mmap(h.a, h.b))
                .and_then(|r| r.dup_fd().map_err(|_| libc::EMFILE))
                {
                    Ok(fd) => answer(sock, 0, 0, &[], &[], &[fd]),
                    Err(e) => fail(sock, e),
                },
                _ => fail(sock, libc::EINVAL),
            }
        }
    }

    fn serve_render(&self, sock: BorrowedFd<'_>, token: u64, buf: &mut [u8]) {
        while let Ok(Some((n, _, _))) = recv_from(sock, buf) {
            let Some((h, _, _)) = wire::Header::decode(&buf[..n]) else {
                fail(sock, libc::EINVAL);
                continue;
            };
            match h.code {
                wire::OP_MMAP => match self
                    .kernel
                    .mmap_render(token, h.a, h.b)
                    .and_then(|r| r.dup_fd().map_err(|_| libc::EMFILE))
                {
                    Ok(fd) => answer(sock, 0, 0, &[], &[], &[fd]),
                    Err(e) => fail(sock, e),
                },
                // A render node's own ioctls are amdgpu's, which the path does not make.
                _ => fail(sock, libc::ENOTTY),
            }
        }
    }
}
