//! The emulation's socket: each connection is an open file of a client process.
//!
//! A connection's first message opens `/dev/kfd` (a new process), a render node, or a
//! further channel of a process the same client opened (so its threads can be in calls at
//! once, as they can in the kernel). Then each message is one call, each answer its result
//! ([`rig_kfd::seam::wire`]). The process ends when the connection that opened it closes,
//! as a KFD process ends with its file.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    /// Live processes: token -> (process, the opener's pid).
    processes: Mutex<HashMap<u64, (Arc<Process>, i32)>>,
    next: AtomicU64,
    connections: AtomicU64,
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
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // A client that went away gets no answer; its connection's EOF ends the serving.
    let _ = seam::send(sock, &msg, &raw);
}

fn fail(sock: BorrowedFd<'_>, errno: i32) {
    answer(sock, errno, wire::NO_FD_FIELD, &[], &[], &[]);
}

impl Server {
    /// A server of `kernel`.
    pub fn new(kernel: Arc<Kernel>) -> Arc<Server> {
        Arc::new(Server {
            kernel,
            processes: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            connections: AtomicU64::new(0),
        })
    }

    /// The emulated kernel.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// The processes open now.
    pub fn processes(&self) -> Vec<Arc<Process>> {
        let p = self.processes.lock().unwrap_or_else(|e| e.into_inner());
        p.values().map(|(p, _)| p.clone()).collect()
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
        let addr = socket::UnixAddr::new(path)?;
        socket::bind(sock.as_raw_fd(), &addr)?;
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

    fn serve(&self, conn: OwnedFd) {
        let sock = conn.as_fd();
        let mut buf = vec![0u8; wire::HEADER_BYTES + wire::MAX_ARGS + wire::MAX_ARRAY];
        let Ok(Some((n, _))) = seam::recv(sock, &mut buf) else {
            return;
        };
        let Some((h, _, _)) = wire::Header::decode(&buf[..n]) else {
            return fail(sock, libc::EINVAL);
        };
        let pid = socket::getsockopt(&conn, sockopt::PeerCredentials).map_or(-1, |c| c.pid());
        if h.code != wire::OP_OPEN {
            return fail(sock, libc::EINVAL);
        }
        match h.a {
            0 => {
                let process = self.kernel.open_kfd();
                let token = self.next.fetch_add(1, Ordering::Relaxed);
                self.lock().insert(token, (process.clone(), pid));
                answer(sock, 0, token, &[], &[], &[]);
                self.serve_process(sock, &process, &mut buf);
                self.lock().remove(&token);
                process.release();
            }
            1 => {
                let Ok(minor) = u32::try_from(h.b) else {
                    return fail(sock, libc::ENOENT);
                };
                match self.kernel.open_render(minor) {
                    Ok(token) => {
                        answer(sock, 0, token, &[], &[], &[]);
                        self.serve_render(sock, token, &mut buf);
                        self.kernel.close_render(token);
                    }
                    Err(e) => fail(sock, e),
                }
            }
            2 => {
                let found = self.lock().get(&h.b).cloned();
                match found {
                    Some((process, owner)) if owner == pid => {
                        answer(sock, 0, h.b, &[], &[], &[]);
                        self.serve_process(sock, &process, &mut buf);
                    }
                    Some(_) => fail(sock, libc::EPERM),
                    None => fail(sock, libc::ENODEV),
                }
            }
            _ => fail(sock, libc::EINVAL),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Arc<Process>, i32)>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn serve_process(&self, sock: BorrowedFd<'_>, process: &Arc<Process>, buf: &mut [u8]) {
        while let Ok(Some((n, mut fds))) = seam::recv(sock, buf) {
            let Some((h, args, array)) = wire::Header::decode(&buf[..n]) else {
                fail(sock, libc::EINVAL);
                continue;
            };
            match h.code {
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
                wire::OP_MMAP => match process
                    .mmap(h.a, h.b)
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
        while let Ok(Some((n, _))) = seam::recv(sock, buf) {
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
