//! rig's test harness, for the integration tests of rig-tests (`tests/`) and rigd, and the
//! benches that start a rigd:
//!
//! - [`Daemon`]: a rigd of the test's own on a [`Backend`] (a simulated gfx1100, gfx1201 or
//!   gfx942, or an emulated KFD's gfx1100 or gfx942 through rigd's kfd path): the test program run
//!   again as rigd's daemon, through rigd's library; [`Inspector`] sees what it holds;
//! - [`on_backends!`]: one `#[test]` per backend from one test body;
//! - [`serve`]: the re-exec entry points that make a test program its own rigd or emulated
//!   KFD ([`serve_hook!`] at the root of every test program that starts a [`Daemon`]);
//! - [`rigd::Rigd`]: the real `rigd` program with a configuration of the test's, for tests
//!   of the daemon itself (command line, signals, memory limits);
//! - [`kernels`]: the code objects `kernels/build.sh` built, and kernels a test writes,
//!   through [`rig_kernels::Compiler`];
//! - [`test_name!`]: a test's name as libtest knows it, for a test that runs this program
//!   again as a child doing one test's part.
//!
//! Each test program links this crate once: one program per crate, a module per subject.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
pub mod daemon;
pub mod kernels;
pub mod rigd;
pub mod serve;

use std::time::{Duration, Instant};

pub use backend::Backend;
pub use daemon::{Daemon, Inspector};

/// Polls `f` until it holds, for at most 10 s; panics with `what` otherwise.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A deterministic byte pattern.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The name libtest gives a test whose function's path is `path` (`crate::module::test`):
/// the path less the crate.
pub fn test_name_of(path: &'static str) -> &'static str {
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

/// The name libtest gives the test function `$test` of the module this is written in, to run
/// it alone in a child (`current_exe --exact <name>`).
#[macro_export]
macro_rules! test_name {
    ($test:ident) => {
        $crate::test_name_of(concat!(module_path!(), "::", stringify!($test)))
    };
}
