//! Rig and devices: the control connection to rigd, and the client half of a device.
//!
//! The device's rooms, one job each:
//!
//! - [`control`]: what goes through rigd ([`Rig`]: listing GPUs, opening a device;
//!   [`Device`]: allocating and freeing memory (small buffers cut from slabs, see
//!   [`crate::SlabPolicy`]), loading images, resolving kernels, growing
//!   rings, closing), and [`Maps`], the shared memory an answer hands over;
//! - [`waits`]: the waits on a device's timeline word;
//! - [`bounce`]: host reads and writes of Device memory through a bounce buffer;
//! - [`deferred`]: frees and unloads once the device reached their last use;
//! - [`reclaim`]: the rounds of reclamation a request for memory runs before it fails;
//! - [`peers`]: other devices' words for waits on the GPU;
//! - here: [`DeviceShared`], what an open hands over (rings, argument segment, timeline
//!   word, doorbells), and [`Device`], the program's handle. The submission path itself
//!   is [`crate::place`]'s: placing packets with plain stores and ringing doorbells, with
//!   no system call.

mod bounce;
mod control;
mod deferred;
mod peers;
mod reclaim;
mod waits;

pub(crate) use control::Maps;
pub use control::Rig;
pub use waits::{DEFAULT_HINTS, DEFAULT_SPIN, Sleeps, WaitPolicy};

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use rig_proto::DeviceId;
use rig_shm::SharedRegion;

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::facts::Facts;
use crate::loss::{Deps, Liveness};
use crate::place::{Placer, Target};
use crate::point::Point;
use crate::profile::Profile;
use crate::submission::Submission;
use crate::types::Memory;
use deferred::Deferred;

/// The client half of an open device, shared by its buffers, images, kernels and points.
///
/// Nothing it holds points back at a handle of its own device (its bounce buffer and
/// profile stamps name no device), so the last handle's drop closes the device.
pub(crate) struct DeviceShared {
    pub rig: Rig,
    pub id: DeviceId,
    pub name: String,
    pub facts: Facts,
    /// What the encoders need of its GPU, from the facts rigd sent.
    pub target: Target,
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
    /// The latest value submitted when memory went back while work ran ([`reclaim`]).
    freed_under: AtomicU64,
    /// The slabs small buffers are cut from ([`crate::SlabPolicy`]).
    slabs: Mutex<crate::slab::Pool>,
    pub(crate) profile: Mutex<Option<crate::profile::Taking>>,
    /// The Pinned buffer host accesses of Device memory copy through.
    bounce: Mutex<Option<Buffer>>,
    /// Other devices' timeline words as this device's GPU addresses them, asked of rigd
    /// once per device: `None` where the GPU cannot wait for them (the host waits).
    peer_words: Mutex<Vec<(DeviceId, Option<u64>)>>,
    /// How its sleeping waits ended.
    sleeps: waits::SleepCounts,
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
        // Nothing is mapped before the answer's layout is known good.
        opened.check().map_err(Error::layout)?;
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
        let target = Target::of(&opened.facts)?;
        let facts = Facts::of(&opened.facts)?;
        let placer = Placer::new(
            &opened,
            target,
            &mut maps,
            (control.clone(), submitted_offset),
        )?;
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
            facts,
            target,
            live: Arc::new(live),
            submitted: (control, submitted_offset),
            interrupt,
            closed: AtomicBool::new(false),
            deps: Mutex::new(Deps::default()),
            placer: Mutex::new(placer),
            deferred: Mutex::new(Deferred::default()),
            freed_under: AtomicU64::new(0),
            slabs: Mutex::new(Default::default()),
            profile: Mutex::new(None),
            bounce: Mutex::new(None),
            peer_words: Mutex::new(Vec::new()),
            sleeps: Default::default(),
        })
    }
}

fn poisoned() -> Error {
    Error::Invalid("a thread panicked while it used the device".into())
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

/// The device's interrupt eventfd, for a program's event loop (epoll, mio, tokio's
/// `AsyncFd`): it turns readable when the device's word may have advanced (the GPU's
/// end-of-work interrupt). A loss raises no interrupt of its own: a loop that must notice
/// one sleeps in slices and asks [`Device::lost`]. It is nonblocking; the crate's own waits
/// do not read it (they sleep on the timeline word's futex), so after it turns readable,
/// read its 8 bytes to reset it and ask [`Device::signaled`] or [`Device::lost`].
impl std::os::fd::AsFd for Device {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.interrupt.as_fd()
    }
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

    /// How this device's sleeping waits ended so far: woken by an interrupt, not begun, or
    /// out of their slice (a diagnostic: waits that end by their slice mean that the
    /// device's interrupts wake nobody).
    pub fn sleeps(&self) -> Sleeps {
        self.0.sleeps.get()
    }

    /// The device's facts: its processor, memory, queues, limits.
    pub fn facts(&self) -> &Facts {
        &self.0.facts
    }

    /// The GPU's processor, such as `"gfx1100"`.
    pub fn arch(&self) -> &str {
        &self.0.facts.arch
    }

    /// rigd's id of the device: the one `rigctl devices` lists and `rigctl device ID` takes.
    pub fn id(&self) -> u64 {
        self.0.id.0
    }

    /// The loss of the device, if rigd (or the client) lost it: the error its waits and
    /// calls now return, [`Error::Lost`] with rigd's reason (a fault of its work, a hang, a
    /// reset, an abort). `None` while it works, and after a close that lost nothing. Reads
    /// the shared lost flag; asks rigd once for the reason.
    pub fn lost(&self) -> Option<Error> {
        match self.0.check_lost() {
            Err(e @ Error::Lost { .. }) => Some(e),
            _ => None,
        }
    }

    /// A new buffer of `bytes` bytes of `memory`, zeroed where rigd's path zeroes memory
    /// (pages of a slab that an earlier buffer changed are zeroed again: [`crate::SlabPolicy`]).
    pub fn buffer(&self, bytes: u64, memory: Memory) -> Result<Buffer> {
        self.0.alloc(bytes, memory)
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
