//! A release that interrupts writes its word before it interrupts, so whoever receives the
//! interrupt (a driver's handler; rigd's paths) finds the value there and can wake the host
//! threads that sleep on the word. The GPU wakes none of them itself: no hardware wakes a
//! futex. Also: doorbell rings are never lost, and an engine write wakes only the waits
//! watching the page it wrote.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use rig_amd::gpu::QueueKind;
use rig_amd::pm4::{Packet, ReleaseMem};
use rig_amd::sdma;

/// Waits until `n` waits of `gpu` watch their words (a loaded machine may take long to
/// start their queues).
fn watching(gpu: &rig_sim::SimGpu, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while gpu.waits_watching() < n && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        gpu.waits_watching(),
        n,
        "the waits never all watched their words"
    );
}

/// Waits until `q`'s first interrupt came.
fn interrupted(q: &TestQueue) {
    let t = Instant::now();
    while q.seen.interrupts.lock().unwrap().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "no interrupt came");
        std::thread::sleep(Duration::from_millis(1));
    }
    q.wait_idle();
}

#[test]
fn a_pm4_release_interrupts_with_its_context_after_it_wrote_its_word() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    *q.seen.word.lock().unwrap() = Some((data.clone(), 0));
    let mut r = ReleaseMem::timeline(0, HOST_VA, 7);
    r.int_ctxid = 3;
    q.submit(&Packet::ReleaseMem(r).to_words().unwrap());
    interrupted(&q);
    let irqs = q.seen.interrupts.lock().unwrap().clone();
    assert_eq!(irqs.len(), 1);
    assert_eq!(irqs[0].context, 3);
    assert_eq!(irqs[0].source, rig_sim::InterruptSource::ReleaseMem);
    assert_eq!(*q.seen.word_at_interrupt.lock().unwrap(), [7]);
}

#[test]
fn an_sdma_trap_interrupts_with_its_context_after_the_fence_wrote_its_word() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    *q.seen.word.lock().unwrap() = Some((data.clone(), 64));
    let mut w = [0u32; 6];
    let fence = sdma::Fence {
        mtype: sdma::FENCE_MTYPE_UC,
        address: HOST_VA + 64,
        value: 9,
    };
    let n = fence.encode(&mut w).unwrap();
    let m = sdma::Trap { context: 5 }.encode(&mut w[n..]).unwrap();
    q.submit(&w[..n + m]);
    interrupted(&q);
    let irqs = q.seen.interrupts.lock().unwrap().clone();
    assert_eq!(irqs.len(), 1);
    assert_eq!(irqs[0].context, 5);
    assert_eq!(irqs[0].source, rig_sim::InterruptSource::SdmaTrap);
    assert_eq!(*q.seen.word_at_interrupt.lock().unwrap(), [9]);
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

/// `words` of a WAIT_REG_MEM until the 32-bit word at `va` is at least `value`.
fn wait_words(va: u64, value: u32) -> Vec<u32> {
    Packet::WaitRegMem(rig_amd::pm4::WaitRegMem::memory_at_least(va, value))
        .to_words()
        .unwrap()
}

/// `words` of a release of `value` to `va`, 32 bits, with no interrupt.
fn release_words(va: u64, value: u64) -> Vec<u32> {
    let r = ReleaseMem {
        data_sel: rig_amd::pm4::DataSel::Low32,
        ..ReleaseMem::timeline(0, va, value)
    };
    Packet::ReleaseMem(r).to_words().unwrap()
}

/// An engine write wakes only the waits watching the page it wrote: with 64 queues of other
/// address spaces waiting on words of their own, a release in one address space wakes its
/// own waiter alone, and a release to a page that another address space maps too (a peer
/// device's word) wakes that space's waiter as well; the others still end, by their poll
/// when the host writes their word, or by a stop.
///
/// The woken waits watch a word beside the one written, in the same page, so none can end by
/// its own re-poll before the wake is counted: the counts are exact on a loaded machine.
#[test]
fn a_write_wakes_only_the_waits_watching_its_page() {
    let gpu = gpu("gfx1100");
    let mut others = Vec::new();
    for _ in 0..64 {
        let space = gpu.create_address_space();
        let data = host(&space, HOST_VA, 4096);
        let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
        q.submit(&wait_words(HOST_VA, 1));
        others.push((data, q));
    }
    // Address space A: a queue that waits on word 0, one that will write it.
    let a = gpu.create_address_space();
    let data = host(&a, HOST_VA, 8192);
    let mut waiter = TestQueue::new(&a, QueueKind::Pm4, 4096, 0);
    let mut writer = TestQueue::new(&a, QueueKind::Pm4, 4096, 1);
    waiter.submit(&wait_words(HOST_VA + 8, 1));
    // A peer space that maps A's second page too, and waits on its third word.
    let peer = gpu.create_address_space();
    const PEER_VA: u64 = HOST_VA + 0x10_0000;
    peer.map_host(PEER_VA, &data, 4096, 4096, false).unwrap();
    let mut peer_waiter = TestQueue::new(&peer, QueueKind::Pm4, 4096, 0);
    peer_waiter.submit(&wait_words(PEER_VA + 8, 1));
    // Every wait watching its word before the write (66 of them).
    watching(&gpu, 66);
    let before = gpu.waits_woken();
    writer.submit(&release_words(HOST_VA, 1));
    writer.wait_idle();
    assert_eq!(
        gpu.waits_woken() - before,
        1,
        "a release in one address space woke waits of others"
    );
    let before = gpu.waits_woken();
    writer.submit(&release_words(HOST_VA + 4096, 1));
    writer.wait_idle();
    assert_eq!(
        gpu.waits_woken() - before,
        1,
        "a release to a shared page wakes the waits of every space that watches it"
    );
    assert_eq!(data.load_u32(4096, Ordering::Acquire), 1);
    watching(&gpu, 66);
    data.store_u32(8, 1, Ordering::Release);
    data.store_u32(4096 + 8, 1, Ordering::Release);
    waiter.wait_idle();
    peer_waiter.wait_idle();
    let before = gpu.waits_woken();
    // The others: half see the host's write at their poll, half are stopped mid-wait.
    for (i, (d, q)) in others.iter().enumerate() {
        if i % 2 == 0 {
            d.store_u32(0, 1, Ordering::Release);
        } else {
            q.stop();
        }
    }
    for (i, (_, q)) in others.iter().enumerate() {
        if i % 2 == 0 {
            q.wait_idle();
        } else {
            assert!(
                matches!(q.status(), rig_sim::QueueStatus::Stopped),
                "{:?}",
                q.status()
            );
        }
    }
    assert_eq!(
        gpu.waits_woken() - before,
        0,
        "host writes and stops are no engine writes"
    );
}

/// A copy or fill wakes the waits watching a page of the bytes it wrote, and no other: an
/// SDMA queue copies 64 KiB into one region and fills another, each watched by a wait of its
/// own. Each waits for more than the engine writes, so the wake is counted before the host
/// lets it end.
#[test]
fn a_copy_or_fill_wakes_the_waits_of_the_pages_it_wrote() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    const BYTES: u64 = 64 << 10;
    let src = host(&space, HOST_VA, BYTES as usize);
    src.fill(0, BYTES as usize, 1);
    let dst_va = HOST_VA + 0x10_0000;
    let fill_va = HOST_VA + 0x20_0000;
    let dst = host(&space, dst_va, BYTES as usize);
    let filled = host(&space, fill_va, BYTES as usize);
    // Each waits on the last word of its region.
    let mut copied_waiter = TestQueue::new(&space, QueueKind::Pm4, 4096, 1);
    copied_waiter.submit(&wait_words(dst_va + BYTES - 4, 0x0202_0202));
    let mut filled_waiter = TestQueue::new(&space, QueueKind::Pm4, 4096, 2);
    filled_waiter.submit(&wait_words(fill_va + BYTES - 4, 2));
    watching(&gpu, 2);
    let layout = sdma::Layout::for_gpu(rig_amd::gpu::Gpu::by_name("gfx1100").unwrap());
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let before = gpu.waits_woken();
    q.submit(
        &sdma::Packet::CopyLinear(sdma::CopyLinear::new(HOST_VA, dst_va, BYTES))
            .to_words(layout)
            .unwrap(),
    );
    q.wait_idle();
    assert_eq!(
        gpu.waits_woken() - before,
        1,
        "the copy woke its page's waiter alone"
    );
    assert_eq!(
        dst.load_u32(BYTES as usize - 4, Ordering::Acquire),
        0x0101_0101
    );
    dst.store_u32(BYTES as usize - 4, 0x0202_0202, Ordering::Release);
    copied_waiter.wait_idle();
    let before = gpu.waits_woken();
    q.submit(
        &sdma::Packet::ConstFill(sdma::ConstFill::dwords(fill_va, 1, BYTES))
            .to_words(layout)
            .unwrap(),
    );
    q.wait_idle();
    assert_eq!(
        gpu.waits_woken() - before,
        1,
        "the fill woke its page's waiter alone"
    );
    assert_eq!(filled.load_u32(0, Ordering::Acquire), 1);
    filled.store_u32(BYTES as usize - 4, 2, Ordering::Release);
    filled_waiter.wait_idle();
}
