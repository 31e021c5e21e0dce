//! Dispatch execution: wave launch state, the scheduler that spreads workgroups over worker
//! threads, and the per-instruction semantics.
//!
//! Owns wave state (SGPRs, structure-of-arrays VGPRs, EXEC/VCC/SCC, PC), the LDS of a
//! workgroup, barriers between the waves of a group (cooperative switching on one host thread),
//! scratch addressing and the decode cache. Does not own decoding (`decode`) or memory
//! translation (the [`Memory`] implementation).

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::code::{self, Code};
use crate::decode::{Format, Inst, Isa, src};
use crate::opcodes::{self, op_smem};
use crate::opcodes_gfx9::new_smem as new_smem9;
use crate::opcodes_gfx12::{new_global, new_smem};
use crate::prep::Fast;
use crate::valu::Lanes;
use crate::{Dispatch, ExecFault, ExecStats, InstClass, Memory, MemoryFault, Workgroups};

mod ds;
mod fast;
mod mubuf;
pub(crate) mod scalar;
mod scalar12;
mod vmem;

pub(crate) use ds::two_addr_shape;
use ds::{ds, lds_ok, lds_read, lds_write};
use scalar::{sop1, sop2, sopc, sopk, sopp};
use vmem::vmem;

/// Work the calling thread does alone before helpers join a dispatch, in wave-instructions
/// (a wave's launch counts [`WAVE_LAUNCH`]): about 20 us, which is what waking helpers costs.
/// Counted, not timed: a clock read is tens of nanoseconds, a few percent of a small dispatch,
/// and a count decides alike on a quiet and a loaded host.
const INVITE_AFTER: u64 = 1024;
/// A wave's launch and teardown, in wave-instructions (for [`INVITE_AFTER`]).
const WAVE_LAUNCH: u64 = 16;
/// Instructions a wave runs between checks of the stop flag.
const STOP_CHECK: u64 = 256;
/// Instructions a wave runs before it yields to the other waves of its group at a backward
/// branch or `s_sleep` (switching at every one cost a third of a looping kernel's speed).
const SLICE: u64 = 256;
/// LDS of one workgroup on gfx11.
const MAX_LDS_BYTES: u32 = 64 * 1024;
/// SGPR index of TTMP0.
const TTMP0: usize = 108;
/// SGPR index of GFX9's FLAT_SCRATCH_LO.
const FLAT_SCRATCH_LO: usize = 102;
/// High 32 bits of the flat aperture that maps LDS.
pub const SHARED_APERTURE_HI: u32 = 0x1000_0000;
/// High 32 bits of the flat aperture that maps private memory.
pub const PRIVATE_APERTURE_HI: u32 = 0x2000_0000;

/// Words of a wave's vector register file: 512 registers of up to 64 lanes (GFX9's unified
/// file of VGPRs and AGPRs; the other generations use the first 256), whatever the dispatch
/// allocates (`nvgpr` rows of `lanes` words are the wave's VGPRs, [`AccRegs`] its AGPRs). A
/// fixed size, so that a register number (a `u8`) indexes it with no bounds check: the forms
/// check `nvgpr` once. Rows past a dispatch's allocation are never touched (the zeroed pages
/// of an allocation cost nothing until written).
const VGPR_WORDS: usize = 512 * 64;

/// Operand number of AGPR 0 in an instruction as the core runs it (GFX9's accumulator
/// registers, lowered from the decoder's `Inst::acc` bits by `lower9`): 256 past VGPR 0.
pub(crate) const AGPR0: u16 = 512;

/// A wave's accumulator registers (GFX9): `count` AGPRs from row `base` of the unified file,
/// the kernel descriptor's ACCUM_OFFSET (COMPUTE_PGM_RSRC3 bits 5:0, in units of 4 registers,
/// minus one) splitting it from the VGPRs. None on the other generations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AccRegs {
    pub base: usize,
    pub count: usize,
}

/// Row of register `r` counted from VGPR 0 (`r` below 256: VGPR `r`; from 256: AGPR
/// `r - 256`) in a file of `nvgpr` VGPRs and the AGPRs `acc`; None outside them.
#[inline(always)]
pub(crate) fn reg_row(r: usize, nvgpr: usize, acc: AccRegs) -> Option<usize> {
    if r < nvgpr {
        Some(r)
    } else {
        let a = r.wrapping_sub(256);
        (a < acc.count).then_some(acc.base + a)
    }
}

/// A zeroed VGPR file.
fn vgpr_file() -> Box<[u32; VGPR_WORDS]> {
    match vec![0u32; VGPR_WORDS].into_boxed_slice().try_into() {
        Ok(file) => file,
        Err(_) => unreachable!("the vector has VGPR_WORDS words"),
    }
}

/// State of one wave.
struct Wave {
    sgpr: [u32; 128],
    vgpr: Box<[u32; VGPR_WORDS]>,
    /// Words of `vgpr` that may be non-zero (the last dispatch's allocation).
    vgpr_used: usize,
    nvgpr: usize,
    acc: AccRegs,
    lanes: usize,
    scc: bool,
    pc: u64,
    done: bool,
    at_barrier: bool,
    flat_scratch: u64,
    /// Number of the wave within its workgroup (for the scratch slot).
    slot: u32,
    /// VALU operand staging, kept across instructions to avoid re-zeroing.
    tmp: Box<[Lanes; 4]>,
    /// COMPUTE_PGM_RSRC1 (float modes).
    rsrc1: u32,
}

impl Wave {
    fn exec(&self) -> u64 {
        if self.lanes == 32 {
            self.sgpr[126] as u64
        } else {
            self.sgpr[126] as u64 | (self.sgpr[127] as u64) << 32
        }
    }
    fn set_exec(&mut self, v: u64) {
        self.sgpr[126] = v as u32;
        self.sgpr[127] = if self.lanes == 32 {
            0
        } else {
            (v >> 32) as u32
        };
    }
    fn vcc(&self) -> u64 {
        self.mask(src::VCC_LO)
    }
    /// Reads a lane mask from an SGPR (pair in wave64).
    fn mask(&self, s: u16) -> u64 {
        let lo = self.sread(s, 0) as u64;
        if self.lanes == 32 {
            lo
        } else {
            lo | (self.sread(s + 1, 0) as u64) << 32
        }
    }
    fn full(&self) -> u64 {
        if self.lanes == 32 {
            0xffff_ffff
        } else {
            u64::MAX
        }
    }

    /// Reads a 32-bit scalar operand. `f16` picks the half-precision inline float constants.
    fn sread_t(&self, s: u16, lit: u32, f16: bool) -> u32 {
        match s {
            0..=123 | 125..=127 => self.sgpr[s as usize],
            251 => (self.vcc() == 0) as u32,
            252 => (self.exec() == 0) as u32,
            253 => self.scc as u32,
            _ => crate::prep::constant(s, lit, f16).unwrap_or(0),
        }
    }
    fn sread(&self, s: u16, lit: u32) -> u32 {
        self.sread_t(s, lit, false)
    }
    /// Reads a 64-bit scalar operand; `float` selects f64 inline constants and literal placement.
    fn sread64(&self, s: u16, lit: u32, float: bool) -> u64 {
        match s {
            0..=127 => {
                let b = (s & !1) as usize;
                if s == 124 {
                    0
                } else {
                    self.sgpr[b] as u64 | (self.sgpr[b + 1] as u64) << 32
                }
            }
            128..=208 => self.sread(s, lit) as i32 as i64 as u64,
            240..=248 => {
                let v = [
                    0.5f64,
                    -0.5,
                    1.0,
                    -1.0,
                    2.0,
                    -2.0,
                    4.0,
                    -4.0,
                    0.15915494309189532,
                ][(s - 240) as usize];
                v.to_bits()
            }
            255 if float => (lit as u64) << 32,
            255 => lit as u64,
            // As 64-bit operands the aperture registers read as full addresses.
            235..=238 => {
                (self.sread(s, lit) as u64) << 32
                    | if matches!(s, 236 | 238) {
                        0xffff_ffff
                    } else {
                        0
                    }
            }
            _ => self.sread(s, lit) as u64,
        }
    }
    fn swrite(&mut self, s: u16, v: u32) {
        if s < 128 && s != 124 {
            self.sgpr[s as usize] = v;
            if s == 127 && self.lanes == 32 {
                self.sgpr[127] = 0;
            }
        }
    }
    /// Writes a 32-bit (`wide` false) or 64-bit scalar destination.
    fn swrite_sized(&mut self, s: u16, v: u64, wide: bool) {
        if wide {
            self.swrite64(s, v)
        } else {
            self.swrite(s, v as u32)
        }
    }
    fn swrite64(&mut self, s: u16, v: u64) {
        let b = s & !1;
        self.swrite(b, v as u32);
        self.swrite(b + 1, (v >> 32) as u32);
    }
}

struct Group<'a> {
    lds: Vec<u8>,
    waves: Vec<Wave>,
    mem: &'a dyn Memory,
    /// The worker's windows onto `mem`, for this dispatch.
    tlb: crate::window::Tlb<'a>,
}

/// Everything a worker needs to run groups.
struct Ctx<'a> {
    d: &'a Dispatch,
    isa: Isa,
    stop: &'a AtomicBool,
    lanes: usize,
    nvgpr: usize,
    acc: AccRegs,
    waves_per_group: usize,
    wave_bytes: u64,
    /// The host's vector unit, asked once.
    wide: crate::simd::Wide,
}

/// The shape of a dispatch as one `execute` call runs it, checked.
struct Plan {
    lanes: usize,
    nvgpr: usize,
    acc: AccRegs,
    waves_per_group: usize,
    wave_bytes: u64,
    /// Workgroups along each dimension of the grid.
    ngroups: [u64; 3],
    /// Workgroups of this call's share.
    mine: u64,
    threads: usize,
}

/// Checks the launch values a dispatch's sender chose, and derives what the workers need.
fn plan(isa: Isa, d: &Dispatch, share: Workgroups, threads: usize) -> Result<Plan, ExecFault> {
    let bad = |reason| Err(ExecFault::BadDispatch { reason });
    if d.group_size.contains(&0) {
        return bad("a workgroup dimension is zero");
    }
    if share.stride == 0 {
        return bad("a workgroup share has a stride of 0");
    }
    let lanes = if d.wave64 { 64 } else { 32 };
    let items = d.group_size[0] as u64 * d.group_size[1] as u64 * d.group_size[2] as u64;
    if items > 1024 {
        return bad("a workgroup has more than 1024 work-items");
    }
    if d.lds_bytes > MAX_LDS_BYTES {
        return bad("a workgroup asks for more than 64 KiB of LDS");
    }
    let waves_per_group = items.div_ceil(lanes as u64) as usize;
    // rsrc1 VGPR granules can name more than the 256 architected VGPRs: clamp.
    let granted = ((d.pgm_rsrc1 & 0x3f) as usize + 1) * 8;
    let (nvgpr, acc) = if isa == Isa::Gfx9 {
        // GFX9's unified file (wave64: up to 512 registers in granules of 8): VGPRs below
        // ACCUM_OFFSET, AGPRs from there.
        if !d.wave64 {
            return bad("gfx942 code runs in wave64 only");
        }
        let total = granted.min(512);
        let base = ((d.pgm_rsrc3 & 0x3f) as usize + 1) * 4;
        let acc = AccRegs {
            base: base.min(total),
            count: total.saturating_sub(base).min(256),
        };
        (base.min(total).min(256), acc)
    } else {
        (granted.min(256), AccRegs::default())
    };
    let ngroups: [u64; 3] =
        std::array::from_fn(|k| (d.grid_items[k] as u64).div_ceil(d.group_size[k] as u64));
    // Three 32-bit grid dimensions in groups of one can name more groups than a u64 counts.
    let Some(total) = ngroups[0]
        .checked_mul(ngroups[1])
        .and_then(|n| n.checked_mul(ngroups[2]))
    else {
        return bad("the grid has more than 2^64 - 1 workgroups");
    };
    let mine = share.count(total);
    let wave_bytes = d
        .scratch
        .map(|s| s.bytes_per_lane as u64 * lanes as u64)
        .unwrap_or(0);
    let mut threads = threads.max(1).min(mine.max(1) as usize);
    if let Some(s) = d.scratch {
        // Each worker runs one group at a time, so it needs a group's worth of wave slots.
        let slots = s.waves as usize / waves_per_group;
        if slots == 0 {
            return bad("scratch has fewer wave slots than a workgroup has waves");
        }
        threads = threads.min(slots);
    }
    Ok(Plan {
        lanes,
        nvgpr,
        acc,
        waves_per_group,
        wave_bytes,
        ngroups,
        mine,
        threads,
    })
}

/// VGPR bytes of the waves a thread keeps between dispatches (32 waves' files: a group of
/// 1024 work-items in wave32).
const KIT_VGPR_BYTES: usize = 32 * 4 * VGPR_WORDS;

/// A thread's buffers from its last dispatch: LDS, the last group's waves (in place, so a
/// next dispatch of the same shape moves none: a wave is over half a KiB) and spare waves.
#[derive(Default)]
struct Kit {
    lds: Vec<u8>,
    waves: Vec<Wave>,
    spare: Vec<Wave>,
}

thread_local! {
    /// Reused by the thread's next dispatch: allocating and zeroing them cost a small dispatch
    /// more than running it.
    static KIT: std::cell::Cell<Option<Kit>> = const { std::cell::Cell::new(None) };
}

/// What the workers of one dispatch share: they take the share's groups in turn.
struct Work<'a> {
    ctx: Ctx<'a>,
    mem: &'a dyn Memory,
    share: Workgroups,
    ngroups: [u64; 3],
    mine: u64,
    next: AtomicU64,
    failed: AtomicBool,
    /// Whether helpers may join.
    shared: bool,
    /// The decode helpers start from: the caller's, as it invites them.
    helper_seed: std::sync::OnceLock<Option<code::Cached>>,
}

impl Work<'_> {
    /// Runs groups on worker `t` until none is left, the dispatch stops or a group faults.
    fn run_groups(
        &self,
        code: &mut Code,
        t: usize,
        stats: &mut ExecStats,
        invite: &dyn Fn(),
    ) -> Result<(), ExecFault> {
        let kit = KIT.take().unwrap_or_default();
        let mut group = Group {
            lds: kit.lds,
            waves: kit.waves,
            mem: self.mem,
            tlb: crate::window::Tlb::new(self.mem),
        };
        let mut spare = kit.spare;
        let r = self.groups_loop(code, t, stats, invite, &mut group, &mut spare);
        // The group's waves first: they are what the next dispatch most likely reuses.
        let mut room = KIT_VGPR_BYTES / (4 * VGPR_WORDS);
        let mut keep = |waves: &mut Vec<Wave>| {
            waves.truncate(room);
            room -= waves.len();
        };
        keep(&mut group.waves);
        keep(&mut spare);
        KIT.set(Some(Kit {
            lds: group.lds,
            waves: group.waves,
            spare,
        }));
        r
    }

    fn groups_loop(
        &self,
        code: &mut Code,
        t: usize,
        stats: &mut ExecStats,
        invite: &dyn Fn(),
        group: &mut Group,
        spare: &mut Vec<Wave>,
    ) -> Result<(), ExecFault> {
        loop {
            if self.failed.load(Ordering::Relaxed) {
                return Ok(());
            }
            if self.ctx.stop.load(Ordering::Relaxed) {
                self.failed.store(true, Ordering::Relaxed);
                return Err(ExecFault::Stopped);
            }
            let j = self.next.fetch_add(1, Ordering::Relaxed);
            if j >= self.mine {
                return Ok(());
            }
            let g = self.share.first + j * self.share.stride;
            let n = self.ngroups;
            let id = [g % n[0], (g / n[0]) % n[1], g / (n[0] * n[1])];
            if let Err(e) = run_group(&self.ctx, code, group, spare, t, id, stats) {
                self.failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
            // Helpers join once the work has proven longer than waking them costs.
            if self.shared
                && j + 1 < self.mine
                && stats.instructions + WAVE_LAUNCH * stats.waves >= INVITE_AFTER
            {
                self.helper_seed.get_or_init(|| code.seed());
                invite();
            }
        }
    }
}

/// Adds a worker's counters and its fault (the first one reported wins) to the dispatch's.
fn merge(out: &Mutex<(ExecStats, Option<ExecFault>)>, stats: ExecStats, r: Result<(), ExecFault>) {
    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
    o.0.waves += stats.waves;
    o.0.workgroups += stats.workgroups;
    o.0.instructions += stats.instructions;
    o.0.lane_instructions += stats.lane_instructions;
    o.0.wave_cycles += stats.wave_cycles;
    for k in 0..InstClass::COUNT {
        o.0.issued[k] += stats.issued[k];
        o.0.general[k] += stats.general[k];
    }
    if let Err(e) = r {
        o.1.get_or_insert(e);
    }
}

pub(crate) fn execute(
    isa: Isa,
    d: &Dispatch,
    share: Workgroups,
    mem: &dyn Memory,
    stop: &AtomicBool,
    threads: usize,
) -> Result<ExecStats, ExecFault> {
    let p = plan(isa, d, share, threads)?;
    if p.mine == 0 {
        return Ok(ExecStats::default());
    }
    // The calling thread takes the cached decode; helpers start from a copy of its own.
    let seed = code::take(mem, isa, d.code_address);
    let work = Work {
        ctx: Ctx {
            d,
            isa,
            stop,
            lanes: p.lanes,
            nvgpr: p.nvgpr,
            acc: p.acc,
            waves_per_group: p.waves_per_group,
            wave_bytes: p.wave_bytes,
            wide: crate::simd::Wide::detect(),
        },
        mem,
        share,
        ngroups: p.ngroups,
        mine: p.mine,
        next: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        shared: p.threads > 1,
        helper_seed: std::sync::OnceLock::new(),
    };
    if p.threads == 1 {
        return run_alone(&work, seed);
    }
    let workers = AtomicUsize::new(0);
    let out: Mutex<(ExecStats, Option<ExecFault>)> = Mutex::new((ExecStats::default(), None));
    let best: Mutex<Option<Code>> = Mutex::new(None);
    let seed = Mutex::new(seed);
    let worker = |invite: &dyn Fn()| {
        let t = workers.fetch_add(1, Ordering::Relaxed);
        if t >= p.threads {
            // Scratch slots exist for `threads` workers only (a helper may call in twice).
            return;
        }
        let mut stats = ExecStats::default();
        // The caller is worker 0: helpers come only once it invites them.
        let mut code = if t == 0 {
            let seed = seed.lock().unwrap_or_else(|e| e.into_inner()).take();
            Code::new(mem, isa, d.code_address, seed)
        } else {
            Code::copy_of(
                mem,
                isa,
                d.code_address,
                work.helper_seed.get().cloned().flatten(),
            )
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            work.run_groups(&mut code, t, &mut stats, invite)
        }))
        .unwrap_or(Err(ExecFault::Internal));
        merge(&out, stats, r);
        // The worker that decoded most leaves its decode cache for the next dispatch.
        let mut b = best.lock().unwrap_or_else(|e| e.into_inner());
        if b.as_ref().is_none_or(|c| c.decoded() < code.decoded()) {
            *b = Some(code);
        }
    };
    crate::pool::run(p.threads, &worker);
    if let Some(c) = best
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .and_then(Code::into_cached)
    {
        code::put(isa, d.code_address, c);
    }
    let (stats, fault) = out.into_inner().unwrap_or_else(|e| e.into_inner());
    match fault {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// A dispatch of one worker, the calling thread: nothing to share, so no lock to share it by
/// (each lock is atomic operations, a few percent of a small dispatch).
fn run_alone(work: &Work, seed: Option<code::Cached>) -> Result<ExecStats, ExecFault> {
    let (isa, at) = (work.ctx.isa, work.ctx.d.code_address);
    let mut code = Code::new(work.mem, isa, at, seed);
    let mut stats = ExecStats::default();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        work.run_groups(&mut code, 0, &mut stats, &|| {})
    }))
    .unwrap_or(Err(ExecFault::Internal));
    if let Some(c) = code.into_cached() {
        code::put(isa, at, c);
    }
    r.map(|()| stats)
}

fn run_group(
    ctx: &Ctx,
    code: &mut Code,
    group: &mut Group,
    pool: &mut Vec<Wave>,
    worker: usize,
    id: [u64; 3],
    stats: &mut ExecStats,
) -> Result<(), ExecFault> {
    let d = ctx.d;
    // Partial groups at the grid edge have fewer work-items (AQL semantics).
    let dims: [u32; 3] = std::array::from_fn(|k| {
        let start = id[k] * d.group_size[k] as u64;
        (d.grid_items[k] as u64 - start).min(d.group_size[k] as u64) as u32
    });
    let items = dims[0] as usize * dims[1] as usize * dims[2] as usize;
    let nwaves = items.div_ceil(ctx.lanes);
    // The group's buffers are reused from the worker's previous group, its waves reset in
    // place (a wave is over half a KiB: moving it in and out of the pool cost a short kernel
    // more than some of its instructions).
    while group.waves.len() > nwaves {
        pool.extend(group.waves.pop());
    }
    while group.waves.len() < nwaves {
        group
            .waves
            .push(pool.pop().unwrap_or_else(|| new_wave(ctx)));
    }
    group.lds.clear();
    group.lds.resize(d.lds_bytes as usize, 0);
    for (w, wave) in group.waves.iter_mut().enumerate() {
        let slot = (worker * ctx.waves_per_group + w) as u32;
        reset_wave(ctx, wave, slot);
        system_sgprs(ctx, wave, id, nwaves);
        work_item_ids(ctx, wave, w * ctx.lanes, dims, items);
    }
    stats.workgroups += 1;
    stats.waves += nwaves as u64;
    let before = stats.instructions;
    let r = schedule(ctx, code, group, stats);
    stats.wave_cycles += nwaves as u64 * (stats.instructions - before);
    r
}

/// A wave of the dispatch's shape (to be reset before it runs).
fn new_wave(ctx: &Ctx) -> Wave {
    Wave {
        sgpr: [0; 128],
        vgpr: vgpr_file(),
        vgpr_used: 0,
        nvgpr: ctx.nvgpr,
        acc: ctx.acc,
        lanes: ctx.lanes,
        scc: false,
        pc: ctx.d.code_address,
        done: false,
        at_barrier: false,
        flat_scratch: 0,
        slot: 0,
        tmp: Box::new([[0; 64]; 4]),
        rsrc1: ctx.d.pgm_rsrc1,
    }
}

/// Puts a wave in its launch state at the program's entry. The wave may come from another
/// dispatch (see `Kit`): its shape too is reset.
fn reset_wave(ctx: &Ctx, wave: &mut Wave, slot: u32) {
    let d = ctx.d;
    wave.sgpr = [0; 128];
    // Zero what the last dispatch may have written too: its registers are not this one's.
    let used = ctx.nvgpr.max(ctx.acc.base + ctx.acc.count) * ctx.lanes;
    wave.vgpr[..used.max(wave.vgpr_used)].fill(0);
    wave.vgpr_used = used;
    wave.nvgpr = ctx.nvgpr;
    wave.acc = ctx.acc;
    wave.lanes = ctx.lanes;
    wave.rsrc1 = d.pgm_rsrc1;
    wave.scc = false;
    wave.pc = d.code_address;
    wave.done = false;
    wave.at_barrier = false;
    wave.flat_scratch = 0;
    wave.slot = slot;
}

/// The SGPRs COMPUTE_PGM_RSRC2 asks for, in order: user SGPRs, workgroup ids, workgroup
/// info, the scratch wave offset; and the wave's scratch address.
fn system_sgprs(ctx: &Ctx, wave: &mut Wave, id: [u64; 3], nwaves: usize) {
    let d = ctx.d;
    let rsrc2 = d.pgm_rsrc2;
    let user = ((rsrc2 >> 1) & 0x1f) as usize;
    for (k, v) in d.user_sgprs.iter().take(user.min(106)).enumerate() {
        wave.sgpr[k] = *v;
    }
    let mut s = user;
    for (k, bit) in [7u32, 8, 9].iter().enumerate() {
        if rsrc2 >> bit & 1 != 0 && s < 106 {
            wave.sgpr[s] = id[k] as u32;
            s += 1;
        }
    }
    if ctx.isa == Isa::Gfx12 {
        // GFX12's architected SGPRs, where LLVM reads the ids: TTMP9 = x, TTMP7 = y | z << 16.
        wave.sgpr[TTMP0 + 9] = id[0] as u32;
        wave.sgpr[TTMP0 + 7] = (id[1] as u32 & 0xffff) | (id[2] as u32) << 16;
    }
    if rsrc2 >> 10 & 1 != 0 && s < 106 {
        // Workgroup info: wave count in the group.
        wave.sgpr[s] = nwaves as u32;
        s += 1;
    }
    if let Some(sc) = d.scratch {
        let off = wave.slot as u64 * ctx.wave_bytes;
        wave.flat_scratch = sc.base + off;
        if ctx.isa == Isa::Gfx9 {
            // gfx942's architected flat scratch: FLAT_SCRATCH (s102:103 in GFX9's numbering)
            // holds the wave's scratch address at launch.
            wave.sgpr[FLAT_SCRATCH_LO] = wave.flat_scratch as u32;
            wave.sgpr[FLAT_SCRATCH_LO + 1] = (wave.flat_scratch >> 32) as u32;
        }
        if rsrc2 & 1 != 0 && s < 106 {
            wave.sgpr[s] = off as u32;
        }
    }
}

/// Work-item ids into v0 (packed x | y << 10 | z << 20, as many as RSRC2 asks for) for the
/// wave whose first work-item is `t0`, and EXEC for the work-items that exist.
fn work_item_ids(ctx: &Ctx, wave: &mut Wave, t0: usize, dims: [u32; 3], items: usize) {
    let tid_cnt = (ctx.d.pgm_rsrc2 >> 11) & 3;
    let mut exec = 0u64;
    // The ids of the first lane, then counted up (no division per lane; none at all for a
    // wave that starts in the first row).
    let (mut x, mut y, mut z) = if t0 < dims[0] as usize {
        (t0 as u32, 0, 0)
    } else {
        (
            (t0 % dims[0] as usize) as u32,
            ((t0 / dims[0] as usize) % dims[1] as usize) as u32,
            (t0 / (dims[0] as usize * dims[1] as usize)) as u32,
        )
    };
    let live = items.saturating_sub(t0).min(ctx.lanes);
    if x as usize + live <= dims[0] as usize {
        // The wave's work-items lie in one row: only x counts up. x stays below 1024, so the
        // packed id is one sum (a loop of u32 adds the compiler widens, where an enumerate of
        // usize lanes stayed a lane at a time).
        let first = x | match tid_cnt {
            0 => 0,
            1 => y << 10,
            _ => y << 10 | z << 20,
        };
        for (v, l) in wave.vgpr[..live].iter_mut().zip(0u32..) {
            *v = first + l;
        }
        wave.set_exec(u64::MAX.checked_shr(64 - live as u32).unwrap_or(0));
        return;
    }
    for l in 0..ctx.lanes {
        if t0 + l >= items {
            break;
        }
        exec |= 1 << l;
        if l > 0 {
            x += 1;
            if x == dims[0] {
                x = 0;
                y += 1;
                if y == dims[1] {
                    y = 0;
                    z += 1;
                }
            }
        }
        let v = match tid_cnt {
            0 => x,
            1 => x | y << 10,
            _ => x | y << 10 | z << 20,
        };
        wave.vgpr[l] = v;
    }
    wave.set_exec(exec);
}

/// Cooperative scheduling: runs each wave until it ends or reaches a barrier, releases the
/// barrier once every live wave waits at it, until all waves are done.
fn schedule(
    ctx: &Ctx,
    code: &mut Code,
    group: &mut Group,
    stats: &mut ExecStats,
) -> Result<(), ExecFault> {
    loop {
        let mut progressed = false;
        for w in 0..group.waves.len() {
            if group.waves[w].done || group.waves[w].at_barrier {
                continue;
            }
            progressed = true;
            run_wave(ctx, code, group, w, stats)?;
        }
        let live = group.waves.iter().filter(|w| !w.done).count();
        if live == 0 {
            return Ok(());
        }
        if group.waves.iter().filter(|w| !w.done).all(|w| w.at_barrier) {
            for w in group.waves.iter_mut() {
                w.at_barrier = false;
            }
            continue;
        }
        if !progressed {
            return Err(ExecFault::Internal);
        }
    }
}

fn run_wave(
    ctx: &Ctx,
    code: &mut Code,
    g: &mut Group,
    w: usize,
    stats: &mut ExecStats,
) -> Result<(), ExecFault> {
    // One issue loop per lane count, compiled for the host's vector unit with the fast forms
    // inlined into it: a form costs no call and no per-issue feature or lane-count test.
    ctx.wide.run(
        #[inline(always)]
        || {
            if ctx.lanes == 32 {
                issue_loop::<32>(ctx, code, g, w, stats)
            } else {
                issue_loop::<64>(ctx, code, g, w, stats)
            }
        },
    )
}

#[inline(always)]
fn issue_loop<const N: usize>(
    ctx: &Ctx,
    code: &mut Code,
    g: &mut Group,
    w: usize,
    stats: &mut ExecStats,
) -> Result<(), ExecFault> {
    let many = g.waves.len() > 1;
    let (wave, lds, mem, tlb) = (&mut g.waves[w], &mut g.lds[..], g.mem, &mut g.tlb);
    // The counters live in registers while the wave runs and go back to `stats` when it
    // stops. The stop check counts down what is left to the next multiple of STOP_CHECK of
    // the worker's count, so it also happens across many short waves.
    let (start, mut n, mut lanes) = (stats.instructions, stats.instructions, 0u64);
    // Per class, in the loop's own frame (added to `stats` when the wave stops); eight
    // entries, so the class index is masked rather than bounds-checked.
    let mut issued = [0u64; 8];
    // (A count that is a multiple checks at once, as a wave that yields after its slice
    // resumes there.)
    let mut left = (STOP_CHECK - n % STOP_CHECK) % STOP_CHECK;
    // The float forms' denormal mode is the dispatch's (rsrc1): asked once.
    let ftz = fast::ftz32(wave);
    let r = 'issue: loop {
        if left == 0 {
            if ctx.stop.load(Ordering::Relaxed) {
                break Err(ExecFault::Stopped);
            }
            left = STOP_CHECK;
        }
        let mut pc = wave.pc;
        let mut s = match code.fetch(pc) {
            Ok(s) => s,
            Err(e) => break Err(e),
        };
        // Scalar waits and hints only advance the PC: they skip the rest of the issue (the
        // stop check's count includes them).
        while matches!(s.fast, Fast::Nop) && !s.vector && left > 1 {
            n += 1;
            issued[s.class as usize & 7] += 1;
            left -= 1;
            pc += 4 * s.inst.len as u64;
            s = match code.fetch(pc) {
                Ok(s) => s,
                Err(e) => {
                    wave.pc = pc;
                    break 'issue Err(e);
                }
            };
        }
        n += 1;
        left -= 1;
        issued[s.class as usize & 7] += 1;
        if s.vector {
            // One POPCNT in the wide copy (`simd`), cheaper than caching the count.
            lanes += fast::exec_of::<N>(wave).count_ones() as u64;
        }
        wave.pc = pc + 4 * s.inst.len as u64;
        let flow = match fast::issue::<N>(wave, lds, tlb, &s.fast, pc, ftz) {
            Ok(fast::Ran::Done) => continue,
            Ok(fast::Ran::General) => {
                stats.general[s.class as usize] += 1;
                step(ctx, wave, lds, mem, &s.inst, pc)
            }
            Ok(fast::Ran::Yield) => Ok(Flow::Yield),
            Ok(fast::Ran::MayYield) => Ok(Flow::MayYield),
            Err(e) => Err(e),
        };
        match flow {
            Ok(Flow::Next) => {}
            // A wave may spin on what another wave of its group stores: once it has had its
            // slice, the others run.
            Ok(Flow::MayYield) if many && n - start >= SLICE => break Ok(()),
            Ok(Flow::MayYield) => {}
            Ok(Flow::Yield) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    stats.instructions = n;
    stats.lane_instructions += lanes;
    for (t, k) in stats.issued.iter_mut().zip(issued) {
        *t += k;
    }
    r
}

enum Flow {
    Next,
    /// The wave ended or waits at a barrier.
    Yield,
    /// A backward branch or `s_sleep`: the other waves of the group get their turn.
    MayYield,
}

/// Whether `i` does nothing but advance the PC: the waits and hints of SOPP (memory is
/// performed at issue), the cache invalidations and GFX12's writebacks (memory is coherent).
pub(crate) fn no_effect(i: &Inst) -> bool {
    match i.format {
        Format::Sopp if (i.op as usize) < opcodes::SOPP.len() => scalar::sopp_nop(i.op),
        Format::Sopp => scalar12::sopp_nop(i.op),
        Format::Mubuf => mubuf::is_cache_inv(i),
        Format::Global => matches!(
            i.op,
            new_global::GLOBAL_INV | new_global::GLOBAL_WB | new_global::GLOBAL_WBINV
        ),
        _ => false,
    }
}

fn unsupported(i: &Inst, pc: u64) -> ExecFault {
    ExecFault::Unsupported {
        address: pc,
        text: i.to_string(),
    }
}

fn mem_fault(pc: u64) -> impl Fn(MemoryFault) -> ExecFault {
    move |fault| ExecFault::Memory { fault, pc }
}

fn step(
    ctx: &Ctx,
    wv: &mut Wave,
    lds: &mut [u8],
    mem: &dyn Memory,
    i: &Inst,
    pc: u64,
) -> Result<Flow, ExecFault> {
    // Semantic ids past gfx1100's tables are operations later generations brought.
    match i.format {
        Format::Sop2 if i.op as usize >= opcodes::SOP2.len() => {
            scalar12::sop2(wv, i, pc).map(|_| Flow::Next)
        }
        Format::Sop1 if i.op as usize >= opcodes::SOP1.len() => {
            scalar12::sop1(wv, i, pc).map(|_| Flow::Next)
        }
        Format::Sopc if i.op as usize >= opcodes::SOPC.len() => {
            scalar12::sopc(wv, i, pc).map(|_| Flow::Next)
        }
        Format::Sopp if i.op as usize >= opcodes::SOPP.len() => scalar12::sopp(wv, i, pc),
        Format::Sop2 => sop2(wv, i, pc).map(|_| Flow::Next),
        Format::Sop1 => sop1(wv, mem, i, pc).map(|_| Flow::Next),
        Format::Sopc => sopc(wv, i, pc).map(|_| Flow::Next),
        Format::Sopk => sopk(wv, mem, i, pc).map(|_| Flow::Next),
        Format::Sopp => sopp(wv, i, pc),
        Format::Smem => smem(wv, mem, i, pc).map(|_| Flow::Next),
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vop3sd => {
            let (mut v, t) = wv.as_valu();
            crate::valu::valu(&mut v, t, i, pc).map(|_| Flow::Next)
        }
        Format::Vop3p if i.dpp.is_none() => {
            let (mut v, t) = wv.as_valu();
            crate::valu::vop3p(&mut v, t, i, pc).map(|_| Flow::Next)
        }
        Format::Vop3p => Err(unsupported(i, pc)),
        Format::Vopd => {
            let (mut v, t) = wv.as_valu();
            crate::valu::vopd(&mut v, t, i, pc).map(|_| Flow::Next)
        }
        Format::Ds => ds(wv, lds, i, pc).map(|_| Flow::Next),
        Format::Mubuf => mubuf::mubuf(wv, mem, i, pc).map(|_| Flow::Next),
        // Memory is coherent at issue: GFX12's cache writeback and invalidate do nothing.
        Format::Global if no_effect(i) => Ok(Flow::Next),
        Format::Flat | Format::Global | Format::Scratch => {
            vmem(ctx, wv, lds, mem, i, pc).map(|_| Flow::Next)
        }
    }
}

impl Wave {
    fn as_valu(&mut self) -> (crate::valu::WaveRef<'_>, &mut [Lanes; 4]) {
        (
            crate::valu::WaveRef {
                sgpr: &mut self.sgpr,
                vgpr: &mut self.vgpr[..],
                nvgpr: self.nvgpr,
                acc: self.acc,
                lanes: self.lanes,
                scc: &mut self.scc,
                ftz32: (self.rsrc1 >> 16) & 3 != 3,
                ftz16_64: (self.rsrc1 >> 18) & 3 != 3,
                ieee: crate::valu::ieee_mode(self.rsrc1),
            },
            &mut self.tmp,
        )
    }
}

/// Opcodes below this are gfx1100's SMEM table; semantic ids from here on are GFX12's.
const SMEM_TABLE: u16 = opcodes::SMEM.len() as u16;

// Kept out of line so `step` stays a small dispatcher (its frame is paid per issue).
#[inline(never)]
fn smem(wv: &mut Wave, mem: &dyn Memory, i: &Inst, pc: u64) -> Result<(), ExecFault> {
    use op_smem::*;
    // Sub-dword loads (GFX12): bytes and sign extension.
    let (n, small) = match i.op {
        S_LOAD_B32 | S_BUFFER_LOAD_B32 => (1, None),
        S_LOAD_B64 | S_BUFFER_LOAD_B64 => (2, None),
        new_smem::S_LOAD_B96 => (3, None),
        S_LOAD_B128 | S_BUFFER_LOAD_B128 => (4, None),
        S_LOAD_B256 | S_BUFFER_LOAD_B256 => (8, None),
        S_LOAD_B512 | S_BUFFER_LOAD_B512 => (16, None),
        new_smem::S_LOAD_U8 => (1, Some((1, false))),
        new_smem::S_LOAD_I8 => (1, Some((1, true))),
        new_smem::S_LOAD_U16 => (1, Some((2, false))),
        new_smem::S_LOAD_I16 => (1, Some((2, true))),
        S_GL1_INV | S_DCACHE_INV => return Ok(()),
        // GFX9's writebacks: memory is coherent at issue.
        new_smem9::S_DCACHE_WB | new_smem9::S_DCACHE_WB_VOL | new_smem9::S_DCACHE_INV_VOL => {
            return Ok(());
        }
        // GFX9's clock reads: the GPU's clock, as `s_sendmsg_rtn` REALTIME reads it.
        new_smem9::S_MEMTIME | new_smem9::S_MEMREALTIME => {
            wv.swrite64(i.dst, mem.clock_ticks());
            return Ok(());
        }
        _ => return Err(unsupported(i, pc)),
    };
    if (S_BUFFER_LOAD_B32..SMEM_TABLE).contains(&i.op) {
        return mubuf::s_buffer_load(wv, mem, i, pc, n);
    }
    let base = wv.sread64(i.src[0], 0, false) & 0xffff_ffff_ffff;
    let soff = if i.saddr == src::NULL {
        0
    } else {
        wv.sread(i.saddr, 0) as u64
    };
    if let Some((bytes, signed)) = small {
        let addr = base.wrapping_add(i.imm as i64 as u64).wrapping_add(soff);
        // Naturally aligned like the hardware's (the low bits below the size are ignored).
        let a = addr & !(bytes as u64 - 1);
        let mut b = [0u8; 2];
        mem.read(a, &mut b[..bytes]).map_err(mem_fault(pc))?;
        let v = match (bytes, signed) {
            (1, false) => b[0] as u32,
            (1, true) => b[0] as i8 as i32 as u32,
            (_, false) => u16::from_le_bytes(b) as u32,
            (_, true) => i16::from_le_bytes(b) as i32 as u32,
        };
        wv.swrite(i.dst, v);
        return Ok(());
    }
    let d = if n >= 3 {
        i.dst & !3
    } else if n == 2 {
        i.dst & !1
    } else {
        i.dst
    };
    s_load(wv, mem, base, i.imm, soff, d as usize, n, pc)
}

/// `n` dwords (at most 16) at `base + imm + soff` (dword-aligned down) into the SGPRs from
/// `d` (those past the writable ones are dropped).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn s_load(
    wv: &mut Wave,
    mem: &dyn Memory,
    base: u64,
    imm: i32,
    soff: u64,
    d: usize,
    n: usize,
    pc: u64,
) -> Result<(), ExecFault> {
    let addr = base.wrapping_add(imm as i64 as u64).wrapping_add(soff) & !3;
    let mut buf = [0u8; 64];
    mem.read(addr, &mut buf[..4 * n]).map_err(mem_fault(pc))?;
    for (k, c) in buf[..4 * n].as_chunks::<4>().0.iter().enumerate() {
        wv.swrite((d + k) as u16, u32::from_le_bytes(*c));
    }
    Ok(())
}
