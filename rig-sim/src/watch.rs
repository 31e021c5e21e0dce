//! The waits of a GPU's packets and the engine writes that wake them.
//!
//! A wait (WAIT_REG_MEM, POLL_REGMEM, an AQL barrier) watches the host pages behind the words
//! it reads, keyed by the page's address in this process, so the same page mapped in two
//! address spaces (a peer device's timeline word) or twice in one is one key. It sleeps on a
//! futex word of its own. An engine write wakes only the waits watching a page it wrote: a
//! word, a run of words or a copy or fill the pages of the bytes it wrote; a kernel, whose
//! stores are not followed one by one, every page its address space maps writable. So a
//! write in one address space wakes no wait of another unless the two share the page.
//!
//! Besides, each wait re-reads its memory every [`crate::WAIT_POLL`]: that is how it sees
//! writes no engine of this GPU announces (the host's, another GPU's, a mapping of the same
//! memfd made apart from the one the writer used).
//!
//! No wake is lost. A wait registers its pages before its first look at memory and, on each
//! round, reads its futex word before it looks; a write stores first, then bumps the futex
//! word of every wait watching a page it wrote, and wakes it. Either the wait's look sees the
//! store, or the bump comes after the wait read its word, and the wait's sleep returns at
//! once or is woken. A write that finds no wait registered at all skips the table; a fence on
//! both sides orders that look against the wait's registration.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{PAGE, WAIT_POLL};

/// One wait's futex word and the queue it belongs to.
#[derive(Debug)]
struct Watch {
    seq: AtomicU32,
    queue: u32,
}

impl Watch {
    fn wake(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        rig_shm::futex::wake_all(&self.seq);
    }
}

/// The waits of one GPU, by the host page they watch.
#[derive(Debug, Default)]
pub(crate) struct Events {
    by_page: Mutex<HashMap<u64, Vec<Arc<Watch>>>>,
    /// Waits registered now: a write when there are none looks at nothing.
    watching: AtomicUsize,
    /// Waits engine writes woke, in all.
    woken: AtomicU64,
}

impl Events {
    fn table(&self) -> MutexGuard<'_, HashMap<u64, Vec<Arc<Watch>>>> {
        self.by_page.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether no wait is registered: a write just made needs to wake nothing. (The fence
    /// orders the write's store before this look, against a wait's registration before its
    /// look at memory.)
    pub(crate) fn idle(&self) -> bool {
        fence(Ordering::SeqCst);
        self.watching.load(Ordering::SeqCst) == 0
    }

    /// Waits registered now.
    pub(crate) fn watching(&self) -> usize {
        self.watching.load(Ordering::SeqCst)
    }

    /// Waits engine writes have woken so far (each wait once per write that woke it).
    pub(crate) fn woken(&self) -> u64 {
        self.woken.load(Ordering::Relaxed)
    }

    fn insert(t: &mut HashMap<u64, Vec<Arc<Watch>>>, w: &Arc<Watch>, pages: &[u64]) {
        for p in pages {
            t.entry(*p).or_default().push(w.clone());
        }
    }

    fn remove(t: &mut HashMap<u64, Vec<Arc<Watch>>>, w: &Arc<Watch>, pages: &[u64]) {
        for p in pages {
            if let Some(v) = t.get_mut(p) {
                v.retain(|x| !Arc::ptr_eq(x, w));
                if v.is_empty() {
                    t.remove(p);
                }
            }
        }
    }

    /// Wakes every wait watching a page that the host byte ranges `ranges` (`[start, end)`,
    /// what a write wrote) touch.
    pub(crate) fn wake_ranges(&self, ranges: &mut [(u64, u64)]) {
        let mut hit: Vec<Arc<Watch>> = Vec::new();
        {
            let t = self.table();
            if t.is_empty() {
                return;
            }
            let pages: u64 = ranges
                .iter()
                .map(|(s, e)| e.saturating_sub(*s).div_ceil(PAGE) + 1)
                .sum();
            if pages <= t.len() as u64 {
                // Few pages written: look each up.
                for (s, e) in ranges.iter() {
                    let mut p = s & !(PAGE - 1);
                    while p < *e {
                        if let Some(v) = t.get(&p) {
                            hit.extend(v.iter().cloned());
                        }
                        p += PAGE;
                    }
                }
            } else {
                // Many pages written (a copy, a kernel): look each watched page up in them.
                ranges.sort_unstable();
                let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
                for &(s, e) in ranges.iter() {
                    match merged.last_mut() {
                        Some(last) if s <= last.1 => last.1 = last.1.max(e),
                        _ => merged.push((s, e)),
                    }
                }
                for (page, v) in t.iter() {
                    let i = merged.partition_point(|(s, _)| *s < page + PAGE);
                    if i > 0 && merged[i - 1].1 > *page {
                        hit.extend(v.iter().cloned());
                    }
                }
            }
        }
        hit.sort_unstable_by_key(|w| Arc::as_ptr(w) as usize);
        hit.dedup_by(|a, b| Arc::ptr_eq(a, b));
        self.woken.fetch_add(hit.len() as u64, Ordering::Relaxed);
        for w in hit {
            w.wake();
        }
    }

    /// Wakes the waits of queue `queue`, whatever they watch (so that they see its stop).
    pub(crate) fn wake_queue(&self, queue: u32) {
        let mut hit: Vec<Arc<Watch>> = Vec::new();
        for v in self.table().values() {
            hit.extend(v.iter().filter(|w| w.queue == queue).cloned());
        }
        for w in hit {
            w.wake();
        }
    }

    /// Waits until `check` is true (Ok(true)), `stopped` is true (Ok(false)) or `check`
    /// fails, for queue `queue`: sleeping until a write to a page of `pages()` (the host pages
    /// `check` reads, looked up again each round, as a remap may move them), and at most
    /// [`WAIT_POLL`] at a time.
    pub(crate) fn wait_until<E>(
        &self,
        queue: u32,
        pages: &dyn Fn() -> Vec<u64>,
        stopped: &dyn Fn() -> bool,
        mut check: impl FnMut() -> std::result::Result<bool, E>,
    ) -> std::result::Result<bool, E> {
        let w = Arc::new(Watch {
            seq: AtomicU32::new(0),
            queue,
        });
        let mut watched = pages();
        self.watching.fetch_add(1, Ordering::SeqCst);
        Self::insert(&mut self.table(), &w, &watched);
        let r = loop {
            // Registered before this look at memory: a write after it wakes this wait.
            fence(Ordering::SeqCst);
            let seen = w.seq.load(Ordering::SeqCst);
            if stopped() {
                break Ok(false);
            }
            match check() {
                Ok(true) => break Ok(true),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
            rig_shm::futex::wait(&w.seq, seen, Some(WAIT_POLL));
            let now = pages();
            if now != watched {
                let mut t = self.table();
                Self::remove(&mut t, &w, &watched);
                Self::insert(&mut t, &w, &now);
                watched = now;
            }
        };
        Self::remove(&mut self.table(), &w, &watched);
        self.watching.fetch_sub(1, Ordering::SeqCst);
        r
    }
}
