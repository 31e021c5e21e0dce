//! One VMID's GPU virtual memory: its page table and every access the simulated GPU makes.
//!
//! The page table maps 4 KiB GPU pages to simulated VRAM pages or to pages of host memory
//! registered from a [`SharedRegion`]. It is kept as runs of consecutive pages with
//! consecutive backing (one entry per `alloc_vram` run or `map_host` call), which is the same
//! mapping a per-page table would hold, but lets a large copy translate a whole run at once and
//! copy it with one `memcpy` per chunk.
//!
//! Every access of the GPU goes through `Vm::span`: an unmapped page, or a write to a page
//! mapped read-only, is a [`PageFault`] of this VMID with the faulting address. Host pages are
//! shared with other processes, so this module never makes references to mapped bytes: it
//! uses atomics for words, and copies and fills with `rep movsb`/`rep stosq` (relaxed
//! byte-wise atomic copies in Rust's model, see `copy_bytes`), never with `memcpy`.
//!
//! **Lifetime of what an access translated.** Short accesses (words, packets, a kernel's
//! accesses through `Memory::read`/`write`) run while holding the page table, so an unmap
//! waits for them. A long copy or fill translates a chunk into a `Span` and runs it without
//! the table; the span holds what it translated: a host region stays mapped, and VRAM pages
//! unmapped meanwhile go back to the arena only when the last span of their allocation lets
//! go (`VramRun`). So a copy racing an unmap writes or reads only pages that no one else can
//! have been given, and its next chunk faults. The interpreter's windows
//! (`rig_isa::Memory::window`: a whole entry, as relaxed-atomic words) hold their memory the
//! same way, and are current only until the next unmap (the table's generation), after
//! which the interpreter translates again and faults. The arena zeroes pages when it takes
//! them back, so an allocation never sees another's bytes.
//!
//! It does not own VRAM (the `vram` arena) or decide addresses (the daemon does).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rig_shm::SharedRegion;

use crate::PAGE;
use crate::vram::Vram;

/// A GPU access the page table refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFault {
    /// The VMID whose page table refused it.
    pub vmid: u32,
    /// The first GPU virtual address of the access that is not mapped (or not writable).
    pub address: u64,
    /// Whether the access was a write.
    pub write: bool,
    /// True if the page is mapped but read-only (a write fault); false if it is unmapped.
    pub read_only: bool,
}

impl std::fmt::Display for PageFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.read_only {
            "write to a read-only page"
        } else if self.write {
            "write to an unmapped page"
        } else {
            "read of an unmapped page"
        };
        write!(
            f,
            "page fault of vmid {}: {what} at {:#x}",
            self.vmid, self.address
        )
    }
}

/// Errors of changing a page table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MapError {
    /// Addresses and sizes are whole 4 KiB pages.
    #[error("address {va:#x} or size {bytes:#x} is not a whole number of 4 KiB pages, or is empty")]
    Unaligned {
        /// The address asked for.
        va: u64,
        /// The size asked for.
        bytes: u64,
    },
    /// Part of the range is mapped already.
    #[error("GPU addresses {va:#x}..{end:#x} overlap a mapping; unmap it first")]
    Overlap {
        /// The start asked for.
        va: u64,
        /// The end asked for.
        end: u64,
    },
    /// Simulated VRAM has too few free bytes.
    #[error("simulated VRAM lacks {bytes} free bytes")]
    OutOfVram {
        /// The size asked for.
        bytes: u64,
    },
    /// The host range does not lie in the region.
    #[error(
        "host range at offset {offset:#x} of {bytes:#x} bytes leaves a region of {len:#x} bytes, or does not start a page"
    )]
    OutsideRegion {
        /// The offset asked for.
        offset: u64,
        /// The size asked for.
        bytes: u64,
        /// The region's size.
        len: u64,
    },
}

/// The VRAM pages of one `alloc_vram`: held by the page-table entries that map them and by
/// the spans of copies in flight over them.
///
/// The table gives pages back with [`VramRun::release`]; while a span holds the run, they
/// wait here and go back to the arena when the last span lets go, so no access in flight
/// reaches pages another allocation was given.
#[derive(Debug)]
struct VramRun {
    vram: Arc<Vram>,
    holds: Mutex<Holds>,
}

#[derive(Debug, Default)]
struct Holds {
    /// Spans alive over this run.
    spans: usize,
    /// Arena pages (offset, bytes) the table released while spans were alive.
    released: Vec<(u64, u64)>,
}

impl VramRun {
    /// Gives `bytes` of arena pages at `offset` back: now, or when the last span lets go.
    ///
    /// Called with the page table held for writing, so no span of it starts meanwhile.
    fn release(&self, offset: u64, bytes: u64) {
        {
            let mut h = self.holds.lock().unwrap_or_else(|e| e.into_inner());
            if h.spans > 0 {
                h.released.push((offset, bytes));
                return;
            }
        }
        self.vram.free(offset, bytes);
    }

    /// A hold of the run for a span. Made with the page table held, which keeps the pages
    /// mapped until the hold is counted.
    fn hold(self: &Arc<Self>) -> VramHold {
        self.holds.lock().unwrap_or_else(|e| e.into_inner()).spans += 1;
        VramHold(self.clone())
    }
}

impl Drop for VramRun {
    fn drop(&mut self) {
        let h = self.holds.get_mut().unwrap_or_else(|e| e.into_inner());
        debug_assert!(h.spans == 0 && h.released.is_empty());
    }
}

/// A span's hold of a [`VramRun`].
#[derive(Debug)]
struct VramHold(Arc<VramRun>);

impl Drop for VramHold {
    fn drop(&mut self) {
        let released = {
            let mut h = self.0.holds.lock().unwrap_or_else(|e| e.into_inner());
            h.spans -= 1;
            if h.spans > 0 {
                return;
            }
            std::mem::take(&mut h.released)
        };
        for (offset, bytes) in released {
            self.0.vram.free(offset, bytes);
        }
    }
}

#[derive(Debug, Clone)]
enum Backing {
    /// Pages of the VRAM arena at this offset, of this allocation.
    Vram(Arc<VramRun>, u64),
    /// Pages of a host region at this offset.
    Host(SharedRegion, u64),
}

#[derive(Debug, Clone)]
struct Entry {
    bytes: u64,
    backing: Backing,
    writable: bool,
}

impl Entry {
    /// The entry's part from `skip` bytes in, `bytes` long.
    fn part(&self, skip: u64, bytes: u64) -> Entry {
        let backing = match &self.backing {
            Backing::Vram(run, o) => Backing::Vram(run.clone(), o + skip),
            Backing::Host(r, o) => Backing::Host(r.clone(), o + skip),
        };
        Entry {
            bytes,
            backing,
            writable: self.writable,
        }
    }
}

/// A run of host-addressable bytes that a GPU range translated to.
///
/// It holds what it translated while it is used: a host region stays mapped, and VRAM pages
/// stay out of the arena (see [`VramRun`]), so an unmap racing a copy never leaves the copy
/// with a dangling pointer or with pages another allocation was given.
#[derive(Debug)]
pub(crate) struct Span {
    ptr: *mut u8,
    len: usize,
    _keep: Keep,
}

/// What a [`Span`] holds (only held, never read).
#[derive(Debug)]
enum Keep {
    Host { _region: SharedRegion },
    Vram { _hold: VramHold },
}

/// One VMID's address space.
#[derive(Debug)]
pub struct Vm {
    vmid: u32,
    vram: Arc<Vram>,
    table: RwLock<BTreeMap<u64, Entry>>,
    /// Moved at every unmap, with the table held for writing: a [`rig_isa::Window`] made
    /// before it is no longer current, so the interpreter's next access to an unmapped page
    /// translates again and faults.
    generation: AtomicU64,
    /// The GPU's clock, which kernels read (`s_sendmsg_rtn` REALTIME, SHADER_CYCLES); unset
    /// in address spaces made without a GPU (unit tests).
    clock: Option<crate::ClockRelation>,
}

/// Bytes one step of a copy or fill moves before it checks its stop flag again: large enough
/// that `memcpy` takes its streaming (non-temporal) path, small enough that a stop waits a few
/// milliseconds at most.
pub const CHUNK: usize = 16 << 20;

impl Vm {
    pub(crate) fn new(vmid: u32, vram: Arc<Vram>) -> Vm {
        Vm {
            vmid,
            vram,
            table: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            clock: None,
        }
    }

    /// The page table with the GPU's clock, which kernels running in it read.
    pub(crate) fn with_clock(mut self, clock: crate::ClockRelation) -> Vm {
        self.clock = Some(clock);
        self
    }

    /// The VMID.
    pub fn vmid(&self) -> u32 {
        self.vmid
    }

    fn check_pages(va: u64, bytes: u64) -> Result<u64, MapError> {
        let end = va.checked_add(bytes);
        match end {
            Some(end) if bytes > 0 && va.is_multiple_of(PAGE) && bytes.is_multiple_of(PAGE) => {
                Ok(end)
            }
            _ => Err(MapError::Unaligned { va, bytes }),
        }
    }

    fn overlaps(table: &BTreeMap<u64, Entry>, va: u64, end: u64) -> bool {
        if let Some((s, e)) = table.range(..end).next_back() {
            return s + e.bytes > va;
        }
        false
    }

    /// Maps `bytes` of new zeroed VRAM at `va`.
    pub fn alloc_vram(&self, va: u64, bytes: u64) -> Result<(), MapError> {
        let end = Self::check_pages(va, bytes)?;
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if Self::overlaps(&table, va, end) {
            return Err(MapError::Overlap { va, end });
        }
        let runs = self
            .vram
            .alloc(bytes)
            .ok_or(MapError::OutOfVram { bytes })?;
        let run = Arc::new(VramRun {
            vram: self.vram.clone(),
            holds: Mutex::new(Holds::default()),
        });
        let mut at = va;
        for (offset, len) in runs {
            table.insert(
                at,
                Entry {
                    bytes: len,
                    backing: Backing::Vram(run.clone(), offset),
                    writable: true,
                },
            );
            at += len;
        }
        Ok(())
    }

    /// Maps `bytes` of `region` from `offset` (both whole pages) at `va`.
    pub fn map_host(
        &self,
        va: u64,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
        writable: bool,
    ) -> Result<(), MapError> {
        let end = Self::check_pages(va, bytes)?;
        if !offset.is_multiple_of(PAGE) || !region.contains(offset, bytes) {
            return Err(MapError::OutsideRegion {
                offset,
                bytes,
                len: region.len() as u64,
            });
        }
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        if Self::overlaps(&table, va, end) {
            return Err(MapError::Overlap { va, end });
        }
        table.insert(
            va,
            Entry {
                bytes,
                backing: Backing::Host(region.clone(), offset),
                writable,
            },
        );
        Ok(())
    }

    /// Unmaps every mapped page of `bytes` at `va` (whole pages), giving VRAM pages back (once
    /// no copy in flight holds them). Returns the bytes that were mapped.
    pub fn unmap(&self, va: u64, bytes: u64) -> Result<u64, MapError> {
        let end = Self::check_pages(va, bytes)?;
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        let starts: Vec<u64> = {
            let first = match table.range(..=va).next_back() {
                Some((s, e)) if s + e.bytes > va => *s,
                _ => va,
            };
            table.range(first..end).map(|(s, _)| *s).collect()
        };
        let mut unmapped = 0;
        for s in starts {
            let Some(e) = table.remove(&s) else { continue };
            let e_end = s + e.bytes;
            let cut_start = s.max(va);
            let cut_end = e_end.min(end);
            if s < cut_start {
                table.insert(s, e.part(0, cut_start - s));
            }
            if cut_end < e_end {
                table.insert(cut_end, e.part(cut_end - s, e_end - cut_end));
            }
            if let Backing::Vram(run, o) = &e.backing {
                run.release(o + (cut_start - s), cut_end - cut_start);
            }
            unmapped += cut_end - cut_start;
        }
        if unmapped > 0 {
            self.generation.fetch_add(1, Ordering::Release);
        }
        Ok(unmapped)
    }

    /// Translates the access of up to `len` bytes at `va` in `table`: a pointer to `va`'s
    /// byte, the bytes from there to the end of its mapping run or `len` (whichever is
    /// first), and the backing that holds them.
    fn translate<'t>(
        &self,
        table: &'t BTreeMap<u64, Entry>,
        va: u64,
        len: usize,
        write: bool,
    ) -> Result<(*mut u8, usize, &'t Backing), PageFault> {
        let fault = |read_only| PageFault {
            vmid: self.vmid,
            address: va,
            write,
            read_only,
        };
        let Some((start, e)) = table.range(..=va).next_back() else {
            return Err(fault(false));
        };
        let skip = va - start;
        if skip >= e.bytes {
            return Err(fault(false));
        }
        if write && !e.writable {
            return Err(fault(true));
        }
        let avail = usize::try_from(e.bytes - skip).unwrap_or(usize::MAX);
        let len = len.min(avail);
        let ptr = match &e.backing {
            Backing::Vram(_, o) => self.vram.ptr(o + skip),
            Backing::Host(r, o) => {
                // PANIC: map_host checked that offset + bytes lies in the region (a usize).
                let off = usize::try_from(o + skip).expect("host offsets fit usize");
                // SAFETY: o + skip < o + bytes <= region.len(), so this stays in the mapping.
                unsafe { r.as_ptr().add(off) }
            }
        };
        Ok((ptr, len, &e.backing))
    }

    /// Translates the access of up to `len` bytes at `va` into a [`Span`] that holds its
    /// memory without holding the page table: for long copies.
    pub(crate) fn span(&self, va: u64, len: usize, write: bool) -> Result<Span, PageFault> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        let (ptr, len, backing) = self.translate(&table, va, len, write)?;
        let keep = match backing {
            Backing::Vram(run, _) => Keep::Vram { _hold: run.hold() },
            Backing::Host(r, _) => Keep::Host { _region: r.clone() },
        };
        Ok(Span {
            ptr,
            len,
            _keep: keep,
        })
    }

    /// Runs `f` on the translation of up to `len` bytes at `va` while holding the page table,
    /// which keeps the memory mapped: for short accesses, with no reference counting.
    fn with_span<T>(
        &self,
        va: u64,
        len: usize,
        write: bool,
        f: impl FnOnce(*mut u8, usize) -> T,
    ) -> Result<T, PageFault> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        let (ptr, len, _) = self.translate(&table, va, len, write)?;
        Ok(f(ptr, len))
    }

    /// Whether every byte of `len` at `va` is mapped (writable, if `write`); the first
    /// faulting address otherwise.
    pub fn check(&self, va: u64, len: u64, write: bool) -> Result<(), PageFault> {
        let mut at = va;
        let end = va.saturating_add(len);
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        while at < end {
            let want = usize::try_from(end - at).unwrap_or(usize::MAX);
            let (_, n, _) = self.translate(&table, at, want, write)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `va`.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), PageFault> {
        let mut done = 0;
        while done < buf.len() {
            let want = buf.len() - done;
            done += self.with_span(va.wrapping_add(done as u64), want, false, |p, n| {
                // SAFETY: `p` has n readable bytes, mapped while the table is held; `buf` is
                // private and has n bytes from `done`, disjoint from any mapping. Another
                // process may write `p`'s bytes meanwhile: `copy_bytes` tolerates that.
                unsafe { copy_bytes(p, buf.as_mut_ptr().add(done), n) };
                n
            })?;
        }
        Ok(())
    }

    /// Writes `data` at `va`. On a fault, the bytes before the faulting page are written.
    pub fn write(&self, va: u64, data: &[u8]) -> Result<(), PageFault> {
        let mut done = 0;
        while done < data.len() {
            let want = data.len() - done;
            done += self.with_span(va.wrapping_add(done as u64), want, true, |p, n| {
                // SAFETY: `p` has n writable bytes, mapped while the table is held; `data` is
                // private and has n bytes from `done`, disjoint from any mapping. Another
                // process may write `p`'s bytes meanwhile: `copy_bytes` tolerates that.
                unsafe { copy_bytes(data.as_ptr().add(done), p, n) };
                n
            })?;
        }
        Ok(())
    }

    /// Reads `n` dwords at `va` (little-endian, as the GPU reads packets).
    pub(crate) fn read_dwords(&self, va: u64, n: usize) -> Result<Vec<u32>, PageFault> {
        let mut bytes = vec![0u8; n * 4];
        self.read(va, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Copies `len` bytes from `src` to `dst` in chunks of [`CHUNK`], asking `go_on` before
    /// each chunk (the engine's stop flag, and its progress: a long copy moves). Returns false
    /// if `go_on` said stop. Overlapping ranges copy as `memmove` per chunk.
    pub(crate) fn copy(
        &self,
        dst: u64,
        src: u64,
        len: u64,
        go_on: &dyn Fn() -> bool,
    ) -> Result<bool, PageFault> {
        let mut done = 0u64;
        while done < len {
            if !go_on() {
                return Ok(false);
            }
            let want = usize::try_from(len - done).unwrap_or(usize::MAX).min(CHUNK);
            let s = self.span(src.wrapping_add(done), want, false)?;
            let d = self.span(dst.wrapping_add(done), s.len, true)?;
            let n = d.len;
            self.vram.prepare_write(d.ptr, n);
            let overlap =
                (s.ptr as usize) < (d.ptr as usize) + n && (d.ptr as usize) < (s.ptr as usize) + n;
            if overlap {
                // SAFETY: both spans have at least n bytes (d.len <= s.len), kept alive by s and d;
                // `move_bytes` tolerates other writers of either, as `copy_bytes` does.
                unsafe { move_bytes(s.ptr, d.ptr, n) };
            } else {
                // SAFETY: as above, and the two ranges are disjoint (checked just before).
                unsafe { copy_bytes(s.ptr, d.ptr, n) };
            }
            done += n as u64;
        }
        Ok(true)
    }

    /// Fills `len` bytes at `dst` with the little-endian repetition of `pattern`, starting at
    /// its first byte, asking `go_on` before each chunk as [`Vm::copy`] does. Returns false
    /// if it said stop.
    pub(crate) fn fill(
        &self,
        dst: u64,
        len: u64,
        pattern: u32,
        go_on: &dyn Fn() -> bool,
    ) -> Result<bool, PageFault> {
        let pat = pattern.to_le_bytes();
        let mut done = 0u64;
        while done < len {
            if !go_on() {
                return Ok(false);
            }
            let want = usize::try_from(len - done).unwrap_or(usize::MAX).min(CHUNK);
            let d = self.span(dst.wrapping_add(done), want, true)?;
            self.vram.prepare_write(d.ptr, d.len);
            {
                let phase = (done % 4) as usize;
                let at_phase: [u8; 4] = std::array::from_fn(|i| pat[(phase + i) % 4]);
                // SAFETY: the span has d.len writable bytes, kept alive by d.
                unsafe { fill_pattern(d.ptr, d.len, at_phase) };
            }
            done += d.len as u64;
        }
        Ok(true)
    }

    /// Runs `f` on the aligned 32-bit word at `va` as an atomic.
    fn with_u32<T>(
        &self,
        va: u64,
        write: bool,
        f: impl FnOnce(&AtomicU32) -> T,
    ) -> Result<Option<T>, PageFault> {
        if !va.is_multiple_of(4) {
            return Ok(None);
        }
        self.with_span(va, 4, write, |p, _| {
            // SAFETY: an aligned word of a mapped page (a 4-aligned va in a page-aligned run
            // maps to a 4-aligned host address), mapped while the table is held; shared bytes
            // are only ever reached through atomics or raw copies, never plain references.
            let a = unsafe { AtomicU32::from_ptr(p.cast::<u32>()) };
            Some(f(a))
        })
    }

    /// Runs `f` on the aligned 64-bit word at `va` as an atomic.
    fn with_u64<T>(
        &self,
        va: u64,
        write: bool,
        f: impl FnOnce(&AtomicU64) -> T,
    ) -> Result<Option<T>, PageFault> {
        if !va.is_multiple_of(8) {
            return Ok(None);
        }
        self.with_span(va, 8, write, |p, _| {
            // SAFETY: as in `with_u32`, 8-aligned.
            let a = unsafe { AtomicU64::from_ptr(p.cast::<u64>()) };
            Some(f(a))
        })
    }

    /// The host page behind `va` (the address of its first byte in this process), the key
    /// by which the GPU's waits are woken ([`crate::watch`]); `None` where `va` is unmapped.
    pub(crate) fn host_page(&self, va: u64) -> Option<u64> {
        self.with_span(va, 1, false, |p, _| p as u64 & !(PAGE - 1))
            .ok()
    }

    /// Appends to `out` the host byte ranges `[start, end)` behind the mapped parts of `len`
    /// bytes at `va` (unmapped pages are skipped): what a write of those bytes wrote.
    pub(crate) fn host_ranges(&self, va: u64, len: u64, out: &mut Vec<(u64, u64)>) {
        let end = va.saturating_add(len);
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        let mut at = va;
        while at < end {
            let want = usize::try_from(end - at).unwrap_or(usize::MAX);
            match self.translate(&table, at, want, false) {
                Ok((p, n, _)) => {
                    out.push((p as u64, p as u64 + n as u64));
                    at += n as u64;
                }
                // Unmapped: on to the next mapping's start.
                Err(_) => {
                    at = table
                        .range(at + 1..)
                        .next()
                        .map_or(end, |(s, _)| *s)
                        .min(end)
                }
            }
        }
    }

    /// Appends to `out` the host byte ranges of every writable mapping: all a kernel running
    /// in this address space may have written.
    pub(crate) fn writable_host_ranges(&self, out: &mut Vec<(u64, u64)>) {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        for (va, _) in table.iter().filter(|(_, e)| e.writable) {
            if let Ok((p, n, _)) = self.translate(&table, *va, usize::MAX, false) {
                out.push((p as u64, p as u64 + n as u64));
            }
        }
    }

    /// Loads the u32 at `va` (atomically if aligned).
    pub fn load_u32(&self, va: u64, order: Ordering) -> Result<u32, PageFault> {
        if let Some(v) = self.with_u32(va, false, |a| a.load(order))? {
            return Ok(v);
        }
        let mut b = [0u8; 4];
        self.read(va, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Loads the u64 at `va` (atomically if aligned).
    pub fn load_u64(&self, va: u64, order: Ordering) -> Result<u64, PageFault> {
        if let Some(v) = self.with_u64(va, false, |a| a.load(order))? {
            return Ok(v);
        }
        let mut b = [0u8; 8];
        self.read(va, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Stores the u32 at `va` (atomically if aligned).
    pub fn store_u32(&self, va: u64, value: u32, order: Ordering) -> Result<(), PageFault> {
        if self
            .with_u32(va, true, |a| a.store(value, order))?
            .is_none()
        {
            self.write(va, &value.to_le_bytes())?;
        }
        Ok(())
    }

    /// Stores the u64 at `va` (atomically if aligned).
    pub fn store_u64(&self, va: u64, value: u64, order: Ordering) -> Result<(), PageFault> {
        if self
            .with_u64(va, true, |a| a.store(value, order))?
            .is_none()
        {
            self.write(va, &value.to_le_bytes())?;
        }
        Ok(())
    }

    /// Atomic read-modify-write of the u32 at `va`; returns the old value. An unaligned word
    /// is read and written without atomicity.
    pub fn rmw_u32(&self, va: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, PageFault> {
        let r = self.with_u32(va, true, |a| {
            let mut old = a.load(Ordering::Relaxed);
            loop {
                match a.compare_exchange_weak(old, op(old), Ordering::SeqCst, Ordering::Relaxed) {
                    Ok(v) => return v,
                    Err(v) => old = v,
                }
            }
        })?;
        if let Some(v) = r {
            return Ok(v);
        }
        let old = self.load_u32(va, Ordering::SeqCst)?;
        self.store_u32(va, op(old), Ordering::SeqCst)?;
        Ok(old)
    }

    /// 64-bit variant of [`Vm::rmw_u32`].
    pub fn rmw_u64(&self, va: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, PageFault> {
        let r = self.with_u64(va, true, |a| {
            let mut old = a.load(Ordering::Relaxed);
            loop {
                match a.compare_exchange_weak(old, op(old), Ordering::SeqCst, Ordering::Relaxed) {
                    Ok(v) => return v,
                    Err(v) => old = v,
                }
            }
        })?;
        if let Some(v) = r {
            return Ok(v);
        }
        let old = self.load_u64(va, Ordering::SeqCst)?;
        self.store_u64(va, op(old), Ordering::SeqCst)?;
        Ok(old)
    }

    /// Unmaps everything (at drop of the address space).
    pub(crate) fn clear(&self) {
        let mut table = self.table.write().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::Release);
        for (_, e) in std::mem::take(&mut *table) {
            if let Backing::Vram(run, o) = &e.backing {
                run.release(*o, e.bytes);
            }
        }
    }
}

/// Copies and fills of at least this many bytes use streaming (non-temporal) stores, which
/// skip reading the destination into the cache: what `memcpy` and `memset` do for large sizes.
const STREAM_MIN: usize = 256 << 10;

/// Copies `n` bytes from `src` to `dst`, two disjoint ranges, either of which other processes
/// (a client, through its own mapping of a host region) or other threads (a kernel's
/// relaxed-atomic stores through a `rig_isa::Window`) may read and write meanwhile.
///
/// **Why not `memcpy`.** A `memcpy` (`ptr::copy_nonoverlapping`) is a non-atomic access, and
/// a non-atomic access that races with a write is undefined behaviour in Rust's model, even
/// when the writer is another process the compiler cannot see: the compiler may, for
/// instance, read a source byte twice and act on two different values. Volatile copies do
/// not change that (volatile says nothing about concurrency). What the model does allow is
/// relaxed atomic accesses, and the per-byte form is what RFC 3301's `AtomicPerByte` (and
/// the `atomic-memcpy` crate) define: every byte copied is one value some writer stored,
/// with no ordering between bytes. So the copy here is:
///
/// - on x86_64, inline assembly: `rep movsb` (the microcoded string copy, at `memcpy`'s
///   speed with ERMS), and for [`STREAM_MIN`] bytes and more a loop of unaligned 16-byte
///   loads and non-temporal stores closed by `sfence`. An `asm!` block's effect must be one
///   that Rust code could have had, and a byte-wise relaxed atomic copy is such code: the
///   hardware makes each byte one stored value (x86 gives single-copy atomicity for each
///   aligned access, which covers every byte), so no data race exists in the model;
/// - elsewhere, relaxed `AtomicU8` loads and stores, one byte at a time (slow, and only a
///   fallback: CI and the deployments are x86_64).
///
/// One gap is left in the model, not in the hardware: a byte-wise copy racing a kernel's
/// 4- or 8-byte atomic store to the same bytes (through this process's windows) is a
/// mixed-size race, which Rust's model does not define; x86 still gives each byte one
/// stored value.
///
/// The bytes are data, never trusted: a copy torn by a concurrent writer is the writer's
/// own result (a real copy engine racing the CPU gives the same), and anything the
/// simulator parses from them (packets, arguments) is checked after the copy, in private
/// memory, and never read twice from the shared bytes.
///
/// # Safety
///
/// `src` must be valid for `n` bytes of reads and `dst` for `n` bytes of writes, the two
/// disjoint, and no reference may cover either.
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if n >= STREAM_MIN {
            let head = dst.align_offset(16).min(n);
            let body = (n - head) / 64 * 64;
            // SAFETY: the caller's ranges hold n bytes, and head + body <= n; the streaming
            // loop's stores are to 16-byte aligned addresses (dst + head is aligned) and end
            // with `sfence`, which orders them before any later store, such as the release
            // of a fence that publishes the copy.
            unsafe {
                rep_movsb(src, dst, head);
                stream_64(src.add(head), dst.add(head), body);
                rep_movsb(src.add(head + body), dst.add(head + body), n - head - body);
            }
        } else {
            // SAFETY: the caller's contract.
            unsafe { rep_movsb(src, dst, n) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        // SAFETY: i < n, inside both ranges; `AtomicU8` has the alignment of `u8`, and every
        // access to the bytes from this process is atomic or a raw copy like this one.
        unsafe {
            let b = std::sync::atomic::AtomicU8::from_ptr(src.add(i).cast_mut());
            let v = b.load(Ordering::Relaxed);
            std::sync::atomic::AtomicU8::from_ptr(dst.add(i)).store(v, Ordering::Relaxed);
        }
    }
}

/// Copies `n` bytes from `src` to `dst`, which may overlap, as `memmove` does, with the
/// same tolerance of other writers as [`copy_bytes`].
///
/// # Safety
///
/// `src` must be valid for `n` bytes of reads and `dst` for `n` bytes of writes, and no
/// reference may cover either.
unsafe fn move_bytes(src: *const u8, dst: *mut u8, n: usize) {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
        // A forward copy reads every byte before it is overwritten when dst is below src
        // (`rep movsb` behaves as a byte-at-a-time forward copy even where it moves lines).
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            rep_movsb(src, dst, n);
        }
        #[cfg(not(target_arch = "x86_64"))]
        for i in 0..n {
            // SAFETY: as in `copy_bytes`; forward, so each byte is read before it is written.
            unsafe { copy_byte(src.add(i), dst.add(i)) };
        }
    } else {
        // dst above src and overlapping: backwards, from the last byte.
        for i in (0..n).rev() {
            // SAFETY: i < n, inside both ranges; backwards, so each byte is read before the
            // copy overwrites it.
            unsafe { copy_byte(src.add(i), dst.add(i)) };
        }
    }
}

/// Copies one byte as a relaxed atomic load and store.
///
/// # Safety
///
/// `src` readable and `dst` writable, neither covered by a reference.
unsafe fn copy_byte(src: *const u8, dst: *mut u8) {
    use std::sync::atomic::AtomicU8;
    // SAFETY: the caller's contract; `AtomicU8` has the size and alignment of `u8`.
    unsafe {
        let v = AtomicU8::from_ptr(src.cast_mut()).load(Ordering::Relaxed);
        AtomicU8::from_ptr(dst).store(v, Ordering::Relaxed);
    }
}

/// `rep movsb`: copies `n` bytes forwards.
///
/// # Safety
///
/// As [`copy_bytes`], except that `dst` may lie below an overlapping `src`.
#[cfg(target_arch = "x86_64")]
unsafe fn rep_movsb(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: `rep movsb` reads `n` bytes from `src` and writes `n` bytes to `dst` upwards
    // (the ABI keeps the direction flag clear), inside the caller's ranges.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Copies `n` bytes, a multiple of 64, with unaligned 16-byte loads and non-temporal stores
/// (which skip reading the destination into the cache, as `memcpy` does for large sizes),
/// then `sfence`.
///
/// # Safety
///
/// As [`copy_bytes`], and `dst` 16-byte aligned.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_64(src: *const u8, dst: *mut u8, n: usize) {
    if n == 0 {
        return;
    }
    // SAFETY: each step reads and writes the 64 bytes at the cursors, inside the caller's
    // ranges (n is a multiple of 64 and above 0, so the loop ends at exactly n); the stores
    // are aligned (dst is); the xmm registers are declared clobbered.
    unsafe {
        std::arch::asm!(
            "2:",
            "movdqu {a}, [{s}]",
            "movdqu {b}, [{s} + 16]",
            "movdqu {c}, [{s} + 32]",
            "movdqu {e}, [{s} + 48]",
            "movntdq [{d}], {a}",
            "movntdq [{d} + 16], {b}",
            "movntdq [{d} + 32], {c}",
            "movntdq [{d} + 48], {e}",
            "add {s}, 64",
            "add {d}, 64",
            "sub {n}, 64",
            "jnz 2b",
            "sfence",
            s = inout(reg) src => _,
            d = inout(reg) dst => _,
            n = inout(reg) n => _,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            e = out(xmm_reg) _,
            options(nostack)
        );
    }
}

/// Writes `len` bytes at `dst` with `pattern` repeated from its first byte. Other writers of
/// the bytes are tolerated as in [`copy_bytes`]: `rep stosq` is a relaxed atomic store of
/// each byte in Rust's model.
///
/// # Safety
///
/// `dst` must be valid for `len` bytes of writes that no reference covers.
unsafe fn fill_pattern(dst: *mut u8, len: usize, pattern: [u8; 4]) {
    let qwords = len / 8;
    #[cfg(target_arch = "x86_64")]
    {
        let q = u64::from(u32::from_le_bytes(pattern)) * 0x1_0000_0001;
        // SAFETY: `rep stosq` writes `qwords` 8-byte values from `dst` upwards (the ABI keeps
        // the direction flag clear), within the caller's `len` bytes. It is the string store
        // the microcode runs at memset's speed (it streams large fills), which a loop of
        // stores does not reach.
        unsafe {
            std::arch::asm!(
                "rep stosq",
                inout("rcx") qwords => _,
                inout("rdi") dst => _,
                in("rax") q,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    let from = qwords * 8;
    #[cfg(not(target_arch = "x86_64"))]
    let from = 0;
    for i in from..len {
        // SAFETY: i < len; `AtomicU8` has the size and alignment of `u8`.
        let b = unsafe { std::sync::atomic::AtomicU8::from_ptr(dst.add(i)) };
        b.store(pattern[i % 4], Ordering::Relaxed);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.clear();
    }
}

impl From<PageFault> for rig_isa::MemoryFault {
    fn from(f: PageFault) -> Self {
        rig_isa::MemoryFault {
            address: f.address,
            write: f.write,
        }
    }
}

impl rig_isa::Memory for Vm {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), rig_isa::MemoryFault> {
        Vm::read(self, addr, out).map_err(Into::into)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), rig_isa::MemoryFault> {
        Vm::write(self, addr, data).map_err(Into::into)
    }

    fn atomic_u32(&self, addr: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, rig_isa::MemoryFault> {
        self.rmw_u32(addr, op).map_err(Into::into)
    }

    fn atomic_u64(&self, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, rig_isa::MemoryFault> {
        self.rmw_u64(addr, op).map_err(Into::into)
    }

    /// The whole mapping run (page-table entry) holding `addr`, holding what backs it (as a
    /// copy's span does), current until the next unmap of this address space.
    fn window(&self, addr: u64) -> Option<rig_isa::Window<'_>> {
        let table = self.table.read().unwrap_or_else(|e| e.into_inner());
        let (&start, e) = table.range(..=addr).next_back()?;
        if addr - start >= e.bytes {
            return None;
        }
        let words = usize::try_from(e.bytes / 4).ok()?;
        let (ptr, keep): (*mut u8, Box<dyn Send + Sync>) = match &e.backing {
            Backing::Vram(run, o) => (self.vram.ptr(*o), Box::new(run.hold())),
            Backing::Host(r, o) => {
                // PANIC: map_host checked that offset + bytes lies in the region (a usize).
                let off = usize::try_from(*o).expect("host offsets fit usize");
                // SAFETY: o < o + bytes <= region.len(), so this stays in the mapping.
                (unsafe { r.as_ptr().add(off) }, Box::new(r.clone()))
            }
        };
        // Read with the table held: an unmap moves it with the table held for writing.
        let seen = self.generation.load(Ordering::Acquire);
        let ptr = std::ptr::NonNull::new(ptr.cast::<AtomicU32>())?;
        // SAFETY: the entry's bytes start page-aligned (so word-aligned) and are mapped for
        // e.bytes; `keep` holds them (VRAM pages stay out of the arena, a host region stays
        // mapped) as long as the window lives; writes go through only if the entry is
        // writable; and this module reaches mapped bytes only through atomics and raw copies.
        let w = unsafe { rig_isa::Window::from_raw(start, ptr, words, e.writable, keep) };
        Some(w.until_changed(&self.generation, seen))
    }

    fn clock_ticks(&self) -> u64 {
        match self.clock {
            Some(c) => c.now(),
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn kernels_read_the_gpus_clock() {
        // s_sendmsg_rtn REALTIME and SHADER_CYCLES read Memory::clock_ticks: the GPU's counter
        // (an epoch an hour back, so no counter started in this process reads the same).
        let clock = crate::ClockRelation {
            epoch_monotonic_ns: crate::clock::monotonic_ns().saturating_sub(3_600_000_000_000),
            hz: 100_000_000,
        };
        let vm = Vm::new(1, Arc::new(Vram::new(PAGE).unwrap())).with_clock(clock);
        let before = clock.now();
        let t = rig_isa::Memory::clock_ticks(&vm);
        let after = clock.now();
        assert!(before <= t && t <= after, "{before} <= {t} <= {after}");
    }

    fn vm() -> Vm {
        Vm::new(3, Arc::new(Vram::new(256 * PAGE).unwrap()))
    }

    #[test]
    fn unmapped_and_read_only_fault_with_the_address() {
        let vm = vm();
        let r = SharedRegion::create("host", 4 * PAGE as usize).unwrap();
        vm.alloc_vram(0x10000, 2 * PAGE).unwrap();
        vm.map_host(0x20000, &r, PAGE, 2 * PAGE, false).unwrap();
        let mut b = [0u8; 16];
        let f = vm.read(0x10000 + 2 * PAGE - 8, &mut b).unwrap_err();
        assert_eq!(
            (f.address, f.write, f.read_only, f.vmid),
            (0x12000, false, false, 3)
        );
        let f = vm.write(0x20010, &[1]).unwrap_err();
        assert_eq!((f.address, f.write, f.read_only), (0x20010, true, true));
        r.write(PAGE as usize + 0x10, &[9, 8, 7]);
        vm.read(0x20010, &mut b[..3]).unwrap();
        assert_eq!(&b[..3], &[9, 8, 7]);
        assert_eq!(
            vm.alloc_vram(0x11000, PAGE),
            Err(MapError::Overlap {
                va: 0x11000,
                end: 0x12000
            })
        );
        assert!(matches!(
            vm.alloc_vram(0x1001, PAGE),
            Err(MapError::Unaligned { .. })
        ));
        assert!(matches!(
            vm.map_host(0x40000, &r, 0, 5 * PAGE, true),
            Err(MapError::OutsideRegion { .. })
        ));
    }

    #[test]
    fn partial_unmap_splits_and_frees() {
        let vram = Arc::new(Vram::new(16 * PAGE).unwrap());
        let vm = Vm::new(1, vram.clone());
        vm.alloc_vram(0, 8 * PAGE).unwrap();
        vm.write(0, &vec![0x5a; 8 * PAGE as usize]).unwrap();
        assert_eq!(vm.unmap(2 * PAGE, 3 * PAGE).unwrap(), 3 * PAGE);
        assert_eq!(vram.free_bytes(), 11 * PAGE);
        let mut b = [0u8; 1];
        vm.read(2 * PAGE - 1, &mut b).unwrap();
        assert_eq!(b[0], 0x5a);
        assert_eq!(vm.read(2 * PAGE, &mut b).unwrap_err().address, 2 * PAGE);
        vm.read(5 * PAGE, &mut b).unwrap();
        assert_eq!(b[0], 0x5a);
        assert_eq!(vm.unmap(0, 16 * PAGE).unwrap(), 5 * PAGE);
        assert_eq!(vram.free_bytes(), 16 * PAGE);
    }

    #[test]
    fn vram_a_span_holds_stays_out_of_other_allocations_until_it_lets_go() {
        let vram = Arc::new(Vram::new(16 * PAGE).unwrap());
        let (a, b) = (Vm::new(1, vram.clone()), Vm::new(2, vram.clone()));
        a.alloc_vram(0, 8 * PAGE).unwrap();
        // A copy's chunk in flight over the second half of A's allocation.
        let held = a.span(4 * PAGE, 4 * PAGE as usize, true).unwrap();
        assert_eq!(a.unmap(0, 8 * PAGE).unwrap(), 8 * PAGE);
        assert_eq!(
            a.span(4 * PAGE, 1, true).unwrap_err().address,
            4 * PAGE,
            "the next chunk faults"
        );
        assert_eq!(vram.free_bytes(), 8 * PAGE, "A's pages wait for the span");
        // B takes every free page: none of them is A's.
        b.alloc_vram(0, 8 * PAGE).unwrap();
        assert!(b.alloc_vram(0x100000, PAGE).is_err());
        // SAFETY: the span's pages, held by it; test-only writes as the chunk would make.
        unsafe { std::ptr::write_bytes(held.ptr, 0xa5, held.len) };
        let mut got = vec![0u8; 8 * PAGE as usize];
        b.read(0, &mut got).unwrap();
        assert!(got.iter().all(|x| *x == 0), "B never sees A's bytes");
        drop(held);
        assert_eq!(
            vram.free_bytes(),
            8 * PAGE,
            "the last holder gave them back"
        );
        // They come back zeroed.
        let c = Vm::new(3, vram.clone());
        c.alloc_vram(0, 8 * PAGE).unwrap();
        c.read(0, &mut got).unwrap();
        assert!(got.iter().all(|x| *x == 0), "reused pages are zero");
    }

    #[test]
    fn a_window_stops_being_current_at_an_unmap_and_keeps_its_pages_from_others() {
        use rig_isa::Memory;
        let vram = Arc::new(Vram::new(16 * PAGE).unwrap());
        let (a, b) = (Vm::new(1, vram.clone()), Vm::new(2, vram.clone()));
        a.alloc_vram(0, 8 * PAGE).unwrap();
        a.alloc_vram(0x100000, 4 * PAGE).unwrap();
        let w = a.window(3 * PAGE + 8).expect("mapped");
        assert_eq!((w.base(), w.len(), w.writable()), (0, 8 * PAGE, true));
        assert!(a.window(8 * PAGE).is_none(), "unmapped: no window");
        // Mapping more elsewhere changes nothing it shows.
        a.alloc_vram(0x200000, PAGE).unwrap();
        assert!(w.is_current());
        assert_eq!(a.unmap(0, 8 * PAGE).unwrap(), 8 * PAGE);
        assert!(
            !w.is_current(),
            "an unmap ends it: the next access translates, and faults"
        );
        assert!(a.window(3 * PAGE).is_none());
        assert_eq!(vram.free_bytes(), 3 * PAGE, "A's pages wait for the window");
        b.alloc_vram(0, 3 * PAGE).unwrap();
        assert!(
            b.alloc_vram(0x100000, PAGE).is_err(),
            "none of A's pages for B"
        );
        drop(w);
        assert_eq!(vram.free_bytes(), 8 * PAGE, "the window gave them back");
        let r = SharedRegion::create("host", 2 * PAGE as usize).unwrap();
        a.map_host(0x400000, &r, 0, 2 * PAGE, false).unwrap();
        let w = a.window(0x400000 + PAGE).expect("mapped");
        assert_eq!(
            (w.base(), w.len(), w.writable()),
            (0x400000, 2 * PAGE, false)
        );
    }

    /// A kernel of one wave32 with `user` in s0.. run on `vm` at `code` (words at 0x7f0000).
    fn launch(
        vm: &Vm,
        code: &[u32],
        user: &[u32],
        stop: &AtomicBool,
    ) -> Result<(), rig_isa::ExecFault> {
        let at = 0x7f0000;
        vm.alloc_vram(at, PAGE).unwrap();
        let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
        vm.write(at, &bytes).unwrap();
        let d = rig_isa::Dispatch {
            code_address: at,
            pgm_rsrc1: 0,
            pgm_rsrc2: (user.len() as u32) << 1,
            pgm_rsrc3: 0,
            user_sgprs: user.to_vec(),
            grid_items: [32, 1, 1],
            group_size: [32, 1, 1],
            wave64: false,
            lds_bytes: 0,
            scratch: None,
        };
        rig_isa::execute(&d, vm, stop, 1).map(|_| ())
    }

    /// `v0 <<= 4; global_load_b128 v[4:7], v0, s[0:1]; global_store_b128 v0, v[4:7], s[2:3]`:
    /// each lane copies its 16 bytes.
    const COPY_B128: [u32; 7] = [
        0x30000084, 0xdc5e0000, 0x04000000, 0xbf8903f7, 0xdc760000, 0x00020400, 0xbfb00000,
    ];

    #[test]
    fn a_kernels_dwordx4_straddling_into_an_unmapped_page_faults_at_the_page_edge() {
        let vm = vm();
        vm.alloc_vram(0x10000, PAGE).unwrap();
        vm.alloc_vram(0x20000, 2 * PAGE).unwrap();
        let src: Vec<u8> = (0..PAGE as u32).map(|i| (i * 7 + 1) as u8).collect();
        vm.write(0x10000, &src).unwrap();
        let stop = AtomicBool::new(false);
        // The last lane's 16 bytes start 8 bytes before the end of the page.
        let edge = 0x11000u64;
        let from = edge - 31 * 16 - 8;
        let e = launch(&vm, &COPY_B128, &[from as u32, 0, 0x20000, 0], &stop).unwrap_err();
        assert_eq!(
            e,
            rig_isa::ExecFault::Memory {
                fault: rig_isa::MemoryFault {
                    address: edge,
                    write: false
                },
                pc: 0x7f0004
            }
        );
        // Stores: lanes before the last store, the last stores its bytes before the edge.
        let to = 0x20000 + PAGE - 31 * 16 - 8;
        vm.unmap(0x20000 + PAGE, PAGE).unwrap();
        vm.unmap(0x7f0000, PAGE).unwrap();
        let e = launch(&vm, &COPY_B128, &[0x10000, 0, to as u32, 0], &stop).unwrap_err();
        assert_eq!(
            e,
            rig_isa::ExecFault::Memory {
                fault: rig_isa::MemoryFault {
                    address: 0x20000 + PAGE,
                    write: true
                },
                pc: 0x7f0010
            }
        );
        let mut got = vec![0u8; 31 * 16 + 8];
        vm.read(to, &mut got).unwrap();
        assert!(
            got[..] == src[..31 * 16 + 8],
            "every byte before the edge was stored"
        );
    }

    #[test]
    fn a_kernel_spinning_on_a_word_faults_once_its_page_is_unmapped() {
        // v1 = 0; v2 = 1; store v2 at s[2:3] (started); loop: load s[0:1] until nonzero.
        const SPIN: [u32; 10] = [
            0x7e020280, 0x7e040281, 0xdc6a0000, 0x00020201, 0xdc520000, 0x03000001, 0xbf8903f7,
            0x7c940680, 0xbfa4fffb, 0xbfb00000,
        ];
        let vm = vm();
        vm.alloc_vram(0x10000, PAGE).unwrap();
        vm.alloc_vram(0x20000, PAGE).unwrap();
        let stop = AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            let k = s.spawn(|| launch(&vm, &SPIN, &[0x10000, 0, 0x20000, 0], &stop));
            let started = std::time::Instant::now();
            while vm.load_u32(0x20000, Ordering::Acquire).unwrap() == 0 {
                assert!(started.elapsed().as_secs() < 20, "the kernel never started");
                std::thread::yield_now();
            }
            // The kernel spins on its window onto 0x10000: the unmap must reach it.
            vm.unmap(0x10000, PAGE).unwrap();
            let unmapped = std::time::Instant::now();
            while !k.is_finished() && unmapped.elapsed().as_secs() < 10 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            k.join().unwrap()
        });
        assert_eq!(
            r,
            Err(rig_isa::ExecFault::Memory {
                fault: rig_isa::MemoryFault {
                    address: 0x10000,
                    write: false
                },
                pc: 0x7f0010
            }),
            "a freed page faults (not Stopped: still reading it)"
        );
    }

    #[test]
    fn a_kernels_stores_racing_the_hosts_keep_every_word_whole() {
        // v0 <<= 4; v[4:7] = 0x12345678; 20000 times: global_store_b128 v0, v[4:7], s[0:1].
        const STORES: [u32; 14] = [
            0x30000084, 0x7e0802ff, 0x12345678, 0x7e0a0304, 0x7e0c0304, 0x7e0e0304, 0xbe8400ff,
            0x00004e20, 0xdc760000, 0x00000400, 0x80848104, 0xbf078004, 0xbfa2fffb, 0xbfb00000,
        ];
        let (kernel, host) = (0x1234_5678u32, [0xaaaa_aaaau32, 0x5555_5555]);
        let vm = vm();
        vm.alloc_vram(0x10000, PAGE).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let k = s.spawn(|| launch(&vm, &STORES, &[0x10000, 0], &stop));
            let mut n = 0usize;
            while !k.is_finished() {
                let at = 0x10000 + 4 * (n % 128) as u64;
                vm.store_u32(at, host[n % 2], Ordering::Relaxed).unwrap();
                let v = vm.load_u32(at, Ordering::Relaxed).unwrap();
                assert!(
                    v == kernel || host.contains(&v),
                    "word {at:#x} torn: {v:#x}"
                );
                n += 1;
            }
            k.join().unwrap().unwrap();
        });
        let mut got = vec![0u8; 512];
        vm.read(0x10000, &mut got).unwrap();
        for c in got.as_chunks::<4>().0 {
            let v = u32::from_le_bytes(*c);
            assert!(v == kernel || host.contains(&v), "a word torn: {v:#x}");
        }
    }

    #[test]
    fn copies_cross_runs_and_backings() {
        let vm = vm();
        let r = SharedRegion::create("host", 8 * PAGE as usize).unwrap();
        vm.map_host(0x100000, &r, 0, 8 * PAGE, true).unwrap();
        vm.alloc_vram(0x200000, 4 * PAGE).unwrap();
        vm.alloc_vram(0x204000, 4 * PAGE).unwrap();
        let data: Vec<u8> = (0..20000u32).map(|i| (i * 7 + 3) as u8).collect();
        r.write(5, &data);
        let stop = AtomicBool::new(false);
        assert!(
            vm.copy(0x200003, 0x100005, 20000, &|| !stop.load(Ordering::Relaxed))
                .unwrap()
        );
        let mut got = vec![0u8; 20000];
        vm.read(0x200003, &mut got).unwrap();
        assert_eq!(got, data);
        assert!(
            vm.fill(0x200001, 4097, 0x44332211, &|| !stop
                .load(Ordering::Relaxed))
                .unwrap()
        );
        let mut got = vec![0u8; 6];
        vm.read(0x200000, &mut got).unwrap();
        assert_eq!(got, [0, 0x11, 0x22, 0x33, 0x44, 0x11]);
        let f = vm
            .copy(0x207000, 0x100000, 2 * PAGE, &|| {
                !stop.load(Ordering::Relaxed)
            })
            .unwrap_err();
        assert_eq!(f.address, 0x208000);
        stop.store(true, Ordering::Relaxed);
        assert!(
            !vm.copy(0x200000, 0x100000, 10, &|| !stop.load(Ordering::Relaxed))
                .unwrap()
        );
    }

    #[test]
    fn large_copies_and_fills_stream_at_odd_offsets() {
        let vm = vm();
        vm.alloc_vram(0, 256 * PAGE).unwrap();
        let n = 300_003usize;
        let data: Vec<u8> = (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        vm.write(5, &data).unwrap();
        let stop = AtomicBool::new(false);
        assert!(
            vm.copy(400_001, 5, n as u64, &|| !stop.load(Ordering::Relaxed))
                .unwrap()
        );
        let mut got = vec![0u8; n + 2];
        vm.read(400_000, &mut got).unwrap();
        assert_eq!(got[0], 0);
        assert!(got[1..=n] == data[..]);
        assert_eq!(got[n + 1], 0);
        assert!(
            vm.fill(3, n as u64, 0x4433_2211, &|| !stop.load(Ordering::Relaxed))
                .unwrap()
        );
        let mut got = vec![0u8; n + 4];
        vm.read(0, &mut got).unwrap();
        assert_eq!(&got[..3], &[0, 0, 0]);
        for (i, b) in got[3..3 + n].iter().enumerate() {
            assert_eq!(*b, [0x11, 0x22, 0x33, 0x44][i % 4], "byte {i}");
        }
        assert_eq!(got[3 + n], data[n - 2]);
    }

    #[test]
    fn overlapping_copies_move_as_memmove_does() {
        let vm = vm();
        vm.alloc_vram(0, 4 * PAGE).unwrap();
        let n = 5000usize;
        let data: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
        let stop = AtomicBool::new(false);
        // Down by 3 (forwards) and up by 7 (backwards), each over its own source.
        for (src, dst) in [(1003u64, 1000u64), (1000, 1007)] {
            vm.write(src, &data).unwrap();
            assert!(
                vm.copy(dst, src, n as u64, &|| !stop.load(Ordering::Relaxed))
                    .unwrap()
            );
            let mut got = vec![0u8; n];
            vm.read(dst, &mut got).unwrap();
            assert!(got == data, "{src} -> {dst}");
        }
    }

    #[test]
    fn words_and_atomics() {
        let vm = vm();
        vm.alloc_vram(0, PAGE).unwrap();
        vm.store_u64(8, 0x0102_0304_0506_0708, Ordering::Release)
            .unwrap();
        assert_eq!(vm.load_u32(8, Ordering::Acquire).unwrap(), 0x0506_0708);
        assert_eq!(
            vm.load_u64(6, Ordering::Acquire).unwrap(),
            0x0304_0506_0708_0000
        );
        assert_eq!(vm.rmw_u64(8, &|v| v - 8).unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(
            vm.load_u64(8, Ordering::Acquire).unwrap(),
            0x0102_0304_0506_0700
        );
        assert_eq!(vm.rmw_u32(2, &|v| v + 1).unwrap(), 0);
        assert_eq!(vm.load_u32(2, Ordering::Acquire).unwrap(), 1);
        assert_eq!(
            vm.load_u32(PAGE, Ordering::Acquire).unwrap_err().address,
            PAGE
        );
    }
}
