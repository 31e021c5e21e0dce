//! The doorbell as a race between a processor that polls, then sleeps, and a client that
//! rings at every moment around the poll's end: no ring may be lost. The processor sleeps
//! for up to 20 s per wait, so a lost ring fails the per-round bound of 10 s (generous for
//! a loaded machine, where a round takes microseconds).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rig_shm::layout::DOORBELL_PAGE_BYTES;
use rig_shm::{Doorbell, SharedRegion};

const SLEEP: Duration = Duration::from_secs(20);
/// Longest a round may take: a ring seen only when the processor's sleep times out fails it.
const BOUND: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_micros(40);
/// The doorbell slot the races use (not the first, so offsets are added).
const SLOT: usize = 256;

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Processor side, as a queue's thread runs it: poll for the window, then sleep; report
/// each value seen in `seen_out` (process-local, as an acknowledgement).
fn processor(bell: Doorbell, rounds: u64, seen_out: Arc<AtomicU64>) {
    let mut seen = 0;
    while seen < rounds {
        let v = match bell.poll(seen, WINDOW, || false) {
            Some(v) => v,
            None => bell.wait(seen, Some(SLEEP), || false),
        };
        if v != seen {
            seen = v;
            seen_out.store(v, Ordering::Release);
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
)]
fn a_ring_as_the_processor_stops_polling_and_sleeps_is_never_lost() {
    let a = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
    let b = SharedRegion::from_fd(a.dup_fd().unwrap()).unwrap();
    let client = Doorbell::new(a, 192).unwrap();
    let bell = Doorbell::new(b, 192).unwrap();
    let rounds = 2000u64;
    let acked = Arc::new(AtomicU64::new(0));
    let ack = acked.clone();
    let h = std::thread::spawn(move || processor(bell, rounds, ack));
    // Delays from 0 to twice the window in steps of a fiftieth of it, so that rings land
    // before, at and after the processor's switch from polling to sleeping.
    let steps = 100u32;
    for round in 1..=rounds {
        spin_for(WINDOW * u32::try_from(round % u64::from(steps)).unwrap() / (steps / 2));
        client.ring(round);
        let t = Instant::now();
        while acked.load(Ordering::Acquire) != round {
            assert!(
                t.elapsed() < BOUND,
                "round {round}: the ring was lost (the processor slept through it)"
            );
            std::thread::yield_now();
        }
    }
    h.join().unwrap();
}

/// The narrowest race, made wide: the processor has decided to sleep (its `sleeping` word is
/// set and the value re-checked) and is held there until the client has rung, then calls
/// the futex. The ring must clear the word or wake it so that the
/// sleep that follows ends: a ring that only woke (no one is asleep yet) would be lost.
#[test]
#[cfg_attr(
    miri,
    ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
)]
fn a_ring_between_the_decision_to_sleep_and_the_sleep_is_never_lost() {
    let a = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
    let b = SharedRegion::from_fd(a.dup_fd().unwrap()).unwrap();
    let client = Doorbell::new(a, SLOT).unwrap();
    let bell = Doorbell::new(b.clone(), SLOT).unwrap();
    let rounds = 300u64;
    // The round whose processor is between its decision and its sleep, 0 when none.
    let deciding = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let (dec, ack) = (deciding.clone(), acked.clone());
    let h = std::thread::spawn(move || {
        let mut seen = 0;
        while seen < rounds {
            // Called by `wait` before it sets `sleeping` and again after: the second time,
            // with the word set and the value re-checked, announce the decision and hold on
            // until the client has rung (and a little more), so that every round's ring
            // lands between the decision and the sleep, however the threads are scheduled.
            let hold = || {
                if b.load_u32(SLOT + rig_shm::DOORBELL_SLEEPING_OFFSET, Ordering::SeqCst) != 0
                    && dec.load(Ordering::SeqCst) == 0
                {
                    dec.store(seen + 1, Ordering::SeqCst);
                    let t = Instant::now();
                    while b.load_u64(SLOT, Ordering::SeqCst) == seen
                        && t.elapsed() < Duration::from_secs(2)
                    {
                        std::thread::yield_now();
                    }
                    spin_for(Duration::from_micros(seen % 8));
                }
                false
            };
            let v = bell.wait(seen, Some(SLEEP), hold);
            if v != seen {
                seen = v;
                dec.store(0, Ordering::SeqCst);
                ack.store(v, Ordering::Release);
            }
        }
    });
    for round in 1..=rounds {
        let t = Instant::now();
        while deciding.load(Ordering::SeqCst) != round {
            assert!(t.elapsed() < BOUND, "round {round}: no sleep");
            std::hint::spin_loop();
        }
        client.ring(round);
        while acked.load(Ordering::Acquire) != round {
            assert!(
                t.elapsed() < BOUND,
                "round {round}: the ring between the decision to sleep and the sleep was lost"
            );
            std::thread::yield_now();
        }
    }
    h.join().unwrap();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
)]
fn a_poll_ends_at_a_ring_or_a_condition_and_gives_up_after_its_window() {
    let r = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
    let d = Doorbell::new(r.clone(), 0).unwrap();
    // Nothing rung: the window passes, the processor is left to sleep.
    let t = Instant::now();
    assert_eq!(d.poll(0, Duration::from_micros(200), || false), None);
    assert!(t.elapsed() >= Duration::from_micros(200));
    // A zero window does not poll.
    assert_eq!(d.poll(0, Duration::ZERO, || false), None);
    // Polling never touches the sleeping word: a ring meanwhile is a store and a load.
    d.ring(5);
    assert_eq!(d.poll(0, SLEEP, || false), Some(5));
    assert_eq!(
        r.load_u32(rig_shm::DOORBELL_SLEEPING_OFFSET, Ordering::SeqCst),
        0
    );
    // Another reason to look (a stop) ends it as well.
    assert_eq!(d.poll(5, SLEEP, || true), Some(5));
}
