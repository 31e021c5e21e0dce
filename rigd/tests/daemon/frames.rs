//! Malformed frames from a property generator: rigd answers with an error or closes the
//! connection, never panics or hangs, and keeps serving everyone else.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use proptest::prelude::*;
use rig_proto::frame;
use rig_proto::messages::{Hello, HelloReply, Request, Response};
use rig_testkit::rigd::{Rigd, SIM};

fn greeted(d: &Rigd) -> UnixStream {
    let s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Hello {
        magic: rig_proto::MAGIC,
        version: rig_proto::VERSION,
        program: "fuzz".into(),
    };
    frame::write_frame(s.as_fd(), &frame::encode(&hello).unwrap(), &[]).unwrap();
    let f = frame::read_frame(s.as_fd()).unwrap().unwrap();
    assert!(matches!(
        frame::decode::<HelloReply>(&f.payload).unwrap(),
        HelloReply::Welcome(_)
    ));
    s
}

/// Reads whatever rigd sends until it closes or stops sending; a read that times out means
/// rigd is stuck on this connection.
fn drain(mut s: UnixStream) -> Result<(), String> {
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(format!("rigd neither answered nor closed: {e}")),
        }
    }
}

fn still_serves(d: &Rigd) {
    let mut c = d.client("check");
    assert!(matches!(c.call(Request::ListGpus), Response::Gpus(_)));
}

#[test]
fn malformed_frames() {
    let d = Rigd::start(SIM);
    let mut cfg = ProptestConfig::with_cases(48);
    cfg.failure_persistence = None;
    proptest!(cfg, |(
        junk in proptest::collection::vec(any::<u8>(), 0..600),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        mode in 0u8..4,
    )| {
        let mut s = if mode == 3 { UnixStream::connect(&d.socket).unwrap() } else { greeted(&d) };
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        match mode {
            // Raw bytes after the handshake, or instead of it.
            0 | 3 => { let _ = s.write_all(&junk); }
            // A well-framed payload that is no request: a BadRequest answer, and the
            // connection stays in step.
            1 => {
                frame::write_frame(s.as_fd(), &payload, &[]).unwrap();
                // A payload that happens to be a valid request gets its answer instead.
                if let Ok(Some(f)) = frame::read_frame(s.as_fd()) {
                    let r: Response = frame::decode(&f.payload).unwrap();
                    if let Response::Error(e) = r {
                        prop_assert_eq!(e.code, rig_proto::messages::ErrorCode::BadRequest);
                    }
                    frame::write_frame(s.as_fd(), &frame::encode(&Request::ListGpus).unwrap(), &[]).unwrap();
                    let f = frame::read_frame(s.as_fd()).unwrap().unwrap();
                    prop_assert!(matches!(frame::decode::<Response>(&f.payload).unwrap(), Response::Gpus(_)));
                }
            }
            // A header announcing more than the cap, or reserved bits set.
            _ => {
                let mut h = [0u8; 8];
                h[..4].copy_from_slice(&(u32::MAX - u32::from(junk.first().copied().unwrap_or(0))).to_le_bytes());
                h[5] = junk.get(1).copied().unwrap_or(1);
                let _ = s.write_all(&h);
                let _ = s.write_all(&junk);
            }
        }
        prop_assert!(drain(s).is_ok());
    });
    still_serves(&d);
    // A peer that connects and says nothing is dropped, and costs nothing meanwhile.
    let idle = UnixStream::connect(&d.socket).unwrap();
    still_serves(&d);
    drop(idle);
    assert!(
        d.log().lines().all(|l| !l.contains("panicked")),
        "{}",
        d.log()
    );
}
