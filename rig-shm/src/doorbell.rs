//! The doorbell protocol, shared by clients (who ring) and queue processors (who sleep).
//!
//! A doorbell page is [`crate::layout::DOORBELL_PAGE_BYTES`] of shared memory cut into
//! [`crate::layout::DOORBELLS_PER_PAGE`] slots of one 64-byte cache line each, so that two
//! queues' doorbells never share a line ([`crate::layout`] states and checks the layout). A
//! slot holds:
//!
//! | offset | size | field | written by |
//! |---|---|---|---|
//! | [`DOORBELL_VALUE_OFFSET`] = 0 | 8 | value: the queue's new write position | the client |
//! | [`DOORBELL_SLEEPING_OFFSET`] = 8 | 4 | sleeping: nonzero while the processor may sleep | the processor sets it, a ringing client clears it |
//!
//! The rest of the line is unused and stays zero.
//!
//! **Ring** ([`Doorbell::ring`]): store the value (release); SeqCst fence; if `sleeping` is
//! nonzero, swap it to 0 and, if it was nonzero, `FUTEX_WAKE` it. A ring is thus one store
//! and one load while the processor is awake.
//!
//! **Sleep** ([`Doorbell::wait`]): set `sleeping` to 1; SeqCst fence; re-check the value;
//! `FUTEX_WAIT(sleeping, 1, timeout)`; set `sleeping` to 0.
//!
//! **Poll** ([`Doorbell::poll`]): read the value, leaving `sleeping` at 0, for a bounded
//! while before a sleep, as a hardware processor polls its doorbells: a ring meanwhile costs
//! the client no system call and the processor no wake-up. Polling changes no word, so it
//! adds nothing to the protocol: a ring after the poll gave up meets the sleep's fences.
//!
//! The two fences order "store value, load sleeping" against "store sleeping, load value", so
//! at least one side sees the other's store: either the processor sees the new value and does
//! not sleep, or the client sees `sleeping` set and wakes it. The client clears `sleeping`
//! before waking, so a processor that is between its check and `FUTEX_WAIT` finds the word
//! changed and does not sleep: no wake is lost.
//!
//! **The processor's owner trusts no word of the slot.** A client may write `sleeping` at
//! will (clear it while the processor sleeps, so that a ring or a stop would not wake it; set
//! it just before the processor sleeps). So whoever stops a processor wakes it with
//! [`Doorbell::wake`], which wakes whatever sleeps on the word whatever the word says, and a
//! processor sleeps with a timeout and re-checks its own state (such as a stop flag) after it.

use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use crate::layout::{DOORBELL_SLEEPING_OFFSET, DOORBELL_SLOT_BYTES, DOORBELL_VALUE_OFFSET};
use crate::{Result, SharedRegion, ShmError, futex};

/// How many reads of the value [`Doorbell::poll`] makes between two reads of the clock and
/// two yields of its core: a read and a spin-loop hint take tens of nanoseconds, a clock
/// read up to about 80 ns on a loaded VM and a yield a few hundred, so a poll notices a ring
/// within about a microsecond while another thread on its core waits at most as long.
pub const POLL_READS_PER_CLOCK: u32 = 32;

/// One doorbell slot in a shared region.
#[derive(Debug, Clone)]
pub struct Doorbell {
    region: SharedRegion,
    offset: usize,
}

impl Doorbell {
    /// The doorbell whose slot starts `offset` bytes into `region`.
    ///
    /// Errors unless `offset` is a multiple of [`DOORBELL_SLOT_BYTES`] and the whole slot lies
    /// in the region (the offset may come from another process).
    pub fn new(region: SharedRegion, offset: usize) -> Result<Self> {
        if !offset.is_multiple_of(DOORBELL_SLOT_BYTES)
            || !region.contains(offset as u64, DOORBELL_SLOT_BYTES as u64)
        {
            return Err(ShmError::BadDoorbell {
                offset,
                len: region.len(),
            });
        }
        Ok(Self { region, offset })
    }

    /// The region the slot lies in.
    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    /// The slot's offset in its region.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The value last rung (acquire: what the ringer wrote before ringing is visible).
    pub fn value(&self) -> u64 {
        self.region
            .load_u64(self.offset + DOORBELL_VALUE_OFFSET, Ordering::Acquire)
    }

    /// Rings: publishes `value` and wakes the processor if it sleeps.
    pub fn ring(&self, value: u64) {
        self.region.store_u64(
            self.offset + DOORBELL_VALUE_OFFSET,
            value,
            Ordering::Release,
        );
        // Orders the value store before the load of `sleeping` (pairs with the fence in `wait`).
        fence(Ordering::SeqCst);
        self.wake_if_sleeping();
    }

    /// Wakes the processor whatever the `sleeping` word says (a client may have cleared it),
    /// without changing the value: for a party that changed another condition the processor
    /// checks (such as a stop flag), after a SeqCst fence. Clearing the word first makes a
    /// processor that is just going to sleep return at once.
    ///
    /// A processor that is about to sleep while the client sets the word back can still miss
    /// this wake; it must sleep with a timeout, or the party must wake it again until it sees
    /// the condition.
    pub fn wake(&self) {
        let sleeping = self
            .region
            .atomic_u32(self.offset + DOORBELL_SLEEPING_OFFSET);
        sleeping.store(0, Ordering::SeqCst);
        futex::wake_all(sleeping);
    }

    /// Wakes the processor if it sleeps, without changing the value: what a ring does. It
    /// trusts the `sleeping` word, so the processor's owner uses [`Doorbell::wake`] instead.
    pub fn wake_if_sleeping(&self) {
        let sleeping = self
            .region
            .atomic_u32(self.offset + DOORBELL_SLEEPING_OFFSET);
        if sleeping.load(Ordering::SeqCst) != 0 && sleeping.swap(0, Ordering::SeqCst) != 0 {
            futex::wake_all(sleeping);
        }
    }

    /// Processor side: reads the value until it differs from `seen` or `also()` is true,
    /// for at most `window`, without sleeping and without setting `sleeping` (so a ring
    /// meanwhile is a store and a load). Returns `Some(value)` if it changed or `also()`
    /// became true, `None` once the window passed: the caller then sleeps with
    /// [`Doorbell::wait`], which checks the value again.
    ///
    /// It issues spin-loop hints between reads and, every [`POLL_READS_PER_CLOCK`] reads,
    /// reads the clock and yields its core (`sched_yield`): a window costs a core for its
    /// length only while nothing else wants it, and a client spinning on the same core for
    /// the work's end is not held up for the window.
    pub fn poll(&self, seen: u64, window: Duration, also: impl Fn() -> bool) -> Option<u64> {
        if window.is_zero() {
            return None;
        }
        let start = Instant::now();
        loop {
            for _ in 0..POLL_READS_PER_CLOCK {
                let v = self.value();
                if v != seen || also() {
                    return Some(v);
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= window {
                return None;
            }
            std::thread::yield_now();
        }
    }

    /// Processor side: returns the value once it differs from `seen`, or once `also()` is true,
    /// or after `timeout`, sleeping meanwhile. Returns the value it last read.
    ///
    /// `also` lets the processor wake for other reasons, such as a stop; whoever makes it true
    /// must then issue a SeqCst fence and call [`Doorbell::wake`]. Since a client can defeat
    /// any wake by writing `sleeping`, a processor that must notice `also` passes a timeout.
    pub fn wait(&self, seen: u64, timeout: Option<Duration>, also: impl Fn() -> bool) -> u64 {
        let v = self.value();
        if v != seen || also() {
            return v;
        }
        let sleeping = self
            .region
            .atomic_u32(self.offset + DOORBELL_SLEEPING_OFFSET);
        sleeping.store(1, Ordering::SeqCst);
        // Orders the `sleeping` store before the re-check (pairs with the fence in `ring`).
        fence(Ordering::SeqCst);
        let v = self.value();
        if v == seen && !also() {
            futex::wait(sleeping, 1, timeout);
        }
        sleeping.store(0, Ordering::Relaxed);
        self.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::DOORBELL_PAGE_BYTES;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    #[test]
    fn slots_are_checked() {
        let r = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        assert!(Doorbell::new(r.clone(), 64).is_ok());
        assert!(Doorbell::new(r.clone(), 4032).is_ok());
        assert!(Doorbell::new(r.clone(), 4096).is_err());
        assert!(Doorbell::new(r.clone(), 8).is_err());
        assert!(Doorbell::new(r, usize::MAX - 63).is_err());
    }

    #[test]
    fn ring_without_sleeper_is_a_store() {
        let r = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let d = Doorbell::new(r.clone(), 128).unwrap();
        d.ring(9);
        assert_eq!(d.value(), 9);
        assert_eq!(r.load_u64(128, Ordering::Relaxed), 9);
        assert_eq!(r.load_u32(136, Ordering::Relaxed), 0);
        // Returns at once: the value differs from what was seen.
        assert_eq!(d.wait(0, None, || false), 9);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
    )]
    fn ring_wakes_a_sleeper_across_mappings() {
        let a = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let b = SharedRegion::from_fd(a.dup_fd().unwrap()).unwrap();
        let client = Doorbell::new(a, 64).unwrap();
        let processor = Doorbell::new(b, 64).unwrap();
        for round in 1..=200u64 {
            let p = processor.clone();
            let h = std::thread::spawn(move || {
                let mut seen = round - 1;
                let t = Instant::now();
                while seen != round {
                    seen = p.wait(seen, Some(Duration::from_secs(10)), || false);
                }
                t.elapsed()
            });
            if round % 2 == 0 {
                // Let the processor fall asleep before ringing on some rounds.
                std::thread::sleep(Duration::from_micros(200));
            }
            client.ring(round);
            let waited = h.join().unwrap();
            assert!(
                waited < Duration::from_secs(5),
                "lost wake in round {round}"
            );
        }
    }

    #[test]
    fn wake_ends_a_wait_whose_sleeping_word_the_client_cleared() {
        let r = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let d = Doorbell::new(r.clone(), 0).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (d2, s2) = (d.clone(), stop.clone());
        let h = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                d2.wait(0, Some(Duration::from_secs(30)), || {
                    s2.load(Ordering::SeqCst)
                });
            }
        });
        // The client clears the word once the processor sleeps; a ring would not wake it now.
        while r.load_u32(DOORBELL_SLEEPING_OFFSET, Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        r.store_u32(DOORBELL_SLEEPING_OFFSET, 0, Ordering::SeqCst);
        let t = Instant::now();
        // Wakes again until the processor saw the flag: one wake may come before it sleeps.
        stop.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while !h.is_finished() {
            d.wake();
            assert!(t.elapsed() < Duration::from_secs(10), "the wake was lost");
            std::thread::sleep(Duration::from_millis(1));
        }
        h.join().unwrap();
    }

    #[test]
    fn wake_if_sleeping_ends_a_wait_for_another_reason() {
        let r = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let d = Doorbell::new(r, 0).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (d2, s2) = (d.clone(), stop.clone());
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            while !s2.load(Ordering::SeqCst) {
                d2.wait(0, Some(Duration::from_secs(10)), || {
                    s2.load(Ordering::SeqCst)
                });
            }
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(5));
        stop.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        d.wake_if_sleeping();
        assert!(h.join().unwrap() < Duration::from_secs(5));
    }
}
