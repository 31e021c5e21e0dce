//! The SQ performance counters of a simulated GFX12 GPU, as its compute queues' PM4 reaches
//! them.
//!
//! The registers are rig-amd's ([`rig_amd::perfcounter::Regs`]): a queue's WRITE_DATA to a
//! register and COPY_DATA from or to one reach them by absolute dword offset, on models of
//! GFX12 only (elsewhere a register outside the SH window faults the queue). They
//! are the GPU's, shared by every queue and address space, as the hardware's are:
//!
//! - `GRBM_GFX_INDEX` picks the shader engine that a read of a counter, and a write of a
//!   select, reaches; `SE_BROADCAST_WRITES` makes writes reach every engine (reads then reach
//!   engine `SE_INDEX`).
//! - `CP_CP_PERFMON_CNTL`'s `PERFMON_STATE`: `DISABLE_AND_RESET` zeroes every counter and stops
//!   counting, `START_COUNTING` starts, `STOP_COUNTING` (or any other state) stops. EVENT_WRITE's
//!   `PERFCOUNTER_*` events change nothing: the state register does it all.
//! - The SQ counts a dispatch while counting is started, `SQ_PERFCOUNTER_CTRL.CS_EN` is set and
//!   `SQ_PERFCOUNTER_CTRL2.VMID_EN` has the bit of the dispatch's VMID.
//!
//! **What is counted.** A counted dispatch runs shader engine by shader engine, each engine
//! the workgroups dealt to it round-robin by linear id (engine `g % engines` runs group `g`),
//! so each engine's counts are its own (see [`crate::dispatch::by_engine`]). Counter `n` of an
//! engine adds, by its select ([`rig_amd::perfcounter::Counter`]), what the interpreter's
//! counters ([`rig_isa::ExecStats`]) say of that engine's share: its waves, its instructions
//! of each class, its wave-cycles, and its busy cycles. A cycle is one instruction issue: the
//! simulated SQ issues one instruction a cycle, from one wave at a time, and runs an engine's
//! workgroups one after another, each group's waves resident until the whole group has ended.
//! So a group of `w` waves that issue `i` instructions in all adds `i` busy cycles and `w * i`
//! wave-cycles. A counter whose select the simulator does not model, or of a dispatch whose
//! executor reports no counts, saturates: it reads 2^32 - 1, which says its count is unknown,
//! as every 32-bit counter that overflowed does.

use std::sync::Mutex;

use rig_amd::perfcounter::{self, Counter, Regs, SQ_COUNTERS};
use rig_isa::{ExecStats, InstClass};

/// The GPU's perfmon registers.
#[derive(Debug)]
pub(crate) struct Perfmon {
    regs: Regs,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    grbm_gfx_index: u32,
    cp_perfmon_cntl: u32,
    ctrl: u32,
    ctrl2: u32,
    /// Per engine: the selects and the counts (kept wide, read saturated to 32 bits).
    engines: Vec<Engine>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Engine {
    select: [u32; SQ_COUNTERS],
    count: [u64; SQ_COUNTERS],
}

/// The value a counter of `select` adds for a share the interpreter counted.
fn value(select: u32, s: &ExecStats) -> Option<u64> {
    let issued = |k: InstClass| s.issued[k.index()];
    Some(match Counter::of_select(select)? {
        Counter::Waves => s.waves,
        Counter::InstsValu => issued(InstClass::Valu),
        Counter::InstsSalu => issued(InstClass::Salu),
        Counter::InstsSmem => issued(InstClass::Smem),
        Counter::InstsFlat => issued(InstClass::Vmem),
        Counter::InstsTex => issued(InstClass::Buffer),
        Counter::InstsLds => issued(InstClass::Lds),
        Counter::InstsBranch => issued(InstClass::Branch),
        Counter::WaveCycles => s.wave_cycles,
        Counter::BusyCycles => s.instructions,
    })
}

impl Perfmon {
    /// The registers of a GPU of `engines` shader engines, reset.
    pub(crate) fn new(engines: u32) -> Perfmon {
        Perfmon {
            regs: Regs::gfx12(),
            state: Mutex::new(State {
                grbm_gfx_index: perfcounter::broadcast(),
                cp_perfmon_cntl: 0,
                ctrl: 0,
                ctrl2: 0,
                engines: vec![Engine::default(); engines.max(1) as usize],
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine `GRBM_GFX_INDEX` reads reach, if the GPU has it.
    fn engine(s: &State) -> usize {
        perfcounter::field("GRBM_GFX_INDEX", "SE_INDEX").get(s.grbm_gfx_index) as usize
    }

    fn broadcasting(s: &State) -> bool {
        s.grbm_gfx_index & perfcounter::field("GRBM_GFX_INDEX", "SE_BROADCAST_WRITES").mask() != 0
    }

    /// Writes `value` to the register at absolute dword `dword`; false if it is none of these.
    pub(crate) fn write(&self, dword: u64, value: u32) -> bool {
        let r = &self.regs;
        let Ok(d) = u32::try_from(dword) else {
            return false;
        };
        let mut s = self.lock();
        let reached: Vec<usize> = if Self::broadcasting(&s) {
            (0..s.engines.len()).collect()
        } else {
            let e = Self::engine(&s);
            (e < s.engines.len()).then_some(e).into_iter().collect()
        };
        if d == r.grbm_gfx_index {
            s.grbm_gfx_index = value;
        } else if d == r.cp_perfmon_cntl {
            s.cp_perfmon_cntl = value;
            if self.state_is(value, "DISABLE_AND_RESET") {
                for e in &mut s.engines {
                    e.count = [0; SQ_COUNTERS];
                }
            }
        } else if d == r.ctrl {
            s.ctrl = value;
        } else if d == r.ctrl2 {
            s.ctrl2 = value;
        } else if let Some(n) = r.select.iter().position(|&a| a == d) {
            for e in reached {
                s.engines[e].select[n] = value;
            }
        } else if let Some(n) = r.lo.iter().position(|&a| a == d) {
            for e in reached {
                s.engines[e].count[n] = u64::from(value);
            }
        } else {
            return false;
        }
        true
    }

    /// Reads the register at absolute dword `dword`; `None` if it is none of these.
    pub(crate) fn read(&self, dword: u64) -> Option<u32> {
        let r = &self.regs;
        let d = u32::try_from(dword).ok()?;
        let s = self.lock();
        let e = s.engines.get(Self::engine(&s)).copied().unwrap_or_default();
        Some(if d == r.grbm_gfx_index {
            s.grbm_gfx_index
        } else if d == r.cp_perfmon_cntl {
            s.cp_perfmon_cntl
        } else if d == r.ctrl {
            s.ctrl
        } else if d == r.ctrl2 {
            s.ctrl2
        } else if let Some(n) = r.select.iter().position(|&a| a == d) {
            e.select[n]
        } else if let Some(n) = r.lo.iter().position(|&a| a == d) {
            u32::try_from(e.count[n]).unwrap_or(u32::MAX)
        } else {
            return None;
        })
    }

    fn state_is(&self, cntl: u32, name: &str) -> bool {
        perfcounter::field("CP_CP_PERFMON_CNTL", "PERFMON_STATE").get(cntl)
            == perfcounter::perfmon_state(name)
    }

    /// The shader engines a dispatch of `vmid` is counted on, if it is counted now.
    pub(crate) fn counting(&self, vmid: u32) -> Option<u32> {
        let s = self.lock();
        let cs = perfcounter::field("SQ_PERFCOUNTER_CTRL", "CS_EN").get(s.ctrl) != 0;
        let vmids = perfcounter::field("SQ_PERFCOUNTER_CTRL2", "VMID_EN").get(s.ctrl2);
        let ours = 1u32.checked_shl(vmid).is_some_and(|bit| vmids & bit != 0);
        (self.state_is(s.cp_perfmon_cntl, "START_COUNTING") && cs && ours)
            .then(|| u32::try_from(s.engines.len()).unwrap_or(u32::MAX))
    }

    /// Adds what each engine's share of a counted dispatch did (`None`: its executor reports
    /// no counts) to that engine's counters, unless counting stopped meanwhile.
    pub(crate) fn add(&self, vmid: u32, per_engine: &[Option<ExecStats>]) {
        if self.counting(vmid).is_none() {
            return;
        }
        let mut s = self.lock();
        for (e, stats) in s.engines.iter_mut().zip(per_engine) {
            for n in 0..SQ_COUNTERS {
                if e.select[n] == 0 {
                    continue; // SQ_PERF_SEL_NONE counts nothing.
                }
                let sel = perfcounter::field("SQ_PERFCOUNTER0_SELECT", "PERF_SEL").get(e.select[n]);
                e.count[n] = match stats.as_ref().and_then(|st| value(sel, st)) {
                    Some(v) => e.count[n].saturating_add(v),
                    None => u64::MAX,
                };
            }
        }
    }
}
