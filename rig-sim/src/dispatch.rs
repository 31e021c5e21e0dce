//! Kernel dispatch: from what the command processor latched to a fully described launch.
//!
//! A PM4 DISPATCH_DIRECT takes the COMPUTE_* registers set before it ([`from_registers`]); an
//! AQL kernel-dispatch packet takes the kernel descriptor at its `kernel_object` and builds the
//! user SGPRs its enable bits ask for ([`from_aql`]), as LLVM's AMDGPUUsage "Initial Kernel
//! Execution State" lays them out. Either way the launch goes to the GPU's
//! [`KernelExecutor`], which runs it against the queue's page table; on a model of several
//! dies, once per die with that die's share of the workgroups ([`spread`]). A launch the
//! executor cannot run faults the queue with the executor's reason: no launch ever pretends
//! to have run.
//!
//! The facts it reads a launch by are rig-amd's, the ones the client encodes with: the
//! generation's scratch granule and wave64 rule ([`rig_amd::hal`]), the processor's LDS
//! granule ([`Gpu::lds_granule`]), the descriptor's layout ([`KernelDescriptor`]) and the
//! user-SGPR order ([`UserSgprs`]). This module does not decode instructions (rig-isa does)
//! or packets (rig-amd does).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rig_amd::code_object::KernelDescriptor;
use rig_amd::dispatch::{UserSgprValues, UserSgprs, scratch_resource};
use rig_amd::gpu::{Generation, Gpu};
use rig_amd::hal::Hal;
use rig_amd::regs::{self, initiator};
use rig_isa::{Dispatch, ExecStats, Scratch, Workgroups};

use crate::memory::Vm;

/// A launch, as handed to a [`KernelExecutor`].
#[derive(Debug)]
pub struct Launch<'a> {
    /// The queue's page table.
    pub memory: &'a Vm,
    /// What to run.
    pub dispatch: &'a Dispatch,
    /// Set when the queue stops: the executor must return soon after, writing nothing more.
    pub stop: &'a AtomicBool,
    /// The modelled GPU.
    pub model: &'static Gpu,
    /// Host threads the executor may use for this launch.
    pub threads: usize,
    /// Dies of the GPU (1 on a GPU of one die).
    pub dies: u32,
    /// The die this launch runs on, below `dies`.
    pub die: u32,
    /// The workgroups this die runs: [`Workgroups::ALL`] on a GPU of one die, otherwise
    /// [`Workgroups::round_robin`]`(die, dies)` (see [`spread`]); while the SQ counts the
    /// launch, one shader engine's round-robin share ([`by_engine`]).
    pub workgroups: Workgroups,
}

/// Why a launch did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelFault {
    /// The kernel's code faulted as it ran, as the interpreter reports it: an illegal or
    /// unsupported instruction, a memory fault with its instruction, a trap, a stop.
    #[error(transparent)]
    Exec(#[from] rig_isa::ExecFault),
    /// An access the queue's page table refused, with no instruction to name (an executor
    /// that reads memory itself).
    #[error("{0}")]
    Page(crate::memory::PageFault),
    /// The launch's description is unfit: a descriptor whose needs the queue does not meet,
    /// registers that describe no launch.
    #[error("{0}")]
    Refused(String),
    /// The simulator cannot run this GPU's code: no executor for the model.
    #[error("{0}")]
    Unsupported(String),
}

impl From<crate::memory::PageFault> for KernelFault {
    fn from(f: crate::memory::PageFault) -> Self {
        KernelFault::Page(f)
    }
}

/// Runs kernels for the simulated GPU.
pub trait KernelExecutor: Send + Sync {
    /// Runs `launch` (the workgroups of [`Launch::workgroups`] only) to completion, or returns
    /// why it could not (illegal instruction, page fault inside the kernel, stop, ...). On a
    /// GPU of several dies it is called once per die for each dispatch, concurrently.
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault>;

    /// [`KernelExecutor::execute`], reporting what the interpreter counted of the launch, which
    /// the SQ's counters count by (the crate's perfmon module); `None`, as by default, from an executor
    /// that counts nothing, whose counters then read unknown.
    fn execute_counted(&self, launch: &Launch<'_>) -> Result<Option<ExecStats>, KernelFault> {
        self.execute(launch).map(|()| None)
    }
}

/// Runs a dispatch on a GPU of one die shader engine by shader engine, `engines` of them, one
/// after another, each the workgroups dealt to it round-robin by linear id (engine `g %
/// engines` runs group `g`, [`Workgroups::round_robin`]), with all of `threads`; returns what
/// each engine's share counted. Shares that run one after another use the whole scratch,
/// which computes what one launch of them all computes.
pub fn by_engine(
    executor: &dyn KernelExecutor,
    memory: &Vm,
    dispatch: &Dispatch,
    stop: &AtomicBool,
    model: &'static Gpu,
    threads: usize,
    engines: u32,
) -> Result<Vec<Option<ExecStats>>, KernelFault> {
    (0..engines.max(1))
        .map(|se| {
            executor.execute_counted(&Launch {
                memory,
                dispatch,
                stop,
                model,
                threads,
                dies: 1,
                die: 0,
                workgroups: Workgroups::round_robin(se, engines.max(1)),
            })
        })
        .collect()
}

/// Hands each die of the model its share of a dispatch's workgroups and runs the shares on
/// `executor`, all dies at once, returning the first failing die's reason.
///
/// Workgroups are dealt round-robin by linear workgroup id (x fastest): workgroup `g` runs on
/// die `g % dies`, as the XCCs of a GPU in its default (SPX) partition mode take workgroups in
/// turn. Each die gets `threads / dies` host threads (at least 1) and, when the kernel uses
/// scratch, an equal disjoint part of the queue's scratch wave slots. Should the slots not
/// divide into a workgroup's worth per die, the dies run one after another over the whole
/// scratch instead, which computes the same.
pub fn spread(
    executor: &dyn KernelExecutor,
    memory: &Vm,
    dispatch: &Dispatch,
    stop: &AtomicBool,
    model: &'static Gpu,
    threads: usize,
) -> Result<(), KernelFault> {
    let dies = model.dies.max(1);
    let run_die = |d: &Dispatch, die: u32, threads: usize| {
        executor.execute(&Launch {
            memory,
            dispatch: d,
            stop,
            model,
            threads,
            dies,
            die,
            workgroups: if dies == 1 {
                Workgroups::ALL
            } else {
                Workgroups::round_robin(die, dies)
            },
        })
    };
    if dies == 1 {
        return run_die(dispatch, 0, threads);
    }
    let lanes = u64::from(Hal::lanes(dispatch.wave64));
    let items: u64 = dispatch.group_size.iter().map(|&n| u64::from(n)).product();
    let group_waves = u32::try_from(items.div_ceil(lanes))
        .unwrap_or(u32::MAX)
        .max(1);
    // Without scratch every die runs the dispatch as it is; with it, each die its own slots.
    let split: Option<Vec<Dispatch>> = match dispatch.scratch {
        Some(s) if s.waves / dies >= group_waves => {
            let slots = s.waves / dies;
            let slot_bytes = u64::from(s.bytes_per_lane) * lanes;
            Some(
                (0..dies)
                    .map(|k| Dispatch {
                        scratch: Some(Scratch {
                            base: s.base + u64::from(k * slots) * slot_bytes,
                            waves: slots,
                            ..s
                        }),
                        ..dispatch.clone()
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let at_once = dispatch.scratch.is_none() || split.is_some();
    let n = dies as usize;
    let results: Vec<std::sync::Mutex<Option<Result<(), KernelFault>>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let run = |die: usize| {
        let d = split.as_ref().map_or(dispatch, |v| &v[die]);
        let t = if at_once {
            (threads / n).max(1)
        } else {
            threads
        };
        let r = run_die(d, die as u32, t);
        *results[die].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    let width = if at_once { n } else { 1 };
    rig_isa::parallel(n, width, &run);
    for r in results {
        match r.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(e),
            None => return Err(rig_isa::ExecFault::Internal.into()),
        }
    }
    Ok(())
}

/// An executor that runs nothing: every dispatch faults its queue, saying so.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoExecutor;

impl KernelExecutor for NoExecutor {
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault> {
        Err(KernelFault::Unsupported(format!(
            "no kernel executor: the simulator cannot run the code at {:#x} yet",
            launch.dispatch.code_address
        )))
    }
}

/// rig-isa's interpreter, which runs GFX9 (CDNA3), GFX11 (RDNA3) and GFX12 (RDNA4) machine
/// code, each with its generation's decoder and launch state.
#[derive(Debug, Clone, Copy, Default)]
pub struct IsaExecutor;

impl KernelExecutor for IsaExecutor {
    fn execute(&self, launch: &Launch<'_>) -> Result<(), KernelFault> {
        self.execute_counted(launch).map(|_| ())
    }

    fn execute_counted(&self, launch: &Launch<'_>) -> Result<Option<ExecStats>, KernelFault> {
        let isa = match launch.model.generation() {
            Generation::Gfx9 => rig_isa::Isa::Gfx9,
            Generation::Gfx11 => rig_isa::Isa::Gfx11,
            Generation::Gfx12 => rig_isa::Isa::Gfx12,
        };
        rig_isa::execute_isa(
            isa,
            launch.dispatch,
            launch.workgroups,
            launch.memory,
            launch.stop,
            launch.threads,
        )
        .map(Some)
        .map_err(KernelFault::Exec)
    }
}

/// The executor a [`crate::SimConfig`] starts with: [`IsaExecutor`].
pub fn default_executor() -> Arc<dyn KernelExecutor> {
    Arc::new(IsaExecutor)
}

/// Registers in the SH window (0x2c00..0x3000), which holds a queue's COMPUTE_* registers.
pub const SH_WINDOW: usize = (rig_amd::pm4::SH_REG_END - rig_amd::pm4::SH_REG_START) as usize;

/// USER_SGPR of COMPUTE_PGM_RSRC2.
fn user_sgpr_count(rsrc2: u32) -> usize {
    regs::rsrc2::USER_SGPR.get(rsrc2) as usize
}

fn mul_axis(a: u32, b: u32, axis: char) -> Result<u32, String> {
    a.checked_mul(b)
        .ok_or_else(|| format!("the grid's {axis} axis holds more than 2^32 work-items"))
}

/// The launch of a DISPATCH_DIRECT of `dim` with initiator `initiator`, from the queue's SH
/// registers.
pub fn from_registers(
    model: &Gpu,
    sh: &[u32; SH_WINDOW],
    dim: [u32; 3],
    init: u32,
) -> Result<Dispatch, String> {
    let hal = model.hal();
    let c = hal.compute;
    let r = |o: u16| sh[usize::from(o)];
    let group: [u32; 3] = std::array::from_fn(|i| r(c.num_thread_x + i as u16) & 0xffff);
    if group.contains(&0) {
        return Err(format!(
            "COMPUTE_NUM_THREAD_* is {group:?}: a group has an empty axis"
        ));
    }
    if init & initiator::FORCE_START_AT_000 == 0 && (0..3).any(|i| r(c.start_x + i) != 0) {
        return Err(
            "COMPUTE_START_* is not 0: dispatches that start past workgroup 0 are not simulated"
                .into(),
        );
    }
    let grid = if init & initiator::USE_THREAD_DIMENSIONS != 0 {
        dim
    } else {
        [
            mul_axis(dim[0], group[0], 'x')?,
            mul_axis(dim[1], group[1], 'y')?,
            mul_axis(dim[2], group[2], 'z')?,
        ]
    };
    let rsrc2 = r(c.pgm_rsrc2);
    let n = user_sgpr_count(rsrc2).min(usize::from(regs::USER_DATA_COUNT));
    let user_sgprs = (0..n).map(|i| r(c.user_data_0 + i as u16)).collect();
    let wave64 = hal.wave64_of_initiator(init);
    let lanes = Hal::lanes(wave64);
    let scratch = if regs::rsrc2::SCRATCH_EN.get(rsrc2) != 0 {
        let tmpring = r(c.tmpring_size);
        let per_wave = hal.tmpring_wave_bytes(tmpring);
        let lo = r(c.dispatch_scratch_base_lo);
        let hi = r(c.dispatch_scratch_base_lo + 1);
        Some(Scratch {
            base: (u64::from(hi) << 32 | u64::from(lo)) << 8,
            bytes_per_lane: per_wave / lanes,
            waves: regs::tmpring::WAVES.get(tmpring),
        })
    } else {
        None
    };
    Ok(Dispatch {
        code_address: (u64::from(r(c.pgm_lo + 1)) << 32 | u64::from(r(c.pgm_lo))) << 8,
        pgm_rsrc1: r(c.pgm_rsrc1),
        pgm_rsrc2: rsrc2,
        pgm_rsrc3: r(c.pgm_rsrc3),
        user_sgprs,
        grid_items: grid,
        group_size: group,
        wave64,
        lds_bytes: model.lds_of_rsrc2(rsrc2),
        scratch,
    })
}

/// What an AQL kernel-dispatch packet names, and where the queue keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AqlLaunch {
    /// GPU address of the packet (the dispatch pointer).
    pub packet_va: u64,
    /// The packet's index in the queue (the dispatch id).
    pub dispatch_id: u64,
    /// GPU address of the queue's `amd_queue_t` (the queue pointer), 0 if none.
    pub queue_va: u64,
    /// Work-items per axis.
    pub grid: [u32; 3],
    /// Work-items per group per axis.
    pub group: [u32; 3],
    /// Private bytes per work-item the packet asks for.
    pub private_segment_size: u32,
    /// Group (LDS) bytes the packet asks for, beyond none.
    pub group_segment_size: u32,
    /// GPU address of the kernel descriptor.
    pub kernel_object: u64,
    /// GPU address of the kernel arguments.
    pub kernarg_address: u64,
    /// The queue's scratch: GPU address and bytes (0 bytes if none).
    pub scratch: (u64, u64),
}

/// The launch of an AQL kernel dispatch, reading its kernel descriptor through `vm`.
pub fn from_aql(
    model: &Gpu,
    vm: &Vm,
    p: &AqlLaunch,
) -> Result<Dispatch, crate::queue::FaultReason> {
    use crate::queue::FaultReason;
    let mut bytes = [0u8; KernelDescriptor::SIZE];
    vm.read(p.kernel_object, &mut bytes)?;
    let d = KernelDescriptor::from_bytes(&bytes);
    let rsrc2 = d.compute_pgm_rsrc2;
    let wave64 = model.hal().wave64(d.kernel_code_properties);
    let lanes = Hal::lanes(wave64);
    let private = d.private_segment_fixed_size.max(p.private_segment_size);
    let scratch = if private > 0 {
        let per_wave = u64::from(private) * u64::from(lanes);
        let waves = p.scratch.1 / per_wave;
        if waves == 0 {
            return Err(FaultReason::Kernel(KernelFault::Refused(format!(
                "the kernel needs {per_wave} bytes of scratch per wave but the queue has {} bytes",
                p.scratch.1
            ))));
        }
        Some(Scratch {
            base: p.scratch.0,
            bytes_per_lane: private,
            waves: u32::try_from(waves).unwrap_or(u32::MAX),
        })
    } else {
        None
    };
    let layout = UserSgprs::of(d.kernel_code_properties);
    let mut sgprs = vec![0u32; usize::from(layout.enabled)];
    let values = UserSgprValues {
        // The hardware's scratch V#, swizzled per lane; the executor reads base and size.
        private_segment_buffer: scratch_resource(p.scratch.0, p.scratch.1),
        dispatch_ptr: p.packet_va,
        queue_ptr: p.queue_va,
        kernarg_segment_ptr: p.kernarg_address,
        dispatch_id: p.dispatch_id,
        flat_scratch_init: p.scratch.0,
        private_segment_size: private,
    };
    // PANIC: the buffer was sized for the enabled SGPRs.
    layout
        .fill(&values, &mut sgprs)
        .expect("the buffer holds the enabled SGPRs");
    let declared = user_sgpr_count(rsrc2);
    if sgprs.len() > declared {
        return Err(FaultReason::Kernel(KernelFault::Refused(format!(
            "the kernel descriptor enables {} user SGPRs but COMPUTE_PGM_RSRC2 declares {declared}",
            sgprs.len()
        ))));
    }
    // Preloaded kernel arguments (GFX940+ kernarg_preload) fill the rest from the kernarg
    // segment, in order.
    let mut extra = vec![0u8; (declared - sgprs.len()) * 4];
    if !extra.is_empty() && p.kernarg_address != 0 {
        vm.read(p.kernarg_address, &mut extra)?;
    }
    sgprs.extend(
        extra
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    let group_fixed = d.group_segment_fixed_size;
    Ok(Dispatch {
        code_address: p
            .kernel_object
            .wrapping_add_signed(d.kernel_code_entry_byte_offset),
        pgm_rsrc1: d.compute_pgm_rsrc1,
        pgm_rsrc2: rsrc2,
        pgm_rsrc3: d.compute_pgm_rsrc3,
        user_sgprs: sgprs,
        grid_items: p.grid,
        group_size: p.group,
        wave64,
        lds_bytes: group_fixed.max(p.group_segment_size),
        scratch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Die, share, threads and scratch of a call.
    type Call = (u32, Workgroups, usize, Option<Scratch>);

    /// Records each call.
    #[derive(Default)]
    struct Calls(std::sync::Mutex<Vec<Call>>);

    impl KernelExecutor for Calls {
        fn execute(&self, l: &Launch<'_>) -> Result<(), KernelFault> {
            self.0
                .lock()
                .unwrap()
                .push((l.die, l.workgroups, l.threads, l.dispatch.scratch));
            if l.die == 5 {
                return Err(KernelFault::Refused("die 5 failed".into()));
            }
            Ok(())
        }
    }

    #[test]
    fn spread_gives_each_die_its_share_threads_and_scratch() {
        let gpu = crate::SimGpu::new(crate::SimConfig {
            model: "gfx942".into(),
            vram_bytes: 1 << 24,
            ..crate::SimConfig::default()
        })
        .unwrap();
        let space = gpu.create_address_space();
        let model = Gpu::by_name("gfx942").unwrap();
        let mut d = Dispatch {
            code_address: 0x1000,
            pgm_rsrc1: 0,
            pgm_rsrc2: 0,
            pgm_rsrc3: 0,
            user_sgprs: vec![],
            grid_items: [640, 1, 1],
            group_size: [128, 1, 1],
            wave64: true,
            lds_bytes: 0,
            scratch: Some(Scratch {
                base: 0x10_0000,
                bytes_per_lane: 16,
                waves: 32,
            }),
        };
        let stop = AtomicBool::new(false);
        let calls = Calls::default();
        let r = spread(&calls, space.memory(), &d, &stop, model, 16);
        assert_eq!(r, Err(KernelFault::Refused("die 5 failed".to_string())));
        let mut got = calls.0.lock().unwrap().clone();
        got.sort_by_key(|c| c.0);
        assert_eq!(got.len(), 8);
        for (k, (die, share, threads, scratch)) in got.iter().enumerate() {
            assert_eq!(*die, k as u32);
            assert_eq!(*share, Workgroups::round_robin(*die, 8));
            assert_eq!(*threads, 2);
            // 32 slots over 8 dies: 4 each, 1 KiB per wave64 slot, disjoint.
            let s = scratch.unwrap();
            assert_eq!((s.base, s.waves), (0x10_0000 + k as u64 * 4 * 1024, 4));
        }
        // Too few slots to split (4 over 8 dies, 2 waves a group): whole scratch, one at a time.
        d.scratch = Some(Scratch {
            base: 0x10_0000,
            bytes_per_lane: 16,
            waves: 4,
        });
        let calls = Calls::default();
        let _ = spread(&calls, space.memory(), &d, &stop, model, 16);
        let got = calls.0.lock().unwrap().clone();
        assert_eq!(got.len(), 8);
        assert!(got.iter().all(|c| c.3 == d.scratch && c.2 == 16));
    }

    #[test]
    fn registers_make_a_launch() {
        let model = Gpu::by_name("gfx1100").unwrap();
        let c = regs::compute(model.generation());
        let mut sh = [0u32; SH_WINDOW];
        let at = |o: u16| usize::from(o);
        sh[at(c.num_thread_x)] = 64;
        sh[at(c.num_thread_x) + 1] = 1;
        sh[at(c.num_thread_x) + 2] = 1;
        sh[at(c.pgm_lo)] = 0x1234;
        sh[at(c.pgm_lo) + 1] = 0x1;
        sh[at(c.pgm_rsrc2)] = 4 << 1 | 2 << 15;
        sh[at(c.pgm_rsrc3)] = 0x77;
        for i in 0..4 {
            sh[at(c.user_data_0) + i] = 10 + i as u32;
        }
        let d = from_registers(model, &sh, [3, 2, 1], 1 | 1 << 15).unwrap();
        assert_eq!(d.code_address, 0x1_0000_1234 << 8);
        assert_eq!(d.grid_items, [192, 2, 1]);
        assert_eq!(d.group_size, [64, 1, 1]);
        assert_eq!(d.user_sgprs, vec![10, 11, 12, 13]);
        assert_eq!(d.pgm_rsrc3, 0x77);
        assert!(!d.wave64);
        assert_eq!(d.lds_bytes, 1024);
        assert!(d.scratch.is_none());
        let d = from_registers(model, &sh, [3, 2, 1], 1).unwrap();
        assert!(d.wave64);
        // Scratch: 4 waves of 2 KiB, base 0x1234_5600.
        sh[at(c.pgm_rsrc2)] |= 1;
        sh[at(c.tmpring_size)] = 4 | 8 << 12;
        sh[at(c.dispatch_scratch_base_lo)] = 0x12_3456;
        let d = from_registers(model, &sh, [1, 1, 1], 1 | 1 << 15).unwrap();
        assert_eq!(
            d.scratch,
            Some(Scratch {
                base: 0x1234_5600,
                bytes_per_lane: 64,
                waves: 4
            })
        );
        sh[at(c.num_thread_x) + 2] = 0;
        assert!(from_registers(model, &sh, [3, 2, 1], 1).is_err());
    }
}
