//! SDMA packets per generation: words pinned to the header facts (vega10/navi10/sdma_v6_0_0
//! pkt_open.h, Mesa's SDMA 7 pitch field), round trips, and arbitrary words that never panic.

use proptest::prelude::*;
use rig_amd::gpu::{Gpu, IpVersion};
use rig_amd::pm4::Compare;
use rig_amd::sdma::{
    self, ConstFill, CopyLinear, DecodeError, Fence, GcrReq, Layout, Nop, Packet, PollRegMem,
    SubWindow, Surface, Timestamp, Trap,
};

fn layout(name: &str) -> Layout {
    Layout::for_gpu(Gpu::by_name(name).unwrap())
}

fn words(l: Layout, p: Packet) -> Vec<u32> {
    let v = p.to_words(l).unwrap();
    let (back, n) = sdma::decode_with(l, &v).unwrap();
    assert_eq!((back, n), (p, v.len()));
    v
}

#[test]
fn layouts_per_generation() {
    let gfx942 = layout("gfx942");
    assert_eq!((gfx942.major, gfx942.count_bits), (4, 30));
    assert!(!gfx942.has_gcr());
    assert_eq!(Layout::of(IpVersion::new(4, 4, 0)).count_bits, 22);
    assert_eq!(Layout::of(IpVersion::new(5, 0, 0)).count_bits, 22);
    assert_eq!(Layout::of(IpVersion::new(5, 2, 0)).count_bits, 30);
    let gfx1100 = layout("gfx1100");
    assert_eq!((gfx1100.major, gfx1100.count_bits), (6, 30));
    assert!(gfx1100.has_gcr());
    assert_eq!(gfx1100.most_pitch(), 1 << 19);
    assert_eq!(layout("gfx1201").most_pitch(), 1 << 14);
    for g in rig_amd::gpu::GPUS {
        assert_eq!(
            Layout::for_gpu(g).most_bytes(),
            g.linear_copy_bytes(),
            "{}",
            g.name()
        );
    }
}

#[test]
fn copy_linear_and_fill() {
    let l = layout("gfx1100");
    // op 1, sub-op 0; COUNT is bytes - 1.
    let v = words(
        l,
        Packet::CopyLinear(CopyLinear::new(0x1_0000_0004, 0x2_0000_0008, 100)),
    );
    assert_eq!(v, [0x0000_0001, 99, 0, 4, 1, 8, 2]);
    // 1 GiB fits SDMA 6's 30-bit count, not SDMA 4.0's 22 bits.
    assert!(
        CopyLinear::new(0, 0, 1 << 30)
            .encode(l, &mut [0; 7])
            .is_ok()
    );
    assert!(
        CopyLinear::new(0, 0, (1 << 30) + 1)
            .encode(l, &mut [0; 7])
            .is_err()
    );
    let old = Layout::of(IpVersion::new(4, 0, 0));
    assert!(
        CopyLinear::new(0, 0, (4 << 20) + 1)
            .encode(old, &mut [0; 7])
            .is_err()
    );
    assert!(matches!(
        sdma::decode_with(old, &[1, 1 << 22, 0, 0, 0, 0, 0]),
        Err(DecodeError::BadCount { .. })
    ));
    // CONSTANT_FILL: op 11, FILLSIZE 2 (dwords) in 31:30; COUNT bytes - 1.
    let v = words(
        l,
        Packet::ConstFill(ConstFill::dwords(0x1000, 0xabab_abab, 64)),
    );
    assert_eq!(v, [0x8000_000B, 0x1000, 0, 0xabab_abab, 63]);
}

#[test]
fn sub_window_pitch_moves_on_sdma_7() {
    let p = SubWindow {
        log2_element: 2,
        src: Surface {
            address: 0x1000,
            x: 1,
            y: 2,
            z: 0,
            pitch: 64,
            slice_pitch: 640,
        },
        dst: Surface {
            address: 0x8000,
            x: 0,
            y: 0,
            z: 0,
            pitch: 32,
            slice_pitch: 320,
        },
        width: 16,
        height: 10,
        depth: 1,
    };
    // Header: op 1 | sub-op 4 << 8 | ELEMENTSIZE 2 << 29. Pitches less one at bit 13 (SDMA
    // 4-6), at bit 16 on SDMA 7; rect sizes less one.
    let v6 = words(layout("gfx1100"), Packet::SubWindow(p));
    assert_eq!(
        v6,
        [
            0x4000_0401,
            0x1000,
            0,
            1 | 2 << 16,
            63 << 13,
            639,
            0x8000,
            0,
            0,
            31 << 13,
            319,
            15 | 9 << 16,
            0
        ]
    );
    let v7 = words(layout("gfx1201"), Packet::SubWindow(p));
    assert_eq!(v7[4], 63 << 16);
    assert_eq!(v7[9], 31 << 16);
    assert_eq!(words(layout("gfx942"), Packet::SubWindow(p)), v6);
}

#[test]
fn fence_trap_poll_timestamp_gcr_nop() {
    let l = layout("gfx1201");
    let fence = Fence {
        mtype: sdma::FENCE_MTYPE_UC,
        address: 0x5_0000_1004,
        value: 77,
    };
    assert_eq!(words(l, Packet::Fence(fence)), [0x0003_0005, 0x1004, 5, 77]);
    assert_eq!(Fence::new(l, 0x5_0000_1004, 77), fence);
    // SDMA 4 has no MTYPE: the field is reserved there.
    let v4 = layout("gfx942");
    assert_eq!(Fence::new(v4, 8, 1).mtype, 0);
    assert!(Packet::Fence(fence).to_words(v4).is_err());
    assert!(matches!(
        sdma::decode_with(v4, &[0x0003_0005, 0x1004, 5, 77]),
        Err(DecodeError::Reserved { .. })
    ));
    assert_eq!(words(l, Packet::Trap(Trap { context: 9 })), [6, 9]);
    let poll = PollRegMem {
        hdp_flush: false,
        function: Compare::GreaterEqual,
        memory: true,
        address: 0x2000,
        value: 5,
        mask: u32::MAX,
        interval: 10,
        retry_count: 0xfff,
    };
    // MEM_POLL 31 | FUNC 5 << 28 | op 8.
    assert_eq!(
        words(l, Packet::PollRegMem(poll)),
        [0xD000_0008, 0x2000, 0, 5, u32::MAX, 10 | 0xfff << 16]
    );
    // op 13, sub-op GET_GLOBAL 2.
    assert_eq!(
        words(l, Packet::Timestamp(Timestamp::global(0x3000))),
        [0x020D, 0x3000, 0]
    );
    // Linux's sdma_v7_0 mem_sync: GCR_CONTROL 0xC3A1 over everything, VMID 0.
    assert_eq!(
        words(l, Packet::GcrReq(GcrReq::all(0xC3A1))),
        [0x11, 0, 0xC3A1_0000, 0, 0]
    );
    assert!(
        GcrReq::all(0xC3A1)
            .encode(layout("gfx942"), &mut [0; 5])
            .is_err()
    );
    assert!(matches!(
        sdma::decode_with(layout("gfx942"), &[0x11, 0, 0, 0, 0]),
        Err(DecodeError::UnknownOpcode { opcode: 17, .. })
    ));
    // NOP: COUNT in 29:16 words follow.
    assert_eq!(words(l, Packet::Nop(Nop { words: 1 })), [0]);
    assert_eq!(words(l, Packet::Nop(Nop { words: 3 })), [0x0002_0000, 0, 0]);
    let mut ring = [0xffff_ffffu32; 17_000];
    sdma::pad(&mut ring);
    let total: usize = sdma::packets(l, &ring).map(|p| p.unwrap().1.words()).sum();
    assert_eq!(total, ring.len());
}

#[test]
fn decode_errors_name_the_problem() {
    let l = layout("gfx1100");
    assert_eq!(sdma::decode_with(l, &[]), Err(DecodeError::Empty));
    let e = sdma::decode_with(l, &[0x0000_0302]).unwrap_err();
    assert!(matches!(
        e,
        DecodeError::UnknownOpcode {
            opcode: 2,
            sub_op: 3,
            ..
        }
    ));
    assert!(e.to_string().contains("opcode 2"));
    assert!(matches!(
        sdma::decode_with(l, &[5, 0]),
        Err(DecodeError::Truncated {
            need: 4,
            have: 2,
            ..
        })
    ));
    assert!(matches!(
        sdma::decode_with(l, &[6, 1 << 28]),
        Err(DecodeError::Reserved { .. })
    ));
}

// ------------------------------------------------------------------------------------------

fn any_layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(vec![
        Layout::of(IpVersion::new(4, 0, 0)),
        Layout::of(IpVersion::new(4, 4, 2)),
        Layout::of(IpVersion::new(5, 0, 0)),
        Layout::of(IpVersion::new(5, 2, 0)),
        Layout::of(IpVersion::new(6, 0, 0)),
        Layout::of(IpVersion::new(7, 0, 0)),
    ])
}

fn surface(l: Layout) -> impl Strategy<Value = Surface> {
    let z_most = if l.major >= 5 { 1u32 << 13 } else { 1 << 11 };
    (
        any::<u64>(),
        0u32..1 << 14,
        0u32..1 << 14,
        0..z_most,
        1..=l.most_pitch(),
        1u32..=1 << 28,
    )
        .prop_map(|(a, x, y, z, pitch, slice_pitch)| Surface {
            address: a & !3,
            x,
            y,
            z,
            pitch,
            slice_pitch,
        })
}

fn packet(l: Layout) -> impl Strategy<Value = Packet> {
    let most = l.most_bytes();
    let z_most = if l.major >= 5 { 1u32 << 13 } else { 1 << 11 };
    let gcr = l.has_gcr();
    prop_oneof![
        (1u32..=0x4000).prop_map(|n| Packet::Nop(Nop { words: n })),
        (
            any::<u16>(),
            1..=most,
            any::<u32>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(flags, bytes, parameter, src, dst)| Packet::CopyLinear(
                CopyLinear {
                    flags,
                    bytes,
                    parameter,
                    src,
                    dst
                }
            )),
        (
            0u8..=4,
            surface(l),
            surface(l),
            1u32..=1 << 14,
            1u32..=1 << 14,
            1..=z_most
        )
            .prop_map(
                |(log2_element, src, dst, width, height, depth)| Packet::SubWindow(SubWindow {
                    log2_element,
                    src,
                    dst,
                    width,
                    height,
                    depth
                })
            ),
        (any::<u64>(), any::<u32>(), 1..=most / 4).prop_map(|(dst, value, dwords)| {
            Packet::ConstFill(ConstFill::dwords(dst & !3, value, dwords * 4))
        }),
        (0u8..8, any::<u64>(), any::<u32>()).prop_map(move |(mtype, a, value)| Packet::Fence(
            Fence {
                mtype: if l.major >= 5 { mtype } else { 0 },
                address: a & !3,
                value
            }
        )),
        (0u32..1 << 28).prop_map(|context| Packet::Trap(Trap { context })),
        (
            any::<bool>(),
            0u8..7,
            any::<bool>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            0u16..1 << 12
        )
            .prop_map(|(hdp, f, mem, a, value, mask, interval, retry)| {
                let function = [
                    Compare::Always,
                    Compare::Less,
                    Compare::LessEqual,
                    Compare::Equal,
                    Compare::NotEqual,
                    Compare::GreaterEqual,
                    Compare::Greater,
                ][f as usize];
                Packet::PollRegMem(PollRegMem {
                    hdp_flush: hdp,
                    function,
                    memory: mem,
                    address: if mem { a & !3 } else { a },
                    value,
                    mask,
                    interval,
                    retry_count: retry,
                })
            }),
        (prop::sample::select(vec![1u8, 2]), any::<u64>()).prop_map(|(sub_op, a)| {
            Packet::Timestamp(Timestamp {
                sub_op,
                address: a & !7,
            })
        }),
        (any::<u64>(), any::<u64>(), 0u32..1 << 19, 0u8..16).prop_map(move |(b, lim, c, vmid)| {
            if !gcr {
                return Packet::Trap(Trap { context: c });
            }
            Packet::GcrReq(GcrReq {
                base: b & 0xffff_ffff_ff80,
                limit: lim & 0xffff_ffff_ff80,
                gcr_control: c,
                vmid,
            })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_round_trips((l, p) in any_layout().prop_flat_map(|l| (Just(l), packet(l)))) {
        let v = p.to_words(l).unwrap();
        prop_assert_eq!(v.len(), p.words());
        let (back, n) = sdma::decode_with(l, &v).unwrap();
        prop_assert_eq!(n, v.len());
        prop_assert_eq!(back, p);
        if v.len() > 1 {
            let is_truncated = matches!(sdma::decode_with(l, &v[..v.len() - 1]), Err(DecodeError::Truncated { .. }));
            prop_assert!(is_truncated);
        }
    }

    #[test]
    fn arbitrary_words_never_panic(l in any_layout(), v in prop::collection::vec(any::<u32>(), 0..20)) {
        if let Ok((p, n)) = sdma::decode_with(l, &v) {
            prop_assert!(n >= 1 && n <= v.len());
            if !matches!(p, Packet::Nop(_)) {
                prop_assert_eq!(p.to_words(l).unwrap(), v[..n].to_vec());
            }
        }
    }

    #[test]
    fn known_opcodes_with_random_bodies_never_panic(
        l in any_layout(),
        op in prop::sample::select(vec![0u32, 1, 5, 6, 8, 11, 13, 17]),
        sub in 0u32..6,
        high in any::<u16>(),
        body in prop::collection::vec(any::<u32>(), 0..14),
    ) {
        let mut v = vec![op | sub << 8 | (high as u32) << 16];
        v.extend(body);
        match sdma::decode_with(l, &v) {
            Ok((_, n)) => prop_assert!(n <= v.len()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
