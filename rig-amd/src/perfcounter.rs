//! The SQ's performance counters on GFX12, and the PM4 that counts a launch with them.
//!
//! Each shader engine's SQ (the sequencer that issues its waves' instructions) has eight
//! counters on GC 12: `SQ_PERFCOUNTERn_SELECT` picks what counter `n` counts (its `PERF_SEL`,
//! a value of `soc24_enum.h`'s `SQ_PERF_SEL`), `SQ_PERFCOUNTERn_LO` holds its 32-bit count
//! (GC 12's SQ counters have no `_HI` half), `SQ_PERFCOUNTER_CTRL` says which shader types
//! count (`CS_EN` for compute) and `SQ_PERFCOUNTER_CTRL2` which VMIDs (`VMID_EN`, one bit
//! each), and the CP's `CP_CP_PERFMON_CNTL` starts, stops and resets every counter of the GPU
//! at once (its `PERFMON_STATE`, a `CP_PERFMON_STATE`). `GRBM_GFX_INDEX` picks the shader
//! engine a register access reaches, or broadcasts writes to all. Offsets, fields and enum
//! values are those of the generated tables ([`crate::mmio::tables`]); a register is named in
//! a packet by its absolute dword offset, its segment's base (`GC_BASE__INST0_SEG1`, 0xa000 on
//! GFX10 and later in the navi and soc21 IP offset headers) plus its offset.
//!
//! A measured launch ([`begin`], [`end`]) runs between two PM4 sequences on the compute queue:
//! the first resets the counters, selects them, filters them to compute waves of one VMID and
//! starts counting; the second, once the dispatch before it has completed, stops counting and
//! copies each counter of each shader engine to memory as a [`Record`] lays them out. A count
//! saturates at 2^32 - 1, which therefore says the count is unknown.
//!
//! The counters rig offers ([`Counter`]) and the rules a measure's list must keep
//! ([`plan`]: GFX12 of one die, known SQ counters, each once, at most [`MOST_COUNTERS`] with
//! `SQ_WAVES`, which is always counted and always first) are stated here once.

use crate::gpu::{Generation, Gpu};
use crate::mmio::tables::{
    CP_PERFMON_STATE_SOC24, GC_12_0_0, PERF_BLOCKS_SOC24, SQ_PERF_SEL_SOC24,
};
use crate::mmio::{Reg, Table};
use crate::pm4::{self, CopyData, CopyDst, CopySrc, EncodeError, EventWrite, Packet, WriteData};

/// The counters of one SQ that count at once.
pub const SQ_COUNTERS: usize = 8;

/// The most counters a measure counts, `SQ_WAVES` among them.
pub const MOST_COUNTERS: usize = 4;

/// `GC_BASE__INST0_SEG1` on GFX10 and later (the navi and soc21 IP offset headers): the base
/// of the GC segment the perfmon registers lie in (`_BASE_IDX` 1).
pub const GC_SEG1_BASE: u32 = 0xa000;

/// EVENT_WRITE's `PERFCOUNTER_START` event (`soc24_enum.h`'s `VGT_EVENT_TYPE`).
pub const EVENT_PERFCOUNTER_START: u8 = 0x17;
/// EVENT_WRITE's `PERFCOUNTER_STOP` event.
pub const EVENT_PERFCOUNTER_STOP: u8 = 0x18;
/// EVENT_WRITE's `PERFCOUNTER_SAMPLE` event.
pub const EVENT_PERFCOUNTER_SAMPLE: u8 = 0x1b;

/// A counter of the SQ that rig offers, named as the hardware's select is, with the block's
/// `SQ_` prefix (`SQ_WAVES` is `SQ_PERF_SEL_WAVES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// Waves launched.
    Waves,
    /// Vector ALU instructions issued (one per wave).
    InstsValu,
    /// Scalar ALU instructions issued.
    InstsSalu,
    /// Scalar memory instructions issued.
    InstsSmem,
    /// FLAT, GLOBAL and SCRATCH instructions issued (GFX12's VFLAT, VGLOBAL and VSCRATCH).
    InstsFlat,
    /// Buffer and image instructions issued (GFX12's VBUFFER, VIMAGE and VSAMPLE).
    InstsTex,
    /// LDS instructions issued.
    InstsLds,
    /// Branch instructions issued (`s_branch` and `s_cbranch_*`), taken or not.
    InstsBranch,
    /// Wave-cycles: each cycle counts the waves resident then.
    WaveCycles,
    /// Cycles with at least one wave resident.
    BusyCycles,
}

impl Counter {
    /// Every counter rig offers, `SQ_WAVES` first.
    pub const ALL: [Counter; 10] = [
        Counter::Waves,
        Counter::InstsValu,
        Counter::InstsSalu,
        Counter::InstsSmem,
        Counter::InstsFlat,
        Counter::InstsTex,
        Counter::InstsLds,
        Counter::InstsBranch,
        Counter::WaveCycles,
        Counter::BusyCycles,
    ];

    /// Its name less `SQ_`, as the select enum names it (less `SQ_PERF_SEL_`).
    fn select_name(self) -> &'static str {
        match self {
            Counter::Waves => "WAVES",
            Counter::InstsValu => "INSTS_VALU",
            Counter::InstsSalu => "INSTS_SALU",
            Counter::InstsSmem => "INSTS_SMEM",
            Counter::InstsFlat => "INSTS_FLAT",
            Counter::InstsTex => "INSTS_TEX",
            Counter::InstsLds => "INSTS_LDS",
            Counter::InstsBranch => "INSTS_BRANCH",
            Counter::WaveCycles => "WAVE_CYCLES",
            Counter::BusyCycles => "BUSY_CYCLES",
        }
    }

    /// What it counts, in a line (what `rigctl counters` prints).
    pub fn about(self) -> &'static str {
        match self {
            Counter::Waves => "waves launched",
            Counter::InstsValu => "vector ALU instructions issued, one per wave",
            Counter::InstsSalu => "scalar ALU instructions issued",
            Counter::InstsSmem => "scalar memory instructions issued",
            Counter::InstsFlat => "FLAT, GLOBAL and SCRATCH instructions issued",
            Counter::InstsTex => "buffer and image instructions issued",
            Counter::InstsLds => "LDS instructions issued",
            Counter::InstsBranch => "branches issued, taken or not",
            Counter::WaveCycles => "wave-cycles: per cycle, the waves resident",
            Counter::BusyCycles => "cycles with a wave resident",
        }
    }

    /// Its name (`SQ_WAVES`).
    pub fn name(self) -> String {
        format!("SQ_{}", self.select_name())
    }

    /// The counter named `name` (`SQ_WAVES`).
    pub fn by_name(name: &str) -> Option<Counter> {
        let rest = name.strip_prefix("SQ_")?;
        Counter::ALL.into_iter().find(|c| c.select_name() == rest)
    }

    /// Its `PERF_SEL` in `SQ_PERFCOUNTERn_SELECT` on GC 12.
    pub fn select(self) -> u32 {
        let name = self.select_name();
        SQ_PERF_SEL_SOC24
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            // PANIC: the generator stops unless the header has every name of Counter::ALL
            // (a unit test checks each is in the table).
            .unwrap_or_else(|| panic!("SQ_PERF_SEL_{name} is not in the generated table"))
    }

    /// The counter whose select is `select`, if rig offers it.
    pub fn of_select(select: u32) -> Option<Counter> {
        Counter::ALL.into_iter().find(|c| c.select() == select)
    }
}

/// Why a measure's counters cannot be counted (make's errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasureError {
    /// Measures count the SQ counters of GFX12, on GPUs of one die.
    #[error("measures need a GFX12 GPU of one die; {processor} is {why}")]
    NotGfx12OneDie {
        /// The GPU's processor (`gfx942`).
        processor: String,
        /// What it is instead (`a GFX9 GPU`, `a GPU of 8 dies`).
        why: String,
    },
    /// A counter no SQ of GFX12 has (or rig does not offer).
    #[error("no SQ counter is named `{name}` (rigctl counters lists those a GPU offers)")]
    Unknown {
        /// The name as given.
        name: String,
    },
    /// A counter listed twice.
    #[error("counter `{name}` is listed twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A counter of another block than the SQ.
    #[error("`{name}` is a counter of the {block} block, not the SQ: measures count SQ counters")]
    NotSq {
        /// The name.
        name: String,
        /// Its block (`GRBM`).
        block: String,
    },
    /// More counters than a measure counts at once.
    #[error(
        "{count} counters with SQ_WAVES: a measure counts at most {MOST_COUNTERS}, SQ_WAVES one of them"
    )]
    TooMany {
        /// How many the list asks for, `SQ_WAVES` counted once whether listed or not.
        count: usize,
    },
}

/// Whether `gpu` can measure: a GFX12 GPU of one die.
pub fn supports(gpu: &Gpu) -> Result<(), MeasureError> {
    let why = match gpu.generation() {
        Generation::Gfx9 => "a GFX9 GPU".to_owned(),
        Generation::Gfx11 => "a GFX11 GPU".to_owned(),
        Generation::Gfx12 if gpu.dies != 1 => format!("a GPU of {} dies", gpu.dies),
        Generation::Gfx12 => return Ok(()),
    };
    Err(MeasureError::NotGfx12OneDie {
        processor: gpu.name(),
        why,
    })
}

/// The counters a measure of `names` on `gpu` counts, `SQ_WAVES` first (added if absent), the
/// rest in the order listed; or why it cannot.
pub fn plan<S: AsRef<str>>(gpu: &Gpu, names: &[S]) -> Result<Vec<Counter>, MeasureError> {
    supports(gpu)?;
    let mut out = vec![Counter::Waves];
    let mut listed: Vec<&str> = Vec::with_capacity(names.len());
    for name in names.iter().map(AsRef::as_ref) {
        if listed.contains(&name) {
            return Err(MeasureError::Duplicate { name: name.into() });
        }
        listed.push(name);
        let Some(c) = Counter::by_name(name) else {
            // The longest block prefix the header names (SQG_ before SQ_).
            let block = PERF_BLOCKS_SOC24
                .iter()
                .filter(|b| {
                    name.strip_prefix(**b)
                        .is_some_and(|rest| rest.starts_with('_'))
                })
                .max_by_key(|b| b.len());
            return Err(match block {
                Some(b) if *b != "SQ" => MeasureError::NotSq {
                    name: name.into(),
                    block: (*b).into(),
                },
                _ => MeasureError::Unknown { name: name.into() },
            });
        };
        if c != Counter::Waves {
            out.push(c);
        }
    }
    if out.len() > MOST_COUNTERS {
        return Err(MeasureError::TooMany { count: out.len() });
    }
    Ok(out)
}

/// The perfmon registers of GC 12, by absolute dword offset (what WRITE_DATA and COPY_DATA
/// name), from the generated table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    /// `SQ_PERFCOUNTERn_SELECT`, n in 0..8.
    pub select: [u32; SQ_COUNTERS],
    /// `SQ_PERFCOUNTERn_LO`.
    pub lo: [u32; SQ_COUNTERS],
    /// `SQ_PERFCOUNTER_CTRL`.
    pub ctrl: u32,
    /// `SQ_PERFCOUNTER_CTRL2`.
    pub ctrl2: u32,
    /// `CP_CP_PERFMON_CNTL`.
    pub cp_perfmon_cntl: u32,
    /// `GRBM_GFX_INDEX`.
    pub grbm_gfx_index: u32,
}

fn reg(t: &'static Table, name: &str) -> &'static Reg {
    // PANIC: the generator emits every register of SQ_PERF for gc_12_0_0 (a unit test reads
    // them all).
    t.reg(name)
        .unwrap_or_else(|| panic!("{name} is not in the generated {} table", t.name))
}

fn absolute(r: &Reg) -> u32 {
    // Every perfmon register lies in segment 1 (a unit test checks it).
    r.offset + GC_SEG1_BASE
}

impl Regs {
    /// GC 12's.
    pub fn gfx12() -> Regs {
        let t = &GC_12_0_0;
        let a = |name: &str| absolute(reg(t, name));
        Regs {
            select: std::array::from_fn(|n| a(&format!("SQ_PERFCOUNTER{n}_SELECT"))),
            lo: std::array::from_fn(|n| a(&format!("SQ_PERFCOUNTER{n}_LO"))),
            ctrl: a("SQ_PERFCOUNTER_CTRL"),
            ctrl2: a("SQ_PERFCOUNTER_CTRL2"),
            cp_perfmon_cntl: a("CP_CP_PERFMON_CNTL"),
            grbm_gfx_index: a("GRBM_GFX_INDEX"),
        }
    }
}

/// A field of a GC 12 register.
pub fn field(register: &str, name: &str) -> crate::regs::Field {
    // PANIC: the callers name fields the header states (unit tests reach every one).
    reg(&GC_12_0_0, register)
        .field(name)
        .unwrap_or_else(|| panic!("{register}.{name} is not in the generated table"))
}

/// A `CP_PERFMON_STATE` value.
pub fn perfmon_state(name: &str) -> u32 {
    CP_PERFMON_STATE_SOC24
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, v)| v)
        // PANIC: the generator emits each state this module names.
        .unwrap_or_else(|| panic!("CP_PERFMON_STATE_{name} is not in the generated table"))
}

/// `GRBM_GFX_INDEX` reaching every shader engine, shader array and instance (writes
/// broadcast).
pub fn broadcast() -> u32 {
    field("GRBM_GFX_INDEX", "SE_BROADCAST_WRITES").mask()
        | field("GRBM_GFX_INDEX", "SA_BROADCAST_WRITES").mask()
        | field("GRBM_GFX_INDEX", "INSTANCE_BROADCAST_WRITES").mask()
}

/// `GRBM_GFX_INDEX` reaching shader engine `se` (every shader array and instance of it).
pub fn one_engine(se: u32) -> u32 {
    field("GRBM_GFX_INDEX", "SE_INDEX").put(se)
        | field("GRBM_GFX_INDEX", "SA_BROADCAST_WRITES").mask()
        | field("GRBM_GFX_INDEX", "INSTANCE_BROADCAST_WRITES").mask()
}

/// Where a measured launch's counts go: one 32-bit value per counter per shader engine,
/// counter-major (counter `c`'s value on engine `se` at `4 * (c * engines + se)`), the counters
/// in [`plan`]'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The 4-byte-aligned GPU address of the first value.
    pub address: u64,
    /// The counters measured.
    pub counters: usize,
    /// The GPU's shader engines.
    pub engines: u32,
}

impl Record {
    /// Bytes of the record.
    pub const fn bytes(&self) -> u64 {
        4 * self.counters as u64 * self.engines as u64
    }

    /// The address of counter `c`'s value on engine `se`.
    pub const fn at(&self, c: usize, se: u32) -> u64 {
        self.address + 4 * (c as u64 * self.engines as u64 + se as u64)
    }
}

fn write_reg(out: &mut Vec<u32>, register: u32, value: u32) -> Result<(), EncodeError> {
    let data = [value];
    out.extend(
        Packet::WriteData(WriteData {
            dst_sel: 0,
            one_addr: false,
            wr_confirm: true,
            cache_policy: 0,
            engine_sel: 0,
            address: u64::from(register),
            data: &data,
        })
        .to_words()?,
    );
    Ok(())
}

fn event(out: &mut Vec<u32>, event_type: u8, event_index: u8) -> Result<(), EncodeError> {
    out.extend(
        Packet::EventWrite(EventWrite {
            event_type,
            event_index,
            address: None,
        })
        .to_words()?,
    );
    Ok(())
}

/// The PM4 that starts counting `counters` for compute waves of `vmid`: every counter reset
/// (the CP's perfmon state disabled and reset), the selects written to every engine, the SQ
/// filtered to compute waves of `vmid`, then counting started. The counters not selected
/// select nothing (`SQ_PERF_SEL_NONE`, 0).
pub fn begin(counters: &[Counter], vmid: u32) -> Result<Vec<u32>, EncodeError> {
    let r = Regs::gfx12();
    let mut out = Vec::with_capacity(64);
    let state = field("CP_CP_PERFMON_CNTL", "PERFMON_STATE");
    write_reg(&mut out, r.grbm_gfx_index, broadcast())?;
    write_reg(
        &mut out,
        r.cp_perfmon_cntl,
        state.put(perfmon_state("DISABLE_AND_RESET")),
    )?;
    for (n, select) in r.select.iter().enumerate() {
        let sel = counters.get(n).map_or(0, |c| c.select());
        write_reg(
            &mut out,
            *select,
            field("SQ_PERFCOUNTER0_SELECT", "PERF_SEL").put(sel),
        )?;
    }
    write_reg(
        &mut out,
        r.ctrl,
        field("SQ_PERFCOUNTER_CTRL", "CS_EN").mask(),
    )?;
    let vmid_en = field("SQ_PERFCOUNTER_CTRL2", "VMID_EN");
    write_reg(
        &mut out,
        r.ctrl2,
        vmid_en.put(1u32.checked_shl(vmid).unwrap_or(0)),
    )?;
    event(&mut out, EVENT_PERFCOUNTER_START, 0)?;
    write_reg(
        &mut out,
        r.cp_perfmon_cntl,
        state.put(perfmon_state("START_COUNTING")),
    )?;
    Ok(out)
}

/// The PM4 that ends a measured launch: once the dispatches before it have completed (a CS
/// partial flush), counting stops and each counter of each engine is copied to `record`
/// (COPY_DATA of `SQ_PERFCOUNTERn_LO` with `GRBM_GFX_INDEX` on that engine), confirmed, and
/// `GRBM_GFX_INDEX` broadcasts again.
pub fn end(counters: &[Counter], record: Record) -> Result<Vec<u32>, EncodeError> {
    let r = Regs::gfx12();
    let mut out = Vec::with_capacity(16 + 12 * counters.len() * record.engines as usize);
    event(
        &mut out,
        pm4::EVENT_CS_PARTIAL_FLUSH,
        pm4::EVENT_INDEX_PARTIAL_FLUSH,
    )?;
    let state = field("CP_CP_PERFMON_CNTL", "PERFMON_STATE");
    event(&mut out, EVENT_PERFCOUNTER_SAMPLE, 0)?;
    event(&mut out, EVENT_PERFCOUNTER_STOP, 0)?;
    write_reg(
        &mut out,
        r.cp_perfmon_cntl,
        state.put(perfmon_state("STOP_COUNTING"))
            | field("CP_CP_PERFMON_CNTL", "PERFMON_SAMPLE_ENABLE").mask(),
    )?;
    for se in 0..record.engines {
        write_reg(&mut out, r.grbm_gfx_index, one_engine(se))?;
        for (c, lo) in r.lo.iter().take(counters.len()).enumerate() {
            out.extend(
                Packet::CopyData(CopyData {
                    src_sel: CopySrc::Register,
                    dst_sel: CopyDst::Memory,
                    src_cache_policy: 0,
                    count_64: false,
                    wr_confirm: true,
                    dst_cache_policy: 0,
                    engine_sel: 0,
                    src: u64::from(*lo),
                    dst: record.at(c, se),
                })
                .to_words()?,
            );
        }
    }
    write_reg(&mut out, r.grbm_gfx_index, broadcast())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registers_are_the_headers() {
        // gc_12_0_0_offset.h, segment 1: regSQ_PERFCOUNTER0_SELECT 0x39c0, regSQ_PERFCOUNTER0_LO
        // 0x31c0, regGRBM_GFX_INDEX 0x2200 (Mesa's byte addresses 0x36700, 0x34700, 0x30800).
        let r = Regs::gfx12();
        assert_eq!(r.select[0] * 4, 0x36700);
        assert_eq!(r.select[7], r.select[0] + 7);
        assert_eq!(r.lo[0] * 4, 0x34700);
        assert_eq!(r.lo[1], r.lo[0] + 2);
        assert_eq!(r.grbm_gfx_index * 4, 0x30800);
        for name in [
            "SQ_PERFCOUNTER_CTRL",
            "SQ_PERFCOUNTER_CTRL2",
            "CP_CP_PERFMON_CNTL",
        ] {
            assert_eq!(reg(&GC_12_0_0, name).base_index, 1, "{name}");
        }
        for n in 0..SQ_COUNTERS {
            for name in [
                format!("SQ_PERFCOUNTER{n}_SELECT"),
                format!("SQ_PERFCOUNTER{n}_LO"),
            ] {
                assert_eq!(reg(&GC_12_0_0, &name).base_index, 1, "{name}");
            }
        }
        assert_eq!(field("SQ_PERFCOUNTER_CTRL2", "VMID_EN").shift, 1);
        assert_eq!(one_engine(3) & 0xf_0000, 3 << 16);
        assert_eq!(broadcast() >> 29, 7);
    }

    #[test]
    fn every_counter_has_its_select() {
        // soc24_enum.h: SQ_PERF_SEL_WAVES 0x4, SQ_PERF_SEL_INSTS_VALU 0x32.
        assert_eq!(Counter::Waves.select(), 4);
        assert_eq!(Counter::InstsValu.select(), 0x32);
        for c in Counter::ALL {
            assert_eq!(Counter::by_name(&c.name()), Some(c));
            assert_eq!(Counter::of_select(c.select()), Some(c));
        }
        assert_eq!(Counter::ALL[0].name(), "SQ_WAVES");
    }

    #[test]
    fn a_plan_keeps_makes_rules() {
        let g = Gpu::by_name("gfx1201").unwrap();
        assert_eq!(
            plan(g, &["SQ_INSTS_VALU"]).unwrap(),
            [Counter::Waves, Counter::InstsValu]
        );
        assert_eq!(
            plan(g, &["SQ_INSTS_SALU", "SQ_WAVES"]).unwrap(),
            [Counter::Waves, Counter::InstsSalu]
        );
        assert_eq!(plan::<&str>(g, &[]).unwrap(), [Counter::Waves]);
        assert!(matches!(
            plan(g, &["SQ_NOPE"]),
            Err(MeasureError::Unknown { .. })
        ));
        assert!(matches!(
            plan(g, &["SQ_WAVES", "SQ_WAVES"]),
            Err(MeasureError::Duplicate { .. })
        ));
        assert_eq!(
            plan(g, &["GRBM_COUNT"]),
            Err(MeasureError::NotSq {
                name: "GRBM_COUNT".into(),
                block: "GRBM".into()
            })
        );
        assert!(matches!(
            plan(g, &["SQG_WAVES"]),
            Err(MeasureError::NotSq { .. })
        ));
        let four = ["SQ_INSTS_VALU", "SQ_INSTS_SALU", "SQ_INSTS_LDS"];
        assert_eq!(plan(g, &four).unwrap().len(), 4);
        assert_eq!(
            plan(g, &[four[0], four[1], four[2], "SQ_INSTS_FLAT"]),
            Err(MeasureError::TooMany { count: 5 })
        );
        for other in ["gfx1100", "gfx942"] {
            let e = plan(Gpu::by_name(other).unwrap(), &["SQ_WAVES"]).unwrap_err();
            assert!(matches!(e, MeasureError::NotGfx12OneDie { .. }), "{e}");
        }
    }

    #[test]
    fn the_sequences_decode_as_the_registers_they_name() {
        let r = Regs::gfx12();
        let counters = [Counter::Waves, Counter::InstsValu];
        let words = begin(&counters, 5).unwrap();
        let mut writes = Vec::new();
        for p in pm4::packets(&words) {
            if let (_, Packet::WriteData(w)) = p.unwrap() {
                writes.push((w.address as u32, w.data[0]));
            }
        }
        assert!(writes.contains(&(r.select[0], 4)));
        assert!(writes.contains(&(r.select[1], 0x32)));
        assert!(writes.contains(&(r.select[2], 0)));
        assert!(writes.contains(&(r.ctrl2, 1 << (5 + 1))));
        assert_eq!(writes.last(), Some(&(r.cp_perfmon_cntl, 1)));
        let rec = Record {
            address: 0x1000,
            counters: 2,
            engines: 4,
        };
        let words = end(&counters, rec).unwrap();
        let copies: Vec<(u64, u64)> = pm4::packets(&words)
            .filter_map(|p| match p.unwrap() {
                (_, Packet::CopyData(c)) => Some((c.src, c.dst)),
                _ => None,
            })
            .collect();
        assert_eq!(copies.len(), 8);
        assert!(copies.contains(&(u64::from(r.lo[1]), rec.at(1, 3))));
        assert_eq!(rec.at(1, 3), 0x1000 + 4 * 7);
        assert_eq!(rec.bytes(), 32);
    }
}
