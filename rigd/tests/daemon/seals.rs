//! A client cannot take pages away from under rigd: every memfd rigd shares is sealed
//! against resizing, and a memfd a client passes to `MapHost` is mapped only once it is
//! sealed against shrinking. Without that, one `ftruncate` would make rigd's (or the
//! simulated GPU's) next access a SIGBUS that ends rigd for every client.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rig_proto::messages::{ErrorCode, MemoryKind, Request, Response};
use rig_testkit::rigd::{Rigd, SIM, code};

fn ftruncate(fd: BorrowedFd<'_>, len: i64) -> std::io::Result<()> {
    // SAFETY: plain syscall on a live descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A memfd of `len` bytes made directly, as a client not using rig-shm would.
fn memfd(flags: libc::c_uint, len: i64) -> OwnedFd {
    // SAFETY: a valid C string; memfd_create returns a new descriptor or -1.
    let fd = unsafe { libc::memfd_create(c"client-memory".as_ptr(), flags) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: just created and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    ftruncate(fd.as_fd(), len).unwrap();
    fd
}

fn alive(d: &mut Rigd) -> bool {
    d.child.try_wait().unwrap().is_none()
}

#[test]
fn truncating_shared_memfds_fails_and_rigd_keeps_serving() {
    let mut d = Rigd::start(SIM);
    let mut c = d.client("truncator");
    let o = c.open();
    let dev = o.id();
    let m = &o.msg;
    let mut shared = vec![
        ("compute ring", m.compute.ring.host.fd),
        ("compute positions", m.compute.read.host.fd),
        ("copy ring", m.copy.ring.host.fd),
        ("doorbell page", m.compute.doorbell.fd),
        ("argument segment", m.args.memory.host.fd),
        ("timeline word", m.word.memory.host.fd),
        ("control page", m.submitted.fd),
    ];
    let mut pinned = Vec::new();
    for kind in [MemoryKind::Pinned, MemoryKind::Mapped] {
        let (r, fds) = c.call_fds(
            Request::Alloc {
                device: dev,
                memory: kind,
                bytes: 4 * 4096,
            },
            &[],
        );
        let Response::Allocated {
            host: Some(host), ..
        } = r
        else {
            panic!("{kind:?}: {r:?}")
        };
        pinned.push((kind, fds, host));
    }
    for (what, i) in shared.drain(..) {
        let fd = o.fds[i.0 as usize].as_fd();
        for len in [0, 1, 1 << 30] {
            let e = ftruncate(fd, len).expect_err(what);
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{what} to {len}: {e}");
        }
    }
    for (kind, fds, host) in &pinned {
        let fd = fds[host.fd.0 as usize].as_fd();
        let e = ftruncate(fd, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{kind:?}: {e}");
    }

    // rigd still reads every page it shares: the control page (status), the rings'
    // positions (show-device), and it goes on allocating.
    assert!(alive(&mut d), "rigd died; its log:\n{}", d.log());
    let r = c.call(Request::DeviceStatus { device: dev });
    assert!(matches!(r, Response::Status(_)), "{r:?}");
    let r = c.call(Request::ShowDevice { device: dev });
    assert!(matches!(r, Response::Device(_)), "{r:?}");
    let (r, _) = c.call_fds(
        Request::Alloc {
            device: dev,
            memory: MemoryKind::Pinned,
            bytes: 4096,
        },
        &[],
    );
    assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
    // Another client is served too.
    let mut other = d.client("bystander");
    assert!(matches!(
        other.call(Request::ListGpus),
        Response::Gpus(ref g) if !g.is_empty()
    ));
    assert!(alive(&mut d));
}

#[test]
fn map_host_needs_a_memfd_rigd_can_seal() {
    let mut d = Rigd::start(SIM);
    let mut c = d.client("mapper");
    let dev = c.open().id();
    let map = |c: &mut rig_testkit::rigd::Client, fd: &OwnedFd| {
        c.call_fds(
            Request::MapHost {
                device: dev,
                bytes: 2 * 4096,
                offset: 0,
            },
            &[fd.as_fd()],
        )
        .0
    };

    // Not sealable: refused with a typed error that says what to do.
    let plain = memfd(libc::MFD_CLOEXEC, 2 * 4096);
    let r = map(&mut c, &plain);
    assert_eq!(code(&r), Some(ErrorCode::InvalidArgument), "{r:?}");
    let Response::Error(e) = &r else { panic!() };
    assert!(e.message.contains("MFD_ALLOW_SEALING"), "{}", e.message);
    // The client can still shrink its own memory: rigd mapped none of it.
    ftruncate(plain.as_fd(), 0).unwrap();

    // Sealing forbidden (F_SEAL_SEAL) before anyone sealed it against shrinking.
    let locked = memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 2 * 4096);
    // SAFETY: F_ADD_SEALS with an int argument on a live descriptor.
    let sealed = unsafe { libc::fcntl(locked.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SEAL) };
    assert_eq!(sealed, 0);
    let r = map(&mut c, &locked);
    assert_eq!(code(&r), Some(ErrorCode::InvalidArgument), "{r:?}");

    // Not shared memory at all.
    let file = OwnedFd::from(std::fs::File::open("/proc/self/status").unwrap());
    let r = map(&mut c, &file);
    assert_eq!(code(&r), Some(ErrorCode::InvalidArgument), "{r:?}");

    // Sealable: rigd seals it and maps it; from then on it cannot shrink, but may grow.
    let good = memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 2 * 4096);
    let r = map(&mut c, &good);
    let Response::Mapped { region, .. } = r else {
        panic!("{r:?}")
    };
    let e = ftruncate(good.as_fd(), 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    ftruncate(good.as_fd(), 4 * 4096).unwrap();
    // A memfd from rig-shm is sealed already and maps as is.
    let made = rig_shm::SharedRegion::create("client-made", 2 * 4096).unwrap();
    let r = map(&mut c, &made.dup_fd().unwrap());
    assert!(matches!(r, Response::Mapped { .. }), "{r:?}");

    assert_eq!(
        c.call(Request::Free {
            device: dev,
            region
        }),
        Response::Done
    );
    assert!(alive(&mut d), "rigd died; its log:\n{}", d.log());
}
