//! A client cannot keep a stopped queue's thread alive: it clears the `sleeping` word of its
//! doorbell slot once the queue's thread sleeps (so that a wake trusting the word would not
//! come), and the queue is stopped and dropped with its address space. The thread must end
//! before `stop` returns, and over many cycles the process's threads, descriptors and
//! mappings come back to where they were. (Before, each cycle left the thread asleep for ever,
//! holding its address space and doorbell page.)
//!
//! This file holds one test, so that no other test's threads or descriptors move the counts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_amd::gpu::QueueKind;
use rig_shm::{DOORBELL_SLEEPING_OFFSET, Doorbell, SharedRegion};
use rig_sim::{QueueDesc, QueueStatus, SimConfig, SimGpu};

const RING_VA: u64 = 0x1_0000_0000;
const POS_VA: u64 = 0x2_0000_0000;
const CYCLES: usize = 50;

fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn threads() -> usize {
    entries("/proc/self/task")
}

/// The process's threads once they are back to `want`, or after a second. A joined thread
/// has ended (its join returns when the kernel clears its tid on exit), but the kernel lists
/// it in /proc/self/task until it is reaped a moment later, longer on a loaded machine.
fn threads_settled(want: usize) -> usize {
    let t = Instant::now();
    loop {
        let n = threads();
        if n == want || t.elapsed() > Duration::from_secs(1) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn fds() -> usize {
    entries("/proc/self/fd")
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// One cycle: a queue whose client clears its sleeping word, then stop and drop everything.
fn cycle(gpu: &Arc<SimGpu>, kind: QueueKind, threads_before: usize) {
    let space = gpu.create_address_space();
    let ring = SharedRegion::create("ring", 4096).unwrap();
    if kind == QueueKind::Aql {
        for slot in 0..64 {
            ring.store_u32(slot * 64, 1, Ordering::Relaxed);
        }
    }
    space.map_host(RING_VA, &ring, 0, 4096, true).unwrap();
    let pos = SharedRegion::create("pos", 4096).unwrap();
    space.map_host(POS_VA, &pos, 0, 4096, true).unwrap();
    let bells = SharedRegion::create("bells", 4096).unwrap();
    let slot = 64;
    let queue = space
        .create_queue(
            QueueDesc {
                kind,
                ring_va: RING_VA,
                ring_bytes: 4096,
                rptr_va: POS_VA,
                wptr_va: POS_VA + 8,
                doorbell: Doorbell::new(bells.clone(), slot).unwrap(),
                queue_va: 0,
                scratch: (0, 0),
            },
            Arc::new(|_| {}),
            Arc::new(|f| panic!("no fault expected: {f}")),
        )
        .unwrap();
    // The client clears the word each time the thread sets it, until it stays clear: then the
    // thread sleeps on a word that says it does not.
    let sleeping = slot + DOORBELL_SLEEPING_OFFSET;
    let t = Instant::now();
    loop {
        while bells.load_u32(sleeping, Ordering::SeqCst) == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the queue never slept"
            );
            std::thread::yield_now();
        }
        bells.store_u32(sleeping, 0, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(10));
        if bells.load_u32(sleeping, Ordering::SeqCst) == 0 {
            break;
        }
    }
    let t = Instant::now();
    queue.stop();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "stop took {took:?}");
    assert_eq!(queue.status(), QueueStatus::Stopped);
    assert_eq!(
        threads_settled(threads_before),
        threads_before,
        "the queue's thread ended before stop returned"
    );
    drop(queue);
    drop(space);
}

#[test]
fn a_cleared_sleeping_word_does_not_keep_a_stopped_queue_alive() {
    let gpu = SimGpu::new(SimConfig {
        vram_bytes: 1 << 30,
        ..SimConfig::default()
    })
    .unwrap();
    let kinds = [QueueKind::Pm4, QueueKind::Sdma, QueueKind::Aql];
    let models = [
        gpu.clone(),
        SimGpu::new(SimConfig {
            model: "gfx942".into(),
            vram_bytes: 1 << 30,
            ..SimConfig::default()
        })
        .unwrap(),
    ];
    // One cycle of each first, so that whatever is made once (the test's own buffers) is in
    // the baseline.
    let base = threads();
    for (i, kind) in kinds.iter().enumerate() {
        cycle(&models[usize::from(i == 2)], *kind, base);
    }
    let (fds_before, maps_before) = (fds(), mappings());
    for i in 0..CYCLES {
        let k = i % kinds.len();
        cycle(&models[usize::from(k == 2)], kinds[k], base);
    }
    assert_eq!(threads_settled(base), base, "threads back to the baseline");
    assert_eq!(fds(), fds_before, "descriptors back to the baseline");
    // A leak is several mappings a cycle; the allocator may move one or two.
    let maps = mappings();
    assert!(
        maps <= maps_before + 2,
        "mappings back to the baseline: {maps} after, {maps_before} before"
    );
}
