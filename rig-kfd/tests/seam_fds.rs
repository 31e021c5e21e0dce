//! The emulated KFD's wire passes descriptors through rig-proto's descriptor passing: every
//! descriptor a message carries is the receiver's to close, however many came and whether
//! or not the message fit.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use rig_kfd::seam;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn pair() -> (OwnedFd, OwnedFd) {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap()
}

fn memfds(n: usize) -> Vec<OwnedFd> {
    (0..n)
        .map(|_| {
            rig_shm::SharedRegion::create("seam", 4096)
                .unwrap()
                .dup_fd()
                .unwrap()
        })
        .collect()
}

// One test, so no other test opens or closes descriptors while the counts are taken.
#[test]
fn received_descriptors_are_owned_whatever_their_number_and_whether_the_message_fit() {
    let (a, b) = pair();
    // More than fit the control buffer the seam had (4): then the kernel cut the control
    // data, nix walked none of it, and the descriptors that arrived stayed open.
    let many = memfds(16);
    let borrowed: Vec<BorrowedFd<'_>> = many.iter().map(AsFd::as_fd).collect();
    let before = open_fds();
    seam::send(a.as_fd(), b"many", &borrowed).unwrap();
    let mut buf = [0u8; 64];
    let (n, got) = seam::recv(b.as_fd(), &mut buf).unwrap().unwrap();
    assert_eq!(&buf[..n], b"many");
    assert_eq!(got.len(), 16);
    drop(got);
    assert_eq!(
        open_fds(),
        before,
        "every received descriptor closed with its owner"
    );

    // A message longer than the buffer is refused, and its descriptors closed.
    seam::send(a.as_fd(), &[7u8; 128], &borrowed[..3]).unwrap();
    let e = seam::recv(b.as_fd(), &mut buf).unwrap_err();
    assert_eq!(e.0, libc::EMSGSIZE);
    assert_eq!(
        open_fds(),
        before,
        "a refused message leaves no descriptor open"
    );

    drop(a);
    assert!(seam::recv(b.as_fd(), &mut buf).unwrap().is_none());
}
