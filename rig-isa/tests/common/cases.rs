//! The corpus cases (inputs, launch shape and kernel arguments of every kernel of
//! kernels/corpus, at each build it has) and which targets each is built for: shared by the
//! execution oracle and the throughput bench.

use rig_isa::Isa;

use super::{Arg, Case, corpus_dir};

/// The targets every case runs as (the corpus is built for each).
pub const TARGETS: [(Isa, &str); 3] = [
    (Isa::Gfx11, "gfx1100"),
    (Isa::Gfx12, "gfx1201"),
    (Isa::Gfx9, "gfx942"),
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

fn u32s(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn u64s(v: impl IntoIterator<Item = u64>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn cases() -> Vec<Case> {
    let mut r = Rng(0x1234_5678_9abc_def1);
    let n = 4096usize;
    let rf = |r: &mut Rng, lo: f32, hi: f32| {
        lo + (hi - lo) * (r.next() % 1_000_000) as f32 / 1_000_000.0
    };
    let fa: Vec<f32> = (0..n).map(|_| rf(&mut r, -100.0, 100.0)).collect();
    let fb: Vec<f32> = (0..n).map(|_| rf(&mut r, -100.0, 100.0)).collect();
    let fc: Vec<f32> = (0..n).map(|_| rf(&mut r, -100.0, 100.0)).collect();
    let fpos: Vec<f32> = (0..n).map(|_| rf(&mut r, 0.001, 1e6)).collect();
    let ia: Vec<u32> = (0..n).map(|_| r.next()).collect();
    let ib: Vec<u32> = (0..n).map(|_| r.next()).collect();
    let inz: Vec<u32> = (0..n)
        .map(|k| {
            if k % 3 == 0 {
                r.next() % 100 + 1
            } else {
                r.next() | 1
            }
        })
        .collect();
    let isnz: Vec<u32> = (0..n)
        .map(|k| {
            if k % 4 == 0 {
                (r.next() % 50) as i32 as u32 + 1
            } else {
                (r.next() as i32 | 1) as u32
            }
        })
        .collect();
    let small: Vec<u32> = (0..n)
        .map(|_| (r.next() % 2001).wrapping_sub(1000))
        .collect();
    let ua: Vec<u64> = (0..n)
        .map(|_| (r.next() as u64) << 32 | r.next() as u64)
        .collect();
    let ub: Vec<u64> = (0..n)
        .map(|k| {
            if k % 2 == 0 {
                (r.next() as u64) << 20 | 1
            } else {
                r.next() as u64 + 1
            }
        })
        .collect();
    let da: Vec<u64> = (0..n)
        .map(|_| (rf(&mut r, -1000.0, 1000.0) as f64 * 1.000_000_1).to_bits())
        .collect();
    let dbv: Vec<u64> = (0..n)
        .map(|_| (rf(&mut r, -1000.0, 1000.0) as f64 / 3.0).to_bits())
        .collect();
    let zero = |bytes: usize| vec![0u8; bytes];
    let g1 = |items: u32, group: u32| ([items, 1, 1], [group, 1, 1]);
    let mut v = Vec::new();
    let mut add = |name: &'static str,
                   opt: &'static str,
                   (grid, group): ([u32; 3], [u32; 3]),
                   bufs: Vec<Vec<u8>>,
                   args: Vec<Arg>| {
        v.push(Case {
            name,
            opt,
            grid,
            group,
            bufs,
            args,
        })
    };
    use Arg::*;
    for opt in ["O2", "O0"] {
        add(
            "vadd_f32",
            opt,
            g1(1024, 64),
            vec![f32s(fa.clone()), f32s(fb.clone()), zero(4 * n)],
            vec![
                Buf(0, "const float*"),
                Buf(1, "const float*"),
                Buf(2, "float*"),
                U32(1000),
            ],
        );
        add(
            "branch_diverge",
            opt,
            g1(1024, 128),
            vec![u32s(small.clone()), zero(4 * n)],
            vec![Buf(0, "const int*"), Buf(1, "int*")],
        );
        add(
            "lds_reduce",
            opt,
            g1(1024, 256),
            vec![u32s(small.clone()), zero(16)],
            vec![Buf(0, "const int*"), Buf(1, "int*")],
        );
        add(
            "private_array",
            opt,
            g1(64, 64),
            vec![u32s(ia[..n].iter().copied()), zero(4 * 64)],
            vec![Buf(0, "const int*"), Buf(1, "int*"), I32(5)],
        );
        let mut p = Vec::new();
        p.extend(1.5f32.to_le_bytes());
        p.extend((-7i32).to_le_bytes());
        p.extend(1000u32.to_le_bytes());
        p.extend(0.25f32.to_le_bytes());
        add(
            "struct_param",
            opt,
            g1(1024, 64),
            vec![f32s(fa.clone()), zero(4 * n)],
            vec![
                Buf(0, "const float*"),
                Buf(1, "float*"),
                Struct(p, 4, "struct params"),
            ],
        );
    }
    add(
        "saxpy",
        "O2",
        g1(1024, 256),
        vec![f32s(fa.clone()), f32s(fb.clone())],
        vec![
            Buf(0, "const float*"),
            Buf(1, "float*"),
            F32(2.5),
            U32(1000),
        ],
    );
    add(
        "vmul_i32",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), u32s(ib.clone()), zero(4 * n)],
        vec![Buf(0, "const int*"), Buf(1, "const int*"), Buf(2, "int*")],
    );
    add(
        "u64_arith",
        "O2",
        g1(1024, 64),
        vec![u64s(ua.clone()), u64s(ub.clone()), zero(8 * n)],
        vec![
            Buf(0, "const ulong*"),
            Buf(1, "const ulong*"),
            Buf(2, "ulong*"),
        ],
    );
    add(
        "udiv_rem",
        "O2",
        g1(1024, 64),
        vec![
            u32s(ia.clone()),
            u32s(inz.clone()),
            zero(4 * n),
            zero(4 * n),
        ],
        vec![
            Buf(0, "const uint*"),
            Buf(1, "const uint*"),
            Buf(2, "uint*"),
            Buf(3, "uint*"),
        ],
    );
    add(
        "sdiv_rem",
        "O2",
        g1(1024, 64),
        vec![
            u32s(ia.clone()),
            u32s(isnz.clone()),
            zero(4 * n),
            zero(4 * n),
        ],
        vec![
            Buf(0, "const int*"),
            Buf(1, "const int*"),
            Buf(2, "int*"),
            Buf(3, "int*"),
        ],
    );
    add(
        "u64_div",
        "O2",
        g1(1024, 64),
        vec![u64s(ua.clone()), u64s(ub.clone()), zero(8 * n)],
        vec![
            Buf(0, "const ulong*"),
            Buf(1, "const ulong*"),
            Buf(2, "ulong*"),
        ],
    );
    add(
        "bitops",
        "O2",
        g1(1024, 64),
        vec![
            u32s(
                ia.iter()
                    .enumerate()
                    .map(|(k, x)| if k % 17 == 0 { 0 } else { x >> (k % 32) }),
            ),
            zero(4 * n),
            zero(4 * n),
            zero(4 * n),
        ],
        vec![
            Buf(0, "const uint*"),
            Buf(1, "uint*"),
            Buf(2, "uint*"),
            Buf(3, "uint*"),
        ],
    );
    // The bench's FMA loop (rig-isa/benches/throughput.rs runs it longer).
    add(
        "fma_loop",
        "O2",
        g1(1024, 64),
        vec![f32s(fpos.iter().map(|x| x * 1e-5)), zero(4 * n)],
        vec![
            Buf(0, "const float*"),
            Buf(1, "float*"),
            F32(0.999),
            F32(0.01),
            U32(100),
        ],
    );
    add(
        "fma_minmax",
        "O2",
        g1(1024, 64),
        vec![
            f32s(fa.clone()),
            f32s(fb.clone()),
            f32s(fc.clone()),
            zero(16 * n),
        ],
        vec![
            Buf(0, "const float*"),
            Buf(1, "const float*"),
            Buf(2, "const float*"),
            Buf(3, "float*"),
        ],
    );
    add(
        "sqrt_rcp",
        "O2",
        g1(1024, 64),
        vec![f32s(fpos.clone()), zero(4 * n), zero(4 * n)],
        vec![Buf(0, "const float*"), Buf(1, "float*"), Buf(2, "float*")],
    );
    add(
        "convert",
        "O2",
        g1(1024, 64),
        vec![
            f32s(fa.iter().map(|x| x * 1000.0)),
            u32s(ia.clone()),
            zero(4 * n),
            zero(4 * n),
            zero(4 * n),
            zero(4 * n),
        ],
        vec![
            Buf(0, "const float*"),
            Buf(1, "const int*"),
            Buf(2, "int*"),
            Buf(3, "float*"),
            Buf(4, "uint*"),
            Buf(5, "float*"),
        ],
    );
    add(
        "f64_ops",
        "O2",
        g1(1024, 64),
        vec![u64s(da.clone()), u64s(dbv.clone()), zero(8 * n)],
        vec![
            Buf(0, "const double*"),
            Buf(1, "const double*"),
            Buf(2, "double*"),
        ],
    );
    add(
        "loop_diverge",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), zero(4 * n)],
        vec![Buf(0, "const uint*"), Buf(1, "uint*")],
    );
    add(
        "lds_reduce_f32",
        "O2",
        g1(1024, 128),
        vec![f32s(fa.clone()), zero(4 * 8)],
        vec![Buf(0, "const float*"), Buf(1, "float*")],
    );
    add(
        "atomic_add_i32",
        "O2",
        g1(1024, 64),
        vec![u32s(small.clone()), zero(4)],
        vec![Buf(0, "const int*"), Buf(1, "int*")],
    );
    add(
        "atomic_minmax",
        "O2",
        g1(1024, 64),
        vec![
            u32s(ia.clone()),
            u32s([0x7fff_ffff]),
            u32s([0x8000_0000]),
            zero(4),
        ],
        vec![
            Buf(0, "const int*"),
            Buf(1, "int*"),
            Buf(2, "int*"),
            Buf(3, "uint*"),
        ],
    );
    add(
        "atomic_cas",
        "O2",
        g1(512, 64),
        vec![zero(4), zero(4 * 64)],
        vec![Buf(0, "int*"), Buf(1, "int*")],
    );
    add(
        "transpose",
        "O2",
        ([64, 48, 1], [16, 16, 1]),
        vec![f32s(fa[..64 * 48].iter().copied()), zero(4 * 64 * 48)],
        vec![Buf(0, "const float*"), Buf(1, "float*"), U32(64), U32(48)],
    );
    add(
        "matmul",
        "O2",
        ([32, 32, 1], [16, 16, 1]),
        vec![f32s(fa.clone()), f32s(fb.clone()), zero(4 * n)],
        vec![
            Buf(0, "const float*"),
            Buf(1, "const float*"),
            Buf(2, "float*"),
            U32(32),
        ],
    );
    add(
        "scan",
        "O2",
        g1(1024, 256),
        vec![u32s(small.clone()), zero(4 * n)],
        vec![Buf(0, "const int*"), Buf(1, "int*")],
    );
    add(
        "ptr64",
        "O2",
        g1(256, 64),
        vec![u32s(ia.clone()), zero(8 * 256)],
        vec![Buf(0, "const uint*"), Buf(1, "ulong*"), U64(12)],
    );
    add(
        "dyn_lds",
        "O2",
        g1(1024, 128),
        vec![u32s(small.clone()), zero(4 * n)],
        vec![Buf(0, "const int*"), Buf(1, "int*"), Local(128 * 4, "int*")],
    );
    add(
        "histogram",
        "O2",
        g1(1024, 256),
        vec![u32s(ia.clone()), zero(4 * 16)],
        vec![Buf(0, "const uint*"), Buf(1, "uint*")],
    );
    let bytes: Vec<u8> = ia.iter().map(|x| *x as u8).collect();
    let shorts: Vec<u8> = ib.iter().flat_map(|x| (*x as u16).to_le_bytes()).collect();
    add(
        "shifts_u8",
        "O2",
        g1(1024, 64),
        vec![bytes, shorts, zero(4 * n)],
        vec![
            Buf(0, "const uchar*"),
            Buf(1, "const short*"),
            Buf(2, "int*"),
        ],
    );
    add(
        "select_clamp",
        "O2",
        g1(1024, 64),
        vec![f32s(fa.clone()), zero(4 * n)],
        vec![
            Buf(0, "const float*"),
            Buf(1, "float*"),
            F32(-50.0),
            F32(30.0),
        ],
    );
    add(
        "grid2d",
        "O2",
        ([64, 16, 1], [16, 4, 1]),
        vec![zero(4 * 64 * 16)],
        vec![Buf(0, "uint*"), U32(64)],
    );
    add(
        "floor_mix",
        "O2",
        g1(1024, 64),
        vec![f32s(fa.clone()), zero(4 * n), zero(4 * n)],
        vec![Buf(0, "const float*"), Buf(1, "float*"), Buf(2, "int*")],
    );
    add(
        "clamp_i32",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), zero(4 * n)],
        vec![
            Buf(0, "const int*"),
            Buf(1, "int*"),
            I32(-100_000),
            I32(2_000_000),
        ],
    );
    add(
        "rotate_bits",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), zero(4 * n)],
        vec![Buf(0, "const uint*"), Buf(1, "uint*")],
    );
    add(
        "mul24",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), u32s(ib.clone()), zero(4 * n)],
        vec![
            Buf(0, "const uint*"),
            Buf(1, "const uint*"),
            Buf(2, "uint*"),
        ],
    );
    add(
        "atomic_u64",
        "O2",
        g1(1024, 64),
        vec![u64s(ua.clone()), zero(8), zero(4)],
        vec![Buf(0, "const ulong*"), Buf(1, "ulong*"), Buf(2, "uint*")],
    );
    add(
        "atomic_xchg_max",
        "O2",
        g1(1024, 64),
        vec![zero(4 * 8), zero(4)],
        vec![Buf(0, "uint*"), Buf(1, "uint*")],
    );
    add(
        "nested_loops",
        "O2",
        g1(512, 64),
        vec![u32s(small.clone()), zero(4 * n)],
        vec![Buf(0, "const int*"), Buf(1, "int*"), U32(37)],
    );
    add(
        "gather",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), f32s(fa.clone()), zero(4 * n)],
        vec![
            Buf(0, "const uint*"),
            Buf(1, "const float*"),
            Buf(2, "float*"),
        ],
    );
    add(
        "lds_reverse",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), zero(4 * n)],
        vec![Buf(0, "const uint*"), Buf(1, "uint*")],
    );
    add(
        "f64_div",
        "O2",
        g1(1024, 64),
        vec![u64s(da.clone()), u64s(dbv.clone()), zero(8 * n)],
        vec![
            Buf(0, "const double*"),
            Buf(1, "const double*"),
            Buf(2, "double*"),
        ],
    );
    add(
        "bytes_u16",
        "O2",
        g1(1024, 64),
        vec![u32s(ia.clone()), zero(n), zero(2 * n)],
        vec![Buf(0, "const uint*"), Buf(1, "uchar*"), Buf(2, "ushort*")],
    );
    add(
        "float_compare",
        "O2",
        g1(1024, 64),
        vec![
            f32s(fa.clone()),
            f32s(
                fb.iter()
                    .enumerate()
                    .map(|(k, x)| if k % 5 == 0 { fa[k] } else { *x }),
            ),
            zero(4 * n),
        ],
        vec![
            Buf(0, "const float*"),
            Buf(1, "const float*"),
            Buf(2, "int*"),
        ],
    );
    let halves = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|x| half::f16::from_f32(x / 4.0).to_bits().to_le_bytes())
            .collect()
    };
    add(
        "half_ops",
        "O2",
        g1(1024, 64),
        vec![halves(&fa[..2048]), halves(&fb[..2048]), zero(2 * 4096)],
        vec![
            Buf(0, "const half*"),
            Buf(1, "const half*"),
            Buf(2, "half*"),
        ],
    );
    let with_nan: Vec<f32> = fa
        .iter()
        .enumerate()
        .map(|(k, x)| if k % 17 == 0 { f32::NAN } else { *x })
        .collect();
    add(
        "math_misc",
        "O2",
        g1(1024, 64),
        vec![f32s(with_nan), f32s(fb.clone()), zero(32 * n), zero(4 * n)],
        vec![
            Buf(0, "const float*"),
            Buf(1, "const float*"),
            Buf(2, "float*"),
            Buf(3, "int*"),
        ],
    );
    add(
        "i64_ops",
        "O2",
        g1(1024, 64),
        vec![
            u64s(ua.clone()),
            u64s(
                ub.iter()
                    .enumerate()
                    .map(|(k, x)| if k % 3 == 0 { x.wrapping_neg() } else { *x }),
            ),
            zero(48 * n),
        ],
        vec![
            Buf(0, "const long*"),
            Buf(1, "const long*"),
            Buf(2, "long*"),
        ],
    );
    add(
        "lds_atomic64",
        "O2",
        g1(1024, 256),
        vec![u64s(ua.clone()), zero(8 * 16)],
        vec![Buf(0, "const ulong*"), Buf(1, "ulong*")],
    );
    for opt in ["O2", "O0"] {
        add(
            "generic_atomics",
            opt,
            g1(1024, 128),
            vec![u32s(small.clone()), zero(4 * 65)],
            vec![Buf(0, "const int*"), Buf(1, "int*")],
        );
    }
    {
        // Quotients at the edges of the range: listed extremes, then random bit patterns
        // (every exponent, denormals, infinities, NaNs).
        let mut q32: Vec<(f32, f32)> = vec![
            (3.4e38, 0.5),
            (1.7e38, 0.5),
            (1e-3, 1e-39),
            (1e-39, 3.0),
            (1e-45, 7.0),
            (1.0, 3e38),
            (1e-30, 3e38),
            (3e38, 1e-40),
            (0.0, 0.0),
            (f32::INFINITY, 2.0),
        ];
        let mut q64: Vec<(f64, f64)> = vec![
            (1e308, 0.25),
            (1e-300, 1e300),
            (4.9e-324, 3.0),
            (1.0, 1e-310),
            (1e-310, 7.0),
            (2.0e-308, 3.0),
        ];
        while q32.len() < 1024 {
            q32.push((f32::from_bits(r.next()), f32::from_bits(r.next())));
        }
        while q64.len() < 1024 {
            let x = (r.next() as u64) << 32 | r.next() as u64;
            let y = (r.next() as u64) << 32 | r.next() as u64;
            q64.push((f64::from_bits(x), f64::from_bits(y)));
        }
        add(
            "div_extreme",
            "O2",
            g1(1024, 64),
            vec![
                f32s(q32.iter().map(|p| p.0)),
                f32s(q32.iter().map(|p| p.1)),
                zero(4 * 1024),
                u64s(q64.iter().map(|p| p.0.to_bits())),
                u64s(q64.iter().map(|p| p.1.to_bits())),
                zero(8 * 1024),
            ],
            vec![
                Buf(0, "const float*"),
                Buf(1, "const float*"),
                Buf(2, "float*"),
                Buf(3, "const double*"),
                Buf(4, "const double*"),
                Buf(5, "double*"),
            ],
        );
    }
    // Waves of a group wait on each other's stores, with no barrier between them.
    add(
        "spin_wait",
        "O2",
        g1(256, 128),
        vec![zero(4 * 16), zero(4 * 16)],
        vec![Buf(0, "uint*"), Buf(1, "uint*")],
    );
    {
        // Dot products: f16/bf16 pairs of small multiples of 1/16 (exact sums), random
        // integers for the u8/u4 forms.
        let m = 1024 + 8;
        let k16 = |r: &mut Rng| (r.next() % 129) as f32 / 16.0 - 4.0;
        let hpair = |r: &mut Rng| {
            let lo = half::f16::from_f32(k16(r)).to_bits() as u32;
            lo | (half::f16::from_f32(k16(r)).to_bits() as u32) << 16
        };
        let bpair = |r: &mut Rng| {
            let b = |x: f32| x.to_bits() >> 16;
            b(k16(r) * 4.0) | b(k16(r) * 4.0) << 16
        };
        let hs: Vec<u32> = (0..m).map(|_| hpair(&mut r)).collect();
        let bs: Vec<u32> = (0..m).map(|_| bpair(&mut r)).collect();
        let ints: Vec<u32> = (0..m).map(|_| r.next()).collect();
        let cs: Vec<f32> = (0..m).map(|_| k16(&mut r) * 8.0).collect();
        add(
            "dot_ops",
            "O2",
            g1(1024, 64),
            vec![
                u32s(hs),
                u32s(bs),
                u32s(ints),
                f32s(cs),
                zero(4 * 12 * 1024),
            ],
            vec![
                Buf(0, "const uint*"),
                Buf(1, "const uint*"),
                Buf(2, "const uint*"),
                Buf(3, "const float*"),
                Buf(4, "uint*"),
            ],
        );
    }
    {
        let hs = |v: Vec<f32>| -> Vec<u8> {
            v.into_iter()
                .flat_map(|x| half::f16::from_f32(x).to_le_bytes())
                .collect()
        };
        let xs: Vec<f32> = (0..1024).map(|_| rf(&mut r, -12.0, 12.0)).collect();
        let ys: Vec<f32> = (0..1024).map(|_| rf(&mut r, 0.001, 300.0)).collect();
        let ss: Vec<u8> = (0..3 * 1024)
            .flat_map(|_| (r.next() as u16).to_le_bytes())
            .collect();
        add(
            "half_math",
            "O2",
            g1(1024, 64),
            vec![hs(xs), hs(ys), zero(2 * 8 * 1024), ss, zero(2 * 6 * 1024)],
            vec![
                Buf(0, "const half*"),
                Buf(1, "const half*"),
                Buf(2, "half*"),
                Buf(3, "const short*"),
                Buf(4, "short*"),
            ],
        );
    }
    {
        let hv: Vec<u8> = (0..1024)
            .flat_map(|_| half::f16::from_f32(rf(&mut r, -50.0, 50.0)).to_le_bytes())
            .collect();
        let bytes: Vec<u8> = (0..1024).map(|_| r.next() as u8).collect();
        add(
            "d16_append",
            "O2",
            g1(1024, 256),
            vec![
                hv,
                bytes,
                zero(4 * 8 * 1024),
                zero(2 * 3 * 1024),
                zero(4 * 4 * 4),
            ],
            vec![
                Buf(0, "const half*"),
                Buf(1, "const uchar*"),
                Buf(2, "uint*"),
                Buf(3, "ushort*"),
                Buf(4, "int*"),
            ],
        );
    }
    add(
        "buffer_ops",
        "O2",
        g1(1024, 64),
        vec![
            u32s(ia[..1024].iter().copied()),
            zero(4 * 16 * 1024),
            zero(48 * 1024),
            u32s((0..128 + 1024).map(|k| if k < 128 { 0 } else { ib[k] })),
            u32s(small[..1024].iter().copied()),
        ],
        vec![
            Buf(0, "const uint*"),
            Buf(1, "uint*"),
            Buf(2, "uchar*"),
            Buf(3, "uint*"),
            Buf(4, "const uint*"),
        ],
    );
    {
        // Eight 16x16 problems (one per wave); floats are multiples of 1/8 in [-4, 4].
        let m = 8 * 256;
        let k8 = |r: &mut Rng| (r.next() % 65) as f32 / 8.0 - 4.0;
        let hv: Vec<u8> = (0..m)
            .flat_map(|_| half::f16::from_f32(k8(&mut r)).to_le_bytes())
            .collect();
        let hw: Vec<u8> = (0..m)
            .flat_map(|_| half::f16::from_f32(k8(&mut r)).to_le_bytes())
            .collect();
        let cv: Vec<f32> = (0..m).map(|_| (r.next() % 41) as f32 - 20.0).collect();
        let bf = |r: &mut Rng| -> Vec<u8> {
            (0..m)
                .flat_map(|_| ((k8(r).to_bits() >> 16) as u16).to_le_bytes())
                .collect()
        };
        let (bav, bbv) = (bf(&mut r), bf(&mut r));
        let iav: Vec<u8> = (0..m).map(|_| r.next() as u8).collect();
        let ibv: Vec<u8> = (0..m).map(|_| r.next() as u8).collect();
        let icv: Vec<u32> = (0..m)
            .map(|k| {
                if k % 5 == 0 {
                    0x7fff_ff00 + r.next() % 256
                } else {
                    r.next() % 100_000
                }
            })
            .collect();
        add(
            "wmma_ops",
            "O2",
            g1(256, 64),
            vec![
                hv,
                hw,
                f32s(cv),
                bav,
                bbv,
                iav,
                ibv,
                u32s(icv),
                zero(4 * 64 * 256),
            ],
            vec![
                Buf(0, "const half*"),
                Buf(1, "const half*"),
                Buf(2, "const float*"),
                Buf(3, "const ushort*"),
                Buf(4, "const ushort*"),
                Buf(5, "const uchar*"),
                Buf(6, "const uchar*"),
                Buf(7, "const int*"),
                Buf(8, "uint*"),
            ],
        );
    }
    {
        // WMMA in wave64: four 16x16 problems, one per wave of 64 (W64 build only).
        let m = 4 * 256;
        let k8 = |r: &mut Rng| (r.next() % 65) as f32 / 8.0 - 4.0;
        let hv: Vec<u8> = (0..m)
            .flat_map(|_| half::f16::from_f32(k8(&mut r)).to_le_bytes())
            .collect();
        let hw: Vec<u8> = (0..m)
            .flat_map(|_| half::f16::from_f32(k8(&mut r)).to_le_bytes())
            .collect();
        let cv: Vec<f32> = (0..m).map(|_| (r.next() % 41) as f32 - 20.0).collect();
        let iav: Vec<u8> = (0..m).map(|_| r.next() as u8).collect();
        let ibv: Vec<u8> = (0..m).map(|_| r.next() as u8).collect();
        let icv: Vec<u32> = (0..m).map(|_| r.next() % 100_000).collect();
        add(
            "wmma_w64",
            "W64",
            g1(256, 128),
            vec![hv, hw, f32s(cv), iav, ibv, u32s(icv), zero(4 * 12 * 256)],
            vec![
                Buf(0, "const half*"),
                Buf(1, "const half*"),
                Buf(2, "const float*"),
                Buf(3, "const uchar*"),
                Buf(4, "const uchar*"),
                Buf(5, "const int*"),
                Buf(6, "uint*"),
            ],
        );
    }
    {
        // MFMA f32 (gfx942 only): per group of one wave64, A and B of 64 elements, C of up to
        // 2048; multiples of 1/8 in [-4, 4] and integers in [-20, 20], so sums are exact.
        let groups = 4;
        let k8 = |r: &mut Rng| (r.next() % 65) as f32 / 8.0 - 4.0;
        let av: Vec<f32> = (0..64 * groups).map(|_| k8(&mut r)).collect();
        let bv: Vec<f32> = (0..64 * groups).map(|_| k8(&mut r)).collect();
        let cv: Vec<f32> = (0..2048 * groups)
            .map(|_| (r.next() % 41) as f32 - 20.0)
            .collect();
        add(
            "mfma_f32",
            "O2",
            g1(64 * groups as u32, 64),
            vec![f32s(av), f32s(bv), f32s(cv), zero(4 * 72 * 64 * groups)],
            vec![
                Buf(0, "const float*"),
                Buf(1, "const float*"),
                Buf(2, "const float*"),
                Buf(3, "float*"),
            ],
        );
    }
    // Wave64 builds of some kernels run on the same inputs.
    let w64 = [
        "vadd_f32",
        "branch_diverge",
        "lds_reduce",
        "scan",
        "matmul",
        "atomic_add_i32",
        "loop_diverge",
    ];
    let extra: Vec<Case> = v
        .iter()
        .filter(|c| c.opt == "O2" && w64.contains(&c.name))
        .map(|c| Case {
            opt: "W64",
            ..c.clone()
        })
        .collect();
    v.extend(extra);
    v
}

/// The kernels built for gfx1100 alone (kernels/corpus/gfx11_only: GFX11 builtins or
/// inline assembly), not for gfx942 (kernels/corpus/not_gfx942: RDNA builtins), or for gfx942
/// alone (kernels/corpus/gfx942_only: MFMA).
fn listed(file: &str) -> Vec<String> {
    let list = corpus_dir().join(file);
    std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("{}: {e}", list.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The build lists of the corpus (see [`listed`]).
pub struct Lists {
    gfx11_only: Vec<String>,
    not_gfx942: Vec<String>,
    gfx942_only: Vec<String>,
}

impl Lists {
    pub fn read() -> Lists {
        Lists {
            gfx11_only: listed("gfx11_only"),
            not_gfx942: listed("not_gfx942"),
            gfx942_only: listed("gfx942_only"),
        }
    }
}

/// Whether the corpus has a build of case `c` for `isa`'s target.
pub fn built_for(c: &Case, isa: Isa, l: &Lists) -> bool {
    let is = |list: &[String]| list.iter().any(|n| n == c.name);
    if isa != Isa::Gfx11 && is(&l.gfx11_only) {
        return false;
    }
    // gfx942 code is wave64 only: its O2 build is what the W64 builds are elsewhere.
    if isa == Isa::Gfx9 && (c.opt == "W64" || is(&l.not_gfx942)) {
        return false;
    }
    !(isa != Isa::Gfx9 && is(&l.gfx942_only))
}
