//! Launches on a PM4 queue: the register writes of a kernel's dispatch, made once when the
//! kernel is resolved, and the kernel-argument bytes of a launch, made once when the launch
//! is added to a submission.
//!
//! The dispatch is [`rig_amd::dispatch`]'s, for the device's generation
//! ([`rig_amd::hal::Hal`]): user SGPRs in the order the descriptor enables them, the
//! COMPUTE_* register writes, the scratch granule and the initiator. This module gives it
//! the launch's values (the kernel's scratch, its private segment size) and fills the
//! hidden arguments, which rigd describes per argument ([`rig_proto::HiddenArg`], with
//! constants of its own) rather than as [`rig_amd::kernarg::KernargPlan`]. The framing of a
//! launch (cache invalidation, release) is [`crate::place`]'s.

use rig_amd::code_object::KernelDescriptor;
use rig_amd::dispatch::{self as builder, Pm4Scratch, UserSgprValues};
use rig_amd::gpu::{Gpu, IpVersion};
use rig_amd::regs::USER_DATA_COUNT;
use rig_proto::{Axis, Entry, Facts, HiddenValue};

use crate::error::{Error, Result};
use crate::place::{LaunchTemplate, TEMPLATE_WORDS};
use crate::submission::Launch;

/// The GPU of `facts`, by its GC version: the table entry whose generation's facts
/// ([`Gpu::hal`]) the client encodes for.
pub(crate) fn gpu(facts: &Facts) -> Result<&'static Gpu> {
    let gc = IpVersion::new(facts.gc.major, facts.gc.minor, facts.gc.stepping);
    Gpu::by_gc(gc).ok_or_else(|| {
        Error::Invalid(format!(
            "rig-client encodes for the GPUs of rig_amd's table; {} (GC {gc}) is not one",
            facts.arch
        ))
    })
}

/// The dispatch of `entry` on `gpu`, with the launch's values to fill.
pub(crate) fn template(gpu: &'static Gpu, entry: &Entry) -> LaunchTemplate {
    let hal = gpu.hal();
    let d = KernelDescriptor::from_bytes(&entry.descriptor.0);
    let values = UserSgprValues {
        flat_scratch_init: entry.scratch.map_or(0, |s| s.gpu_address),
        private_segment_size: entry.private_segment,
        ..UserSgprValues::default()
    };
    let mut user = [0u32; USER_DATA_COUNT as usize];
    let (n, sgprs) = builder::pm4_user_data(&d, &values, &mut user);
    let scratch = entry.scratch.map(|s| Pm4Scratch {
        address: s.gpu_address,
        wave_bytes: u64::from(s.wave_bytes),
        waves: s.waves,
    });
    let mut words = [0u32; TEMPLATE_WORDS];
    // PANIC: the register writes of a dispatch with at most 16 user SGPRs take 45 words,
    // and the offsets are the generation's own, inside the SH window.
    let regs = builder::pm4_registers(hal, &d, entry.code, scratch, &user[..n], &mut words)
        .expect("a dispatch's register writes fit the template");
    LaunchTemplate {
        kernarg_at: regs
            .user_data_at
            .zip(sgprs.kernarg_segment_ptr)
            .map(|(at, k)| at + usize::from(k)),
        words,
        regs,
        gpu,
        group_segment: entry.group_segment,
        initiator: hal.initiator(entry.wave64),
    }
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

#[cfg(test)]
mod tests {
    use rig_amd::gpu::Generation;
    use rig_amd::pm4::{Packet, decode};
    use rig_amd::regs::tmpring;
    use rig_proto::{Descriptor, IpVersion, Scratch};

    use super::*;

    /// The SH registers the template of `entry` on the GPU of `facts` sets, by offset.
    fn registers(facts: &Facts, entry: &Entry) -> ([u32; 0x400], LaunchTemplate) {
        let target = crate::place::Target::of(facts).unwrap();
        let t = LaunchTemplate::new(&target, entry);
        let mut sh = [0u32; 0x400];
        let mut at = 0;
        while at < t.regs.words {
            let (Packet::SetShReg(p), len) = decode(&t.words[at..t.regs.words]).unwrap() else {
                panic!("not a SET_SH_REG at {at}");
            };
            for (i, v) in p.values.iter().enumerate() {
                sh[usize::from(p.offset) + i] = *v;
            }
            at += len;
        }
        (sh, t)
    }

    /// A kernel of 48 private bytes per lane in waves of 32, and the scratch rigd gives it
    /// on `gpu`: 1536 bytes per wave (48 x 32, whole 256-byte granules from GFX11).
    fn scratch_entry(gpu: &Gpu) -> Entry {
        let wave_bytes = gpu.hal().wave_scratch(48, false);
        assert_eq!(wave_bytes, 1536);
        Entry {
            code: 0x7000_0000,
            params: 16,
            max_threads: 1024,
            kernarg_size: 272,
            kernarg_align: 8,
            group_segment: 0,
            private_segment: 48,
            wave64: false,
            descriptor: Descriptor([0; 64]),
            hidden: Vec::new(),
            scratch: Some(Scratch {
                gpu_address: 0x8000_0000,
                bytes: wave_bytes * 2048,
                wave_bytes: wave_bytes as u32,
                waves: 2048,
            }),
        }
    }

    /// A gfx1201's dispatch states its scratch per wave in the 256-byte granules its
    /// COMPUTE_TMPRING_SIZE.WAVESIZE counts (Mesa's `ac_gpu_info.c`, ROCr), as the simulator
    /// and the GPU read it: 6 for 1536 bytes, not 24 (64-byte granules, a quarter of what
    /// the GPU would take per wave).
    #[test]
    fn gfx1201_scratch_is_stated_in_256_byte_granules() {
        let mut facts = crate::place::tests::facts();
        facts.arch = "gfx1201".into();
        facts.gc = IpVersion {
            major: 12,
            minor: 0,
            stepping: 1,
        };
        let gpu = Gpu::by_name("gfx1201").unwrap();
        let entry = scratch_entry(gpu);
        let (sh, _) = registers(&facts, &entry);
        let c = rig_amd::regs::compute(Generation::Gfx12);
        let t = sh[usize::from(c.tmpring_size)];
        assert_eq!(tmpring::wavesize(Generation::Gfx12).get(t), 6);
        assert_eq!(tmpring::WAVES.get(t), 2048);
        // What the simulator reads back (rig-sim's dispatch decodes with the same HAL).
        assert_eq!(gpu.hal().tmpring_wave_bytes(t), 1536);
        assert_eq!(sh[usize::from(c.dispatch_scratch_base_lo)], 0x80_0000);
    }

    #[test]
    fn a_gpu_outside_the_table_is_refused() {
        let mut facts = crate::place::tests::facts();
        facts.gc = IpVersion {
            major: 10,
            minor: 3,
            stepping: 0,
        };
        assert!(matches!(
            crate::place::Target::of(&facts),
            Err(Error::Invalid(m)) if m.contains("GC 10.3.0")
        ));
    }
}
