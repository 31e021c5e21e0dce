//! GFX12's new scalar operations (exec/scalar12.rs) on values with known answers: f32
//! arithmetic and fmac, conversions (saturating, round-to-even), f32 compares with NaN, and the
//! 64-bit multiply, each stored by the kernel and checked. The words are llvm-mc-19's encoding
//! of the assembly in the comments (`llvm-mc-19 -arch=amdgcn -mcpu=gfx1201 -show-encoding`).

use std::sync::atomic::AtomicBool;

use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, Isa, Memory, Workgroups, execute_isa};

const BASE: u64 = 0x3_0000_0000;
const OUT: u64 = BASE + 0x1000;

#[rustfmt::skip]
const PROGRAM: &[u32] = &[
    0xbe8200ff, 0x40400000, // s_mov_b32 s2, 0x40400000 (3.0)
    0xbe8300ff, 0xbfc00000, // s_mov_b32 s3, 0xbfc00000 (-1.5)
    0xa0040302, // s_add_f32 s4, s2, s3
    0xa2050302, // s_mul_f32 s5, s2, s3
    0xbe866605, // s_cvt_i32_f32 s6, s5
    0xbe876703, // s_cvt_u32_f32 s7, s3
    0xbe886103, // s_floor_f32 s8, s3
    0xbe8963f0, // s_rndne_f32 s9, 0.5
    0xbf410203, // s_cmp_lt_f32 s3, s2
    0x980a8081, // s_cselect_b32 s10, 1, 0
    0xbf450202, // s_cmp_lg_f32 s2, s2
    0x980b8081, // s_cselect_b32 s11, 1, 0
    0xbe8c00ff, 0x7fc00000, // s_mov_b32 s12, 0x7fc00000 (NaN)
    0xbf48020c, // s_cmp_u_f32 s12, s2
    0x980d8081, // s_cselect_b32 s13, 1, 0
    0xa3840202, // s_fmac_f32 s4, s2, s2
    0xaa8e0202, // s_mul_u64 s[14:15], s[2:3], s[2:3]
    0xbf88fffe, // s_wait_alu 0xfffe
    0x7e020280, // v_mov_b32_e32 v1, 0
    0x7e040204, 0xee068000, 0x01000000, 0x00000001, // v_mov_b32 v2, s4; global_store_b32 v1, v2, s[0:1]
    0x7e040205, 0xee068000, 0x01000000, 0x00000401, // ... s5 at offset:4
    0x7e040206, 0xee068000, 0x01000000, 0x00000801, // s6 at 8
    0x7e040207, 0xee068000, 0x01000000, 0x00000c01, // s7 at 12
    0x7e040208, 0xee068000, 0x01000000, 0x00001001, // s8 at 16
    0x7e040209, 0xee068000, 0x01000000, 0x00001401, // s9 at 20
    0x7e04020a, 0xee068000, 0x01000000, 0x00001801, // s10 at 24
    0x7e04020b, 0xee068000, 0x01000000, 0x00001c01, // s11 at 28
    0x7e04020d, 0xee068000, 0x01000000, 0x00002001, // s13 at 32
    0x7e04020e, 0xee068000, 0x01000000, 0x00002401, // s14 at 36
    0x7e04020f, 0xee068000, 0x01000000, 0x00002801, // s15 at 40
    0xbfc10000, // s_wait_storecnt 0x0
    0xbfb00000, // s_endpgm
];

#[test]
fn gfx12_scalar_float_conversion_compare_and_u64_ops() {
    let mem = FlatMemory::new(BASE, 0x2000);
    let code: Vec<u8> = PROGRAM.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write(BASE, &code).unwrap();
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 0,
        pgm_rsrc2: 2 << 1,
        pgm_rsrc3: 0,
        user_sgprs: vec![OUT as u32, (OUT >> 32) as u32],
        grid_items: [1, 1, 1],
        group_size: [1, 1, 1],
        wave64: false,
        lds_bytes: 0,
        scratch: None,
    };
    let stop = AtomicBool::new(false);
    execute_isa(Isa::Gfx12, &d, Workgroups::ALL, &mem, &stop, 1).unwrap();
    let mut out = [0u8; 44];
    mem.read(OUT, &mut out).unwrap();
    let got: Vec<u32> = out
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let square = {
        let x = 0xbfc0_0000_4040_0000u64;
        x.wrapping_mul(x)
    };
    let want = [
        10.5f32.to_bits(),   // 1.5 + 3 * 3
        (-4.5f32).to_bits(), // 3 * -1.5
        -4i32 as u32,        // cvt_i32(-4.5) truncates
        0,                   // cvt_u32(-1.5) saturates at 0
        (-2.0f32).to_bits(), // floor(-1.5)
        0.0f32.to_bits(),    // rndne(0.5): ties to even
        1,                   // -1.5 < 3
        0,                   // 3 <> 3 is false
        1,                   // NaN is unordered
        square as u32,
        (square >> 32) as u32,
    ];
    assert_eq!(got, want);
}
