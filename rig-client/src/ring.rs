//! Ring arithmetic: where the next packets or argument bytes go, and whether they fit now.
//!
//! This module owns the positions of one ring (the compute ring, the copy ring or the
//! argument segment) as monotonically increasing counts of units (dwords or bytes), and the
//! rule that decides where a placement starts: packets of the compute ring may wrap around
//! the ring's end, SDMA packets and argument bytes never do and are preceded by padding to
//! the ring's start instead. It does not own the memory the ring lies in, nor the packets
//! written there ([`crate::place`] does both).

/// Where a placement of `len` units goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spot {
    /// Units of padding before it, up to the ring's end (0 where no padding is needed).
    pub pad: u64,
    /// The position (monotonic) of its first unit.
    pub start: u64,
}

impl Spot {
    /// The offset of its first unit in a ring of `size` units.
    pub fn offset(&self, size: u64) -> u64 {
        self.start & (size - 1)
    }
}

/// The positions of one ring of `size` units (a power of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ring {
    /// Units in the ring, a power of two.
    pub size: u64,
    /// The next unit to write (monotonic).
    pub write: u64,
    /// Whether a placement may wrap around the ring's end.
    pub wraps: bool,
}

impl Ring {
    /// A ring of `size` units, empty, written from position 0.
    pub fn new(size: u64, wraps: bool) -> Self {
        debug_assert!(size.is_power_of_two());
        Self {
            size,
            write: 0,
            wraps,
        }
    }

    /// Where `len` units would go: after padding to the ring's start when they would cross
    /// its end and the ring does not wrap.
    pub fn spot(&self, len: u64) -> Spot {
        let off = self.write & (self.size - 1);
        if !self.wraps && len > 0 && off + len > self.size {
            let pad = self.size - off;
            Spot {
                pad,
                start: self.write + pad,
            }
        } else {
            Spot {
                pad: 0,
                start: self.write,
            }
        }
    }

    /// The position after `len` units at `spot`.
    pub fn end(spot: Spot, len: u64) -> u64 {
        spot.start + len
    }

    /// Whether `len` units at `spot` fit while the reader is at position `read`: every unit
    /// from the current write position to the placement's end lies within `size` of `read`.
    pub fn fits(&self, spot: Spot, len: u64, read: u64) -> bool {
        // A reader ahead of the writer is a broken peer: treat the ring as full rather than
        // overwrite what it may still read.
        if read > self.write {
            return false;
        }
        Self::end(spot, len) - read <= self.size
    }

    /// Whether `len` units could ever fit in this ring, the reader caught up: the units
    /// themselves, and where packets never wrap, the worst padding before them.
    pub fn holds(size: u64, len: u64, wraps: bool) -> bool {
        if wraps { len < size } else { 2 * len <= size }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_placement_that_crosses_the_end_pads_unless_the_ring_wraps() {
        let mut r = Ring::new(16, false);
        r.write = 12;
        assert_eq!(r.spot(4), Spot { pad: 0, start: 12 });
        assert_eq!(r.spot(5), Spot { pad: 4, start: 16 });
        assert_eq!(r.spot(5).offset(16), 0);
        r.wraps = true;
        assert_eq!(r.spot(5), Spot { pad: 0, start: 12 });
    }

    #[test]
    fn fits_counts_the_padding() {
        let mut r = Ring::new(16, false);
        r.write = 12;
        let s = r.spot(8);
        assert_eq!(s.pad, 4);
        // End at 24; the reader must have passed 8.
        assert!(!r.fits(s, 8, 7));
        assert!(r.fits(s, 8, 8));
        assert!(!r.fits(s, 8, 13), "reader ahead of writer");
    }

    #[test]
    fn holds_is_half_the_ring_without_wrap() {
        assert!(Ring::holds(16, 8, false));
        assert!(!Ring::holds(16, 9, false));
        assert!(Ring::holds(16, 15, true));
        assert!(!Ring::holds(16, 16, true));
    }

    proptest! {
        #[test]
        fn placements_never_cross_the_end_and_never_overrun_the_reader(
            lens in proptest::collection::vec(1u64..=32, 1..200),
            lag in 0u64..64,
        ) {
            let mut r = Ring::new(64, false);
            let mut read = 0u64;
            for len in lens {
                let s = r.spot(len);
                let off = s.offset(64);
                prop_assert!(off + len <= 64);
                // Advance the reader as far as the lag lets it.
                read = read.max(r.write.saturating_sub(lag)).min(r.write);
                if r.fits(s, len, read) {
                    prop_assert!(Ring::end(s, len) - read <= 64);
                    r.write = Ring::end(s, len);
                } else {
                    read = r.write;
                    prop_assert!(r.fits(s, len, read));
                    r.write = Ring::end(s, len);
                }
            }
        }
    }
}
