//! Profiles: GPU clock stamps around each value's work, converted to the host's clock.
//!
//! While a profile is taken, each queue a value's work enters writes the GPU's clock after
//! the value's waits, and the queue that releases it writes the clock before the release
//! ([`crate::place`] places those packets into 32-byte slots of a Pinned buffer this
//! module owns, and records which queues each value entered). Settle (a wait that reached
//! a value) and a later submit convert the stamps of the values reached, in value order,
//! along the device's clock ([`crate::clock`], which re-measures first when due): the
//! earliest start and the end, each no earlier than the end of the value converted before.
//! A reached value's stamp that its work never wrote loses the device
//! ([`FaultKind::Unstamped`](rig_proto::FaultKind::Unstamped)); a conversion that puts a
//! start before its submit, or an end after the conversion, by more than [`SANE_NS`]
//! records no [`Work`] for the value. A profile can be written as a Chrome trace
//! (`chrome://tracing`, Perfetto).

use std::fmt::Write as _;
use std::sync::Arc;

use rig_amd::pm4;
use rig_proto::{Fault, FaultKind, Request, Response};

use crate::buffer::Buffer;
use crate::clock::{Clock, Measure, monotonic_ns};
use crate::device::{Device, DeviceShared};
use crate::error::{Error, Result};
use crate::facts::ClockSource;
use crate::place::{STAMP_BYTES, StampSlots, Stamped};
use crate::submission::Submission;
use crate::types::Queue;

/// Values a profile stamps; later values run unstamped.
const SLOTS: u64 = 1 << 16;

/// How far a conversion may put a start before its submit, or an end after the
/// conversion, before the value's times are taken for wrong (1 ms).
pub(crate) const SANE_NS: i128 = 1_000_000;

/// How long a stamp at open may take the GPU to write (a second).
const STAMP_WITHIN_NS: u64 = 1_000_000_000;

/// A profile being taken.
#[derive(Debug)]
pub(crate) struct Taking {
    /// Names no device: the device keeps it, so it must not keep the device.
    stamps: Buffer,
    slots: StampSlots,
    /// The values converted so far.
    work: Vec<Work>,
    /// The end of the last value converted, in host nanoseconds.
    floor: u64,
}

/// The work of one value, in the host's `CLOCK_MONOTONIC` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// The value.
    pub value: u64,
    /// When its work started, after its waits.
    pub start_ns: u64,
    /// When its work ended, before its release.
    pub end_ns: u64,
}

/// What a profile recorded.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// Each value's work, in value order: every stamped value but those whose conversion
    /// failed the 1 ms check (docs/profiling.md).
    pub work: Vec<Work>,
    /// The device's name.
    pub device: String,
}

/// One read of the GPU's clock through rigd ([`Request::SampleClock`]).
fn sample(dev: &DeviceShared) -> Result<rig_proto::ClockSample> {
    match dev.call(&Request::SampleClock { device: dev.id }, &[])?.0 {
        Response::Clock(c) if c.gpu != 0 => Ok(c),
        Response::Clock(_) => Err(Error::Invalid(format!(
            "{}: rigd cannot read the GPU's clock",
            dev.name
        ))),
        r => Err(Error::Protocol(format!(
            "rigd answered sample-clock with {r:?}"
        ))),
    }
}

/// The device's first measure of its GPU's clock, at open, as its facts' clock says
/// ([`crate::clock`]); stamps it needs are values of its own, run before any other.
pub(crate) fn open_clock(dev: &Arc<DeviceShared>) -> Result<()> {
    let source = dev.facts.clock;
    let stamps = match source {
        ClockSource::Source { apart: false } => None,
        ClockSource::Source { apart: true } | ClockSource::RoundTrip => {
            if dev.target.compute != rig_proto::QueueKind::Pm4 {
                return Err(Error::Invalid(format!(
                    "{}: rig takes stamps of the clock at open only on a PM4 compute queue, and rigd states that this GPU's clock needs them",
                    dev.name
                )));
            }
            Some(dev.alloc_detached(4096)?)
        }
    };
    let mut read = || sample(dev).map(|s| Measure::of(&s, 0));
    let mut n = 0;
    let mut stamp = || {
        let b = stamps
            .as_ref()
            .ok_or_else(|| Error::Protocol("a stamp without a buffer".into()))?;
        n += 1;
        stamp_between(dev, b, 8 * n)
    };
    let opened = Clock::open(source, dev.facts.clock_hz, &mut read, &mut stamp);
    if let Some(b) = &stamps {
        if let Some(region) = b.0.region {
            dev.free_after(region, dev.placer.lock().map(|p| p.last()).unwrap_or(0));
        }
    }
    let clock = opened?;
    *dev.clock.lock().map_err(|_| poisoned())? = Some(clock);
    Ok(())
}

/// A stamp COMPUTE:0 writes at `at` of `b` (zero before), between two readings of the
/// host's clock: the first before the submit, the second once the stamp shows.
fn stamp_between(dev: &Arc<DeviceShared>, b: &Buffer, at: u64) -> Result<Measure> {
    let mut words = [0u32; 6];
    let n = pm4::CopyData::clock_to_memory(b.address() + at)
        .encode(&mut words)
        .map_err(|e| Error::Protocol(format!("cannot encode a clock stamp: {e}")))?;
    let s = Submission::new().words(Queue::Compute, &words[..n]);
    let mut got = [0u8; 8];
    let before = monotonic_ns();
    let point = Device(dev.clone()).submit(&s)?;
    let after = loop {
        dev.host_read(b, at, &mut got)?;
        let now = monotonic_ns();
        if u64::from_le_bytes(got) != 0 {
            break now;
        }
        if now.saturating_sub(before) > STAMP_WITHIN_NS {
            return Err(Error::Invalid(format!(
                "{}: the GPU wrote no stamp of its clock within a second",
                dev.name
            )));
        }
        std::thread::yield_now();
    };
    point.wait()?;
    Ok(Measure {
        gpu: u64::from_le_bytes(got),
        before,
        after,
        gap: 0,
    })
}

fn poisoned() -> Error {
    Error::Invalid("a thread panicked while it took a profile".into())
}

pub(crate) fn begin(dev: &Arc<DeviceShared>) -> Result<()> {
    let mut slot = dev.profile.lock().map_err(|_| poisoned())?;
    if slot.is_some() {
        return Err(Error::Invalid(
            "a profile is already being taken on this device".into(),
        ));
    }
    let stamps = dev.alloc_detached(STAMP_BYTES * SLOTS)?;
    dev.host_write(&stamps, 0, &vec![0u8; (STAMP_BYTES * SLOTS) as usize])?;
    let mut placer = dev
        .placer
        .lock()
        .map_err(|_| Error::Invalid("a thread panicked while it submitted".into()))?;
    let slots = StampSlots {
        gpu: stamps.address(),
        slots: SLOTS,
        first: placer.last() + 1,
    };
    placer.stamps = Some(slots);
    placer.stamped.clear();
    *slot = Some(Taking {
        stamps,
        slots,
        work: Vec::new(),
        floor: 0,
    });
    Ok(())
}

/// Converts the stamps of the values reached, if a profile is being taken (settle, and a
/// submit). A reached value's stamp that its work never wrote loses the device.
pub(crate) fn settle(dev: &DeviceShared) -> Result<()> {
    let mut slot = dev.profile.lock().map_err(|_| poisoned())?;
    match slot.as_mut() {
        Some(taking) => convert(dev, taking),
        None => Ok(()),
    }
}

/// Converts the stamps of every value reached whose stamps are not yet converted.
fn convert(dev: &DeviceShared, taking: &mut Taking) -> Result<()> {
    let reached = dev.signaled();
    let done: Vec<Stamped> = {
        let mut placer = dev
            .placer
            .lock()
            .map_err(|_| Error::Invalid("a thread panicked while it submitted".into()))?;
        let n = placer
            .stamped
            .iter()
            .take_while(|s| s.value <= reached)
            .count();
        placer.stamped.drain(..n).collect()
    };
    if done.is_empty() {
        return Ok(());
    }
    let mut guard = dev.clock.lock().map_err(|_| poisoned())?;
    let clock = guard
        .as_mut()
        .ok_or_else(|| Error::Protocol("a device without a clock".into()))?;
    if clock.due(monotonic_ns()) {
        clock.remeasure(&sample(dev)?);
    }
    let now = monotonic_ns();
    for s in done {
        let Some(i) = s.value.checked_sub(taking.slots.first) else {
            continue;
        };
        let mut raw = [0u8; STAMP_BYTES as usize];
        let host = taking.stamps.0.host.as_ref().ok_or_else(|| {
            Error::Protocol("rigd gave Pinned memory the host does not address".into())
        })?;
        host.region
            .read(host.offset + (STAMP_BYTES * i) as usize, &mut raw);
        let at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&raw[o..o + 8]);
            u64::from_le_bytes(w)
        };
        match times(clock, &s, [at(0), at(8), at(16)], taking.floor, now) {
            Times::Unwritten(which) => return Err(lose_unstamped(dev, s.value, which)),
            // Times 0, as for work the device cannot time: no Work.
            Times::Insane => {}
            Times::Work { start, end } => {
                taking.floor = end;
                taking.work.push(Work {
                    value: s.value,
                    start_ns: start,
                    end_ns: end,
                });
            }
        }
    }
    Ok(())
}

/// What the stamps of one reached value convert to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Times {
    /// Its work: start and end, in host nanoseconds.
    Work { start: u64, end: u64 },
    /// The conversion put the start before the submit, or the end after the conversion, by
    /// more than [`SANE_NS`]: both times are 0 and no work is recorded.
    Insane,
    /// A stamp the value's work should have written reads 0: which one.
    Unwritten(&'static str),
}

/// The times of reached value `s` from its stamps `[compute start, copy start, end]`, along
/// `clock`, no earlier than `floor`, converted at host time `now`.
fn times(clock: &Clock, s: &Stamped, stamps: [u64; 3], floor: u64, now: u64) -> Times {
    let [compute, copy, end] = stamps;
    if s.compute && compute == 0 {
        return Times::Unwritten("COMPUTE:0 start");
    }
    if s.copy && copy == 0 {
        return Times::Unwritten("COPY:0 start");
    }
    if end == 0 {
        return Times::Unwritten("end");
    }
    let first = match (s.compute, s.copy) {
        (true, true) => compute.min(copy),
        (true, false) => compute,
        (false, true) => copy,
        // A value whose work entered no queue still releases: the end is its start.
        (false, false) => end,
    };
    let (start, end) = (clock.host_ns(first), clock.host_ns(end));
    if start < i128::from(s.submitted) - SANE_NS || end > i128::from(now) + SANE_NS {
        return Times::Insane;
    }
    let start = u64::try_from(start).unwrap_or(0).max(floor);
    let end = u64::try_from(end).unwrap_or(0).max(start);
    Times::Work { start, end }
}

/// Loses the device from `value` on: its `which` stamp was never written though it completed.
fn lose_unstamped(dev: &DeviceShared, value: u64, which: &str) -> Error {
    let why = Fault::new(
        FaultKind::Unstamped,
        format!(
            "value {value} completed without its {which} stamp (the profile's stamps were overwritten, or the queue ran none)"
        ),
    );
    dev.lose_for(value, why)
}

pub(crate) fn end(dev: &Arc<DeviceShared>) -> Result<Profile> {
    let last = {
        let mut placer = dev
            .placer
            .lock()
            .map_err(|_| Error::Invalid("a thread panicked while it submitted".into()))?;
        if dev.profile.lock().map_err(|_| poisoned())?.is_none() {
            return Err(Error::Invalid(
                "no profile is being taken on this device".into(),
            ));
        }
        placer.stamps = None;
        placer.last()
    };
    // The wait settles: it converts what it reached.
    let waited = dev.wait(last);
    let taking = dev.profile.lock().map_err(|_| poisoned())?.take();
    let Some(mut taking) = taking else {
        return Err(Error::Invalid(
            "no profile is being taken on this device".into(),
        ));
    };
    let converted = waited.and_then(|()| convert(dev, &mut taking));
    if let Some(region) = taking.stamps.0.region {
        dev.free_after(region, last);
    }
    converted?;
    Ok(Profile {
        work: taking.work,
        device: dev.name.clone(),
    })
}

impl Profile {
    /// The profile as a Chrome trace (JSON), one complete event per value.
    pub fn chrome_trace(&self) -> String {
        let mut s = String::from("{\"traceEvents\":[");
        for (i, w) in self.work.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"name\":\"value {}\",\"cat\":\"work\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":{:.3},\"dur\":{:.3}}}",
                w.value,
                w.start_ns as f64 / 1e3,
                (w.end_ns - w.start_ns) as f64 / 1e3
            );
        }
        let _ = write!(
            s,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"device\":{:?}}}}}",
            self.device
        );
        s
    }

    /// Writes [`Profile::chrome_trace`] to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        std::fs::write(path, self.chrome_trace()).map_err(|source| Error::Io {
            what: "writing a chrome trace",
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> Clock {
        // 100 MHz, 10 ns a tick; tick 0 at host time 1 s.
        Clock::open(
            ClockSource::Source { apart: false },
            100_000_000,
            &mut || {
                Ok(Measure {
                    gpu: 100_000,
                    before: 1_000_000_000 + 999_000,
                    after: 1_000_000_000 + 1_001_000,
                    gap: 0,
                })
            },
            &mut || panic!("no stamps"),
        )
        .unwrap()
    }

    fn stamped(submitted: u64, compute: bool, copy: bool) -> Stamped {
        Stamped {
            value: 5,
            submitted,
            compute,
            copy,
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_start_is_the_earliest_queues_and_no_earlier_than_the_floor() {
        let c = clock();
        let s = stamped(S, true, true);
        assert_eq!(
            times(&c, &s, [300, 200, 500], 0, S + 10_000),
            Times::Work {
                start: S + 2_000,
                end: S + 5_000
            }
        );
        // The previous value ended later: this one starts at its end.
        assert_eq!(
            times(&c, &s, [300, 200, 500], S + 4_000, S + 10_000),
            Times::Work {
                start: S + 4_000,
                end: S + 5_000
            }
        );
        assert_eq!(
            times(&c, &s, [300, 200, 500], S + 6_000, S + 10_000),
            Times::Work {
                start: S + 6_000,
                end: S + 6_000
            }
        );
    }

    #[test]
    fn an_unwritten_stamp_of_a_queue_the_work_entered_is_unwritten() {
        let c = clock();
        assert_eq!(
            times(&c, &stamped(S, true, false), [0, 0, 500], 0, S),
            Times::Unwritten("COMPUTE:0 start")
        );
        assert_eq!(
            times(&c, &stamped(S, false, true), [0, 0, 500], 0, S),
            Times::Unwritten("COPY:0 start")
        );
        assert_eq!(
            times(&c, &stamped(S, true, true), [1, 1, 0], 0, S),
            Times::Unwritten("end")
        );
        // A queue the work did not enter writes no start.
        assert!(matches!(
            times(&c, &stamped(S, false, true), [0, 400, 500], 0, S + 10_000),
            Times::Work { .. }
        ));
    }

    #[test]
    fn times_more_than_1ms_outside_the_submit_and_the_conversion_are_no_work() {
        let c = clock();
        // Start 1 ms + 10 ns before the submit: off; 1 ms before: kept.
        let submit = S + 2_000 + 1_000_000;
        let at = |start: u64| {
            times(
                &c,
                &stamped(submit + 10, true, false),
                [start, 0, 500_000],
                0,
                S + 10_000_000,
            )
        };
        assert!(matches!(at(200), Times::Insane), "{:?}", at(200));
        assert!(matches!(at(201), Times::Work { .. }), "{:?}", at(201));
        // End 1 ms after the conversion: kept; 10 ns more: off.
        let s = stamped(S, true, false);
        let conv = S + 5_000 - 1_000_000;
        assert!(matches!(
            times(&c, &s, [200, 0, 500], 0, conv),
            Times::Work { .. }
        ));
        assert!(matches!(
            times(&c, &s, [200, 0, 501], 0, conv),
            Times::Insane
        ));
    }

    #[test]
    fn chrome_traces_are_json() {
        let p = Profile {
            work: vec![Work {
                value: 3,
                start_ns: 1000,
                end_ns: 3500,
            }],
            device: "AMD:0".into(),
        };
        let v: serde_json::Value = serde_json::from_str(&p.chrome_trace()).unwrap();
        assert_eq!(v["traceEvents"][0]["dur"], 2.5);
        assert_eq!(v["traceEvents"][0]["ph"], "X");
    }
}
