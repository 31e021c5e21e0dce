//! The GPU clock: a counter at the model's rate, tied to the host's `CLOCK_MONOTONIC`.
//!
//! The counter is 0 at the GPU's creation and counts `hz` ticks a second of the host's
//! monotonic clock, so the host can convert any stamp a packet wrote with [`ClockRelation`]
//! exactly (up to the truncation of a tick).

/// How the GPU clock relates to the host's `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockRelation {
    /// `CLOCK_MONOTONIC` in nanoseconds at which the counter read 0.
    pub epoch_monotonic_ns: u64,
    /// Ticks per second.
    pub hz: u64,
}

impl ClockRelation {
    /// The counter at host monotonic time `ns` (0 before the epoch).
    pub fn ticks_at(&self, ns: u64) -> u64 {
        let d = u128::from(ns.saturating_sub(self.epoch_monotonic_ns));
        u64::try_from(d * u128::from(self.hz) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    /// The host monotonic time, in nanoseconds, at which the counter reached `ticks`.
    pub fn monotonic_ns_at(&self, ticks: u64) -> u64 {
        let d = u128::from(ticks) * 1_000_000_000 / u128::from(self.hz.max(1));
        self.epoch_monotonic_ns
            .saturating_add(u64::try_from(d).unwrap_or(u64::MAX))
    }

    /// The counter now.
    pub fn now(&self) -> u64 {
        self.ticks_at(monotonic_ns())
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

    #[test]
    fn relation_round_trips() {
        let c = ClockRelation {
            epoch_monotonic_ns: 1_000,
            hz: 100_000_000,
        };
        assert_eq!(c.ticks_at(500), 0);
        assert_eq!(c.ticks_at(1_000 + 1_000_000_000), 100_000_000);
        assert_eq!(c.monotonic_ns_at(100_000_000), 1_000 + 1_000_000_000);
        assert_eq!(c.ticks_at(c.monotonic_ns_at(12_345)), 12_345);
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
    }
}
