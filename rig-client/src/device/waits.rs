//! Waits on a device's timeline word: spinning, then sleeping on its interrupt in slices,
//! noticing a lost device (its flag, rigd's status, a rigd that no longer answers) and work
//! that waited on the GPU for a lost producer.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_proto::Request;

use super::{DeviceShared, poisoned};
use crate::error::{Error, Result};

/// How long a wait spins on the word before it sleeps on the interrupt, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// How often a wait whose word stands still asks rigd whether it still serves the device.
const CHECK_DAEMON: Duration = Duration::from_millis(500);
/// The longest a sleeping wait blocks before it reads the word and the lost flag again.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

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
                return Err(self.lost_error());
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
        self.live.observe();
        if self.live.lose_from(d.value, d.why.clone()) {
            // The stop makes the word read the last value placed, so this device's own
            // consumers' GPU waits pass too and their checks find this loss.
            let _ = self.rig.call(
                &Request::StopDevice {
                    device: self.id,
                    last: self.submitted(),
                    fault: Some(d.why.to_string()),
                },
                &[],
            );
        }
        Err(self.lost_error())
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
    pub(super) fn sleep(&self) {
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
}
