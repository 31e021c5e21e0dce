//! The client's view of the shared rings and the argument segment: positions, room by the
//! read position the GPU publishes, stores that wrap, and publishing a write position to
//! the queue's write word and doorbell.

use std::sync::atomic::Ordering;

use rig_amd::sdma;
use rig_proto::{QueueKind, QueueShare};
use rig_shm::layout::{MIN_RING_BYTES, MIN_SEGMENT_BYTES};
use rig_shm::{Doorbell, SharedRegion};

use crate::device::Maps;
use crate::error::{Error, Result};
use crate::ring::{Ring, Spot};

/// A hardware queue as the client fills it.
#[derive(Debug)]
pub(super) struct QueueRing {
    pub(super) generation: u32,
    pub(super) ring: SharedRegion,
    pub(super) ring_offset: usize,
    /// Positions in dwords.
    pub(super) pos: Ring,
    pub(super) read: (SharedRegion, usize),
    pub(super) write: (SharedRegion, usize),
    pub(super) bell: Doorbell,
    /// Bytes of one position unit.
    pub(super) unit: u64,
    /// The read position last read, in dwords.
    pub(super) seen_read: u64,
}

impl QueueRing {
    pub(super) fn new(share: &QueueShare, maps: &mut Maps) -> Result<QueueRing> {
        let bytes = share.ring.host.bytes;
        if !bytes.is_power_of_two() || bytes < MIN_RING_BYTES {
            return Err(Error::Protocol(format!(
                "a ring of {bytes} bytes is not a power of two of at least {MIN_RING_BYTES}"
            )));
        }
        let (ring, ring_offset) = maps.gpu_share(share.ring)?;
        let read = maps.gpu_share(share.read)?;
        let write = maps.gpu_share(share.write)?;
        let (bell_region, bell_offset) = maps.share(share.doorbell)?;
        if read.1 % 8 != 0 || write.1 % 8 != 0 || ring_offset % 4 != 0 {
            return Err(Error::Protocol(
                "rigd shared unaligned queue positions".into(),
            ));
        }
        let bell = Doorbell::new(bell_region, bell_offset).map_err(|source| Error::Shared {
            what: "rigd shared a bad doorbell",
            source,
        })?;
        let unit = rig_proto::messages::position_unit(share.kind);
        let mut pos = Ring::new(bytes / 4, share.kind == QueueKind::Pm4);
        // Start where the queue stands (0 for a new one).
        pos.write = write.0.load_u64(write.1, Ordering::Acquire) * unit / 4;
        Ok(QueueRing {
            generation: share.generation,
            ring,
            ring_offset,
            pos,
            read,
            write,
            bell,
            unit,
            seen_read: pos.write,
        })
    }

    /// The queue's read position, in dwords.
    pub(super) fn read(&self) -> u64 {
        self.read.0.load_u64(self.read.1, Ordering::Acquire) * self.unit / 4
    }

    /// Whether `len` dwords at `spot` fit: by the read position last read, else by the
    /// queue's current one.
    pub(super) fn fits(&mut self, spot: Spot, len: u64) -> bool {
        if len == 0 || self.pos.fits(spot, len, self.seen_read) {
            return true;
        }
        self.seen_read = self.read();
        self.pos.fits(spot, len, self.seen_read)
    }

    /// Stores `words` at ring offset `at` (dwords), wrapping at the ring's end.
    pub(super) fn store(&self, at: u64, words: &[u32]) {
        let size = self.pos.size as usize;
        let at = at as usize;
        let first = words.len().min(size - at);
        self.ring
            .write_u32s(self.ring_offset + 4 * at, &words[..first]);
        if first < words.len() {
            self.ring.write_u32s(self.ring_offset, &words[first..]);
        }
    }

    /// Fills the ring from its write position to its end (`pad` dwords) with SDMA NOPs, so
    /// that the next packet starts at the ring's start; moves the write position past them.
    pub(super) fn pad_sdma(&mut self, pad: u64) {
        let mut at = self.pos.write & (self.pos.size - 1);
        let mut left = pad;
        while left > 0 {
            let n = left.min(u64::from(sdma::Nop::MOST_WORDS));
            let off = self.ring_offset + 4 * at as usize;
            self.ring.fill(off, 4 * n as usize, 0);
            let nop = sdma::Nop { words: n as u32 };
            self.ring.store_u32(off, nop.header(), Ordering::Relaxed);
            at += n;
            left -= n;
        }
        self.pos.write += pad;
    }

    /// Publishes the write position: to the queue's write word, then its doorbell.
    pub(super) fn publish(&self) {
        let units = self.pos.write * 4 / self.unit;
        self.write
            .0
            .store_u64(self.write.1, units, Ordering::Release);
        self.bell.ring(units);
    }
}

/// The argument segment.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) generation: u32,
    pub(super) region: SharedRegion,
    pub(super) offset: usize,
    pub(super) gpu: u64,
    /// Positions in bytes.
    pub(super) pos: Ring,
}

impl Segment {
    pub(super) fn new(share: &rig_proto::SegmentShare, maps: &mut Maps) -> Result<Segment> {
        let bytes = share.memory.host.bytes;
        if !bytes.is_power_of_two() || bytes < MIN_SEGMENT_BYTES {
            return Err(Error::Protocol(format!(
                "a segment of {bytes} bytes is not a power of two of at least {MIN_SEGMENT_BYTES}"
            )));
        }
        let (region, offset) = maps.gpu_share(share.memory)?;
        Ok(Segment {
            generation: share.generation,
            region,
            offset,
            gpu: share.memory.gpu_address,
            pos: Ring::new(bytes, false),
        })
    }
}
