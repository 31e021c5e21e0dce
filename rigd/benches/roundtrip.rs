//! rigd over its socket: alloc+free round trips (p50/p99), and rigd's CPU with 64 idle
//! connected clients. Starts the real rigd binary on a temporary socket.
//!
//! Run: `cargo bench -p rigd --bench roundtrip`. With `RIGD_BENCH_SOCKET` set, it measures
//! the rigd already serving that socket instead of starting one (for profiling it).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rig_proto::Connection;
use rig_proto::messages::{MemoryKind, Request, Response};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command's closing parenthesis; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The machine's floor: a 16-byte ping-pong over a unix socketpair between two threads.
fn floor() {
    use std::io::{Read, Write};
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        while b.read_exact(&mut buf).is_ok() {
            if b.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let mut buf = [0u8; 16];
    let mut v: Vec<Duration> = (0..20000)
        .map(|_| {
            let t = Instant::now();
            a.write_all(&buf).unwrap();
            a.read_exact(&mut buf).unwrap();
            t.elapsed()
        })
        .collect();
    drop(a);
    let _ = echo.join();
    v.sort();
    println!(
        "floor, unix socketpair ping-pong between two threads: p50 {:.1} us  p99 {:.1} us",
        percentile(&v, 0.50).as_secs_f64() * 1e6,
        percentile(&v, 0.99).as_secs_f64() * 1e6
    );
}

fn main() {
    floor();
    if let Some(socket) = std::env::var_os("RIGD_BENCH_SOCKET") {
        requests(std::path::Path::new(&socket));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rigd.sock");
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(
        &cfg,
        "[access]\nany = true\n[daemon]\nlog = \"warn\"\n[[sim]]\nprocessor = \"gfx1100\"\n",
    )
    .unwrap();
    let mut rigd = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .expect("start rigd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "rigd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    requests(&socket);
    idle_cpu(&socket, rigd.id());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rigd.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = rigd.wait();
}

/// Round trips of single requests and of alloc+free.
fn requests(socket: &std::path::Path) {
    let mut c = Connection::connect(socket, "bench").unwrap();
    let (r, _fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
    let Response::DeviceOpened(o) = r else {
        panic!("{r:?}")
    };
    let device = o.device;
    // The floor: a request that touches no GPU (two socket hops and the lock).
    let mut ping: Vec<Duration> = (0..20000)
        .map(|_| {
            let t = Instant::now();
            let (r, _) = c.call(&Request::DeviceStatus { device }, &[]).unwrap();
            assert!(matches!(r, Response::Status(_)));
            t.elapsed()
        })
        .collect();
    ping.sort();
    println!(
        "one request with no GPU work (device-status) over the socket: p50 {:.1} us  p99 {:.1} us",
        percentile(&ping, 0.50).as_secs_f64() * 1e6,
        percentile(&ping, 0.99).as_secs_f64() * 1e6
    );
    let mut round = |kind| {
        let t = Instant::now();
        let (r, _) = c
            .call(
                &Request::Alloc {
                    device,
                    memory: kind,
                    bytes: 4096,
                },
                &[],
            )
            .unwrap();
        let Response::Allocated { region, .. } = r else {
            panic!("{r:?}")
        };
        let (r, _) = c.call(&Request::Free { device, region }, &[]).unwrap();
        assert_eq!(r, Response::Done);
        t.elapsed()
    };
    for (kind, name) in [
        (MemoryKind::Device, "device"),
        (MemoryKind::Pinned, "pinned"),
    ] {
        for _ in 0..2000 {
            round(kind);
        }
        let mut v: Vec<Duration> = (0..20000).map(|_| round(kind)).collect();
        v.sort();
        println!(
            "alloc+free of 4 KiB {name} memory over the socket: p50 {:.1} us  p99 {:.1} us  ({} round trips of two requests)",
            percentile(&v, 0.50).as_secs_f64() * 1e6,
            percentile(&v, 0.99).as_secs_f64() * 1e6,
            v.len()
        );
    }
    // As rig-client frees: the alloc is a round trip, the free is posted (one send; its
    // answer is read before the next call), since nothing waits on a free.
    let mut posted = |kind| {
        let t = Instant::now();
        let (r, _) = c
            .call(
                &Request::Alloc {
                    device,
                    memory: kind,
                    bytes: 4096,
                },
                &[],
            )
            .unwrap();
        let Response::Allocated { region, .. } = r else {
            panic!("{r:?}")
        };
        c.post(&Request::Free { device, region }).unwrap();
        t.elapsed()
    };
    for (kind, name) in [
        (MemoryKind::Device, "device"),
        (MemoryKind::Pinned, "pinned"),
    ] {
        for _ in 0..2000 {
            posted(kind);
        }
        let mut v: Vec<Duration> = (0..20000).map(|_| posted(kind)).collect();
        v.sort();
        println!(
            "alloc+free of 4 KiB {name} memory, free posted (as rig-client frees): p50 {:.1} us  p99 {:.1} us",
            percentile(&v, 0.50).as_secs_f64() * 1e6,
            percentile(&v, 0.99).as_secs_f64() * 1e6,
        );
    }
    assert!(
        c.take_posted_errors().is_empty(),
        "rigd refused a posted free"
    );
}

/// rigd's CPU while 64 clients, each with a device open, sit idle.
fn idle_cpu(socket: &std::path::Path, pid: u32) {
    let mut idle = Vec::new();
    for i in 0..64 {
        let mut c = Connection::connect(socket, &format!("idle{i}")).unwrap();
        let (r, fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
        assert!(matches!(r, Response::DeviceOpened(_)), "{r:?}");
        idle.push((c, fds));
    }
    std::thread::sleep(Duration::from_millis(500));
    let hz = 100.0; // USER_HZ on Linux
    let secs = 5.0;
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let used = cpu_ticks(pid) - before;
    println!(
        "rigd CPU with 64 idle connected clients (each with an open device) over {secs} s: {used} ticks = {:.2}% of one core",
        used as f64 / hz / secs * 100.0
    );
    drop(idle);
}
