//! The system-call seam of the amdgpu path: `open`, `ioctl`, `mmap` and the doorbell store.
//!
//! The path reaches KFD only through a [`Kernel`]. [`Host`] is the machine's kernel
//! (`/dev/kfd`, `/dev/dri/renderD*`, sysfs). [`Emulated`] is the emulated KFD
//! (`rig-kfd-emu`), a process of its own that plays the kernel: each `open` is a connection
//! to its socket, each `ioctl` sends the argument block (and the array a pointer in it names)
//! and gets back the block and the errno, each `mmap` gets back a memfd of the pages. So the
//! path's own code is the same against both; only these calls differ.
//!
//! Two things a kernel reads from the caller's memory are named explicitly ([`Extra`]): the
//! array some blocks point at (apertures, wait entries, GPU ids), which [`Host`] points the
//! block at and [`Emulated`] sends along; and a USERPTR allocation's host pages, whose
//! memfd [`Emulated`] passes while [`Host`] lets the kernel find them at the address.
//!
//! A doorbell is a store to MMIO, not a system call; [`Kernel::ring`] is the one store the
//! emulation must observe (the emulated doorbell page is rig-shm's doorbell protocol, so its
//! queue processors sleep until rung), as tinygrad's mock GPU observes doorbell stores.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nix::sys::socket::{self, UnixAddr};
use rig_shm::SharedRegion;

use crate::abi::{self, Command};
use crate::sys::{self, Errno, Mapping};

/// A device file the path opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum File {
    /// `/dev/kfd`.
    Kfd,
    /// `/dev/dri/renderD<minor>`.
    Render(u32),
}

/// What a call reads or writes besides its argument block.
#[derive(Debug)]
pub enum Extra<'a> {
    /// Nothing.
    None,
    /// The array the u64 pointer at byte `field` of the block names.
    Array {
        /// The pointer field's offset in the block.
        field: usize,
        /// The array's bytes, read and written in place.
        bytes: &'a mut [u8],
    },
    /// The host pages of a USERPTR allocation: `offset` bytes into the memfd `fd`, which the
    /// caller has mapped at the block's `mmap_offset`.
    Userptr {
        /// The memfd.
        fd: BorrowedFd<'a>,
        /// The pages' offset in it.
        offset: u64,
    },
}

/// Pages a [`Kernel::mmap`] mapped: a device mapping, or a memfd the emulation shared.
#[derive(Debug)]
pub enum Pages {
    /// A mapping of a device file.
    Device(Mapping),
    /// A memfd's pages (the emulated KFD's doorbells, events and memory).
    Shared(SharedRegion),
}

impl Pages {
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        match self {
            Pages::Device(m) => m.len(),
            Pages::Shared(r) => r.len(),
        }
    }

    /// Whether nothing is mapped (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host address of the first byte.
    pub fn addr(&self) -> u64 {
        match self {
            Pages::Device(m) => m.addr(),
            Pages::Shared(r) => r.as_ptr() as u64,
        }
    }

    /// The 64-bit word at `offset` (aligned, inside).
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        match self {
            Pages::Device(m) => m.atomic_u64(offset),
            Pages::Shared(r) => r.atomic_u64(offset),
        }
    }

    /// The 32-bit word at `offset` (aligned, inside).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        match self {
            Pages::Device(m) => m.atomic_u32(offset),
            Pages::Shared(r) => r.atomic_u32(offset),
        }
    }

    /// Copies bytes out.
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        match self {
            Pages::Device(m) => m.read(offset, buf),
            Pages::Shared(r) => r.read(offset, buf),
        }
    }

    /// Copies bytes in.
    pub fn write(&self, offset: usize, data: &[u8]) {
        match self {
            Pages::Device(m) => m.write(offset, data),
            Pages::Shared(r) => r.write(offset, data),
        }
    }
}

/// The system calls the amdgpu path makes.
pub trait Kernel: Send + Sync + fmt::Debug {
    /// Opens a device file.
    fn open(&self, file: File) -> Result<OwnedFd, Errno>;

    /// `ioctl(fd, request, args)`; `args` is exactly the request's block.
    fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        args: &mut [u8],
        extra: Extra<'_>,
    ) -> Result<(), Errno>;

    /// Maps `len` bytes at `offset` of `fd`, shared and writable.
    fn mmap(&self, fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Pages, Errno>;

    /// Stores `value` into the 64-bit doorbell at `offset` of `doorbells`.
    fn ring(&self, doorbells: &Pages, offset: usize, value: u64);

    /// The KFD topology's root directory.
    fn topology(&self) -> &Path;
}

/// Calls the ioctl of block type `C` with `args` (a typed convenience over [`Kernel::ioctl`]).
pub fn call<C: Command>(
    kernel: &dyn Kernel,
    fd: BorrowedFd<'_>,
    args: &mut C,
    extra: Extra<'_>,
) -> Result<(), Errno> {
    kernel.ioctl(fd, C::IOCTL.request(), args.as_mut_bytes(), extra)
}

/// The machine's kernel.
#[derive(Debug)]
pub struct Host {
    dev: PathBuf,
    topology: PathBuf,
}

impl Host {
    /// The kernel with `/dev` and the sysfs topology at their usual places.
    pub fn new() -> Host {
        Host {
            dev: PathBuf::from("/dev"),
            topology: PathBuf::from(crate::topology::SYSFS_ROOT),
        }
    }

    /// Whether `/dev/kfd` exists.
    pub fn present(&self) -> bool {
        self.dev.join("kfd").exists()
    }
}

impl Default for Host {
    fn default() -> Host {
        Host::new()
    }
}

impl Kernel for Host {
    fn open(&self, file: File) -> Result<OwnedFd, Errno> {
        let path = match file {
            File::Kfd => self.dev.join("kfd"),
            File::Render(minor) => self.dev.join(format!("dri/renderD{minor}")),
        };
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map(OwnedFd::from)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))
    }

    fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        args: &mut [u8],
        extra: Extra<'_>,
    ) -> Result<(), Errno> {
        if let Extra::Array { field, bytes } = extra {
            let slot = args.get_mut(field..field + 8).ok_or(Errno(libc::EINVAL))?;
            slot.copy_from_slice(&(bytes.as_mut_ptr() as u64).to_ne_bytes());
            // The kernel writes the array through the pointer while `bytes` is borrowed.
            return sys::ioctl(fd, request, args).map(drop);
        }
        sys::ioctl(fd, request, args).map(drop)
    }

    fn mmap(&self, fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Pages, Errno> {
        Mapping::map(fd, offset, len, true).map(Pages::Device)
    }

    fn ring(&self, doorbells: &Pages, offset: usize, value: u64) {
        doorbells.atomic_u64(offset).store(value, Ordering::Release);
    }

    fn topology(&self) -> &Path {
        &self.topology
    }
}

/// The emulated KFD's wire format: one `SOCK_SEQPACKET` message per call and per answer.
pub mod wire {
    /// Bytes of a request's or an answer's header.
    pub const HEADER_BYTES: usize = 32;
    /// The most bytes of an argument block.
    pub const MAX_ARGS: usize = 4096;
    /// The most bytes of an array a block names.
    pub const MAX_ARRAY: usize = 64 * 1024;
    /// A request: open a file (`a`: 0 for KFD, 1 for a render node; `b`: its minor).
    pub const OP_OPEN: u32 = 1;
    /// A request: an ioctl (`a`: the request number; `b`: a USERPTR's offset in the fd sent).
    pub const OP_IOCTL: u32 = 2;
    /// A request: an mmap (`a`: the offset; `b`: the length).
    pub const OP_MMAP: u32 = 3;
    /// In an answer's `value`: no fd number to write into the block.
    pub const NO_FD_FIELD: u64 = u64::MAX;

    /// A request's or an answer's header.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct Header {
        /// `OP_*` in a request; the errno (0: success) in an answer.
        pub code: u32,
        /// Bytes of the block that follows.
        pub args_len: u32,
        /// Bytes of the array after it.
        pub array_len: u32,
        /// Reserved, zero.
        pub pad: u32,
        /// First operand; in an answer, the value (a token, an fd field's offset).
        pub a: u64,
        /// Second operand.
        pub b: u64,
    }

    impl Header {
        /// Its bytes.
        pub fn encode(&self) -> [u8; HEADER_BYTES] {
            let mut out = [0u8; HEADER_BYTES];
            out[0..4].copy_from_slice(&self.code.to_le_bytes());
            out[4..8].copy_from_slice(&self.args_len.to_le_bytes());
            out[8..12].copy_from_slice(&self.array_len.to_le_bytes());
            out[12..16].copy_from_slice(&self.pad.to_le_bytes());
            out[16..24].copy_from_slice(&self.a.to_le_bytes());
            out[24..32].copy_from_slice(&self.b.to_le_bytes());
            out
        }

        /// A header and the block and array after it, if the message is well formed and
        /// within [`MAX_ARGS`] and [`MAX_ARRAY`].
        pub fn decode(msg: &[u8]) -> Option<(Header, &[u8], &[u8])> {
            let word = |at: usize| u32::from_le_bytes(msg[at..at + 4].try_into().unwrap_or([0; 4]));
            let long = |at: usize| u64::from_le_bytes(msg[at..at + 8].try_into().unwrap_or([0; 8]));
            if msg.len() < HEADER_BYTES {
                return None;
            }
            let h = Header {
                code: word(0),
                args_len: word(4),
                array_len: word(8),
                pad: word(12),
                a: long(16),
                b: long(24),
            };
            let args = h.args_len as usize;
            let array = h.array_len as usize;
            if args > MAX_ARGS || array > MAX_ARRAY || msg.len() != HEADER_BYTES + args + array {
                return None;
            }
            let body = &msg[HEADER_BYTES..];
            Some((h, &body[..args], &body[args..]))
        }
    }
}

/// Sends one message with `fds` attached (through rig-proto's descriptor passing, the
/// tree's one).
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), Errno> {
    rig_proto::fdpass::send(sock, &[msg], fds, false)
        .map(drop)
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Receives one message of at most `buf.len()` bytes and the fds attached; `Ok(None)` when
/// the peer closed. A message longer than `buf`, or whose control data the kernel cut, is
/// `EMSGSIZE`, and the descriptors that came with it are closed.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Option<(usize, Vec<OwnedFd>)>, Errno> {
    let got = rig_proto::fdpass::recv(sock, buf, false)
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    if got.cut || got.truncated {
        return Err(Errno(libc::EMSGSIZE));
    }
    if got.bytes == 0 {
        return Ok(None);
    }
    Ok(Some((got.bytes, got.fds)))
}

/// The emulated KFD (`rig-kfd-emu`), reached through its socket.
#[derive(Debug)]
pub struct Emulated {
    socket: PathBuf,
    topology: PathBuf,
    /// Render-node fds this process opened, to their tokens in the emulation: the kernel's
    /// own fd table, which resolves ACQUIRE_VM's `drm_fd`.
    renders: Mutex<HashMap<RawFd, u64>>,
    /// KFD fds this process opened, to their process's token and idle channels: each call
    /// takes a channel of its own, so threads can be in calls at once (a wait and a
    /// queue's creation), as they can in the kernel.
    channels: Mutex<HashMap<RawFd, (u64, Vec<OwnedFd>)>>,
}

impl Emulated {
    /// The emulation serving `socket`, whose topology tree is `topology`.
    pub fn new(socket: impl Into<PathBuf>, topology: impl Into<PathBuf>) -> Emulated {
        Emulated {
            socket: socket.into(),
            topology: topology.into(),
            renders: Mutex::new(HashMap::new()),
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn connect(&self, a: u64, b: u64) -> Result<(OwnedFd, u64), Errno> {
        let sock = socket::socket(
            socket::AddressFamily::Unix,
            socket::SockType::SeqPacket,
            socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|e| Errno(e as i32))?;
        let addr = UnixAddr::new(&self.socket).map_err(|e| Errno(e as i32))?;
        // An emulation that is not running is a machine without the device.
        // A socket the caller may not write is the device's EACCES.
        socket::connect(sock.as_raw_fd(), &addr).map_err(|e| match e {
            nix::errno::Errno::EACCES => Errno(libc::EACCES),
            _ => Errno(libc::ENOENT),
        })?;
        let head = wire::Header {
            code: wire::OP_OPEN,
            a,
            b,
            ..Default::default()
        };
        let (h, _, _) = self.exchange(sock.as_fd(), head, &[], &[], &[])?;
        Ok((sock, h.a))
    }

    /// Runs `f` on a channel of the KFD file `fd` (or on `fd` itself for a render node).
    fn on_channel<T>(
        &self,
        fd: BorrowedFd<'_>,
        f: impl FnOnce(BorrowedFd<'_>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let taken = {
            let mut ch = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            ch.get_mut(&fd.as_raw_fd())
                .map(|(token, idle)| (*token, idle.pop()))
        };
        let Some((token, idle)) = taken else {
            return f(fd);
        };
        let channel = match idle {
            Some(c) => c,
            None => self.connect(2, token)?.0,
        };
        let out = f(channel.as_fd());
        if let Some((t, idle)) = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&fd.as_raw_fd())
            && *t == token
        {
            idle.push(channel);
        }
        out
    }

    fn exchange(
        &self,
        sock: BorrowedFd<'_>,
        head: wire::Header,
        args: &[u8],
        array: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Result<(wire::Header, Vec<u8>, Vec<OwnedFd>), Errno> {
        let mut msg = Vec::with_capacity(wire::HEADER_BYTES + args.len() + array.len());
        msg.extend_from_slice(&head.encode());
        msg.extend_from_slice(args);
        msg.extend_from_slice(array);
        send(sock, &msg, fds)?;
        let mut buf = vec![0u8; wire::HEADER_BYTES + wire::MAX_ARGS + wire::MAX_ARRAY];
        // A closed emulation is a device that went away.
        let (n, fds) = recv(sock, &mut buf)?.ok_or(Errno(libc::ENODEV))?;
        buf.truncate(n);
        let (h, _, _) = wire::Header::decode(&buf).ok_or(Errno(libc::EIO))?;
        if h.code != 0 {
            return Err(Errno(i32::try_from(h.code).unwrap_or(libc::EIO)));
        }
        Ok((h, buf, fds))
    }
}

impl Kernel for Emulated {
    fn open(&self, file: File) -> Result<OwnedFd, Errno> {
        let (a, b) = match file {
            File::Kfd => (0, 0),
            File::Render(minor) => (1, u64::from(minor)),
        };
        let (sock, token) = self.connect(a, b)?;
        match file {
            File::Render(_) => {
                self.renders
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(sock.as_raw_fd(), token);
            }
            File::Kfd => {
                self.channels
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(sock.as_raw_fd(), (token, Vec::new()));
            }
        }
        Ok(sock)
    }

    fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        args: &mut [u8],
        extra: Extra<'_>,
    ) -> Result<(), Errno> {
        let mut sent = args.to_vec();
        if request == abi::ACQUIRE_VM.request() && sent.len() >= 4 {
            let raw = RawFd::from_ne_bytes(sent[0..4].try_into().unwrap_or([0xff; 4]));
            let token = self
                .renders
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&raw)
                .map_or(u32::MAX, |t| u32::try_from(*t).unwrap_or(u32::MAX));
            sent[0..4].copy_from_slice(&token.to_ne_bytes());
        }
        let mut head = wire::Header {
            code: wire::OP_IOCTL,
            a: request,
            args_len: u32::try_from(sent.len()).map_err(|_| Errno(libc::EINVAL))?,
            ..Default::default()
        };
        let (array, fds): (&mut [u8], Vec<BorrowedFd<'_>>) = match extra {
            Extra::None => (&mut [], Vec::new()),
            Extra::Array { bytes, .. } => (bytes, Vec::new()),
            Extra::Userptr { fd, offset } => {
                head.b = offset;
                (&mut [], vec![fd])
            }
        };
        head.array_len = u32::try_from(array.len()).map_err(|_| Errno(libc::EINVAL))?;
        let (h, buf, mut got) =
            self.on_channel(fd, |ch| self.exchange(ch, head, &sent, array, &fds))?;
        let (_, back, back_array) = wire::Header::decode(&buf).ok_or(Errno(libc::EIO))?;
        if back.len() != args.len() || back_array.len() != array.len() {
            return Err(Errno(libc::EIO));
        }
        // The block as the kernel left it; ACQUIRE_VM's drm_fd stays the caller's.
        let keep = if request == abi::ACQUIRE_VM.request() {
            4
        } else {
            0
        };
        args[keep..].copy_from_slice(&back[keep..]);
        array.copy_from_slice(back_array);
        if h.a != wire::NO_FD_FIELD {
            let at = usize::try_from(h.a).map_err(|_| Errno(libc::EIO))?;
            let new = got.pop().ok_or(Errno(libc::EIO))?;
            let slot = args.get_mut(at..at + 4).ok_or(Errno(libc::EIO))?;
            slot.copy_from_slice(&sys::install_fd(new).to_ne_bytes());
        }
        Ok(())
    }

    fn mmap(&self, fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<Pages, Errno> {
        let head = wire::Header {
            code: wire::OP_MMAP,
            a: offset,
            b: len as u64,
            ..Default::default()
        };
        let (h, _, mut fds) = self.on_channel(fd, |ch| self.exchange(ch, head, &[], &[], &[]))?;
        let memfd = fds.pop().ok_or(Errno(libc::EIO))?;
        let region = SharedRegion::from_fd(memfd).map_err(|_| Errno(libc::ENOMEM))?;
        // The answer's value is where in the memfd the mapped range starts; the emulation
        // sends memfds of exactly the object asked for.
        if h.a != 0 || region.len() != len {
            return Err(Errno(libc::EINVAL));
        }
        Ok(Pages::Shared(region))
    }

    fn ring(&self, doorbells: &Pages, offset: usize, value: u64) {
        match doorbells {
            Pages::Shared(region) => match rig_shm::Doorbell::new(region.clone(), offset) {
                Ok(bell) => bell.ring(value),
                Err(_) => doorbells.atomic_u64(offset).store(value, Ordering::Release),
            },
            Pages::Device(_) => doorbells.atomic_u64(offset).store(value, Ordering::Release),
        }
    }

    fn topology(&self) -> &Path {
        &self.topology
    }
}

impl Drop for Emulated {
    fn drop(&mut self) {
        self.renders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
