//! The GPU's clock against the host's: the measures a device takes, and the line along
//! which it converts profile stamps to the host's `CLOCK_MONOTONIC`.
//!
//! A **measure** is one read of the GPU's clock placed on the host's clock: a counter and
//! the host interval it was read in ([`rig_proto::ClockSample`]: rigd's own readings around
//! the read, or KFD's host sample mapped by a pair of rigd's readings, with KFD's one-sided
//! gap before it). Its deviation is half its interval plus that gap.
//!
//! How a device measures follows the path's [`ClockSource`]:
//!
//! - `Source`: the first measure at open is the first of [`READS`] reads within
//!   [`BOUND_NS`], else the narrowest. Where the source counts another counter a constant
//!   apart from the stamps (`apart`, KFD's on GFX12), that read is taken against
//!   [`PAIRS`] stamps the compute queue writes, each between two readings of the host's
//!   clock: the first of sixteen reads before the stamps within the bound, else the first
//!   of sixteen after them, else the narrowest of all; the constant comes from the closest
//!   pair and is added to every later read. The device re-measures as it converts stamps
//!   (at settle, and at a submit that converts an earlier value's), at most every
//!   [`REMEASURE_NS`]; a re-measure wider than the bound is dropped, and the first within
//!   it replaces a first measure that was wider.
//! - `RoundTrip`: one measure at open, the closest of [`PAIRS`] stamp pairs, and none after.
//!
//! A stamp converts along the line through the first measure and the latest once they lie
//! [`LINE_SPAN_NS`] apart, and at the GPU's stated `clock_hz` from the latest before.
//! docs/profiling.md states the error this leaves and how each rule is tested.

use rig_proto::ClockSample;

use crate::error::{Error, Result};
use crate::facts::ClockSource;

/// The widest interval a measure may have to enter the line, in nanoseconds.
pub(crate) const BOUND_NS: u64 = 10_000;
/// The least time between two re-measures, in nanoseconds (62.5 ms).
pub(crate) const REMEASURE_NS: u64 = 62_500_000;
/// How far apart the first and the latest measure must lie for the line to run through
/// both, in nanoseconds.
pub(crate) const LINE_SPAN_NS: u64 = 1_000_000_000;
/// Reads of the source taken at open before (and again after) the stamps, at most.
pub(crate) const READS: usize = 16;
/// Stamp pairs the compute queue writes at open, for the constant or a round trip.
pub(crate) const PAIRS: usize = 8;

/// One read of the GPU's clock on the host's clock: the counter (in the stamps' clock,
/// the source's constant added) was read between `before - gap` and `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measure {
    pub gpu: u64,
    pub before: u64,
    pub after: u64,
    pub gap: u64,
}

impl Measure {
    /// A sample rigd answered, with the source's `constant` added to its counter.
    pub(crate) fn of(s: &ClockSample, constant: i64) -> Measure {
        Measure {
            gpu: s.gpu.saturating_add_signed(constant),
            before: s.host_before_ns,
            after: s.host_after_ns.max(s.host_before_ns),
            gap: s.gap_ns,
        }
    }

    /// Its interval's nanoseconds.
    pub(crate) fn width(&self) -> u64 {
        self.after - self.before
    }

    /// Whether its interval is within [`BOUND_NS`].
    pub(crate) fn within(&self) -> bool {
        self.width() <= BOUND_NS
    }

    /// The host time it is placed at: its interval's middle.
    fn mid(&self) -> f64 {
        self.before as f64 + self.width() as f64 / 2.0
    }

    /// How far the host time of its counter may lie from [`Measure::mid`], in nanoseconds
    /// (stated in docs/profiling.md; the line needs only the middle).
    #[cfg(test)]
    fn deviation(&self) -> f64 {
        self.width() as f64 / 2.0 + self.gap as f64
    }
}

/// The first read within the bound of up to [`READS`] taken by `read`, else the narrowest
/// of them (`Err` if no read succeeded); `all` collects each.
fn first_within(
    read: &mut dyn FnMut() -> Result<Measure>,
    all: &mut Vec<Measure>,
) -> Result<Option<Measure>> {
    for _ in 0..READS {
        let m = read()?;
        all.push(m);
        if m.within() {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

fn narrowest(all: &[Measure]) -> Option<Measure> {
    all.iter().copied().min_by_key(Measure::width)
}

/// What a device knows of its GPU's clock against the host's.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    source: ClockSource,
    hz: u64,
    /// Added to every read of the source: the stamps' counter less the source's.
    constant: i64,
    first: Measure,
    latest: Measure,
    /// The host time of the last read of the source, kept or dropped.
    last_read: u64,
}

impl Clock {
    /// The clock at open: the first measure as `source` says, through `read` (a read of the
    /// source, its constant not yet added) and `stamp` (a stamp the compute queue writes
    /// between two readings of the host's clock, as a measure of that interval).
    pub(crate) fn open(
        source: ClockSource,
        hz: u64,
        read: &mut dyn FnMut() -> Result<Measure>,
        stamp: &mut dyn FnMut() -> Result<Measure>,
    ) -> Result<Clock> {
        if hz == 0 {
            return Err(Error::Protocol("rigd stated a GPU clock of 0 Hz".into()));
        }
        let pairs = |stamp: &mut dyn FnMut() -> Result<Measure>| -> Result<Measure> {
            let mut best: Option<Measure> = None;
            for _ in 0..PAIRS {
                let m = stamp()?;
                if best.is_none_or(|b| m.width() < b.width()) {
                    best = Some(m);
                }
            }
            best.ok_or_else(|| Error::Protocol("no stamp pair".into()))
        };
        // The constant's error is half the closest pair's interval plus the deviation of the
        // read it was taken against, for the device's life (docs/profiling.md).
        let (first, constant) = match source {
            ClockSource::RoundTrip => (pairs(stamp)?, 0),
            ClockSource::Source { apart: false } => {
                let mut all = Vec::with_capacity(READS);
                let m = match first_within(read, &mut all)? {
                    Some(m) => m,
                    None => narrowest(&all).ok_or_else(no_read)?,
                };
                (m, 0)
            }
            ClockSource::Source { apart: true } => {
                let mut all = Vec::with_capacity(2 * READS);
                let before = first_within(read, &mut all)?;
                let pair = pairs(stamp)?;
                let r = match before {
                    Some(m) => m,
                    None => match first_within(read, &mut all)? {
                        Some(m) => m,
                        None => narrowest(&all).ok_or_else(no_read)?,
                    },
                };
                let constant = constant_between(&pair, &r, hz);
                let first = Measure {
                    gpu: r.gpu.saturating_add_signed(constant),
                    ..r
                };
                (first, constant)
            }
        };
        Ok(Clock {
            source,
            hz,
            constant,
            first,
            latest: first,
            last_read: first.after,
        })
    }

    /// The constant added to every read of the source.
    #[cfg(test)]
    fn constant(&self) -> i64 {
        self.constant
    }

    /// Whether a conversion at host time `now` re-measures first: a source read at most
    /// every [`REMEASURE_NS`]; never with `RoundTrip`.
    pub(crate) fn due(&self, now: u64) -> bool {
        matches!(self.source, ClockSource::Source { .. })
            && now.saturating_sub(self.last_read) >= REMEASURE_NS
    }

    /// Takes a re-measure from rigd's sample `s`: dropped if wider than the bound, else the
    /// latest (and the first, while the first is wider than the bound).
    pub(crate) fn remeasure(&mut self, s: &ClockSample) {
        let m = Measure::of(s, self.constant);
        self.last_read = self.last_read.max(m.after);
        if !m.within() {
            return;
        }
        if !self.first.within() {
            self.first = m;
        }
        self.latest = m;
    }

    /// Nanoseconds of the host per tick: along the first and latest measures once they lie
    /// a second apart, else the stated rate.
    fn ns_per_tick(&self) -> f64 {
        let (a, b) = (&self.first, &self.latest);
        if b.mid() - a.mid() >= LINE_SPAN_NS as f64 && b.gpu > a.gpu {
            (b.mid() - a.mid()) / (b.gpu - a.gpu) as f64
        } else {
            1e9 / self.hz as f64
        }
    }

    /// The host time of stamp `gpu`, in nanoseconds (negative before the host's epoch).
    pub(crate) fn host_ns(&self, gpu: u64) -> i128 {
        let l = &self.latest;
        let ticks = i128::from(gpu) - i128::from(l.gpu);
        (l.mid() + ticks as f64 * self.ns_per_tick()).round() as i128
    }

    /// The measures the line runs through (first, latest).
    #[cfg(test)]
    fn measures(&self) -> (Measure, Measure) {
        (self.first, self.latest)
    }
}

/// The host's `CLOCK_MONOTONIC`, in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        u64::try_from(t.tv_sec())
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_nsec()).unwrap_or(0))
    })
}

fn no_read() -> Error {
    Error::Protocol("rigd answered no read of the GPU clock".into())
}

/// The stamps' counter less the source's: `pair` (a stamp between two host readings)
/// against `read` (a read of the source), carried to the pair's host time at `hz`.
fn constant_between(pair: &Measure, read: &Measure, hz: u64) -> i64 {
    let dt = pair.mid() - read.mid();
    let source_then = read.gpu as f64 + dt * hz as f64 / 1e9;
    (pair.gpu as f64 - source_then).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 100_000_000;

    /// A GPU whose counter reads `offset + (t - 0) * rate` at host time t (ns).
    #[derive(Clone, Copy)]
    struct Truth {
        offset: f64,
        /// Ticks per host nanosecond.
        rate: f64,
    }

    impl Truth {
        fn at(&self, t: u64) -> u64 {
            (self.offset + t as f64 * self.rate) as u64
        }

        /// A read whose counter was taken at `t`, in an interval of `width` around it.
        fn read(&self, t: u64, width: u64) -> Measure {
            Measure {
                gpu: self.at(t),
                before: t - width / 2,
                after: t + width / 2,
                gap: 0,
            }
        }

        fn sample(&self, t: u64, width: u64) -> ClockSample {
            let m = self.read(t, width);
            ClockSample {
                gpu: m.gpu,
                host_before_ns: m.before,
                host_after_ns: m.after,
                gap_ns: 0,
            }
        }
    }

    const T0: u64 = 1_000_000_000_000;

    fn exact() -> Truth {
        Truth {
            offset: 5e9,
            rate: 0.1,
        }
    }

    fn source(apart: bool) -> ClockSource {
        ClockSource::Source { apart }
    }

    fn no_stamp() -> Result<Measure> {
        panic!("a source whose counter is the stamps' takes no stamps")
    }

    /// Opens on reads of `truth` whose widths are `widths` (the last repeated), one a
    /// microsecond apart from T0.
    fn open_on(truth: Truth, widths: &[u64]) -> (Clock, usize) {
        let mut n = 0;
        let mut read = || {
            let w = widths[n.min(widths.len() - 1)];
            n += 1;
            Ok(truth.read(T0 + 1_000 * n as u64, w))
        };
        let c = Clock::open(source(false), HZ, &mut read, &mut no_stamp).unwrap();
        (c, n)
    }

    #[test]
    fn the_first_measure_is_the_first_within_10us_else_the_narrowest() {
        let (c, n) = open_on(exact(), &[40_000, 12_000, 9_000, 1_000]);
        assert_eq!((n, c.measures().0.width()), (3, 9_000));
        let (c, n) = open_on(exact(), &[40_000, 30_000, 20_000, 50_000]);
        assert_eq!((n, c.measures().0.width()), (READS, 20_000));
    }

    #[test]
    fn a_wide_first_measure_is_replaced_by_the_first_remeasure_within_the_bound() {
        let t = exact();
        let (mut c, _) = open_on(t, &[20_000]);
        assert!(!c.measures().0.within());
        // A re-measure wider than the bound is dropped; the first within it replaces both.
        let at = T0 + 100_000_000;
        assert!(c.due(at));
        c.remeasure(&t.sample(at, 11_000));
        assert_eq!(c.measures().1.width(), 20_000, "dropped");
        assert!(!c.due(at + 1_000), "a dropped read still counts");
        c.remeasure(&t.sample(at + REMEASURE_NS, 2_000));
        assert_eq!(c.measures().0, c.measures().1);
        assert_eq!(c.measures().0.width(), 2_000);
        // A later one within the bound is the latest; the first stays.
        c.remeasure(&t.sample(at + 2 * REMEASURE_NS, 4_000));
        assert_eq!(c.measures().0.width(), 2_000);
        assert_eq!(c.measures().1.width(), 4_000);
    }

    #[test]
    fn remeasures_come_at_most_every_62_5_ms() {
        let (c, _) = open_on(exact(), &[1_000]);
        let opened = c.measures().0.after;
        assert!(!c.due(opened + REMEASURE_NS - 1));
        assert!(c.due(opened + REMEASURE_NS));
        let rt = Clock::open(
            ClockSource::RoundTrip,
            HZ,
            &mut || panic!("a round trip reads no source"),
            &mut || Ok(exact().read(T0, 3_000)),
        )
        .unwrap();
        assert!(
            !rt.due(T0 + 10 * LINE_SPAN_NS),
            "a round trip measures at open only"
        );
    }

    #[test]
    fn the_line_runs_at_clock_hz_until_measures_lie_a_second_apart() {
        // 100 ppm fast: at the stated rate a stamp 0.5 s after the latest measure is 50 us
        // off; along measures a second apart it is exact.
        let t = Truth {
            offset: 5e9,
            rate: 0.1 * (1.0 + 100e-6),
        };
        let (mut c, _) = open_on(t, &[1_000]);
        let half = T0 + 500_000_000;
        c.remeasure(&t.sample(T0 + 100_000_000, 1_000));
        let err = (c.host_ns(t.at(half)) - i128::from(half)).abs();
        assert!((39_000..41_000).contains(&err), "{err}");
        c.remeasure(&t.sample(T0 + 2 * LINE_SPAN_NS, 1_000));
        let late = T0 + 2 * LINE_SPAN_NS + 50_000_000;
        let err = (c.host_ns(t.at(late)) - i128::from(late)).abs();
        assert!(err <= 20, "{err}");
    }

    #[test]
    fn the_error_stays_within_the_deviation_plus_10_ppm_over_62_5_ms() {
        // Measures of 10 us (a deviation of 5 us) a second apart, the GPU 40 ppm slow,
        // each measure read at the worst place of its interval: a stamp 62.5 ms after the
        // latest converts within 5 us + 10 ppm of 62.5 ms (and a little for rounding).
        let t = Truth {
            offset: 1e6,
            rate: 0.1 * (1.0 - 40e-6),
        };
        let worst = |at: u64, skew: i64| ClockSample {
            gpu: t.at(at.wrapping_add_signed(skew)),
            host_before_ns: at - 5_000,
            host_after_ns: at + 5_000,
            gap_ns: 0,
        };
        let mut first = Some(worst(T0, -5_000));
        let mut c = Clock::open(
            source(false),
            HZ,
            &mut || Ok(Measure::of(&first.take().unwrap(), 0)),
            &mut no_stamp,
        )
        .unwrap();
        let latest = T0 + LINE_SPAN_NS;
        c.remeasure(&worst(latest, 5_000));
        let at = latest + REMEASURE_NS;
        let err = (c.host_ns(t.at(at)) - i128::from(at)).abs() as f64;
        let bound = 5_000.0 + 10e-6 * REMEASURE_NS as f64 + 5_000.0 * REMEASURE_NS as f64 / 1e9;
        assert!(err <= bound + 10.0, "{err} > {bound}");
    }

    #[test]
    fn through_kfd_the_gap_counts_in_the_deviation() {
        let s = ClockSample {
            gpu: 7,
            host_before_ns: 100,
            host_after_ns: 300,
            gap_ns: 1_500,
        };
        let m = Measure::of(&s, -2);
        assert_eq!(m.gpu, 5);
        assert!(m.within(), "the bound is on the readings' interval");
        assert_eq!(m.deviation(), 1_600.0);
    }

    #[test]
    fn the_constant_comes_from_the_closest_of_eight_pairs_against_the_read() {
        // The source counts 123_456 ticks ahead of the stamps' clock.
        let stamps = exact();
        let src = Truth {
            offset: stamps.offset + 123_456.0,
            ..stamps
        };
        let mut k = 0u64;
        let mut reads = 0;
        let mut read = || {
            reads += 1;
            Ok(src.read(T0 + 1_000 * reads, if reads < 3 { 30_000 } else { 2_000 }))
        };
        // Pairs of a stamp between two readings, the stamp taken off-centre; the fifth
        // is the closest.
        let mut stamp = || {
            k += 1;
            let t = T0 + 1_000_000 + 100_000 * k;
            let w = if k == 5 { 1_000 } else { 40_000 };
            Ok(Measure {
                gpu: stamps.at(t + w / 4),
                before: t - w / 2,
                after: t + w / 2,
                gap: 0,
            })
        };
        let c = Clock::open(source(true), HZ, &mut read, &mut stamp).unwrap();
        assert_eq!(k, PAIRS as u64);
        assert_eq!(reads, 3, "the first read within 10 us, before the stamps");
        // The closest pair is off by a quarter of its 1 us interval: 25 ticks.
        assert!((c.constant() + 123_456).abs() <= 26, "{}", c.constant());
        // Every read gets the constant: a stamp converts to its own host time.
        let at = T0 + 3_000_000;
        let err = (c.host_ns(stamps.at(at)) - i128::from(at)).abs();
        assert!(err <= 300, "{err}");
    }

    #[test]
    fn the_constants_read_is_else_the_first_within_the_bound_after_the_stamps() {
        let stamps = exact();
        let mut reads = 0;
        let mut read = || {
            reads += 1;
            Ok(stamps.read(T0 + 1_000 * reads, if reads <= 18 { 30_000 } else { 3_000 }))
        };
        let mut stamp = || Ok(stamps.read(T0 + 500_000, 1_000));
        let c = Clock::open(source(true), HZ, &mut read, &mut stamp).unwrap();
        assert_eq!(reads, 19);
        assert_eq!(c.measures().0.width(), 3_000);
        // None within: the narrowest of all 32.
        let mut reads = 0;
        let mut read = || {
            reads += 1;
            Ok(stamps.read(T0 + 1_000 * reads, 50_000 - 100 * reads))
        };
        let c = Clock::open(source(true), HZ, &mut read, &mut stamp).unwrap();
        assert_eq!(reads, 2 * READS as u64);
        assert_eq!(c.measures().0.width(), 50_000 - 100 * 2 * READS as u64);
    }

    #[test]
    fn a_round_trip_takes_the_closest_of_eight_stamps() {
        let t = exact();
        let mut k = 0;
        let c = Clock::open(
            ClockSource::RoundTrip,
            HZ,
            &mut || panic!("a round trip reads no source"),
            &mut || {
                k += 1;
                Ok(t.read(T0 + 100_000 * k, 10_000 - 1_000 * (k % 4)))
            },
        )
        .unwrap();
        assert_eq!(c.measures().0.width(), 7_000);
    }
}
