//! Slabs: the regions small buffers are cut from, so allocating and freeing one makes no
//! round trip to rigd.
//!
//! This module owns the client's sub-allocator, `Pool`: per kind of memory, the slabs
//! rigd granted (each one `Alloc` of [`SLAB_BYTES`], charged to the quota whole), their
//! free pages, the frees that wait for the device to reach a buffer's last use, and when
//! an idle slab goes back, as [`SlabPolicy`] states the policy to programs. It is
//! bookkeeping only: the calls to rigd, the zeroing and the buffers themselves are the
//! device's (`device::control`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rig_proto::RegionId;

use crate::buffer::HostView;
use crate::types::Memory;

/// How a device cuts small buffers from slabs, so that allocating and freeing one makes no
/// round trip to rigd; [`SLABS`] holds the figures.
///
/// - a buffer of at most [`SlabPolicy::most`] bytes, rounded up to whole pages (every
///   buffer starts a page, as rigd's regions do), is cut from a slab of its kind: one
///   region of [`SlabPolicy::slab_bytes`] that rigd granted, charged to the quota whole.
///   Larger buffers, and the slabs themselves, are rigd's regions (one round trip each);
/// - a freed buffer's pages go back to their slab once the device reached the buffer's last
///   use, as a region's free is posted after it;
/// - pages a buffer may have changed (written by the host through it, or named by any
///   submitted work) come back *dirty* and are zeroed before they are cut again (by the
///   host for Pinned and Mapped memory, by a fill on `COPY:0` for Device memory), so a new
///   buffer reads as zero as a new region does. Pages never changed need no zeroing;
/// - a slab no buffer uses is idle. A device keeps at most [`SlabPolicy::idle_slabs`] idle
///   slabs per kind, and gives back (a posted `Free`) one idle for longer than
///   [`SlabPolicy::idle`]; both are checked at each allocation and free of the device, and
///   every idle slab goes back before an allocation reports that memory ran out (then it
///   asks again) and on [`crate::Device::trim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlabPolicy {
    /// The bytes of one slab.
    pub slab_bytes: u64,
    /// The largest buffer (in bytes, once rounded up to whole pages) cut from a slab.
    pub most: u64,
    /// How long a slab stays idle before the device gives it back.
    pub idle: Duration,
    /// How many idle slabs of each kind a device keeps.
    pub idle_slabs: usize,
}

/// The bytes of one slab.
pub(crate) const SLAB_BYTES: u64 = 4 << 20;
/// The largest buffer cut from a slab.
pub(crate) const SLAB_MOST: u64 = 1 << 20;
/// How long a slab stays idle before the device gives it back.
const IDLE: Duration = Duration::from_millis(100);
/// How many idle slabs of each kind a device keeps.
const IDLE_SLABS: usize = 1;
/// The unit buffers are cut in, and their alignment: a page.
const GRAIN: u64 = 4096;

/// The slab policy of this version of the client.
pub const SLABS: SlabPolicy = SlabPolicy {
    slab_bytes: SLAB_BYTES,
    most: SLAB_MOST,
    idle: IDLE,
    idle_slabs: IDLE_SLABS,
};

/// `bytes` rounded up to whole [`GRAIN`]s; `None` past `u64`.
pub(crate) fn rounded(bytes: u64) -> Option<u64> {
    bytes.checked_next_multiple_of(GRAIN)
}

/// The index of a kind among a pool's.
fn kind_index(memory: Memory) -> usize {
    match memory {
        Memory::Device => 0,
        Memory::Pinned => 1,
        Memory::Mapped => 2,
    }
}

/// Free pages of a slab from an offset: how many bytes, and whether they may hold bytes of
/// an earlier buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    len: u64,
    dirty: bool,
}

/// A region rigd granted, and what of it is free.
#[derive(Debug)]
struct Slab {
    region: RegionId,
    address: u64,
    host: Option<HostView>,
    /// Free spans by offset; adjacent spans of the same state are merged.
    free: BTreeMap<u64, Span>,
    /// Buffers cut from it and not yet given back (pending frees included).
    live: u32,
    /// Since when no buffer uses it.
    idle_since: Option<Instant>,
}

impl Slab {
    /// The first `bytes` of free pages, clean ones if `clean`: the offset and whether
    /// the cut may hold old bytes. Spans that together cover the cut are merged.
    fn cut(&mut self, bytes: u64, clean: bool) -> Option<(u64, bool)> {
        let mut run: Option<(u64, u64, bool)> = None; // start, end, dirty
        let mut found = None;
        for (&at, s) in &self.free {
            if clean && s.dirty {
                run = None;
                continue;
            }
            run = match run {
                Some((start, end, d)) if end == at => Some((start, at + s.len, d || s.dirty)),
                _ => Some((at, at + s.len, s.dirty)),
            };
            if let Some((start, end, _)) = run
                && end - start >= bytes
            {
                found = Some(start);
                break;
            }
        }
        let start = found?;
        let end = start + bytes;
        let mut dirty = false;
        // Take every span of the run; put back the end of the last one.
        while let Some((&at, &s)) = self.free.range(start..end).next() {
            self.free.remove(&at);
            dirty |= s.dirty;
            if at + s.len > end {
                self.free.insert(
                    end,
                    Span {
                        len: at + s.len - end,
                        dirty: s.dirty,
                    },
                );
            }
        }
        self.live += 1;
        self.idle_since = None;
        Some((start, dirty))
    }

    /// Gives back `len` bytes at `offset`, merging them with neighbours of the same state.
    fn give(&mut self, offset: u64, len: u64, dirty: bool, now: Instant) {
        let mut at = offset;
        let mut span = Span { len, dirty };
        if let Some((&prev, &p)) = self.free.range(..offset).next_back()
            && prev + p.len == offset
            && p.dirty == dirty
        {
            self.free.remove(&prev);
            at = prev;
            span.len += p.len;
        }
        let end = offset + len;
        if let Some(&n) = self.free.get(&end)
            && n.dirty == dirty
        {
            self.free.remove(&end);
            span.len += n.len;
        }
        self.free.insert(at, span);
        self.live -= 1;
        if self.live == 0 {
            self.idle_since = Some(now);
        }
    }
}

/// A free that waits for the device to reach `value`.
#[derive(Debug)]
struct Pending {
    value: u64,
    kind: usize,
    region: RegionId,
    offset: u64,
    len: u64,
    dirty: bool,
}

/// What a cut gives a new buffer.
#[derive(Debug)]
pub(crate) struct Cut {
    /// The slab's region.
    pub region: RegionId,
    /// The offset in the slab.
    pub offset: u64,
    /// The GPU address of its first byte.
    pub address: u64,
    /// The host's view of it, for Pinned and Mapped memory.
    pub host: Option<HostView>,
    /// True if it may hold bytes of an earlier buffer: the caller zeroes it.
    pub dirty: bool,
}

/// Where a buffer cut from a slab lies, for its free.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub kind: Memory,
    pub region: RegionId,
    pub offset: u64,
    pub len: u64,
}

/// A device's slabs, per kind of memory.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    kinds: [Vec<Slab>; 3],
    pending: Vec<Pending>,
    /// Set once rigd answered Mapped memory with Pinned: Mapped buffers are cut from
    /// Pinned slabs from then on.
    pub mapped_is_pinned: bool,
}

impl Pool {
    /// A cut of `bytes` (whole grains, at most a slab) of `kind` from a slab that has room:
    /// clean pages of any slab first.
    pub(crate) fn cut(&mut self, kind: Memory, bytes: u64) -> Option<Cut> {
        debug_assert!(bytes % GRAIN == 0 && bytes > 0);
        let slabs = &mut self.kinds[kind_index(kind)];
        for clean in [true, false] {
            for s in slabs.iter_mut() {
                if let Some((offset, dirty)) = s.cut(bytes, clean) {
                    return Some(Cut {
                        region: s.region,
                        offset,
                        address: s.address + offset,
                        host: s.host.as_ref().map(|h| HostView {
                            region: h.region.clone(),
                            offset: h.offset + offset as usize,
                        }),
                        dirty,
                    });
                }
            }
        }
        None
    }

    /// Adds a slab rigd granted: `bytes` at `address`, viewed by the host at `host`.
    pub(crate) fn add(
        &mut self,
        kind: Memory,
        region: RegionId,
        address: u64,
        bytes: u64,
        host: Option<HostView>,
    ) {
        let free = BTreeMap::from([(
            0,
            Span {
                len: bytes,
                dirty: false,
            },
        )]);
        self.kinds[kind_index(kind)].push(Slab {
            region,
            address,
            host,
            free,
            live: 0,
            idle_since: Some(Instant::now()),
        });
    }

    /// Frees `piece`, whose last use is `last_use`, once the device reached it
    /// (`reached`); `dirty` if it may hold bytes of its buffer.
    pub(crate) fn free(&mut self, piece: Piece, dirty: bool, last_use: u64, reached: u64) {
        let kind = kind_index(piece.kind);
        if last_use <= reached {
            if let Some(s) = self.kinds[kind]
                .iter_mut()
                .find(|s| s.region == piece.region)
            {
                s.give(piece.offset, piece.len, dirty, Instant::now());
            }
        } else {
            self.pending.push(Pending {
                value: last_use,
                kind,
                region: piece.region,
                offset: piece.offset,
                len: piece.len,
                dirty,
            });
        }
    }

    /// Gives the pieces whose last use is reached back to their slabs.
    pub(crate) fn settle(&mut self, reached: u64) {
        if self.pending.iter().all(|p| p.value > reached) {
            return;
        }
        let now = Instant::now();
        let kinds = &mut self.kinds;
        self.pending.retain(|p| {
            if p.value > reached {
                return true;
            }
            if let Some(s) = kinds[p.kind].iter_mut().find(|s| s.region == p.region) {
                s.give(p.offset, p.len, p.dirty, now);
            }
            false
        });
    }

    /// Takes out the slabs to give back: idle ones past [`IDLE`] or beyond
    /// [`IDLE_SLABS`] of their kind, or every idle one if `all`. Their regions go into
    /// `out`.
    pub(crate) fn reap(&mut self, all: bool, out: &mut Vec<RegionId>) {
        let mut now = None;
        for slabs in &mut self.kinds {
            let idle = slabs.iter().filter(|s| s.idle_since.is_some()).count();
            if idle == 0 {
                continue;
            }
            let now = *now.get_or_insert_with(Instant::now);
            let old = |s: &Slab| {
                s.idle_since
                    .is_some_and(|t| all || now.saturating_duration_since(t) > IDLE)
            };
            let mut keep_idle = idle;
            slabs.retain(|s| {
                if old(s) {
                    keep_idle -= 1;
                    out.push(s.region);
                    false
                } else {
                    true
                }
            });
            // The most recently idle slabs stay.
            while keep_idle > IDLE_SLABS {
                let Some(i) = slabs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.idle_since.map(|t| (t, i)))
                    .min()
                    .map(|(_, i)| i)
                else {
                    break;
                };
                out.push(slabs.swap_remove(i).region);
                keep_idle -= 1;
            }
        }
    }

    /// The slabs held (regions of rigd's), of every kind.
    #[cfg(test)]
    fn slabs(&self) -> usize {
        self.kinds.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn piece(c: &Cut, kind: Memory, len: u64) -> Piece {
        Piece {
            kind,
            region: c.region,
            offset: c.offset,
            len,
        }
    }

    #[test]
    fn a_freed_piece_is_cut_again_and_clean_pages_come_first() {
        let mut p = Pool::default();
        p.add(Memory::Pinned, RegionId(7), 0x10_0000, SLAB_BYTES, None);
        let a = p.cut(Memory::Pinned, GRAIN).unwrap();
        assert_eq!((a.offset, a.address, a.dirty), (0, 0x10_0000, false));
        let b = p.cut(Memory::Pinned, GRAIN).unwrap();
        assert_eq!(b.offset, GRAIN);
        // a comes back dirty: the next cut takes clean pages after b.
        p.free(piece(&a, Memory::Pinned, GRAIN), true, 0, 0);
        let c = p.cut(Memory::Pinned, GRAIN).unwrap();
        assert_eq!((c.offset, c.dirty), (2 * GRAIN, false));
        // Once only a's pages fit, they are cut, dirty.
        let rest = p.cut(Memory::Pinned, SLAB_BYTES - 3 * GRAIN).unwrap();
        assert!(!rest.dirty);
        let d = p.cut(Memory::Pinned, GRAIN).unwrap();
        assert_eq!((d.offset, d.dirty), (0, true));
        assert!(p.cut(Memory::Pinned, GRAIN).is_none());
        assert!(p.cut(Memory::Device, GRAIN).is_none(), "kinds stay apart");
    }

    #[test]
    fn a_cut_spans_clean_and_dirty_neighbours() {
        let mut p = Pool::default();
        p.add(Memory::Device, RegionId(1), 0, 4 * GRAIN, None);
        let cuts: Vec<Cut> = (0..4)
            .map(|_| p.cut(Memory::Device, GRAIN).unwrap())
            .collect();
        for (i, c) in cuts.iter().enumerate() {
            p.free(piece(c, Memory::Device, GRAIN), i % 2 == 0, 0, 0);
        }
        let whole = p.cut(Memory::Device, 4 * GRAIN).unwrap();
        assert_eq!((whole.offset, whole.dirty), (0, true));
    }

    #[test]
    fn a_free_waits_for_the_last_use() {
        let mut p = Pool::default();
        p.add(Memory::Device, RegionId(1), 0, GRAIN, None);
        let a = p.cut(Memory::Device, GRAIN).unwrap();
        p.free(piece(&a, Memory::Device, GRAIN), true, 5, 4);
        assert!(
            p.cut(Memory::Device, GRAIN).is_none(),
            "value 5 is not reached"
        );
        let mut out = Vec::new();
        p.reap(true, &mut out);
        assert!(out.is_empty(), "a slab with a pending free is not idle");
        p.settle(5);
        assert!(p.cut(Memory::Device, GRAIN).unwrap().dirty);
    }

    #[test]
    fn idle_slabs_go_back_beyond_the_kept_count_and_after_the_idle_time() {
        let mut p = Pool::default();
        let mut cuts = Vec::new();
        for r in 0..3 {
            p.add(Memory::Pinned, RegionId(r), r << 32, SLAB_BYTES, None);
            cuts.push(p.cut(Memory::Pinned, SLAB_BYTES).unwrap());
        }
        let mut out = Vec::new();
        p.reap(false, &mut out);
        assert!(out.is_empty(), "no slab is idle");
        for c in &cuts {
            p.free(piece(c, Memory::Pinned, SLAB_BYTES), false, 0, 0);
            // Distinct idle times: the oldest go first.
            std::thread::sleep(Duration::from_millis(1));
        }
        p.reap(false, &mut out);
        assert_eq!(
            out,
            [RegionId(0), RegionId(1)],
            "the latest idle slab stays"
        );
        assert_eq!(p.slabs(), IDLE_SLABS);
        out.clear();
        std::thread::sleep(IDLE + Duration::from_millis(20));
        p.reap(false, &mut out);
        assert_eq!(out, [RegionId(2)]);
        assert_eq!(p.slabs(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64),
        Free(usize, bool, u64),
        Reach(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..=SLAB_MOST).prop_map(Op::Alloc),
            (any::<usize>(), any::<bool>(), 0u64..4).prop_map(|(i, d, v)| Op::Free(i, d, v)),
            (0u64..4).prop_map(Op::Reach),
        ]
    }

    proptest! {
        /// Any order of cuts, frees (now or after work) and progress: live pieces never
        /// overlap and lie in their slab, a cut is dirty whenever a dirty piece's pages
        /// are in it, and everything freed comes back whole.
        #[test]
        fn pieces_never_overlap_and_dirt_is_never_lost(ops in proptest::collection::vec(op(), 1..200)) {
            let mut p = Pool::default();
            let slab = 2 * SLAB_MOST;
            let mut next = 0u64;
            let mut live: Vec<(Cut, u64)> = Vec::new();
            // Bytes of each slab that may hold old data, by (region, page).
            let mut dirt = std::collections::HashSet::new();
            let mut reached = 0u64;
            for op in ops {
                match op {
                    Op::Alloc(bytes) => {
                        let len = rounded(bytes).unwrap();
                        let c = match p.cut(Memory::Device, len) {
                            Some(c) => c,
                            None => {
                                next += 1;
                                p.add(Memory::Device, RegionId(next), next << 40, slab, None);
                                p.cut(Memory::Device, len).unwrap()
                            }
                        };
                        prop_assert_eq!(c.address, (c.region.0 << 40) + c.offset);
                        prop_assert!(c.offset + len <= slab);
                        let pages = (c.offset / GRAIN..(c.offset + len) / GRAIN)
                            .map(|g| (c.region.0, g));
                        let old = pages.clone().any(|k| dirt.contains(&k));
                        prop_assert!(!old || c.dirty, "dirty pages cut as clean");
                        for k in pages {
                            dirt.remove(&k);
                        }
                        for (o, olen) in &live {
                            prop_assert!(
                                o.region != c.region
                                    || o.offset + olen <= c.offset
                                    || c.offset + len <= o.offset,
                                "{:?} overlaps {:?}", c, o
                            );
                        }
                        live.push((c, len));
                    }
                    Op::Free(i, dirty, ahead) if !live.is_empty() => {
                        let (c, len) = live.swap_remove(i % live.len());
                        if dirty {
                            for g in c.offset / GRAIN..(c.offset + len) / GRAIN {
                                dirt.insert((c.region.0, g));
                            }
                        }
                        p.free(piece(&c, Memory::Device, len), dirty, reached + ahead, reached);
                    }
                    Op::Free(..) => {}
                    Op::Reach(by) => {
                        reached += by;
                        p.settle(reached);
                    }
                }
            }
            for (c, len) in live.drain(..) {
                p.free(piece(&c, Memory::Device, len), false, 0, reached);
            }
            p.settle(u64::MAX);
            let mut out = Vec::new();
            p.reap(true, &mut out);
            prop_assert_eq!(out.len() as u64, next, "every slab idle and given back");
        }
    }
}
