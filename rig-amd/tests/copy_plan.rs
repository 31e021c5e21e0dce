//! Copy planning: the planned SDMA packets, encoded and decoded again, are run on byte arrays;
//! every destination byte of the box is written once with its source byte and nothing else is
//! touched. Fills likewise.

use proptest::prelude::*;
use rig_amd::copy_plan::{self, CopyBox, FillBox, Limits, Step};
use rig_amd::gpu::Gpu;
use rig_amd::sdma::{self, Layout, Packet};

const MEM: usize = 1 << 16;
const DST_BASE: u64 = 1 << 15;

/// Memory with a count of writes per byte.
struct Mem {
    bytes: Vec<u8>,
    writes: Vec<u8>,
}

impl Mem {
    fn new(seed: u64) -> Self {
        let mut x = seed | 1;
        let bytes = (0..MEM)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Self {
            bytes,
            writes: vec![0; MEM],
        }
    }

    fn write(&mut self, at: u64, b: u8) {
        self.bytes[at as usize] = b;
        self.writes[at as usize] += 1;
    }

    /// Runs the SDMA packets of `words` as an engine of `layout` would.
    fn run(&mut self, layout: Layout, words: &[u32]) {
        for p in sdma::packets(layout, words) {
            match p.unwrap().1 {
                Packet::CopyLinear(c) => {
                    assert_eq!((c.flags, c.parameter), (0, 0));
                    for i in 0..c.bytes {
                        let b = self.bytes[(c.src + i) as usize];
                        self.write(c.dst + i, b);
                    }
                }
                Packet::SubWindow(w) => {
                    let e = 1u64 << w.log2_element;
                    assert_eq!(w.depth, 1);
                    for row in 0..w.height as u64 {
                        let s = w.src.address
                            + ((w.src.y as u64 + row) * w.src.pitch as u64 + w.src.x as u64) * e;
                        let d = w.dst.address
                            + ((w.dst.y as u64 + row) * w.dst.pitch as u64 + w.dst.x as u64) * e;
                        for i in 0..w.width as u64 * e {
                            let b = self.bytes[(s + i) as usize];
                            self.write(d + i, b);
                        }
                    }
                }
                Packet::ConstFill(f) => {
                    assert_eq!((f.fill_size, f.dst % 4, f.bytes % 4), (2, 0, 0));
                    let pattern = f.value.to_le_bytes();
                    for i in 0..f.bytes {
                        self.write(f.dst + i, pattern[(i % 4) as usize]);
                    }
                }
                other => panic!("a plan made {other:?}"),
            }
        }
    }
}

fn encode(layout: Layout, steps: impl Iterator<Item = Step>) -> Vec<u32> {
    let steps: Vec<Step> = steps.collect();
    let mut out = vec![0; steps.iter().map(Step::words).sum()];
    let n = copy_plan::encode_all(layout, steps, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

fn check_copy(limits: &Limits, layout: Layout, b: &CopyBox, seed: u64) {
    let count = copy_plan::count_copy(limits, b).unwrap();
    let words = encode(layout, copy_plan::copy(limits, b).unwrap());
    assert_eq!(count.words, words.len() as u64);
    assert_eq!(count.packets, sdma::packets(layout, &words).count() as u64);
    let before = Mem::new(seed);
    let mut mem = Mem::new(seed);
    mem.run(layout, &words);
    let mut want = before.bytes.clone();
    let mut want_writes = vec![0u8; MEM];
    for r in 0..b.rows {
        for c in 0..b.width {
            let d = (b.dst + r * b.dst_pitch + c) as usize;
            want[d] = before.bytes[(b.src + r * b.src_pitch + c) as usize];
            want_writes[d] = 1;
        }
    }
    assert!(
        mem.writes == want_writes,
        "bytes written other than once each: {b:?}"
    );
    assert!(mem.bytes == want, "wrong bytes: {b:?}");
}

fn limits() -> impl Strategy<Value = (Limits, Layout)> {
    let gpus = ["gfx942", "gfx1100", "gfx1201"];
    (
        prop::sample::select(gpus.to_vec()),
        prop::sample::select(vec![4u64, 12, 64, 1 << 30]),
        prop::sample::select(vec![1u32, 2, 3, 7, 1 << 14]),
        prop::sample::select(vec![1u32, 8, 1 << 14]),
        prop::sample::select(vec![16u32, 1 << 14]),
    )
        .prop_map(|(gpu, linear_bytes, most_rows, most_width, most_pitch)| {
            let gpu = Gpu::by_name(gpu).unwrap();
            let layout = Layout::for_gpu(gpu);
            let real = Limits::of(gpu);
            (
                Limits {
                    linear_bytes: linear_bytes.min(real.linear_bytes),
                    most_rows,
                    most_width,
                    most_pitch: most_pitch.min(real.most_pitch),
                },
                layout,
            )
        })
}

fn copy_box() -> impl Strategy<Value = CopyBox> {
    (
        1u64..200,
        1u64..40,
        0u64..40,
        0u64..40,
        0u64..16,
        0u64..16,
        any::<[bool; 2]>(),
    )
        .prop_map(|(width, rows, sx, dx, s_off, d_off, round)| {
            let pitch = |extra: u64, round: bool| {
                let p = width + extra;
                if round { p.next_multiple_of(4) } else { p }
            };
            CopyBox {
                src: s_off,
                dst: DST_BASE + d_off,
                width,
                rows,
                src_pitch: pitch(sx, round[0]),
                dst_pitch: pitch(dx, round[1]),
            }
        })
}

#[test]
fn a_box_of_aligned_rows_is_one_sub_window() {
    let gpu = Gpu::by_name("gfx1100").unwrap();
    let (l, layout) = (Limits::of(gpu), Layout::for_gpu(gpu));
    let b = CopyBox {
        src: 0x100,
        dst: DST_BASE + 2,
        width: 30,
        rows: 20,
        src_pitch: 64,
        dst_pitch: 36,
    };
    let steps: Vec<Step> = copy_plan::copy(&l, &b).unwrap().collect();
    assert_eq!(steps.len(), 1);
    assert!(matches!(
        steps[0],
        Step::SubWindow {
            log2_element: 1,
            rows: 20,
            ..
        }
    ));
    check_copy(&l, layout, &b, 1);
    // Unaligned pitch: one linear copy per row.
    let b = CopyBox { src_pitch: 63, ..b };
    assert_eq!(copy_plan::count_copy(&l, &b).unwrap().packets, 20);
    check_copy(&l, layout, &b, 2);
}

#[test]
fn counts_of_large_boxes_without_building_them() {
    let gpu = Gpu::by_name("gfx942").unwrap();
    let l = Limits::of(gpu);
    // 100,000 rows in 16-byte elements: ceil(100000 / 16384) = 7 sub-windows of 13 words.
    let b = CopyBox {
        src: 0,
        dst: 1 << 40,
        width: 4096,
        rows: 100_000,
        src_pitch: 8192,
        dst_pitch: 4096,
    };
    let c = copy_plan::count_copy(&l, &b).unwrap();
    assert_eq!((c.packets, c.words), (7, 91));
    assert_eq!(copy_plan::copy(&l, &b).unwrap().count(), 7);
    // A 3 GiB row at 1 GiB a packet.
    let c = copy_plan::count_copy(&l, &CopyBox::linear(0, 1 << 40, 3 << 30)).unwrap();
    assert_eq!((c.packets, c.words), (3, 21));
    let f = FillBox {
        dst: 1,
        bytes: (2 << 30) + 10,
        value: 7,
        pattern: 0x100,
    };
    let c = copy_plan::count_fill(&l, &f).unwrap();
    // Head 3 bytes, 2 GiB + 4 bytes of dwords in 3 fills, tail 3 bytes.
    assert_eq!((c.packets, c.words), (5, 7 + 15 + 7));
    assert_eq!(copy_plan::fill(&l, &f).unwrap().count(), 5);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn planned_copies_cover_exactly_the_box((l, layout) in limits(), b in copy_box(), seed in any::<u64>()) {
        check_copy(&l, layout, &b, seed);
    }

    #[test]
    fn planned_fills_cover_exactly_the_range(
        (l, layout) in limits(),
        off in 0u64..8,
        bytes in 0u64..200,
        value in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let pattern = 0x40;
        let f = FillBox { dst: DST_BASE + off, bytes, value, pattern };
        let count = copy_plan::count_fill(&l, &f).unwrap();
        let words = encode(layout, copy_plan::fill(&l, &f).unwrap());
        prop_assert_eq!(count.words, words.len() as u64);
        let mut mem = Mem::new(seed);
        for i in 0..4 {
            mem.bytes[pattern as usize + i] = value;
        }
        let before = mem.bytes.clone();
        mem.run(layout, &words);
        for a in 0..MEM as u64 {
            let inside = a >= f.dst && a < f.dst + bytes;
            let (want, writes) = if inside { (value, 1) } else { (before[a as usize], 0) };
            prop_assert_eq!(mem.bytes[a as usize], want, "byte {:#x}", a);
            prop_assert_eq!(mem.writes[a as usize], writes, "writes of {:#x}", a);
        }
        // Each end is at most three bytes from the pattern's four.
        for s in copy_plan::fill(&l, &f).unwrap() {
            if let Step::Linear { src, bytes, .. } = s {
                prop_assert_eq!(src, pattern);
                prop_assert!(bytes <= 3);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any box or fill, however absurd, is planned or refused without a panic, and its count
    /// matches its steps.
    #[test]
    fn arbitrary_boxes_never_panic(
        (l, _) in limits(),
        v in any::<[u64; 6]>(),
        small in any::<[bool; 3]>(),
    ) {
        let shrink = |x: u64, s: bool| if s { x % 4096 } else { x };
        let b = CopyBox {
            src: v[0],
            dst: v[1],
            width: shrink(v[2], small[0]),
            rows: shrink(v[3], small[1]),
            src_pitch: shrink(v[4], small[2]),
            dst_pitch: v[5],
        };
        if let Some(c) = copy_plan::count_copy(&l, &b).ok().filter(|c| c.packets <= 4096) {
            let steps = copy_plan::copy(&l, &b).unwrap();
            prop_assert_eq!(steps.count() as u64, c.packets);
        }
        let f = FillBox { dst: v[0], bytes: shrink(v[2], small[0]), value: 1, pattern: v[1] };
        if let Some(c) = copy_plan::count_fill(&l, &f).ok().filter(|c| c.packets <= 4096) {
            prop_assert_eq!(copy_plan::fill(&l, &f).unwrap().count() as u64, c.packets);
        }
    }
}
