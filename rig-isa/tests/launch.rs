//! The launch state each wave starts with: v0's packed work-item ids (x | y << 10 | z << 20,
//! as many components as COMPUTE_PGM_RSRC2 asks for) and EXEC for the work-items that exist,
//! for groups whose waves lie in one row, span rows, or end early at the grid's edge, in wave32
//! and wave64.

use std::sync::atomic::AtomicBool;

use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, Memory, execute};

const BASE: u64 = 0x7_4000_0000;
const DATA: u64 = BASE + 0x1000;
const UNTOUCHED: u32 = 0xdead_beef;

/// Stores v0 at DATA + 4 * (x + 64 * y + 256 * z), the ids read back from v0, and counts the
/// lanes that ran in the last slot.
const KERNEL: [u32; 18] = [
    0x3602_00ff,
    0x0000_03ff, // v_and_b32 v1, 0x3ff, v0
    0xd610_0002,
    0x0229_1500, // v_bfe_u32 v2, v0, 10, 10
    0xd610_0003,
    0x0229_2900, // v_bfe_u32 v3, v0, 20, 10
    0xd646_0001,
    0x0405_0d02, // v_lshl_add_u32 v1, v2, 6, v1
    0xd646_0001,
    0x0405_1103, // v_lshl_add_u32 v1, v3, 8, v1
    0x3002_0282, // v_lshlrev_b32 v1, 2, v1
    0xdc6a_0000,
    0x0000_0001, // global_store_b32 v1, v0, s[0:1]
    0x7e08_0281, // v_mov_b32 v4, 1
    0x7e0a_0280, // v_mov_b32 v5, 0
    0xdcd6_0ffc,
    0x0000_0405, // global_atomic_add_u32 v5, v4, s[0:1] offset:4092
    0xbfb0_0000, // s_endpgm
];

/// What one group of `group` work-items (`grid` of them live) with `tid_cnt` id components
/// leaves at DATA, against what the ids and the count of live lanes must be.
fn check(group: [u32; 3], grid: [u32; 3], tid_cnt: u32, wave64: bool) {
    let mem = FlatMemory::new(BASE, 0x2000);
    let code: Vec<u8> = KERNEL.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write(BASE, &code).unwrap();
    let slots = 1024;
    let mut fill: Vec<u8> = (0..slots).flat_map(|_| UNTOUCHED.to_le_bytes()).collect();
    fill[4 * (slots - 1)..].fill(0);
    mem.write(DATA, &fill).unwrap();
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 0,
        pgm_rsrc2: 2 << 1 | tid_cnt << 11,
        pgm_rsrc3: 0,
        user_sgprs: vec![DATA as u32, (DATA >> 32) as u32],
        grid_items: grid,
        group_size: group,
        wave64,
        lds_bytes: 0,
        scratch: None,
    };
    execute(&d, &mem, &AtomicBool::new(false), 1).expect("runs");
    let mut want = vec![UNTOUCHED; slots];
    want[slots - 1] = grid.iter().product();
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let (y, z) = match tid_cnt {
                    0 => (0, 0),
                    1 => (y, 0),
                    _ => (y, z),
                };
                want[(x + 64 * y + 256 * z) as usize] = x | y << 10 | z << 20;
            }
        }
    }
    let mut got = vec![0u8; 4 * slots];
    mem.read(DATA, &mut got).unwrap();
    let got: Vec<u32> = got
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g, w,
            "group {group:?}, grid {grid:?}, {tid_cnt} id components, wave64 {wave64}: slot {k}"
        );
    }
}

#[test]
fn work_item_ids_and_exec_match_the_group_shape() {
    for wave64 in [false, true] {
        for tid_cnt in [0, 1, 2] {
            // Waves within one row, a row per wave, and a partial last wave.
            check([64, 2, 1], [64, 2, 1], tid_cnt, wave64);
            check([64, 1, 1], [50, 1, 1], tid_cnt, wave64);
            check([32, 2, 2], [32, 2, 2], tid_cnt, wave64);
            // Waves spanning rows (and planes), rows of a length that is no wave's.
            check([16, 4, 2], [16, 4, 2], tid_cnt, wave64);
            check([40, 3, 1], [40, 3, 1], tid_cnt, wave64);
            check([40, 3, 2], [40, 3, 2], tid_cnt, wave64);
            // A partial group at the grid's edge in y.
            check([48, 4, 1], [48, 3, 1], tid_cnt, wave64);
        }
    }
}

#[test]
fn a_grid_of_more_workgroups_than_a_u64_counts_is_refused() {
    let mem = FlatMemory::new(BASE, 0x2000);
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 0,
        pgm_rsrc2: 0,
        pgm_rsrc3: 0,
        user_sgprs: vec![],
        grid_items: [u32::MAX, u32::MAX, 2],
        group_size: [1, 1, 1],
        wave64: false,
        lds_bytes: 0,
        scratch: None,
    };
    // Counting it saturates rather than wrapping (or panicking in a debug build).
    assert_eq!(d.workgroup_count(), u64::MAX);
    let r = execute(&d, &mem, &AtomicBool::new(false), 1);
    assert!(
        matches!(r, Err(rig_isa::ExecFault::BadDispatch { .. })),
        "got {r:?}"
    );
}
