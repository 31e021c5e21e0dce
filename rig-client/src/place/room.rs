//! The client's half of a device's queues: the rings (`COMPUTE:0`, `COPY:0`), the
//! argument segment, their positions, and the room for each value: a submission that
//! never fits is refused, one that exceeds today's rings asks for a growth (asked of rigd
//! by [`super::submit`] without the placer's lock, installed once the device reached every
//! value submitted), one that fits once earlier work completes waits.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use rig_proto::{DeviceId, DeviceOpened, Generations, Grown, QueueKind, Request};
use rig_shm::SharedRegion;

use super::compile::{Compiled, Target};
use super::framing::{Frame, frame};
use super::rings::{QueueRing, Segment};
use crate::device::Maps;
use crate::error::{Error, Never, Result};
use rig_shm::ring::{Cursor, Spot};

/// Values whose segment blocks the placer tracks at once; more wait for the oldest.
const RECORDS: usize = 4096;

/// What a growth made, waiting to be installed.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    compute: Option<QueueRing>,
    copy: Option<QueueRing>,
    args: Option<Segment>,
}

impl Pending {
    /// The rings and segment rigd grew, mapped (with no lock held: mapping is system calls).
    pub(crate) fn map(grown: &Grown, fds: Vec<OwnedFd>) -> Result<Pending> {
        grown.check().map_err(Error::layout)?;
        let mut maps = Maps::new(fds)?;
        Ok(Pending {
            compute: grown
                .compute
                .as_ref()
                .map(|q| QueueRing::new(q, &mut maps))
                .transpose()?,
            copy: grown
                .copy
                .as_ref()
                .map(|q| QueueRing::new(q, &mut maps))
                .transpose()?,
            args: grown
                .args
                .as_ref()
                .map(|s| Segment::new(s, &mut maps))
                .transpose()?,
        })
    }
}

/// The client's half of a device's queues: rings, segment, positions, staging.
#[derive(Debug)]
pub(crate) struct Placer {
    pub(super) target: Target,
    pub(super) compute: QueueRing,
    pub(super) copy: QueueRing,
    pub(super) args: Segment,
    pub(super) pending: Option<Pending>,
    pub(super) most: rig_proto::RingLimits,
    /// The timeline word's GPU address.
    pub(super) word: u64,
    /// The last value submitted.
    pub(super) last: u64,
    pub(super) submitted: (SharedRegion, usize),
    /// (value, segment write position after its block), oldest first.
    pub(super) records: VecDeque<(u64, u64)>,
    /// The end of the newest block whose value is reached.
    pub(super) args_done: u64,
    /// A value's words: COMPUTE:0's, COPY:0's, and COMPUTE:0's indirect buffers (AQL).
    pub(super) staging: [Vec<u32>; 3],
    /// Clock stamps of the current profile: (GPU address of the slots, slots, first value).
    pub(crate) stamps: Option<StampSlots>,
    /// The values placed with stamps whose stamps are not yet converted, oldest first.
    pub(crate) stamped: VecDeque<Stamped>,
    /// The interrupt context releases carry.
    pub(super) context: u32,
    /// The waits COMPUTE:0 makes for the value being placed, filled by [`super::submit`]
    /// under the lock.
    pub(crate) gpu_waits: Vec<GpuWait>,
}

/// A wait of COMPUTE:0 for another device's point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuWait {
    /// The GPU address of the other device's word in this device's space.
    pub word: u64,
    pub value: u64,
    /// (GPU address of an evidence slot, GPU address of the other device's lost flag):
    /// right after the wait passes, the queue copies the flag into the slot, so the host
    /// can tell a point reached from one written by the stop of a lost device
    /// ([`crate::loss`]).
    pub evidence: Option<(u64, u64)>,
}

/// Bytes of a value's stamps: its start on COMPUTE:0, its start on COPY:0, its end, 8 spare.
pub(crate) const STAMP_BYTES: u64 = 32;

/// A value placed with stamps: when, and which queues' work it entered (each of which
/// stamps its start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamped {
    pub value: u64,
    /// The host's `CLOCK_MONOTONIC` before its doorbells were rung, in nanoseconds.
    pub submitted: u64,
    /// Whether COMPUTE:0 ran words of it (and stamped its start there).
    pub compute: bool,
    /// Whether COPY:0 did.
    pub copy: bool,
}

/// Where a profile's stamps go: [`STAMP_BYTES`] per value from `first`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StampSlots {
    pub gpu: u64,
    pub slots: u64,
    pub first: u64,
}

impl StampSlots {
    fn slot(&self, v: u64) -> Option<u64> {
        let i = v.checked_sub(self.first)?;
        (i < self.slots).then(|| self.gpu + STAMP_BYTES * i)
    }
}

impl Placer {
    pub(crate) fn new(
        opened: &DeviceOpened,
        target: Target,
        maps: &mut Maps,
        submitted: (SharedRegion, usize),
    ) -> Result<Placer> {
        opened.check().map_err(Error::layout)?;
        let compute = QueueRing::new(&opened.compute, maps)?;
        let copy = QueueRing::new(&opened.copy, maps)?;
        let args = Segment::new(&opened.args, maps)?;
        let first = opened.word.first;
        Ok(Placer {
            target,
            compute,
            copy,
            args,
            pending: None,
            most: opened.facts.most_ring,
            word: opened.word.memory.gpu_address,
            last: first,
            submitted,
            records: VecDeque::with_capacity(RECORDS),
            args_done: 0,
            staging: [
                Vec::with_capacity(1024),
                Vec::with_capacity(1024),
                Vec::new(),
            ],
            stamps: None,
            stamped: VecDeque::new(),
            context: opened.context,
            gpu_waits: Vec::with_capacity(4),
        })
    }

    /// The last value submitted.
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// The installed generations, for rigd's retiring of older queues.
    fn generations(&self) -> Generations {
        Generations {
            compute: self.compute.generation,
            copy: self.copy.generation,
            args: self.args.generation,
        }
    }

    /// The segment's read position: the end of the newest block whose value is reached.
    fn args_read(&mut self, reached: u64) -> u64 {
        while let Some(&(v, end)) = self.records.front() {
            if v > reached {
                break;
            }
            self.args_done = end;
            self.records.pop_front();
        }
        self.args_done
    }
}

/// What a try at placing a value came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// Placed as this value.
    Placed(u64),
    /// Fits once earlier work completes.
    Later,
    /// Needs bigger rings or segment.
    Grow { compute: u64, copy: u64, block: u64 },
}

impl Placer {
    /// Tries to place the value after the last one: room (`docs/client.md`), then submit.
    pub(crate) fn try_place(&mut self, c: &Compiled, reached: &dyn Fn() -> u64) -> Result<Step> {
        if self.pending.is_some() {
            if reached() < self.last {
                return Ok(Step::Later);
            }
            self.install();
        }
        let v = self.last + 1;
        let seg_spot = self.args.pos.spot(c.block);
        let block = self.args.gpu + seg_spot.offset(self.args.pos.size);
        let f = Frame {
            target: self.target,
            word: self.word,
            context: self.context,
            stamp: self.stamps.and_then(|s| s.slot(v)),
            gpu_waits: &self.gpu_waits,
        };
        frame(&f, c, v, block, &mut self.staging)?;
        let compute = self.staging[0].len() as u64;
        let copy = self.staging[1].len() as u64;
        // Never: past the largest rings the path makes. (`then`, not `then_some`: the error
        // is built only when it is raised, not on every submit.)
        let never = |what, bytes: u64, most: u64| {
            (bytes > most).then(|| Error::Never(Never::TooLarge { what, bytes, most }))
        };
        let most_compute = self.most.compute;
        let most_copy = self.most.copy;
        if let Some(e) = never("compute ring", 4 * compute + 4, most_compute)
            .or_else(|| never("copy ring", 8 * copy, most_copy))
            .or_else(|| never("argument segment", 2 * c.block, most_copy))
        {
            return Err(e);
        }
        if !Cursor::holds(self.compute.ring.cursor.size, compute, true)
            || !Cursor::holds(self.copy.ring.cursor.size, copy, false)
            || !Cursor::holds(self.args.pos.size, c.block, false)
        {
            return Ok(Step::Grow {
                compute: 4 * compute,
                copy: 4 * copy,
                block: c.block,
            });
        }
        // Positions other parties write are read only when the cached ones say "full", so
        // a submit that fits touches no cache line the GPU or rigd wrote.
        if self.records.len() == RECORDS {
            self.args_read(reached());
            if self.records.len() == RECORDS {
                return Ok(Step::Later);
            }
        }
        if !self.args.pos.fits(seg_spot, c.block, self.args_done) {
            let read = self.args_read(reached());
            if !self.args.pos.fits(seg_spot, c.block, read) {
                return Ok(Step::Later);
            }
        }
        let cspot = self.compute.ring.cursor.spot(compute);
        let kspot = self.copy.ring.cursor.spot(copy);
        if !self.compute.ring.fits(cspot, compute) || !self.copy.ring.fits(kspot, copy) {
            return Ok(Step::Later);
        }
        self.place(c, v, seg_spot, cspot, kspot);
        Ok(Step::Placed(v))
    }

    /// Stores value `v`'s bytes and packets, then publishes them.
    fn place(&mut self, c: &Compiled, v: u64, seg: Spot, cspot: Spot, kspot: Spot) {
        let low = v as u32;
        let base = self.args.offset + seg.offset(self.args.pos.size) as usize;
        // Every part's arguments in one write, then the words parts signal through.
        self.args.region.write(base, &c.image);
        for (i, p) in c.pieces.iter().enumerate() {
            if p.signals || Some(i) == c.last_copy {
                // Anything but the value's low word, so a waiter waits for this value's write.
                self.args
                    .region
                    .store_u64(base + 8 * i, u64::from(!low), Ordering::Relaxed);
            }
        }
        if let Some(n) = c.wait_slot {
            self.args
                .region
                .store_u64(base + 8 * n, u64::from(!low), Ordering::Relaxed);
        }
        if !self.staging[2].is_empty() {
            self.args
                .region
                .write_u32s(base + c.ib_at as usize, &self.staging[2]);
        }
        self.args.pos.write = seg.end(c.block);
        self.records.push_back((v, self.args.pos.write));

        let compute = self.staging[0].len() as u64;
        if compute > 0 {
            let at = cspot.offset(self.compute.ring.cursor.size);
            if self.target.compute == QueueKind::Aql {
                // The queue may run a packet once its header is stored: each goes last.
                self.compute.ring.store_packets(at, &self.staging[0]);
            } else {
                self.compute.ring.store(at, &self.staging[0]);
            }
            self.compute.ring.cursor.write = cspot.end(compute);
        }
        let copy = self.staging[1].len() as u64;
        if copy > 0 {
            if kspot.pad > 0 {
                self.copy.pad_sdma(kspot.pad);
            }
            self.copy
                .ring
                .store(kspot.offset(self.copy.ring.cursor.size), &self.staging[1]);
            self.copy.ring.cursor.write = kspot.end(copy);
        }
        if self.stamps.and_then(|s| s.slot(v)).is_some() {
            self.stamped.push_back(Stamped {
                value: v,
                submitted: crate::clock::monotonic_ns(),
                compute: compute > 0,
                copy: copy > 0,
            });
        }
        self.last = v;
        // For rigd's watchdog and rigctl: the last value given to submit.
        self.submitted
            .0
            .store_u64(self.submitted.1, v, Ordering::Release);
        if compute > 0 {
            self.compute.ring.publish();
        }
        if copy > 0 {
            self.copy.ring.publish();
        }
    }

    /// Installs a growth: later values go to the new queues and segment. Only once the
    /// device reached every value submitted, so the old ones hold no work.
    fn install(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if let Some(q) = p.compute {
            self.compute = q;
        }
        if let Some(q) = p.copy {
            self.copy = q;
        }
        if let Some(s) = p.args {
            self.args = s;
            self.records.clear();
            self.args_done = 0;
        }
    }

    /// The request for rings and a segment that hold `compute` and `copy` bytes of packets
    /// and a block of `block` bytes (what [`Step::Grow`] asked), naming the generations
    /// installed now. [`super::submit`] sends it without the lock and gives the answer to
    /// [`Placer::keep`].
    pub(crate) fn grow_request(
        &self,
        device: DeviceId,
        compute: u64,
        copy: u64,
        block: u64,
    ) -> Request {
        Request::Grow {
            device,
            compute_bytes: if compute < 4 * self.compute.ring.cursor.size {
                0
            } else {
                compute
            },
            copy_bytes: if 2 * copy <= 4 * self.copy.ring.cursor.size {
                0
            } else {
                copy
            },
            segment_bytes: if 2 * block <= self.args.pos.size {
                0
            } else {
                block
            },
            installed: self.generations(),
        }
    }

    /// Keeps a growth to install: what it made replaces what an earlier one made.
    pub(crate) fn keep(&mut self, grown: Pending) -> Result<()> {
        let mut p = self.pending.take().unwrap_or_default();
        if grown.compute.is_some() {
            p.compute = grown.compute;
        }
        if grown.copy.is_some() {
            p.copy = grown.copy;
        }
        if grown.args.is_some() {
            p.args = grown.args;
        }
        if p.compute.is_none() && p.copy.is_none() && p.args.is_none() {
            return Err(Error::Protocol(
                "rigd grew nothing for a submission that needs it".into(),
            ));
        }
        self.pending = Some(p);
        Ok(())
    }
}
