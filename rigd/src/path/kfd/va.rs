//! The kfd path's GPU addresses and memory: addresses handed out from the GPU's aperture
//! (one VM per KFD process, shared by its devices), allocations and USERPTR registrations
//! mapped for the GPU, the host mappings kept beside them, and the second mappings of a
//! queue's pages KFD wants.

use rig_amd::PAGE_BYTES as PAGE;
use rig_kfd::abi;
use rig_kfd::kfd::HostPages;
use rig_proto::messages::MemoryKind;
use rig_shm::SharedRegion;

use super::{KfdPath, refused};
use crate::path::{PathMemory, Refusal};

#[derive(Debug)]
pub(super) struct Held {
    pub(super) handle: u64,
    pub(super) va: u64,
    pub(super) bytes: u64,
}

/// Where the host holds memory the path gave.
#[derive(Debug)]
pub(super) struct HostMemory {
    pub(super) va: u64,
    pub(super) bytes: u64,
    /// The host's mapping, and the offset in it of the memory's first byte.
    pub(super) region: SharedRegion,
    pub(super) at: u64,
    /// The offset in the region's file of the memory's first byte, if its pages can be
    /// registered again as USERPTR (memfd pages; not a dma-buf of VRAM).
    pub(super) pages_at: Option<u64>,
}

/// A host mapping to [`KfdPath::keep`]: the region, the offset of the memory in it, and the
/// offset of the memory in the region's file where those pages can be registered again.
pub(super) type Host = (SharedRegion, u64, Option<u64>);

impl KfdPath {
    pub(super) fn va(&self, bytes: u64) -> Result<u64, Refusal> {
        let mut v = self
            .shared
            .next_va
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let va = v.0;
        let end = va
            .checked_add(bytes)
            .and_then(|e| e.checked_add(PAGE))
            .filter(|e| *e <= v.1)
            .ok_or_else(|| Refusal::Lacking("the GPU's address space is full".into()))?;
        v.0 = end;
        Ok(va)
    }

    pub(super) fn keep(
        &mut self,
        held: Held,
        kind: Option<MemoryKind>,
        host: Option<Host>,
    ) -> PathMemory {
        let token = self.next_token;
        self.next_token += 1;
        self.listener
            .ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((held.va, held.va + held.bytes));
        let host = host.map(|(region, at, pages_at)| {
            self.hosts.insert(
                token,
                HostMemory {
                    va: held.va,
                    bytes: held.bytes,
                    region: region.clone(),
                    at,
                    pages_at,
                },
            );
            region
        });
        let m = PathMemory {
            address: held.va,
            bytes: held.bytes,
            kind,
            host,
            token,
        };
        self.held.insert(token, held);
        m
    }

    pub(super) fn alloc_mapped(
        &mut self,
        bytes: u64,
        flags: u32,
    ) -> Result<(u64, u64, u64), Refusal> {
        let va = self.va(bytes)?;
        let kfd = &self.shared.kfd;
        let (handle, offset) = kfd
            .alloc(self.shared.gpu_id, va, bytes, flags)
            .map_err(refused)?;
        if let Err(e) = kfd.map(handle, self.shared.gpu_id) {
            let _ = kfd.free(handle);
            return Err(refused(e));
        }
        Ok((va, handle, offset))
    }

    /// Registers `bytes` of `region` from its offset `at` (its file's offset `offset`) as
    /// USERPTR memory at a new GPU address, mapped.
    pub(super) fn register(
        &mut self,
        region: &SharedRegion,
        at: u64,
        offset: u64,
        bytes: u64,
        writable: bool,
    ) -> Result<Held, Refusal> {
        let va = self.va(bytes)?;
        let kfd = &self.shared.kfd;
        let flags = if writable {
            abi::ALLOC_MEM_FLAGS_WRITABLE
        } else {
            0
        };
        let handle = kfd
            .alloc_userptr(
                self.shared.gpu_id,
                va,
                bytes,
                HostPages {
                    host: region.as_ptr() as u64 + at,
                    fd: region.fd(),
                    offset,
                },
                flags,
            )
            .map_err(refused)?;
        if let Err(e) = kfd.map(handle, self.shared.gpu_id) {
            let _ = kfd.free(handle);
            return Err(refused(e));
        }
        Ok(Held { handle, va, bytes })
    }

    /// The host mapping of the 8 bytes at `va`, if memory the path gave holds them.
    pub(super) fn host_word(&self, va: u64) -> Option<(SharedRegion, usize)> {
        self.hosts.values().find_map(|h| {
            let off = va
                .checked_sub(h.va)
                .filter(|o| o.saturating_add(8) <= h.bytes)?;
            Some((h.region.clone(), usize::try_from(h.at + off).ok()?))
        })
    }

    /// The `bytes` (whole pages) of memory the path gave at GPU address `va` (a page's
    /// start), registered again as a USERPTR mapping of exactly those pages at a new GPU
    /// address, through a host mapping of their own: the queue buffers KFD (Linux 6.12+)
    /// wants each in a mapping of its own size, while the client keeps its layout (the CP
    /// reads and writes the same host pages as the client). `what` names them in refusals.
    /// `None` where memory the path gave is those pages exactly, a mapping of its own.
    pub(super) fn remap(
        &mut self,
        va: u64,
        bytes: u64,
        what: &str,
    ) -> Result<Option<PathMemory>, Refusal> {
        if self.held.values().any(|h| h.va == va && h.bytes == bytes) {
            return Ok(None);
        }
        let found = self.hosts.values().find_map(|h| {
            let off = va
                .checked_sub(h.va)
                .filter(|o| o.checked_add(bytes).is_some_and(|e| e <= h.bytes))?;
            Some((h.region.clone(), h.pages_at.map(|p| p + off)))
        });
        let (region, offset) =
            match found {
                Some((region, Some(offset))) => (region, offset),
                Some((_, None)) => {
                    return Err(Refusal::Refused(
                        format!(
                            "the queue's {what} at {va:#x} is in memory the path cannot register \
                     again as a mapping of its own (Mapped memory, or a peer's read-only \
                     memory): give it Pinned memory"
                        )
                        .into(),
                    ));
                }
                None => {
                    return Err(Refusal::Refused(format!(
                    "the queue's {what} ({bytes} bytes at {va:#x}) is not in Pinned or host \
                     memory this path gave"
                ).into()));
                }
            };
        let pages = region
            .dup_fd()
            .and_then(|fd| SharedRegion::from_fd_range_sealed(fd, offset, bytes))
            .map_err(|e| {
                Refusal::Lacking(
                    format!("mapping the queue's {what} again on the host: {e}").into(),
                )
            })?;
        let held = self.register(&pages, 0, offset, bytes, true)?;
        Ok(Some(self.keep(held, None, Some((pages, 0, Some(offset))))))
    }

    pub(super) fn release(&self, held: &Held) {
        let kfd = &self.shared.kfd;
        if let Err(e) = kfd.unmap(held.handle, self.shared.gpu_id) {
            tracing::warn!(error = %e, "unmapping freed KFD memory failed");
        }
        if let Err(e) = kfd.free(held.handle) {
            tracing::warn!(error = %e, "freeing KFD memory failed");
        }
        self.listener
            .ranges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(a, _)| *a != held.va);
    }
}
