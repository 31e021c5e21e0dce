//! Buffers: memory of a device, with the order of their uses.
//!
//! This module owns [`Buffer`]: where a buffer lies (its GPU address, and its host view
//! where the host addresses it), and the last values that used and wrote it, from which a
//! host access knows what to wait for (a read waits for the last write, a write or a free
//! for every use). Moving bytes to and from memory the host does not address goes through
//! the device's copy queue ([`crate::device`]). A buffer is a region of rigd's or pages of
//! a slab ([`crate::SlabPolicy`]); its drop gives either back after its last use.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rig_shm::SharedRegion;

use crate::device::DeviceShared;
use crate::error::{Error, Result};
use crate::slab::Piece;
use crate::types::{Access, Memory};

/// Where the host reaches a buffer: bytes of a shared mapping.
#[derive(Debug, Clone)]
pub(crate) struct HostView {
    pub region: SharedRegion,
    pub offset: usize,
}

/// Memory of a device. Cheap to clone: clones are the same buffer, freed once the last
/// clone drops and no submitted work uses it.
#[derive(Debug, Clone)]
pub struct Buffer(pub(crate) Arc<BufferInner>);

#[derive(Debug)]
pub(crate) struct BufferInner {
    /// The device, `None` only for buffers of unit tests.
    pub device: Option<Arc<DeviceShared>>,
    pub device_id: u64,
    /// rigd's region, freed at drop; `None` for test buffers and buffers cut from a slab.
    pub region: Option<rig_proto::RegionId>,
    /// Where it lies in a slab ([`crate::SlabPolicy`]), given back at drop.
    pub sub: Option<Sub>,
    pub address: u64,
    pub len: u64,
    pub memory: Memory,
    pub host: Option<HostView>,
    /// The last value whose work may write it (0: none).
    pub last_write: AtomicU64,
    /// The last value whose work uses it (0: none).
    pub last_use: AtomicU64,
}

/// A buffer's place in a slab, and what tells whether it may have changed its bytes.
#[derive(Debug)]
pub(crate) struct Sub {
    pub piece: Piece,
    /// `last_use` when the buffer was made (its zeroing fill's value, or 0): a later use
    /// means submitted work named it.
    pub base_use: u64,
    /// Set by host writes through it.
    pub written: std::sync::atomic::AtomicBool,
}

impl Buffer {
    /// Its bytes.
    pub fn len(&self) -> u64 {
        self.0.len
    }

    /// True iff it has no bytes (never: a buffer has at least one).
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// The GPU address of its first byte.
    pub fn address(&self) -> u64 {
        self.0.address
    }

    /// The memory it lies in (Pinned where Mapped was asked of a device without it).
    pub fn memory(&self) -> Memory {
        self.0.memory
    }

    /// True iff the host addresses it, so reads and writes go through the shared mapping.
    pub fn host_addressed(&self) -> bool {
        self.0.host.is_some()
    }

    pub(crate) fn device(&self) -> Result<&Arc<DeviceShared>> {
        self.0
            .device
            .as_ref()
            .ok_or_else(|| Error::Invalid("the buffer belongs to no device".into()))
    }

    /// Records that the work of `value` uses it as `access`. Called under the device's
    /// submit lock, in value order, so plain stores suffice.
    pub(crate) fn used(&self, value: u64, access: Access) {
        if self.0.last_use.load(Ordering::Relaxed) < value {
            self.0.last_use.store(value, Ordering::Relaxed);
        }
        if access == Access::Write && self.0.last_write.load(Ordering::Relaxed) < value {
            self.0.last_write.store(value, Ordering::Relaxed);
        }
    }

    /// Lets `f` fill the whole buffer, once every submitted use of it completed. The bytes
    /// `f` sees are the buffer's current bytes.
    pub fn write<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let dev = self.device()?;
        dev.wait(self.0.last_use.load(Ordering::Relaxed))?;
        let mut bytes = vec![0u8; self.len() as usize];
        dev.host_read(self, 0, &mut bytes)?;
        let r = f(&mut bytes);
        self.written();
        dev.host_write(self, 0, &bytes)?;
        Ok(r)
    }

    /// Lets `f` read the whole buffer, once the last submitted write of it completed.
    pub fn read<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let dev = self.device()?;
        dev.wait(self.0.last_write.load(Ordering::Relaxed))?;
        let mut bytes = vec![0u8; self.len() as usize];
        dev.host_read(self, 0, &mut bytes)?;
        Ok(f(&bytes))
    }

    /// Writes `data` at byte `offset`, once every submitted use of the buffer completed.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let dev = self.device()?;
        self.check(offset, data.len())?;
        dev.wait(self.0.last_use.load(Ordering::Relaxed))?;
        self.written();
        dev.host_write(self, offset, data)
    }

    /// Notes that the host changes its bytes, so they are zeroed before its pages are
    /// cut again.
    fn written(&self) {
        if let Some(sub) = &self.0.sub {
            sub.written.store(true, Ordering::Relaxed);
        }
    }

    /// Reads `out.len()` bytes at byte `offset`, once the last submitted write completed.
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let dev = self.device()?;
        self.check(offset, out.len())?;
        dev.wait(self.0.last_write.load(Ordering::Relaxed))?;
        dev.host_read(self, offset, out)
    }

    fn check(&self, offset: u64, bytes: usize) -> Result<()> {
        match offset.checked_add(bytes as u64) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::Invalid(format!(
                "{bytes} bytes at {offset} leave a buffer of {} bytes",
                self.len()
            ))),
        }
    }
}

impl Drop for BufferInner {
    fn drop(&mut self) {
        let last_use = *self.last_use.get_mut();
        if let (Some(dev), Some(region)) = (&self.device, self.region) {
            dev.free_after(region, last_use);
        }
        if let (Some(dev), Some(sub)) = (&self.device, &mut self.sub) {
            let dirty = *sub.written.get_mut() || last_use != sub.base_use;
            dev.free_piece(sub.piece, dirty, last_use);
        }
    }
}

/// Reads `f32`s of little-endian bytes, the layout of GPU buffers.
pub fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// Stores `values` as little-endian bytes into `bytes`, from its start.
pub fn put_f32s(bytes: &mut [u8], values: impl IntoIterator<Item = f32>) {
    for (c, v) in bytes.chunks_exact_mut(4).zip(values) {
        c.copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A buffer of device `device_id` at `address`, for unit tests of submissions.
    pub(crate) fn buffer(device_id: u64, address: u64, len: u64) -> Buffer {
        Buffer(Arc::new(BufferInner {
            device: None,
            device_id,
            region: None,
            sub: None,
            address,
            len,
            memory: Memory::Device,
            host: None,
            last_write: AtomicU64::new(0),
            last_use: AtomicU64::new(0),
        }))
    }

    #[test]
    fn uses_only_move_forward() {
        let b = buffer(1, 0x1000, 64);
        b.used(5, Access::Write);
        b.used(7, Access::Read);
        b.used(6, Access::Write);
        assert_eq!(b.0.last_write.load(Ordering::Relaxed), 6);
        assert_eq!(b.0.last_use.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn f32s_round_trip() {
        let mut bytes = [0u8; 12];
        put_f32s(&mut bytes, [1.0, 2.5, -3.0]);
        assert_eq!(f32s(&bytes).collect::<Vec<_>>(), vec![1.0, 2.5, -3.0]);
    }
}
