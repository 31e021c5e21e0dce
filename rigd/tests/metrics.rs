//! The metrics endpoint over real HTTP while clients work: the figures move as they should,
//! and the exposition (Prometheus text format) passes `promtool check metrics` where promtool is installed (CI
//! installs it).

mod common;
mod work;

use std::io::{Read, Write};
use std::time::Duration;

use common::{Rigd, SIM, eventually};
use rig_proto::messages::{MemoryKind, Request, Response};
use work::{Submitter, release};

/// `GET /metrics` over `connect()`'s stream; (status line, content type, body).
fn get<S: Read + Write>(mut s: S, path: &str) -> (String, String, String) {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: rigd\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap_or("").to_owned();
    let kind = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type: "))
        .unwrap_or("")
        .to_owned();
    (status, kind, body.to_owned())
}

fn scrape(sock: &std::path::Path) -> String {
    let (status, kind, body) = get(
        std::os::unix::net::UnixStream::connect(sock).unwrap(),
        "/metrics",
    );
    assert!(status.contains("200"), "{status}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    body
}

/// The value of the first sample whose line starts with `name` and contains every one of
/// `labels`; 0 when there is none.
fn value(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|x| l.contains(x))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn promtool_check(body: &str) {
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install promtool (Debian package prometheus)"
        );
        eprintln!("promtool not installed; exposition not linted");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn figures_move_while_clients_work() {
    let mdir = tempfile::tempdir().unwrap();
    let msock = mdir.path().join("metrics.sock");
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"{}\"\n",
        msock.display()
    ));
    assert!(eventually(Duration::from_secs(20), || msock.exists()));
    let gpu = ["gpu=\"0\""];
    let b = scrape(&msock);
    assert_eq!(
        value(&b, "rig_gpu_memory_total_bytes", &gpu),
        1073741824.0,
        "{b}"
    );
    assert_eq!(value(&b, "rig_gpu_devices", &gpu), 0.0);
    assert_eq!(value(&b, "rig_gpu_submissions_total", &gpu), 0.0);

    let mut c = d.client("metrics-test");
    let o = c.open();
    let r = c.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 1 << 20,
    });
    assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
    let word = o.msg.word.memory.gpu_address;
    let mut s = Submitter::new(&o);
    for v in 1..=3 {
        s.submit(&release(word, v), v);
    }
    assert!(eventually(Duration::from_secs(10), || s.word() == 3));
    let pid = format!("pid=\"{}\"", std::process::id());
    let moved = |b: &str| {
        value(b, "rig_gpu_devices", &gpu) == 1.0
            && value(b, "rig_gpu_clients", &gpu) == 1.0
            && value(b, "rig_gpu_memory_used_bytes", &gpu) >= (1 << 20) as f64
            && value(b, "rig_gpu_submissions_total", &gpu) == 3.0
            && value(b, "rig_gpu_values_completed_total", &gpu) == 3.0
            && value(b, "rig_process_devices", &[&pid]) == 1.0
            && value(b, "rig_process_memory_bytes", &[&pid]) >= (1 << 20) as f64
    };
    let mut b = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            b = scrape(&msock);
            moved(&b)
        }),
        "{b}"
    );
    assert!(value(&b, "rig_connections", &[]) >= 1.0, "{b}");
    assert!(
        value(
            &b,
            "rig_request_duration_seconds_count",
            &["kind=\"open-device\""]
        ) >= 1.0,
        "{b}"
    );
    assert!(
        value(
            &b,
            "rig_request_duration_seconds_count",
            &["kind=\"alloc\""]
        ) >= 1.0,
        "{b}"
    );
    // A growth makes a compute queue of the next generation.
    let r = c.call(Request::Grow {
        device: o.id(),
        compute_bytes: 200_000,
        copy_bytes: 0,
        segment_bytes: 0,
        installed: Default::default(),
    });
    assert!(matches!(r, Response::Grown(_)), "{r:?}");
    // A value submitted with no work behind it: the GPU is busy until the hang bound
    // (300 ms) loses the device.
    s.submit(&[], 4);
    assert!(
        eventually(Duration::from_secs(10), || {
            b = scrape(&msock);
            value(&b, "rig_gpu_losses_total", &["reason=\"hang\""]) == 1.0
        }),
        "{b}"
    );
    assert_eq!(value(&b, "rig_gpu_queue_growths_total", &gpu), 1.0, "{b}");
    // The loss woke waiters with value 4; it was submitted, never completed.
    assert_eq!(value(&b, "rig_gpu_submissions_total", &gpu), 4.0, "{b}");
    assert_eq!(
        value(&b, "rig_gpu_values_completed_total", &gpu),
        3.0,
        "{b}"
    );
    assert!(value(&b, "rig_gpu_busy_seconds_total", &gpu) > 0.1, "{b}");
    assert!(
        eventually(Duration::from_secs(10), || {
            b = scrape(&msock);
            value(&b, "rig_gpu_busy_ratio", &gpu) > 0.0
        }),
        "{b}"
    );
    promtool_check(&b);
    // Other paths are refused, and the endpoint stays.
    let (status, _, _) = get(
        std::os::unix::net::UnixStream::connect(&msock).unwrap(),
        "/",
    );
    assert!(status.contains("404"), "{status}");
    drop(o);
    drop(c);
    let status = d.stop();
    assert!(status.success());
    assert!(!msock.exists(), "rigd removes its metrics socket at exit");
}

#[test]
fn tcp_endpoint_serves_and_is_off_by_default() {
    let d = Rigd::start(SIM);
    assert!(!d.log().contains("serving metrics"), "{}", d.log());
    drop(d);
    // A free port: bind one, let it go, hand it to rigd.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
    ));
    let mut body = String::new();
    assert!(eventually(Duration::from_secs(20), || {
        let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        let (status, _, b) = get(s, "/metrics");
        body = b;
        status.contains("200")
    }));
    assert!(body.contains("rig_gpu_memory_total_bytes"), "{body}");
    assert!(
        body.contains("# TYPE rig_gpu_memory_total_bytes gauge"),
        "{body}"
    );
    assert!(d.log().contains("serving metrics"), "{}", d.log());
}
