//! Grants (issue 29): a socket of rigd's own per allocation, every connection on which holds
//! the allocation's share whatever its uid, against the real rigd binary. The attacks a
//! container could try through its grant's socket, each refused with the grant and its
//! limit named: a GPU outside the grant, memory past the share, more devices, an
//! administrator's request (as root, too), another grant's devices; and the revocation that
//! closes a grant's connections and gives back what they held.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rig_proto::messages::{
    DeviceId, ErrorCode, GrantGpu, GrantSpec, Holder, MemoryKind, Request, Response, Shortage,
};
use rig_testkit::rigd::{Client, Rigd, code, holds_within as eventually};

const MIB: u64 = 1 << 20;

/// Two simulated gfx1100s of 1 GiB, the socket open to every user.
const TWO_GPUS: &str = "[daemon]\nmode = 0o666\n\n[access]\nany = true\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 300\n\n[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\nhang_ms = 300\n";

fn spec(id: &str, gpu: u32, bytes: u64, devices: u32) -> GrantSpec {
    GrantSpec {
        id: id.into(),
        gpus: vec![GrantGpu { gpu, bytes }],
        devices,
        holder: Holder {
            resource: "rig.dev/gpu-memory".into(),
            devices: vec![format!("gpu{gpu}-m0")],
            ..Holder::default()
        },
    }
}

/// Grants `s` through the administrator's connection `admin`; the grant's socket.
fn grant(admin: &mut Client, s: GrantSpec) -> PathBuf {
    match admin.call(Request::Grant(Box::new(s))) {
        Response::Granted { socket } => socket.into(),
        r => panic!("grant refused: {r:?}"),
    }
}

/// A client on the socket at `path`.
fn on(path: &Path, program: &str) -> Client {
    Client {
        conn: rig_proto::Connection::connect(path, program).expect("connect to the grant"),
    }
}

fn error(r: &Response) -> &rig_proto::ErrorReply {
    match r {
        Response::Error(e) => e,
        r => panic!("not an error: {r:?}"),
    }
}

fn open(c: &mut Client, gpu: u32) -> Response {
    c.call_fds(Request::OpenDevice { gpu }, &[]).0
}

fn opened(r: Response) -> DeviceId {
    match r {
        Response::DeviceOpened(d) => d.device,
        r => panic!("open failed: {r:?}"),
    }
}

/// The bytes grant `id`'s connections hold on its first GPU, as `rigctl grants` shows them.
fn held(admin: &mut Client, id: &str) -> u64 {
    match admin.call(Request::Grants) {
        Response::Grants(g) => {
            g.iter()
                .find(|g| g.spec.id == id)
                .expect("the grant")
                .gpu_bytes[0]
        }
        r => panic!("{r:?}"),
    }
}

fn alloc(c: &mut Client, device: DeviceId, bytes: u64) -> Response {
    c.call(Request::Alloc {
        device,
        memory: MemoryKind::Device,
        bytes,
    })
}

#[test]
fn a_grant_socket_holds_every_connection_to_the_share() {
    let d = Rigd::start(TWO_GPUS);
    let mut admin = d.client("plugin");
    let socket = grant(&mut admin, spec("pod-a", 0, 64 * MIB, 2));
    let alloc_dir = d.dir.path().join("alloc");
    assert_eq!(socket, alloc_dir.join("pod-a").join("rigd.sock"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode(&alloc_dir),
        0o700,
        "only root on the host reaches the grants"
    );
    assert_eq!(mode(socket.parent().unwrap()), 0o755);

    // This test runs as root: on the grant's socket root is no administrator.
    let mut a = on(&socket, "pod-a");
    for r in [Request::DaemonStatus, Request::Grants, Request::ListClients] {
        let name = r.name();
        let refused = a.call(r);
        let e = error(&refused);
        assert_eq!(e.code, ErrorCode::PermissionDenied, "{name}");
        assert!(e.message.contains("grant pod-a"), "{name}: {}", e.message);
    }

    // A GPU outside the grant.
    let refused = open(&mut a, 1);
    let e = error(&refused);
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        e.message.contains("grant pod-a") && e.message.contains("gpu 0 only"),
        "{}",
        e.message
    );
    // More devices than the grant's, across its connections.
    let mut a2 = on(&socket, "pod-a second");
    let first = opened(open(&mut a, 0));
    let second = opened(open(&mut a2, 0));
    let refused = open(&mut a, 0);
    let e = error(&refused);
    assert_eq!(e.code, ErrorCode::Quota);
    assert!(
        e.message.contains("grant pod-a holds 2 devices") && e.message.contains("(2)"),
        "{}",
        e.message
    );
    // Memory past the share, across its connections.
    assert!(matches!(
        alloc(&mut a, first, 48 * MIB),
        Response::Allocated { .. }
    ));
    // The share counts all the grant's devices hold: the 48 MiB and both devices' rings
    // and control pages.
    let held = held(&mut admin, "pod-a");
    assert!(held > 48 * MIB && held < 49 * MIB, "{held}");
    match alloc(&mut a2, second, 32 * MIB) {
        Response::NoMemory {
            shortage: Shortage::Quota,
            limit: Some(l),
            ..
        } => {
            assert_eq!(l.name, "grant pod-a memory on gpu 0");
            assert_eq!((l.value, l.missing), (64 * MIB, held + 32 * MIB - 64 * MIB));
        }
        r => panic!("past the share: {r:?}"),
    }
    assert!(matches!(
        alloc(&mut a2, second, 64 * MIB - held),
        Response::Allocated { .. }
    ));

    // A second grant on the same GPU: neither sees nor names the other's devices.
    let socket_b = grant(&mut admin, spec("pod-b", 0, 64 * MIB, 1));
    let mut b = on(&socket_b, "pod-b");
    let bd = opened(open(&mut b, 0));
    for r in [
        Request::Facts { device: first },
        Request::ShowDevice { device: first },
        Request::CloseDevice { device: first },
        Request::MapPeerWord {
            device: bd,
            peer: first,
        },
    ] {
        let name = r.name();
        assert_eq!(
            code(&b.call(r)),
            Some(ErrorCode::NoSuchDevice),
            "{name} of another grant's device"
        );
    }
    match b.call(Request::ListDevices) {
        Response::Devices(v) => {
            assert_eq!(v.iter().map(|d| d.device).collect::<Vec<_>>(), [bd])
        }
        r => panic!("{r:?}"),
    }
    match a.call(Request::ListDevices) {
        Response::Devices(v) => assert!(v.iter().all(|d| d.device != bd), "{v:?}"),
        r => panic!("{r:?}"),
    }

    // rigd knows each connection's grant; the grants list says what each holds.
    match admin.call(Request::ListClients) {
        Response::Clients(c) => {
            let grants: Vec<Option<&str>> = c.iter().map(|c| c.grant.as_deref()).collect();
            assert_eq!(grants.iter().filter(|g| **g == Some("pod-a")).count(), 2);
            assert_eq!(grants.iter().filter(|g| **g == Some("pod-b")).count(), 1);
            assert_eq!(grants.iter().filter(|g| g.is_none()).count(), 1);
        }
        r => panic!("{r:?}"),
    }
    match admin.call(Request::Grants) {
        Response::Grants(g) => {
            let a = g.iter().find(|g| g.spec.id == "pod-a").expect("pod-a");
            assert_eq!((a.connections, a.devices), (2, 2));
            assert_eq!(a.gpu_bytes, [64 * MIB]);
        }
        r => panic!("{r:?}"),
    }

    // The same grant asked again (the plugin naming its pod) keeps its connections.
    let mut named = spec("pod-a", 0, 64 * MIB, 2);
    named.holder.pod = Some("tenant-a".into());
    assert_eq!(grant(&mut admin, named), socket);
    assert!(matches!(
        a.call(Request::DeviceStatus { device: first }),
        Response::Status(s) if s.lost.is_none()
    ));

    // Revoked: its connections are closed, what they held given back, its socket and
    // directory gone; the other grant goes on.
    assert_eq!(
        admin.call(Request::Revoke { id: "pod-a".into() }),
        Response::Done
    );
    assert!(
        eventually(Duration::from_secs(20), || a
            .try_call(Request::ListGpus)
            .is_err()),
        "the revoked grant's connection is closed"
    );
    assert!(!socket.exists() && !socket.parent().unwrap().exists());
    assert!(
        eventually(Duration::from_secs(20), || {
            match admin.call(Request::ListDevices) {
                Response::Devices(v) => v.iter().all(|d| d.device != first && d.device != second),
                _ => false,
            }
        }),
        "the revoked grant's devices are given back"
    );
    match admin.call(Request::Grants) {
        Response::Grants(g) => {
            assert_eq!(
                g.iter().map(|g| g.spec.id.as_str()).collect::<Vec<_>>(),
                ["pod-b"]
            )
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        b.call(Request::DeviceStatus { device: bd }),
        Response::Status(s) if s.lost.is_none()
    ));
    assert_eq!(
        code(&admin.call(Request::Revoke { id: "pod-a".into() })),
        Some(ErrorCode::InvalidArgument)
    );
}

#[test]
fn grants_are_checked_and_only_administrators_make_them() {
    let d = Rigd::start(TWO_GPUS);
    let mut admin = d.client("plugin");
    for (s, want) in [
        (spec("../escape", 0, MIB, 1), ErrorCode::InvalidArgument),
        (spec(".hidden", 0, MIB, 1), ErrorCode::InvalidArgument),
        (spec("a/b", 0, MIB, 1), ErrorCode::InvalidArgument),
        (spec("ok", 0, MIB, 0), ErrorCode::InvalidArgument),
        (spec("ok", 7, MIB, 1), ErrorCode::NoSuchGpu),
    ] {
        let id = s.id.clone();
        assert_eq!(
            code(&admin.call(Request::Grant(Box::new(s)))),
            Some(want),
            "{id}"
        );
    }
    assert!(!d.dir.path().join("escape").exists());
    // A grant's connection cannot make grants, nor revoke another's.
    let socket = grant(&mut admin, spec("pod-a", 0, MIB, 1));
    grant(&mut admin, spec("pod-b", 0, MIB, 1));
    let mut a = on(&socket, "pod-a");
    for r in [
        Request::Grant(Box::new(spec("pod-a", 0, 1 << 30, 8))),
        Request::Revoke { id: "pod-b".into() },
    ] {
        assert_eq!(code(&a.call(r)), Some(ErrorCode::PermissionDenied));
    }
    // Another share under the same id ends the old grant and its connections first.
    let again = grant(&mut admin, spec("pod-a", 1, MIB, 1));
    assert_eq!(again, socket);
    assert!(eventually(Duration::from_secs(20), || a
        .try_call(Request::ListGpus)
        .is_err()));
    let mut a = on(&socket, "pod-a");
    assert_eq!(code(&open(&mut a, 0)), Some(ErrorCode::PermissionDenied));
    opened(open(&mut a, 1));
}

#[test]
fn host_memory_counts_against_a_grants_share() {
    let d = Rigd::start(TWO_GPUS);
    let mut admin = d.client("plugin");
    let socket = grant(&mut admin, spec("pod-a", 0, 64 * MIB, 1));
    let mut a = on(&socket, "pod-a");
    let device = opened(open(&mut a, 0));
    let pinned = |c: &mut Client, bytes| {
        c.call_fds(
            Request::Alloc {
                device,
                memory: MemoryKind::Pinned,
                bytes,
            },
            &[],
        )
        .0
    };
    assert!(matches!(
        pinned(&mut a, 48 * MIB),
        Response::Allocated { .. }
    ));
    // Pinned memory is host memory: it is held to the share too, or a pod could take the
    // memory of its uid's other pods (and the host's) through it.
    for (what, r) in [
        ("Pinned", pinned(&mut a, 32 * MIB)),
        ("Device", alloc(&mut a, device, 32 * MIB)),
    ] {
        match r {
            Response::NoMemory {
                shortage: Shortage::Quota,
                limit: Some(l),
                ..
            } => assert_eq!(l.name, "grant pod-a memory on gpu 0", "{what}"),
            r => panic!("{what} memory past the share: {r:?}"),
        }
    }
    assert!(held(&mut admin, "pod-a") > 48 * MIB);
}

#[test]
fn grants_of_one_uid_each_get_the_users_limits() {
    // A user may hold 384 MiB, and half of a 1 GiB GPU; two grants and the host's own
    // connection, all root, hold 320 MiB each.
    let d = Rigd::start(&format!(
        "{TWO_GPUS}\n[limits]\ngpu_share_percent = 50\nmemory_bytes = 402653184\n"
    ));
    let mut admin = d.client("plugin");
    let take = |c: &mut Client, who: &str| {
        let device = opened(open(c, 0));
        let r = alloc(c, device, 320 * MIB);
        assert!(
            matches!(r, Response::Allocated { .. }),
            "{who}: 320 MiB within its own limits: {r:?}"
        );
        device
    };
    let a = grant(&mut admin, spec("pod-a", 0, 512 * MIB, 1));
    let b = grant(&mut admin, spec("pod-b", 0, 512 * MIB, 1));
    let mut ca = on(&a, "pod-a");
    let mut cb = on(&b, "pod-b");
    let da = take(&mut ca, "pod-a");
    take(&mut cb, "pod-b");
    take(&mut admin, "the host's root");
    // Each is still held to the user's limits on its own: 320 MiB more of memory_bytes is
    // past 384 MiB, and of the GPU past its half.
    match alloc(&mut ca, da, 64 * MIB) {
        Response::NoMemory { limit: Some(l), .. } => {
            assert_eq!(l.name, "limits.memory_bytes", "{l:?}")
        }
        r => panic!("past the user's limit: {r:?}"),
    }
}

#[test]
fn the_users_limits_hold_on_a_grant_socket_too() {
    let d = Rigd::start(&format!("{TWO_GPUS}\n[limits]\ndevices = 1\n"));
    let mut admin = d.client("plugin");
    let socket = grant(&mut admin, spec("pod-a", 0, 1 << 30, 4));
    let mut a = on(&socket, "pod-a");
    opened(open(&mut a, 0));
    let refused = open(&mut a, 0);
    assert!(
        error(&refused).message.contains("limits.devices (1)"),
        "{refused:?}"
    );
}

#[test]
fn at_a_stop_grant_sockets_go_and_their_directories_stay() {
    let mut d = Rigd::start(TWO_GPUS);
    let mut admin = d.client("plugin");
    let socket = grant(&mut admin, spec("pod-a", 0, MIB, 1));
    drop(admin);
    let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = d.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "the socket is removed");
    assert!(
        socket.parent().unwrap().is_dir(),
        "the directory a container mounts stays for the grant made again"
    );
}

/// The child half of [`another_uid_on_a_grant_socket_is_held_to_the_share`]: as user
/// 65534, connects to the grant's socket through the directory descriptor the parent
/// left open (as a container reaches it through its mount), and prints what rigd answered.
#[test]
fn child_on_grant() {
    let Ok(socket) = std::env::var("RIGD_TEST_GRANT_SOCKET") else {
        return;
    };
    let result = (|| {
        let mut c = on(Path::new(&socket), "other user");
        let mut said = Vec::new();
        let outside = open(&mut c, 1);
        said.push(format!("outside={:?}", code(&outside)));
        let inside = open(&mut c, 0);
        let Response::DeviceOpened(o) = inside else {
            return Err(format!("open: {inside:?}"));
        };
        match alloc(&mut c, o.device, 2 * MIB) {
            Response::NoMemory { limit: Some(l), .. } => said.push(format!("past={}", l.name)),
            r => said.push(format!("past={r:?}")),
        }
        Ok(said.join(" "))
    })();
    match result {
        Ok(s) => println!("RESULT {s}"),
        Err(e) => println!("RESULT {e}"),
    }
}

#[test]
fn another_uid_on_a_grant_socket_is_held_to_the_share() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run a client as another user; skipping");
        return;
    }
    let d = Rigd::start(TWO_GPUS);
    let mut admin = d.client("plugin");
    let socket = grant(&mut admin, spec("pod-a", 0, MIB, 1));
    // The host path is root's only (the grants directory is 0700); the child reaches the
    // socket through a descriptor of the grant's own directory, as a container through
    // its bind mount of it.
    let dir = nix::fcntl::open(
        socket.parent().unwrap(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    use std::os::fd::AsRawFd;
    let through = format!("/proc/self/fd/{}/rigd.sock", dir.as_raw_fd());
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_on_grant),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_TEST_GRANT_SOCKET", &through)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let _ = nix::unistd::close(dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
        .unwrap_or_else(|| {
            format!(
                "no result: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(
        result,
        "outside=Some(PermissionDenied) past=grant pod-a memory on gpu 0"
    );
    // Its connection counted under its own uid and the grant.
    assert!(d.log().contains("grant"));
}
