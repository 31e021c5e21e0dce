//! A rigd of the test's own: the `rig-demo` binary in its hidden daemon mode, on a
//! temporary socket, serving the simulated GPU; stopped when dropped.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rig_client::{Device, Rig};

pub struct Daemon {
    child: Child,
    dir: PathBuf,
    pub socket: PathBuf,
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Daemon {
    /// Starts a rigd; `hang_ms` bounds how long work may run.
    pub fn start(hang_ms: Option<u32>) -> Daemon {
        Self::start_gpus(hang_ms, 1)
    }

    /// Starts a rigd serving `gpus` simulated GPUs alike.
    pub fn start_gpus(hang_ms: Option<u32>, gpus: u32) -> Daemon {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rig-client-test-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("rigd.sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rig-demo"));
        cmd.arg("--serve-rigd").arg(&socket);
        if let Some(ms) = hang_ms {
            cmd.arg("--hang-ms").arg(ms.to_string());
        }
        if gpus > 1 {
            cmd.arg("--gpus").arg(gpus.to_string());
        }
        let child = cmd.spawn().expect("start rigd");
        let d = Daemon { child, dir, socket };
        let start = Instant::now();
        while Rig::connect_to(&d.socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "rigd did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn rig(&self) -> Rig {
        Rig::connect_to(&self.socket).expect("connect to rigd")
    }

    /// A device of the first GPU, on a connection of its own.
    pub fn device(&self) -> Device {
        let rig = self.rig();
        let name = rig.gpus().unwrap()[0].name.clone();
        rig.open_device(&name).expect("open a device")
    }

    /// Kills rigd as a crash would (SIGKILL): it stops nothing and says nothing.
    pub fn crash(&mut self) {
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    pub fn path(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A code object of kernels/out/gfx1100 by name.
pub fn code(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/out/gfx1100")
        .join(format!("{name}.co"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
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
