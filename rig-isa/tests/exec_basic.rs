//! Dispatch-level behaviour on hand-encoded programs: faults name the instruction, the stop flag
//! ends a running dispatch promptly, and partial waves get EXEC for their live lanes only.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, ExecFault, Memory, MemoryFault, execute};

const BASE: u64 = 0x1_0000_0000;
const CODE: u64 = BASE;
const DATA: u64 = BASE + 0x1000;

const S_ENDPGM: u32 = 0xbfb0_0000;

fn setup(code: &[u32]) -> FlatMemory {
    let mem = FlatMemory::new(BASE, 0x10000);
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write(CODE, &bytes).expect("code");
    mem
}

/// One group of `items` work-items; user SGPRs s[0:1] = DATA; v0 = work-item id.
fn dispatch(items: u32) -> Dispatch {
    Dispatch {
        code_address: CODE,
        pgm_rsrc1: 1,               // 16 VGPRs
        pgm_rsrc2: 2 << 1 | 1 << 7, // two user SGPRs, workgroup id x
        pgm_rsrc3: 0,
        user_sgprs: vec![DATA as u32, (DATA >> 32) as u32],
        grid_items: [items, 1, 1],
        group_size: [items.max(1), 1, 1],
        wave64: false,
        lds_bytes: 0,
        scratch: None,
    }
}

#[test]
fn undefined_encoding_is_an_illegal_instruction_fault() {
    let mem = setup(&[0xffff_ffff, S_ENDPGM]);
    let stop = AtomicBool::new(false);
    let e = execute(&dispatch(32), &mem, &stop, 1).unwrap_err();
    match &e {
        ExecFault::IllegalInstruction { address, words } => {
            assert_eq!(*address, CODE);
            assert_eq!(words[0], 0xffff_ffff);
        }
        other => panic!("expected an illegal instruction, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("ffffffff") && msg.contains("0x100000000"),
        "{msg}"
    );
}

#[test]
fn s_trap_reports_its_code() {
    let mem = setup(&[0xbf90_0002, S_ENDPGM]); // s_trap 2
    let stop = AtomicBool::new(false);
    assert_eq!(
        execute(&dispatch(32), &mem, &stop, 1),
        Err(ExecFault::Trap {
            address: CODE,
            code: 2
        })
    );
}

#[test]
fn code_rewritten_at_the_same_address_runs_as_rewritten() {
    // Decodes are cached across dispatches by code address: a reload must not run stale code.
    let stop = AtomicBool::new(false);
    for code in [2u32, 3, 3, 7] {
        let mem = setup(&[0xbf90_0000 | code, S_ENDPGM]); // s_trap code
        for _ in 0..2 {
            assert_eq!(
                execute(&dispatch(32), &mem, &stop, 1),
                Err(ExecFault::Trap {
                    address: CODE,
                    code: code as u16
                })
            );
        }
        mem.write(CODE, &S_ENDPGM.to_le_bytes()).unwrap();
        assert!(execute(&dispatch(32), &mem, &stop, 1).is_ok());
    }
}

#[test]
fn unmapped_scalar_load_faults_with_pc() {
    // s_load_b32 s2, s[0:1], 0x0 with s[0:1] pointing outside the mapping.
    let mem = setup(&[0xf400_0080, 0xf800_0000, 0xbf89_fc07, S_ENDPGM]);
    let mut d = dispatch(32);
    d.user_sgprs = vec![0, 0x10];
    let stop = AtomicBool::new(false);
    let e = execute(&d, &mem, &stop, 1).unwrap_err();
    assert_eq!(
        e,
        ExecFault::Memory {
            fault: MemoryFault {
                address: 0x10_0000_0000,
                write: false
            },
            pc: CODE
        }
    );
}

#[test]
fn partial_wave_stores_only_live_lanes() {
    // v_lshlrev_b32 v1, 2, v0 ; v_mov_b32 v2, 7 ; global_store_b32 v1, v2, s[0:1] ; s_endpgm
    let code = [0x3002_0082, 0x7e04_0287, 0xdc6a_0000, 0x0000_0201, S_ENDPGM];
    let mem = setup(&code);
    let stop = AtomicBool::new(false);
    let stats = execute(&dispatch(20), &mem, &stop, 1).expect("runs");
    assert_eq!(stats.waves, 1);
    let mut out = [0u8; 4 * 32];
    mem.read(DATA, &mut out).expect("read");
    for lane in 0..32 {
        let v = u32::from_le_bytes(out[4 * lane..4 * lane + 4].try_into().expect("4 bytes"));
        assert_eq!(v, if lane < 20 { 7 } else { 0 }, "lane {lane}");
    }
}

#[test]
fn stop_flag_ends_an_endless_kernel_promptly() {
    let mem = setup(&[0xbfa0_ffff, S_ENDPGM]); // s_branch -1: spins forever
    let stop = AtomicBool::new(false);
    let mut d = dispatch(64);
    d.grid_items = [64 * 8, 1, 1];
    std::thread::scope(|s| {
        let h = s.spawn(|| execute(&d, &mem, &stop, 2));
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        stop.store(true, Ordering::Relaxed);
        let r = h.join().expect("worker");
        assert_eq!(r, Err(ExecFault::Stopped));
        // Generous bound for a loaded CI machine; the check runs every 256 instructions.
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "took {:?}",
            t.elapsed()
        );
    });
}

#[test]
fn stop_flag_ends_a_dispatch_of_many_short_groups_promptly() {
    let mem = setup(&[0xbf80_0000, S_ENDPGM]); // s_nop 0; s_endpgm
    let stop = AtomicBool::new(false);
    let mut d = dispatch(64);
    d.grid_items = [64 << 20, 1, 1]; // a million groups: far longer than the test waits
    std::thread::scope(|s| {
        let h = s.spawn(|| execute(&d, &mem, &stop, 2));
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(h.join().expect("worker"), Err(ExecFault::Stopped));
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "took {:?}",
            t.elapsed()
        );
    });
}

#[test]
fn oversized_lds_is_a_bad_dispatch_not_an_allocation() {
    let mem = setup(&[S_ENDPGM]);
    let mut d = dispatch(32);
    d.lds_bytes = u32::MAX;
    let stop = AtomicBool::new(false);
    assert!(matches!(
        execute(&d, &mem, &stop, 1),
        Err(ExecFault::BadDispatch { .. })
    ));
}

#[test]
fn rsrc1_denorm_mode_flushes_or_keeps_f32_denormals() {
    // v_mov_b32 v1, 0x400000 (a denormal); v_mul_f32 v2, 1.0, v1; store v2 at 4 * id.
    let code = [
        0x7e02_02ff,
        0x0040_0000,
        0x1004_02f2,
        0x3006_0082,
        0xdc6a_0000,
        0x0000_0203,
        S_ENDPGM,
    ];
    for (mode, expect) in [(3u32, 0x0040_0000u32), (0, 0)] {
        let mem = setup(&code);
        let mut d = dispatch(1);
        d.pgm_rsrc1 = 1 | mode << 16 | 3 << 18;
        let stop = AtomicBool::new(false);
        execute(&d, &mem, &stop, 1).expect("runs");
        let mut out = [0u8; 4];
        mem.read(DATA, &mut out).expect("read");
        assert_eq!(
            u32::from_le_bytes(out),
            expect,
            "FLOAT_DENORM_MODE_32 = {mode}"
        );
    }
}

/// A 64-bit address whose register pair runs past the wave's VGPRs is a VGPR fault of the
/// instruction, not a panic of the interpreter (16 VGPRs here: v[15:16] leaves them).
#[test]
fn an_address_pair_past_the_vgprs_is_a_vgpr_fault() {
    // global_load_b32 v0, v[15:16], off; flat_load_b32 v0, v[15:16] (llvm-mc-19).
    for word0 in [0xdc52_0000u32, 0xdc50_0000] {
        let mem = setup(&[word0, 0x007c_000f, S_ENDPGM]);
        let stop = AtomicBool::new(false);
        assert_eq!(
            execute(&dispatch(32), &mem, &stop, 1),
            Err(ExecFault::VgprOutOfRange { address: CODE }),
            "{word0:#x}"
        );
    }
}

/// A memory whose GPU clock reads a fixed value, so a kernel's clock reads are known.
struct FixedClock {
    mem: FlatMemory,
    ticks: u64,
}

impl Memory for FixedClock {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemoryFault> {
        self.mem.read(addr, out)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        self.mem.write(addr, data)
    }
    fn atomic_u32(&self, addr: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, MemoryFault> {
        self.mem.atomic_u32(addr, op)
    }
    fn atomic_u64(&self, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, MemoryFault> {
        self.mem.atomic_u64(addr, op)
    }
    fn clock_ticks(&self) -> u64 {
        self.ticks
    }
}

#[test]
fn clock_reads_are_the_memorys_gpu_clock() {
    // kernels/corpus/clock_read.cl: s_sendmsg_rtn REALTIME and s_getreg SHADER_CYCLES.
    let c = common::Case {
        name: "clock_read",
        opt: "O2",
        grid: [64, 1, 1],
        group: [32, 1, 1],
        bufs: vec![vec![0u8; 16 * 64]],
        args: vec![common::Arg::Buf(0, "ulong*")],
    };
    let mem = common::mem_for(&c);
    let (d, addrs) = common::prepare(&mem, &c);
    let ticks = 0x0123_4567_89ab_cdef;
    let clocked = FixedClock { mem, ticks };
    let stop = AtomicBool::new(false);
    execute(&d, &clocked, &stop, 1).expect("clock_read runs");
    let out = common::read_back(&clocked.mem, &c, &addrs).remove(0);
    for l in 0..64 {
        let at = |k: usize| u64::from_le_bytes(out[8 * k..8 * k + 8].try_into().unwrap());
        assert_eq!(at(2 * l), ticks, "REALTIME of work-item {l}");
        assert_eq!(
            at(2 * l + 1),
            ticks & 0xf_ffff,
            "SHADER_CYCLES of work-item {l}"
        );
    }
}

#[test]
fn vopd_dot2acc_accumulates_into_its_destination() {
    // v_lshlrev_b32 v4, 3, v0 ; v0 = (3.0, 4.0) f16 ; v1 = (1.0, 2.0) ; v2 = 1.0
    // v_dual_dot2acc_f32_f16 v2, v0, v1 :: v_dual_mov_b32 v3, v1
    // global_store_b64 v4, v[2:3], s[0:1] ; s_endpgm
    let code = [
        0x3008_0083,
        0x7e00_02ff,
        0x4400_4200,
        0x7e02_02ff,
        0x4000_3c00,
        0x7e04_02f2,
        0xcb10_0300,
        0x0202_0101,
        0xdc6e_0000,
        0x0000_0204,
        S_ENDPGM,
    ];
    let mem = setup(&code);
    let stop = AtomicBool::new(false);
    execute(&dispatch(32), &mem, &stop, 1).expect("runs");
    for l in 0..32u64 {
        let mut b = [0u8; 8];
        mem.read(DATA + 8 * l, &mut b).unwrap();
        // 3 * 1 + 4 * 2 + 1.
        assert_eq!(
            f32::from_le_bytes(b[..4].try_into().unwrap()),
            12.0,
            "lane {l}"
        );
        assert_eq!(u32::from_le_bytes(b[4..].try_into().unwrap()), 0x4000_3c00);
    }
}
