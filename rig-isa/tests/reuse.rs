//! What one dispatch leaves for the next is never stale. A thread keeps its waves and LDS:
//! dispatches of other shapes (wave64 after wave32, other VGPR counts, LDS after none) on the
//! same thread run as if their waves were new. The process keeps decodes by code address: code
//! changed there, anywhere in the words a decode used or past them, runs as changed.

mod common;

use std::sync::atomic::AtomicBool;

use common::{Arg, Case, mem_for, prepare, read_back, run};
use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, ExecFault, Memory, execute};

fn f32s(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 * 0.01)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn case(name: &'static str, opt: &'static str, a: &[f32], b: &[f32], n: u32) -> Case {
    let (grid, group) = if name == "matmul" {
        ([n, n, 1], [16, 16, 1])
    } else {
        ([n, 1, 1], [128, 1, 1])
    };
    Case {
        name,
        opt,
        grid,
        group,
        bufs: vec![bytes(a), bytes(b), vec![0; 4 * a.len()]],
        args: vec![
            Arg::Buf(0, ""),
            Arg::Buf(1, ""),
            Arg::Buf(2, ""),
            Arg::U32(n),
        ],
    }
}

#[test]
fn dispatches_of_other_shapes_on_one_thread_start_fresh() {
    let n = 32usize;
    let (a, b) = (f32s(n * n, 1), f32s(n * n, 2));
    let vadd: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    // The kernel's order: acc = fma(a[row][k], b[k][col], acc) for k upwards.
    let matmul: Vec<f32> = (0..n * n)
        .map(|i| {
            (0..n).fold(0f32, |acc, k| {
                a[i / n * n + k].mul_add(b[k * n + i % n], acc)
            })
        })
        .collect();
    // Wave size, VGPR count and LDS change from each dispatch to the next.
    let order = [
        ("vadd_f32", "O2"),
        ("vadd_f32", "W64"),
        ("matmul", "O2"),
        ("vadd_f32", "O2"),
        ("matmul", "W64"),
        ("vadd_f32", "W64"),
        ("matmul", "O2"),
        ("vadd_f32", "O0"),
    ];
    for (name, opt) in order {
        let (c, want) = if name == "matmul" {
            (case(name, opt, &a, &b, n as u32), &matmul)
        } else {
            (case(name, opt, &a, &b, (n * n) as u32), &vadd)
        };
        let mem = mem_for(&c);
        let (d, addrs) = prepare(&mem, &c);
        run(&d, &mem, 1);
        let got = &read_back(&mem, &c, &addrs)[2];
        assert!(
            got == &bytes(want),
            "{name}.{opt} after a dispatch of another shape differs from the host"
        );
    }
}

const S_NOP: u32 = 0xbf80_0000;

fn s_trap(code: u16) -> u32 {
    0xbf90_0000 | u32::from(code)
}

/// One wave of 32 at `code` with s0 = `s0`; the trap it ends with (panics if it ends otherwise).
fn trap_of(mem: &FlatMemory, code: u64, s0: u32) -> u16 {
    let d = Dispatch {
        code_address: code,
        pgm_rsrc1: 0,
        pgm_rsrc2: 1 << 1, // one user SGPR
        pgm_rsrc3: 0,
        user_sgprs: vec![s0],
        grid_items: [32, 1, 1],
        group_size: [32, 1, 1],
        wave64: false,
        lds_bytes: 0,
        scratch: None,
    };
    match execute(&d, mem, &AtomicBool::new(false), 1) {
        Err(ExecFault::Trap { code, .. }) => code,
        other => panic!("expected a trap, got {other:?}"),
    }
}

fn write_words(mem: &FlatMemory, at: u64, words: &[u32]) {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write(at, &bytes).expect("code");
}

// Each test below has its own code address: the decode cache is the process's.

#[test]
fn a_changed_literal_runs_as_changed() {
    let (base, code) = (0x7_0000_0000u64, 0x7_0000_0000u64);
    let mem = FlatMemory::new(base, 0x1000);
    // s_cmp_eq_u32 s0, 5 (literal) ; s_cbranch_scc0 +1 ; s_trap 2 ; s_trap 1
    write_words(
        &mem,
        code,
        &[0xbf06_ff00, 5, 0xbfa1_0001, s_trap(2), s_trap(1)],
    );
    assert_eq!(trap_of(&mem, code, 5), 2);
    assert_eq!(trap_of(&mem, code, 5), 2);
    // Only the literal word changes: the cached decode of its instruction must not serve.
    write_words(&mem, code + 4, &[6]);
    assert_eq!(trap_of(&mem, code, 5), 1);
    assert_eq!(trap_of(&mem, code, 6), 2);
}

#[test]
fn code_past_the_decoded_words_is_read_afresh() {
    let (base, code) = (0x7_1000_0000u64, 0x7_1000_0000u64);
    let mem = FlatMemory::new(base, 0x1000);
    // s_cmp_eq_u32 s0, 5 ; s_cbranch_scc0 +1 ; s_trap 2 ; s_trap 1 (not reached with s0 = 5)
    write_words(
        &mem,
        code,
        &[0xbf06_ff00, 5, 0xbfa1_0001, s_trap(2), s_trap(1)],
    );
    assert_eq!(trap_of(&mem, code, 5), 2);
    // The word after the last decoded instruction was read ahead, never decoded; it changes,
    // and the next dispatch takes the branch to it.
    write_words(&mem, code + 16, &[s_trap(3)]);
    assert_eq!(trap_of(&mem, code, 6), 3);
}

#[test]
fn a_change_on_the_second_page_of_the_code_runs_as_changed() {
    let (base, code) = (0x7_2000_0000u64, 0x7_2000_0f00u64);
    let mem = FlatMemory::new(base, 0x3000);
    // s_nops across the page boundary at base + 0x1000, then a trap on the next page.
    let nops = 0x200 / 4;
    let mut words = vec![S_NOP; nops];
    words.push(s_trap(4));
    write_words(&mem, code, &words);
    assert_eq!(trap_of(&mem, code, 0), 4);
    assert_eq!(trap_of(&mem, code, 0), 4);
    write_words(&mem, code + 4 * nops as u64, &[s_trap(5)]);
    assert_eq!(trap_of(&mem, code, 0), 5);
    // And a word changed just past the boundary (the first page unchanged).
    write_words(&mem, base + 0x1000, &[s_trap(6)]);
    assert_eq!(trap_of(&mem, code, 0), 6);
}

#[test]
fn threads_switching_kernels_run_the_code_each_kernel_has_now() {
    let base = 0x7_3000_0000u64;
    let mem = FlatMemory::new(base, 0x2000);
    // Four kernels, one trap each; threads launch them in different orders, and one kernel is
    // rewritten in the middle.
    for k in 0..4u16 {
        write_words(&mem, base + 0x400 * u64::from(k), &[S_NOP, s_trap(10 + k)]);
    }
    std::thread::scope(|s| {
        for t in 0..4u16 {
            let mem = &mem;
            s.spawn(move || {
                for i in 0..40u16 {
                    let k = (t + i * (t + 1)) % 4;
                    assert_eq!(trap_of(mem, base + 0x400 * u64::from(k), 0), 10 + k);
                }
            });
        }
    });
    write_words(&mem, base + 0xc04, &[s_trap(20)]);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10 {
                    assert_eq!(trap_of(&mem, base + 0xc00, 0), 20);
                    assert_eq!(trap_of(&mem, base, 0), 10);
                }
            });
        }
    });
}

#[test]
fn what_a_reused_decode_adds_is_checked_by_the_next_dispatch() {
    let (base, code) = (0x7_4000_0000u64, 0x7_4000_0000u64);
    let mem = FlatMemory::new(base, 0x1000);
    // s_cmp_eq_u32 s0, 5 ; s_cbranch_scc0 +1 ; s_trap 2 ; s_trap 1 (reached with s0 != 5)
    write_words(
        &mem,
        code,
        &[0xbf06_ff00, 5, 0xbfa1_0001, s_trap(2), s_trap(1)],
    );
    assert_eq!(trap_of(&mem, code, 5), 2);
    // This dispatch reuses that decode and adds the last trap's to it.
    assert_eq!(trap_of(&mem, code, 6), 1);
    // The added instruction changes: the decode it made must not serve.
    write_words(&mem, code + 16, &[s_trap(7)]);
    assert_eq!(trap_of(&mem, code, 6), 7);
}
