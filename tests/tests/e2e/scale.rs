//! rig at scale, reduced for CI: 32 client processes each open both of 2 simulated GPUs and
//! submit fills, copies and launches of `add`, every value reached and every result checked
//! against a host oracle; and 64 idle devices cost rigd no CPU: every thread of it sleeps.
//! The full form (256 processes x 8 GPUs, 1 M values) is the `scale` bench.

use std::time::Duration;

use rig_tests::scale::{self, Daemon, Idle, Plan};

/// libtest's arguments that run only the `test` hook.
fn hook(test: &'static str) -> [&'static str; 5] {
    [
        "--exact",
        test,
        "--include-ignored",
        "--test-threads=1",
        "--nocapture",
    ]
}

/// The hook of [`Daemon::start`], not a test.
#[test]
#[ignore = "rigd's daemon, run by Daemon::start in a child process"]
fn serve_scale_rigd() {
    if let Some(code) = scale::serve_main() {
        std::process::exit(code);
    }
}

/// The hook of [`scale::spawn_worker`], not a test.
#[test]
#[ignore = "a client process, run by scale::spawn_worker"]
fn scale_worker() {
    if let Some(code) = scale::worker_main() {
        std::process::exit(code);
    }
}

#[test]
fn thirty_two_processes_on_two_gpus_check_every_value() {
    let plan = Plan {
        clients: 32,
        gpus: 2,
        steps: 48,
        control_every: 8,
    };
    let d = Daemon::start(&hook(rig_testkit::test_name!(serve_scale_rigd)), plan);
    let r = scale::run(
        &hook(rig_testkit::test_name!(scale_worker)),
        d.socket(),
        plan,
        |m| eprintln!("scale: {m}"),
        || 0,
    )
    .unwrap();
    assert_eq!(r.submissions, plan.submissions());
    assert_eq!(r.checked, plan.submissions());
    assert!(!r.alloc_ns.is_empty() && !r.list_ns.is_empty());
    eprintln!(
        "{} values from {} processes on {} GPUs in {:?}; alloc p50 {:.0} us p99 {:.0} us, list-gpus p50 {:.0} us p99 {:.0} us",
        r.submissions,
        plan.clients,
        plan.gpus,
        r.elapsed,
        scale::quantile_us(&r.alloc_ns, 0.5),
        scale::quantile_us(&r.alloc_ns, 0.99),
        scale::quantile_us(&r.list_ns, 0.5),
        scale::quantile_us(&r.list_ns, 0.99),
    );
}

/// 64 idle devices (8 processes x 8 GPUs): once rigd's watch has backed off, no thread of
/// rigd wakes more than twice in 2 s (the watch's longest idle tick is 1.6 s; a queue's
/// doorbell backstop is 10 s), and all together they run under 20 ms. rigd's metrics
/// sampler, which looked at every device 100 times a second, and a watch ticking every
/// 200 ms each fail it.
#[test]
fn idle_devices_leave_every_rigd_thread_asleep() {
    let plan = Plan {
        clients: 8,
        gpus: 8,
        steps: 0,
        control_every: 1,
    };
    let d = Daemon::start(&hook(rig_testkit::test_name!(serve_scale_rigd)), plan);
    let idle = Idle::start(
        &hook(rig_testkit::test_name!(scale_worker)),
        d.socket(),
        plan,
    )
    .unwrap();
    // The watch's idle tick doubles from 200 ms to 1.6 s: 1.4 s after the last work.
    std::thread::sleep(Duration::from_secs(3));
    let moved = scale::thread_deltas(d.pid(), Duration::from_secs(2));
    assert!(moved.len() > 128, "rigd's threads: {moved:?}");
    let woke: Vec<_> = moved.iter().filter(|t| t.runs > 2).collect();
    assert!(
        woke.is_empty(),
        "threads of rigd woke with every device idle: {woke:?}"
    );
    let ran: u64 = moved.iter().map(|t| t.run_ns).sum();
    assert!(
        ran < 20_000_000,
        "rigd's threads ran {ran} ns in 2 s with every device idle"
    );
    idle.finish().unwrap();
}
