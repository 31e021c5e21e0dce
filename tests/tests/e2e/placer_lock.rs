//! The placer's lock is never held across a call to rigd: a submit that needs bigger rings
//! asks rigd for them with the lock released, so the device's other users (here
//! `Device::last`, which takes the lock) go on while rigd has not answered.

use std::sync::mpsc;
use std::time::Duration;

use rig_client::{Memory, Submission};
use rig_testkit::{Backend, Daemon};

fn the_device_answers_while_rigd_grows_its_rings(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let src = dev.buffer(1 << 20, Memory::Pinned).unwrap();
    let dst = dev.buffer(1 << 20, Memory::Pinned).unwrap();
    // 4000 copies: far past a 64 KiB copy ring, so the submit asks rigd to grow it.
    let mut s = Submission::new();
    for i in 0..4000u64 {
        s = s.copy(&src, i * 131, &dst, i * 131, 127);
    }
    let before = dev.last().value();
    // rigd stands still: the growth is asked and not answered until it resumes.
    d.pause();
    let submitter = {
        let dev = dev.clone();
        std::thread::spawn(move || dev.submit(&s).map(|p| p.value()))
    };
    // Time for the submitter to reach its call (the check below holds either way).
    std::thread::sleep(Duration::from_millis(300));
    let (tx, rx) = mpsc::channel();
    let asker = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let _ = tx.send(dev.last().value());
        })
    };
    let answered = rx.recv_timeout(Duration::from_secs(5));
    d.resume();
    let placed = submitter.join().unwrap();
    asker.join().unwrap();
    assert_eq!(
        answered,
        Ok(before),
        "Device::last waited for the placer's lock while rigd had not answered a growth"
    );
    let v = placed.expect("the submission is placed once rigd answers");
    assert_eq!(v, before + 1);
    dev.last().wait().unwrap();
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 => the_device_answers_while_rigd_grows_its_rings);
