//! Receiving ahead: a connection reads a frame's header and payload with one `recvmsg`,
//! keeps the bytes of later frames that came with it, and gives each frame the
//! descriptors its header announced, also when frames with descriptors arrive back to back.
#![cfg(feature = "tokio")]

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use proptest::prelude::*;
use rig_proto::frame::{self, AHEAD, FrameError, Reader, write_frame};
use rig_proto::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn server_side(s: UnixStream) -> ServerConnection {
    s.set_nonblocking(true).unwrap();
    ServerConnection::new(tokio::net::UnixStream::from_std(s).unwrap())
}

fn framed(payload: &[u8], fds: u8) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(&[fds, 0, 0, 0]);
    v.extend_from_slice(payload);
    v
}

/// Sends raw bytes with descriptors attached in one `sendmsg`.
fn send_raw(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    let iov = [std::io::IoSlice::new(bytes)];
    let n = sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None).unwrap();
    assert_eq!(n, bytes.len());
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().unwrap()
}

/// Checks that `fd` is the write end of the pipe read through `read`.
fn is_write_end_of(fd: &OwnedFd, read: &OwnedFd, tag: &[u8]) {
    std::fs::File::from(fd.try_clone().unwrap())
        .write_all(tag)
        .unwrap();
    let mut got = vec![0u8; tag.len()];
    std::fs::File::from(read.try_clone().unwrap())
        .read_exact(&mut got)
        .unwrap();
    assert_eq!(got, tag);
}

/// True once every write end of the pipe is closed.
fn write_end_closed(read: OwnedFd) -> bool {
    let mut buf = [0u8; 1];
    matches!(std::fs::File::from(read).read(&mut buf), Ok(0))
}

#[test]
fn surplus_bytes_carry_the_next_frames() {
    let (a, b) = UnixStream::pair().unwrap();
    // Two whole frames and the first 5 bytes of a third, in one send.
    let mut bytes = framed(b"first", 0);
    bytes.extend(framed(b"", 0));
    let third = framed(b"the third one", 0);
    bytes.extend_from_slice(&third[..5]);
    send_raw(&a, &bytes, &[]);
    runtime().block_on(async {
        let mut s = server_side(b);
        assert_eq!(s.read_frame().await.unwrap().unwrap().payload, b"first");
        assert_eq!(s.read_frame().await.unwrap().unwrap().payload, b"");
        // The rest of the third frame comes later; its start waited in the connection.
        send_raw(&a, &third[5..], &[]);
        assert_eq!(
            s.read_frame().await.unwrap().unwrap().payload,
            b"the third one"
        );
        drop(a);
        assert!(s.read_frame().await.unwrap().is_none());
    });
}

#[test]
fn a_reader_gives_every_frame_of_one_receive() {
    let mut r = Reader::new();
    let mut bytes = framed(b"one", 0);
    bytes.extend(framed(b"two", 0));
    bytes.extend(framed(b"three", 0));
    let buf = r.spare();
    assert_eq!(buf.len(), AHEAD);
    buf[..bytes.len()].copy_from_slice(&bytes);
    assert_eq!(
        r.advance(bytes.len(), vec![]).unwrap().unwrap().payload,
        b"one"
    );
    assert!(!r.at_boundary());
    assert_eq!(r.take().unwrap().unwrap().payload, b"two");
    assert_eq!(r.take().unwrap().unwrap().payload, b"three");
    assert!(r.take().unwrap().is_none());
    assert!(r.at_boundary());
    assert!(r.closed().unwrap().is_none());
}

#[test]
fn two_frames_with_descriptors_back_to_back() {
    let (a, b) = UnixStream::pair().unwrap();
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let (r3, w3) = pipe();
    // All sent before any is read: a frame without descriptors, two with, one without.
    write_frame(a.as_fd(), b"none", &[]).unwrap();
    write_frame(a.as_fd(), b"one fd", &[w1.as_fd()]).unwrap();
    write_frame(a.as_fd(), b"two fds", &[w2.as_fd(), w3.as_fd()]).unwrap();
    write_frame(a.as_fd(), b"none again", &[]).unwrap();
    drop((w1, w2, w3));
    runtime().block_on(async {
        let mut s = server_side(b);
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"none"[..], 0));
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"one fd"[..], 1));
        is_write_end_of(&f.fds[0], &r1, b"1");
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"two fds"[..], 2));
        is_write_end_of(&f.fds[0], &r2, b"2");
        is_write_end_of(&f.fds[1], &r3, b"3");
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"none again"[..], 0));
    });
}

#[test]
fn a_large_frame_and_a_small_one_with_descriptors() {
    let (a, b) = UnixStream::pair().unwrap();
    let big: Vec<u8> = (0..3 * AHEAD + 17).map(|i| (i % 253) as u8).collect();
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    let sender = {
        let big = big.clone();
        std::thread::spawn(move || {
            write_frame(a.as_fd(), b"small", &[w2.as_fd()]).unwrap();
            write_frame(a.as_fd(), &big, &[w1.as_fd()]).unwrap();
            write_frame(a.as_fd(), b"small", &[w2.as_fd()]).unwrap();
            a
        })
    };
    runtime().block_on(async {
        let mut s = server_side(b);
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"small"[..], 1));
        is_write_end_of(&f.fds[0], &r2, b"a");
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!(f.payload, big);
        assert_eq!(f.fds.len(), 1);
        is_write_end_of(&f.fds[0], &r1, b"b");
        let f = s.read_frame().await.unwrap().unwrap();
        assert_eq!((f.payload.as_slice(), f.fds.len()), (&b"small"[..], 1));
        is_write_end_of(&f.fds[0], &r2, b"c");
    });
    drop(sender.join().unwrap());
}

#[test]
fn descriptors_sent_with_the_wrong_frame_are_refused_and_closed() {
    let (a, b) = UnixStream::pair().unwrap();
    let (r, w) = pipe();
    // One sendmsg holding a frame that announces a descriptor and one that announces none,
    // the descriptor attached to both: not how a rig peer sends.
    let mut bytes = framed(b"wants one", 1);
    bytes.extend(framed(b"wants none", 0));
    send_raw(&a, &bytes, &[w.as_fd()]);
    drop(w);
    write_frame(a.as_fd(), b"in step", &[]).unwrap();
    runtime().block_on(async {
        let mut s = server_side(b);
        let mut errors = 0;
        loop {
            match s.read_frame().await {
                Err(e @ FrameError::FdMismatch { .. }) => {
                    assert!(!e.is_fatal());
                    errors += 1;
                }
                Ok(Some(f)) => {
                    assert_eq!(f.payload, b"in step");
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(errors, 2);
    });
    assert!(write_end_closed(r));
}

#[test]
fn the_blocking_connection_keeps_surplus_for_the_next_call() {
    let (c, s) = UnixStream::pair().unwrap();
    let daemon = std::thread::spawn(move || {
        let hello = frame::read_frame(s.as_fd()).unwrap().unwrap();
        frame::decode::<Hello>(&hello.payload).unwrap();
        // The welcome and the answer to the first call, in one send.
        let welcome = frame::encode(&HelloReply::Welcome(Welcome {
            version: VERSION,
            daemon: "test".into(),
            pid: 1,
        }))
        .unwrap();
        let answer = frame::encode(&Response::Devices(vec![])).unwrap();
        let mut bytes = framed(&welcome, 0);
        bytes.extend(framed(&answer, 0));
        (&s).write_all(&bytes).unwrap();
        let request = frame::read_frame(s.as_fd()).unwrap().unwrap();
        assert_eq!(
            frame::decode::<Request>(&request.payload).unwrap(),
            Request::ListDevices
        );
        s
    });
    let mut conn = Connection::handshake(c, "client").unwrap();
    let (r, fds) = conn.call(&Request::ListDevices, &[]).unwrap();
    assert_eq!(r, Response::Devices(vec![]));
    assert!(fds.is_empty());
    drop(daemon.join().unwrap());
    // The daemon is gone: the next call sees the close.
    assert!(conn.call(&Request::ListDevices, &[]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Frames of any size (small, around AHEAD, larger) fed in arbitrary receive sizes
    /// through the read-ahead buffer arrive whole and in order.
    #[test]
    fn frames_survive_any_split_reading_ahead(
        sizes in proptest::collection::vec(
            prop_oneof![0usize..64, (AHEAD - 24)..(AHEAD + 8), (2 * AHEAD)..(3 * AHEAD)],
            1..5,
        ),
        cuts in proptest::collection::vec(1usize..(2 * AHEAD), 1..16),
    ) {
        let payloads: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, n)| (0..*n).map(|i| (i * 7 + k) as u8).collect())
            .collect();
        let mut stream = Vec::new();
        for p in &payloads {
            stream.extend(framed(p, 0));
        }
        let mut reader = Reader::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < stream.len() {
            while let Some(f) = reader.take().unwrap() {
                out.push(f.payload);
            }
            let want = cuts[i % cuts.len()];
            i += 1;
            let buf = reader.spare();
            prop_assert!(!buf.is_empty());
            let n = want.min(buf.len()).min(stream.len() - at);
            buf[..n].copy_from_slice(&stream[at..at + n]);
            at += n;
            reader.record(n, vec![]).unwrap();
        }
        while let Some(f) = reader.take().unwrap() {
            out.push(f.payload);
        }
        prop_assert!(reader.at_boundary());
        prop_assert_eq!(out, payloads);
    }

    /// Frames with 0 to 3 descriptors, all sent before any is read, each arrive with
    /// theirs.
    #[test]
    fn back_to_back_frames_keep_their_descriptors(
        frames in proptest::collection::vec((0usize..200, 0usize..4), 1..8),
    ) {
        let (a, b) = UnixStream::pair().unwrap();
        let mut pipes = Vec::new();
        for (k, (len, nfds)) in frames.iter().enumerate() {
            let ends: Vec<_> = (0..*nfds).map(|_| pipe()).collect();
            let ws: Vec<_> = ends.iter().map(|(_, w)| w.as_fd()).collect();
            write_frame(a.as_fd(), &vec![k as u8; *len], &ws).unwrap();
            pipes.push(ends.into_iter().map(|(r, _)| r).collect::<Vec<_>>());
        }
        drop(a);
        runtime().block_on(async {
            let mut s = server_side(b);
            for (k, (len, nfds)) in frames.iter().enumerate() {
                let f = s.read_frame().await.unwrap().unwrap();
                assert_eq!(f.payload, vec![k as u8; *len]);
                assert_eq!(f.fds.len(), *nfds, "frame {k}");
                for (fd, r) in f.fds.iter().zip(&pipes[k]) {
                    is_write_end_of(fd, r, &[k as u8]);
                }
            }
            assert!(s.read_frame().await.unwrap().is_none());
        });
    }
}
