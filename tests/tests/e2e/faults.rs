//! A fault reaches the program as a value: the device's name and a typed `rig_client::Fault`
//! with its kind and the facts the GPU gave, from the simulated GPU through a real rigd.

use rig_client::{Error, Fault, FaultKind, Launch, Memory, Queue, Ref, Submission};
use rig_testkit::{Backend, Daemon};

/// The device's name and fault of a wait that must have lost it.
fn lost(r: rig_client::Result<()>) -> (String, Fault) {
    match r {
        Err(Error::Lost { device, fault }) => (device, fault),
        other => panic!("the wait returned {other:?}, not Lost"),
    }
}

/// A PM4 type-3 header with opcode 0xff, which no command processor runs.
const BAD_PM4: u32 = 3 << 30 | 0xff << 8;

fn a_kernel_storing_to_unmapped_memory_is_a_memory_fault_at_its_address_by_its_instruction(
    b: Backend,
) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let image = dev.load_image(&b.code("dims")).unwrap();
    let dims = image.resolve("dims").unwrap();
    let out = dev.buffer(4096, Memory::Pinned).unwrap();
    // `out` plus 1 TiB: work-item 0 stores its 8 words there, where nothing is mapped.
    let off = 1u64 << 40;
    let stored = out.address() + off..out.address() + off + 32;
    let s = Submission::new().launch(
        Launch::new(&dims, [1, 1, 1], [1, 1, 1])
            .params(&off.to_le_bytes())
            .refs(&[Ref::write(&out, 0)]),
    );
    let (device, fault) = lost(dev.submit(&s).unwrap().wait());
    assert_eq!(device, "AMD:0");
    assert_eq!(fault.kind(), FaultKind::MemoryFault, "{fault}");
    // Which of them is stored first is the compiler's choice (gfx942's build stores words
    // 2 and 3 first).
    let address = fault.address().expect("a memory fault names its address");
    assert!(stored.contains(&address), "{fault}");
    assert_eq!(fault.write(), Some(true), "{fault}");
    let pc = fault.pc().expect("a kernel's fault names its instruction");
    assert!(
        (image.address()..image.address() + image.size()).contains(&pc),
        "pc {pc:#x} lies outside the kernel's image at {:#x} ({} bytes)",
        image.address(),
        image.size()
    );
    assert_eq!(
        fault.queue().map(|q| q.to_string()).as_deref(),
        Some("COMPUTE:0")
    );
    assert!(fault.vmid().is_some(), "{fault}");
    // The error reads as one sentence, and keeps the typed value.
    let e = dev.submit(&Submission::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "AMD:0 lost: memory fault at {address:#x} (write) by the instruction at {pc:#x} on COMPUTE:0 (vmid {})",
            fault.vmid().unwrap()
        )
    );
    assert!(matches!(e, Error::Lost { fault: f, .. } if f == fault));
}

fn a_packet_the_queue_cannot_run_is_a_bad_packet_at_its_position(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    // A PM4 type-3 header with opcode 0xff, which no command processor runs (on an AQL
    // queue, in the indirect buffer of a PM4-IB packet).
    let (words, _ib) = crate::compute_words::pm4_words(&dev, &[BAD_PM4]);
    let p = dev
        .submit(&Submission::new().words(Queue::Compute, &words))
        .unwrap();
    let (device, fault) = lost(p.wait());
    assert_eq!(device, "AMD:0");
    assert_eq!(fault.kind(), FaultKind::BadPacket, "{fault}");
    assert!(fault.position().is_some(), "{fault}");
    assert_eq!(fault.pc(), None, "{fault}");
    assert_eq!(
        fault.queue().map(|q| q.to_string()).as_deref(),
        Some("COMPUTE:0")
    );
    assert!(fault.detail().contains("0xff"), "{fault}");
}

fn work_that_never_completes_is_lost_as_a_hang(b: Backend) {
    let d = Daemon::start(b, Some(300));
    let dev = d.device();
    // COMPUTE:0 waits for a word nobody writes.
    let flag = crate::compute_words::flag(&dev);
    let w = crate::compute_words::held_until(&dev, &flag);
    let p = dev
        .submit(&Submission::new().words(Queue::Compute, &w))
        .unwrap();
    let (device, fault) = lost(p.wait());
    assert_eq!(device, "AMD:0");
    assert_eq!(fault.kind(), FaultKind::Hang, "{fault}");
    assert!(fault.to_string().starts_with("hang: "), "{fault}");
}

/// The kfd path's share of `a_kernel_storing_to_unmapped_memory_...`: KFD's memory exception
/// names the faulting address (not the instruction), and that is what the program sees.
fn a_kernel_storing_to_unmapped_memory_is_a_memory_fault_at_its_address(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let dims = dev
        .load_image(&b.code("dims"))
        .unwrap()
        .resolve("dims")
        .unwrap();
    let out = dev.buffer(4096, Memory::Pinned).unwrap();
    let off = 1u64 << 40;
    let stored = out.address() + off..out.address() + off + 32;
    let s = Submission::new().launch(
        Launch::new(&dims, [1, 1, 1], [1, 1, 1])
            .params(&off.to_le_bytes())
            .refs(&[Ref::write(&out, 0)]),
    );
    match dev.submit(&s).unwrap().wait() {
        Err(Error::Lost { device, fault }) => {
            assert_eq!(device, "AMD:0");
            assert_eq!(fault.kind(), FaultKind::MemoryFault, "{fault}");
            assert!(
                fault.address().is_some_and(|a| stored.contains(&a)),
                "{fault}"
            );
            assert!(fault.to_string().contains("page not present"), "{fault}");
        }
        other => panic!("the wait returned {other:?}, not Lost"),
    }
}

/// The kfd path's share of `a_packet_the_queue_cannot_run_...`: a packet the command
/// processor cannot run halts the queue, which KFD reports as a reset of the GPU's engine.
fn a_packet_the_queue_cannot_run_loses_the_device_with_a_reset(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let (words, _ib) = crate::compute_words::pm4_words(&dev, &[BAD_PM4]);
    let p = dev
        .submit(&Submission::new().words(Queue::Compute, &words))
        .unwrap();
    match p.wait() {
        Err(Error::Lost { fault, .. }) => {
            assert_eq!(fault.kind(), FaultKind::Reset, "{fault}");
        }
        other => panic!("the wait returned {other:?}, not Lost"),
    }
}

// Not on kfd: KFD's exception events name a GPU and an address, not the instruction, the
// packet position or the queue; the kfd shares of these two follow.
rig_testkit::on_backends!(sim, gfx942 =>
    a_kernel_storing_to_unmapped_memory_is_a_memory_fault_at_its_address_by_its_instruction,
    a_packet_the_queue_cannot_run_is_a_bad_packet_at_its_position,
);

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 => work_that_never_completes_is_lost_as_a_hang);

rig_testkit::on_backends!(kfd, kfd_gfx942 =>
    a_kernel_storing_to_unmapped_memory_is_a_memory_fault_at_its_address,
    a_packet_the_queue_cannot_run_loses_the_device_with_a_reset,
);
