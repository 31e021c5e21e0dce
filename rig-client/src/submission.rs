//! Submissions: the parts of one value's work, built once and submitted any number of times.
//!
//! This module owns the builder ([`Submission`]) and the checks that need no device state:
//! an `after` index must be below its own, a copy never goes on `COMPUTE:0`, a launch's
//! grid, group, shared memory and parameters must suit its kernel, and its typed arguments
//! must all be set (the "never" answers of room, `docs/client.md`). A submission remembers
//! the first refusal, its one error channel ([`Submission::refused`]), and
//! [`crate::Device::submit`] returns it, so that building stays infallible and chainable.
//! How parts become packets is `place`'s business.

use std::sync::OnceLock;

use crate::args::ArgError;
use crate::buffer::Buffer;
use crate::error::Never;
use crate::image::Kernel;
use crate::point::Point;
use crate::types::{Access, CopyBox, Queue};

/// A buffer a launch names among its parameters: the buffer's GPU address is added to the
/// 8 bytes (little-endian) at parameter byte `at`, which hold an offset into the buffer.
#[derive(Debug, Clone)]
pub struct Ref {
    pub(crate) buffer: Buffer,
    pub(crate) at: usize,
    pub(crate) access: Access,
}

impl Ref {
    /// A buffer the launch only reads, named at parameter byte `at`.
    pub fn read(buffer: &Buffer, at: usize) -> Ref {
        Ref {
            buffer: buffer.clone(),
            at,
            access: Access::Read,
        }
    }

    /// A buffer the launch may write, named at parameter byte `at`.
    pub fn write(buffer: &Buffer, at: usize) -> Ref {
        Ref {
            buffer: buffer.clone(),
            at,
            access: Access::Write,
        }
    }
}

/// A launch of a kernel, built step by step and added with [`Submission::launch`]: its
/// grid, its parameter bytes, the buffers named among them and its dynamic LDS.
///
/// [`Launch::new`] starts the raw form, whose parameter bytes the program writes itself
/// ([`Launch::params`], [`Launch::refs`]); [`crate::Args::launch`] makes one from typed
/// arguments, checked against the kernel's parameters.
///
/// ```no_run
/// # use rig_client::*;
/// # fn demo(x: &Buffer, y: &Buffer, add: &Kernel) -> Submission {
/// Submission::new().launch(
///     Launch::new(add, [4, 1, 1], [256, 1, 1])
///         .params(&[0; 16])
///         .refs(&[Ref::read(x, 0), Ref::write(y, 8)]),
/// )
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Launch {
    pub(crate) kernel: Kernel,
    /// The explicit parameters, refs' addresses not yet added.
    pub(crate) params: Vec<u8>,
    pub(crate) refs: Vec<Ref>,
    pub(crate) groups: [u32; 3],
    pub(crate) threads: [u32; 3],
    pub(crate) shared: u32,
    /// Why typed arguments cannot launch (a parameter not set): the submission's refusal.
    pub(crate) unset: Option<ArgError>,
}

impl Launch {
    /// A launch of `kernel` over `groups` work-groups of `threads` work-items each, along
    /// x, y and z, with no parameter bytes, no buffers and no dynamic LDS yet.
    pub fn new(kernel: &Kernel, groups: [u32; 3], threads: [u32; 3]) -> Launch {
        Launch {
            kernel: kernel.clone(),
            params: Vec::new(),
            refs: Vec::new(),
            groups,
            threads,
            shared: 0,
            unset: None,
        }
    }

    /// The kernel's explicit argument bytes (at least [`Kernel::params`] of them).
    pub fn params(mut self, bytes: &[u8]) -> Launch {
        self.params = bytes.to_vec();
        self
    }

    /// Adds buffers named among the parameters: each ref adds its buffer's GPU address to
    /// the 8 bytes at its position.
    pub fn refs(mut self, refs: &[Ref]) -> Launch {
        self.refs.extend_from_slice(refs);
        self
    }

    /// `bytes` of local data share per group beyond the kernel's own (dynamic LDS).
    pub fn shared(mut self, bytes: u32) -> Launch {
        self.shared = bytes;
        self
    }
}

/// A copy of bytes (a box of one row is a linear copy).
#[derive(Debug, Clone)]
pub(crate) struct Copy {
    pub src: Buffer,
    pub src_offset: u64,
    pub dst: Buffer,
    pub dst_offset: u64,
    pub shape: CopyBox,
}

/// A fill of bytes with one byte value.
#[derive(Debug, Clone)]
pub(crate) struct Fill {
    pub dst: Buffer,
    pub offset: u64,
    pub bytes: u64,
    pub byte: u8,
}

/// What a part does.
#[derive(Debug, Clone)]
pub(crate) enum What {
    Words(Vec<u32>),
    Launch(Launch),
    Copy(Copy),
    Fill(Fill),
}

/// One part: what it does, its queue, and the parts of the other queue it runs after.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub queue: Queue,
    pub what: What,
    pub after: Vec<usize>,
}

/// The work of one value: parts on `COMPUTE:0` and `COPY:0`, in the order added, and
/// points of other devices to wait for.
///
/// Parts are numbered from 0 in the order added, across both queues; [`Submission::after`]
/// names earlier parts by those numbers. Parts of one queue run in order; a part runs after
/// the parts of the other queue its `after` names, and may otherwise run beside them.
///
/// ```no_run
/// # use rig_client::*;
/// # fn demo(x: &Buffer, y: &Buffer, add: &Kernel) {
/// let s = Submission::new()
///     .copy(x, 0, y, 0, 4096)                   // part 0, COPY:0
///     .launch(
///         Launch::new(add, [4, 1, 1], [256, 1, 1])
///             .params(&[0; 16])
///             .refs(&[Ref::read(x, 0), Ref::write(y, 8)]),
///     )                                         // part 1, COMPUTE:0
///     .after(&[0]);                             // the launch reads what the copy wrote
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Submission {
    pub(crate) parts: Vec<Part>,
    pub(crate) waits: Vec<Point>,
    /// The first refusal found while building.
    pub(crate) never: Option<Never>,
    /// The packets of the parts, made at the first submit.
    pub(crate) compiled: OnceLock<crate::place::Compiled>,
}

impl Submission {
    /// An empty submission; submitted as is, it releases its value once the previous one
    /// is reached.
    pub fn new() -> Submission {
        Submission::default()
    }

    /// Its parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// True iff it has no parts.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The reason the device never runs it, if building found one: the first, which
    /// [`crate::Device::submit`] returns as [`crate::Error::Never`].
    pub fn refused(&self) -> Option<&Never> {
        self.never.as_ref()
    }

    fn refuse(&mut self, never: Never) {
        if self.never.is_none() {
            self.never = Some(never);
        }
    }

    fn push(mut self, queue: Queue, what: What) -> Submission {
        self.compiled = OnceLock::new();
        let part = self.parts.len();
        if let Some(never) = check(part, queue, &what) {
            self.refuse(never);
        }
        self.parts.push(Part {
            queue,
            what,
            after: Vec::new(),
        });
        self
    }

    /// Adds whole packets of `queue`'s kind: PM4 (or AQL, in multiples of 16 words) on
    /// `COMPUTE:0`, SDMA on `COPY:0`. They run as given; rig checks only their length.
    pub fn words(self, queue: Queue, words: &[u32]) -> Submission {
        self.push(queue, What::Words(words.to_vec()))
    }

    /// Adds `launch` on `COMPUTE:0`. A launch of typed arguments not all set is refused
    /// ([`Never::Args`]), as is one its kernel cannot run (its grid, group, LDS or
    /// parameters).
    pub fn launch(mut self, mut launch: Launch) -> Submission {
        if let Some(error) = launch.unset.take() {
            let part = self.parts.len();
            self.refuse(Never::Args { part, error });
        }
        self.push(Queue::Compute, What::Launch(launch))
    }

    /// Adds a copy on `COPY:0` of `bytes` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset`. The ranges must not overlap.
    pub fn copy(
        self,
        src: &Buffer,
        src_offset: u64,
        dst: &Buffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Submission {
        let shape = CopyBox {
            width: bytes,
            rows: 1,
            src_pitch: bytes,
            dst_pitch: bytes,
        };
        self.copy_box(src, src_offset, dst, dst_offset, shape)
    }

    /// Adds a copy on `COPY:0` of a box of rows, from `src` at `src_offset` to `dst` at
    /// `dst_offset`, each side stepping its own pitch from row to row.
    pub fn copy_box(
        self,
        src: &Buffer,
        src_offset: u64,
        dst: &Buffer,
        dst_offset: u64,
        shape: CopyBox,
    ) -> Submission {
        let copy = Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            shape,
        };
        self.push(Queue::Copy, What::Copy(copy))
    }

    /// Adds a fill on `COPY:0` of `bytes` bytes of `dst` at `offset` with `byte`.
    pub fn fill(self, dst: &Buffer, offset: u64, bytes: u64, byte: u8) -> Submission {
        let fill = Fill {
            dst: dst.clone(),
            offset,
            bytes,
            byte,
        };
        self.push(Queue::Copy, What::Fill(fill))
    }

    /// Moves the last part to `queue`. A device runs copies only on `COPY:0` and launches
    /// only on `COMPUTE:0`; a part moved where it does not run is refused at submit.
    pub fn on(mut self, queue: Queue) -> Submission {
        self.compiled = OnceLock::new();
        let Some(last) = self.parts.len().checked_sub(1) else {
            return self;
        };
        self.parts[last].queue = queue;
        if let Some(never) = check(last, queue, &self.parts[last].what) {
            self.refuse(never);
        }
        self
    }

    /// Orders the last part after the parts `earlier` names (parts of the other queue;
    /// parts of its own queue precede it anyway). Each index must be below the part's own.
    pub fn after(mut self, earlier: &[usize]) -> Submission {
        self.compiled = OnceLock::new();
        let Some(last) = self.parts.len().checked_sub(1) else {
            return self;
        };
        for &e in earlier {
            if e >= last {
                self.refuse(Never::AfterNotBelow {
                    part: last,
                    after: e,
                });
            } else if self.parts[e].queue != self.parts[last].queue {
                self.parts[last].after.push(e);
            }
        }
        self
    }

    /// Holds the submission's work back until `point`, a point of another device, is
    /// reached. A point of the submitting device itself is reached by then anyway.
    ///
    /// Where the device's compute queue compares 64-bit words and the point's device came
    /// through the same [`crate::Rig`] on the same GPU, the GPU waits and `submit` returns
    /// at once; otherwise `submit` waits for the point on the host before placing.
    pub fn wait(mut self, point: &Point) -> Submission {
        self.waits.push(point.clone());
        self
    }
}

/// The refusal of a part on `queue` that needs no device state, if any.
fn check(part: usize, queue: Queue, what: &What) -> Option<Never> {
    match (queue, what) {
        (_, What::Words(_)) => None,
        (Queue::Compute, What::Copy(c)) if c.shape.width * c.shape.rows > 0 => {
            Some(Never::CopyOnCompute { part })
        }
        (Queue::Compute, What::Fill(f)) if f.bytes > 0 => Some(Never::CopyOnCompute { part }),
        (Queue::Compute, What::Copy(_) | What::Fill(_)) => None,
        (Queue::Copy, What::Launch(_)) => Some(Never::WrongQueue {
            part,
            queue: Queue::Copy.name(),
            what: "launches",
        }),
        (Queue::Compute, What::Launch(l)) => check_launch(part, l),
        (Queue::Copy, What::Copy(c)) => check_copy(part, c),
        (Queue::Copy, What::Fill(f)) => check_fill(part, f),
    }
}

fn check_launch(part: usize, l: &Launch) -> Option<Never> {
    let k = &l.kernel.0;
    if l.groups.contains(&0) || l.threads.contains(&0) {
        return Some(Never::EmptyAxis {
            part,
            groups: l.groups,
            threads: l.threads,
        });
    }
    let threads: u64 = l.threads.iter().map(|&t| u64::from(t)).product();
    if threads > u64::from(k.entry.max_threads) {
        return Some(Never::TooManyThreads {
            part,
            kernel: k.name.clone(),
            threads,
            max: k.entry.max_threads,
        });
    }
    let available = k.lds_bytes.saturating_sub(k.entry.group_segment);
    if l.shared > available {
        return Some(Never::TooMuchShared {
            part,
            kernel: k.name.clone(),
            shared: l.shared,
            available,
        });
    }
    if k.dies > 1 {
        for axis in 0..3 {
            if u64::from(l.groups[axis]) * u64::from(l.threads[axis]) >= 1 << 32 {
                return Some(Never::GridTooLarge { part, axis });
            }
        }
    }
    if l.params.len() < k.entry.params as usize {
        return Some(Never::ShortParams {
            part,
            kernel: k.name.clone(),
            params: l.params.len(),
            explicit: k.entry.params,
        });
    }
    for r in &l.refs {
        if r.at.checked_add(8).is_none_or(|end| end > l.params.len()) {
            return Some(Never::RefOutside {
                part,
                at: r.at,
                params: l.params.len(),
            });
        }
        if r.buffer.0.device_id != k.device_id {
            return Some(Never::OtherDevice { part });
        }
    }
    None
}

fn range(part: usize, what: &'static str, b: &Buffer, offset: u64, bytes: u64) -> Option<Never> {
    let len = b.0.len;
    match offset.checked_add(bytes) {
        Some(end) if end <= len => None,
        end => Some(Never::OutOfBounds {
            part,
            what,
            end: end.unwrap_or(u64::MAX),
            len,
        }),
    }
}

fn check_copy(part: usize, c: &Copy) -> Option<Never> {
    let s = c.shape;
    if s.width == 0 || s.rows == 0 {
        return None;
    }
    if s.rows > 1 && (s.width > s.src_pitch || s.width > s.dst_pitch) {
        return Some(Never::BadBox {
            part,
            width: s.width,
            src_pitch: s.src_pitch,
            dst_pitch: s.dst_pitch,
        });
    }
    let span = |pitch: u64| {
        (s.rows - 1)
            .checked_mul(pitch)
            .and_then(|x| x.checked_add(s.width))
    };
    let (Some(src_span), Some(dst_span)) = (span(s.src_pitch), span(s.dst_pitch)) else {
        return Some(Never::OutOfBounds {
            part,
            what: "the copy",
            end: u64::MAX,
            len: c.src.0.len,
        });
    };
    if let Some(n) = range(part, "the copy's source", &c.src, c.src_offset, src_span) {
        return Some(n);
    }
    if let Some(n) = range(
        part,
        "the copy's destination",
        &c.dst,
        c.dst_offset,
        dst_span,
    ) {
        return Some(n);
    }
    if c.src.0.device_id != c.dst.0.device_id {
        return Some(Never::OtherDevice { part });
    }
    // Overlap by address: the spans of the two sides (conservative for boxes).
    let a = c.src.0.address + c.src_offset;
    let b = c.dst.0.address + c.dst_offset;
    if a < b + dst_span && b < a + src_span {
        return Some(Never::Overlap { part });
    }
    None
}

fn check_fill(part: usize, f: &Fill) -> Option<Never> {
    range(part, "the fill", &f.dst, f.offset, f.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::tests::buffer;
    use crate::image::tests::kernel;

    #[test]
    fn after_must_name_an_earlier_part() {
        let a = buffer(1, 0x10000, 4096);
        let b = buffer(1, 0x20000, 4096);
        let s = Submission::new().copy(&a, 0, &b, 0, 16).after(&[0]);
        assert_eq!(
            s.refused(),
            Some(&Never::AfterNotBelow { part: 0, after: 0 })
        );
        let k = kernel(1, 16, 256, 0);
        let s = Submission::new()
            .copy(&a, 0, &b, 0, 16)
            .launch(Launch::new(&k, [1, 1, 1], [1, 1, 1]).params(&[0; 16]))
            .after(&[0]);
        assert_eq!(s.refused(), None);
        assert_eq!(s.parts[1].after, vec![0]);
    }

    #[test]
    fn copies_never_run_on_compute() {
        let a = buffer(1, 0x10000, 4096);
        let b = buffer(1, 0x20000, 4096);
        let s = Submission::new().copy(&a, 0, &b, 0, 16).on(Queue::Compute);
        assert_eq!(s.refused(), Some(&Never::CopyOnCompute { part: 0 }));
        // A copy of no bytes runs anywhere.
        let s = Submission::new().copy(&a, 0, &b, 0, 0).on(Queue::Compute);
        assert_eq!(s.refused(), None);
        let s = Submission::new().fill(&a, 0, 4, 1).on(Queue::Compute);
        assert_eq!(s.refused(), Some(&Never::CopyOnCompute { part: 0 }));
    }

    #[test]
    fn launches_are_checked_against_their_kernel() {
        let k = kernel(1, 16, 256, 1024);
        let refused = |s: Submission| s.never;
        let l = |params: &[u8], g: [u32; 3], t: [u32; 3], shared: u32| {
            Submission::new().launch(Launch::new(&k, g, t).params(params).shared(shared))
        };
        assert!(matches!(
            refused(l(&[0; 16], [0, 1, 1], [1, 1, 1], 0)),
            Some(Never::EmptyAxis { .. })
        ));
        assert!(matches!(
            refused(l(&[0; 16], [1, 1, 1], [1, 0, 1], 0)),
            Some(Never::EmptyAxis { .. })
        ));
        assert!(matches!(
            refused(l(&[0; 16], [1, 1, 1], [16, 16, 2], 0)),
            Some(Never::TooManyThreads {
                threads: 512,
                max: 256,
                ..
            })
        ));
        assert!(matches!(
            refused(l(&[0; 16], [1, 1, 1], [256, 1, 1], 65536 - 1024 + 1)),
            Some(Never::TooMuchShared {
                available: 64512,
                ..
            })
        ));
        assert_eq!(refused(l(&[0; 16], [1, 1, 1], [256, 1, 1], 64512)), None);
        assert!(matches!(
            refused(l(&[0; 8], [1, 1, 1], [1, 1, 1], 0)),
            Some(Never::ShortParams {
                params: 8,
                explicit: 16,
                ..
            })
        ));
        let x = buffer(1, 0x10000, 64);
        let raw = |r: Ref| Launch::new(&k, [1; 3], [1; 3]).params(&[0; 16]).refs(&[r]);
        let s = Submission::new().launch(raw(Ref::read(&x, 9)));
        assert!(matches!(s.never, Some(Never::RefOutside { at: 9, .. })));
        let other = buffer(2, 0x10000, 64);
        let s = Submission::new().launch(raw(Ref::read(&other, 8)));
        assert!(matches!(s.never, Some(Never::OtherDevice { .. })));
    }

    #[test]
    fn copies_stay_inside_their_buffers_and_do_not_overlap() {
        let a = buffer(1, 0x10000, 4096);
        let b = buffer(1, 0x20000, 4096);
        let s = Submission::new().copy(&a, 4000, &b, 0, 97);
        assert!(matches!(
            s.never,
            Some(Never::OutOfBounds { end: 4097, .. })
        ));
        let s = Submission::new().copy(&a, 0, &a, 100, 101);
        assert_eq!(s.never, Some(Never::Overlap { part: 0 }));
        let s = Submission::new().copy(&a, 0, &a, 100, 100);
        assert_eq!(s.never, None);
        let bx = CopyBox {
            width: 8,
            rows: 4,
            src_pitch: 16,
            dst_pitch: 4,
        };
        let s = Submission::new().copy_box(&a, 0, &b, 0, bx);
        assert!(matches!(s.never, Some(Never::BadBox { .. })));
        let s = Submission::new().fill(&b, 4090, 7, 0);
        assert!(matches!(s.never, Some(Never::OutOfBounds { .. })));
        let s = Submission::new().copy(&a, u64::MAX, &b, 0, 2);
        assert!(matches!(s.never, Some(Never::OutOfBounds { .. })));
    }
}
