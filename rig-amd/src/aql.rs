//! HSA AQL packets: what the compute queue of a GPU of several dies reads.
//!
//! An AQL ("architected queuing language") queue is a ring of 64-byte packets. Its packet
//! processor, the command processor's firmware, reads the packet at its read index once the
//! packet's 16-bit header says the packet is no longer INVALID: the producer writes the other
//! 62 bytes first and the header (with the word beside it) last, in one 32-bit store, so the
//! processor never sees a half-written packet. After running a packet the processor sets its
//! type back to INVALID, handing the slot back to the producer.
//!
//! The header (`hsa_packet_header_t`, ROCR's `hsa.h`) holds the packet type in bits 7:0, the
//! barrier bit in bit 8 (the packet waits for every earlier packet to complete), and the
//! acquire and release fence scopes in bits 10:9 and 12:11 (none, agent or system: which
//! caches are invalidated before the packet and written back after it). Kernel dispatch,
//! barrier-AND (wait until all of five signals are 0), barrier-OR (until any is) and AMD's
//! vendor-specific barrier-value packet (`hsa_amd_barrier_value_packet_t`, ROCR's
//! `hsa_ext_amd.h`: wait until a signal's value, masked, passes a compare) are the kinds rig
//! writes and its simulator runs.
//!
//! Packets are given as 16 little-endian words; word 0 holds the header in its low half.
//! This module owns the packet formats only: not the signal layout (`amd_signal_t`) or the
//! queue descriptor (`amd_queue_t`).

pub use crate::pm4::EncodeError;
use thiserror::Error;

/// Words in an AQL packet.
pub const WORDS: usize = 16;
/// Bytes in an AQL packet.
pub const BYTES: usize = 64;

/// Packet type of a vendor-specific packet (`HSA_PACKET_TYPE_VENDOR_SPECIFIC`).
pub const TYPE_VENDOR_SPECIFIC: u8 = 0;
/// Packet type of a slot the producer owns (`HSA_PACKET_TYPE_INVALID`).
pub const TYPE_INVALID: u8 = 1;
/// Packet type of a kernel dispatch (`HSA_PACKET_TYPE_KERNEL_DISPATCH`).
pub const TYPE_KERNEL_DISPATCH: u8 = 2;
/// Packet type of a barrier-AND (`HSA_PACKET_TYPE_BARRIER_AND`).
pub const TYPE_BARRIER_AND: u8 = 3;
/// Packet type of an agent dispatch (`HSA_PACKET_TYPE_AGENT_DISPATCH`).
pub const TYPE_AGENT_DISPATCH: u8 = 4;
/// Packet type of a barrier-OR (`HSA_PACKET_TYPE_BARRIER_OR`).
pub const TYPE_BARRIER_OR: u8 = 5;
/// AMD vendor format of a barrier-value packet (`HSA_AMD_PACKET_TYPE_BARRIER_VALUE`).
pub const AMD_FORMAT_BARRIER_VALUE: u8 = 2;

/// A fence scope (`hsa_fence_scope_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Scope {
    /// No cache maintenance.
    #[default]
    None = 0,
    /// The agent's caches (the GPU's L2 and above).
    Agent = 1,
    /// The whole system (host coherence).
    System = 2,
}

impl Scope {
    fn from_bits(v: u16) -> Option<Self> {
        Some(match v {
            0 => Self::None,
            1 => Self::Agent,
            2 => Self::System,
            _ => return None,
        })
    }
}

/// The parts of a header that every packet has besides its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// BARRIER (bit 8): wait for every earlier packet to complete first.
    pub barrier: bool,
    /// SCACQUIRE_FENCE_SCOPE (bits 10:9).
    pub acquire: Scope,
    /// SCRELEASE_FENCE_SCOPE (bits 12:11).
    pub release: Scope,
}

impl Header {
    /// The 16-bit header of a packet of type `kind` with these bits.
    pub const fn bits(self, kind: u8) -> u16 {
        kind as u16
            | (self.barrier as u16) << 8
            | (self.acquire as u16) << 9
            | (self.release as u16) << 11
    }
}

/// A kernel dispatch (`hsa_kernel_dispatch_packet_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelDispatch {
    /// The header's barrier and fence bits.
    pub header: Header,
    /// SETUP bits 1:0: dimensions, 1 to 3.
    pub dimensions: u8,
    /// Work-items per workgroup along x, y, z.
    pub workgroup_size: [u16; 3],
    /// Work-items of the grid along x, y, z.
    pub grid_size: [u32; 3],
    /// Private (scratch) bytes per work-item.
    pub private_segment_size: u32,
    /// Group (LDS) bytes per workgroup.
    pub group_segment_size: u32,
    /// Address of the kernel descriptor.
    pub kernel_object: u64,
    /// Address of the kernel's arguments.
    pub kernarg_address: u64,
    /// The signal decremented on completion, or 0.
    pub completion_signal: u64,
}

/// A barrier-AND or barrier-OR (`hsa_barrier_and_packet_t`, `hsa_barrier_or_packet_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    /// The header's barrier and fence bits.
    pub header: Header,
    /// The dependent signals (0 for none).
    pub dep_signal: [u64; 5],
    /// The signal decremented on completion, or 0.
    pub completion_signal: u64,
}

/// How a barrier-value packet compares (`hsa_signal_condition_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Condition {
    /// Equal.
    Eq = 0,
    /// Not equal.
    Ne = 1,
    /// Less than (signed, as HSA signal values are).
    Lt = 2,
    /// Greater than or equal (signed).
    Gte = 3,
}

impl Condition {
    fn from_bits(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Eq,
            1 => Self::Ne,
            2 => Self::Lt,
            3 => Self::Gte,
            _ => return None,
        })
    }

    /// Whether `(value & mask)` passes against `reference`, as signed 64-bit values.
    pub fn passes(self, value: i64, mask: i64, reference: i64) -> bool {
        let v = value & mask;
        match self {
            Self::Eq => v == reference,
            Self::Ne => v != reference,
            Self::Lt => v < reference,
            Self::Gte => v >= reference,
        }
    }
}

/// AMD's barrier-value packet (`hsa_amd_barrier_value_packet_t`): wait until the signal's
/// value, masked, passes the compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierValue {
    /// The header's barrier and fence bits.
    pub header: Header,
    /// The signal (address of an `amd_signal_t`, whose value is at byte 8).
    pub signal: u64,
    /// The reference value.
    pub value: i64,
    /// The mask.
    pub mask: i64,
    /// The compare.
    pub cond: Condition,
    /// The signal decremented on completion, or 0.
    pub completion_signal: u64,
}

/// A decoded AQL packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    /// A slot the producer owns (type INVALID): the packet processor stops here.
    Invalid,
    /// A kernel dispatch.
    KernelDispatch(KernelDispatch),
    /// A barrier-AND.
    BarrierAnd(Barrier),
    /// A barrier-OR.
    BarrierOr(Barrier),
    /// AMD's barrier-value packet.
    BarrierValue(BarrierValue),
}

/// Why 16 words could not be decoded as an AQL packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer than 16 words were given.
    #[error("an AQL packet takes 16 words but only {have} remain")]
    Truncated {
        /// Words given.
        have: usize,
    },
    /// The packet type is not one rig runs.
    #[error("AQL packet type {kind} (header {header:#06x}) is not run by rig")]
    UnknownType {
        /// The type, header bits 7:0.
        kind: u8,
        /// The header.
        header: u16,
    },
    /// A vendor-specific packet of a format rig does not know.
    #[error("AMD vendor packet format {format} is not known")]
    UnknownVendorFormat {
        /// The format byte.
        format: u8,
    },
    /// A reserved field is not zero.
    #[error("{packet}: reserved field {field} holds {value:#x}")]
    Reserved {
        /// The packet's name.
        packet: &'static str,
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: u64,
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

#[inline]
const fn lo(v: u64) -> u32 {
    v as u32
}

#[inline]
const fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

#[inline]
fn join(lo: u32, hi: u32) -> u64 {
    lo as u64 | (hi as u64) << 32
}

impl KernelDispatch {
    /// The packet's 16 words. Word 0 holds header and setup: the producer stores it last.
    ///
    /// Byte offsets (`hsa_kernel_dispatch_packet_t`): header 0, setup 2, workgroup_size 4/6/8,
    /// reserved 10, grid_size 12/16/20, private_segment_size 24, group_segment_size 28,
    /// kernel_object 32, kernarg_address 40, reserved 48, completion_signal 56.
    pub fn encode(&self) -> Result<[u32; WORDS], EncodeError> {
        if !(1..=3).contains(&self.dimensions) {
            return Err(EncodeError::Field {
                packet: "KERNEL_DISPATCH",
                field: "dimensions",
                value: self.dimensions as u64,
                why: "1 to 3",
            });
        }
        let wg = self.workgroup_size;
        Ok([
            self.header.bits(TYPE_KERNEL_DISPATCH) as u32 | (self.dimensions as u32) << 16,
            wg[0] as u32 | (wg[1] as u32) << 16,
            wg[2] as u32,
            self.grid_size[0],
            self.grid_size[1],
            self.grid_size[2],
            self.private_segment_size,
            self.group_segment_size,
            lo(self.kernel_object),
            hi(self.kernel_object),
            lo(self.kernarg_address),
            hi(self.kernarg_address),
            0,
            0,
            lo(self.completion_signal),
            hi(self.completion_signal),
        ])
    }
}

impl Barrier {
    /// The packet's 16 words as a barrier-AND (`and`) or barrier-OR.
    ///
    /// Byte offsets (`hsa_barrier_and_packet_t`): header 0, reserved 2 and 4, dep_signal 8 to
    /// 40, reserved 48, completion_signal 56.
    pub fn encode(&self, and: bool) -> [u32; WORDS] {
        let kind = if and {
            TYPE_BARRIER_AND
        } else {
            TYPE_BARRIER_OR
        };
        let mut w = [0u32; WORDS];
        w[0] = self.header.bits(kind) as u32;
        for (i, s) in self.dep_signal.iter().enumerate() {
            w[2 + 2 * i] = lo(*s);
            w[3 + 2 * i] = hi(*s);
        }
        w[14] = lo(self.completion_signal);
        w[15] = hi(self.completion_signal);
        w
    }
}

impl BarrierValue {
    /// The packet's 16 words.
    ///
    /// Byte offsets (`hsa_amd_barrier_value_packet_t`): header 0 (`hsa_amd_vendor_packet_header_t`:
    /// header 0, AmdFormat 2, reserved 3), reserved 4, signal 8, value 16, mask 24, cond 32,
    /// reserved 36, 40, 48, completion_signal 56.
    pub fn encode(&self) -> [u32; WORDS] {
        let mut w = [0u32; WORDS];
        w[0] =
            self.header.bits(TYPE_VENDOR_SPECIFIC) as u32 | (AMD_FORMAT_BARRIER_VALUE as u32) << 16;
        w[2] = lo(self.signal);
        w[3] = hi(self.signal);
        w[4] = lo(self.value as u64);
        w[5] = hi(self.value as u64);
        w[6] = lo(self.mask as u64);
        w[7] = hi(self.mask as u64);
        w[8] = self.cond as u32;
        w[14] = lo(self.completion_signal);
        w[15] = hi(self.completion_signal);
        w
    }
}

impl Packet {
    /// The packet's 16 words; an INVALID packet is a header of type INVALID and zeros.
    pub fn encode(&self) -> Result<[u32; WORDS], EncodeError> {
        Ok(match self {
            Self::Invalid => {
                let mut w = [0; WORDS];
                w[0] = TYPE_INVALID as u32;
                w
            }
            Self::KernelDispatch(p) => p.encode()?,
            Self::BarrierAnd(p) => p.encode(true),
            Self::BarrierOr(p) => p.encode(false),
            Self::BarrierValue(p) => p.encode(),
        })
    }

    /// The packet's header bits, if it has any (not for INVALID).
    pub fn header(&self) -> Option<Header> {
        match self {
            Self::Invalid => None,
            Self::KernelDispatch(p) => Some(p.header),
            Self::BarrierAnd(p) | Self::BarrierOr(p) => Some(p.header),
            Self::BarrierValue(p) => Some(p.header),
        }
    }
}

/// Encodes `packet` into `out[..16]` with word 0 written last, returning 16.
///
/// Within one thread the stores land in order; a producer sharing the ring with a packet
/// processor still needs its own release store of word 0 (this crate does no I/O).
pub fn encode_into(packet: &Packet, out: &mut [u32]) -> Result<usize, EncodeError> {
    let have = out.len();
    let o = out
        .first_chunk_mut::<WORDS>()
        .ok_or(EncodeError::NoRoom { need: WORDS, have })?;
    let w = packet.encode()?;
    o[1..].copy_from_slice(&w[1..]);
    o[0] = w[0];
    Ok(WORDS)
}

fn header_of(packet: &'static str, h: u16) -> Result<Header, DecodeError> {
    let scope = |field: &'static str, v: u16| {
        Scope::from_bits(v).ok_or(DecodeError::BadValue {
            packet,
            field,
            value: v as u64,
            why: "is not a fence scope (0 to 2)",
        })
    };
    if h >> 13 != 0 {
        return Err(DecodeError::Reserved {
            packet,
            field: "header bits 15:13",
            value: (h >> 13) as u64,
        });
    }
    Ok(Header {
        barrier: h >> 8 & 1 == 1,
        acquire: scope("acquire fence scope", (h >> 9) & 3)?,
        release: scope("release fence scope", (h >> 11) & 3)?,
    })
}

fn reserved(packet: &'static str, field: &'static str, value: u64) -> Result<(), DecodeError> {
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

/// Decodes the AQL packet in the first 16 of `words`.
///
/// A slot of type INVALID decodes as [`Packet::Invalid`] whatever its other words hold. Any
/// other words give a packet or an error naming the problem; it never panics.
pub fn decode(words: &[u32]) -> Result<Packet, DecodeError> {
    let w = words
        .first_chunk::<WORDS>()
        .ok_or(DecodeError::Truncated { have: words.len() })?;
    let h = w[0] as u16;
    let kind = h as u8;
    match kind {
        TYPE_INVALID => Ok(Packet::Invalid),
        TYPE_KERNEL_DISPATCH => {
            const P: &str = "KERNEL_DISPATCH";
            let header = header_of(P, h)?;
            let setup = (w[0] >> 16) as u16;
            let dimensions = (setup & 3) as u8;
            reserved(P, "setup bits 15:2", (setup >> 2) as u64)?;
            if dimensions == 0 {
                return Err(DecodeError::BadValue {
                    packet: P,
                    field: "dimensions",
                    value: 0,
                    why: "is not 1 to 3",
                });
            }
            reserved(P, "reserved0 (bytes 10-11)", (w[2] >> 16) as u64)?;
            reserved(P, "reserved2 (bytes 48-55)", join(w[12], w[13]))?;
            Ok(Packet::KernelDispatch(KernelDispatch {
                header,
                dimensions,
                workgroup_size: [w[1] as u16, (w[1] >> 16) as u16, w[2] as u16],
                grid_size: [w[3], w[4], w[5]],
                private_segment_size: w[6],
                group_segment_size: w[7],
                kernel_object: join(w[8], w[9]),
                kernarg_address: join(w[10], w[11]),
                completion_signal: join(w[14], w[15]),
            }))
        }
        TYPE_BARRIER_AND | TYPE_BARRIER_OR => {
            let and = kind == TYPE_BARRIER_AND;
            let p = if and { "BARRIER_AND" } else { "BARRIER_OR" };
            let header = header_of(p, h)?;
            reserved(
                p,
                "reserved0/1 (bytes 2-7)",
                ((w[0] >> 16) as u64) | (w[1] as u64) << 16,
            )?;
            reserved(p, "reserved2 (bytes 48-55)", join(w[12], w[13]))?;
            let mut dep_signal = [0u64; 5];
            for (i, s) in dep_signal.iter_mut().enumerate() {
                *s = join(w[2 + 2 * i], w[3 + 2 * i]);
            }
            let b = Barrier {
                header,
                dep_signal,
                completion_signal: join(w[14], w[15]),
            };
            Ok(if and {
                Packet::BarrierAnd(b)
            } else {
                Packet::BarrierOr(b)
            })
        }
        TYPE_VENDOR_SPECIFIC => {
            const P: &str = "AMD_BARRIER_VALUE";
            let format = (w[0] >> 16) as u8;
            if format != AMD_FORMAT_BARRIER_VALUE {
                return Err(DecodeError::UnknownVendorFormat { format });
            }
            let header = header_of(P, h)?;
            reserved(P, "reserved (byte 3)", (w[0] >> 24) as u64)?;
            reserved(P, "reserved0 (bytes 4-7)", w[1] as u64)?;
            reserved(P, "reserved1 (bytes 36-39)", w[9] as u64)?;
            reserved(
                P,
                "reserved2/3 (bytes 40-55)",
                join(w[10], w[11]) | join(w[12], w[13]),
            )?;
            let cond = Condition::from_bits(w[8]).ok_or(DecodeError::BadValue {
                packet: P,
                field: "cond",
                value: w[8] as u64,
                why: "is not a condition (0 to 3)",
            })?;
            Ok(Packet::BarrierValue(BarrierValue {
                header,
                signal: join(w[2], w[3]),
                value: join(w[4], w[5]) as i64,
                mask: join(w[6], w[7]) as i64,
                cond,
                completion_signal: join(w[14], w[15]),
            }))
        }
        _ => Err(DecodeError::UnknownType { kind, header: h }),
    }
}
