//! The emulated KFD of a `*_kfd.rs` test program ([`on_kfd`]): the program
//! run again with [`KFD_SERVE_ENV`] set plays the kernel (rig-kfd-emu) in a process
//! of its own, which the program's rigd reaches through the kfd path.

use crate::serve;

/// Set only in the child that plays the emulated KFD: the directory to serve it in; the
/// child writes [`KFD_READY`] there once it serves.
pub const KFD_SERVE_ENV: &str = "RIG_CLIENT_TEST_SERVE_KFD";
/// The file the emulated KFD's child writes once it serves.
pub const KFD_READY: &str = "ready";

/// Whether this test program's rigd serves an emulated KFD's GPUs through the kfd path: a
/// test binary whose file is named `*_kfd.rs` (such a file runs another file's tests there,
/// as launches_kfd.rs runs launches.rs's). The rigd child is the same program, so it sees
/// the same.
pub fn on_kfd() -> bool {
    static K: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *K.get_or_init(|| serve::suffix_is("kfd"))
}

/// Plays the emulated KFD in `dir` until killed: `gpus` GPUs of [`serve::processor`].
fn serve_kfd(dir: &std::path::Path, gpus: u32) -> i32 {
    let clock = serve::clock().unwrap_or_default();
    let config = rig_kfd_emu::kernel::Config {
        models: vec![serve::processor().to_owned(); gpus.clamp(1, 8) as usize],
        clock: rig_sim_clock(&clock),
        clock_stall: clock.model().stall,
        ..Default::default()
    };
    let started = rig_kfd_emu::start(
        config,
        &dir.join(serve::KFD_SOCKET),
        &dir.join(serve::KFD_TOPOLOGY),
    )
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

/// The emulated GPUs' clock of a `[sim.clock]` table: its stall is the emulation's own,
/// a preemption of GET_CLOCK_COUNTERS (`clock_stall`).
fn rig_sim_clock(c: &rigd::config::SimClockConfig) -> rig_kfd_emu::ClockModel {
    rig_kfd_emu::ClockModel {
        stall: None,
        ..c.model()
    }
}

/// Plays the emulated KFD if this process was started as one, and returns its exit code;
/// `None` in a process that was not.
pub fn main() -> Option<i32> {
    let dir = std::env::var_os(KFD_SERVE_ENV)?;
    // The emulated kernel stops when the program that started it exits.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    let gpus = std::env::var(serve::GPUS_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1);
    Some(serve_kfd(std::path::Path::new(&dir), gpus))
}
