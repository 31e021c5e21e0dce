//! The daemon side of a test's own rigd: rigd's library serving simulated GPUs on a given
//! socket until SIGTERM (or the exit of the program that started it).
//!
//! The test program is that daemon too: the tests' `common::Daemon` (and rig-client's
//! `figures` bench) run the program again with [`SOCKET_ENV`] set, and the program then
//! serves instead of testing ([`main`]).

use std::path::PathBuf;

/// The socket to serve on; set only in the child that serves.
pub const SOCKET_ENV: &str = "RIG_CLIENT_TEST_SERVE";
/// How long work may run on the simulated GPU, in ms (rigd's `hang_ms`), if set.
pub const HANG_MS_ENV: &str = "RIG_CLIENT_TEST_HANG_MS";
/// How many simulated GPUs alike to serve (1 to 8), if set.
pub const GPUS_ENV: &str = "RIG_CLIENT_TEST_GPUS";
/// rigd's `connections.idle_ms`, if set.
pub const IDLE_MS_ENV: &str = "RIG_CLIENT_TEST_IDLE_MS";

/// The processor this test binary's rigd simulates and whose kernels its tests load: gfx1201
/// in a test binary whose file is named `*_gfx1201.rs` (such a file runs another file's tests,
/// as launches_gfx1201.rs runs launches.rs's), gfx1100 otherwise. The rigd child is the same
/// program, so it sees the same.
pub fn processor() -> &'static str {
    static P: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // cargo names a test program `<file>-<hash>`.
        let stem = name.rsplit_once('-').map_or(name, |(s, _)| s);
        if stem.ends_with("_gfx1201") {
            "gfx1201"
        } else {
            "gfx1100"
        }
    })
}

/// Serves a rigd if this process was started as one, and returns its exit code; `None`
/// in a process that was not.
pub fn main() -> Option<i32> {
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV)?);
    let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
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
        }];
    } else if processor() != "gfx1100" {
        config.sim = vec![rigd::config::SimGpuConfig {
            processor: processor().into(),
            ..rigd::config::SimGpuConfig::embedded_default()
        }];
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
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
