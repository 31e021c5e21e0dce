//! The crate's only `unsafe`: memory mappings (BARs, DMA pages), volatile access to them,
//! the DMA-map call into `vfio-ioctls`, and the two device ioctls that `vfio-ioctls` wraps
//! without giving the caller the result (`VFIO_DEVICE_GET_INFO`, `VFIO_DEVICE_RESET`).
//!
//! The rule for mapped memory (after vm-memory's `volatile_memory.rs`): no Rust reference or
//! slice is ever made to it. A BAR is device memory with side effects on every access, and a
//! DMA page is written by the device behind the compiler's back; every access is a volatile
//! read or write through a raw pointer, bounds-checked here.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use vfio_ioctls::VfioContainer;

use crate::abi::{self, vfio_device_info};

/// A shared mapping of a file (a BAR through the VFIO device fd, or memfd pages), unmapped
/// on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory addresses; every access is a volatile read or write
// through a raw pointer, which is as sound from one thread as from another (what the device
// sees of concurrent accesses is the device's contract, not Rust's).
unsafe impl Send for Mapping {}
// SAFETY: as for Send: no access creates a reference, so shared use creates no aliasing.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset`, shared, readable and (if `write`) writable.
    pub(crate) fn new(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        write: bool,
    ) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
        // SAFETY: a fresh mapping at an address the kernel picks (no MAP_FIXED), so no
        // existing memory is replaced; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping's length.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapping's address, for the kernel (DMA map); never dereferenced as a reference.
    pub(crate) fn addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn at<T>(&self, offset: usize) -> *mut T {
        // PANIC: callers check bounds and alignment and return errors; this is the last line.
        assert!(
            offset
                .checked_add(size_of::<T>())
                .is_some_and(|end| end <= self.len)
                && offset % size_of::<T>() == 0,
            "mapping access of {} bytes at {offset:#x} outside {:#x} bytes or misaligned",
            size_of::<T>(),
            self.len
        );
        // SAFETY: offset + size_of::<T>() <= len (checked above), inside the mapping.
        unsafe { self.ptr.as_ptr().add(offset).cast::<T>() }
    }

    /// A volatile read of a `T` (u8, u16, u32, u64) at `offset`, aligned to its size.
    pub(crate) fn read<T: Copy>(&self, offset: usize) -> T {
        let p = self.at::<T>(offset);
        // SAFETY: `at` checked that p is inside the live mapping and aligned; the read is
        // volatile, makes no reference, and any bit pattern is a valid integer.
        unsafe { p.read_volatile() }
    }

    /// A volatile write of a `T` at `offset`, aligned to its size.
    pub(crate) fn write<T: Copy>(&self, offset: usize, value: T) {
        let p = self.at::<T>(offset);
        // SAFETY: as for `read`; the mapping is writable (BARs are mapped writable only when
        // the region allows it, and writes to a read-only BAR are refused before here).
        unsafe { p.write_volatile(value) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and no reference into the mapping
        // exists (none is ever made), so unmapping invalidates nothing Rust can see.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Pages of a fresh memfd (`len` bytes, a multiple of the page size), mapped shared.
pub(crate) fn memfd_pages(name: &str, len: usize) -> io::Result<(OwnedFd, Mapping)> {
    let name =
        std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size =
        libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: ftruncate on a descriptor we own; the result is checked.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let map = Mapping::new(
        // SAFETY: `fd` is open for the whole call.
        unsafe { BorrowedFd::borrow_raw(fd.as_raw_fd()) },
        0,
        len,
        true,
    )?;
    Ok((fd, map))
}

/// Maps `pages` at `iova` through the container's IOMMU, readable and writable by the device.
///
/// The caller keeps `pages` mapped until [`VfioContainer::vfio_dma_unmap`] of the same range
/// has succeeded (the DMA buffer is held by the function's table of mappings until then).
pub(crate) fn dma_map(
    container: &VfioContainer,
    iova: u64,
    pages: &Mapping,
) -> vfio_ioctls::Result<()> {
    // SAFETY: vfio_dma_map's contract: until the range is unmapped, the memory is used only
    // through volatile accesses on raw pointers (Mapping makes no references), and no
    // reference to it is live now. The mapping outlives the DMA mapping: the function's
    // table holds the buffer until it unmaps the IOVA, before the buffer can be dropped.
    unsafe { container.vfio_dma_map(iova, pages.len(), pages.addr()) }
}

/// `VFIO_DEVICE_GET_INFO`: the device's flags (reset support among them) and counts.
pub(crate) fn device_info(fd: BorrowedFd<'_>) -> io::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    // SAFETY: the request takes a pointer to a vfio_device_info whose argsz says its size;
    // the kernel writes no more than argsz bytes into it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), abi::VFIO_DEVICE_GET_INFO as _, &mut info) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// `VFIO_DEVICE_RESET`, with the kernel's answer (vfio-ioctls drops it).
pub(crate) fn device_reset(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: the request takes no argument.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), abi::VFIO_DEVICE_RESET as _) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Borrows a descriptor that `owner` keeps open (the VFIO device file inside `VfioDevice`).
pub(crate) fn borrow<T: AsRawFd>(owner: &T) -> BorrowedFd<'_> {
    // SAFETY: the descriptor belongs to `owner`, which the returned borrow cannot outlive.
    unsafe { BorrowedFd::borrow_raw(owner.as_raw_fd()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_pages_read_back_what_was_written() {
        let (_fd, map) = memfd_pages("rig-vfio-test", 4096).unwrap();
        map.write::<u32>(8, 0xdead_beef);
        map.write::<u8>(4095, 7);
        assert_eq!(map.read::<u32>(8), 0xdead_beef);
        assert_eq!(map.read::<u8>(4095), 7);
        assert_eq!(map.read::<u64>(16), 0);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn an_access_past_the_end_panics_rather_than_touch_other_memory() {
        let (_fd, map) = memfd_pages("rig-vfio-test", 4096).unwrap();
        map.read::<u32>(4094);
    }
}
