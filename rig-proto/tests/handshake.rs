//! The two connection halves against each other: the blocking client [`Connection`] and
//! rigd's async [`ServerConnection`], over socketpairs and a socket on disk.
#![cfg(feature = "tokio")]

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rig_proto::frame::{self, FrameError, read_frame, write_frame};
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

fn hello(version: u32, magic: u64) -> Vec<u8> {
    frame::encode(&Hello {
        magic,
        version,
        program: "test".into(),
    })
    .unwrap()
}

/// Runs `daemon` on the server end in a thread with its own runtime, and `client` here.
fn with_daemon<D, F>(daemon: D, client: impl FnOnce(UnixStream))
where
    D: FnOnce(ServerConnection) -> F + Send + 'static,
    F: std::future::Future<Output = ()>,
{
    let (c, s) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || {
        let rt = runtime();
        rt.block_on(async move { daemon(server_side(s)).await });
    });
    client(c);
    t.join().unwrap();
}

#[test]
fn handshake_then_descriptors_both_ways() {
    with_daemon(
        |mut conn| async move {
            let hello = conn.handshake("rigd test", 42).await.unwrap().unwrap();
            assert_eq!(hello.program, "client");
            // A request with a memfd-like descriptor (a pipe's write end here).
            let (req, fds) = conn.read_request().await.unwrap().unwrap();
            assert_eq!(
                req,
                Request::MapHost {
                    device: DeviceId(1),
                    bytes: 5,
                    offset: 0
                }
            );
            assert_eq!(fds.len(), 1);
            std::fs::File::from(fds.into_iter().next().unwrap())
                .write_all(b"hello")
                .unwrap();
            conn.send(
                &Response::Mapped {
                    region: RegionId(9),
                    gpu_address: 0x1000,
                },
                &[],
            )
            .await
            .unwrap();
            // An answer that passes a descriptor back.
            let (req, _) = conn.read_request().await.unwrap().unwrap();
            assert!(matches!(req, Request::Alloc { .. }));
            let (r, w) = nix::unistd::pipe().unwrap();
            std::fs::File::from(w).write_all(b"daemon").unwrap();
            let share = Share {
                fd: FdIndex(0),
                offset: 0,
                bytes: 4096,
            };
            let answer = Response::Allocated {
                region: RegionId(10),
                gpu_address: 0,
                host: Some(share),
            };
            conn.send(&answer, &[r.as_fd()]).await.unwrap();
            assert!(conn.read_request().await.unwrap().is_none(), "clean close");
        },
        |stream| {
            let mut conn = Connection::handshake(stream, "client").unwrap();
            assert_eq!(conn.daemon().daemon, "rigd test");
            assert_eq!(conn.daemon().pid, 42);
            assert_eq!(conn.daemon().version, VERSION);

            let (r, w) = nix::unistd::pipe().unwrap();
            let req = Request::MapHost {
                device: DeviceId(1),
                bytes: 5,
                offset: 0,
            };
            let (resp, fds) = conn.call(&req, &[w.as_fd()]).unwrap();
            drop(w);
            assert_eq!(
                resp,
                Response::Mapped {
                    region: RegionId(9),
                    gpu_address: 0x1000
                }
            );
            assert!(fds.is_empty());
            let mut got = String::new();
            std::fs::File::from(r).read_to_string(&mut got).unwrap();
            assert_eq!(got, "hello");

            let req = Request::Alloc {
                device: DeviceId(1),
                memory: MemoryKind::Pinned,
                bytes: 4096,
            };
            let (resp, fds) = conn.call(&req, &[]).unwrap();
            assert!(matches!(resp, Response::Allocated { host: Some(_), .. }));
            assert_eq!(fds.len(), 1);
            let mut got = [0u8; 6];
            std::fs::File::from(fds.into_iter().next().unwrap())
                .read_exact(&mut got)
                .unwrap();
            assert_eq!(&got, b"daemon");
        },
    );
}

#[test]
fn the_client_checks_descriptor_counts_before_sending() {
    with_daemon(
        |mut conn| async move {
            conn.handshake("rigd", 1).await.unwrap();
            assert!(conn.read_request().await.unwrap().is_none());
        },
        |stream| {
            let mut conn = Connection::handshake(stream, "client").unwrap();
            let req = Request::MapHost {
                device: DeviceId(1),
                bytes: 5,
                offset: 0,
            };
            assert!(matches!(
                conn.call(&req, &[]),
                Err(Error::FdCount { needed: 1, got: 0 })
            ));
        },
    );
}

#[test]
fn version_mismatch_is_refused_by_the_daemon() {
    with_daemon(
        |mut conn| async move {
            match conn.read_hello().await {
                Err(Error::VersionMismatch { daemon, client }) => {
                    assert_eq!((daemon, client), (VERSION, VERSION + 1));
                }
                other => panic!("expected a version mismatch, got {other:?}"),
            }
        },
        |stream| {
            write_frame(stream.as_fd(), &hello(VERSION + 1, MAGIC), &[]).unwrap();
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            match frame::decode::<HelloReply>(&f.payload).unwrap() {
                HelloReply::Refused { daemon, error } => {
                    assert_eq!(daemon, VERSION);
                    assert_eq!(error.code, ErrorCode::VersionMismatch);
                    assert!(error.message.contains("version"), "{}", error.message);
                }
                other => panic!("expected a refusal, got {other:?}"),
            }
            // The daemon's side closed after refusing.
            assert!(read_frame(stream.as_fd()).unwrap().is_none());
        },
    );
}

#[test]
fn version_mismatch_is_a_typed_error_on_the_client() {
    let (c, s) = UnixStream::pair().unwrap();
    let fake_daemon = std::thread::spawn(move || {
        let f = read_frame(s.as_fd()).unwrap().unwrap();
        let h: Hello = frame::decode(&f.payload).unwrap();
        assert_eq!(h.version, VERSION);
        let error = ErrorReply::new(ErrorCode::VersionMismatch, "rigd speaks version 99");
        let reply = frame::encode(&HelloReply::Refused { daemon: 99, error }).unwrap();
        write_frame(s.as_fd(), &reply, &[]).unwrap();
    });
    match Connection::handshake(c, "client") {
        Err(Error::VersionMismatch { daemon: 99, client }) => assert_eq!(client, VERSION),
        other => panic!("expected a version mismatch, got {other:?}"),
    }
    fake_daemon.join().unwrap();
}

#[test]
fn bad_magic_and_garbage_hellos_are_refused() {
    with_daemon(
        |mut conn| async move {
            assert!(matches!(conn.read_hello().await, Err(Error::NotRig)));
        },
        |stream| {
            write_frame(stream.as_fd(), &hello(VERSION, 0x1234), &[]).unwrap();
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            let r: HelloReply = frame::decode(&f.payload).unwrap();
            assert!(
                matches!(r, HelloReply::Refused { error, .. } if error.code == ErrorCode::BadRequest)
            );
        },
    );
    with_daemon(
        |mut conn| async move {
            assert!(matches!(
                conn.read_hello().await,
                Err(Error::Frame(FrameError::Decode(_)))
            ));
        },
        |stream| {
            write_frame(stream.as_fd(), b"GET / HTTP/1.1\r\n", &[]).unwrap();
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            assert!(matches!(
                frame::decode::<HelloReply>(&f.payload).unwrap(),
                HelloReply::Refused { .. }
            ));
        },
    );
}

#[test]
fn a_bad_request_is_answered_and_the_connection_goes_on() {
    with_daemon(
        |mut conn| async move {
            conn.handshake("rigd", 1).await.unwrap();
            // Garbage, then a request with a descriptor it does not take, then a good one.
            for _ in 0..2 {
                let e = conn.read_request().await.unwrap_err();
                assert!(!e.is_fatal(), "{e:?}");
                conn.send(&reply_for(&e), &[]).await.unwrap();
            }
            let (req, _) = conn.read_request().await.unwrap().unwrap();
            assert_eq!(req, Request::ListGpus);
            conn.send(&Response::Gpus(vec![]), &[]).await.unwrap();
            // A frame over the cap ends the connection, promptly.
            let e = conn.read_request().await.unwrap_err();
            assert!(e.is_fatal());
        },
        |stream| {
            let hello_bytes = hello(VERSION, MAGIC);
            write_frame(stream.as_fd(), &hello_bytes, &[]).unwrap();
            read_frame(stream.as_fd()).unwrap().unwrap();

            write_frame(stream.as_fd(), &[0xee; 40], &[]).unwrap();
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            let r: Response = frame::decode(&f.payload).unwrap();
            assert!(matches!(
                r,
                Response::Error(ErrorReply {
                    code: ErrorCode::BadRequest,
                    ..
                })
            ));

            let (read_end, w) = nix::unistd::pipe().unwrap();
            let list = frame::encode(&Request::ListGpus).unwrap();
            write_frame(stream.as_fd(), &list, &[w.as_fd()]).unwrap();
            drop(w);
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            let r: Response = frame::decode(&f.payload).unwrap();
            assert!(matches!(
                r,
                Response::Error(ErrorReply {
                    code: ErrorCode::BadRequest,
                    ..
                })
            ));
            // The daemon closed the descriptor it should not have been sent.
            let mut b = [0u8; 1];
            assert_eq!(std::fs::File::from(read_end).read(&mut b).unwrap(), 0);

            write_frame(stream.as_fd(), &list, &[]).unwrap();
            let f = read_frame(stream.as_fd()).unwrap().unwrap();
            assert_eq!(
                frame::decode::<Response>(&f.payload).unwrap(),
                Response::Gpus(vec![])
            );

            let mut h = [0u8; 8];
            h[..4].copy_from_slice(&(MAX_FRAME as u32 + 1).to_le_bytes());
            (&stream).write_all(&h).unwrap();
        },
    );
}

#[test]
fn reading_is_cancel_safe() {
    let (c, s) = UnixStream::pair().unwrap();
    // Paused time: the timeout below is waited out at once, once nothing else can run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut conn = server_side(s);
        let payload = frame::encode(&Request::ListDevices).unwrap();
        let mut bytes = vec![0u8; 8];
        bytes[..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&payload);
        // Half a frame arrives; the read is abandoned by a timeout; the rest arrives.
        (&c).write_all(&bytes[..5]).unwrap();
        let t = tokio::time::timeout(Duration::from_millis(20), conn.read_request()).await;
        assert!(t.is_err(), "no whole frame yet");
        (&c).write_all(&bytes[5..]).unwrap();
        let (req, fds) = conn.read_request().await.unwrap().unwrap();
        assert_eq!(req, Request::ListDevices);
        assert!(fds.is_empty());
    });
}

#[test]
fn connect_through_a_socket_on_disk() {
    let dir = std::env::temp_dir().join(format!("rig-proto-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rigd.sock");
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        runtime().block_on(async move {
            let mut conn = server_side(s);
            let cred = conn.stream().peer_cred().unwrap();
            assert_eq!(cred.pid(), Some(std::process::id() as i32));
            conn.handshake("rigd", std::process::id())
                .await
                .unwrap()
                .unwrap();
            let (req, _): (Request, Vec<OwnedFd>) = conn.read_request().await.unwrap().unwrap();
            assert_eq!(req, Request::ListClients);
            conn.send(&Response::Clients(vec![]), &[]).await.unwrap();
        });
    });
    let mut conn = Connection::connect(&path, "rigctl").unwrap();
    conn.set_timeout(Some(Duration::from_secs(10))).unwrap();
    let (r, _) = conn.call(&Request::ListClients, &[]).unwrap();
    assert_eq!(r, Response::Clients(vec![]));
    t.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    // Nothing listening: a connect error that names the path.
    let e = Connection::connect(&path, "rigctl").unwrap_err();
    assert!(matches!(e, Error::Connect { .. }));
    assert!(e.to_string().contains("rigd.sock"), "{e}");
}

#[test]
fn posted_requests_are_answered_in_order_before_the_next_call() {
    // More posts than MOST_POSTED, so a post also reads answers; every fourth is refused.
    let posts = MOST_POSTED as u64 + 10;
    with_daemon(
        move |mut conn| async move {
            conn.handshake("rigd", 1).await.unwrap();
            for i in 0..posts {
                let (req, _) = conn.read_request().await.unwrap().unwrap();
                assert_eq!(
                    req,
                    Request::Free {
                        device: DeviceId(1),
                        region: RegionId(i)
                    }
                );
                let answer = if i % 4 == 3 {
                    Response::Error(ErrorReply {
                        code: ErrorCode::NoSuchRegion,
                        message: format!("no region {i}"),
                    })
                } else {
                    Response::Done
                };
                conn.send(&answer, &[]).await.unwrap();
            }
            let (req, _) = conn.read_request().await.unwrap().unwrap();
            assert_eq!(req, Request::ListGpus);
            conn.send(&Response::Gpus(vec![]), &[]).await.unwrap();
        },
        move |stream| {
            let mut c = Connection::handshake(stream, "client").unwrap();
            for i in 0..posts {
                c.post(&Request::Free {
                    device: DeviceId(1),
                    region: RegionId(i),
                })
                .unwrap();
            }
            // The call's answer is its own, not a posted request's.
            let (r, _) = c.call(&Request::ListGpus, &[]).unwrap();
            assert_eq!(r, Response::Gpus(vec![]));
            let refused: Vec<String> = c
                .take_posted_errors()
                .into_iter()
                .map(|e| e.message)
                .collect();
            let expected: Vec<String> = (0..posts)
                .filter(|i| i % 4 == 3)
                .map(|i| format!("no region {i}"))
                .collect();
            assert_eq!(refused, expected);
            assert!(c.take_posted_errors().is_empty());
            // A request that takes descriptors cannot be posted.
            assert!(matches!(
                c.post(&Request::MapHost {
                    device: DeviceId(1),
                    bytes: 1,
                    offset: 0
                }),
                Err(Error::FdCount { needed: 1, got: 0 })
            ));
        },
    );
}
