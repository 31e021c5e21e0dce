//! Submitting work by hand, as a client does: PM4 packets on the compute ring, the write
//! position, the doorbell.

use std::sync::atomic::Ordering;

use rig_amd::pm4::{DataSel, IntSel, ReleaseMem};
use rig_shm::{Doorbell, SharedRegion};

use rig_testkit::rigd::Opened;

/// Submits PM4 `words` on the device's compute ring: place, publish the write position,
/// ring the doorbell.
pub struct Submitter {
    ring: SharedRegion,
    ring_off: u64,
    ring_bytes: u64,
    write_off: u64,
    bell: Doorbell,
    pub wptr: u64,
    /// The control page (submitted value, timeline word): tests poke it as a hostile
    /// client would.
    pub control: SharedRegion,
    pub submitted_off: u64,
    pub word_off: u64,
}

impl Submitter {
    pub fn new(o: &Opened) -> Self {
        Self::on(o, &o.msg.compute, &o.fds)
    }

    /// A submitter on queue `q`, whose shares index `fds`.
    pub fn on(
        o: &Opened,
        q: &rig_proto::messages::QueueShare,
        fds: &[std::os::fd::OwnedFd],
    ) -> Self {
        let region = |i: rig_proto::messages::FdIndex| {
            SharedRegion::from_fd(fds[i.0 as usize].try_clone().unwrap()).unwrap()
        };
        let bell_region = region(q.doorbell.fd);
        Submitter {
            ring: region(q.ring.host.fd),
            ring_off: q.ring.host.offset,
            ring_bytes: q.ring.host.bytes,
            write_off: q.write.host.offset,
            bell: Doorbell::new(bell_region, q.doorbell.offset as usize).unwrap(),
            wptr: 0,
            control: o.region(o.msg.submitted.fd),
            submitted_off: o.msg.submitted.offset,
            word_off: o.msg.word.memory.host.offset,
        }
    }

    pub fn submit(&mut self, words: &[u32], value: u64) {
        for w in words {
            let at = self.ring_off + (self.wptr * 4) % self.ring_bytes;
            self.ring.store_u32(at as usize, *w, Ordering::Relaxed);
            self.wptr += 1;
        }
        self.control
            .store_u64(self.submitted_off as usize, value, Ordering::Release);
        self.ring
            .store_u64(self.write_off as usize, self.wptr, Ordering::Release);
        self.bell.ring(self.wptr);
    }

    pub fn word(&self) -> u64 {
        self.control
            .load_u64(self.word_off as usize, Ordering::Acquire)
    }
}

pub fn release(word: u64, value: u64) -> Vec<u32> {
    let p = ReleaseMem {
        event_type: 0x14,
        event_index: 5,
        cache: 0,
        cache_policy: 0,
        execute: false,
        dst_sel: 0,
        int_sel: IntSel::AfterWrite,
        data_sel: DataSel::Data64,
        address: word,
        data: value,
        int_ctxid: 1,
    };
    let mut out = vec![0; ReleaseMem::WORDS];
    p.encode(&mut out).unwrap();
    out
}
