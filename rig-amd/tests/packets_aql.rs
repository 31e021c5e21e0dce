//! AQL packets: words pinned to ROCR's hsa.h / hsa_ext_amd.h layouts, round trips, and
//! arbitrary words that never panic.

use proptest::prelude::*;
use rig_amd::aql::{
    self, Barrier, BarrierValue, Condition, DecodeError, Header, KernelDispatch, Packet, Pm4Ib,
    Scope,
};

const SYSTEM: Header = Header {
    barrier: true,
    acquire: Scope::System,
    release: Scope::System,
};

#[test]
fn kernel_dispatch_layout() {
    let p = KernelDispatch {
        header: SYSTEM,
        dimensions: 3,
        workgroup_size: [64, 2, 1],
        grid_size: [1024, 4, 1],
        private_segment_size: 16,
        group_segment_size: 512,
        kernel_object: 0x7f00_0000_1000,
        kernarg_address: 0x7f00_0000_2000,
        completion_signal: 0x7f00_0000_3000,
    };
    let w = p.encode().unwrap();
    // Header: type 2 | barrier 1 << 8 | acquire 2 << 9 | release 2 << 11 = 0x1502; setup 3.
    assert_eq!(
        w,
        [
            0x0003_1502,
            64 | 2 << 16,
            1,
            1024,
            4,
            1,
            16,
            512,
            0x1000,
            0x7f00,
            0x2000,
            0x7f00,
            0,
            0,
            0x3000,
            0x7f00
        ]
    );
    assert_eq!(aql::decode(&w), Ok(Packet::KernelDispatch(p)));
    let mut ring = [0u32; 16];
    assert_eq!(
        aql::encode_into(&Packet::KernelDispatch(p), &mut ring),
        Ok(16)
    );
    assert_eq!(ring, w);
}

#[test]
fn barriers_and_invalid() {
    let b = Barrier {
        header: Header {
            barrier: false,
            acquire: Scope::Agent,
            release: Scope::None,
        },
        dep_signal: [0x10, 0x20, 0, 0, 0x50],
        completion_signal: 0x60,
    };
    let and = b.encode(true);
    // Type 3 | acquire 1 << 9; dep_signal[i] at byte 8 + 8i; completion at 56.
    assert_eq!(and[0], 3 | 1 << 9);
    assert_eq!((and[2], and[4], and[10], and[14]), (0x10, 0x20, 0x50, 0x60));
    assert_eq!(aql::decode(&and), Ok(Packet::BarrierAnd(b)));
    let or = b.encode(false);
    assert_eq!(or[0] & 0xff, 5);
    assert_eq!(aql::decode(&or), Ok(Packet::BarrierOr(b)));
    // An INVALID slot decodes whatever else it holds: the processor waits on it.
    let mut slot = [0xffff_ffffu32; 16];
    slot[0] = 0xffff_0001;
    assert_eq!(aql::decode(&slot), Ok(Packet::Invalid));
    assert_eq!(Packet::Invalid.encode().unwrap()[0], 1);
}

#[test]
fn amd_barrier_value() {
    let p = BarrierValue {
        header: SYSTEM,
        signal: 0x1234_5678_9000,
        value: 5,
        mask: -1,
        cond: Condition::Gte,
        completion_signal: 0,
    };
    let w = p.encode();
    // Vendor type 0, AmdFormat 2 at byte 2; signal 8, value 16, mask 24, cond 32.
    assert_eq!(w[0], 0x1500 | 2 << 16);
    assert_eq!(
        (w[2], w[3], w[4], w[6], w[7], w[8]),
        (0x5678_9000, 0x1234, 5, u32::MAX, u32::MAX, 3)
    );
    assert_eq!(aql::decode(&w), Ok(Packet::BarrierValue(p)));
    assert!(Condition::Gte.passes(7, -1, 5));
    assert!(!Condition::Lt.passes(7, -1, 5));
}

#[test]
fn amd_pm4_ib() {
    let p = Pm4Ib {
        header: SYSTEM,
        address: 0x7f00_1234_5670,
        size_dw: 24,
        completion_signal: 0x9000,
    };
    let w = p.encode().unwrap();
    // Vendor type 0, format 1 at byte 2; an INDIRECT_BUFFER (opcode 0x3f, 4 dwords) at byte
    // 4 (shader type compute); dw_count_remain 10 at byte 20; the completion signal at 56.
    assert_eq!(w[0], 0x1500 | 1 << 16);
    assert_eq!(w[1], 0xc002_3f02);
    assert_eq!(
        (w[2], w[3], w[4], w[5]),
        (0x1234_5670, 0x7f00, 24 | 1 << 23, 10)
    );
    assert_eq!((w[14], w[15]), (0x9000, 0));
    assert_eq!(aql::decode(&w), Ok(Packet::Pm4Ib(p)));
    // A chained buffer, another count of remaining dwords, a reserved word: refused.
    for (i, v) in [(4, w[4] | 1 << 20), (5, 9), (9, 1)] {
        let mut bad = w;
        bad[i] = v;
        assert!(aql::decode(&bad).is_err(), "word {i} = {v:#x} decoded");
    }
    let mut not_ib = w;
    not_ib[1] = 0xc002_1000;
    assert!(matches!(
        aql::decode(&not_ib),
        Err(DecodeError::BadValue {
            field: "pm4_ib_command",
            ..
        })
    ));
}

#[test]
fn errors_name_the_problem() {
    assert_eq!(
        aql::decode(&[0; 15]),
        Err(DecodeError::Truncated { have: 15 })
    );
    let mut w = [0u32; 16];
    w[0] = 4; // agent dispatch
    assert!(matches!(
        aql::decode(&w),
        Err(DecodeError::UnknownType { kind: 4, .. })
    ));
    w[0] = 0x7 << 16; // vendor format 7
    assert_eq!(
        aql::decode(&w),
        Err(DecodeError::UnknownVendorFormat { format: 7 })
    );
    w[0] = 2 | 3 << 9 | 1 << 16; // scope 3
    assert!(matches!(aql::decode(&w), Err(DecodeError::BadValue { .. })));
    w[0] = 2; // dimensions 0
    assert!(matches!(aql::decode(&w), Err(DecodeError::BadValue { .. })));
}

fn scope() -> impl Strategy<Value = Scope> {
    prop::sample::select(vec![Scope::None, Scope::Agent, Scope::System])
}

fn header() -> impl Strategy<Value = Header> {
    (any::<bool>(), scope(), scope()).prop_map(|(barrier, acquire, release)| Header {
        barrier,
        acquire,
        release,
    })
}

fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        Just(Packet::Invalid),
        (
            header(),
            1u8..=3,
            any::<[u16; 3]>(),
            any::<[u32; 3]>(),
            any::<[u32; 2]>(),
            any::<[u64; 3]>()
        )
            .prop_map(
                |(header, dimensions, wg, grid, seg, a)| Packet::KernelDispatch(KernelDispatch {
                    header,
                    dimensions,
                    workgroup_size: wg,
                    grid_size: grid,
                    private_segment_size: seg[0],
                    group_segment_size: seg[1],
                    kernel_object: a[0],
                    kernarg_address: a[1],
                    completion_signal: a[2],
                })
            ),
        (header(), any::<[u64; 5]>(), any::<u64>(), any::<bool>()).prop_map(
            |(header, dep_signal, c, and)| {
                let b = Barrier {
                    header,
                    dep_signal,
                    completion_signal: c,
                };
                if and {
                    Packet::BarrierAnd(b)
                } else {
                    Packet::BarrierOr(b)
                }
            }
        ),
        (
            header(),
            any::<u64>(),
            any::<i64>(),
            any::<i64>(),
            0u32..4,
            any::<u64>()
        )
            .prop_map(|(header, signal, value, mask, c, completion_signal)| {
                Packet::BarrierValue(BarrierValue {
                    header,
                    signal,
                    value,
                    mask,
                    cond: [Condition::Eq, Condition::Ne, Condition::Lt, Condition::Gte][c as usize],
                    completion_signal,
                })
            }),
        (header(), any::<u64>(), 0u32..1 << 20, any::<u64>()).prop_map(
            |(header, a, size_dw, completion_signal)| Packet::Pm4Ib(Pm4Ib {
                header,
                address: a & !3,
                size_dw,
                completion_signal,
            })
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_round_trips(p in packet()) {
        let w = p.encode().unwrap();
        prop_assert_eq!(aql::decode(&w), Ok(p));
    }

    #[test]
    fn arbitrary_words_never_panic(v in prop::collection::vec(any::<u32>(), 0..20), kind in 0u32..7) {
        let mut v = v;
        if let Some(h) = v.first_mut() {
            *h = (*h & !0xff) | kind;
        }
        match aql::decode(&v) {
            Ok(p) if p != Packet::Invalid => prop_assert_eq!(p.encode().unwrap().to_vec(), v[..16].to_vec()),
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
