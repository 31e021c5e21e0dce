//! AQL packets on a gfx942 (several dies): dispatch set-up, barriers, signals, faults.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rig_amd::aql::{Barrier, BarrierValue, Condition, Header, KernelDispatch, Packet, Pm4Ib};
use rig_amd::gpu::QueueKind;
use rig_amd::pm4;
use rig_shm::SharedRegion;
use rig_sim::dispatch::{KernelExecutor, KernelFault, Launch};
use rig_sim::{
    AddressSpace, FaultReason, InterruptSource, PacketError, QueueStatus, SimConfig, SimGpu,
};

/// Records each launch (and its dies), then adds 1 to the u32 at the first kernel argument.
/// Only die 0's share acts: the other dies' shares of a launch return at once.
#[derive(Default)]
struct Recorder(Mutex<Vec<(rig_isa::Dispatch, u32)>>);

impl KernelExecutor for Recorder {
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault> {
        if launch.die != 0 {
            return Ok(());
        }
        let d = launch.dispatch.clone();
        // The kernarg pointer follows the dispatch pointer in this test's descriptor.
        let kernarg = u64::from(d.user_sgprs[2]) | u64::from(d.user_sgprs[3]) << 32;
        let mut b = [0u8; 8];
        // A page the queue's table refuses is the typed page fault.
        launch.memory.read(kernarg, &mut b)?;
        let out = u64::from_le_bytes(b);
        launch.memory.atomic_u32_add(out);
        self.0.lock().unwrap().push((d, launch.dies));
        Ok(())
    }
}

trait Add {
    fn atomic_u32_add(&self, va: u64);
}

impl Add for rig_sim::memory::Vm {
    fn atomic_u32_add(&self, va: u64) {
        self.rmw_u32(va, &|v| v + 1).unwrap();
    }
}

/// Records which workgroups each die's share holds, and how many dies ran at once.
#[derive(Default)]
struct Shares {
    ran: Mutex<Vec<(u32, Vec<u64>)>>,
    inside: AtomicU32,
    most_inside: AtomicU32,
}

impl KernelExecutor for Shares {
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault> {
        let ids: Vec<u64> = launch
            .workgroups
            .ids(launch.dispatch.workgroup_count())
            .collect();
        self.ran.lock().unwrap().push((launch.die, ids));
        // Stay until every die has come in (or a generous timeout): shares run at once.
        let n = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(n, Ordering::SeqCst);
        let start = std::time::Instant::now();
        while self.inside.load(Ordering::SeqCst) < launch.dies
            && self.most_inside.load(Ordering::SeqCst) < launch.dies
            && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.most_inside
            .fetch_max(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn each_die_runs_its_round_robin_share_of_the_workgroups_at_once() {
    let rec = Arc::new(Shares::default());
    let gpu = SimGpu::new(SimConfig {
        model: "gfx942".into(),
        vram_bytes: 1 << 30,
        executor: rec.clone(),
        exec_threads: 16,
        ..SimConfig::default()
    })
    .unwrap();
    let space = gpu.create_address_space();
    let mem = host(&space, HOST_VA, 4096);
    mem.write(16, &0x1000i64.to_le_bytes());
    mem.store_u32(52, 6 << 1, Ordering::Relaxed);
    mem.write(56, &(0b1_1010u16).to_le_bytes());
    let mut q = TestQueue::new(&space, QueueKind::Aql, 4096, 0);
    // 16 x 3 x 2 = 96 workgroups (the last group of each row is partial).
    q.place_aql(dispatch([1000, 3, 2], [64, 1, 1], 0));
    q.ring_bell();
    q.wait_idle();
    let ran = rec.ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 8, "one share per die");
    let mut seen = vec![0u32; 96];
    for (die, ids) in &ran {
        assert_eq!(ids.len(), 12, "die {die} gets 96 / 8 workgroups");
        for &g in ids {
            assert_eq!(g % 8, u64::from(*die), "workgroup {g} dealt to die {die}");
            seen[g as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "every workgroup exactly once");
    assert_eq!(
        rec.most_inside.load(Ordering::SeqCst),
        8,
        "the dies ran at once"
    );
}

const KD: u64 = HOST_VA;
const KERNARG: u64 = HOST_VA + 0x100;
const OUT: u64 = HOST_VA + 0x200;
const SIGNAL: u64 = HOST_VA + 0x400;
const DEP: u64 = HOST_VA + 0x500;
const MAILBOX: u64 = HOST_VA + 0x600;

fn setup(exec: Arc<Recorder>) -> (Arc<SimGpu>, AddressSpace, SharedRegion, TestQueue) {
    let gpu = SimGpu::new(SimConfig {
        model: "gfx942".into(),
        vram_bytes: 1 << 30,
        executor: exec,
        ..SimConfig::default()
    })
    .unwrap();
    let space = gpu.create_address_space();
    let mem = host(&space, HOST_VA, 4096);
    // Kernel descriptor: entry 0x1000 past it, RSRC2 USER_SGPR = 6, and the dispatch and
    // kernarg pointers enabled (2 + 2 SGPRs) plus the dispatch id (2).
    mem.write(16, &0x1000i64.to_le_bytes());
    mem.store_u32(52, 6 << 1, Ordering::Relaxed);
    mem.write(56, &(0b1_1010u16).to_le_bytes());
    mem.store_u64(0x100, OUT, Ordering::Relaxed);
    let q = TestQueue::new(&space, QueueKind::Aql, 4096, 0);
    (gpu, space, mem, q)
}

fn dispatch(grid: [u32; 3], group: [u16; 3], signal: u64) -> [u32; 16] {
    Packet::KernelDispatch(KernelDispatch {
        header: Header {
            barrier: true,
            ..Header::default()
        },
        dimensions: 3,
        workgroup_size: group,
        grid_size: grid,
        private_segment_size: 0,
        group_segment_size: 256,
        kernel_object: KD,
        kernarg_address: KERNARG,
        completion_signal: signal,
    })
    .encode()
    .unwrap()
}

#[test]
fn kernel_dispatch_sets_up_the_launch_and_completes_its_signal() {
    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, mem, mut q) = setup(rec.clone());
    mem.store_u64((SIGNAL - HOST_VA + 8) as usize, 2, Ordering::Relaxed);
    q.place_aql(dispatch([1000, 3, 1], [64, 1, 1], SIGNAL));
    q.place_aql(dispatch([64, 1, 1], [64, 1, 1], SIGNAL));
    q.ring_bell();
    q.wait_idle();
    assert_eq!(mem.load_u32((OUT - HOST_VA) as usize, Ordering::Acquire), 2);
    assert_eq!(
        mem.load_u64((SIGNAL - HOST_VA + 8) as usize, Ordering::Acquire),
        0
    );
    let launches = rec.0.lock().unwrap().clone();
    let (d, dies) = &launches[0];
    assert_eq!(*dies, 8, "gfx942 spreads workgroups over its 8 dies");
    assert_eq!(d.code_address, KD + 0x1000);
    assert_eq!(d.grid_items, [1000, 3, 1]);
    assert_eq!(d.group_size, [64, 1, 1]);
    assert!(d.wave64);
    assert_eq!(d.lds_bytes, 256);
    // dispatch ptr = the packet's slot, kernarg ptr, dispatch id = the packet's index.
    assert_eq!(
        d.user_sgprs,
        vec![
            q.ring_va as u32,
            (q.ring_va >> 32) as u32,
            KERNARG as u32,
            (KERNARG >> 32) as u32,
            0,
            0
        ]
    );
    assert_eq!(launches[1].0.user_sgprs[0], q.ring_va as u32 + 64);
    assert_eq!(launches[1].0.user_sgprs[4], 1);
    // Consumed slots are INVALID again.
    assert_eq!(q.ring.load_u32(0, Ordering::Acquire) & 0xff, 1);
    assert_eq!(q.ring.load_u32(64, Ordering::Acquire) & 0xff, 1);
}

#[test]
fn barriers_wait_for_their_signals() {
    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, mem, mut q) = setup(rec.clone());
    let dep = (DEP - HOST_VA) as usize;
    mem.store_u64(dep + 8, 1, Ordering::Relaxed);
    mem.store_u64(dep + 0x40 + 8, 1, Ordering::Relaxed);
    let and = Barrier {
        header: Header::default(),
        dep_signal: [DEP, 0, DEP + 0x40, 0, 0],
        completion_signal: 0,
    };
    q.place_aql(Packet::BarrierAnd(and).encode().unwrap());
    q.place_aql(dispatch([1, 1, 1], [1, 1, 1], 0));
    q.ring_bell();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(q.rptr(), 0);
    mem.store_u64(dep + 8, 0, Ordering::Release);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(q.rptr(), 0, "AND needs both");
    mem.store_u64(dep + 0x40 + 8, 0, Ordering::Release);
    q.wait_idle();
    assert_eq!(mem.load_u32((OUT - HOST_VA) as usize, Ordering::Acquire), 1);

    // OR: one of them is enough.
    mem.store_u64(dep + 8, 5, Ordering::Relaxed);
    let or = Barrier {
        header: Header::default(),
        dep_signal: [DEP, DEP + 0x40, 0, 0, 0],
        completion_signal: 0,
    };
    mem.store_u64(dep + 0x40 + 8, 3, Ordering::Relaxed);
    q.place_aql(Packet::BarrierOr(or).encode().unwrap());
    q.ring_bell();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(q.rptr(), 2);
    mem.store_u64(dep + 0x40 + 8, 0, Ordering::Release);
    q.wait_idle();

    // Barrier-value: wait until the signal drops below 3, then complete a signal with a
    // mailbox, which raises an interrupt with its event id.
    let sig = (SIGNAL - HOST_VA) as usize;
    mem.store_u64(sig + 8, 1, Ordering::Relaxed);
    mem.store_u64(sig + 16, MAILBOX, Ordering::Relaxed);
    mem.store_u32(sig + 24, 77, Ordering::Relaxed);
    mem.store_u64(dep + 8, 9, Ordering::Relaxed);
    q.place_aql(
        Packet::BarrierValue(BarrierValue {
            header: Header::default(),
            signal: DEP,
            value: 3,
            mask: -1,
            cond: Condition::Lt,
            completion_signal: SIGNAL,
        })
        .encode()
        .unwrap(),
    );
    q.ring_bell();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(q.rptr(), 3);
    mem.store_u64(dep + 8, 2, Ordering::Release);
    q.wait_idle();
    assert_eq!(mem.load_u64(sig + 8, Ordering::Acquire), 0);
    assert_eq!(
        mem.load_u64((MAILBOX - HOST_VA) as usize, Ordering::Acquire),
        77
    );
    let ints = q.seen.interrupts.lock().unwrap().clone();
    assert_eq!(ints.len(), 1);
    assert_eq!(
        (ints[0].source, ints[0].context),
        (InterruptSource::Signal, 77)
    );
}

/// A PM4-IB packet runs its indirect buffer after the dispatch before it: a RELEASE_MEM
/// there writes all 64 bits of a value and raises an interrupt with its context, and the
/// packet's own completion signal is then decremented.
#[test]
fn a_pm4_ib_packet_releases_a_64_bit_value_with_an_interrupt() {
    const IB: u64 = HOST_VA + 0x800;
    const WORD: u64 = HOST_VA + 0x700;
    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, mem, mut q) = setup(rec.clone());
    let value = 0x1_0000_0000u64 + 7;
    let release = pm4::Packet::ReleaseMem(pm4::ReleaseMem {
        int_ctxid: 0x5eed,
        ..pm4::ReleaseMem::timeline(0, WORD, value)
    })
    .to_words()
    .unwrap();
    for (i, w) in release.iter().enumerate() {
        mem.store_u32((IB - HOST_VA) as usize + 4 * i, *w, Ordering::Relaxed);
    }
    let sig = (SIGNAL - HOST_VA) as usize;
    mem.store_u64(sig + 8, 1, Ordering::Relaxed);
    q.place_aql(dispatch([64, 1, 1], [64, 1, 1], 0));
    let ib = Pm4Ib {
        header: Header {
            barrier: true,
            ..Header::default()
        },
        address: IB,
        size_dw: release.len() as u32,
        completion_signal: SIGNAL,
    };
    q.place_aql(Packet::Pm4Ib(ib).encode().unwrap());
    q.ring_bell();
    q.wait_idle();
    assert_eq!(q.status(), QueueStatus::Running);
    assert_eq!(mem.load_u32((OUT - HOST_VA) as usize, Ordering::Acquire), 1);
    assert_eq!(
        mem.load_u64((WORD - HOST_VA) as usize, Ordering::Acquire),
        value
    );
    assert_eq!(mem.load_u64(sig + 8, Ordering::Acquire), 0);
    let ints = q.seen.interrupts.lock().unwrap().clone();
    assert_eq!(ints.len(), 1);
    assert_eq!(ints[0].context, 0x5eed);

    // An indirect buffer holding garbage faults the queue, naming the packet.
    mem.store_u32((IB - HOST_VA) as usize, 0xdead_beef, Ordering::Relaxed);
    q.place_aql(Packet::Pm4Ib(ib).encode().unwrap());
    q.ring_bell();
    wait_for("the fault", || q.status() != QueueStatus::Running);
    let QueueStatus::Faulted(f) = q.status() else {
        panic!("{:?}", q.status())
    };
    assert!(
        matches!(
            &f.reason,
            FaultReason::BadPacket {
                position: 2,
                reason: PacketError::Indirect {
                    address: IB,
                    dword: 0,
                    ..
                }
            }
        ),
        "{f}"
    );

    // An indirect buffer where nothing is mapped is a page fault at its address; one longer
    // than IB_SIZE holds cannot be encoded, and its words do not decode as a packet.
    let (_gpu, _space, _mem, mut q) = setup(rec.clone());
    let unmapped = Pm4Ib {
        address: 0x7000_0000,
        ..ib
    };
    q.place_aql(Packet::Pm4Ib(unmapped).encode().unwrap());
    q.ring_bell();
    wait_for("the fault", || q.status() != QueueStatus::Running);
    let QueueStatus::Faulted(f) = q.status() else {
        panic!("{:?}", q.status())
    };
    assert!(
        matches!(&f.reason, FaultReason::Page(p) if p.address == 0x7000_0000),
        "{f}"
    );
    assert!(
        Pm4Ib {
            size_dw: 1 << 20,
            ..ib
        }
        .encode()
        .is_err()
    );
}

#[test]
fn a_packet_is_invisible_until_its_header_is_valid() {
    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, mem, mut q) = setup(rec.clone());
    let mut p = dispatch([1, 1, 1], [1, 1, 1], 0);
    let header = p[0];
    p[0] = (p[0] & 0xffff_0000) | 1; // INVALID while the body is written
    q.place_aql(p);
    q.ring_bell();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(q.rptr(), 0);
    // The header store makes it visible; the next doorbell wakes the processor.
    q.ring.store_u32(0, header, Ordering::Release);
    q.doorbell.ring(1);
    q.wait_idle();
    assert_eq!(mem.load_u32((OUT - HOST_VA) as usize, Ordering::Acquire), 1);
}

#[test]
fn a_bad_packet_or_a_bad_descriptor_faults_the_queue() {
    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, _mem, mut q) = setup(rec.clone());
    let mut p = dispatch([1, 1, 1], [1, 1, 1], 0);
    p[0] = (p[0] & 0xffff_ff00) | 7; // type 7 does not exist
    q.place_aql(p);
    q.ring_bell();
    let f = q.wait_fault();
    assert!(
        matches!(f.reason, FaultReason::BadPacket { position: 0, .. }),
        "{f}"
    );
    assert!(matches!(q.status(), QueueStatus::Faulted(_)));

    let rec = Arc::new(Recorder::default());
    let (_gpu, _space, _mem, mut q) = setup(rec.clone());
    let mut p = dispatch([1, 1, 1], [1, 1, 1], 0);
    p[8] = 0x9000_0000; // a kernel object nobody mapped
    q.place_aql(p);
    q.ring_bell();
    let f = q.wait_fault();
    assert!(
        matches!(f.reason, FaultReason::Page(pf) if pf.address == 0x8_9000_0000),
        "{f}"
    );
    assert!(rec.0.lock().unwrap().is_empty());
}
