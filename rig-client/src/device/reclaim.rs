//! Reclamation: the rounds a request for memory runs when rigd answers that there is none.
//!
//! An allocation, an image load and a growth of the rings ask rigd at most [`ASKS`] times.
//! After each refusal but the last the device runs a round that gives back what it can,
//! and asks again; only the last refusal reaches the program, as
//! [`Error::OutOfMemory`](crate::Error::OutOfMemory) with the bytes asked:
//!
//! 1. the frees and unloads whose last use the device reached, and every idle slab;
//! 2. if memory was given back while work ran: the wait for that work, since rigd keeps
//!    memory freed under running work in quarantine until none can touch it (at most
//!    [`WAIT_MOST`]), then round 1 again;
//! 3. a pause of [`LOOK`] for rigd's watch of the device to see its queues idle, then
//!    round 1 again.
//!
//! rigd runs a round of its own before it refuses (its quarantined memory that no work can
//! touch any more goes back at once), so an ask after round 2 finds what the work held.
//! What a growth made before it fell short stays with the device for the next ask.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::DeviceShared;
use super::waits::WaitPolicy;
use crate::error::{Error, Result};

/// How many times a request for memory asks rigd.
pub(crate) const ASKS: usize = 4;
/// The longest round 2 waits for the work that holds freed memory.
pub(crate) const WAIT_MOST: Duration = Duration::from_secs(10);
/// Round 3's pause: rigd's watch looks at a device with work outstanding every 10 ms.
pub(crate) const LOOK: Duration = Duration::from_millis(20);

impl DeviceShared {
    /// Runs `ask` until rigd grants it, at most [`ASKS`] times, with a round of
    /// reclamation after each [`Error::OutOfMemory`] but the last.
    pub(crate) fn reclaiming<T>(&self, mut ask: impl FnMut() -> Result<T>) -> Result<T> {
        let mut round = 0;
        loop {
            match ask() {
                Err(Error::OutOfMemory { .. }) if round + 1 < ASKS => {
                    self.reclaim(round)?;
                    round += 1;
                }
                r => return r,
            }
        }
    }

    /// Round `round` (from 0) of reclamation.
    fn reclaim(&self, round: usize) -> Result<()> {
        match round {
            0 => {}
            1 => {
                // Everything submitted now: rigd frees quarantined memory once no queue runs.
                let until = self.submitted();
                let pending = self.has_deferred() || self.freed_under_work() > self.signaled();
                if pending && until > self.signaled() {
                    self.wait_with(until, WaitPolicy::sleeping().with_timeout(WAIT_MOST))?;
                }
            }
            _ => std::thread::sleep(LOOK),
        }
        self.settle();
        self.give_back_idle();
        Ok(())
    }

    /// The latest value submitted when memory was given back while work ran.
    fn freed_under_work(&self) -> u64 {
        self.freed_under.load(Ordering::Acquire)
    }

    /// Notes that memory goes back now: if work runs, rigd keeps it until that work ended.
    pub(super) fn note_free(&self) {
        let submitted = self.submitted();
        if submitted > self.signaled() {
            self.freed_under.fetch_max(submitted, Ordering::AcqRel);
        }
    }
}
