//! A rigd of the test's own: this test program run again as rigd's daemon ([`serve`]), on
//! a temporary socket, serving the simulated GPU; stopped when dropped. In a `*_kfd.rs`
//! program ([`on_kfd`]) the program is run once more as the emulated KFD, and rigd
//! serves its GPUs through the kfd path instead.
//!
//! What the kfd path cannot show is skipped there by one rule ([`only_on_sim`]): a test of
//! a fact only the simulator reports (that the GPU is simulated; the instruction, packet
//! position or queue of a fault: KFD's exception events name a GPU and an address, no
//! queue) runs on the sim path alone. A fault's isolation between clients holds there too:
//! each client's devices run in a KFD worker process of their own.

#![allow(dead_code)]

pub use rig_tests::serve;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rig_client::{Device, Rig};
use rig_proto::{Connection, DeviceInfo, Request, Response};

pub struct Daemon {
    child: Child,
    /// The emulated KFD's process, in a `*_kfd.rs` program.
    kfd: Option<Child>,
    dir: PathBuf,
    pub socket: PathBuf,
}

/// The hook of [`Daemon`], not a test: in the child it starts, this serves rigd until
/// SIGTERM and exits; run any other way it returns at once.
#[test]
#[ignore = "rigd's daemon, run by Daemon::start in a child process"]
fn serve_rigd() {
    if let Some(code) = rig_tests::kfd::main().or_else(serve::main) {
        std::process::exit(code);
    }
}

static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A directory name of this process's own: a program that runs another file's tests holds
/// two copies of this module, each with its own [`NEXT`], told apart by their module paths.
fn own_dir(what: &str) -> PathBuf {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let copy = module_path!().replace("::", ".");
    std::env::temp_dir().join(format!(
        "rig-client-{what}-{}-{copy}-{n}",
        std::process::id()
    ))
}

pub use rig_tests::kfd::on_kfd;
pub use serve::processor;

/// The rule by which a test of a fact only the simulator reports is skipped on the kfd path:
/// true (and says so on stderr) in a `*_kfd.rs` program, where the test returns at once.
pub fn only_on_sim(fact: &str) -> bool {
    if on_kfd() {
        eprintln!("skipped on the kfd path: only the simulator reports {fact}");
    }
    on_kfd()
}

/// Starts the emulated KFD of a `*_kfd.rs` program in `dir`, with `gpus` GPUs, and waits
/// until it serves.
fn start_kfd(dir: &Path, gpus: u32, clock: Option<&str>) -> Child {
    let me = std::env::current_exe().expect("the test program's path");
    let mut cmd = Command::new(me);
    cmd.args([
        "--exact",
        hook_name(),
        "--include-ignored",
        "--test-threads=1",
    ])
    .env(rig_tests::kfd::KFD_SERVE_ENV, dir)
    .env(serve::GPUS_ENV, gpus.to_string())
    .env_remove(serve::SOCKET_ENV)
    .env_remove(serve::CLOCK_ENV)
    .stdout(std::process::Stdio::null());
    if let Some(c) = clock {
        cmd.env(serve::CLOCK_ENV, c);
    }
    let mut child = cmd.spawn().expect("start the emulated KFD");
    let start = Instant::now();
    while !dir.join(rig_tests::kfd::KFD_READY).exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the emulated KFD exited ({status}) before it served");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the emulated KFD did not come up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// The test name of the [`serve_rigd`] hook in this program (its module path less the crate).
fn hook_name() -> &'static str {
    let path = concat!(module_path!(), "::serve_rigd");
    path.split_once("::").map_or(path, |(_, rest)| rest)
}

impl Daemon {
    /// Starts a rigd; `hang_ms` bounds how long work may run.
    pub fn start(hang_ms: Option<u32>) -> Daemon {
        Self::start_gpus(hang_ms, 1)
    }

    /// Starts a rigd serving `gpus` simulated GPUs alike.
    pub fn start_gpus(hang_ms: Option<u32>, gpus: u32) -> Daemon {
        Self::start_with(hang_ms, gpus, None)
    }

    /// Starts a rigd that closes connections holding nothing after `idle_ms` of silence.
    pub fn start_idle(idle_ms: u32) -> Daemon {
        Self::start_with(None, 1, Some(idle_ms))
    }

    /// Starts a rigd whose GPU's clock runs as `clock` says: the body of a `[sim.clock]`
    /// table (docs/operations.md), for the simulated GPU or the emulated KFD's.
    pub fn start_clock(clock: &str) -> Daemon {
        Self::start_full(None, 1, None, Some(clock))
    }

    fn start_with(hang_ms: Option<u32>, gpus: u32, idle_ms: Option<u32>) -> Daemon {
        Self::start_full(hang_ms, gpus, idle_ms, None)
    }

    fn start_full(
        hang_ms: Option<u32>,
        gpus: u32,
        idle_ms: Option<u32>,
        clock: Option<&str>,
    ) -> Daemon {
        let dir = own_dir("test");
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("rigd.sock");
        let gpus_asked = gpus.clamp(1, 8);
        let kfd = on_kfd().then(|| start_kfd(&dir, gpus_asked, clock));
        let me = std::env::current_exe().expect("the test program's path");
        let mut cmd = Command::new(me);
        // Only the hook runs in the child, and it serves instead of testing.
        cmd.args([
            "--exact",
            hook_name(),
            "--include-ignored",
            "--test-threads=1",
        ])
        .env(serve::SOCKET_ENV, &socket)
        .env_remove(serve::HANG_MS_ENV)
        .env_remove(serve::GPUS_ENV)
        .env_remove(serve::IDLE_MS_ENV)
        .env_remove(serve::CLOCK_ENV)
        .env_remove(rig_tests::kfd::KFD_SERVE_ENV)
        .env_remove(serve::KFD_ENV)
        .stdout(std::process::Stdio::null());
        if kfd.is_some() {
            cmd.env(serve::KFD_ENV, &dir)
                .env(serve::WORKER_ENV, env!("CARGO_BIN_EXE_rig-tests-worker"));
        }
        if let Some(ms) = hang_ms {
            cmd.env(serve::HANG_MS_ENV, ms.to_string());
        }
        if gpus > 1 {
            cmd.env(serve::GPUS_ENV, gpus.to_string());
        }
        if let Some(ms) = idle_ms {
            cmd.env(serve::IDLE_MS_ENV, ms.to_string());
        }
        if let Some(c) = clock {
            cmd.env(serve::CLOCK_ENV, c);
        }
        let child = cmd.spawn().expect("start rigd");
        let d = Daemon {
            child,
            kfd,
            dir,
            socket,
        };
        let start = Instant::now();
        while Rig::connect_to(&d.socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "rigd did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if d.kfd.is_some() {
            // Every test of a `*_kfd.rs` program runs on the kfd path, none on the simulator.
            let gpus = d.rig().gpus().expect("rigd lists its GPUs");
            assert_eq!(gpus.len(), gpus_asked as usize, "{gpus:?}");
            assert!(
                gpus.iter()
                    .all(|g| g.path == rig_client::GpuPath::Kfd && g.unavailable.is_none()),
                "rigd does not serve the emulated KFD's GPUs alone: {gpus:?}"
            );
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

    /// Asks rigd to stop as systemd does (SIGTERM), without waiting for it to exit.
    pub fn terminate(&self) {
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }

    /// Stops rigd where it stands (SIGSTOP): it answers nothing until [`Daemon::resume`].
    pub fn pause(&self) {
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGSTOP) };
    }

    /// Lets a paused rigd run on (SIGCONT).
    pub fn resume(&self) {
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT) };
    }

    pub fn path(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A paused rigd would never see the SIGTERM.
        self.resume();
        // SAFETY: kill(2) of the child this test spawned, by its id.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
        if let Some(kfd) = &mut self.kfd {
            // SAFETY: kill(2) of the child this test spawned, by its id.
            unsafe { libc::kill(kfd.id() as libc::pid_t, libc::SIGTERM) };
            let _ = kfd.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A code object of kernels/out/<processor> by name.
pub fn code(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernels/out")
        .join(processor())
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

/// The kernel corpus (kernels/corpus) as built for [`processor`].
pub fn corpus_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus");
    match processor() {
        "gfx1100" => d,
        p => d.join(p),
    }
}

/// Compiles a kernel that spins until a word turns nonzero, if LLVM 19 is installed.
pub fn spin_kernel() -> Option<Vec<u8>> {
    // A directory per call: tests of one binary compile it at once.
    let dir = own_dir("spin");
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("spin.cl");
    std::fs::write(
        &src,
        "__kernel void spin(__global volatile uint *flag) { while (*flag == 0) {} }\n",
    )
    .ok()?;
    let obj = dir.join("spin.o");
    let co = dir.join("spin.co");
    let ok = std::process::Command::new("clang-19")
        .args([
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-target",
            "amdgcn-amd-amdhsa",
            &format!("-mcpu={}", processor()),
            "-nogpulib",
            "-O2",
            "-c",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .is_ok_and(|s| s.success())
        && std::process::Command::new("ld.lld-19")
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

/// A connection of rigd's own user, which may inspect every client (rigctl's view).
pub struct Inspector(Connection);

impl Inspector {
    pub fn connect(d: &Daemon) -> Inspector {
        Inspector(Connection::connect(&d.socket, "inspector").expect("connect to rigd"))
    }

    fn ask(&mut self, request: Request) -> Response {
        self.0.call(&request, &[]).expect("rigd answers").0
    }

    /// The devices rigd holds open, every client's.
    pub fn devices(&mut self) -> Vec<DeviceInfo> {
        match self.ask(Request::ListDevices) {
            Response::Devices(d) => d,
            r => panic!("list-devices answered {r:?}"),
        }
    }

    /// How many clients rigd serves, this one included.
    pub fn clients(&mut self) -> usize {
        match self.ask(Request::ListClients) {
            Response::Clients(c) => c.len(),
            r => panic!("list-clients answered {r:?}"),
        }
    }

    /// rigd's report of `device`: memory held, images, regions.
    pub fn report(&mut self, device: rig_proto::DeviceId) -> rig_proto::messages::DeviceReport {
        match self.ask(Request::ShowDevice { device }) {
            Response::Device(r) => *r,
            r => panic!("show-device answered {r:?}"),
        }
    }
}

impl Inspector {
    /// rigd's report of `device` once what it freed has left quarantine: rigd keeps freed
    /// memory charged until no work that may touch it can run, and releases it on its watch
    /// thread's next tick, so a report right after a free may still count it. Settled means
    /// unchanged for longer than the watch thread's idle tick.
    pub fn settled_report(
        &mut self,
        device: rig_proto::DeviceId,
    ) -> rig_proto::messages::DeviceReport {
        let start = Instant::now();
        let mut last = self.report(device);
        let mut same = 0;
        while same < 5 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "rigd's report of the device never settled: {last:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
            let now = self.report(device);
            same = if now == last { same + 1 } else { 0 };
            last = now;
        }
        last
    }
}

/// Polls `f` until it holds, for at most 10 s; panics with `what` otherwise.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
