//! rigd under systemd's protocols, without systemd itself: socket activation through
//! `systemd-socket-activate` (the socket unit's part), readiness with the path served, and
//! the watchdog (the service manager's part, a datagram socket here).

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rig_proto::messages::{Request, Response};
use rig_testkit::rigd::SIM;

fn lines(b: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(b)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn socket_activated_rigd_serves_systemds_socket_and_pings_the_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("activated.sock");
    let configured = dir.path().join("configured.sock");
    let notify = dir.path().join("notify");
    let rx = UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(&cfg, SIM).unwrap();
    let log = dir.path().join("rigd.log");
    // systemd-socket-activate drops its own NOTIFY_SOCKET and WATCHDOG_USEC from what rigd
    // inherits; -E passes them as systemd would.
    let mut child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify.display()))
        .arg("--setenv=WATCHDOG_USEC=200000")
        .arg(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(&configured)
        .env("RUST_LOG", "rigd=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("systemd-socket-activate (Debian package systemd) runs");
    // systemd-socket-activate listens first and execs rigd at the first connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "systemd-socket-activate made no socket"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut conn = rig_proto::Connection::connect(&socket, "systemd-test").unwrap();
    let (r, _) = conn.call(&Request::ListGpus, &[]).unwrap();
    assert!(matches!(&r, Response::Gpus(g) if g.len() == 1), "{r:?}");
    let mut buf = [0u8; 512];
    let n = rx.recv(&mut buf).unwrap();
    let ready = lines(&buf[..n]);
    assert!(ready.iter().any(|l| l == "READY=1"), "{ready:?}");
    // READY names the socket systemd passed, not the configured one.
    let status = ready.iter().find(|l| l.starts_with("STATUS=")).unwrap();
    assert!(
        status.contains(&*socket.to_string_lossy()) && !status.contains("configured.sock"),
        "{status}"
    );
    // WATCHDOG_USEC=200000: pings every 100 ms from the serving loop.
    let mut pings = 0;
    while pings < 3 {
        let n = rx.recv(&mut buf).expect("a watchdog ping within 20 s");
        if lines(&buf[..n]) == ["WATCHDOG=1"] {
            pings += 1;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status:?}\n{text}");
    assert!(text.contains("socket activation"), "{text}");
    assert!(text.contains("systemd keeps the socket"), "{text}");
    // The socket is systemd's: rigd leaves its file, and never made the configured one.
    assert!(socket.exists());
    assert!(!configured.exists());
}
