//! Profiles: GPU clock stamps around each value's work, converted to the host's clock.
//!
//! While a profile is taken, the queue each value's work enters writes the GPU's clock
//! after the value's waits, and the queue that releases it writes the clock before the
//! release ([`crate::place`] places those packets into 32-byte slots of a Pinned buffer this
//! module owns). At the end, stamps are converted to the host's `CLOCK_MONOTONIC` along the
//! line through two readings of the GPU clock against the host's (one at the start, one at
//! the end; at `clock_hz` from the latest when they lie less than a second apart), each
//! start no earlier than the end of the value before. A profile can be written as a Chrome
//! trace (`chrome://tracing`, Perfetto).

use std::fmt::Write as _;
use std::sync::Arc;

use rig_proto::{ClockSample, Request, Response};

use crate::buffer::Buffer;
use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::place::{STAMP_BYTES, StampSlots};

/// Values a profile stamps; later values run unstamped.
const SLOTS: u64 = 1 << 16;

/// A profile being taken.
#[derive(Debug)]
pub(crate) struct Taking {
    /// Names no device: the device keeps it, so it must not keep the device.
    stamps: Buffer,
    slots: StampSlots,
    start: ClockSample,
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
    /// Each stamped value's work, in value order.
    pub work: Vec<Work>,
    /// The device's name.
    pub device: String,
}

fn sample(dev: &DeviceShared) -> Result<ClockSample> {
    match dev.call(&Request::SampleClock { device: dev.id }, &[])?.0 {
        Response::Clock(c) => Ok(c),
        r => Err(Error::Protocol(format!(
            "rigd answered sample-clock with {r:?}"
        ))),
    }
}

fn host_mid(s: &ClockSample) -> f64 {
    (s.host_before_ns as f64 + s.host_after_ns as f64) / 2.0
}

/// Converts GPU clock stamps to host nanoseconds along two measures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    gpu: f64,
    host: f64,
    ns_per_tick: f64,
}

impl Line {
    pub(crate) fn new(first: &ClockSample, latest: &ClockSample, clock_hz: u64) -> Line {
        let (g0, h0) = (first.gpu as f64, host_mid(first));
        let (g1, h1) = (latest.gpu as f64, host_mid(latest));
        let ns_per_tick = if h1 - h0 >= 1e9 && g1 > g0 {
            (h1 - h0) / (g1 - g0)
        } else {
            1e9 / clock_hz.max(1) as f64
        };
        Line {
            gpu: g1,
            host: h1,
            ns_per_tick,
        }
    }

    pub(crate) fn host_ns(&self, gpu: u64) -> u64 {
        let ns = self.host + (gpu as f64 - self.gpu) * self.ns_per_tick;
        ns.max(0.0) as u64
    }
}

pub(crate) fn begin(dev: &Arc<DeviceShared>) -> Result<()> {
    let mut slot = dev
        .profile
        .lock()
        .map_err(|_| Error::Invalid("a thread panicked while it took a profile".into()))?;
    if slot.is_some() {
        return Err(Error::Invalid(
            "a profile is already being taken on this device".into(),
        ));
    }
    let stamps = dev.alloc_detached(STAMP_BYTES * SLOTS)?;
    dev.host_write(&stamps, 0, &vec![0u8; (STAMP_BYTES * SLOTS) as usize])?;
    let start = sample(dev)?;
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
    *slot = Some(Taking {
        stamps,
        slots,
        start,
    });
    Ok(())
}

pub(crate) fn end(dev: &Arc<DeviceShared>) -> Result<Profile> {
    let taking = dev
        .profile
        .lock()
        .map_err(|_| Error::Invalid("a thread panicked while it took a profile".into()))?
        .take()
        .ok_or_else(|| Error::Invalid("no profile is being taken on this device".into()))?;
    let last = {
        let mut placer = dev
            .placer
            .lock()
            .map_err(|_| Error::Invalid("a thread panicked while it submitted".into()))?;
        placer.stamps = None;
        placer.last()
    };
    let waited = dev.wait(last);
    let n = last
        .saturating_add(1)
        .saturating_sub(taking.slots.first)
        .min(taking.slots.slots);
    let mut raw = vec![0u8; (STAMP_BYTES * n) as usize];
    let read = waited.and_then(|()| dev.host_read(&taking.stamps, 0, &mut raw));
    if let Some(region) = taking.stamps.0.region {
        dev.free_after(region, last);
    }
    read?;
    let latest = sample(dev)?;
    let line = Line::new(&taking.start, &latest, dev.facts.clock_hz);
    let mut work = Vec::with_capacity(n as usize);
    let mut floor = 0u64;
    let at = |s: &[u8], o: usize| u64::from_le_bytes(s[o..o + 8].try_into().unwrap_or_default());
    for (i, s) in raw.chunks_exact(STAMP_BYTES as usize).enumerate() {
        // The earliest start of the queues the value's work entered (0: not entered).
        let g0 = match (at(s, 0), at(s, 8)) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
        let g1 = at(s, 16);
        if g0 == 0 || g1 == 0 {
            continue;
        }
        let start = line.host_ns(g0).max(floor);
        let end = line.host_ns(g1).max(start);
        floor = end;
        work.push(Work {
            value: taking.slots.first + i as u64,
            start_ns: start,
            end_ns: end,
        });
    }
    Ok(Profile {
        work,
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

    fn at(gpu: u64, host: u64) -> ClockSample {
        ClockSample {
            gpu,
            host_before_ns: host - 10,
            host_after_ns: host + 10,
        }
    }

    #[test]
    fn the_line_uses_the_clock_rate_until_measures_lie_a_second_apart() {
        // 100 MHz: 10 ns a tick.
        let l = Line::new(&at(1000, 5_000), &at(2000, 20_000), 100_000_000);
        assert_eq!(l.host_ns(2000), 20_000);
        assert_eq!(l.host_ns(2100), 21_000);
        // Two seconds apart, the GPU ran 1 % fast: the line follows the measures.
        let l = Line::new(
            &at(0, 1_000_000_000),
            &at(202_000_000, 3_000_000_000),
            100_000_000,
        );
        let ns = l.host_ns(101_000_000);
        assert!((ns as i64 - 2_000_000_000).abs() < 10, "{ns}");
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
