//! One `MAP_SHARED` mapping of a memfd, and the only ways rig reaches its bytes.
//!
//! The mapping is reference counted: clones of a [`SharedRegion`] share it, and it is unmapped
//! when the last clone drops. Accessors never create `&`/`&mut` to the mapped bytes, since
//! another process may write them at any time; they copy through raw pointers or go through
//! atomics.
//!
//! A mapping must never lose pages under it: a holder of the memfd that `ftruncate`s it
//! smaller would make the next access here a `SIGBUS`. So memfds made here are sealed
//! against resizing and resealing, and memfds from untrusted senders are mapped with
//! [`SharedRegion::from_fd_sealed`], which seals them against shrinking first, or
//! [`SharedRegion::from_fd_range_sealed`], which also maps only the range asked for, so
//! what a sender's file costs this process is what it was charged for.

use std::os::fd::OwnedFd;
#[cfg(not(miri))]
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{Result, ShmError};

/// A shared-memory region: one mapping of a memfd, cheap to clone (clones share the mapping).
///
/// All accessors take byte offsets from the start of the region.
///
/// # Panics
///
/// Every accessor panics if its range leaves the region, and the atomic ones if the offset is
/// not aligned to the access size: offsets are the caller's own arithmetic, so a bad one is a
/// bug of the caller. Code that takes offsets from another process must check them with
/// [`SharedRegion::contains`] first.
#[derive(Clone)]
pub struct SharedRegion {
    inner: Arc<Mapping>,
}

struct Mapping {
    /// Start of the mapping; page aligned.
    ptr: NonNull<u8>,
    /// Bytes mapped.
    len: usize,
    /// The memfd, kept so that it can be passed to another process.
    #[cfg(not(miri))]
    fd: OwnedFd,
}

// SAFETY: the mapping is plain memory that every accessor reaches through raw pointers or
// atomics; nothing in it is tied to the thread that mapped it.
unsafe impl Send for Mapping {}
// SAFETY: shared access only copies or uses atomics, which are sound under concurrent writers.
unsafe impl Sync for Mapping {}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("ptr", &self.inner.ptr)
            .field("len", &self.inner.len)
            .finish()
    }
}

fn check_size(bytes: u64) -> Result<usize> {
    match usize::try_from(bytes) {
        Ok(n) if n > 0 && isize::try_from(n).is_ok() => Ok(n),
        _ => Err(ShmError::BadSize(bytes)),
    }
}

impl SharedRegion {
    /// Creates a memfd of `len` zeroed bytes named `name` (shown in `/proc/*/maps`) and maps it.
    ///
    /// The memfd is sealed (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): processes it is
    /// passed to can write its bytes but never resize it.
    pub fn create(name: &str, len: usize) -> Result<Self> {
        let len = check_size(len as u64)?;
        #[cfg(miri)]
        {
            let _ = name;
            let layout = std::alloc::Layout::from_size_align(len, 4096)
                .map_err(|_| ShmError::BadSize(len as u64))?;
            // SAFETY: the layout has a nonzero size (checked above).
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            let ptr = NonNull::new(ptr).ok_or(ShmError::BadSize(len as u64))?;
            Ok(Self {
                inner: Arc::new(Mapping { ptr, len }),
            })
        }
        #[cfg(not(miri))]
        {
            let fd = sys::memfd(name)?;
            sys::truncate(&fd, len)?;
            // Whoever receives a descriptor of it may neither shrink it (this process's
            // next access to a lost page would be a SIGBUS), nor grow it, nor change the
            // seals (no F_SEAL_FUTURE_WRITE behind our back).
            sys::add_seals(
                &fd,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            )
            .map_err(ShmError::Seal)?;
            let ptr = sys::map(&fd, len)?;
            Ok(Self {
                inner: Arc::new(Mapping { ptr, len, fd }),
            })
        }
    }

    /// Maps the whole of a memfd (or any shared-memory file) received from another process.
    #[cfg(not(miri))]
    pub fn from_fd(fd: OwnedFd) -> Result<Self> {
        let len = check_size(sys::size(&fd)?)?;
        let ptr = sys::map(&fd, len)?;
        Ok(Self {
            inner: Arc::new(Mapping { ptr, len, fd }),
        })
    }

    /// Under Miri there are no memfds to receive.
    #[cfg(miri)]
    pub fn from_fd(_fd: OwnedFd) -> Result<Self> {
        Err(ShmError::Unsupported)
    }

    /// Maps the whole of a memfd received from a process that is not trusted, after making
    /// sure it can never shrink: with `F_SEAL_SHRINK` on it, no holder of a descriptor can
    /// `ftruncate` pages away under this mapping, so touching it never raises `SIGBUS`.
    ///
    /// The seal is added here if the memfd does not carry it yet, which needs a memfd made
    /// with `MFD_ALLOW_SEALING` (as [`SharedRegion::create`] makes them) and a writable
    /// descriptor. Anything else (a memfd without sealing, a tmpfs or regular file, a pipe)
    /// is refused with [`ShmError::Unsealable`]. Growing stays allowed: it takes no page
    /// away, and the memory is the sender's. The size is read after sealing, so the
    /// mapping never covers bytes that can vanish.
    #[cfg(not(miri))]
    pub fn from_fd_sealed(fd: OwnedFd) -> Result<Self> {
        sys::seal_shrink(&fd)?;
        Self::from_fd(fd)
    }

    /// Under Miri there are no memfds to receive.
    #[cfg(miri)]
    pub fn from_fd_sealed(_fd: OwnedFd) -> Result<Self> {
        Err(ShmError::Unsupported)
    }

    /// Maps only the `bytes` bytes at `offset` of a memfd received from a process that is not
    /// trusted, sealed against shrinking first as [`SharedRegion::from_fd_sealed`] does.
    ///
    /// The range must start on a page and lie inside the file as sealed
    /// ([`ShmError::OutsideFile`] otherwise), so a sender cannot make this process map more
    /// of its address space than it asked for (a sparse memfd of 2^46 bytes costs nothing to
    /// make). Offsets into the region count from `offset`.
    #[cfg(not(miri))]
    pub fn from_fd_range_sealed(fd: OwnedFd, offset: u64, bytes: u64) -> Result<Self> {
        sys::seal_shrink(&fd)?;
        let file = sys::size(&fd)?;
        let outside = ShmError::OutsideFile {
            offset,
            bytes,
            len: file,
        };
        if !offset.is_multiple_of(sys::page_bytes())
            || offset.checked_add(bytes).is_none_or(|end| end > file)
        {
            return Err(outside);
        }
        let len = check_size(bytes)?;
        let ptr = sys::map_at(&fd, len, offset)?;
        Ok(Self {
            inner: Arc::new(Mapping { ptr, len, fd }),
        })
    }

    /// Under Miri there are no memfds to receive.
    #[cfg(miri)]
    pub fn from_fd_range_sealed(_fd: OwnedFd, _offset: u64, _bytes: u64) -> Result<Self> {
        Err(ShmError::Unsupported)
    }

    /// The memfd, to pass to another process.
    #[cfg(not(miri))]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }

    /// A new descriptor of the memfd, for sending over a socket.
    pub fn dup_fd(&self) -> Result<OwnedFd> {
        #[cfg(miri)]
        {
            Err(ShmError::Unsupported)
        }
        #[cfg(not(miri))]
        {
            self.inner.fd.try_clone().map_err(ShmError::Dup)
        }
    }

    /// Bytes in the region.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `bytes` bytes at `offset` lie inside the region (no overflow).
    pub fn contains(&self, offset: u64, bytes: u64) -> bool {
        offset
            .checked_add(bytes)
            .is_some_and(|end| end <= self.inner.len as u64)
    }

    /// Whether `self` and `other` are clones of one mapping.
    pub fn same_mapping(&self, other: &SharedRegion) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The address of the region's first byte.
    ///
    /// Dereferencing it is the caller's business: no reference to these bytes may be made
    /// while another process or thread may write them. The pointer stays valid as long as a
    /// clone of this region lives.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr.as_ptr()
    }

    /// Pointer to `bytes` bytes at `offset`, checked to lie inside the region.
    fn at(&self, offset: usize, bytes: usize) -> *mut u8 {
        assert!(
            self.contains(offset as u64, bytes as u64),
            "shared-region access of {bytes} bytes at {offset} leaves a region of {} bytes",
            self.inner.len
        );
        // SAFETY: offset + bytes <= len (checked above), so the result stays in the mapping.
        unsafe { self.inner.ptr.as_ptr().add(offset) }
    }

    /// The 32-bit atomic at `offset`, which must be 4-byte aligned.
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset.is_multiple_of(4),
            "unaligned 32-bit atomic at {offset}"
        );
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: `p` is 4-byte aligned (the mapping is page aligned and offset.is_multiple_of(4)),
        // inside the mapping, and lives as long as `self`. Every access to shared bytes goes
        // through atomics or raw copies, never through a plain reference.
        unsafe { AtomicU32::from_ptr(p) }
    }

    /// The 64-bit atomic at `offset`, which must be 8-byte aligned.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8),
            "unaligned 64-bit atomic at {offset}"
        );
        let p = self.at(offset, 8).cast::<u64>();
        // SAFETY: as in `atomic_u32`, with 8-byte alignment.
        unsafe { AtomicU64::from_ptr(p) }
    }

    /// Loads the u32 at `offset` (4-byte aligned).
    pub fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
        self.atomic_u32(offset).load(order)
    }

    /// Loads the u64 at `offset` (8-byte aligned).
    pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        self.atomic_u64(offset).load(order)
    }

    /// Stores the u32 at `offset` (4-byte aligned).
    pub fn store_u32(&self, offset: usize, value: u32, order: Ordering) {
        self.atomic_u32(offset).store(value, order)
    }

    /// Stores the u64 at `offset` (8-byte aligned).
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) {
        self.atomic_u64(offset).store(value, order)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    ///
    /// Bytes another party writes meanwhile may be seen torn; order such reads with an
    /// acquire load of the word that publishes them.
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        let src = self.at(offset, buf.len());
        // SAFETY: `src` has buf.len() bytes inside the mapping; `buf` is private memory that
        // cannot overlap a shared mapping borrowed by nobody.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) }
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) {
        let dst = self.at(offset, data.len());
        // SAFETY: `dst` has data.len() bytes inside the mapping, which no reference covers.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) }
    }

    /// Writes `words` in the host's byte order at `offset` (packets into a ring).
    pub fn write_u32s(&self, offset: usize, words: &[u32]) {
        let bytes = std::mem::size_of_val(words);
        let dst = self.at(offset, bytes);
        // SAFETY: `dst` has `bytes` bytes inside the mapping, which no reference covers;
        // u32 has no padding, so its bytes are a valid source of that many bytes.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), dst, bytes) }
    }

    /// Sets `bytes` bytes at `offset` to `value`.
    pub fn fill(&self, offset: usize, bytes: usize, value: u8) {
        let dst = self.at(offset, bytes);
        // SAFETY: `dst` has `bytes` bytes inside the mapping, which no reference covers.
        unsafe { std::ptr::write_bytes(dst, value, bytes) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(miri)]
        {
            let layout = std::alloc::Layout::from_size_align(self.len, 4096)
                .expect("the layout was valid at allocation");
            // SAFETY: allocated in `create` with this layout, freed once (last Arc).
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
        #[cfg(not(miri))]
        sys::unmap(self.ptr, self.len);
    }
}

/// The system calls behind a region.
#[cfg(not(miri))]
mod sys {
    use std::ffi::CString;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::ptr::NonNull;

    use crate::{Result, ShmError};

    pub(super) fn memfd(name: &str) -> Result<OwnedFd> {
        // A name with a NUL is only a label: drop what follows it.
        let name = name.split('\0').next().unwrap_or_default();
        let name = CString::new(name).unwrap_or_default();
        // SAFETY: `name` is a valid C string; memfd_create reads it and returns a new fd.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(ShmError::Create(io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by memfd_create and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    pub(super) fn truncate(fd: &OwnedFd, len: usize) -> Result<()> {
        let off = libc::off_t::try_from(len).map_err(|_| ShmError::BadSize(len as u64))?;
        // SAFETY: plain syscall on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), off) } != 0 {
            return Err(ShmError::Resize {
                bytes: len,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// The seals of a memfd (`F_GET_SEALS`).
    pub(super) fn seals(fd: &OwnedFd) -> io::Result<libc::c_int> {
        // SAFETY: F_GET_SEALS only reads the file's seal set; the fd is ours.
        let s = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }

    /// Adds `seals` (`F_ADD_SEALS`).
    pub(super) fn add_seals(fd: &OwnedFd, seals: libc::c_int) -> io::Result<()> {
        // SAFETY: F_ADD_SEALS takes an int argument and changes only the file's seal set.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Makes sure `fd` carries `F_SEAL_SHRINK`, adding it if need be.
    pub(super) fn seal_shrink(fd: &OwnedFd) -> Result<()> {
        // EINVAL: not a file that supports seals (a regular file, a pipe); EPERM: sealing
        // not allowed (no MFD_ALLOW_SEALING, F_SEAL_SEAL) or a read-only descriptor.
        let has = |fd: &OwnedFd| {
            seals(fd)
                .map(|s| s & libc::F_SEAL_SHRINK != 0)
                .map_err(ShmError::Unsealable)
        };
        if has(fd)? {
            return Ok(());
        }
        add_seals(fd, libc::F_SEAL_SHRINK).map_err(ShmError::Unsealable)?;
        if has(fd)? {
            Ok(())
        } else {
            Err(ShmError::Unsealable(io::Error::other(
                "F_SEAL_SHRINK was added but is not in the seal set",
            )))
        }
    }

    pub(super) fn size(fd: &OwnedFd) -> Result<u64> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: `st` is a writable stat buffer; fstat fills it on success.
        if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(ShmError::Stat(io::Error::last_os_error()));
        }
        // SAFETY: fstat succeeded, so `st` is initialised (and was zeroed before anyway).
        let st = unsafe { st.assume_init() };
        u64::try_from(st.st_size).map_err(|_| ShmError::BadSize(0))
    }

    pub(super) fn map(fd: &OwnedFd, len: usize) -> Result<NonNull<u8>> {
        map_at(fd, len, 0)
    }

    /// The system's page size.
    pub(super) fn page_bytes() -> u64 {
        // SAFETY: sysconf only reads a system constant.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(p).unwrap_or(4096).max(1)
    }

    /// Maps `len` bytes of `fd` from `offset` (a multiple of the page size).
    pub(super) fn map_at(fd: &OwnedFd, len: usize, offset: u64) -> Result<NonNull<u8>> {
        let off = libc::off_t::try_from(offset).map_err(|_| ShmError::BadSize(offset))?;
        // SAFETY: a fresh shared mapping chosen by the kernel; it aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ShmError::Map {
                bytes: len,
                source: io::Error::last_os_error(),
            });
        }
        NonNull::new(p.cast::<u8>()).ok_or(ShmError::BadSize(len as u64))
    }

    pub(super) fn unmap(ptr: NonNull<u8>, len: usize) {
        // SAFETY: `ptr`/`len` is exactly a mapping made by `map`, unmapped once, when the last
        // clone of its region drops, so nothing can reach it afterwards.
        unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_round_trip() {
        let r = SharedRegion::create("rig-shm-test", 8192).unwrap();
        assert_eq!(r.len(), 8192);
        assert_eq!(r.load_u64(0, Ordering::Relaxed), 0);
        r.store_u64(8, 0x1122_3344_5566_7788, Ordering::Release);
        assert_eq!(r.load_u32(8, Ordering::Acquire), 0x5566_7788);
        assert_eq!(r.load_u32(12, Ordering::Acquire), 0x1122_3344);
        r.write(4093, b"hello");
        let mut b = [0u8; 5];
        r.read(4093, &mut b);
        assert_eq!(&b, b"hello");
        r.fill(100, 10, 0xab);
        let mut b = [0u8; 12];
        r.read(99, &mut b);
        assert_eq!(
            b,
            [
                0, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0
            ]
        );
        assert_eq!(r.atomic_u64(16).fetch_add(5, Ordering::SeqCst), 0);
        assert_eq!(r.load_u64(16, Ordering::SeqCst), 5);
        assert!(r.contains(8190, 2));
        assert!(!r.contains(8190, 3));
        assert!(!r.contains(u64::MAX, 2));
    }

    #[test]
    #[should_panic(expected = "leaves a region")]
    fn out_of_range_panics() {
        let r = SharedRegion::create("rig-shm-test", 4096).unwrap();
        r.load_u64(4096, Ordering::Relaxed);
    }

    #[test]
    fn zero_bytes_is_refused() {
        assert!(matches!(
            SharedRegion::create("x", 0),
            Err(ShmError::BadSize(0))
        ));
    }

    #[test]
    #[cfg(not(miri))]
    fn two_mappings_of_one_memfd_share_bytes() {
        let a = SharedRegion::create("rig-shm-two", 4096 * 3).unwrap();
        let b = SharedRegion::from_fd(a.dup_fd().unwrap()).unwrap();
        assert_eq!(b.len(), a.len());
        assert_ne!(a.as_ptr(), b.as_ptr(), "two distinct mappings");
        assert!(!a.same_mapping(&b));
        a.store_u64(4096, 42, Ordering::Release);
        assert_eq!(b.load_u64(4096, Ordering::Acquire), 42);
        b.write(8191, &[1, 2, 3]);
        let mut got = [0u8; 3];
        a.read(8191, &mut got);
        assert_eq!(got, [1, 2, 3]);
        b.atomic_u32(0).fetch_add(7, Ordering::SeqCst);
        assert_eq!(a.load_u32(0, Ordering::SeqCst), 7);
        // The mapping outlives the region it was received through.
        let c = b.clone();
        drop(b);
        assert_eq!(c.load_u64(4096, Ordering::Acquire), 42);
    }

    // The tests of real memfds (sealing, resizing, ranges of a sparse file) are compiled out
    // under Miri, with the `sys` module they call: Miri has no memfd, mmap of a file or
    // fcntl seals, and a region there is heap memory.
    #[cfg(not(miri))]
    fn raw_memfd(flags: libc::c_uint, len: usize) -> OwnedFd {
        use std::os::fd::FromRawFd;
        // SAFETY: a valid C string; memfd_create returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(c"rig-shm-raw".as_ptr(), flags) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: just created, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        sys::truncate(&fd, len).unwrap();
        fd
    }

    #[cfg(not(miri))]
    fn ftruncate(fd: BorrowedFd<'_>, len: i64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: plain syscall on a live fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    #[test]
    #[cfg(not(miri))]
    fn created_memfds_cannot_be_resized_or_resealed() {
        let r = SharedRegion::create("rig-shm-sealed", 3 * 4096).unwrap();
        let fd = r.dup_fd().unwrap();
        for len in [0, 4096, 8 * 4096] {
            let e = ftruncate(fd.as_fd(), len).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "ftruncate to {len}");
        }
        let e = sys::add_seals(&fd, libc::F_SEAL_FUTURE_WRITE).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // Every page is still there.
        r.store_u64(2 * 4096, 7, Ordering::Relaxed);
        assert_eq!(sys::size(&fd).unwrap(), 3 * 4096);
        // A region that sealed itself maps as sealed.
        let again = SharedRegion::from_fd_sealed(fd).unwrap();
        assert_eq!(again.load_u64(2 * 4096, Ordering::Relaxed), 7);
    }

    #[test]
    #[cfg(not(miri))]
    fn a_sealable_memfd_is_sealed_against_shrinking_only() {
        let fd = raw_memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 2 * 4096);
        let mine = fd.try_clone().unwrap();
        let r = SharedRegion::from_fd_sealed(fd).unwrap();
        assert_eq!(r.len(), 2 * 4096);
        let e = ftruncate(mine.as_fd(), 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // Growing takes nothing away and stays the owner's choice.
        ftruncate(mine.as_fd(), 4 * 4096).unwrap();
        r.store_u64(4096, 1, Ordering::Relaxed);
    }

    #[test]
    #[cfg(not(miri))]
    fn unsealable_descriptors_are_refused() {
        let plain = raw_memfd(libc::MFD_CLOEXEC, 4096);
        let e = SharedRegion::from_fd_sealed(plain).unwrap_err();
        assert!(matches!(e, ShmError::Unsealable(_)), "{e:?}");
        assert!(e.to_string().contains("MFD_ALLOW_SEALING"), "{e}");

        // Sealing forbidden before F_SEAL_SHRINK was added.
        let locked = raw_memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 4096);
        sys::add_seals(&locked, libc::F_SEAL_SEAL).unwrap();
        assert!(matches!(
            SharedRegion::from_fd_sealed(locked),
            Err(ShmError::Unsealable(_))
        ));

        let (r, w) = {
            let mut p = [0; 2];
            // SAFETY: `p` has room for the two descriptors pipe writes.
            assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
            use std::os::fd::FromRawFd;
            // SAFETY: both were just created and are owned here only.
            unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) }
        };
        drop(r);
        assert!(matches!(
            SharedRegion::from_fd_sealed(w),
            Err(ShmError::Unsealable(_))
        ));

        let file = OwnedFd::from(std::fs::File::open("/proc/self/status").unwrap());
        assert!(matches!(
            SharedRegion::from_fd_sealed(file),
            Err(ShmError::Unsealable(_))
        ));
    }

    #[test]
    #[cfg(not(miri))]
    fn a_range_maps_only_its_pages_of_a_huge_sparse_memfd() {
        let fd = raw_memfd(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, 1 << 46);
        let mine = fd.try_clone().unwrap();
        let r = SharedRegion::from_fd_range_sealed(fd, 3 * 4096, 4096).unwrap();
        assert_eq!(r.len(), 4096);
        r.store_u64(8, 5, Ordering::Relaxed);
        // The region's offset 0 is the file's offset 3 * 4096.
        let again =
            SharedRegion::from_fd_range_sealed(mine.try_clone().unwrap(), 3 * 4096, 4096).unwrap();
        assert_eq!(again.load_u64(8, Ordering::Relaxed), 5);
        // Sealed: the sender cannot shrink it under the mapping.
        let e = ftruncate(mine.as_fd(), 4096).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        for (offset, bytes) in [
            (1 << 46, 4096),
            ((1 << 46) - 4096, 8192),
            (100, 4096),
            (u64::MAX - 4095, 4096),
        ] {
            let e = SharedRegion::from_fd_range_sealed(mine.try_clone().unwrap(), offset, bytes)
                .unwrap_err();
            assert!(
                matches!(e, ShmError::OutsideFile { .. }),
                "{offset} {bytes}: {e:?}"
            );
        }
    }
}
