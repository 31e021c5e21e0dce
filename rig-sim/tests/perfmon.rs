//! The SQ's performance counters of the simulated gfx1201, reached by the PM4 rig-amd's
//! `perfcounter` writes around a dispatch: each counter of each shader engine is what the
//! kernel's code and the grid predict, under the VMID filter the registers select.
//!
//! The prediction walks the kernel's machine code as each wave runs it (straight on, a
//! conditional branch on EXEC taken where the wave has no work-item in range) and counts by
//! the hardware counters' definitions: SOP1/SOP2/SOPC/SOPK are SALU, SOPP's branches are
//! branches (its other instructions count in no class), SMEM, VOP*, DS, FLAT/GLOBAL/SCRATCH
//! and MUBUF their own. Engine `g % 4` runs workgroup `g`; a group's waves stay resident
//! until it ends, one instruction issuing a cycle.

mod common;

use common::*;
use rig_amd::code_object::{CodeObject, Kernel};
use rig_amd::gpu::{Generation, QueueKind};
use rig_amd::kernarg::{self, Grid};
use rig_amd::perfcounter::{self, Counter, Record};
use rig_amd::pm4::{self, Packet, ReleaseMem};
use rig_amd::regs::{self, initiator};
use rig_isa::{Format, Isa};
use rig_shm::SharedRegion;
use rig_sim::{AddressSpace, FaultReason, QueueStatus};

const CODE_VA: u64 = 0x5_0000_0000;
const GROUP: u32 = 64;
/// Where the counters' record lies in the staged host memory.
const RECORD: usize = 3072;
/// Where the release writes 1 once the record is stored.
const DONE: usize = 2048;

/// A kernel placed at `CODE_VA`, with its code's words from its entry on.
struct Placed {
    kernel: Kernel,
    code: Vec<u32>,
}

/// The gfx1201 build of `name` placed at `CODE_VA`; `None`, saying so, when absent.
fn place(space: &AddressSpace, name: &str) -> Option<Placed> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../kernels/out/gfx1201/{name}.co"));
    let Ok(bytes) = std::fs::read(&path) else {
        println!(
            "skipped: {} is absent (kernels/build.sh makes it)",
            path.display()
        );
        return None;
    };
    let co = CodeObject::parse(&bytes).unwrap();
    let mut image = vec![0u8; co.image_size() as usize];
    co.place(CODE_VA, &mut image).unwrap();
    space
        .alloc_vram(CODE_VA, (image.len() as u64).div_ceil(4096) * 4096)
        .unwrap();
    space.write(CODE_VA, &image).unwrap();
    let kernel = co.kernel(name).unwrap().clone();
    let code = image[kernel.code_offset() as usize..]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    Some(Placed { kernel, code })
}

/// What one wave issues, by the counters' classes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Issued {
    valu: u64,
    salu: u64,
    smem: u64,
    flat: u64,
    tex: u64,
    lds: u64,
    branch: u64,
    all: u64,
}

/// Walks `k`'s code as a wave runs it; `empty`: the wave has no work-item in range, so a
/// branch on EXEC being zero is taken.
fn walk(words: &[u32], empty: bool) -> Issued {
    let (mut at, mut n) = (0usize, Issued::default());
    loop {
        let inst = rig_isa::decode_isa(Isa::Gfx12, &words[at..]).unwrap();
        let text = inst.to_string();
        let mnemonic = text.split(' ').next().unwrap().to_owned();
        n.all += 1;
        let next = at + usize::from(inst.len);
        match inst.format {
            Format::Sopp => {
                let target = (at as i64 + 1 + i64::from(inst.imm as u16 as i16)) as usize;
                match mnemonic.as_str() {
                    "s_endpgm" => return n,
                    "s_branch" => {
                        n.branch += 1;
                        at = target;
                        continue;
                    }
                    "s_cbranch_execz" => {
                        n.branch += 1;
                        at = if empty { target } else { next };
                        continue;
                    }
                    m if m.starts_with("s_cbranch") => {
                        panic!("{m}: the walk predicts branches on EXEC only")
                    }
                    _ => {}
                }
            }
            Format::Sop1 | Format::Sop2 | Format::Sopc | Format::Sopk => n.salu += 1,
            Format::Smem => n.smem += 1,
            Format::Vop1
            | Format::Vop2
            | Format::Vopc
            | Format::Vop3
            | Format::Vop3sd
            | Format::Vop3p
            | Format::Vopd => n.valu += 1,
            Format::Ds => n.lds += 1,
            Format::Flat | Format::Global | Format::Scratch => n.flat += 1,
            Format::Mubuf => n.tex += 1,
        }
        at = next;
    }
}

impl Issued {
    fn of(&self, c: Counter) -> Option<u64> {
        Some(match c {
            Counter::InstsValu => self.valu,
            Counter::InstsSalu => self.salu,
            Counter::InstsSmem => self.smem,
            Counter::InstsFlat => self.flat,
            Counter::InstsTex => self.tex,
            Counter::InstsLds => self.lds,
            Counter::InstsBranch => self.branch,
            _ => return None,
        })
    }
}

/// Each counter's value on each of `engines` engines for `groups` workgroups of `GROUP`
/// work-items in wave32, of which the first `items` are in range.
fn predict(
    code: &[u32],
    groups: u32,
    items: u64,
    engines: u32,
    counters: &[Counter],
) -> Vec<Vec<u64>> {
    let (full, empty) = (walk(code, false), walk(code, true));
    let per_group = GROUP / 32;
    let mut out = vec![vec![0u64; engines as usize]; counters.len()];
    for g in 0..groups {
        let se = (g % engines) as usize;
        let waves: Vec<Issued> = (0..per_group)
            .map(|w| {
                let first = u64::from(g * GROUP + w * 32);
                if first >= items { empty } else { full }
            })
            .collect();
        let group_instructions: u64 = waves.iter().map(|w| w.all).sum();
        for (c, counter) in counters.iter().enumerate() {
            out[c][se] += match counter {
                Counter::Waves => u64::from(per_group),
                Counter::BusyCycles => group_instructions,
                Counter::WaveCycles => u64::from(per_group) * group_instructions,
                class => waves.iter().map(|w| w.of(*class).unwrap()).sum(),
            };
        }
    }
    out
}

/// The PM4 of one dispatch of `k` over `groups` groups with arguments at `args`.
fn dispatch(k: &Kernel, args: u64, groups: u32) -> Vec<u32> {
    let set = |offset: u16, values: &[u32]| {
        Packet::SetShReg(pm4::SetShReg { offset, values })
            .to_words()
            .unwrap()
    };
    let props = k.code_properties();
    let mut user = Vec::new();
    for (bit, words) in [(0u16, 4), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1)] {
        if props & (1 << bit) != 0 {
            if bit == 3 {
                user.extend([args as u32, (args >> 32) as u32]);
            } else {
                user.extend(std::iter::repeat_n(0, words));
            }
        }
    }
    let c = regs::compute(Generation::Gfx12);
    let code = CODE_VA + k.code_offset();
    let mut w = set(c.pgm_lo, &[(code >> 8) as u32, (code >> 40) as u32]);
    w.extend(set(c.pgm_rsrc1, &[k.rsrc1(), k.rsrc2()]));
    w.extend(set(c.pgm_rsrc3, &[k.rsrc3()]));
    w.extend(set(c.num_thread_x, &[GROUP, 1, 1]));
    w.extend(set(c.user_data_0, &user));
    assert!(!k.wave64());
    w.extend(
        Packet::DispatchDirect(pm4::DispatchDirect {
            dim: [groups, 1, 1],
            initiator: initiator::COMPUTE_SHADER_EN
                | initiator::FORCE_START_AT_000
                | initiator::CS_W32_EN,
        })
        .to_words()
        .unwrap(),
    );
    w
}

/// Host memory at `HOST_VA`: kernel arguments at 0 (`params` laid out for `k` over `groups`
/// groups), then 4096 bytes of input or output per buffer argument from 4096.
fn stage(space: &AddressSpace, k: &Kernel, params: &[u8], groups: u32) -> SharedRegion {
    let mem = host(space, HOST_VA, 4096 * 8);
    let grid = Grid {
        groups: [groups, 1, 1],
        group_size: [GROUP, 1, 1],
        dynamic_lds: 0,
    };
    let mut ka = vec![0u8; 1024];
    let n = kernarg::layout(k.plan(), params, &[], &grid, &mut ka).unwrap();
    mem.write(0, &ka[..n]);
    mem
}

/// Measures one launch: begin, the dispatch, end with the record at `RECORD`, a release of 1
/// at `DONE`; returns each counter's value per engine.
fn measure(
    q: &mut TestQueue,
    mem: &SharedRegion,
    counters: &[Counter],
    filter_vmid: u32,
    launch: &[u32],
    engines: u32,
) -> Vec<Vec<u64>> {
    let record = Record {
        address: HOST_VA + RECORD as u64,
        counters: counters.len(),
        engines,
    };
    mem.write(DONE, &[0; 8]);
    let mut w = perfcounter::begin(counters, filter_vmid).unwrap();
    w.extend(launch);
    w.extend(perfcounter::end(counters, record).unwrap());
    w.extend(
        Packet::ReleaseMem(ReleaseMem::timeline(0, HOST_VA + DONE as u64, 1))
            .to_words()
            .unwrap(),
    );
    q.submit(&w);
    wait_for("the release after the record", || {
        mem.load_u32(DONE, std::sync::atomic::Ordering::Acquire) == 1
    });
    assert_eq!(q.status(), QueueStatus::Running);
    (0..counters.len())
        .map(|c| {
            (0..engines)
                .map(|se| {
                    let mut b = [0u8; 4];
                    mem.read((record.at(c, se) - HOST_VA) as usize, &mut b);
                    u64::from(u32::from_le_bytes(b))
                })
                .collect()
        })
        .collect()
}

/// The counters, eight at once as the SQ has them, then the rest.
const FIRST: [Counter; 8] = [
    Counter::Waves,
    Counter::InstsValu,
    Counter::InstsSalu,
    Counter::InstsSmem,
    Counter::InstsFlat,
    Counter::InstsLds,
    Counter::InstsBranch,
    Counter::WaveCycles,
];
const SECOND: [Counter; 3] = [Counter::Waves, Counter::BusyCycles, Counter::InstsTex];

fn check_kernel(name: &str, groups: u32, items: u64, params: impl Fn(u64) -> Vec<u8>) {
    let gpu = gpu("gfx1201");
    let engines = gpu.model().shader_engines;
    let space = gpu.create_address_space();
    let Some(Placed { kernel: k, code }) = place(&space, name) else {
        return;
    };
    let mem = stage(&space, &k, &params(HOST_VA + 4096), groups);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 1 << 16, 0);
    let launch = dispatch(&k, HOST_VA, groups);
    for counters in [&FIRST[..], &SECOND[..]] {
        let got = measure(&mut q, &mem, counters, space.vmid(), &launch, engines);
        let want = predict(&code, groups, items, engines, counters);
        for (c, counter) in counters.iter().enumerate() {
            assert_eq!(got[c], want[c], "{name}: {} per engine", counter.name());
        }
        assert!(
            got[0].iter().all(|&w| w > 0),
            "{name}: every engine ran waves"
        );
    }
}

#[test]
fn each_counter_of_a_straight_kernel_is_what_its_code_and_grid_predict() {
    // add: y[i] += x[i], every work-item of 16 groups in range.
    check_kernel("add", 16, 16 * 64, |base| {
        let mut p = base.to_le_bytes().to_vec();
        p.extend((base + 8192).to_le_bytes());
        p
    });
}

#[test]
fn a_wave_with_no_work_item_in_range_counts_the_branch_it_takes() {
    // saxpy over n = 976 of 16 groups of 64: the last group's second wave (992..1023) has
    // no work-item in range, so it takes `s_cbranch_execz` past the body.
    check_kernel("saxpy", 16, 976, |base| {
        let mut p = 2.0f32.to_le_bytes().to_vec();
        p.extend([0; 4]);
        p.extend(base.to_le_bytes());
        p.extend((base + 8192).to_le_bytes());
        p.extend(976u32.to_le_bytes());
        p
    });
}

#[test]
fn the_vmid_filter_leaves_another_address_spaces_waves_uncounted() {
    let gpu = gpu("gfx1201");
    let engines = gpu.model().shader_engines;
    let space = gpu.create_address_space();
    let other = gpu.create_address_space();
    let Some(Placed { kernel: k, .. }) = place(&space, "add") else {
        return;
    };
    let base = HOST_VA + 4096;
    let mut p = base.to_le_bytes().to_vec();
    p.extend((base + 8192).to_le_bytes());
    let mem = stage(&space, &k, &p, 4);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 1 << 16, 0);
    let launch = dispatch(&k, HOST_VA, 4);
    let counters = [Counter::Waves, Counter::InstsValu];
    let got = measure(&mut q, &mem, &counters, other.vmid(), &launch, engines);
    assert!(got.iter().flatten().all(|&v| v == 0), "{got:?}");
    // The same launch under its own VMID counts its 8 waves.
    let got = measure(&mut q, &mem, &counters, space.vmid(), &launch, engines);
    assert_eq!(got[0].iter().sum::<u64>(), 8);
}

#[test]
fn a_select_the_simulator_does_not_model_reads_unknown() {
    let gpu = gpu("gfx1201");
    let engines = gpu.model().shader_engines;
    let space = gpu.create_address_space();
    let Some(Placed { kernel: k, .. }) = place(&space, "add") else {
        return;
    };
    let base = HOST_VA + 4096;
    let mut p = base.to_le_bytes().to_vec();
    p.extend((base + 8192).to_le_bytes());
    let mem = stage(&space, &k, &p, 4);
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 1 << 16, 0);
    let mut launch = dispatch(&k, HOST_VA, 4);
    // Counter 1 selects SQ_PERF_SEL_CYCLES (soc24_enum.h: 0x2), which rig does not model.
    let r = perfcounter::Regs::gfx12();
    let mut sel = Packet::WriteData(pm4::WriteData {
        dst_sel: 0,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address: u64::from(r.select[1]),
        data: &[2],
    })
    .to_words()
    .unwrap();
    sel.extend(launch);
    launch = sel;
    let counters = [Counter::Waves, Counter::InstsValu];
    let got = measure(&mut q, &mem, &counters, space.vmid(), &launch, engines);
    assert_eq!(got[0].iter().sum::<u64>(), 8);
    assert!(got[1].iter().all(|&v| v == u64::from(u32::MAX)), "{got:?}");
}

#[test]
fn a_gfx11_queue_that_writes_a_perfcounter_register_faults() {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let mut q = TestQueue::new(&space, QueueKind::Pm4, 4096, 0);
    q.submit(&perfcounter::begin(&[Counter::Waves], space.vmid()).unwrap());
    let f = q.wait_fault();
    assert!(
        matches!(&f.reason, FaultReason::BadPacket { reason, .. } if reason.to_string().contains("not simulated")),
        "{f}"
    );
}
