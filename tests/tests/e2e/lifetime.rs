//! Lifetimes of client handles, checked from rigd's side (an inspecting connection, as
//! rigctl sees it): an image is unloaded once its last handle drops, kernels resolved or
//! not; the last drop of a device's handles closes it and stops its work, and the
//! connection goes with it; an abort stops work that never ends at once.

use std::time::{Duration, Instant};

use rig_client::{Error, Launch, Memory, Ref, Submission};
use rig_testkit::{Backend, Daemon, Inspector, eventually};

fn images_whose_kernels_were_resolved_are_unloaded_when_dropped(b: Backend) {
    let d = Daemon::start(b, None);
    let rig = d.rig();
    let dev = rig.open_device("0").unwrap();
    let mut inspect = Inspector::connect(&d);
    let id = inspect.devices()[0].device;
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Pinned).unwrap();
    let round = || {
        let image = dev.load_image(&b.code("add")).unwrap();
        let add = image.resolve("add").unwrap();
        let s = Submission::new().launch(
            Launch::new(&add, [1, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        );
        dev.submit(&s).unwrap().wait().unwrap();
        // The launch's value is reached: dropping the handles unloads the image now.
    };
    // The first round makes what stays (the kernel's scratch, if any).
    round();
    rig.gpus().unwrap(); // a call: rigd has read the posted unload and free before it
    let base = inspect.settled_report(id);
    assert_eq!(base.images, 0, "the first round's image is unloaded");
    for _ in 0..20 {
        round();
    }
    rig.gpus().unwrap();
    let after = inspect.settled_report(id);
    assert_eq!(
        after.images, 0,
        "20 rounds left {} images loaded",
        after.images
    );
    assert_eq!(
        after.info.memory, base.info.memory,
        "20 load/resolve/drop rounds changed the device's memory"
    );
    assert_eq!(after.regions, base.regions);
}

fn dropping_every_handle_closes_the_device_and_the_connection(b: Backend) {
    let d = Daemon::start(b, None);
    let mut inspect = Inspector::connect(&d);
    eventually("only the inspector is connected", || inspect.clients() == 1);
    let dev = d.rig().open_device("0").unwrap(); // the Rig handle drops here
    assert_eq!(inspect.devices().len(), 1);
    assert_eq!(inspect.clients(), 2);
    let image = dev.load_image(&b.code("add")).unwrap();
    let add = image.resolve("add").unwrap();
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Device).unwrap();
    let s = Submission::new().launch(
        Launch::new(&add, [1, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    dev.begin_profile().unwrap();
    let point = dev.submit(&s).unwrap();
    point.wait().unwrap();
    // Each handle keeps the device open while it lives.
    drop((dev, image, s));
    assert_eq!(
        inspect.devices().len(),
        1,
        "the kernel and buffers keep it open"
    );
    drop((add, x));
    assert_eq!(
        inspect.devices().len(),
        1,
        "a buffer and a point keep it open"
    );
    drop((y, point));
    // The last drop closed it (a call to rigd), and the connection with it.
    assert!(inspect.devices().is_empty(), "rigd still holds the device");
    eventually("the client's connection is gone", || inspect.clients() == 1);
}

fn dropping_a_device_whose_kernel_never_ends_stops_it_at_once(b: Backend) {
    let Some(spin) = b.spin_kernel() else {
        return;
    };
    let d = Daemon::start(b, Some(2000));
    let mut inspect = Inspector::connect(&d);
    let dev = d.rig().open_device("0").unwrap();
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
    let start = Instant::now();
    drop((dev, k, flag, s, point));
    assert!(inspect.devices().is_empty(), "rigd still holds the device");
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "the last drop took {took:?}: it waited for the work"
    );
}

fn an_abort_stops_a_kernel_that_never_ends_at_once(b: Backend) {
    let Some(spin) = b.spin_kernel() else {
        return;
    };
    let d = Daemon::start(b, Some(2000));
    let mut inspect = Inspector::connect(&d);
    let dev = d.rig().open_device("0").unwrap();
    let k = dev.load_image(&spin).unwrap().resolve("spin").unwrap();
    let flag = dev.buffer(4, Memory::Pinned).unwrap();
    flag.write(|b| b.fill(0)).unwrap();
    let s = Submission::new().launch(
        Launch::new(&k, [1; 3], [1; 3])
            .params(&[0; 8])
            .refs(&[Ref::write(&flag, 0)]),
    );
    let point = dev.submit(&s).unwrap();
    let other = dev.clone();
    let start = Instant::now();
    dev.abort().unwrap();
    let took = start.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "abort took {took:?} (hang_ms is 2000)"
    );
    assert!(inspect.devices().is_empty(), "rigd still holds the device");
    // What it had not reached is lost, and the device is closed for every handle.
    match point.wait() {
        Err(e @ Error::Lost { .. }) => assert!(e.to_string().contains("aborted"), "{e}"),
        r => panic!("a wait on aborted work returned {r:?}"),
    }
    assert!(matches!(
        other.submit(&Submission::new()),
        Err(Error::Invalid(_))
    ));
    assert!(took < Duration::from_millis(500));
}

/// rigd closes a connection that holds nothing after `connections.idle_ms`; a program that
/// kept only its `Rig` meanwhile is not broken by it: its next calls get a new connection.
/// One that holds a device is never closed for silence.
fn a_rig_that_holds_nothing_outlives_rigds_idle_timeout(b: Backend) {
    let d = Daemon::start_idle(b, 200);
    let rig = d.rig();
    let names = rig.gpus().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(rig.gpus().unwrap(), names, "a call after the idle timeout");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        rig.ping().unwrap() < Duration::from_secs(10),
        "a ping after it"
    );
    let dev = rig.open_device("AMD:0").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    // Held a device all along: the same connection still serves it.
    let b = dev.buffer(4096, Memory::Pinned).unwrap();
    drop(b);
    dev.close().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        rig.gpus().unwrap(),
        names,
        "a call after the last device closed"
    );
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    images_whose_kernels_were_resolved_are_unloaded_when_dropped,
    dropping_every_handle_closes_the_device_and_the_connection,
    dropping_a_device_whose_kernel_never_ends_stops_it_at_once,
    an_abort_stops_a_kernel_that_never_ends_at_once,
    a_rig_that_holds_nothing_outlives_rigds_idle_timeout,
);
