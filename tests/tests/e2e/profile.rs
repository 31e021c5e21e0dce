//! Profiles: clock stamps around each value's work, on the host's clock.

use rig_client::{Launch, Memory, Ref, Submission};
use rig_testkit::{Backend, Daemon};

fn each_profiled_value_has_its_work_in_host_time(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = dev.buffer(4096, Memory::Pinned).unwrap();
    let y = dev.buffer(4096, Memory::Pinned).unwrap();
    let launch = Submission::new().launch(
        Launch::new(&add, [4, 1, 1], [256, 1, 1])
            .params(&[0; 16])
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    let copy = Submission::new().copy(&x, 0, &y, 0, 4096);
    dev.submit(&launch).unwrap().wait().unwrap();
    let before = monotonic_ns();
    dev.begin_profile().unwrap();
    let first = dev.last().value() + 1;
    for _ in 0..3 {
        dev.submit(&launch).unwrap();
        dev.submit(&copy).unwrap();
    }
    // Work on both queues: its start is the earlier of the two.
    let both = Submission::new()
        .copy(&x, 0, &y, 0, 4096)
        .launch(
            Launch::new(&add, [4, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        )
        .after(&[0]);
    dev.submit(&both).unwrap();
    let p = dev.end_profile().unwrap();
    let after = monotonic_ns();
    assert_eq!(p.work.len(), 7, "{:?}", p.work);
    let mut end = 0;
    for (i, w) in p.work.iter().enumerate() {
        assert_eq!(w.value, first + i as u64);
        assert!(w.start_ns >= end && w.end_ns >= w.start_ns, "{w:?}");
        end = w.end_ns;
    }
    // Host time: the work lies between the host's readings around the profile, give or take
    // a millisecond of clock conversion.
    let ms = 1_000_000;
    assert!(
        p.work[0].start_ns + ms >= before,
        "{} before {before}",
        p.work[0].start_ns
    );
    assert!(
        p.work[5].end_ns <= after + ms,
        "{} after {after}",
        p.work[5].end_ns
    );
    let trace: serde_json::Value = serde_json::from_str(&p.chrome_trace()).unwrap();
    assert_eq!(trace["traceEvents"].as_array().unwrap().len(), 7);
    // Values submitted after the profile ended carry no stamps.
    dev.submit(&launch).unwrap().wait().unwrap();
}

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 => each_profiled_value_has_its_work_in_host_time);
