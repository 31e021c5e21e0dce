//! PM4 streams written into rings, started by doorbells, checked by the memory they leave.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rig_amd::gpu::Generation;
use rig_amd::gpu::QueueKind;
use rig_amd::pm4::{
    self, CopyData, CopyDst, CopySrc, DataSel, IndirectBuffer, IntSel, Packet, ReleaseMem,
    WaitRegMem64, WriteData,
};
use rig_amd::regs;
use rig_sim::dispatch::{KernelExecutor, KernelFault, Launch};
use rig_sim::{FaultReason, InterruptSource, PacketError, QueueStatus, SimConfig, SimGpu};

fn words(p: Packet<'_>) -> Vec<u32> {
    p.to_words().unwrap()
}

fn release(address: u64, value: u64, ctx: u32) -> Vec<u32> {
    let mut r = ReleaseMem::timeline(0, address, value);
    r.int_ctxid = ctx;
    words(Packet::ReleaseMem(r))
}

fn write_data(address: u64, data: &[u32]) -> Vec<u32> {
    words(Packet::WriteData(WriteData {
        dst_sel: 5,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address,
        data,
    }))
}

#[test]
fn timeline_releases_in_order_with_counted_interrupts() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    // A small ring, so the stream wraps several times.
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 256, 0);
    for v in 1..=40u64 {
        let mut w = Vec::new();
        w.extend(words(Packet::Nop(pm4::Nop {
            words: (v % 3 + 1) as u32,
        })));
        w.extend(release(HOST_VA, v, v as u32));
        q.submit(&w);
        q.wait_idle();
        assert_eq!(data.load_u64(0, Ordering::Acquire), v);
    }
    let ints = q.seen.interrupts.lock().unwrap().clone();
    assert_eq!(ints.len(), 40);
    for (i, int) in ints.iter().enumerate() {
        assert_eq!(int.source, InterruptSource::ReleaseMem);
        assert_eq!(int.context, i as u32 + 1);
        assert_eq!(int.count, i as u64 + 1);
        assert_eq!(int.vmid, space.vmid());
    }
    assert_eq!(q.status(), QueueStatus::Running);
}

#[test]
fn releases_of_one_submission_land_in_order() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut w = Vec::new();
    for v in 1..=50u64 {
        w.extend(release(HOST_VA, v, 0));
        // Each release also logs the timeline it saw, so order is visible afterwards.
        w.extend(words(Packet::CopyData(CopyData {
            src_sel: CopySrc::Memory,
            dst_sel: CopyDst::Memory,
            src_cache_policy: 0,
            count_64: true,
            wr_confirm: true,
            dst_cache_policy: 0,
            engine_sel: 0,
            src: HOST_VA,
            dst: HOST_VA + 8 * (v + 1),
        })));
    }
    q.submit(&w);
    q.wait_idle();
    for v in 1..=50u64 {
        assert_eq!(data.load_u64(8 * (v as usize + 1), Ordering::Acquire), v);
    }
}

#[test]
fn write_data_copy_data_clock_and_chained_indirect_buffers() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4 * 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    // IB 2 (chained to from IB 1) writes 0xb2; IB 1 writes 0xb1 then chains; nothing after the
    // chain in IB 1 runs.
    let ib2 = write_data(HOST_VA + 0x104, &[0xb2]);
    data.write(
        0x2000,
        &ib2.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(),
    );
    let mut ib1 = write_data(HOST_VA + 0x100, &[0xb1]);
    ib1.extend(words(Packet::IndirectBuffer(IndirectBuffer {
        address: HOST_VA + 0x2000,
        size_dw: ib2.len() as u32,
        chain: true,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    })));
    ib1.extend(write_data(HOST_VA + 0x108, &[0xdead]));
    data.write(
        0x1000,
        &ib1.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(),
    );
    let before = gpu.clock_ticks();
    let mut w = write_data(HOST_VA, &[1, 2, 3]);
    w.extend(words(Packet::IndirectBuffer(IndirectBuffer {
        address: HOST_VA + 0x1000,
        size_dw: ib1.len() as u32,
        chain: false,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    })));
    w.extend(write_data(HOST_VA + 0x10c, &[0xaf]));
    w.extend(words(Packet::CopyData(CopyData::clock_to_memory(
        HOST_VA + 0x40,
    ))));
    q.submit(&w);
    q.wait_idle();
    let after = gpu.clock_ticks();
    let word = |o: usize| data.load_u32(o, Ordering::Acquire);
    assert_eq!([word(0), word(4), word(8)], [1, 2, 3]);
    assert_eq!(word(0x100), 0xb1);
    assert_eq!(word(0x104), 0xb2);
    assert_eq!(word(0x108), 0, "a chain does not return");
    assert_eq!(word(0x10c), 0xaf, "the IB call returns to the ring");
    let stamp = data.load_u64(0x40, Ordering::Acquire);
    assert!(
        (before..=after).contains(&stamp),
        "{before} <= {stamp} <= {after}"
    );
    // The clock relation maps the stamp into the host's monotonic time.
    let rel = gpu.clock();
    assert_eq!(rel.hz, 100_000_000);
    assert!(rel.monotonic_ns_at(stamp) <= rig_sim::clock::monotonic_ns());
}

#[test]
fn release_writes_32_bits_and_the_clock() {
    let gpu = gpu("gfx1201");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    data.store_u64(0, u64::MAX, Ordering::Relaxed);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut r = ReleaseMem::timeline(0, HOST_VA, 0x1234_5678_9abc);
    r.data_sel = DataSel::Low32;
    r.int_sel = IntSel::None;
    let mut w = words(Packet::ReleaseMem(r));
    r.data_sel = DataSel::GpuClock;
    r.address = HOST_VA + 8;
    w.extend(words(Packet::ReleaseMem(r)));
    q.submit(&w);
    q.wait_idle();
    assert_eq!(data.load_u64(0, Ordering::Acquire), 0xffff_ffff_5678_9abc);
    assert!(data.load_u64(8, Ordering::Acquire) > 0);
    assert!(q.seen.interrupts.lock().unwrap().is_empty());
}

#[test]
fn cross_queue_order_through_a_64_bit_wait() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut waiter = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut releaser = TestQueue::new(&space, QueueKind::Pm4, 4096, 1);
    let target = 0x1_0000_0005u64;
    // The low half passes early on purpose: only a 64-bit compare holds the waiter back.
    data.store_u64(0, 0x0000_0000_ffff_ffff, Ordering::Release);
    let mut w = words(Packet::WaitRegMem64(WaitRegMem64::at_least(
        HOST_VA, target,
    )));
    w.extend(words(Packet::CopyData(CopyData {
        src_sel: CopySrc::Memory,
        dst_sel: CopyDst::Memory,
        src_cache_policy: 0,
        count_64: false,
        wr_confirm: true,
        dst_cache_policy: 0,
        engine_sel: 0,
        src: HOST_VA + 16,
        dst: HOST_VA + 24,
    })));
    waiter.submit(&w);
    std::thread::sleep(Duration::from_millis(20));
    assert_ne!(waiter.rptr(), waiter.wpos, "the waiter must still wait");
    assert_eq!(data.load_u32(24, Ordering::Acquire), 0);
    let mut w = write_data(HOST_VA + 16, &[0x77]);
    w.extend(release(HOST_VA, target, 0));
    releaser.submit(&w);
    waiter.wait_idle();
    assert_eq!(
        data.load_u32(24, Ordering::Acquire),
        0x77,
        "the waiter ran after the release"
    );

    // A write by the host (not an engine) is seen at the next poll.
    let mut w = words(Packet::WaitRegMem64(WaitRegMem64::at_least(
        HOST_VA + 32,
        9,
    )));
    w.extend(write_data(HOST_VA + 40, &[1]));
    waiter.submit(&w);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(data.load_u32(40, Ordering::Acquire), 0);
    data.store_u64(32, 9, Ordering::Release);
    waiter.wait_idle();
    assert_eq!(data.load_u32(40, Ordering::Acquire), 1);
}

#[test]
fn a_malformed_packet_faults_the_queue_and_nothing_after_it_runs() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut w = write_data(HOST_VA, &[5]);
    w.push(pm4::header(0x7e, 2)); // an opcode nobody knows
    w.push(0);
    w.extend(write_data(HOST_VA + 4, &[6]));
    q.submit(&w);
    let f = q.wait_fault();
    match &f.reason {
        FaultReason::BadPacket { position, reason } => {
            assert_eq!(*position, 5, "the bad packet follows a 5-dword WRITE_DATA");
            assert!(
                matches!(
                    reason,
                    PacketError::Pm4(pm4::DecodeError::UnknownOpcode { opcode: 0x7e, .. })
                ),
                "the decoder's error is carried: {reason:?}"
            );
        }
        other => panic!("unexpected fault {other:?}"),
    }
    assert_eq!(data.load_u32(0, Ordering::Acquire), 5);
    assert_eq!(data.load_u32(4, Ordering::Acquire), 0);
    assert!(matches!(q.status(), QueueStatus::Faulted(_)));
    let reported = q.seen.faults.lock().unwrap()[0].1.clone();
    if let Some(status) = reported {
        assert!(
            matches!(status, QueueStatus::Faulted(_)),
            "recorded before reported"
        );
    }
    assert!(f.to_string().contains("bad packet"), "{f}");
}

#[test]
fn a_dispatch_without_an_executor_faults_with_the_reason() {
    let gpu = SimGpu::new(SimConfig {
        model: "gfx1100".into(),
        vram_bytes: 1 << 30,
        executor: Arc::new(rig_sim::NoExecutor),
        ..SimConfig::default()
    })
    .unwrap();
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut w = words(Packet::SetShReg(pm4::SetShReg {
        offset: regs::compute(Generation::Gfx11).num_thread_x,
        values: &[64, 1, 1],
    }));
    w.extend(words(Packet::DispatchDirect(pm4::DispatchDirect {
        dim: [4, 1, 1],
        initiator: 1 | 1 << 15,
    })));
    w.extend(release(HOST_VA, 1, 0));
    q.submit(&w);
    let f = q.wait_fault();
    assert!(
        matches!(&f.reason, FaultReason::Kernel(why) if why.to_string().contains("no kernel executor")),
        "{f}"
    );
    assert_eq!(
        data.load_u64(0, Ordering::Acquire),
        0,
        "no release after a failed launch"
    );
}

/// Records the launches it is given and writes a marker through the page table.
struct Recorder(Mutex<Vec<rig_isa::Dispatch>>);

impl KernelExecutor for Recorder {
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault> {
        self.0.lock().unwrap().push(launch.dispatch.clone());
        let at = u64::from(launch.dispatch.user_sgprs[0])
            | u64::from(launch.dispatch.user_sgprs[1]) << 32;
        launch.memory.write(at, &[0xee]).map_err(KernelFault::from)
    }
}

#[test]
fn dispatch_direct_hands_the_registers_to_the_executor_before_the_release() {
    let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
    let gpu = SimGpu::new(SimConfig {
        model: "gfx1100".into(),
        vram_bytes: 1 << 30,
        executor: rec.clone(),
        ..SimConfig::default()
    })
    .unwrap();
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    let mut w = words(Packet::SetShReg(pm4::SetShReg {
        offset: regs::compute(Generation::Gfx11).num_thread_x,
        values: &[32, 2, 1],
    }));
    w.extend(words(Packet::SetShReg(pm4::SetShReg {
        offset: regs::compute(Generation::Gfx11).pgm_lo,
        values: &[0x0040_0000, 0],
    })));
    w.extend(words(Packet::SetShReg(pm4::SetShReg {
        offset: regs::compute(Generation::Gfx11).pgm_rsrc1,
        values: &[0x11, 2 << 1],
    })));
    w.extend(words(Packet::SetShReg(pm4::SetShReg {
        offset: regs::compute(Generation::Gfx11).user_data_0,
        values: &[(HOST_VA + 0x80) as u32, (HOST_VA >> 32) as u32],
    })));
    w.extend(words(Packet::DispatchDirect(pm4::DispatchDirect {
        dim: [3, 1, 1],
        initiator: 1 | 1 << 15,
    })));
    w.extend(release(HOST_VA, 1, 0));
    q.submit(&w);
    q.wait_idle();
    let d = rec.0.lock().unwrap()[0].clone();
    assert_eq!(d.code_address, 0x4000_0000);
    assert_eq!(d.grid_items, [96, 2, 1]);
    assert_eq!(d.group_size, [32, 2, 1]);
    assert_eq!(d.pgm_rsrc1, 0x11);
    assert!(!d.wave64);
    assert_eq!(d.user_sgprs.len(), 2);
    let mut b = [0u8; 1];
    data.read(0x80, &mut b);
    assert_eq!(b[0], 0xee);
    assert_eq!(data.load_u64(0, Ordering::Acquire), 1);
}
