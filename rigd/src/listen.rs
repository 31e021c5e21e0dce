//! The control socket: binding it safely, its owner and mode, and removing it at exit.
//!
//! rigd refuses to start while another rigd answers on the socket: it connects first and
//! removes a socket file only when nothing answers (a stale file left by a crash). It never
//! removes a path that is not a socket. It also reads an accepted connection's
//! supplementary groups from the socket itself ([`peer_groups`]). This module does not serve
//! connections.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Errors of taking the socket.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Another process answers on the socket.
    #[error(
        "another rigd is already serving {0}; stop it first (systemctl stop rigd) or give this one another --socket"
    )]
    InUse(PathBuf),
    /// The path exists and is not a socket.
    #[error("{0} exists and is not a socket; remove it or choose another --socket")]
    NotASocket(PathBuf),
    /// The socket's directory could not be made.
    #[error("cannot create the socket directory {path}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// bind(2) failed.
    #[error("cannot bind the socket {path}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The configured group does not exist.
    #[error(
        "the socket group {0:?} does not exist; create it (systemd-sysusers) or change daemon.group"
    )]
    NoGroup(String),
    /// chown or chmod failed.
    #[error("cannot set the owner or mode of {path}")]
    Permissions {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Removes the socket file when dropped, if it is still the one this rigd bound.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    ino: u64,
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // A newer rigd may have replaced a file we thought stale; remove only our own.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds the control socket at `path` with group `group` (name or gid) and mode `mode`.
///
/// Must run inside a tokio runtime.
pub fn bind(
    path: &Path,
    group: Option<&str>,
    mode: u32,
) -> Result<(tokio::net::UnixListener, SocketFile), ListenError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => return Err(ListenError::NotASocket(path.into())),
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(ListenError::InUse(path.into())),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::warn!(socket = %path.display(), "removing a stale socket nothing answers on");
                let _ = std::fs::remove_file(path);
            }
            // Permission denied and the like: leave the file alone and let bind report it.
            Err(_) => {}
        },
        Err(_) => {}
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ListenError::Directory {
            path: dir.into(),
            source,
        })?;
    }
    let gid = match group {
        Some(g) => {
            Some(crate::config::resolve_group(g).ok_or_else(|| ListenError::NoGroup(g.into()))?)
        }
        None => None,
    };
    let listener = tokio::net::UnixListener::bind(path).map_err(|source| ListenError::Bind {
        path: path.into(),
        source,
    })?;
    let perm = |source| ListenError::Permissions {
        path: path.into(),
        source,
    };
    let ino = std::fs::symlink_metadata(path).map_err(perm)?.ino();
    let file = SocketFile {
        path: path.into(),
        ino,
    };
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(perm)?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(perm)?;
    Ok((listener, file))
}

/// The listening socket systemd passed (socket activation), if any: `LISTEN_PID` names this
/// process and `LISTEN_FDS` is 1 (read by `sd-notify`), so descriptor 3 is the listening
/// socket that systemd owns (rigd must not remove its file). Anything but one listening
/// AF_UNIX stream socket is an error: rigd would otherwise serve nothing while systemd
/// queues clients on a socket nobody accepts.
pub fn from_systemd() -> Result<Option<std::os::unix::net::UnixListener>, ActivationError> {
    use std::os::fd::FromRawFd;
    let mut fds = sd_notify::listen_fds().map_err(ActivationError::Environment)?;
    let n = fds.len();
    let Some(fd) = fds.next() else {
        return Ok(None);
    };
    if n != 1 {
        return Err(ActivationError::Count(n));
    }
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    // SAFETY: borrowed only for the two checks below; `fd` is the descriptor systemd passed
    // (sd_listen_fds(3)), open for this process's life.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let unix = nix::sys::socket::getsockname::<nix::sys::socket::UnixAddr>(fd).is_ok();
    let stream = getsockopt(&borrowed, sockopt::SockType).is_ok_and(|t| t == SockType::Stream);
    let listening = getsockopt(&borrowed, sockopt::AcceptConn).unwrap_or(false);
    if !(unix && stream && listening) {
        return Err(ActivationError::NotAUnixListener);
    }
    // SAFETY: systemd's socket-activation contract (sd_listen_fds(3)) gives this process
    // descriptor `fd` as its listening socket when LISTEN_PID is our pid, checked by
    // `listen_fds`; nothing else in rigd opens or owns it before this runs at start-up, so
    // the new owner is its only one.
    let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
    Ok(Some(listener))
}

/// Errors of taking the socket systemd passed.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// `LISTEN_PID` or `LISTEN_FDS` is malformed.
    #[error("the socket-activation environment (LISTEN_PID, LISTEN_FDS) is malformed")]
    Environment(#[source] io::Error),
    /// More than one descriptor was passed.
    #[error("systemd passed {0} sockets; rigd serves one: give rigd.socket a single ListenStream=")]
    Count(usize),
    /// The descriptor is not what rigd serves.
    #[error(
        "the socket systemd passed is not a listening unix stream socket; give rigd.socket a ListenStream= path"
    )]
    NotAUnixListener,
}

/// The path `listener` is bound to, as the kernel says: the one clients reach, whoever bound
/// it. `None` for an unnamed or abstract socket.
pub fn served_path(listener: &tokio::net::UnixListener) -> Option<PathBuf> {
    listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
}

/// Sets how many connections may wait in the kernel's queue for rigd to accept them
/// (`listen(2)` again on the listening socket, which Linux allows). rigd accepts at once,
/// so the queue only fills under a storm of connects; the shorter it is, the sooner a
/// client that connects behind a storm is reached (each queued connection costs the accept
/// loop some microseconds). A client past it waits in `connect(2)`, in turn.
pub fn set_backlog(listener: &tokio::net::UnixListener, backlog: u32) -> io::Result<()> {
    let n = i32::try_from(backlog).unwrap_or(i32::MAX);
    let backlog = nix::sys::socket::Backlog::new(n).map_err(io::Error::from)?;
    nix::sys::socket::listen(listener, backlog).map_err(io::Error::from)
}

/// The supplementary groups of the process that connected `socket`, as the kernel recorded
/// them at `connect(2)` (`SO_PEERGROUPS`, Linux 4.13), like `SO_PEERCRED`'s uid and gid. Not
/// read from `/proc/<pid>`: the pid may since belong to another process.
pub fn peer_groups(socket: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = libc::socklen_t::try_from(groups.len() * size_of::<libc::gid_t>())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `groups` is a live buffer of `len` bytes that the kernel fills with gid_t
        // values (plain integers) and `len` a valid socklen_t it updates; `socket` is a
        // descriptor borrowed for the call.
        let r = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        // ERANGE: the buffer was short; `len` says how much is needed.
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn live_stale_and_foreign_files() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("sub/rigd.sock");
        let (l, f) = bind(&p, None, 0o660).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A live socket is refused.
        assert!(matches!(bind(&p, None, 0o660), Err(ListenError::InUse(_))));
        // A stale one (listener gone, file left) is replaced.
        drop(l);
        std::mem::forget(f);
        let (_l2, f2) = bind(&p, None, 0o600).unwrap();
        drop(f2);
        assert!(!p.exists(), "the socket is removed at drop");
        // A regular file is never removed.
        std::fs::write(&p, "x").unwrap();
        assert!(matches!(
            bind(&p, None, 0o660),
            Err(ListenError::NotASocket(_))
        ));
        assert!(p.exists());
        // A group by number: the socket is chowned to it.
        std::fs::remove_file(&p).unwrap();
        let gid = nix::unistd::getegid().as_raw();
        let (_l3, f3) = bind(&p, Some(&gid.to_string()), 0o640).unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.gid(), m.permissions().mode() & 0o777), (gid, 0o640));
        drop(f3);
        std::fs::write(&p, "x").unwrap();
        // A missing group is named.
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(
            bind(&p, Some("no-such-group-rig"), 0o660),
            Err(ListenError::NoGroup(_))
        ));
    }

    #[test]
    fn peer_groups_are_the_connecting_process_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsFd;
        let mut got = peer_groups(a.as_fd()).unwrap();
        let mut want: Vec<u32> = nix::unistd::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        got.sort_unstable();
        want.sort_unstable();
        want.dedup();
        got.dedup();
        assert_eq!(got, want);
    }
}
