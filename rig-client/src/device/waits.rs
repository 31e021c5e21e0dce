//! Waits on a device's timeline word: spinning politely (spin-loop hints, then yields),
//! then sleeping on the word's futex and the lost flag's at once, in slices, noticing a
//! lost device (its flag, rigd's status, a rigd that no longer answers) and work that
//! waited on the GPU for a lost producer. [`WaitPolicy`] says how long each phase lasts.
//!
//! The sleep is race-free: a wait reads the word, checks it, then sleeps only while the
//! word's low half still holds what it read (the kernel compares atomically), and the
//! queue that releases a value writes the word before it wakes its sleepers. rigd wakes
//! the lost flag's sleepers when it raises it, and the word's when its stop writes it. The
//! device's eventfd is still signalled on every interrupt, for programs with an event loop
//! (`Device`'s `AsFd`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_proto::Request;
use rig_shm::futex;

use super::{DeviceShared, poisoned};
use crate::error::{Error, Result};

/// How long a wait spins on the word before it sleeps, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// How long a spinning wait issues spin-loop hints before it yields its core instead
/// (`sched_yield` between reads), by default: about what the simulated queue takes for an
/// empty kernel on a quiet host. Past it the waiter yields, because the queue's thread,
/// which polls its doorbell after work (`rig_sim::queue::DOORBELL_POLL`) rather than
/// sleeping, may share the waiter's core: a waiter that only issued hints would keep it
/// from running (57 us p50 per launch with 50 us of hints on the 2-core VM under load, 8.5
/// us with 2; docs/performance.md).
pub const DEFAULT_HINTS: Duration = Duration::from_micros(2);
/// How often a wait whose word stands still asks rigd whether it still serves the device.
const CHECK_DAEMON: Duration = Duration::from_millis(500);
/// The longest a sleeping wait blocks before it reads the word and the lost flag again: a
/// backstop (a rigd that died wakes no one), not the way a wait learns of its value.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// How a wait spends its time until its value is reached: it spins for
/// [`WaitPolicy::spin`] (issuing spin-loop hints for the first [`WaitPolicy::hints`] of
/// it, then yielding the core between reads, so that the queue's own thread can run on a
/// busy host), then sleeps until a release or a loss wakes it; it gives up after
/// [`WaitPolicy::timeout`], if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    /// How long it reads the word before it sleeps.
    pub spin: Duration,
    /// How long, of the spin, it issues spin-loop hints before it yields instead.
    pub hints: Duration,
    /// How long it waits in all before it answers "not reached"; `None` for ever.
    pub timeout: Option<Duration>,
}

impl Default for WaitPolicy {
    /// Spins [`DEFAULT_SPIN`] (hints for [`DEFAULT_HINTS`]), then sleeps; no timeout.
    fn default() -> WaitPolicy {
        WaitPolicy {
            spin: DEFAULT_SPIN,
            hints: DEFAULT_HINTS,
            timeout: None,
        }
    }
}

impl WaitPolicy {
    /// Sleeps at once.
    pub fn sleeping() -> WaitPolicy {
        WaitPolicy {
            spin: Duration::ZERO,
            ..WaitPolicy::default()
        }
    }

    /// Spins for `spin` before it sleeps.
    pub fn spinning(spin: Duration) -> WaitPolicy {
        WaitPolicy {
            spin,
            ..WaitPolicy::default()
        }
    }

    /// This policy, issuing spin-loop hints for `hints` of its spin before it yields.
    pub fn with_hints(self, hints: Duration) -> WaitPolicy {
        WaitPolicy { hints, ..self }
    }

    /// This policy, giving up after `timeout`.
    pub fn with_timeout(self, timeout: Duration) -> WaitPolicy {
        WaitPolicy {
            timeout: Some(timeout),
            ..self
        }
    }
}

/// The device was lost; its reason is asked of rigd where no lock is held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LostNow;

impl DeviceShared {
    /// The value in the timeline word (acquire).
    pub(crate) fn signaled(&self) -> u64 {
        self.live.signaled()
    }

    /// The last value placed, as the submitted word holds it.
    pub(super) fn submitted(&self) -> u64 {
        self.submitted
            .0
            .load_u64(self.submitted.1, Ordering::Acquire)
    }

    pub(super) fn lost_flag(&self) -> bool {
        self.live.is_lost()
    }

    /// The device's [`Error::Lost`], its fault asked of rigd once and kept.
    pub(crate) fn lost_error(&self) -> Error {
        self.live.lost_error(&self.rig)
    }

    /// `Err(Lost)` if rigd lost the device, `Err(Invalid)` once it was closed.
    pub(crate) fn check_lost(&self) -> Result<()> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(Error::Invalid(format!("device {} is closed", self.name)));
        }
        if self.lost_flag() {
            Err(self.lost_error())
        } else {
            Ok(())
        }
    }

    /// True iff `value` is reached and the work up to it waited for no point that its
    /// producer failed to reach before a loss (the check can lose the device).
    pub(crate) fn reached(&self, value: u64) -> bool {
        self.live.reached(value) && self.check_producers(value).is_ok()
    }

    /// Waits until the word reaches `value` as [`WaitPolicy::default`] says, with no timeout.
    pub(crate) fn wait(&self, value: u64) -> Result<()> {
        self.wait_with(value, WaitPolicy::default()).map(drop)
    }

    /// Waits until the word reaches `value` as `policy` says; `Ok(false)` once its timeout
    /// passed first. A value reached before a loss is reached; a lost device answers
    /// `Err(Lost)`, and so does work that waited on the GPU for a point of a lost producer.
    pub(crate) fn wait_with(&self, value: u64, policy: WaitPolicy) -> Result<bool> {
        // 0 is no value: what a buffer no work used waits for, also on a lost device.
        if value == 0 {
            return Ok(true);
        }
        if self.live.reached(value) {
            self.check_producers(value)?;
            return Ok(true);
        }
        let start = Instant::now();
        let deadline = policy.timeout.map(|t| start + t);
        let mut asked = start;
        loop {
            // Read before the check: the sleep below lasts only while the word holds it.
            let seen = self.signaled();
            if self.live.reached(value) {
                break;
            }
            if self.lost_flag() {
                return Err(self.lost_error());
            }
            let waited = start.elapsed();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                self.check_producers(value)?;
                return Ok(false);
            }
            if waited < policy.spin {
                if waited < policy.hints {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                continue;
            }
            // Work held back by a lost producer is lost before it runs, if ever.
            self.check_producers(value)?;
            let slice = deadline.map_or(SLEEP_SLICE, |d| {
                SLEEP_SLICE.min(d.saturating_duration_since(Instant::now()))
            });
            self.sleep(seen, slice);
            // A rigd that died raises no flag: ask it now and then while the word stands.
            if asked.elapsed() >= CHECK_DAEMON {
                asked = Instant::now();
                self.check_daemon()?;
            }
        }
        self.check_producers(value)?;
        self.settle();
        crate::profile::settle(self)?;
        Ok(true)
    }

    /// `Err(Lost)` if work up to `value` waited on the GPU for a point its producer did not
    /// reach before it was lost: this device is lost then, from the first such value, and
    /// rigd is told to stop it with the reason, which names the producer.
    pub(super) fn check_producers(&self, value: u64) -> Result<()> {
        let doomed = {
            let Ok(mut deps) = self.deps.lock() else {
                return Err(poisoned());
            };
            if deps.is_empty() {
                return Ok(());
            }
            deps.check(value, self.signaled(), &self.rig)
        };
        let Some(d) = doomed else {
            return Ok(());
        };
        Err(self.lose_for(d.value, d.why))
    }

    /// The client loses the device itself from `value` on, for `why`, unless it was lost
    /// before, and tells rigd to stop it with the reason; returns the device's
    /// [`Error::Lost`].
    pub(crate) fn lose_for(&self, value: u64, why: rig_proto::Fault) -> Error {
        self.live.observe();
        if self.live.lose_from(value, why.clone()) {
            // The stop makes the word read the last value placed, so this device's own
            // consumers' GPU waits pass too and their checks find this loss.
            let _ = self.rig.call(
                &Request::StopDevice {
                    device: self.id,
                    last: self.submitted(),
                    // rigd refuses a reason past its bound; a chain of losses may be longer.
                    fault: Some(rig_proto::cut_marked(
                        why.to_string(),
                        rig_proto::MOST_STOP_REASON,
                    )),
                },
                &[],
            );
        }
        self.lost_error()
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

    /// Waits until the word moves past `seen` (or the device is lost), for room in the rings:
    /// yields the CPU briefly (the queue that frees the room may need it), then sleeps at
    /// most one slice.
    pub(crate) fn wait_for_move(&self, seen: u64) -> Result<()> {
        self.await_move(seen).map_err(|LostNow| self.lost_error())
    }

    /// [`DeviceShared::wait_for_move`] with no call to rigd (for a caller holding the
    /// placer's lock): a loss answers [`LostNow`], whose reason the caller asks later.
    pub(crate) fn await_move(&self, seen: u64) -> std::result::Result<(), LostNow> {
        let start = Instant::now();
        loop {
            let now = self.signaled();
            if now > seen {
                return Ok(());
            }
            if self.lost_flag() {
                return Err(LostNow);
            }
            if start.elapsed() < DEFAULT_SPIN {
                std::thread::yield_now();
            } else {
                self.sleep(now, SLEEP_SLICE);
                return Ok(());
            }
        }
    }

    /// Sleeps for at most `slice` while the word holds `seen` and the lost flag is down:
    /// a release of a later value (the path's interrupt handler wakes the word), a loss, or
    /// rigd's stop wakes it. Counts how the sleep ended ([`Sleeps`]).
    pub(super) fn sleep(&self, seen: u64, slice: Duration) {
        let (word, lost) = self.live.futex_words();
        // The word's low half: successive values differ there.
        let counter = match futex::wait_word_or_flag(word, seen as u32, lost, slice) {
            futex::WaitAny::Woken => &self.sleeps.woken,
            futex::WaitAny::Changed => &self.sleeps.unslept,
            futex::WaitAny::Elapsed | futex::WaitAny::Unsupported => &self.sleeps.elapsed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a device's sleeping waits ended, counted since it was opened ([`crate::Device::sleeps`]):
/// a diagnostic of whether the device's interrupts wake its waiters. On a path whose
/// interrupts wake nobody every sleep would end by its slice (10 ms), and a sleeping wait
/// would take that long.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sleeps {
    /// Sleeps a wake ended: a release's interrupt (or rigd's stop, or a loss).
    pub woken: u64,
    /// Sleeps that did not begin: the word or the lost flag had moved already.
    pub unslept: u64,
    /// Sleeps that lasted their whole slice (10 ms, or what was left of a wait's timeout), or
    /// a signal ended.
    pub elapsed: u64,
}

/// The counts behind [`Sleeps`].
#[derive(Debug, Default)]
pub(crate) struct SleepCounts {
    woken: std::sync::atomic::AtomicU64,
    unslept: std::sync::atomic::AtomicU64,
    elapsed: std::sync::atomic::AtomicU64,
}

impl SleepCounts {
    pub(crate) fn get(&self) -> Sleeps {
        Sleeps {
            woken: self.woken.load(Ordering::Relaxed),
            unslept: self.unslept.load(Ordering::Relaxed),
            elapsed: self.elapsed.load(Ordering::Relaxed),
        }
    }
}
