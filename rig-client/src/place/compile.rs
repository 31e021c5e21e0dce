//! Compiling a submission for a device: each part's packets and argument bytes, made once
//! per device at the first submit and kept in the submission, with the kernel-argument
//! addresses left to patch where the value is placed.
//!
//! It owns [`Target`] (what the encoders need of a device), [`LaunchTemplate`] (a kernel's
//! register writes, made at resolve) and [`Compiled`]. Placing the words is
//! [`super::framing`]'s and [`super::room`]'s.

use rig_amd::aql;
use rig_amd::dispatch::Pm4Registers;
use rig_amd::gpu::Gpu;
use rig_amd::hal::Hal;
use rig_amd::pm4;
use rig_amd::sdma;
use rig_proto::{Entry, Facts, QueueKind};

use crate::error::{Error, Never, Result};
use crate::submission::{Part, Submission, What};
use crate::types::Queue;

/// Alignment of each value's block in the argument segment, and of each launch's arguments.
pub(super) const ARG_ALIGN: u64 = 64;

/// Index of `kernarg_address`'s low word in a kernel-dispatch packet (byte 40).
const AQL_KERNARG_AT: usize = 10;

/// What the encoders need of a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// Its GPU, whose LDS granule a launch's shared memory is counted in.
    pub gpu: &'static Gpu,
    /// Its generation's facts: the cache-action bits of acquires and releases.
    pub hal: &'static Hal,
    pub sdma: sdma::Layout,
    pub compute: QueueKind,
    /// Bytes one linear SDMA copy moves.
    pub linear: u64,
}

impl Target {
    /// The target of the device of `facts`; refused for a GPU rig_amd does not know.
    pub fn of(facts: &Facts) -> Result<Target> {
        let gpu = crate::dispatch::gpu(facts)?;
        let v =
            rig_amd::gpu::IpVersion::new(facts.sdma.major, facts.sdma.minor, facts.sdma.stepping);
        let layout = sdma::Layout::of(v);
        Ok(Target {
            gpu,
            hal: gpu.hal(),
            sdma: layout,
            compute: facts.compute,
            linear: facts.linear_copy_bytes.clamp(4, layout.most_bytes()),
        })
    }

    /// The acquire before a part on COMPUTE:0: of every cache where `full` (the first
    /// launch, a part after others), of those above the L2 otherwise.
    pub(super) fn acquire(&self, full: bool) -> pm4::AcquireMem {
        if full {
            self.hal.acquire_all
        } else {
            self.hal.acquire_above_l2
        }
    }

    /// The cache bits of a release that writes the L2 back.
    pub(super) fn write_back(&self) -> u32 {
        self.hal.release_write_back
    }
}

/// Words a [`LaunchTemplate`] holds: the register writes of a dispatch with all 16 user
/// SGPRs take 45.
pub(crate) const TEMPLATE_WORDS: usize = 64;

/// A kernel's dispatch, precomputed at resolve ([`rig_amd::dispatch::pm4_registers`]): the
/// register writes every launch of it makes, with the launch's own values (threads, LDS,
/// kernel-argument address) left to fill.
#[derive(Debug, Clone)]
pub(crate) struct LaunchTemplate {
    /// SET_SH_REG packets and their values: the first `regs.words`.
    pub words: [u32; TEMPLATE_WORDS],
    /// Where the launch's values lie in `words`.
    pub regs: Pm4Registers,
    /// Index in `words` of the kernel-argument address (low word, then high word).
    pub kernarg_at: Option<usize>,
    /// The GPU, whose granules the launch's LDS is counted in.
    pub gpu: &'static Gpu,
    /// Bytes of LDS the kernel takes itself.
    pub group_segment: u32,
    /// COMPUTE_DISPATCH_INITIATOR.
    pub initiator: u32,
}

impl LaunchTemplate {
    pub fn new(target: &Target, entry: &Entry) -> LaunchTemplate {
        crate::dispatch::template(target.gpu, entry)
    }

    /// The register writes of a launch of `threads` per group with `shared` bytes of LDS
    /// beyond the kernel's own.
    fn launch(&self, threads: [u32; 3], shared: u32, out: &mut Vec<u32>) {
        let at = out.len();
        out.extend_from_slice(&self.words[..self.regs.words]);
        self.regs.set_launch(
            &mut out[at..],
            self.gpu,
            threads,
            self.group_segment + shared,
        );
    }
}

/// A fill's unaligned end: a linear copy of `bytes` (1 to 3) bytes to `dst` from 4 bytes
/// of the segment holding the fill's byte.
#[derive(Debug, Clone, Copy)]
pub(super) struct FillEnd {
    pub(super) dst: u64,
    pub(super) bytes: u64,
    /// Offset of its 4 source bytes in the piece's arguments.
    pub(super) arg: u64,
}

/// One part as words for its queue.
#[derive(Debug, Clone)]
pub(super) struct Piece {
    pub(super) queue: Queue,
    pub(super) words: Vec<u32>,
    /// Argument bytes, placed at `args_at` in the value's segment block.
    pub(super) args: Vec<u8>,
    pub(super) args_at: u64,
    /// Where in `words` the address of the arguments goes (low then high word).
    pub(super) kernarg_at: Option<usize>,
    /// Copies from the segment, encoded at submit (their source address is the segment's).
    pub(super) ends: Vec<FillEnd>,
    pub(super) after: Vec<usize>,
    /// True iff a part of the other queue waits for this one (the last copy also signals
    /// where the compute queue releases).
    pub(super) signals: bool,
    pub(super) launch: bool,
}

/// A submission as a device runs it.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub(super) device: u64,
    pub(super) pieces: Vec<Piece>,
    /// Bytes of the value's block in the segment: 8 per part, then arguments, then (on an
    /// AQL queue) room for the value's indirect buffers.
    pub(super) block: u64,
    /// Offset in the block of COMPUTE:0's indirect buffers, on an AQL queue: the PM4 words
    /// of its waits and releases, which its PM4-IB packets call ([`super::framing`]).
    pub(super) ib_at: u64,
    pub(super) has_compute: bool,
    pub(super) has_copy: bool,
    /// Index of the last copy piece.
    pub(super) last_copy: Option<usize>,
    /// Index of the 8-byte word, after the parts' words, through which COMPUTE:0 tells
    /// COPY:0 that the waits for other devices' points passed; `Some` iff the submission
    /// waits for any point.
    pub(super) wait_slot: Option<usize>,
    /// COMPUTE:0's words for the parts, made once where they depend on no value (no part
    /// of it waits for or signals the other queue): framing copies them and patches the
    /// kernel-argument addresses.
    pub(super) body: Option<Body>,
    /// The value's block as placed, `block` bytes: every part's argument bytes at its
    /// offset, zeros elsewhere; placing copies it in one write.
    pub(super) image: Vec<u8>,
}

/// COMPUTE:0's words for a submission's parts, the same for every value but for the
/// kernel-argument addresses.
#[derive(Debug, Clone)]
pub(super) struct Body {
    pub(super) words: Vec<u32>,
    /// (index in `words` of an address's low word, offset of the arguments in the block).
    pub(super) kernargs: Vec<(usize, u64)>,
}

impl Body {
    /// The words of `pieces` on COMPUTE:0, if none waits for or signals the other queue:
    /// an acquire before each launch (of every cache before the first), then its words.
    fn of(t: &Target, pieces: &[Piece]) -> Option<Body> {
        let compute = || pieces.iter().filter(|p| p.queue == Queue::Compute);
        // An AQL queue's launches are packets of their own between indirect buffers.
        if t.compute == QueueKind::Aql || compute().any(|p| !p.after.is_empty() || p.signals) {
            return None;
        }
        let mut words = Vec::new();
        let mut kernargs = Vec::new();
        let mut first = true;
        for p in compute() {
            if p.launch {
                let mut a = [0u32; 8];
                let n = t.acquire(first).encode(&mut a).ok()?;
                words.extend_from_slice(&a[..n]);
                first = false;
            }
            if let Some(k) = p.kernarg_at {
                kernargs.push((words.len() + k, p.args_at));
            }
            words.extend_from_slice(&p.words);
        }
        Some(Body { words, kernargs })
    }
}

pub(super) fn align(x: u64, a: u64) -> u64 {
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
        let block = align(args_end.max(8), ARG_ALIGN);
        let mut image = vec![0u8; block as usize];
        for p in &pieces {
            let at = p.args_at as usize;
            image[at..at + p.args.len()].copy_from_slice(&p.args);
        }
        let body = Body::of(t, &pieces);
        let mut c = Compiled {
            device,
            pieces,
            block,
            ib_at: block,
            has_compute,
            has_copy,
            last_copy,
            wait_slot,
            body,
            image,
        };
        if t.compute == QueueKind::Aql {
            c.block += align(
                4 * super::framing::most_ib_words(t, &c, s.waits.len())?,
                ARG_ALIGN,
            );
        }
        Ok(c)
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
            p.args = k.kernargs.launch(l)?;
            let a = u64::from(k.entry.kernarg_align.max(16)).max(ARG_ALIGN);
            p.args_at = align(*args_end, a);
            *args_end = p.args_at + p.args.len() as u64;
            if t.compute == QueueKind::Aql {
                // A kernel-dispatch packet; framing sets its header's fences.
                let mut grid_size = [0u32; 3];
                for (axis, size) in grid_size.iter_mut().enumerate() {
                    *size = l.groups[axis]
                        .checked_mul(l.threads[axis])
                        .ok_or(Never::GridTooLarge { part: i, axis })?;
                }
                let packet = aql::KernelDispatch {
                    header: aql::Header::default(),
                    dimensions: 3,
                    workgroup_size: l.threads.map(|n| n as u16),
                    grid_size,
                    private_segment_size: k.entry.private_segment,
                    group_segment_size: tpl.group_segment + l.shared,
                    kernel_object: k.entry.code,
                    kernarg_address: 0,
                    completion_signal: 0,
                };
                p.words.extend_from_slice(&packet.encode().map_err(encode)?);
                p.kernarg_at = Some(AQL_KERNARG_AT);
                return Ok(p);
            }
            tpl.launch(l.threads, l.shared, &mut p.words);
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
