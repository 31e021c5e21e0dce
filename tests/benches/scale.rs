//! rig at scale, in full: 256 client processes each open all of 8 simulated GPUs (2048
//! devices), sit idle while rigd's CPU is measured over 10 s, then submit 1 M values in all
//! (fills, copies and launches of `add`), every value reached and every result checked
//! against a host oracle, timing control requests while they work.
//!
//! `cargo bench -p rig-tests --bench scale`; `RIG_SCALE_CLIENTS`, `RIG_SCALE_GPUS`,
//! `RIG_SCALE_SUBMISSIONS` and `RIG_SCALE_IDLE_S` change the scale (defaults 256, 8,
//! 1000000, 10). It prints progress, then:
//! - rigd's CPU with every client idle (`/proc/PID/stat` utime + stime over the window, and
//!   the run time and wake-ups of its threads from `schedstat`);
//! - submissions per second, and rigd's CPU while they ran;
//! - control requests' latency under that load, p50, p99 and max, measured at the clients
//!   (an allocation of 64 KiB of Device memory; the GPU list), and rigd's own
//!   `request_duration_seconds` histogram scraped from its metrics endpoint.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rig_tests::scale::{self, Daemon, Plan};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// rigd's metrics exposition, over its unix endpoint.
fn scrape(sock: &std::path::Path) -> Option<String> {
    let mut s = std::os::unix::net::UnixStream::connect(sock).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: rigd\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body.split_once("\r\n\r\n")?.1.to_owned())
}

/// From a `request_duration_seconds` histogram: per kind, the count and the smallest
/// bucket bound holding 50 % and 99 % of the requests.
fn histogram(body: &str) -> Vec<(String, u64, f64, f64)> {
    let mut kinds: std::collections::BTreeMap<String, Vec<(f64, u64)>> = Default::default();
    for l in body.lines() {
        let Some(rest) = l.strip_prefix("rig_request_duration_seconds_bucket{") else {
            continue;
        };
        let Some((labels, count)) = rest.split_once("} ") else {
            continue;
        };
        let field = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name))
                .map(|v| v.trim_matches('"').to_owned())
        };
        let (Some(kind), Some(le)) = (field("kind="), field("le=")) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::NAN)
        };
        kinds
            .entry(kind)
            .or_default()
            .push((le, count.trim().parse().unwrap_or(0)));
    }
    kinds
        .into_iter()
        .map(|(kind, mut b)| {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
            let total = b.last().map_or(0, |x| x.1);
            let at = |p: f64| {
                b.iter()
                    .find(|x| x.1 as f64 >= p * total as f64)
                    .map_or(f64::NAN, |x| x.0)
            };
            (kind, total, at(0.5), at(0.99))
        })
        .collect()
}

fn main() {
    if let Some(code) = scale::serve_main() {
        std::process::exit(code);
    }
    if let Some(code) = scale::worker_main() {
        std::process::exit(code);
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let clients = env("RIG_SCALE_CLIENTS", 256) as u32;
    let gpus = env("RIG_SCALE_GPUS", 8) as u32;
    let total = env("RIG_SCALE_SUBMISSIONS", 1_000_000);
    let idle_s = env("RIG_SCALE_IDLE_S", 10);
    let devices = u64::from(clients * gpus);
    let plan = Plan {
        clients,
        gpus,
        steps: total.div_ceil(devices.max(1)) as u32,
        control_every: 16,
    };
    println!(
        "scale: {clients} processes x {gpus} simulated GPUs, {} values ({} per device), on {} CPUs, load {}",
        plan.submissions(),
        plan.steps,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let d = Daemon::start(&[], plan);
    let rigd = d.pid();
    let metrics = d.metrics_socket();
    let began = Instant::now();
    let report = scale::run(
        &[],
        d.socket(),
        plan,
        |m| println!("scale: {m} ({:.1} s)", began.elapsed().as_secs_f64()),
        || {
            // Every client holds its devices and does nothing. The window begins once the
            // blocking pool's threads that opened the devices have ended (tokio keeps an
            // idle one 10 s): their CPU joins the process's figure when they exit.
            std::thread::sleep(Duration::from_secs(11));
            let window = Duration::from_secs(idle_s);
            let t0 = scale::process_ticks(rigd).unwrap_or(0);
            let moved = scale::thread_deltas(rigd, window);
            let t1 = scale::process_ticks(rigd).unwrap_or(0);
            let run_ns: u64 = moved.iter().map(|t| t.run_ns).sum();
            let woke: Vec<_> = moved.iter().filter(|t| t.runs > 0).collect();
            println!(
                "idle: rigd with {} idle devices used {} ticks ({} ms) of CPU in {} s (utime + stime); its {} threads ran {:.3} ms in all, {} of them woke ({} wake-ups)",
                devices,
                t1 - t0,
                (t1 - t0) * 1000 / scale::CLOCK_TICKS,
                idle_s,
                moved.len(),
                run_ns as f64 / 1e6,
                woke.len(),
                woke.iter().map(|t| t.runs).sum::<u64>()
            );
            for t in woke.iter().take(8) {
                println!(
                    "idle:   thread {} ({}) woke {} times, ran {:.3} ms",
                    t.tid,
                    t.name,
                    t.runs,
                    t.run_ns as f64 / 1e6
                );
            }
            scale::process_ticks(rigd).unwrap_or(0)
        },
    );
    let r = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::exit(1);
        }
    };
    let busy_ticks = scale::process_ticks(rigd).unwrap_or(0) - r.ticks_at_go;
    println!(
        "work: {} values reached and {} results checked in {:.1} s: {:.0} values/s; rigd used {:.1} s of CPU",
        r.submissions,
        r.checked,
        r.elapsed.as_secs_f64(),
        r.submissions as f64 / r.elapsed.as_secs_f64(),
        busy_ticks as f64 / scale::CLOCK_TICKS as f64
    );
    for (what, v) in [
        ("alloc 64 KiB Device", &r.alloc_ns),
        ("list-gpus", &r.list_ns),
    ] {
        println!(
            "control at the clients, {what}: {} requests, p50 {:.0} us, p99 {:.0} us, max {:.0} us",
            v.len(),
            scale::quantile_us(v, 0.5),
            scale::quantile_us(v, 0.99),
            scale::quantile_us(v, 1.0)
        );
    }
    match scrape(&metrics) {
        Some(body) => {
            for (kind, n, p50, p99) in histogram(&body) {
                println!(
                    "control in rigd, {kind}: {n} requests, p50 <= {:.0} us, p99 <= {:.0} us (histogram bounds)",
                    p50 * 1e6,
                    p99 * 1e6
                );
            }
        }
        None => println!("control in rigd: its metrics endpoint did not answer"),
    }
}
