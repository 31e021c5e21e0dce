//! The kfd path beside the sim path, in one run: rigd serving an emulated KFD's gfx1100
//! (rig-kfd-emu in a process of its own, reached through the kfd path's system-call seam)
//! and rigd serving the simulated gfx1100, each measured the same way:
//!
//! - submit to completion of an empty kernel with a spinning wait (p50, p99), and with a
//!   wait that sleeps at once (p50, p99, and how the sleeps ended: [`rig_client::Sleeps`]);
//! - CPU per queued launch: the submitting thread's CPU time (CLOCK_THREAD_CPUTIME_ID) over
//!   batches of launches that fit the rings, per launch (mean, and p50/p99 of the batches);
//! - rigd's CPU (utime + stime from /proc) over 5 s with 64 idle clients, each with a device
//!   open (through KFD, as many as the user's share of the GPU holds), and the emulated
//!   kernel's beside it.
//!
//! `cargo bench -p rig-tests --bench kfd_paths`. Needs clang and lld (`rig_kernels::Compiler`)
//! for the empty kernel. The program is its own rigd and emulated KFD, run again as each
//! (`rig_testkit::Daemon`).

use std::time::{Duration, Instant};

use rig_client::{Device, Launch, Rig, Submission};
use rig_testkit::{Backend, Daemon};

/// A device of the first GPU, on a connection of its own (once rigd has seen closed
/// connections go and given back their devices' charges, when this user holds as many
/// connections, or as much of the GPU, as rigd allows).
fn device(d: &Daemon) -> Device {
    let start = Instant::now();
    loop {
        let opened = Rig::connect_to(&d.socket).and_then(|rig| {
            let name = rig.gpus()?[0].name.clone();
            rig.open_device(&name)
        });
        match opened {
            Ok(dev) => return dev,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(10), "{e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `p` quantile of `v` (sorted here), in microseconds.
fn us(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the thread's CPU clock");
    Duration::from(t)
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // utime and stime are fields 14 and 15, counted after the command's parenthesis.
    let rest = &stat[stat.rfind(')').expect("the stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
}

fn figures(on_kfd: bool, code: &[u8]) {
    let backend = if on_kfd { Backend::Kfd } else { Backend::Sim };
    let served = Daemon::start(backend, None);
    println!(
        "{}, {}:",
        if on_kfd {
            "kfd path (emulated KFD)"
        } else {
            "sim path"
        },
        backend.processor()
    );
    // 64 clients, each a connection with a device open: rigd's per-user default allows 64
    // connections, so they come first. Through KFD each device's queues take 44 MiB of the
    // user's share of the GPU (limits.gpu_share_percent), which holds fewer: as many as fit.
    let mut idle = Vec::with_capacity(64);
    for i in 0..64 {
        let start = Instant::now();
        let opened = loop {
            match rig_proto::Connection::connect(&served.socket, &format!("idle{i}")) {
                Ok(mut c) => match c.call(&rig_proto::Request::OpenDevice { gpu: 0 }, &[]) {
                    Ok((rig_proto::Response::DeviceOpened(_), fds)) => break Some((c, fds)),
                    Ok((rig_proto::Response::Error(e), _))
                        if e.code == rig_proto::ErrorCode::Quota =>
                    {
                        break None;
                    }
                    r => panic!("open a device: {r:?}"),
                },
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(10), "{e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        match opened {
            Some(o) => idle.push(o),
            None => break,
        }
    }
    let clients = idle.len();
    std::thread::sleep(Duration::from_millis(500));
    let pids: Vec<(&str, u32)> = std::iter::once(("rigd", served.pid()))
        .chain(served.kfd_pid().map(|p| ("the emulated kernel", p)))
        .collect();
    let before: Vec<u64> = pids.iter().map(|(_, p)| cpu_ticks(*p)).collect();
    let secs = 5.0;
    std::thread::sleep(Duration::from_secs_f64(secs));
    for ((who, pid), b) in pids.iter().zip(before) {
        let used = cpu_ticks(*pid) - b;
        // USER_HZ is 100 on Linux.
        println!(
            "  {who}'s CPU with {clients} idle clients (a device open each) over {secs} s: {used} ticks = {:.2}% of one core",
            used as f64 / 100.0 / secs * 100.0
        );
    }
    drop(idle);
    let dev = device(&served);
    let k = dev.load_image(code).unwrap().resolve("empty").unwrap();
    let s = Submission::new().launch(Launch::new(&k, [1, 1, 1], [32, 1, 1]));

    let mut trip = Vec::with_capacity(2000);
    for i in 0..2200 {
        let t = Instant::now();
        dev.submit(&s)
            .unwrap()
            .wait_with(rig_client::WaitPolicy::spinning(Duration::from_secs(1)))
            .unwrap();
        if i >= 200 {
            trip.push(t.elapsed());
        }
    }
    println!(
        "  submit to completion of an empty kernel, spinning wait: p50 {:.1} us, p99 {:.1} us",
        us(&mut trip, 0.5),
        us(&mut trip, 0.99)
    );

    // Sleeping at once: the path's interrupt handler must wake the wait (a sleep no wake
    // ends lasts its 10 ms slice, which the counts below would show).
    let before = dev.sleeps();
    let mut slept = Vec::with_capacity(2000);
    for i in 0..2200 {
        let t = Instant::now();
        dev.submit(&s)
            .unwrap()
            .wait_with(rig_client::WaitPolicy::sleeping())
            .unwrap();
        if i >= 200 {
            slept.push(t.elapsed());
        }
    }
    let after = dev.sleeps();
    println!(
        "  submit to completion of an empty kernel, sleeping at once: p50 {:.1} us, p99 {:.1} us \
         (sleeps woken {}, not begun {}, out of their slice {})",
        us(&mut slept, 0.5),
        us(&mut slept, 0.99),
        after.woken - before.woken,
        after.unslept - before.unslept,
        after.elapsed - before.elapsed
    );

    let batch = 48u32;
    let (mut total, mut batches) = (Duration::ZERO, Vec::with_capacity(200));
    for _ in 0..200 {
        let t = thread_cpu();
        let mut last = None;
        for _ in 0..batch {
            last = Some(dev.submit(&s).unwrap());
        }
        let e = thread_cpu() - t;
        total += e;
        batches.push(e / batch);
        last.unwrap().wait().unwrap();
    }
    println!(
        "  CPU per queued launch: mean {:.3} us, batches of {batch} p50 {:.3} us p99 {:.3} us",
        total.as_secs_f64() * 1e6 / f64::from(200 * batch),
        us(&mut batches, 0.5),
        us(&mut batches, 0.99)
    );
    drop(k);
    dev.close().unwrap();
}

fn main() {
    if let Some(code) = rig_testkit::serve::main() {
        std::process::exit(code);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // The kfd path's emulated KFD serves a gfx1100, as the sim path's default GPU is.
    let Some(code) = rig_testkit::kernels::compile(
        "empty",
        "__kernel void empty(void) {}\n",
        Backend::Sim.processor(),
    ) else {
        return;
    };
    for on_kfd in [false, true] {
        figures(on_kfd, &code);
    }
}
