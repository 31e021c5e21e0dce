//! Launches on a PM4 queue: the register writes of a kernel's dispatch, made once when the
//! kernel is resolved, and the kernel-argument bytes of a launch, made once when the launch
//! is added to a submission.
//!
//! This module owns which COMPUTE_* registers a dispatch sets and to what (code address,
//! resource words from the kernel descriptor, scratch, user SGPRs in the order the
//! descriptor enables them, thread counts, LDS size) and how hidden arguments are filled.
//! Register numbers and fields are [`rig_amd::regs`]'; the framing of a launch (cache
//! invalidation, release) is [`crate::place`]'s.

use rig_amd::code_object::{self as kd, KernelDescriptor};
use rig_amd::gpu::Generation;
use rig_amd::pm4;
use rig_amd::regs::{self, initiator, rsrc2, tmpring};
use rig_proto::{Axis, Entry, Facts, HiddenValue};

use crate::place::LaunchTemplate;
use crate::submission::Launch;

/// Bytes of one LDS granule of COMPUTE_PGM_RSRC2.LDS_SIZE (128 dwords).
const LDS_GRANULE: u32 = 512;

pub(crate) fn generation(facts: &Facts) -> Generation {
    match facts.gc.major {
        0..=9 => Generation::Gfx9,
        10 | 11 => Generation::Gfx11,
        _ => Generation::Gfx12,
    }
}

/// Bytes of one granule of COMPUTE_TMPRING_SIZE.WAVESIZE.
fn scratch_granule(family: Generation) -> u64 {
    match family {
        Generation::Gfx9 => 1024,
        Generation::Gfx11 => 256,
        Generation::Gfx12 => 64,
    }
}

/// Appends a SET_SH_REG of `values` from SH offset `offset`; returns the index of the first
/// value in `out`.
fn set(out: &mut Vec<u32>, offset: u16, values: &[u32]) -> usize {
    let at = out.len();
    out.resize(at + values.len() + 2, 0);
    // PANIC: the offsets are this module's from rig_amd::regs, inside the SH window, and
    // the buffer was sized for the packet.
    pm4::SetShReg { offset, values }
        .encode(&mut out[at..])
        .expect("register writes of a dispatch fit their packet");
    at + 2
}

/// The dispatch of `entry` on the device of `facts`, with the launch's values to fill.
pub(crate) fn template(facts: &Facts, entry: &Entry) -> LaunchTemplate {
    let family = generation(facts);
    let r = regs::compute(family);
    let d = KernelDescriptor::from_bytes(&entry.descriptor.0);
    let code = entry
        .code
        .wrapping_add_signed(d.kernel_code_entry_byte_offset);
    let (scratch_lo, scratch_hi, tmpring) = match entry.scratch {
        Some(s) => {
            let base = s.gpu_address >> 8;
            let size = tmpring::WAVES.put(s.waves.min(0xfff))
                | tmpring::wavesize(family)
                    .put(u64::from(s.wave_bytes).div_ceil(scratch_granule(family)) as u32);
            (base as u32, (base >> 32) as u32, size)
        }
        None => (0, 0, 0),
    };
    // User SGPRs, in the order the descriptor enables them.
    let mut user = Vec::with_capacity(16);
    let mut kernarg = None;
    if d.has(kd::ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER) {
        user.extend([0; 4]);
    }
    if d.has(kd::ENABLE_SGPR_DISPATCH_PTR) {
        user.extend([0; 2]);
    }
    if d.has(kd::ENABLE_SGPR_QUEUE_PTR) {
        user.extend([0; 2]);
    }
    if d.has(kd::ENABLE_SGPR_KERNARG_SEGMENT_PTR) {
        kernarg = Some(user.len());
        user.extend([0; 2]);
    }
    if d.has(kd::ENABLE_SGPR_DISPATCH_ID) {
        user.extend([0; 2]);
    }
    if d.has(kd::ENABLE_SGPR_FLAT_SCRATCH_INIT) {
        let s = entry.scratch.map_or(0, |s| s.gpu_address);
        user.extend([s as u32, (s >> 32) as u32]);
    }
    if d.has(kd::ENABLE_SGPR_PRIVATE_SEGMENT_SIZE) {
        user.push(entry.private_segment);
    }
    let count = (rsrc2::USER_SGPR.get(d.compute_pgm_rsrc2) as usize).max(user.len());
    user.resize(count.min(regs::USER_DATA_COUNT as usize), 0);

    let mut words = Vec::with_capacity(64);
    let threads_at = set(&mut words, r.start_x, &[0, 0, 0, 1, 1, 1]) + 3;
    let pgm = set(
        &mut words,
        r.pgm_lo,
        &[(code >> 8) as u32, (code >> 40) as u32],
    );
    let _ = pgm;
    let rsrc = set(
        &mut words,
        r.dispatch_scratch_base_lo,
        &[
            scratch_lo,
            scratch_hi,
            d.compute_pgm_rsrc1,
            d.compute_pgm_rsrc2,
        ],
    );
    set(&mut words, r.resource_limits, &[0]);
    set(&mut words, r.tmpring_size, &[tmpring]);
    set(&mut words, r.pgm_rsrc3, &[d.compute_pgm_rsrc3]);
    let kernarg_at = if user.is_empty() {
        None
    } else {
        let at = set(&mut words, r.user_data_0, &user);
        kernarg.map(|k| at + k)
    };
    let mut init = initiator::COMPUTE_SHADER_EN | initiator::FORCE_START_AT_000;
    if family != Generation::Gfx9 && !entry.wave64 {
        init |= initiator::CS_W32_EN;
    }
    LaunchTemplate {
        words,
        kernarg_at,
        threads_at,
        rsrc2_at: rsrc + 3,
        group_segment: entry.group_segment,
        initiator: init,
    }
}

/// COMPUTE_PGM_RSRC2 for a launch with `shared` bytes of LDS beyond the kernel's own.
pub(crate) fn rsrc2_with_lds(rsrc2_word: u32, group_segment: u32, shared: u32) -> u32 {
    let granules = (group_segment + shared).div_ceil(LDS_GRANULE);
    rsrc2::LDS_SIZE.set(rsrc2_word, granules)
}

/// The kernel-argument bytes of launch `l`: its parameters with each ref's address added,
/// then the hidden arguments the kernel reads.
pub(crate) fn kernargs(entry: &Entry, l: &Launch) -> Vec<u8> {
    let len = (entry.kernarg_size as usize)
        .max(l.params.len())
        .div_ceil(8)
        * 8;
    let mut a = vec![0u8; len.max(8)];
    a[..l.params.len()].copy_from_slice(&l.params);
    for r in &l.refs {
        // The submission checked that the 8 bytes lie inside the parameters.
        if let Some(b) = a.get_mut(r.at..r.at + 8) {
            let mut v = [0u8; 8];
            v.copy_from_slice(b);
            let v = u64::from_le_bytes(v).wrapping_add(r.buffer.address());
            b.copy_from_slice(&v.to_le_bytes());
        }
    }
    let axis = |x: Axis| match x {
        Axis::X => 0,
        Axis::Y => 1,
        Axis::Z => 2,
    };
    let dims = if l.groups[2] > 1 || l.threads[2] > 1 {
        3
    } else if l.groups[1] > 1 || l.threads[1] > 1 {
        2
    } else {
        1
    };
    for h in &entry.hidden {
        let v: u64 = match h.value {
            HiddenValue::BlockCount(x) => u64::from(l.groups[axis(x)]),
            HiddenValue::GroupSize(x) => u64::from(l.threads[axis(x)]),
            HiddenValue::Remainder(_) | HiddenValue::GlobalOffset(_) => 0,
            HiddenValue::GridDims => dims,
            HiddenValue::DynamicLdsSize => u64::from(l.shared),
            HiddenValue::Constant(c) => c,
        };
        let (o, n) = (h.offset as usize, (h.size as usize).min(8));
        if let Some(b) = a.get_mut(o..o + n) {
            b.copy_from_slice(&v.to_le_bytes()[..n]);
        }
    }
    a
}
