//! The program's own memory that a device maps without a copy ([`crate::Device::map_host`]).
//!
//! This module owns [`HostMemory`]: a sealed memfd the program made and mapped (rig-shm's
//! region inside), which rigd maps for the GPU from the descriptor. The program reads and
//! writes it through copies and atomics, never through a reference, since the GPU may write
//! it at any time.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicU32;

use rig_shm::SharedRegion;

use crate::error::{Error, Result};

/// Memory of the program's own that a device maps as a buffer with no copy
/// ([`crate::Device::map_host`]): zeroed pages of a memfd, mapped in this process. Cheap to
/// clone: clones share the mapping, which lasts while a clone or a buffer of it lives.
#[derive(Debug, Clone)]
pub struct HostMemory(pub(crate) SharedRegion);

impl HostMemory {
    /// `bytes` zeroed bytes of new memory (a memfd named `name`, as `/proc/PID/maps` shows
    /// it). A device maps whole pages, so a mapping of all of it wants a multiple of 4096.
    pub fn new(name: &str, bytes: u64) -> Result<HostMemory> {
        let len = usize::try_from(bytes).map_err(|_| {
            Error::Invalid(format!("{bytes} bytes of host memory do not fit this host"))
        })?;
        SharedRegion::create(name, len)
            .map(HostMemory)
            .map_err(|e| Error::Io {
                what: "making host memory",
                source: std::io::Error::other(e),
            })
    }

    /// Its bytes.
    pub fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// Always false: host memory has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `bytes` bytes at `offset`, checked to lie inside, as the region's offset.
    fn range(&self, offset: u64, bytes: u64) -> Result<usize> {
        if self.0.contains(offset, bytes) {
            Ok(offset as usize)
        } else {
            Err(Error::Invalid(format!(
                "{bytes} bytes at {offset} leave the {} bytes of host memory",
                self.len()
            )))
        }
    }

    /// Copies `out.len()` bytes at `offset` into `out`. Bytes the GPU writes meanwhile may
    /// be seen torn: read after a wait for the work that writes them.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let at = self.range(offset, out.len() as u64)?;
        self.0.read(at, out);
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.range(offset, data.len() as u64)?;
        self.0.write(at, data);
        Ok(())
    }

    /// The 32-bit atomic at `offset` (a multiple of 4), for a flag the GPU's work reads or
    /// writes while it runs.
    pub fn atomic_u32(&self, offset: u64) -> Result<&AtomicU32> {
        let at = self.range(offset, 4)?;
        if at % 4 != 0 {
            return Err(Error::Invalid(format!(
                "a 32-bit atomic at {offset} is not 4-byte aligned"
            )));
        }
        Ok(self.0.atomic_u32(at))
    }

    /// The address of its first byte, for code outside Rust (the C ABI hands it to C).
    /// Dereferencing it is the caller's business: no reference to these bytes may be made
    /// while the GPU may write them. It stays valid while a clone or a buffer of it lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
}

/// The memfd, for a program that passes it on.
impl AsFd for HostMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }
}
