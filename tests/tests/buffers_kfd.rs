//! The tests of buffers.rs through rigd's kfd path: the same tests, against a rigd serving an
//! emulated KFD's gfx1100 (rig-kfd-emu, in a process of its own) instead of the simulated
//! GPU. The file name selects the path (`common::on_kfd`); what only the simulator reports
//! is skipped by `common::only_on_sim`'s rule.

// buffers.rs brings its own (private) copy of the harness; this file's check needs one too.
#![allow(clippy::duplicate_mod)]

#[path = "buffers.rs"]
mod buffers;
mod common;

use std::time::Duration;

use rig_client::{Memory, Queue, Submission};

/// What `open_list_facts_close` asks of the simulated GPU, asked of the kfd path's: the GPU
/// is KFD's, at its bus, with its VRAM and firmware.
#[test]
fn the_gpu_is_kfds_with_its_bus_vram_and_firmware() {
    let d = common::Daemon::start(None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, "gfx1100");
    assert!(gpus[0].bus.is_some(), "{gpus:?}");
    assert!(gpus[0].memory_bytes > 0, "{gpus:?}");
    let dev = d.device();
    assert_eq!(dev.facts().queues, vec![Queue::Compute, Queue::Copy]);
    assert!(dev.facts().mec > 0, "{:?}", dev.facts());
}

/// A device whose work is done is idle, however long: amdgpu bounds no user queue, so the
/// hang bound rests on the path's knowledge of running work, which ends with the interrupt
/// of the last release (rigd once lost every idle KFD device after hang_ms).
#[test]
fn a_device_idle_past_its_hang_bound_is_not_lost() {
    let d = common::Daemon::start(None);
    let dev = d.device();
    let hang_ms = dev.facts().hang_ms.expect("the kfd path bounds work");
    let b = dev.buffer(64, Memory::Pinned).unwrap();
    let fill = |byte| Submission::new().fill(&b, 0, 64, byte);
    dev.submit(&fill(1)).unwrap().wait().unwrap();
    std::thread::sleep(Duration::from_millis(hang_ms + 500));
    assert!(dev.lost().is_none(), "{:?}", dev.lost());
    dev.submit(&fill(2)).unwrap().wait().unwrap();
    assert_eq!(b.read(|b| b.to_vec()).unwrap(), vec![2; 64]);
}
