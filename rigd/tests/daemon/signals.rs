//! rigd's signals and configuration checks, against the real binary: SIGHUP reloads,
//! SIGTERM, SIGINT and SIGHUP never leave the socket behind, `--check`, and configuration
//! errors that name the key and exit 2.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rig_proto::messages::{Request, Response};
use rig_testkit::rigd::{Rigd, SIM, holds_within};

fn signal(d: &Rigd, s: Signal) {
    kill(Pid::from_raw(d.pid() as i32), s).unwrap();
}

#[test]
fn sighup_reloads_the_log_filter_access_and_limits_and_says_so() {
    let mut d = Rigd::start(SIM);
    let cfg = d.dir.path().join("rigd.toml");
    // A stricter [limits]: one device per user.
    std::fs::write(
        &cfg,
        format!("{SIM}\n[limits]\ndevices = 1\n[daemon]\nlog = \"rigd=trace\"\n"),
    )
    .unwrap();
    signal(&d, Signal::SIGHUP);
    assert!(
        holds_within(Duration::from_secs(20), || d
            .log()
            .contains("SIGHUP: configuration reloaded")),
        "{}",
        d.log()
    );
    let log = d.log();
    assert!(
        log.contains("[limits]") && log.contains("devices=1"),
        "{log}"
    );
    // RUST_LOG (set by the test harness) wins over daemon.log, and the log line does not
    // claim otherwise.
    assert!(!log.contains("daemon.log \""), "{log}");
    // Still serving, and the new limit holds.
    let mut c = d.client("t");
    let _a = c.open();
    let r = c.call(Request::OpenDevice { gpu: 0 });
    assert!(
        matches!(&r, Response::Error(e) if e.message.contains("limits.devices (1)")),
        "{r:?}"
    );
    // An invalid file changes nothing and is logged with its key.
    std::fs::write(&cfg, format!("{SIM}\n[limits]\ngpu_share_percent = 0\n")).unwrap();
    signal(&d, Signal::SIGHUP);
    assert!(
        holds_within(Duration::from_secs(20), || d
            .log()
            .contains("keeping the configuration in force")),
        "{}",
        d.log()
    );
    assert!(d.log().contains("limits.gpu_share_percent"), "{}", d.log());
    assert!(matches!(c.call(Request::ListGpus), Response::Gpus(_)));
    // [access]: the reload says what changed.
    std::fs::write(
        &cfg,
        SIM.replace("groups = []", "")
            .replace("any = true", "any = true\nusers = [\"0\"]"),
    )
    .unwrap();
    signal(&d, Signal::SIGHUP);
    assert!(
        holds_within(Duration::from_secs(20), || d
            .log()
            .contains("[access] users=[\"0\"]")),
        "{}",
        d.log()
    );
    // [vfio] is read by discovery, at start: the reload says a restart is needed.
    std::fs::write(&cfg, format!("{SIM}\n[vfio]\nallow = [\"1002:744c\"]\n")).unwrap();
    signal(&d, Signal::SIGHUP);
    assert!(
        holds_within(Duration::from_secs(20), || d
            .log()
            .contains("[vfio] changed but needs a restart to take effect")),
        "{}",
        d.log()
    );
    // So is [kfd] (its GPUs, its workers).
    std::fs::write(&cfg, format!("{SIM}\n[kfd]\nserve = false\n")).unwrap();
    signal(&d, Signal::SIGHUP);
    assert!(
        holds_within(Duration::from_secs(20), || d
            .log()
            .contains("[kfd] changed but needs a restart to take effect")),
        "{}",
        d.log()
    );
    assert_eq!(d.child.try_wait().unwrap(), None);
}

#[test]
fn every_stopping_signal_removes_the_socket_and_sighup_stops_nothing() {
    for s in [Signal::SIGTERM, Signal::SIGINT] {
        let mut d = Rigd::start(SIM);
        signal(&d, Signal::SIGHUP);
        assert!(
            holds_within(Duration::from_secs(20), || d.log().contains("SIGHUP")),
            "{}",
            d.log()
        );
        assert_eq!(d.child.try_wait().unwrap(), None, "SIGHUP ends nothing");
        let socket = d.socket.clone();
        signal(&d, s);
        let status = d.child.wait().unwrap();
        assert!(status.success(), "{s}: {status:?}\n{}", d.log());
        assert!(!socket.exists(), "{s} left the socket behind");
        assert!(d.log().contains("socket removed"), "{}", d.log());
    }
}

fn rigd(args: &[&str], config: Option<&str>) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rigd"));
    if let Some(text) = config {
        let p = dir.path().join("rigd.toml");
        std::fs::write(&p, text).unwrap();
        cmd.arg("--config").arg(p);
    }
    let out = cmd
        .args(args)
        .arg("--socket")
        .arg(dir.path().join("rigd.sock"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_validates_and_exits() {
    let (code, out, _) = rigd(&["--check"], Some(SIM));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("is valid"), "{out}");
    let (code, _, err) = rigd(&["--check"], Some("[limits]\ndevices = 0\n"));
    assert_eq!(code, Some(2));
    assert!(err.contains("limits.devices"), "{err}");
}

#[test]
fn a_bad_log_filter_names_its_key_and_exits_2() {
    for args in [&["--check"][..], &[][..]] {
        let (code, _, err) = rigd(args, Some("[daemon]\nlog = \"rigd=loud\"\n"));
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("daemon.log") && err.contains("rigd=loud"),
            "{err}"
        );
    }
    // RUST_LOG is named too.
    let out = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .args(["--socket", "/nonexistent-dir/rigd.sock"])
        .env("RUST_LOG", "rigd=loud")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("RUST_LOG"), "{err}");
}

#[test]
fn a_missing_configuration_says_the_os_reason() {
    let (code, _, err) = rigd(&["--config", "/nonexistent/rigd.toml"], None);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/nonexistent/rigd.toml") && err.contains("No such file or directory"),
        "{err}"
    );
}

/// Whether device `o`'s lost flag is raised.
fn is_lost(o: &rig_testkit::rigd::Opened) -> bool {
    o.region(o.msg.lost.fd).load_u32(
        o.msg.lost.offset as usize,
        std::sync::atomic::Ordering::Acquire,
    ) != 0
}

/// SIGTERM with clients holding devices: every device is lost as rigd is shutting down
/// before any connection closes, so a client asking why is told, a connection that asks
/// to open another device is refused for the same reason, and rigd then exits cleanly.
#[test]
fn a_clean_stop_tells_connected_clients_rigd_is_shutting_down() {
    let d = Rigd::start(SIM);
    let mut a = d.client("held-at-stop");
    let oa = a.open();
    let mut b = d.client("opens-at-stop");
    let ob = b.open();
    signal(&d, Signal::SIGTERM);
    assert!(
        holds_within(Duration::from_secs(20), || is_lost(&oa) && is_lost(&ob)),
        "{}",
        d.log()
    );
    let r = a.call(Request::DeviceStatus { device: oa.id() });
    let Response::Status(s) = r else {
        panic!("{r:?}\n{}", d.log())
    };
    let why = s.lost.expect("lost");
    assert_eq!(why.kind, rig_proto::FaultKind::StoppedByAdministrator);
    assert_eq!(why.detail, "rigd is shutting down");
    let r = b.call(Request::OpenDevice { gpu: 0 });
    assert!(
        matches!(&r, Response::Error(e) if e.message.contains("rigd is shutting down")),
        "{r:?}"
    );
    assert!(matches!(
        b.call(Request::DeviceStatus { device: ob.id() }),
        Response::Status(s) if s.lost.as_ref().is_some_and(|f| f.detail == "rigd is shutting down")
    ));
    let status = d.stop();
    assert!(status.success(), "{status:?}");
}
