//! rigctl against a rigd served in-process (`rigd::Daemon` with a simulated GPU).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rig_proto::messages::{MemoryKind, Request, Response};

struct Served {
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rigd.sock");
    let config = rigd::config::Config::parse(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n",
        Path::new("test.toml"),
    )
    .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sock = socket.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (listener, _file) = rigd::listen::bind(&sock, None, 0o660).unwrap();
            let daemon = rigd::Daemon::start(&config, Path::new("/nonexistent-sysfs")).unwrap();
            ready_tx.send(()).unwrap();
            daemon
                .run(listener, async move {
                    let _ = rx.await;
                })
                .await;
        });
    });
    ready_rx.recv().unwrap();
    Served {
        socket,
        stop: Some(tx),
        thread: Some(thread),
        _dir: dir,
    }
}

fn rigctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rigctl"))
        .env("RIG_SOCKET", socket)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    assert!(
        o.status.success(),
        "rigctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn tables_and_json() {
    let s = serve();
    let out = text(&rigctl(&s.socket, &["gpus"]));
    assert!(out.starts_with("INDEX"), "{out}");
    assert!(
        out.contains("gfx1100") && out.contains("simulated"),
        "{out}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&text(&rigctl(&s.socket, &["--json", "gpus"]))).unwrap();
    assert_eq!(v[0]["arch"], "gfx1100");

    let mut c = rig_proto::Connection::connect(&s.socket, "worker").unwrap();
    let (r, _fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
    let Response::DeviceOpened(o) = r else {
        panic!("{r:?}")
    };
    let (r, _) = c
        .call(
            &Request::Alloc {
                device: o.device,
                memory: MemoryKind::Device,
                bytes: 1 << 20,
            },
            &[],
        )
        .unwrap();
    assert!(matches!(r, Response::Allocated { .. }));

    let out = text(&rigctl(&s.socket, &["devices"]));
    assert!(out.contains("1.0 MiB") && out.contains("live"), "{out}");
    let out = text(&rigctl(&s.socket, &["clients"]));
    assert!(out.contains("worker"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&text(&rigctl(&s.socket, &["clients", "--json"]))).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|c| c["program"] == "worker")
    );
    let id = o.device.0.to_string();
    let out = text(&rigctl(&s.socket, &["show", &id]));
    assert!(
        out.contains("COMPUTE:0") && out.contains("COPY:0") && out.contains("gfx1100"),
        "{out}"
    );
    assert!(out.contains("timeline   submitted 0  reached 0"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&text(&rigctl(&s.socket, &["--json", "show", &id]))).unwrap();
    assert_eq!(v["facts"]["alignment"], 4096);
    let bad = rigctl(&s.socket, &["show", "999"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no device 999"));
}

#[test]
fn says_what_to_do_without_rigd() {
    let o = rigctl(Path::new("/nonexistent/rigd.sock"), &["gpus"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("is rigd running") && e.contains("RIG_SOCKET"),
        "{e}"
    );
}

#[test]
fn image_needs_no_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let o = rigctl(Path::new("/nonexistent"), &["image", "/etc/hostname"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a code object"));
    let cl = dir.path().join("k.cl");
    let co = dir.path().join("k.co");
    std::fs::write(&cl, "__kernel void scale(__global float* a, float s) { a[__builtin_amdgcn_workitem_id_x()] *= s; }\n").unwrap();
    let built = Command::new("clang-19")
        .args([
            "-x",
            "cl",
            "-cl-std=CL2.0",
            "-target",
            "amdgcn-amd-amdhsa",
            "-nogpulib",
            "-mcpu=gfx1100",
            "-O2",
            "-o",
        ])
        .arg(&co)
        .arg(&cl)
        .status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("clang-19 is not installed: skipping the code-object part of this test");
        return;
    }
    let out = text(&rigctl(
        Path::new("/nonexistent"),
        &["image", co.to_str().unwrap()],
    ));
    assert!(
        out.contains("kernel scale") && out.contains("gfx1100") && out.contains("global_buffer"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&text(&rigctl(
        Path::new("/nonexistent"),
        &["--json", "image", co.to_str().unwrap()],
    )))
    .unwrap();
    assert_eq!(v["kernels"][0]["name"], "scale");
    assert_eq!(v["kernels"][0]["params"], 12);
}
