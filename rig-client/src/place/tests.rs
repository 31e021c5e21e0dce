//! The placer over memfds of its own, decoding every packet with rig-amd's decoders.

use std::sync::atomic::Ordering;

use rig_amd::pm4;
use rig_amd::sdma;
use rig_proto::{DeviceOpened, Facts, QueueKind, QueueShare};
use rig_shm::SharedRegion;
use rig_shm::layout::{
    CONTROL_PAGE_BYTES, DOORBELL_PAGE_BYTES, DOORBELL_SLOT_BYTES, LOST_BYTES, LOST_OFFSET,
    SUBMITTED_BYTES, SUBMITTED_OFFSET, TIMELINE_WORD_BYTES, TIMELINE_WORD_OFFSET, WRITE_AFTER_RING,
};

use super::compile::{ARG_ALIGN, align};
use super::{Compiled, GpuWait, Placer, Step};
use crate::buffer::tests::buffer;
use crate::device::Maps;
use crate::error::{Error, Never, Result};
use crate::image::tests::kernel;
use crate::submission::Submission;
use crate::submission::{Launch, Ref};
use pm4::Packet as P;
use rig_proto::{
    Completion, FdIndex, GpuShare, IpVersion, RingLimits, SegmentShare, Share, Waits, WordShare,
};
use sdma::Packet as S;

/// The facts of a simulated gfx1100.
pub(crate) fn facts() -> Facts {
    Facts {
        arch: "gfx1100".into(),
        budget: 1 << 30,
        queues: vec!["COMPUTE:0".into(), "COPY:0".into()],
        copy_engine: Some(1),
        completion: Completion::Store,
        waits: Waits {
            stores: true,
            hosts: true,
        },
        may_block: false,
        hang_ms: Some(1000),
        maps_host: true,
        host_addresses: false,
        alignment: 4096,
        cache_bytes: None,
        word: WORD,
        bus: None,
        gc: IpVersion {
            major: 11,
            minor: 0,
            stepping: 0,
        },
        sdma: IpVersion {
            major: 6,
            minor: 0,
            stepping: 0,
        },
        mec: 2000,
        compute: QueueKind::Pm4,
        lds_bytes: 65536,
        wave_size: 32,
        waves_per_cu: 32,
        dies: 1,
        wgps: vec![vec![0xff]],
        linear_copy_bytes: 1 << 30,
        clock_hz: 100_000_000,
        clock: rig_proto::ClockSource::Source { apart: false },
        most_ring: RingLimits {
            compute: 1 << 20,
            copy: 1 << 20,
        },
    }
}

const WORD: u64 = 0x10_0000;
const COMPUTE: u64 = 0x20_0000;
const COPY: u64 = 0x30_0000;
const ARGS: u64 = 0x40_0000;
const RING: u64 = 4096;
const SEG: u64 = 8192;

/// A placer over memfds of its own, as rigd would share them, and those memfds.
pub(crate) struct Fake {
    pub placer: Placer,
    compute: SharedRegion,
    copy: SharedRegion,
    args: SharedRegion,
    /// Ring positions already checked, in dwords.
    seen: [u64; 2],
}

fn queue(kind: QueueKind, fd: u32, gpu: u64, slot: u64) -> QueueShare {
    let at = |offset: u64, bytes: u64| GpuShare {
        host: Share {
            fd: FdIndex(fd),
            offset,
            bytes,
        },
        gpu_address: gpu + offset,
    };
    QueueShare {
        kind,
        generation: 0,
        ring: at(0, RING),
        read: at(RING, 8),
        write: at(RING + WRITE_AFTER_RING, 8),
        doorbell: Share {
            fd: FdIndex(4),
            offset: DOORBELL_SLOT_BYTES as u64 * slot,
            bytes: 8,
        },
    }
}

impl Fake {
    pub(crate) fn new() -> Fake {
        Fake::with(|_| {}).unwrap()
    }

    /// A placer over an answer that `edit` changed first.
    fn with(edit: impl FnOnce(&mut DeviceOpened)) -> Result<Fake> {
        let make = |n: u64| SharedRegion::create("rig-client-test", n as usize).unwrap();
        let (compute, copy, args) = (make(RING + 4096), make(RING + 4096), make(SEG));
        let (control, bells) = (make(CONTROL_PAGE_BYTES), make(DOORBELL_PAGE_BYTES as u64));
        let fds = [&compute, &copy, &args, &control, &bells].map(|r| r.dup_fd().unwrap());
        let mut opened = DeviceOpened {
            device: rig_proto::DeviceId(1),
            facts: facts(),
            compute: queue(QueueKind::Pm4, 0, COMPUTE, 0),
            copy: queue(QueueKind::Sdma, 1, COPY, 1),
            args: SegmentShare {
                generation: 0,
                memory: GpuShare {
                    host: Share {
                        fd: FdIndex(2),
                        offset: 0,
                        bytes: SEG,
                    },
                    gpu_address: ARGS,
                },
            },
            word: WordShare {
                memory: GpuShare {
                    host: Share {
                        fd: FdIndex(3),
                        offset: TIMELINE_WORD_OFFSET,
                        bytes: TIMELINE_WORD_BYTES,
                    },
                    gpu_address: WORD,
                },
                first: 0,
            },
            submitted: Share {
                fd: FdIndex(3),
                offset: SUBMITTED_OFFSET,
                bytes: SUBMITTED_BYTES,
            },
            interrupt: FdIndex(5),
            lost: Share {
                fd: FdIndex(3),
                offset: LOST_OFFSET,
                bytes: LOST_BYTES,
            },
            context: 7,
        };
        edit(&mut opened);
        let mut maps = Maps::new(fds.into()).unwrap();
        let target = super::Target::of(&opened.facts).unwrap();
        let placer = Placer::new(&opened, target, &mut maps, (control.clone(), 64))?;
        Ok(Fake {
            placer,
            compute,
            copy,
            args,
            seen: [0, 0],
        })
    }

    /// Places `s` as the next value, the device having reached `reached`.
    pub(crate) fn place(&mut self, s: &Submission, reached: u64) -> Result<Step> {
        let c = Compiled::new(&self.placer.target, 1, s)?;
        self.placer.try_place(&c, &|| reached)
    }

    /// The words each queue received since the last call (compute, copy).
    pub(crate) fn take(&mut self) -> (Vec<u32>, Vec<u32>) {
        let mut out = [Vec::new(), Vec::new()];
        for (q, (region, ring)) in [
            (&self.compute, &self.placer.compute),
            (&self.copy, &self.placer.copy),
        ]
        .into_iter()
        .enumerate()
        {
            let end = ring.ring.cursor.write;
            // The queue publishes its write position in its units.
            let published = region.load_u64((RING + WRITE_AFTER_RING) as usize, Ordering::Acquire)
                * ring.ring.geometry().unit().bytes()
                / 4;
            assert_eq!(published, end, "write position published");
            for p in self.seen[q]..end {
                let off = 4 * (p % (RING / 4)) as usize;
                out[q].push(region.load_u32(off, Ordering::Relaxed));
            }
            self.seen[q] = end;
        }
        let [c, k] = out;
        (c, k)
    }

    /// Moves the queues' read positions to their write positions, as a GPU that read all.
    pub(crate) fn drain(&self) {
        for (region, ring) in [
            (&self.compute, &self.placer.compute),
            (&self.copy, &self.placer.copy),
        ] {
            region.store_u64(
                RING as usize,
                ring.ring.cursor.write * 4 / ring.ring.geometry().unit().bytes(),
                Ordering::Release,
            );
        }
    }

    fn arg_bytes(&self, gpu: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0; n];
        self.args.read((gpu - ARGS) as usize, &mut b);
        b
    }
}

fn pm4(words: &[u32]) -> Vec<P<'_>> {
    pm4::packets(words)
        .map(|r| r.expect("the compute words decode").1)
        .collect()
}

fn sdma(words: &[u32]) -> Vec<S> {
    let layout = sdma::Layout::of(rig_amd::gpu::IpVersion::new(6, 0, 0));
    sdma::packets(layout, words)
        .map(|r| r.expect("the copy words decode").1)
        .collect()
}

#[test]
fn an_empty_submission_waits_for_the_last_value_and_releases_on_compute() {
    let mut f = Fake::new();
    assert!(matches!(
        f.place(&Submission::new(), 0).unwrap(),
        Step::Placed(1)
    ));
    let (c, k) = f.take();
    assert!(k.is_empty());
    let p = pm4(&c);
    assert_eq!(p.len(), 2);
    assert!(
        matches!(p[0], P::WaitRegMem64(w) if w.address == WORD && w.reference == 0 && w.function == pm4::Compare::GreaterEqual)
    );
    match p[1] {
        P::ReleaseMem(r) => {
            assert_eq!(
                (r.address, r.data, r.data_sel),
                (WORD, 1, pm4::DataSel::Data64)
            );
            assert_eq!(r.int_sel, pm4::IntSel::AfterWrite);
        }
        ref other => panic!("not a release: {other:?}"),
    }
}

#[test]
fn a_launch_sets_its_registers_and_arguments() {
    let mut f = Fake::new();
    let k = kernel(1, 16, 256, 0);
    let x = buffer(1, 0x1_0000, 4096);
    let y = buffer(1, 0x2_0000, 4096);
    let mut params = [0u8; 16];
    params[8..].copy_from_slice(&64u64.to_le_bytes());
    let s = Submission::new().launch(
        Launch::new(&k, [4, 2, 1], [64, 1, 1])
            .params(&params)
            .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
    );
    assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
    let (c, k) = f.take();
    assert!(k.is_empty());
    let p = pm4(&c);
    assert!(matches!(p[0], P::WaitRegMem64(_)));
    assert!(
        matches!(p[1], P::AcquireMem(a) if a.gcr_cntl == Some(pm4::gcr::ALL)),
        "{:?}",
        p[1]
    );
    let d = p
        .iter()
        .find_map(|p| match p {
            P::DispatchDirect(d) => Some(*d),
            _ => None,
        })
        .unwrap();
    assert_eq!(d.dim, [4, 2, 1]);
    let r = rig_amd::regs::compute(rig_amd::gpu::Generation::Gfx11);
    let mut regs = std::collections::HashMap::new();
    for p in &p {
        if let P::SetShReg(s) = p {
            for (i, v) in s.values.iter().enumerate() {
                regs.insert(s.offset + i as u16, *v);
            }
        }
    }
    assert_eq!(regs[&r.num_thread_x], 64);
    assert_eq!(regs[&(r.pgm_lo)], (0x7000_0000u64 >> 8) as u32);
    // The test kernel's descriptor enables no user SGPRs, so no kernarg pointer: the
    // arguments still land in the segment.
    // The release carries the device's interrupt context (the fake device's is 7).
    assert!(matches!(p.last().unwrap(), P::ReleaseMem(r) if r.data == 1 && r.int_ctxid == 7));
    let args = f.arg_bytes(ARGS + 64, 16);
    assert_eq!(u64::from_le_bytes(args[..8].try_into().unwrap()), 0x1_0000);
    assert_eq!(
        u64::from_le_bytes(args[8..].try_into().unwrap()),
        0x2_0000 + 64
    );
}

#[test]
fn a_copy_alone_releases_on_copy_with_a_fence_and_a_trap() {
    let mut f = Fake::new();
    let a = buffer(1, 0x1_0000, 4096);
    let b = buffer(1, 0x2_0000, 4096);
    let s = Submission::new().copy(&a, 4, &b, 8, 100);
    assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
    let (c, k) = f.take();
    assert!(c.is_empty(), "nothing on COMPUTE:0");
    let p = sdma(&k);
    assert!(
        matches!(p[0], S::PollRegMem(w) if w.address == WORD && w.value == 0 && w.function == pm4::Compare::Equal)
    );
    assert!(
        matches!(p[1], S::CopyLinear(l) if (l.src, l.dst, l.bytes) == (0x1_0004, 0x2_0008, 100))
    );
    assert!(matches!(p[2], S::Fence(x) if (x.address, x.value) == (WORD, 1)));
    assert!(matches!(p[3], S::Trap(t) if t.context == 7));
    assert_eq!(p.len(), 4);
}

#[test]
fn values_whose_low_word_is_zero_release_on_compute() {
    let mut f = Fake::new();
    f.placer.last = 0xffff_ffff;
    let a = buffer(1, 0x1_0000, 4096);
    let b = buffer(1, 0x2_0000, 4096);
    let s = Submission::new().copy(&a, 0, &b, 0, 64);
    assert!(matches!(
        f.place(&s, 0xffff_ffff).unwrap(),
        Step::Placed(0x1_0000_0000)
    ));
    let (c, k) = f.take();
    let k = sdma(&k);
    // The copy signals its part word, and COMPUTE:0 waits for it, then releases 64 bits.
    let part = match k[2] {
        S::Fence(x) => {
            assert_eq!(x.value, 0);
            x.address
        }
        ref o => panic!("{o:?}"),
    };
    assert!(!k.iter().any(|p| matches!(p, S::Trap(_))));
    let c = pm4(&c);
    assert!(
        matches!(c[1], P::WaitRegMem(w) if w.address == part && w.reference == 0 && w.function == pm4::Compare::Equal)
    );
    assert!(
        matches!(c[2], P::ReleaseMem(r) if r.data == 0x1_0000_0000 && r.data_sel == pm4::DataSel::Data64)
    );
    // The host set the part word to anything but the value's low word before ringing.
    assert_ne!(f.arg_bytes(part, 4), vec![0, 0, 0, 0]);
}

#[test]
fn gpu_waits_go_on_compute_and_copy_follows_through_a_word() {
    const PEER: u64 = 0x77_0000;
    let mut f = Fake::new();
    let a = buffer(1, 0x1_0000, 4096);
    let s = Submission::new().fill(&a, 0, 64, 7);
    // A submission with waits reserves the word after its parts' words (points need a
    // device, so the slot is set here as `Compiled::new` sets it for one with waits).
    let mut c = Compiled::new(&f.placer.target, 1, &s).unwrap();
    c.wait_slot = Some(1);
    c.block = align(16, ARG_ALIGN);
    const EVIDENCE: u64 = 0x88_0000;
    f.placer.gpu_waits.push(GpuWait {
        word: PEER,
        value: 5,
        evidence: Some((EVIDENCE + 12, PEER + 72)),
    });
    assert!(matches!(
        f.placer.try_place(&c, &|| 0).unwrap(),
        Step::Placed(1)
    ));
    let (cw, kw) = f.take();
    let (cp, kp) = (pm4(&cw), sdma(&kw));
    let slot = ARGS + 8;
    // COMPUTE:0 waits for v-1, then for the peer's word (64 bits, >=), copies the
    // peer's lost flag into the evidence slot, then tells COPY:0; it does not release
    // (the copy-only value releases on COPY:0).
    assert!(matches!(cp[0], P::WaitRegMem64(w) if w.address == WORD && w.reference == 0));
    assert!(
        matches!(cp[1], P::WaitRegMem64(w) if w.address == PEER && w.reference == 5 && w.function == pm4::Compare::GreaterEqual && w.mask == u64::MAX)
    );
    assert!(
        matches!(cp[2], P::CopyData(c) if c.src == PEER + 72 && c.dst == EVIDENCE + 12 && c.src_sel == pm4::CopySrc::Memory && c.dst_sel == pm4::CopyDst::Memory && !c.count_64 && c.wr_confirm)
    );
    assert!(
        matches!(cp[3], P::ReleaseMem(r) if r.address == slot && r.data == 1 && r.data_sel == pm4::DataSel::Low32 && r.int_sel == pm4::IntSel::None)
    );
    assert_eq!(cp.len(), 4);
    // COPY:0 polls v-1, then that word, before its first part; it releases.
    assert!(matches!(kp[0], S::PollRegMem(w) if w.address == WORD));
    assert!(matches!(kp[1], S::PollRegMem(w) if w.address == slot && w.value == 1));
    assert!(matches!(kp[2], S::ConstFill(_)));
    assert!(matches!(kp[kp.len() - 2], S::Fence(x) if x.address == WORD && x.value == 1));
    // The host set the word to anything but the value's low word before ringing.
    assert_ne!(f.arg_bytes(slot, 4), vec![1, 0, 0, 0]);

    // With no GPU-side waits the reserved word is unused and nothing changes.
    f.placer.gpu_waits.clear();
    assert!(matches!(
        f.placer.try_place(&c, &|| 1).unwrap(),
        Step::Placed(2)
    ));
    let (cw, kw) = f.take();
    assert!(cw.is_empty());
    assert!(
        !sdma(&kw)
            .iter()
            .any(|p| matches!(p, S::PollRegMem(w) if w.address != WORD))
    );
}

#[test]
fn after_orders_parts_across_queues_through_part_words() {
    let mut f = Fake::new();
    let k = kernel(1, 16, 256, 0);
    let a = buffer(1, 0x1_0000, 4096);
    let b = buffer(1, 0x2_0000, 4096);
    let s = Submission::new()
        .copy(&a, 0, &b, 0, 256) // 0: COPY:0
        .launch(
            Launch::new(&k, [1, 1, 1], [64, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::write(&b, 0)]),
        ) // 1
        .after(&[0])
        .fill(&a, 1, 10, 7) // 2: COPY:0, after the launch
        .after(&[1]);
    assert!(matches!(f.place(&s, 0).unwrap(), Step::Placed(1)));
    let (c, k) = f.take();
    let (c, k) = (pm4(&c), sdma(&k));
    let part = |i: u64| ARGS + 8 * i;
    // COPY:0: wait v-1, copy, fence part 0, wait part 1, fill body and ends, fence part 2.
    assert!(matches!(k[1], S::CopyLinear(_)));
    assert!(matches!(k[2], S::Fence(x) if x.address == part(0) && x.value == 1));
    assert!(matches!(k[3], S::PollRegMem(w) if w.address == part(1) && w.value == 1));
    assert!(
        matches!(k[4], S::ConstFill(x) if x.dst == 0x1_0004 && x.bytes == 4 && x.value == 0x0707_0707)
    );
    assert!(matches!(k[5], S::CopyLinear(l) if l.dst == 0x1_0001 && l.bytes == 3));
    assert!(matches!(k[6], S::CopyLinear(l) if l.dst == 0x1_0008 && l.bytes == 3));
    assert!(matches!(k[7], S::Fence(x) if x.address == part(2)));
    assert_eq!(k.len(), 8);
    // COMPUTE:0: wait v-1, wait part 0, full invalidation, launch, signal part 1, wait
    // part 2 (the last copy), release.
    assert!(matches!(c[1], P::WaitRegMem(w) if w.address == part(0)));
    assert!(matches!(c[2], P::AcquireMem(a) if a.gcr_cntl == Some(pm4::gcr::ALL)));
    let rel = c
        .iter()
        .position(|p| matches!(p, P::ReleaseMem(r) if r.address == part(1)))
        .unwrap();
    assert!(matches!(c[rel - 1], P::DispatchDirect(_)));
    assert!(matches!(c[rel + 1], P::WaitRegMem(w) if w.address == part(2)));
    assert!(matches!(c[rel + 2], P::ReleaseMem(r) if r.address == WORD && r.data == 1));
    // The fill's ends copy from 4 bytes of the segment that hold its byte.
    let S::CopyLinear(end) = k[5] else {
        unreachable!()
    };
    assert_eq!(f.arg_bytes(end.src, 4), vec![7; 4]);
}

#[test]
fn copies_never_wrap_and_the_ring_waits_for_its_reader() {
    let mut f = Fake::new();
    let a = buffer(1, 0x1_0000, 1 << 20);
    let b = buffer(1, 0x20_0000, 1 << 20);
    // 13 linear rows of a box: about 100 words a value, so the 1024-word ring pads.
    let bx = crate::types::CopyBox {
        width: 8,
        rows: 13,
        src_pitch: 4096,
        dst_pitch: 17,
    };
    let s = Submission::new().copy_box(&a, 1, &b, 0, bx);
    let mut placed = 0u64;
    let mut words = 0u64;
    while placed < 40 {
        let before = f.placer.copy.ring.cursor.write;
        match f.place(&s, placed).unwrap() {
            Step::Placed(v) => placed = v,
            Step::Later => {
                // The GPU reads everything and reaches every value.
                f.drain();
                continue;
            }
            other => panic!("{other:?}"),
        }
        let (_, k) = f.take();
        words += f.placer.staging[1].len() as u64;
        // The value's words start where the ring's end padding left off, and decode
        // whole: no packet crosses the ring's end.
        let start = f.placer.copy.ring.cursor.write - f.placer.staging[1].len() as u64;
        assert!(start % 1024 + f.placer.staging[1].len() as u64 <= 1024);
        let p = sdma(&k[(start - before) as usize..]);
        assert!(
            p.iter()
                .any(|p| matches!(p, S::Fence(x) if x.address == WORD))
        );
        // Any padding before it is NOPs.
        if start > before {
            let pad = sdma(&k[..(start - before) as usize]);
            assert!(pad.iter().all(|p| matches!(p, S::Nop(_))));
        }
        f.drain();
    }
    assert!(
        f.placer.copy.ring.cursor.write > words,
        "the ring was padded at least once"
    );
}

#[test]
fn room_answers_later_grow_and_never() {
    let mut f = Fake::new();
    let a = buffer(1, 0x1_0000, 1 << 24);
    let b = buffer(1, 0x200_0000, 1 << 24);
    // A box of 200 unaligned rows: 200 linear copies, 1400 words, more than half the ring.
    let bx = crate::types::CopyBox {
        width: 3,
        rows: 200,
        src_pitch: 4096,
        dst_pitch: 7,
    };
    let big = Submission::new().copy_box(&a, 0, &b, 0, bx);
    assert!(matches!(f.place(&big, 0).unwrap(), Step::Grow { .. }));
    // Past the largest ring the path makes: never.
    let huge = crate::types::CopyBox {
        width: 3,
        rows: 40_000,
        src_pitch: 4096,
        dst_pitch: 7,
    };
    let s = Submission::new().copy_box(&a, 0, &b, 0, huge);
    assert!(matches!(
        f.place(&s, 0),
        Err(Error::Never(Never::TooLarge { .. }))
    ));
    // Small copies fill the ring until its reader moves.
    let small = Submission::new().copy(&a, 0, &b, 0, 64);
    let mut later = false;
    for _ in 0..200 {
        if let Step::Later = f.place(&small, 0).unwrap() {
            later = true;
            break;
        }
    }
    assert!(later, "a full ring answers later");
    f.drain();
    let reached = f.placer.last();
    assert!(matches!(f.place(&small, reached).unwrap(), Step::Placed(_)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Any submission of copies, fills and `after`s either is refused with a reason or
    /// places words that decode whole on both queues; nothing panics.
    #[test]
    fn any_submission_is_refused_or_placed_whole(
        parts in proptest::collection::vec(
            (0u8..3, 0u64..5000, 0u64..5000, 0u64..3000, 1u64..8, 0usize..12),
            0..12,
        ),
    ) {
        let mut f = Fake::new();
        let a = buffer(1, 0x1_0000, 8192);
        let b = buffer(1, 0x10_0000, 8192);
        let k = kernel(1, 16, 256, 0);
        let mut s = Submission::new();
        for (i, (kind, x, y, n, rows, after)) in parts.into_iter().enumerate() {
            s = match kind {
                0 => s.copy_box(&a, x, &b, y, crate::types::CopyBox {
                    width: n,
                    rows,
                    src_pitch: n + x % 7,
                    dst_pitch: n + y % 5,
                }),
                1 => s.fill(&b, x, n, y as u8),
                _ => s.launch(Launch::new(&k, [1, 1, 1], [n as u32 % 300, 1, 1]).params(&[0; 16]).refs(&[Ref::write(&a, 8)])),
            };
            // Mostly earlier parts, sometimes its own index (refused).
            s = s.after(&[after % (i + 1)]);
        }
        match f.place(&s, 0) {
            Err(Error::Never(_)) => {}
            Err(e) => proptest::prop_assert!(false, "{e}"),
            Ok(Step::Placed(_)) => {
                let (c, k) = f.take();
                for r in pm4::packets(&c) {
                    proptest::prop_assert!(r.is_ok(), "{r:?}");
                }
                let layout = sdma::Layout::of(rig_amd::gpu::IpVersion::new(6, 0, 0));
                for r in sdma::packets(layout, &k) {
                    proptest::prop_assert!(r.is_ok(), "{r:?}");
                }
            }
            Ok(Step::Grow { .. } | Step::Later) => {}
        }
    }
}

#[test]
fn sdma_nops_decode() {
    for n in [1u32, 2, 7, 0x4000] {
        let mut w = vec![0u32; n as usize];
        w[0] = sdma::Nop { words: n }.header();
        let p = sdma(&w);
        assert_eq!(p.len(), 1);
        assert!(matches!(p[0], S::Nop(x) if x.words == n));
    }
}

#[test]
fn an_answer_with_a_bad_layout_is_refused_with_its_error() {
    let layout = |edit: fn(&mut DeviceOpened)| match Fake::with(edit) {
        Err(Error::Layout(e)) => *e
            .downcast::<rig_proto::LayoutError>()
            .expect("the source is rig-proto's layout error"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a bad answer was taken"),
    };
    // A ring that is not a power of two.
    let e = layout(|o| o.compute.ring.host.bytes = 3 * 512);
    assert_eq!(e.what, "a ring");
    // A doorbell inside another queue's slot.
    let e = layout(|o| o.copy.doorbell.offset += 8);
    assert_eq!(e.what, "a doorbell");
    // An unaligned write position.
    let e = layout(|o| o.copy.write.host.offset += 4);
    assert_eq!(e.what, "a write position");
    // An unaligned lost flag, which no ring names.
    let e = layout(|o| o.lost.offset += 2);
    assert_eq!(e.what, "the lost flag");
    let shown = Error::layout(e).report().to_string();
    assert!(
        shown.contains("rigd and rig-client are out of step"),
        "{shown}"
    );
    assert!(Fake::with(|_| {}).is_ok());
}
