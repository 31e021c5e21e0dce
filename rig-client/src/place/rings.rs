//! The client's view of the shared rings and the argument segment: a queue's ring is
//! `rig_shm`'s [`Producer`] (room by the read position the queue publishes, stores that
//! wrap, publishing the write position and ringing the doorbell); the segment is a byte
//! ring whose room the placer tracks by the values reached.

use rig_amd::sdma;
use rig_proto::{QueueKind, QueueShare};
use rig_shm::Doorbell;
use rig_shm::SharedRegion;
use rig_shm::layout::MIN_SEGMENT_BYTES;
use rig_shm::ring::{Cursor, Geometry, Producer, Unit};

use crate::device::Maps;
use crate::error::{Error, Result};

/// A hardware queue as the client fills it.
#[derive(Debug)]
pub(super) struct QueueRing {
    pub(super) generation: u32,
    /// The ring, its positions (in dwords) and doorbell.
    pub(super) ring: Producer,
}

/// The unit of a queue kind's positions.
fn unit(kind: QueueKind) -> Unit {
    match kind {
        QueueKind::Pm4 => Unit::Dword,
        QueueKind::Sdma => Unit::Byte,
        QueueKind::Aql => Unit::AqlPacket,
    }
}

impl QueueRing {
    pub(super) fn new(share: &QueueShare, maps: &mut Maps) -> Result<QueueRing> {
        share.check().map_err(Error::layout)?;
        let kind = unit(share.kind);
        debug_assert_eq!(kind.bytes(), rig_proto::messages::position_unit(share.kind));
        let geometry = Geometry::new(share.ring.host.bytes, kind)
            .map_err(|e| Error::Protocol(format!("rigd shared a bad ring: {e}")))?;
        let ring = maps.gpu_share(share.ring)?;
        let read = maps.gpu_share(share.read)?;
        let write = maps.gpu_share(share.write)?;
        let (bell_region, bell_offset) = maps.share(share.doorbell)?;
        let bell = Doorbell::new(bell_region, bell_offset)
            .map_err(|e| Error::shared("rigd shared a bad doorbell", e))?;
        // PM4 packets may cross the ring's end; SDMA packets never do; AQL packets, 16
        // dwords each at multiples of 16, never meet it.
        let wraps = share.kind != QueueKind::Sdma;
        let ring = Producer::new(geometry, ring, read, write, bell, wraps)
            .map_err(|e| Error::Protocol(format!("rigd shared a bad ring: {e}")))?;
        Ok(QueueRing {
            generation: share.generation,
            ring,
        })
    }

    /// Fills the ring from its write position to its end (`pad` dwords) with SDMA NOPs, so
    /// that the next packet starts at the ring's start; moves the write position past them.
    pub(super) fn pad_sdma(&mut self, pad: u64) {
        let r = &mut self.ring;
        let mut at = r.cursor.write & (r.cursor.size - 1);
        let mut left = pad;
        while left > 0 {
            let n = left.min(u64::from(sdma::Nop::MOST_WORDS));
            r.zero(at, n);
            r.store_word(at, sdma::Nop { words: n as u32 }.header());
            at += n;
            left -= n;
        }
        r.cursor.write += pad;
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
    pub(super) pos: Cursor,
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
            pos: Cursor::new(bytes, false),
        })
    }
}
