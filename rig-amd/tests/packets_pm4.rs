//! PM4 packets: words pinned to the header facts (nvd.h, soc15d.h, PAL's MEC packets), round
//! trips of every packet, and arbitrary words that decode to an error, never a panic.

use proptest::prelude::*;
use rig_amd::pm4::{
    self, AcquireMem, Compare, CopyData, CopyDst, CopySrc, DataSel, DecodeError, DispatchDirect,
    EventWrite, IndirectBuffer, IntSel, Nop, Packet, ReleaseMem, SetShReg, WaitRegMem,
    WaitRegMem64, WriteData,
};

fn words(p: Packet<'_>) -> Vec<u32> {
    let v = p.to_words().unwrap();
    let (back, n) = pm4::decode(&v).unwrap();
    assert_eq!(n, v.len());
    assert_eq!(back, p);
    v
}

// Header: type 3 in 31:30, count (words - 2) in 29:16, opcode in 15:8, compute bit 1.
const fn hdr(op: u32, total: u32) -> u32 {
    3 << 30 | (total - 2) << 16 | op << 8 | 2
}

#[test]
fn headers_follow_nvd_h() {
    assert_eq!(pm4::header(0x15, 5), 0xC003_1502);
    assert_eq!(hdr(0x76, 4), 0xC002_7602);
}

#[test]
fn nop_padding() {
    // One word: count 0x3fff, Linux's single-dword NOP.
    assert_eq!(words(Packet::Nop(Nop { words: 1 })), [0xFFFF_1002]);
    assert_eq!(words(Packet::Nop(Nop { words: 3 })), [0xC001_1002, 0, 0]);
    let mut ring = [0xdead_beef; 20_000];
    assert_eq!(pm4::pad(&mut ring), 20_000);
    let mut total = 0;
    for p in pm4::packets(&ring) {
        let (_, p) = p.unwrap();
        assert!(matches!(p, Packet::Nop(_)));
        total += p.words();
    }
    assert_eq!(total, 20_000);
    // Any count of NOP decodes, whatever its body holds.
    let nop = [hdr(0x10, 4), 1, 2, 3];
    let (p, n) = pm4::decode(&nop).unwrap();
    assert_eq!((p, n), (Packet::Nop(Nop { words: 4 }), 4));
}

#[test]
fn set_sh_reg_and_dispatch() {
    let v = words(Packet::SetShReg(SetShReg {
        offset: 0x20c,
        values: &[0x1234_5678, 0x9a],
    }));
    assert_eq!(v, [0xC002_7602, 0x20c, 0x1234_5678, 0x9a]);
    let v = words(Packet::DispatchDirect(DispatchDirect {
        dim: [4, 5, 6],
        initiator: 0x8005,
    }));
    assert_eq!(v, [0xC003_1502, 4, 5, 6, 0x8005]);
}

#[test]
fn release_mem_64_bit_with_interrupt() {
    let p = ReleaseMem::timeline(
        pm4::gcr::RELEASE_WRITE_BACK,
        0x1_2345_6780,
        0xaaaa_bbbb_cccc_dddd,
    );
    let v = words(Packet::ReleaseMem(p));
    // EVENT_TYPE 0x14 | EVENT_INDEX 5 << 8 | GL2_WB (21) | GLM_WB (12) | SEQ (22);
    // INT_SEL 2 << 24 | DATA_SEL 2 << 29.
    assert_eq!(
        v,
        [
            0xC006_4902,
            0x14 | 5 << 8 | 1 << 21 | 1 << 12 | 1 << 22,
            0x4200_0000,
            0x2345_6780,
            0x1,
            0xcccc_dddd,
            0xaaaa_bbbb,
            0
        ]
    );
    // 32-bit data and the GPU clock, no interrupt.
    let low = ReleaseMem {
        data_sel: DataSel::Low32,
        int_sel: IntSel::None,
        address: 0x1004,
        ..p
    };
    assert_eq!(words(Packet::ReleaseMem(low))[2], 1 << 29);
    let clock = ReleaseMem {
        data_sel: DataSel::GpuClock,
        int_sel: IntSel::None,
        address: 0x1008,
        ..p
    };
    assert_eq!(words(Packet::ReleaseMem(clock))[2], 3 << 29);
    // 64-bit data needs an 8-byte-aligned address.
    assert!(
        ReleaseMem {
            address: 0x1004,
            ..p
        }
        .encode(&mut [0; 8])
        .is_err()
    );
    // GFX9's EOP bits sit in the same word.
    let g9 = ReleaseMem {
        cache: pm4::coher::RELEASE_WRITE_BACK,
        ..p
    };
    assert_eq!(
        words(Packet::ReleaseMem(g9))[1],
        0x14 | 5 << 8 | 1 << 15 | 1 << 17
    );
}

#[test]
fn waits() {
    let v = words(Packet::WaitRegMem(WaitRegMem::memory_at_least(0x2000, 7)));
    // FUNCTION 5 (>=) | MEM_SPACE 1 << 4.
    assert_eq!(v, [0xC005_3C02, 0x15, 0x2000, 0, 7, u32::MAX, 4]);
    let v = words(Packet::WaitRegMem64(WaitRegMem64::at_least(
        0x3_0000_0008,
        0x5_0000_0001,
    )));
    assert_eq!(v, [0xC007_9302, 0x15, 8, 3, 1, 5, u32::MAX, u32::MAX, 4]);
    assert!(WaitRegMem64::at_least(0x4, 1).encode(&mut [0; 9]).is_err());
}

#[test]
fn acquire_mem_both_forms() {
    // GFX10+ (nvd.h): 8 words, GCR_CNTL last. Linux's gfx11 mem_sync bits plus GLK_WB/GLM_WB:
    // GLI_INV 1 | GLM_WB 0x10 | GLM_INV 0x20 | GLK_WB 0x40 | GLK_INV 0x80 | GLV_INV 0x100 |
    // GL1_INV 0x200 | GL2_INV 0x4000 | GL2_WB 0x8000.
    assert_eq!(pm4::gcr::ALL, 0xC3F1);
    let v = words(Packet::AcquireMem(AcquireMem::gfx10(pm4::gcr::ALL)));
    assert_eq!(
        v,
        [0xC006_5802, 0, 0xffff_ffff, 0xff_ffff, 0, 0, 10, 0xC3F1]
    );
    // GFX9 (soc15d.h): 7 words, CP_COHER_CNTL first: SH_ICACHE 29, SH_KCACHE 27, TCL1 22,
    // TC 23, TC_WB 18.
    assert_eq!(
        pm4::coher::ALL,
        1 << 29 | 1 << 27 | 1 << 22 | 1 << 23 | 1 << 18
    );
    let v = words(Packet::AcquireMem(AcquireMem::gfx9(pm4::coher::ALL)));
    assert_eq!(
        v,
        [
            0xC005_5802,
            pm4::coher::ALL,
            0xffff_ffff,
            0xff_ffff,
            0,
            0,
            10
        ]
    );
}

#[test]
fn write_copy_ib_event() {
    let v = words(Packet::WriteData(WriteData {
        dst_sel: 5,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address: 0x1000,
        data: &[42],
    }));
    assert_eq!(v, [0xC003_3702, 5 << 8 | 1 << 20, 0x1000, 0, 42]);
    // The clock: SRC_SEL 9 | DST_SEL 5 << 8 | COUNT_SEL 1 << 16 | WR_CONFIRM 1 << 20.
    let v = words(Packet::CopyData(CopyData::clock_to_memory(0x7_0000_0010)));
    assert_eq!(v, [0xC004_4002, 0x0011_0509, 0, 0, 0x10, 7]);
    let v = words(Packet::IndirectBuffer(IndirectBuffer {
        address: 0x4000,
        size_dw: 64,
        chain: false,
        pre_enable: false,
        valid: true,
        vmid: 0,
        cache_policy: 0,
        pre_resume: false,
        privileged: false,
    }));
    assert_eq!(v, [0xC002_3F02, 0x4000, 0, 64 | 1 << 23]);
    let v = words(Packet::EventWrite(EventWrite {
        event_type: pm4::EVENT_CS_PARTIAL_FLUSH,
        event_index: pm4::EVENT_INDEX_PARTIAL_FLUSH,
        address: None,
    }));
    assert_eq!(v, [0xC000_4602, 0x407]);
}

#[test]
fn decode_errors_name_the_problem() {
    assert_eq!(pm4::decode(&[]), Err(DecodeError::Empty));
    assert!(matches!(
        pm4::decode(&[0x8000_0000]),
        Err(DecodeError::PacketType { kind: 2, .. })
    ));
    let e = pm4::decode(&[hdr(0x99, 2), 0]).unwrap_err();
    assert_eq!(
        e,
        DecodeError::UnknownOpcode {
            opcode: 0x99,
            header: hdr(0x99, 2)
        }
    );
    assert!(e.to_string().contains("0x99"));
    assert!(matches!(
        pm4::decode(&[hdr(0x15, 5), 1, 1]),
        Err(DecodeError::Truncated {
            need: 5,
            have: 3,
            ..
        })
    ));
    assert!(matches!(
        pm4::decode(&[hdr(0x15, 4), 1, 1, 1]),
        Err(DecodeError::BadCount { count: 2, .. })
    ));
    assert!(matches!(
        pm4::decode(&[hdr(0x15, 5) | 1 << 4, 1, 1, 1, 0]),
        Err(DecodeError::Reserved { .. })
    ));
    // A SET_SH_REG that would leave the SH window.
    assert!(matches!(
        pm4::decode(&[hdr(0x76, 4), 0x3ff, 1, 2]),
        Err(DecodeError::BadValue { .. })
    ));
}

// ------------------------------------------------------------------------------------------
// Round trips
// ------------------------------------------------------------------------------------------

fn compare() -> impl Strategy<Value = Compare> {
    (0u8..7).prop_map(|f| match f {
        0 => Compare::Always,
        1 => Compare::Less,
        2 => Compare::LessEqual,
        3 => Compare::Equal,
        4 => Compare::NotEqual,
        5 => Compare::GreaterEqual,
        _ => Compare::Greater,
    })
}

/// An owned description of a packet, since SET_SH_REG and WRITE_DATA borrow their words.
#[derive(Debug, Clone)]
enum Owned {
    Plain(Packet<'static>),
    Sh(u16, Vec<u32>),
    Write(WriteData<'static>, Vec<u32>),
}

impl Owned {
    fn packet(&self) -> Packet<'_> {
        match self {
            Owned::Plain(p) => *p,
            Owned::Sh(offset, v) => Packet::SetShReg(SetShReg {
                offset: *offset,
                values: v,
            }),
            Owned::Write(w, v) => Packet::WriteData(WriteData { data: v, ..*w }),
        }
    }
}

fn release() -> impl Strategy<Value = ReleaseMem> {
    (
        (
            0u8..64,
            0u8..16,
            any::<u32>(),
            0u8..4,
            any::<bool>(),
            0u8..4,
        ),
        (0u8..4, 0u8..5, any::<u64>(), any::<u64>(), any::<u32>()),
    )
        .prop_map(
            |((et, ei, cache, cp, ex, dst), (int, data, addr, value, ctx))| {
                let data_sel = match data {
                    0 => DataSel::None,
                    1 => DataSel::Low32,
                    2 => DataSel::Data64,
                    3 => DataSel::GpuClock,
                    _ => DataSel::SysClock,
                };
                let int_sel = match int {
                    0 => IntSel::None,
                    1 => IntSel::Interrupt,
                    2 => IntSel::AfterWrite,
                    _ => IntSel::WriteConfirm,
                };
                ReleaseMem {
                    event_type: et,
                    event_index: ei,
                    cache: cache & 0x01ff_f000,
                    cache_policy: cp,
                    execute: ex,
                    dst_sel: dst,
                    int_sel,
                    data_sel,
                    address: addr & !7,
                    data: value,
                    int_ctxid: ctx,
                }
            },
        )
}

fn packet() -> impl Strategy<Value = Owned> {
    prop_oneof![
        (1u32..=0x4000).prop_map(|n| Owned::Plain(Packet::Nop(Nop { words: n }))),
        (0u16..0x3f0, prop::collection::vec(any::<u32>(), 1..16))
            .prop_map(|(o, v)| Owned::Sh(o, v)),
        (any::<[u32; 3]>(), any::<u32>()).prop_map(|(dim, initiator)| Owned::Plain(
            Packet::DispatchDirect(DispatchDirect { dim, initiator })
        )),
        release().prop_map(|r| Owned::Plain(Packet::ReleaseMem(r))),
        (
            compare(),
            any::<bool>(),
            prop::sample::select(vec![0u8, 1, 3]),
            0u8..2
        )
            .prop_flat_map(|(f, mem, op, eng)| (
                Just((f, mem, op, eng)),
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<u16>()
            ))
            .prop_map(
                |((function, memory, operation, engine), a, reference, mask, poll)| {
                    Owned::Plain(Packet::WaitRegMem(WaitRegMem {
                        function,
                        memory,
                        operation,
                        engine,
                        address: if memory { a & !3 } else { a },
                        reference,
                        mask,
                        poll_interval: poll,
                    }))
                }
            ),
        (
            compare(),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u16>()
        )
            .prop_map(|(function, pre, a, reference, mask, poll)| {
                Owned::Plain(Packet::WaitRegMem64(WaitRegMem64 {
                    function,
                    operation: if pre { 3 } else { 0 },
                    address: a & !7,
                    reference,
                    mask,
                    poll_interval: poll,
                }))
            }),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u16>(),
            prop::option::of(0u32..1 << 19)
        )
            .prop_map(
                |(c, size, base, poll, gcr_cntl)| Owned::Plain(Packet::AcquireMem(AcquireMem {
                    coher_cntl: c,
                    size: size & AcquireMem::ALL,
                    base: base & AcquireMem::ALL,
                    poll_interval: poll,
                    gcr_cntl,
                }))
            ),
        (
            (
                0u8..16,
                any::<bool>(),
                any::<bool>(),
                0u8..4,
                0u8..4,
                any::<u64>()
            ),
            prop::collection::vec(any::<u32>(), 1..8)
        )
            .prop_map(|((dst_sel, one, confirm, cp, eng, a), v)| Owned::Write(
                WriteData {
                    dst_sel,
                    one_addr: one,
                    wr_confirm: confirm,
                    cache_policy: cp,
                    engine_sel: eng,
                    address: if dst_sel == 0 { a } else { a & !3 },
                    data: &[],
                },
                v
            )),
        (
            (
                prop::sample::select(vec![
                    CopySrc::Register,
                    CopySrc::Memory,
                    CopySrc::TcL2,
                    CopySrc::Perfcounters,
                    CopySrc::Immediate,
                    CopySrc::GpuClock
                ]),
                prop::sample::select(vec![CopyDst::Register, CopyDst::TcL2, CopyDst::Memory])
            ),
            (0u8..4, any::<bool>(), any::<bool>(), 0u8..4, 0u8..4),
            (any::<u64>(), any::<u64>())
        )
            .prop_map(
                |((s, d), (scp, c64, wc, dcp, eng), (src, dst))| Owned::Plain(Packet::CopyData(
                    CopyData {
                        src_sel: s,
                        dst_sel: d,
                        src_cache_policy: scp,
                        count_64: c64,
                        wr_confirm: wc,
                        dst_cache_policy: dcp,
                        engine_sel: eng,
                        src,
                        dst: if d == CopyDst::Register {
                            dst
                        } else {
                            dst & !7
                        },
                    }
                ))
            ),
        (
            any::<u64>(),
            0u32..1 << 20,
            any::<[bool; 6]>(),
            0u8..16,
            0u8..4
        )
            .prop_map(
                |(a, size, f, vmid, cp)| Owned::Plain(Packet::IndirectBuffer(IndirectBuffer {
                    address: a & !3,
                    size_dw: size,
                    chain: f[0],
                    pre_enable: f[1],
                    valid: f[2],
                    vmid,
                    cache_policy: cp,
                    pre_resume: f[4],
                    privileged: f[5],
                }))
            ),
        (0u8..64, 0u8..16, prop::option::of(any::<u64>())).prop_map(|(t, i, a)| Owned::Plain(
            Packet::EventWrite(EventWrite {
                event_type: t,
                event_index: i,
                address: a.map(|a| a & !7),
            })
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_round_trips(o in packet()) {
        let p = o.packet();
        let v = p.to_words().unwrap();
        prop_assert_eq!(v.len(), p.words());
        let (back, n) = pm4::decode(&v).unwrap();
        prop_assert_eq!(n, v.len());
        prop_assert_eq!(back, p);
        // A truncated packet is an error, not a panic (a one-word NOP is whole).
        if v.len() > 1 {
            let is_truncated = matches!(pm4::decode(&v[..v.len() - 1]), Err(DecodeError::Truncated { .. }));
            prop_assert!(is_truncated);
        }
    }

    #[test]
    fn packets_in_sequence_decode_in_order(os in prop::collection::vec(packet(), 1..8)) {
        let mut ring = Vec::new();
        for o in &os {
            ring.extend(o.packet().to_words().unwrap());
        }
        let back: Vec<_> = pm4::packets(&ring).map(|r| r.unwrap().1).collect();
        let want: Vec<_> = os.iter().map(|o| o.packet()).collect();
        prop_assert_eq!(back, want);
    }

    #[test]
    fn arbitrary_words_never_panic(v in prop::collection::vec(any::<u32>(), 0..24)) {
        if let Ok((p, n)) = pm4::decode(&v) {
            prop_assert!(n >= 1 && n <= v.len());
            // What decodes re-encodes to the same words, but for NOP bodies and the
            // shader-type bit, which the decoder reads past.
            if !matches!(p, Packet::Nop(_)) && v[0] & 2 != 0 {
                prop_assert_eq!(p.to_words().unwrap(), v[..n].to_vec());
            }
        }
    }

    #[test]
    fn corrupted_packets_never_panic(o in packet(), at in any::<prop::sample::Index>(), bit in 0u32..32) {
        let mut v = o.packet().to_words().unwrap();
        let i = at.index(v.len());
        v[i] ^= 1 << bit;
        if let Ok((_, n)) = pm4::decode(&v) {
            prop_assert!(n <= v.len());
        }
    }

    #[test]
    fn headers_with_any_opcode_and_count(op in any::<u8>(), count in 0u32..0x4000, body in prop::collection::vec(any::<u32>(), 0..12)) {
        let mut v = vec![3 << 30 | count << 16 | (op as u32) << 8 | 2];
        v.extend(body);
        match pm4::decode(&v) {
            Ok((_, n)) => prop_assert!(n <= v.len()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
