//! An AQL queue with an `amd_queue_t` (as the emulated KFD makes one: the descriptor at the
//! read pointer less `read_dispatch_id`'s offset) gives each kernel the scratch its
//! descriptor holds at the dispatch: the LLVM-compiled `scratch` kernel (kernels/src/
//! scratch.cl, a private array) runs on it and its results verify; a descriptor whose
//! scratch lies where nothing is mapped faults the kernel at that memory; one the queue
//! cannot read faults the queue with its address.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use common::*;
use rig_amd::aql::{AmdQueue, KernelDispatch, Packet, amd_queue};
use rig_amd::gpu::{Generation, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use rig_sim::{AddressSpace, Queue, QueueDesc, QueueFault, QueueStatus};

const CODE_VA: u64 = 0x5_0000_0000;
const SCRATCH_VA: u64 = 0x6_0000_0000;
const QUEUE_PAGE_VA: u64 = 0x3_0000_0000;
const M: usize = 256;

struct Run {
    queue: Queue,
    faults: Arc<Mutex<Vec<QueueFault>>>,
    mem: SharedRegion,
    page: SharedRegion,
    seeds: Vec<u32>,
}

/// Runs `scratch` over M items on an AQL queue whose `amd_queue_t` is `descriptor`, placed
/// at `queue_va`; `None` when the code object is absent.
fn run(descriptor: AmdQueue, queue_va: u64) -> Option<Run> {
    let gpu = gpu("gfx1100");
    let space: AddressSpace = gpu.create_address_space();
    let ScratchLaunch {
        kernel: k,
        mem,
        seeds,
        ..
    } = stage_scratch(&space, CODE_VA, M)?;
    space.alloc_vram(SCRATCH_VA, 1 << 20).unwrap();

    // The ring, and the page of the descriptor, whose dispatch ids are the queue's positions.
    let ring = SharedRegion::create("ring", 4096).unwrap();
    for slot in 0..64 {
        ring.store_u32(slot * 64, 1, Ordering::Relaxed);
    }
    space.map_host(RING_VA, &ring, 0, 4096, true).unwrap();
    let page = SharedRegion::create("amd_queue", 4096).unwrap();
    page.write(0, &descriptor.to_bytes());
    space.map_host(QUEUE_PAGE_VA, &page, 0, 4096, true).unwrap();
    let bells = SharedRegion::create("bells", 4096).unwrap();
    let doorbell = Doorbell::new(bells, 64).unwrap();
    let faults = Arc::new(Mutex::new(Vec::new()));
    let f = faults.clone();
    let queue = space
        .create_queue(
            QueueDesc {
                kind: QueueKind::Aql,
                ring_va: RING_VA,
                ring_bytes: 4096,
                rptr_va: QUEUE_PAGE_VA + amd_queue::READ_DISPATCH_ID as u64,
                wptr_va: QUEUE_PAGE_VA + amd_queue::WRITE_DISPATCH_ID as u64,
                doorbell: doorbell.clone(),
                queue_va,
                // What a queue without a descriptor would give: never used here.
                scratch: (0, 0),
            },
            Arc::new(|_| {}),
            Arc::new(move |fault| f.lock().unwrap().push(fault)),
        )
        .unwrap();
    let packet = Packet::KernelDispatch(KernelDispatch {
        header: Default::default(),
        dimensions: 1,
        workgroup_size: [64, 1, 1],
        grid_size: [M as u32, 1, 1],
        private_segment_size: k.private_segment_size(),
        group_segment_size: 0,
        kernel_object: CODE_VA + k.descriptor_offset(),
        kernarg_address: HOST_VA,
        completion_signal: 0,
    })
    .encode()
    .unwrap();
    for (i, w) in packet.iter().enumerate().skip(1) {
        ring.store_u32(4 * i, *w, Ordering::Relaxed);
    }
    ring.store_u32(0, packet[0], Ordering::Release);
    page.store_u64(amd_queue::WRITE_DISPATCH_ID, 1, Ordering::Release);
    // ROCr rings the last packet's index.
    doorbell.ring(0);
    wait_for("the dispatch", || {
        page.load_u64(amd_queue::READ_DISPATCH_ID, Ordering::Acquire) == 1
            || !faults.lock().unwrap().is_empty()
    });
    Some(Run {
        queue,
        faults,
        mem,
        page,
        seeds,
    })
}

/// A descriptor of the test's ring with `bytes` of scratch at `base` for 16 wave slots.
fn descriptor(base: u64, bytes: u64) -> AmdQueue {
    let mut q = AmdQueue::new(RING_VA, 4096);
    q.set_scratch(Generation::Gfx11.hal(), base, bytes, 16);
    q
}

#[test]
fn a_kernel_gets_the_scratch_of_the_queues_amd_queue() {
    let Some(r) = run(descriptor(SCRATCH_VA, 1 << 20), QUEUE_PAGE_VA) else {
        return;
    };
    assert!(r.faults.lock().unwrap().is_empty(), "{:?}", r.faults);
    assert_eq!(r.queue.status(), QueueStatus::Running);
    for (i, seed) in r.seeds.iter().enumerate() {
        let got = r.mem.load_u32(4096 + 4 * M + 4 * i, Ordering::Acquire);
        assert_eq!(got, scratch_output(i, *seed), "out[{i}]");
    }
    assert_eq!(
        r.page
            .load_u64(amd_queue::READ_DISPATCH_ID, Ordering::Acquire),
        1,
        "the read position is the descriptor's read_dispatch_id"
    );
}

#[test]
fn scratch_where_nothing_is_mapped_faults_the_kernel_there() {
    let bad = 0x7_0000_0000u64;
    let Some(r) = run(descriptor(bad, 1 << 20), QUEUE_PAGE_VA) else {
        return;
    };
    let faults = r.faults.lock().unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let why = faults[0].to_string();
    assert!(
        why.contains(&format!("memory fault at {bad:#x}")),
        "the kernel faults at the scratch memory: {why}"
    );
    assert!(matches!(r.queue.status(), QueueStatus::Faulted(_)));
}

#[test]
fn a_descriptor_the_queue_cannot_read_faults_it_with_the_address() {
    let unmapped = 0x3_1000_0000u64;
    let Some(r) = run(descriptor(SCRATCH_VA, 1 << 20), unmapped) else {
        return;
    };
    let faults = r.faults.lock().unwrap();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert!(
        faults[0].to_string().contains(&format!("{unmapped:#x}")),
        "{}",
        faults[0]
    );
}
