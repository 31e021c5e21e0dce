//! Cross-lane operations (ds_swizzle, v_permlane16/x16, readfirstlane, mbcnt) on a real
//! LLVM-compiled kernel, against values computed here (the host C oracle has no lanes).

mod common;

use common::{Arg, Case, mem_for, prepare, read_back, run};

#[test]
fn cross_lane_builtins_match_their_definitions() {
    let c = Case {
        name: "lanes",
        opt: "O2",
        grid: [32, 1, 1],
        group: [32, 1, 1],
        bufs: vec![vec![0; 4 * 192]],
        args: vec![Arg::Buf(0, "uint*")],
    };
    let mem = mem_for(&c);
    let (d, addrs) = prepare(&mem, &c);
    run(&d, &mem, 1);
    let out = read_back(&mem, &c, &addrs);
    let o: Vec<u32> = out[0]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let x = |l: usize| (l * 3 + 1) as u32;
    for l in 0..32 {
        assert_eq!(o[l], x(l ^ 1), "swizzle xor lane {l}");
        assert_eq!(
            o[32 + l],
            x((l & !3) | (3 - (l & 3))),
            "swizzle quad perm lane {l}"
        );
        assert_eq!(o[64 + l], x(l ^ 16), "permlanex16 lane {l}");
        // Lane i of a row reads the lane named by nibble i of {src2, src1}.
        let sel = ((0x89ab_cdef_0123_4567u64 >> (4 * (l & 15))) & 15) as usize;
        assert_eq!(o[96 + l], x((l & !15) | sel), "permlane16 lane {l}");
        assert_eq!(o[128 + l], x(0) + 5, "readfirstlane lane {l}");
        assert_eq!(o[160 + l], (l / 2) as u32, "mbcnt_lo lane {l}");
    }
}
