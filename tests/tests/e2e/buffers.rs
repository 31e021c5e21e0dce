//! Buffers, copies and fills against a real rigd on the simulated GPU.

use rig_client::{CopyBox, Error, Memory, Never, Queue, Submission};
use rig_testkit::{Backend, Daemon, pattern};
use std::time::Duration;

fn open_list_facts_close(b: Backend) {
    let d = Daemon::start(b, None);
    let rig = d.rig();
    let gpus = rig.gpus().unwrap();
    assert!(!gpus.is_empty());
    assert_eq!(gpus[0].path, rig_client::GpuPath::Sim);
    let dev = rig.open_device(&gpus[0].name).unwrap();
    assert_eq!(dev.arch(), gpus[0].arch);
    assert_eq!(dev.facts().queues, vec![Queue::Compute, Queue::Copy]);
    assert!(matches!(rig.open_device("AMD:99"), Err(Error::Invalid(_))));
    let b = dev.buffer(64, Memory::Pinned).unwrap();
    let again = dev.clone();
    dev.close().unwrap();
    assert!(matches!(
        again.submit(&Submission::new().fill(&b, 0, 4, 1)),
        Err(Error::Invalid(_))
    ));
}

fn host_reads_and_writes_every_kind_of_memory(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    for (i, memory) in [Memory::Pinned, Memory::Mapped, Memory::Device]
        .into_iter()
        .enumerate()
    {
        let n = 4097 + i as u64 * 3;
        let b = dev.buffer(n, memory).unwrap();
        assert_eq!(b.len(), n);
        assert_eq!(b.host_addressed(), memory != Memory::Device, "{memory:?}");
        let data = pattern(i as u64, n as usize);
        b.write(|bytes| bytes.copy_from_slice(&data)).unwrap();
        let back = b.read(|bytes| bytes.to_vec()).unwrap();
        assert_eq!(back, data, "{memory:?}");
        let mut part = [0u8; 5];
        b.write_at(7, &[1, 2, 3, 4, 5]).unwrap();
        b.read_at(7, &mut part).unwrap();
        assert_eq!(part, [1, 2, 3, 4, 5]);
        assert!(b.read_at(n - 2, &mut part).is_err());
    }
}

fn copies_and_fills_of_odd_sizes_and_offsets(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let n = 64 * 1024;
    let src = dev.buffer(n, Memory::Pinned).unwrap();
    let dst = dev.buffer(n, Memory::Device).unwrap();
    let out = dev.buffer(n, Memory::Pinned).unwrap();
    let data = pattern(7, n as usize);
    src.write(|b| b.copy_from_slice(&data)).unwrap();
    let mut expect = vec![0u8; n as usize];
    let mut s = Submission::new().fill(&dst, 0, n, 0);
    for (k, (so, doff, len)) in [
        (0u64, 0u64, 1u64),
        (1, 3, 7),
        (5, 1000, 4093),
        (3, 8191, 12345),
        (4096, 30000, 4096),
    ]
    .into_iter()
    .enumerate()
    {
        s = s.copy(&src, so, &dst, doff, len);
        expect[doff as usize..(doff + len) as usize]
            .copy_from_slice(&data[so as usize..(so + len) as usize]);
        let at = 50_000 + 100 * k as u64 + k as u64;
        s = s.fill(&dst, at, 1 + 2 * k as u64, 0xa0 + k as u8);
        expect[at as usize..(at + 1 + 2 * k as u64) as usize].fill(0xa0 + k as u8);
    }
    s = s.copy(&dst, 0, &out, 0, n);
    dev.submit(&s).unwrap();
    let got = out.read(|b| b.to_vec()).unwrap();
    assert!(
        got == expect,
        "first difference at {:?}",
        got.iter().zip(&expect).position(|(a, b)| a != b)
    );
}

fn boxes_with_pitches(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let src = dev.buffer(1 << 16, Memory::Pinned).unwrap();
    let dst = dev.buffer(1 << 16, Memory::Pinned).unwrap();
    let data = pattern(3, 1 << 16);
    src.write(|b| b.copy_from_slice(&data)).unwrap();
    dst.write(|b| b.fill(0)).unwrap();
    // Sub-window friendly, and unaligned (linear rows).
    let boxes = [
        (
            16u64,
            0u64,
            CopyBox {
                width: 64,
                rows: 20,
                src_pitch: 256,
                dst_pitch: 128,
            },
        ),
        (
            3,
            4000,
            CopyBox {
                width: 13,
                rows: 9,
                src_pitch: 101,
                dst_pitch: 17,
            },
        ),
        (
            1,
            9001,
            CopyBox {
                width: 6,
                rows: 33,
                src_pitch: 12,
                dst_pitch: 8,
            },
        ),
    ];
    let mut expect = vec![0u8; 1 << 16];
    let mut s = Submission::new();
    for (so, doff, b) in boxes {
        s = s.copy_box(&src, so, &dst, doff, b);
        for r in 0..b.rows {
            let (a, c) = (
                (so + r * b.src_pitch) as usize,
                (doff + r * b.dst_pitch) as usize,
            );
            expect[c..c + b.width as usize].copy_from_slice(&data[a..a + b.width as usize]);
        }
    }
    dev.submit(&s).unwrap();
    let got = dst.read(|b| b.to_vec()).unwrap();
    assert!(
        got == expect,
        "first difference at {:?}",
        got.iter().zip(&expect).position(|(a, b)| a != b)
    );
}

fn refusals_carry_the_seeds_reasons(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let a = dev.buffer(4096, Memory::Pinned).unwrap();
    let b = dev.buffer(4096, Memory::Pinned).unwrap();
    let s = Submission::new().copy(&a, 0, &b, 0, 16).on(Queue::Compute);
    assert!(matches!(
        dev.submit(&s),
        Err(Error::Never(Never::CopyOnCompute { part: 0 }))
    ));
    let s = Submission::new().copy(&a, 0, &b, 0, 16).after(&[0]);
    assert!(matches!(
        dev.submit(&s),
        Err(Error::Never(Never::AfterNotBelow { .. }))
    ));
    // A refused submission changed nothing: the next one runs.
    let s = Submission::new().fill(&b, 0, 16, 9);
    dev.submit(&s).unwrap().wait().unwrap();
    assert_eq!(b.read(|x| x[..16].to_vec()).unwrap(), vec![9; 16]);
}

fn a_burst_grows_the_rings_and_the_segment(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let src = dev.buffer(1 << 20, Memory::Pinned).unwrap();
    let dst = dev.buffer(1 << 20, Memory::Pinned).unwrap();
    let data = pattern(11, 1 << 20);
    src.write(|b| b.copy_from_slice(&data)).unwrap();
    dst.write(|b| b.fill(0)).unwrap();
    // 4000 copies and 2000 fills with unaligned ends: far past a 64 KiB copy ring and
    // the 8 bytes a part takes of the segment.
    let mut s = Submission::new();
    for i in 0..4000u64 {
        s = s.copy(&src, i * 131, &dst, i * 131, 127);
    }
    for i in 0..2000u64 {
        s = s.fill(&dst, i * 131 + 127, 3, i as u8);
    }
    let before = dev.signaled();
    dev.submit(&s).unwrap().wait().unwrap();
    assert!(dev.signaled() > before);
    let got = dst.read(|b| b.to_vec()).unwrap();
    for i in 0..4000usize {
        let at = i * 131;
        assert_eq!(&got[at..at + 127], &data[at..at + 127], "copy {i}");
        if i < 2000 {
            assert_eq!(&got[at + 127..at + 130], &[i as u8; 3], "fill {i}");
        }
    }
    // Later submissions run on the grown queues.
    let s = Submission::new().fill(&dst, 0, 8, 0x55);
    dev.submit(&s).unwrap().wait().unwrap();
    assert_eq!(dst.read(|b| b[..8].to_vec()).unwrap(), vec![0x55; 8]);
}

fn the_programs_own_memory_maps_without_a_copy(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let mine = rig_client::HostMemory::new("my-data", 3 * 4096).unwrap();
    let data = pattern(5, 5000);
    mine.write(4096, &data).unwrap();
    let b = dev.map_host(&mine, 4096, 5000).unwrap();
    let out = dev.buffer(5000, Memory::Device).unwrap();
    // The GPU reads the program's bytes, and writes them back shifted by one.
    let s = Submission::new()
        .copy(&b, 0, &out, 0, 5000)
        .copy(&out, 0, &b, 1, 4999);
    dev.submit(&s).unwrap().wait().unwrap();
    let mut got = vec![0u8; 5000];
    mine.read(4096, &mut got).unwrap();
    assert_eq!(got[0], data[0]);
    assert_eq!(&got[1..], &data[..4999]);
    assert!(matches!(
        dev.map_host(&mine, 100, 10),
        Err(Error::Invalid(_))
    ));
}

fn a_submission_waits_for_another_devices_point(b: Backend) {
    let d = Daemon::start(b, None);
    let (one, two) = (d.device(), d.device());
    let a = one.buffer(1 << 20, Memory::Pinned).unwrap();
    let b = two.buffer(64, Memory::Pinned).unwrap();
    let p = one
        .submit(&Submission::new().fill(&a, 0, 1 << 20, 3))
        .unwrap();
    let q = two
        .submit(&Submission::new().fill(&b, 0, 64, 4).wait(&p))
        .unwrap();
    q.wait().unwrap();
    assert!(p.signaled());
    assert_eq!(b.read(|x| x.to_vec()).unwrap(), vec![4; 64]);
}

/// A submission whose work never ends, and the buffer it waits on: COMPUTE:0 waits for a
/// word nobody writes ([`crate::compute_words::held_until`]).
fn never_ending(dev: &rig_client::Device) -> (rig_client::Point, rig_client::Buffer) {
    let flag = crate::compute_words::flag(dev);
    let w = crate::compute_words::held_until(dev, &flag);
    let p = dev
        .submit(&Submission::new().words(Queue::Compute, &w))
        .unwrap();
    (p, flag)
}

/// A clean stop (SIGTERM, `systemctl stop`) while work waits: the wait ends in the loss
/// rigd names, "rigd is shutting down", not in a connection that broke.
fn a_wait_at_a_clean_stop_is_told_rigd_is_shutting_down(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let (p, _flag) = never_ending(&dev);
    d.terminate();
    match p.wait() {
        Err(e @ Error::Lost { .. }) => {
            assert!(e.to_string().contains("rigd is shutting down"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

fn a_wait_notices_that_rigd_crashed(b: Backend) {
    let mut d = Daemon::start(b, None);
    let dev = d.device();
    let (p, _flag) = never_ending(&dev);
    d.crash();
    let start = std::time::Instant::now();
    match p.wait() {
        Err(e @ Error::Lost { .. }) => assert!(e.to_string().contains("rigd"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

/// What `open_list_facts_close` asks of the simulated GPU, asked of the kfd path's: the GPU
/// is KFD's, at its bus, with its VRAM and firmware.
fn the_gpu_is_kfds_with_its_bus_vram_and_firmware(b: Backend) {
    let d = Daemon::start(b, None);
    let gpus = d.rig().gpus().unwrap();
    assert_eq!(gpus[0].arch, b.processor());
    assert!(gpus[0].bus.is_some(), "{gpus:?}");
    assert!(gpus[0].memory_bytes > 0, "{gpus:?}");
    let dev = d.device();
    assert_eq!(dev.facts().queues, vec![Queue::Compute, Queue::Copy]);
    assert!(dev.facts().mec > 0, "{:?}", dev.facts());
}

/// A device whose work is done is idle, however long: amdgpu bounds no user queue, so the
/// hang bound rests on the path's knowledge of running work, which ends with the interrupt
/// of the last release (rigd once lost every idle KFD device after hang_ms).
fn a_device_idle_past_its_hang_bound_is_not_lost(b: Backend) {
    let d = Daemon::start(b, None);
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

// Not on kfd: only the simulator reports that its GPU is simulated
// (the_gpu_is_kfds_with_its_bus_vram_and_firmware is its kfd share).
rig_testkit::on_backends!(sim, gfx942 => open_list_facts_close);

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    host_reads_and_writes_every_kind_of_memory,
    copies_and_fills_of_odd_sizes_and_offsets,
    boxes_with_pitches,
    refusals_carry_the_seeds_reasons,
    a_burst_grows_the_rings_and_the_segment,
    the_programs_own_memory_maps_without_a_copy,
    a_submission_waits_for_another_devices_point,
    a_wait_at_a_clean_stop_is_told_rigd_is_shutting_down,
    a_wait_notices_that_rigd_crashed,
);

rig_testkit::on_backends!(kfd, kfd_gfx942 =>
    the_gpu_is_kfds_with_its_bus_vram_and_firmware,
    a_device_idle_past_its_hang_bound_is_not_lost,
);
