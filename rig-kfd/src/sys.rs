//! The crate's only `unsafe`: `ioctl(2)` on a KFD or render-node fd, and the mappings of
//! doorbell, event and memory pages that KFD (or the emulated KFD's memfds) hands out.
//!
//! A mapping is written by the GPU and by other processes while it is mapped, so it hands
//! out no Rust references to its bytes: only atomics and copies, as `rig-shm` does.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// An `errno` a system call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{} (errno {})", std::io::Error::from_raw_os_error(*.0), .0)]
pub struct Errno(pub i32);

impl Errno {
    fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }
}

/// `ioctl(fd, request, arg)` with `arg` the argument block's bytes, which the kernel reads
/// and writes in place. The block must be exactly the request's `_IOC_SIZE` bytes, so the
/// kernel never reaches past it; pointers inside the block are the caller's to keep valid.
pub fn ioctl(fd: BorrowedFd<'_>, request: u64, arg: &mut [u8]) -> Result<i32, Errno> {
    let size = ((request >> 16) & 0x3fff) as usize;
    if arg.len() != size {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: `arg` is a live, exclusively borrowed buffer of exactly the size the request
    // encodes, so the kernel's copy in and out stays inside it; the fd is borrowed open.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::c_ulong, arg.as_mut_ptr()) };
    if rc < 0 { Err(Errno::last()) } else { Ok(rc) }
}

/// Owns `raw`, an fd the kernel just installed in this process for the caller (one that
/// `recvmsg` received, or that an ioctl such as EXPORT_DMABUF answered with) and that
/// nothing else owns.
pub fn own_received_fd(raw: RawFd) -> OwnedFd {
    // SAFETY: the kernel installed `raw` for this call alone; no other owner exists, so
    // taking ownership closes it exactly once.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// Leaves `fd` open under its number, for a caller that reads the number from an argument
/// block and owns it from there ([`own_received_fd`]).
pub fn install_fd(fd: OwnedFd) -> u32 {
    u32::try_from(fd.into_raw_fd()).unwrap_or(u32::MAX)
}

/// One `MAP_SHARED` mapping of a device fd or memfd; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or volatile
// copies, which are sound from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above: no access creates a reference to the mapped bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (a multiple of the page size) at `offset` of `fd`, readable and,
    /// if `writable`, writable.
    pub fn map(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        writable: bool,
    ) -> Result<Mapping, Errno> {
        if len == 0 || len % page_size() != 0 || offset % page_size() as u64 != 0 {
            return Err(Errno(libc::EINVAL));
        }
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        // The kernel takes the offset as an unsigned long, and KFD's offsets use the top bits
        // for their type (KFD_MMAP_TYPE_EVENTS is 2 << 62, doorbells 3 << 62): pass the bits
        // as they are. Refusing offsets past i64::MAX made the kernel's event page and
        // doorbells unmappable (found by the guest test against Linux's KFD).
        #[allow(clippy::cast_possible_wrap)]
        let offset = offset as libc::off_t;
        // SAFETY: a new mapping at an address the kernel picks; nothing else is touched.
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
            return Err(Errno::last());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(Errno(libc::EINVAL))?;
        Ok(Mapping { ptr, len })
    }

    /// Its bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never: a mapping has at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of its first byte, for the kernel (a USERPTR allocation) or a comparison;
    /// never to be dereferenced outside this module.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The 32-bit word at `offset`.
    ///
    /// # Panics
    /// If the word is not aligned or not inside the mapping.
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0 && offset.checked_add(4).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds and aligned (checked above, and the mapping is page aligned);
        // the memory lives as long as `self`; an atomic has interior mutability, so other
        // writers of the shared page do not break the reference's rules.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    /// The 64-bit word at `offset`.
    ///
    /// # Panics
    /// If the word is not aligned or not inside the mapping.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len));
        // SAFETY: as for `atomic_u32`, with 8-byte alignment checked.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    /// Copies `buf.len()` bytes at `offset` out.
    ///
    /// # Panics
    /// If the range is not inside the mapping.
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        assert!(
            offset
                .checked_add(buf.len())
                .is_some_and(|end| end <= self.len)
        );
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above); a volatile read of a byte another process
            // may write creates no reference to it.
            *b = unsafe { self.ptr.as_ptr().add(offset + i).read_volatile() };
        }
    }

    /// Copies `data` in at `offset`.
    ///
    /// # Panics
    /// If the range is not inside the mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset
                .checked_add(data.len())
                .is_some_and(|end| end <= self.len)
        );
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds (checked above); volatile, as for `read`.
            unsafe { self.ptr.as_ptr().add(offset + i).write_volatile(*b) };
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is the one mmap returned, and no reference into it outlives
        // `self` (the atomics borrow `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The host's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;

    #[test]
    fn ioctl_refuses_a_block_of_the_wrong_size() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let mut small = [0u8; 4];
        assert_eq!(
            ioctl(f.as_fd(), crate::abi::GET_VERSION.request(), &mut small),
            Err(Errno(libc::EINVAL))
        );
        // The right size reaches the kernel, which answers /dev/null's ENOTTY.
        let mut block = [0u8; 8];
        assert_eq!(
            ioctl(f.as_fd(), crate::abi::GET_VERSION.request(), &mut block),
            Err(Errno(libc::ENOTTY))
        );
    }

    #[test]
    fn a_mapping_is_shared_through_its_fd() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(2 * page_size() as u64).unwrap();
        let a = Mapping::map(file.as_fd(), 0, 2 * page_size(), true).unwrap();
        let b = Mapping::map(file.as_fd(), page_size() as u64, page_size(), true).unwrap();
        a.atomic_u64(page_size() + 8)
            .store(0x1234_5678_9abc, Ordering::Release);
        assert_eq!(b.atomic_u64(8).load(Ordering::Acquire), 0x1234_5678_9abc);
        b.write(100, b"kfd");
        let mut out = [0u8; 3];
        a.read(page_size() + 100, &mut out);
        assert_eq!(&out, b"kfd");
        assert_eq!(
            Mapping::map(file.as_fd(), 1, page_size(), true).unwrap_err(),
            Errno(libc::EINVAL)
        );
    }
}
