//! The metrics endpoint over real HTTP while clients work: the figures move as they should,
//! and the exposition (Prometheus text format) passes `promtool check metrics` where promtool is installed (CI
//! installs it). What it shows of other users is per uid unless `metrics.per_client`; it
//! listens on loopback unless told otherwise; and no peer, however many connections it
//! opens and however slowly it sends, keeps another scraper out.

use std::io::{Read, Write};
use std::time::Duration;

use crate::work::{Submitter, release};
use rig_proto::messages::{MemoryKind, Request, Response};
use rig_testkit::rigd::{Rigd, SIM, holds_within};

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
        "{SIM}\n[metrics]\nlisten = \"{}\"\nper_client = true\n",
        msock.display()
    ));
    assert!(holds_within(Duration::from_secs(20), || msock.exists()));
    let gpu = ["gpu=\"0\""];
    let b = scrape(&msock);
    assert_eq!(
        value(&b, "rig_gpu_memory_total_bytes", &gpu),
        1073741824.0,
        "{b}"
    );
    assert_eq!(value(&b, "rig_gpu_devices", &gpu), 0.0);
    assert_eq!(value(&b, "rig_gpu_submissions_total", &gpu), 0.0);
    assert_eq!(
        value(&b, "rig_gpu_memory_free_bytes", &gpu),
        1073741824.0,
        "{b}"
    );
    let build = [
        format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        format!("protocol=\"{}\"", rig_proto::VERSION),
    ];
    let build: Vec<&str> = build.iter().map(String::as_str).collect();
    assert_eq!(value(&b, "rig_build_info", &build), 1.0, "{b}");

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
    assert!(holds_within(Duration::from_secs(10), || s.word() == 3));
    let pid = format!("pid=\"{}\"", std::process::id());
    let moved = |b: &str| {
        value(b, "rig_gpu_devices", &gpu) == 1.0
            && value(b, "rig_gpu_clients", &gpu) == 1.0
            && value(b, "rig_gpu_memory_used_bytes", &gpu) >= (1 << 20) as f64
            && value(b, "rig_gpu_submissions_total", &gpu) == 3.0
            && value(b, "rig_gpu_values_completed_total", &gpu) == 3.0
            && value(b, "rig_process_devices", &[&pid]) == 1.0
            && value(b, "rig_process_memory_bytes", &[&pid]) >= (1 << 20) as f64
            && value(b, "rig_user_devices", &["uid=\"0\""]) == 1.0
    };
    let mut b = String::new();
    assert!(
        holds_within(Duration::from_secs(10), || {
            b = scrape(&msock);
            moved(&b)
        }),
        "{b}"
    );
    assert!(value(&b, "rig_connections", &[]) >= 1.0, "{b}");
    assert_eq!(
        value(&b, "rig_gpu_memory_free_bytes", &gpu),
        1073741824.0 - value(&b, "rig_gpu_memory_used_bytes", &gpu),
        "{b}"
    );
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
        holds_within(Duration::from_secs(10), || {
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
        holds_within(Duration::from_secs(10), || {
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

/// The samples of `name` in `body`: (labels, value).
fn samples<'a>(body: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            let labels = series.strip_prefix(name)?;
            (labels.is_empty() || labels.starts_with('{')).then(|| (labels, v.parse().ok()))
        })
        .filter_map(|(labels, v)| Some((labels, v?)))
        .collect()
}

/// Waits until device `o`'s lost flag is raised.
fn wait_lost(o: &rig_testkit::rigd::Opened) {
    let flag = o.region(o.msg.lost.fd);
    let at = o.msg.lost.offset as usize;
    assert!(
        holds_within(Duration::from_secs(20), || flag
            .load_u32(at, std::sync::atomic::Ordering::Acquire)
            != 0),
        "device {} never lost",
        o.id().0
    );
}

/// Every loss counts once, at the loss, however soon its device closes after it: three
/// hangs in a row, a page fault and an administrator's stop, each device closed as soon as
/// its client sees the flag. The reasons are exactly the documented ones, and only the
/// page fault is a fault.
#[test]
fn every_loss_counts_once_under_its_documented_reason() {
    let mdir = tempfile::tempdir().unwrap();
    let msock = mdir.path().join("metrics.sock");
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"{}\"\n",
        msock.display()
    ));
    assert!(holds_within(Duration::from_secs(20), || msock.exists()));
    let mut c = d.client("losses");
    let close = |c: &mut rig_testkit::rigd::Client, o: rig_testkit::rigd::Opened| {
        assert_eq!(
            c.call(Request::CloseDevice { device: o.id() }),
            Response::Done
        );
    };
    // A value submitted with nothing behind it: lost at the hang bound (300 ms).
    for _ in 0..3 {
        let o = c.open();
        Submitter::new(&o).submit(&[], 1);
        wait_lost(&o);
        close(&mut c, o);
    }
    // A release to an address the device's page table does not map.
    let o = c.open();
    Submitter::new(&o).submit(&release(0x1000, 1), 1);
    wait_lost(&o);
    close(&mut c, o);
    // The test runs as root: one of rigd's administrators.
    let o = c.open();
    assert_eq!(
        c.call(Request::AdminStop { device: o.id() }),
        Response::Done
    );
    wait_lost(&o);
    close(&mut c, o);

    let b = scrape(&msock);
    let losses = samples(&b, "rig_gpu_losses_total");
    let reasons: Vec<&str> = losses
        .iter()
        .map(|(l, _)| {
            l.split("reason=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
        })
        .collect();
    let documented = ["fault", "hang", "administrator", "shutdown", "other"];
    assert!(
        reasons.iter().all(|r| documented.contains(r)),
        "undocumented reasons: {reasons:?}\n{b}"
    );
    for (reason, n) in [
        ("hang", 3.0),
        ("fault", 1.0),
        ("administrator", 1.0),
        ("shutdown", 0.0),
        ("other", 0.0),
    ] {
        let l = format!("reason=\"{reason}\"");
        assert_eq!(
            value(&b, "rig_gpu_losses_total", &["gpu=\"0\"", &l]),
            n,
            "{reason}\n{b}"
        );
    }
    assert_eq!(
        value(&b, "rig_gpu_faults_total", &["gpu=\"0\""]),
        1.0,
        "{b}"
    );
    promtool_check(&b);
    // Each loss's log line names its reason as the metric does.
    let log = d.log();
    for (cause, n) in [("hang", 3), ("fault", 1), ("administrator", 1)] {
        let lines = log
            .lines()
            .filter(|l| l.contains("device lost") && l.contains(&format!("cause={cause} ")))
            .count();
        assert_eq!(lines, n, "cause={cause}\n{log}");
    }
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
    assert!(holds_within(Duration::from_secs(20), || {
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

/// Whether any sample of `body` names a client process (its pid or program).
fn names_processes(body: &str) -> bool {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .any(|l| l.contains("pid=\"") || l.contains("program=\""))
}

/// By default other users' work shows per uid only: devices, bytes and processes of each
/// uid, no pid or program; a departed client's series go; `per_client = true` (here by a
/// reload) brings the per-process series back.
#[test]
fn figures_are_per_uid_unless_per_client() {
    let mdir = tempfile::tempdir().unwrap();
    let msock = mdir.path().join("metrics.sock");
    let metrics = format!("[metrics]\nlisten = \"{}\"\n", msock.display());
    let d = Rigd::start(&format!("{SIM}\n{metrics}"));
    assert!(holds_within(Duration::from_secs(20), || msock.exists()));
    let uid = format!("uid=\"{}\"", nix::unistd::geteuid());
    let mut c = d.client("secret-program");
    let o = c.open();
    let r = c.call(Request::Alloc {
        device: o.id(),
        memory: MemoryKind::Device,
        bytes: 1 << 20,
    });
    assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
    let mut b = String::new();
    assert!(
        holds_within(Duration::from_secs(10), || {
            b = scrape(&msock);
            value(&b, "rig_user_devices", &[&uid]) == 1.0
                && value(&b, "rig_user_clients", &[&uid]) == 1.0
                && value(&b, "rig_user_memory_bytes", &[&uid]) >= (1 << 20) as f64
        }),
        "{b}"
    );
    assert!(!names_processes(&b), "{b}");
    assert!(!b.contains("secret-program"), "{b}");
    assert!(b.contains("# TYPE rig_user_devices gauge"), "{b}");
    promtool_check(&b);
    // A reload turns the per-process series on.
    std::fs::write(
        d.dir.path().join("rigd.toml"),
        format!("{SIM}\n{metrics}per_client = true\n"),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let pid = format!("pid=\"{}\"", std::process::id());
    assert!(
        holds_within(Duration::from_secs(10), || {
            b = scrape(&msock);
            value(&b, "rig_process_devices", &[&pid, &uid]) == 1.0
        }),
        "{b}\n{}",
        d.log()
    );
    assert!(d.log().contains("metrics.per_client=true"), "{}", d.log());
    promtool_check(&b);
    // Gone with their client.
    drop(o);
    drop(c);
    assert!(
        holds_within(Duration::from_secs(10), || {
            b = scrape(&msock);
            !b.contains("rig_user_devices{") && !names_processes(&b)
        }),
        "{b}"
    );
}

/// A TCP stream from `from` (any address of 127/8 is this host's) to 127.0.0.1:`port`.
fn tcp_from(from: std::net::Ipv4Addr, port: u16) -> std::net::TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt
        .block_on(async {
            let s = tokio::net::TcpSocket::new_v4()?;
            s.bind((from, 0).into())?;
            s.connect((std::net::Ipv4Addr::LOCALHOST, port).into())
                .await
        })
        .unwrap()
        .into_std()
        .unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// Half a request, then silence (slowloris).
const HALF: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: rigd\r\n";

/// Scrapes over `s`, which must be answered within 1 s of the connect.
fn scrape_in_a_second<S: Read + Write>(s: S, at: std::time::Instant) -> String {
    let (status, _, body) = get(s, "/metrics");
    let took = at.elapsed();
    assert!(status.contains("200"), "{status}");
    assert!(took < Duration::from_secs(1), "the scrape took {took:?}");
    body
}

/// Many idle, half-sent connections, from one peer or from many, neither keep a scraper
/// out nor are kept past the request deadline.
#[test]
fn slow_peers_do_not_keep_scrapers_out() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mdir = tempfile::tempdir().unwrap();
    let msock = mdir.path().join("metrics.sock");
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
    ));
    assert!(holds_within(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    // One peer's 20 connections, then 2 from each of 10 more: past every cap.
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = tcp_from([127, 0, 0, 2].into(), port);
        let _ = s.write_all(HALF);
        held.push(s);
    }
    for last in 3..13 {
        for _ in 0..2 {
            let mut s = tcp_from([127, 0, 0, last].into(), port);
            let _ = s.write_all(HALF);
            held.push(s);
        }
    }
    let at = std::time::Instant::now();
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = scrape_in_a_second(s, at);
    assert!(body.contains("rig_gpu_memory_total_bytes"), "{body}");
    assert!(
        value(&body, "rig_metrics_connections_closed_total", &[]) > 0.0,
        "{body}"
    );
    promtool_check(&body);
    // The one that never finishes its request is closed at the deadline (2 s after its
    // connect), whether or not it was displaced first.
    let mut last = held.pop().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    let t = std::time::Instant::now();
    let n = last.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&buf[..n]));
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    drop(held);
    drop(d);

    // Over a unix socket the peer is a uid: the scraper's own uid here, so its own idle
    // connections give way to its scrape.
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"{}\"\n",
        msock.display()
    ));
    assert!(holds_within(Duration::from_secs(20), || msock.exists()));
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut s = std::os::unix::net::UnixStream::connect(&msock).unwrap();
        let _ = s.write_all(HALF);
        held.push(s);
    }
    let at = std::time::Instant::now();
    let s = std::os::unix::net::UnixStream::connect(&msock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    scrape_in_a_second(s, at);
    drop(held);
    drop(d);
}

/// A port alone listens on 127.0.0.1 only; an address beyond loopback needs
/// `metrics.remote`, at `--check` as at start, and is warned of in the log.
#[test]
fn metrics_listen_on_loopback_unless_remote() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Rigd::start(&format!("{SIM}\n[metrics]\nlisten = \"{port}\"\n"));
    assert!(holds_within(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    assert!(
        d.log().contains(&format!("metrics=127.0.0.1:{port}")),
        "{}",
        d.log()
    );
    // Bound to 127.0.0.1, not to every address: another of this host's refuses.
    assert!(std::net::TcpStream::connect(("127.0.0.2", port)).is_err());
    assert!(!d.log().contains("beyond loopback"), "{}", d.log());
    drop(d);
    // With metrics.remote it serves every address, and the log warns that it does.
    let d = Rigd::start(&format!(
        "{SIM}\n[metrics]\nlisten = \"0.0.0.0:{port}\"\nremote = true\n"
    ));
    assert!(holds_within(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.2", port)).is_ok()
    }));
    let warned = d
        .log()
        .lines()
        .find(|l| l.contains("beyond loopback"))
        .map(str::to_owned);
    assert!(
        warned
            .as_deref()
            .is_some_and(|l| l.contains("WARN") && l.contains(&format!("metrics=0.0.0.0:{port}"))),
        "{}",
        d.log()
    );
    drop(d);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(
        &cfg,
        format!("{SIM}\n[metrics]\nlisten = \"0.0.0.0:{port}\"\n"),
    )
    .unwrap();
    for check in [true, false] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rigd"));
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(dir.path().join("rigd.sock"));
        if check {
            cmd.arg("--check");
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("metrics.listen") && err.contains("metrics.remote"),
            "{err}"
        );
    }
}
