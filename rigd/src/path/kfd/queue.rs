//! The kfd path's queues: what CREATE_QUEUE is given (second mappings of the client's ring
//! and positions, the EOP buffer and context-save area, an AQL queue's `amd_queue_t`), the
//! doorbell forwarder ([`crate::path::forward`]) that rings KFD's doorbell, and the end of
//! a queue. A queue being made owns what it made through [`Making`], which gives everything
//! back on any exit but the one that commits it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rig_amd::PAGE_BYTES as PAGE;
use rig_amd::aql::{AmdQueue, amd_queue};
use rig_kfd::abi;
use rig_kfd::kfd::KfdError;
use rig_kfd::queue::{ContextSave, EOP_BUFFER_BYTES};
use rig_kfd::seam::{Kernel, Pages};
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::SharedRegion;

use super::process::Listener;
use super::{KfdPath, MOST_RING, Shared, kfd_why, refused};
use crate::path::forward::{AqlWords, Bell, Forwarder};
use crate::path::memory::page_round;
use crate::path::{Fault, Path, PathMemory, QueueHandle, QueueSpec, Refusal, Why};

/// CREATE_QUEUE's refusals, each naming what the kernel's errno says of the queue (its
/// ENOSPC is the process's queues on the GPU, its ENOMEM the process's queue ids, not memory).
pub(super) fn queue_refused(e: KfdError, args: &abi::CreateQueueArgs) -> Refusal {
    let with_errno = |what: String| Why {
        what,
        cause: kfd_why(&e).cause,
    };
    match &e {
        KfdError::Ioctl { errno, .. } if errno.0 == libc::ENOSPC => {
            Refusal::Full(with_errno(format!(
                "KFD allows the process no more queues on this GPU (127 a process, 255 on GC \
             9.4.3; a device takes two): {e}"
            )))
        }
        KfdError::Ioctl { errno, .. } if errno.0 == libc::ENOMEM => Refusal::Full(with_errno(
            format!("KFD has no queue id left for the process (1024 across its GPUs): {e}"),
        )),
        KfdError::Ioctl { errno, .. } if errno.0 == libc::EPERM => {
            Refusal::Full(with_errno(format!(
                "the GPU holds as many queues as KFD allows (amdgpu's max_num_of_queues_per_device): {e}"
            )))
        }
        KfdError::Ioctl { errno, .. } if errno.0 == libc::EINVAL => {
            Refusal::Refused(with_errno(format!(
                "KFD refused the queue's buffers: a {}-byte ring, a {}-byte EOP buffer, a {}-byte \
             context-save area with a {}-byte control stack (rig_kfd::queue's sizes for this \
             GPU, which this kernel does not take), each buffer a mapping of exactly its \
             size and each position one of exactly a page (Linux 6.12's rule){}: {e}",
                args.ring_size,
                args.eop_buffer_size,
                args.ctx_save_restore_size,
                args.ctl_stack_size,
                if args.queue_type == abi::QUEUE_TYPE_COMPUTE_AQL {
                    ", read and write pointers in the amd_queue_t's page of their own"
                } else {
                    ""
                }
            )))
        }
        _ => refused(e),
    }
}

/// A queue KFD made for the path, with its forwarder and the buffers it was given.
#[derive(Debug)]
pub(super) struct KfdQueue {
    id: u32,
    forwarder: Forwarder,
    buffers: Vec<PathMemory>,
    /// An AQL queue's `amd_queue_t`, whose scratch fields a growth rewrites.
    descriptor: Option<SharedRegion>,
}

impl KfdQueue {
    /// Hands an AQL queue new scratch: `update` ([`AmdQueue::scratch_update`]) into its
    /// descriptor's scratch fields, which the command processor reads at each dispatch.
    pub(super) fn hand_scratch(&self, update: &[u8]) {
        if let Some(d) = &self.descriptor {
            d.write(AmdQueue::SCRATCH_FIELDS.start, update);
        }
    }
}

/// A queue whose forwarder stopped and that KFD could not destroy: it may still run, so its
/// buffers are kept.
#[derive(Debug)]
pub(super) struct Undestroyed {
    pub(super) id: u32,
    pub(super) buffers: Vec<PathMemory>,
    /// When its destruction first failed: the path counts it as running since then.
    pub(super) since: Instant,
}

/// A queue being made: the buffers made for it and, once CREATE_QUEUE made it, its KFD
/// queue. Dropped uncommitted (any refusal on the way), it destroys the queue and then
/// frees the buffers, so no exit leaks either.
struct Making<'a> {
    path: &'a mut KfdPath,
    buffers: Vec<PathMemory>,
    queue: Option<u32>,
}

impl Making<'_> {
    /// Keeps `m` for the queue.
    fn hold(&mut self, m: PathMemory) -> u64 {
        let address = m.address;
        self.buffers.push(m);
        address
    }

    /// The queue is made: its buffers are the queue's now.
    fn commit(mut self) -> Vec<PathMemory> {
        self.queue = None;
        std::mem::take(&mut self.buffers)
    }
}

impl Drop for Making<'_> {
    fn drop(&mut self) {
        // The queue may read its buffers until it is destroyed: it goes first.
        if let Some(id) = self.queue.take()
            && let Err(e) = self.path.shared.kfd.destroy_queue(id)
        {
            tracing::warn!(queue = id, error = %e, "destroying a queue that was not finished failed");
        }
        for b in std::mem::take(&mut self.buffers) {
            self.path.free(b);
        }
    }
}

/// A queue's KFD doorbell: its slot of the process's doorbell page, rung through the
/// kernel seam after the GPU's HDP flush (so the client's writes through the BAR are in
/// memory before the command processor reads its packets).
struct KfdBell {
    kernel: Arc<dyn Kernel>,
    page: Arc<Pages>,
    at: usize,
    hdp: Option<Arc<Pages>>,
    listener: Arc<Listener>,
    last_ring: Arc<std::sync::Mutex<Option<(Instant, u64)>>>,
}

impl Bell for KfdBell {
    fn rung(&self) {
        let seen_irqs = self.listener.interrupts.load(Ordering::Acquire);
        *self.last_ring.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), seen_irqs));
    }

    fn ring(&self, value: u64) {
        if let Some(h) = &self.hdp {
            h.atomic_u32(abi::MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
                .store(0, Ordering::Release);
        }
        self.kernel.ring(&self.page, self.at, value);
    }
}

impl KfdPath {
    /// Makes the hardware queue `spec` asks for ([`Path::queue`]).
    pub(super) fn make_queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        let kind = match spec.kind {
            QueueKind::Pm4 => abi::QUEUE_TYPE_COMPUTE,
            QueueKind::Aql => abi::QUEUE_TYPE_COMPUTE_AQL,
            QueueKind::Sdma => abi::QUEUE_TYPE_SDMA,
        };
        let ring_size = u32::try_from(spec.bytes).map_err(|_| {
            Refusal::Refused(
                format!("a ring of {} bytes exceeds KFD's {MOST_RING}", spec.bytes).into(),
            )
        })?;
        if spec.ring % PAGE != 0 {
            return Err(Refusal::Refused(
                format!(
                    "the queue's ring at {:#x} does not begin a page, as KFD wants of a ring",
                    spec.ring
                )
                .into(),
            ));
        }
        let mut args = abi::CreateQueueArgs {
            ring_base_address: spec.ring,
            write_pointer_address: spec.write,
            read_pointer_address: spec.read,
            ring_size,
            gpu_id: self.shared.gpu_id,
            queue_type: kind,
            queue_percentage: abi::MAX_QUEUE_PERCENTAGE,
            queue_priority: 7,
            ..Default::default()
        };
        let mut making = Making {
            path: self,
            buffers: Vec::new(),
            queue: None,
        };
        // KFD (Linux 6.12+, kfd_queue_acquire_buffers) wants the ring the start of a mapping
        // of exactly its size, and each position a mapping of exactly its one page; the
        // client's layout (ring, then a page of positions, in one Pinned allocation) stays,
        // and its pages are mapped again for the queue at addresses of their own.
        let ring_pages = page_round(spec.bytes).unwrap_or(PAGE);
        if let Some(ring) = making.path.remap(spec.ring, ring_pages, "ring")? {
            args.ring_base_address = making.hold(ring);
        }
        if spec.kind != QueueKind::Aql {
            // An AQL queue's positions are its amd_queue_t's, in a page of its own (below).
            let (read, write) = (spec.read & !(PAGE - 1), spec.write & !(PAGE - 1));
            let mut pages = vec![read];
            if write != read {
                pages.push(write);
            }
            for page in pages {
                if let Some(m) = making.path.remap(page, PAGE, "positions")? {
                    let address = making.hold(m);
                    if page == read {
                        args.read_pointer_address = address + spec.read % PAGE;
                    }
                    if page == write {
                        args.write_pointer_address = address + spec.write % PAGE;
                    }
                }
            }
        }
        if spec.kind != QueueKind::Sdma {
            let cs = ContextSave::of(&making.path.shared.node);
            let eop = making.path.alloc(MemoryKind::Device, EOP_BUFFER_BYTES)?;
            args.eop_buffer_address = making.hold(eop);
            args.eop_buffer_size = EOP_BUFFER_BYTES;
            let ctx = making.path.alloc(MemoryKind::Device, cs.total_bytes())?;
            args.ctx_save_restore_address = making.hold(ctx);
            args.ctx_save_restore_size = cs.cwsr_bytes as u32;
            args.ctl_stack_size = cs.ctl_stack_bytes as u32;
        }
        let mut aql = None;
        if spec.kind == QueueKind::Aql {
            let (m, words) = making.path.amd_queue(&spec)?;
            let address = making.hold(m);
            args.read_pointer_address = address + amd_queue::READ_DISPATCH_ID as u64;
            args.write_pointer_address = address + amd_queue::WRITE_DISPATCH_ID as u64;
            aql = Some(words);
        }
        let shared = making.path.shared.clone();
        shared
            .kfd
            .create_queue(&mut args)
            .map_err(|e| queue_refused(e, &args))?;
        making.queue = Some(args.queue_id);
        let page = doorbell_page(&shared, args.doorbell_offset).map_err(refused)?;
        if let Some(w) = &aql {
            w.queue
                .store_u64(amd_queue::ID, u64::from(args.queue_id), Ordering::Release);
        }
        let bell = KfdBell {
            kernel: shared.kfd.kernel().clone(),
            page,
            at: (args.doorbell_offset & (abi::DOORBELL_SLICE_BYTES - 1)) as usize,
            hdp: shared.hdp.as_ref().ok().map(|(p, _)| p.clone()),
            listener: making.path.listener.clone(),
            last_ring: making.path.last_ring.clone(),
        };
        let descriptor = aql.as_ref().map(|w| w.queue.clone());
        let forwarder =
            Forwarder::spawn("rigd-kfd-doorbell", spec.doorbell, bell, aql).map_err(|e| {
                Refusal::Lacking(format!("no thread for the queue's doorbell: {e}").into())
            })?;
        let buffers = making.commit();
        let token = self.next_token;
        self.next_token += 1;
        self.queues.insert(
            token,
            KfdQueue {
                id: args.queue_id,
                forwarder,
                buffers,
                descriptor,
            },
        );
        Ok(QueueHandle(token))
    }

    /// Ends queue `q`: its forwarder first (nothing rings it after), then the KFD queue,
    /// then its buffers. A queue KFD could not destroy (its DESTROY_QUEUE failed: the
    /// kernel's ETIME when the hardware scheduler does not unmap it) may still run and
    /// read or write its buffers: they are kept, for the path's life, with the queue in
    /// [`KfdPath::undestroyed`], and the path's stop answers `Unknown` while it is there.
    pub(super) fn end_queue(&mut self, q: KfdQueue) -> Result<(), Fault> {
        q.forwarder.stop();
        self.destroy(Undestroyed {
            id: q.id,
            buffers: q.buffers,
            since: Instant::now(),
        })
    }

    /// Destroys the KFD queue of `q` and frees its buffers, or keeps both in
    /// [`KfdPath::undestroyed`] and answers KFD's failure.
    pub(super) fn destroy(&mut self, q: Undestroyed) -> Result<(), Fault> {
        match self.shared.kfd.destroy_queue(q.id) {
            Ok(()) => {
                for b in q.buffers {
                    self.free(b);
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(queue = q.id, error = %e, "KFD could not destroy a queue: its buffers are kept");
                let why = kfd_why(&e).within(format!("destroying KFD queue {}", q.id));
                self.undestroyed.push(q);
                Err(Fault(why))
            }
        }
    }

    /// An AQL queue's `amd_queue_t`: Pinned memory of one page (KFD wants the read and
    /// write pointers each in a mapping of one page of its own), describing the ring of
    /// `spec` and the scratch every kernel gets (`spec.scratch`, shared by the GPU's wave
    /// slots as rigd sizes it), and where the client reads the queue's read position.
    fn amd_queue(&mut self, spec: &QueueSpec) -> Result<(PathMemory, AqlWords), Refusal> {
        let read = self.host_word(spec.read).ok_or_else(|| {
            Refusal::Refused(
                format!(
                    "the AQL queue's read position at {:#x} is not in memory this path gave",
                    spec.read
                )
                .into(),
            )
        })?;
        let gpu = self
            .shared
            .node
            .gpu()
            .map_err(|e| Refusal::Refused(e.to_string().into()))?;
        let q = AmdQueue::for_gpu(gpu, spec.ring, spec.bytes, spec.scratch);
        let m = self.alloc(MemoryKind::Pinned, PAGE)?;
        let Some(host) = m.host.clone() else {
            self.free(m);
            return Err(Refusal::Refused(
                "Pinned memory came without a host mapping".into(),
            ));
        };
        host.write(0, &q.to_bytes());
        Ok((m, AqlWords { queue: host, read }))
    }
}

/// The process's doorbell page of the GPU, mapped at the first queue's `doorbell_offset`.
pub(super) fn doorbell_page(shared: &Shared, doorbell_offset: u64) -> Result<Arc<Pages>, KfdError> {
    let mut d = shared.doorbells.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*d {
        return Ok(p.clone());
    }
    let p = Arc::new(shared.kfd.mmap(
        "doorbells",
        doorbell_offset & !(abi::DOORBELL_SLICE_BYTES - 1),
        abi::DOORBELL_SLICE_BYTES as usize,
    )?);
    *d = Some(p.clone());
    Ok(p)
}
