//! SDMA packets: what the copy queue reads.
//!
//! SDMA ("system DMA") engines are copy engines beside the GC block. Each reads a ring of
//! 32-bit words from its read position up to the write position a doorbell gives. An SDMA
//! packet starts with a header word holding an opcode in bits 7:0 and a sub-opcode in bits
//! 15:8; bits 31:16 hold fields of the packet, and its length follows from the opcode (a NOP
//! carries its own count). rig's copy queue uses linear copies, sub-window (rectangle) copies,
//! constant fills, fences (a 32-bit write once prior copies are done), traps (an interrupt),
//! memory polls, timestamps and, from SDMA 5 on, GCR requests that write back and invalidate
//! the GPU's caches.
//!
//! The generations differ in field widths, not in packet shapes:
//! - SDMA 4.x (gfx942/gfx950, `vega10_sdma_pkt_open.h`): COPY_LINEAR and CONSTANT_FILL counts
//!   are 22 bits before 4.4.2 and 30 bits from 4.4.2 on; no GCR_REQ.
//! - SDMA 5.x (GFX10, `navi10_sdma_pkt_open.h`): 22-bit counts on 5.0 and 5.1, 30 bits from
//!   5.2; GCR_REQ appears; the sub-window rect_z grows from 11 to 13 bits.
//! - SDMA 6.x (GFX11, `sdma_v6_0_0_pkt_open.h`): 30-bit counts; cache-policy fields appear in
//!   copy packets (rig leaves them 0, the default).
//! - SDMA 7.x (GFX12): Linux's `sdma_v7_0.c` includes the SDMA 6 header, but the sub-window
//!   pitches are 14 bits at bit 16 rather than 19 bits at bit 13 (Mesa's `ac_cmdbuf_sdma.c`).
//!
//! [`Layout`] holds these differences; encoders and [`decode`] take it. Counts of COPY_LINEAR
//! and CONSTANT_FILL, and the sizes of a sub-window, are stored less one, as SDMA 4 and later
//! read them (Linux writes `byte_count - 1`; Mesa `width - 1`, `pitch - 1`).
//!
//! This module owns packet formats only; which packets a copy becomes is
//! [`crate::copy_plan`]'s.

use crate::gpu::{Gpu, IpVersion};
pub use crate::pm4::EncodeError;
use thiserror::Error;

/// Opcode of NOP (`SDMA_OP_NOP`).
pub const OP_NOP: u8 = 0;
/// Opcode of copies (`SDMA_OP_COPY`).
pub const OP_COPY: u8 = 1;
/// Opcode of FENCE (`SDMA_OP_FENCE`).
pub const OP_FENCE: u8 = 5;
/// Opcode of TRAP (`SDMA_OP_TRAP`).
pub const OP_TRAP: u8 = 6;
/// Opcode of POLL_REGMEM (`SDMA_OP_POLL_REGMEM`).
pub const OP_POLL_REGMEM: u8 = 8;
/// Opcode of CONSTANT_FILL (`SDMA_OP_CONST_FILL`).
pub const OP_CONST_FILL: u8 = 11;
/// Opcode of TIMESTAMP (`SDMA_OP_TIMESTAMP`).
pub const OP_TIMESTAMP: u8 = 13;
/// Opcode of GCR_REQ (`SDMA_OP_GCR_REQ`, SDMA 5 and later).
pub const OP_GCR_REQ: u8 = 17;
/// Sub-opcode of a linear copy (`SDMA_SUBOP_COPY_LINEAR`).
pub const SUBOP_COPY_LINEAR: u8 = 0;
/// Sub-opcode of a linear sub-window copy (`SDMA_SUBOP_COPY_LINEAR_SUB_WIND`).
pub const SUBOP_COPY_LINEAR_SUB_WINDOW: u8 = 4;
/// Sub-opcode of TIMESTAMP that writes the global timestamp (`SDMA_SUBOP_TIMESTAMP_GET_GLOBAL`).
pub const SUBOP_TIMESTAMP_GET_GLOBAL: u8 = 2;
/// Sub-opcode of TIMESTAMP that writes the engine's local timestamp.
pub const SUBOP_TIMESTAMP_GET: u8 = 1;

/// The MTYPE of an uncached FENCE write, which Linux's `sdma_v7_0.c` sets (`MTYPE(0x3)`).
pub const FENCE_MTYPE_UC: u8 = 3;

/// The field widths of one SDMA generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The SDMA IP major version: 4 to 7.
    pub major: u8,
    /// Bits of the COPY_LINEAR and CONSTANT_FILL count fields: 22 or 30.
    pub count_bits: u32,
}

impl Layout {
    /// The layout of SDMA IP version `v`. Versions before 4 read their counts differently
    /// and are not supported; they get the SDMA 4 layout.
    pub const fn of(v: IpVersion) -> Self {
        // Narrow counts before 4.4.2 and on 5.0/5.1 (Gpu::linear_copy_bytes asks this).
        let narrow = v.major < 4
            || (v.major == 4 && (v.minor < 4 || (v.minor == 4 && v.stepping < 2)))
            || (v.major == 5 && v.minor <= 1);
        Self {
            major: if v.major < 4 { 4 } else { v.major },
            count_bits: if narrow { 22 } else { 30 },
        }
    }

    /// The layout of `gpu`'s SDMA engines.
    pub const fn for_gpu(gpu: &Gpu) -> Self {
        Self::of(gpu.sdma)
    }

    /// The most bytes one COPY_LINEAR or CONSTANT_FILL packet moves: 4 MiB or 1 GiB.
    pub const fn most_bytes(self) -> u64 {
        1 << self.count_bits
    }

    /// The most bytes of a ring its queue registers allow: 8 GiB, but 16 MiB on SDMA 4,
    /// whose one queue keeps the ring it opens with.
    pub const fn most_ring(self) -> u64 {
        if self.major == 4 { 16 << 20 } else { 8 << 30 }
    }

    /// Whether the engine reads GCR_REQ.
    pub const fn has_gcr(self) -> bool {
        self.major >= 5
    }

    /// Shift and width of the sub-window pitch fields.
    const fn pitch_field(self) -> (u32, u32) {
        if self.major >= 7 { (16, 14) } else { (13, 19) }
    }

    /// The most elements a sub-window row pitch may have.
    pub const fn most_pitch(self) -> u32 {
        1 << self.pitch_field().1
    }

    /// Width of the sub-window rect_z (and src/dst z) fields.
    const fn z_bits(self) -> u32 {
        if self.major >= 5 { 13 } else { 11 }
    }
}

/// The most elements of a sub-window's row (rect_x, 14 bits, stored less one).
pub const MOST_WIDTH: u32 = 1 << 14;
/// The most rows of one sub-window (rect_y, 14 bits, stored less one).
pub const MOST_ROWS: u32 = 1 << 14;
/// The most elements of a sub-window's slice pitch (28 bits, stored less one).
pub const MOST_SLICE_PITCH: u32 = 1 << 28;
/// The largest x or y start offset of a sub-window (14 bits).
pub const MOST_XY: u32 = (1 << 14) - 1;

/// Why words could not be decoded as an SDMA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// No words were given.
    #[error("no words to decode")]
    Empty,
    /// The opcode and sub-opcode are not a packet this module knows on this generation.
    #[error("unknown SDMA {major} opcode {opcode} sub-opcode {sub_op} (header {header:#010x})")]
    UnknownOpcode {
        /// The opcode, bits 7:0.
        opcode: u8,
        /// The sub-opcode, bits 15:8.
        sub_op: u8,
        /// The header word.
        header: u32,
        /// The SDMA generation decoded for.
        major: u8,
    },
    /// The packet runs past the words given.
    #[error("{packet} takes {need} words but only {have} remain")]
    Truncated {
        /// The packet's name.
        packet: &'static str,
        /// Words the packet takes.
        need: usize,
        /// Words given.
        have: usize,
    },
    /// A count field holds a value the packet cannot have.
    #[error("{packet}: count {count:#x} is out of range ({why})")]
    BadCount {
        /// The packet's name.
        packet: &'static str,
        /// The field's value.
        count: u32,
        /// What it must be.
        why: &'static str,
    },
    /// A field the hardware reserves (or rig does not run) is not zero.
    #[error("{packet}: reserved field {field} holds {value:#x}")]
    Reserved {
        /// The packet's name.
        packet: &'static str,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// A field holds a value that means nothing for this packet.
    #[error("{packet}: {field} holds {value:#x}, which {why}")]
    BadValue {
        /// The packet's name.
        packet: &'static str,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Why it is refused.
        why: &'static str,
    },
}

/// NOP: words the engine skips. COUNT (bits 29:16) words of body follow the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nop {
    /// Words the NOP takes, header included: 1 to 0x4000.
    pub words: u32,
}

/// COPY_LINEAR: copy `bytes` bytes from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLinear {
    /// Header bits 31:16 (TMZ, backwards, broadcast and, on SDMA 6, encrypt and CPV): rig
    /// writes 0.
    pub flags: u16,
    /// Bytes copied: 1 to [`Layout::most_bytes`].
    pub bytes: u64,
    /// Body word 2 (swaps and, on SDMA 6, cache policies): rig writes 0.
    pub parameter: u32,
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
}

/// One side of a sub-window copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surface {
    /// The 4-byte-aligned base address (the low two bits are reserved).
    pub address: u64,
    /// Start x, in elements (14 bits).
    pub x: u32,
    /// Start y, in rows (14 bits).
    pub y: u32,
    /// Start z, in slices (11 bits on SDMA 4, 13 from SDMA 5).
    pub z: u32,
    /// Row pitch in elements: 1 to [`Layout::most_pitch`].
    pub pitch: u32,
    /// Slice pitch in elements: 1 to [`MOST_SLICE_PITCH`].
    pub slice_pitch: u32,
}

/// COPY_LINEAR_SUB_WINDOW: copy a `width` x `height` x `depth` box of elements of
/// `1 << log2_element` bytes between two pitched surfaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubWindow {
    /// ELEMENTSIZE (header bits 31:29): log2 of the element's bytes, 0 to 4.
    pub log2_element: u8,
    /// The source.
    pub src: Surface,
    /// The destination.
    pub dst: Surface,
    /// Elements per row: 1 to [`MOST_WIDTH`].
    pub width: u32,
    /// Rows: 1 to [`MOST_ROWS`].
    pub height: u32,
    /// Slices: 1 to 2048 (SDMA 4) or 8192.
    pub depth: u32,
}

/// CONSTANT_FILL: fill `bytes` bytes at `dst` with a 32-bit pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConstFill {
    /// FILLSIZE (header bits 31:30): 2 fills dwords, which is what rig writes.
    pub fill_size: u8,
    /// The 4-byte-aligned destination (dword fills).
    pub dst: u64,
    /// The pattern.
    pub value: u32,
    /// Bytes filled: 1 to [`Layout::most_bytes`].
    pub bytes: u64,
}

/// FENCE: once prior packets' writes are done, write 32 bits at `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fence {
    /// MTYPE (header bits 18:16, SDMA 5 and later), the memory type of the write; SDMA 4
    /// (`vega10_sdma_pkt_open.h`) has no such field, so it must be 0 there.
    pub mtype: u8,
    /// The 4-byte-aligned address.
    pub address: u64,
    /// The value written.
    pub value: u32,
}

/// TRAP: raise an interrupt with a context id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trap {
    /// INT_CONTEXT (bits 27:0).
    pub context: u32,
}

/// POLL_REGMEM: wait until a register or memory word passes a compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollRegMem {
    /// HDP_FLUSH (header bit 26): flush the host data path instead of polling.
    pub hdp_flush: bool,
    /// FUNC (header bits 30:28): the compare, numbered as PM4's.
    pub function: crate::pm4::Compare,
    /// MEM_POLL (header bit 31): poll memory, not a register.
    pub memory: bool,
    /// The 4-byte-aligned address (or register offset).
    pub address: u64,
    /// The reference value.
    pub value: u32,
    /// The mask.
    pub mask: u32,
    /// INTERVAL (bits 15:0 of the last word).
    pub interval: u16,
    /// RETRY_COUNT (bits 27:16): 0xfff retries for good.
    pub retry_count: u16,
}

/// TIMESTAMP: write the engine's 64-bit timestamp at `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// [`SUBOP_TIMESTAMP_GET_GLOBAL`] or [`SUBOP_TIMESTAMP_GET`].
    pub sub_op: u8,
    /// The 8-byte-aligned address.
    pub address: u64,
}

/// GCR_REQ: write back and invalidate caches over an address range (SDMA 5 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcrReq {
    /// The range's base (bits 47:7 kept).
    pub base: u64,
    /// The range's limit (bits 47:7 kept).
    pub limit: u64,
    /// GCR_CONTROL (19 bits), the same bits as PM4's GCR_CNTL ([`crate::pm4::gcr`]).
    pub gcr_control: u32,
    /// VMID (bits 27:24 of the last word).
    pub vmid: u8,
}

/// A decoded SDMA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    /// NOP padding.
    Nop(Nop),
    /// COPY_LINEAR.
    CopyLinear(CopyLinear),
    /// COPY_LINEAR_SUB_WINDOW.
    SubWindow(SubWindow),
    /// CONSTANT_FILL.
    ConstFill(ConstFill),
    /// FENCE.
    Fence(Fence),
    /// TRAP.
    Trap(Trap),
    /// POLL_REGMEM.
    PollRegMem(PollRegMem),
    /// TIMESTAMP.
    Timestamp(Timestamp),
    /// GCR_REQ.
    GcrReq(GcrReq),
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

#[inline]
const fn header(op: u8, sub_op: u8) -> u32 {
    op as u32 | (sub_op as u32) << 8
}

#[inline]
fn room<const N: usize>(out: &mut [u32]) -> Result<&mut [u32; N], EncodeError> {
    let have = out.len();
    out.first_chunk_mut::<N>()
        .ok_or(EncodeError::NoRoom { need: N, have })
}

#[inline]
fn check(
    ok: bool,
    packet: &'static str,
    field: &'static str,
    value: u64,
    why: &'static str,
) -> Result<(), EncodeError> {
    if ok {
        Ok(())
    } else {
        Err(EncodeError::Field {
            packet,
            field,
            value,
            why,
        })
    }
}

#[inline]
const fn lo(v: u64) -> u32 {
    v as u32
}

#[inline]
const fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

impl Nop {
    /// The most words one NOP takes, header included (its COUNT is 14 bits).
    pub const MOST_WORDS: u32 = 0x4000;

    /// The NOP's header word (its body is `words - 1` words the engine skips): for a
    /// writer that stores the header alone into memory already zeroed.
    #[inline]
    pub const fn header(&self) -> u32 {
        header(OP_NOP, 0) | ((self.words.wrapping_sub(1) & 0x3fff) << 16)
    }

    #[inline]
    /// Encodes the NOP into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        let n = self.words as usize;
        check(
            (1..=0x4000).contains(&n),
            "NOP",
            "words",
            n as u64,
            "1 to 0x4000",
        )?;
        let have = out.len();
        let out = out
            .get_mut(..n)
            .ok_or(EncodeError::NoRoom { need: n, have })?;
        out[0] = self.header();
        out[1..].fill(0);
        Ok(n)
    }
}

/// Fills all of `out` with SDMA NOPs; returns its length.
pub fn pad(out: &mut [u32]) -> usize {
    let mut at = 0;
    while at < out.len() {
        let n = (out.len() - at).min(Nop::MOST_WORDS as usize);
        at += Nop { words: n as u32 }.encode(&mut out[at..]).unwrap_or(n);
    }
    out.len()
}

impl CopyLinear {
    /// Words the packet takes.
    pub const WORDS: usize = 7;

    /// A plain copy of `bytes` bytes from `src` to `dst`.
    pub const fn new(src: u64, dst: u64, bytes: u64) -> Self {
        Self {
            flags: 0,
            bytes,
            parameter: 0,
            src,
            dst,
        }
    }

    /// Encodes the packet for `layout` into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        check(
            self.bytes >= 1 && self.bytes <= layout.most_bytes(),
            "COPY_LINEAR",
            "bytes",
            self.bytes,
            "1 to the generation's most bytes a packet",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_COPY, SUBOP_COPY_LINEAR) | (self.flags as u32) << 16,
            (self.bytes - 1) as u32,
            self.parameter,
            lo(self.src),
            hi(self.src),
            lo(self.dst),
            hi(self.dst),
        ];
        Ok(Self::WORDS)
    }
}

impl SubWindow {
    /// Words the packet takes.
    pub const WORDS: usize = 13;

    #[inline]
    /// Encodes the packet for `layout` into `out`, returning the words written.
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "COPY_LINEAR_SUB_WINDOW";
        let (pitch_shift, pitch_bits) = layout.pitch_field();
        let z_most = 1u32 << layout.z_bits();
        check(
            self.log2_element <= 4,
            P,
            "log2_element",
            self.log2_element as u64,
            "0 to 4",
        )?;
        check(
            (1..=MOST_WIDTH).contains(&self.width),
            P,
            "width",
            self.width as u64,
            "1 to 16384 elements",
        )?;
        check(
            (1..=MOST_ROWS).contains(&self.height),
            P,
            "height",
            self.height as u64,
            "1 to 16384 rows",
        )?;
        check(
            (1..=z_most).contains(&self.depth),
            P,
            "depth",
            self.depth as u64,
            "1 to 2^z_bits",
        )?;
        let mut side = [[0u32; 5]; 2];
        for (s, words) in [self.src, self.dst].iter().zip(side.iter_mut()) {
            check(
                s.address & 3 == 0,
                P,
                "address",
                s.address,
                "4-byte aligned",
            )?;
            check(s.x <= MOST_XY, P, "x", s.x as u64, "14 bits")?;
            check(s.y <= MOST_XY, P, "y", s.y as u64, "14 bits")?;
            check(s.z < z_most, P, "z", s.z as u64, "the generation's z bits")?;
            check(
                s.pitch >= 1 && s.pitch <= 1 << pitch_bits,
                P,
                "pitch",
                s.pitch as u64,
                "1 to the generation's most pitch",
            )?;
            check(
                (1..=MOST_SLICE_PITCH).contains(&s.slice_pitch),
                P,
                "slice_pitch",
                s.slice_pitch as u64,
                "1 to 2^28",
            )?;
            *words = [
                lo(s.address),
                hi(s.address),
                s.x | s.y << 16,
                s.z | (s.pitch - 1) << pitch_shift,
                s.slice_pitch - 1,
            ];
        }
        let o = room::<{ Self::WORDS }>(out)?;
        o[0] = header(OP_COPY, SUBOP_COPY_LINEAR_SUB_WINDOW) | (self.log2_element as u32) << 29;
        o[1..6].copy_from_slice(&side[0]);
        o[6..11].copy_from_slice(&side[1]);
        o[11] = (self.width - 1) | (self.height - 1) << 16;
        o[12] = self.depth - 1;
        Ok(Self::WORDS)
    }
}

impl ConstFill {
    /// Words the packet takes.
    pub const WORDS: usize = 5;

    /// A dword fill of `bytes` bytes (a multiple of 4) at `dst` with `value`.
    pub const fn dwords(dst: u64, value: u32, bytes: u64) -> Self {
        Self {
            fill_size: 2,
            dst,
            value,
            bytes,
        }
    }

    /// Encodes the packet for `layout` into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "CONSTANT_FILL";
        check(
            self.fill_size < 4,
            P,
            "fill_size",
            self.fill_size as u64,
            "2 bits",
        )?;
        check(
            self.bytes >= 1 && self.bytes <= layout.most_bytes(),
            P,
            "bytes",
            self.bytes,
            "1 to the generation's most bytes a packet",
        )?;
        if self.fill_size == 2 {
            check(
                self.dst & 3 == 0,
                P,
                "dst",
                self.dst,
                "4-byte aligned for dword fills",
            )?;
            check(self.bytes & 3 == 0, P, "bytes", self.bytes, "whole dwords")?;
        }
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_CONST_FILL, 0) | (self.fill_size as u32) << 30,
            lo(self.dst),
            hi(self.dst),
            self.value,
            (self.bytes - 1) as u32,
        ];
        Ok(Self::WORDS)
    }
}

impl Fence {
    /// Words the packet takes.
    pub const WORDS: usize = 4;

    /// A fence writing `value` at `address`, uncached where the generation has an MTYPE
    /// (as Linux's `sdma_v5_2`/`sdma_v6_0`/`sdma_v7_0` fences are).
    pub const fn new(layout: Layout, address: u64, value: u32) -> Self {
        Self {
            mtype: if layout.major >= 5 { FENCE_MTYPE_UC } else { 0 },
            address,
            value,
        }
    }

    /// Encodes the packet into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        check(
            self.mtype < 8,
            "FENCE",
            "mtype",
            self.mtype as u64,
            "3 bits",
        )?;
        check(
            self.address & 3 == 0,
            "FENCE",
            "address",
            self.address,
            "4-byte aligned",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_FENCE, 0) | (self.mtype as u32) << 16,
            lo(self.address),
            hi(self.address),
            self.value,
        ];
        Ok(Self::WORDS)
    }
}

impl Trap {
    /// Words the packet takes.
    pub const WORDS: usize = 2;

    /// Encodes the packet into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        check(
            self.context < 1 << 28,
            "TRAP",
            "context",
            self.context as u64,
            "28 bits",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [header(OP_TRAP, 0), self.context];
        Ok(Self::WORDS)
    }
}

impl PollRegMem {
    /// Words the packet takes.
    pub const WORDS: usize = 6;

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "POLL_REGMEM";
        check(
            self.retry_count < 1 << 12,
            P,
            "retry_count",
            self.retry_count as u64,
            "12 bits",
        )?;
        if self.memory {
            check(
                self.address & 3 == 0,
                P,
                "address",
                self.address,
                "4-byte aligned",
            )?;
        }
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_POLL_REGMEM, 0)
                | (self.hdp_flush as u32) << 26
                | (self.function as u32) << 28
                | (self.memory as u32) << 31,
            lo(self.address),
            hi(self.address),
            self.value,
            self.mask,
            self.interval as u32 | (self.retry_count as u32) << 16,
        ];
        Ok(Self::WORDS)
    }
}

impl Timestamp {
    /// Words the packet takes.
    pub const WORDS: usize = 3;

    /// A write of the global timestamp at `address`.
    pub const fn global(address: u64) -> Self {
        Self {
            sub_op: SUBOP_TIMESTAMP_GET_GLOBAL,
            address,
        }
    }

    /// Encodes the packet into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "TIMESTAMP";
        check(
            self.sub_op == SUBOP_TIMESTAMP_GET || self.sub_op == SUBOP_TIMESTAMP_GET_GLOBAL,
            P,
            "sub_op",
            self.sub_op as u64,
            "1 (get) or 2 (get global)",
        )?;
        check(
            self.address & 7 == 0,
            P,
            "address",
            self.address,
            "8-byte aligned",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_TIMESTAMP, self.sub_op),
            lo(self.address),
            hi(self.address),
        ];
        Ok(Self::WORDS)
    }
}

const VA_MASK: u64 = 0xffff_ffff_ff80; // bits 47:7

impl GcrReq {
    /// Words the packet takes.
    pub const WORDS: usize = 5;

    /// A request over all memory with GCR control bits `gcr_control` (Linux's
    /// `sdma_v7_0_ring_emit_mem_sync`: base and limit 0, VMID 0).
    pub const fn all(gcr_control: u32) -> Self {
        Self {
            base: 0,
            limit: 0,
            gcr_control,
            vmid: 0,
        }
    }

    #[inline]
    /// Encodes the packet for `layout` into `out`, returning the words written.
    ///
    /// Fields (sdma_v6_0_0_pkt_open.h): word 1 base bits 31:7 in place; word 2 base bits
    /// 47:32 in 15:0 and GCR_CONTROL 15:0 in 31:16; word 3 GCR_CONTROL 18:16 in 2:0 and limit
    /// bits 31:7 in place; word 4 limit bits 47:32 in 15:0 and VMID in 27:24.
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "GCR_REQ";
        check(
            layout.has_gcr(),
            P,
            "sdma major",
            layout.major as u64,
            "GCR_REQ needs SDMA 5+",
        )?;
        check(
            self.base & !VA_MASK == 0,
            P,
            "base",
            self.base,
            "bits 47:7 only",
        )?;
        check(
            self.limit & !VA_MASK == 0,
            P,
            "limit",
            self.limit,
            "bits 47:7 only",
        )?;
        check(
            self.gcr_control < 1 << 19,
            P,
            "gcr_control",
            self.gcr_control as u64,
            "19 bits",
        )?;
        check(self.vmid < 16, P, "vmid", self.vmid as u64, "4 bits")?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_GCR_REQ, 0),
            lo(self.base),
            (hi(self.base) & 0xffff) | (self.gcr_control & 0xffff) << 16,
            (self.gcr_control >> 16) | lo(self.limit),
            (hi(self.limit) & 0xffff) | (self.vmid as u32) << 24,
        ];
        Ok(Self::WORDS)
    }
}

impl Packet {
    #[inline]
    /// Encodes the packet for `layout` into `out`, returning the words written.
    pub fn encode(&self, layout: Layout, out: &mut [u32]) -> Result<usize, EncodeError> {
        match self {
            Self::Nop(p) => p.encode(out),
            Self::CopyLinear(p) => p.encode(layout, out),
            Self::SubWindow(p) => p.encode(layout, out),
            Self::ConstFill(p) => p.encode(layout, out),
            Self::Fence(p) => {
                check(
                    layout.major >= 5 || p.mtype == 0,
                    "FENCE",
                    "mtype",
                    p.mtype as u64,
                    "SDMA 4 has no MTYPE field",
                )?;
                p.encode(out)
            }
            Self::Trap(p) => p.encode(out),
            Self::PollRegMem(p) => p.encode(out),
            Self::Timestamp(p) => p.encode(out),
            Self::GcrReq(p) => p.encode(layout, out),
        }
    }

    /// Words the packet takes.
    pub const fn words(&self) -> usize {
        match self {
            Self::Nop(p) => p.words as usize,
            Self::CopyLinear(_) => CopyLinear::WORDS,
            Self::SubWindow(_) => SubWindow::WORDS,
            Self::ConstFill(_) => ConstFill::WORDS,
            Self::Fence(_) => Fence::WORDS,
            Self::Trap(_) => Trap::WORDS,
            Self::PollRegMem(_) => PollRegMem::WORDS,
            Self::Timestamp(_) => Timestamp::WORDS,
            Self::GcrReq(_) => GcrReq::WORDS,
        }
    }

    /// The packet's words in a new vector: a convenience off the hot path.
    pub fn to_words(&self, layout: Layout) -> Result<Vec<u32>, EncodeError> {
        let mut v = vec![0; self.words()];
        let n = self.encode(layout, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// The packet's name, as the headers spell it.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Nop(_) => "NOP",
            Self::CopyLinear(_) => "COPY_LINEAR",
            Self::SubWindow(_) => "COPY_LINEAR_SUB_WINDOW",
            Self::ConstFill(_) => "CONSTANT_FILL",
            Self::Fence(_) => "FENCE",
            Self::Trap(_) => "TRAP",
            Self::PollRegMem(_) => "POLL_REGMEM",
            Self::Timestamp(_) => "TIMESTAMP",
            Self::GcrReq(_) => "GCR_REQ",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

fn reserved(packet: &'static str, field: &'static str, value: u32) -> Result<(), DecodeError> {
    if value == 0 {
        Ok(())
    } else {
        Err(DecodeError::Reserved {
            packet,
            field,
            value,
        })
    }
}

#[inline]
fn join(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

fn take<'a>(words: &'a [u32], packet: &'static str, need: usize) -> Result<&'a [u32], DecodeError> {
    words.get(..need).ok_or(DecodeError::Truncated {
        packet,
        need,
        have: words.len(),
    })
}

fn count(layout: Layout, packet: &'static str, word: u32) -> Result<u64, DecodeError> {
    if word >> layout.count_bits != 0 {
        return Err(DecodeError::BadCount {
            packet,
            count: word,
            why: "wider than the generation's count field",
        });
    }
    Ok(word as u64 + 1)
}

/// Decodes the packet at the start of `words` as SDMA of `version` reads it, returning it and
/// the words it takes.
///
/// Any word sequence gives a packet or an error naming the problem (unknown opcode with its
/// value, truncated packet, count out of range, reserved field set); it never panics.
pub fn decode(version: IpVersion, words: &[u32]) -> Result<(Packet, usize), DecodeError> {
    decode_with(Layout::of(version), words)
}

/// [`decode`] with the layout already worked out.
pub fn decode_with(layout: Layout, words: &[u32]) -> Result<(Packet, usize), DecodeError> {
    let &h = words.first().ok_or(DecodeError::Empty)?;
    let op = h as u8;
    let sub_op = (h >> 8) as u8;
    let unknown = DecodeError::UnknownOpcode {
        opcode: op,
        sub_op,
        header: h,
        major: layout.major,
    };
    let packet = match (op, sub_op) {
        (OP_NOP, 0) => {
            const P: &str = "NOP";
            reserved(P, "header bits 31:30", h >> 30)?;
            let n = ((h >> 16) & 0x3fff) as usize + 1;
            take(words, P, n)?;
            Packet::Nop(Nop { words: n as u32 })
        }
        (OP_COPY, SUBOP_COPY_LINEAR) => {
            const P: &str = "COPY_LINEAR";
            let p = take(words, P, CopyLinear::WORDS)?;
            Packet::CopyLinear(CopyLinear {
                flags: (h >> 16) as u16,
                bytes: count(layout, P, p[1])?,
                parameter: p[2],
                src: join(p[3], p[4]),
                dst: join(p[5], p[6]),
            })
        }
        (OP_COPY, SUBOP_COPY_LINEAR_SUB_WINDOW) => {
            const P: &str = "COPY_LINEAR_SUB_WINDOW";
            let p = take(words, P, SubWindow::WORDS)?;
            // Header bits 28:16 are TMZ and, on SDMA 5.2+, CPV: rig runs neither.
            reserved(P, "header bits 28:16", (h >> 16) & 0x1fff)?;
            let log2_element = (h >> 29) as u8;
            if log2_element > 4 {
                return Err(DecodeError::BadValue {
                    packet: P,
                    field: "ELEMENTSIZE",
                    value: log2_element as u64,
                    why: "is not 0 to 4 (1 to 16 bytes)",
                });
            }
            let (pitch_shift, pitch_bits) = layout.pitch_field();
            let z_bits = layout.z_bits();
            let surface = |w: &[u32]| -> Result<Surface, DecodeError> {
                reserved(P, "address bits 1:0", w[0] & 3)?;
                reserved(P, "x/y word bits 15:14, 31:30", w[2] & 0xc000_c000)?;
                let z_word = w[3] & ((1 << pitch_shift) - 1);
                reserved(P, "z word bits above z", z_word >> z_bits)?;
                if pitch_shift + pitch_bits < 32 {
                    reserved(
                        P,
                        "pitch word bits above the pitch",
                        w[3] >> (pitch_shift + pitch_bits),
                    )?;
                }
                reserved(P, "slice pitch bits 31:28", w[4] >> 28)?;
                Ok(Surface {
                    address: join(w[0], w[1]),
                    x: w[2] & 0x3fff,
                    y: (w[2] >> 16) & 0x3fff,
                    z: z_word,
                    pitch: ((w[3] >> pitch_shift) & ((1 << pitch_bits) - 1)) + 1,
                    slice_pitch: (w[4] & 0x0fff_ffff) + 1,
                })
            };
            let src = surface(&p[1..6])?;
            let dst = surface(&p[6..11])?;
            reserved(P, "rect word bits 15:14, 31:30", p[11] & 0xc000_c000)?;
            // Bits 31:16 of the last word hold swaps and (SDMA 6) cache policies.
            reserved(P, "last word bits 31:16", p[12] >> 16)?;
            reserved(
                P,
                "rect_z bits above the generation's width",
                (p[12] & 0xffff) >> z_bits,
            )?;
            Packet::SubWindow(SubWindow {
                log2_element,
                src,
                dst,
                width: (p[11] & 0x3fff) + 1,
                height: ((p[11] >> 16) & 0x3fff) + 1,
                depth: (p[12] & ((1 << z_bits) - 1)) + 1,
            })
        }
        (OP_CONST_FILL, 0) => {
            const P: &str = "CONSTANT_FILL";
            let p = take(words, P, ConstFill::WORDS)?;
            // Bits 17:16 are a swap and, on SDMA 7, bit 16 is a compress flag.
            reserved(P, "header bits 29:16", (h >> 16) & 0x3fff)?;
            let fill_size = (h >> 30) as u8;
            let bytes = count(layout, P, p[4])?;
            let dst = join(p[1], p[2]);
            if fill_size == 2 && (dst & 3 != 0 || bytes & 3 != 0) {
                return Err(DecodeError::BadValue {
                    packet: P,
                    field: "dst/count",
                    value: dst,
                    why: "is not whole aligned dwords for a dword fill",
                });
            }
            Packet::ConstFill(ConstFill {
                fill_size,
                dst,
                value: p[3],
                bytes,
            })
        }
        (OP_FENCE, 0) => {
            const P: &str = "FENCE";
            let p = take(words, P, Fence::WORDS)?;
            // Bits 25:19 are cache fields (GCC, SYS, SNP, GPA, L2 policy) on SDMA 5+.
            reserved(P, "header bits 31:19", h >> 19)?;
            if layout.major < 5 {
                reserved(P, "header bits 18:16 (no MTYPE on SDMA 4)", (h >> 16) & 7)?;
            }
            reserved(P, "address bits 1:0", p[1] & 3)?;
            Packet::Fence(Fence {
                mtype: ((h >> 16) & 7) as u8,
                address: join(p[1], p[2]),
                value: p[3],
            })
        }
        (OP_TRAP, 0) => {
            const P: &str = "TRAP";
            let p = take(words, P, Trap::WORDS)?;
            reserved(P, "header bits 31:16", h >> 16)?;
            reserved(P, "INT_CONTEXT bits 31:28", p[1] >> 28)?;
            Packet::Trap(Trap { context: p[1] })
        }
        (OP_POLL_REGMEM, 0) => {
            const P: &str = "POLL_REGMEM";
            let p = take(words, P, PollRegMem::WORDS)?;
            reserved(P, "header bits 25:16, 27", h & 0x0bff_0000)?;
            let f = (h >> 28) & 7;
            let function = match f {
                0 => crate::pm4::Compare::Always,
                1 => crate::pm4::Compare::Less,
                2 => crate::pm4::Compare::LessEqual,
                3 => crate::pm4::Compare::Equal,
                4 => crate::pm4::Compare::NotEqual,
                5 => crate::pm4::Compare::GreaterEqual,
                6 => crate::pm4::Compare::Greater,
                _ => {
                    return Err(DecodeError::BadValue {
                        packet: P,
                        field: "FUNC",
                        value: f as u64,
                        why: "is not a compare (0 to 6)",
                    });
                }
            };
            let memory = h >> 31 == 1;
            if memory {
                reserved(P, "address bits 1:0", p[1] & 3)?;
            }
            reserved(P, "last word bits 31:28", p[5] >> 28)?;
            Packet::PollRegMem(PollRegMem {
                hdp_flush: h >> 26 & 1 == 1,
                function,
                memory,
                address: join(p[1], p[2]),
                value: p[3],
                mask: p[4],
                interval: p[5] as u16,
                retry_count: ((p[5] >> 16) & 0xfff) as u16,
            })
        }
        (OP_TIMESTAMP, SUBOP_TIMESTAMP_GET | SUBOP_TIMESTAMP_GET_GLOBAL) => {
            const P: &str = "TIMESTAMP";
            let p = take(words, P, Timestamp::WORDS)?;
            reserved(P, "header bits 31:16", h >> 16)?;
            reserved(P, "address bits 2:0", p[1] & 7)?;
            Packet::Timestamp(Timestamp {
                sub_op,
                address: join(p[1], p[2]),
            })
        }
        (OP_GCR_REQ, 0) if layout.has_gcr() => {
            const P: &str = "GCR_REQ";
            let p = take(words, P, GcrReq::WORDS)?;
            reserved(P, "header bits 31:16", h >> 16)?;
            reserved(P, "word 1 bits 6:0", p[1] & 0x7f)?;
            reserved(P, "word 3 bits 6:3", p[3] & 0x78)?;
            reserved(P, "word 4 bits 23:16, 31:28", p[4] & 0xf0ff_0000)?;
            Packet::GcrReq(GcrReq {
                base: join(p[1], p[2] & 0xffff),
                limit: join(p[3] & !0x7f, p[4] & 0xffff),
                gcr_control: (p[2] >> 16) | (p[3] & 7) << 16,
                vmid: ((p[4] >> 24) & 0xf) as u8,
            })
        }
        _ => return Err(unknown),
    };
    Ok((packet, packet.words()))
}

/// An iterator over the packets of a word sequence; it stops after the first error.
#[derive(Debug, Clone)]
pub struct Packets<'a> {
    layout: Layout,
    words: &'a [u32],
    at: usize,
    failed: bool,
}

/// The packets of `words` as SDMA of `layout` reads them, each with its first word's index.
pub fn packets(layout: Layout, words: &[u32]) -> Packets<'_> {
    Packets {
        layout,
        words,
        at: 0,
        failed: false,
    }
}

impl Iterator for Packets<'_> {
    type Item = Result<(usize, Packet), (usize, DecodeError)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.words.len() {
            return None;
        }
        let at = self.at;
        match decode_with(self.layout, &self.words[at..]) {
            Ok((p, n)) => {
                self.at += n;
                Some(Ok((at, p)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err((at, e)))
            }
        }
    }
}
