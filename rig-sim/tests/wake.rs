//! A release that interrupts wakes the host threads that sleep on the word it wrote, in any
//! process that maps the memory (a futex of the memfd's page), as a driver's interrupt
//! handler would: a client sleeps on its timeline word and needs no other wake.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use rig_amd::gpu::QueueKind;
use rig_amd::pm4::{Packet, ReleaseMem};
use rig_amd::sdma;
use rig_shm::{SharedRegion, futex};

/// Longer than any test waits: a sleeper that is not woken sleeps this long.
const ASLEEP: Duration = Duration::from_secs(20);

/// Starts a thread that sleeps on the word at `offset` of another mapping of `r` until it
/// differs from 0, and returns how long it slept.
fn sleeper(r: &SharedRegion, offset: usize) -> std::thread::JoinHandle<Duration> {
    let other = SharedRegion::from_fd(r.dup_fd().unwrap()).unwrap();
    std::thread::spawn(move || {
        let t = Instant::now();
        let word = other.atomic_u32(offset);
        while word.load(Ordering::Acquire) == 0 && t.elapsed() < ASLEEP {
            futex::wait(word, 0, Some(ASLEEP));
        }
        t.elapsed()
    })
}

#[test]
fn a_pm4_release_that_interrupts_wakes_sleepers_of_its_word() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let h = sleeper(&data, 0);
    // Asleep by now; were it not, it would see the value and end at once.
    std::thread::sleep(Duration::from_millis(50));
    let mut r = ReleaseMem::timeline(0, HOST_VA, 7);
    r.int_ctxid = 3;
    q.submit(&Packet::ReleaseMem(r).to_words().unwrap());
    let slept = h.join().unwrap();
    assert_eq!(data.load_u64(0, Ordering::Acquire), 7);
    assert!(
        slept < ASLEEP / 2,
        "the release did not wake its word's sleeper"
    );
    q.wait_idle();
}

#[test]
fn an_sdma_fence_and_trap_wake_sleepers_of_the_fenced_word() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let h = sleeper(&data, 64);
    std::thread::sleep(Duration::from_millis(50));
    let mut w = [0u32; 6];
    let fence = sdma::Fence {
        mtype: sdma::FENCE_MTYPE_UC,
        address: HOST_VA + 64,
        value: 9,
    };
    let n = fence.encode(&mut w).unwrap();
    let m = sdma::Trap { context: 1 }.encode(&mut w[n..]).unwrap();
    q.submit(&w[..n + m]);
    let slept = h.join().unwrap();
    assert_eq!(data.load_u32(64, Ordering::Acquire), 9);
    assert!(
        slept < ASLEEP / 2,
        "the trap did not wake the fenced word's sleeper"
    );
    q.wait_idle();
}

/// Longest a round of the doorbell race may take: less than the queue thread's backstop
/// recheck (`DOORBELL_RECHECK`, 10 s), so a ring that only the recheck finds fails it.
const BOUND: Duration = Duration::from_secs(8);

/// Busy-waits `d` (a sleep of the test thread would be far coarser than the poll window).
fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// A doorbell rung just as the queue's thread ends its poll of the doorbell and goes to
/// sleep, or while it runs the packets of the ring before, is never lost: pairs of
/// releases, the first rung after delays swept across the poll window's end and the
/// second right after it, each complete well before the thread's backstop recheck (10 s)
/// would find them.
#[test]
fn a_ring_as_the_queue_goes_from_polling_to_sleeping_is_never_lost() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let window = rig_sim::queue::DOORBELL_POLL;
    assert!(BOUND < rig_sim::queue::DOORBELL_RECHECK);
    // From a ring at once to one well after the window, in steps of a fortieth of it.
    let steps = 80u32;
    for round in 1..=4 * u64::from(steps) {
        let delay = window * (round as u32 % steps) / (steps / 2);
        spin_for(delay);
        let (first, second) = (2 * round - 1, 2 * round);
        let release = ReleaseMem::timeline(0, HOST_VA, first);
        q.submit(&Packet::ReleaseMem(release).to_words().unwrap());
        spin_for(Duration::from_nanos(100 * (round % 16)));
        let release = ReleaseMem::timeline(0, HOST_VA, second);
        q.submit(&Packet::ReleaseMem(release).to_words().unwrap());
        let t = Instant::now();
        while data.load_u64(0, Ordering::Acquire) != second {
            assert!(
                t.elapsed() < BOUND,
                "round {round}: the ring after {delay:?} was lost (the queue slept through it)"
            );
            std::thread::yield_now();
        }
    }
    q.wait_idle();
}
