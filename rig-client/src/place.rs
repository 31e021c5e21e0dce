//! The submission path: a submission's parts become packets in the shared rings and bytes
//! in the argument segment, placed with plain stores, and the doorbells are rung.
//!
//! This module owns the client's half of the seed's room and submit for this driver:
//!
//! - [`Compiled`]: what a submission becomes once per device: each part's packets and
//!   argument bytes, with the kernel-argument addresses left to patch. It is made at the
//!   first submit and kept in the submission, so a later submit of it copies words.
//! - [`Placer`]: the rings (`COMPUTE:0`, `COPY:0`), the argument segment, their positions,
//!   and the framing of each value: each queue's work for value v first waits for v - 1
//!   (the seed's Order), a part ordered `after` parts of the other queue waits for their
//!   8-byte words in the segment (WAIT_REG_MEM on PM4, POLL_REGMEM on SDMA) which those
//!   parts write when done (RELEASE_MEM, FENCE), and the queue that releases v writes the
//!   timeline word and raises the interrupt. COPY:0 releases only values whose low 32 bits
//!   are not 0, since its FENCE writes 32 bits.
//! - room: a submission that never fits is refused, one that exceeds today's rings asks
//!   rigd to grow them (installed once the device reached every value submitted), one that
//!   fits once earlier work completes waits.
//!
//! It does not own the packet formats ([`rig_amd::pm4`], [`rig_amd::sdma`]), the control
//! connection ([`crate::device`]) or the checks of parts that need no device state
//! ([`crate::submission`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rig_amd::pm4;
use rig_amd::sdma;
use rig_proto::{
    DeviceOpened, Entry, Facts, Generations, QueueKind, QueueShare, Request, Response,
};
use rig_shm::{Doorbell, SharedRegion};

use crate::device::{DeviceShared, Maps};
use crate::error::{Error, Never, Result};
use crate::point::Point;
use crate::ring::{Ring, Spot};
use crate::submission::{Part, Submission, What};
use crate::types::Queue;

/// Alignment of each value's block in the argument segment, and of each launch's arguments.
const ARG_ALIGN: u64 = 64;
/// Values whose segment blocks the placer tracks at once; more wait for the oldest.
const RECORDS: usize = 4096;

// ---------------------------------------------------------------------------------------
// Per-device constants
// ---------------------------------------------------------------------------------------

/// What the encoders need of a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// GFX9 (CP_COHER_CNTL cache actions) or GFX10+ (GCR_CNTL).
    pub gfx9: bool,
    pub sdma: sdma::Layout,
    pub compute: QueueKind,
    /// Bytes one linear SDMA copy moves.
    pub linear: u64,
}

impl Target {
    pub fn of(facts: &Facts) -> Target {
        let v =
            rig_amd::gpu::IpVersion::new(facts.sdma.major, facts.sdma.minor, facts.sdma.stepping);
        let layout = sdma::Layout::of(v);
        Target {
            gfx9: facts.gc.major < 10,
            sdma: layout,
            compute: facts.compute,
            linear: facts.linear_copy_bytes.clamp(4, layout.most_bytes()),
        }
    }

    fn acquire(&self, full: bool) -> pm4::AcquireMem {
        match (self.gfx9, full) {
            (true, true) => pm4::AcquireMem::gfx9(pm4::coher::ALL),
            (true, false) => pm4::AcquireMem::gfx9(pm4::coher::ABOVE_L2),
            (false, true) => pm4::AcquireMem::gfx10(pm4::gcr::ALL),
            (false, false) => pm4::AcquireMem::gfx10(pm4::gcr::ABOVE_L2),
        }
    }

    fn write_back(&self) -> u32 {
        if self.gfx9 {
            pm4::coher::RELEASE_WRITE_BACK
        } else {
            pm4::gcr::RELEASE_WRITE_BACK
        }
    }
}

// ---------------------------------------------------------------------------------------
// Launch templates
// ---------------------------------------------------------------------------------------

/// A kernel's dispatch, precomputed at resolve: the register writes every launch of it
/// makes, with the launch's own values (threads, kernel-argument address) left to fill.
#[derive(Debug, Clone)]
pub(crate) struct LaunchTemplate {
    /// SET_SH_REG packets and their values.
    pub words: Vec<u32>,
    /// Index in `words` of the kernel-argument address (low word, then high word).
    pub kernarg_at: Option<usize>,
    /// Index in `words` of COMPUTE_NUM_THREAD_X (then Y, Z).
    pub threads_at: usize,
    /// Index in `words` of COMPUTE_PGM_RSRC2, whose LDS size a launch's shared memory sets.
    pub rsrc2_at: usize,
    /// Bytes of LDS the kernel takes itself.
    pub group_segment: u32,
    /// COMPUTE_DISPATCH_INITIATOR.
    pub initiator: u32,
}

impl LaunchTemplate {
    pub fn new(facts: &Facts, entry: &Entry) -> LaunchTemplate {
        crate::dispatch::template(facts, entry)
    }
}

// ---------------------------------------------------------------------------------------
// Compiled submissions
// ---------------------------------------------------------------------------------------

/// A fill's unaligned end: a linear copy of `bytes` (1 to 3) bytes to `dst` from 4 bytes
/// of the segment holding the fill's byte.
#[derive(Debug, Clone, Copy)]
struct FillEnd {
    dst: u64,
    bytes: u64,
    /// Offset of its 4 source bytes in the piece's arguments.
    arg: u64,
}

/// One part as words for its queue.
#[derive(Debug, Clone)]
struct Piece {
    queue: Queue,
    words: Vec<u32>,
    /// Argument bytes, placed at `args_at` in the value's segment block.
    args: Vec<u8>,
    args_at: u64,
    /// Where in `words` the address of the arguments goes (low then high word).
    kernarg_at: Option<usize>,
    /// Copies from the segment, encoded at submit (their source address is the segment's).
    ends: Vec<FillEnd>,
    after: Vec<usize>,
    /// True iff a part of the other queue waits for this one (the last copy also signals
    /// where the compute queue releases).
    signals: bool,
    launch: bool,
}

/// A submission as a device runs it.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    device: u64,
    pieces: Vec<Piece>,
    /// Bytes of the value's block in the segment: 8 per part, then arguments.
    block: u64,
    has_compute: bool,
    has_copy: bool,
    /// Index of the last copy piece.
    last_copy: Option<usize>,
    /// Index of the 8-byte word, after the parts' words, through which COMPUTE:0 tells
    /// COPY:0 that the waits for other devices' points passed; `Some` iff the submission
    /// waits for any point.
    wait_slot: Option<usize>,
}

fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Compiled {
    pub(crate) fn new(t: &Target, device: u64, s: &Submission) -> Result<Compiled> {
        let n = s.parts.len() as u64;
        let wait_slot = (!s.waits.is_empty()).then_some(s.parts.len());
        let mut args_end = 8 * (n + u64::from(wait_slot.is_some()));
        let mut pieces = Vec::with_capacity(s.parts.len());
        for (i, part) in s.parts.iter().enumerate() {
            pieces.push(piece(t, device, i, part, &mut args_end)?);
        }
        let has_compute = pieces.iter().any(|p| p.queue == Queue::Compute);
        let last_copy = pieces.iter().rposition(|p| p.queue == Queue::Copy);
        let has_copy = last_copy.is_some();
        for i in 0..pieces.len() {
            for a in pieces[i].after.clone() {
                pieces[a].signals = true;
            }
        }
        Ok(Compiled {
            device,
            pieces,
            block: align(args_end.max(8), ARG_ALIGN),
            has_compute,
            has_copy,
            last_copy,
            wait_slot,
        })
    }
}

fn piece(t: &Target, device: u64, i: usize, part: &Part, args_end: &mut u64) -> Result<Piece> {
    let mut p = Piece {
        queue: part.queue,
        words: Vec::new(),
        args: Vec::new(),
        args_at: 0,
        kernarg_at: None,
        ends: Vec::new(),
        after: part.after.clone(),
        signals: false,
        launch: false,
    };
    let other = |part: usize| Error::Never(Never::OtherDevice { part });
    match &part.what {
        What::Words(w) => {
            if part.queue == Queue::Compute && t.compute == QueueKind::Aql && w.len() % 16 != 0 {
                return Err(Never::PartialPacket {
                    part: i,
                    words: w.len(),
                }
                .into());
            }
            p.words = w.clone();
        }
        What::Launch(l) => {
            if l.kernel.0.device_id != device {
                return Err(other(i));
            }
            let k = &l.kernel.0;
            let tpl = &k.template;
            p.launch = true;
            p.args = crate::dispatch::kernargs(&k.entry, l);
            let a = u64::from(k.entry.kernarg_align.max(16)).max(ARG_ALIGN);
            p.args_at = align(*args_end, a);
            *args_end = p.args_at + p.args.len() as u64;
            p.words = tpl.words.clone();
            p.words[tpl.threads_at..tpl.threads_at + 3].copy_from_slice(&l.threads);
            p.words[tpl.rsrc2_at] =
                crate::dispatch::rsrc2_with_lds(p.words[tpl.rsrc2_at], tpl.group_segment, l.shared);
            p.kernarg_at = tpl.kernarg_at;
            let mut d = [0u32; pm4::DispatchDirect::WORDS];
            pm4::DispatchDirect {
                dim: l.groups,
                initiator: tpl.initiator,
            }
            .encode(&mut d)
            .map_err(encode)?;
            p.words.extend_from_slice(&d);
        }
        What::Copy(c) => {
            if c.src.0.device_id != device || c.dst.0.device_id != device {
                return Err(other(i));
            }
            let src = c.src.0.address + c.src_offset;
            let dst = c.dst.0.address + c.dst_offset;
            crate::copies::copy(t, src, dst, c.shape, &mut p.words)?;
        }
        What::Fill(f) => {
            if f.dst.0.device_id != device {
                return Err(other(i));
            }
            let dst = f.dst.0.address + f.offset;
            let (head, body, tail) = crate::copies::fill_split(dst, f.bytes);
            if body > 0 {
                let pattern = u32::from_ne_bytes([f.byte; 4]);
                crate::copies::fill_dwords(t, dst + head, body, pattern, &mut p.words)?;
            }
            if head + tail > 0 {
                p.args = vec![f.byte; 4];
                p.args_at = align(*args_end, 8);
                *args_end = p.args_at + 4;
                if head > 0 {
                    p.ends.push(FillEnd {
                        dst,
                        bytes: head,
                        arg: 0,
                    });
                }
                if tail > 0 {
                    p.ends.push(FillEnd {
                        dst: dst + head + body,
                        bytes: tail,
                        arg: 0,
                    });
                }
            }
        }
    }
    Ok(p)
}

pub(crate) fn encode(e: pm4::EncodeError) -> Error {
    Error::Invalid(format!("a packet cannot be encoded: {e}"))
}

// ---------------------------------------------------------------------------------------
// Rings in shared memory
// ---------------------------------------------------------------------------------------

/// A hardware queue as the client fills it.
#[derive(Debug)]
struct QueueRing {
    generation: u32,
    ring: SharedRegion,
    ring_offset: usize,
    /// Positions in dwords.
    pos: Ring,
    read: (SharedRegion, usize),
    write: (SharedRegion, usize),
    bell: Doorbell,
    /// Bytes of one position unit.
    unit: u64,
    /// The read position last read, in dwords.
    seen_read: u64,
}

impl QueueRing {
    fn new(share: &QueueShare, maps: &mut Maps) -> Result<QueueRing> {
        let bytes = share.ring.host.bytes;
        if !bytes.is_power_of_two() || bytes < 64 {
            return Err(Error::Protocol(format!(
                "a ring of {bytes} bytes is not a power of two"
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
        let bell = Doorbell::new(bell_region, bell_offset)
            .map_err(|e| Error::Protocol(format!("rigd shared a bad doorbell: {e}")))?;
        let unit = share.kind.position_unit();
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
    fn read(&self) -> u64 {
        self.read.0.load_u64(self.read.1, Ordering::Acquire) * self.unit / 4
    }

    /// Whether `len` dwords at `spot` fit: by the read position last read, else by the
    /// queue's current one.
    fn fits(&mut self, spot: Spot, len: u64) -> bool {
        if len == 0 || self.pos.fits(spot, len, self.seen_read) {
            return true;
        }
        self.seen_read = self.read();
        self.pos.fits(spot, len, self.seen_read)
    }

    /// Stores `words` at ring offset `at` (dwords), wrapping at the ring's end.
    fn store(&self, at: u64, words: &[u32]) {
        let size = self.pos.size as usize;
        let at = at as usize;
        let first = words.len().min(size - at);
        self.ring
            .write_u32s(self.ring_offset + 4 * at, &words[..first]);
        if first < words.len() {
            self.ring.write_u32s(self.ring_offset, &words[first..]);
        }
    }

    /// Publishes the write position: to the queue's write word, then its doorbell.
    fn publish(&self) {
        let units = self.pos.write * 4 / self.unit;
        self.write
            .0
            .store_u64(self.write.1, units, Ordering::Release);
        self.bell.ring(units);
    }
}

/// The argument segment.
#[derive(Debug)]
struct Segment {
    generation: u32,
    region: SharedRegion,
    offset: usize,
    gpu: u64,
    /// Positions in bytes.
    pos: Ring,
}

impl Segment {
    fn new(share: &rig_proto::SegmentShare, maps: &mut Maps) -> Result<Segment> {
        let bytes = share.memory.host.bytes;
        if !bytes.is_power_of_two() || bytes < 4096 {
            return Err(Error::Protocol(format!(
                "a segment of {bytes} bytes is not a power of two"
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

/// What a growth made, waiting to be installed.
#[derive(Debug, Default)]
struct Pending {
    compute: Option<QueueRing>,
    copy: Option<QueueRing>,
    args: Option<Segment>,
}

/// The client's half of a device's queues: rings, segment, positions, staging.
#[derive(Debug)]
pub(crate) struct Placer {
    target: Target,
    compute: QueueRing,
    copy: QueueRing,
    args: Segment,
    pending: Option<Pending>,
    most: rig_proto::RingLimits,
    /// The timeline word's GPU address.
    word: u64,
    /// The last value submitted.
    last: u64,
    submitted: (SharedRegion, usize),
    /// (value, segment write position after its block), oldest first.
    records: VecDeque<(u64, u64)>,
    /// The end of the newest block whose value is reached.
    args_done: u64,
    staging: [Vec<u32>; 2],
    /// Clock stamps of the current profile: (GPU address of the slots, slots, first value).
    pub(crate) stamps: Option<StampSlots>,
    /// The interrupt context releases carry.
    context: u32,
    /// The waits COMPUTE:0 makes for the value being placed, filled by [`submit`] under
    /// the lock.
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
        maps: &mut Maps,
        submitted: (SharedRegion, usize),
    ) -> Result<Placer> {
        let target = Target::of(&opened.facts);
        if target.compute != QueueKind::Pm4 {
            return Err(Error::Invalid(format!(
                "rig-client places PM4 packets only; {} reads {:?} packets on COMPUTE:0",
                opened.facts.arch, target.compute
            )));
        }
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
            staging: [Vec::with_capacity(1024), Vec::with_capacity(1024)],
            stamps: None,
            context: 0,
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

// ---------------------------------------------------------------------------------------
// Placing a value
// ---------------------------------------------------------------------------------------

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

fn push<const N: usize>(
    out: &mut Vec<u32>,
    f: impl FnOnce(&mut [u32]) -> std::result::Result<usize, pm4::EncodeError>,
) -> Result<()> {
    let at = out.len();
    out.resize(at + N, 0);
    let n = f(&mut out[at..]).map_err(encode)?;
    out.truncate(at + n);
    Ok(())
}

fn wait_word(address: u64, value: u32) -> pm4::WaitRegMem {
    pm4::WaitRegMem {
        function: pm4::Compare::Equal,
        ..pm4::WaitRegMem::memory_at_least(address, value)
    }
}

fn poll_word(address: u64, value: u32) -> sdma::PollRegMem {
    sdma::PollRegMem {
        hdp_flush: false,
        function: pm4::Compare::Equal,
        memory: true,
        address,
        value,
        mask: u32::MAX,
        interval: 4,
        retry_count: 0xfff,
    }
}

fn fence(address: u64, value: u32) -> sdma::Fence {
    sdma::Fence {
        mtype: sdma::FENCE_MTYPE_UC,
        address,
        value,
    }
}

/// The header of an SDMA NOP of `words` words (1 to 0x4000), whose body the engine skips.
fn sdma_nop_header(words: u32) -> u32 {
    u32::from(sdma::OP_NOP) | ((words - 1) << 16)
}

impl Placer {
    /// Builds value `v`'s packets for both queues into the staging buffers, for a block of
    /// the segment at GPU address `block`.
    fn build(&mut self, c: &Compiled, v: u64, block: u64) -> Result<()> {
        let t = self.target;
        let low = v as u32;
        let word = self.word;
        let part_word = |i: usize| block + 8 * i as u64;
        let release_on_copy = !c.has_compute && c.has_copy && low != 0;
        let stamp = self.stamps.and_then(|s| s.slot(v));
        let gpu_waits = &self.gpu_waits;
        // COPY:0 polls no other device's word (its POLL_REGMEM compares 32 bits): COMPUTE:0
        // waits, then signals this word, which COPY:0 polls before its first part.
        let waited = c.wait_slot.filter(|_| !gpu_waits.is_empty() && c.has_copy);
        let [cs, ks] = &mut self.staging;
        cs.clear();
        ks.clear();
        if c.has_compute || !release_on_copy || !gpu_waits.is_empty() {
            push::<9>(cs, |o| pm4::WaitRegMem64::at_least(word, v - 1).encode(o))?;
            for w in gpu_waits {
                push::<9>(cs, |o| {
                    pm4::WaitRegMem64::at_least(w.word, w.value).encode(o)
                })?;
                if let Some((slot, flag)) = w.evidence {
                    let copy = pm4::CopyData {
                        src_sel: pm4::CopySrc::Memory,
                        dst_sel: pm4::CopyDst::Memory,
                        src_cache_policy: 0,
                        count_64: false,
                        wr_confirm: true,
                        dst_cache_policy: 0,
                        engine_sel: 0,
                        src: flag,
                        dst: slot,
                    };
                    push::<6>(cs, |o| copy.encode(o))?;
                }
            }
            if let Some(n) = waited {
                let r = pm4::ReleaseMem {
                    int_sel: pm4::IntSel::None,
                    data_sel: pm4::DataSel::Low32,
                    ..pm4::ReleaseMem::timeline(t.write_back(), part_word(n), u64::from(low))
                };
                push::<8>(cs, |o| r.encode(o))?;
            }
            if let Some(st) = stamp {
                push::<6>(cs, |o| pm4::CopyData::clock_to_memory(st).encode(o))?;
            }
            let mut first = true;
            for (i, p) in c.pieces.iter().enumerate() {
                if p.queue != Queue::Compute {
                    continue;
                }
                for &a in &p.after {
                    push::<7>(cs, |o| wait_word(part_word(a), low).encode(o))?;
                }
                if p.launch || !p.after.is_empty() {
                    let full = first || !p.after.is_empty();
                    push::<8>(cs, |o| t.acquire(full).encode(o))?;
                    first = false;
                }
                let at = cs.len();
                cs.extend_from_slice(&p.words);
                if let Some(k) = p.kernarg_at {
                    let a = block + p.args_at;
                    cs[at + k] = a as u32;
                    cs[at + k + 1] = (a >> 32) as u32;
                }
                if p.signals {
                    let r = pm4::ReleaseMem {
                        int_sel: pm4::IntSel::None,
                        data_sel: pm4::DataSel::Low32,
                        ..pm4::ReleaseMem::timeline(t.write_back(), part_word(i), u64::from(low))
                    };
                    push::<8>(cs, |o| r.encode(o))?;
                }
            }
            if !release_on_copy {
                if let Some(l) = c.last_copy {
                    push::<7>(cs, |o| wait_word(part_word(l), low).encode(o))?;
                }
                if let Some(st) = stamp {
                    let flush = pm4::EventWrite {
                        event_type: pm4::EVENT_CS_PARTIAL_FLUSH,
                        event_index: pm4::EVENT_INDEX_PARTIAL_FLUSH,
                        address: None,
                    };
                    push::<2>(cs, |o| flush.encode(o))?;
                    push::<6>(cs, |o| pm4::CopyData::clock_to_memory(st + 16).encode(o))?;
                }
                let r = pm4::ReleaseMem {
                    int_ctxid: self.context,
                    ..pm4::ReleaseMem::timeline(t.write_back(), word, v)
                };
                push::<8>(cs, |o| r.encode(o))?;
            }
        }
        if c.has_copy {
            push::<6>(ks, |o| poll_word(word, (v - 1) as u32).encode(o))?;
            if let Some(n) = waited {
                push::<6>(ks, |o| poll_word(part_word(n), low).encode(o))?;
            }
            if let Some(st) = stamp {
                push::<3>(ks, |o| sdma::Timestamp::global(st + 8).encode(o))?;
            }
            for (i, p) in c.pieces.iter().enumerate() {
                if p.queue != Queue::Copy {
                    continue;
                }
                for &a in &p.after {
                    push::<6>(ks, |o| poll_word(part_word(a), low).encode(o))?;
                }
                ks.extend_from_slice(&p.words);
                for e in &p.ends {
                    let src = block + p.args_at + e.arg;
                    let copy = sdma::CopyLinear::new(src, e.dst, e.bytes);
                    push::<7>(ks, |o| copy.encode(t.sdma, o))?;
                }
                // The compute queue waits for the last copy where it releases.
                if p.signals || (Some(i) == c.last_copy && !release_on_copy) {
                    push::<4>(ks, |o| fence(part_word(i), low).encode(o))?;
                }
            }
            if release_on_copy {
                if let Some(st) = stamp {
                    // The fence waits for the copies before the stamp is taken.
                    push::<4>(ks, |o| fence(st + 16, 0).encode(o))?;
                    push::<3>(ks, |o| sdma::Timestamp::global(st + 16).encode(o))?;
                }
                push::<4>(ks, |o| fence(word, low).encode(o))?;
                push::<2>(ks, |o| {
                    sdma::Trap {
                        context: self.context,
                    }
                    .encode(o)
                })?;
            }
        }
        Ok(())
    }

    /// Tries to place the value after the last one: the seed's room, then submit.
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
        self.build(c, v, block)?;
        let compute = self.staging[0].len() as u64;
        let copy = self.staging[1].len() as u64;
        // Never: past the largest rings the path makes.
        let never = |what, bytes: u64, most: u64| {
            (bytes > most).then_some(Error::Never(Never::TooLarge { what, bytes, most }))
        };
        let most_compute = self.most.compute;
        let most_copy = self.most.copy;
        if let Some(e) = never("compute ring", 4 * compute + 4, most_compute)
            .or_else(|| never("copy ring", 8 * copy, most_copy))
            .or_else(|| never("argument segment", 2 * c.block, most_copy))
        {
            return Err(e);
        }
        if !Ring::holds(self.compute.pos.size, compute, true)
            || !Ring::holds(self.copy.pos.size, copy, false)
            || !Ring::holds(self.args.pos.size, c.block, false)
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
        let cspot = self.compute.pos.spot(compute);
        let kspot = self.copy.pos.spot(copy);
        if !self.compute.fits(cspot, compute) || !self.copy.fits(kspot, copy) {
            return Ok(Step::Later);
        }
        self.place(c, v, seg_spot, cspot, kspot);
        Ok(Step::Placed(v))
    }

    /// Stores value `v`'s bytes and packets, then publishes them.
    fn place(&mut self, c: &Compiled, v: u64, seg: Spot, cspot: Spot, kspot: Spot) {
        let low = v as u32;
        let base = self.args.offset + seg.offset(self.args.pos.size) as usize;
        for (i, p) in c.pieces.iter().enumerate() {
            if p.signals || Some(i) == c.last_copy {
                // Anything but the value's low word, so a waiter waits for this value's write.
                self.args
                    .region
                    .store_u64(base + 8 * i, u64::from(!low), Ordering::Relaxed);
            }
            if !p.args.is_empty() {
                self.args.region.write(base + p.args_at as usize, &p.args);
            }
        }
        if let Some(n) = c.wait_slot {
            self.args
                .region
                .store_u64(base + 8 * n, u64::from(!low), Ordering::Relaxed);
        }
        self.args.pos.write = Ring::end(seg, c.block);
        self.records.push_back((v, self.args.pos.write));

        let compute = self.staging[0].len() as u64;
        if compute > 0 {
            self.compute
                .store(cspot.offset(self.compute.pos.size), &self.staging[0]);
            self.compute.pos.write = Ring::end(cspot, compute);
        }
        let copy = self.staging[1].len() as u64;
        if copy > 0 {
            if kspot.pad > 0 {
                self.pad_copy(kspot.pad);
            }
            self.copy
                .store(kspot.offset(self.copy.pos.size), &self.staging[1]);
            self.copy.pos.write = Ring::end(kspot, copy);
        }
        self.last = v;
        // For rigd's watchdog and rigctl: the last value given to submit.
        self.submitted
            .0
            .store_u64(self.submitted.1, v, Ordering::Release);
        if compute > 0 {
            self.compute.publish();
        }
        if copy > 0 {
            self.copy.publish();
        }
    }

    /// Fills the copy ring from its write position to its end with NOPs.
    fn pad_copy(&mut self, pad: u64) {
        let q = &mut self.copy;
        let mut at = q.pos.write & (q.pos.size - 1);
        let mut left = pad;
        while left > 0 {
            let n = left.min(0x4000);
            let off = q.ring_offset + 4 * at as usize;
            q.ring.fill(off, 4 * n as usize, 0);
            q.ring
                .store_u32(off, sdma_nop_header(n as u32), Ordering::Relaxed);
            at += n;
            left -= n;
        }
        q.pos.write += pad;
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

    /// Asks rigd for rings and a segment that hold `compute` and `copy` bytes of packets
    /// and a block of `block` bytes; keeps them to install.
    fn grow(&mut self, dev: &DeviceShared, compute: u64, copy: u64, block: u64) -> Result<()> {
        let req = Request::Grow {
            device: dev.id,
            compute_bytes: if compute < 4 * self.compute.pos.size {
                0
            } else {
                compute
            },
            copy_bytes: if 2 * copy <= 4 * self.copy.pos.size {
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
        };
        let (response, fds) = dev.rig.call(&req, &[])?;
        let grown = match response {
            Response::Grown(g) => g,
            Response::NoMemory { bytes, .. } => {
                return Err(Error::OutOfMemory(format!(
                    "{bytes} bytes to grow the device's rings"
                )));
            }
            r => return Err(Error::Protocol(format!("rigd answered grow with {r:?}"))),
        };
        let mut maps = Maps::new(fds)?;
        let mut p = self.pending.take().unwrap_or_default();
        if let Some(q) = &grown.compute {
            p.compute = Some(QueueRing::new(q, &mut maps)?);
        }
        if let Some(q) = &grown.copy {
            p.copy = Some(QueueRing::new(q, &mut maps)?);
        }
        if let Some(s) = &grown.args {
            p.args = Some(Segment::new(s, &mut maps)?);
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

// ---------------------------------------------------------------------------------------
// Submit
// ---------------------------------------------------------------------------------------

/// Submits `s` to `dev` as its next value: the hot path of the crate.
pub(crate) fn submit(dev: &Arc<DeviceShared>, s: &Submission) -> Result<u64> {
    if let Some(n) = &s.never {
        return Err(Error::Never(n.clone()));
    }
    dev.check_lost()?;
    // Waits the GPU cannot make (another GPU's device, a GPU whose compute queue does not
    // compare 64-bit words) are made here, on the host, before placing; so are waits for
    // a device already lost, which answer `Lost` unless it reached the point before.
    let pending = |p: &&Point| p.device.id != dev.id && !p.device.live.reached(p.value);
    let mut on_gpu = 0;
    for p in s.waits.iter().filter(pending) {
        if p.device.live.is_lost() || dev.peer_word(&p.device).is_none() {
            p.wait()?;
        } else {
            on_gpu += 1;
        }
    }
    if on_gpu > 0 {
        dev.evidence_ready()?;
    }
    let compiled = s.compiled(dev)?;
    let mut placer = dev
        .placer
        .lock()
        .map_err(|_| Error::Invalid("a thread panicked while it submitted".into()))?;
    placer.gpu_waits.clear();
    let next = placer.last() + 1;
    if on_gpu > 0 {
        dev.room_for_waits(on_gpu)?;
        let mut deps = dev.deps.lock().map_err(|_| poisoned())?;
        for p in s.waits.iter().filter(pending) {
            if let Some(word) = dev.cached_peer_word(p.device.id) {
                let evidence = deps.take(next, &p.device.live, p.value, word);
                placer.gpu_waits.push(GpuWait {
                    word,
                    value: p.value,
                    evidence,
                });
            }
        }
    }
    let placed = place_value(dev, &mut placer, &compiled);
    let waited = !placer.gpu_waits.is_empty();
    placer.gpu_waits.clear();
    match placed {
        Ok(v) => {
            mark_uses(s, v);
            Ok(v)
        }
        Err(e) => {
            if waited {
                // Nothing was placed: the records of its waits go.
                if let Ok(mut deps) = dev.deps.lock() {
                    deps.forget(next);
                }
            }
            Err(e)
        }
    }
}

fn poisoned() -> Error {
    Error::Invalid("a thread panicked while it submitted".into())
}

/// Places `compiled` as the device's next value, growing the rings or waiting for room.
fn place_value(
    dev: &Arc<DeviceShared>,
    placer: &mut std::sync::MutexGuard<'_, Placer>,
    compiled: &Compiled,
) -> Result<u64> {
    let mut grows = 0;
    let reached = || dev.signaled();
    let v = loop {
        match placer.try_place(compiled, &reached)? {
            Step::Placed(v) => break v,
            Step::Later => {
                let seen = dev.signaled();
                dev.wait_for_move(seen)?;
            }
            Step::Grow {
                compute,
                copy,
                block,
            } => {
                grows += 1;
                if grows > 4 {
                    return Err(Error::OutOfMemory(
                        "rigd grew the rings four times and they still do not hold the submission"
                            .into(),
                    ));
                }
                placer.grow(dev, compute, copy, block)?;
            }
        }
    };
    Ok(v)
}

/// Records that value `v` uses the buffers of `s`. Under the placer's lock, which every
/// submit of the buffers' device takes.
fn mark_uses(s: &Submission, v: u64) {
    for part in &s.parts {
        match &part.what {
            What::Words(_) => {}
            What::Launch(l) => {
                for r in &l.refs {
                    r.buffer.used(v, r.access);
                }
            }
            What::Copy(c) => {
                c.src.used(v, crate::types::Access::Read);
                c.dst.used(v, crate::types::Access::Write);
            }
            What::Fill(f) => f.dst.used(v, crate::types::Access::Write),
        }
    }
}

impl Submission {
    /// The submission as `dev` runs it: made at its first submit there and kept, or made
    /// anew for another device.
    fn compiled(&self, dev: &DeviceShared) -> Result<std::borrow::Cow<'_, Compiled>> {
        if let Some(c) = self.compiled.get() {
            if c.device == dev.id.0 {
                return Ok(std::borrow::Cow::Borrowed(c));
            }
            let target = Target::of(&dev.facts);
            return Ok(std::borrow::Cow::Owned(Compiled::new(
                &target, dev.id.0, self,
            )?));
        }
        let target = Target::of(&dev.facts);
        let c = Compiled::new(&target, dev.id.0, self)?;
        Ok(std::borrow::Cow::Borrowed(self.compiled.get_or_init(|| c)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buffer::tests::buffer;
    use crate::image::tests::kernel;
    use crate::submission::Ref;
    use pm4::Packet as P;
    use rig_proto::{
        Completion, FdIndex, GpuShare, IpVersion, RingLimits, SegmentShare, Share, Waits, WordShare,
    };
    use sdma::Packet as S;

    /// The facts of a simulated gfx1100.
    pub(crate) fn facts() -> Facts {
        Facts {
            arch: "gfx1100".into(),
            budget: 1 << 30,
            queues: vec!["COMPUTE:0".into(), "COPY:0".into()],
            copy_engine: Some(1),
            completion: Completion::Store,
            waits: Waits {
                stores: true,
                hosts: true,
            },
            may_block: false,
            hang_ms: Some(1000),
            maps_host: true,
            host_addresses: false,
            alignment: 4096,
            cache_bytes: None,
            word: WORD,
            bus: None,
            gc: IpVersion {
                major: 11,
                minor: 0,
                stepping: 0,
            },
            sdma: IpVersion {
                major: 6,
                minor: 0,
                stepping: 0,
            },
            mec: 2000,
            compute: QueueKind::Pm4,
            lds_bytes: 65536,
            wave_size: 32,
            waves_per_cu: 32,
            dies: 1,
            wgps: vec![vec![0xff]],
            linear_copy_bytes: 1 << 30,
            clock_hz: 100_000_000,
            most_ring: RingLimits {
                compute: 1 << 20,
                copy: 1 << 20,
            },
        }
    }

    const WORD: u64 = 0x10_0000;
    const COMPUTE: u64 = 0x20_0000;
    const COPY: u64 = 0x30_0000;
    const ARGS: u64 = 0x40_0000;
    const RING: u64 = 4096;
    const SEG: u64 = 8192;

    /// A placer over memfds of its own, as rigd would share them, and those memfds.
    pub(crate) struct Fake {
        pub placer: Placer,
        compute: SharedRegion,
        copy: SharedRegion,
        args: SharedRegion,
        /// Ring positions already checked, in dwords.
        seen: [u64; 2],
    }

    fn queue(kind: QueueKind, fd: u32, gpu: u64, slot: u64) -> QueueShare {
        let at = |offset: u64, bytes: u64| GpuShare {
            host: Share {
                fd: FdIndex(fd),
                offset,
                bytes,
            },
            gpu_address: gpu + offset,
        };
        QueueShare {
            kind,
            generation: 0,
            ring: at(0, RING),
            read: at(RING, 8),
            write: at(RING + 64, 8),
            doorbell: Share {
                fd: FdIndex(4),
                offset: 64 * slot,
                bytes: 8,
            },
        }
    }

    impl Fake {
        pub(crate) fn new() -> Fake {
            let make = |n: u64| SharedRegion::create("rig-client-test", n as usize).unwrap();
            let (compute, copy, args) = (make(RING + 4096), make(RING + 4096), make(SEG));
            let (control, bells) = (make(4096), make(4096));
            let fds = [&compute, &copy, &args, &control, &bells].map(|r| r.dup_fd().unwrap());
            let opened = DeviceOpened {
                device: rig_proto::DeviceId(1),
                facts: facts(),
                compute: queue(QueueKind::Pm4, 0, COMPUTE, 0),
                copy: queue(QueueKind::Sdma, 1, COPY, 1),
                args: SegmentShare {
                    generation: 0,
                    memory: GpuShare {
                        host: Share {
                            fd: FdIndex(2),
                            offset: 0,
                            bytes: SEG,
                        },
                        gpu_address: ARGS,
                    },
                },
                word: WordShare {
                    memory: GpuShare {
                        host: Share {
                            fd: FdIndex(3),
                            offset: 0,
                            bytes: 8,
                        },
                        gpu_address: WORD,
                    },
                    first: 0,
                },
                submitted: Share {
                    fd: FdIndex(3),
                    offset: 64,
                    bytes: 8,
                },
                interrupt: FdIndex(5),
                lost: Share {
                    fd: FdIndex(3),
                    offset: 72,
                    bytes: 4,
                },
            };
            let mut maps = Maps::new(fds.into()).unwrap();
            let placer = Placer::new(&opened, &mut maps, (control.clone(), 64)).unwrap();
            Fake {
                placer,
                compute,
                copy,
                args,
                seen: [0, 0],
            }
        }

        /// Places `s` as the next value, the device having reached `reached`.
        pub(crate) fn place(&mut self, s: &Submission, reached: u64) -> Result<Step> {
            let c = Compiled::new(&self.placer.target, 1, s)?;
            self.placer.try_place(&c, &|| reached)
        }

        /// The words each queue received since the last call (compute, copy).
        pub(crate) fn take(&mut self) -> (Vec<u32>, Vec<u32>) {
            let mut out = [Vec::new(), Vec::new()];
            for (q, (region, ring)) in [
                (&self.compute, &self.placer.compute),
                (&self.copy, &self.placer.copy),
            ]
            .into_iter()
            .enumerate()
            {
                let end = ring.pos.write;
                // The queue publishes its write position in its units.
                let published =
                    region.load_u64(RING as usize + 64, Ordering::Acquire) * ring.unit / 4;
                assert_eq!(published, end, "write position published");
                for p in self.seen[q]..end {
                    let off = 4 * (p % (RING / 4)) as usize;
                    out[q].push(region.load_u32(off, Ordering::Relaxed));
                }
                self.seen[q] = end;
            }
            let [c, k] = out;
            (c, k)
        }

        /// Moves the queues' read positions to their write positions, as a GPU that read all.
        pub(crate) fn drain(&self) {
            for (region, ring) in [
                (&self.compute, &self.placer.compute),
                (&self.copy, &self.placer.copy),
            ] {
                region.store_u64(
                    RING as usize,
                    ring.pos.write * 4 / ring.unit,
                    Ordering::Release,
                );
            }
        }

        fn arg_bytes(&self, gpu: u64, n: usize) -> Vec<u8> {
            let mut b = vec![0; n];
            self.args.read((gpu - ARGS) as usize, &mut b);
            b
        }
    }

    fn pm4(words: &[u32]) -> Vec<P<'_>> {
        pm4::packets(words)
            .map(|r| r.expect("the compute words decode").1)
            .collect()
    }

    fn sdma(words: &[u32]) -> Vec<S> {
        let layout = sdma::Layout::of(rig_amd::gpu::IpVersion::new(6, 0, 0));
        sdma::packets(layout, words)
            .map(|r| r.expect("the copy words decode").1)
            .collect()
    }

    #[test]
    fn an_empty_submission_waits_for_the_last_value_and_releases_on_compute() {
        let mut f = Fake::new();
        assert!(matches!(
            f.place(&Submission::new(), 0).unwrap(),
            Step::Placed(1)
        ));
        let (c, k) = f.take();
        assert!(k.is_empty());
        let p = pm4(&c);
        assert_eq!(p.len(), 2);
        assert!(
            matches!(p[0], P::WaitRegMem64(w) if w.address == WORD && w.reference == 0 && w.function == pm4::Compare::GreaterEqual)
        );
        match p[1] {
            P::ReleaseMem(r) => {
                assert_eq!(
                    (r.address, r.data, r.data_sel),
                    (WORD, 1, pm4::DataSel::Data64)
                );
                assert_eq!(r.int_sel, pm4::IntSel::AfterWrite);
            }
            ref other => panic!("not a release: {other:?}"),
        }
    }

    #[test]
    fn a_launch_sets_its_registers_and_arguments() {
        let mut f = Fake::new();
        let k = kernel(1, 16, 256, 0);
        let x = buffer(1, 0x1_0000, 4096);
        let y = buffer(1, 0x2_0000, 4096);
        let mut params = [0u8; 16];
        params[8..].copy_from_slice(&64u64.to_le_bytes());
        let s = Submission::new().launch(
            &k,
            &params,
            &[Ref::read(&x, 0), Ref::write(&y, 8)],
            [4, 2, 1],
            [64, 1, 1],
            0,
        );
        assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
        let (c, k) = f.take();
        assert!(k.is_empty());
        let p = pm4(&c);
        assert!(matches!(p[0], P::WaitRegMem64(_)));
        assert!(
            matches!(p[1], P::AcquireMem(a) if a.gcr_cntl == Some(pm4::gcr::ALL)),
            "{:?}",
            p[1]
        );
        let d = p
            .iter()
            .find_map(|p| match p {
                P::DispatchDirect(d) => Some(*d),
                _ => None,
            })
            .unwrap();
        assert_eq!(d.dim, [4, 2, 1]);
        let r = rig_amd::regs::compute(rig_amd::gpu::Generation::Gfx11);
        let mut regs = std::collections::HashMap::new();
        for p in &p {
            if let P::SetShReg(s) = p {
                for (i, v) in s.values.iter().enumerate() {
                    regs.insert(s.offset + i as u16, *v);
                }
            }
        }
        assert_eq!(regs[&r.num_thread_x], 64);
        assert_eq!(regs[&(r.pgm_lo)], (0x7000_0000u64 >> 8) as u32);
        // The test kernel's descriptor enables no user SGPRs, so no kernarg pointer: the
        // arguments still land in the segment.
        assert!(matches!(p.last().unwrap(), P::ReleaseMem(r) if r.data == 1));
        let args = f.arg_bytes(ARGS + 64, 16);
        assert_eq!(u64::from_le_bytes(args[..8].try_into().unwrap()), 0x1_0000);
        assert_eq!(
            u64::from_le_bytes(args[8..].try_into().unwrap()),
            0x2_0000 + 64
        );
    }

    #[test]
    fn a_copy_alone_releases_on_copy_with_a_fence_and_a_trap() {
        let mut f = Fake::new();
        let a = buffer(1, 0x1_0000, 4096);
        let b = buffer(1, 0x2_0000, 4096);
        let s = Submission::new().copy(&a, 4, &b, 8, 100);
        assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
        let (c, k) = f.take();
        assert!(c.is_empty(), "nothing on COMPUTE:0");
        let p = sdma(&k);
        assert!(
            matches!(p[0], S::PollRegMem(w) if w.address == WORD && w.value == 0 && w.function == pm4::Compare::Equal)
        );
        assert!(
            matches!(p[1], S::CopyLinear(l) if (l.src, l.dst, l.bytes) == (0x1_0004, 0x2_0008, 100))
        );
        assert!(matches!(p[2], S::Fence(x) if (x.address, x.value) == (WORD, 1)));
        assert!(matches!(p[3], S::Trap(_)));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn values_whose_low_word_is_zero_release_on_compute() {
        let mut f = Fake::new();
        f.placer.last = 0xffff_ffff;
        let a = buffer(1, 0x1_0000, 4096);
        let b = buffer(1, 0x2_0000, 4096);
        let s = Submission::new().copy(&a, 0, &b, 0, 64);
        assert!(matches!(
            f.place(&s, 0xffff_ffff).unwrap(),
            Step::Placed(0x1_0000_0000)
        ));
        let (c, k) = f.take();
        let k = sdma(&k);
        // The copy signals its part word, and COMPUTE:0 waits for it, then releases 64 bits.
        let part = match k[2] {
            S::Fence(x) => {
                assert_eq!(x.value, 0);
                x.address
            }
            ref o => panic!("{o:?}"),
        };
        assert!(!k.iter().any(|p| matches!(p, S::Trap(_))));
        let c = pm4(&c);
        assert!(
            matches!(c[1], P::WaitRegMem(w) if w.address == part && w.reference == 0 && w.function == pm4::Compare::Equal)
        );
        assert!(
            matches!(c[2], P::ReleaseMem(r) if r.data == 0x1_0000_0000 && r.data_sel == pm4::DataSel::Data64)
        );
        // The host set the part word to anything but the value's low word before ringing.
        assert_ne!(f.arg_bytes(part, 4), vec![0, 0, 0, 0]);
    }

    #[test]
    fn gpu_waits_go_on_compute_and_copy_follows_through_a_word() {
        const PEER: u64 = 0x77_0000;
        let mut f = Fake::new();
        let a = buffer(1, 0x1_0000, 4096);
        let s = Submission::new().fill(&a, 0, 64, 7);
        // A submission with waits reserves the word after its parts' words (points need a
        // device, so the slot is set here as `Compiled::new` sets it for one with waits).
        let mut c = Compiled::new(&f.placer.target, 1, &s).unwrap();
        c.wait_slot = Some(1);
        c.block = align(16, ARG_ALIGN);
        const EVIDENCE: u64 = 0x88_0000;
        f.placer.gpu_waits.push(GpuWait {
            word: PEER,
            value: 5,
            evidence: Some((EVIDENCE + 12, PEER + 72)),
        });
        assert!(matches!(
            f.placer.try_place(&c, &|| 0).unwrap(),
            Step::Placed(1)
        ));
        let (cw, kw) = f.take();
        let (cp, kp) = (pm4(&cw), sdma(&kw));
        let slot = ARGS + 8;
        // COMPUTE:0 waits for v-1, then for the peer's word (64 bits, >=), copies the
        // peer's lost flag into the evidence slot, then tells COPY:0; it does not release
        // (the copy-only value releases on COPY:0).
        assert!(matches!(cp[0], P::WaitRegMem64(w) if w.address == WORD && w.reference == 0));
        assert!(
            matches!(cp[1], P::WaitRegMem64(w) if w.address == PEER && w.reference == 5 && w.function == pm4::Compare::GreaterEqual && w.mask == u64::MAX)
        );
        assert!(
            matches!(cp[2], P::CopyData(c) if c.src == PEER + 72 && c.dst == EVIDENCE + 12 && c.src_sel == pm4::CopySrc::Memory && c.dst_sel == pm4::CopyDst::Memory && !c.count_64 && c.wr_confirm)
        );
        assert!(
            matches!(cp[3], P::ReleaseMem(r) if r.address == slot && r.data == 1 && r.data_sel == pm4::DataSel::Low32 && r.int_sel == pm4::IntSel::None)
        );
        assert_eq!(cp.len(), 4);
        // COPY:0 polls v-1, then that word, before its first part; it releases.
        assert!(matches!(kp[0], S::PollRegMem(w) if w.address == WORD));
        assert!(matches!(kp[1], S::PollRegMem(w) if w.address == slot && w.value == 1));
        assert!(matches!(kp[2], S::ConstFill(_)));
        assert!(matches!(kp[kp.len() - 2], S::Fence(x) if x.address == WORD && x.value == 1));
        // The host set the word to anything but the value's low word before ringing.
        assert_ne!(f.arg_bytes(slot, 4), vec![1, 0, 0, 0]);

        // With no GPU-side waits the reserved word is unused and nothing changes.
        f.placer.gpu_waits.clear();
        assert!(matches!(
            f.placer.try_place(&c, &|| 1).unwrap(),
            Step::Placed(2)
        ));
        let (cw, kw) = f.take();
        assert!(cw.is_empty());
        assert!(
            !sdma(&kw)
                .iter()
                .any(|p| matches!(p, S::PollRegMem(w) if w.address != WORD))
        );
    }

    #[test]
    fn after_orders_parts_across_queues_through_part_words() {
        let mut f = Fake::new();
        let k = kernel(1, 16, 256, 0);
        let a = buffer(1, 0x1_0000, 4096);
        let b = buffer(1, 0x2_0000, 4096);
        let s = Submission::new()
            .copy(&a, 0, &b, 0, 256) // 0: COPY:0
            .launch(&k, &[0; 16], &[Ref::write(&b, 0)], [1, 1, 1], [64, 1, 1], 0) // 1
            .after(&[0])
            .fill(&a, 1, 10, 7) // 2: COPY:0, after the launch
            .after(&[1]);
        assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
        let (c, k) = f.take();
        let (c, k) = (pm4(&c), sdma(&k));
        let part = |i: u64| ARGS + 8 * i;
        // COPY:0: wait v-1, copy, fence part 0, wait part 1, fill body and ends, fence part 2.
        assert!(matches!(k[1], S::CopyLinear(_)));
        assert!(matches!(k[2], S::Fence(x) if x.address == part(0) && x.value == 1));
        assert!(matches!(k[3], S::PollRegMem(w) if w.address == part(1) && w.value == 1));
        assert!(
            matches!(k[4], S::ConstFill(x) if x.dst == 0x1_0004 && x.bytes == 4 && x.value == 0x0707_0707)
        );
        assert!(matches!(k[5], S::CopyLinear(l) if l.dst == 0x1_0001 && l.bytes == 3));
        assert!(matches!(k[6], S::CopyLinear(l) if l.dst == 0x1_0008 && l.bytes == 3));
        assert!(matches!(k[7], S::Fence(x) if x.address == part(2)));
        assert_eq!(k.len(), 8);
        // COMPUTE:0: wait v-1, wait part 0, full invalidation, launch, signal part 1, wait
        // part 2 (the last copy), release.
        assert!(matches!(c[1], P::WaitRegMem(w) if w.address == part(0)));
        assert!(matches!(c[2], P::AcquireMem(a) if a.gcr_cntl == Some(pm4::gcr::ALL)));
        let rel = c
            .iter()
            .position(|p| matches!(p, P::ReleaseMem(r) if r.address == part(1)))
            .unwrap();
        assert!(matches!(c[rel - 1], P::DispatchDirect(_)));
        assert!(matches!(c[rel + 1], P::WaitRegMem(w) if w.address == part(2)));
        assert!(matches!(c[rel + 2], P::ReleaseMem(r) if r.address == WORD && r.data == 1));
        // The fill's ends copy from 4 bytes of the segment that hold its byte.
        let S::CopyLinear(end) = k[5] else {
            unreachable!()
        };
        assert_eq!(f.arg_bytes(end.src, 4), vec![7; 4]);
    }

    #[test]
    fn copies_never_wrap_and_the_ring_waits_for_its_reader() {
        let mut f = Fake::new();
        let a = buffer(1, 0x1_0000, 1 << 20);
        let b = buffer(1, 0x20_0000, 1 << 20);
        // 13 linear rows of a box: about 100 words a value, so the 1024-word ring pads.
        let bx = crate::types::CopyBox {
            width: 8,
            rows: 13,
            src_pitch: 4096,
            dst_pitch: 17,
        };
        let s = Submission::new().copy_box(&a, 1, &b, 0, bx);
        let mut placed = 0u64;
        let mut words = 0u64;
        while placed < 40 {
            let before = f.placer.copy.pos.write;
            match f.place(&s, placed).unwrap() {
                Step::Placed(v) => placed = v,
                Step::Later => {
                    // The GPU reads everything and reaches every value.
                    f.drain();
                    continue;
                }
                other => panic!("{other:?}"),
            }
            let (_, k) = f.take();
            words += f.placer.staging[1].len() as u64;
            // The value's words start where the ring's end padding left off, and decode
            // whole: no packet crosses the ring's end.
            let start = f.placer.copy.pos.write - f.placer.staging[1].len() as u64;
            assert!(start % 1024 + f.placer.staging[1].len() as u64 <= 1024);
            let p = sdma(&k[(start - before) as usize..]);
            assert!(
                p.iter()
                    .any(|p| matches!(p, S::Fence(x) if x.address == WORD))
            );
            // Any padding before it is NOPs.
            if start > before {
                let pad = sdma(&k[..(start - before) as usize]);
                assert!(pad.iter().all(|p| matches!(p, S::Nop(_))));
            }
            f.drain();
        }
        assert!(
            f.placer.copy.pos.write > words,
            "the ring was padded at least once"
        );
    }

    #[test]
    fn room_answers_later_grow_and_never() {
        let mut f = Fake::new();
        let a = buffer(1, 0x1_0000, 1 << 24);
        let b = buffer(1, 0x200_0000, 1 << 24);
        // A box of 200 unaligned rows: 200 linear copies, 1400 words, more than half the ring.
        let bx = crate::types::CopyBox {
            width: 3,
            rows: 200,
            src_pitch: 4096,
            dst_pitch: 7,
        };
        let big = Submission::new().copy_box(&a, 0, &b, 0, bx);
        assert!(matches!(f.place(&big, 0).unwrap(), Step::Grow { .. }));
        // Past the largest ring the path makes: never.
        let huge = crate::types::CopyBox {
            width: 3,
            rows: 40_000,
            src_pitch: 4096,
            dst_pitch: 7,
        };
        let s = Submission::new().copy_box(&a, 0, &b, 0, huge);
        assert!(matches!(
            f.place(&s, 0),
            Err(Error::Never(Never::TooLarge { .. }))
        ));
        // Small copies fill the ring until its reader moves.
        let small = Submission::new().copy(&a, 0, &b, 0, 64);
        let mut later = false;
        for _ in 0..200 {
            if let Step::Later = f.place(&small, 0).unwrap() {
                later = true;
                break;
            }
        }
        assert!(later, "a full ring answers later");
        f.drain();
        let reached = f.placer.last();
        assert!(matches!(f.place(&small, reached).unwrap(), Step::Placed(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any submission of copies, fills and `after`s either is refused with a reason or
        /// places words that decode whole on both queues; nothing panics.
        #[test]
        fn any_submission_is_refused_or_placed_whole(
            parts in proptest::collection::vec(
                (0u8..3, 0u64..5000, 0u64..5000, 0u64..3000, 1u64..8, 0usize..12),
                0..12,
            ),
        ) {
            let mut f = Fake::new();
            let a = buffer(1, 0x1_0000, 8192);
            let b = buffer(1, 0x10_0000, 8192);
            let k = kernel(1, 16, 256, 0);
            let mut s = Submission::new();
            for (i, (kind, x, y, n, rows, after)) in parts.into_iter().enumerate() {
                s = match kind {
                    0 => s.copy_box(&a, x, &b, y, crate::types::CopyBox {
                        width: n,
                        rows,
                        src_pitch: n + x % 7,
                        dst_pitch: n + y % 5,
                    }),
                    1 => s.fill(&b, x, n, y as u8),
                    _ => s.launch(&k, &[0; 16], &[Ref::write(&a, 8)], [1, 1, 1], [n as u32 % 300, 1, 1], 0),
                };
                // Mostly earlier parts, sometimes its own index (refused).
                s = s.after(&[after % (i + 1)]);
            }
            match f.place(&s, 0) {
                Err(Error::Never(_)) => {}
                Err(e) => proptest::prop_assert!(false, "{e}"),
                Ok(Step::Placed(_)) => {
                    let (c, k) = f.take();
                    for r in pm4::packets(&c) {
                        proptest::prop_assert!(r.is_ok(), "{r:?}");
                    }
                    let layout = sdma::Layout::of(rig_amd::gpu::IpVersion::new(6, 0, 0));
                    for r in sdma::packets(layout, &k) {
                        proptest::prop_assert!(r.is_ok(), "{r:?}");
                    }
                }
                Ok(Step::Grow { .. } | Step::Later) => {}
            }
        }
    }

    #[test]
    fn sdma_nops_decode() {
        for n in [1u32, 2, 7, 0x4000] {
            let mut w = vec![0u32; n as usize];
            w[0] = sdma_nop_header(n);
            let p = sdma(&w);
            assert_eq!(p.len(), 1);
            assert!(matches!(p[0], S::Nop(x) if x.words == n));
        }
    }
}
