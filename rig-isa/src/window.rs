//! Windows onto GPU memory and the interpreter's cache of them.
//!
//! A [`Window`] is a run of mapped GPU memory the host reaches directly, as words: what a
//! [`Memory`] answers to [`Memory::window`] so that a wave's loads and stores cost a bounds
//! check and a word access per lane instead of a translation each. [`Tlb`] keeps a few of them
//! per worker for one dispatch. Every word is accessed as a relaxed atomic, which is what
//! [`Memory::read`]/[`Memory::write`] guarantee per aligned word against other waves, threads
//! and the host; a wave whose lanes reach consecutive words (the unit-stride case) is one raw
//! copy, as `Memory::read`/`write` implementations copy, each aligned word whole.
//!
//! A window stays usable while it is *current*: a memory whose mappings can change during a
//! dispatch ties each window to a generation counter it bumps at every unmap, and the cache
//! drops a window whose generation moved, so a freed page faults through the per-access path.
//! The memory behind a window stays valid while the window lives (the memory keeps it, e.g.
//! by holding the pages out of reuse), so an access racing an unmap touches only pages no one
//! else can have been given.
//!
//! The one module of the crate besides `simd` that dereferences raw pointers.

// Lane loops index several lane arrays in step; iterators would obscure that.
#![allow(clippy::needless_range_loop)]

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::Memory;

/// A run of mapped GPU memory the host reaches directly: `words` 4-byte words, word `k` at
/// GPU address `base + 4 k`. Made by [`Memory::window`] implementations.
pub struct Window<'a> {
    base: u64,
    ptr: NonNull<AtomicU32>,
    words: usize,
    writable: bool,
    /// The memory's generation and its value when the window was made.
    live: Option<(&'a AtomicU64, u64)>,
    /// What keeps the words valid while the window lives.
    _keep: Option<Box<dyn Send + Sync + 'a>>,
    _words: PhantomData<&'a [AtomicU32]>,
}

impl std::fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("base", &self.base)
            .field("bytes", &self.len())
            .field("writable", &self.writable)
            .field("current", &self.is_current())
            .finish()
    }
}

impl<'a> Window<'a> {
    /// The window onto `words`, word `k` at GPU address `base + 4 k`.
    pub fn new(base: u64, words: &'a [AtomicU32], writable: bool) -> Window<'a> {
        Window {
            base,
            ptr: NonNull::from(words).cast(),
            words: words.len(),
            writable,
            live: None,
            _keep: None,
            _words: PhantomData,
        }
    }

    /// The window onto `words` words at `ptr`, word `k` at GPU address `base + 4 k`, with
    /// `keep` holding them valid.
    ///
    /// # Safety
    /// `ptr` must be aligned for `AtomicU32` and valid for reads (and writes if `writable`)
    /// of `words` words for as long as `keep` lives, and within this process those bytes are
    /// accessed only through atomics or raw copies, never through references of other types.
    pub unsafe fn from_raw(
        base: u64,
        ptr: NonNull<AtomicU32>,
        words: usize,
        writable: bool,
        keep: Box<dyn Send + Sync + 'a>,
    ) -> Window<'a> {
        Window {
            base,
            ptr,
            words,
            writable,
            live: None,
            _keep: Some(keep),
            _words: PhantomData,
        }
    }

    /// The window, current while `generation` reads `seen` (the value it had when the
    /// translation was made, read under the same lock as the translation).
    pub fn until_changed(mut self, generation: &'a AtomicU64, seen: u64) -> Window<'a> {
        self.live = Some((generation, seen));
        self
    }

    /// GPU address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes the window spans.
    pub fn len(&self) -> u64 {
        4 * self.words as u64
    }

    /// Whether the window spans no byte.
    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// Whether stores may go through the window.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Whether the mapping it shows is still the memory's.
    pub fn is_current(&self) -> bool {
        self.live
            .is_none_or(|(g, seen)| g.load(Ordering::Acquire) == seen)
    }

    /// Whether the `bytes` at `addr` lie in the window.
    pub fn contains(&self, addr: u64, bytes: u64) -> bool {
        let off = addr.wrapping_sub(self.base);
        off <= self.len() && self.len() - off >= bytes
    }

    /// Word `k` (`k < self.words`).
    #[inline(always)]
    fn word(&self, k: usize) -> &AtomicU32 {
        assert!(k < self.words);
        // SAFETY: k < words, and the constructor's contract makes `words` words from `ptr`
        // valid atomics while the window (and what it keeps) lives.
        unsafe { &*self.ptr.as_ptr().add(k) }
    }

    /// The word indices of each active lane's access of `rows` words at its address; `None`
    /// when an active lane's access is not word-aligned from `base` or leaves the window (or,
    /// for [`Lanes::Split`], when the active lanes' high words differ or the window spans 4
    /// GiB or more: the caller then asks with [`Lanes::Full`]).
    #[inline(always)]
    fn lane_words<const N: usize>(
        &self,
        at: &Lanes<N>,
        exec: u64,
        rows: usize,
    ) -> Option<[usize; N]> {
        let limit = self.len().checked_sub(4 * rows as u64)?;
        let mut k = [0usize; N];
        match *at {
            Lanes::Full(at) => {
                let mut bad = 0u64;
                for l in 0..N {
                    let off = at[l].wrapping_sub(self.base);
                    bad |= (((off > limit) | (off & 3 != 0)) as u64 & exec >> l) & 1;
                    k[l] = (off >> 2) as usize;
                }
                (bad == 0).then_some(k)
            }
            Lanes::Split { lo, hi, add } => {
                if self.len() > u32::MAX as u64 {
                    return None;
                }
                // EXEC as all-ones / all-zeros words, by 32-bit shifts (8 lanes per AVX2 shift).
                let mut m = [u32::MAX; N];
                let all = if N >= 64 { u64::MAX } else { (1u64 << N) - 1 };
                if exec & all != all {
                    let halves = [exec as u32, (exec >> 32) as u32];
                    for l in 0..N {
                        m[l] = 0u32.wrapping_sub(halves[l / 32] >> (l % 32) & 1);
                    }
                }
                let f = (exec.trailing_zeros() as usize).min(N - 1);
                // Lane l's offset is b + lo[l] (mod 2^64), b the same for every lane.
                let mut b = add.wrapping_sub(self.base);
                if let Some(hi) = hi {
                    let h = hi[f];
                    let mut other = 0u32;
                    for l in 0..N {
                        other |= (hi[l] ^ h) & m[l];
                    }
                    if other != 0 {
                        return None;
                    }
                    b = b.wrapping_add((h as u64) << 32);
                }
                let b32 = b as u32;
                let (mut mn, mut mx, mut odd) = (u32::MAX, 0u32, 0u32);
                for l in 0..N {
                    mn = mn.min(lo[l] | !m[l]);
                    mx = mx.max(lo[l] & m[l]);
                    odd |= b32.wrapping_add(lo[l]) & m[l];
                }
                // Every active offset in [0, limit]: as b + lo < 2^32 + 2^64 and limit <
                // 2^32, that is b (read as signed) + min >= 0 and b + max <= limit.
                let bs = b as i64 as i128;
                if odd & 3 != 0 || bs + (mn as i128) < 0 || bs + mx as i128 > limit as i128 {
                    return None;
                }
                // Offsets below 2^32: their low 32 bits are all of them.
                for l in 0..N {
                    k[l] = (b32.wrapping_add(lo[l]) >> 2) as usize;
                }
                Some(k)
            }
        }
    }

    /// Loads `R` (1 to 4) words per active lane from its address into `out[j][l]`; false,
    /// touching nothing, when an active lane's access is not all in the window.
    #[inline(always)]
    pub(crate) fn load_lanes<const N: usize, const R: usize>(
        &self,
        at: &Lanes<N>,
        exec: u64,
        out: &mut [[u32; N]; R],
    ) -> bool {
        let Some(k) = self.lane_words(at, exec, R) else {
            return false;
        };
        self.each_lane::<N>(exec, |l| {
            for j in 0..R {
                // SAFETY: lane_words checked k[l] + R <= words for this active lane.
                out[j][l] = unsafe { self.word_unchecked(k[l] + j) }.load(Ordering::Relaxed);
            }
        });
        true
    }

    /// Stores `R` (1 to 4) words per active lane, lane by lane in lane order (a later
    /// lane wins where accesses overlap), `data[j][l]` to its address plus `4 j`; false, touching
    /// nothing, when the window is read-only or an active lane's access is not all in it.
    #[inline(always)]
    pub(crate) fn store_lanes<const N: usize, const R: usize>(
        &self,
        at: &Lanes<N>,
        exec: u64,
        data: &[[u32; N]; R],
    ) -> bool {
        if !self.writable {
            return false;
        }
        let Some(k) = self.lane_words(at, exec, R) else {
            return false;
        };
        self.each_lane::<N>(exec, |l| {
            for j in 0..R {
                // SAFETY: lane_words checked k[l] + R <= words for this active lane, and the
                // window is writable.
                unsafe { self.word_unchecked(k[l] + j) }.store(data[j][l], Ordering::Relaxed);
            }
        });
        true
    }

    /// The first word of `words` words at `addr` as a raw pointer; `None` when they are not
    /// word-aligned from `base` or not all in the window.
    #[inline(always)]
    fn run_ptr(&self, addr: u64, words: usize) -> Option<*mut u32> {
        let off = addr.wrapping_sub(self.base);
        if off & 3 != 0 || !self.contains(addr, 4 * words as u64) {
            return None;
        }
        // SAFETY: off + 4 words <= len (checked), so the word index is in the window.
        Some(unsafe { self.ptr.as_ptr().add((off >> 2) as usize) }.cast::<u32>())
    }

    /// Loads the `out.len()` words from `addr` as one copy (a scalar load); false, touching
    /// nothing, when they are not all in the window (or not word-aligned).
    #[inline(always)]
    pub(crate) fn load_words(&self, addr: u64, out: &mut [u32]) -> bool {
        let Some(p) = self.run_ptr(addr, out.len()) else {
            return false;
        };
        // SAFETY: run_ptr checked the words are in the window; its words are reached only
        // through atomics or raw copies; `out` is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        true
    }

    /// Loads `R` (1 to 4) words for each of `N` lanes lying back to back from `addr` (lane
    /// `l`'s word `j` at `addr + 4 (R l + j)`) into `out[j][l]`, as one copy; false, touching
    /// nothing, when they are not all in the window (or not word-aligned).
    #[inline(always)]
    pub(crate) fn load_run<const N: usize, const R: usize>(
        &self,
        addr: u64,
        out: &mut [[u32; N]; R],
    ) -> bool {
        let Some(p) = self.run_ptr(addr, N * R) else {
            return false;
        };
        if R == 1 {
            // SAFETY: run_ptr checked the N words are in the window; the window's words are
            // reached only through atomics or raw copies (the constructor's contract), and
            // `out` is a distinct local array.
            unsafe { std::ptr::copy_nonoverlapping(p, out[0].as_mut_ptr(), N) };
        } else {
            for l in 0..N {
                for j in 0..R {
                    // SAFETY: R l + j < N R words, in the window (run_ptr); a raw read.
                    out[j][l] = unsafe { p.add(R * l + j).read() };
                }
            }
        }
        true
    }

    /// Stores `R` (1 to 4) words for each of `N` lanes lying back to back from `addr` (lane
    /// `l`'s word `j`, `data[j][l]`, at `addr + 4 (R l + j)`), as one copy; false, touching
    /// nothing, when the window is read-only or they are not all in it (or not word-aligned).
    #[inline(always)]
    pub(crate) fn store_run<const N: usize, const R: usize>(
        &self,
        addr: u64,
        data: &[[u32; N]; R],
    ) -> bool {
        if !self.writable {
            return false;
        }
        let Some(p) = self.run_ptr(addr, N * R) else {
            return false;
        };
        if R == 1 {
            // SAFETY: run_ptr checked the N words are in the window, which is writable; its
            // words are reached only through atomics or raw copies; `data` is a distinct array.
            unsafe { std::ptr::copy_nonoverlapping(data[0].as_ptr(), p, N) };
        } else {
            for l in 0..N {
                for j in 0..R {
                    // SAFETY: R l + j < N R words, in the writable window (run_ptr); a raw
                    // write.
                    unsafe { p.add(R * l + j).write(data[j][l]) };
                }
            }
        }
        true
    }

    /// Runs `f` for each lane in `exec`, in lane order (without a test per lane when every
    /// lane is).
    #[inline(always)]
    fn each_lane<const N: usize>(&self, exec: u64, mut f: impl FnMut(usize)) {
        let all = if N >= 64 { u64::MAX } else { (1u64 << N) - 1 };
        if exec & all == all {
            for l in 0..N {
                f(l);
            }
        } else {
            for l in 0..N {
                if exec >> l & 1 != 0 {
                    f(l);
                }
            }
        }
    }

    /// Word `k`, unchecked.
    ///
    /// # Safety
    /// `k < self.words`.
    #[inline(always)]
    unsafe fn word_unchecked(&self, k: usize) -> &AtomicU32 {
        // SAFETY: k < words (the caller's contract), and the constructor's contract makes
        // `words` words from `ptr` valid atomics while the window lives.
        unsafe { &*self.ptr.as_ptr().add(k) }
    }

    /// The word at `addr` (word-aligned from `base`, in the window).
    pub(crate) fn load(&self, addr: u64) -> Option<u32> {
        let off = addr.wrapping_sub(self.base);
        (off & 3 == 0 && off < self.len())
            .then(|| self.word((off >> 2) as usize).load(Ordering::Relaxed))
    }

    /// Stores the word at `addr` (word-aligned from `base`, in a writable window); false when
    /// it cannot.
    pub(crate) fn store(&self, addr: u64, v: u32) -> bool {
        let off = addr.wrapping_sub(self.base);
        let ok = self.writable && off & 3 == 0 && off < self.len();
        if ok {
            self.word((off >> 2) as usize).store(v, Ordering::Relaxed);
        }
        ok
    }
}

/// Each lane's address, as a vector memory instruction forms it.
#[derive(Clone, Copy)]
pub(crate) enum Lanes<'v, const N: usize> {
    /// 64-bit addresses.
    Full(&'v [u64; N]),
    /// `(hi[l] << 32 | lo[l]) + add`, or `lo[l] + add` without `hi` (all wrapping).
    Split {
        lo: &'v [u32; N],
        hi: Option<&'v [u32; N]>,
        add: u64,
    },
}

/// Windows a worker keeps during one dispatch.
const TLB_ENTRIES: usize = 4;

/// A worker's windows onto the dispatch's memory, dropped with the worker's share of the
/// dispatch (so what they keep is let go when the dispatch ends).
pub(crate) struct Tlb<'a> {
    mem: &'a dyn Memory,
    slots: [Option<Window<'a>>; TLB_ENTRIES],
    /// Each slot's GPU base and bytes (0 when empty): a hit is found without touching the
    /// windows.
    span: [(u64, u64); TLB_ENTRIES],
    /// The slot the next miss replaces (when none is empty).
    next: usize,
}

impl<'a> Tlb<'a> {
    pub(crate) fn new(mem: &'a dyn Memory) -> Tlb<'a> {
        Tlb {
            mem,
            slots: [const { None }; TLB_ENTRIES],
            span: [(0, 0); TLB_ENTRIES],
            next: 0,
        }
    }

    /// The memory the windows are of (for the per-access path).
    pub(crate) fn mem(&self) -> &'a dyn Memory {
        self.mem
    }

    /// A current window holding the `bytes` at `addr` (writable when `write`), asking the
    /// memory on a miss; `None` when the memory has none (the access then takes the
    /// per-access path, which also finds every fault).
    #[inline(always)]
    pub(crate) fn find(&mut self, addr: u64, bytes: u64, write: bool) -> Option<&Window<'a>> {
        let mut hit = TLB_ENTRIES;
        for (k, &(base, len)) in self.span.iter().enumerate() {
            let off = addr.wrapping_sub(base);
            if off <= len && len - off >= bytes {
                hit = k;
                break;
            }
        }
        if hit < TLB_ENTRIES
            && let Some(w) = &self.slots[hit]
            && (w.writable || !write)
            && w.is_current()
        {
            // The same window, borrowed afresh (a conditional return of `w` keeps `self` borrowed).
            return self.slots[hit].as_ref();
        }
        self.find_slow(addr, bytes, write)
    }

    /// `find` past the first span holding the access: stale windows let go, a miss filled.
    #[cold]
    #[inline(never)]
    fn find_slow(&mut self, addr: u64, bytes: u64, write: bool) -> Option<&Window<'a>> {
        let fits = |w: &Window| w.contains(addr, bytes) && (w.writable || !write);
        let mut hit = None;
        for (k, s) in self.slots.iter_mut().enumerate() {
            if let Some(w) = s
                && fits(w)
            {
                if w.is_current() {
                    hit = Some(k);
                    break;
                }
                // Its mapping changed: let go of what it keeps.
                *s = None;
            }
        }
        if hit.is_none() {
            hit = self.fill(addr);
        }
        for (sp, s) in self.span.iter_mut().zip(&self.slots) {
            *sp = s.as_ref().map_or((0, 0), |w| (w.base, w.len()));
        }
        let w = self.slots[hit?].as_ref()?;
        fits(w).then_some(w)
    }

    /// Asks the memory for the window at `addr` and keeps it; its slot.
    #[cold]
    fn fill(&mut self, addr: u64) -> Option<usize> {
        let w = self.mem.window(addr)?;
        // Stale windows go first, then empty slots, then in turn.
        for s in self.slots.iter_mut() {
            if s.as_ref().is_some_and(|w| !w.is_current()) {
                *s = None;
            }
        }
        let k = match self.slots.iter().position(Option::is_none) {
            Some(k) => k,
            None => {
                let k = self.next;
                self.next = (k + 1) % TLB_ENTRIES;
                k
            }
        };
        self.slots[k] = Some(w);
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_in_the_window_copy_and_one_outside_refuses() {
        let words: Vec<AtomicU32> = (0..64).map(AtomicU32::new).collect();
        let w = Window::new(0x1000, &words, true);
        let mut at = [0u64; 32];
        for (l, a) in at.iter_mut().enumerate() {
            *a = 0x1000 + 8 * l as u64;
        }
        let mut out = [[0u32; 32]; 2];
        assert!(w.load_lanes(&Lanes::Full(&at), u32::MAX as u64, &mut out));
        assert_eq!((out[0][3], out[1][3]), (6, 7));
        // Lane 31's second word is the window's last: in. One word further: out.
        at[31] = 0x1000 + 62 * 4;
        assert!(w.load_lanes(&Lanes::Full(&at), u32::MAX as u64, &mut out));
        at[31] += 4;
        assert!(!w.load_lanes(&Lanes::Full(&at), u32::MAX as u64, &mut out));
        // ...unless the lane is inactive; unaligned refuses.
        assert!(w.load_lanes(&Lanes::Full(&at), 0x7fff_ffff, &mut out));
        at[0] += 2;
        assert!(!w.load_lanes(&Lanes::Full(&at), 0x7fff_ffff, &mut out));
        assert!(!w.contains(0xffc, 8) && w.contains(0x10fc, 4) && !w.contains(0x10fc, 5));
        let ro = Window::new(0x1000, &words, false);
        assert!(!ro.store_lanes(&Lanes::Full(&[0x1000; 32]), 1, &[[9; 32]]));
        assert!(!ro.store(0x1000, 9));
    }

    #[test]
    fn a_window_whose_generation_moved_is_dropped() {
        struct Gen {
            words: Vec<AtomicU32>,
            generation: AtomicU64,
        }
        impl Memory for Gen {
            fn read(&self, addr: u64, _: &mut [u8]) -> Result<(), crate::MemoryFault> {
                Err(crate::MemoryFault {
                    address: addr,
                    write: false,
                })
            }
            fn write(&self, addr: u64, _: &[u8]) -> Result<(), crate::MemoryFault> {
                Err(crate::MemoryFault {
                    address: addr,
                    write: true,
                })
            }
            fn atomic_u32(
                &self,
                a: u64,
                _: &dyn Fn(u32) -> u32,
            ) -> Result<u32, crate::MemoryFault> {
                self.read(a, &mut [])?;
                Ok(0)
            }
            fn atomic_u64(
                &self,
                a: u64,
                _: &dyn Fn(u64) -> u64,
            ) -> Result<u64, crate::MemoryFault> {
                self.read(a, &mut [])?;
                Ok(0)
            }
            fn window(&self, addr: u64) -> Option<Window<'_>> {
                let g = self.generation.load(Ordering::Acquire);
                // Mapped while the generation is even.
                (g.is_multiple_of(2) && addr < 16)
                    .then(|| Window::new(0, &self.words, true).until_changed(&self.generation, g))
            }
        }
        let m = Gen {
            words: (0..4).map(AtomicU32::new).collect(),
            generation: AtomicU64::new(0),
        };
        let mut tlb = Tlb::new(&m);
        assert_eq!(tlb.find(8, 4, true).and_then(|w| w.load(8)), Some(2));
        m.generation.store(1, Ordering::Release);
        assert!(tlb.find(8, 4, true).is_none(), "an unmap makes it fault");
        assert!(tlb.slots.iter().all(Option::is_none), "and lets it go");
        m.generation.store(2, Ordering::Release);
        assert!(tlb.find(8, 4, false).is_some());
    }
}
