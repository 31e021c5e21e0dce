//! The GPU clock: a counter that runs against the host's `CLOCK_MONOTONIC` as a
//! [`ClockModel`] says, so a test can put a known clock error under rig's profiles.
//!
//! Two counters are modelled, as a GPU has them:
//!
//! - the **stamp clock** ([`ClockRelation`]), which packets write (PM4 COPY_DATA and
//!   RELEASE_MEM of the GPU clock, SDMA TIMESTAMP) and kernels read (`s_sendmsg_rtn`,
//!   `s_memrealtime`): it reads [`ClockModel::offset`] at the GPU's creation and counts
//!   [`ClockModel::hz`] ticks a second of the host's monotonic clock, off by
//!   [`ClockModel::drift_ppm`];
//! - the **source** the host reads the clock through (a register read: the sim path's, or the
//!   emulated KFD's `GET_CLOCK_COUNTERS`), [`crate::SimGpu::read_source`]: the stamp clock
//!   plus [`ClockModel::constant`] (on GFX12 KFD reads a counter of the clock's rate a
//!   constant apart from the stamps'), sampled half way through a read that takes
//!   [`ClockModel::read_ns`]. One read, [`Stall::read`], is preempted for [`Stall::ns`]: the
//!   reader stalls where its own code would be preempted (between its host readings, or in
//!   KFD's gap between the counter and its host sample).
//!
//! With the defaults (no offset, drift, constant, latency or stall) the stamp clock is an
//! exact counter of the host's monotonic clock, which [`ClockRelation`] converts both ways
//! (up to the truncation of a tick).

use std::time::Duration;

/// Parts per billion in one part per million.
const PPB_PER_PPM: f64 = 1_000.0;

/// How the simulated GPU's clock runs against the host's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockModel {
    /// Nominal ticks per second (the rate the GPU states).
    pub hz: u64,
    /// The stamp clock's count at the GPU's creation.
    pub offset: u64,
    /// How much faster than `hz` the clock runs, in parts per million of the host's clock
    /// (negative: slower). Kept to the nearest part per billion.
    pub drift_ppm: f64,
    /// Nanoseconds a read of the source takes; the counter is sampled half way through.
    pub read_ns: u64,
    /// The source's counter less the stamp clock, in ticks (0 but on a GPU whose source
    /// reads another counter of the clock's rate, as KFD's does on GFX12).
    pub constant: i64,
    /// A one-off preemption of a read of the source.
    pub stall: Option<Stall>,
}

impl Default for ClockModel {
    fn default() -> Self {
        ClockModel {
            hz: 100_000_000,
            offset: 0,
            drift_ppm: 0.0,
            read_ns: 0,
            constant: 0,
            stall: None,
        }
    }
}

/// A read of the source that is preempted once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stall {
    /// Which read, counting from 1, of every read of the GPU's source.
    pub read: u64,
    /// For how long, in nanoseconds.
    pub ns: u64,
}

/// How the GPU's stamp clock relates to the host's `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockRelation {
    /// `CLOCK_MONOTONIC` in nanoseconds at which the counter read [`ClockRelation::offset`].
    pub epoch_monotonic_ns: u64,
    /// Nominal ticks per second.
    pub hz: u64,
    /// The counter at the epoch.
    pub offset: u64,
    /// How much faster than `hz` the counter runs, in parts per billion.
    pub drift_ppb: i64,
}

impl ClockRelation {
    /// The relation of a clock of `model` whose epoch is `epoch_monotonic_ns`.
    pub fn new(model: &ClockModel, epoch_monotonic_ns: u64) -> ClockRelation {
        ClockRelation {
            epoch_monotonic_ns,
            hz: model.hz,
            offset: model.offset,
            drift_ppb: (model.drift_ppm * PPB_PER_PPM).round() as i64,
        }
    }

    /// Ticks per 10^18 nanoseconds: the counter's true rate, times 10^9.
    fn rate(&self) -> u128 {
        let per_billion = (1_000_000_000i128 + i128::from(self.drift_ppb)).max(1) as u128;
        u128::from(self.hz) * per_billion
    }

    /// The counter at host monotonic time `ns` (the offset before the epoch).
    pub fn ticks_at(&self, ns: u64) -> u64 {
        let d = u128::from(ns.saturating_sub(self.epoch_monotonic_ns));
        let t = d * self.rate() / 1_000_000_000_000_000_000;
        self.offset
            .saturating_add(u64::try_from(t).unwrap_or(u64::MAX))
    }

    /// The host monotonic time, in nanoseconds, at which the counter reached `ticks` (the
    /// epoch for a count at or below the offset).
    pub fn monotonic_ns_at(&self, ticks: u64) -> u64 {
        let t = u128::from(ticks.saturating_sub(self.offset));
        let d = (t * 1_000_000_000_000_000_000).div_ceil(self.rate().max(1));
        self.epoch_monotonic_ns
            .saturating_add(u64::try_from(d).unwrap_or(u64::MAX))
    }

    /// The counter now.
    pub fn now(&self) -> u64 {
        self.ticks_at(monotonic_ns())
    }
}

/// One read of the GPU's clock through its source ([`crate::SimGpu::read_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceRead {
    /// The source's counter: the stamp clock plus the model's constant.
    pub ticks: u64,
    /// How long the reader is preempted after this read (zero but for the model's
    /// [`Stall::read`]).
    pub stall: Duration,
}

/// Spins until `CLOCK_MONOTONIC` reaches `until_ns` (a register read's latency: far shorter
/// than any sleep the host can take).
pub(crate) fn spin_until(until_ns: u64) {
    while monotonic_ns() < until_ns {
        std::hint::spin_loop();
    }
}

/// The host's `CLOCK_MONOTONIC`, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let s = u64::try_from(ts.tv_sec).unwrap_or(0);
    let n = u64::try_from(ts.tv_nsec).unwrap_or(0);
    s * 1_000_000_000 + n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(offset: u64, drift_ppm: f64) -> ClockRelation {
        ClockRelation::new(
            &ClockModel {
                offset,
                drift_ppm,
                ..ClockModel::default()
            },
            1_000,
        )
    }

    #[test]
    fn relation_round_trips() {
        let c = relation(0, 0.0);
        assert_eq!(c.ticks_at(500), 0);
        assert_eq!(c.ticks_at(1_000 + 1_000_000_000), 100_000_000);
        assert_eq!(c.monotonic_ns_at(100_000_000), 1_000 + 1_000_000_000);
        assert_eq!(c.ticks_at(c.monotonic_ns_at(12_345)), 12_345);
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }

    #[test]
    fn offset_and_drift_move_the_counter() {
        // 50 ppm fast: a second of the host counts 100 MHz * (1 + 50e-6) ticks.
        let c = relation(7_000, 50.0);
        assert_eq!(c.ticks_at(1_000), 7_000);
        assert_eq!(c.ticks_at(1_000 + 1_000_000_000), 7_000 + 100_005_000);
        let slow = relation(0, -50.0);
        assert_eq!(slow.ticks_at(1_000 + 1_000_000_000), 99_995_000);
        for t in [7_000, 7_001, 123_456_789, 1 << 40] {
            assert_eq!(c.ticks_at(c.monotonic_ns_at(t)), t, "{t}");
        }
    }

    #[test]
    fn the_source_reads_the_constant_apart_and_stalls_once() {
        let gpu = crate::SimGpu::new(crate::SimConfig {
            vram_bytes: 1 << 20,
            clock: ClockModel {
                offset: 1 << 40,
                constant: -5_000,
                read_ns: 2_000,
                stall: Some(Stall {
                    read: 2,
                    ns: 12_000_000,
                }),
                ..ClockModel::default()
            },
            ..crate::SimConfig::default()
        })
        .unwrap();
        let before = gpu.clock_ticks();
        let t0 = monotonic_ns();
        let r = gpu.read_source();
        let t1 = monotonic_ns();
        let after = gpu.clock_ticks();
        assert!(t1 - t0 >= 2_000, "a read takes its latency: {}", t1 - t0);
        assert!(
            before - 5_000 <= r.ticks && r.ticks <= after - 5_000,
            "{before} - 5000 <= {} <= {after} - 5000",
            r.ticks
        );
        assert_eq!(r.stall, Duration::ZERO);
        assert_eq!(gpu.read_source().stall, Duration::from_millis(12));
        assert_eq!(gpu.read_source().stall, Duration::ZERO);
    }
}
