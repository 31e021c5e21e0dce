//! The timeline's sleep as a race: a waiter reads the word, decides to sleep and sleeps
//! while a releaser in another mapping stores later values and wakes, and a loser raises
//! the lost flag and wakes. No wake may be lost: each sleep here lasts up to 20 s, so a
//! lost one fails the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rig_shm::SharedRegion;
use rig_shm::futex;
use rig_shm::layout::{
    CONTROL_PAGE_BYTES, LOST_OFFSET, TIMELINE_FUTEX_OFFSET, TIMELINE_WORD_OFFSET,
};

const SLEEP: Duration = Duration::from_secs(20);

/// A layout offset as a mapping offset.
fn at(offset: u64) -> usize {
    usize::try_from(offset).unwrap()
}

/// Waits as rig-client does until the word reaches `value` or the flag is raised; returns
/// whether it was reached.
fn wait(page: &SharedRegion, value: u64) -> bool {
    let word = page.atomic_u32(at(TIMELINE_FUTEX_OFFSET));
    let flag = page.atomic_u32(at(LOST_OFFSET));
    loop {
        let seen = page.load_u64(at(TIMELINE_WORD_OFFSET), Ordering::Acquire);
        if seen >= value {
            return true;
        }
        if flag.load(Ordering::Acquire) != 0 {
            return false;
        }
        #[allow(
            clippy::cast_possible_truncation,
            reason = "the futex word is the timeline word's low half, as rig-client sleeps on it"
        )]
        futex::wait_word_or_flag(word, seen as u32, flag, SLEEP);
    }
}

fn pages() -> (SharedRegion, SharedRegion) {
    let a = SharedRegion::create("control", at(CONTROL_PAGE_BYTES)).unwrap();
    let b = SharedRegion::from_fd(a.dup_fd().unwrap()).unwrap();
    (a, b)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
)]
fn no_release_is_missed_by_a_sleeping_waiter() {
    let (client, queue) = pages();
    let rounds = 3000u64;
    let h = std::thread::spawn(move || {
        let mut worst = Duration::ZERO;
        for v in 1..=rounds {
            let t = Instant::now();
            assert!(wait(&client, v));
            worst = worst.max(t.elapsed());
        }
        worst
    });
    for v in 1..=rounds {
        // Vary the interleaving: release at once, after a spin, or after the waiter slept.
        match v % 3 {
            0 => {}
            1 => (0..(v % 200)).for_each(|_| std::hint::spin_loop()),
            _ => std::thread::sleep(Duration::from_micros(50)),
        }
        queue.store_u64(at(TIMELINE_WORD_OFFSET), v, Ordering::Release);
        futex::wake_all(queue.atomic_u32(at(TIMELINE_FUTEX_OFFSET)));
    }
    let worst = h.join().unwrap();
    assert!(
        worst < SLEEP / 4,
        "a release's wake was lost (a wait took {worst:?})"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "two mappings of one memfd, and Miri has no memfd (SharedRegion::from_fd is Unsupported there)"
)]
fn a_loss_wakes_a_sleeping_waiter() {
    let probe = std::sync::atomic::AtomicU32::new(1);
    if futex::wait_any(&[(&probe, 0)], Some(SLEEP)) == futex::WaitAny::Unsupported {
        // Without futex_waitv a wait sleeps on the word alone and sees a loss after a slice.
        eprintln!("skipped: the kernel has no futex_waitv");
        return;
    }
    for round in 0..50 {
        let (client, rigd) = pages();
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            let reached = wait(&client, 1);
            d2.store(true, Ordering::Release);
            (reached, t.elapsed())
        });
        if round % 2 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        rigd.store_u32(at(LOST_OFFSET), 1, Ordering::Release);
        futex::wake_all(rigd.atomic_u32(at(LOST_OFFSET)));
        let (reached, took) = h.join().unwrap();
        assert!(done.load(Ordering::Acquire));
        assert!(!reached);
        assert!(
            took < SLEEP / 4,
            "round {round}: the loss's wake was lost ({took:?})"
        );
    }
}
