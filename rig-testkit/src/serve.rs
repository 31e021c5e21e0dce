//! The re-exec entry points: a test program run again as its own rigd, or as the emulated
//! KFD that rigd serves through its kfd path.
//!
//! [`crate::Daemon`] runs the test program again with libtest's arguments naming only the
//! [`HOOK`] test (`--exact serve_rigd --include-ignored`), which
//! [`serve_hook!`](crate::serve_hook) defines at the program's root, and with [`SOCKET_ENV`]
//! (rigd) or [`KFD_SERVE_ENV`] (the emulated KFD) set; the hook then serves ([`main`])
//! instead of testing, until SIGTERM or the exit of the program that started it. A program
//! without libtest (a bench) calls [`main`] first thing instead.

use std::path::{Path, PathBuf};

/// The name of the test that serves in the child ([`serve_hook!`](crate::serve_hook)).
pub const HOOK: &str = "serve_rigd";
/// In rigd's child: the socket to serve on.
pub const SOCKET_ENV: &str = "RIG_TESTKIT_SERVE";
/// In rigd's child: the processor of its simulated GPUs (and the emulated KFD's).
pub const PROCESSOR_ENV: &str = "RIG_TESTKIT_PROCESSOR";
/// How long work may run on the simulated GPU, in ms (rigd's `hang_ms`), if set.
pub const HANG_MS_ENV: &str = "RIG_TESTKIT_HANG_MS";
/// How many GPUs alike to serve (1 to 8), if set.
pub const GPUS_ENV: &str = "RIG_TESTKIT_GPUS";
/// rigd's `connections.idle_ms`, if set.
pub const IDLE_MS_ENV: &str = "RIG_TESTKIT_IDLE_MS";
/// In rigd's child: the directory of the emulated KFD to serve through the kfd path (its
/// socket [`KFD_SOCKET`] and topology tree [`KFD_TOPOLOGY`]), in place of simulated GPUs.
pub const KFD_ENV: &str = "RIG_TESTKIT_KFD";
/// In rigd's child: the worker program it runs KFD clients in (`[kfd] worker`).
pub const WORKER_ENV: &str = "RIG_TESTKIT_WORKER";
/// Set only in the child that plays the emulated KFD: the directory to serve it in; the
/// child writes [`KFD_READY`] there once it serves.
pub const KFD_SERVE_ENV: &str = "RIG_TESTKIT_SERVE_KFD";
/// How the GPUs' clocks run, if set: the body of a `[sim.clock]` table (rigd's
/// `SimClockConfig`), for the simulated GPUs and the emulated KFD's alike.
pub const CLOCK_ENV: &str = "RIG_TESTKIT_CLOCK";
/// The emulated KFD's socket, in its directory.
pub const KFD_SOCKET: &str = "kfd.sock";
/// The emulated KFD's sysfs topology tree, in its directory.
pub const KFD_TOPOLOGY: &str = "topology";
/// The file the emulated KFD's child writes once it serves.
pub const KFD_READY: &str = "ready";
/// How long the served rigd's idle blocking-pool threads live (10 s in rigd's own runtime):
/// short, so whatever outlives the thread that made it (a KFD worker's parent-death signal)
/// is seen in seconds-long tests too.
pub const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_millis(50);

/// The hook test of [`crate::Daemon`]'s children, at the root of a test program: run with
/// libtest's arguments naming it, in a child a [`crate::Daemon`] started, it serves and
/// exits; run any other way it is an ignored test that returns at once.
#[macro_export]
macro_rules! serve_hook {
    () => {
        /// The hook of `rig_testkit::Daemon`, not a test: in the child it starts, this serves
        /// rigd (or the emulated KFD) until SIGTERM and exits.
        #[test]
        #[ignore = "rigd's daemon, run by rig_testkit::Daemon in a child process"]
        fn serve_rigd() {
            if let Some(code) = $crate::serve::main() {
                ::std::process::exit(code);
            }
        }
    };
}

/// The worker program the kfd backend's rigd runs KFD clients in: rig-tests' `rig-tests-worker`
/// (rigd's worker under that crate's name), which Cargo builds beside the test programs of
/// rig-tests, in `target/<profile>/`.
pub fn worker() -> PathBuf {
    let exe = std::env::current_exe().expect("the test program's path");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/rig-tests-worker
    let w = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("rig-tests-worker"))
        .unwrap_or_default();
    assert!(
        w.is_file(),
        "the kfd backend runs KFD clients in rig-tests-worker, which Cargo builds with \
         rig-tests' tests (cargo test -p rig-tests); it is not at {}",
        w.display()
    );
    w
}

fn number(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok())
}

/// Serves what this process was started as (rigd, or the emulated KFD), and returns its exit
/// code; `None` in a process started as neither.
pub fn main() -> Option<i32> {
    if let Some(dir) = std::env::var_os(KFD_SERVE_ENV) {
        // The emulated kernel stops when the program that started it exits.
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
        return Some(serve_kfd(Path::new(&dir), number(GPUS_ENV).unwrap_or(1)));
    }
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV)?);
    // The daemon stops when the program that started it exits.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    Some(serve_rigd(&socket))
}

/// The clock [`CLOCK_ENV`] sets, if it does (a test's own text: one it cannot parse fails
/// the test's rigd loudly).
pub fn clock() -> Option<rigd::config::SimClockConfig> {
    let body = std::env::var(CLOCK_ENV).ok()?;
    let text = format!("[[sim]]\nprocessor = \"gfx1100\"\n[sim.clock]\n{body}\n");
    match rigd::config::Config::parse(&text, Path::new(CLOCK_ENV)) {
        Ok(c) => c.sim.into_iter().next().map(|s| s.clock),
        Err(e) => panic!("{CLOCK_ENV}: {e}"),
    }
}

fn processor() -> String {
    std::env::var(PROCESSOR_ENV).unwrap_or_else(|_| "gfx1100".into())
}

fn serve_rigd(socket: &Path) -> i32 {
    let mut config = rigd::config::Config::embedded();
    config.daemon.socket = socket.to_owned();
    config.daemon.mode = 0o600;
    let processor = processor();
    let mut sim = rigd::config::SimGpuConfig {
        processor: processor.clone(),
        ..rigd::config::SimGpuConfig::embedded_default()
    };
    if let Some(hang_ms) = number(HANG_MS_ENV) {
        sim.memory_bytes = 2 << 30;
        sim.hang_ms = hang_ms;
    }
    if let Some(clock) = clock() {
        sim.clock = clock;
    }
    let gpus = number(GPUS_ENV).unwrap_or(1).clamp(1, 8);
    config.sim = vec![sim; gpus as usize];
    if let Some(ms) = number(IDLE_MS_ENV) {
        config.connections.idle_ms = u64::from(ms);
    }
    if let Some(dir) = std::env::var_os(KFD_ENV) {
        // The emulated KFD's GPUs alone, through the kfd path (whose hang bound is the
        // path's own).
        let dir = PathBuf::from(dir);
        config.kfd.emulated = Some(dir.join(KFD_SOCKET));
        config.kfd.topology = Some(dir.join(KFD_TOPOLOGY));
        config.kfd.serve = true;
        config.kfd.worker = std::env::var_os(WORKER_ENV).map(PathBuf::from);
        config.sim.clear();
    }
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(rigd::serve_until_sigterm(socket, &config))
                .map_err(|e| e.to_string())
        });
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the test's rigd on {}: {e}", socket.display());
            1
        }
    }
}

/// Plays the emulated KFD in `dir` until killed: `gpus` GPUs of the processor asked.
fn serve_kfd(dir: &Path, gpus: u32) -> i32 {
    let clock = clock().unwrap_or_default();
    let config = rig_kfd_emu::kernel::Config {
        models: vec![processor(); gpus.clamp(1, 8) as usize],
        // The emulation's stall is its own: a preemption of GET_CLOCK_COUNTERS.
        clock: rig_kfd_emu::ClockModel {
            stall: None,
            ..clock.model()
        },
        clock_stall: clock.model().stall,
        ..Default::default()
    };
    let started = rig_kfd_emu::start(config, &dir.join(KFD_SOCKET), &dir.join(KFD_TOPOLOGY))
        .map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg += &format!(": {s}");
                src = s.source();
            }
            msg
        })
        .and_then(|server| {
            std::fs::write(dir.join(KFD_READY), b"")
                .map(|()| server)
                .map_err(|e| format!("writing {}: {e}", dir.join(KFD_READY).display()))
        });
    match started {
        // The server's threads serve; this one waits for the SIGTERM that ends the process.
        Ok(_server) => loop {
            std::thread::park();
        },
        Err(e) => {
            eprintln!("the test's emulated KFD in {}: {e}", dir.display());
            1
        }
    }
}
