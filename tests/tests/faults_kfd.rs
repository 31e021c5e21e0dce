//! The tests of faults.rs through rigd's kfd path: the same tests, against a rigd serving an
//! emulated KFD's gfx1100 (rig-kfd-emu, in a process of its own) instead of the simulated
//! GPU. The file name selects the path (`common::on_kfd`); what only the simulator reports
//! is skipped by `common::only_on_sim`'s rule.

// faults.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

mod common;
#[path = "faults.rs"]
mod faults;

use common::{Daemon, code};
use rig_client::{Error, FaultKind, Launch, Memory, Queue, Ref, Submission};

/// The kfd path's share of `a_kernel_storing_to_unmapped_memory_...`: KFD's memory exception
/// names the faulting address (not the instruction), and that is what the program sees.
#[test]
fn a_kernel_storing_to_unmapped_memory_is_a_memory_fault_at_its_address() {
    let d = Daemon::start(None);
    let dev = d.device();
    let dims = dev
        .load_image(&code("dims"))
        .unwrap()
        .resolve("dims")
        .unwrap();
    let out = dev.buffer(4096, Memory::Pinned).unwrap();
    let off = 1u64 << 40;
    let s = Submission::new().launch(
        Launch::new(&dims, [1, 1, 1], [1, 1, 1])
            .params(&off.to_le_bytes())
            .refs(&[Ref::write(&out, 0)]),
    );
    match dev.submit(&s).unwrap().wait() {
        Err(Error::Lost { device, fault }) => {
            assert_eq!(device, "AMD:0");
            assert_eq!(fault.kind(), FaultKind::MemoryFault, "{fault}");
            assert_eq!(fault.address(), Some(out.address() + off), "{fault}");
            assert!(fault.to_string().contains("page not present"), "{fault}");
        }
        other => panic!("the wait returned {other:?}, not Lost"),
    }
}

/// The kfd path's share of `a_packet_the_queue_cannot_run_...`: a packet the command
/// processor cannot run halts the queue, which KFD reports as a reset of the GPU's engine.
#[test]
fn a_packet_the_queue_cannot_run_loses_the_device_with_a_reset() {
    let d = Daemon::start(None);
    let dev = d.device();
    let header = 3u32 << 30 | 0xff << 8;
    let p = dev
        .submit(&Submission::new().words(Queue::Compute, &[header]))
        .unwrap();
    match p.wait() {
        Err(Error::Lost { fault, .. }) => {
            assert_eq!(fault.kind(), FaultKind::Reset, "{fault}");
        }
        other => panic!("the wait returned {other:?}, not Lost"),
    }
}
