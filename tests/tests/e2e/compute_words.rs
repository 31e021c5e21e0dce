//! COMPUTE:0 words a test writes itself, in the packets of the device's compute queue: PM4
//! on gfx1100 and gfx1201, AQL on gfx942 (`Facts::compute_packets`), so one test body runs
//! on every backend.

use rig_amd::{aql, pm4};
use rig_client::{Buffer, Device, Memory, Packets};

/// The offset in a flag buffer of the 64-bit word [`held_until`] waits on: an AQL barrier
/// reads a signal's value at 8 bytes into its `amd_signal_t`, and a PM4 wait reads the same
/// word.
pub const HELD_WORD: u64 = 8;

/// A flag buffer for [`held_until`], its word 0.
pub fn flag(dev: &Device) -> Buffer {
    let flag = dev.buffer(16, Memory::Pinned).unwrap();
    flag.write(|b| b.fill(0)).unwrap();
    flag
}

/// Writes 1 into `flag`'s word: what lets [`held_until`]'s words go on.
pub fn release(flag: &Buffer) {
    flag.write(|b| b[HELD_WORD as usize..][..8].copy_from_slice(&1u64.to_le_bytes()))
        .unwrap();
}

/// COMPUTE:0 words that hold the queue back until the 64-bit word at [`HELD_WORD`] of
/// `flag` (16 bytes) is at least 1: a WAIT_REG_MEM, or on an AQL queue a barrier-value
/// packet.
pub fn held_until(dev: &Device, flag: &Buffer) -> Vec<u32> {
    if dev.facts().compute_packets == Packets::Aql {
        aql::BarrierValue {
            header: aql::Header {
                barrier: true,
                ..Default::default()
            },
            signal: flag.address(),
            value: 1,
            mask: -1,
            cond: aql::Condition::Gte,
            completion_signal: 0,
        }
        .encode()
        .to_vec()
    } else {
        let mut w = vec![0u32; pm4::WaitRegMem::WORDS];
        pm4::WaitRegMem::memory_at_least(flag.address() + HELD_WORD, 1)
            .encode(&mut w)
            .unwrap();
        w
    }
}

/// COMPUTE:0 words that run the PM4 packets `pm` as given: the words themselves, or on an
/// AQL queue (whose packets are 16 words) a PM4-IB packet that calls them in an indirect
/// buffer, which the caller keeps until the words ran.
pub fn pm4_words(dev: &Device, pm: &[u32]) -> (Vec<u32>, Option<Buffer>) {
    if dev.facts().compute_packets != Packets::Aql {
        return (pm.to_vec(), None);
    }
    let ib = dev.buffer(4 * pm.len() as u64, Memory::Pinned).unwrap();
    ib.write(|x| {
        for (i, w) in pm.iter().enumerate() {
            x[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    })
    .unwrap();
    let call = aql::Pm4Ib {
        header: aql::Header {
            barrier: true,
            ..Default::default()
        },
        address: ib.address(),
        size_dw: u32::try_from(pm.len()).unwrap(),
        completion_signal: 0,
    };
    (call.encode().unwrap().to_vec(), Some(ib))
}
