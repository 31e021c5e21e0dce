//! `rigctl gpus` of a rigd on an emulated KFD (rig-kfd-emu): each GPU's path, its firmware
//! versions as KFD's topology gives them (mec, sdma), what a client costs and how many run
//! at once, and why rigd does not serve one.

use std::path::Path;
use std::process::Command;

/// rigd in-process with `config` plus the emulated KFD in `dir`, until dropped.
struct Served {
    socket: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
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

/// rigd's `rig-worker`, which rigd starts for the KFD GPUs it serves: another package's
/// binary, so Cargo names it to no test of rigctl's; it lies in the target directory above
/// this test program (`target/<profile>/deps`) once rigd's binaries are built, as
/// `cargo test --workspace` does.
fn rig_worker() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let worker = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("rig-worker"))
        .unwrap();
    assert!(
        worker.exists(),
        "{} is not built: `cargo build -p rigd` (or `cargo test --workspace`) first",
        worker.display()
    );
    worker
}

fn serve(dir: &Path, serve: bool) -> Served {
    let config = format!(
        "[access]\nany = true\n[kfd]\nemulated = \"{}\"\ntopology = \"{}\"\nserve = {serve}\nworker = \"{}\"\n",
        dir.join("kfd.sock").display(),
        dir.join("topology").display(),
        rig_worker().display()
    );
    let config = rigd::config::Config::parse(&config, Path::new("test.toml")).unwrap();
    let socket = dir.join("rigd.sock");
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
            daemon.serving(&sock);
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
    }
}

fn rigctl(socket: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_rigctl"))
        .env("RIG_SOCKET", socket)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rigctl failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn gpus_show_the_kfd_path_and_the_firmware_kfd_reports() {
    let dir = tempfile::tempdir().unwrap();
    let emu = rig_kfd_emu::start(
        rig_kfd_emu::kernel::Config::default(),
        &dir.path().join("kfd.sock"),
        &dir.path().join("topology"),
    )
    .unwrap();
    let s = serve(dir.path(), true);
    let v: serde_json::Value =
        serde_json::from_str(&rigctl(&s.socket, &["--json", "gpus"])).unwrap();
    let gpus = v.as_array().unwrap();
    assert_eq!(gpus.len(), 3, "{v}");
    for (g, emulated) in gpus.iter().zip(emu.kernel().gpus()) {
        let n = &emulated.node;
        assert_eq!(g["path"], "kfd", "{g}");
        assert!(g["unavailable"].is_null(), "{g}");
        assert_eq!(
            g["status"]["firmware"],
            format!("mec {}, sdma {}", n.mec_firmware(), n.sdma_firmware()),
            "{g}"
        );
        // What a client costs (EOP buffer and context-save area a queue) and the bound:
        // the VMIDs amdgpu keeps for KFD, 8 beside graphics, 13 on a compute-only gfx942.
        let cost = &g["status"]["client_cost"];
        let queue_bytes = rigd::path::kfd::client_cost(n).queue_bytes;
        assert!(queue_bytes > 4 << 20, "{g}");
        assert_eq!(cost["queue_bytes"], queue_bytes, "{g}");
        assert_eq!(cost["queues_fit"], n.vram_bytes() / queue_bytes, "{g}");
        let at_once = if n.processor_name() == "gfx942" {
            13
        } else {
            8
        };
        assert_eq!(cost["at_once"], at_once, "{g}");
    }
    let table = rigctl(&s.socket, &["gpus"]);
    assert!(table.lines().next().unwrap().ends_with("CLIENT"), "{table}");
    // The emulated gfx1100's 4 GiB: 44 MiB a queue, 93 queues' buffers.
    assert!(
        table.contains("44.0 MiB/queue, 8 at once, 93 queues fit"),
        "{table}"
    );
    let first = table.lines().nth(1).unwrap();
    let n = &emu.kernel().gpus()[0].node;
    assert!(
        first.contains("kfd")
            && first.contains(&format!(
                "mec {}, sdma {}",
                n.mec_firmware(),
                n.sdma_firmware()
            ))
            && first.contains("hardware"),
        "{table}"
    );
}

#[test]
fn gpus_say_why_a_kfd_gpu_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let _emu = rig_kfd_emu::start(
        rig_kfd_emu::kernel::Config::default(),
        &dir.path().join("kfd.sock"),
        &dir.path().join("topology"),
    )
    .unwrap();
    let s = serve(dir.path(), false);
    let table = rigctl(&s.socket, &["gpus"]);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{table}");
    for r in rows {
        assert!(
            r.contains("kfd") && r.contains("not served: ") && r.contains("[kfd] serve = false"),
            "{table}"
        );
    }
}
