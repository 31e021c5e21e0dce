//! The daemon side of a test's own rigd: rigd's library serving simulated GPUs on a given
//! socket until SIGTERM (or the exit of the program that started it), or the GPUs of an
//! emulated KFD through rigd's kfd path, and that emulated KFD itself.
//!
//! The test program is that daemon too: the tests' `common::Daemon` (and rig-client's
//! `figures` bench) run the program again with [`SOCKET_ENV`] set, and the program then
//! serves instead of testing ([`main`]). In a test program whose file is named `*_kfd.rs`
//! ([`crate::kfd::on_kfd`]) the program is run once more first, to play the kernel
//! (`rig-kfd-emu`, [`crate::kfd::main`]) in a process of its own; rigd then serves
//! that emulated KFD's gfx1100 GPUs through the kfd path, and no simulated GPU. This file
//! names no crate but rigd, tokio and nix: rig-client's bench includes it.

use std::path::PathBuf;

/// The socket to serve on; set only in the child that serves.
pub const SOCKET_ENV: &str = "RIG_CLIENT_TEST_SERVE";
/// How long work may run on the simulated GPU, in ms (rigd's `hang_ms`), if set.
pub const HANG_MS_ENV: &str = "RIG_CLIENT_TEST_HANG_MS";
/// How many simulated GPUs alike to serve (1 to 8), if set.
pub const GPUS_ENV: &str = "RIG_CLIENT_TEST_GPUS";
/// rigd's `connections.idle_ms`, if set.
pub const IDLE_MS_ENV: &str = "RIG_CLIENT_TEST_IDLE_MS";
/// How the GPUs' clocks run, if set: the body of a `[sim.clock]` table (rigd's
/// `SimClockConfig`), for the simulated GPUs and the emulated KFD's alike.
pub const CLOCK_ENV: &str = "RIG_CLIENT_TEST_CLOCK";
/// In rigd's child: the directory of the emulated KFD to serve (its socket [`KFD_SOCKET`]
/// and topology tree [`KFD_TOPOLOGY`]).
pub const KFD_ENV: &str = "RIG_CLIENT_TEST_KFD";
/// The worker program the tests' rigd runs KFD clients in (`[kfd] worker`), if set: the
/// tests crate's `rig-tests-worker`, which only a test or bench program can name.
pub const WORKER_ENV: &str = "RIG_CLIENT_TEST_WORKER";
/// The emulated KFD's socket, in its directory.
pub const KFD_SOCKET: &str = "kfd.sock";
/// The emulated KFD's sysfs topology tree, in its directory.
pub const KFD_TOPOLOGY: &str = "topology";

/// Whether this test program's file name ends in `_<suffix>` (`launches_kfd` in `_kfd`):
/// cargo names a test program `<file>-<hash>`.
pub fn suffix_is(suffix: &str) -> bool {
    let exe = std::env::current_exe().unwrap_or_default();
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name.rsplit_once('-').map_or(name, |(s, _)| s);
    stem.strip_suffix(suffix)
        .is_some_and(|rest| rest.ends_with('_'))
}

/// The processor this test binary's rigd simulates and whose kernels its tests load: gfx1201
/// or gfx942 in a test binary whose file is named `*_gfx1201.rs` or `*_gfx942.rs` (such a
/// file runs another file's tests, as launches_gfx1201.rs runs launches.rs's), gfx1100 otherwise (the emulated KFD's GPUs
/// of a `*_kfd.rs` program too). The rigd child is the same program, so it sees the same.
pub fn processor() -> &'static str {
    static P: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        if suffix_is("gfx1201") {
            "gfx1201"
        } else if suffix_is("gfx942") {
            "gfx942"
        } else {
            "gfx1100"
        }
    })
}

/// The clock [`CLOCK_ENV`] sets, if it does (a test's own text: one it cannot parse fails
/// the test's rigd loudly).
pub fn clock() -> Option<rigd::config::SimClockConfig> {
    let body = std::env::var(CLOCK_ENV).ok()?;
    let text = format!("[[sim]]\nprocessor = \"gfx1100\"\n[sim.clock]\n{body}\n");
    match rigd::config::Config::parse(&text, std::path::Path::new(CLOCK_ENV)) {
        Ok(c) => c.sim.into_iter().next().map(|s| s.clock),
        Err(e) => panic!("{CLOCK_ENV}: {e}"),
    }
}

/// Serves a rigd if this process was started as one, and returns its exit code; `None`
/// in a process that was not.
pub fn main() -> Option<i32> {
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV)?);
    // The daemon stops when the program that started it exits.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    let mut config = rigd::config::Config::embedded();
    config.daemon.socket = socket.clone();
    config.daemon.mode = 0o600;
    if let Some(hang_ms) = number(HANG_MS_ENV) {
        config.sim = vec![rigd::config::SimGpuConfig {
            processor: processor().into(),
            memory_bytes: 2 << 30,
            hang_ms,
            ..rigd::config::SimGpuConfig::embedded_default()
        }];
    } else if processor() != "gfx1100" {
        config.sim = vec![rigd::config::SimGpuConfig {
            processor: processor().into(),
            ..rigd::config::SimGpuConfig::embedded_default()
        }];
    }
    if let Some(clock) = clock() {
        if config.sim.is_empty() {
            config.sim = vec![rigd::config::SimGpuConfig {
                processor: processor().into(),
                ..rigd::config::SimGpuConfig::embedded_default()
            }];
        }
        for s in &mut config.sim {
            s.clock = clock.clone();
        }
    }
    if let Some(ms) = number(IDLE_MS_ENV) {
        config.connections.idle_ms = u64::from(ms);
    }
    if let Some(n) = number(GPUS_ENV) {
        let first = config
            .sim
            .first()
            .cloned()
            .unwrap_or_else(rigd::config::SimGpuConfig::embedded_default);
        config.sim = vec![first; n.clamp(1, 8) as usize];
    }
    if let Some(dir) = std::env::var_os(KFD_ENV) {
        // The emulated KFD's GPUs alone, through the kfd path (whose hang bound is the
        // path's own, HANG_MS).
        let dir = PathBuf::from(dir);
        config.kfd.emulated = Some(dir.join(KFD_SOCKET));
        config.kfd.topology = Some(dir.join(KFD_TOPOLOGY));
        config.kfd.serve = true;
        config.kfd.worker = std::env::var_os(WORKER_ENV).map(PathBuf::from);
        config.sim.clear();
    }
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Blocking-pool threads end soon after their work, as rigd's do when idle for long:
        // whatever outlives the thread that made it (a KFD worker's parent-death signal)
        // is seen in seconds-long tests too.
        .thread_keep_alive(std::time::Duration::from_millis(50))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(rigd::serve_until_sigterm(&socket, &config))
                .map_err(|e| e.to_string())
        });
    Some(match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the test's rigd on {}: {e}", socket.display());
            1
        }
    })
}
