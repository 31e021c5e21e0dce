//! Write positions a client makes impossible fault the queue with the reason, and nothing
//! at the positions they point at runs.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use rig_amd::gpu::QueueKind;
use rig_amd::pm4::{self, Packet, WriteData};
use rig_shm::ring::Hostile;
use rig_sim::{FaultReason, PacketError};

fn write_data(address: u64, value: u32) -> Vec<u32> {
    Packet::WriteData(WriteData {
        dst_sel: 5,
        one_addr: false,
        wr_confirm: true,
        cache_policy: 0,
        engine_sel: 0,
        address,
        data: &[value],
    })
    .to_words()
    .unwrap()
}

/// Runs one WRITE_DATA, then publishes `wptr` and returns the fault's reason.
fn hostile(kind: QueueKind, wptr: impl Fn(u64) -> u64) -> (Hostile, u32) {
    let gpu = gpu("gfx1100");
    let space = gpu.create_address_space();
    let data = host(&space, HOST_VA, 4096);
    let mut q = TestQueue::new(&space, kind, 4096, 0);
    if kind == QueueKind::Pm4 {
        q.submit(&write_data(HOST_VA, 5));
    } else {
        // An SDMA FENCE of 5 at HOST_VA.
        let f = rig_amd::sdma::Fence {
            mtype: rig_amd::sdma::FENCE_MTYPE_UC,
            address: HOST_VA,
            value: 5,
        };
        let mut w = [0u32; 4];
        f.encode(&mut w).unwrap();
        q.submit(&w);
    }
    q.wait_idle();
    // Words that would write 6 lie past the write position.
    q.place(&write_data(HOST_VA + 4, 6));
    q.wpos = wptr(q.rptr());
    q.ring_bell();
    let f = q.wait_fault();
    let FaultReason::BadPacket {
        position,
        reason: PacketError::Ring(reason),
    } = f.reason
    else {
        panic!("{f}");
    };
    assert_eq!(position, q.rptr(), "the fault names the read position");
    (reason, data.load_u32(4, Ordering::Acquire))
}

#[test]
fn a_write_position_that_moves_back_faults() {
    for kind in [QueueKind::Pm4, QueueKind::Sdma] {
        let (why, after) = hostile(kind, |read| read - 1);
        assert!(matches!(why, Hostile::MovedBack { .. }), "{why:?}");
        assert_eq!(after, 0);
    }
}

#[test]
fn a_write_position_past_the_ring_faults() {
    for kind in [QueueKind::Pm4, QueueKind::Sdma] {
        let (why, after) = hostile(kind, |_| u64::MAX);
        assert!(matches!(why, Hostile::TooFarAhead { .. }), "{why:?}");
        assert!(
            why.to_string()
                .contains("more than the ring's 4096 bytes ahead"),
            "{why}"
        );
        assert_eq!(after, 0);
    }
}

#[test]
fn an_sdma_write_position_inside_a_dword_faults() {
    let (why, after) = hostile(QueueKind::Sdma, |read| read + 2);
    assert!(matches!(why, Hostile::PartialDword { .. }), "{why:?}");
    assert_eq!(after, 0);
}

#[test]
fn pm4_write_data_header_is_what_the_test_places() {
    // The words placed decode as one WRITE_DATA (guards the helper above).
    let w = write_data(HOST_VA, 1);
    assert!(matches!(pm4::decode(&w), Ok((Packet::WriteData(_), n)) if n == w.len()));
}
