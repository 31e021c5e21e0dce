//! How a copy or a fill on `COPY:0` becomes SDMA packets.
//!
//! The seed's rules (rig_amd.txt, "C functions"):
//! - A *box* (rows of `width` bytes, each side with its own pitch) of two rows or more whose
//!   pitches are multiples of 4 bytes is copied by sub-window packets
//!   (COPY_LINEAR_SUB_WINDOW) of at most `most_rows` rows each, counted in the largest element
//!   of up to 16 bytes that divides its width, both pitches and each side's address modulo 4,
//!   provided the width and pitches fit the packet's fields in those elements and each side's
//!   address modulo 4 plus the width is at most its pitch. The packet's base addresses must be
//!   dword aligned, so each side starts at its address rounded down to 4 bytes, at x = (address
//!   mod 4) / element.
//! - Any other box is linear copies (COPY_LINEAR) of each row, one packet per chunk of the
//!   generation's linear limit ([`crate::gpu::Gpu::linear_copy_bytes`]).
//! - A fill of a byte is a CONSTANT_FILL of its whole dwords, in chunks of that same limit,
//!   plus a linear copy of each unaligned end (at most three bytes) from four bytes of the
//!   argument segment that each hold the byte: the caller writes them and passes their address.
//!
//! The planner yields abstract [`Step`]s without allocating; [`Step::encode`] turns a step
//! into its packet for a GPU's [`Layout`], and [`count_copy`] / [`count_fill`] say how many
//! packets and words a plan takes without building it, which `room` needs. This module does
//! not check that a copy's source and destination ranges are disjoint: the caller's contract.

use crate::gpu::Gpu;
use crate::sdma::{self, ConstFill, CopyLinear, EncodeError, Layout, SubWindow, Surface};
use thiserror::Error;

/// The bounds a plan respects: those of a GPU's SDMA packets, or smaller ones for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes one COPY_LINEAR or CONSTANT_FILL moves.
    pub linear_bytes: u64,
    /// Most rows of one sub-window packet ([`crate::sdma::MOST_ROWS`] on SDMA).
    pub most_rows: u32,
    /// Most elements of a sub-window row.
    pub most_width: u32,
    /// Most elements of a sub-window pitch.
    pub most_pitch: u32,
}

impl Limits {
    /// The limits of SDMA packets of `layout`.
    pub const fn of_layout(layout: Layout) -> Self {
        Self {
            linear_bytes: layout.most_bytes(),
            most_rows: sdma::MOST_ROWS,
            most_width: sdma::MOST_WIDTH,
            most_pitch: layout.most_pitch(),
        }
    }

    /// The limits of `gpu`'s SDMA packets.
    pub fn of(gpu: &Gpu) -> Self {
        Self {
            linear_bytes: gpu.linear_copy_bytes(),
            ..Self::of_layout(Layout::for_gpu(gpu))
        }
    }
}

/// A copy of `rows` rows of `width` bytes between two GPU addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyBox {
    /// Address of the first source byte.
    pub src: u64,
    /// Address of the first destination byte.
    pub dst: u64,
    /// Bytes per row.
    pub width: u64,
    /// Rows.
    pub rows: u64,
    /// Bytes from one source row to the next.
    pub src_pitch: u64,
    /// Bytes from one destination row to the next.
    pub dst_pitch: u64,
}

impl CopyBox {
    /// A copy of `bytes` contiguous bytes: one row.
    pub const fn linear(src: u64, dst: u64, bytes: u64) -> Self {
        Self {
            src,
            dst,
            width: bytes,
            rows: 1,
            src_pitch: bytes,
            dst_pitch: bytes,
        }
    }

    /// Bytes the box copies.
    pub const fn bytes(&self) -> u128 {
        self.width as u128 * self.rows as u128
    }
}

/// A fill of `bytes` bytes at `dst` with the byte `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FillBox {
    /// Address of the first byte filled.
    pub dst: u64,
    /// Bytes filled.
    pub bytes: u64,
    /// The byte written.
    pub value: u8,
    /// Address of four bytes (of the argument segment) that each hold `value`: the source of
    /// the unaligned ends.
    pub pattern: u64,
}

/// Why a copy or fill cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PlanError {
    /// The box or fill runs past the end of the 64-bit address space.
    #[error("the {what} ends past the 64-bit address space")]
    Overflow {
        /// Which side.
        what: &'static str,
    },
    /// The limits allow no packet (a linear limit under 4 bytes, or a zero bound).
    #[error("the packet limits allow no packet: linear bytes under 4 or a zero bound")]
    Limits,
}

/// One SDMA packet of a plan, in plain addresses and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// A COPY_LINEAR of `bytes` bytes.
    Linear {
        /// Source address.
        src: u64,
        /// Destination address.
        dst: u64,
        /// Bytes (1 to the linear limit).
        bytes: u64,
    },
    /// A COPY_LINEAR_SUB_WINDOW of `rows` rows of `width` bytes in elements of
    /// `1 << log2_element` bytes.
    SubWindow {
        /// Address of the first source byte (any alignment the element allows).
        src: u64,
        /// Address of the first destination byte.
        dst: u64,
        /// Bytes per row.
        width: u64,
        /// Rows (1 to `most_rows`).
        rows: u32,
        /// Source pitch in bytes.
        src_pitch: u64,
        /// Destination pitch in bytes.
        dst_pitch: u64,
        /// log2 of the element's bytes, 0 to 4.
        log2_element: u8,
    },
    /// A CONSTANT_FILL of `bytes` bytes (whole aligned dwords) with the dword `value`.
    Fill {
        /// The 4-byte-aligned destination.
        dst: u64,
        /// The dword pattern.
        value: u32,
        /// Bytes, a multiple of 4.
        bytes: u64,
    },
}

/// Packets and words a plan takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    /// SDMA packets.
    pub packets: u64,
    /// 32-bit words of those packets.
    pub words: u64,
}

impl Count {
    // Saturating: a box of absurd size counts as more than any ring holds, never overflows.
    const fn add(self, packets: u64, words_each: usize) -> Self {
        Self {
            packets: self.packets.saturating_add(packets),
            words: self
                .words
                .saturating_add(packets.saturating_mul(words_each as u64)),
        }
    }
}

/// The sub-window element of `b` under `limits`, as log2 of its bytes, or `None` when the
/// seed's rules make the box linear copies of each row.
pub fn window_element(limits: &Limits, b: &CopyBox) -> Option<u8> {
    if b.rows < 2 || b.width == 0 || b.src_pitch & 3 != 0 || b.dst_pitch & 3 != 0 {
        return None;
    }
    let (s4, d4) = (b.src % 4, b.dst % 4);
    let row_end = |m4: u64| m4 as u128 + b.width as u128;
    if row_end(s4) > b.src_pitch as u128 || row_end(d4) > b.dst_pitch as u128 {
        return None;
    }
    // The largest power of two up to 16 dividing all five; 0 is divided by every element.
    let all = b.width | b.src_pitch | b.dst_pitch | s4 | d4 | 16;
    let log2 = all.trailing_zeros() as u8;
    let fits = |bytes: u64, most: u32| bytes >> log2 <= most as u64;
    (fits(b.width, limits.most_width)
        && fits(b.src_pitch, limits.most_pitch)
        && fits(b.dst_pitch, limits.most_pitch))
    .then_some(log2)
}

fn check_limits(limits: &Limits) -> Result<(), PlanError> {
    // Fills move whole dwords a packet, so the linear limit is at least one dword.
    if limits.linear_bytes < 4
        || limits.most_rows == 0
        || limits.most_width == 0
        || limits.most_pitch == 0
    {
        Err(PlanError::Limits)
    } else {
        Ok(())
    }
}

fn check_box(b: &CopyBox) -> Result<(), PlanError> {
    if b.rows == 0 || b.width == 0 {
        return Ok(());
    }
    let end = |addr: u64, pitch: u64| {
        (b.rows as u128 - 1) * pitch as u128 + b.width as u128 + addr as u128 <= 1u128 << 64
    };
    if !end(b.src, b.src_pitch) {
        return Err(PlanError::Overflow { what: "source" });
    }
    if !end(b.dst, b.dst_pitch) {
        return Err(PlanError::Overflow {
            what: "destination",
        });
    }
    Ok(())
}

/// The packets and words copying `b` takes, without planning it.
pub fn count_copy(limits: &Limits, b: &CopyBox) -> Result<Count, PlanError> {
    check_limits(limits)?;
    check_box(b)?;
    if b.rows == 0 || b.width == 0 {
        return Ok(Count::default());
    }
    Ok(match window_element(limits, b) {
        Some(_) => Count::default().add(b.rows.div_ceil(limits.most_rows as u64), SubWindow::WORDS),
        None => Count::default().add(
            b.rows.saturating_mul(b.width.div_ceil(limits.linear_bytes)),
            CopyLinear::WORDS,
        ),
    })
}

/// The packets and words filling `f` takes, without planning it.
pub fn count_fill(limits: &Limits, f: &FillBox) -> Result<Count, PlanError> {
    check_limits(limits)?;
    let (head, whole, tail) = split_fill(f)?;
    let ends = (head > 0) as u64 + (tail > 0) as u64;
    Ok(Count::default()
        .add(ends, CopyLinear::WORDS)
        .add(whole.div_ceil(limits.linear_bytes), ConstFill::WORDS))
}

/// Head bytes (before the first aligned dword), whole-dword bytes, tail bytes of a fill.
fn split_fill(f: &FillBox) -> Result<(u64, u64, u64), PlanError> {
    if f.dst as u128 + f.bytes as u128 > 1u128 << 64 {
        return Err(PlanError::Overflow { what: "fill" });
    }
    let start = f.dst as u128;
    let end = start + f.bytes as u128;
    let first = start.next_multiple_of(4);
    let last = end / 4 * 4;
    if first >= last {
        // No whole dword: one piece of at most three bytes... or up to 6 bytes spanning a
        // dword boundary, which is a head and a tail.
        let head = (first.min(end) - start) as u64;
        return Ok((head, 0, f.bytes - head));
    }
    Ok((
        (first - start) as u64,
        (last - first) as u64,
        (end - last) as u64,
    ))
}

/// The steps copying `b`, in order: an iterator that allocates nothing.
pub fn copy(limits: &Limits, b: &CopyBox) -> Result<CopySteps, PlanError> {
    check_limits(limits)?;
    check_box(b)?;
    let element = window_element(limits, b);
    Ok(CopySteps {
        b: *b,
        limits: *limits,
        element,
        row: 0,
        offset: 0,
        done: b.rows == 0 || b.width == 0,
    })
}

/// The steps of a copy; see [`copy`].
#[derive(Debug, Clone)]
pub struct CopySteps {
    b: CopyBox,
    limits: Limits,
    element: Option<u8>,
    row: u64,
    offset: u64,
    done: bool,
}

impl Iterator for CopySteps {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        if self.done {
            return None;
        }
        let b = &self.b;
        match self.element {
            Some(log2_element) => {
                let rows = (b.rows - self.row).min(self.limits.most_rows as u64);
                let step = Step::SubWindow {
                    src: b.src + self.row * b.src_pitch,
                    dst: b.dst + self.row * b.dst_pitch,
                    width: b.width,
                    rows: rows as u32,
                    src_pitch: b.src_pitch,
                    dst_pitch: b.dst_pitch,
                    log2_element,
                };
                self.row += rows;
                self.done = self.row == b.rows;
                Some(step)
            }
            None => {
                let bytes = (b.width - self.offset).min(self.limits.linear_bytes);
                let step = Step::Linear {
                    src: b.src + self.row * b.src_pitch + self.offset,
                    dst: b.dst + self.row * b.dst_pitch + self.offset,
                    bytes,
                };
                self.offset += bytes;
                if self.offset == b.width {
                    self.offset = 0;
                    self.row += 1;
                    self.done = self.row == b.rows;
                }
                Some(step)
            }
        }
    }
}

/// The steps filling `f`, in order: the head's copy, the dword fills, the tail's copy.
pub fn fill(limits: &Limits, f: &FillBox) -> Result<FillSteps, PlanError> {
    check_limits(limits)?;
    let (head, whole, tail) = split_fill(f)?;
    Ok(FillSteps {
        f: *f,
        linear_bytes: limits.linear_bytes,
        head,
        whole_start: f.dst + head,
        whole,
        done_whole: 0,
        tail,
        stage: 0,
    })
}

/// The steps of a fill; see [`fill`].
#[derive(Debug, Clone)]
pub struct FillSteps {
    f: FillBox,
    linear_bytes: u64,
    head: u64,
    whole_start: u64,
    whole: u64,
    done_whole: u64,
    tail: u64,
    stage: u8,
}

impl Iterator for FillSteps {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            match self.stage {
                0 => {
                    self.stage = 1;
                    if self.head > 0 {
                        return Some(Step::Linear {
                            src: self.f.pattern,
                            dst: self.f.dst,
                            bytes: self.head,
                        });
                    }
                }
                1 => {
                    if self.done_whole < self.whole {
                        // The linear limit is a power of two of at least 4, so chunks stay
                        // whole dwords.
                        let bytes = (self.whole - self.done_whole).min(self.linear_bytes / 4 * 4);
                        let step = Step::Fill {
                            dst: self.whole_start + self.done_whole,
                            value: u32::from_ne_bytes([self.f.value; 4]),
                            bytes,
                        };
                        self.done_whole += bytes;
                        return Some(step);
                    }
                    self.stage = 2;
                }
                2 => {
                    self.stage = 3;
                    if self.tail > 0 {
                        return Some(Step::Linear {
                            src: self.f.pattern,
                            dst: self.f.dst + self.f.bytes - self.tail,
                            bytes: self.tail,
                        });
                    }
                }
                _ => return None,
            }
        }
    }
}

impl Step {
    /// Words the step's packet takes.
    pub const fn words(&self) -> usize {
        match self {
            Self::Linear { .. } => CopyLinear::WORDS,
            Self::SubWindow { .. } => SubWindow::WORDS,
            Self::Fill { .. } => ConstFill::WORDS,
        }
    }

    /// The step's SDMA packet.
    pub fn packet(&self) -> sdma::Packet {
        match *self {
            Self::Linear { src, dst, bytes } => {
                sdma::Packet::CopyLinear(CopyLinear::new(src, dst, bytes))
            }
            Self::Fill { dst, value, bytes } => {
                sdma::Packet::ConstFill(ConstFill::dwords(dst, value, bytes))
            }
            Self::SubWindow {
                src,
                dst,
                width,
                rows,
                src_pitch,
                dst_pitch,
                log2_element,
            } => {
                // Values that do not fit a u32 become u32::MAX, which the encoder refuses.
                let el =
                    |bytes: u64| u32::try_from(bytes >> log2_element.min(4)).unwrap_or(u32::MAX);
                let side = |addr: u64, pitch: u64| {
                    let pitch_el = el(pitch);
                    Surface {
                        address: addr & !3,
                        x: el(addr & 3),
                        y: 0,
                        z: 0,
                        pitch: pitch_el,
                        // One slice: its pitch only has to be valid.
                        slice_pitch: (pitch_el as u64 * rows as u64)
                            .clamp(1, sdma::MOST_SLICE_PITCH as u64)
                            as u32,
                    }
                };
                sdma::Packet::SubWindow(SubWindow {
                    log2_element,
                    src: side(src, src_pitch),
                    dst: side(dst, dst_pitch),
                    width: el(width),
                    height: rows,
                    depth: 1,
                })
            }
        }
    }

    /// Encodes the step's packet for `layout` into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        self.packet().encode(layout, out)
    }
}

/// Encodes `steps` one after another into `out`, returning the words written.
pub fn encode_all(
    layout: Layout,
    steps: impl IntoIterator<Item = Step>,
    out: &mut [u32],
) -> Result<usize, EncodeError> {
    let mut at = 0;
    for s in steps {
        let have = out.len() - at;
        let rest = out.get_mut(at..).ok_or(EncodeError::NoRoom {
            need: s.words(),
            have,
        })?;
        at += s.encode(layout, rest)?;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::of(Gpu::by_name("gfx1100").unwrap())
    }

    #[test]
    fn element_follows_the_seed() {
        let l = limits();
        let b = |src, dst, width, rows, sp, dp| CopyBox {
            src,
            dst,
            width,
            rows,
            src_pitch: sp,
            dst_pitch: dp,
        };
        assert_eq!(window_element(&l, &b(0, 0, 64, 2, 128, 256)), Some(4));
        assert_eq!(window_element(&l, &b(0, 0, 24, 2, 32, 32)), Some(3));
        assert_eq!(window_element(&l, &b(2, 0, 64, 2, 128, 256)), Some(1));
        assert_eq!(window_element(&l, &b(1, 0, 64, 2, 128, 256)), Some(0));
        // One row, a pitch not a multiple of 4, or an address that pushes the row past its
        // pitch: linear copies.
        assert_eq!(window_element(&l, &b(0, 0, 64, 1, 128, 256)), None);
        assert_eq!(window_element(&l, &b(0, 0, 64, 2, 130, 256)), None);
        assert_eq!(window_element(&l, &b(3, 0, 126, 2, 128, 256)), None);
        // A pitch too wide for the field in bytes, but fitting in 16-byte elements.
        let wide = 1u64 << 22;
        assert_eq!(window_element(&l, &b(0, 0, 64, 2, wide, 64)), Some(4));
        assert_eq!(window_element(&l, &b(1, 0, 64, 2, wide, 64)), None);
        // GFX12's narrower pitch field.
        let l12 = Limits::of(Gpu::by_name("gfx1201").unwrap());
        assert_eq!(l12.most_pitch, 1 << 14);
        assert_eq!(window_element(&l12, &b(0, 0, 64, 2, 1 << 19, 64)), None);
    }

    #[test]
    fn fills_split_into_ends_and_dwords() {
        let l = limits();
        let f = FillBox {
            dst: 0x1001,
            bytes: 10,
            value: 0xab,
            pattern: 0x9000,
        };
        let steps: Vec<Step> = fill(&l, &f).unwrap().collect();
        assert_eq!(
            steps,
            [
                Step::Linear {
                    src: 0x9000,
                    dst: 0x1001,
                    bytes: 3
                },
                Step::Fill {
                    dst: 0x1004,
                    value: 0xabab_abab,
                    bytes: 4
                },
                Step::Linear {
                    src: 0x9000,
                    dst: 0x1008,
                    bytes: 3
                },
            ]
        );
        assert_eq!(
            count_fill(&l, &f).unwrap(),
            Count {
                packets: 3,
                words: 19
            }
        );
        let tiny = FillBox { bytes: 2, ..f };
        assert_eq!(fill(&l, &tiny).unwrap().count(), 1);
        let none = FillBox { bytes: 0, ..f };
        assert_eq!(fill(&l, &none).unwrap().count(), 0);
    }

    #[test]
    fn linear_chunks_follow_the_generation() {
        let mut l = limits();
        l.linear_bytes = 4 << 20;
        let b = CopyBox::linear(0, 1 << 40, (9 << 20) + 1);
        let steps: Vec<Step> = copy(&l, &b).unwrap().collect();
        assert_eq!(steps.len(), 3);
        assert_eq!(count_copy(&l, &b).unwrap().packets, 3);
        assert!(copy(&l, &CopyBox::linear(u64::MAX, 0, 2)).is_err());
    }
}
