//! Connection slots against the real rigd, as an attacker holds them: hundreds of idle and
//! half-frame connections from one allowed user, a storm of never-hello connections from a
//! refused one, and a well-behaved client of another user served within 100 ms meanwhile;
//! idle connections that hold nothing closed; supplementary groups taken from the socket,
//! not from `/proc/<pid>` (the backlog race).
//!
//! The attackers run as other users: the test binary runs itself again as a child (the
//! `child_*` tests, which do nothing unless their variable is set) with another uid, so
//! these tests need root and are skipped, saying so, without it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rig_proto::frame;
use rig_proto::messages::{ErrorCode, Hello, HelloReply, Request, Response};
use rig_testkit::rigd::{Rigd, holds_within};

/// Allowed by the test's `[access]`; holds idle connections.
const IDLER: u32 = 65534;
/// Allowed; holds half-frame connections.
const HALVER: u32 = 65532;
/// Refused by `[access]`; storms.
const STRANGER: u32 = 65533;

fn hello(program: &str) -> Vec<u8> {
    frame::encode(&Hello {
        magic: rig_proto::MAGIC,
        version: rig_proto::VERSION,
        program: program.into(),
    })
    .unwrap()
}

/// The test binary run again as `uid` (or as root if `None`) for the child test `name`.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Helper {
    fn start(name: &str, uid: Option<u32>, env: &[(&str, String)]) -> Helper {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Helper {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// What follows `tag` on the next line that has it.
    fn expect(&self, tag: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some((_, rest)) = l.split_once(tag) {
                        return rest.trim().to_owned();
                    }
                }
                Err(_) => panic!("the helper printed no {tag:?} within {timeout:?}"),
            }
        }
    }

    /// Closes its stdin (its signal to finish) and waits for it.
    fn finish(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().is_ok_and(|s| s.is_none())
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Blocks until stdin closes (the parent's signal to finish).
fn wait_for_parent() {
    let mut buf = [0u8; 16];
    while std::io::stdin().read(&mut buf).is_ok_and(|n| n > 0) {}
}

fn say(line: &str) {
    // A line of its own: libtest may have left "test name ... " unfinished.
    println!("\n{line}");
    std::io::stdout().flush().unwrap();
}

/// The child half of `no_user_can_take_the_slots_of_another`: opens `RIGD_TEST_COUNT`
/// connections and says hello on each; in mode `half` it then sends half a frame on every
/// welcomed one and reports how long rigd took to close them. It holds everything until
/// its stdin closes.
#[test]
fn child_hold() {
    let Ok(socket) = std::env::var("RIGD_TEST_HOLD") else {
        return;
    };
    let half = std::env::var("RIGD_TEST_MODE").as_deref() == Ok("half");
    let count: usize = std::env::var("RIGD_TEST_COUNT").unwrap().parse().unwrap();
    let mut conns = Vec::new();
    for _ in 0..count {
        let s = UnixStream::connect(&socket).unwrap();
        // A connection refused at accept may be closed before the hello goes (EPIPE); its
        // refusal is still there to read.
        let _ = frame::write_frame(s.as_fd(), &hello("holder"), &[]);
        conns.push(s);
    }
    // Every hello is answered (welcome or refusal) at once, or counted as unanswered.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut welcomed, mut refused, mut unanswered) = (Vec::new(), 0, 0);
    for s in conns {
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match frame::read_frame(s.as_fd()) {
            Ok(Some(f)) => match frame::decode::<HelloReply>(&f.payload).unwrap() {
                HelloReply::Welcome(_) => welcomed.push(s),
                HelloReply::Refused { error, .. } => {
                    assert_eq!(error.code, ErrorCode::Quota, "{}", error.message);
                    refused += 1;
                }
            },
            _ => unanswered += 1,
        }
    }
    let sent = Instant::now();
    if half {
        // A header announcing 64 bytes, and 10 of them.
        let mut bytes = vec![64, 0, 0, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&[0; 10]);
        for s in &welcomed {
            (&*s).write_all(&bytes).unwrap();
        }
    }
    say(&format!("READY {} {refused} {unanswered}", welcomed.len()));
    if half {
        let mut longest = Duration::ZERO;
        let mut shortest = Duration::MAX;
        let mut open = 0;
        for s in &welcomed {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut b = [0u8; 64];
            match (&*s).read(&mut b) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    open += 1
                }
                // Closed (0 bytes, or reset); rigd sends nothing else here.
                _ => {
                    let t = sent.elapsed();
                    longest = longest.max(t);
                    shortest = shortest.min(t);
                }
            }
        }
        say(&format!(
            "CLOSED {} {} {open}",
            shortest.as_millis(),
            longest.as_millis()
        ));
    }
    wait_for_parent();
    drop(welcomed);
}

/// The child half of the storm: connects again and again and never says hello, holding
/// the last 128 connections, until its stdin closes (20 s at most).
#[test]
fn child_storm() {
    let Ok(socket) = std::env::var("RIGD_TEST_STORM") else {
        return;
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (socket, stop) = (socket.clone(), stop.clone());
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(20);
                let mut held = std::collections::VecDeque::new();
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                    if let Ok(s) = UnixStream::connect(&socket) {
                        n += 1;
                        held.push_back(s);
                        if held.len() > 128 {
                            held.pop_front();
                        }
                    }
                }
                n
            })
        })
        .collect();
    say("STORMING");
    wait_for_parent();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    say(&format!("STORM {n}"));
}

/// One well-behaved connection: connect, hello, `ListGpus`; its time, bounded at 2 s.
fn served_in(d: &Rigd) -> Result<Duration, String> {
    let t = Instant::now();
    let s = UnixStream::connect(&d.socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut c = rig_proto::Connection::handshake(s, "polite").map_err(|e| e.to_string())?;
    match c.call(&Request::ListGpus, &[]) {
        Ok((Response::Gpus(_), _)) => Ok(t.elapsed()),
        other => Err(format!("{other:?}")),
    }
}

fn root_or_skip() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run clients as other users; skipping");
        return false;
    }
    true
}

/// A rigd whose socket any local user reaches, so that its own checks decide.
fn open_rigd(config: &str) -> Rigd {
    let d = Rigd::start(&format!(
        "[daemon]\nmode = 0o666\n{config}\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n"
    ));
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    d
}

#[test]
fn no_user_can_take_the_slots_of_another() {
    if !root_or_skip() {
        return;
    }
    let d = open_rigd(&format!(
        "[access]\nany = false\nusers = [\"{IDLER}\", \"{HALVER}\"]\n\
         [connections]\nper_uid = 32\nhello_ms = 2000\nframe_ms = 3000\nidle_ms = 0\n"
    ));
    let socket = d.socket.display().to_string();
    let hold = |uid, mode: &str| {
        Helper::start(
            rig_testkit::test_name!(child_hold),
            Some(uid),
            &[
                ("RIGD_TEST_HOLD", socket.clone()),
                ("RIGD_TEST_MODE", mode.into()),
                ("RIGD_TEST_COUNT", "300".into()),
            ],
        )
    };
    let mut storm = Helper::start(
        rig_testkit::test_name!(child_storm),
        Some(STRANGER),
        &[("RIGD_TEST_STORM", socket.clone())],
    );
    storm.expect("STORMING", Duration::from_secs(30));
    let idle = hold(IDLER, "idle");
    let ready = idle.expect("READY", Duration::from_secs(30));
    assert_eq!(
        ready, "32 268 0",
        "idle: welcomed, refused at the cap, unanswered"
    );
    let half = hold(HALVER, "half");
    let ready = half.expect("READY", Duration::from_secs(30));
    assert_eq!(
        ready, "32 268 0",
        "half: welcomed, refused at the cap, unanswered"
    );

    // 64 idle and half-frame connections held, 536 refused, a storm going on: root is
    // served at once, every time.
    let mut times = Vec::new();
    for _ in 0..30 {
        times.push(served_in(&d).unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    let worst = times.iter().max().copied().unwrap();
    assert!(
        worst < Duration::from_millis(100),
        "worst {worst:?} of {times:?}"
    );
    eprintln!("a well-behaved client's worst connect, hello and request: {worst:?}");

    // The half frames are closed once frame_ms (3 s) passed, not before.
    let closed = half.expect("CLOSED", Duration::from_secs(30));
    let v: Vec<u128> = closed.split(' ').map(|x| x.parse().unwrap()).collect();
    assert_eq!(v[2], 0, "half-frame connections left open");
    assert!(v[0] >= 2900 && v[1] < 10_000, "closed after {closed} ms");
    // ... so their user may connect again.
    assert!(holds_within(Duration::from_secs(10), || welcomed_as(
        HALVER, &socket
    )));
    drop(storm.stdin.take());
    let n = storm.expect("STORM ", Duration::from_secs(30));
    eprintln!("the storm made {n} connections, each refused at accept");
    assert!(n.parse::<u64>().unwrap() > 1000);
    storm.finish();
    idle.finish();
    half.finish();
    let log = d.log();
    assert!(log.contains("peer not allowed by [access]"));
    assert!(log.contains("connections.per_uid"));
    assert!(log.contains("connections.frame_ms"));
}

/// Whether `uid` is welcomed: a probe as that user.
fn welcomed_as(uid: u32, socket: &str) -> bool {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_hello),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_TEST_HELLO", socket)
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("RESULT welcome")
}

/// Says hello as whatever user it runs as and prints what rigd answered.
#[test]
fn child_hello() {
    let Ok(socket) = std::env::var("RIGD_TEST_HELLO") else {
        return;
    };
    match rig_proto::Connection::connect(&socket, "probe") {
        Ok(_) => say("RESULT welcome"),
        Err(rig_proto::Error::Refused(e)) => say(&format!("RESULT refused {:?}", e.code)),
        Err(e) => say(&format!("RESULT error {e}")),
    }
}

#[test]
fn idle_connections_holding_nothing_are_closed() {
    let d = Rigd::start(&format!(
        "[connections]\nidle_ms = 300\n{}",
        rig_testkit::rigd::SIM
    ));
    let mut quiet = d.client("quiet");
    let mut working = d.client("working");
    let _device = working.open();
    // The one holding nothing is closed; its call fails once it is.
    assert!(holds_within(Duration::from_secs(10), || {
        // Silent for longer than idle_ms before each probe.
        std::thread::sleep(Duration::from_millis(500));
        quiet.try_call(Request::ListGpus).is_err()
    }));
    // The one holding a device is kept however long it is silent.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(matches!(working.call(Request::ListGpus), Response::Gpus(_)));
    assert!(d.log().contains("connections.idle_ms"));
}

/// The child half of `groups_come_from_the_socket_not_from_proc`: connects with the groups
/// of `RIGD_TEST_AT_CONNECT` (none or the gid), then takes `RIGD_TEST_GID` as its only
/// group, so `/proc/<pid>/status` shows it, then says hello.
#[test]
fn child_backlog_groups() {
    let Ok(socket) = std::env::var("RIGD_TEST_GROUPS") else {
        return;
    };
    use nix::unistd::{Gid, Uid, seteuid, setgroups, setresgid, setresuid};
    let gid = Gid::from_raw(std::env::var("RIGD_TEST_GID").unwrap().parse().unwrap());
    let member = std::env::var("RIGD_TEST_AT_CONNECT").as_deref() == Ok("member");
    let nobody = 65534;
    let at_connect = if member { vec![gid] } else { Vec::new() };
    setgroups(&at_connect).unwrap();
    setresgid(
        Gid::from_raw(nobody),
        Gid::from_raw(nobody),
        Gid::from_raw(0),
    )
    .unwrap();
    setresuid(
        Uid::from_raw(nobody),
        Uid::from_raw(nobody),
        Uid::from_raw(0),
    )
    .unwrap();
    let s = UnixStream::connect(&socket).unwrap();
    // Now the process (the pid rigd sees) is in the allowed group; its connection was not.
    seteuid(Uid::from_raw(0)).unwrap();
    setgroups(&[gid]).unwrap();
    seteuid(Uid::from_raw(nobody)).unwrap();
    say("CONNECTED");
    match rig_proto::Connection::handshake(s, "backlog") {
        Ok(_) => say("RESULT welcome"),
        Err(rig_proto::Error::Refused(e)) => say(&format!("RESULT refused {:?}", e.code)),
        Err(e) => say(&format!("RESULT error {e}")),
    }
}

/// Sends SIGCONT to rigd when dropped, so a failing test does not leave it stopped.
struct Stopped(nix::unistd::Pid);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

#[test]
fn groups_come_from_the_socket_not_from_proc() {
    if !root_or_skip() {
        return;
    }
    // A group nobody has: only membership of it lets uid 65534 in.
    let gid = 4242u32;
    let d = open_rigd(&format!(
        "[access]\nany = false\nusers = []\ngroups = [\"{gid}\"]\n"
    ));
    let socket = d.socket.display().to_string();
    let run = |at_connect: &str| {
        // rigd stopped, so the connection waits in the backlog while the process changes
        // its groups, and rigd looks only after.
        let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        let guard = Stopped(pid);
        assert!(holds_within(Duration::from_secs(5), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
        }));
        let child = Helper::start(
            rig_testkit::test_name!(child_backlog_groups),
            None,
            &[
                ("RIGD_TEST_GROUPS", socket.clone()),
                ("RIGD_TEST_GID", gid.to_string()),
                ("RIGD_TEST_AT_CONNECT", at_connect.into()),
            ],
        );
        child.expect("CONNECTED", Duration::from_secs(30));
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.child.id())).unwrap();
        let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert_eq!(groups.split_whitespace().nth(1), Some("4242"), "{groups}");
        drop(guard);
        let result = child.expect("RESULT", Duration::from_secs(30));
        child.finish();
        result
    };
    assert_eq!(run("none"), "refused PermissionDenied");
    // A member when it connected is welcomed: the groups are the socket's.
    assert_eq!(run("member"), "welcome");
}
