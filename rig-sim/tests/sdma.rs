//! SDMA streams written into rings, started by doorbells, checked by the memory they leave;
//! faults, stops and several queues at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use rig_amd::gpu::{Gpu, QueueKind};
use rig_amd::pm4::Compare;
use rig_amd::sdma::{
    ConstFill, CopyLinear, Fence, Layout, Packet, PollRegMem, SubWindow, Surface, Timestamp, Trap,
};
use rig_sim::{FaultReason, InterruptSource, QueueStatus};

fn w(p: Packet, model: &str) -> Vec<u32> {
    p.to_words(Layout::for_gpu(Gpu::by_name(model).unwrap()))
        .unwrap()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn copies_and_fills_of_odd_sizes_and_alignments() {
    for model in ["gfx1100", "gfx1201", "gfx942"] {
        let gpu = gpu(model);
        let space = gpu.create_address_space();
        let src = host(&space, HOST_VA, 64 * 1024);
        space.alloc_vram(VRAM_VA, 64 * 1024).unwrap();
        let dst = host(&space, HOST_VA + 0x100000, 64 * 1024);
        let fence = host(&space, HOST_VA + 0x200000, 4096);
        let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
        let data = pattern(64 * 1024, 7);
        src.write(0, &data);
        for (i, &(so, doff, n)) in [
            (0usize, 0usize, 1usize),
            (1, 3, 3),
            (5, 4099, 4097),
            (4095, 1, 8193),
            (13, 8191, 20000),
            (0, 0, 65536),
        ]
        .iter()
        .enumerate()
        {
            // host -> VRAM -> host, through a trip that crosses pages at odd offsets.
            dst.fill(0, 64 * 1024, 0);
            let mut words = w(
                Packet::CopyLinear(CopyLinear::new(
                    HOST_VA + so as u64,
                    VRAM_VA + doff as u64,
                    n as u64,
                )),
                model,
            );
            words.extend(w(
                Packet::CopyLinear(CopyLinear::new(
                    VRAM_VA + doff as u64,
                    HOST_VA + 0x100000 + doff as u64,
                    n as u64,
                )),
                model,
            ));
            words.extend(w(
                Packet::Fence(Fence {
                    mtype: 0,
                    address: HOST_VA + 0x200000,
                    value: i as u32 + 1,
                }),
                model,
            ));
            q.submit(&words);
            q.wait_idle();
            let mut got = vec![0u8; 64 * 1024];
            dst.read(0, &mut got);
            assert_eq!(
                fence.load_u32(0, Ordering::Acquire),
                i as u32 + 1,
                "{model} case {i}: fence"
            );
            assert!(got[doff..doff + n] == data[so..so + n], "{model} case {i}");
            assert!(
                got[..doff].iter().all(|b| *b == 0),
                "{model} case {i}: before"
            );
            assert!(
                got[doff + n..].iter().all(|b| *b == 0),
                "{model} case {i}: after"
            );
        }
        // Dword fills at odd lengths, and the fill sizes of bytes and words.
        dst.fill(0, 64 * 1024, 0xcc);
        let mut words = w(
            Packet::ConstFill(ConstFill::dwords(HOST_VA + 0x100004, 0x4433_2211, 4100)),
            model,
        );
        words.extend(w(
            Packet::ConstFill(ConstFill {
                fill_size: 0,
                dst: HOST_VA + 0x102001,
                value: 0x5a,
                bytes: 7,
            }),
            model,
        ));
        q.submit(&words);
        q.wait_idle();
        let mut got = vec![0u8; 8300];
        dst.read(0, &mut got);
        assert_eq!(&got[..4], &[0xcc; 4]);
        for k in 0..1025 {
            assert_eq!(
                &got[4 + 4 * k..8 + 4 * k],
                &[0x11, 0x22, 0x33, 0x44],
                "{model} fill dword {k}"
            );
        }
        assert_eq!(got[4104], 0xcc);
        assert_eq!(
            &got[0x2000..0x2009],
            &[0xcc, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0xcc]
        );
        assert_eq!(q.status(), QueueStatus::Running);
    }
}

#[test]
fn sub_window_boxes() {
    let model = "gfx1100";
    let gpu = gpu(model);
    let space = gpu.create_address_space();
    let src = host(&space, HOST_VA, 256 * 1024);
    let dst = host(&space, HOST_VA + 0x100000, 256 * 1024);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let data = pattern(256 * 1024, 3);
    src.write(0, &data);
    for (log2, width, height, depth, sp, dp, (sx, sy, sz), (dx, dy, dz)) in [
        (
            0u8,
            13u32,
            7u32,
            1u32,
            40u32,
            17u32,
            (3u32, 2u32, 0u32),
            (1u32, 5u32, 0u32),
        ),
        (2, 5, 9, 2, 11, 8, (1, 1, 1), (2, 0, 0)),
        (4, 3, 4, 3, 6, 3, (0, 2, 0), (0, 0, 1)),
    ] {
        dst.fill(0, 256 * 1024, 0);
        let e = 1usize << log2;
        let (ssp, dsp) = (sp * 16, dp * 16);
        let p = SubWindow {
            log2_element: log2,
            src: Surface {
                address: HOST_VA + 64,
                x: sx,
                y: sy,
                z: sz,
                pitch: sp,
                slice_pitch: ssp,
            },
            dst: Surface {
                address: HOST_VA + 0x100000 + 128,
                x: dx,
                y: dy,
                z: dz,
                pitch: dp,
                slice_pitch: dsp,
            },
            width,
            height,
            depth,
        };
        q.submit(&w(Packet::SubWindow(p), model));
        q.wait_idle();
        let mut got = vec![0u8; 256 * 1024];
        dst.read(0, &mut got);
        let mut expect = vec![0u8; 256 * 1024];
        for z in 0..depth as usize {
            for y in 0..height as usize {
                let s = 64
                    + e * ((sz as usize + z) * ssp as usize
                        + (sy as usize + y) * sp as usize
                        + sx as usize);
                let d = 128
                    + e * ((dz as usize + z) * dsp as usize
                        + (dy as usize + y) * dp as usize
                        + dx as usize);
                let n = e * width as usize;
                expect[d..d + n].copy_from_slice(&data[s..s + n]);
            }
        }
        assert!(
            got == expect,
            "box of element {e}, {width}x{height}x{depth}"
        );
    }
}

#[test]
fn fence_trap_timestamp_and_poll() {
    let model = "gfx1100";
    let gpu = gpu(model);
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    data.store_u64(0, u64::MAX, Ordering::Relaxed);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let mut words = w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA,
            value: 7,
        }),
        model,
    );
    words.extend(w(Packet::Trap(Trap { context: 0x42 }), model));
    words.extend(w(Packet::Timestamp(Timestamp::global(HOST_VA + 16)), model));
    words.extend(w(
        Packet::PollRegMem(PollRegMem {
            hdp_flush: false,
            function: Compare::Equal,
            memory: true,
            address: HOST_VA + 32,
            value: 0x55,
            mask: 0xff,
            interval: 10,
            retry_count: 0xfff,
        }),
        model,
    ));
    words.extend(w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA + 40,
            value: 9,
        }),
        model,
    ));
    q.submit(&words);
    wait_for("the trap", || q.seen.interrupts.lock().unwrap().len() == 1);
    assert_eq!(
        data.load_u64(0, Ordering::Acquire),
        0xffff_ffff_0000_0007,
        "a fence writes 32 bits"
    );
    let int = q.seen.interrupts.lock().unwrap()[0];
    assert_eq!(
        (int.source, int.context, int.count),
        (InterruptSource::SdmaTrap, 0x42, 1)
    );
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        data.load_u32(40, Ordering::Acquire),
        0,
        "the poll holds the queue"
    );
    data.store_u32(32, 0x1255, Ordering::Release);
    q.wait_idle();
    assert_eq!(data.load_u32(40, Ordering::Acquire), 9);
    let stamp = data.load_u64(16, Ordering::Acquire);
    assert!(stamp > 0 && stamp <= gpu.clock_ticks());
}

#[test]
fn a_page_fault_in_one_vmid_leaves_another_running() {
    let model = "gfx1100";
    let gpu = gpu(model);
    let bad = gpu.create_address_space();
    let good = gpu.create_address_space();
    assert_ne!(bad.vmid(), good.vmid());
    let bad_data = host(&bad, HOST_VA, 4096);
    bad.alloc_vram(VRAM_VA, 64 * 1024).unwrap();
    let good_data = host(&good, HOST_VA, 64 * 1024);
    good.alloc_vram(VRAM_VA, 64 * 1024).unwrap();
    let mut bq = TestQueue::new(&bad, QueueKind::Sdma, 4096, 0);
    let mut gq = TestQueue::new(&good, QueueKind::Sdma, 4096, 0);
    // The faulting copy reads one page past what is mapped.
    let mut words = w(
        Packet::CopyLinear(CopyLinear::new(HOST_VA + 100, VRAM_VA, 8192)),
        model,
    );
    words.extend(w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA,
            value: 1,
        }),
        model,
    ));
    bq.submit(&words);
    let data = pattern(64 * 1024, 11);
    good_data.write(0, &data);
    let mut words = w(
        Packet::CopyLinear(CopyLinear::new(HOST_VA, VRAM_VA, 65536)),
        model,
    );
    words.extend(w(
        Packet::ConstFill(ConstFill::dwords(HOST_VA, 0, 65536)),
        model,
    ));
    words.extend(w(
        Packet::CopyLinear(CopyLinear::new(VRAM_VA, HOST_VA, 65536)),
        model,
    ));
    gq.submit(&words);
    let f = bq.wait_fault();
    gq.wait_idle();
    match f.reason {
        FaultReason::Page(p) => {
            assert_eq!(p.address, HOST_VA + 4096);
            assert_eq!(p.vmid, bad.vmid());
            assert!(!p.write);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(f.vmid, bad.vmid());
    assert_eq!(
        bad_data.load_u32(0, Ordering::Acquire),
        0,
        "nothing after the fault ran"
    );
    let mut got = vec![0u8; 65536];
    good_data.read(0, &mut got);
    assert!(got == data, "the other VMID's copies completed");
    assert_eq!(gq.status(), QueueStatus::Running);
    // The good queue keeps working after the fault.
    gq.submit(&w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA,
            value: 5,
        }),
        model,
    ));
    gq.wait_idle();
    assert_eq!(good_data.load_u32(0, Ordering::Acquire), 5);
    // Writes to a read-only page fault as writes.
    let ro = rig_shm::SharedRegion::create("ro", 4096).unwrap();
    good.map_host(HOST_VA + 0x200000, &ro, 0, 4096, false)
        .unwrap();
    gq.submit(&w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA + 0x200010,
            value: 5,
        }),
        model,
    ));
    let f = gq.wait_fault();
    assert!(
        matches!(f.reason, FaultReason::Page(p) if p.write && p.read_only && p.address == HOST_VA + 0x200010)
    );
}

#[test]
fn stop_mid_copy_writes_nothing_after_it_returns() {
    let model = "gfx1100";
    let gpu = gpu(model);
    let space = gpu.create_address_space();
    let bytes: u64 = 512 << 20;
    space.alloc_vram(VRAM_VA, bytes).unwrap();
    space.alloc_vram(VRAM_VA + bytes, bytes).unwrap();
    let flag = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    // Four passes of a fill then a copy: long enough to be stopped in the middle.
    let mut words = Vec::new();
    for i in 0..4 {
        words.extend(w(
            Packet::ConstFill(ConstFill::dwords(VRAM_VA, 0x0101_0101 * (i + 1), bytes)),
            model,
        ));
        words.extend(w(
            Packet::CopyLinear(CopyLinear::new(VRAM_VA, VRAM_VA + bytes, bytes)),
            model,
        ));
    }
    words.extend(w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA,
            value: 1,
        }),
        model,
    ));
    q.submit(&words);
    std::thread::sleep(Duration::from_millis(30));
    let t = Instant::now();
    q.stop();
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500), "stop waited {took:?}");
    assert_eq!(q.status(), QueueStatus::Stopped);
    let rptr = q.rptr();
    assert!(rptr < q.wpos, "the stream was still running when stopped");
    // Sample the destination now and later: nothing may change after stop returned.
    let probe = |off: u64| {
        let mut b = [0u8; 4096];
        space.read(VRAM_VA + off, &mut b).unwrap();
        b
    };
    let offs: Vec<u64> = (0..64).map(|i| i * (bytes * 2 / 64)).collect();
    let before: Vec<_> = offs.iter().map(|o| probe(*o)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let after: Vec<_> = offs.iter().map(|o| probe(*o)).collect();
    assert!(before == after, "memory changed after stop returned");
    assert_eq!(q.rptr(), rptr);
    assert_eq!(flag.load_u32(0, Ordering::Acquire), 0);
    // A doorbell after stop wakes nothing.
    q.ring_bell();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(q.rptr(), rptr);
}

#[test]
fn several_queues_on_several_threads_at_once() {
    let gpu = gpu("gfx1100");
    let handles: Vec<_> = (0..6u64)
        .map(|i| {
            let gpu = gpu.clone();
            std::thread::spawn(move || {
                let model = "gfx1100";
                let space = gpu.create_address_space();
                let data = host(&space, HOST_VA, 512 * 1024);
                space.alloc_vram(VRAM_VA, 256 * 1024).unwrap();
                let mut sq = TestQueue::new(&space, QueueKind::Sdma, 1024, 0);
                let mut cq = TestQueue::new(&space, QueueKind::Pm4, 1024, 1);
                let src = pattern(128 * 1024, i as u32 + 1);
                data.write(0, &src);
                for round in 1..=20u32 {
                    let mut words = w(
                        Packet::CopyLinear(CopyLinear::new(HOST_VA, VRAM_VA, 128 * 1024)),
                        model,
                    );
                    words.extend(w(
                        Packet::CopyLinear(CopyLinear::new(
                            VRAM_VA,
                            HOST_VA + 128 * 1024,
                            128 * 1024,
                        )),
                        model,
                    ));
                    words.extend(w(
                        Packet::Fence(Fence {
                            mtype: 0,
                            address: HOST_VA + 0x50000,
                            value: round,
                        }),
                        model,
                    ));
                    sq.submit(&words);
                    // The compute queue waits for the copy's fence and then releases the round.
                    let mut p = rig_amd::pm4::Packet::WaitRegMem(
                        rig_amd::pm4::WaitRegMem::memory_at_least(HOST_VA + 0x50000, round),
                    )
                    .to_words()
                    .unwrap();
                    p.extend(
                        rig_amd::pm4::Packet::ReleaseMem(rig_amd::pm4::ReleaseMem::timeline(
                            0,
                            HOST_VA + 0x50000 + 8,
                            u64::from(round),
                        ))
                        .to_words()
                        .unwrap(),
                    );
                    cq.submit(&p);
                    cq.wait_idle();
                    sq.wait_idle();
                    assert_eq!(
                        data.load_u64(0x50000 + 8, Ordering::Acquire),
                        u64::from(round)
                    );
                }
                let mut got = vec![0u8; 128 * 1024];
                data.read(128 * 1024, &mut got);
                assert!(got == src, "queue pair {i}");
                (sq.status(), cq.status())
            })
        })
        .collect();
    for h in handles {
        let (a, b) = h.join().unwrap();
        assert_eq!(a, QueueStatus::Running);
        assert_eq!(b, QueueStatus::Running);
    }
    let _ = Arc::strong_count(&gpu);
}

#[test]
fn queue_descriptions_are_checked() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let bells = rig_shm::SharedRegion::create("bells", 4096).unwrap();
    let desc = |ring_va: u64, ring_bytes: u64, rptr_va: u64| rig_sim::QueueDesc {
        kind: QueueKind::Sdma,
        ring_va,
        ring_bytes,
        rptr_va,
        wptr_va: rptr_va + 8,
        doorbell: rig_shm::Doorbell::new(bells.clone(), 0).unwrap(),
        queue_va: 0,
        scratch: (0, 0),
    };
    let make = |d| space.create_queue(d, Arc::new(|_| {}), Arc::new(|_| {}));
    assert!(
        make(desc(RING_VA, 3000, POS_VA)).is_err(),
        "not a power of two"
    );
    assert!(make(desc(RING_VA, 128, POS_VA)).is_err(), "too small");
    assert!(
        make(desc(RING_VA, 16 << 30, POS_VA)).is_err(),
        "above SDMA 6's 8 GiB"
    );
    assert!(
        make(desc(RING_VA + 4, 4096, POS_VA)).is_err(),
        "unaligned ring"
    );
    assert!(
        make(desc(RING_VA, 4096, POS_VA + 4)).is_err(),
        "unaligned positions"
    );
    let _ring = host(&space, RING_VA, 4096);
    let _pos = host(&space, POS_VA, 4096);
    let q = make(desc(RING_VA, 4096, POS_VA)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(q.status(), QueueStatus::Running);
    q.stop();
    assert_eq!(q.status(), QueueStatus::Stopped);
}

#[test]
fn each_chunk_a_copy_or_fill_moves_counts_as_progress() {
    // The hang bound asks the engine's progress: a copy of many chunks, which a host under
    // load may take seconds to move (a first touch of fresh memory most of all), moves.
    let model = "gfx1100";
    let gpu = gpu(model);
    let space = gpu.create_address_space();
    let bytes = 8 * rig_sim::memory::CHUNK as u64;
    space.alloc_vram(VRAM_VA, 2 * bytes).unwrap();
    let flag = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Sdma, 4096, 0);
    let progress = |q: &TestQueue| q.queue.lock().unwrap().as_ref().unwrap().progress();
    let before = progress(&q);
    let mut words = w(
        Packet::ConstFill(ConstFill::dwords(VRAM_VA, 7, bytes)),
        model,
    );
    words.extend(w(
        Packet::CopyLinear(CopyLinear::new(VRAM_VA, VRAM_VA + bytes, bytes)),
        model,
    ));
    words.extend(w(
        Packet::Fence(Fence {
            mtype: 0,
            address: HOST_VA,
            value: 1,
        }),
        model,
    ));
    q.submit(&words);
    let deadline = Instant::now() + Duration::from_secs(60);
    while flag.load_u32(0, Ordering::Acquire) != 1 {
        assert!(Instant::now() < deadline, "the copy never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Eight chunks of the fill, eight of the copy, and the packets' own ends.
    let moved = progress(&q) - before;
    assert!(moved >= 16, "progress moved {moved} times");
    let mut b = [0u8; 8];
    space.read(VRAM_VA + 2 * bytes - 8, &mut b).unwrap();
    assert_eq!(b, [7, 0, 0, 0, 7, 0, 0, 0]);
}
