//! Profile times against a GPU clock with a known error put into it (rigd's `[sim.clock]`,
//! the emulated KFD's clock): each conversion lies within the error docs/profiling.md
//! states, and the 1 ms rule leaves no Work where a conversion cannot be right.
//!
//! A value's true times lie between the host's readings around its submit and its wait, so
//! a converted start before the first, or end after the second, by more than the stated
//! error is a conversion outside it. Each runs on a gfx1100, on a GFX12 GPU (whose source
//! the device takes a constant against at open) and through rigd's kfd path (where a
//! preempted GET_CLOCK_COUNTERS is a late host sample, not a wide measure).

use std::time::Duration;

use rig_client::{Device, Launch, Memory, Ref, Submission};
use rig_testkit::{Backend, Daemon};

/// A measure's deviation once one within the 10 us bound is taken.
const DEVIATION_NS: f64 = 5_000.0;
/// The most time between a stamp and the latest measure: the re-measure period.
const REMEASURE_NS: f64 = 62_500_000.0;
/// What a loaded machine adds: a re-measure dropped for a preemption of rigd's readings
/// leaves the latest one period older, and a measure at open may be the narrowest of
/// sixteen rather than one within the bound.
const SLACK_NS: f64 = 30_000.0;

/// The error a conversion may have on a clock `drift_ppm` off its stated rate: the
/// deviation, plus the rate error (the clock's own until the line runs through measures a
/// second apart, 10 ppm after) over twice the re-measure period.
fn bound_ns(drift_ppm: f64) -> f64 {
    DEVIATION_NS + drift_ppm.abs().max(10.0) * 1e-6 * 2.0 * REMEASURE_NS + SLACK_NS
}

/// One profiled value and the host's readings around it.
#[derive(Debug, Clone, Copy)]
struct Marker {
    value: u64,
    /// Before its submit.
    before: u64,
    /// After its wait returned.
    after: u64,
}

/// Submits `n` values, alternately a launch (COMPUTE:0) and a copy (COPY:0), each after
/// `gap` and waited for, in a profile; returns each with the profile's works by value.
fn markers(
    b: Backend,
    dev: &Device,
    n: usize,
    gap: Duration,
) -> Vec<(Marker, Option<rig_client::Work>)> {
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
    dev.begin_profile().unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        std::thread::sleep(gap);
        let before = monotonic_ns();
        let p = dev
            .submit(if i % 2 == 0 { &launch } else { &copy })
            .unwrap();
        p.wait().unwrap();
        let after = monotonic_ns();
        out.push(Marker {
            value: p.value(),
            before,
            after,
        });
    }
    let profile = dev.end_profile().unwrap();
    out.into_iter()
        .map(|m| {
            let w = profile.work.iter().find(|w| w.value == m.value).copied();
            (m, w)
        })
        .collect()
}

/// Panics unless marker `m`'s work lies within its host readings, give or take `bound`.
fn within(m: &Marker, w: &rig_client::Work, bound: f64) {
    let early = m.before as f64 - w.start_ns as f64;
    let late = w.end_ns as f64 - m.after as f64;
    assert!(
        early <= bound && late <= bound && w.start_ns <= w.end_ns,
        "value {}: work {}..{} ns, host readings {}..{}: {early:.0} ns early, {late:.0} ns late, the bound {bound:.0} ns",
        m.value,
        w.start_ns,
        w.end_ns,
        m.before,
        m.after
    );
}

fn conversions_stay_within_the_stated_error_under_an_offset_and_a_drift(b: Backend) {
    // 200 ppm fast, from 2^40 ticks, reads taking 500 ns; over 1.3 s, so the line runs
    // through measures a second apart for the last values.
    let drift = 200.0;
    let d = Daemon::start_clock(
        b,
        &format!("offset = 1099511627776\ndrift_ppm = {drift}\nread_ns = 500"),
    );
    let dev = d.device();
    let got = markers(b, &dev, 18, Duration::from_millis(75));
    for (m, w) in &got {
        let w = w.unwrap_or_else(|| panic!("value {} recorded no work: {got:?}", m.value));
        within(m, &w, bound_ns(drift));
    }
}

fn a_12ms_preemption_in_the_measure_at_open(b: Backend) {
    // The device's first read of the source is preempted for 12 ms: rigd's own read is
    // then 12 ms wide, and the device takes the next; KFD's is a host sample 12 ms late,
    // a narrow measure that puts every time 12 ms late until the first re-measure.
    let d = Daemon::start_clock(b, "drift_ppm = 50.0\nstall_read = 1\nstall_ms = 12");
    let dev = d.device();
    let open_end = monotonic_ns();
    let got = markers(b, &dev, 6, Duration::from_millis(0));
    let late = markers(b, &dev, 4, Duration::from_millis(80));
    if b.is_kfd() {
        // The first value converts with the late measure if no re-measure was due yet (the
        // first is due 62.5 ms after the late sample): its end lies 12 ms after the
        // conversion, and the 1 ms rule leaves it no work.
        let (m, w) = &got[0];
        if m.after < open_end + 50_000_000 {
            assert!(w.is_none(), "a 12 ms late measure converted {m:?} to {w:?}");
        }
        // Values converted after a re-measure are right again.
        for (m, w) in &late {
            within(m, &w.expect("work after a re-measure"), bound_ns(50.0));
        }
    } else {
        for (m, w) in got.iter().chain(&late) {
            within(m, &w.expect("work of every value"), bound_ns(50.0));
        }
    }
}

fn a_counter_a_constant_apart_from_the_stamps(b: Backend) {
    // The source counts 3 ms of ticks ahead of the stamps' clock. On GFX12 the device takes
    // the constant at open, against stamps its compute queue writes between two readings
    // of the host's clock (its error: half their interval plus the read's deviation); on
    // another GPU it takes none, every time is 3 ms early, before its submit, and the 1 ms
    // rule leaves no work at all.
    let d = Daemon::start_clock(b, "constant = 300000");
    let dev = d.device();
    let got = markers(b, &dev, 6, Duration::from_millis(20));
    let apart = matches!(
        dev.facts().clock,
        rig_client::ClockSource::Source { apart: true }
    );
    assert_eq!(apart, b.processor() == "gfx1201", "{:?}", dev.facts().clock);
    if apart {
        // Stamps at open on a loaded machine: a round trip of a submit and the host's
        // spin, well under 1 ms.
        let constant_error = 500_000.0;
        for (m, w) in &got {
            within(
                m,
                &w.expect("work of every value"),
                bound_ns(0.0) + constant_error,
            );
        }
    } else {
        assert!(
            got.iter().all(|(_, w)| w.is_none()),
            "a counter 3 ms apart converted to work: {got:?}"
        );
    }
}

fn a_drift_unaccounted_for_shows_as_the_clocks_own_error_until_a_second(b: Backend) {
    // 1000 ppm fast: until the line forms, each time is off by up to 1000 ppm of the time
    // since the latest measure (at most 62.5 ms: 62.5 us), and no more.
    let drift = 1000.0;
    let d = Daemon::start_clock(b, &format!("drift_ppm = {drift}"));
    let dev = d.device();
    for (m, w) in markers(b, &dev, 6, Duration::from_millis(100)) {
        within(&m, &w.expect("work of every value"), bound_ns(drift));
    }
}

rig_testkit::on_backends!(sim, gfx1201, kfd =>
    conversions_stay_within_the_stated_error_under_an_offset_and_a_drift,
    a_12ms_preemption_in_the_measure_at_open,
    a_counter_a_constant_apart_from_the_stamps,
    a_drift_unaccounted_for_shows_as_the_clocks_own_error_until_a_second,
);

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `t`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
