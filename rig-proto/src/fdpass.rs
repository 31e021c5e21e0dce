//! Sending and receiving bytes with file descriptors attached (`SCM_RIGHTS`) on a Unix
//! socket (stream or `SOCK_SEQPACKET`): the only code of the tree that passes descriptors,
//! used by this crate's frames, by rigd's KFD workers and by the emulated KFD's seam.
//!
//! It owns one system call each way and turning received descriptor numbers into
//! [`OwnedFd`]s at once, so that every descriptor a peer sends is closed when dropped,
//! whatever the caller then decides. Framing, counting and limits are the caller's
//! ([`crate::frame`] for rig's protocol).
#![allow(unsafe_code)]

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The kernel's most descriptors in one message (`SCM_MAX_FD`, across all its
/// `SCM_RIGHTS`). Room for this many and for the credentials a socket with `SO_PASSCRED`
/// is given means control data is not truncated, so no received descriptor goes unseen
/// (nix walks no truncated control data, and the descriptors in it would stay open).
pub const SCM_MAX_FD: usize = 253;

/// What one `recvmsg` gave.
#[derive(Debug)]
pub struct Received {
    /// Bytes read into the buffer; 0 means the peer closed its end (on a stream socket, or
    /// a `SOCK_SEQPACKET` one whose peer sent no empty message).
    pub bytes: usize,
    /// Descriptors that came with them, close-on-exec.
    pub fds: Vec<OwnedFd>,
    /// True if the kernel truncated the control data (descriptors may have been lost).
    pub truncated: bool,
    /// True if the message was longer than the buffer (`MSG_TRUNC`, on a socket of
    /// messages: the rest is lost).
    pub cut: bool,
    /// The sender's pid, as the kernel wrote it, where the socket has `SO_PASSCRED`.
    pub sender: Option<i32>,
}

/// Receives into `buf` once. `nonblocking` adds `MSG_DONTWAIT`; `EINTR` is retried.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8], nonblocking: bool) -> io::Result<Received> {
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let mut cmsg = nix::cmsg_space!([RawFd; SCM_MAX_FD], nix::libc::ucred);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), flags) {
            Ok(m) => m,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        };
        let bytes = msg.bytes;
        let mut fds = Vec::new();
        let mut sender = None;
        // nix refuses to walk truncated control data, so descriptors that did arrive in it
        // would stay open unseen. With room for SCM_MAX_FD and credentials, truncation
        // needs a socket given other control messages too (SO_PASSSEC's label); the
        // caller then drops the connection.
        let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                match c {
                    ControlMessageOwned::ScmRights(raw) => {
                        for fd in raw {
                            // SAFETY: the kernel just installed `fd` in this process for
                            // this message (SCM_RIGHTS); nothing else knows the number, so
                            // wrapping it gives it exactly one owner, which closes it on drop.
                            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                        }
                    }
                    ControlMessageOwned::ScmCredentials(cred) => sender = Some(cred.pid()),
                    _ => {}
                }
            }
        }
        return Ok(Received {
            bytes,
            fds,
            truncated,
            cut: msg.flags.contains(MsgFlags::MSG_TRUNC),
            sender,
        });
    }
}

/// Sends `bufs` once with `fds` attached (none if empty), `MSG_NOSIGNAL` so a closed peer is
/// an `EPIPE` error and not a signal. Returns the bytes sent; `EINTR` is retried.
pub fn send(
    sock: BorrowedFd<'_>,
    bufs: &[&[u8]],
    fds: &[BorrowedFd<'_>],
    nonblocking: bool,
) -> io::Result<usize> {
    let mut flags = MsgFlags::MSG_NOSIGNAL;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // A frame is at most two buffers (header and payload): no allocation for them.
    let mut slices = [IoSlice::new(&[]); 2];
    let iov_owned: Vec<IoSlice<'_>>;
    let iov: &[IoSlice<'_>] = if bufs.len() <= slices.len() {
        for (s, b) in slices.iter_mut().zip(bufs) {
            *s = IoSlice::new(b);
        }
        &slices[..bufs.len()]
    } else {
        iov_owned = bufs.iter().map(|b| IoSlice::new(b)).collect();
        &iov_owned
    };
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), iov, cmsgs, flags, None) {
            Ok(n) => return Ok(n),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}
