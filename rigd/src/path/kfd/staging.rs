//! The kfd path's staging copy: how uploads reach Device memory, which the host does not
//! address. A GTT buffer of [`STAGING_BYTES`] and an SDMA queue of the path's own, made at
//! the first upload and destroyed at stop; each piece is copied by a COPY_LINEAR whose
//! fence the path waits for at most [`STAGING_BOUND`].

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_amd::PAGE_BYTES as PAGE;
use rig_kfd::abi;
use rig_kfd::seam::Pages;

use super::queue::{doorbell_page, queue_refused};
use super::va::Held;
use super::{HANG_MS, KfdPath};
use crate::path::Fault;

/// Bytes of host memory an upload into Device memory passes through at a time: the path's
/// staging buffer (GTT), reused for every piece of an upload.
pub const STAGING_BYTES: u64 = 1 << 20;
/// How long an upload waits for a staging copy's fence before it reports a fault: the
/// hang bound, as long as any work may run unseen (an SDMA engine copies a MiB in tens of
/// microseconds).
pub const STAGING_BOUND: Duration = Duration::from_millis(HANG_MS);
/// Bytes of the staging queue's SDMA ring.
const STAGING_RING: u64 = 4096;
/// Words of one staging submission: a COPY_LINEAR, a FENCE, NOPs to a 64-byte slot, so the
/// ring's end is always a submission's end.
const STAGING_SLOT_WORDS: usize = 16;
/// Where the staging queue's page of words keeps its read position, write position and
/// fence word (each on a cache line of its own). Ring, words and bytes are allocations of
/// their own: KFD (Linux 6.12+) wants the ring's mapping its size exactly and each
/// position's mapping one page.
const STAGING_RPTR: u64 = 0;
const STAGING_WPTR: u64 = 64;
const STAGING_FENCE: u64 = 128;

/// The path's own way into Device memory: three GTT buffers (an SDMA ring; a page of its
/// positions and a fence word; [`STAGING_BYTES`] of bytes), each with the host's mapping
/// of it (through the render node), and the SDMA queue that reads the ring.
#[derive(Debug)]
pub(super) struct Staging {
    ring: (Held, Pages),
    words: (Held, Pages),
    data: (Held, Pages),
    queue: u32,
    doorbells: Arc<Pages>,
    /// The queue's doorbell, a byte offset in `doorbells`.
    bell: usize,
    /// Bytes written to the ring (the queue's write position).
    written: u64,
    /// The value of the last fence submitted.
    fence: u32,
}

impl KfdPath {
    /// Copies `data` to GPU address `dst` (Device memory of this path) through the staging
    /// buffer, a piece of at most [`STAGING_BYTES`] at a time, each waited for.
    pub(super) fn stage(&mut self, dst: u64, data: &[u8]) -> Result<(), Fault> {
        if data.is_empty() {
            return Ok(());
        }
        let mut st = match self.staging.take() {
            Some(st) => st,
            None => self.start_staging()?,
        };
        let r = self.copy_through(&mut st, dst, data);
        self.staging = Some(st);
        if r.is_err() {
            // The queue may yet run: destroyed before its memory goes.
            let _ = self.end_staging();
        }
        r
    }

    /// Copies `data` to `dst` through `st`, piece by piece, each piece's fence waited for.
    fn copy_through(&self, st: &mut Staging, dst: u64, data: &[u8]) -> Result<(), Fault> {
        let gpu = self
            .shared
            .node
            .gpu()
            .map_err(|e| Fault(e.to_string().into()))?;
        let layout = rig_amd::sdma::Layout::for_gpu(gpu);
        let mut at = dst;
        for piece in data.chunks(STAGING_BYTES as usize) {
            st.data.1.write(0, piece);
            st.fence = st.fence.wrapping_add(1);
            let mut words = [0u32; STAGING_SLOT_WORDS];
            let src = st.data.0.va;
            let copy = rig_amd::sdma::CopyLinear::new(src, at, piece.len() as u64)
                .encode(layout, &mut words)
                .map_err(|e| Fault(format!("encoding the staging copy: {e}").into()))?;
            let fence = rig_amd::sdma::Fence::new(layout, st.words.0.va + STAGING_FENCE, st.fence)
                .encode(&mut words[copy..])
                .map_err(|e| Fault(format!("encoding the staging copy's fence: {e}").into()))?;
            rig_amd::sdma::pad(&mut words[copy + fence..]);
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            st.ring
                .1
                .write((st.written % STAGING_RING) as usize, &bytes);
            st.written += bytes.len() as u64;
            st.words
                .1
                .atomic_u64(STAGING_WPTR as usize)
                .store(st.written, Ordering::Release);
            self.shared
                .kfd
                .kernel()
                .ring(&st.doorbells, st.bell, st.written);
            if !fenced(&st.words.1, st.fence) {
                return Err(Fault(
                    format!(
                        "the staging copy of {} bytes into Device memory at {at:#x} did not \
                     finish within {} ms (its SDMA queue never wrote the fence)",
                        piece.len(),
                        STAGING_BOUND.as_millis()
                    )
                    .into(),
                ));
            }
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// Makes GTT memory of `bytes` for the staging copy, mapped for the host through the
    /// render node; a fault at its addresses is this device's. `what` names it in faults.
    fn staging_buffer(&mut self, bytes: u64, what: &str) -> Result<(Held, Pages), Fault> {
        let flags = abi::ALLOC_MEM_FLAGS_GTT | abi::ALLOC_MEM_FLAGS_WRITABLE;
        let (va, handle, offset) = self.alloc_mapped(bytes, flags).map_err(|e| {
            Fault(format!("no staging {what} for uploads into Device memory: {e}").into())
        })?;
        let memory = Held { handle, va, bytes };
        match self
            .shared
            .kfd
            .kernel()
            .mmap(self.shared._render.as_fd(), offset, bytes as usize)
        {
            Ok(host) => {
                self.listener
                    .ranges
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((va, va + bytes));
                Ok((memory, host))
            }
            Err(e) => {
                self.release(&memory);
                Err(Fault(format!("mapping the staging {what}: {e}").into()))
            }
        }
    }

    /// Makes the staging queue's ring, its page of positions and fence, and its bytes
    /// (three allocations: KFD wants the ring's mapping and each position's of their own
    /// sizes) and the SDMA queue that copies out of them.
    fn start_staging(&mut self) -> Result<Staging, Fault> {
        let ring = self.staging_buffer(STAGING_RING, "ring")?;
        let words = match self.staging_buffer(PAGE, "positions") {
            Ok(w) => w,
            Err(e) => {
                self.release(&ring.0);
                return Err(e);
            }
        };
        let data = match self.staging_buffer(STAGING_BYTES, "buffer") {
            Ok(d) => d,
            Err(e) => {
                self.release(&ring.0);
                self.release(&words.0);
                return Err(e);
            }
        };
        let mut args = abi::CreateQueueArgs {
            ring_base_address: ring.0.va,
            write_pointer_address: words.0.va + STAGING_WPTR,
            read_pointer_address: words.0.va + STAGING_RPTR,
            ring_size: STAGING_RING as u32,
            gpu_id: self.shared.gpu_id,
            queue_type: abi::QUEUE_TYPE_SDMA,
            queue_percentage: abi::MAX_QUEUE_PERCENTAGE,
            queue_priority: 7,
            ..Default::default()
        };
        let made = self
            .shared
            .kfd
            .create_queue(&mut args)
            .map_err(|e| {
                Fault(
                    format!(
                        "no SDMA queue for the staging copy: {}",
                        queue_refused(e, &args)
                    )
                    .into(),
                )
            })
            .and_then(|()| {
                doorbell_page(&self.shared, args.doorbell_offset).map_err(|e| {
                    let _ = self.shared.kfd.destroy_queue(args.queue_id);
                    Fault(format!("mapping the staging queue's doorbell: {e}").into())
                })
            });
        let doorbells = match made {
            Ok(d) => d,
            Err(e) => {
                for (m, _) in [&ring, &words, &data] {
                    self.release(m);
                }
                return Err(e);
            }
        };
        Ok(Staging {
            ring,
            words,
            data,
            queue: args.queue_id,
            doorbells,
            bell: (args.doorbell_offset & (abi::DOORBELL_SLICE_BYTES - 1)) as usize,
            written: 0,
            fence: 0,
        })
    }

    /// Destroys the staging queue, then frees its buffers.
    pub(super) fn end_staging(&mut self) -> Result<(), Fault> {
        let Some(st) = self.staging.take() else {
            return Ok(());
        };
        let r = self
            .shared
            .kfd
            .destroy_queue(st.queue)
            .map_err(|e| Fault(e.to_string().into()));
        for (m, host) in [st.ring, st.words, st.data] {
            drop(host);
            self.release(&m);
        }
        r
    }
}

/// Whether the staging buffer's fence word reads `want` within [`STAGING_BOUND`]: spins a
/// little (a piece takes microseconds on a GPU), then sleeps between looks.
fn fenced(host: &Pages, want: u32) -> bool {
    let word = host.atomic_u32(STAGING_FENCE as usize);
    let deadline = Instant::now() + STAGING_BOUND;
    let mut looks = 0u32;
    while word.load(Ordering::Acquire) != want {
        if Instant::now() >= deadline {
            return false;
        }
        looks += 1;
        if looks < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    true
}
