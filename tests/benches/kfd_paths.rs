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
//! `cargo bench -p rig-tests --bench kfd_paths`. Needs LLVM 19 (clang-19, ld.lld-19) for the
//! empty kernel. The program is its own rigd and emulated KFD, run again as each
//! (`rig_tests::serve`, `rig_tests::kfd`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rig_client::{Device, Launch, Rig, Submission};
use rig_tests::{kfd, serve};

/// A rigd (and, on the kfd path, its emulated KFD) in child processes, until dropped.
struct Served {
    rigd: Child,
    emu: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
}

fn me() -> Command {
    let mut c = Command::new(std::env::current_exe().expect("this program's path"));
    c.env_remove(serve::SOCKET_ENV)
        .env_remove(serve::KFD_ENV)
        .env_remove(kfd::KFD_SERVE_ENV)
        .env_remove(serve::HANG_MS_ENV)
        .env_remove(serve::GPUS_ENV)
        .env_remove(serve::IDLE_MS_ENV)
        .stdout(Stdio::null());
    c
}

fn poll(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Served {
    fn start(on_kfd: bool) -> Served {
        let name = if on_kfd { "kfd" } else { "sim" };
        let dir = std::env::temp_dir().join(format!("rig-bench-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let socket = dir.join("rigd.sock");
        let emu = on_kfd.then(|| {
            let c = me()
                .env(kfd::KFD_SERVE_ENV, &dir)
                .spawn()
                .expect("start the emulated KFD");
            poll("the emulated KFD did not come up", || {
                dir.join(kfd::KFD_READY).exists()
            });
            c
        });
        let mut cmd = me();
        cmd.env(serve::SOCKET_ENV, &socket);
        if on_kfd {
            cmd.env(serve::KFD_ENV, &dir)
                .env(serve::WORKER_ENV, env!("CARGO_BIN_EXE_rig-tests-worker"));
        }
        let rigd = cmd.spawn().expect("start rigd");
        poll("rigd did not come up", || Rig::connect_to(&socket).is_ok());
        Served {
            rigd,
            emu,
            dir,
            socket,
        }
    }

    /// A device of the first GPU, on a connection of its own (once rigd has seen closed
    /// connections go and given back their devices' charges, when this user holds as many
    /// connections, or as much of the GPU, as rigd allows).
    fn device(&self) -> Device {
        let start = Instant::now();
        loop {
            let opened = Rig::connect_to(&self.socket).and_then(|rig| {
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
}

impl Drop for Served {
    fn drop(&mut self) {
        for c in std::iter::once(&mut self.rigd).chain(self.emu.as_mut()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The empty kernel's code object, built with LLVM 19; `None` without it.
fn empty_code() -> Option<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("rig-bench-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("empty.cl");
    std::fs::write(&src, "__kernel void empty(void) {}\n").ok()?;
    let (obj, co) = (dir.join("empty.o"), dir.join("empty.co"));
    let ok = Command::new("clang-19")
        .args(["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa"])
        .arg(format!("-mcpu={}", serve::processor()))
        .args(["-nogpulib", "-O2", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("ld.lld-19")
            .args(["-shared", "--build-id=none"])
            .arg(&obj)
            .arg("-o")
            .arg(&co)
            .status()
            .is_ok_and(|s| s.success());
    let bytes = if ok { std::fs::read(&co).ok() } else { None };
    let _ = std::fs::remove_dir_all(&dir);
    bytes
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
    let served = Served::start(on_kfd);
    println!(
        "{}, {}:",
        if on_kfd {
            "kfd path (emulated KFD)"
        } else {
            "sim path"
        },
        serve::processor()
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
    let pids: Vec<(&str, u32)> = std::iter::once(("rigd", served.rigd.id()))
        .chain(served.emu.as_ref().map(|e| ("the emulated kernel", e.id())))
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
    let dev = served.device();
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
    if let Some(code) = kfd::main().or_else(serve::main) {
        std::process::exit(code);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let Some(code) = empty_code() else {
        println!("skipped: clang-19 and ld.lld-19 (LLVM 19) are needed to build the empty kernel");
        return;
    };
    for on_kfd in [false, true] {
        figures(on_kfd, &code);
    }
}
