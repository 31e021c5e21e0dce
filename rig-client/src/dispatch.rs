//! Launches on a PM4 queue: the register writes of a kernel's dispatch, made once when the
//! kernel is resolved, and the kernel-argument bytes of a launch, made once when the launch
//! is added to a submission.
//!
//! The dispatch is [`rig_amd::dispatch`]'s, for the device's generation
//! ([`rig_amd::hal::Hal`]): user SGPRs in the order the descriptor enables them, the
//! COMPUTE_* register writes, the scratch granule and the initiator. The argument bytes are
//! [`rig_amd::kernarg::layout`]'s, from the plan rigd sent ([`Entry::plan`], rig-amd's own
//! [`KernargPlan`]). This module
//! gives both the launch's values; the framing of a launch (cache invalidation, release) is
//! [`crate::place`]'s.

use rig_amd::code_object::{Hidden, KernelDescriptor};
use rig_amd::dispatch::{self as builder, Pm4Scratch, UserSgprValues};
use rig_amd::gpu::{Gpu, IpVersion};
use rig_amd::kernarg::{self, Grid, KernargPlan};
use rig_amd::regs::USER_DATA_COUNT;
use rig_proto::{Entry, Facts};

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

/// What the kernel-argument bytes of a kernel's launches need, made at resolve: rig_amd's
/// plan of the segment as rigd sent it ([`Entry::plan`]; [`kernarg::layout`] writes the
/// parameters, refs and the hidden arguments a launch decides), and the hidden arguments
/// that are 0 (remainders and global offsets, written even where they lie among a longer
/// launch's parameters).
#[derive(Debug, Clone)]
pub(crate) struct Kernargs {
    plan: KernargPlan,
    /// (offset, bytes) of each hidden argument the plan does not write, which reads 0.
    zeros: Vec<(u32, u32)>,
}

impl Kernargs {
    /// The plan of `entry`'s arguments; refused where rigd described arguments the client
    /// cannot fill within the segment.
    pub(crate) fn of(entry: &Entry) -> Result<Kernargs> {
        entry.check().map_err(|e| {
            Error::Protocol(format!(
                "rigd described kernel arguments the client cannot fill: {e}"
            ))
        })?;
        let plan = entry.plan();
        let zeros = plan
            .hidden
            .slots()
            .filter(|(h, _)| matches!(h, Hidden::Remainder(_) | Hidden::GlobalOffset(_)))
            .filter_map(|(h, offset)| Some((offset, h.size()?)))
            .collect();
        Ok(Kernargs { plan, zeros })
    }

    /// The kernel-argument bytes of launch `l` (its parameters with each ref's address
    /// added, then the hidden arguments), in whole 8-byte words.
    pub(crate) fn launch(&self, l: &Launch) -> Result<Vec<u8>> {
        let fail = |e: kernarg::KernargError| Error::Invalid(format!("a launch's arguments: {e}"));
        let explicit = u32::try_from(l.params.len())
            .map_err(|_| Error::Invalid("a launch's parameters exceed 4 GiB".into()))?;
        // All of the launch's parameters, as many as it passes (at least the kernel's).
        let plan = KernargPlan {
            explicit_size: explicit.max(self.plan.explicit_size),
            ..self.plan
        };
        let mut a = vec![0u8; (plan.bytes().div_ceil(8) * 8).max(8)];
        let refs: Vec<kernarg::Ref> = l
            .refs
            .iter()
            .map(|r| kernarg::Ref {
                // The submission checked that the 8 bytes lie inside the parameters.
                offset: r.at as u32,
                address: r.buffer.address(),
            })
            .collect();
        let grid = Grid {
            groups: l.groups,
            group_size: l.threads,
            dynamic_lds: l.shared,
        };
        kernarg::layout(&plan, &l.params, &refs, &grid, &mut a).map_err(fail)?;
        for &(offset, size) in &self.zeros {
            let (o, n) = (offset as usize, size as usize);
            if let Some(b) = a.get_mut(o..o + n) {
                b.fill(0);
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use rig_amd::gpu::Generation;
    use rig_amd::kernarg::HiddenLayout;
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
            hidden: HiddenLayout::default(),
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
    fn kernel_arguments_take_params_refs_and_hidden_values() {
        let mut entry = scratch_entry(Gpu::by_name("gfx1100").unwrap());
        entry.params = 8;
        entry.kernarg_size = 60;
        entry.hidden = HiddenLayout {
            block_count: [None, Some(16), None],
            group_size: [Some(20), None, None],
            grid_dims: Some(22),
            dynamic_lds_size: Some(24),
            global_offset: [Some(40), None, None],
            ..HiddenLayout::default()
        };
        let k = Kernargs::of(&entry).unwrap();
        let b = crate::buffer::tests::buffer(1, 0x5_0000, 4096);
        // 48 bytes of parameters, longer than the kernel's 8: they all pass, hidden
        // arguments over them, the global offset zeroed.
        let mut params = vec![0xaau8; 48];
        params[..8].copy_from_slice(&8u64.to_le_bytes());
        let l = Launch::new(
            &crate::image::tests::kernel(1, 8, 256, 0),
            [3, 5, 1],
            [64, 1, 1],
        )
        .params(&params)
        .refs(&[crate::submission::Ref::read(&b, 0)])
        .shared(96);
        let a = k.launch(&l).unwrap();
        assert_eq!(a.len(), 64);
        let u = |o: usize, n: usize| {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&a[o..o + n]);
            u64::from_le_bytes(w)
        };
        assert_eq!(u(0, 8), 0x5_0008);
        assert_eq!(
            [u(8, 8), u(16, 4), u(20, 2), u(22, 2), u(24, 4)],
            [0xaaaa_aaaa_aaaa_aaaa, 5, 64, 2, 96]
        );
        assert_eq!(
            [u(32, 8), u(40, 8), u(48, 8), u(56, 8)],
            [0xaaaa_aaaa_aaaa_aaaa, 0, 0, 0]
        );
        // A hidden argument past the segment is rigd and client out of step.
        entry.hidden.block_count[0] = Some(60);
        assert!(matches!(
            Kernargs::of(&entry),
            Err(Error::Protocol(m)) if m.contains("past its argument segment")
        ));
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
