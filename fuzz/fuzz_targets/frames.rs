//! Arbitrary bytes, cut into arbitrary receives with arbitrary descriptors, through the
//! frame reader both sides use, then every whole frame through the message decoders: frames
//! or a typed error, never a panic; descriptors all closed; a first frame (the hello) past
//! its bound refused from its header; a decoded message re-encodes to one that decodes to
//! itself, and its strings' bounds are checked.
#![no_main]

use std::os::fd::OwnedFd;

use libfuzzer_sys::fuzz_target;
use rig_proto::frame::{self, Reader};
use rig_proto::messages::{Hello, HelloReply, Request, Response};
use rig_proto::{MOST_HELLO, MOST_PROGRAM};

/// A descriptor to pass with a receive: a memfd, as clients pass.
fn memfd() -> OwnedFd {
    rig_shm::SharedRegion::create("fuzz", 4096)
        .and_then(|r| r.dup_fd())
        .expect("a memfd")
}

fn roundtrip<T>(payload: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(msg) = frame::decode::<T>(payload) {
        let again = frame::encode(&msg).expect("a decoded message encodes");
        let back: T = frame::decode(&again).expect("an encoded message decodes");
        assert_eq!(back, msg);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&plan, mut rest)) = data.split_first() else {
        return;
    };
    let mut reader = Reader::new();
    // As rigd reads a connection: its first frame, the hello, bounded to MOST_HELLO.
    let mut first = plan % 2 == 0;
    reader.set_most(first.then_some(MOST_HELLO));
    let mut step = 0u32;
    while !rest.is_empty() {
        // Receive sizes and descriptor counts come from the plan byte and the step.
        let mix = u32::from(plan)
            .wrapping_mul(2654435761)
            .rotate_left(step % 32);
        step += 1;
        let want = 1 + (mix as usize % 9000);
        let spare = reader.spare();
        assert!(!spare.is_empty(), "the reader offered no room");
        let n = want.min(spare.len()).min(rest.len());
        spare[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        let fds: Vec<OwnedFd> = (0..(mix >> 29) % 3).map(|_| memfd()).collect();
        if reader.record(n, fds).is_err() {
            return;
        }
        loop {
            match reader.take() {
                Ok(Some(f)) => {
                    if std::mem::take(&mut first) {
                        assert!(f.payload.len() <= MOST_HELLO);
                        reader.set_most(None);
                    }
                    if let Ok(h) = frame::decode::<Hello>(&f.payload) {
                        assert_eq!(h.check_bounds().is_ok(), h.program.len() <= MOST_PROGRAM);
                    }
                    if let Ok(r) = frame::decode::<Request>(&f.payload) {
                        let _ = r.check_bounds();
                    }
                    roundtrip::<Hello>(&f.payload);
                    roundtrip::<HelloReply>(&f.payload);
                    roundtrip::<Request>(&f.payload);
                    roundtrip::<Response>(&f.payload);
                    if let Ok(r) = frame::decode::<Response>(&f.payload) {
                        let _ = r.check();
                    }
                }
                Ok(None) => break,
                Err(e) if e.is_fatal() => return,
                Err(_) => {}
            }
        }
    }
    let _ = reader.closed();
});
