//! Compiling a submission for a device: each part's packets and argument bytes, made once
//! per device at the first submit and kept in the submission, with the kernel-argument
//! addresses left to patch where the value is placed.
//!
//! It owns [`Target`] (what the encoders need of a device), [`LaunchTemplate`] (a kernel's
//! register writes, made at resolve) and [`Compiled`]. Placing the words is
//! [`super::framing`]'s and [`super::room`]'s.

use rig_amd::gpu::Generation;
use rig_amd::pm4;
use rig_amd::sdma;
use rig_proto::{Entry, Facts, QueueKind};

use crate::error::{Error, Never, Result};
use crate::submission::{Part, Submission, What};
use crate::types::Queue;

/// Alignment of each value's block in the argument segment, and of each launch's arguments.
pub(super) const ARG_ALIGN: u64 = 64;

/// What the encoders need of a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// Its GFX generation, which picks the cache-action bits ([`pm4::AcquireMem::all`],
    /// [`pm4::ReleaseMem::write_back`]).
    pub generation: Generation,
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
            generation: crate::dispatch::generation(facts),
            sdma: layout,
            compute: facts.compute,
            linear: facts.linear_copy_bytes.clamp(4, layout.most_bytes()),
        }
    }

    /// The acquire before a part on COMPUTE:0: of every cache where `full` (the first
    /// launch, a part after others), of those above the L2 otherwise.
    pub(super) fn acquire(&self, full: bool) -> pm4::AcquireMem {
        if full {
            pm4::AcquireMem::all(self.generation)
        } else {
            pm4::AcquireMem::above_l2(self.generation)
        }
    }

    /// The cache bits of a release that writes the L2 back.
    pub(super) fn write_back(&self) -> u32 {
        pm4::ReleaseMem::write_back(self.generation)
    }
}

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
    /// Bytes of the value's block in the segment: 8 per part, then arguments.
    pub(super) block: u64,
    pub(super) has_compute: bool,
    pub(super) has_copy: bool,
    /// Index of the last copy piece.
    pub(super) last_copy: Option<usize>,
    /// Index of the 8-byte word, after the parts' words, through which COMPUTE:0 tells
    /// COPY:0 that the waits for other devices' points passed; `Some` iff the submission
    /// waits for any point.
    pub(super) wait_slot: Option<usize>,
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
