//! Arbitrary words in a PM4, SDMA or AQL ring of the simulated GPU, as a hostile client can
//! write them: the queue runs, waits or faults that queue alone; never a panic, never a
//! write outside its own address space, and a stop always ends it promptly.
#![no_main]

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rig_amd::gpu::QueueKind;
use rig_shm::{Doorbell, SharedRegion};
use rig_sim::{QueueDesc, QueueStatus, SimConfig, SimGpu};

const RING_VA: u64 = 0x1_0000_0000;
const POS_VA: u64 = 0x2_0000_0000;
/// Host memory near which fuzzed addresses land (the words below often point here).
const HOST_VA: u64 = 0x8_0000_0000;
const VRAM_VA: u64 = 0x4_0000_0000;
const RING_BYTES: u64 = 4096;

fn gpu() -> &'static Arc<SimGpu> {
    static GPU: OnceLock<Arc<SimGpu>> = OnceLock::new();
    GPU.get_or_init(|| {
        SimGpu::new(SimConfig {
            model: "gfx1100".into(),
            vram_bytes: 256 << 20,
            exec_threads: 1,
            ..SimConfig::default()
        })
        .expect("a simulated gpu")
    })
}

/// Words that make likely packets: the input's words, with some replaced by addresses of
/// mapped memory so packets get past their first translation.
fn word(raw: u32, i: usize) -> u32 {
    match raw >> 28 {
        0xf if i % 2 == 1 => (HOST_VA >> 32) as u32,
        0xe if i % 2 == 1 => (VRAM_VA >> 32) as u32,
        0xd => raw & 0xffc,
        _ => raw,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let kind = match pick % 3 {
        0 => QueueKind::Pm4,
        1 => QueueKind::Sdma,
        _ => QueueKind::Aql,
    };
    let words: Vec<u32> = body
        .chunks(4)
        .enumerate()
        .map(|(i, c)| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            word(u32::from_le_bytes(b), i)
        })
        .take((RING_BYTES / 4) as usize)
        .collect();
    let gpu = gpu();
    let space = gpu.create_address_space();
    let host = SharedRegion::create("fuzz-host", 4096).expect("host memory");
    space
        .map_host(HOST_VA, &host, 0, 4096, true)
        .expect("map host");
    space.alloc_vram(VRAM_VA, 64 << 10).expect("vram");
    let ring = SharedRegion::create("fuzz-ring", RING_BYTES as usize).expect("ring");
    let aql = kind == QueueKind::Aql;
    space
        .map_host(RING_VA, &ring, 0, RING_BYTES, aql)
        .expect("map ring");
    let pos = SharedRegion::create("fuzz-pos", 4096).expect("positions");
    space
        .map_host(POS_VA, &pos, 0, 4096, true)
        .expect("map positions");
    let bells = SharedRegion::create("fuzz-bells", 4096).expect("doorbells");
    let doorbell = Doorbell::new(bells, 64).expect("a doorbell");
    for (i, w) in words.iter().enumerate() {
        ring.store_u32(i * 4, *w, Ordering::Relaxed);
    }
    let queue = space
        .create_queue(
            QueueDesc {
                kind,
                ring_va: RING_VA,
                ring_bytes: RING_BYTES,
                rptr_va: POS_VA,
                wptr_va: POS_VA + 8,
                doorbell: doorbell.clone(),
                queue_va: 0,
                scratch: (0, 0),
            },
            Arc::new(|_| {}),
            Arc::new(|_| {}),
        )
        .expect("a queue");
    // Write positions count dwords on PM4, bytes on SDMA and packets on AQL.
    let wpos = match kind {
        QueueKind::Pm4 => words.len() as u64,
        QueueKind::Sdma => words.len() as u64 * 4,
        QueueKind::Aql => (words.len() as u64 * 4).div_ceil(64),
    };
    pos.store_u64(8, wpos, Ordering::Release);
    doorbell.ring(wpos);
    let began = Instant::now();
    while pos.load_u64(0, Ordering::Acquire) != wpos
        && queue.status() == QueueStatus::Running
        && began.elapsed() < Duration::from_millis(20)
    {
        std::thread::yield_now();
    }
    let stopping = Instant::now();
    queue.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        stopping.elapsed()
    );
});
