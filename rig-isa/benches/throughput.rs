//! Interpreter throughput: lane-instructions and wave-instructions per second for a loop of
//! dependent FMAs (65536 work-items x 1000 iterations), a vector add of 1 M floats and the tiled
//! matrix multiply, on one thread and on all cores, with the scaling of all cores against one
//! thread (and the host's own: as many independent one-thread copies at once); and the cost of
//! one small dispatch (vadd of one or four 32-item groups), setup
//! included, and the process's first dispatch (tables and decode). The FMA loop's and the vector add's results are checked against the host.
//! Then every corpus kernel, as gfx1100 and gfx1201, on one thread (lane-instructions/s each,
//! the slowest and fastest named).
//! Run: `cargo bench -p rig-isa --bench throughput` (prints its figures).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::{Arg, Case, mem_for, prepare, read_back, run};

fn f32s(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|k| ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 * 0.01)
        .flat_map(f32::to_le_bytes)
        .collect()
}

fn floats(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// A kernel to measure and what its output buffer must hold afterwards.
struct Load {
    label: String,
    case: Case,
    /// Index of the output buffer and the host's result for it.
    expect: Option<(usize, Vec<u8>)>,
    reps: u32,
}

/// Runs of `l` of which the best counts: RIG_ISA_BENCH_REPS, else the load's own (more on a
/// host whose speed swings).
fn reps(l: &Load) -> u32 {
    std::env::var("RIG_ISA_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(l.reps)
}

/// Best time of `reps` runs on `threads` threads and the counters of one run; panics when the
/// output differs from the host's.
fn bench(l: &Load, threads: usize) -> (f64, rig_isa::ExecStats) {
    let mem = mem_for(&l.case);
    let (d, addrs) = prepare(&mem, &l.case);
    let mut best = f64::MAX;
    let mut stats = Default::default();
    let reps = reps(l);
    for _ in 0..reps {
        let t = Instant::now();
        stats = run(&d, &mem, threads);
        best = best.min(t.elapsed().as_secs_f64());
    }
    if let Some((k, want)) = &l.expect {
        let got = &read_back(&mem, &l.case, &addrs)[*k];
        assert!(
            got == want,
            "{}: the result differs from the host's",
            l.label
        );
    }
    (best, stats)
}

/// The host's own scaling: `threads` copies of the one-thread run at once, each on a thread of
/// its own with its own memory (nothing of rig-isa shared but the code): the lane-instructions
/// per second of all of them, best of `reps` rounds started together.
fn independent(l: &Load, threads: usize) -> f64 {
    let reps = reps(l);
    let start = std::sync::Barrier::new(threads + 1);
    let end = std::sync::Barrier::new(threads + 1);
    let lanes = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mem = mem_for(&l.case);
                let (d, _) = prepare(&mem, &l.case);
                for _ in 0..reps {
                    start.wait();
                    let st = run(&d, &mem, 1);
                    lanes.store(st.lane_instructions, std::sync::atomic::Ordering::Relaxed);
                    end.wait();
                }
            });
        }
        let mut best = f64::MAX;
        for _ in 0..reps {
            start.wait();
            let t = Instant::now();
            end.wait();
            best = best.min(t.elapsed().as_secs_f64());
        }
        threads as f64 * lanes.load(std::sync::atomic::Ordering::Relaxed) as f64 / best
    })
}

fn vadd(len: u32) -> Case {
    Case {
        name: "vadd_f32",
        opt: "O2",
        grid: [len, 1, 1],
        group: [256.min(len), 1, 1],
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
    }
}

/// `reps` timed dispatches of each size (in groups of 32), after the process's first.
fn small_dispatches(cores: usize, sizes: &[u32], reps: usize) {
    for &groups in sizes {
        let items = 32 * groups;
        let small = Case {
            group: [32, 1, 1],
            ..vadd(items)
        };
        let mem = mem_for(&small);
        let (d, _) = prepare(&mem, &small);
        if groups == sizes[0] {
            // The process's first dispatch also builds the interpreter's tables and decodes.
            let t = Instant::now();
            run(&d, &mem, cores);
            println!(
                "first dispatch of the process (vadd, {groups} group(s) of 32): {:.1} us",
                t.elapsed().as_secs_f64() * 1e6
            );
        }
        if reps == 0 {
            continue;
        }
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
}

/// Every corpus kernel (`tests/common/cases.rs`: -O2, -O0 and wave64 builds) as gfx1100 and
/// gfx1201, on one thread: lane-instructions/s of each (best of `reps` runs, each on fresh
/// memory), the share of its instructions on the general tier, and the slowest and fastest
/// kernel named.
fn corpus(reps: u32) {
    use common::cases::{Lists, TARGETS, built_for, cases};
    use rig_isa::Isa;
    let lists = Lists::read();
    let mut rates = Vec::new();
    for c in cases() {
        for (isa, target) in TARGETS {
            if isa == Isa::Gfx9 || !built_for(&c, isa, &lists) {
                continue;
            }
            let mut best = f64::MAX;
            let mut stats = rig_isa::ExecStats::default();
            for _ in 0..reps.max(1) {
                let mem = mem_for(&c);
                let (d, _) = common::prepare_in(&mem, &c, &common::corpus_dir_of(isa));
                let stop = std::sync::atomic::AtomicBool::new(false);
                let t = Instant::now();
                stats = rig_isa::execute_isa(isa, &d, rig_isa::Workgroups::ALL, &mem, &stop, 1)
                    .unwrap_or_else(|e| panic!("{target} {}.{}: {e}", c.name, c.opt));
                best = best.min(t.elapsed().as_secs_f64());
            }
            let rate = stats.lane_instructions as f64 / best;
            let general = stats.general_total() as f64 / stats.instructions.max(1) as f64;
            println!(
                "corpus {target} {}.{}: {:.1} M lane-instructions/s, {} lane-instructions in {:.3} ms, {:.1}% of instructions on the general tier",
                c.name,
                c.opt,
                rate / 1e6,
                stats.lane_instructions,
                best * 1e3,
                100.0 * general
            );
            rates.push((rate, format!("{target} {}.{}", c.name, c.opt)));
        }
    }
    rates.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some(lo), Some(hi)) = (rates.first(), rates.last()) {
        println!(
            "corpus: {} kernels; slowest {} at {:.1} M lane-instructions/s, fastest {} at {:.1} M",
            rates.len(),
            lo.1,
            lo.0 / 1e6,
            hi.1,
            hi.0 / 1e6
        );
    }
}

fn main() {
    // RIG_ISA_BENCH_THREADS sets the all-cores run's threads (default: the host's).
    let cores = std::env::var("RIG_ISA_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
    // RIG_ISA_BENCH_N shrinks the matmul (e.g. 64 for callgrind).
    let n: u32 = std::env::var("RIG_ISA_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    // RIG_ISA_BENCH=small, corpus, fma, vadd or matmul runs one part (for profiling); small1 the small
    // dispatch of one group alone, first the process's first dispatch alone (for callgrind).
    let only = std::env::var("RIG_ISA_BENCH").unwrap_or_default();
    if only.is_empty() || only.starts_with("small") {
        let sizes: &[u32] = if only == "small1" { &[1] } else { &[1, 4] };
        small_dispatches(cores, sizes, 20_000);
        if !only.is_empty() {
            return;
        }
    }
    if only == "first" {
        small_dispatches(cores, &[1], 0);
        return;
    }
    if only.is_empty() || only == "corpus" {
        // Best of 20: a kernel's run is short (a fraction of a millisecond), so one preempted
        // run says nothing.
        let reps = std::env::var("RIG_ISA_BENCH_REPS").ok();
        corpus(reps.and_then(|v| v.parse().ok()).unwrap_or(20));
        if !only.is_empty() {
            return;
        }
    }

    // 1024 groups, 64 a thread on 16 threads: the run lasts long enough (about 10 ms on 16
    // threads) that waking helpers and the last group's tail do not decide the scaling, as
    // with 4096 work-items (64 groups, 4 a thread, a run of 1.1 ms).
    let (items, iters, a, b) = (65536u32, 1000u32, 0.999f32, 0.01f32);
    let x = f32s(items as usize, 5);
    let fma_host: Vec<u8> = floats(&x)
        .map(|mut v| {
            for _ in 0..iters {
                v = v.mul_add(a, b);
            }
            v
        })
        .flat_map(f32::to_le_bytes)
        .collect();
    let fma = Load {
        label: format!("fma loop {items} x {iters}"),
        case: Case {
            name: "fma_loop",
            opt: "O2",
            grid: [items, 1, 1],
            group: [64, 1, 1],
            bufs: vec![x, vec![0; 4 * items as usize]],
            args: vec![
                Arg::Buf(0, ""),
                Arg::Buf(1, ""),
                Arg::F32(a),
                Arg::F32(b),
                Arg::U32(iters),
            ],
        },
        expect: Some((1, fma_host)),
        reps: 3,
    };
    let len = 1 << 20;
    let va_case = vadd(len);
    let va_host: Vec<u8> = floats(&va_case.bufs[0])
        .zip(floats(&va_case.bufs[1]))
        .flat_map(|(p, q)| (p + q).to_le_bytes())
        .collect();
    let va = Load {
        label: "vadd 1M f32".into(),
        case: va_case,
        expect: Some((2, va_host)),
        reps: 5,
    };
    let mm = Load {
        label: format!("matmul {n}x{n} f32"),
        case: Case {
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
        },
        expect: None,
        reps: 3,
    };
    for (part, l) in [("fma", &fma), ("vadd", &va), ("matmul", &mm)] {
        if !only.is_empty() && only != part {
            continue;
        }
        let mut one = 0.0;
        for threads in [1, cores] {
            let (t, s) = bench(l, threads);
            let lanes = s.lane_instructions as f64 / t;
            println!(
                "{}, {threads} thread(s): {:.4} s, {:.1} M lane-instructions/s ({:.1} M per thread), {:.1} M wave-instructions/s, {:.1} M work-items/s",
                l.label,
                t,
                lanes / 1e6,
                lanes / 1e6 / threads as f64,
                s.instructions as f64 / t / 1e6,
                l.case.grid.iter().map(|&g| g as f64).product::<f64>() / t / 1e6,
            );
            if threads == 1 {
                one = lanes;
            } else {
                println!(
                    "{}: scaling on {cores} threads {:.2} (all-threads rate / ({cores} x one-thread rate); goal 0.8)",
                    l.label,
                    lanes / (cores as f64 * one)
                );
                // What the host gives: as many one-thread copies at once, sharing nothing.
                let host = independent(l, cores);
                println!(
                    "{}: {cores} independent one-thread copies at once: {:.1} M lane-instructions/s, the host's scaling {:.2}; the all-threads run / theirs {:.2}",
                    l.label,
                    host / 1e6,
                    host / (cores as f64 * one),
                    lanes / host
                );
            }
            if cores == 1 {
                break;
            }
        }
    }
}
