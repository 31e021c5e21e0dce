//! Waits for another device's point: made by this device's GPU (WAIT_REG_MEM64 on the other
//! device's word, which rigd maps into this device's address space) for devices of one
//! connection on one GPU, and on the host for a device of another simulated GPU.

use std::sync::mpsc;
use std::time::Duration;

use rig_client::{Buffer, Device, Memory, Point, Queue, Submission};
use rig_testkit::{Backend, Daemon};

use crate::compute_words::{held_until, release};

/// Device `b`'s value, held back until the host releases `flag`, that also fills `out` with
/// 9.
fn held_point(b: &Device, flag: &Buffer, out: &Buffer) -> Point {
    flag.write(|x| x.fill(0)).unwrap();
    b.submit(
        &Submission::new()
            .words(Queue::Compute, &held_until(b, flag))
            .fill(out, 0, out.len(), 9),
    )
    .unwrap()
}

/// Submits `s` to `a` on another thread; the answer comes back on the receiver.
fn submit_aside(a: &Device, s: Submission) -> mpsc::Receiver<rig_client::Result<Point>> {
    let (tx, rx) = mpsc::channel();
    let a = a.clone();
    std::thread::spawn(move || {
        let _ = tx.send(a.submit(&s));
    });
    rx
}

fn all(b: &Buffer, byte: u8) -> bool {
    b.read(|x| x.iter().all(|&y| y == byte)).unwrap()
}

fn the_gpu_holds_back_work_that_waits_for_another_devices_point(b: Backend) {
    let d = Daemon::start(b, None);
    let rig = d.rig();
    let (a, b) = (rig.open_device("0").unwrap(), rig.open_device("0").unwrap());
    assert!(a.facts().gpu_waits, "the GPU compares 64-bit words");
    let flag = crate::compute_words::flag(&b);
    let b_out = b.buffer(4096, Memory::Pinned).unwrap();
    let only_copy = a.buffer(8192, Memory::Pinned).unwrap();
    let both = a.buffer(4096, Memory::Pinned).unwrap();
    let one = crate::compute_words::flag(&a);
    release(&one);

    for round in 0..2u8 {
        let p = held_point(&b, &flag, &b_out);
        // A copy-only value (COMPUTE:0 waits and tells COPY:0 through a part word), then a
        // value with parts on both queues.
        let s1 = Submission::new()
            .fill(&only_copy, 0, 8192, 7 + round)
            .wait(&p);
        let s2 = Submission::new()
            .words(Queue::Compute, &held_until(&a, &one))
            .fill(&both, 0, 4096, 5 + round)
            .wait(&p);
        // The submits return while B's point cannot be reached: the host does not wait.
        let q1 = submit_aside(&a, s1)
            .recv_timeout(Duration::from_secs(20))
            .expect("a submit that waits on the GPU returns at once")
            .unwrap();
        let q2 = a.submit(&s2).unwrap();
        assert!(!p.signaled());
        std::thread::sleep(Duration::from_millis(50));
        // (A host read of A's buffers would wait for these very values.)
        assert!(!q1.signaled() && !q2.signaled(), "A ran before B's point");

        release(&flag);
        q2.wait().unwrap();
        assert!(q1.signaled() && p.signaled());
        assert!(all(&only_copy, 7 + round));
        assert!(all(&both, 5 + round));
        assert!(all(&b_out, 9));
    }
    // A point already reached costs no wait at all.
    let p = b.last();
    let q = a
        .submit(&Submission::new().fill(&both, 0, 4096, 1).wait(&p))
        .unwrap();
    q.wait().unwrap();
    assert!(all(&both, 1));
}

fn a_point_of_another_gpus_device_is_waited_for_on_the_host(b: Backend) {
    let d = Daemon::start_gpus(b, None, 2);
    let rig = d.rig();
    assert_eq!(rig.gpus().unwrap().len(), 2);
    let (a, b) = (rig.open_device("0").unwrap(), rig.open_device("1").unwrap());
    let flag = crate::compute_words::flag(&b);
    let b_out = b.buffer(4096, Memory::Pinned).unwrap();
    let out = a.buffer(4096, Memory::Pinned).unwrap();
    let p = held_point(&b, &flag, &b_out);
    let rx = submit_aside(&a, Submission::new().fill(&out, 0, 4096, 3).wait(&p));
    // The submit waits on the host: it cannot return before B's point is reached.
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    assert!(all(&out, 0));
    release(&flag);
    let q = rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap();
    q.wait().unwrap();
    assert!(p.signaled());
    assert!(all(&out, 3) && all(&b_out, 9));
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    the_gpu_holds_back_work_that_waits_for_another_devices_point,
    a_point_of_another_gpus_device_is_waited_for_on_the_host,
);
