//! Decoded code: each worker's decode of a dispatch's instructions, and a process-wide cache
//! that hands those decodes to the next dispatch of the same code.
//!
//! Code words are read ahead in small page-bounded chunks (one [`Memory::read`] per chunk, not
//! per word). A cached entry is keyed by the code address and carries the words it was decoded
//! from; before a dispatch reuses it those words are read again and compared, so code unloaded
//! and reloaded at the same address (or another VMID's code there) is never run from a stale
//! decode. Decodes that saw an unreadable page are never cached.
//!
//! Does not own instruction semantics (`exec`) or decoding itself (`decode`).

use std::collections::HashMap;
use std::sync::Mutex;

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

/// A decode kept between dispatches.
#[derive(Clone)]
pub(crate) struct Cached {
    words: Vec<u32>,
    dense: Vec<Option<Slot>>,
}

/// Keyed by encoding family and code address: the same words decode differently per family.
static CACHE: Mutex<Option<HashMap<(Isa, u64), Cached>>> = Mutex::new(None);

/// Takes the cached decode of the code at `base` if its words are still those in memory.
pub(crate) fn take(mem: &dyn Memory, isa: Isa, base: u64) -> Option<Cached> {
    let c = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()?
        .remove(&(isa, base))?;
    still_there(mem, base, &c.words).then_some(c)
}

/// Offers a decode of the code at `base` for later dispatches.
pub(crate) fn put(isa: Isa, base: u64, c: Cached) {
    let mut g = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if map.len() >= CACHE_ENTRIES && !map.contains_key(&(isa, base)) {
        map.clear();
    }
    map.insert((isa, base), c);
}

/// Whether memory at `base` still holds `words`, read as `Code` reads them.
fn still_there(mem: &dyn Memory, base: u64, words: &[u32]) -> bool {
    let mut buf = [0u8; CHUNK];
    let mut done = 0;
    while done < words.len() {
        let at = base + 4 * done as u64;
        let n = chunk_len(at).min(4 * (words.len() - done));
        if mem.read(at, &mut buf[..n]).is_err() {
            return false;
        }
        let same = buf[..n]
            .chunks_exact(4)
            .zip(&words[done..])
            .all(|(b, w)| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) == *w);
        if !same {
            return false;
        }
        done += n / 4;
    }
    true
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
    /// False once a read ahead failed: `words` ends at an unreadable page.
    readable: bool,
    dense: Vec<Option<Slot>>,
    sparse: HashMap<u64, Slot>,
    /// A decode depended on memory being unreadable: do not cache.
    partial: bool,
}

impl<'m> Code<'m> {
    pub(crate) fn new(mem: &'m dyn Memory, isa: Isa, base: u64, seed: Option<Cached>) -> Self {
        let (words, dense) = seed.map_or((Vec::new(), Vec::new()), |c| (c.words, c.dense));
        Code {
            mem,
            isa,
            base,
            words,
            readable: true,
            dense,
            sparse: HashMap::new(),
            partial: false,
        }
    }

    /// The decode worth caching, if any.
    pub(crate) fn into_cached(self) -> Option<Cached> {
        (!self.partial && !self.words.is_empty() && self.dense.len() <= CACHE_SLOTS).then_some(
            Cached {
                words: self.words,
                dense: self.dense,
            },
        )
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
                let i = self.decode_dense(k, pc)?;
                if self.dense.len() <= k {
                    self.dense.resize(k + 1, None);
                }
                self.dense[k] = Some(Slot::new(i));
            }
            return self.dense[k].as_ref().ok_or(ExecFault::Internal);
        }
        if !self.sparse.contains_key(&pc) {
            let i = self.decode_at(pc)?;
            self.sparse.insert(pc, Slot::new(i));
        }
        self.sparse.get(&pc).ok_or(ExecFault::Internal)
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
