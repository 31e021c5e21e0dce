//! PM4 type-3 packets: what the compute queue of a GPU of one die reads.
//!
//! A compute queue is a ring of 32-bit words in memory. The command processor (CP, the
//! micro-engine "MEC" of the GC block) reads it from its read position up to the write
//! position the doorbell gives, one packet at a time. A PM4 *type-3* packet is a header word
//! and a body: the header holds the packet type (3) in bits 31:30, the body's length less one
//! ("count", so the packet takes count + 2 words) in bits 29:16, the opcode in bits 15:8 and,
//! in bit 1, the shader type (1 for compute). The body's meaning depends on the opcode: set
//! registers (SET_SH_REG), launch a grid (DISPATCH_DIRECT), flush caches (ACQUIRE_MEM), write a
//! value and raise an interrupt once prior work is done (RELEASE_MEM), wait for a memory word
//! (WAIT_REG_MEM, WAIT_REG_MEM64), and so on.
//!
//! This module owns the packets rig's driver writes and its simulator reads: a plain struct
//! per packet, an encoder into a caller's `&mut [u32]` that allocates nothing (the client's
//! submit path runs it), and [`decode`], which returns a typed error for any word sequence it
//! cannot read and never panics. It does not own register offsets ([`crate::regs`]) or the
//! meaning of the cache-control bits beyond naming them per generation ([`gcr`] for GFX10+,
//! [`coher`] for GFX9).
//!
//! Facts come from Linux's `nvd.h` (GFX10-12) and `soc15d.h` (GFX9), and PAL's
//! `gfx9_plus_merged_f32_mec_pm4_packets.h` for WAIT_REG_MEM64, which the kernel names but does
//! not lay out.

use crate::gpu::Generation;
use thiserror::Error;

/// Opcode of NOP (`PACKET3_NOP`, nvd.h).
pub const OP_NOP: u8 = 0x10;
/// Opcode of DISPATCH_DIRECT (`PACKET3_DISPATCH_DIRECT`, nvd.h).
pub const OP_DISPATCH_DIRECT: u8 = 0x15;
/// Opcode of WRITE_DATA (`PACKET3_WRITE_DATA`, nvd.h).
pub const OP_WRITE_DATA: u8 = 0x37;
/// Opcode of WAIT_REG_MEM (`PACKET3_WAIT_REG_MEM`, nvd.h).
pub const OP_WAIT_REG_MEM: u8 = 0x3C;
/// Opcode of INDIRECT_BUFFER (`PACKET3_INDIRECT_BUFFER`, nvd.h).
pub const OP_INDIRECT_BUFFER: u8 = 0x3F;
/// Opcode of COPY_DATA (`PACKET3_COPY_DATA`, nvd.h).
pub const OP_COPY_DATA: u8 = 0x40;
/// Opcode of EVENT_WRITE (`PACKET3_EVENT_WRITE`, nvd.h).
pub const OP_EVENT_WRITE: u8 = 0x46;
/// Opcode of RELEASE_MEM (`PACKET3_RELEASE_MEM`, nvd.h).
pub const OP_RELEASE_MEM: u8 = 0x49;
/// Opcode of ACQUIRE_MEM (`PACKET3_ACQUIRE_MEM`, nvd.h).
pub const OP_ACQUIRE_MEM: u8 = 0x58;
/// Opcode of SET_SH_REG (`PACKET3_SET_SH_REG`, nvd.h).
pub const OP_SET_SH_REG: u8 = 0x76;
/// Opcode of WAIT_REG_MEM64 (`PACKET3_WAIT_REG_MEM64`, nvd.h).
pub const OP_WAIT_REG_MEM64: u8 = 0x93;

/// First absolute dword register offset SET_SH_REG reaches (`PACKET3_SET_SH_REG_START`).
pub const SH_REG_START: u32 = 0x2c00;
/// End (exclusive) of the SET_SH_REG window (`PACKET3_SET_SH_REG_END`).
pub const SH_REG_END: u32 = 0x3000;

/// The largest count a header holds (14 bits, `CP_PACKET_GET_COUNT`).
const MAX_COUNT: u32 = 0x3fff;
/// A NOP whose count is 0x3fff is the header alone (Linux's one-word `ring->funcs->nop`).
const NOP_ONE_WORD_COUNT: u32 = 0x3fff;

/// The header word of a type-3 packet of `opcode` whose whole packet takes `words` words
/// (header included, at least 2), with the compute shader-type bit set.
///
/// Type 3 in bits 31:30, count = `words - 2` in 29:16, opcode in 15:8, bit 1 compute
/// (`PACKET3` and `PACKET3_COMPUTE`, nvd.h). `words` above 0x4001 is masked: callers check.
#[inline]
pub const fn header(opcode: u8, words: usize) -> u32 {
    let count = (words as u32).wrapping_sub(2) & MAX_COUNT;
    (3 << 30) | (count << 16) | ((opcode as u32) << 8) | (1 << 1)
}

/// Why a packet could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// The output buffer is shorter than the packet.
    #[error("the packet takes {need} words but the buffer has room for {have}")]
    NoRoom {
        /// Words the packet takes.
        need: usize,
        /// Words the buffer holds.
        have: usize,
    },
    /// A field's value does not fit the packet or breaks its rules.
    #[error("{packet}: {field} = {value:#x} does not fit the packet ({why})")]
    Field {
        /// The packet's name.
        packet: &'static str,
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What the packet requires.
        why: &'static str,
    },
}

/// Why words could not be decoded as a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// No words were given.
    #[error("no words to decode")]
    Empty,
    /// The header is not of a type-3 packet.
    #[error("header {header:#010x} is a type-{kind} packet; compute queues read type 3 only")]
    PacketType {
        /// The header word.
        header: u32,
        /// Its type, bits 31:30.
        kind: u8,
    },
    /// The opcode is not one this module knows.
    #[error("unknown PM4 opcode {opcode:#04x} (header {header:#010x})")]
    UnknownOpcode {
        /// The opcode, bits 15:8.
        opcode: u8,
        /// The header word.
        header: u32,
    },
    /// The packet runs past the words given.
    #[error("{packet} takes {need} words but only {have} remain")]
    Truncated {
        /// The packet's name.
        packet: &'static str,
        /// Words the header says the packet takes.
        need: usize,
        /// Words given.
        have: usize,
    },
    /// The header's count does not match what the packet takes.
    #[error("{packet} has count {count}, but the packet takes {expected}")]
    BadCount {
        /// The packet's name.
        packet: &'static str,
        /// The header's count (body words less one).
        count: u32,
        /// The counts the packet may have.
        expected: &'static str,
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

// ---------------------------------------------------------------------------------------------
// Packet structs
// ---------------------------------------------------------------------------------------------

/// NOP: words the command processor skips, used to pad a ring.
///
/// A NOP of one word has count 0x3fff; a NOP of n >= 2 words has count n - 2 and a body the
/// CP ignores (this encoder writes zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nop {
    /// Words the NOP takes, header included: 1 to 0x4000.
    pub words: u32,
}

/// SET_SH_REG: write consecutive SH registers (the 0x2c00..0x3000 window, which holds the
/// COMPUTE_* registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetShReg<'a> {
    /// First register, as a dword offset from [`SH_REG_START`] (see [`crate::regs`]).
    pub offset: u16,
    /// Values of registers `offset`, `offset + 1`, ...: at least one.
    pub values: &'a [u32],
}

/// DISPATCH_DIRECT: launch a grid of `dim` workgroups with the COMPUTE_* registers set before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchDirect {
    /// Workgroups along x, y, z (COMPUTE_DIM_X/Y/Z).
    pub dim: [u32; 3],
    /// COMPUTE_DISPATCH_INITIATOR (see [`crate::regs::initiator`]).
    pub initiator: u32,
}

/// What RELEASE_MEM writes (`DATA_SEL`, nvd.h and soc15d.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataSel {
    /// Write nothing.
    None = 0,
    /// The low 32 bits of `data`.
    Low32 = 1,
    /// All 64 bits of `data`.
    Data64 = 2,
    /// The 64-bit GPU clock counter.
    GpuClock = 3,
    /// The 64-bit system (reference) clock counter.
    SysClock = 4,
}

impl DataSel {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Low32,
            2 => Self::Data64,
            3 => Self::GpuClock,
            4 => Self::SysClock,
            _ => return None,
        })
    }

    /// Bytes written at the address: 0, 4 or 8.
    pub const fn bytes(self) -> u64 {
        match self {
            Self::None => 0,
            Self::Low32 => 4,
            _ => 8,
        }
    }
}

/// Whether RELEASE_MEM raises an interrupt (`INT_SEL`, nvd.h; PAL names value 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IntSel {
    /// No interrupt.
    None = 0,
    /// An interrupt and no data write (DATA_SEL must be None).
    Interrupt = 1,
    /// An interrupt once the data write is confirmed.
    AfterWrite = 2,
    /// Write the data, wait for its confirmation, no interrupt.
    WriteConfirm = 3,
}

impl IntSel {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Interrupt,
            2 => Self::AfterWrite,
            3 => Self::WriteConfirm,
            _ => return None,
        })
    }
}

/// EVENT_TYPE of a partial flush of compute work (`CS_PARTIAL_FLUSH`, soc21_enum.h), written
/// with event index 4 by EVENT_WRITE.
pub const EVENT_CS_PARTIAL_FLUSH: u8 = 0x07;
/// EVENT_TYPE of the end-of-pipe event Linux's fences release on
/// (`CACHE_FLUSH_AND_INV_TS_EVENT`, soc21_enum.h), with event index 5.
pub const EVENT_CACHE_FLUSH_AND_INV_TS: u8 = 0x14;
/// EVENT_TYPE of the bottom-of-pipe timestamp event (`BOTTOM_OF_PIPE_TS`, soc21_enum.h).
pub const EVENT_BOTTOM_OF_PIPE_TS: u8 = 0x28;
/// EVENT_INDEX of an end-of-pipe (timestamp) event in RELEASE_MEM.
pub const EVENT_INDEX_EOP: u8 = 5;
/// EVENT_INDEX of a `*_PARTIAL_FLUSH` event in EVENT_WRITE (soc15d.h).
pub const EVENT_INDEX_PARTIAL_FLUSH: u8 = 4;

/// RELEASE_MEM: once the work before it reaches the event, write back/invalidate caches, write
/// `data` (or a clock) at `address` and raise an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseMem {
    /// EVENT_TYPE (bits 5:0 of body word 1).
    pub event_type: u8,
    /// EVENT_INDEX (bits 11:8).
    pub event_index: u8,
    /// Cache actions, bits 24:12 of body word 1 in place: [`gcr`]`::RELEASE_*` on GFX10+,
    /// [`coher`]`::EOP_*` on GFX9.
    pub cache: u32,
    /// CACHE_POLICY (bits 26:25).
    pub cache_policy: u8,
    /// EXECUTE (bit 28).
    pub execute: bool,
    /// DST_SEL (bits 17:16 of body word 2): 0 memory controller, 1 TC/L2.
    pub dst_sel: u8,
    /// INT_SEL (bits 26:24).
    pub int_sel: IntSel,
    /// DATA_SEL (bits 31:29).
    pub data_sel: DataSel,
    /// Where the data goes: 4-byte aligned for 32-bit data, 8-byte for 64-bit.
    pub address: u64,
    /// The value written (its low 32 bits for [`DataSel::Low32`]).
    pub data: u64,
    /// INT_CTXID, handed to the interrupt handler.
    pub int_ctxid: u32,
}

/// How WAIT_REG_MEM compares `(value & mask)` with the reference (`WAIT_REG_MEM_FUNCTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compare {
    /// Always passes.
    Always = 0,
    /// value < reference.
    Less = 1,
    /// value <= reference.
    LessEqual = 2,
    /// value == reference.
    Equal = 3,
    /// value != reference.
    NotEqual = 4,
    /// value >= reference.
    GreaterEqual = 5,
    /// value > reference.
    Greater = 6,
}

impl Compare {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Always,
            1 => Self::Less,
            2 => Self::LessEqual,
            3 => Self::Equal,
            4 => Self::NotEqual,
            5 => Self::GreaterEqual,
            6 => Self::Greater,
            _ => return None,
        })
    }

    /// Whether `(value & mask)` passes against `reference`, compared as unsigned integers.
    pub fn passes(self, value: u64, mask: u64, reference: u64) -> bool {
        let v = value & mask;
        match self {
            Self::Always => true,
            Self::Less => v < reference,
            Self::LessEqual => v <= reference,
            Self::Equal => v == reference,
            Self::NotEqual => v != reference,
            Self::GreaterEqual => v >= reference,
            Self::Greater => v > reference,
        }
    }
}

/// WAIT_REG_MEM: stall the queue until a 32-bit register or memory word passes a compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitRegMem {
    /// The compare (FUNCTION, bits 2:0).
    pub function: Compare,
    /// MEM_SPACE (bits 5:4): true for memory, false for a register.
    pub memory: bool,
    /// OPERATION (bits 7:6): 0 wait, 1 write-wait-write register, 3 preemptable memory wait.
    pub operation: u8,
    /// ENGINE (bits 9:8): 0 ME, 1 PFP.
    pub engine: u8,
    /// A 4-byte-aligned address when `memory`; otherwise the register's dword offset in the
    /// low 32 bits and, for operation 1, the register written in the high 32 bits.
    pub address: u64,
    /// The reference value.
    pub reference: u32,
    /// The mask applied to the polled value.
    pub mask: u32,
    /// POLL_INTERVAL (bits 15:0 of the last word).
    pub poll_interval: u16,
}

/// WAIT_REG_MEM64: stall the queue until an aligned 64-bit memory word passes a compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitRegMem64 {
    /// The compare.
    pub function: Compare,
    /// OPERATION (bits 7:6), as for [`WaitRegMem`].
    pub operation: u8,
    /// The 8-byte-aligned address polled.
    pub address: u64,
    /// The reference value.
    pub reference: u64,
    /// The mask applied to the polled value.
    pub mask: u64,
    /// POLL_INTERVAL.
    pub poll_interval: u16,
}

/// ACQUIRE_MEM: write back and invalidate caches before later work reads memory.
///
/// GFX9 (soc15d.h) takes 7 words with the actions in CP_COHER_CNTL ([`coher`]); GFX10 and later
/// (nvd.h) take 8 words with the actions in GCR_CNTL ([`gcr`]) and CP_COHER_CNTL left 0. The
/// decoder tells them apart by count (5 or 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireMem {
    /// Body word 1: CP_COHER_CNTL bits 30:0 and ENGINE_SEL bit 31.
    pub coher_cntl: u32,
    /// COHER_SIZE (32 bits) then COHER_SIZE_HI (24 bits): [`AcquireMem::ALL`] for everything.
    pub size: u64,
    /// COHER_BASE_LO (32 bits) then COHER_BASE_HI (24 bits).
    pub base: u64,
    /// POLL_INTERVAL.
    pub poll_interval: u16,
    /// GCR_CNTL (19 bits) on GFX10+, `None` for the GFX9 form.
    pub gcr_cntl: Option<u32>,
}

impl AcquireMem {
    /// The size that covers all memory (Linux's `0xffffffff` and `0xffffff`).
    pub const ALL: u64 = 0x00ff_ffff_ffff_ffff;

    /// The GFX9 form over all memory with CP_COHER_CNTL actions `coher_cntl`.
    pub const fn gfx9(coher_cntl: u32) -> Self {
        Self {
            coher_cntl,
            size: Self::ALL,
            base: 0,
            poll_interval: 10,
            gcr_cntl: None,
        }
    }

    /// The form `g` reads, over all memory, invalidating every cache above the L2.
    pub fn above_l2(g: Generation) -> Self {
        crate::hal::hal(g).acquire_above_l2
    }

    /// The form `g` reads, over all memory, invalidating every cache, the L2 after its
    /// write-back: what the first part of a submission on the compute queue follows.
    pub fn all(g: Generation) -> Self {
        crate::hal::hal(g).acquire_all
    }

    /// The GFX10+ form over all memory with GCR_CNTL actions `gcr_cntl`.
    pub const fn gfx10(gcr_cntl: u32) -> Self {
        Self {
            coher_cntl: 0,
            size: Self::ALL,
            base: 0,
            poll_interval: 10,
            gcr_cntl: Some(gcr_cntl),
        }
    }
}

/// WRITE_DATA: write words to memory or registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteData<'a> {
    /// DST_SEL (bits 11:8): 0 register, 1 memory (sync), 2 L2, 5 memory (async).
    pub dst_sel: u8,
    /// WR_ONE_ADDR (bit 16): write every word to the same address.
    pub one_addr: bool,
    /// WR_CONFIRM (bit 20): wait for the write's confirmation.
    pub wr_confirm: bool,
    /// CACHE_POLICY (bits 26:25).
    pub cache_policy: u8,
    /// ENGINE_SEL (bits 31:30): 0 ME, 1 PFP.
    pub engine_sel: u8,
    /// A 4-byte-aligned address, or a register's dword offset for DST_SEL 0.
    pub address: u64,
    /// The words written: at least one.
    pub data: &'a [u32],
}

/// COPY_DATA source (`PACKET3_COPY_DATA__SRC_SEL__*`, soc15d.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CopySrc {
    /// A memory-mapped register (dword offset).
    Register = 0,
    /// Memory.
    Memory = 1,
    /// Memory through the L2.
    TcL2 = 2,
    /// GDS.
    Gds = 3,
    /// A performance counter.
    Perfcounters = 4,
    /// The immediate value in the source address words.
    Immediate = 5,
    /// Atomic return data.
    AtomicReturn = 6,
    /// GDS atomic return data 0.
    GdsAtomicReturn0 = 7,
    /// GDS atomic return data 1.
    GdsAtomicReturn1 = 8,
    /// The 64-bit GPU clock counter: what rig stamps times with.
    GpuClock = 9,
}

impl CopySrc {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Register,
            1 => Self::Memory,
            2 => Self::TcL2,
            3 => Self::Gds,
            4 => Self::Perfcounters,
            5 => Self::Immediate,
            6 => Self::AtomicReturn,
            7 => Self::GdsAtomicReturn0,
            8 => Self::GdsAtomicReturn1,
            9 => Self::GpuClock,
            _ => return None,
        })
    }
}

/// COPY_DATA destination (`PACKET3_COPY_DATA__DST_SEL__*`, soc15d.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CopyDst {
    /// A memory-mapped register.
    Register = 0,
    /// Memory through the L2.
    TcL2 = 2,
    /// GDS.
    Gds = 3,
    /// A performance counter.
    Perfcounters = 4,
    /// Memory.
    Memory = 5,
    /// A memory-mapped register, DC.
    RegisterDc = 6,
}

impl CopyDst {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Register,
            2 => Self::TcL2,
            3 => Self::Gds,
            4 => Self::Perfcounters,
            5 => Self::Memory,
            6 => Self::RegisterDc,
            _ => return None,
        })
    }
}

/// COPY_DATA: copy 32 or 64 bits from a register, memory, an immediate or a clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyData {
    /// SRC_SEL (bits 3:0).
    pub src_sel: CopySrc,
    /// DST_SEL (bits 11:8).
    pub dst_sel: CopyDst,
    /// SRC_CACHE_POLICY (bits 14:13).
    pub src_cache_policy: u8,
    /// COUNT_SEL (bit 16): copy 64 bits, not 32.
    pub count_64: bool,
    /// WR_CONFIRM (bit 20).
    pub wr_confirm: bool,
    /// DST_CACHE_POLICY (bits 26:25).
    pub dst_cache_policy: u8,
    /// ENGINE_SEL (bits 31:30).
    pub engine_sel: u8,
    /// Source address, register offset or immediate value.
    pub src: u64,
    /// Destination address (aligned to the bytes copied) or register offset.
    pub dst: u64,
}

impl CopyData {
    /// A write of the 64-bit GPU clock to memory at `dst`, confirmed: what the queue that
    /// releases a value writes before the release while a profile is taken.
    pub const fn clock_to_memory(dst: u64) -> Self {
        Self {
            src_sel: CopySrc::GpuClock,
            dst_sel: CopyDst::Memory,
            src_cache_policy: 0,
            count_64: true,
            wr_confirm: true,
            dst_cache_policy: 0,
            engine_sel: 0,
            src: 0,
            dst,
        }
    }
}

/// INDIRECT_BUFFER: run the PM4 packets of another buffer, then return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndirectBuffer {
    /// The buffer's 4-byte-aligned address.
    pub address: u64,
    /// IB_SIZE (bits 19:0 of body word 3): the buffer's length in dwords.
    pub size_dw: u32,
    /// CHAIN (bit 20): jump rather than call.
    pub chain: bool,
    /// PRE_ENB / OFFLOAD_POLLING (bit 21).
    pub pre_enable: bool,
    /// VALID (bit 23).
    pub valid: bool,
    /// VMID (bits 27:24).
    pub vmid: u8,
    /// CACHE_POLICY (bits 29:28).
    pub cache_policy: u8,
    /// PRE_RESUME (bit 30).
    pub pre_resume: bool,
    /// PRIV (bit 31).
    pub privileged: bool,
}

/// EVENT_WRITE: send an event down the pipeline, such as a CS partial flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventWrite {
    /// EVENT_TYPE (bits 5:0).
    pub event_type: u8,
    /// EVENT_INDEX (bits 11:8).
    pub event_index: u8,
    /// The 8-byte-aligned address of events that write one (count 2), else `None` (count 0).
    pub address: Option<u64>,
}

/// A decoded PM4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    /// NOP padding.
    Nop(Nop),
    /// SET_SH_REG.
    SetShReg(SetShReg<'a>),
    /// DISPATCH_DIRECT.
    DispatchDirect(DispatchDirect),
    /// RELEASE_MEM.
    ReleaseMem(ReleaseMem),
    /// WAIT_REG_MEM.
    WaitRegMem(WaitRegMem),
    /// WAIT_REG_MEM64.
    WaitRegMem64(WaitRegMem64),
    /// ACQUIRE_MEM.
    AcquireMem(AcquireMem),
    /// WRITE_DATA.
    WriteData(WriteData<'a>),
    /// COPY_DATA.
    CopyData(CopyData),
    /// INDIRECT_BUFFER.
    IndirectBuffer(IndirectBuffer),
    /// EVENT_WRITE.
    EventWrite(EventWrite),
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

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
        if n == 1 {
            out[0] = header(OP_NOP, 2) & !(MAX_COUNT << 16) | (NOP_ONE_WORD_COUNT << 16);
        } else {
            out[0] = header(OP_NOP, n);
            out[1..].fill(0);
        }
        Ok(n)
    }
}

/// Fills all of `out` with NOPs (one if it fits, several for long stretches); returns its
/// length.
pub fn pad(out: &mut [u32]) -> usize {
    let mut at = 0;
    while at < out.len() {
        let n = (out.len() - at).min(0x4000);
        // PANIC: n is in 1..=0x4000 and out[at..] holds n words.
        let written = Nop { words: n as u32 }.encode(&mut out[at..]).unwrap_or(n);
        at += written;
    }
    out.len()
}

impl SetShReg<'_> {
    /// Words the packet takes.
    pub fn words(&self) -> usize {
        2 + self.values.len()
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        let n = self.values.len();
        let window = (SH_REG_END - SH_REG_START) as usize;
        check(
            n >= 1 && n <= window,
            "SET_SH_REG",
            "values",
            n as u64,
            "1 to 0x400 registers",
        )?;
        check(
            self.offset as usize + n <= window,
            "SET_SH_REG",
            "offset",
            self.offset as u64,
            "the registers must lie in the SH window 0x2c00..0x3000",
        )?;
        let need = n + 2;
        let have = out.len();
        let out = out
            .get_mut(..need)
            .ok_or(EncodeError::NoRoom { need, have })?;
        out[0] = header(OP_SET_SH_REG, need);
        out[1] = self.offset as u32;
        out[2..].copy_from_slice(self.values);
        Ok(need)
    }
}

/// Encodes SET_SH_REG of the `N` registers from SH offset `offset` into `out`, returning the
/// words written (`N + 2`): [`SetShReg::encode`] with the length known when compiled, for the
/// submit path.
#[inline]
pub fn set_sh_reg<const N: usize>(
    offset: u16,
    values: [u32; N],
    out: &mut [u32],
) -> Result<usize, EncodeError> {
    let window = (SH_REG_END - SH_REG_START) as usize;
    check(
        N >= 1 && offset as usize + N <= window,
        "SET_SH_REG",
        "offset",
        offset as u64,
        "the registers must lie in the SH window 0x2c00..0x3000",
    )?;
    let have = out.len();
    let (head, rest) = out
        .split_first_chunk_mut::<2>()
        .ok_or(EncodeError::NoRoom { need: N + 2, have })?;
    let body = rest
        .first_chunk_mut::<N>()
        .ok_or(EncodeError::NoRoom { need: N + 2, have })?;
    *head = [header(OP_SET_SH_REG, N + 2), offset as u32];
    *body = values;
    Ok(N + 2)
}

impl DispatchDirect {
    /// Words the packet takes.
    pub const WORDS: usize = 5;

    /// Encodes the packet into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_DISPATCH_DIRECT, Self::WORDS),
            self.dim[0],
            self.dim[1],
            self.dim[2],
            self.initiator,
        ];
        Ok(Self::WORDS)
    }
}

const RELEASE_CACHE_MASK: u32 = 0x01ff_f000;

impl ReleaseMem {
    /// Words the packet takes (8 on GFX9 and GFX10+).
    pub const WORDS: usize = 8;

    /// A release that, at the end of the work before it, writes the caches back as `cache`
    /// says, writes the 64-bit `value` at `address` and raises an interrupt once the write is
    /// confirmed: the release of a value on the compute queue.
    pub const fn timeline(cache: u32, address: u64, value: u64) -> Self {
        Self {
            event_type: EVENT_CACHE_FLUSH_AND_INV_TS,
            event_index: EVENT_INDEX_EOP,
            cache,
            cache_policy: 0,
            execute: false,
            dst_sel: 0,
            int_sel: IntSel::AfterWrite,
            data_sel: DataSel::Data64,
            address,
            data: value,
            int_ctxid: 0,
        }
    }

    /// The cache bits of a release on `g` that write the L2 back, so the host and other
    /// devices read the work's writes once the value is reached.
    pub fn write_back(g: Generation) -> u32 {
        crate::hal::hal(g).release_write_back
    }

    /// Encodes the packet into `out`, returning the words written.
    #[inline]
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "RELEASE_MEM";
        check(
            self.event_type < 64,
            P,
            "event_type",
            self.event_type as u64,
            "6 bits",
        )?;
        check(
            self.event_index < 16,
            P,
            "event_index",
            self.event_index as u64,
            "4 bits",
        )?;
        check(
            self.cache & !RELEASE_CACHE_MASK == 0,
            P,
            "cache",
            self.cache as u64,
            "bits 24:12 only",
        )?;
        check(
            self.cache_policy < 4,
            P,
            "cache_policy",
            self.cache_policy as u64,
            "2 bits",
        )?;
        check(
            self.dst_sel < 4,
            P,
            "dst_sel",
            self.dst_sel as u64,
            "2 bits",
        )?;
        let align = if self.data_sel.bytes() == 8 { 8 } else { 4 };
        check(
            self.address & (align - 1) == 0,
            P,
            "address",
            self.address,
            "aligned to the data written",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_RELEASE_MEM, Self::WORDS),
            self.event_type as u32
                | (self.event_index as u32) << 8
                | self.cache
                | (self.cache_policy as u32) << 25
                | (self.execute as u32) << 28,
            (self.dst_sel as u32) << 16
                | (self.int_sel as u32) << 24
                | (self.data_sel as u32) << 29,
            lo(self.address),
            hi(self.address),
            lo(self.data),
            hi(self.data),
            self.int_ctxid,
        ];
        Ok(Self::WORDS)
    }
}

impl WaitRegMem {
    /// Words the packet takes.
    pub const WORDS: usize = 7;

    /// A wait until the 32-bit word at `address` is at least `value`.
    pub const fn memory_at_least(address: u64, value: u32) -> Self {
        Self {
            function: Compare::GreaterEqual,
            memory: true,
            operation: 0,
            engine: 0,
            address,
            reference: value,
            mask: u32::MAX,
            poll_interval: 4,
        }
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "WAIT_REG_MEM";
        check(
            self.operation < 4 && self.operation != 2,
            P,
            "operation",
            self.operation as u64,
            "0, 1 or 3",
        )?;
        check(
            self.engine < 2,
            P,
            "engine",
            self.engine as u64,
            "0 (ME) or 1 (PFP)",
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
            header(OP_WAIT_REG_MEM, Self::WORDS),
            self.function as u32
                | (self.memory as u32) << 4
                | (self.operation as u32) << 6
                | (self.engine as u32) << 8,
            lo(self.address),
            hi(self.address),
            self.reference,
            self.mask,
            self.poll_interval as u32,
        ];
        Ok(Self::WORDS)
    }
}

impl WaitRegMem64 {
    /// Words the packet takes (PAL's `PM4_MEC_WAIT_REG_MEM64`: nine ordinals).
    pub const WORDS: usize = 9;

    /// A wait until the 64-bit word at `address` is at least `value`, compared unsigned: how
    /// a submission waits for another device's timeline point.
    pub const fn at_least(address: u64, value: u64) -> Self {
        Self {
            function: Compare::GreaterEqual,
            operation: 0,
            address,
            reference: value,
            mask: u64::MAX,
            poll_interval: 4,
        }
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "WAIT_REG_MEM64";
        check(
            self.operation == 0 || self.operation == 3,
            P,
            "operation",
            self.operation as u64,
            "0 or 3 for a memory wait",
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
            header(OP_WAIT_REG_MEM64, Self::WORDS),
            self.function as u32 | 1 << 4 | (self.operation as u32) << 6,
            lo(self.address),
            hi(self.address),
            lo(self.reference),
            hi(self.reference),
            lo(self.mask),
            hi(self.mask),
            self.poll_interval as u32,
        ];
        Ok(Self::WORDS)
    }
}

const COHER_HI_MASK: u64 = 0x00ff_ffff;
const GCR_CNTL_MASK: u32 = 0x7_ffff;

impl AcquireMem {
    /// Words the packet takes: 7 in the GFX9 form, 8 in the GFX10+ form.
    pub const fn words(&self) -> usize {
        if self.gcr_cntl.is_some() { 8 } else { 7 }
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "ACQUIRE_MEM";
        check(
            self.size >> 32 <= COHER_HI_MASK,
            P,
            "size",
            self.size,
            "56 bits",
        )?;
        check(
            self.base >> 32 <= COHER_HI_MASK,
            P,
            "base",
            self.base,
            "56 bits",
        )?;
        let body = [
            self.coher_cntl,
            lo(self.size),
            hi(self.size),
            lo(self.base),
            hi(self.base),
            self.poll_interval as u32,
        ];
        match self.gcr_cntl {
            None => {
                let o = room::<7>(out)?;
                o[0] = header(OP_ACQUIRE_MEM, 7);
                o[1..].copy_from_slice(&body);
                Ok(7)
            }
            Some(gcr) => {
                check(
                    gcr & !GCR_CNTL_MASK == 0,
                    P,
                    "gcr_cntl",
                    gcr as u64,
                    "19 bits",
                )?;
                let o = room::<8>(out)?;
                o[0] = header(OP_ACQUIRE_MEM, 8);
                o[1..7].copy_from_slice(&body);
                o[7] = gcr;
                Ok(8)
            }
        }
    }
}

impl WriteData<'_> {
    /// Words the packet takes.
    pub fn words(&self) -> usize {
        4 + self.data.len()
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "WRITE_DATA";
        let n = self.data.len();
        check(
            (1..=0x3ffd).contains(&n),
            P,
            "data",
            n as u64,
            "1 to 0x3ffd words",
        )?;
        check(
            self.dst_sel < 16,
            P,
            "dst_sel",
            self.dst_sel as u64,
            "4 bits",
        )?;
        check(
            self.cache_policy < 4,
            P,
            "cache_policy",
            self.cache_policy as u64,
            "2 bits",
        )?;
        check(
            self.engine_sel < 4,
            P,
            "engine_sel",
            self.engine_sel as u64,
            "2 bits",
        )?;
        if self.dst_sel != 0 {
            check(
                self.address & 3 == 0,
                P,
                "address",
                self.address,
                "4-byte aligned",
            )?;
        }
        let need = n + 4;
        let have = out.len();
        let out = out
            .get_mut(..need)
            .ok_or(EncodeError::NoRoom { need, have })?;
        out[0] = header(OP_WRITE_DATA, need);
        out[1] = (self.dst_sel as u32) << 8
            | (self.one_addr as u32) << 16
            | (self.wr_confirm as u32) << 20
            | (self.cache_policy as u32) << 25
            | (self.engine_sel as u32) << 30;
        out[2] = lo(self.address);
        out[3] = hi(self.address);
        out[4..].copy_from_slice(self.data);
        Ok(need)
    }
}

impl CopyData {
    /// Words the packet takes.
    pub const WORDS: usize = 6;

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "COPY_DATA";
        check(
            self.src_cache_policy < 4,
            P,
            "src_cache_policy",
            self.src_cache_policy as u64,
            "2 bits",
        )?;
        check(
            self.dst_cache_policy < 4,
            P,
            "dst_cache_policy",
            self.dst_cache_policy as u64,
            "2 bits",
        )?;
        check(
            self.engine_sel < 4,
            P,
            "engine_sel",
            self.engine_sel as u64,
            "2 bits",
        )?;
        if matches!(self.dst_sel, CopyDst::Memory | CopyDst::TcL2) {
            let align = if self.count_64 { 8 } else { 4 };
            check(
                self.dst & (align - 1) == 0,
                P,
                "dst",
                self.dst,
                "aligned to the bytes copied",
            )?;
        }
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_COPY_DATA, Self::WORDS),
            self.src_sel as u32
                | (self.dst_sel as u32) << 8
                | (self.src_cache_policy as u32) << 13
                | (self.count_64 as u32) << 16
                | (self.wr_confirm as u32) << 20
                | (self.dst_cache_policy as u32) << 25
                | (self.engine_sel as u32) << 30,
            lo(self.src),
            hi(self.src),
            lo(self.dst),
            hi(self.dst),
        ];
        Ok(Self::WORDS)
    }
}

impl IndirectBuffer {
    /// Words the packet takes.
    pub const WORDS: usize = 4;

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "INDIRECT_BUFFER";
        check(
            self.address & 3 == 0,
            P,
            "address",
            self.address,
            "4-byte aligned",
        )?;
        check(
            self.size_dw < 1 << 20,
            P,
            "size_dw",
            self.size_dw as u64,
            "20 bits",
        )?;
        check(self.vmid < 16, P, "vmid", self.vmid as u64, "4 bits")?;
        check(
            self.cache_policy < 4,
            P,
            "cache_policy",
            self.cache_policy as u64,
            "2 bits",
        )?;
        let o = room::<{ Self::WORDS }>(out)?;
        *o = [
            header(OP_INDIRECT_BUFFER, Self::WORDS),
            lo(self.address),
            hi(self.address),
            self.size_dw
                | (self.chain as u32) << 20
                | (self.pre_enable as u32) << 21
                | (self.valid as u32) << 23
                | (self.vmid as u32) << 24
                | (self.cache_policy as u32) << 28
                | (self.pre_resume as u32) << 30
                | (self.privileged as u32) << 31,
        ];
        Ok(Self::WORDS)
    }
}

impl EventWrite {
    /// Words the packet takes: 2, or 4 with an address.
    pub const fn words(&self) -> usize {
        if self.address.is_some() { 4 } else { 2 }
    }

    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        const P: &str = "EVENT_WRITE";
        check(
            self.event_type < 64,
            P,
            "event_type",
            self.event_type as u64,
            "6 bits",
        )?;
        check(
            self.event_index < 16,
            P,
            "event_index",
            self.event_index as u64,
            "4 bits",
        )?;
        let word1 = self.event_type as u32 | (self.event_index as u32) << 8;
        match self.address {
            None => {
                let o = room::<2>(out)?;
                *o = [header(OP_EVENT_WRITE, 2), word1];
                Ok(2)
            }
            Some(a) => {
                check(a & 7 == 0, P, "address", a, "8-byte aligned")?;
                let o = room::<4>(out)?;
                *o = [header(OP_EVENT_WRITE, 4), word1, lo(a), hi(a)];
                Ok(4)
            }
        }
    }
}

impl Packet<'_> {
    #[inline]
    /// Encodes the packet into `out`, returning the words written.
    pub fn encode(&self, out: &mut [u32]) -> Result<usize, EncodeError> {
        match self {
            Self::Nop(p) => p.encode(out),
            Self::SetShReg(p) => p.encode(out),
            Self::DispatchDirect(p) => p.encode(out),
            Self::ReleaseMem(p) => p.encode(out),
            Self::WaitRegMem(p) => p.encode(out),
            Self::WaitRegMem64(p) => p.encode(out),
            Self::AcquireMem(p) => p.encode(out),
            Self::WriteData(p) => p.encode(out),
            Self::CopyData(p) => p.encode(out),
            Self::IndirectBuffer(p) => p.encode(out),
            Self::EventWrite(p) => p.encode(out),
        }
    }

    /// Words the packet takes.
    pub fn words(&self) -> usize {
        match self {
            Self::Nop(p) => p.words as usize,
            Self::SetShReg(p) => p.words(),
            Self::DispatchDirect(_) => DispatchDirect::WORDS,
            Self::ReleaseMem(_) => ReleaseMem::WORDS,
            Self::WaitRegMem(_) => WaitRegMem::WORDS,
            Self::WaitRegMem64(_) => WaitRegMem64::WORDS,
            Self::AcquireMem(p) => p.words(),
            Self::WriteData(p) => p.words(),
            Self::CopyData(_) => CopyData::WORDS,
            Self::IndirectBuffer(_) => IndirectBuffer::WORDS,
            Self::EventWrite(p) => p.words(),
        }
    }

    /// The packet's words in a new vector: a convenience off the hot path.
    pub fn to_words(&self) -> Result<Vec<u32>, EncodeError> {
        let mut v = vec![0; self.words()];
        let n = self.encode(&mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// The packet's name, as the headers spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Nop(_) => "NOP",
            Self::SetShReg(_) => "SET_SH_REG",
            Self::DispatchDirect(_) => "DISPATCH_DIRECT",
            Self::ReleaseMem(_) => "RELEASE_MEM",
            Self::WaitRegMem(_) => "WAIT_REG_MEM",
            Self::WaitRegMem64(_) => "WAIT_REG_MEM64",
            Self::AcquireMem(_) => "ACQUIRE_MEM",
            Self::WriteData(_) => "WRITE_DATA",
            Self::CopyData(_) => "COPY_DATA",
            Self::IndirectBuffer(_) => "INDIRECT_BUFFER",
            Self::EventWrite(_) => "EVENT_WRITE",
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

fn fixed(
    packet: &'static str,
    count: u32,
    words: usize,
    expected: &'static str,
) -> Result<(), DecodeError> {
    if count as usize + 2 == words {
        Ok(())
    } else {
        Err(DecodeError::BadCount {
            packet,
            count,
            expected,
        })
    }
}

#[inline]
fn join(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

/// Decodes the packet at the start of `words`, returning it and the words it takes.
///
/// Any word sequence gives a packet or an error naming the problem: a header that is not type
/// 3, an unknown opcode (with its value), a packet longer than the words given, a count the
/// packet cannot have, or a reserved field that is not zero. It never panics.
pub fn decode(words: &[u32]) -> Result<(Packet<'_>, usize), DecodeError> {
    let &h = words.first().ok_or(DecodeError::Empty)?;
    let kind = (h >> 30) as u8;
    if kind != 3 {
        return Err(DecodeError::PacketType { header: h, kind });
    }
    let opcode = (h >> 8) as u8;
    let count = (h >> 16) & MAX_COUNT;
    let name = match opcode {
        OP_NOP => "NOP",
        OP_SET_SH_REG => "SET_SH_REG",
        OP_DISPATCH_DIRECT => "DISPATCH_DIRECT",
        OP_RELEASE_MEM => "RELEASE_MEM",
        OP_WAIT_REG_MEM => "WAIT_REG_MEM",
        OP_WAIT_REG_MEM64 => "WAIT_REG_MEM64",
        OP_ACQUIRE_MEM => "ACQUIRE_MEM",
        OP_WRITE_DATA => "WRITE_DATA",
        OP_COPY_DATA => "COPY_DATA",
        OP_INDIRECT_BUFFER => "INDIRECT_BUFFER",
        OP_EVENT_WRITE => "EVENT_WRITE",
        _ => return Err(DecodeError::UnknownOpcode { opcode, header: h }),
    };
    // Bit 0 is the predicate bit (rig sets no predication); bits 7:2 are reserved. Bit 1,
    // the shader type, may be either.
    reserved(name, "header predicate (bit 0)", h & 1)?;
    reserved(name, "header bits 7:2", h & 0xfc)?;
    let n = if opcode == OP_NOP && count == NOP_ONE_WORD_COUNT {
        1
    } else {
        count as usize + 2
    };
    let p = words.get(..n).ok_or(DecodeError::Truncated {
        packet: name,
        need: n,
        have: words.len(),
    })?;
    let packet = match opcode {
        OP_NOP => Packet::Nop(Nop { words: n as u32 }),
        OP_SET_SH_REG => {
            if n < 3 {
                return Err(DecodeError::BadCount {
                    packet: name,
                    count,
                    expected: "at least 1",
                });
            }
            reserved(name, "register word bits 31:16", p[1] >> 16)?;
            let offset = p[1] & 0xffff;
            let values = &p[2..];
            if offset as usize + values.len() > (SH_REG_END - SH_REG_START) as usize {
                return Err(DecodeError::BadValue {
                    packet: name,
                    field: "register offset",
                    value: offset as u64,
                    why: "with its values leaves the SH window 0x2c00..0x3000",
                });
            }
            Packet::SetShReg(SetShReg {
                offset: offset as u16,
                values,
            })
        }
        OP_DISPATCH_DIRECT => {
            fixed(name, count, DispatchDirect::WORDS, "3")?;
            Packet::DispatchDirect(DispatchDirect {
                dim: [p[1], p[2], p[3]],
                initiator: p[4],
            })
        }
        OP_RELEASE_MEM => {
            fixed(name, count, ReleaseMem::WORDS, "6")?;
            reserved(name, "word 1 bits 7:6, 27, 31:29", p[1] & 0xe800_00c0)?;
            reserved(name, "word 2 bits 15:0, 23:18, 28:27", p[2] & 0x18fc_ffff)?;
            let data_sel = DataSel::from_bits(p[2] >> 29).ok_or(DecodeError::BadValue {
                packet: name,
                field: "DATA_SEL",
                value: (p[2] >> 29) as u64,
                why: "is not 0 to 4",
            })?;
            let int_sel = IntSel::from_bits((p[2] >> 24) & 7).ok_or(DecodeError::BadValue {
                packet: name,
                field: "INT_SEL",
                value: ((p[2] >> 24) & 7) as u64,
                why: "is not 0 to 3",
            })?;
            let address = join(p[3], p[4]);
            let align = if data_sel.bytes() == 8 { 8 } else { 4 };
            if address & (align - 1) != 0 {
                return Err(DecodeError::Reserved {
                    packet: name,
                    field: "address low bits",
                    value: (address % align) as u32,
                });
            }
            Packet::ReleaseMem(ReleaseMem {
                event_type: (p[1] & 0x3f) as u8,
                event_index: ((p[1] >> 8) & 0xf) as u8,
                cache: p[1] & RELEASE_CACHE_MASK,
                cache_policy: ((p[1] >> 25) & 3) as u8,
                execute: p[1] >> 28 & 1 == 1,
                dst_sel: ((p[2] >> 16) & 3) as u8,
                int_sel,
                data_sel,
                address,
                data: join(p[5], p[6]),
                int_ctxid: p[7],
            })
        }
        OP_WAIT_REG_MEM | OP_WAIT_REG_MEM64 => {
            let wide = opcode == OP_WAIT_REG_MEM64;
            if wide {
                fixed(name, count, WaitRegMem64::WORDS, "7")?;
            } else {
                fixed(name, count, WaitRegMem::WORDS, "5")?;
            }
            let w = p[1];
            // Bits 24:22 are MES fields and 26:25 a cache policy: none is rig's.
            reserved(name, "word 1 bits 3, 31:10", w & 0xffff_fc08)?;
            let function = Compare::from_bits(w & 7).ok_or(DecodeError::BadValue {
                packet: name,
                field: "FUNCTION",
                value: (w & 7) as u64,
                why: "is not a compare (0 to 6)",
            })?;
            let space = (w >> 4) & 3;
            let operation = ((w >> 6) & 3) as u8;
            if space > 1 {
                return Err(DecodeError::BadValue {
                    packet: name,
                    field: "MEM_SPACE",
                    value: space as u64,
                    why: "is neither register (0) nor memory (1)",
                });
            }
            if operation == 2 {
                return Err(DecodeError::BadValue {
                    packet: name,
                    field: "OPERATION",
                    value: 2,
                    why: "is not an operation (0, 1 or 3)",
                });
            }
            let address = join(p[2], p[3]);
            if wide {
                if space != 1 || operation == 1 {
                    return Err(DecodeError::BadValue {
                        packet: name,
                        field: "MEM_SPACE/OPERATION",
                        value: w as u64 & 0xf0,
                        why: "is not a memory wait",
                    });
                }
                reserved(name, "ENGINE (bits 9:8)", (w >> 8) & 3)?;
                reserved(name, "address bits 2:0", p[2] & 7)?;
                reserved(name, "word 8 bits 31:16", p[8] >> 16)?;
                Packet::WaitRegMem64(WaitRegMem64 {
                    function,
                    operation,
                    address,
                    reference: join(p[4], p[5]),
                    mask: join(p[6], p[7]),
                    poll_interval: p[8] as u16,
                })
            } else {
                if space == 1 {
                    reserved(name, "address bits 1:0", p[2] & 3)?;
                }
                // Bit 31 is OPTIMIZE_ACE_OFFLOAD_MODE (soc15d.h), a hint rig may ignore.
                reserved(name, "word 6 bits 30:16", (p[6] >> 16) & 0x7fff)?;
                Packet::WaitRegMem(WaitRegMem {
                    function,
                    memory: space == 1,
                    operation,
                    engine: ((w >> 8) & 3) as u8,
                    address,
                    reference: p[4],
                    mask: p[5],
                    poll_interval: p[6] as u16,
                })
            }
        }
        OP_ACQUIRE_MEM => {
            let gcr_cntl = match count {
                5 => None,
                6 => {
                    reserved(name, "GCR_CNTL bits 31:19", p[7] & !GCR_CNTL_MASK)?;
                    Some(p[7])
                }
                _ => {
                    return Err(DecodeError::BadCount {
                        packet: name,
                        count,
                        expected: "5 (GFX9) or 6 (GFX10+)",
                    });
                }
            };
            reserved(name, "COHER_SIZE_HI bits 31:24", p[3] >> 24)?;
            reserved(name, "COHER_BASE_HI bits 31:24", p[5] >> 24)?;
            reserved(name, "POLL_INTERVAL bits 31:16", p[6] >> 16)?;
            Packet::AcquireMem(AcquireMem {
                coher_cntl: p[1],
                size: join(p[2], p[3]),
                base: join(p[4], p[5]),
                poll_interval: p[6] as u16,
                gcr_cntl,
            })
        }
        OP_WRITE_DATA => {
            if n < 5 {
                return Err(DecodeError::BadCount {
                    packet: name,
                    count,
                    expected: "at least 3",
                });
            }
            let w = p[1];
            reserved(
                name,
                "word 1 bits 7:0, 15:12, 19:17, 24:21, 29:27",
                w & 0x39ee_f0ff,
            )?;
            let dst_sel = ((w >> 8) & 0xf) as u8;
            let address = join(p[2], p[3]);
            if dst_sel != 0 && address & 3 != 0 {
                return Err(DecodeError::Reserved {
                    packet: name,
                    field: "address bits 1:0",
                    value: (address % 4) as u32,
                });
            }
            Packet::WriteData(WriteData {
                dst_sel,
                one_addr: w >> 16 & 1 == 1,
                wr_confirm: w >> 20 & 1 == 1,
                cache_policy: ((w >> 25) & 3) as u8,
                engine_sel: (w >> 30) as u8,
                address,
                data: &p[4..],
            })
        }
        OP_COPY_DATA => {
            fixed(name, count, CopyData::WORDS, "4")?;
            let w = p[1];
            // Bit 29 is PQ_EXE_STATUS (soc15d.h), which rig never sets.
            reserved(
                name,
                "word 1 bits 7:4, 12, 15, 19:17, 24:21, 29:27",
                w & 0x39ee_90f0,
            )?;
            let src_sel = CopySrc::from_bits(w & 0xf).ok_or(DecodeError::BadValue {
                packet: name,
                field: "SRC_SEL",
                value: (w & 0xf) as u64,
                why: "is not a source",
            })?;
            let dst_sel = CopyDst::from_bits((w >> 8) & 0xf).ok_or(DecodeError::BadValue {
                packet: name,
                field: "DST_SEL",
                value: ((w >> 8) & 0xf) as u64,
                why: "is not a destination",
            })?;
            let count_64 = w >> 16 & 1 == 1;
            let dst = join(p[4], p[5]);
            if matches!(dst_sel, CopyDst::Memory | CopyDst::TcL2) {
                let align = if count_64 { 8 } else { 4 };
                if dst & (align - 1) != 0 {
                    return Err(DecodeError::Reserved {
                        packet: name,
                        field: "destination address low bits",
                        value: (dst % align) as u32,
                    });
                }
            }
            Packet::CopyData(CopyData {
                src_sel,
                dst_sel,
                src_cache_policy: ((w >> 13) & 3) as u8,
                count_64,
                wr_confirm: w >> 20 & 1 == 1,
                dst_cache_policy: ((w >> 25) & 3) as u8,
                engine_sel: (w >> 30) as u8,
                src: join(p[2], p[3]),
                dst,
            })
        }
        OP_INDIRECT_BUFFER => {
            fixed(name, count, IndirectBuffer::WORDS, "2")?;
            reserved(name, "IB_BASE_LO bits 1:0", p[1] & 3)?;
            let w = p[3];
            reserved(name, "word 3 bit 22", w & (1 << 22))?;
            Packet::IndirectBuffer(IndirectBuffer {
                address: join(p[1], p[2]),
                size_dw: w & 0xf_ffff,
                chain: w >> 20 & 1 == 1,
                pre_enable: w >> 21 & 1 == 1,
                valid: w >> 23 & 1 == 1,
                vmid: ((w >> 24) & 0xf) as u8,
                cache_policy: ((w >> 28) & 3) as u8,
                pre_resume: w >> 30 & 1 == 1,
                privileged: w >> 31 == 1,
            })
        }
        OP_EVENT_WRITE => {
            reserved(name, "word 1 bits 7:6, 31:12", p[1] & 0xffff_f0c0)?;
            let address = match count {
                0 => None,
                2 => {
                    reserved(name, "address bits 2:0", p[2] & 7)?;
                    Some(join(p[2], p[3]))
                }
                _ => {
                    return Err(DecodeError::BadCount {
                        packet: name,
                        count,
                        expected: "0, or 2 with an address",
                    });
                }
            };
            Packet::EventWrite(EventWrite {
                event_type: (p[1] & 0x3f) as u8,
                event_index: ((p[1] >> 8) & 0xf) as u8,
                address,
            })
        }
        // PANIC-free: every opcode not matched above returned UnknownOpcode.
        _ => return Err(DecodeError::UnknownOpcode { opcode, header: h }),
    };
    Ok((packet, n))
}

/// An iterator over the packets of a word sequence; it stops after the first error.
#[derive(Debug, Clone)]
pub struct Packets<'a> {
    words: &'a [u32],
    at: usize,
    failed: bool,
}

/// The packets of `words`, in order, each with the index of its first word.
pub fn packets(words: &[u32]) -> Packets<'_> {
    Packets {
        words,
        at: 0,
        failed: false,
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = Result<(usize, Packet<'a>), (usize, DecodeError)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.words.len() {
            return None;
        }
        let at = self.at;
        match decode(&self.words[at..]) {
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

/// GFX10+ cache-control bits: GCR_CNTL of ACQUIRE_MEM and the GCR bits of RELEASE_MEM.
pub mod gcr {
    /// GCR_CNTL GLI_INV (bits 1:0): instruction cache invalidate, 1 = all (nvd.h, newer kernels).
    pub const GLI_INV_ALL: u32 = 1;
    /// GCR_CNTL GL1_RANGE (bits 3:2).
    pub const GL1_RANGE_SHIFT: u32 = 2;
    /// GCR_CNTL GLM_WB (bit 4): metadata cache write-back.
    pub const GLM_WB: u32 = 1 << 4;
    /// GCR_CNTL GLM_INV (bit 5): metadata cache invalidate.
    pub const GLM_INV: u32 = 1 << 5;
    /// GCR_CNTL GLK_WB (bit 6): scalar cache write-back.
    pub const GLK_WB: u32 = 1 << 6;
    /// GCR_CNTL GLK_INV (bit 7): scalar cache invalidate.
    pub const GLK_INV: u32 = 1 << 7;
    /// GCR_CNTL GLV_INV (bit 8): vector L0 invalidate.
    pub const GLV_INV: u32 = 1 << 8;
    /// GCR_CNTL GL1_INV (bit 9): GL1 invalidate.
    pub const GL1_INV: u32 = 1 << 9;
    /// GCR_CNTL GL2_US (bit 10).
    pub const GL2_US: u32 = 1 << 10;
    /// GCR_CNTL GL2_RANGE (bits 12:11).
    pub const GL2_RANGE_SHIFT: u32 = 11;
    /// GCR_CNTL GL2_DISCARD (bit 13).
    pub const GL2_DISCARD: u32 = 1 << 13;
    /// GCR_CNTL GL2_INV (bit 14): L2 invalidate.
    pub const GL2_INV: u32 = 1 << 14;
    /// GCR_CNTL GL2_WB (bit 15): L2 write-back.
    pub const GL2_WB: u32 = 1 << 15;
    /// GCR_CNTL SEQ (bits 17:16).
    pub const SEQ_SHIFT: u32 = 16;

    /// Every cache above the L2 invalidated (and the scalar and metadata caches written back).
    pub const ABOVE_L2: u32 = GLI_INV_ALL | GLM_WB | GLM_INV | GLK_WB | GLK_INV | GLV_INV | GL1_INV;
    /// Every cache invalidated, the L2 after its write-back (Linux's `emit_mem_sync`).
    pub const ALL: u32 = ABOVE_L2 | GL2_WB | GL2_INV;

    /// RELEASE_MEM GLM_WB (bit 12 of body word 1, nvd.h).
    pub const RELEASE_GLM_WB: u32 = 1 << 12;
    /// RELEASE_MEM GLM_INV (bit 13).
    pub const RELEASE_GLM_INV: u32 = 1 << 13;
    /// RELEASE_MEM GLV_INV (bit 14).
    pub const RELEASE_GLV_INV: u32 = 1 << 14;
    /// RELEASE_MEM GL1_INV (bit 15).
    pub const RELEASE_GL1_INV: u32 = 1 << 15;
    /// RELEASE_MEM GL2_US (bit 16).
    pub const RELEASE_GL2_US: u32 = 1 << 16;
    /// RELEASE_MEM GL2_RANGE (bit 17).
    pub const RELEASE_GL2_RANGE: u32 = 1 << 17;
    /// RELEASE_MEM GL2_DISCARD (bit 19).
    pub const RELEASE_GL2_DISCARD: u32 = 1 << 19;
    /// RELEASE_MEM GL2_INV (bit 20).
    pub const RELEASE_GL2_INV: u32 = 1 << 20;
    /// RELEASE_MEM GL2_WB (bit 21).
    pub const RELEASE_GL2_WB: u32 = 1 << 21;
    /// RELEASE_MEM GCR_SEQ (bit 22).
    pub const RELEASE_SEQ: u32 = 1 << 22;

    /// A release's write-back of the L2 (and metadata cache), so the host reads the work's
    /// writes once the value is reached.
    pub const RELEASE_WRITE_BACK: u32 = RELEASE_GL2_WB | RELEASE_GLM_WB | RELEASE_SEQ;
}

/// GFX9 cache-control bits: CP_COHER_CNTL of ACQUIRE_MEM and the EOP bits of RELEASE_MEM
/// (soc15d.h).
pub mod coher {
    /// TC_NC_ACTION_ENA (bit 3).
    pub const TC_NC_ACTION_ENA: u32 = 1 << 3;
    /// TC_WC_ACTION_ENA (bit 4).
    pub const TC_WC_ACTION_ENA: u32 = 1 << 4;
    /// TC_INV_METADATA_ACTION_ENA (bit 5).
    pub const TC_INV_METADATA_ACTION_ENA: u32 = 1 << 5;
    /// TCL1_VOL_ACTION_ENA (bit 15).
    pub const TCL1_VOL_ACTION_ENA: u32 = 1 << 15;
    /// TC_WB_ACTION_ENA (bit 18): L2 write-back.
    pub const TC_WB_ACTION_ENA: u32 = 1 << 18;
    /// TCL1_ACTION_ENA (bit 22): vector L1 invalidate.
    pub const TCL1_ACTION_ENA: u32 = 1 << 22;
    /// TC_ACTION_ENA (bit 23): L2 invalidate.
    pub const TC_ACTION_ENA: u32 = 1 << 23;
    /// SH_KCACHE_ACTION_ENA (bit 27): scalar cache invalidate.
    pub const SH_KCACHE_ACTION_ENA: u32 = 1 << 27;
    /// SH_KCACHE_VOL_ACTION_ENA (bit 28).
    pub const SH_KCACHE_VOL_ACTION_ENA: u32 = 1 << 28;
    /// SH_ICACHE_ACTION_ENA (bit 29): instruction cache invalidate.
    pub const SH_ICACHE_ACTION_ENA: u32 = 1 << 29;
    /// SH_KCACHE_WB_ACTION_ENA (bit 30).
    pub const SH_KCACHE_WB_ACTION_ENA: u32 = 1 << 30;

    /// Every cache above the L2 invalidated.
    pub const ABOVE_L2: u32 = SH_ICACHE_ACTION_ENA | SH_KCACHE_ACTION_ENA | TCL1_ACTION_ENA;
    /// Every cache invalidated, the L2 after its write-back (Linux's gfx_v9_4_3 mem_sync).
    pub const ALL: u32 = ABOVE_L2 | TC_ACTION_ENA | TC_WB_ACTION_ENA;

    /// RELEASE_MEM EOP_TCL1_VOL_ACTION_EN (bit 12).
    pub const EOP_TCL1_VOL_ACTION_EN: u32 = 1 << 12;
    /// RELEASE_MEM EOP_TC_VOL_ACTION_EN (bit 13).
    pub const EOP_TC_VOL_ACTION_EN: u32 = 1 << 13;
    /// RELEASE_MEM EOP_TC_WB_ACTION_EN (bit 15): L2 write-back.
    pub const EOP_TC_WB_ACTION_EN: u32 = 1 << 15;
    /// RELEASE_MEM EOP_TCL1_ACTION_EN (bit 16).
    pub const EOP_TCL1_ACTION_EN: u32 = 1 << 16;
    /// RELEASE_MEM EOP_TC_ACTION_EN (bit 17).
    pub const EOP_TC_ACTION_EN: u32 = 1 << 17;
    /// RELEASE_MEM EOP_TC_NC_ACTION_EN (bit 19).
    pub const EOP_TC_NC_ACTION_EN: u32 = 1 << 19;
    /// RELEASE_MEM EOP_TC_MD_ACTION_EN (bit 21).
    pub const EOP_TC_MD_ACTION_EN: u32 = 1 << 21;

    /// A release's write-back of the L2.
    pub const RELEASE_WRITE_BACK: u32 = EOP_TC_WB_ACTION_EN | EOP_TC_ACTION_EN;
}
