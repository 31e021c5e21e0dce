//! Figures of the submission path, against a rigd of its own on the simulated GPU:
//!
//! - CPU per queued launch of an empty kernel (the goal is at most 0.1 us), and per launch
//!   of a submission of 100 launches (the goal is at most 25 ns);
//! - submit-to-completion of an empty kernel, with a spinning wait, the default wait (a
//!   bounded spin, then a sleep) and a wait that sleeps at once (p50, p99);
//! - submissions per second from one process and from 8 processes at once;
//! - alloc + free of 4 KiB, 64 KiB and 1 MiB buffers of each kind (p50, p99; the goal is
//!   at most 1 us p50), with and without writes between, and of a buffer past the slabs'
//!   threshold (a round trip).
//!
//! `cargo bench -p rig-client --bench figures` (`RIG_BENCH_ONLY=submit` for the CPU
//! figures alone, `RIG_BENCH_ONLY=wait` for the submit-to-completion ones,
//! `RIG_BENCH_ONLY=alloc` for the allocation figures). The empty kernel is compiled through
//! `rig_kernels::Compiler` where a compiler is installed, or read from the file
//! `RIG_BENCH_EMPTY_CODE` names; otherwise the `add` kernel of one work-group stands in, and
//! the figures say so. `RIG_BENCH_BATCHES=n` times n batches of 48 queued launches instead
//! of 200 (a longer run for a profiler).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rig_client::{Device, Kernel, Launch, Memory, Ref, Rig, Submission, WaitPolicy};

fn open(socket: &Path) -> Device {
    let rig = Rig::connect_to(socket).expect("connect");
    let name = rig.gpus().expect("gpus")[0].name.clone();
    rig.open_device(&name).expect("open")
}

/// An empty kernel's code object: the file `RIG_BENCH_EMPTY_CODE` names (built elsewhere, for
/// a host with no compiler), else built here where a compiler is installed.
fn empty_code() -> Option<Vec<u8>> {
    if let Some(path) = std::env::var_os("RIG_BENCH_EMPTY_CODE") {
        return Some(std::fs::read(&path).expect("RIG_BENCH_EMPTY_CODE names a code object"));
    }
    rig_testkit::kernels::compile("empty", "__kernel void empty(void) {}\n", "gfx1100")
}

/// The launch measured: the empty kernel, or `add` over one group.
fn launch(dev: &Device) -> (Submission, &'static str, Vec<rig_client::Buffer>) {
    launches(dev, 1)
}

/// A submission of `n` of the launches measured.
fn launches(dev: &Device, n: usize) -> (Submission, &'static str, Vec<rig_client::Buffer>) {
    if let Some(code) = empty_code() {
        let k: Kernel = dev.load_image(&code).unwrap().resolve("empty").unwrap();
        let s = (0..n).fold(Submission::new(), |s, _| {
            s.launch(Launch::new(&k, [1, 1, 1], [32, 1, 1]))
        });
        return (s, "empty kernel", vec![]);
    }
    let code = rig_testkit::Backend::Sim.code("add");
    let k = dev.load_image(&code).unwrap().resolve("add").unwrap();
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Pinned).unwrap();
    let s = (0..n).fold(Submission::new(), |s, _| {
        s.launch(
            Launch::new(&k, [1, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        )
    });
    (
        s,
        "add over 256 items (no compiler for an empty kernel)",
        vec![x, y],
    )
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

/// Submits `n` launches, waiting only for the last; returns the seconds taken.
fn stream(dev: &Device, s: &Submission, n: u32) -> f64 {
    let t = Instant::now();
    let mut last = None;
    for _ in 0..n {
        last = Some(dev.submit(s).unwrap());
    }
    last.unwrap().wait().unwrap();
    t.elapsed().as_secs_f64()
}

/// Submit to completion of one launch at a time, with each wait policy of the figures:
/// spinning only, the default (a bounded spin, then a sleep), and sleeping at once.
fn waits(dev: &Device, s: &Submission) {
    let policies = [
        ("spinning", WaitPolicy::spinning(Duration::from_secs(1))),
        ("default (spin, then sleep)", WaitPolicy::default()),
        ("sleeping at once", WaitPolicy::sleeping()),
    ];
    for (name, policy) in policies {
        let mut v = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let t = Instant::now();
            let p = dev.submit(s).unwrap();
            assert!(p.wait_with(policy).unwrap());
            v.push(t.elapsed());
        }
        println!(
            "  submit to completion, {name} wait: p50 {:.1} us, p99 {:.1} us",
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        );
    }
}

fn main() {
    if let Some(code) = rig_testkit::serve::main() {
        std::process::exit(code);
    }
    if let Some(socket) = std::env::var_os("RIG_BENCH_WORKER") {
        // A worker of the 8-process figure: its submissions per second on stdout.
        let dev = open(Path::new(&socket));
        let (s, _, _keep) = launch(&dev);
        stream(&dev, &s, 1000);
        let n = 20_000;
        println!("{}", n as f64 / stream(&dev, &s, n));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let d = rig_testkit::Daemon::start(rig_testkit::Backend::Sim, None);
    let dev = open(&d.socket);
    let (s, what, _keep) = launch(&dev);
    dev.submit(&s).unwrap().wait().unwrap();
    println!(
        "rig-client figures, {} ({}, simulated), launch of {what}",
        dev.name(),
        dev.arch()
    );

    let only = std::env::var("RIG_BENCH_ONLY").ok();
    if only.as_deref() == Some("alloc") {
        alloc_figures(&dev);
        dev.close().unwrap();
        return;
    }
    if only.as_deref() == Some("wait") {
        waits(&dev, &s);
        dev.close().unwrap();
        return;
    }

    // CPU per queued launch: batches that fit today's rings, so no submit waits for room.
    let batch = 48;
    let mut best = f64::MAX;
    let mut total = Duration::ZERO;
    let mut count = 0u32;
    let mut batches = Vec::with_capacity(200);
    let rounds: u32 = std::env::var("RIG_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for _ in 0..rounds {
        let t = Instant::now();
        let mut last = None;
        for _ in 0..batch {
            last = Some(dev.submit(&s).unwrap());
        }
        let e = t.elapsed();
        total += e;
        count += batch;
        best = best.min(e.as_secs_f64() / f64::from(batch));
        batches.push(e / batch);
        last.unwrap().wait().unwrap();
    }
    // Each submit timed alone: the first of a batch wakes the sleeping queue (a futex
    // wake), the others find it awake.
    let mut each = Vec::with_capacity(200 * batch as usize);
    for _ in 0..200 {
        let mut last = None;
        for _ in 0..batch {
            let t = Instant::now();
            last = Some(dev.submit(&s).unwrap());
            each.push(t.elapsed());
        }
        last.unwrap().wait().unwrap();
    }
    println!(
        "  CPU per queued launch: mean {:.3} us, batches of {batch} p50 {:.3} us p99 {:.3} us, best batch {:.3} us, each alone p50 {:.3} us p99 {:.3} us (goal: at most 0.1 us)",
        total.as_secs_f64() * 1e6 / f64::from(count),
        pct(&mut batches, 0.5),
        pct(&mut batches, 0.99),
        best * 1e6,
        pct(&mut each, 0.5),
        pct(&mut each, 0.99)
    );

    // A submission of 100 launches: its submit's CPU, per launch.
    let (hundred, _, _keep100) = launches(&dev, 100);
    dev.submit(&hundred).unwrap().wait().unwrap();
    let mut per = Vec::with_capacity(500);
    for _ in 0..500 {
        let t = Instant::now();
        let p = dev.submit(&hundred).unwrap();
        per.push(t.elapsed() / 100);
        p.wait().unwrap();
    }
    println!(
        "  CPU per launch in a submission of 100: p50 {:.1} ns, p99 {:.1} ns (goal: at most 25 ns)",
        pct(&mut per, 0.5) * 1e3,
        pct(&mut per, 0.99) * 1e3
    );

    if only.as_deref() == Some("submit") {
        dev.close().unwrap();
        return;
    }
    waits(&dev, &s);

    let n = 20_000;
    println!(
        "  submissions per second, 1 process: {:.0}",
        f64::from(n) / stream(&dev, &s, n)
    );
    let workers: Vec<_> = (0..8)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .env("RIG_BENCH_WORKER", &d.socket)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let total: f64 = workers
        .into_iter()
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<f64>()
                .unwrap_or(0.0)
        })
        .sum();
    println!("  submissions per second, 8 processes at once: {total:.0} (sum of the 8)");
    alloc_figures(&dev);
    dev.close().unwrap();
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Alloc + free of buffers cut from a slab (made by a first allocation), per kind and size;
/// then with a host write of one byte between (its pages are zeroed before they are cut
/// again: by the host, or a fill on COPY:0 for Device memory; the write itself is not
/// timed); then of a buffer past the slabs' threshold, a region of its own.
fn alloc_figures(dev: &Device) {
    let kinds = [Memory::Device, Memory::Pinned, Memory::Mapped];
    let sizes = [4u64 << 10, 64 << 10, 1 << 20];
    for memory in kinds {
        for bytes in sizes {
            drop(dev.buffer(bytes, memory).unwrap());
            let mut v = Vec::with_capacity(20_000);
            for _ in 0..20_000 {
                let t = Instant::now();
                drop(dev.buffer(bytes, memory).unwrap());
                v.push(t.elapsed());
            }
            println!(
                "  alloc + free, {memory:?} {}: p50 {:.3} us, p99 {:.3} us (goal: at most 1 us p50)",
                size(bytes),
                pct(&mut v, 0.5),
                pct(&mut v, 0.99)
            );
        }
    }
    for memory in kinds {
        for bytes in sizes {
            let mut v = Vec::with_capacity(2000);
            for _ in 0..2000 {
                let t = Instant::now();
                let b = dev.buffer(bytes, memory).unwrap();
                let alloc = t.elapsed();
                b.write_at(0, &[1]).unwrap();
                let t = Instant::now();
                drop(b);
                v.push(alloc + t.elapsed());
            }
            println!(
                "  alloc + free, written between, {memory:?} {}: p50 {:.3} us, p99 {:.3} us",
                size(bytes),
                pct(&mut v, 0.5),
                pct(&mut v, 0.99)
            );
        }
    }
    let large = rig_client::SLABS.most * 2;
    for memory in kinds {
        let mut v = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let t = Instant::now();
            drop(dev.buffer(large, memory).unwrap());
            v.push(t.elapsed());
        }
        println!(
            "  alloc + posted free, {memory:?} {} (a region of its own): p50 {:.1} us, p99 {:.1} us",
            size(large),
            pct(&mut v, 0.5),
            pct(&mut v, 0.99)
        );
    }
}
