//! The emulated host data path (HDP): the MMIO_REMAP page whose flush register a process
//! stores to, and each queue's doorbell front end, which sees whether a flush came before
//! each doorbell.
//!
//! On the GPU, host writes through the memory BAR pass the HDP, which may hold them until
//! its flush register (`KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL`, at byte 0 of the MMIO_REMAP page;
//! amdgpu stores 0) is written; so a host that wrote memory through the BAR stores to that
//! register before ringing a doorbell, and the command processor reads what it wrote.
//!
//! The emulation's model: each process's page on a GPU ([`Hdp`]) holds [`IDLE`] at the flush
//! register until a store (any value but `IDLE`) asks for a flush. Each queue's doorbell is
//! watched by a front end ([`Front`], a thread): at every new doorbell value it takes the
//! flush asked for, if any (swapping the word back to `IDLE`, as the HDP performs it), then
//! counts the doorbell, and counts it as flushed if any flush of the page was taken since
//! the queue's previous doorbell; only then does it ring the simulated queue. The
//! simulated GPU itself keeps no HDP: the counts say whether a path would have been right.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rig_kfd::abi;
use rig_shm::{Doorbell, SharedRegion};

/// The flush register's value while no flush is asked for.
pub const IDLE: u32 = u32::MAX;
/// Bytes of the MMIO_REMAP page.
pub const PAGE_BYTES: u64 = rig_amd::PAGE_BYTES;
/// How long a front end polls its doorbell after a ring before it sleeps on it (as the
/// path's forwarder does), so a ring during work in flight costs no futex wake.
const POLL: Duration = Duration::from_micros(50);
/// Longest a front end sleeps before it looks at its stop flag again (a stop wakes it; a
/// client that clears the doorbell's sleeping word can defeat that wake).
const RECHECK: Duration = Duration::from_secs(1);

/// A process's MMIO_REMAP page on one GPU and the flushes taken from it.
#[derive(Debug)]
pub struct Hdp {
    page: SharedRegion,
    flushes: AtomicU64,
}

impl Hdp {
    /// A page with no flush asked for.
    pub fn new() -> Result<Arc<Hdp>, rig_shm::ShmError> {
        let page = SharedRegion::create("kfd-emu-mmio-remap", PAGE_BYTES as usize)?;
        page.atomic_u32(abi::MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
            .store(IDLE, Ordering::Release);
        Ok(Arc::new(Hdp {
            page,
            flushes: AtomicU64::new(0),
        }))
    }

    /// The page, as the process maps it.
    pub fn page(&self) -> &SharedRegion {
        &self.page
    }

    /// Performs the flush asked for since the last one, if any.
    fn take(&self) {
        let reg = self.page.atomic_u32(abi::MMIO_REMAP_HDP_MEM_FLUSH_CNTL);
        if reg.swap(IDLE, Ordering::AcqRel) != IDLE {
            self.flushes.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Flushes taken so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(Ordering::Acquire)
    }
}

/// What a queue's front end saw.
#[derive(Debug, Default)]
pub struct Counts {
    /// Doorbell values it passed on.
    pub doorbells: AtomicU64,
    /// Of those, the ones an HDP flush came before (since the queue's previous doorbell).
    pub flushed: AtomicU64,
}

/// A queue's doorbell front end: watches the process's doorbell slot and rings the
/// simulated queue's own doorbell after taking the HDP flush. Dropping it stops the thread.
#[derive(Debug)]
pub struct Front {
    bell: Doorbell,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Front {
    /// Watches `bell` for the queue whose simulated doorbell is returned with it. Both
    /// slots start at `first`, a value no ring of the queue stores before its first packet
    /// (a write position of 0 for PM4 and SDMA; for AQL, whose first ring is packet index
    /// 0, `u64::MAX`): a hardware doorbell store is an event, and the emulation sees one
    /// only as a change of the slot's value.
    pub fn start(bell: Doorbell, hdp: Arc<Hdp>, first: u64) -> std::io::Result<(Front, Doorbell)> {
        let region =
            SharedRegion::create("kfd-emu-cp-doorbell", rig_shm::layout::DOORBELL_SLOT_BYTES)
                .map_err(std::io::Error::other)?;
        let sim = Doorbell::new(region, 0).map_err(std::io::Error::other)?;
        // Before the queue exists, so nothing sleeps on either slot yet.
        bell.ring(first);
        sim.ring(first);
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let (watched, to, flag, seen_counts) =
            (bell.clone(), sim.clone(), stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("kfd-emu-doorbell".into())
            .spawn(move || {
                let mut seen = first;
                let mut flushes_seen = hdp.flushes();
                let stopped = || flag.load(Ordering::Acquire);
                loop {
                    let v = match watched.poll(seen, POLL, stopped) {
                        Some(v) => v,
                        None => watched.wait(seen, Some(RECHECK), stopped),
                    };
                    if stopped() {
                        return;
                    }
                    if v == seen {
                        continue;
                    }
                    hdp.take();
                    let now = hdp.flushes();
                    seen_counts.doorbells.fetch_add(1, Ordering::AcqRel);
                    if now > flushes_seen {
                        seen_counts.flushed.fetch_add(1, Ordering::AcqRel);
                    }
                    flushes_seen = now;
                    to.ring(v);
                    seen = v;
                }
            })?;
        Ok((
            Front {
                bell,
                stop,
                counts,
                thread: Some(thread),
            },
            sim,
        ))
    }

    /// What it saw: (doorbells, of which flushed).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.doorbells.load(Ordering::Acquire),
            self.counts.flushed.load(Ordering::Acquire),
        )
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.bell.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
