//! Tenants of one simulated GPU cannot reach each other's memory through work in flight: a
//! copy racing the unmap of its memory never writes into, or reads from, pages another VMID
//! was given meanwhile.
//!
//! Each round of each test is the attack: VMID A runs a 64 MiB SDMA copy, the region it writes
//! (or reads) is unmapped while the copy runs, and VMID B at once allocates the same size,
//! which the arena's first fit would serve from exactly those pages. Before the simulator held
//! what it translated, the 16 MiB chunk in flight kept writing into B's fresh pages (or
//! reading B's secret) in most rounds.

mod common;

use common::*;
use rig_amd::gpu::{Gpu, QueueKind};
use rig_amd::sdma::{ConstFill, CopyLinear, Layout, Packet};
use rig_sim::{FaultReason, SimGpu};
use std::sync::Arc;

const MIB: u64 = 1 << 20;
/// The size of every region: four of the simulator's 16 MiB chunks.
const BYTES: u64 = 64 * MIB;
const ROUNDS: usize = 10;

const A_SRC: u64 = VRAM_VA;
const A_DST: u64 = VRAM_VA + 0x1000_0000;
const B_MEM: u64 = VRAM_VA + 0x2000_0000;

fn w(p: Packet) -> Vec<u32> {
    p.to_words(Layout::for_gpu(Gpu::by_name("gfx1100").unwrap()))
        .unwrap()
}

fn read(space: &rig_sim::AddressSpace, va: u64) -> Vec<u8> {
    let mut got = vec![0u8; BYTES as usize];
    space.read(va, &mut got).unwrap();
    got
}

/// Bytes of `got` that are not `allowed`.
fn count_not(got: &[u8], allowed: &[u8]) -> usize {
    got.iter().filter(|b| !allowed.contains(b)).count()
}

/// Fills 64 MiB at `va` through the SDMA queue `q` (fast, unlike a host write).
fn fill(q: &mut TestQueue, va: u64, value: u8) {
    q.submit(&w(Packet::ConstFill(ConstFill::dwords(
        va,
        u32::from_le_bytes([value; 4]),
        BYTES,
    ))));
    q.wait_idle();
}

/// What A's queue runs over the region.
#[derive(Clone, Copy)]
enum Work {
    /// COPY_LINEAR from a source.
    Copy(u64),
    /// CONST_FILL with a byte.
    Fill(u8),
}

/// Starts an SDMA queue of `space` doing `work` into `dst` twice, so that an unmap always
/// meets a chunk (the second one faults at its first, if the first ended before the unmap).
fn start(space: &rig_sim::AddressSpace, dst: u64, work: Work, slot: u64) -> TestQueue {
    let mut q = TestQueue::new(space, QueueKind::Sdma, 4096, slot);
    let packet = match work {
        Work::Copy(src) => Packet::CopyLinear(CopyLinear::new(src, dst, BYTES)),
        Work::Fill(v) => {
            Packet::ConstFill(ConstFill::dwords(dst, u32::from_le_bytes([v; 4]), BYTES))
        }
    };
    let mut words = w(packet);
    words.extend(w(packet));
    q.submit(&words);
    q
}

/// Waits until the first byte of `va` in `space` is `value`: the first chunk runs.
fn wait_first_byte(space: &rig_sim::AddressSpace, va: u64, value: u8) {
    wait_for("the work to begin", || {
        let mut b = [0u8; 1];
        space.read(va, &mut b).unwrap();
        b[0] == value
    });
}

fn assert_page_fault_in(q: &TestQueue, start: u64) {
    match q.wait_fault().reason {
        FaultReason::Page(p) => assert!(
            (start..start + BYTES).contains(&p.address),
            "fault outside the unmapped region: {p}"
        ),
        other => panic!("the copy must fault on the unmapped region, not {other:?}"),
    }
}

fn gpu() -> Arc<SimGpu> {
    common::gpu("gfx1100")
}

#[test]
fn a_copy_or_fill_into_unmapped_vram_never_writes_another_vmids_new_memory() {
    let gpu = gpu();
    let a = gpu.create_address_space();
    let b = gpu.create_address_space();
    // A's source first, then its destination: the destination's pages are the first that fit
    // 64 MiB once it is unmapped.
    a.alloc_vram(A_SRC, BYTES).unwrap();
    let mut filler = TestQueue::new(&a, QueueKind::Sdma, 4096, 0);
    fill(&mut filler, A_SRC, 0xa5);
    let mut leaks = Vec::new();
    for round in 0..ROUNDS {
        a.alloc_vram(A_DST, BYTES).unwrap();
        // Copies and fills alike: both run chunks without the page table.
        let work = if round % 2 == 0 {
            Work::Copy(A_SRC)
        } else {
            Work::Fill(0xa5)
        };
        let q = start(&a, A_DST, work, 1 + round as u64);
        wait_first_byte(&a, A_DST, 0xa5);
        a.unmap(A_DST, BYTES).unwrap();
        b.alloc_vram(B_MEM, BYTES).unwrap();
        // B's new memory is zero, and stays B's own once written.
        let fresh = count_not(&read(&b, B_MEM), &[0]);
        b.write(B_MEM, &vec![0x3c; BYTES as usize]).unwrap();
        assert_page_fault_in(&q, A_DST);
        drop(q);
        let overwritten = count_not(&read(&b, B_MEM), &[0x3c]);
        if fresh + overwritten > 0 {
            leaks.push(format!(
                "round {round}: {fresh} bytes of B's new memory were not zero, \
                 {overwritten} of B's bytes were overwritten"
            ));
        }
        b.unmap(B_MEM, BYTES).unwrap();
    }
    assert!(leaks.is_empty(), "A's work reached B's memory: {leaks:#?}");
    assert_eq!(a.unmap(A_SRC, BYTES).unwrap(), BYTES);
    assert_eq!(gpu.vram_free(), gpu.vram_bytes(), "every page came back");
}

#[test]
fn a_copy_from_unmapped_vram_never_reads_another_vmids_memory() {
    let gpu = gpu();
    let a = gpu.create_address_space();
    let b = gpu.create_address_space();
    let mut filler = TestQueue::new(&a, QueueKind::Sdma, 4096, 0);
    let secret = vec![0xc3u8; 4096];
    let mut leaks = Vec::new();
    for round in 0..ROUNDS {
        // A's source first: its pages are the first that fit 64 MiB once it is unmapped. The
        // destination is fresh (not yet touched), which keeps the chunk in flight longer.
        a.alloc_vram(A_SRC, BYTES).unwrap();
        a.alloc_vram(A_DST, BYTES).unwrap();
        fill(&mut filler, A_SRC, 0x5a);
        let q = start(&a, A_DST, Work::Copy(A_SRC), 1 + round as u64);
        wait_first_byte(&a, A_DST, 0x5a);
        a.unmap(A_SRC, BYTES).unwrap();
        b.alloc_vram(B_MEM, BYTES).unwrap();
        // B's secret, quickly everywhere (a page every 256 KiB), then in full.
        for at in (0..BYTES).step_by(256 << 10) {
            b.write(B_MEM + at, &secret).unwrap();
        }
        b.write(B_MEM, &vec![0xc3; BYTES as usize]).unwrap();
        assert_page_fault_in(&q, A_SRC);
        drop(q);
        let got = read(&a, A_DST);
        let stolen = got.iter().filter(|x| **x == 0xc3).count();
        if stolen > 0 {
            leaks.push(format!(
                "round {round}: A read {stolen} bytes of B's secret"
            ));
        }
        b.unmap(B_MEM, BYTES).unwrap();
        a.unmap(A_DST, BYTES).unwrap();
    }
    assert!(leaks.is_empty(), "A's copy read B's memory: {leaks:#?}");
    assert_eq!(gpu.vram_free(), gpu.vram_bytes(), "every page came back");
}
