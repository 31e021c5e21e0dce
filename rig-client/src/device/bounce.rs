//! Host access of Device memory, which the host does not address: copies through a
//! Pinned bounce buffer the device keeps, made at the first use.

use std::sync::Arc;

use super::{Device, DeviceShared, poisoned};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::submission::Submission;

/// The most bytes of a host access of Device memory one copy moves.
const BOUNCE: u64 = 4 << 20;

impl DeviceShared {
    /// Copies `out.len()` bytes at `offset` of `b` to `out`: from the shared mapping where
    /// the host addresses it, through copies into a Pinned bounce buffer otherwise.
    pub(crate) fn host_read(
        self: &Arc<Self>,
        b: &Buffer,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        if let Some(h) = &b.0.host {
            h.region.read(h.offset + offset as usize, out);
            return Ok(());
        }
        let mut bounce = self.bounce.lock().map_err(|_| poisoned())?;
        for (k, chunk) in out.chunks_mut(BOUNCE as usize).enumerate() {
            let at = offset + k as u64 * BOUNCE;
            let n = chunk.len() as u64;
            let via = self.bounce_buffer(&mut bounce, n)?;
            let s = Submission::new().copy(b, at, via, 0, n);
            Device(self.clone()).submit(&s)?.wait()?;
            self.host_read(via, 0, chunk)?;
        }
        Ok(())
    }

    /// Copies `data` to `offset` of `b`, as [`DeviceShared::host_read`] reads.
    pub(crate) fn host_write(self: &Arc<Self>, b: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
        if let Some(h) = &b.0.host {
            h.region.write(h.offset + offset as usize, data);
            return Ok(());
        }
        let mut bounce = self.bounce.lock().map_err(|_| poisoned())?;
        for (k, chunk) in data.chunks(BOUNCE as usize).enumerate() {
            let at = offset + k as u64 * BOUNCE;
            let n = chunk.len() as u64;
            let via = self.bounce_buffer(&mut bounce, n)?;
            self.host_write(via, 0, chunk)?;
            let s = Submission::new().copy(via, 0, b, at, n);
            Device(self.clone()).submit(&s)?.wait()?;
        }
        Ok(())
    }

    /// The device's bounce buffer, of at least `bytes` bytes (at most [`BOUNCE`]), made at
    /// its first use.
    pub(super) fn bounce_buffer<'a>(
        &self,
        slot: &'a mut Option<Buffer>,
        bytes: u64,
    ) -> Result<&'a Buffer> {
        if slot.as_ref().is_none_or(|b| b.len() < bytes) {
            let len = bytes.next_power_of_two().clamp(4096, BOUNCE);
            let fresh = self.alloc_detached(len)?;
            if let Some(old) = slot.take().and_then(|b| b.0.region) {
                self.free_now(old);
            }
            *slot = Some(fresh);
        }
        slot.as_ref()
            .ok_or_else(|| Error::Invalid("no bounce buffer".into()))
    }
}
