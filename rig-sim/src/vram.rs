//! Simulated VRAM: one sparse anonymous mapping and a page allocator over it.
//!
//! The whole VRAM of the model (16 GiB by default) is reserved at once with
//! `MAP_NORESERVE`, so it costs address space only: a page becomes resident when it is first
//! touched, and [`Vram::free`] gives freed pages back to the kernel with
//! `MADV_DONTNEED`, which also makes them read as zero when they are allocated again.
//!
//! A page the host's kernel has not backed yet costs a page fault at its first write, which
//! in a virtual machine costs several times the copy of the page itself. The engines' copies
//! and fills ask for their destination to be backed first ([`Vram::prepare_write`]), in one
//! `MADV_POPULATE_WRITE` per run of pages not written since they were last given back (a bit
//! per page says which), so that a copy into fresh memory costs little more than one into
//! memory already written. The arena is advised for huge pages: where the host has free
//! ones, a first touch then backs 2 MiB at a time (on the 2-core development VM a 1 GiB copy
//! into fresh memory ran at 1.3-1.5 GB/s so, 0.4-0.6 GB/s in 4 KiB pages); where it must
//! compact memory first, a first touch can take seconds a GiB, which is why engines count
//! each chunk they move as progress against the hang bound.
//!
//! This module owns the arena and which of its pages are in use. It does not own GPU
//! virtual addresses ([`crate::memory`] maps them onto arena pages).

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::PAGE;

/// The VRAM arena.
#[derive(Debug)]
pub(crate) struct Vram {
    base: NonNull<u8>,
    bytes: u64,
    /// Free runs of pages: start offset -> bytes, coalesced.
    free: Mutex<BTreeMap<u64, u64>>,
    /// A bit per page: backed by the host's kernel since it was last given back (set by
    /// [`Vram::prepare_write`]; a page a kernel wrote directly may be backed with its bit
    /// clear, which only costs a populate that finds it backed).
    backed: Box<[AtomicU64]>,
}

// SAFETY: the arena is plain memory reached only through raw pointers by the memory module,
// which never makes references to it; nothing is tied to the creating thread.
unsafe impl Send for Vram {}
// SAFETY: as above; the free list is behind a mutex.
unsafe impl Sync for Vram {}

impl Vram {
    /// Reserves `bytes` (a multiple of the page size) of sparse memory.
    pub(crate) fn new(bytes: u64) -> std::io::Result<Vram> {
        let len = usize::try_from(bytes)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh private anonymous mapping chosen by the kernel, aliasing nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // Huge pages where the kernel offers them: fewer faults at first touch and fewer TLB
        // misses in large copies. A refusal only costs speed.
        // SAFETY: advice on the mapping just made; it changes no contents.
        unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        let mut free = BTreeMap::new();
        free.insert(0, bytes);
        let words = usize::try_from(bytes.div_ceil(PAGE).div_ceil(64))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(Vram {
            base,
            bytes,
            free: Mutex::new(free),
            backed: (0..words).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Has the host's kernel back the arena pages of the `len` bytes at `ptr` that are not
    /// yet, before an engine writes them; bytes outside the arena (host memory) are left
    /// alone. A refusal (an old kernel, no memory) only leaves the pages to fault one by one.
    pub(crate) fn prepare_write(&self, ptr: *const u8, len: usize) {
        let base = self.base.as_ptr() as usize;
        let Some(offset) = (ptr as usize).checked_sub(base) else {
            return;
        };
        let end = offset.saturating_add(len).min(self.bytes as usize);
        if len == 0 || offset >= end {
            return;
        }
        let page = PAGE as usize;
        let (first, last) = (offset / page, (end - 1) / page);
        let mut at = first;
        while at <= last {
            // Skip backed pages, a word at a time where it can.
            let word = self.backed[at / 64].load(Ordering::Relaxed);
            if word == u64::MAX && at % 64 == 0 && at + 63 <= last {
                at += 64;
                continue;
            }
            if word & (1 << (at % 64)) != 0 {
                at += 1;
                continue;
            }
            let run = at;
            while at <= last && self.backed[at / 64].load(Ordering::Relaxed) & (1 << (at % 64)) == 0
            {
                at += 1;
            }
            // SAFETY: pages [run, at) lie in the arena's mapping; populating backs them
            // without changing what they read (zero, or what was written).
            let done = unsafe {
                libc::madvise(
                    self.base.as_ptr().add(run * page).cast(),
                    (at - run) * page,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if done == 0 {
                self.mark(run, at, true);
            }
        }
    }

    /// Sets or clears the backed bits of pages `[from, to)`.
    fn mark(&self, from: usize, to: usize, backed: bool) {
        for page in from..to {
            let bit = 1u64 << (page % 64);
            let word = &self.backed[page / 64];
            if backed {
                word.fetch_or(bit, Ordering::Relaxed);
            } else {
                word.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    /// Total bytes of VRAM.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes not allocated.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Pointer to the arena byte at `offset`.
    ///
    /// The caller keeps `offset` inside the arena (an allocation's pages).
    pub(crate) fn ptr(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.bytes);
        // PANIC: offsets come from allocations of this arena, so they fit usize and the arena.
        let off = usize::try_from(offset).expect("VRAM offsets fit the address space");
        // SAFETY: offset <= bytes, so the result is inside the mapping or one past its end.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Allocates `bytes` (a multiple of the page size): runs of pages, first fit, as few as
    /// the free list allows. None if VRAM lacks the bytes, having taken nothing.
    pub(crate) fn alloc(&self, bytes: u64) -> Option<Vec<(u64, u64)>> {
        debug_assert!(bytes.is_multiple_of(PAGE) && bytes > 0);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.values().sum::<u64>() < bytes {
            return None;
        }
        // One run if any run is large enough, else the largest runs first.
        if let Some((&start, &len)) = free.iter().find(|(_, l)| **l >= bytes) {
            free.remove(&start);
            if len > bytes {
                free.insert(start + bytes, len - bytes);
            }
            return Some(vec![(start, bytes)]);
        }
        let mut runs: Vec<(u64, u64)> = free.iter().map(|(s, l)| (*s, *l)).collect();
        runs.sort_by_key(|r| std::cmp::Reverse(r.1));
        let mut out = Vec::new();
        let mut left = bytes;
        for (start, len) in runs {
            if left == 0 {
                break;
            }
            free.remove(&start);
            let take = len.min(left);
            if len > take {
                free.insert(start + take, len - take);
            }
            out.push((start, take));
            left -= take;
        }
        out.sort_unstable();
        Some(out)
    }

    /// Gives back `bytes` at `offset`, which an allocation made, and their memory to the
    /// kernel: they read as zero when allocated again, so no allocation sees another's bytes.
    /// The caller makes sure nothing reads or writes them any more.
    pub(crate) fn free(&self, offset: u64, bytes: u64) {
        debug_assert!(offset.is_multiple_of(PAGE) && bytes.is_multiple_of(PAGE));
        if bytes == 0 {
            return;
        }
        // PANIC: offsets and sizes come from allocations of this arena, which fits usize.
        let len = usize::try_from(bytes).expect("VRAM sizes fit the address space");
        // SAFETY: the range is pages of this arena that nothing reaches any more (the memory
        // module gives pages back only once no access holds them); dropping them only zeroes
        // their contents, the mapping itself stays valid.
        let dropped = unsafe { libc::madvise(self.ptr(offset).cast(), len, libc::MADV_DONTNEED) };
        if dropped != 0 {
            // The next allocation must not see these bytes, whatever the kernel refused.
            // SAFETY: as above; the range lies in the arena's writable mapping.
            unsafe { std::ptr::write_bytes(self.ptr(offset), 0, len) };
        } else {
            let page = PAGE as usize;
            let first = offset as usize / page;
            self.mark(first, first + len / page, false);
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let mut start = offset;
        let mut len = bytes;
        if let Some((&ps, &pl)) = free.range(..offset).next_back()
            && ps + pl == offset
        {
            free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(&nl) = free.get(&(offset + bytes)) {
            free.remove(&(offset + bytes));
            len += nl;
        }
        free.insert(start, len);
    }
}

impl Drop for Vram {
    fn drop(&mut self) {
        if let Ok(len) = usize::try_from(self.bytes) {
            // SAFETY: the mapping made in `new`, unmapped once; the arena is dropped only when
            // no address space (which holds it in an Arc) can reach it.
            unsafe { libc::munmap(self.base.as_ptr().cast(), len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesce_and_zero() {
        let v = Vram::new(64 * PAGE).unwrap();
        let a = v.alloc(4 * PAGE).unwrap();
        assert_eq!(a, vec![(0, 4 * PAGE)]);
        let b = v.alloc(PAGE).unwrap();
        assert_eq!(b, vec![(4 * PAGE, PAGE)]);
        // SAFETY: test-only write to an allocated page of the arena.
        unsafe { v.ptr(4 * PAGE).write(7) };
        v.free(0, 4 * PAGE);
        v.free(4 * PAGE, PAGE);
        assert_eq!(v.free_bytes(), 64 * PAGE);
        let c = v.alloc(64 * PAGE).unwrap();
        assert_eq!(c, vec![(0, 64 * PAGE)]);
        // SAFETY: test-only read of an allocated page of the arena.
        let byte = unsafe { v.ptr(4 * PAGE).read() };
        assert_eq!(byte, 0, "freed pages read as zero");
        assert!(v.alloc(PAGE).is_none());
    }

    #[test]
    fn fragmented_alloc_takes_several_runs() {
        let v = Vram::new(8 * PAGE).unwrap();
        let runs: Vec<_> = (0..8).map(|_| v.alloc(PAGE).unwrap()[0]).collect();
        for r in runs.iter().step_by(2) {
            v.free(r.0, r.1);
        }
        let got = v.alloc(3 * PAGE).unwrap();
        assert_eq!(got.iter().map(|r| r.1).sum::<u64>(), 3 * PAGE);
        assert_eq!(got.len(), 3);
        assert!(v.alloc(2 * PAGE).is_none(), "only one page left");
        assert_eq!(v.free_bytes(), PAGE);
    }

    #[test]
    fn pages_prepared_for_a_write_are_backed_until_given_back_and_keep_their_bytes() {
        let v = Vram::new(130 * PAGE).unwrap();
        let run = v.alloc(130 * PAGE).unwrap()[0];
        let backed =
            |page: usize| v.backed[page / 64].load(Ordering::Relaxed) & (1 << (page % 64)) != 0;
        // SAFETY: the run's first page, which nothing else uses.
        unsafe { v.ptr(run.0 + 5).write(9) };
        // From inside page 0 to inside page 129.
        v.prepare_write(v.ptr(run.0 + 100), 129 * PAGE as usize);
        assert!((0..130).all(backed));
        // SAFETY: as above.
        let kept = unsafe { v.ptr(run.0 + 5).read() };
        assert_eq!(kept, 9, "populating changed a byte");
        // Outside the arena: nothing happens.
        v.prepare_write(std::ptr::null(), 4096);
        v.free(run.0 + PAGE, 64 * PAGE);
        assert!(backed(0) && (1..65).all(|p| !backed(p)) && (65..130).all(backed));
        // SAFETY: a page of the run, given back: it reads as zero.
        let given = unsafe { v.ptr(run.0 + PAGE).read() };
        assert_eq!(given, 0);
    }
}
