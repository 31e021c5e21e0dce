//! Shared by the corpus oracle test and the throughput bench: reads a corpus code object
//! minimally (ELF symbol `<name>.kd`, the 64-byte kernel descriptor) and plays the command
//! processor (kernel arguments with the COv5 hidden block, user SGPRs, a fake AQL packet).
#![allow(dead_code)]

pub mod cases;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, ExecStats, Isa, Memory, Scratch, Workgroups, execute, execute_isa};

pub const BASE: u64 = 0x10_0000_0000;
pub const CODE: u64 = BASE;
pub const KERNARG: u64 = BASE + 0x10_0000;
pub const PACKET: u64 = BASE + 0x11_0000;
pub const SCRATCH: u64 = BASE + 0x20_0000;
pub const SCRATCH_BYTES: u64 = 0x60_0000;
pub const BUFS: u64 = BASE + 0x80_0000;

#[derive(Clone)]
pub enum Arg {
    /// Buffer by index, C type.
    Buf(usize, &'static str),
    U32(u32),
    I32(i32),
    F32(f32),
    U64(u64),
    /// Struct by value: bytes, alignment, C type.
    Struct(Vec<u8>, u64, &'static str),
    /// Dynamic LDS of this many bytes, C type.
    Local(u32, &'static str),
}

#[derive(Clone)]
pub struct Case {
    pub name: &'static str,
    pub opt: &'static str,
    pub grid: [u32; 3],
    pub group: [u32; 3],
    pub bufs: Vec<Vec<u8>>,
    pub args: Vec<Arg>,
}

pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus")
}

/// The corpus built for `isa`'s target (kernels/corpus/build.sh).
pub fn corpus_dir_of(isa: Isa) -> PathBuf {
    match isa {
        Isa::Gfx11 => corpus_dir(),
        Isa::Gfx12 => corpus_dir().join("gfx1201"),
        Isa::Gfx9 => corpus_dir().join("gfx942"),
    }
}

/// Kernel descriptor fields the test needs.
pub struct Kd {
    pub group_fixed: u32,
    pub private_fixed: u32,
    pub rsrc1: u32,
    pub rsrc2: u32,
    pub rsrc3: u32,
    pub props: u16,
    pub entry: u64,
}

/// Loads the code object's segments into memory at CODE + vaddr and reads `<name>.kd`.
pub fn load(mem: &FlatMemory, path: &Path, name: &str) -> Kd {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse code object");
    for seg in elf.segments() {
        let bytes = seg.data().expect("segment data");
        mem.write(CODE + seg.address(), bytes)
            .expect("load segment");
    }
    let sym = elf
        .symbols()
        .find(|s| s.name() == Ok(&format!("{name}.kd")))
        .expect("kernel descriptor symbol");
    let mut kd = [0u8; 64];
    mem.read(CODE + sym.address(), &mut kd).expect("read kd");
    let u32_at = |o: usize| u32::from_le_bytes(kd[o..o + 4].try_into().expect("4 bytes"));
    let entry_off = i64::from_le_bytes(kd[16..24].try_into().expect("8 bytes"));
    Kd {
        group_fixed: u32_at(0),
        private_fixed: u32_at(4),
        rsrc3: u32_at(44),
        rsrc1: u32_at(48),
        rsrc2: u32_at(52),
        props: u16::from_le_bytes([kd[56], kd[57]]),
        entry: (CODE + sym.address()).wrapping_add(entry_off as u64),
    }
}

pub fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Runs a case in rig-isa; returns the buffers afterwards.
pub fn run_gpu(c: &Case, threads: usize) -> Vec<Vec<u8>> {
    run_gpu_on(Isa::Gfx11, c, threads)
}

/// Runs a case's build for `isa`'s target on a GPU of that generation.
pub fn run_gpu_on(isa: Isa, c: &Case, threads: usize) -> Vec<Vec<u8>> {
    run_gpu_stats(isa, c, threads).0
}

/// [`run_gpu_on`], with the dispatch's counters.
pub fn run_gpu_stats(isa: Isa, c: &Case, threads: usize) -> (Vec<Vec<u8>>, ExecStats) {
    let bytes = c.bufs.iter().map(|b| b.len() + 512).sum::<usize>();
    let mem = FlatMemory::new(BASE, (BUFS - BASE) as usize + bytes);
    let (d, addrs) = prepare_in(&mem, c, &corpus_dir_of(isa));
    let stop = AtomicBool::new(false);
    let stats = execute_isa(isa, &d, Workgroups::ALL, &mem, &stop, threads)
        .unwrap_or_else(|e| panic!("{}.{}: {e}", c.name, c.opt));
    (read_back(&mem, c, &addrs), stats)
}

/// The instructions of the code object at `path` (its `.text`, decoded in order up to the
/// first word that is not an instruction), in LLVM syntax.
pub fn instructions(isa: Isa, path: &Path) -> Vec<rig_isa::Inst> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse code object");
    let text = elf
        .section_by_name(".text")
        .and_then(|s| s.data().ok())
        .unwrap_or_default();
    let words: Vec<u32> = text
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
        .collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let Ok(i) = rig_isa::decode_isa(isa, &words[at..]) else {
            break;
        };
        at += (i.len as usize).max(1);
        out.push(i);
    }
    out
}

/// Memory needed for a case.
pub fn mem_for(c: &Case) -> FlatMemory {
    let bytes = c.bufs.iter().map(|b| b.len() + 512).sum::<usize>();
    FlatMemory::new(BASE, (BUFS - BASE) as usize + bytes)
}

/// Runs a prepared dispatch.
pub fn run(d: &Dispatch, mem: &FlatMemory, threads: usize) -> ExecStats {
    let stop = AtomicBool::new(false);
    execute(d, mem, &stop, threads).unwrap_or_else(|e| panic!("{e}"))
}

/// Reads the case's buffers back.
pub fn read_back(mem: &FlatMemory, c: &Case, addrs: &[u64]) -> Vec<Vec<u8>> {
    addrs
        .iter()
        .zip(&c.bufs)
        .map(|(a, b)| {
            let mut out = vec![0u8; b.len()];
            mem.read(*a, &mut out).expect("read back");
            out
        })
        .collect()
}

/// Loads the code object and buffers of `c` into `mem` and describes its dispatch.
pub fn prepare(mem: &FlatMemory, c: &Case) -> (Dispatch, Vec<u64>) {
    prepare_in(mem, c, &corpus_dir())
}

/// [`prepare`] with the code object from `dir`.
pub fn prepare_in(mem: &FlatMemory, c: &Case, dir: &Path) -> (Dispatch, Vec<u64>) {
    let path = dir.join(format!("{}.{}.co", c.name, c.opt));
    let kd = load(mem, &path, c.name);
    let mut addrs = Vec::new();
    let mut at = BUFS;
    for b in &c.bufs {
        mem.write(at, b).expect("buffer");
        addrs.push(at);
        at = align(at + b.len() as u64 + 256, 256);
    }
    // Explicit kernel arguments by the C signature, then the COv5 hidden block.
    let mut ka = vec![0u8; 1024];
    let mut off = 0u64;
    let mut dyn_lds = 0u32;
    let put = |ka: &mut Vec<u8>, off: &mut u64, bytes: &[u8], al: u64| {
        *off = align(*off, al);
        ka[*off as usize..*off as usize + bytes.len()].copy_from_slice(bytes);
        *off += bytes.len() as u64;
    };
    let lds_static = align(kd.group_fixed as u64, 16) as u32;
    for a in &c.args {
        match a {
            Arg::Buf(k, _) => put(&mut ka, &mut off, &addrs[*k].to_le_bytes(), 8),
            Arg::U32(v) => put(&mut ka, &mut off, &v.to_le_bytes(), 4),
            Arg::I32(v) => put(&mut ka, &mut off, &v.to_le_bytes(), 4),
            Arg::F32(v) => put(&mut ka, &mut off, &v.to_le_bytes(), 4),
            Arg::U64(v) => put(&mut ka, &mut off, &v.to_le_bytes(), 8),
            Arg::Struct(b, al, _) => put(&mut ka, &mut off, b, *al),
            Arg::Local(n, _) => {
                put(&mut ka, &mut off, &(lds_static + dyn_lds).to_le_bytes(), 4);
                dyn_lds += n;
            }
        }
    }
    let hidden = align(off, 8) as usize;
    for k in 0..3 {
        let full = c.grid[k] / c.group[k];
        ka[hidden + 4 * k..hidden + 4 * k + 4].copy_from_slice(&full.to_le_bytes());
        ka[hidden + 12 + 2 * k..hidden + 14 + 2 * k]
            .copy_from_slice(&(c.group[k] as u16).to_le_bytes());
        ka[hidden + 18 + 2 * k..hidden + 20 + 2 * k]
            .copy_from_slice(&((c.grid[k] % c.group[k]) as u16).to_le_bytes());
    }
    let dims = if c.grid[2] > 1 {
        3u16
    } else if c.grid[1] > 1 {
        2
    } else {
        1
    };
    ka[hidden + 64..hidden + 66].copy_from_slice(&dims.to_le_bytes());
    ka[hidden + 120..hidden + 124].copy_from_slice(&dyn_lds.to_le_bytes());
    mem.write(KERNARG, &ka).expect("kernarg");
    // Fake AQL dispatch packet for code that reads the dispatch pointer.
    let mut pkt = [0u8; 64];
    for k in 0..3 {
        pkt[4 + 2 * k..6 + 2 * k].copy_from_slice(&(c.group[k] as u16).to_le_bytes());
        pkt[12 + 4 * k..16 + 4 * k].copy_from_slice(&c.grid[k].to_le_bytes());
    }
    pkt[40..48].copy_from_slice(&KERNARG.to_le_bytes());
    mem.write(PACKET, &pkt).expect("packet");
    // User SGPRs in kernel_code_properties order.
    let per_lane = align(kd.private_fixed as u64, 16) as u32;
    let mut user = Vec::new();
    let p = kd.props;
    if p & 1 != 0 {
        user.extend([SCRATCH as u32, (SCRATCH >> 32) as u32, 0, 0]);
    }
    for (bit, v) in [(1u16, PACKET), (2, PACKET + 0x100), (3, KERNARG), (4, 0)] {
        if p >> bit & 1 != 0 {
            user.extend([v as u32, (v >> 32) as u32]);
        }
    }
    if p >> 5 & 1 != 0 {
        user.extend([SCRATCH as u32, (SCRATCH >> 32) as u32]);
    }
    if p >> 6 & 1 != 0 {
        user.push(per_lane);
    }
    let scratch = (per_lane > 0).then(|| Scratch {
        base: SCRATCH,
        bytes_per_lane: per_lane,
        waves: (SCRATCH_BYTES / (per_lane as u64 * 64)) as u32,
    });
    let d = Dispatch {
        code_address: kd.entry,
        pgm_rsrc1: kd.rsrc1,
        pgm_rsrc2: kd.rsrc2,
        pgm_rsrc3: kd.rsrc3,
        user_sgprs: user,
        grid_items: c.grid,
        group_size: c.group,
        // kernel_code_properties bit 10: ENABLE_WAVEFRONT_SIZE32.
        wave64: kd.props & (1 << 10) == 0,
        lds_bytes: kd.group_fixed + dyn_lds,
        scratch,
    };
    (d, addrs)
}
