//! Sessions against the real rigd: the handshake, many clients at once, a client killed
//! mid-request, two clients' memory kept apart, and loss by fault and by hang.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::work::{Submitter, release};
use rig_amd::pm4::WriteData;
use rig_proto::frame;
use rig_proto::messages::{ErrorCode, Hello, HelloReply, MemoryKind, Request, Response};
use rig_shm::SharedRegion;
use rig_testkit::rigd::{Opened, Rigd, SIM, code, holds_within};

fn raw_hello(d: &Rigd, hello: &Hello) -> HelloReply {
    let s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    frame::write_frame(s.as_fd(), &frame::encode(hello).unwrap(), &[]).unwrap();
    let f = frame::read_frame(s.as_fd()).unwrap().expect("an answer");
    frame::decode(&f.payload).unwrap()
}

#[test]
fn handshake_and_version_mismatch() {
    let d = Rigd::start(SIM);
    let c = d.client("t");
    assert_eq!(c.conn.daemon().version, rig_proto::VERSION);
    assert_eq!(c.conn.daemon().pid, d.pid());
    let r = raw_hello(
        &d,
        &Hello {
            magic: rig_proto::MAGIC,
            version: rig_proto::VERSION + 1,
            program: "future".into(),
        },
    );
    let HelloReply::Refused { daemon, error } = r else {
        panic!("{r:?}")
    };
    assert_eq!(daemon, rig_proto::VERSION);
    assert_eq!(error.code, ErrorCode::VersionMismatch);
    let r = raw_hello(
        &d,
        &Hello {
            magic: 1,
            version: rig_proto::VERSION,
            program: "x".into(),
        },
    );
    assert!(matches!(r, HelloReply::Refused { error, .. } if error.code == ErrorCode::BadRequest));
    // The daemon still serves.
    let mut c2 = d.client("t2");
    assert!(matches!(c2.call(Request::ListGpus), Response::Gpus(_)));
}

#[test]
fn a_second_rigd_refuses_and_sigterm_cleans_up() {
    let d = Rigd::start(SIM);
    let out = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--socket")
        .arg(&d.socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another rigd is already serving"));
    let socket = d.socket.clone();
    let mut c = d.client("t");
    let _o = c.open();
    let status = d.stop();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "rigd removes its socket at SIGTERM");
}

#[test]
fn thirty_two_clients_at_once() {
    let d = Rigd::start(SIM);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let d = &d;
                s.spawn(move || {
                    let mut c = d.client(&format!("c{i}"));
                    let o = c.open();
                    let mut regions = Vec::new();
                    for _ in 0..8 {
                        let r = c.call(Request::Alloc {
                            device: o.id(),
                            memory: MemoryKind::Pinned,
                            bytes: 8192,
                        });
                        let Response::Allocated { region, .. } = r else {
                            panic!("{r:?}")
                        };
                        regions.push(region);
                    }
                    for region in regions {
                        assert_eq!(
                            c.call(Request::Free {
                                device: o.id(),
                                region
                            }),
                            Response::Done
                        );
                    }
                    c
                })
            })
            .collect();
        let clients: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut ctl = d.client("ctl");
        let Response::Devices(ds) = ctl.call(Request::ListDevices) else {
            panic!()
        };
        assert_eq!(ds.len(), 32);
        drop(clients);
        assert!(holds_within(Duration::from_secs(5), || {
            matches!(ctl.call(Request::ListDevices), Response::Devices(v) if v.is_empty())
        }));
    });
}

/// The child half of `killed_client_gives_everything_back`: open, then allocate and free
/// for ever, until killed.
#[test]
fn child_client_loop() {
    let Ok(socket) = std::env::var("RIGD_TEST_CHILD") else {
        return;
    };
    let mut c = rig_proto::Connection::connect(&socket, "victim").unwrap();
    let (r, _fds) = c.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap();
    let Response::DeviceOpened(o) = r else {
        panic!("{r:?}")
    };
    let mut n = 0u64;
    loop {
        let (r, _) = c
            .call(
                &Request::Alloc {
                    device: o.device,
                    memory: MemoryKind::Pinned,
                    bytes: 65536,
                },
                &[],
            )
            .unwrap();
        let Response::Allocated { region, .. } = r else {
            panic!("{r:?}")
        };
        // Keep some, free others: the daemon holds memory and descriptors when killed.
        if n % 2 == 0 {
            let _ = c
                .call(
                    &Request::Free {
                        device: o.device,
                        region,
                    },
                    &[],
                )
                .unwrap();
        }
        n += 1;
        if n > 200 {
            n = 1;
        }
    }
}

#[test]
fn killed_client_gives_everything_back() {
    let d = Rigd::start(SIM);
    let mut ctl = d.client("ctl");
    let mut other = d.client("other");
    let keep = other.open();
    assert!(holds_within(Duration::from_secs(2), || d.fd_count() > 0));
    std::thread::sleep(Duration::from_millis(100));
    let baseline = d.fd_count();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_client_loop),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_TEST_CHILD", &d.socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the child holds a device with memory, in the middle of its requests.
    assert!(
        holds_within(Duration::from_secs(10), || {
            match ctl.call(Request::ListDevices) {
                Response::Devices(v) => v
                    .iter()
                    .any(|d| d.owner_pid == pid && d.memory.pinned > 4 << 20),
                _ => false,
            }
        }),
        "the child never opened a device; rigd log:\n{}",
        d.log()
    );
    assert!(d.fd_count() > baseline);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    assert!(holds_within(Duration::from_secs(5), || {
        matches!(ctl.call(Request::ListDevices), Response::Devices(v) if v.iter().all(|d| d.owner_pid != pid))
    }));
    let Response::Clients(cs) = ctl.call(Request::ListClients) else {
        panic!()
    };
    assert!(cs.iter().all(|c| c.pid != pid));
    assert!(
        holds_within(Duration::from_secs(5), || d.fd_count() == baseline),
        "rigd holds {} descriptors, {} before the child",
        d.fd_count(),
        baseline
    );
    // The other client goes on.
    let r = other.call(Request::Alloc {
        device: keep.id(),
        memory: MemoryKind::Device,
        bytes: 4096,
    });
    assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
}

fn write_data(address: u64, value: u32) -> Vec<u32> {
    let data = [value];
    let p = WriteData {
        dst_sel: 5,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address,
        data: &data,
    };
    let mut out = vec![0; p.words()];
    p.encode(&mut out).unwrap();
    out
}

fn eventfd_fired(o: &Opened) -> bool {
    let fd = o.fds[o.msg.interrupt.0 as usize].try_clone().unwrap();
    let mut buf = [0u8; 8];
    matches!(
        nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&fd), &mut buf),
        Ok(8)
    )
}

#[test]
fn memory_kept_apart_and_faults_lose_one_device() {
    let d = Rigd::start(SIM);
    let mut a = d.client("a");
    let mut b = d.client("b");
    let oa = a.open();
    let ob = b.open();
    let alloc = |c: &mut rig_testkit::rigd::Client, o: &Opened| {
        let (r, fds) = c.call_fds(
            Request::Alloc {
                device: o.id(),
                memory: MemoryKind::Pinned,
                bytes: 4096,
            },
            &[],
        );
        let Response::Allocated { gpu_address, .. } = r else {
            panic!("{r:?}")
        };
        (
            gpu_address,
            SharedRegion::from_fd(fds.into_iter().next().unwrap()).unwrap(),
        )
    };
    let (xa, ma) = alloc(&mut a, &oa);
    let (xb, mb) = alloc(&mut b, &ob);
    ma.store_u32(0, 0xaaaa, Ordering::Release);

    // B writes through its own queue: to its own memory it works, and its release moves its
    // word and signals its eventfd.
    let mut sb = Submitter::new(&ob);
    let mut words = write_data(xb, 0xbbbb);
    words.extend(release(ob.msg.word.memory.gpu_address, 1));
    sb.submit(&words, 1);
    assert!(
        holds_within(Duration::from_secs(5), || sb.word() == 1),
        "B's release never landed; log:\n{}",
        d.log()
    );
    assert_eq!(mb.load_u32(0, Ordering::Acquire), 0xbbbb);
    assert!(holds_within(Duration::from_secs(2), || eventfd_fired(&ob)));

    // B writes to A's address: in B's address space that is not A's memory.
    let mut words = write_data(xa, 0xdead);
    words.extend(release(ob.msg.word.memory.gpu_address, 2));
    sb.submit(&words, 2);
    assert!(holds_within(Duration::from_secs(5), || sb.word() >= 2
        || matches!(b.call(Request::DeviceStatus { device: ob.id() }), Response::Status(s) if s.lost.is_some())));
    assert_eq!(
        ma.load_u32(0, Ordering::Acquire),
        0xaaaa,
        "B's work reached A's memory"
    );

    // B writes where nothing is mapped: B's device is lost, A's is not.
    let mut words = write_data(0x1000, 1);
    words.extend(release(ob.msg.word.memory.gpu_address, 3));
    sb.submit(&words, 3);
    assert!(
        holds_within(Duration::from_secs(5), || {
            matches!(b.call(Request::DeviceStatus { device: ob.id() }), Response::Status(s) if s.lost.is_some())
        }),
        "B was not lost; log:\n{}",
        d.log()
    );
    let Response::Status(s) = b.call(Request::DeviceStatus { device: ob.id() }) else {
        panic!()
    };
    let fault = s.lost.clone().unwrap();
    assert!(fault.to_string().contains("fault"), "{s:?}");
    // The command processor's write faulted: the fault says where, which way and on which queue.
    assert_eq!(fault.kind, rig_proto::FaultKind::MemoryFault, "{fault}");
    assert_eq!(
        (fault.address, fault.write),
        (Some(0x1000), Some(true)),
        "{fault}"
    );
    assert_eq!(
        fault.queue.map(|q| q.to_string()).as_deref(),
        Some("COMPUTE:0")
    );
    assert_eq!(fault.pc, None, "no instruction made the access: {fault}");
    assert_eq!(
        s.reached, 3,
        "the lost device's word reads the last submitted value"
    );
    assert_eq!(
        sb.control.load_u32(72, Ordering::Acquire),
        1,
        "the lost flag is raised"
    );
    let r = b.call(Request::Alloc {
        device: ob.id(),
        memory: MemoryKind::Device,
        bytes: 4096,
    });
    assert_eq!(code(&r), Some(ErrorCode::Lost));
    let Response::Device(rep) = a.call(Request::ShowDevice { device: ob.id() }) else {
        panic!()
    };
    assert_eq!(rep.faults.len(), 1);
    // A goes on.
    let Response::Status(s) = a.call(Request::DeviceStatus { device: oa.id() }) else {
        panic!()
    };
    assert!(s.lost.is_none());
    let mut sa = Submitter::new(&oa);
    sa.submit(&release(oa.msg.word.memory.gpu_address, 1), 1);
    assert!(holds_within(Duration::from_secs(5), || sa.word() == 1));
}

#[test]
fn a_hang_loses_the_device() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    let mut s = Submitter::new(&o);
    // Publish value 5 as submitted with no work that ever releases it.
    s.control
        .store_u64(s.submitted_off as usize, 5, Ordering::Release);
    assert!(holds_within(Duration::from_secs(5), || {
        matches!(c.call(Request::DeviceStatus { device: o.id() }), Response::Status(st) if st.lost.is_some())
    }));
    let Response::Status(st) = c.call(Request::DeviceStatus { device: o.id() }) else {
        panic!()
    };
    let lost = st.lost.unwrap();
    assert!(lost.to_string().starts_with("hang"), "{lost}");
    assert_eq!(lost.kind, rig_proto::FaultKind::Hang);
    assert_eq!(s.word(), 5);
    assert!(eventfd_fired(&o));
    s.wptr = 0;
}

/// A value published after an idle spell that no work releases is lost at the hang bound,
/// at most the watchdog's longest idle tick (a quarter of the bound) late, never early.
#[test]
fn a_value_published_after_an_idle_spell_is_lost_near_its_bound() {
    let bound = Duration::from_millis(1000);
    let d = Rigd::start(&format!(
        "[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = {}\n",
        bound.as_millis()
    ));
    let mut c = d.client("t");
    for round in 0..3 {
        let o = c.open();
        let s = Submitter::new(&o);
        std::thread::sleep(Duration::from_secs(3));
        let published = std::time::Instant::now();
        s.control
            .store_u64(s.submitted_off as usize, 5, Ordering::Release);
        let mut took = None;
        while published.elapsed() < Duration::from_secs(10) {
            if matches!(c.call(Request::DeviceStatus { device: o.id() }), Response::Status(st) if st.lost.is_some())
            {
                took = Some(published.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = took.expect("a value nothing releases was never lost");
        assert!(took >= bound, "round {round}: lost early, after {took:?}");
        assert!(
            took < bound + bound / 4 + Duration::from_millis(250),
            "round {round}: lost {took:?} after it was published, past its {bound:?} bound and a quarter"
        );
    }
}

#[test]
fn real_gpus_without_a_path_are_listed_not_replaced() {
    let sys = tempfile::tempdir().unwrap();
    let f = sys.path().join("bus/pci/devices/0000:03:00.0");
    std::fs::create_dir_all(&f).unwrap();
    std::fs::write(f.join("vendor"), "0x1002\n").unwrap();
    std::fs::write(f.join("class"), "0x030000\n").unwrap();
    std::fs::write(f.join("device"), "0x744c\n").unwrap();
    // No [[sim]]: with an AMD GPU present, the embedded default sim is not served.
    let d = Rigd::start_with(
        "[access]\nany = true\n",
        &["--sysfs", sys.path().to_str().unwrap()],
    );
    let mut c = d.client("t");
    let Response::Gpus(g) = c.call(Request::ListGpus) else {
        panic!()
    };
    assert_eq!(g.len(), 1, "{g:?}");
    assert!(!g[0].simulated);
    assert_eq!(g[0].bus.as_deref(), Some("0000:03:00.0"));
    let Response::Error(e) = c.call(Request::OpenDevice { gpu: 0 }) else {
        panic!()
    };
    assert_eq!(e.code, ErrorCode::NoSuchGpu);
    assert!(e.message.contains("not drivable yet"), "{}", e.message);
    assert!(d.log().contains("cannot drive yet"));
    assert!(!d.log().contains("embedded default"));
}

#[test]
fn tells_systemd_it_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let rx = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(&cfg, SIM).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(dir.path().join("rigd.sock"))
        .env("NOTIFY_SOCKET", &notify)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 512];
    // sd_notify(3) datagrams: newline-separated assignments (sd-notify ends each with one).
    let lines = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let n = rx.recv(&mut buf).unwrap();
    assert!(
        lines(&buf[..n]).iter().any(|l| l == "READY=1"),
        "{:?}",
        lines(&buf[..n])
    );
    // By READY=1 the socket answers.
    assert!(std::os::unix::net::UnixStream::connect(dir.path().join("rigd.sock")).is_ok());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let n = rx.recv(&mut buf).unwrap();
    assert_eq!(lines(&buf[..n]), ["STOPPING=1"]);
    assert!(child.wait().unwrap().success());
    assert!(!dir.path().join("rigd.sock").exists());
}

/// The child half of `peers_outside_access_are_refused`: says hello as whatever user it
/// runs as and prints what rigd answered.
#[test]
fn child_hello() {
    let Ok(socket) = std::env::var("RIGD_TEST_HELLO") else {
        return;
    };
    match rig_proto::Connection::connect(&socket, "outsider") {
        Ok(_) => println!("RESULT welcome"),
        Err(rig_proto::Error::Refused(e)) => println!("RESULT refused {:?}", e.code),
        Err(e) => println!("RESULT error {e}"),
    }
}

#[test]
fn peers_outside_access_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run a client as another user; skipping");
        return;
    }
    // The socket is world-writable here so that rigd's own check, not the file mode, decides.
    let d = Rigd::start(
        "[daemon]\nmode = 0o666\n[access]\nany = false\nusers = []\ngroups = []\n[[sim]]\nprocessor = \"gfx1100\"\n",
    );
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let run = |uid: u32| {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                rig_testkit::test_name!(child_hello),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RIGD_TEST_HELLO", &d.socket)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| {
                format!(
                    "no result ({:?}): {} {}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    assert_eq!(run(65534), "refused PermissionDenied");
    assert_eq!(run(0), "welcome");
    assert!(d.log().contains("peer not allowed by [access]"));
}

#[test]
fn connections_are_capped() {
    let d = Rigd::start(&format!("[daemon]\nmax_connections = 2\n{SIM}"));
    // The readiness probe's connection holds a slot until rigd sees it close: the first
    // two may have to wait for that.
    let served = |program: &str| {
        let mut conn = None;
        assert!(holds_within(Duration::from_secs(10), || {
            conn = rig_proto::Connection::connect(&d.socket, program).ok();
            conn.is_some()
        }));
        conn.unwrap()
    };
    let a = served("a");
    let _b = served("b");
    // The third is not served while two are: it is refused at once, the limit named.
    match rig_proto::Connection::connect(&d.socket, "c") {
        Err(rig_proto::Error::Refused(e)) => {
            assert_eq!(e.code, ErrorCode::Quota);
            assert!(
                e.message.contains("daemon.max_connections"),
                "{}",
                e.message
            );
        }
        Ok(_) => panic!("a third connection was served"),
        Err(e) => panic!("a third connection got {e}"),
    }
    // Once one goes, it is.
    drop(a);
    assert!(holds_within(Duration::from_secs(10), || {
        rig_proto::Connection::connect(&d.socket, "c").is_ok()
    }));
}

#[test]
fn work_moves_to_a_grown_queue() {
    let d = Rigd::start(SIM);
    let mut c = d.client("t");
    let o = c.open();
    let word = o.msg.word.memory.gpu_address;
    let mut old = Submitter::new(&o);
    old.submit(&release(word, 1), 1);
    assert!(holds_within(Duration::from_secs(5), || old.word() == 1));
    let (r, fds) = c.call_fds(
        Request::Grow {
            device: o.id(),
            compute_bytes: 200_000,
            copy_bytes: 0,
            segment_bytes: 0,
            installed: Default::default(),
        },
        &[],
    );
    let Response::Grown(g) = r else {
        panic!("{r:?}")
    };
    let q = g.compute.expect("a new compute queue");
    // The device reached every value submitted: the client installs the new queue.
    let mut new = Submitter::on(&o, &q, &fds);
    new.submit(&release(word, 2), 2);
    assert!(
        holds_within(Duration::from_secs(5), || new.word() == 2),
        "the grown queue ran nothing; log:\n{}",
        d.log()
    );
    // Installing it retires the old queue; the new one keeps running.
    let installed = rig_proto::messages::Generations {
        compute: 1,
        copy: 0,
        args: 0,
    };
    let Response::Grown(_) = c.call(Request::Grow {
        device: o.id(),
        compute_bytes: 0,
        copy_bytes: 0,
        segment_bytes: 0,
        installed,
    }) else {
        panic!()
    };
    let Response::Device(rep) = c.call(Request::ShowDevice { device: o.id() }) else {
        panic!()
    };
    let compute: Vec<_> = rep
        .rings
        .iter()
        .filter(|r| r.queue == "COMPUTE:0")
        .collect();
    assert_eq!(compute.len(), 1);
    assert_eq!(
        (compute[0].generation, compute[0].read, compute[0].write),
        (1, 8, 8)
    );
    new.submit(&release(word, 3), 3);
    assert!(holds_within(Duration::from_secs(5), || new.word() == 3));
}
