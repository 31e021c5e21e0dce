//! Interpreter throughput: lane-instructions per second for the tiled matrix multiply and
//! elements per second for a vector add of 16 M floats, on one thread and on all cores; and the
//! cost of one small dispatch (vadd of one or four 32-item groups), setup included.
//! Run: `cargo bench -p rig-isa --bench throughput` (prints its figures).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::{Arg, Case, mem_for, prepare, run};

fn f32s(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|k| ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 * 0.01)
        .flat_map(f32::to_le_bytes)
        .collect()
}

fn bench(c: &Case, threads: usize, reps: u32) -> (f64, rig_isa::ExecStats) {
    let mem = mem_for(c);
    let (d, _) = prepare(&mem, c);
    let mut best = f64::MAX;
    let mut stats = Default::default();
    for _ in 0..reps {
        let t = Instant::now();
        stats = run(&d, &mem, threads);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, stats)
}

fn main() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // RIG_ISA_BENCH_N shrinks the matmul (e.g. 64 for callgrind).
    let n: u32 = std::env::var("RIG_ISA_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mm = Case {
        name: "matmul",
        opt: "O2",
        grid: [n, n, 1],
        group: [16, 16, 1],
        bufs: vec![
            f32s((n * n) as usize, 1),
            f32s((n * n) as usize, 2),
            vec![0; 4 * (n * n) as usize],
        ],
        args: vec![
            Arg::Buf(0, ""),
            Arg::Buf(1, ""),
            Arg::Buf(2, ""),
            Arg::U32(n),
        ],
    };
    let len = 16 << 20;
    let va = Case {
        name: "vadd_f32",
        opt: "O2",
        grid: [len, 1, 1],
        group: [256, 1, 1],
        bufs: vec![
            f32s(len as usize, 3),
            f32s(len as usize, 4),
            vec![0; 4 * len as usize],
        ],
        args: vec![
            Arg::Buf(0, ""),
            Arg::Buf(1, ""),
            Arg::Buf(2, ""),
            Arg::U32(len),
        ],
    };
    // RIG_ISA_BENCH=matmul or =vadd runs one of the two (for profiling).
    let only = std::env::var("RIG_ISA_BENCH").unwrap_or_default();
    if only.is_empty() || only == "small" {
        for groups in [1u32, 4] {
            let items = 32 * groups;
            let small = Case {
                name: "vadd_f32",
                opt: "O2",
                grid: [items, 1, 1],
                group: [32, 1, 1],
                bufs: vec![
                    f32s(items as usize, 3),
                    f32s(items as usize, 4),
                    vec![0; 4 * items as usize],
                ],
                args: vec![
                    Arg::Buf(0, ""),
                    Arg::Buf(1, ""),
                    Arg::Buf(2, ""),
                    Arg::U32(items),
                ],
            };
            let mem = mem_for(&small);
            let (d, _) = prepare(&mem, &small);
            let reps = 20_000;
            let mut times = Vec::with_capacity(reps);
            for _ in 0..reps {
                let t = Instant::now();
                run(&d, &mem, cores);
                times.push(t.elapsed());
            }
            times.sort();
            println!(
                "small dispatch (vadd, {groups} group(s) of 32, up to {cores} threads): p50 {:.2} us, p99 {:.2} us",
                times[reps / 2].as_secs_f64() * 1e6,
                times[reps * 99 / 100].as_secs_f64() * 1e6,
            );
        }
        if only == "small" {
            return;
        }
    }
    for threads in [1, cores] {
        if only == "vadd" {
            let (t, s) = bench(&va, threads, 2);
            println!(
                "vadd 16M f32, {threads} thread(s): {:.3} s, {:.1} M elements/s, {:.1} M lane-instructions/s",
                t,
                len as f64 / t / 1e6,
                s.lane_instructions as f64 / t / 1e6
            );
            continue;
        }
        let (t, s) = bench(&mm, threads, 3);
        println!(
            "matmul {n}x{n} f32, {threads} thread(s): {:.3} s, {:.1} M lane-instructions/s ({:.1} M per thread), {:.1} M wave-instructions/s",
            t,
            s.lane_instructions as f64 / t / 1e6,
            s.lane_instructions as f64 / t / 1e6 / threads as f64,
            s.instructions as f64 / t / 1e6
        );
        if only == "matmul" {
            continue;
        }
        let (t, s) = bench(&va, threads, 2);
        println!(
            "vadd 16M f32, {threads} thread(s): {:.3} s, {:.1} M elements/s, {:.1} M lane-instructions/s",
            t,
            len as f64 / t / 1e6,
            s.lane_instructions as f64 / t / 1e6
        );
    }
}
