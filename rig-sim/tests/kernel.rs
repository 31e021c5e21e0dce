//! A real LLVM-compiled kernel (kernels/out/gfx1100/add.co) launched by PM4 DISPATCH_DIRECT
//! through a ring and a doorbell, run by rig-isa against the queue's page table; its gfx942
//! build (kernels/out/gfx942/add.co) launched by an AQL kernel-dispatch packet.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use rig_amd::code_object::{CodeObject, Kernel};
use rig_amd::gpu::{Generation, QueueKind};
use rig_amd::kernarg::{self, Grid};
use rig_amd::pm4::{self, Packet, ReleaseMem};
use rig_amd::regs::{self, initiator};
use rig_shm::SharedRegion;
use rig_sim::{FaultReason, QueueStatus};

const CODE_VA: u64 = 0x5_0000_0000;
const N: usize = 1024;

fn set(offset: u16, values: &[u32]) -> Vec<u32> {
    Packet::SetShReg(pm4::SetShReg { offset, values })
        .to_words()
        .unwrap()
}

/// Places the committed gfx1100 `add` kernel in VRAM at `CODE_VA`; `None`, saying so, when
/// the object is absent.
fn place_add(space: &rig_sim::AddressSpace) -> Option<Kernel> {
    place_add_for(space, "gfx1100")
}

/// [`place_add`] of the build for `target` (a directory of kernels/out).
fn place_add_for(space: &rig_sim::AddressSpace, target: &str) -> Option<Kernel> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../kernels/out/{target}/add.co"));
    let Ok(bytes) = std::fs::read(&path) else {
        println!(
            "skipped: {} is absent (kernels/build.sh makes it)",
            path.display()
        );
        return None;
    };
    let co = CodeObject::parse(&bytes).unwrap();
    let mut image = vec![0u8; co.image_size() as usize];
    co.place(CODE_VA, &mut image).unwrap();
    space
        .alloc_vram(CODE_VA, (image.len() as u64).div_ceil(4096) * 4096)
        .unwrap();
    space.write(CODE_VA, &image).unwrap();
    Some(co.kernel("add").unwrap().clone())
}

/// The PM4 words of one dispatch of `k` (placed at `CODE_VA`) in groups of 64 with its
/// arguments at `args`, then a release of value 1 to `HOST_VA + 2048`.
/// `add`'s launch in host memory mapped at `HOST_VA`: its kernel arguments at `HOST_VA`, x[i] =
/// i and y[i] = 2 i (`N` floats each, y at `y`), over groups of 64.
struct AddLaunch {
    mem: SharedRegion,
    args: u64,
    y: u64,
    grid: Grid,
    kernargs: Vec<u8>,
}

fn stage_add(space: &rig_sim::AddressSpace, k: &Kernel) -> AddLaunch {
    let mem = host(space, HOST_VA, 3 * 4096 + 2 * N * 4);
    let (x, y, args) = (HOST_VA + 4096, HOST_VA + 4096 + (N * 4) as u64, HOST_VA);
    for i in 0..N {
        mem.write(4096 + 4 * i, &(i as f32).to_le_bytes());
        mem.write(4096 + 4 * N + 4 * i, &(2.0 * i as f32).to_le_bytes());
    }
    let mut params = x.to_le_bytes().to_vec();
    params.extend(y.to_le_bytes());
    let grid = Grid {
        groups: [(N / 64) as u32, 1, 1],
        group_size: [64, 1, 1],
        dynamic_lds: 0,
    };
    let mut ka = vec![0u8; 1024];
    let n = kernarg::layout(k.plan(), &params, &[], &grid, &mut ka).unwrap();
    ka.truncate(n);
    mem.write(0, &ka);
    AddLaunch {
        mem,
        args,
        y,
        grid,
        kernargs: ka,
    }
}

fn add_dispatch(k: &Kernel, args: u64, groups: [u32; 3]) -> Vec<u32> {
    // User SGPRs in the order of the descriptor's enable bits (AMDGPUUsage).
    let props = k.code_properties();
    let mut user = Vec::new();
    for (bit, words) in [(0u16, 4), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1)] {
        if props & (1 << bit) != 0 {
            if bit == 3 {
                user.extend([args as u32, (args >> 32) as u32]);
            } else {
                user.extend(std::iter::repeat_n(0, words));
            }
        }
    }
    let c = regs::compute(Generation::Gfx11);
    let code = CODE_VA + k.code_offset();
    let mut w = set(c.pgm_lo, &[(code >> 8) as u32, (code >> 40) as u32]);
    w.extend(set(c.pgm_rsrc1, &[k.rsrc1(), k.rsrc2()]));
    w.extend(set(c.pgm_rsrc3, &[k.rsrc3()]));
    w.extend(set(c.num_thread_x, &[64, 1, 1]));
    w.extend(set(c.user_data_0, &user));
    let mut init = initiator::COMPUTE_SHADER_EN | initiator::FORCE_START_AT_000;
    if !k.wave64() {
        init |= initiator::CS_W32_EN;
    }
    w.extend(
        Packet::DispatchDirect(pm4::DispatchDirect {
            dim: groups,
            initiator: init,
        })
        .to_words()
        .unwrap(),
    );
    w.extend(
        Packet::ReleaseMem(ReleaseMem::timeline(0, HOST_VA + 2048, 1))
            .to_words()
            .unwrap(),
    );
    w
}

const SCRATCH_VA: u64 = 0x6_0000_0000;

#[test]
fn a_kernel_with_a_private_segment_runs_with_the_dispatch_scratch() {
    const M: usize = 256;
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let Some(ScratchLaunch {
        kernel: k,
        mem,
        seeds,
        grid,
    }) = stage_scratch(&space, CODE_VA, M)
    else {
        return;
    };
    // Scratch for 16 waves of 32 lanes, in 256-byte granules per wave.
    let per_wave = u64::from(k.private_segment_size()) * 32;
    let granules = per_wave.div_ceil(256);
    let waves = 16u64;
    space
        .alloc_vram(SCRATCH_VA, (waves * granules * 256).div_ceil(4096) * 4096)
        .unwrap();
    let props = k.code_properties();
    let mut user = Vec::new();
    for (bit, words) in [(0u16, 4), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1)] {
        if props & (1 << bit) != 0 {
            match bit {
                0 => user.extend([SCRATCH_VA as u32, (SCRATCH_VA >> 32) as u32, 0, 0]),
                3 => user.extend([HOST_VA as u32, (HOST_VA >> 32) as u32]),
                5 => user.extend([SCRATCH_VA as u32, (SCRATCH_VA >> 32) as u32]),
                6 => user.push(k.private_segment_size()),
                _ => user.extend(std::iter::repeat_n(0, words)),
            }
        }
    }
    let c = regs::compute(Generation::Gfx11);
    let code = CODE_VA + k.code_offset();
    let mut w = set(c.pgm_lo, &[(code >> 8) as u32, (code >> 40) as u32]);
    w.extend(set(c.pgm_rsrc1, &[k.rsrc1(), k.rsrc2() | 1]));
    w.extend(set(c.pgm_rsrc3, &[k.rsrc3()]));
    w.extend(set(c.num_thread_x, &[64, 1, 1]));
    w.extend(set(
        c.tmpring_size,
        &[waves as u32 | (granules as u32) << 12],
    ));
    w.extend(set(
        c.dispatch_scratch_base_lo,
        &[(SCRATCH_VA >> 8) as u32, (SCRATCH_VA >> 40) as u32],
    ));
    w.extend(set(c.user_data_0, &user));
    w.extend(
        Packet::DispatchDirect(pm4::DispatchDirect {
            dim: grid.groups,
            initiator: initiator::COMPUTE_SHADER_EN
                | initiator::FORCE_START_AT_000
                | initiator::CS_W32_EN,
        })
        .to_words()
        .unwrap(),
    );
    w.extend(
        Packet::ReleaseMem(ReleaseMem::timeline(0, HOST_VA + 2048, 1))
            .to_words()
            .unwrap(),
    );
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&w);
    wait_for("the release", || {
        mem.load_u64(2048, Ordering::Acquire) == 1 || q.status() != QueueStatus::Running
    });
    assert_eq!(
        q.status(),
        QueueStatus::Running,
        "{:?}",
        q.seen.faults.lock().unwrap()
    );
    for (i, seed) in seeds.iter().enumerate() {
        let got = mem.load_u32(4096 + 4 * M + 4 * i, Ordering::Acquire);
        assert_eq!(got, scratch_output(i, *seed), "out[{i}]");
    }
}

#[test]
fn the_gfx942_add_kernel_runs_through_an_aql_dispatch_on_every_die() {
    let gpu = gpu("gfx942");
    let space = gpu.create_address_space();
    let Some(k) = place_add_for(&space, "gfx942") else {
        return;
    };
    let AddLaunch {
        mem, args, grid, ..
    } = stage_add(&space, &k);
    let signal = HOST_VA + 2048;
    mem.store_u64(2048 + 8, 1, Ordering::Relaxed);
    let packet = rig_amd::aql::Packet::KernelDispatch(rig_amd::aql::KernelDispatch {
        header: rig_amd::aql::Header {
            barrier: true,
            ..rig_amd::aql::Header::default()
        },
        dimensions: 1,
        workgroup_size: [64, 1, 1],
        grid_size: [(N as u32), 1, 1],
        private_segment_size: 0,
        group_segment_size: k.group_segment_size(),
        kernel_object: CODE_VA + k.descriptor_offset(),
        kernarg_address: args,
        completion_signal: signal,
    });
    assert_eq!(grid.group_size, [64, 1, 1]);
    let mut q = TestQueue::new(&space, QueueKind::Aql, 4096, 0);
    q.place_aql(packet.encode().unwrap());
    q.ring_bell();
    q.wait_idle();
    assert_eq!(
        q.status(),
        QueueStatus::Running,
        "{:?}",
        q.seen.faults.lock().unwrap()
    );
    assert_eq!(mem.load_u64(2048 + 8, Ordering::Acquire), 0, "the signal");
    for i in 0..N {
        let mut b = [0u8; 4];
        mem.read(4096 + 4 * N + 4 * i, &mut b);
        assert_eq!(f32::from_le_bytes(b), 3.0 * i as f32, "y[{i}]");
    }
}

#[test]
fn the_add_kernel_runs_through_a_pm4_dispatch() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let Some(k) = place_add(&space) else {
        return;
    };

    // x, y and the kernel arguments in host memory.
    let AddLaunch {
        mem,
        args,
        grid,
        kernargs,
        ..
    } = stage_add(&space, &k);

    let w = add_dispatch(&k, args, grid.groups);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&w);
    wait_for("the release", || {
        mem.load_u64(2048, Ordering::Acquire) == 1 || q.status() != QueueStatus::Running
    });
    assert_eq!(
        q.status(),
        QueueStatus::Running,
        "{:?}",
        q.seen.faults.lock().unwrap()
    );
    for i in 0..N {
        let mut b = [0u8; 4];
        mem.read(4096 + 4 * N + 4 * i, &mut b);
        assert_eq!(f32::from_le_bytes(b), 3.0 * i as f32, "y[{i}]");
    }

    // The same launch with y unmapped faults the queue with the kernel's page fault.
    space.unmap(HOST_VA, mem.len() as u64).unwrap();
    let mem2 = host(&space, HOST_VA, 4096);
    mem2.write(0, &kernargs);
    q.submit(&w);
    let f = q.wait_fault();
    assert!(
        matches!(&f.reason, FaultReason::Kernel(why) if why.to_string().contains("memory fault")),
        "{f}"
    );
}

#[test]
fn a_stop_mid_kernel_returns_at_once_and_nothing_lands_after_it() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let Some(k) = place_add(&space) else {
        return;
    };
    // 16 Mi work-items: far longer than the test waits.
    let n_items: u64 = 16 << 20;
    let (x, y) = (VRAM_VA, VRAM_VA + 4 * n_items);
    space.alloc_vram(VRAM_VA, 8 * n_items).unwrap();
    let mem = host(&space, HOST_VA, 4096);
    let mut params = x.to_le_bytes().to_vec();
    params.extend(y.to_le_bytes());
    let grid = Grid {
        groups: [(n_items / 64) as u32, 1, 1],
        group_size: [64, 1, 1],
        dynamic_lds: 0,
    };
    // x = 1.0 everywhere, so every finished work-item changes its y.
    let ones: Vec<u8> = std::iter::repeat_n(1.0f32.to_le_bytes(), 1 << 20)
        .flatten()
        .collect();
    for part in 0..16u64 {
        space.write(x + part * (4 << 20), &ones).unwrap();
    }
    let mut ka = vec![0u8; 1024];
    let n = kernarg::layout(k.plan(), &params, &[], &grid, &mut ka).unwrap();
    mem.write(0, &ka[..n]);
    let w = add_dispatch(&k, HOST_VA, grid.groups);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&w);
    // Wait until the kernel has visibly started writing y.
    wait_for("the kernel to start", || {
        let mut b = [0u8; 4];
        space.read(y, &mut b).unwrap();
        f32::from_le_bytes(b) != 0.0
    });
    let t = std::time::Instant::now();
    q.stop();
    let took = t.elapsed();
    assert!(
        took < std::time::Duration::from_millis(500),
        "stop waited {took:?}"
    );
    assert_eq!(q.status(), QueueStatus::Stopped);
    // After stop returned, y must not change.
    let probe = || {
        let mut b = vec![0u8; 64 << 10];
        let mut sums = Vec::new();
        for part in 0..256u64 {
            space.read(y + part * (4 * n_items / 256), &mut b).unwrap();
            sums.push(b.iter().map(|v| u64::from(*v)).sum::<u64>());
        }
        sums
    };
    let before = probe();
    assert!(before.contains(&0), "the kernel was stopped before its end");
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(before, probe(), "y changed after stop returned");
    assert_eq!(
        mem.load_u64(2048, Ordering::Acquire),
        0,
        "no release after a stopped kernel"
    );
    assert!(
        q.seen.faults.lock().unwrap().is_empty(),
        "a stop is not a fault"
    );
}

/// A kernel's end wakes the waits watching pages its address space maps writable (its stores
/// are not followed one by one), and no wait of another address space.
///
/// Both waits watch words nobody but the host writes, so neither can end by its own re-poll
/// before the kernel's end has been counted: the count is exact on a loaded machine too.
#[test]
fn a_kernels_end_wakes_the_waits_of_its_address_space_alone() {
    const WATCHED_VA: u64 = HOST_VA + 0x10_0000;
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let Some(k) = place_add(&space) else {
        return;
    };
    let AddLaunch {
        mem, args, y, grid, ..
    } = stage_add(&space, &k);
    let wait = |va: u64| {
        Packet::WaitRegMem(pm4::WaitRegMem::memory_at_least(va, 7))
            .to_words()
            .unwrap()
    };
    // In the kernel's space: a queue that waits on a writable page the kernel never stores to.
    let ours = host(&space, WATCHED_VA, 4096);
    let mut waiter = TestQueue::new(&space, QueueKind::Pm4, 4096, 1);
    waiter.submit(&wait(WATCHED_VA));
    // In another space: a queue that waits on a word of its own.
    let other = gpu.create_address_space();
    let theirs = host(&other, HOST_VA, 4096);
    let mut bystander = TestQueue::new(&other, QueueKind::Pm4, 4096, 0);
    bystander.submit(&wait(HOST_VA));
    // Both waits watch their words before the kernel runs (a loaded machine may take long
    // to start their queues).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while gpu.waits_watching() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        gpu.waits_watching(),
        2,
        "the two waits never watched their words"
    );
    let before = gpu.waits_woken();
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&add_dispatch(&k, args, grid.groups));
    q.wait_idle();
    assert_eq!(q.status(), QueueStatus::Running);
    let y1 = mem.load_u32((y - HOST_VA) as usize + 4, Ordering::Acquire);
    assert_eq!(f32::from_bits(y1), 3.0, "the kernel ran");
    // The dispatch's release wrote a page no wait watches; the kernel's end woke the waiter
    // (which found its word unchanged and went on waiting) and not the bystander.
    assert_eq!(
        gpu.waits_woken() - before,
        1,
        "the kernel's end woke its space's waiter alone"
    );
    assert_eq!(gpu.waits_watching(), 2, "both waits still wait");
    ours.store_u32(0, 7, Ordering::Release);
    theirs.store_u32(0, 7, Ordering::Release);
    waiter.wait_idle();
    bystander.wait_idle();
}
