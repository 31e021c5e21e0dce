//! The C and C++ examples, compiled against `include/rig_capi.h` and `librig`, run against
//! a real rigd (this test program, run again as rigd's daemon serving the simulated GPU).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const SOCKET_ENV: &str = "RIG_CAPI_TEST_SERVE";

/// Not a test: in the child [`Daemon::start`] runs, this serves rigd until SIGTERM.
#[test]
#[ignore = "rigd's daemon, run by Daemon::start in a child process"]
fn serve_rigd() {
    let Some(socket) = std::env::var_os(SOCKET_ENV).map(PathBuf::from) else {
        return;
    };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    let mut config = rigd::config::Config::embedded();
    config.daemon.socket = socket.clone();
    config.daemon.mode = 0o600;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(rigd::serve_until_sigterm(&socket, &config))
        .unwrap();
    std::process::exit(0);
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("rigd.sock");
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "serve_rigd",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env(SOCKET_ENV, &socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while rig_client::Rig::connect_to(&socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "rigd did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("rigd.sock")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// The directory of `librig.so` and `librig.a`: the `deps` directory this test runs from
/// (target/<profile>/deps/examples-HASH), where cargo puts the library it built for this
/// test run; `cargo build` alone copies it one level up.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_owned()
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles `source` with `compiler` and its extra arguments into `out`, linked to librig.
fn compile(compiler: &str, extra: &[&str], source: &str, out: &Path, link: &[&str]) {
    let lib = lib_dir();
    let status = Command::new(compiler)
        .args(extra)
        .args(["-Wall", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("examples").join(source))
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .args(link)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(status.success(), "{compiler} {source}");
}

/// `program` as a command that loads the librig of this test run: cargo's
/// `LD_LIBRARY_PATH` also names target/<profile>, whose librig.so `cargo build` made and may
/// be older, and it wins over the program's rpath.
fn command(program: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", lib_dir());
    c
}

fn run(program: &Path, d: &Daemon) -> String {
    let out = command(program).arg(d.socket()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_c_example_runs_against_rigd_shared_and_static() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("vadd");
    compile("cc", &["-std=c11"], "vadd.c", &shared, &["-lrig"]);
    let out = run(&shared, &d);
    assert!(out.contains("param 0: x kind 0 offset 0 size 8"), "{out}");
    assert!(out.contains("param 2: a kind 1 offset 16 size 4"), "{out}");
    assert!(
        out.contains("refused: kernel vadd's \"a\" (parameter 2) takes 4 bytes; 8 were given"),
        "{out}"
    );
    assert!(out.contains("y[10] = 21") && out.ends_with("ok\n"), "{out}");
    let lib = lib_dir().join("librig.a");
    let fixed = dir.path().join("vadd-static");
    compile(
        "cc",
        &["-std=c11"],
        "vadd.c",
        &fixed,
        &[lib.to_str().unwrap(), "-lpthread", "-ldl", "-lm"],
    );
    assert!(run(&fixed, &d).ends_with("ok\n"));
}

#[test]
fn the_cpp_example_runs_against_rigd() {
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("vadd_cpp");
    compile("c++", &["-std=c++17"], "vadd.cpp", &exe, &["-lrig"]);
    let out = run(&exe, &d);
    assert!(
        out.contains(
            "refused: a buffer for a float: kernel axpy's parameter 0 takes a value, not a buffer"
        ),
        "{out}"
    );
    assert!(out.contains("y[10] = 31") && out.ends_with("ok\n"), "{out}");
}

#[test]
fn the_status_example_tells_no_rigd_from_rigd_gone() {
    use std::io::{BufRead, BufReader, Write};
    let d = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("status");
    compile("cc", &["-std=c11"], "status.c", &exe, &["-lrig"]);
    let mut child = command(&exe)
        .arg(d.socket())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut said = String::new();
    while !said.ends_with("opened\n") {
        assert!(out.read_line(&mut said).unwrap() > 0, "{said}");
    }
    drop(d); // rigd stops (SIGTERM) and is waited for.
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    std::io::Read::read_to_string(&mut out, &mut said).unwrap();
    assert!(child.wait().unwrap().success(), "{said}");
    assert!(
        said.contains("no rigd: rigd could not be reached (1): cannot reach rigd at "),
        "{said}"
    );
    assert!(
        said.contains("rigd went away: the connection to rigd failed (rigd went away) (15): "),
        "{said}"
    );
    assert!(said.ends_with("ok\n"), "{said}");
}

#[test]
fn errors_are_codes_with_messages() {
    use std::ffi::CStr;
    // SAFETY: calls of the C ABI with the pointers it documents (NULLs it refuses).
    unsafe {
        let mut rig = std::ptr::null_mut();
        let s = rig::rig_connect(c"/nonexistent/rigd.sock".as_ptr(), &mut rig);
        assert_eq!(s, rig::RigStatus::Connect);
        let why = CStr::from_ptr(rig::rig_last_error()).to_str().unwrap();
        assert!(why.contains("/nonexistent/rigd.sock"), "{why}");
        assert!(rig.is_null());
        assert_eq!(
            rig::rig_open(std::ptr::null(), c"0".as_ptr(), &mut std::ptr::null_mut()),
            rig::RigStatus::Null
        );
        assert_eq!(
            CStr::from_ptr(rig::rig_last_error()).to_str().unwrap(),
            "rig is NULL"
        );
        let mut code = std::ptr::null_mut();
        let s = rig::rig_compile(7, c"".as_ptr(), c"gfx1100".as_ptr(), &mut code);
        assert_eq!(s, rig::RigStatus::Invalid);
        let s = rig::rig_compile(
            0,
            c"kernel void k(global int *x) { x[0] = ; }".as_ptr(),
            c"gfx1100".as_ptr(),
            &mut code,
        );
        assert_eq!(s, rig::RigStatus::Compile);
        assert!(
            CStr::from_ptr(rig::rig_last_error())
                .to_str()
                .unwrap()
                .contains("expected expression")
        );
        rig::rig_device_free(std::ptr::null_mut());
        assert_eq!(rig::rig_device_eventfd(std::ptr::null()), -1);
    }
}

#[test]
fn the_docs_c_excerpt_is_the_examples_code() {
    let page = std::fs::read_to_string(crate_dir().join("../docs/kernels.md")).unwrap();
    let excerpt = page
        .split("```c\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/kernels.md has a C excerpt");
    let example = std::fs::read_to_string(crate_dir().join("examples/vadd.c")).unwrap();
    let mut lines = example.lines().map(str::trim);
    for want in excerpt.lines().map(str::trim) {
        assert!(
            lines.any(|l| l == want),
            "docs/kernels.md's C line {want:?} is not in examples/vadd.c (in this order)"
        );
    }
}

/// A wait with a timeout answers `RIG_STATUS_TIMEOUT`, its own status, while a kernel spins
/// on a flag in host memory, and `RIG_STATUS_OK` once the flag is set and the work ends.
#[test]
fn a_wait_with_a_timeout_answers_timeout_until_the_work_ends() {
    use std::ffi::CStr;
    use std::ptr::{null, null_mut};
    use std::sync::atomic::{AtomicU32, Ordering};
    let d = Daemon::start();
    let socket = std::ffi::CString::new(d.socket().to_str().unwrap()).unwrap();
    const SPIN: &CStr = c"kernel void spin(global volatile uint *flag) { while (*flag == 0) {} }";
    // SAFETY: calls of the C ABI with live handles and writable out-pointers; the flag is
    // the host buffer's first 4 bytes, page aligned, written only through an atomic.
    unsafe {
        let ok = rig::RigStatus::Ok;
        let (mut rig, mut dev) = (null_mut(), null_mut());
        assert_eq!(rig::rig_connect(socket.as_ptr(), &mut rig), ok);
        assert_eq!(rig::rig_open(rig, c"0".as_ptr(), &mut dev), ok);
        let mut code = null_mut();
        let arch = rig::rig_device_arch(dev);
        assert_eq!(rig::rig_compile(0, SPIN.as_ptr(), arch, &mut code), ok);
        let (mut image, mut kernel) = (null_mut(), null_mut());
        let (data, len) = (rig::rig_code_data(code), rig::rig_code_len(code));
        assert_eq!(rig::rig_image_load(dev, data, len, &mut image), ok);
        assert_eq!(
            rig::rig_kernel_resolve(image, c"spin".as_ptr(), &mut kernel),
            ok
        );
        let (mut flag, mut host) = (null_mut(), null_mut());
        assert_eq!(rig::rig_host_buffer(dev, 4096, &mut flag, &mut host), ok);
        let s = rig::rig_submission_new();
        let r = rig::RigRef {
            buffer: flag,
            at: 0,
            write: false,
        };
        let one = [1u32; 3];
        let s_ok = rig::rig_submission_launch_raw(
            s,
            kernel,
            [0u8; 8].as_ptr(),
            8,
            &r,
            1,
            one.as_ptr(),
            one.as_ptr(),
            0,
        );
        assert_eq!(s_ok, ok);
        let mut point = null_mut();
        assert_eq!(rig::rig_submit(dev, s, &mut point), ok);
        let waited = rig::rig_point_wait_timeout(point, 20_000_000);
        assert_eq!(waited, rig::RigStatus::Timeout);
        let why = CStr::from_ptr(rig::rig_last_error()).to_str().unwrap();
        assert!(why.contains("was not reached within 20ms"), "{why}");
        assert!(!rig::rig_point_signaled(point));
        AtomicU32::from_ptr(host.cast::<u32>()).store(1, Ordering::Release);
        assert_eq!(rig::rig_point_wait_timeout(point, 30_000_000_000), ok);
        assert!(rig::rig_point_signaled(point));
        assert_eq!(rig::rig_point_wait_timeout(null(), 0), rig::RigStatus::Null);
        rig::rig_point_free(point);
        rig::rig_submission_free(s);
        rig::rig_buffer_free(flag);
        rig::rig_kernel_free(kernel);
        rig::rig_image_free(image);
        rig::rig_code_free(code);
        assert_eq!(rig::rig_device_close(dev), ok);
        rig::rig_connection_free(rig);
    }
}
