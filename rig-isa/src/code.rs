//! Decoded code: each worker's decode of a dispatch's instructions, and a process-wide cache
//! that hands those decodes to the next dispatch of the same code (each thread keeps its last
//! dispatch's decode aside, which its next dispatch takes without a lock).
//!
//! Code words are read ahead in small page-bounded chunks (one [`Memory::read`] per chunk, not
//! per word). A cached entry is keyed by encoding family and code address and carries the
//! bytes its decodes depend on (from the entry point to the end of the last decoded
//! instruction); before a dispatch reuses it those bytes are read again (one read per page,
//! into a buffer the entry keeps) and compared, so code unloaded and reloaded at the same address (or another VMID's code there)
//! is never run from a stale decode. Memory gives no cheaper sign of a change: a client writes
//! its code objects through its own mapping, unseen by the page table. Words read ahead past
//! the last decode are not kept, so a later dispatch reads them afresh. Decodes that saw an
//! unreadable page are never cached.
//!
//! Does not own instruction semantics (`exec`) or decoding itself (`decode`).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::decode::{DecodeError, Inst, Isa, decode_isa};
use crate::prep::Slot;
use crate::{ExecFault, Memory};

/// Bytes read ahead at a time (never across a 4 KiB page).
const CHUNK: usize = 256;
const PAGE: u64 = 4096;
/// Code within this many bytes of the entry point is decoded into a dense table.
const DENSE_SPAN: u64 = 1 << 20;
/// Entries kept in the process-wide cache before it is emptied.
const CACHE_ENTRIES: usize = 64;
/// Larger decodes (in instruction slots) are not cached.
const CACHE_SLOTS: usize = 16 * 1024;
/// Decodes kept at addresses outside the dense table; past this many the map starts over (a
/// kernel that jumps to ever new addresses would otherwise grow it without bound).
const SPARSE_SLOTS: usize = 4096;

/// A decode kept between dispatches.
#[derive(Clone)]
pub(crate) struct Cached {
    /// The code words from the entry point that the decodes depend on.
    words: Vec<u32>,
    /// The same, as the bytes memory held (compared with one `==` on reuse).
    bytes: Vec<u8>,
    /// Where reuse reads those bytes again to compare (kept: zeroing a buffer per dispatch
    /// cost more than a small kernel's decode check).
    check: Vec<u8>,
    dense: Vec<Option<Slot>>,
}

/// One cached decode with its key: the same words decode differently per family.
struct Entry {
    isa: Isa,
    base: u64,
    code: Cached,
}

/// A few entries, searched in turn: cheaper than hashing the key for the one or two kernels a
/// process usually runs, and never more than [`CACHE_ENTRIES`].
static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

thread_local! {
    /// The decode this thread's last dispatch left: the next dispatch of the same code on the
    /// thread takes it back without a lock (a lock and its release are atomic operations, a
    /// few percent of a small dispatch). Another thread's dispatch of that code meanwhile
    /// decodes its own.
    static LAST: Cell<Option<Entry>> = const { Cell::new(None) };
}

fn cache() -> MutexGuard<'static, Vec<Entry>> {
    // Entries are replaced whole under the lock: a poisoned lock holds consistent state.
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `e` in the process-wide cache, replacing an entry of the same key.
fn keep(entries: &mut Vec<Entry>, e: Entry) {
    if let Some(old) = entries
        .iter_mut()
        .find(|o| o.isa == e.isa && o.base == e.base)
    {
        *old = e;
        return;
    }
    if entries.len() >= CACHE_ENTRIES {
        entries.clear();
    }
    entries.push(e);
}

/// Takes the cached decode of the code at `base` if its bytes are still those in memory.
pub(crate) fn take(mem: &dyn Memory, isa: Isa, base: u64) -> Option<Cached> {
    let mut c = match LAST.take() {
        Some(e) if e.isa == isa && e.base == base => e.code,
        last => {
            let mut entries = cache();
            if let Some(e) = last {
                keep(&mut entries, e);
            }
            let k = entries
                .iter()
                .position(|e| e.isa == isa && e.base == base)?;
            entries.swap_remove(k).code
        }
    };
    still_there(mem, base, &c.bytes, &mut c.check).then_some(c)
}

/// Offers a decode of the code at `base` for later dispatches.
pub(crate) fn put(isa: Isa, base: u64, code: Cached) {
    if let Some(e) = LAST.replace(Some(Entry { isa, base, code })) {
        keep(&mut cache(), e);
    }
}

/// Whether memory at `base` still holds `bytes`; `buf` is where it reads them.
fn still_there(mem: &dyn Memory, base: u64, bytes: &[u8], buf: &mut Vec<u8>) -> bool {
    buf.resize(bytes.len(), 0);
    let mut done = 0;
    // A read never crosses a page: a decode may end just before an unmapped one.
    while done < bytes.len() {
        let at = base.wrapping_add(done as u64);
        let n = ((PAGE - at % PAGE) as usize).min(bytes.len() - done);
        if mem.read(at, &mut buf[done..done + n]).is_err() {
            return false;
        }
        done += n;
    }
    buf[..] == *bytes
}

/// Bytes to read at `at`: up to the page end, whole words, at least one word.
fn chunk_len(at: u64) -> usize {
    let to_page_end = (PAGE - at % PAGE) as usize;
    (to_page_end.min(CHUNK) & !3).max(4)
}

/// One worker's decoded instructions of a dispatch.
pub(crate) struct Code<'m> {
    mem: &'m dyn Memory,
    isa: Isa,
    base: u64,
    /// Code words from `base`.
    words: Vec<u32>,
    /// The seed's words as bytes (a prefix of `words`).
    bytes: Vec<u8>,
    /// False once a read ahead failed: `words` ends at an unreadable page.
    readable: bool,
    dense: Vec<Option<Slot>>,
    /// Decodes at addresses outside the dense table (made on first use: a map's hasher
    /// costs a small dispatch something, and kernels rarely branch there).
    sparse: Option<HashMap<u64, Slot>>,
    /// A decode depended on memory being unreadable: do not cache.
    partial: bool,
    /// The dense table or `words` changed since the seed.
    grew: bool,
    check: Vec<u8>,
}

impl<'m> Code<'m> {
    /// The decode of a dispatch starting from `seed`, as [`take`] gave it.
    pub(crate) fn new(mem: &'m dyn Memory, isa: Isa, base: u64, seed: Option<Cached>) -> Self {
        let fresh = seed.is_none();
        Code::start(mem, isa, base, seed, fresh)
    }

    /// A decode starting from another worker's [`Code::seed`] (its words may reach past what
    /// its bytes say).
    pub(crate) fn copy_of(mem: &'m dyn Memory, isa: Isa, base: u64, seed: Option<Cached>) -> Self {
        Code::start(mem, isa, base, seed, true)
    }

    fn start(mem: &'m dyn Memory, isa: Isa, base: u64, seed: Option<Cached>, grew: bool) -> Self {
        let c = seed.unwrap_or(Cached {
            words: Vec::new(),
            bytes: Vec::new(),
            check: Vec::new(),
            dense: Vec::new(),
        });
        Code {
            mem,
            isa,
            base,
            words: c.words,
            bytes: c.bytes,
            readable: true,
            dense: c.dense,
            sparse: None,
            partial: false,
            grew,
            check: c.check,
        }
    }

    /// The decode worth caching, if any, with the words its decodes depend on.
    pub(crate) fn into_cached(mut self) -> Option<Cached> {
        if !self.grew {
            // The seed as it came: its words are what its decodes depend on.
            return Some(Cached {
                words: self.words,
                bytes: self.bytes,
                check: self.check,
                dense: self.dense,
            });
        }
        let span = self
            .dense
            .iter()
            .enumerate()
            .rev()
            .find_map(|(k, s)| s.as_ref().map(|s| k + usize::from(s.inst.len)))?
            .min(self.words.len());
        if self.partial || span == 0 || self.dense.len() > CACHE_SLOTS {
            return None;
        }
        self.words.truncate(span);
        // `bytes` (the seed's) are the first words' already; a decode that went further adds.
        self.bytes.truncate(4 * span);
        let known = self.bytes.len() / 4;
        for w in &self.words[known..] {
            self.bytes.extend_from_slice(&w.to_le_bytes());
        }
        Some(Cached {
            words: self.words,
            bytes: self.bytes,
            check: self.check,
            dense: self.dense,
        })
    }

    /// A copy of the decode so far, for another worker of the dispatch ([`Code::copy_of`]);
    /// none when a decode saw unreadable memory (the other worker then sees it too).
    pub(crate) fn seed(&self) -> Option<Cached> {
        (!self.partial).then(|| Cached {
            words: self.words.clone(),
            bytes: self.bytes.clone(),
            check: Vec::new(),
            dense: self.dense.clone(),
        })
    }

    /// Instruction slots decoded so far (to pick the most complete decode to cache).
    pub(crate) fn decoded(&self) -> usize {
        self.dense.len()
    }

    #[inline]
    pub(crate) fn fetch(&mut self, pc: u64) -> Result<&Slot, ExecFault> {
        // The hot case (decoded before) stays small enough to inline into the issue loop.
        // A misaligned offset rotates its low bits to the top, past any table index; the
        // table never reaches past DENSE_SPAN.
        let k = pc.wrapping_sub(self.base).rotate_right(2) as usize;
        if matches!(self.dense.get(k), Some(Some(_))) {
            return self.dense[k].as_ref().ok_or(ExecFault::Internal);
        }
        self.fetch_slow(pc)
    }

    #[cold]
    #[inline(never)]
    fn fetch_slow(&mut self, pc: u64) -> Result<&Slot, ExecFault> {
        let off = pc.wrapping_sub(self.base);
        if off.is_multiple_of(4) && off < DENSE_SPAN {
            let k = (off / 4) as usize;
            if !matches!(self.dense.get(k), Some(Some(_))) {
                self.grew = true;
                let i = self.decode_dense(k, pc)?;
                if self.dense.len() <= k {
                    self.dense.resize(k + 1, None);
                }
                self.dense[k] = Some(Slot::new(i));
            }
            return self.dense[k].as_ref().ok_or(ExecFault::Internal);
        }
        if !self.sparse.as_ref().is_some_and(|m| m.contains_key(&pc)) {
            let i = self.decode_at(pc)?;
            let m = self.sparse.get_or_insert_default();
            if m.len() >= SPARSE_SLOTS {
                m.clear();
            }
            m.insert(pc, Slot::new(i));
        }
        self.sparse
            .as_ref()
            .and_then(|m| m.get(&pc))
            .ok_or(ExecFault::Internal)
    }

    /// Reads ahead until `words` holds `target` words or the next chunk is unreadable.
    fn fill(&mut self, target: usize) {
        let mut buf = [0u8; CHUNK];
        while self.readable && self.words.len() < target {
            let at = self.base + 4 * self.words.len() as u64;
            let n = chunk_len(at);
            if self.mem.read(at, &mut buf[..n]).is_err() {
                self.readable = false;
                break;
            }
            self.words.extend(
                buf[..n]
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
    }

    fn decode_dense(&mut self, k: usize, pc: u64) -> Result<Inst, ExecFault> {
        self.fill(k + 3);
        if k >= self.words.len() {
            // The instruction's own word is unreadable: report that read's fault.
            self.partial = true;
            return self.decode_at(pc);
        }
        let n = (self.words.len() - k).min(3);
        if n < 3 {
            self.partial = true;
        }
        let words = &self.words[k..k + n];
        decode_isa(self.isa, words).map_err(|e| illegal(e, pc, words))
    }

    fn decode_at(&self, pc: u64) -> Result<Inst, ExecFault> {
        let mut words = [0u32; 3];
        let mut n = 0;
        for (k, w) in words.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            match self.mem.read(pc + 4 * k as u64, &mut b) {
                Ok(()) => {
                    *w = u32::from_le_bytes(b);
                    n += 1;
                }
                Err(f) if k == 0 => return Err(ExecFault::Memory { fault: f, pc }),
                Err(_) => break,
            }
        }
        decode_isa(self.isa, &words[..n]).map_err(|e| illegal(e, pc, &words[..n]))
    }
}

fn illegal(e: DecodeError, pc: u64, words: &[u32]) -> ExecFault {
    match e {
        DecodeError::Illegal | DecodeError::Truncated => ExecFault::IllegalInstruction {
            address: pc,
            words: words.to_vec(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FlatMemory;

    /// No other test of the crate runs code here (the decode cache is the process's).
    const BASE: u64 = 0x3_c0de_0000;
    const S_NOP: u32 = 0xbf80_0000;

    fn mem() -> FlatMemory {
        let m = FlatMemory::new(BASE, 0x1000);
        let code: Vec<u8> = [S_NOP, S_NOP, 0xbfb0_0000]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        m.write(BASE, &code).unwrap();
        m
    }

    /// What a cached entry's check compares covers every word its decodes used.
    fn covers(c: &Cached) {
        let words: Vec<u8> = c.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(c.bytes, words);
    }

    #[test]
    fn a_copy_for_a_helper_is_checked_in_full_when_cached() {
        let mem = mem();
        let mut first = Code::new(&mem, Isa::Gfx11, BASE, None);
        first.fetch(BASE).unwrap();
        // Its words were read ahead past the decode, and none of them is in `bytes` yet.
        let seed = first.seed().unwrap();
        assert!(seed.words.len() > 1 && seed.bytes.is_empty());
        let mut helper = Code::copy_of(&mem, Isa::Gfx11, BASE, Some(seed));
        helper.fetch(BASE + 4).unwrap();
        let c = helper.into_cached().unwrap();
        assert_eq!(c.words.len(), 2);
        covers(&c);
    }

    #[test]
    fn a_reused_decode_comes_back_whole_and_one_that_grew_is_checked_in_full() {
        let mem = mem();
        let mut code = Code::new(&mem, Isa::Gfx11, BASE, None);
        code.fetch(BASE).unwrap();
        let c = code.into_cached().unwrap();
        covers(&c);
        // Reused and nothing decoded: handed back as it came.
        let again = Code::new(&mem, Isa::Gfx11, BASE, Some(c.clone()));
        let back = again.into_cached().unwrap();
        assert_eq!((back.words, back.bytes), (c.words.clone(), c.bytes.clone()));
        // Reused and grown: the check covers the new words too.
        let mut grown = Code::new(&mem, Isa::Gfx11, BASE, Some(c));
        grown.fetch(BASE + 8).unwrap();
        let g = grown.into_cached().unwrap();
        assert_eq!(g.words.len(), 3);
        covers(&g);
    }

    #[test]
    fn decodes_outside_the_dense_table_are_bounded() {
        let far = BASE + DENSE_SPAN;
        let n = SPARSE_SLOTS + 100;
        let mem = FlatMemory::new(BASE, (DENSE_SPAN as usize) + 4 * n + 16);
        let nops: Vec<u8> = (0..n).flat_map(|_| S_NOP.to_le_bytes()).collect();
        mem.write(far, &nops).unwrap();
        let mut code = Code::new(&mem, Isa::Gfx11, BASE, None);
        for k in 0..n as u64 {
            assert_eq!(code.fetch(far + 4 * k).unwrap().inst.len, 1);
        }
        assert!(code.sparse.as_ref().unwrap().len() <= SPARSE_SLOTS);
    }

    #[test]
    fn a_decode_check_reads_what_memory_holds_now() {
        let mem = mem();
        let mut code = Code::new(&mem, Isa::Gfx11, BASE, None);
        code.fetch(BASE + 8).unwrap();
        put(Isa::Gfx11, BASE, code.into_cached().unwrap());
        let c = take(&mem, Isa::Gfx11, BASE).expect("unchanged code reuses its decode");
        put(Isa::Gfx11, BASE, c);
        mem.write(BASE + 8, &0xbf90_0001u32.to_le_bytes()).unwrap();
        assert!(take(&mem, Isa::Gfx11, BASE).is_none());
    }
}
