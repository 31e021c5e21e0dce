//! Untrusted rings: any words a client writes make a queue run, wait, or fault; never a panic
//! of the simulator, and a stop always ends it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use rig_amd::gpu::QueueKind;
use rig_sim::{FaultReason, QueueStatus};

/// Words that are often packet headers and addresses near the mapped host page.
fn pm4_word() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (
            prop::sample::select(vec![
                0x10u8, 0x15, 0x37, 0x3c, 0x3f, 0x40, 0x46, 0x49, 0x58, 0x76, 0x93
            ]),
            0usize..12
        )
            .prop_map(|(op, n)| rig_amd::pm4::header(op, n + 2)),
        Just((HOST_VA >> 32) as u32),
        (0u32..64).prop_map(|o| o * 4),
    ]
}

fn sdma_word() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        (
            prop::sample::select(vec![0u32, 1, 5, 6, 8, 11, 13, 17]),
            0u32..5
        )
            .prop_map(|(op, sub)| op | sub << 8),
        Just((HOST_VA >> 32) as u32),
        (0u32..64).prop_map(|o| o * 4),
    ]
}

fn run(kind: QueueKind, words: &[u32]) {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let _mem = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, kind, 4096, 0);
    q.submit(words);
    let t = Instant::now();
    while q.rptr() != q.wpos
        && q.status() == QueueStatus::Running
        && t.elapsed() < Duration::from_millis(100)
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    let s = Instant::now();
    q.stop();
    assert!(
        s.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        s.elapsed()
    );
    if let Some((f, _)) = q.seen.faults.lock().unwrap().first() {
        assert!(!matches!(f.reason, FaultReason::Internal(_)), "{f}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_pm4_words_run_wait_or_fault(words in prop::collection::vec(pm4_word(), 1..48)) {
        run(QueueKind::Pm4, &words);
    }

    #[test]
    fn random_sdma_words_run_wait_or_fault(words in prop::collection::vec(sdma_word(), 1..48)) {
        run(QueueKind::Sdma, &words);
    }
}
