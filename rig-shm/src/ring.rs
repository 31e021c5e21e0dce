//! A ring in shared memory with one producer (a client) and one consumer (a queue
//! processor: the GPU's, or the simulator's), typed so that each side can do only its own
//! half of the protocol.
//!
//! This module owns:
//!
//! - [`Geometry`]: a ring's size and the [`Unit`] its positions count in, checked once
//!   (a power of two of at least [`MIN_RING_BYTES`]); every conversion between positions,
//!   dwords and byte offsets goes through it.
//! - [`Cursor`]: a writer's reservation arithmetic (where the next `len` units go, whether
//!   they fit by a read position), for queue rings and for byte rings such as the client's
//!   argument segment.
//! - [`Producer`]: the client's side of a queue: reserve dwords by the read position the
//!   queue publishes, store words (wrapping at the ring's end), publish the write position
//!   (release, so the words are visible to whoever reads the position with acquire), then
//!   ring the doorbell ([`crate::doorbell`]).
//! - [`Consumer`]: the queue's side: read the write position, reject one a client made
//!   impossible ([`Hostile`]), fetch words across the ring's end, publish the read position.
//!   It reads memory through [`RingMemory`], so the simulator reads through its page tables
//!   and a test through a [`SharedRegion`].
//!
//! Positions are 64-bit counts of units that only grow and index the ring modulo its size
//! ([`crate::layout`] states where they lie and the unit of each queue kind). The packets
//! written are `rig-amd`'s.

use std::sync::atomic::Ordering;

use crate::layout::{AQL_POSITION_UNIT, MIN_RING_BYTES, PM4_POSITION_UNIT, SDMA_POSITION_UNIT};
use crate::{Doorbell, SharedRegion, usize_of};

/// Bytes of a dword, the grain packets are written and fetched in.
const DWORD: u64 = 4;

/// What a ring's positions count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Dwords: a PM4 queue ([`PM4_POSITION_UNIT`]).
    Dword,
    /// Bytes: an SDMA queue ([`SDMA_POSITION_UNIT`]).
    Byte,
    /// 64-byte packets: an AQL queue ([`AQL_POSITION_UNIT`]).
    AqlPacket,
}

impl Unit {
    /// Bytes of one unit, as [`crate::layout`] states them.
    pub const fn bytes(self) -> u64 {
        match self {
            Unit::Dword => PM4_POSITION_UNIT,
            Unit::Byte => SDMA_POSITION_UNIT,
            Unit::AqlPacket => AQL_POSITION_UNIT,
        }
    }
}

/// Why a ring cannot be used as described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// A size that is not a power of two of at least [`MIN_RING_BYTES`].
    #[error("a ring of {0} bytes: it must be a power of two of at least {MIN_RING_BYTES} bytes")]
    Size(u64),
    /// A ring or position word that does not lie inside its region, or is not aligned.
    #[error(
        "{what} of {bytes} bytes at offset {offset} is not an aligned range inside its region of {len} bytes"
    )]
    Outside {
        /// What was placed there.
        what: &'static str,
        /// Its offset in the region.
        offset: usize,
        /// Its bytes.
        bytes: u64,
        /// The region's bytes.
        len: usize,
    },
}

/// A ring's size and the unit its positions count in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    bytes: u64,
    unit: Unit,
}

impl Geometry {
    /// A ring of `bytes` bytes whose positions count `unit`s: a power of two of at least
    /// [`MIN_RING_BYTES`], which holds whole units and wraps on a dword.
    pub fn new(bytes: u64, unit: Unit) -> Result<Geometry, RingError> {
        if !bytes.is_power_of_two() || bytes < MIN_RING_BYTES {
            return Err(RingError::Size(bytes));
        }
        Ok(Geometry { bytes, unit })
    }

    /// Bytes of the ring.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Dwords of the ring.
    pub fn dwords(&self) -> u64 {
        self.bytes / DWORD
    }

    /// What its positions count.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// The byte offset in the ring of position `pos` (units).
    pub fn offset(&self, pos: u64) -> u64 {
        // Wrapping is exact: the ring's size is a power of two that divides 2^64.
        pos.wrapping_mul(self.unit.bytes()) & (self.bytes - 1)
    }

    /// Position `dwords` (a count of dwords from position 0) in units. Exact for the units
    /// of queues whose packets are dwords (PM4, SDMA).
    pub fn to_units(&self, dwords: u64) -> u64 {
        dwords.wrapping_mul(DWORD) / self.unit.bytes()
    }

    /// Position `units` as a count of dwords (rounded down).
    pub fn to_dwords(&self, units: u64) -> u64 {
        units.wrapping_mul(self.unit.bytes()) / DWORD
    }
}

/// Where a placement of `len` units goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spot {
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

    /// The position after `len` units here.
    pub fn end(&self, len: u64) -> u64 {
        self.start + len
    }
}

/// A writer's positions in a ring of `size` units (a power of two): where placements go,
/// and whether they fit by the reader's position.
///
/// Packets of a ring that wraps may cross its end; other placements (SDMA packets, a
/// launch's argument bytes) never do and are preceded by padding to the ring's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Units in the ring, a power of two.
    pub size: u64,
    /// The next unit to write (monotonic).
    pub write: u64,
    /// Whether a placement may wrap around the ring's end.
    pub wraps: bool,
}

impl Cursor {
    /// A ring of `size` units, empty, written from position 0.
    pub fn new(size: u64, wraps: bool) -> Cursor {
        debug_assert!(size.is_power_of_two());
        Cursor {
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

    /// Whether `len` units at `spot` fit while the reader is at position `read`: every unit
    /// from the current write position to the placement's end lies within `size` of `read`.
    pub fn fits(&self, spot: Spot, len: u64, read: u64) -> bool {
        // A reader ahead of the writer is a broken peer: treat the ring as full rather than
        // overwrite what it may still read.
        if read > self.write {
            return false;
        }
        spot.end(len) - read <= self.size
    }

    /// Whether `len` units could ever fit in a ring of `size` units, the reader caught up:
    /// the units themselves, and where placements never wrap, the worst padding before them.
    pub fn holds(size: u64, len: u64, wraps: bool) -> bool {
        if wraps { len < size } else { 2 * len <= size }
    }
}

/// Checks that `bytes` at `offset` lie in `region`, aligned to `align`.
fn inside(
    what: &'static str,
    region: &SharedRegion,
    offset: usize,
    bytes: u64,
    align: usize,
) -> Result<(), RingError> {
    if offset.is_multiple_of(align) && region.contains(offset as u64, bytes) {
        Ok(())
    } else {
        Err(RingError::Outside {
            what,
            offset,
            bytes,
            len: region.len(),
        })
    }
}

/// A word of shared memory: a region and the offset of the word in it.
pub type Word = (SharedRegion, usize);

/// The client's side of a queue's ring of dword packets (PM4 or SDMA): it reserves dwords,
/// stores words and publishes its write position; the queue's read position tells it what
/// it may overwrite.
///
/// Its [`Cursor`] counts dwords; the positions it publishes and reads are in the ring's
/// [`Unit`], converted by its [`Geometry`] only.
#[derive(Debug)]
pub struct Producer {
    geometry: Geometry,
    ring: SharedRegion,
    ring_offset: usize,
    read: Word,
    write: Word,
    bell: Doorbell,
    /// Positions in dwords.
    pub cursor: Cursor,
    /// The read position last read, in dwords.
    seen_read: u64,
}

impl Producer {
    /// The producer of the ring at `ring` (a region and an offset, 4-byte aligned), whose
    /// read and write positions are the 8-byte words `read` and `write`, rung through
    /// `bell`. Packets may cross the ring's end where `wraps`. It starts where the write
    /// position stands (0 for a new queue).
    pub fn new(
        geometry: Geometry,
        (ring, ring_offset): Word,
        read: Word,
        write: Word,
        bell: Doorbell,
        wraps: bool,
    ) -> Result<Producer, RingError> {
        inside("a ring", &ring, ring_offset, geometry.bytes, 4)?;
        inside("a read position", &read.0, read.1, 8, 8)?;
        inside("a write position", &write.0, write.1, 8, 8)?;
        let mut cursor = Cursor::new(geometry.dwords(), wraps);
        cursor.write = geometry.to_dwords(write.0.load_u64(write.1, Ordering::Acquire));
        Ok(Producer {
            geometry,
            ring,
            ring_offset,
            read,
            write,
            bell,
            cursor,
            seen_read: cursor.write,
        })
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The queue's read position, in dwords (acquire: the queue is done with what lies
    /// before it).
    pub fn read_position(&self) -> u64 {
        self.geometry
            .to_dwords(self.read.0.load_u64(self.read.1, Ordering::Acquire))
    }

    /// Whether `len` dwords at `spot` fit: by the read position last read, else by the
    /// queue's current one. A submit that fits by the first touches no line the queue writes.
    pub fn fits(&mut self, spot: Spot, len: u64) -> bool {
        if len == 0 || self.cursor.fits(spot, len, self.seen_read) {
            return true;
        }
        self.seen_read = self.read_position();
        self.cursor.fits(spot, len, self.seen_read)
    }

    /// Stores `words` at dword offset `at` of the ring, wrapping at its end.
    ///
    /// # Panics
    ///
    /// If `at` or `words` is longer than the ring (the caller's reservation is wrong).
    pub fn store(&self, at: u64, words: &[u32]) {
        let size = usize_of(self.cursor.size);
        let at = usize_of(at);
        assert!(at < size && words.len() <= size, "a store past the ring");
        let first = words.len().min(size - at);
        self.ring
            .write_u32s(self.ring_offset + 4 * at, &words[..first]);
        if first < words.len() {
            self.ring.write_u32s(self.ring_offset, &words[first..]);
        }
    }

    /// Stores the AQL packets `words` (16 dwords each) at dword offset `at` of the ring, each
    /// packet's first word (its header) last and with release order, so a packet processor
    /// that reads the header with acquire, before any write position moves, sees the whole
    /// packet.
    ///
    /// # Panics
    ///
    /// If `at` or the length is not a multiple of 16 or the packets are longer than the ring.
    pub fn store_packets(&self, at: u64, words: &[u32]) {
        const PACKET: usize = (AQL_POSITION_UNIT / DWORD) as usize;
        let size = usize_of(self.cursor.size);
        let at = usize_of(at);
        assert!(
            at < size
                && at.is_multiple_of(PACKET)
                && words.len().is_multiple_of(PACKET)
                && words.len() <= size,
            "a store of AQL packets past the ring or off their slots"
        );
        for (i, p) in words.chunks_exact(PACKET).enumerate() {
            let slot = self.ring_offset + 4 * ((at + i * PACKET) % size);
            self.ring.write_u32s(slot + 4, &p[1..]);
            self.ring.store_u32(slot, p[0], Ordering::Release);
        }
    }

    /// Stores `word` at dword offset `at` of the ring.
    pub fn store_word(&self, at: u64, word: u32) {
        let at = usize_of(at & (self.cursor.size - 1));
        self.ring
            .store_u32(self.ring_offset + 4 * at, word, Ordering::Relaxed);
    }

    /// Zeroes `n` dwords at dword offset `at`, which must not cross the ring's end.
    pub fn zero(&self, at: u64, n: u64) {
        assert!(at + n <= self.cursor.size, "a fill past the ring's end");
        self.ring
            .fill(self.ring_offset + 4 * usize_of(at), 4 * usize_of(n), 0);
    }

    /// Publishes the write position: to the queue's write word (release: every word stored
    /// before is visible to a reader that loads it with acquire), then to its doorbell,
    /// which wakes the queue if it sleeps.
    pub fn publish(&self) {
        let units = self.geometry.to_units(self.cursor.write);
        self.write
            .0
            .store_u64(self.write.1, units, Ordering::Release);
        self.bell.ring(units);
    }
}

/// Memory a consumer reads its ring through: GPU addresses through page tables, or offsets
/// of a region. Addresses are the memory's own.
pub trait RingMemory {
    /// Why an access failed (a page fault, an address outside a region).
    type Fault;
    /// Loads the 64-bit word at `at` with acquire order.
    fn load_position(&self, at: u64) -> Result<u64, Self::Fault>;
    /// Stores the 64-bit word at `at` with release order.
    fn store_position(&self, at: u64, value: u64) -> Result<(), Self::Fault>;
    /// Reads `out.len()` little-endian dwords at `at`.
    fn read_dwords(&self, at: u64, out: &mut [u32]) -> Result<(), Self::Fault>;
}

/// A region read by offsets, for a consumer in the same process or a test.
impl RingMemory for SharedRegion {
    type Fault = RingError;

    fn load_position(&self, at: u64) -> Result<u64, RingError> {
        let at = self.word_at("a position", at, 8)?;
        Ok(self.load_u64(at, Ordering::Acquire))
    }

    fn store_position(&self, at: u64, value: u64) -> Result<(), RingError> {
        let at = self.word_at("a position", at, 8)?;
        self.store_u64(at, value, Ordering::Release);
        Ok(())
    }

    fn read_dwords(&self, at: u64, out: &mut [u32]) -> Result<(), RingError> {
        let bytes = 4 * out.len() as u64;
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        inside("ring words", self, offset, bytes, 4)?;
        for (i, w) in out.iter_mut().enumerate() {
            *w = self.load_u32(offset + 4 * i, Ordering::Relaxed);
        }
        Ok(())
    }
}

impl SharedRegion {
    fn word_at(&self, what: &'static str, at: u64, bytes: u64) -> Result<usize, RingError> {
        let offset = usize::try_from(at).unwrap_or(usize::MAX);
        inside(what, self, offset, bytes, usize_of(bytes)).map(|()| offset)
    }
}

/// A write position that no producer following the protocol writes: the consumer faults the
/// queue rather than run what it points at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Hostile {
    /// Positions only grow.
    #[error("the write position moved back from {read:#x} to {write:#x}")]
    MovedBack {
        /// The read position.
        read: u64,
        /// The write position.
        write: u64,
    },
    /// More than the ring between the read and the write position.
    #[error("the write position {write:#x} is more than the ring's {bytes} bytes ahead")]
    TooFarAhead {
        /// The write position.
        write: u64,
        /// The ring's bytes.
        bytes: u64,
    },
    /// Packets are whole dwords.
    #[error("the write position {write:#x} does not end a whole dword")]
    PartialDword {
        /// The write position.
        write: u64,
    },
}

/// Why a consumer could not read its ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError<F> {
    /// The memory refused an access.
    #[error("the ring's memory refused an access")]
    Fault(F),
    /// The producer wrote an impossible write position.
    #[error(transparent)]
    Hostile(Hostile),
}

/// The queue's side of a ring of dword packets: it reads the producer's write position,
/// fetches the words up to it, and publishes its read position (in the ring's unit) as it
/// consumes them.
#[derive(Debug, Clone)]
pub struct Consumer {
    geometry: Geometry,
    ring: u64,
    read: u64,
    write: u64,
    /// The read position, in units.
    pos: u64,
}

impl Consumer {
    /// The consumer of the ring at address `ring` of its memory, whose positions are the
    /// 8-byte words at `read` (which it writes) and `write` (which the producer writes),
    /// reading from position 0.
    pub fn new(geometry: Geometry, ring: u64, read: u64, write: u64) -> Consumer {
        Consumer {
            geometry,
            ring,
            read,
            write,
            pos: 0,
        }
    }

    /// The read position, in units.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Dwords the producer published past the read position, checked: a write position
    /// behind the read position, more than the ring ahead of it, or not on a dword is
    /// [`Hostile`].
    pub fn available<M: RingMemory>(&self, mem: &M) -> Result<u64, ReadError<M::Fault>> {
        let write = mem.load_position(self.write).map_err(ReadError::Fault)?;
        let hostile = |h| Err(ReadError::Hostile(h));
        if write < self.pos {
            return hostile(Hostile::MovedBack {
                read: self.pos,
                write,
            });
        }
        let bytes = (write - self.pos).saturating_mul(self.geometry.unit.bytes());
        if bytes > self.geometry.bytes {
            return hostile(Hostile::TooFarAhead {
                write,
                bytes: self.geometry.bytes,
            });
        }
        if !bytes.is_multiple_of(DWORD) {
            return hostile(Hostile::PartialDword { write });
        }
        Ok(bytes / DWORD)
    }

    /// Reads `n` dwords (at most the ring's) from the read position into `out` (cleared
    /// first), across the ring's end.
    pub fn fetch<M: RingMemory>(
        &self,
        mem: &M,
        n: u64,
        out: &mut Vec<u32>,
    ) -> Result<(), M::Fault> {
        let n = n.min(self.geometry.dwords());
        out.clear();
        out.resize(usize_of(n), 0);
        let start = self.geometry.offset(self.pos);
        let first = usize_of(n.min((self.geometry.bytes - start) / DWORD));
        let (a, b) = out.split_at_mut(first);
        mem.read_dwords(self.ring + start, a)?;
        if !b.is_empty() {
            mem.read_dwords(self.ring, b)?;
        }
        Ok(())
    }

    /// Moves the read position past `dwords` and publishes it (release: the producer may
    /// overwrite what lies before it).
    pub fn advance<M: RingMemory>(&mut self, mem: &M, dwords: u64) -> Result<(), M::Fault> {
        self.pos = self.pos.wrapping_add(self.geometry.to_units(dwords));
        mem.store_position(self.read, self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{
        DOORBELL_PAGE_BYTES, POSITIONS_PAGE_BYTES, READ_AFTER_RING, WRITE_AFTER_RING,
    };

    const RING: u64 = 256;

    /// A ring of 256 bytes and its positions page in one region, with a doorbell.
    fn pair(unit: Unit, wraps: bool) -> (SharedRegion, Producer, Consumer) {
        let r = SharedRegion::create("ring", usize_of(RING + POSITIONS_PAGE_BYTES)).unwrap();
        let bells = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let g = Geometry::new(RING, unit).unwrap();
        let read = usize_of(RING + READ_AFTER_RING);
        let write = usize_of(RING + WRITE_AFTER_RING);
        let p = Producer::new(
            g,
            (r.clone(), 0),
            (r.clone(), read),
            (r.clone(), write),
            Doorbell::new(bells, 0).unwrap(),
            wraps,
        )
        .unwrap();
        let c = Consumer::new(g, 0, read as u64, write as u64);
        (r, p, c)
    }

    #[test]
    fn sizes_are_checked_once() {
        assert_eq!(Geometry::new(128, Unit::Dword), Err(RingError::Size(128)));
        assert_eq!(Geometry::new(768, Unit::Byte), Err(RingError::Size(768)));
        assert!(Geometry::new(MIN_RING_BYTES, Unit::AqlPacket).is_ok());
        let g = Geometry::new(1024, Unit::Byte).unwrap();
        assert_eq!(g.to_units(3), 12);
        assert_eq!(g.to_dwords(12), 3);
        assert_eq!(g.offset(1024 + 12), 12);
        let g = Geometry::new(1024, Unit::Dword).unwrap();
        assert_eq!(g.offset(u64::MAX), 1020, "a position wraps exactly at 2^64");
    }

    #[test]
    fn producer_words_reach_the_consumer_across_the_end() {
        for unit in [Unit::Dword, Unit::Byte] {
            let (r, mut p, mut c) = pair(unit, true);
            let mut out = Vec::new();
            let mut next = 0u32;
            for len in [10u64, 40, 30, 63, 1, 50] {
                let len32 = u32::try_from(len).unwrap();
                let words: Vec<u32> = (0..len32).map(|i| next + i).collect();
                next += len32;
                let spot = p.cursor.spot(len);
                assert!(p.fits(spot, len), "{unit:?} {len}");
                p.store(spot.offset(p.cursor.size), &words);
                p.cursor.write = spot.end(len);
                p.publish();
                let n = c.available(&r).unwrap();
                assert_eq!(n, len);
                c.fetch(&r, n, &mut out).unwrap();
                assert_eq!(out, words);
                c.advance(&r, n).unwrap();
                assert_eq!(p.read_position(), p.cursor.write);
                assert_eq!(c.position(), p.geometry().to_units(p.cursor.write));
            }
        }
    }

    #[test]
    fn the_producer_waits_for_the_consumer() {
        let (r, mut p, mut c) = pair(Unit::Dword, true);
        let spot = p.cursor.spot(60);
        assert!(p.fits(spot, 60));
        p.cursor.write = spot.end(60);
        p.publish();
        // 60 of 64 dwords are unread: 5 more do not fit until the queue reads.
        let spot = p.cursor.spot(5);
        assert!(!p.fits(spot, 5));
        c.advance(&r, 1).unwrap();
        assert!(p.fits(spot, 5));
    }

    #[test]
    fn hostile_write_positions_are_refused() {
        let (r, _p, mut c) = pair(Unit::Byte, true);
        let write = usize_of(RING + WRITE_AFTER_RING);
        let set = |v: u64| r.store_u64(write, v, Ordering::Release);
        set(RING + 4);
        assert_eq!(
            c.available(&r),
            Err(ReadError::Hostile(Hostile::TooFarAhead {
                write: RING + 4,
                bytes: RING
            }))
        );
        set(u64::MAX);
        assert!(matches!(
            c.available(&r),
            Err(ReadError::Hostile(Hostile::TooFarAhead { .. }))
        ));
        set(6);
        assert_eq!(
            c.available(&r),
            Err(ReadError::Hostile(Hostile::PartialDword { write: 6 }))
        );
        set(8);
        assert_eq!(c.available(&r), Ok(2));
        c.advance(&r, 2).unwrap();
        set(4);
        let e = c.available(&r).unwrap_err();
        assert_eq!(
            e,
            ReadError::Hostile(Hostile::MovedBack { read: 8, write: 4 })
        );
        assert_eq!(
            e.to_string(),
            "the write position moved back from 0x8 to 0x4"
        );
    }

    #[test]
    fn a_ring_outside_its_region_is_refused() {
        let r = SharedRegion::create("ring", 4096).unwrap();
        let bells = SharedRegion::create("bells", DOORBELL_PAGE_BYTES).unwrap();
        let g = Geometry::new(4096, Unit::Dword).unwrap();
        let bell = Doorbell::new(bells, 0).unwrap();
        let e = Producer::new(
            g,
            (r.clone(), 4),
            (r.clone(), 0),
            (r.clone(), 8),
            bell,
            true,
        );
        assert!(matches!(e, Err(RingError::Outside { what: "a ring", .. })));
        // Reads through a region are checked too.
        let c = Consumer::new(g, 0, 8, 4096);
        assert!(c.available(&r).is_err());
    }

    #[test]
    fn a_placement_that_crosses_the_end_pads_unless_the_ring_wraps() {
        let mut r = Cursor::new(16, false);
        r.write = 12;
        assert_eq!(r.spot(4), Spot { pad: 0, start: 12 });
        assert_eq!(r.spot(5), Spot { pad: 4, start: 16 });
        assert_eq!(r.spot(5).offset(16), 0);
        r.wraps = true;
        assert_eq!(r.spot(5), Spot { pad: 0, start: 12 });
    }

    #[test]
    fn fits_counts_the_padding() {
        let mut r = Cursor::new(16, false);
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
        assert!(Cursor::holds(16, 8, false));
        assert!(!Cursor::holds(16, 9, false));
        assert!(Cursor::holds(16, 15, true));
        assert!(!Cursor::holds(16, 16, true));
    }

    proptest::proptest! {
        #[test]
        #[cfg_attr(
            miri,
            ignore = "cursor arithmetic with no unsafe to check, and proptest's failure file \
                      needs the file system Miri isolates"
        )]
        fn placements_never_cross_the_end_and_never_overrun_the_reader(
            lens in proptest::collection::vec(1u64..=32, 1..200),
            lag in 0u64..64,
        ) {
            let mut r = Cursor::new(64, false);
            let mut read = 0u64;
            for len in lens {
                let s = r.spot(len);
                let off = s.offset(64);
                proptest::prop_assert!(off + len <= 64);
                // Advance the reader as far as the lag lets it.
                read = read.max(r.write.saturating_sub(lag)).min(r.write);
                if r.fits(s, len, read) {
                    proptest::prop_assert!(s.end(len) - read <= 64);
                    r.write = s.end(len);
                } else {
                    read = r.write;
                    proptest::prop_assert!(r.fits(s, len, read));
                    r.write = s.end(len);
                }
            }
        }
    }
}
