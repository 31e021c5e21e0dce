//! Protocol edge cases over real socketpairs: what a peer that misbehaves gets.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use proptest::prelude::*;
use rig_proto::frame::{self, FrameError, HEADER_BYTES, Header, Reader, read_frame, write_frame};
use rig_proto::{MAX_FDS, MAX_FRAME, Request, Response};

fn header(len: u32, fds: u8) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4] = fds;
    h
}

/// Sends raw bytes with descriptors attached, bypassing every check of the crate.
fn send_raw(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let iov = [std::io::IoSlice::new(bytes)];
    let n = sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).unwrap();
    assert_eq!(n, bytes.len());
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().unwrap()
}

/// True once every write end of the pipe is closed (a read sees end-of-file).
fn write_end_closed(read: OwnedFd) -> bool {
    let mut f = std::fs::File::from(read);
    let mut buf = [0u8; 1];
    matches!(f.read(&mut buf), Ok(0))
}

#[test]
fn clean_close_between_frames_is_none() {
    let (a, b) = UnixStream::pair().unwrap();
    write_frame(a.as_fd(), b"one", &[]).unwrap();
    drop(a);
    let f = read_frame(b.as_fd()).unwrap().unwrap();
    assert_eq!(f.payload, b"one");
    assert!(read_frame(b.as_fd()).unwrap().is_none());
}

#[test]
fn truncated_length_is_closed_mid_frame() {
    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(&[5, 0, 0]).unwrap();
    drop(a);
    match read_frame(b.as_fd()) {
        Err(FrameError::ClosedMidFrame { got: 3, want: 8 }) => {}
        other => panic!("expected a mid-frame close, got {other:?}"),
    }
}

#[test]
fn close_mid_payload_is_an_error() {
    let (mut a, b) = UnixStream::pair().unwrap();
    a.write_all(&header(100, 0)).unwrap();
    a.write_all(&[1; 10]).unwrap();
    drop(a);
    let e = read_frame(b.as_fd()).unwrap_err();
    assert!(
        matches!(e, FrameError::ClosedMidFrame { got: 18, want: 108 }),
        "{e:?}"
    );
    assert!(e.is_fatal());
}

#[test]
fn oversized_length_is_refused_before_allocating() {
    let (mut a, b) = UnixStream::pair().unwrap();
    // u32::MAX would be a 4 GiB allocation if trusted. The reader only ever asks for the
    // header's bytes, and the error comes as soon as the header is whole.
    a.write_all(&header(u32::MAX, 0)).unwrap();
    let e = read_frame(b.as_fd()).unwrap_err();
    assert!(matches!(e, FrameError::TooLarge { len, max: MAX_FRAME } if len == u32::MAX as usize));
    assert!(e.is_fatal());
    // One byte over the cap is refused too; exactly the cap is accepted as a header.
    assert!(Header::parse(&header(MAX_FRAME as u32 + 1, 0)).is_err());
    assert_eq!(
        Header::parse(&header(MAX_FRAME as u32, 0)).unwrap(),
        Header {
            len: MAX_FRAME,
            fds: 0
        }
    );
}

#[test]
fn a_reader_grows_its_buffer_with_the_bytes() {
    let mut r = Reader::new();
    let h = header(MAX_FRAME as u32, 0);
    r.buf()[..HEADER_BYTES].copy_from_slice(&h);
    assert!(r.advance(HEADER_BYTES, vec![]).unwrap().is_none());
    // After a 16 MiB header the reader offers a bounded chunk, not the whole frame.
    assert!(r.buf().len() <= 64 << 10);
}

#[test]
fn nonzero_reserved_bytes_are_refused() {
    let (mut a, b) = UnixStream::pair().unwrap();
    let mut h = header(0, 0);
    h[7] = 1;
    a.write_all(&h).unwrap();
    assert!(matches!(read_frame(b.as_fd()), Err(FrameError::BadHeader)));
}

#[test]
fn garbage_payload_is_a_decode_error_and_the_stream_stays_in_step() {
    let (a, b) = UnixStream::pair().unwrap();
    write_frame(a.as_fd(), &[0xff; 32], &[]).unwrap();
    let good = frame::encode(&Request::ListGpus).unwrap();
    write_frame(a.as_fd(), &good, &[]).unwrap();

    let f = read_frame(b.as_fd()).unwrap().unwrap();
    let e = frame::decode::<Request>(&f.payload).unwrap_err();
    assert!(!e.is_fatal(), "{e:?}");
    let f = read_frame(b.as_fd()).unwrap().unwrap();
    assert_eq!(
        frame::decode::<Request>(&f.payload).unwrap(),
        Request::ListGpus
    );
}

#[test]
fn trailing_bytes_are_an_error() {
    let mut bytes = frame::encode(&Request::ListDevices).unwrap();
    bytes.push(0);
    assert!(matches!(
        frame::decode::<Request>(&bytes),
        Err(FrameError::Trailing { extra: 1 })
    ));
}

#[test]
fn an_empty_payload_is_a_frame_but_no_message() {
    let (a, b) = UnixStream::pair().unwrap();
    write_frame(a.as_fd(), &[], &[]).unwrap();
    let f = read_frame(b.as_fd()).unwrap().unwrap();
    assert!(f.payload.is_empty());
    assert!(frame::decode::<Response>(&f.payload).is_err());
}

#[test]
fn descriptors_pass_across_a_socketpair() {
    let (a, b) = UnixStream::pair().unwrap();
    let (r1, w1) = pipe();
    let (r2, w2) = pipe();
    write_frame(a.as_fd(), b"fds", &[w1.as_fd(), w2.as_fd()]).unwrap();
    drop((w1, w2));
    let f = read_frame(b.as_fd()).unwrap().unwrap();
    assert_eq!(f.payload, b"fds");
    assert_eq!(f.fds.len(), 2);
    // The received descriptors are the pipes' write ends, in order, and close-on-exec.
    for (fd, read, msg) in [(&f.fds[0], r1, b"first"), (&f.fds[1], r2, b"secnd")] {
        let flags = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & nix::libc::FD_CLOEXEC, 0);
        std::fs::File::from(fd.try_clone().unwrap())
            .write_all(msg)
            .unwrap();
        let mut got = [0u8; 5];
        std::fs::File::from(read).read_exact(&mut got).unwrap();
        assert_eq!(&got, msg);
    }
}

#[test]
fn a_large_frame_with_descriptors_arrives_whole() {
    let (a, b) = UnixStream::pair().unwrap();
    let payload: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    let (_r, w) = pipe();
    let sender = {
        let payload = payload.clone();
        std::thread::spawn(move || write_frame(a.as_fd(), &payload, &[w.as_fd()]).unwrap())
    };
    let f = read_frame(b.as_fd()).unwrap().unwrap();
    sender.join().unwrap();
    assert_eq!(f.payload, payload);
    assert_eq!(f.fds.len(), 1);
}

#[test]
fn unannounced_descriptors_are_closed_and_refused() {
    let (a, b) = UnixStream::pair().unwrap();
    let (r, w) = pipe();
    // A header that announces no descriptors, with one attached.
    let mut bytes = header(2, 0).to_vec();
    bytes.extend_from_slice(b"hi");
    send_raw(&a, &bytes, &[w.as_fd()]);
    drop(w);
    let e = read_frame(b.as_fd()).unwrap_err();
    assert!(
        matches!(
            e,
            FrameError::FdMismatch {
                announced: 0,
                received: 1
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_fatal());
    // The receiver's copy was closed: the pipe has no writer left.
    assert!(write_end_closed(r));
}

#[test]
fn fewer_descriptors_than_announced_are_refused() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut bytes = header(1, 2).to_vec();
    bytes.push(0);
    send_raw(&a, &bytes, &[]);
    assert!(matches!(
        read_frame(b.as_fd()),
        Err(FrameError::FdMismatch {
            announced: 2,
            received: 0
        })
    ));
}

#[test]
fn too_many_descriptors_are_refused_and_closed() {
    // The sender refuses before sending anything.
    let (a, b) = UnixStream::pair().unwrap();
    let pipes: Vec<_> = (0..=MAX_FDS).map(|_| pipe()).collect();
    let ws: Vec<BorrowedFd<'_>> = pipes.iter().map(|(_, w)| w.as_fd()).collect();
    assert!(matches!(
        write_frame(a.as_fd(), b"x", &ws),
        Err(FrameError::TooManyFds {
            count: 9,
            max: MAX_FDS
        })
    ));

    // A header announcing more than the cap is refused.
    let mut h = header(1, MAX_FDS as u8 + 1).to_vec();
    h.push(0);
    send_raw(&a, &h, &[]);
    assert!(matches!(
        read_frame(b.as_fd()),
        Err(FrameError::TooManyFds { .. })
    ));

    // A peer that attaches more than the cap gets an error, and every one is closed.
    let (a, b) = UnixStream::pair().unwrap();
    let mut bytes = header(1, MAX_FDS as u8).to_vec();
    bytes.push(0);
    send_raw(&a, &bytes, &ws);
    drop(ws);
    let (reads, writes): (Vec<_>, Vec<_>) = pipes.into_iter().unzip();
    drop(writes);
    assert!(matches!(
        read_frame(b.as_fd()),
        Err(FrameError::TooManyFds { count: 9, .. })
    ));
    for r in reads {
        assert!(write_end_closed(r));
    }
}

#[test]
fn an_oversized_message_is_refused_by_the_encoder() {
    let big = Request::LoadImage {
        device: rig_proto::DeviceId(1),
        code_object: vec![0; MAX_FRAME],
    };
    assert!(frame::encode(&big).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary bytes from a peer give frames or errors, never a panic or a hang, and
    /// whatever decodes round-trips.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&bytes).unwrap();
        drop(a);
        for _ in 0..bytes.len() + 1 {
            match read_frame(b.as_fd()) {
                Ok(Some(f)) => {
                    if let Ok(r) = frame::decode::<Request>(&f.payload) {
                        let again = frame::encode(&r).unwrap();
                        prop_assert_eq!(frame::decode::<Request>(&again).unwrap(), r);
                    }
                    if let Ok(r) = frame::decode::<Response>(&f.payload) {
                        let again = frame::encode(&r).unwrap();
                        prop_assert_eq!(frame::decode::<Response>(&again).unwrap(), r);
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Arbitrary payloads given to the decoders directly, whatever their framing.
    #[test]
    fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = frame::decode::<Request>(&bytes);
        let _ = frame::decode::<Response>(&bytes);
        let _ = frame::decode::<rig_proto::Hello>(&bytes);
        let _ = frame::decode::<rig_proto::HelloReply>(&bytes);
    }

    /// Valid frames split at arbitrary points arrive whole and in order.
    #[test]
    fn frames_survive_any_split(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..4),
        cuts in proptest::collection::vec(1usize..16, 1..64),
    ) {
        let mut stream = Vec::new();
        for p in &payloads {
            stream.extend_from_slice(&header(p.len() as u32, 0));
            stream.extend_from_slice(p);
        }
        let mut reader = Reader::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < stream.len() {
            let want = cuts[i % cuts.len()];
            i += 1;
            let buf = reader.buf();
            let n = want.min(buf.len()).min(stream.len() - at);
            buf[..n].copy_from_slice(&stream[at..at + n]);
            at += n;
            if let Some(f) = reader.advance(n, vec![]).unwrap() {
                out.push(f.payload);
            }
        }
        prop_assert!(reader.at_boundary());
        prop_assert_eq!(out, payloads);
    }
}
