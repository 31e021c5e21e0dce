//! Loss: whether a device reached a value before it was lost, and consumers of lost
//! producers.
//!
//! This module owns two things:
//!
//! - [`Liveness`]: a device's timeline word and lost flag as anyone may read them, the
//!   [`Fault`] it was lost for (rigd's, asked once, or the client's own), and the one rule
//!   by which the client decides that a value was reached before a loss
//!   ([`Liveness::reached`]). A device's handles share it, and so do
//!   the records of devices whose work waits for its points, without keeping the device
//!   itself open.
//! - [`Deps`]: a consumer device's records of the points of other devices its values wait
//!   for on the GPU. rigd's stop of a lost producer writes its last submitted value into
//!   its word, so a GPU-side wait on it passes as if the producer had succeeded. Right
//!   after each such wait the consumer's compute queue copies the producer's lost flag into
//!   an evidence slot of the consumer's own; a wait of the program on the consumer checks
//!   the records of the values it covers, and a record whose producer was lost before it
//!   reached the point loses the consumer too, with a fault of kind
//!   [`FaultKind::Producer`] naming the producer and its own fault.
//!
//! It also turns rigd's refusal of a request because the device is lost into that device's
//! [`Error::Lost`] ([`DeviceShared::call`]).

use std::collections::VecDeque;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rig_proto::{DeviceId, Fault, FaultKind, Request, Response};
use rig_shm::SharedRegion;

use crate::device::{DeviceShared, Rig};
use crate::error::{Error, Refusal, Result};

/// Evidence slots of a device: GPU waits on other devices' points recorded at once; a
/// submit with more waits outstanding waits for the oldest values to be reached.
pub(crate) const SLOTS: usize = 4096;
/// What a slot holds until the consumer's queue copies the producer's flag into it.
const UNWRITTEN: u32 = u32::MAX;

/// A device's word, lost flag and loss, shared by its handles and by its consumers' records.
pub(crate) struct Liveness {
    pub name: String,
    pub id: DeviceId,
    word: SharedRegion,
    word_offset: usize,
    flag: SharedRegion,
    flag_offset: usize,
    /// Bytes from the timeline word to the lost flag where both lie in one page of one
    /// memfd, the page rigd maps for a peer's waits: where a consumer's GPU reads the flag.
    pub flag_from_word: Option<u64>,
    /// Why the device was lost: rigd's fault, asked once, or the client's own.
    lost: OnceLock<Fault>,
    /// The highest value the word was read at while the device was not lost.
    live: AtomicU64,
    /// The first value the client knows did not complete as submitted (the client lost the
    /// device itself: a consumer of a lost producer, an abort, a drop with work in flight);
    /// `u64::MAX` otherwise.
    lost_at: AtomicU64,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("name", &self.name)
            .field("id", &self.id.0)
            .finish()
    }
}

impl Liveness {
    pub(crate) fn new(
        name: String,
        id: DeviceId,
        (word, word_offset): (SharedRegion, usize),
        (flag, flag_offset): (SharedRegion, usize),
        same_fd: bool,
    ) -> Liveness {
        // The flag is found from the word's GPU address only when both lie in one control page.
        let page = rig_shm::layout::CONTROL_PAGE_BYTES as usize;
        let flag_from_word = (same_fd && word_offset / page == flag_offset / page)
            .then(|| flag_offset.checked_sub(word_offset))
            .flatten()
            .map(|d| d as u64);
        Liveness {
            name,
            id,
            word,
            word_offset,
            flag,
            flag_offset,
            flag_from_word,
            lost: OnceLock::new(),
            live: AtomicU64::new(0),
            lost_at: AtomicU64::new(u64::MAX),
        }
    }

    /// The value in the timeline word (acquire).
    pub(crate) fn signaled(&self) -> u64 {
        self.word.load_u64(self.word_offset, Ordering::Acquire)
    }

    /// The futex words a wait sleeps on: the timeline word's low half, which the queues'
    /// releases wake, and the lost flag, which rigd wakes when it raises it.
    pub(crate) fn futex_words(&self) -> (&AtomicU32, &AtomicU32) {
        let low = self.word_offset + rig_shm::layout::LOW_HALF_OFFSET as usize;
        (
            self.word.atomic_u32(low),
            self.flag.atomic_u32(self.flag_offset),
        )
    }

    /// True once rigd raised the lost flag.
    fn flag_raised(&self) -> bool {
        self.flag.load_u32(self.flag_offset, Ordering::Acquire) != 0
    }

    /// True once rigd or the client lost the device.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.get().is_some() || self.flag_raised()
    }

    /// Whether the device reached `value` before any loss: the rule every wait and every
    /// check of a consumer uses. The word is read first and the loss after: rigd raises
    /// its flag before its stop writes the last submitted value into the word, and the
    /// client records a loss of its own before it asks rigd to stop the device, so a word
    /// read before "not lost" holds what the work itself released. A value seen so is
    /// remembered, and stays reached after a loss.
    pub(crate) fn reached(&self, value: u64) -> bool {
        if value == 0 {
            return true;
        }
        if value >= self.lost_at.load(Ordering::Acquire) {
            return false;
        }
        if value <= self.live.load(Ordering::Acquire) {
            return true;
        }
        let word = self.signaled();
        if word >= value && !self.is_lost() {
            self.live.fetch_max(word, Ordering::AcqRel);
            return true;
        }
        false
    }

    /// Reads the word as [`Liveness::reached`] does and returns the highest value known
    /// reached before any loss.
    pub(crate) fn observe(&self) -> u64 {
        self.reached(self.signaled());
        self.live.load(Ordering::Acquire)
    }

    /// As [`Liveness::reached`], or what a consumer's GPU saw right after its wait for
    /// `value` passed: the lost flag still down (`Some(0)`), which proves the word was the
    /// work's own. Only rigd's flag tells this; a loss of the client's own raises none.
    fn reached_before_loss(&self, value: u64, gpu_saw_flag: Option<u32>) -> bool {
        self.reached(value)
            || (gpu_saw_flag == Some(0) && self.lost_at.load(Ordering::Acquire) == u64::MAX)
    }

    /// The fault the device was lost for, asked of rigd (through `rig`) once and kept.
    pub(crate) fn lost_reason(&self, rig: &Rig) -> Fault {
        if let Some(why) = self.lost.get() {
            return why.clone();
        }
        let unsaid = || {
            Fault::new(
                FaultKind::Internal,
                "rigd lost the device and named no fault",
            )
        };
        let why = match rig.call(&Request::DeviceStatus { device: self.id }, &[]) {
            Ok((Response::Status(s), _)) => s.lost.unwrap_or_else(unsaid),
            Ok(_) => unsaid(),
            Err(e @ Error::Connection(_)) => {
                Fault::new(FaultKind::Disconnected, e.report().to_string())
            }
            Err(e) => Fault::new(
                FaultKind::Internal,
                format!("rigd lost the device and cannot say why: {}", e.report()),
            ),
        };
        self.lost.get_or_init(|| why).clone()
    }

    /// The device's [`Error::Lost`]: its name and the fault it was lost for.
    pub(crate) fn lost_error(&self, rig: &Rig) -> Error {
        Error::Lost {
            device: self.name.clone(),
            fault: crate::fault::Fault::of(self.lost_reason(rig)),
        }
    }

    /// Keeps `why` as the fault of a loss rigd reported in another way (a status answer,
    /// a daemon that no longer answers) and returns the device's [`Error::Lost`]; the first
    /// fault stays.
    pub(crate) fn keep_reason(&self, why: Fault) -> Error {
        Error::Lost {
            device: self.name.clone(),
            fault: crate::fault::Fault::of(self.lost.get_or_init(|| why).clone()),
        }
    }

    /// The client loses the device itself from value `at` on, for `why`, unless it was
    /// lost before. Returns whether this call lost it.
    pub(crate) fn lose_from(&self, at: u64, why: Fault) -> bool {
        if self.is_lost() {
            return false;
        }
        // `lost_at` first: a reader that sees the reason sees the value too.
        self.lost_at.fetch_min(at, Ordering::AcqRel);
        self.lost.set(why).is_ok()
    }

    /// The fault of a consumer of this device, lost with it: "NAME lost: its fault".
    fn consumer_fault(&self, rig: &Rig) -> Fault {
        Fault::new(FaultKind::Producer, self.lost_error(rig).to_string())
    }
}

impl DeviceShared {
    /// Sends `request`, which names this device: rigd's refusal because the device is lost
    /// becomes this device's [`Error::Lost`], with the fault rigd keeps for it.
    pub(crate) fn call(
        &self,
        request: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Response, Vec<OwnedFd>)> {
        self.rig.call(request, fds).map_err(|e| match e {
            Error::Refused {
                code: Refusal::Lost,
                ..
            } => self.live.lost_error(&self.rig),
            e => e,
        })
    }
}

/// One GPU-side wait of a consumer's value for a producer's point.
#[derive(Debug)]
struct Record {
    /// The consumer's value whose work waits.
    value: u64,
    /// The evidence slot (an index), where the consumer's GPU reads the producer's flag.
    slot: Option<usize>,
    producer: Arc<Liveness>,
    point: u64,
}

/// Where a device's evidence slots lie: a Pinned region of [`SLOTS`] 4-byte slots, kept
/// until the device closes (rigd frees it then).
#[derive(Debug)]
pub(crate) struct Evidence {
    pub gpu: u64,
    pub host: SharedRegion,
    pub offset: usize,
}

/// A consumer's GPU-side waits on other devices' points, oldest first.
#[derive(Debug)]
pub(crate) struct Deps {
    pub evidence: Option<Evidence>,
    /// Slots handed out so far; the next is `next % SLOTS`.
    next: usize,
    records: VecDeque<Record>,
}

impl Default for Deps {
    fn default() -> Deps {
        Deps {
            evidence: None,
            next: 0,
            records: VecDeque::with_capacity(SLOTS),
        }
    }
}

/// A consumer record whose producer was lost before it reached the point.
pub(crate) struct Doomed {
    /// The consumer's first value that waited for it.
    pub value: u64,
    /// The consumer's fault, of kind [`FaultKind::Producer`], whose detail reads "PRODUCER
    /// lost: its fault" (so the consumer's error reads "CONSUMER lost: PRODUCER lost: ...").
    pub why: Fault,
}

impl Deps {
    /// Records free: a submit places at most this many GPU-side waits.
    pub(crate) fn room(&self) -> usize {
        SLOTS - self.records.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// A slot for a wait of value `value` for `producer`'s `point`: its GPU address and
    /// the GPU address of the producer's flag in the consumer's space (`peer_word` is the
    /// producer's word there), or `None` where the GPU cannot read the flag. Marks the
    /// slot unwritten; the caller made room first.
    pub(crate) fn take(
        &mut self,
        value: u64,
        producer: &Arc<Liveness>,
        point: u64,
        peer_word: u64,
    ) -> Option<(u64, u64)> {
        let index = self.next % SLOTS;
        self.next = self.next.wrapping_add(1);
        let at = match (&self.evidence, producer.flag_from_word) {
            (Some(e), Some(d)) => {
                // The slot's last wait is done: its record went, once its value was reached.
                e.host
                    .store_u32(e.offset + 4 * index, UNWRITTEN, Ordering::Relaxed);
                Some((e.gpu + 4 * index as u64, peer_word + d))
            }
            _ => None,
        };
        self.records.push_back(Record {
            value,
            slot: at.map(|_| index),
            producer: producer.clone(),
            point,
        });
        at
    }

    /// Drops the records of value `value`, which was not placed after all.
    pub(crate) fn forget(&mut self, value: u64) {
        while self.records.back().is_some_and(|r| r.value == value) {
            self.records.pop_back();
            self.next = self.next.wrapping_sub(1);
        }
    }

    /// Checks the records of values up to `upto` against their producers, `reached`
    /// being the consumer's word: a record of a reached value whose producer reached the
    /// point before any loss goes; one whose producer was lost before it reached the
    /// point dooms the consumer, reached or not (its GPU's wait either passed on the
    /// stop's value or never passes).
    pub(crate) fn check(&mut self, upto: u64, reached: u64, rig: &Rig) -> Option<Doomed> {
        let mut i = 0;
        while let Some(r) = self.records.get(i) {
            if r.value > upto {
                break;
            }
            let saw = r.slot.and_then(|s| self.slot(s));
            let fine = r.producer.reached_before_loss(r.point, saw);
            if !fine && (r.value <= reached || r.producer.is_lost()) {
                return Some(Doomed {
                    value: r.value,
                    why: r.producer.consumer_fault(rig),
                });
            }
            if fine && r.value <= reached && i == 0 {
                self.records.pop_front();
            } else {
                i += 1;
            }
        }
        None
    }

    /// Drops the records of values up to `reached` that are settled, oldest first, to make
    /// room; stops at the first that is not.
    pub(crate) fn prune(&mut self, reached: u64) {
        while let Some(r) = self.records.front() {
            let saw = r.slot.and_then(|s| self.slot(s));
            if r.value > reached || !r.producer.reached_before_loss(r.point, saw) {
                break;
            }
            self.records.pop_front();
        }
    }

    /// What the consumer's GPU wrote into slot `index`, if it wrote it.
    fn slot(&self, index: usize) -> Option<u32> {
        let e = self.evidence.as_ref()?;
        let v = e.host.load_u32(e.offset + 4 * index, Ordering::Acquire);
        (v != UNWRITTEN).then_some(v)
    }
}
