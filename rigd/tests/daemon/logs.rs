//! Where rigd's log goes: journald's native protocol when `$JOURNAL_STREAM` names its
//! stderr, plain lines otherwise; and rigctl-like inspection at debug only.

use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use rig_proto::messages::{Request, Response};
use rig_testkit::rigd::{Rigd, SIM, holds_within};

/// Runs `rigd --check`-free startup to its first lines with `journal_stream` computed from
/// the log file, and returns what reached the file.
fn first_lines(journal_stream: impl Fn(&std::fs::Metadata) -> String) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(&cfg, SIM).unwrap();
    let log = dir.path().join("rigd.log");
    let file = std::fs::File::create(&log).unwrap();
    let stream = journal_stream(&file.metadata().unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(dir.path().join("rigd.sock"))
        .env("JOURNAL_STREAM", stream)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap();
    let sock = dir.path().join("rigd.sock");
    assert!(holds_within(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    }));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn journal_stream_naming_stderr_selects_journald() {
    let text = first_lines(|m| format!("{}:{}", m.dev(), m.ino()));
    if std::path::Path::new("/run/systemd/journal/socket").exists() {
        // Lines went to journald, not to the file.
        assert!(!text.contains("rigd ready"), "{text}");
    } else {
        // No journald here: rigd says so once and falls back to plain lines.
        assert!(text.contains("cannot reach journald"), "{text}");
        assert!(text.contains("rigd ready"), "{text}");
    }
}

#[test]
fn journal_stream_naming_another_file_keeps_plain_lines() {
    let text = first_lines(|m| format!("{}:{}", m.dev(), m.ino() + 1));
    assert!(!text.contains("journald"), "{text}");
    assert!(
        text.contains("INFO") && text.contains("rigd ready"),
        "{text}"
    );
}

#[test]
fn inspection_only_connections_log_at_debug() {
    let d = Rigd::start_wrapped(SIM, &["env", "RUST_LOG=info"]);
    for _ in 0..3 {
        let mut c = d.client("rigctl");
        assert!(matches!(c.call(Request::ListClients), Response::Clients(_)));
    }
    let mut c = d.client("worker");
    let _o = c.open();
    drop(_o);
    drop(c);
    assert!(
        holds_within(Duration::from_secs(20), || d.log().contains("client gone")),
        "{}",
        d.log()
    );
    let log = d.log();
    // One info line for the worker's device, one for its leaving; none for the rigctl calls.
    assert!(!log.contains("program=rigctl"), "{log}");
    assert!(
        log.contains("device opened") && log.contains("program=worker"),
        "{log}"
    );
    assert_eq!(log.matches("client gone").count(), 1, "{log}");
}

#[test]
fn a_client_that_closed_its_devices_leaves_at_info() {
    let d = Rigd::start_wrapped(SIM, &["env", "RUST_LOG=info"]);
    let mut c = d.client("tidy");
    let o = c.open();
    let r = c.call(Request::CloseDevice { device: o.id() });
    assert!(matches!(r, Response::Done), "{r:?}");
    drop(c);
    assert!(
        holds_within(Duration::from_secs(20), || d.log().contains("client gone")),
        "{}",
        d.log()
    );
}
