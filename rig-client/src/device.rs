//! Rig and devices: the control connection to rigd, and the client half of a device.
//!
//! This module owns what goes through rigd ([`Rig`]: listing GPUs, opening a device;
//! [`Device`]: allocating and freeing memory, loading images, resolving kernels, growing
//! rings, closing) and the waits on a device's timeline word. It maps the shared memory an
//! open hands over (rings, argument segment, timeline word, doorbells) and gives it to
//! [`crate::place`], which owns the submission path itself: placing packets with plain
//! stores and ringing doorbells, with no system call.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rig_proto::{
    Connection, DeviceId, ErrorCode, Facts, GpuInfo, GpuShare, ImageId, RegionId, Request,
    Response, Share,
};
use rig_shm::SharedRegion;

use crate::buffer::{Buffer, BufferInner, HostView};
use crate::error::{Error, Result};
use crate::image::{Image, ImageInner};
use crate::loss::{Deps, Evidence, Liveness};
use crate::place::Placer;
use crate::point::Point;
use crate::profile::Profile;
use crate::submission::Submission;
use crate::types::Memory;

/// How long a wait spins on the word before it sleeps on the interrupt, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// How often a wait whose word stands still asks rigd whether it still serves the device.
const CHECK_DAEMON: Duration = Duration::from_millis(500);
/// The most bytes of a host access of Device memory one copy moves.
const BOUNCE: u64 = 4 << 20;
/// The longest a sleeping wait blocks before it reads the word and the lost flag again.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// A connection to rigd. Cheap to clone; devices opened through it share it.
#[derive(Debug, Clone)]
pub struct Rig(Arc<RigInner>);

#[derive(Debug)]
struct RigInner {
    conn: Mutex<Connection>,
    path: PathBuf,
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

fn proto(e: rig_proto::Error) -> Error {
    Error::Protocol(e.to_string())
}

/// The error a refused request becomes.
fn refused(e: rig_proto::ErrorReply) -> Error {
    match e.code {
        ErrorCode::Lost => Error::Lost(e.message),
        _ => Error::Refused(e.message),
    }
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
        let conn = Connection::connect(&path, &program_name()).map_err(|e| Error::Connect {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Ok(Rig(Arc::new(RigInner {
            conn: Mutex::new(conn),
            path,
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
        let (response, fds) = self.lock()?.call(request, fds).map_err(proto)?;
        match response {
            Response::Error(e) => Err(refused(e)),
            r => Ok((r, fds)),
        }
    }

    /// Sends `request` without waiting for its answer (see [`rig_proto::Connection::post`]):
    /// for requests such as `Free` whose answer the program does not need. rigd refuses
    /// them only for a device it already lost or closed, whose memory it gave back itself,
    /// so their errors are dropped.
    pub(crate) fn post(&self, request: &Request) -> Result<()> {
        let mut c = self.lock()?;
        c.post(request).map_err(proto)?;
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
            (Response::Gpus(g), _) => Ok(g),
            (r, _) => Err(unexpected("list-gpus", &r)),
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
            Ok(shared) => Ok(Device(Arc::new(shared))),
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
            .map_err(|e| Error::Protocol(format!("cannot map memory rigd shared: {e}")))?;
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
    fn take(&mut self, index: rig_proto::FdIndex) -> Result<OwnedFd> {
        self.fds
            .get_mut(index.0 as usize)
            .and_then(Option::take)
            .ok_or_else(|| Error::Protocol(format!("rigd did not pass descriptor {}", index.0)))
    }
}

/// Regions and images to give back once the device reached a value.
#[derive(Debug, Default)]
struct Deferred {
    frees: VecDeque<(u64, RegionId)>,
    unloads: VecDeque<(u64, ImageId, RegionId)>,
}

/// The client half of an open device, shared by its buffers, images, kernels and points.
///
/// Nothing it holds points back at a handle of its own device (its bounce buffer and
/// profile stamps name no device), so the last handle's drop closes the device.
pub(crate) struct DeviceShared {
    pub rig: Rig,
    pub id: DeviceId,
    pub name: String,
    pub facts: Facts,
    /// The word, the lost flag and the loss, shared with the records of consumers.
    pub(crate) live: Arc<Liveness>,
    /// The submitted word, as the placer stores it: the last value placed.
    submitted: (SharedRegion, usize),
    interrupt: OwnedFd,
    closed: AtomicBool,
    /// GPU-side waits of this device's values on other devices' points.
    pub(crate) deps: Mutex<Deps>,
    pub(crate) placer: Mutex<Placer>,
    deferred: Mutex<Deferred>,
    pub(crate) profile: Mutex<Option<crate::profile::Taking>>,
    /// The Pinned buffer host accesses of Device memory copy through.
    bounce: Mutex<Option<Buffer>>,
    /// Other devices' timeline words as this device's GPU addresses them, asked of rigd
    /// once per device: `None` where the GPU cannot wait for them (the host waits).
    peer_words: Mutex<Vec<(DeviceId, Option<u64>)>>,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.id.0)
            .field("name", &self.name)
            .field("arch", &self.facts.arch)
            .finish()
    }
}

impl DeviceShared {
    fn new(
        rig: Rig,
        name: String,
        opened: rig_proto::DeviceOpened,
        mut maps: Maps,
    ) -> Result<DeviceShared> {
        let (word, word_offset) = maps.gpu_share(opened.word.memory)?;
        if word_offset % 8 != 0 {
            return Err(Error::Protocol(
                "rigd shared an unaligned timeline word".into(),
            ));
        }
        let (control, submitted_offset) = maps.share(opened.submitted)?;
        let (lost_flag, lost_offset) = maps.share(opened.lost)?;
        if lost_offset % 4 != 0 {
            return Err(Error::Protocol("rigd shared an unaligned lost flag".into()));
        }
        let interrupt = maps.take(opened.interrupt)?;
        set_nonblocking(&interrupt)?;
        let placer = Placer::new(&opened, &mut maps, (control.clone(), submitted_offset))?;
        let same_fd = opened.word.memory.host.fd == opened.lost.fd;
        let live = Liveness::new(
            name.clone(),
            opened.device,
            (word, word_offset),
            (lost_flag, lost_offset),
            same_fd,
        );
        Ok(DeviceShared {
            rig,
            id: opened.device,
            name,
            facts: opened.facts,
            live: Arc::new(live),
            submitted: (control, submitted_offset),
            interrupt,
            closed: AtomicBool::new(false),
            deps: Mutex::new(Deps::default()),
            placer: Mutex::new(placer),
            deferred: Mutex::new(Deferred::default()),
            profile: Mutex::new(None),
            bounce: Mutex::new(None),
            peer_words: Mutex::new(Vec::new()),
        })
    }

    /// The GPU address at which this device's compute queue reads `peer`'s timeline word,
    /// or `None` if it cannot wait for it: the facts say the compute queue makes no waits
    /// for stores, `peer` came through another connection (rigd pairs one client's devices
    /// only), or rigd answers that this GPU does not reach `peer`'s. Asks rigd at the first
    /// call for `peer` and keeps the answer (rigd keeps the mapping until this device
    /// closes); a failed ask is not kept, so a later submit asks again.
    pub(crate) fn peer_word(&self, peer: &DeviceShared) -> Option<u64> {
        if let Some(known) = self.find_peer_word(peer.id) {
            return known;
        }
        let able = self.facts.waits.stores
            && self.facts.compute == rig_proto::QueueKind::Pm4
            && self.rig.same(&peer.rig);
        let answer = if able {
            let request = Request::MapPeerWord {
                device: self.id,
                peer: peer.id,
            };
            match self.rig.call(&request, &[]) {
                Ok((Response::PeerWord { gpu_address }, _)) if gpu_address % 8 == 0 => {
                    Some(gpu_address)
                }
                Ok((Response::Never { .. }, _)) => None,
                // A shortage of address space, an error or a bad answer: wait on the host
                // this time and ask again at a later submit.
                Ok(_) | Err(_) => return None,
            }
        } else {
            None
        };
        if let Ok(mut words) = self.peer_words.lock() {
            words.push((peer.id, answer));
        }
        answer
    }

    /// The kept answer of [`DeviceShared::peer_word`] for `peer`, if asked before.
    fn find_peer_word(&self, peer: DeviceId) -> Option<Option<u64>> {
        let words = self.peer_words.lock().ok()?;
        words.iter().find(|(id, _)| *id == peer).map(|(_, a)| *a)
    }

    /// The kept GPU address of `peer`'s word, with no call to rigd.
    pub(crate) fn cached_peer_word(&self, peer: DeviceId) -> Option<u64> {
        self.find_peer_word(peer).flatten()
    }

    /// The value in the timeline word (acquire).
    pub(crate) fn signaled(&self) -> u64 {
        self.live.signaled()
    }

    /// The last value placed, as the submitted word holds it.
    fn submitted(&self) -> u64 {
        self.submitted
            .0
            .load_u64(self.submitted.1, Ordering::Acquire)
    }

    fn lost_flag(&self) -> bool {
        self.live.is_lost()
    }

    /// The reason the device was lost, asked of rigd once and kept.
    pub(crate) fn lost_reason(&self) -> String {
        self.live.lost_reason(&self.rig)
    }

    /// `Err(Lost)` if rigd lost the device, `Err(Invalid)` once it was closed.
    pub(crate) fn check_lost(&self) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::Invalid(format!("device {} is closed", self.name)));
        }
        if self.lost_flag() {
            Err(Error::Lost(self.lost_reason()))
        } else {
            Ok(())
        }
    }

    /// True iff `value` is reached and the work up to it waited for no point that its
    /// producer failed to reach before a loss (the check can lose the device).
    pub(crate) fn reached(&self, value: u64) -> bool {
        self.live.reached(value) && self.check_producers(value).is_ok()
    }

    /// Waits until the word reaches `value`: spins for `spin` (default [`DEFAULT_SPIN`]),
    /// then sleeps on the interrupt eventfd in slices, reading the word and the lost flag
    /// after each, so that a lost device is noticed. A value reached before a loss is
    /// reached; work that waited on the GPU for a point of a lost producer is lost too.
    pub(crate) fn wait(&self, value: u64, spin: Option<Duration>) -> Result<()> {
        // 0 is no value: what a buffer no work used waits for, also on a lost device.
        if value == 0 {
            return Ok(());
        }
        if self.live.reached(value) {
            return self.check_producers(value);
        }
        let spin = spin.unwrap_or(DEFAULT_SPIN);
        let start = Instant::now();
        let mut asked = start;
        loop {
            if self.live.reached(value) {
                break;
            }
            if self.lost_flag() {
                return Err(Error::Lost(self.lost_reason()));
            }
            if start.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            // Work held back by a lost producer is lost before it runs, if ever.
            self.check_producers(value)?;
            self.sleep();
            // A rigd that died raises no flag: ask it now and then while the word stands.
            if asked.elapsed() >= CHECK_DAEMON {
                asked = Instant::now();
                self.check_daemon()?;
            }
        }
        self.check_producers(value)?;
        self.settle();
        Ok(())
    }

    /// `Err(Lost)` if work up to `value` waited on the GPU for a point its producer did not
    /// reach before it was lost: this device is lost then, from the first such value, and
    /// rigd is told to stop it with the reason, which names the producer.
    fn check_producers(&self, value: u64) -> Result<()> {
        let doomed = {
            let Ok(mut deps) = self.deps.lock() else {
                return Err(poisoned());
            };
            if deps.is_empty() {
                return Ok(());
            }
            deps.check(value, self.signaled(), &self.name, &self.rig)
        };
        let Some(d) = doomed else {
            return Ok(());
        };
        self.live.observe();
        if self.live.lose_from(d.value, d.why.clone()) {
            // The stop makes the word read the last value placed, so this device's own
            // consumers' GPU waits pass too and their checks find this loss.
            let _ = self.rig.call(
                &Request::StopDevice {
                    device: self.id,
                    last: self.submitted(),
                    fault: Some(d.why),
                },
                &[],
            );
        }
        Err(Error::Lost(self.lost_reason()))
    }

    /// Makes room for `n` more GPU-side waits, waiting for the oldest values (at most a
    /// slice at a time) while the records hold [`crate::loss::SLOTS`]. Called without the
    /// placer's lock: it may ask rigd (the check of producers).
    pub(crate) fn room_for_waits(&self, n: usize) -> Result<()> {
        loop {
            {
                let mut deps = self.deps.lock().map_err(|_| poisoned())?;
                if deps.room() >= n {
                    return Ok(());
                }
                deps.prune(self.signaled());
                if deps.room() >= n {
                    return Ok(());
                }
            }
            self.check_producers(u64::MAX)?;
            self.wait_for_move(self.signaled())?;
        }
    }

    /// Allocates the evidence slots at the first GPU-side wait on another device's point.
    pub(crate) fn evidence_ready(&self) -> Result<()> {
        if self.deps.lock().map_err(|_| poisoned())?.evidence.is_some() {
            return Ok(());
        }
        let bytes = 4 * crate::loss::SLOTS as u64;
        let (region, gpu, host) = self.alloc_raw(bytes, Memory::Pinned)?;
        let Some(host) = host else {
            self.free_now(region);
            return Err(Error::Protocol(
                "rigd gave Pinned memory the host does not address".into(),
            ));
        };
        let mut deps = self.deps.lock().map_err(|_| poisoned())?;
        if deps.evidence.is_some() {
            drop(deps);
            self.free_now(region);
            return Ok(());
        }
        deps.evidence = Some(Evidence {
            gpu,
            host: host.view.region,
            offset: host.view.offset,
        });
        Ok(())
    }

    /// `Err(Lost)` if rigd says it lost the device, or does not answer at all.
    fn check_daemon(&self) -> Result<()> {
        match self
            .rig
            .call(&Request::DeviceStatus { device: self.id }, &[])
        {
            Ok((Response::Status(st), _)) => match st.lost {
                Some(why) => Err(Error::Lost(self.live.keep_reason(why))),
                None => Ok(()),
            },
            Ok(_) => Ok(()),
            Err(Error::Protocol(e)) => {
                let why =
                    format!("rigd no longer answers ({e}); the device's work is gone with it");
                Err(Error::Lost(self.live.keep_reason(why)))
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until the word moves past `seen` (or the device is lost), for room in the rings:
    /// yields the CPU briefly (the queue that frees the room may need it), then sleeps at
    /// most one slice.
    pub(crate) fn wait_for_move(&self, seen: u64) -> Result<()> {
        self.await_move(seen)
            .map_err(|LostNow| Error::Lost(self.lost_reason()))
    }

    /// [`DeviceShared::wait_for_move`] with no call to rigd (for a caller holding the
    /// placer's lock): a loss answers [`LostNow`], whose reason the caller asks later.
    pub(crate) fn await_move(&self, seen: u64) -> std::result::Result<(), LostNow> {
        let start = Instant::now();
        while self.signaled() <= seen {
            if self.lost_flag() {
                return Err(LostNow);
            }
            if start.elapsed() < DEFAULT_SPIN {
                std::thread::yield_now();
            } else {
                self.sleep();
                return Ok(());
            }
        }
        Ok(())
    }

    /// Blocks on the interrupt eventfd for at most one slice, and drains it.
    fn sleep(&self) {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let slice = PollTimeout::try_from(SLEEP_SLICE).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.interrupt.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, slice).is_ok_and(|n| n > 0) {
            // The eventfd is nonblocking: a count another thread drained first answers
            // EAGAIN instead of blocking, which is as good as a read here.
            let mut buf = [0u8; 8];
            let _ = nix::unistd::read(self.interrupt.as_raw_fd(), &mut buf);
        }
    }

    /// Gives back regions and images whose last use the device reached.
    fn settle(&self) {
        let reached = self.signaled();
        let (frees, unloads) = {
            let Ok(mut d) = self.deferred.lock() else {
                return;
            };
            let mut frees = Vec::new();
            while d.frees.front().is_some_and(|&(v, _)| v <= reached) {
                frees.extend(d.frees.pop_front().map(|(_, r)| r));
            }
            let mut unloads = Vec::new();
            while d.unloads.front().is_some_and(|&(v, _, _)| v <= reached) {
                unloads.extend(d.unloads.pop_front().map(|(_, i, r)| (i, r)));
            }
            (frees, unloads)
        };
        for r in frees {
            self.free_now(r);
        }
        for (i, r) in unloads {
            self.unload_now(i, r);
        }
    }

    fn free_now(&self, region: RegionId) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Nothing waits on a free: post it, and save the round trip.
        let _ = self.rig.post(&Request::Free {
            device: self.id,
            region,
        });
    }

    fn unload_now(&self, image: ImageId, region: RegionId) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let _ = self.rig.post(&Request::Unload {
            device: self.id,
            image,
        });
        self.free_now(region);
    }

    /// Frees `region` once the device reached `value`, its last use.
    pub(crate) fn free_after(&self, region: RegionId, value: u64) {
        if value <= self.signaled() || self.lost_flag() {
            self.free_now(region);
        } else if let Ok(mut d) = self.deferred.lock() {
            d.frees.push_back((value, region));
        }
    }

    /// Unloads `image` and frees its region once no submitted work can run it.
    pub(crate) fn unload_after(&self, image: ImageId, region: RegionId) {
        let last = self.placer.lock().map(|p| p.last()).unwrap_or(0);
        if last <= self.signaled() || self.lost_flag() {
            self.unload_now(image, region);
        } else if let Ok(mut d) = self.deferred.lock() {
            d.unloads.push_back((last, image, region));
        }
    }

    pub(crate) fn resolve(&self, image: ImageId, name: &str) -> Result<rig_proto::Entry> {
        let req = Request::ResolveEntry {
            device: self.id,
            image,
            name: name.to_owned(),
        };
        match self.rig.call(&req, &[])?.0 {
            Response::Entry(e) => Ok(*e),
            Response::Absent => Err(Error::NoKernel(name.to_owned())),
            Response::NoMemory { bytes, .. } => Err(Error::OutOfMemory(format!(
                "{bytes} bytes of scratch for kernel {name}"
            ))),
            r => Err(unexpected("resolve-entry", &r)),
        }
    }

    pub(crate) fn prepare(&self, image: ImageId, name: &str) -> Result<()> {
        let req = Request::Prepare {
            device: self.id,
            image,
            name: name.to_owned(),
        };
        self.rig.call(&req, &[]).map(|_| ())
    }

    /// Asks rigd to grow the device's rings or segment (a [`Request::Grow`]): what it grew
    /// and the descriptors of its memory.
    pub(crate) fn grow(&self, request: &Request) -> Result<(rig_proto::Grown, Vec<OwnedFd>)> {
        let (response, fds) = self.rig.call(request, &[])?;
        match response {
            Response::Grown(g) => Ok((g, fds)),
            Response::NoMemory { bytes, .. } => Err(Error::OutOfMemory(format!(
                "{bytes} bytes to grow the device's rings"
            ))),
            r => Err(Error::Protocol(format!("rigd answered grow with {r:?}"))),
        }
    }

    /// Copies `out.len()` bytes at `offset` of `b` to `out`: from the shared mapping where
    /// the host addresses it, through copies into a Pinned bounce buffer otherwise.
    pub(crate) fn host_read(
        self: &Arc<Self>,
        b: &Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        if let Some(h) = &b.0.host {
            h.region.read(h.offset + offset as usize, out);
            return Ok(());
        }
        let mut bounce = self.bounce.lock().map_err(|_| poisoned())?;
        for (k, chunk) in out.chunks_mut(BOUNCE as usize).enumerate() {
            let at = offset + k as u64 * BOUNCE;
            let n = chunk.len() as u64;
            let via = self.bounce_buffer(&mut bounce, n)?;
            let s = Submission::new().copy(b, at, via, 0, n);
            Device(self.clone()).submit(&s)?.wait()?;
            self.host_read(via, 0, chunk)?;
        }
        Ok(())
    }

    /// Copies `data` to `offset` of `b`, as [`DeviceShared::host_read`] reads.
    pub(crate) fn host_write(self: &Arc<Self>, b: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
        if let Some(h) = &b.0.host {
            h.region.write(h.offset + offset as usize, data);
            return Ok(());
        }
        let mut bounce = self.bounce.lock().map_err(|_| poisoned())?;
        for (k, chunk) in data.chunks(BOUNCE as usize).enumerate() {
            let at = offset + k as u64 * BOUNCE;
            let n = chunk.len() as u64;
            let via = self.bounce_buffer(&mut bounce, n)?;
            self.host_write(via, 0, chunk)?;
            let s = Submission::new().copy(via, 0, b, at, n);
            Device(self.clone()).submit(&s)?.wait()?;
        }
        Ok(())
    }

    /// The device's bounce buffer, of at least `bytes` bytes (at most [`BOUNCE`]), made at
    /// its first use.
    fn bounce_buffer<'a>(&self, slot: &'a mut Option<Buffer>, bytes: u64) -> Result<&'a Buffer> {
        if slot.as_ref().is_none_or(|b| b.len() < bytes) {
            let len = bytes.next_power_of_two().clamp(4096, BOUNCE);
            let fresh = self.alloc_detached(len)?;
            if let Some(old) = slot.take().and_then(|b| b.0.region) {
                self.free_now(old);
            }
            *slot = Some(fresh);
        }
        slot.as_ref()
            .ok_or_else(|| Error::Invalid("no bounce buffer".into()))
    }

    /// A Pinned buffer of `bytes` bytes that the device itself keeps (a bounce buffer,
    /// profile stamps). It names no device, so it holds none alive; its keeper frees it
    /// ([`DeviceShared::free_after`]), or rigd does when the device closes.
    pub(crate) fn alloc_detached(&self, bytes: u64) -> Result<Buffer> {
        let (region, address, host) = self.alloc_raw(bytes, Memory::Pinned)?;
        Ok(Buffer(Arc::new(BufferInner {
            device: None,
            device_id: self.id.0,
            region: Some(region),
            address,
            len: bytes,
            memory: Memory::Pinned,
            host: host.map(|h| h.view),
            last_write: Default::default(),
            last_use: Default::default(),
        })))
    }

    /// `bytes` bytes of `memory`; Mapped falls back to Pinned where the device has none.
    pub(crate) fn alloc(self: &Arc<Self>, bytes: u64, memory: Memory) -> Result<Buffer> {
        let (region, address, host) = self.alloc_raw(bytes, memory)?;
        let memory = match (memory, &host) {
            (Memory::Mapped, Some(h)) if h.fell_back => Memory::Pinned,
            _ => memory,
        };
        Ok(Buffer(Arc::new(BufferInner {
            device: Some(self.clone()),
            device_id: self.id.0,
            region: Some(region),
            address,
            len: bytes,
            memory,
            host: host.map(|h| h.view),
            last_write: Default::default(),
            last_use: Default::default(),
        })))
    }

    /// A region of `bytes` bytes (rounded up to whole words) of `memory`: its id, GPU
    /// address and host view.
    fn alloc_raw(&self, bytes: u64, memory: Memory) -> Result<(RegionId, u64, Option<Host>)> {
        if bytes == 0 {
            return Err(Error::Invalid("a buffer has at least one byte".into()));
        }
        self.check_lost()?;
        self.settle();
        let rounded = bytes.div_ceil(4) * 4;
        let req = Request::Alloc {
            device: self.id,
            memory: memory.to_proto(),
            bytes: rounded,
        };
        let (response, fds) = self.rig.call(&req, &[])?;
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
            Response::Never { reason } => Err(Error::Invalid(reason)),
            Response::NoMemory { bytes, shortage } => {
                Err(Error::OutOfMemory(format!("{bytes} bytes ({shortage:?})")))
            }
            r => Err(unexpected("alloc", &r)),
        }
    }
}

/// A new region's host view, and whether Pinned memory stands in for Mapped.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    view: HostView,
    fell_back: bool,
}

fn poisoned() -> Error {
    Error::Invalid("a thread panicked while it used the device".into())
}

/// The device was lost; its reason is asked of rigd where no lock is held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LostNow;

impl DeviceShared {
    /// Closes the device now, without waiting for its work: rigd stops its queues
    /// (`StopDevice` first where `stop`) and gives back everything it holds. Work it had
    /// not reached is lost for `why` first, so waits on it from other threads and the
    /// checks of its consumers answer `Lost`. Returns `false` if it was closed before.
    fn end_now(&self, why: &str, stop: bool) -> Result<bool> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let reached = self.live.observe();
        let last = self.submitted();
        if reached < last {
            let why = format!(
                "{} lost: {why} at value {reached}, before it reached {last}",
                self.name
            );
            self.live.lose_from(reached + 1, why);
        } else if self.live.is_lost() && Arc::strong_count(&self.live) > 1 {
            // Consumers may still ask why: ask rigd while it knows the device.
            self.lost_reason();
        }
        if stop {
            let request = Request::StopDevice {
                device: self.id,
                last,
                fault: None,
            };
            match self.rig.call(&request, &[]) {
                // A device rigd lost or stopped before is stopped already.
                Ok(_) | Err(Error::Refused(_) | Error::Lost(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.rig
            .call(&Request::CloseDevice { device: self.id }, &[])?;
        Ok(true)
    }
}

impl Drop for DeviceShared {
    /// The last handle is gone: nothing can wait for the device's work any more, so it is
    /// stopped and closed at once.
    fn drop(&mut self) {
        let _ = self.end_now("dropped", false);
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let raw = fd.as_raw_fd();
    fcntl(raw, FcntlArg::F_GETFL)
        .and_then(|flags| {
            let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
            fcntl(raw, FcntlArg::F_SETFL(flags))
        })
        .map(drop)
        .map_err(|e| Error::Io {
            what: "making the interrupt eventfd nonblocking",
            source: e.into(),
        })
}

/// An open device: one GPU as rigd hands it to this process, with its own queues.
///
/// Cheap to clone. The device closes once [`Device::close`] or [`Device::abort`] is
/// called, or the last clone, buffer, image, kernel and point of it drop. The last drop
/// does not wait: rigd stops the device's work at once and gives back its memory, and the
/// connection to rigd closes with it unless other devices or a [`Rig`] still use it.
#[derive(Debug, Clone)]
pub struct Device(pub(crate) Arc<DeviceShared>);

impl Device {
    /// The GPU's name, such as `"AMD:0"`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The device's facts: its processor, memory, queues, limits.
    pub fn facts(&self) -> &Facts {
        &self.0.facts
    }

    /// The GPU's processor, such as `"gfx1100"`.
    pub fn arch(&self) -> &str {
        &self.0.facts.arch
    }

    /// A new buffer of `bytes` bytes of `memory`, zeroed where rigd's path zeroes memory.
    pub fn buffer(&self, bytes: u64, memory: Memory) -> Result<Buffer> {
        self.0.alloc(bytes, memory)
    }

    /// Makes `bytes` bytes of the program's own memory at `offset` of `memory` (a memfd
    /// mapping, such as one [`SharedRegion::create`] made) a buffer the GPU addresses, with
    /// no copy: the host reads and writes it through `memory`. `offset` starts a page.
    /// Dropping the buffer ends the GPU's mapping; the memory stays the program's.
    pub fn map_host(&self, memory: &SharedRegion, offset: u64, bytes: u64) -> Result<Buffer> {
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
        match self.0.rig.call(&req, &[memory.fd()])?.0 {
            Response::Mapped {
                region,
                gpu_address,
            } => Ok(Buffer(Arc::new(BufferInner {
                device: Some(self.0.clone()),
                device_id: self.0.id.0,
                region: Some(region),
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
            Response::Never { reason } => Err(Error::Invalid(reason)),
            Response::NoMemory { bytes, .. } => Err(Error::OutOfMemory(format!(
                "{bytes} bytes of host memory to map"
            ))),
            r => Err(unexpected("map-host", &r)),
        }
    }

    /// Loads the code object `binary` (an AMDGPU ELF for this device's processor).
    pub fn load_image(&self, binary: &[u8]) -> Result<Image> {
        self.0.check_lost()?;
        let req = Request::LoadImage {
            device: self.0.id,
            code_object: binary.to_vec(),
        };
        match self.0.rig.call(&req, &[])?.0 {
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
                resolved: Mutex::new(Default::default()),
            }))),
            Response::NoMemory { bytes, .. } => Err(Error::OutOfMemory(format!(
                "{bytes} bytes of device memory for the image"
            ))),
            r => Err(unexpected("load-image", &r)),
        }
    }

    /// Submits the work of `submission` as the device's next value and returns its point.
    ///
    /// Places each part's packets and arguments into the shared rings and segment with
    /// plain stores, then stores to the doorbells: no system call (but a futex wake if the
    /// queue sleeps) and no allocation, once the submission was submitted before. Waits
    /// (spinning, then sleeping) while the rings hold earlier work that must complete
    /// first, and asks rigd to grow them when they never hold it.
    pub fn submit(&self, submission: &Submission) -> Result<Point> {
        let value = crate::place::submit(&self.0, submission)?;
        Ok(Point {
            device: self.0.clone(),
            value,
        })
    }

    /// The value the device's word holds: every value up to it is reached.
    pub fn signaled(&self) -> u64 {
        self.0.signaled()
    }

    /// The point of the last value submitted.
    pub fn last(&self) -> Point {
        let value = self.0.placer.lock().map(|p| p.last()).unwrap_or(0);
        Point {
            device: self.0.clone(),
            value,
        }
    }

    /// Waits for every submitted value, then closes the device: rigd stops its queues and
    /// gives back its memory. Buffers and images of it stay as handles that fail. Work that
    /// never ends is waited for until rigd's hang bound (`facts().hang_ms`) loses the
    /// device; [`Device::abort`] does not wait.
    pub fn close(self) -> Result<()> {
        let last = self.last();
        let waited = last.wait();
        self.0.end_now("closed", false)?;
        waited
    }

    /// Stops the device's work at once, without waiting for it, and closes the device:
    /// rigd destroys its queues (`StopDevice`), then gives back its memory
    /// (`CloseDevice`). Returns as soon as rigd has done both, also while a kernel runs
    /// forever. Values not reached by then are lost: waits on them, from other threads or
    /// through other handles, return [`Error::Lost`], and so do the waits of other devices'
    /// work that waited on the GPU for them. Buffers and images of it stay as handles that
    /// fail.
    pub fn abort(self) -> Result<()> {
        self.0.end_now("aborted", true).map(drop)
    }

    /// Starts a profile: until [`Device::end_profile`], each value's work records GPU clock
    /// stamps.
    pub fn begin_profile(&self) -> Result<()> {
        crate::profile::begin(&self.0)
    }

    /// Ends the profile and returns what it recorded, once every profiled value is reached.
    pub fn end_profile(&self) -> Result<Profile> {
        crate::profile::end(&self.0)
    }
}
