//! The real `rigd` program on a temporary socket with a temporary configuration, and a
//! small client over rig-proto's blocking connection: for tests of the daemon itself (its
//! command line, signals, logs, limits), where rigd must be the program systemd runs.
//!
//! With `RIG_TEST_RIGD_MEMORY` set (bytes), each rigd runs in a memory cgroup of its own
//! with that limit (CI runs the adversarial suites so: `.ci/run`), and a rigd the kernel
//! killed for memory fails its test when dropped.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rig_proto::messages::{DeviceId, DeviceOpened, Request, Response};
use rig_proto::{Connection, Error};
use rig_shm::SharedRegion;

/// A running rigd, stopped (SIGTERM) and reaped on drop.
#[derive(Debug)]
pub struct Rigd {
    /// rigd's process.
    pub child: Child,
    /// The directory of its configuration, socket and log.
    pub dir: tempfile::TempDir,
    /// The socket it serves on.
    pub socket: PathBuf,
    /// Its memory cgroup, if it runs in one.
    pub limit: Option<MemoryLimit>,
}

/// A memory cgroup (v2 where its memory controller is enabled, else v1's) made for one
/// process, removed on drop.
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    v2: bool,
}

impl MemoryLimit {
    /// A new cgroup limited to `bytes`, or `None` where none can be made (not root, no
    /// memory controller).
    pub fn new(bytes: u64) -> Option<MemoryLimit> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "rig-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let v2_root = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(v2_root.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        let (dir, file) = if v2 {
            (v2_root.join(&name), "memory.max")
        } else {
            (
                Path::new("/sys/fs/cgroup/memory").join(&name),
                "memory.limit_in_bytes",
            )
        };
        std::fs::create_dir(&dir).ok()?;
        let limit = MemoryLimit { dir, v2 };
        std::fs::write(limit.dir.join(file), bytes.to_string()).ok()?;
        Some(limit)
    }

    /// The file a process writes its pid to, to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Processes of the cgroup the kernel killed for memory.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The most memory the cgroup has held, in bytes.
    pub fn peak(&self) -> u64 {
        let file = if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        // Its process is reaped by now; the kernel may take a moment to let go of it.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A memory field of `/proc/PID/status` (`VmRSS`, `VmHWM`, ...), in bytes.
pub fn status_bytes(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The resident memory of process `pid` now, in bytes.
pub fn rss(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS")
}

/// The peak resident memory of process `pid` (since its start or the last reset of it), in
/// bytes.
pub fn peak_rss(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM")
}

/// The memory limit `RIG_TEST_RIGD_MEMORY` asks for every rigd of the tests, if any.
pub fn memory_limit_asked() -> Option<u64> {
    std::env::var("RIG_TEST_RIGD_MEMORY").ok()?.parse().ok()
}

/// The default test configuration (TOML, for [`Rigd::start`]): one simulated gfx1100 with a
/// short hang bound.
pub const SIM: &str = "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 300\n";

impl Rigd {
    /// Starts rigd with `config` (TOML) appended to nothing else.
    pub fn start(config: &str) -> Rigd {
        Self::start_with(config, &[])
    }

    /// Starts rigd with extra arguments.
    pub fn start_with(config: &str, args: &[&str]) -> Rigd {
        Self::spawn(config, &[], args, memory_limit_asked())
    }

    /// Starts rigd in a memory cgroup of its own limited to `bytes` (where one can be made).
    pub fn start_limited(config: &str, bytes: u64) -> Rigd {
        Self::spawn(config, &[], &[], Some(bytes))
    }

    /// Starts rigd through `wrapper` (a command line that runs its first argument after it,
    /// such as `sh -c 'ulimit -n 1024 && exec "$0" "$@"'`), so the test can set what rigd
    /// inherits; the wrapper must `exec` rigd so the pid stays rigd's.
    pub fn start_wrapped(config: &str, wrapper: &[&str]) -> Rigd {
        Self::spawn(config, wrapper, &[], memory_limit_asked())
    }

    fn spawn(config: &str, wrapper: &[&str], args: &[&str], memory: Option<u64>) -> Rigd {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("rigd.sock");
        let cfg = dir.path().join("rigd.toml");
        std::fs::write(&cfg, config).expect("write config");
        let limit = memory.and_then(|bytes| {
            let l = MemoryLimit::new(bytes);
            if l.is_none() {
                eprintln!(
                    "no memory cgroup can be made here: rigd runs without its {bytes}-byte limit"
                );
            }
            l
        });
        // The cgroup is joined first, then the wrapper, then rigd, each by exec.
        let join = "echo $$ > \"$RIG_TEST_CGROUP_PROCS\" && exec \"$0\" \"$@\"";
        let mut line: Vec<std::ffi::OsString> = Vec::new();
        if limit.is_some() {
            line.extend(["sh", "-c", join].map(Into::into));
        }
        line.extend(wrapper.iter().map(Into::into));
        line.push(program().into());
        let mut command = Command::new(&line[0]);
        command
            .args(&line[1..])
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env("RUST_LOG", "rigd=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("rigd.log")).expect("log file"),
            ));
        if let Some(l) = &limit {
            command.env("RIG_TEST_CGROUP_PROCS", l.procs());
        }
        let child = command.spawn().expect("start rigd");
        let r = Rigd {
            child,
            dir,
            socket,
            limit,
        };
        r.wait_ready();
        r
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("rigd did not start; its log:\n{}", self.log());
    }

    /// rigd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rigd.log")).unwrap_or_default()
    }

    /// A connected client.
    pub fn client(&self, program: &str) -> Client {
        Client {
            conn: Connection::connect(&self.socket, program).expect("connect to rigd"),
        }
    }

    /// The pid of rigd.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Open descriptors of rigd.
    pub fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        self.child.wait().expect("wait rigd")
    }
}

impl Drop for Rigd {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        if let Some(l) = &self.limit {
            let kills = l.oom_kills();
            if kills > 0 && !std::thread::panicking() {
                panic!(
                    "the kernel killed rigd for memory ({kills} OOM kills; peak {} bytes)",
                    l.peak()
                );
            }
        }
    }
}

/// A client connection.
#[derive(Debug)]
pub struct Client {
    /// The connection.
    pub conn: Connection,
}

/// A device opened by a test client, with its shared memory mapped.
#[derive(Debug)]
pub struct Opened {
    /// rigd's answer.
    pub msg: DeviceOpened,
    /// The descriptors it passed.
    pub fds: Vec<OwnedFd>,
}

impl Opened {
    /// The region behind descriptor `i`.
    pub fn region(&self, i: rig_proto::messages::FdIndex) -> SharedRegion {
        let fd = self.fds[i.0 as usize].try_clone().expect("dup");
        SharedRegion::from_fd(fd).expect("map a shared fd")
    }

    /// The device's id.
    pub fn id(&self) -> DeviceId {
        self.msg.device
    }
}

impl Client {
    /// Calls with no descriptors.
    pub fn call(&mut self, r: Request) -> Response {
        self.call_fds(r, &[]).0
    }

    /// Calls with descriptors.
    pub fn call_fds(
        &mut self,
        r: Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> (Response, Vec<OwnedFd>) {
        self.conn.call(&r, fds).expect("rigd answers")
    }

    /// Tries a call (the connection may break).
    pub fn try_call(&mut self, r: Request) -> Result<Response, Error> {
        self.conn.call(&r, &[]).map(|x| x.0)
    }

    /// Opens GPU 0.
    pub fn open(&mut self) -> Opened {
        match self.call_fds(Request::OpenDevice { gpu: 0 }, &[]) {
            (Response::DeviceOpened(d), fds) => Opened { msg: *d, fds },
            (other, _) => panic!("open failed: {other:?}"),
        }
    }
}

/// Whether `f` holds within `timeout` (polled every 10 ms, and once more at the end).
pub fn holds_within(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// The error code of an answer.
pub fn code(r: &Response) -> Option<rig_proto::messages::ErrorCode> {
    match r {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

/// The `rigd` program Cargo built beside this test program, in `target/<profile>/` (where
/// `CARGO_BIN_EXE_rigd` names it to rigd's own tests, which alone may start it: Cargo builds
/// a package's programs for its tests only).
pub fn program() -> PathBuf {
    let exe = std::env::current_exe().expect("the test program's path");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/rigd
    let p = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("rigd"))
        .unwrap_or_default();
    assert!(
        p.is_file(),
        "no rigd program at {}: Cargo builds it for rigd's tests (cargo test -p rigd)",
        p.display()
    );
    p
}
