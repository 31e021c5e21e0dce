//! Starting the real `rigd` binary on a temporary socket with a temporary configuration,
//! and a small client over rig-proto's blocking connection.
#![allow(dead_code)]

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rig_proto::messages::{DeviceId, DeviceOpened, Request, Response};
use rig_proto::{Connection, Error};
use rig_shm::SharedRegion;

/// A running rigd, stopped (SIGTERM) and reaped on drop.
pub struct Rigd {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

/// The default test configuration: one simulated gfx1100 with a short hang bound.
pub const SIM: &str = "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 300\n";

impl Rigd {
    /// Starts rigd with `config` (TOML) appended to nothing else.
    pub fn start(config: &str) -> Rigd {
        Self::start_with(config, &[])
    }

    /// Starts rigd with extra arguments.
    pub fn start_with(config: &str, args: &[&str]) -> Rigd {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("rigd.sock");
        let cfg = dir.path().join("rigd.toml");
        std::fs::write(&cfg, config).expect("write config");
        let child = Command::new(env!("CARGO_BIN_EXE_rigd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env("RUST_LOG", "rigd=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("rigd.log")).expect("log file"),
            ))
            .spawn()
            .expect("start rigd");
        let r = Rigd { child, dir, socket };
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
    }
}

/// A client connection.
pub struct Client {
    pub conn: Connection,
}

/// A device opened by a test client, with its shared memory mapped.
pub struct Opened {
    pub msg: DeviceOpened,
    pub fds: Vec<OwnedFd>,
}

impl Opened {
    /// The region behind descriptor `i`.
    pub fn region(&self, i: rig_proto::messages::FdIndex) -> SharedRegion {
        let fd = self.fds[i.0 as usize].try_clone().expect("dup");
        SharedRegion::from_fd(fd).expect("map a shared fd")
    }

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

/// Waits until `f` holds, up to `timeout`.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
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

/// clang-19 if installed, to build test kernels.
pub fn clang() -> Option<PathBuf> {
    for c in ["clang-19", "/usr/lib/llvm-19/bin/clang"] {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(PathBuf::from(c));
        }
    }
    None
}

/// Compiles OpenCL C `src` into a code object for `mcpu`, or `None` (printed) without clang.
pub fn compile(dir: &Path, src: &str, mcpu: &str) -> Option<Vec<u8>> {
    let Some(clang) = clang() else {
        eprintln!("clang-19 is not installed: skipping the code-object part of this test");
        return None;
    };
    let cl = dir.join(format!("k-{mcpu}.cl"));
    let out = dir.join(format!("k-{mcpu}.co"));
    std::fs::write(&cl, src).ok()?;
    let st = Command::new(clang)
        .args([
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-target",
            "amdgcn-amd-amdhsa",
            "-nogpulib",
        ])
        .arg(format!("-mcpu={mcpu}"))
        .arg("-O2")
        .arg("-o")
        .arg(&out)
        .arg(&cl)
        .status()
        .ok()?;
    assert!(st.success(), "clang failed to build the test kernel");
    std::fs::read(&out).ok()
}

impl Rigd {
    /// Starts rigd through `wrapper` (a command line that runs its first argument after it,
    /// such as `sh -c 'ulimit -n 1024 && exec "$0" "$@"'`), so the test can set what rigd
    /// inherits; the wrapper must `exec` rigd so the pid stays rigd's.
    pub fn start_wrapped(config: &str, wrapper: &[&str]) -> Rigd {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("rigd.sock");
        let cfg = dir.path().join("rigd.toml");
        std::fs::write(&cfg, config).expect("write config");
        let child = Command::new(wrapper[0])
            .args(&wrapper[1..])
            .arg(env!("CARGO_BIN_EXE_rigd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(&socket)
            .env("RUST_LOG", "rigd=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("rigd.log")).expect("log file"),
            ))
            .spawn()
            .expect("start rigd");
        let r = Rigd { child, dir, socket };
        r.wait_ready();
        r
    }
}
