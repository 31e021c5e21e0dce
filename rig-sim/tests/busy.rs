//! `Queue::busy_since`, the simulator's own account of a queue that runs without going back
//! to sleep, for every processor: a PM4 indirect buffer chained to itself, a WAIT_REG_MEM and
//! a POLL_REGMEM that never pass, an AQL barrier whose signal never drops. Each shows busy
//! with one unchanging start for as long as it runs, and `stop` ends it within a second.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use rig_amd::aql::{self, Barrier, Header};
use rig_amd::gpu::{Gpu, QueueKind};
use rig_amd::pm4::{self, Compare, IndirectBuffer, WaitRegMem64};
use rig_amd::sdma::{self, Layout, PollRegMem};
use rig_sim::QueueStatus;

fn busy(q: &TestQueue) -> Option<Instant> {
    q.queue.lock().unwrap().as_ref().unwrap().busy_since()
}

/// The queue runs its endless packet: busy, from one start, until a stop that returns within a
/// second and leaves it stopped and not busy.
fn busy_until_stopped(q: &TestQueue) {
    wait_for("the queue to be busy", || busy(q).is_some());
    let since = busy(q).unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        assert_eq!(busy(q), Some(since), "busy without a break, from one start");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(since.elapsed() >= Duration::from_millis(300));
    assert_eq!(q.status(), QueueStatus::Running);
    let t = Instant::now();
    q.stop();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "stop took {took:?}");
    assert_eq!(q.status(), QueueStatus::Stopped);
    assert_eq!(busy(q), None, "a stopped queue is not busy");
}

fn pm4_words(p: pm4::Packet<'_>) -> Vec<u32> {
    p.to_words().unwrap()
}

fn ib(address: u64, size_dw: u32, chain: bool) -> Vec<u32> {
    pm4_words(pm4::Packet::IndirectBuffer(IndirectBuffer {
        address,
        size_dw,
        chain,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    }))
}

#[test]
fn an_indirect_buffer_chained_to_itself_is_busy_until_stopped() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 2 * 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    // Idle first: a queue that ran its ring and sleeps is not busy.
    q.submit(&pm4_words(pm4::Packet::ReleaseMem(
        pm4::ReleaseMem::timeline(0, HOST_VA + 8, 1),
    )));
    q.wait_idle();
    wait_for("the idle queue not to be busy", || busy(&q).is_none());
    // The buffer at HOST_VA + 0x1000 holds one packet: a chain to itself.
    let selfie = ib(HOST_VA + 0x1000, 4, true);
    assert_eq!(selfie.len(), 4);
    data.write(
        0x1000,
        &selfie
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    q.submit(&ib(HOST_VA + 0x1000, 4, false));
    busy_until_stopped(&q);
}

#[test]
fn a_wait_reg_mem_that_never_passes_is_busy_until_stopped() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let _data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&pm4_words(pm4::Packet::WaitRegMem64(
        WaitRegMem64::at_least(HOST_VA, 1),
    )));
    busy_until_stopped(&q);
}

#[test]
fn a_poll_regmem_that_never_passes_is_busy_until_stopped() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let _data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let layout = Layout::for_gpu(Gpu::by_name("gfx1100").unwrap());
    q.submit(
        &sdma::Packet::PollRegMem(PollRegMem {
            hdp_flush: false,
            function: Compare::Equal,
            memory: true,
            address: HOST_VA,
            value: 0x55,
            mask: 0xff,
            interval: 10,
            retry_count: 0xfff,
        })
        .to_words(layout)
        .unwrap(),
    );
    busy_until_stopped(&q);
}

#[test]
fn an_aql_barrier_whose_signal_never_drops_is_busy_until_stopped() {
    let gpu = gpu("gfx942");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    // A signal whose value (offset 8) stays 1.
    data.store_u64(0x108, 1, Ordering::Release);
    let mut q = TestQueue::new(&space, QueueKind::Aql, 4096, 0);
    q.place_aql(
        aql::Packet::BarrierAnd(Barrier {
            header: Header::default(),
            dep_signal: [HOST_VA + 0x100, 0, 0, 0, 0],
            completion_signal: 0,
        })
        .encode()
        .unwrap(),
    );
    q.ring_bell();
    busy_until_stopped(&q);
}
