//! What a program asks of its device: rigd's id (rigctl's), whether and why it is lost,
//! and its interrupt eventfd for an event loop.

use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rig_client::{Error, Memory, Submission};
use rig_kernels::{Compiler, Options, Source};
use rig_testkit::{Backend, Daemon, Inspector};

fn the_device_id_is_rigctls(b: Backend) {
    let d = Daemon::start(b, None);
    let mut inspect = Inspector::connect(&d);
    let a = d.device();
    let b = d.device();
    let listed: Vec<u64> = inspect.devices().iter().map(|i| i.device.0).collect();
    assert_ne!(a.id(), b.id());
    assert!(
        listed.contains(&a.id()) && listed.contains(&b.id()),
        "{listed:?}"
    );
}

/// Polls `dev`'s eventfd for up to 10 s; true once it is readable.
fn readable(dev: &rig_client::Device) -> bool {
    let mut fds = [PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::from(10_000u16)).unwrap() == 1
}

fn the_eventfd_turns_readable_when_work_completes(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let k = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = dev.buffer(4 * 64, Memory::Pinned).unwrap();
    let mut args = k.args();
    args.buffer(0, &x).unwrap().buffer(1, &x).unwrap();
    let s = Submission::new().launch(args.launch([1, 1, 1], [64, 1, 1]));
    let point = dev.submit(&s).unwrap();
    // An event loop: sleep on the fd until the point is reached, never on a wait.
    let start = Instant::now();
    while dev.signaled() < point.value() {
        assert!(start.elapsed() < Duration::from_secs(10), "never reached");
        assert!(readable(&dev), "the eventfd never turned readable");
        let mut count = [0u8; 8];
        let _ = nix::unistd::read(dev.as_fd().as_raw_fd(), &mut count);
    }
    point.wait().unwrap();
}

fn lost_says_why_once_rigd_lost_the_device(b: Backend) {
    let d = Daemon::start(b, Some(300));
    let dev = d.device();
    assert!(dev.lost().is_none());
    let spin = Compiler::find()
        .unwrap()
        .compile(
            &Source::opencl(
                "spin.cl",
                "kernel void spin(global volatile uint *f) { while (*f == 0) {} }",
            ),
            dev.arch(),
            &Options::default(),
        )
        .unwrap();
    let k = dev.load_image(&spin).unwrap().resolve("spin").unwrap();
    let flag = dev.buffer(4, Memory::Pinned).unwrap();
    let mut args = k.args();
    args.buffer("f", &flag).unwrap();
    let point = dev
        .submit(&Submission::new().launch(args.launch([1; 3], [1; 3])))
        .unwrap();
    assert!(dev.lost().is_none(), "lost before the hang bound");
    let waited = point.wait();
    assert!(matches!(waited, Err(Error::Lost { .. })), "{waited:?}");
    match dev.lost() {
        Some(e @ Error::Lost { .. }) => {
            assert_eq!(e.to_string(), waited.unwrap_err().to_string());
            assert!(
                e.to_string().contains("hang") || e.to_string().contains("300"),
                "{e}"
            );
        }
        other => panic!("lost() after the hang: {other:?}"),
    }
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    the_device_id_is_rigctls,
    the_eventfd_turns_readable_when_work_completes,
    lost_says_why_once_rigd_lost_the_device,
);
