//! Control calls to rigd: the connection ([`Rig`]), the mapping of the descriptors an
//! answer carries ([`Maps`]), and the requests a device makes of rigd: memory, images,
//! kernels, growth of its rings, status, stop and close.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rig_proto::{
    Connection, Fault, FaultKind, GpuShare, ImageId, RegionId, Request, Response, Share,
};
use rig_shm::SharedRegion;

use super::{Device, DeviceShared};
use crate::buffer::{Buffer, BufferInner, HostView, Sub};
use crate::error::{Error, Report, Result};
use crate::facts::GpuInfo;
use crate::host::HostMemory;
use crate::image::{Image, ImageInner};
use crate::slab::{self, Cut, Piece, Pool, SLAB_BYTES, SLAB_MOST};
use crate::submission::Submission;
use crate::types::Memory;

/// A connection to rigd. Cheap to clone; devices opened through it share it.
#[derive(Debug, Clone)]
pub struct Rig(Arc<RigInner>);

#[derive(Debug)]
struct RigInner {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// Devices rigd holds open for this connection. While none, the connection holds
    /// nothing on rigd's side, so one that rigd closed (for `connections.idle_ms`) is
    /// made anew for the next call instead of failing it.
    devices: AtomicUsize,
}

/// True if `e` says the connection itself is gone (rigd closed it), not that a call failed.
fn connection_gone(e: &rig_proto::Error) -> bool {
    match e {
        rig_proto::Error::Closed => true,
        rig_proto::Error::Frame(rig_proto::FrameError::Io(io)) => matches!(
            io.kind(),
            std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "rig-client".into())
}

/// Connects to rigd at `path` and says hello.
fn dial(path: &Path) -> Result<Connection> {
    Connection::connect(path, &program_name()).map_err(|source| Error::Connect {
        path: path.display().to_string(),
        source: Box::new(source),
    })
}

fn unexpected(what: &str, r: &Response) -> Error {
    Error::Protocol(format!("rigd answered {what} with {r:?}"))
}

impl Rig {
    /// Connects to rigd at `$RIG_SOCKET`, or at the default socket `/run/rig/rigd.sock`.
    pub fn connect() -> Result<Rig> {
        Rig::connect_to(rig_proto::socket_path())
    }

    /// Connects to rigd at the socket `path`.
    pub fn connect_to(path: impl AsRef<Path>) -> Result<Rig> {
        let path = path.as_ref().to_owned();
        let conn = dial(&path)?;
        Ok(Rig(Arc::new(RigInner {
            conn: Mutex::new(conn),
            path,
            devices: AtomicUsize::new(0),
        })))
    }

    /// Connects to rigd as [`Rig::connect`] and opens the GPU `name`, such as `"AMD:0"`.
    pub fn open(name: &str) -> Result<Device> {
        Rig::connect()?.open_device(name)
    }

    /// The socket this connection reached.
    pub fn socket(&self) -> &Path {
        &self.0.path
    }

    /// rigd's name and build, as its welcome said.
    pub fn daemon(&self) -> Result<String> {
        Ok(self.lock()?.daemon().daemon.clone())
    }

    fn lock(&self) -> Result<MutexGuard<'_, Connection>> {
        self.0
            .conn
            .lock()
            .map_err(|_| Error::Protocol("a thread panicked during a call to rigd".into()))
    }

    /// Sends `request` and returns rigd's answer; a refusal becomes an error.
    pub(crate) fn call(
        &self,
        request: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(Response, Vec<OwnedFd>)> {
        let mut conn = self.lock()?;
        let (response, fds) = match conn.call(request, fds) {
            Ok(answer) => answer,
            // rigd closes a connection that holds nothing once it has been idle for its
            // `connections.idle_ms`: a program that kept only its `Rig` gets a new one.
            Err(e) if connection_gone(&e) && self.0.devices.load(Ordering::Acquire) == 0 => {
                *conn = dial(&self.0.path)?;
                conn.call(request, fds).map_err(Error::connection)?
            }
            Err(e) => return Err(Error::connection(e)),
        };
        drop(conn);
        match (request, &response) {
            (Request::OpenDevice { .. }, Response::DeviceOpened(_)) => {
                self.0.devices.fetch_add(1, Ordering::AcqRel);
            }
            // Whatever rigd answers, the device is no longer this connection's.
            (Request::CloseDevice { .. }, _) => {
                let _ = self
                    .0
                    .devices
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            }
            _ => {}
        }
        // A device's call makes a refusal for a lost device that device's `Error::Lost`
        // (`DeviceShared::call`).
        match response {
            Response::Error(e) => Err(Error::refused(e)),
            r => Ok((r, fds)),
        }
    }

    /// Sends `request` without waiting for its answer (see [`rig_proto::Connection::post`]):
    /// for requests such as `Free` whose answer the program does not need. rigd refuses
    /// them only for a device it already lost or closed, whose memory it gave back itself,
    /// so their errors are dropped.
    pub(crate) fn post(&self, request: &Request) -> Result<()> {
        let mut c = self.lock()?;
        c.post(request).map_err(Error::connection)?;
        drop(c.take_posted_errors());
        Ok(())
    }

    /// True iff both are the same connection to rigd.
    pub(crate) fn same(&self, other: &Rig) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The GPUs rigd serves.
    pub fn gpus(&self) -> Result<Vec<GpuInfo>> {
        match self.call(&Request::ListGpus, &[])? {
            (Response::Gpus(g), _) => Ok(g.into_iter().map(GpuInfo::of).collect()),
            (r, _) => Err(unexpected("list-gpus", &r)),
        }
    }

    /// One round trip to rigd, timed: the time from sending a ping to reading its answer.
    pub fn ping(&self) -> Result<std::time::Duration> {
        let began = std::time::Instant::now();
        match self.call(&Request::Ping, &[])? {
            (Response::Pong, _) => Ok(began.elapsed()),
            (r, _) => Err(unexpected("ping", &r)),
        }
    }

    /// Opens the GPU `name` (such as `"AMD:0"`, or its index such as `"0"`) as a new device.
    pub fn open_device(&self, name: &str) -> Result<Device> {
        let gpus = self.gpus()?;
        let gpu = gpus
            .iter()
            .find(|g| g.name == name || g.index.to_string() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
                Error::Invalid(format!(
                    "rigd serves no GPU named {name:?}; it serves {names:?}"
                ))
            })?;
        if let Some(why) = &gpu.unavailable {
            return Err(Error::Invalid(format!(
                "rigd cannot drive {}: {why}",
                gpu.name
            )));
        }
        let (response, fds) = self.call(&Request::OpenDevice { gpu: gpu.index }, &[])?;
        let Response::DeviceOpened(opened) = response else {
            return Err(unexpected("open-device", &response));
        };
        let id = opened.device;
        let made = Maps::new(fds)
            .and_then(|maps| DeviceShared::new(self.clone(), gpu.name.clone(), *opened, maps));
        match made {
            Ok(shared) => {
                let shared = Arc::new(shared);
                // A failed first measure drops the device, which closes it.
                crate::profile::open_clock(&shared)?;
                Ok(Device(shared))
            }
            Err(e) => {
                // rigd made the device; give it back.
                let _ = self.call(&Request::CloseDevice { device: id }, &[]);
                Err(e)
            }
        }
    }
}

/// The descriptors of one answer, each mapped once, whole.
pub(crate) struct Maps {
    fds: Vec<Option<OwnedFd>>,
    regions: Vec<Option<SharedRegion>>,
}

impl Maps {
    pub(crate) fn new(fds: Vec<OwnedFd>) -> Result<Maps> {
        let n = fds.len();
        Ok(Maps {
            fds: fds.into_iter().map(Some).collect(),
            regions: vec![None; n],
        })
    }

    fn region(&mut self, index: rig_proto::FdIndex) -> Result<SharedRegion> {
        let i = index.0 as usize;
        if let Some(Some(r)) = self.regions.get(i) {
            return Ok(r.clone());
        }
        let fd = self.fds.get_mut(i).and_then(Option::take).ok_or_else(|| {
            Error::Protocol(format!("rigd named descriptor {i}, which it did not pass"))
        })?;
        let region = SharedRegion::from_fd(fd)
            .map_err(|e| Error::shared("cannot map memory rigd shared", e))?;
        self.regions[i] = Some(region.clone());
        Ok(region)
    }

    /// The mapping of `share`, checked to lie inside its descriptor.
    pub(crate) fn share(&mut self, share: Share) -> Result<(SharedRegion, usize)> {
        let region = self.region(share.fd)?;
        if !region.contains(share.offset, share.bytes) {
            return Err(Error::Protocol(format!(
                "rigd shared {} bytes at {} of a descriptor of {} bytes",
                share.bytes,
                share.offset,
                region.len()
            )));
        }
        Ok((region, share.offset as usize))
    }

    pub(crate) fn gpu_share(&mut self, share: GpuShare) -> Result<(SharedRegion, usize)> {
        self.share(share.host)
    }

    /// Takes the raw descriptor `index` (not mapped), such as an eventfd.
    pub(super) fn take(&mut self, index: rig_proto::FdIndex) -> Result<OwnedFd> {
        self.fds
            .get_mut(index.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| Error::Protocol(format!("rigd did not pass descriptor {}", index.0)))
    }
}

impl DeviceShared {
    /// `Err(Lost)` if rigd says it lost the device, or does not answer at all.
    pub(super) fn check_daemon(&self) -> Result<()> {
        match self
            .rig
            .call(&Request::DeviceStatus { device: self.id }, &[])
        {
            Ok((Response::Status(st), _)) => match st.lost {
                Some(why) => Err(self.live.keep_reason(why)),
                None => Ok(()),
            },
            Ok(_) => Ok(()),
            Err(Error::Connection(e)) => {
                let why = format!("{}; the device's work is gone with it", Report::of(&*e));
                Err(self
                    .live
                    .keep_reason(Fault::new(FaultKind::Disconnected, why)))
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn free_now(&self, region: RegionId) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.note_free();
        // Nothing waits on a free: post it, and save the round trip.
        let _ = self.rig.post(&Request::Free {
            device: self.id,
            region,
        });
    }

    pub(super) fn unload_now(&self, image: ImageId, region: RegionId) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let _ = self.rig.post(&Request::Unload {
            device: self.id,
            image,
        });
        self.free_now(region);
    }

    /// The entry of kernel `name` of `image`, whose kernels are `kernels` (named by the
    /// error when `name` is not one of them).
    pub(crate) fn resolve(
        &self,
        image: ImageId,
        name: &str,
        kernels: &[String],
    ) -> Result<rig_proto::Entry> {
        let req = Request::ResolveEntry {
            device: self.id,
            image,
            name: name.to_owned(),
        };
        match self.call(&req, &[])?.0 {
            Response::Entry(e) => Ok(*e),
            Response::Absent => Err(Error::NoKernel {
                name: name.to_owned(),
                kernels: kernels.join(", "),
            }),
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => Err(Error::out_of_memory(
                format!("scratch for kernel {name}"),
                bytes,
                shortage,
                limit,
            )),
            r => Err(unexpected("resolve-entry", &r)),
        }
    }

    pub(crate) fn prepare(&self, image: ImageId, name: &str) -> Result<()> {
        let req = Request::Prepare {
            device: self.id,
            image,
            name: name.to_owned(),
        };
        self.call(&req, &[]).map(|_| ())
    }

    /// Asks rigd to grow the device's rings or segment (a [`Request::Grow`]): what it grew
    /// and the descriptors of its memory.
    pub(crate) fn grow(&self, request: &Request) -> Result<(rig_proto::Grown, Vec<OwnedFd>)> {
        self.reclaiming(|| self.grow_once(request))
    }

    fn grow_once(&self, request: &Request) -> Result<(rig_proto::Grown, Vec<OwnedFd>)> {
        let (response, fds) = self.call(request, &[])?;
        match response {
            Response::Grown(g) => Ok((g, fds)),
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => Err(Error::out_of_memory(
                "growing the device's rings",
                bytes,
                shortage,
                limit,
            )),
            Response::Never { reason } => Err(Error::Unsupported {
                what: "grow the device's rings",
                reason,
            }),
            r => Err(Error::Protocol(format!("rigd answered grow with {r:?}"))),
        }
    }

    /// A Pinned buffer of `bytes` bytes that the device itself keeps (a bounce buffer,
    /// profile stamps). It names no device, so it holds none alive; its keeper frees it
    /// ([`DeviceShared::free_after`]), or rigd does when the device closes.
    pub(crate) fn alloc_detached(&self, bytes: u64) -> Result<Buffer> {
        let (region, address, host) = self.reclaiming(|| self.alloc_raw(bytes, Memory::Pinned))?;
        Ok(Buffer(Arc::new(BufferInner {
            device: None,
            device_id: self.id.0,
            region: Some(region),
            sub: None,
            address,
            len: bytes,
            memory: Memory::Pinned,
            host: host.map(|h| h.view),
            last_write: Default::default(),
            last_use: Default::default(),
        })))
    }

    /// `bytes` bytes of `memory`; Mapped falls back to Pinned where the device has none. A
    /// buffer of at most [`SLAB_MOST`] bytes is cut from a slab without a call to rigd
    /// where one has room ([`crate::SlabPolicy`]); a larger one is a region of its own.
    pub(crate) fn alloc(self: &Arc<Self>, bytes: u64, memory: Memory) -> Result<Buffer> {
        let Some(len) = slab::rounded(bytes).filter(|&l| l > 0 && l <= SLAB_MOST) else {
            return self.alloc_region(bytes, memory);
        };
        self.check_lost()?;
        self.settle();
        let mut kind = self.slab_kind(memory)?;
        let cut = match self.cut(kind, len)? {
            Some(c) => c,
            None => {
                // No slab fits the limits (or other threads took the new one's room first):
                // the buffer's own region may.
                let granted = self.grant(kind)?;
                match granted.map(|k| self.cut(k, len)).transpose()?.flatten() {
                    Some(c) => {
                        kind = granted.unwrap_or(kind);
                        c
                    }
                    None => return self.alloc_region(bytes, memory),
                }
            }
        };
        let piece = Piece {
            kind,
            region: cut.region,
            offset: cut.offset,
            len,
        };
        let mut base_use = 0;
        if cut.dirty {
            match self.zero(&cut, len) {
                Ok(value) => base_use = value,
                Err(e) => {
                    self.free_piece(piece, true, 0);
                    return Err(e);
                }
            }
        }
        Ok(Buffer(Arc::new(BufferInner {
            device: Some(self.clone()),
            device_id: self.id.0,
            region: None,
            sub: Some(Sub {
                piece,
                base_use,
                written: Default::default(),
            }),
            address: cut.address,
            len: bytes,
            memory: kind,
            host: cut.host,
            last_write: base_use.into(),
            last_use: base_use.into(),
        })))
    }

    /// A buffer that is a region of its own. Memory that ran out is asked again after each
    /// round of reclamation (`reclaim`).
    fn alloc_region(self: &Arc<Self>, bytes: u64, memory: Memory) -> Result<Buffer> {
        let (region, address, host) = self.reclaiming(|| self.alloc_raw(bytes, memory))?;
        let memory = match (memory, &host) {
            (Memory::Mapped, Some(h)) if h.fell_back => Memory::Pinned,
            _ => memory,
        };
        Ok(Buffer(Arc::new(BufferInner {
            device: Some(self.clone()),
            device_id: self.id.0,
            region: Some(region),
            sub: None,
            address,
            len: bytes,
            memory,
            host: host.map(|h| h.view),
            last_write: Default::default(),
            last_use: Default::default(),
        })))
    }

    fn pool(&self) -> Result<MutexGuard<'_, Pool>> {
        self.slabs.lock().map_err(|_| super::poisoned())
    }

    /// The kind of slab a buffer of `memory` is cut from.
    fn slab_kind(&self, memory: Memory) -> Result<Memory> {
        Ok(match memory {
            Memory::Mapped if self.pool()?.mapped_is_pinned => Memory::Pinned,
            m => m,
        })
    }

    /// Cuts `len` bytes from a slab of `kind` with room, after giving the pieces whose
    /// last use the device reached back to their slabs; gives back slabs idle too long.
    fn cut(&self, kind: Memory, len: u64) -> Result<Option<Cut>> {
        let mut out = Vec::new();
        let cut = {
            let mut pool = self.pool()?;
            pool.settle(self.signaled());
            let cut = pool.cut(kind, len);
            pool.reap(false, &mut out);
            cut
        };
        for region in out {
            self.free_now(region);
        }
        Ok(cut)
    }

    /// Asks rigd for a slab of `kind`: the kind it is (Pinned for Mapped on a device
    /// without Mapped memory), `None` if the limits or the GPU leave no room for one.
    fn grant(&self, kind: Memory) -> Result<Option<Memory>> {
        let (region, address, host) = match self.alloc_raw(SLAB_BYTES, kind) {
            Ok(granted) => granted,
            Err(Error::OutOfMemory { .. } | Error::Invalid(_) | Error::Unsupported { .. }) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let fell_back = host.as_ref().is_some_and(|h| h.fell_back);
        let kind = if fell_back { Memory::Pinned } else { kind };
        let mut pool = self.pool()?;
        pool.mapped_is_pinned |= fell_back;
        pool.add(kind, region, address, SLAB_BYTES, host.map(|h| h.view));
        Ok(Some(kind))
    }

    /// Zeroes the `len` bytes of `cut`, which may hold an earlier buffer's: by the host
    /// where it addresses them, else by a fill on `COPY:0`. The value that writes them
    /// (0 if none: the host's stores are done).
    fn zero(self: &Arc<Self>, cut: &Cut, len: u64) -> Result<u64> {
        if let Some(h) = &cut.host {
            h.region.fill(h.offset, len as usize, 0);
            return Ok(0);
        }
        let whole = Buffer(Arc::new(BufferInner {
            device: Some(self.clone()),
            device_id: self.id.0,
            region: None,
            sub: None,
            address: cut.address,
            len,
            memory: Memory::Device,
            host: None,
            last_write: Default::default(),
            last_use: Default::default(),
        }));
        crate::place::submit(self, &Submission::new().fill(&whole, 0, len, 0))
    }

    /// Gives `piece` back to its slab once the device reached `last_use` (at once if the
    /// device is lost); `dirty` if its bytes may have changed.
    pub(crate) fn free_piece(&self, piece: Piece, dirty: bool, last_use: u64) {
        let reached = if self.lost_flag() {
            u64::MAX
        } else {
            self.signaled()
        };
        let mut out = Vec::new();
        if let Ok(mut pool) = self.slabs.lock() {
            pool.free(piece, dirty, last_use, reached);
            pool.settle(reached);
            pool.reap(false, &mut out);
        }
        for region in out {
            self.free_now(region);
        }
    }

    /// Gives back every idle slab now: how many.
    pub(super) fn give_back_idle(&self) -> usize {
        let mut out = Vec::new();
        if let Ok(mut pool) = self.slabs.lock() {
            pool.settle(self.signaled());
            pool.reap(true, &mut out);
        }
        for &region in &out {
            self.free_now(region);
        }
        out.len()
    }

    /// A region of `bytes` bytes (rounded up to whole words) of `memory`: its id, GPU
    /// address and host view.
    pub(super) fn alloc_raw(
        &self,
        bytes: u64,
        memory: Memory,
    ) -> Result<(RegionId, u64, Option<Host>)> {
        if bytes == 0 {
            return Err(Error::Invalid("a buffer has at least one byte".into()));
        }
        let rounded = bytes.checked_next_multiple_of(4).ok_or_else(|| {
            Error::Invalid(format!(
                "cannot allocate {bytes} bytes: more than a u64 holds once rounded to words"
            ))
        })?;
        self.check_lost()?;
        self.settle();
        let req = Request::Alloc {
            device: self.id,
            memory: memory.to_proto(),
            bytes: rounded,
        };
        let (response, fds) = self.call(&req, &[])?;
        match response {
            Response::Allocated {
                region,
                gpu_address,
                host,
            } => {
                let host = match host {
                    Some(share) => {
                        let mut maps = Maps::new(fds)?;
                        let (region, offset) = maps.share(share)?;
                        Some(Host {
                            view: HostView { region, offset },
                            fell_back: false,
                        })
                    }
                    None => None,
                };
                Ok((region, gpu_address, host))
            }
            Response::Never { .. } if memory == Memory::Mapped => {
                let (r, a, h) = self.alloc_raw(bytes, Memory::Pinned)?;
                Ok((
                    r,
                    a,
                    h.map(|h| Host {
                        fell_back: true,
                        ..h
                    }),
                ))
            }
            Response::Never { reason } => Err(Error::Unsupported {
                what: "allocate this memory",
                reason,
            }),
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => Err(Error::out_of_memory(
                format!("{memory:?} memory"),
                bytes,
                shortage,
                limit,
            )),
            r => Err(unexpected("alloc", &r)),
        }
    }
}

/// A new region's host view, and whether Pinned memory stands in for Mapped.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub(super) view: HostView,
    pub(super) fell_back: bool,
}

impl DeviceShared {
    /// Closes the device now, without waiting for its work: rigd stops its queues
    /// (`StopDevice` first where `stop`) and gives back everything it holds. Work it had
    /// not reached is lost for `why` first, so waits on it from other threads and the
    /// checks of its consumers answer `Lost`. Returns `false` if it was closed before.
    pub(super) fn end_now(&self, why: &str, stop: bool) -> Result<bool> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let reached = self.live.observe();
        let last = self.submitted();
        if reached < last {
            let why = format!("{why} at value {reached}, before it reached {last}");
            self.live
                .lose_from(reached + 1, Fault::new(FaultKind::StoppedByClient, why));
        } else if self.live.is_lost() && Arc::strong_count(&self.live) > 1 {
            // Consumers may still ask why: ask rigd while it knows the device.
            self.live.lost_reason(&self.rig);
        }
        if stop {
            let request = Request::StopDevice {
                device: self.id,
                last,
                fault: None,
            };
            match self.rig.call(&request, &[]) {
                // A device rigd lost or stopped before is stopped already.
                Ok(_) | Err(Error::Refused { .. } | Error::Lost { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.rig
            .call(&Request::CloseDevice { device: self.id }, &[])?;
        Ok(true)
    }
}

impl Device {
    /// Makes `bytes` bytes of the program's own memory at `offset` of `memory` a buffer the
    /// GPU addresses, with no copy: the host reads and writes it through `memory`. `offset`
    /// starts a page. Dropping the buffer ends the GPU's mapping; the memory stays the
    /// program's. A device whose facts do not say `maps_host` answers
    /// [`Error::Unsupported`].
    pub fn map_host(&self, memory: &HostMemory, offset: u64, bytes: u64) -> Result<Buffer> {
        let memory = &memory.0;
        if bytes == 0 || offset % 4096 != 0 || !memory.contains(offset, bytes) {
            return Err(Error::Invalid(format!(
                "cannot map {bytes} bytes at {offset} of {} bytes of memory: the offset must \
                 start a page and the bytes lie inside it",
                memory.len()
            )));
        }
        self.0.check_lost()?;
        let req = Request::MapHost {
            device: self.0.id,
            bytes,
            offset,
        };
        match self.0.call(&req, &[memory.fd()])?.0 {
            Response::Mapped {
                region,
                gpu_address,
            } => Ok(Buffer(Arc::new(BufferInner {
                device: Some(self.0.clone()),
                device_id: self.0.id.0,
                region: Some(region),
                sub: None,
                address: gpu_address,
                len: bytes,
                memory: Memory::Pinned,
                host: Some(HostView {
                    region: memory.clone(),
                    offset: offset as usize,
                }),
                last_write: Default::default(),
                last_use: Default::default(),
            }))),
            Response::Never { reason } => Err(Error::Unsupported {
                what: "map this host memory",
                reason,
            }),
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => Err(Error::out_of_memory(
                "host memory to map",
                bytes,
                shortage,
                limit,
            )),
            r => Err(unexpected("map-host", &r)),
        }
    }

    /// Gives back to rigd now every slab of the device that no buffer uses (which the
    /// device otherwise keeps for a while for the next small buffers: [`crate::SlabPolicy`]'s
    /// policy), and returns how many it gave back.
    pub fn trim(&self) -> usize {
        self.0.give_back_idle()
    }

    /// Loads the code object `binary` (an AMDGPU ELF for this device's processor).
    pub fn load_image(&self, binary: &[u8]) -> Result<Image> {
        self.0.check_lost()?;
        let req = Request::LoadImage {
            device: self.0.id,
            code_object: binary.to_vec(),
        };
        let loaded = self.0.reclaiming(|| match self.0.call(&req, &[])?.0 {
            Response::NoMemory {
                bytes,
                shortage,
                limit,
            } => Err(Error::out_of_memory(
                "device memory for the image",
                bytes,
                shortage,
                limit,
            )),
            r => Ok(r),
        })?;
        match loaded {
            Response::ImageLoaded {
                image,
                region,
                gpu_address,
                size,
                kernels,
            } => Ok(Image(Arc::new(ImageInner {
                device: self.0.clone(),
                id: image,
                region,
                gpu_address,
                size,
                kernels,
                facts: crate::args::facts_of(binary),
                resolved: Mutex::new(Default::default()),
            }))),
            r => Err(unexpected("load-image", &r)),
        }
    }
}
