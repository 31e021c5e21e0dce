//! A growth on a GPU whose queue slots are all taken, through rigd's kfd path on the
//! emulated KFD (whose CREATE_QUEUE answers EPERM past `max_num_of_queues_per_device`, as
//! the kernel does): the queue a growth made and no room installed goes first, and its
//! replacement takes its slot, rather than the growth failing.

use std::sync::Arc;

use nix::sys::eventfd::{EfdFlags, EventFd};
use rig_proto::messages::Generations;
use rigd::device::{Device, MakeError};
use rigd::path::{Backend, Events, Owner};

use super::kfd_path::{Setup, setup_on};

/// A device on an emulated gfx1100 that holds at most `most` queues: the device, and the
/// emulated kernel's count of the GPU's queues.
fn device(most: usize) -> (Setup, Device, impl Fn() -> usize) {
    let config = rig_kfd_emu::kernel::Config {
        max_queues_per_device: most,
        ..Default::default()
    };
    let s = setup_on(config, "gfx1100");
    let backend = &s.backend;
    let events = Events {
        interrupt: Arc::new(|| {}),
        fault: Arc::new(|_| {}),
    };
    let path = backend.open(Owner(1), events).unwrap();
    let interrupt = Arc::new(EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC).unwrap());
    let device = Device::make(
        rig_proto::DeviceId(1),
        0,
        backend.description().clone(),
        path,
        interrupt,
        Default::default(),
    )
    .unwrap();
    let server = s.server.clone();
    let queues = move || server.kernel().gpus()[0].queues();
    (s, device, queues)
}

#[test]
fn a_growth_without_a_free_slot_replaces_the_queue_no_room_installed_in_its_slot() {
    // The device's compute and copy queues, and one slot more.
    let (_dir, mut d, queues) = device(3);
    assert_eq!(queues(), 2);
    let none_installed = Generations::default();
    // A first growth takes the free slot.
    let (grown, _) = d.grow(1 << 20, 0, 0, none_installed).unwrap();
    assert!(grown.compute.is_some());
    assert_eq!(queues(), 3);
    // A larger one before any room installed it: no slot is free, so the queue it replaces
    // (which ran no work) goes first and the new one is made in its slot.
    let (grown, _) = d.grow(4 << 20, 0, 0, none_installed).unwrap();
    assert!(grown.compute.is_some());
    assert_eq!(queues(), 3);
}

#[test]
fn a_growth_without_a_free_slot_and_nothing_to_replace_is_full() {
    let (_dir, mut d, queues) = device(2);
    // The installed queue runs the device's work: it is never destroyed to make room.
    match d.grow(1 << 20, 0, 0, Generations::default()) {
        Err(MakeError::Full { .. }) => {}
        r => panic!("a growth with no slot: {:?}", r.map(|_| ())),
    }
    assert_eq!(queues(), 2);
}
