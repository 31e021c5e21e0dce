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
    serve_with(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n",
        0o660,
        Path::new("/nonexistent-sysfs"),
    )
}

/// rigd in-process with `config`, its socket of mode `mode`, scanning `sysfs`.
fn serve_with(config: &str, mode: u32, sysfs: &Path) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rigd.sock");
    let config = rigd::config::Config::parse(config, Path::new("test.toml")).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let sock = socket.clone();
    let sysfs = sysfs.to_owned();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (listener, _file) = rigd::listen::bind(&sock, None, mode).unwrap();
            let daemon = rigd::Daemon::start(&config, &sysfs).unwrap();
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
    // One row per process: the program is what /proc says; what its hello said is kept
    // beside it.
    assert!(
        v.as_array().unwrap().iter().any(|c| c["hello"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == "worker"))
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
fn ping_times_a_round_trip_and_says_when_rigd_is_down() {
    let s = serve();
    let out = text(&rigctl(&s.socket, &["ping"]));
    assert!(
        out.starts_with("rigd ") && out.contains(" answered in ") && out.ends_with(" ms\n"),
        "{out}"
    );
    let v = json_of(&s.socket, &["ping"]);
    assert_eq!(v["pid"], std::process::id());
    assert!(v["round_trip_us"].as_u64().is_some(), "{v}");
    drop(s);
    let o = rigctl(Path::new("/nonexistent/rigd.sock"), &["ping"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("rigd is not running at /nonexistent/rigd.sock"),
        "{e}"
    );
}

#[test]
fn image_needs_no_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let o = rigctl(Path::new("/nonexistent"), &["image", "/etc/hostname"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a code object"));
    let co = dir.path().join("k.co");
    let Some(code) = rig_testkit::kernels::compile(
        "scale",
        "__kernel void scale(__global float* a, float s) { a[__builtin_amdgcn_workitem_id_x()] *= s; }\n",
        "gfx1100",
    ) else {
        return;
    };
    std::fs::write(&co, code).unwrap();
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

/// `rigctl ARGS` as JSON, whatever its exit status.
fn json_of(socket: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let o = rigctl(socket, &a);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// A client of the test process with one device and 1 MiB of Device memory on GPU `gpu`.
fn worker(socket: &Path, gpu: u32) -> (rig_proto::Connection, rig_proto::messages::DeviceId) {
    let mut c = rig_proto::Connection::connect(socket, "worker").unwrap();
    let (r, _fds) = c.call(&Request::OpenDevice { gpu }, &[]).unwrap();
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
    assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
    (c, o.device)
}

/// The program the kernel names this process by, as rigctl should show it.
fn own_comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim_end()
        .to_owned()
}

#[test]
fn version_names_rigctl_and_the_rigd_it_reaches() {
    let s = serve();
    let o = rigctl(&s.socket, &["version"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("rigctl ") && out.contains("rigd "), "{out}");
    let v = json_of(&s.socket, &["version"]);
    assert_eq!(v["rigd"]["protocol"], rig_proto::VERSION, "{v}");
    assert!(
        v["rigd"]["daemon"].as_str().unwrap().starts_with("rigd "),
        "{v}"
    );
}

#[test]
fn status_names_version_uptime_config_and_socket() {
    let s = serve();
    let out = text(&rigctl(&s.socket, &["status"]));
    assert!(
        out.contains(&format!("rigd {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(
        out.contains("uptime") && out.contains("embedded default"),
        "{out}"
    );
    assert!(out.contains(&*s.socket.to_string_lossy()), "{out}");
    let v = json_of(&s.socket, &["status"]);
    assert_eq!(v["socket"], s.socket.to_string_lossy().as_ref());
    assert_eq!(v["gpus"], 1);
    assert!(v["uptime_ms"].as_u64().is_some());
    let csv = text(&rigctl(&s.socket, &["--csv", "status"]));
    assert!(csv.starts_with("KEY,VALUE\nversion,rigd "), "{csv}");
}

#[test]
fn gpus_name_the_product_firmware_and_memory_used() {
    // A Navi 31 (1002:744c revision c8) in a fake sysfs, beside the simulated GPU.
    let sys = tempfile::tempdir().unwrap();
    let f = sys.path().join("bus/pci/devices/0000:03:00.0");
    std::fs::create_dir_all(f.join("fw_version")).unwrap();
    for (k, v) in [
        ("vendor", "0x1002"),
        ("class", "0x030000"),
        ("device", "0x744c"),
        ("revision", "0xc8"),
        ("fw_version/mec_fw_version", "0x000001c2"),
    ] {
        std::fs::write(f.join(k), format!("{v}\n")).unwrap();
    }
    let s = serve_with(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n",
        0o660,
        sys.path(),
    );
    let (_c, _d) = worker(&s.socket, 1);
    let out = text(&rigctl(&s.socket, &["gpus"]));
    assert!(out.starts_with("INDEX"), "{out}");
    let real = out.lines().nth(1).unwrap();
    assert!(
        real.contains("AMD Radeon RX 7900 XTX")
            && real.contains("gfx1100")
            && real.contains("mec 0x000001c2"),
        "{out}"
    );
    assert!(!out.contains("unknown"), "{out}");
    let sim = out.lines().nth(2).unwrap();
    assert!(
        sim.contains("simulated gfx1100") && sim.contains("1.0 MiB") && sim.contains("1023.0 MiB"),
        "{out}"
    );
    let v = json_of(&s.socket, &["gpus"]);
    assert_eq!(
        v[0]["status"]["pci_id"],
        serde_json::json!([0x1002, 0x744c, 0xc8])
    );
    assert_eq!(v[1]["status"]["used_bytes"], 1 << 20);
    assert_eq!(v[1]["status"]["devices"], 1);
    assert!(v[1]["status"]["busy_permille"].as_u64().is_some());
    let csv = text(&rigctl(&s.socket, &["--csv", "gpus"]));
    assert!(
        csv.starts_with("INDEX,NAME,PRODUCT,ARCH,PATH,BUS,FIRMWARE,MEMORY,USED,FREE,BUSY"),
        "{csv}"
    );
    assert!(csv.contains("AMD Radeon RX 7900 XTX"), "{csv}");
}

#[test]
fn gpus_name_each_gpus_path_and_why_a_vfio_function_is_not_served() {
    // A Navi 31 bound to vfio-pci in IOMMU group 14, laid out as the kernel lays out sysfs
    // (the function's folder under devices/, linked from bus/pci/devices), beside two
    // simulated GPUs.
    let sys = tempfile::tempdir().unwrap();
    let r = sys.path();
    let bus = "0000:03:00.0";
    let f = r.join("devices/pci0000:00").join(bus);
    std::fs::create_dir_all(&f).unwrap();
    for (k, v) in [
        ("vendor", "0x1002"),
        ("class", "0x030000"),
        ("device", "0x744c"),
        ("revision", "0xc8"),
    ] {
        std::fs::write(f.join(k), format!("{v}\n")).unwrap();
    }
    std::fs::create_dir_all(r.join("bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink(&f, r.join("bus/pci/devices").join(bus)).unwrap();
    std::fs::create_dir_all(r.join("bus/pci/drivers/vfio-pci")).unwrap();
    std::os::unix::fs::symlink(r.join("bus/pci/drivers/vfio-pci"), f.join("driver")).unwrap();
    let group = r.join("kernel/iommu_groups/14");
    std::fs::create_dir_all(group.join("devices")).unwrap();
    std::os::unix::fs::symlink(&group, f.join("iommu_group")).unwrap();
    std::os::unix::fs::symlink(&f, group.join("devices").join(bus)).unwrap();
    let s = serve_with(
        "[access]\nany = true\n[vfio]\nallow = [\"0000:03:00.0\"]\n\
         [[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n\
         [[sim]]\nprocessor = \"gfx1201\"\nmemory_bytes = 1073741824\n",
        0o660,
        r,
    );
    let why = "the PCI bring-up of gfx1100 is not implemented yet (IOMMU group 14)";
    let out = text(&rigctl(&s.socket, &["gpus"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    // The PATH column: where the header says it is, each row names its GPU's path.
    let at = lines[0].find("PATH").unwrap();
    let path = |line: &str| line[at..].split_whitespace().next().unwrap().to_owned();
    assert_eq!(path(lines[0]), "PATH");
    assert_eq!(
        [path(lines[1]), path(lines[2]), path(lines[3])],
        ["vfio", "sim", "sim"],
        "{out}"
    );
    assert!(
        lines[1].contains("AMD Radeon RX 7900 XTX")
            && lines[1].contains(bus)
            && lines[1].contains(&format!("not served: {why}")),
        "{out}"
    );
    let v = json_of(&s.socket, &["gpus"]);
    let paths: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["vfio", "sim", "sim"], "{v}");
    assert_eq!(v[0]["bus"], bus);
    assert_eq!(v[0]["arch"], "gfx1100");
    assert_eq!(v[0]["unavailable"], why);
    assert_eq!(v[1]["unavailable"], serde_json::Value::Null);
    // The function is never opened: opening it is refused with the reason; the simulated
    // GPUs serve.
    let mut c = rig_proto::Connection::connect(&s.socket, "worker").unwrap();
    let (r, _fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
    assert!(
        matches!(&r, Response::Error(e) if e.message.contains(why)),
        "{r:?}"
    );
    let (_c, _d) = worker(&s.socket, 1);
}

#[test]
fn clients_are_one_row_per_process_named_by_proc() {
    let s = serve();
    let (_a, _) = worker(&s.socket, 0);
    let (_b, _) = worker(&s.socket, 0);
    let v = json_of(&s.socket, &["clients"]);
    let me = std::process::id();
    let rows: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["pid"] == me)
        .collect();
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["connections"], 2);
    assert_eq!(rows[0]["devices"].as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["program"], own_comm().as_str());
    let out = text(&rigctl(&s.socket, &["clients"]));
    let line = out
        .lines()
        .find(|l| l.starts_with(&me.to_string()))
        .unwrap();
    assert!(
        line.contains(&own_comm()) && line.contains("worker") && line.contains("MiB"),
        "{out}"
    );
}

#[test]
fn top_refreshes() {
    let s = serve();
    let (_c, _) = worker(&s.socket, 0);
    let out = text(&rigctl(
        &s.socket,
        &["top", "--count", "3", "--interval", "0.05"],
    ));
    assert_eq!(out.matches("INDEX").count(), 3, "{out}");
    assert_eq!(out.matches("PID").count(), 3, "{out}");
    assert!(out.contains("worker"), "{out}");
    let out = text(&rigctl(
        &s.socket,
        &["--json", "top", "--count", "2", "--interval", "0.05"],
    ));
    let screens: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(screens.len(), 2);
    assert_eq!(screens[1]["gpus"][0]["status"]["devices"], 1);
}

#[test]
fn stop_and_evict_lose_the_clients_devices() {
    let s = serve();
    let (mut a, da) = worker(&s.socket, 0);
    let (mut b, db) = worker(&s.socket, 0);
    let status = |c: &mut rig_proto::Connection, device| {
        let (r, _) = c.call(&Request::DeviceStatus { device }, &[]).unwrap();
        let Response::Status(st) = r else {
            panic!("{r:?}")
        };
        st
    };
    let out = text(&rigctl(&s.socket, &["stop", &da.0.to_string()]));
    assert!(out.contains("stopped"), "{out}");
    let st = status(&mut a, da);
    assert_eq!(
        st.lost.as_ref().map(|f| (f.kind, f.to_string())),
        Some((
            rig_proto::FaultKind::StoppedByAdministrator,
            "stopped by the administrator".to_owned()
        )),
        "{st:?}"
    );
    assert_eq!(status(&mut b, db).lost, None, "the other device goes on");
    // Again: it is already lost, and the error keeps rigd's code.
    let v = json_of(&s.socket, &["stop", &da.0.to_string()]);
    assert_eq!(v["error"]["code"], "Lost", "{v}");
    let v = json_of(&s.socket, &["stop", "999"]);
    assert_eq!(v["error"]["code"], "NoSuchDevice", "{v}");
    assert_eq!(v["error"]["kind"], "refused", "{v}");
    // Evicting the test process stops what it still has live.
    let me = std::process::id().to_string();
    let v = json_of(&s.socket, &["evict", &me]);
    assert_eq!(v["stopped"], serde_json::json!([db.0]), "{v}");
    assert_eq!(
        status(&mut b, db).lost.map(|f| f.to_string()).as_deref(),
        Some("stopped by the administrator")
    );
    let v = json_of(&s.socket, &["evict", "1"]);
    assert_eq!(v["error"]["code"], "NoSuchDevice", "{v}");
}

#[test]
fn devices_as_csv() {
    let s = serve();
    let (_c, d) = worker(&s.socket, 0);
    let out = text(&rigctl(&s.socket, &["--csv", "devices"]));
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("DEVICE,GPU,OWNER,DEVICE-MEM,PINNED,MAPPED,HOST-MAPPED,STATE")
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with(&format!("{},0,{},1.0 MiB", d.0, std::process::id())),
        "{row}"
    );
    let o = rigctl(&s.socket, &["--csv", "show", &d.0.to_string()]);
    assert!(!o.status.success());
}

#[test]
fn errors_say_which_failure_and_what_to_do() {
    // Not running.
    let v = json_of(Path::new("/nonexistent/rigd.sock"), &["gpus"]);
    assert_eq!(v["error"]["kind"], "not-running", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("systemctl start rigd"),
        "{v}"
    );
    if !nix_is_root() {
        eprintln!("not root: cannot run rigctl as another user; skipping the rest");
        return;
    }
    use std::os::unix::process::CommandExt;
    let as_nobody = |socket: &Path, args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_rigctl"))
            .env("RIG_SOCKET", socket)
            .args(args)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
    };
    let open_dir = |s: &Served| {
        std::fs::set_permissions(
            s._dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    };
    // The socket's mode keeps nobody out: permission denied, with the group to join...
    let s = serve();
    open_dir(&s);
    let users = nix::unistd::Gid::from_raw(100);
    nix::unistd::chown(&s.socket, None, Some(users)).unwrap();
    let v = as_nobody(&s.socket, &["--json", "gpus"]);
    assert_eq!(v["error"]["kind"], "permission-denied", "{v}");
    let group = nix::unistd::Group::from_gid(users)
        .ok()
        .flatten()
        .map_or("100".to_owned(), |g| g.name);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("usermod -aG {group} ")), "{v}");
    // ...but not when that group is root's: joining it would be the wrong advice.
    nix::unistd::chown(&s.socket, None, Some(nix::unistd::Gid::from_raw(0))).unwrap();
    let v = as_nobody(&s.socket, &["--json", "gpus"]);
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("usermod")
            && message.contains("group root")
            && message.contains("daemon.group"),
        "{v}"
    );
    // The socket lets everyone in, [access] does not.
    let s = serve_with(
        "[access]\nany = false\nusers = []\ngroups = []\n[[sim]]\nprocessor = \"gfx1100\"\n",
        0o666,
        Path::new("/nonexistent-sysfs"),
    );
    open_dir(&s);
    let v = as_nobody(&s.socket, &["--json", "gpus"]);
    assert_eq!(v["error"]["kind"], "refused-by-access-rules", "{v}");
    assert_eq!(v["error"]["code"], "PermissionDenied", "{v}");
    // Allowed to connect, not to administer: rigd's code is kept.
    let s = serve_with(
        "[access]\nusers = [\"65534\"]\n[[sim]]\nprocessor = \"gfx1100\"\n",
        0o666,
        Path::new("/nonexistent-sysfs"),
    );
    open_dir(&s);
    let v = as_nobody(&s.socket, &["--json", "evict", "1"]);
    assert_eq!(v["error"]["code"], "PermissionDenied", "{v}");
    assert_eq!(v["error"]["kind"], "refused", "{v}");
    // A user who may connect still sees the GPU list, without the figures.
    let v = as_nobody(&s.socket, &["--json", "gpus"]);
    assert_eq!(v[0]["arch"], "gfx1100", "{v}");
    assert!(v[0]["status"].is_null(), "{v}");
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn cdi_spec_mounts_the_socket_and_names_each_gpu() {
    let s = serve();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cdi").join("rig.json");
    let o = rigctl(&s.socket, &["cdi", "--output", file.to_str().unwrap()]);
    assert_eq!(text(&o), "", "with --output nothing goes to stdout");
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let stdout: serde_json::Value =
        serde_json::from_str(&text(&rigctl(&s.socket, &["cdi"]))).unwrap();
    assert_eq!(spec, stdout);
    assert_eq!(spec["cdiVersion"], "0.3.0");
    assert_eq!(spec["kind"], "rig.dev/gpu");
    let names: Vec<&str> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["0", "all"]);
    // What a runtime does with the edits: the mount's host side, and RIG_SOCKET inside it,
    // reach rigd.
    let mount = &spec["containerEdits"]["mounts"][0];
    assert_eq!(
        Path::new(mount["hostPath"].as_str().unwrap()),
        s.socket.parent().unwrap()
    );
    let env = spec["containerEdits"]["env"][0].as_str().unwrap();
    let inside = env.strip_prefix("RIG_SOCKET=").unwrap();
    let rel = Path::new(inside)
        .strip_prefix(mount["containerPath"].as_str().unwrap())
        .unwrap();
    let host = Path::new(mount["hostPath"].as_str().unwrap()).join(rel);
    let mut c = rig_proto::Connection::connect(&host, "cdi-test").unwrap();
    assert!(
        matches!(c.call(&Request::ListGpus, &[]).unwrap().0, Response::Gpus(g) if g.len() == 1)
    );
}

#[test]
fn counters_lists_the_sq_counters_a_gfx12_gpu_offers_and_why_another_offers_none() {
    let s = serve_with(
        "[access]\nany = true\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n\
         [[sim]]\nprocessor = \"gfx1201\"\nmemory_bytes = 1073741824\n",
        0o660,
        Path::new("/nonexistent-sysfs"),
    );
    let v = json_of(&s.socket, &["counters"]);
    let by_arch = |arch: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|g| g["arch"] == arch)
            .unwrap_or_else(|| panic!("no {arch} in {v}"))
            .clone()
    };
    let rdna4 = by_arch("gfx1201");
    assert_eq!(rdna4["counters"][0]["name"], "SQ_WAVES");
    // soc24_enum.h: SQ_PERF_SEL_WAVES 0x4, SQ_PERF_SEL_INSTS_VALU 0x32.
    assert_eq!(rdna4["counters"][0]["select"], 4);
    assert!(
        rdna4["counters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "SQ_INSTS_VALU" && c["select"] == 0x32)
    );
    assert_eq!(rdna4["most_at_once"], 4);
    assert!(rdna4["none"].is_null());
    let rdna3 = by_arch("gfx1100");
    assert_eq!(rdna3["counters"].as_array().unwrap().len(), 0);
    assert!(rdna3["none"].as_str().unwrap().contains("GFX12"), "{rdna3}");
    let gpu = rdna4["gpu"].to_string();
    let table = text(&rigctl(&s.socket, &["counters", &gpu]));
    assert!(table.starts_with("GPU"), "{table}");
    assert!(table.contains("SQ_BUSY_CYCLES"), "{table}");
    assert!(!table.contains("gfx1100"), "{table}");
}
