//! Waits with a timeout, a non-blocking check, and sleeping waits that a release or a loss
//! wakes (the timeline word's futex and the lost flag's), through a real rigd.

use std::time::{Duration, Instant};

use rig_client::{Error, Launch, Memory, Ref, Submission, WaitPolicy};
use rig_testkit::{Backend, Daemon};

fn wait_timeout_answers_false_on_work_that_never_ends_and_lost_after_an_abort(b: Backend) {
    let Some(spin) = b.spin_kernel() else {
        return;
    };
    let d = Daemon::start(b, None);
    let dev = d.device();
    let k = dev.load_image(&spin).unwrap().resolve("spin").unwrap();
    let flag = dev.buffer(4, Memory::Pinned).unwrap();
    flag.write(|b| b.fill(0)).unwrap();
    let s = Submission::new().launch(
        Launch::new(&k, [1; 3], [1; 3])
            .params(&[0; 8])
            .refs(&[Ref::write(&flag, 0)]),
    );
    let point = dev.submit(&s).unwrap();
    assert!(!point.signaled());
    let t = Instant::now();
    assert!(
        !point
            .wait_with(WaitPolicy::default().with_timeout(Duration::from_millis(30)))
            .unwrap()
    );
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(30), "returned after {took:?}");
    assert!(took < Duration::from_secs(10), "returned after {took:?}");
    // A spinning wait with a timeout gives up too.
    let policy =
        WaitPolicy::spinning(Duration::from_secs(1)).with_timeout(Duration::from_millis(5));
    assert!(!point.wait_with(policy).unwrap());
    // A sleeping wait on another thread ends with the abort's loss.
    let p2 = point.clone();
    let waiter = std::thread::spawn(move || p2.wait_with(WaitPolicy::sleeping()));
    std::thread::sleep(Duration::from_millis(20));
    dev.clone().abort().unwrap();
    match waiter.join().unwrap() {
        Err(e @ Error::Lost { .. }) => assert!(e.to_string().contains("aborted"), "{e}"),
        r => panic!("a sleeping wait on aborted work returned {r:?}"),
    }
    assert!(matches!(
        point.wait_with(WaitPolicy::default().with_timeout(Duration::from_secs(1))),
        Err(Error::Lost { .. })
    ));
    assert!(!point.signaled());
}

fn sleeping_waits_end_with_their_release(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Pinned).unwrap();
    let s = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [64, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    // Each wait sleeps at once; the release of its value wakes it (a slice is 10 ms, so
    // 300 waits woken only by their slices would take 3 s at least).
    let t = Instant::now();
    for _ in 0..300 {
        let p = dev.submit(&s).unwrap();
        assert!(p.wait_with(WaitPolicy::sleeping()).unwrap());
        assert!(p.signaled());
    }
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "300 sleeping waits took {took:?}"
    );
    // With a timeout that is long enough, the answer is "reached".
    let p = dev.submit(&s).unwrap();
    assert!(
        p.wait_with(WaitPolicy::default().with_timeout(Duration::from_secs(20)))
            .unwrap()
    );
    dev.close().unwrap();
}

/// A sleeping wait ends because its release's interrupt woke it, on every path: whoever
/// receives the interrupt (rigd's sim path in the simulated queue's callback; through KFD,
/// the event thread of the client's worker on the KFD event) wakes the sleepers of the
/// device's word, which no GPU and no kernel does by itself. Counted, not timed: a sleep no
/// wake ends lasts its whole slice (10 ms) and counts as elapsed, so without the path's wake
/// no sleep of these waits is woken at all.
fn a_sleeping_wait_is_woken_by_its_release_interrupt(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Pinned).unwrap();
    let s = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [64, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    assert_eq!(dev.sleeps(), rig_client::Sleeps::default());
    // Most waits fall asleep before their release (the GPU's work takes longer than the
    // client's way into the futex); on a loaded machine a release may beat the sleep, which
    // then never begins. At most 400 waits: a hang guard.
    let mut waits = 0;
    while dev.sleeps().woken < 20 && waits < 400 {
        let p = dev.submit(&s).unwrap();
        assert!(p.wait_with(WaitPolicy::sleeping()).unwrap());
        waits += 1;
    }
    let sleeps = dev.sleeps();
    assert!(
        sleeps.woken >= 20,
        "{waits} sleeping waits: {sleeps:?} (sleeps that only their slice ended: the release's interrupt woke no one)"
    );
    dev.close().unwrap();
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    wait_timeout_answers_false_on_work_that_never_ends_and_lost_after_an_abort,
    sleeping_waits_end_with_their_release,
    a_sleeping_wait_is_woken_by_its_release_interrupt,
);
