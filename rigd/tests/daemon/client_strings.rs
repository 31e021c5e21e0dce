//! Every string a client sends is bounded before rigd keeps it (issue 21, hole 1): a hello
//! whose program name is as long as a frame, from 64 connections of one user, is refused
//! with the bound named and costs rigd no memory; over-long names and reasons in requests
//! are refused; a name at the bound is kept and listed intact; rig-client's own hello cuts a
//! long name; rigd's log never repeats client data unbounded.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rig_proto::frame;
use rig_proto::messages::{
    DeviceId, ErrorCode, ErrorReply, Hello, HelloReply, ImageId, Request, Response,
};
use rig_proto::{MAX_FRAME, MOST_ENTRY_NAME, MOST_HELLO, MOST_PROGRAM, MOST_STOP_REASON};
use rig_testkit::rigd::{Rigd, SIM, code, holds_within};

/// A memory field of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    rig_testkit::rigd::status_bytes(pid, key) / 1024
}

/// A hello naming `program`, framed by hand (its length may pass what a client sends).
fn hello(program: String) -> Vec<u8> {
    frame::encode(&Hello {
        magic: rig_proto::MAGIC,
        version: rig_proto::VERSION,
        program,
    })
    .unwrap()
}

/// Sends a hello payload on a new connection and reads rigd's answer; the connection is
/// returned too, so the caller holds it.
fn say_hello(d: &Rigd, payload: &[u8]) -> (HelloReply, UnixStream) {
    let s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    // rigd may refuse after the header, before the payload is all sent: a broken pipe
    // here is that refusal, which waits to be read.
    let _ = frame::write_frame(s.as_fd(), payload, &[]);
    let f = frame::read_frame(s.as_fd())
        .expect("rigd answers the hello")
        .expect("an answer before the close");
    (frame::decode(&f.payload).unwrap(), s)
}

/// The refusal a hello got; panics on a welcome.
fn refusal(reply: HelloReply) -> ErrorReply {
    match reply {
        HelloReply::Refused { error, .. } => error,
        HelloReply::Welcome(_) => panic!("rigd welcomed a hello past its bounds"),
    }
}

/// The refusal of a request; panics on any other answer.
fn refused(r: Response) -> ErrorReply {
    match r {
        Response::Error(e) => e,
        other => panic!("a request past its bounds was answered {other:?}"),
    }
}

/// Checks that `e` is a `BadRequest` naming `limit` and its value.
fn names_bound(e: &ErrorReply, limit: &str, value: usize) {
    assert_eq!(e.code, ErrorCode::BadRequest, "{e:?}");
    assert!(
        e.message.contains(limit) && e.message.contains(&value.to_string()),
        "the refusal does not name {limit} ({value}): {}",
        e.message
    );
}

/// rigd's log holds no line longer than a bounded field or two, and is small.
fn log_is_bounded(d: &Rigd, most_bytes: usize) {
    let log = d.log();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(
        longest <= 4096,
        "a log line of {longest} bytes repeats client data"
    );
    assert!(
        log.len() <= most_bytes,
        "rigd logged {} bytes after the attack",
        log.len()
    );
    assert!(log.lines().all(|l| !l.contains("panicked")), "{log}");
}

#[test]
fn frame_sized_hellos_from_64_connections_are_refused_and_cost_nothing() {
    let d = Rigd::start(SIM);
    // One client in: rigd's own memory is made before the attack is measured.
    let mut other = d.client("other");
    let o = other.open();
    let (rss0, hwm0) = (status_kib(d.pid(), "VmRSS"), status_kib(d.pid(), "VmHWM"));
    // As long a name as a frame holds, from every slot one user has (connections.per_uid).
    let bomb = hello("x".repeat(MAX_FRAME - 64));
    let mut held = Vec::new();
    for _ in 0..64 {
        let (reply, s) = say_hello(&d, &bomb);
        names_bound(&refusal(reply), "MOST_HELLO", MOST_HELLO);
        held.push(s);
    }
    // Each refused hello cost rigd its receive buffer at most, not the name: 64 copies of
    // one would be 1 GiB.
    let (rss1, hwm1) = (status_kib(d.pid(), "VmRSS"), status_kib(d.pid(), "VmHWM"));
    assert!(
        hwm1.saturating_sub(hwm0) <= 64 << 10,
        "rigd's VmHWM grew from {hwm0} to {hwm1} KiB"
    );
    assert!(
        rss1.saturating_sub(rss0) <= 64 << 10,
        "rigd's VmRSS grew from {rss0} to {rss1} KiB"
    );
    // The refused connections hold no slot: the same user connects again at once.
    let mut again = d.client("again");
    assert!(matches!(again.call(Request::ListClients), Response::Clients(c) if c.len() == 2));
    drop(held);
    // The other user was served throughout and still is.
    assert!(matches!(
        other.call(Request::DeviceStatus { device: o.id() }),
        Response::Status(_)
    ));
    log_is_bounded(&d, 256 << 10);
}

#[test]
fn long_strings_in_requests_are_refused_naming_their_bound() {
    let d = Rigd::start(SIM);
    // A hello of a small frame whose name passes the bound.
    let (reply, _s) = say_hello(&d, &hello("p".repeat(MOST_PROGRAM + 1)));
    names_bound(&refusal(reply), "MOST_PROGRAM", MOST_PROGRAM);
    let (reply, _s) = say_hello(&d, &hello("p".repeat(MOST_HELLO - 32)));
    names_bound(&refusal(reply), "MOST_PROGRAM", MOST_PROGRAM);

    let mut c = d.client("strings");
    let o = c.open();
    let nobody = DeviceId(u64::MAX);
    for len in [MOST_ENTRY_NAME + 1, MAX_FRAME - 64] {
        let name = "k".repeat(len);
        let e = refused(c.call(Request::ResolveEntry {
            device: o.id(),
            image: ImageId(0),
            name: name.clone(),
        }));
        names_bound(&e, "MOST_ENTRY_NAME", MOST_ENTRY_NAME);
        let e = refused(c.call(Request::Prepare {
            device: o.id(),
            image: ImageId(0),
            name,
        }));
        names_bound(&e, "MOST_ENTRY_NAME", MOST_ENTRY_NAME);
    }
    for len in [MOST_STOP_REASON + 1, MAX_FRAME - 64] {
        let e = refused(c.call(Request::StopDevice {
            device: o.id(),
            last: 0,
            fault: Some("r".repeat(len)),
        }));
        names_bound(&e, "MOST_STOP_REASON", MOST_STOP_REASON);
    }
    // Refused before anything was done: the device is neither stopped nor lost.
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    assert!(!s.stopped && s.lost.is_none(), "{s:?}");
    // At the bound, a name is a name: it reaches the request's own checks.
    let name = "k".repeat(MOST_ENTRY_NAME);
    let r = c.call(Request::ResolveEntry {
        device: nobody,
        image: ImageId(0),
        name: name.clone(),
    });
    assert_eq!(code(&r), Some(ErrorCode::NoSuchDevice), "{r:?}");
    let r = c.call(Request::Prepare {
        device: o.id(),
        image: ImageId(0),
        name,
    });
    assert_eq!(r, Response::Done);
    // A reason at the bound, of two-byte characters, is kept whole.
    let why = "é".repeat(MOST_STOP_REASON / 2);
    assert_eq!(
        c.call(Request::StopDevice {
            device: o.id(),
            last: 0,
            fault: Some(why.clone()),
        }),
        Response::Done
    );
    let Response::Status(s) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    assert_eq!(s.lost.map(|f| f.detail), Some(why));
    log_is_bounded(&d, 256 << 10);
}

#[test]
fn a_name_at_the_bound_is_kept_and_listed_intact_and_a_long_one_cut_by_the_client() {
    let d = Rigd::start(SIM);
    // Exactly the bound, in two-byte characters: kept and shown byte for byte.
    let exact = "ü".repeat(MOST_PROGRAM / 2);
    assert_eq!(exact.len(), MOST_PROGRAM);
    let mut a = d.client(&exact);
    a.open();
    // A longer argv[0]: the client library cuts it at a character boundary and connects.
    let long = format!("x{}", "ü".repeat(MOST_PROGRAM));
    let mut b = d.client(&long);
    let Response::Clients(clients) = b.call(Request::ListClients) else {
        panic!()
    };
    let names: Vec<&str> = clients.iter().map(|c| c.program.as_str()).collect();
    assert!(names.contains(&exact.as_str()), "{names:?}");
    let cut = names
        .iter()
        .find(|n| n.starts_with('x'))
        .expect("the long name's client is listed");
    assert!(
        cut.len() <= MOST_PROGRAM && cut.len() >= MOST_PROGRAM - 1 && long.starts_with(cut),
        "the client sent {} bytes of its {}-byte name",
        cut.len(),
        long.len()
    );
    let Response::Processes(ps) = b.call(Request::ListProcesses) else {
        panic!()
    };
    let hellos: Vec<&String> = ps.iter().flat_map(|p| &p.hello).collect();
    assert!(hellos.iter().any(|h| **h == exact), "{hellos:?}");
    assert!(hellos.iter().all(|h| h.len() <= MOST_PROGRAM), "{hellos:?}");
    // Gone with its client.
    drop(a);
    assert!(holds_within(Duration::from_secs(10), || {
        matches!(b.call(Request::ListClients),
            Response::Clients(c) if c.iter().all(|c| c.program != exact))
    }));
    log_is_bounded(&d, 256 << 10);
}
