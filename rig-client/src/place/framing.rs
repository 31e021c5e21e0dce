//! Framing a value: the words each queue runs for value v of a compiled submission, a
//! pure function of the submission, the value, its block in the segment and the device's
//! fixed addresses.
//!
//! Each queue's work for v first waits for v - 1; a part ordered `after`
//! parts of the other queue waits for their 8-byte words in the value's block
//! (WAIT_REG_MEM on PM4, POLL_REGMEM on SDMA), which those parts write when done
//! (RELEASE_MEM, FENCE); the queue that releases v writes the timeline word and raises the
//! interrupt. COPY:0 releases only values whose low 32 bits are not 0, since its FENCE
//! writes 32 bits.
//!
//! On an AQL queue COMPUTE:0's PM4 words (waits, part words, releases, clock stamps) go to
//! indirect buffers in the value's block instead, each run of them called by a PM4-IB
//! packet, and its launches are kernel-dispatch packets between them, whose headers take
//! the acquires ([`Compute`]).

use rig_amd::aql;
use rig_amd::pm4;
use rig_amd::sdma;
use rig_proto::QueueKind;

use super::compile::{Compiled, Target, encode};
use super::room::GpuWait;
use crate::error::Result;
use crate::types::Queue;

/// Where COMPUTE:0's words go: PM4 words into its ring; or on an AQL queue, packets into its
/// ring and PM4 words into indirect buffers (`ibs`: the words and their GPU address), each
/// run called by a PM4-IB packet placed before the next packet.
struct Compute<'a> {
    ring: &'a mut Vec<u32>,
    ibs: Option<(&'a mut Vec<u32>, u64)>,
    /// Start of the run of IB words no packet calls yet.
    run: usize,
}

impl Compute<'_> {
    /// Where PM4 words go.
    fn pm4(&mut self) -> &mut Vec<u32> {
        match &mut self.ibs {
            Some((ib, _)) => ib,
            None => self.ring,
        }
    }

    /// Calls the IB words placed since the last call, if any, with a PM4-IB packet.
    fn call(&mut self) -> Result<()> {
        let Some((ib, gpu)) = &mut self.ibs else {
            return Ok(());
        };
        if ib.len() > self.run {
            let packet = aql::Pm4Ib {
                header: aql::Header {
                    barrier: true,
                    ..aql::Header::default()
                },
                address: *gpu + 4 * self.run as u64,
                size_dw: (ib.len() - self.run) as u32,
                completion_signal: 0,
            };
            self.ring
                .extend_from_slice(&packet.encode().map_err(encode)?);
            self.run = ib.len();
        }
        Ok(())
    }
}

/// The most indirect-buffer words a value of `c` takes on an AQL queue, with up to `waits`
/// waits for other devices' points: its framing with a stamp, a wait slot and every wait's
/// evidence, for a value whose low 32 bits are 0 (which COMPUTE:0 releases).
pub(super) fn most_ib_words(t: &Target, c: &Compiled, waits: usize) -> Result<u64> {
    let gpu_waits = vec![
        GpuWait {
            word: 0,
            value: 0,
            evidence: Some((0, 0)),
        };
        waits
    ];
    let f = Frame {
        target: *t,
        word: 0,
        context: 0,
        stamp: Some(0),
        gpu_waits: &gpu_waits,
    };
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    frame(&f, c, 1 << 32, 0, &mut out)?;
    Ok(out[2].len() as u64)
}

/// What framing needs besides the submission and the value: the device's fixed addresses
/// and the value's own waits and stamps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame<'a> {
    pub target: Target,
    /// The timeline word's GPU address.
    pub word: u64,
    /// The interrupt context releases carry.
    pub context: u32,
    /// GPU address of the value's clock stamps, if a profile takes them.
    pub stamp: Option<u64>,
    /// The waits COMPUTE:0 makes for other devices' points before the value's work.
    pub gpu_waits: &'a [GpuWait],
}

/// Appends one packet of at most `N` words that `f` encodes.
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

/// Writes value `v`'s words for both queues into `out` (compute, copy, and COMPUTE:0's
/// indirect buffers on an AQL queue, placed at `block + c.ib_at`; each cleared first), for a
/// block of the segment at GPU address `block`.
pub(super) fn frame(
    f: &Frame<'_>,
    c: &Compiled,
    v: u64,
    block: u64,
    out: &mut [Vec<u32>; 3],
) -> Result<()> {
    let t = f.target;
    let low = v as u32;
    let word = f.word;
    let part_word = |i: usize| block + 8 * i as u64;
    let release_on_copy = !c.has_compute && c.has_copy && low != 0;
    let stamp = f.stamp;
    let gpu_waits = f.gpu_waits;
    // COPY:0 polls no other device's word (its POLL_REGMEM compares 32 bits): COMPUTE:0
    // waits, then signals this word, which COPY:0 polls before its first part.
    let waited = c.wait_slot.filter(|_| !gpu_waits.is_empty() && c.has_copy);
    let [cs, ks, ib] = out;
    cs.clear();
    ks.clear();
    ib.clear();
    let aql = t.compute == QueueKind::Aql;
    let mut cs = Compute {
        ring: cs,
        ibs: aql.then_some((ib, block + c.ib_at)),
        run: 0,
    };
    if c.has_compute || !release_on_copy || !gpu_waits.is_empty() {
        push::<9>(cs.pm4(), |o| {
            pm4::WaitRegMem64::at_least(word, v - 1).encode(o)
        })?;
        for w in gpu_waits {
            push::<9>(cs.pm4(), |o| {
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
                push::<6>(cs.pm4(), |o| copy.encode(o))?;
            }
        }
        // The start stamp comes before COPY:0 is let go, so that a release on COPY:0
        // follows it.
        if let Some(st) = stamp {
            push::<6>(cs.pm4(), |o| pm4::CopyData::clock_to_memory(st).encode(o))?;
        }
        if let Some(n) = waited {
            let r = pm4::ReleaseMem {
                int_sel: pm4::IntSel::None,
                data_sel: pm4::DataSel::Low32,
                ..pm4::ReleaseMem::timeline(t.write_back(), part_word(n), u64::from(low))
            };
            push::<8>(cs.pm4(), |o| r.encode(o))?;
        }
        if let Some(b) = &c.body {
            // The parts' words as compiled, with this block's argument addresses.
            let cs = cs.pm4();
            let at = cs.len();
            cs.extend_from_slice(&b.words);
            for &(k, args_at) in &b.kernargs {
                let a = block + args_at;
                cs[at + k] = a as u32;
                cs[at + k + 1] = (a >> 32) as u32;
            }
        }
        let mut first = true;
        for (i, p) in c.pieces.iter().enumerate() {
            if p.queue != Queue::Compute || c.body.is_some() {
                continue;
            }
            for &a in &p.after {
                push::<7>(cs.pm4(), |o| wait_word(part_word(a), low).encode(o))?;
            }
            let full = first || !p.after.is_empty();
            if p.launch || !p.after.is_empty() {
                first = false;
            }
            // On an AQL queue, launches and words parts are packets of their own, after the
            // IB words before them.
            let packets = aql && (p.launch || !p.words.is_empty());
            let words = if packets {
                cs.call()?;
                &mut *cs.ring
            } else {
                if p.launch || !p.after.is_empty() {
                    push::<8>(cs.pm4(), |o| t.acquire(full).encode(o))?;
                }
                cs.pm4()
            };
            let at = words.len();
            words.extend_from_slice(&p.words);
            if let Some(k) = p.kernarg_at {
                let a = block + p.args_at;
                words[at + k] = a as u32;
                words[at + k + 1] = (a >> 32) as u32;
            }
            if aql && p.launch {
                // The acquire of PM4's ACQUIRE_MEM is the dispatch's own fence: of the
                // system's memory where `full`, of the agent's otherwise.
                let header = aql::Header {
                    barrier: true,
                    acquire: if full {
                        aql::Scope::System
                    } else {
                        aql::Scope::Agent
                    },
                    release: aql::Scope::Agent,
                };
                words[at] =
                    (words[at] & 0xffff_0000) | u32::from(header.bits(aql::TYPE_KERNEL_DISPATCH));
            }
            if p.signals {
                let r = pm4::ReleaseMem {
                    int_sel: pm4::IntSel::None,
                    data_sel: pm4::DataSel::Low32,
                    ..pm4::ReleaseMem::timeline(t.write_back(), part_word(i), u64::from(low))
                };
                push::<8>(cs.pm4(), |o| r.encode(o))?;
            }
        }
        if !release_on_copy {
            if let Some(l) = c.last_copy {
                push::<7>(cs.pm4(), |o| wait_word(part_word(l), low).encode(o))?;
            }
            if let Some(st) = stamp {
                let flush = pm4::EventWrite {
                    event_type: pm4::EVENT_CS_PARTIAL_FLUSH,
                    event_index: pm4::EVENT_INDEX_PARTIAL_FLUSH,
                    address: None,
                };
                push::<2>(cs.pm4(), |o| flush.encode(o))?;
                push::<6>(cs.pm4(), |o| {
                    pm4::CopyData::clock_to_memory(st + 16).encode(o)
                })?;
            }
            let r = pm4::ReleaseMem {
                int_ctxid: f.context,
                ..pm4::ReleaseMem::timeline(t.write_back(), word, v)
            };
            push::<8>(cs.pm4(), |o| r.encode(o))?;
        }
        cs.call()?;
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
                push::<4>(ks, |o| {
                    sdma::Fence::new(t.sdma, part_word(i), low).encode(o)
                })?;
            }
        }
        if release_on_copy {
            if let Some(st) = stamp {
                // The fence waits for the copies before the stamp is taken.
                push::<4>(ks, |o| sdma::Fence::new(t.sdma, st + 16, 0).encode(o))?;
                push::<3>(ks, |o| sdma::Timestamp::global(st + 16).encode(o))?;
            }
            push::<4>(ks, |o| sdma::Fence::new(t.sdma, word, low).encode(o))?;
            push::<2>(ks, |o| sdma::Trap { context: f.context }.encode(o))?;
        }
    }
    Ok(())
}
