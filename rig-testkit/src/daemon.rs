//! A rigd of the test's own: the test program run again as rigd's daemon
//! ([`crate::serve`]), on a temporary socket, serving its [`Backend`]; stopped when dropped.
//! On a kfd backend ([`Backend::is_kfd`]) the program is run once more first, as the emulated KFD, and rigd
//! serves that KFD's GPUs through its kfd path, no simulated GPU.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rig_client::{Device, Rig};
use rig_proto::{Connection, DeviceInfo, Request, Response};

use crate::Backend;
use crate::serve;

/// A rigd child of this test program (see the module's documentation).
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    /// The emulated KFD's process, on a kfd backend.
    kfd: Option<Child>,
    backend: Backend,
    dir: PathBuf,
    /// The socket rigd serves on.
    pub socket: PathBuf,
}

/// What a [`Daemon`] is started with, beside its backend.
#[derive(Debug, Clone, Default)]
struct Start {
    hang_ms: Option<u32>,
    gpus: u32,
    idle_ms: Option<u32>,
    /// The directory of an emulated KFD this process runs, served in place of the backend's.
    kfd_dir: Option<PathBuf>,
    /// The body of a `[sim.clock]` table for the GPUs' clocks ([`serve::CLOCK_ENV`]).
    clock: Option<String>,
}

/// A directory of this process's own, under the system's temporary directory.
pub(crate) fn own_dir(what: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("rig-test-{what}-{}-{n}", std::process::id()))
}

/// This test program run again as one of its children, with libtest's arguments naming only
/// the [`serve::HOOK`] test.
fn child_command() -> Command {
    let me = std::env::current_exe().expect("the test program's path");
    let mut cmd = Command::new(me);
    cmd.args([
        "--exact",
        serve::HOOK,
        "--include-ignored",
        "--test-threads=1",
    ])
    .env_remove(serve::SOCKET_ENV)
    .env_remove(serve::PROCESSOR_ENV)
    .env_remove(serve::HANG_MS_ENV)
    .env_remove(serve::GPUS_ENV)
    .env_remove(serve::IDLE_MS_ENV)
    .env_remove(serve::KFD_ENV)
    .env_remove(serve::WORKER_ENV)
    .env_remove(serve::KFD_SERVE_ENV)
    .env_remove(serve::CLOCK_ENV)
    .stdout(std::process::Stdio::null());
    cmd
}

/// Whether a child exited before it served: a program without the hook runs no test and
/// exits at once.
fn check_alive(child: &mut Child, what: &str) {
    if let Ok(Some(status)) = child.try_wait() {
        panic!(
            "{what} exited ({status}) before it served: does the test program define the hook \
             (rig_testkit::serve_hook!() at its root, or rig_testkit::serve::main() first \
             thing in a bench)?"
        );
    }
}

/// Starts the emulated KFD in `dir`, with `gpus` GPUs of `processor`, and waits until it
/// serves.
fn start_kfd(dir: &Path, processor: &str, gpus: u32, clock: Option<&str>) -> Child {
    let mut cmd = child_command();
    cmd.env(serve::KFD_SERVE_ENV, dir)
        .env(serve::PROCESSOR_ENV, processor)
        .env(serve::GPUS_ENV, gpus.to_string());
    if let Some(c) = clock {
        cmd.env(serve::CLOCK_ENV, c);
    }
    let mut child = cmd.spawn().expect("start the emulated KFD");
    let start = Instant::now();
    while !dir.join(serve::KFD_READY).exists() {
        check_alive(&mut child, "the emulated KFD");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the emulated KFD did not come up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

impl Daemon {
    /// Starts a rigd on `backend`; `hang_ms` bounds how long work may run on a simulated GPU.
    pub fn start(backend: Backend, hang_ms: Option<u32>) -> Daemon {
        Self::start_with(
            backend,
            Start {
                hang_ms,
                ..Start::default()
            },
        )
    }

    /// Starts a rigd serving `gpus` GPUs alike (1 to 8).
    pub fn start_gpus(backend: Backend, hang_ms: Option<u32>, gpus: u32) -> Daemon {
        Self::start_with(
            backend,
            Start {
                hang_ms,
                gpus,
                ..Start::default()
            },
        )
    }

    /// Starts a rigd that closes connections holding nothing after `idle_ms` of silence.
    pub fn start_idle(backend: Backend, idle_ms: u32) -> Daemon {
        Self::start_with(
            backend,
            Start {
                idle_ms: Some(idle_ms),
                ..Start::default()
            },
        )
    }

    /// Starts a rigd whose GPUs' clocks run as `clock` says: the body of a `[sim.clock]`
    /// table (docs/operations.md), for the simulated GPU or the emulated KFD's.
    pub fn start_clock(backend: Backend, clock: &str) -> Daemon {
        Self::start_with(
            backend,
            Start {
                clock: Some(clock.to_owned()),
                ..Start::default()
            },
        )
    }

    /// Starts a rigd serving, through its kfd path, an emulated KFD that this process runs,
    /// so the test picks the emulated kernel's limits and sees what it holds: `start` starts
    /// it in the directory it is given (its socket [`serve::KFD_SOCKET`] and topology
    /// [`serve::KFD_TOPOLOGY`] there), which lives as long as the daemon.
    pub fn on_emulated_kfd<T>(start: impl FnOnce(&Path) -> T) -> (Daemon, T) {
        let dir = Self::new_dir();
        let emulated = start(&dir);
        let d = Self::start_in(
            dir.clone(),
            Backend::Kfd,
            Start {
                kfd_dir: Some(dir),
                ..Start::default()
            },
        );
        (d, emulated)
    }

    fn new_dir() -> PathBuf {
        let dir = own_dir("rigd");
        std::fs::create_dir_all(&dir).expect("the daemon's temporary directory");
        dir
    }

    fn start_with(backend: Backend, start: Start) -> Daemon {
        Self::start_in(Self::new_dir(), backend, start)
    }

    fn start_in(dir: PathBuf, backend: Backend, start: Start) -> Daemon {
        let socket = dir.join("rigd.sock");
        let gpus = start.gpus.clamp(1, 8);
        let kfd_dir = match (&start.kfd_dir, backend) {
            (Some(d), _) => Some(d.clone()),
            (None, b) if b.is_kfd() => Some(dir.clone()),
            (None, _) => None,
        };
        let kfd = (backend.is_kfd() && start.kfd_dir.is_none())
            .then(|| start_kfd(&dir, backend.processor(), gpus, start.clock.as_deref()));
        let mut cmd = child_command();
        cmd.env(serve::SOCKET_ENV, &socket)
            .env(serve::PROCESSOR_ENV, backend.processor());
        if let Some(kfd_dir) = &kfd_dir {
            cmd.env(serve::KFD_ENV, kfd_dir)
                .env(serve::WORKER_ENV, serve::worker());
        }
        if let Some(ms) = start.hang_ms {
            cmd.env(serve::HANG_MS_ENV, ms.to_string());
        }
        if gpus > 1 {
            cmd.env(serve::GPUS_ENV, gpus.to_string());
        }
        if let Some(ms) = start.idle_ms {
            cmd.env(serve::IDLE_MS_ENV, ms.to_string());
        }
        if let Some(c) = &start.clock {
            cmd.env(serve::CLOCK_ENV, c);
        }
        let child = cmd.spawn().expect("start rigd");
        let mut d = Daemon {
            child,
            kfd,
            backend,
            dir,
            socket,
        };
        let begun = Instant::now();
        while Rig::connect_to(&d.socket).is_err() {
            check_alive(&mut d.child, "the test's rigd");
            assert!(
                begun.elapsed() < Duration::from_secs(30),
                "rigd did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if d.kfd.is_some() {
            // Every test on the kfd backend runs on the kfd path, none on the simulator.
            let listed = d.rig().gpus().expect("rigd lists its GPUs");
            assert_eq!(listed.len(), gpus as usize, "{listed:?}");
            assert!(
                listed
                    .iter()
                    .all(|g| g.path == rig_client::GpuPath::Kfd && g.unavailable.is_none()),
                "rigd does not serve the emulated KFD's GPUs alone: {listed:?}"
            );
        }
        d
    }

    /// The backend it serves.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A code object of the backend's processor by name ([`Backend::code`]).
    pub fn code(&self, name: &str) -> Vec<u8> {
        self.backend.code(name)
    }

    /// A new connection.
    pub fn rig(&self) -> Rig {
        Rig::connect_to(&self.socket).expect("connect to rigd")
    }

    /// A device of the first GPU, on a connection of its own.
    pub fn device(&self) -> Device {
        let rig = self.rig();
        let name = rig.gpus().expect("rigd lists its GPUs")[0].name.clone();
        rig.open_device(&name).expect("open a device")
    }

    /// The pid of rigd.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pid of the emulated KFD's process, on a kfd backend.
    pub fn kfd_pid(&self) -> Option<u32> {
        self.kfd.as_ref().map(Child::id)
    }

    fn signal(&self, s: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, s);
    }

    /// Kills rigd as a crash would (SIGKILL): it stops nothing and says nothing.
    pub fn crash(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// Asks rigd to stop as systemd does (SIGTERM), without waiting for it to exit.
    pub fn terminate(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }

    /// Stops rigd where it stands (SIGSTOP): it answers nothing until [`Daemon::resume`].
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// Lets a paused rigd run on (SIGCONT).
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// The daemon's temporary directory: the emulated KFD's too, on a kfd backend and
    /// [`Daemon::on_emulated_kfd`].
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket rigd serves on.
    pub fn path(&self) -> &Path {
        &self.socket
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A paused rigd would never see the SIGTERM.
        self.resume();
        self.terminate();
        let _ = self.child.wait();
        if let Some(kfd) = &mut self.kfd {
            let pid = nix::unistd::Pid::from_raw(kfd.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = kfd.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection of rigd's own user, which may inspect every client (rigctl's view).
#[derive(Debug)]
pub struct Inspector(Connection);

impl Inspector {
    /// Connects to `d`.
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
