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
//! `hsa_ext_amd.h`: wait until a signal's value, masked, passes a compare) and AMD's
//! vendor-specific PM4-IB packet (`amd_aql_pm4_ib_packet_t` of ROCR's aqlprofile headers: the
//! command processor runs a PM4 indirect buffer, which is how an AQL queue writes a 64-bit
//! value and raises an interrupt with a RELEASE_MEM) are the kinds rig writes and its
//! simulator runs.
//!
//! Packets are given as 16 little-endian words; word 0 holds the header in its low half.
//! This module owns the packet formats and the queue descriptor ([`AmdQueue`], ROCr's
//! `amd_queue_t`), not the signal layout (`amd_signal_t`).
//!
//! # The queue descriptor
//!
//! A KFD AQL queue's packet processor takes what the packets do not say from the queue's
//! `amd_queue_t` (`amd_hsa_queue.h` of ROCR-Runtime; [`amd_queue`] holds its offsets): the
//! ring (an `hsa_queue_t` at its start), the write and read dispatch ids, and each kernel's
//! scratch (its buffer resource, backing memory and size, COMPUTE_TMPRING_SIZE). The runtime
//! places it in memory the GPU reads and gives CREATE_QUEUE the addresses of its
//! `write_dispatch_id` and `read_dispatch_id` as the queue's write and read pointers (ROCr's
//! `AqlQueue`, tinygrad's `ops_kfd`): KFD makes the read pointer the queue's
//! CP_HQD_PQ_RPTR_REPORT_ADDR and the write pointer its WPTR_POLL_ADDR
//! (`kfd_mqd_manager_v9.c`, `_v11.c`), with CP_HQD_AQL_CONTROL's CONTROL0 set for AQL, and
//! the command processor finds the descriptor at the read pointer less
//! [`amd_queue::READ_DISPATCH_ID`] ([`AmdQueue::at_read_pointer`]), the offset the runtime
//! also stores in `read_dispatch_id_field_base_byte_offset`.

pub use crate::pm4::EncodeError;
use thiserror::Error;

use crate::gpu::Gpu;

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
/// AMD vendor format of a packet that runs a PM4 indirect buffer (`AMD_AQL_PM4_IB_FORMAT`).
pub const AMD_FORMAT_PM4_IB: u8 = 1;
/// `dw_count_remain` of a PM4-IB packet: the dwords after its INDIRECT_BUFFER command
/// (`AMD_AQL_PM4_IB_DW_COUNT_REMAIN`).
pub const PM4_IB_DW_COUNT_REMAIN: u32 = 10;

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

/// AMD's PM4-IB packet (`amd_aql_pm4_ib_packet_t`): the command processor runs the PM4
/// packets of an indirect buffer (a call, not a chain), then completes the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pm4Ib {
    /// The header's barrier and fence bits.
    pub header: Header,
    /// The indirect buffer's 4-byte-aligned address.
    pub address: u64,
    /// Its length in dwords (IB_SIZE, 20 bits).
    pub size_dw: u32,
    /// The signal decremented on completion, or 0.
    pub completion_signal: u64,
}

impl Pm4Ib {
    /// The INDIRECT_BUFFER command the packet carries.
    pub fn command(&self) -> crate::pm4::IndirectBuffer {
        crate::pm4::IndirectBuffer {
            address: self.address,
            size_dw: self.size_dw,
            chain: false,
            pre_enable: false,
            valid: true,
            vmid: 0,
            cache_policy: 0,
            pre_resume: false,
            privileged: false,
        }
    }

    /// The packet's 16 words.
    ///
    /// Byte offsets (`amd_aql_pm4_ib_packet_t`): header 0, pm4_ib_format 2, pm4_ib_command 4
    /// to 19 (a PM4 INDIRECT_BUFFER), dw_count_remain 20, reserved 24 to 55,
    /// completion_signal 56.
    pub fn encode(&self) -> Result<[u32; WORDS], EncodeError> {
        let mut w = [0u32; WORDS];
        w[0] = self.header.bits(TYPE_VENDOR_SPECIFIC) as u32 | (AMD_FORMAT_PM4_IB as u32) << 16;
        self.command().encode(&mut w[1..5])?;
        w[5] = PM4_IB_DW_COUNT_REMAIN;
        w[14] = lo(self.completion_signal);
        w[15] = hi(self.completion_signal);
        Ok(w)
    }
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
    /// AMD's PM4-IB packet.
    Pm4Ib(Pm4Ib),
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
            Self::Pm4Ib(p) => p.encode()?,
        })
    }

    /// The packet's header bits, if it has any (not for INVALID).
    pub fn header(&self) -> Option<Header> {
        match self {
            Self::Invalid => None,
            Self::KernelDispatch(p) => Some(p.header),
            Self::BarrierAnd(p) | Self::BarrierOr(p) => Some(p.header),
            Self::BarrierValue(p) => Some(p.header),
            Self::Pm4Ib(p) => Some(p.header),
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
        TYPE_VENDOR_SPECIFIC if (w[0] >> 16) as u8 == AMD_FORMAT_PM4_IB => {
            const P: &str = "AMD_PM4_IB";
            let header = header_of(P, h)?;
            reserved(P, "reserved (byte 3)", (w[0] >> 24) as u64)?;
            let bad = |field, value: u64, why| DecodeError::BadValue {
                packet: P,
                field,
                value,
                why,
            };
            let ib = match crate::pm4::decode(&w[1..5]) {
                Ok((crate::pm4::Packet::IndirectBuffer(ib), _)) => ib,
                _ => {
                    return Err(bad(
                        "pm4_ib_command",
                        u64::from(w[1]),
                        "is not a PM4 INDIRECT_BUFFER",
                    ));
                }
            };
            let packet = Pm4Ib {
                header,
                address: ib.address,
                size_dw: ib.size_dw,
                completion_signal: join(w[14], w[15]),
            };
            if packet.command() != ib {
                return Err(bad(
                    "pm4_ib_command",
                    u64::from(w[4]),
                    "is not a valid call (VALID set; CHAIN, VMID, cache policy and the rest 0)",
                ));
            }
            if w[5] != PM4_IB_DW_COUNT_REMAIN {
                return Err(bad(
                    "dw_count_remain",
                    u64::from(w[5]),
                    "is not the 10 dwords after the command",
                ));
            }
            for (i, r) in w[6..14].iter().enumerate() {
                if *r != 0 {
                    return Err(DecodeError::Reserved {
                        packet: P,
                        field: "reserved (bytes 24-55)",
                        value: (i as u64) << 32 | u64::from(*r),
                    });
                }
            }
            Ok(Packet::Pm4Ib(packet))
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

/// Byte offsets of `amd_queue_t`'s fields (ROCR-Runtime `runtime/hsa-runtime/inc/
/// amd_hsa_queue.h`; its first 40 bytes are HSA's `hsa_queue_t`). `rig-amd/tests/amd_queue.rs`
/// checks them against a C compiler's layout of the public field list.
pub mod amd_queue {
    /// Bytes of the descriptor (`sizeof(amd_queue_t)`).
    pub const BYTES: usize = 256;
    /// Alignment of the descriptor (`AMD_QUEUE_ALIGN_BYTES`).
    pub const ALIGN: u64 = 64;
    /// `hsa_queue_t.type` (u32): [`super::QUEUE_TYPE_MULTI`] or [`super::QUEUE_TYPE_SINGLE`].
    pub const TYPE: usize = 0;
    /// `hsa_queue_t.features` (u32).
    pub const FEATURES: usize = 4;
    /// `hsa_queue_t.base_address` (u64): the ring.
    pub const BASE_ADDRESS: usize = 8;
    /// `hsa_queue_t.doorbell_signal` (u64).
    pub const DOORBELL_SIGNAL: usize = 16;
    /// `hsa_queue_t.size` (u32): packets in the ring.
    pub const SIZE: usize = 24;
    /// `hsa_queue_t.id` (u64).
    pub const ID: usize = 32;
    /// `caps` (u32).
    pub const CAPS: usize = 40;
    /// `write_dispatch_id` (u64): the next packet the producer writes.
    pub const WRITE_DISPATCH_ID: usize = 56;
    /// `group_segment_aperture_base_hi` (u32).
    pub const GROUP_SEGMENT_APERTURE_BASE_HI: usize = 64;
    /// `private_segment_aperture_base_hi` (u32).
    pub const PRIVATE_SEGMENT_APERTURE_BASE_HI: usize = 68;
    /// `max_cu_id` (u32).
    pub const MAX_CU_ID: usize = 72;
    /// `max_wave_id` (u32).
    pub const MAX_WAVE_ID: usize = 76;
    /// `max_legacy_doorbell_dispatch_id_plus_1` (u64).
    pub const MAX_LEGACY_DOORBELL_DISPATCH_ID_PLUS_1: usize = 80;
    /// `legacy_doorbell_lock` (u32).
    pub const LEGACY_DOORBELL_LOCK: usize = 88;
    /// `read_dispatch_id` (u64): the packets the processor has taken.
    pub const READ_DISPATCH_ID: usize = 128;
    /// `read_dispatch_id_field_base_byte_offset` (u32).
    pub const READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET: usize = 136;
    /// `compute_tmpring_size` (u32): COMPUTE_TMPRING_SIZE for the queue's kernels.
    pub const COMPUTE_TMPRING_SIZE: usize = 140;
    /// `scratch_resource_descriptor` (4 x u32): the private segment buffer resource.
    pub const SCRATCH_RESOURCE_DESCRIPTOR: usize = 144;
    /// `scratch_backing_memory_location` (u64).
    pub const SCRATCH_BACKING_MEMORY_LOCATION: usize = 160;
    /// `scratch_backing_memory_byte_size` (u64).
    pub const SCRATCH_BACKING_MEMORY_BYTE_SIZE: usize = 168;
    /// `scratch_wave64_lane_byte_size` (u32).
    pub const SCRATCH_WAVE64_LANE_BYTE_SIZE: usize = 176;
    /// `queue_properties` (u32).
    pub const QUEUE_PROPERTIES: usize = 180;
    /// `queue_inactive_signal` (u64).
    pub const QUEUE_INACTIVE_SIGNAL: usize = 192;
}

/// `HSA_QUEUE_TYPE_MULTI`: several producers.
pub const QUEUE_TYPE_MULTI: u32 = 0;
/// `HSA_QUEUE_TYPE_SINGLE`: one producer.
pub const QUEUE_TYPE_SINGLE: u32 = 1;
/// `HSA_QUEUE_FEATURE_KERNEL_DISPATCH`.
pub const QUEUE_FEATURE_KERNEL_DISPATCH: u32 = 1;
/// `AMD_QUEUE_PROPERTIES_IS_PTR64` (bit 1 of `queue_properties`): 64-bit addresses.
pub const QUEUE_PROPERTIES_IS_PTR64: u32 = 1 << 1;

/// The fields of an `amd_queue_t` rig writes and its packet processor reads; the others
/// (legacy doorbell, debugger and async-reclaim words) are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AmdQueue {
    /// `hsa_queue_t.type`.
    pub queue_type: u32,
    /// `hsa_queue_t.features`.
    pub features: u32,
    /// GPU address of the ring.
    pub base_address: u64,
    /// `hsa_queue_t.doorbell_signal` (0: the producer rings the hardware doorbell itself).
    pub doorbell_signal: u64,
    /// Packets in the ring.
    pub size: u32,
    /// `hsa_queue_t.id`: KFD's queue id.
    pub id: u64,
    /// The next packet the producer writes.
    pub write_dispatch_id: u64,
    /// High half of the LDS aperture's base.
    pub group_segment_aperture_base_hi: u32,
    /// High half of the scratch aperture's base.
    pub private_segment_aperture_base_hi: u32,
    /// Compute units less one.
    pub max_cu_id: u32,
    /// Wave slots of a compute unit less one.
    pub max_wave_id: u32,
    /// Packets the processor has taken.
    pub read_dispatch_id: u64,
    /// [`amd_queue::READ_DISPATCH_ID`], as the runtime writes it.
    pub read_dispatch_id_field_base_byte_offset: u32,
    /// COMPUTE_TMPRING_SIZE of the queue's scratch.
    pub compute_tmpring_size: u32,
    /// The scratch buffer resource handed to kernels as their private segment buffer.
    pub scratch_resource_descriptor: [u32; 4],
    /// GPU address of the scratch.
    pub scratch_backing_memory_location: u64,
    /// Bytes of the scratch.
    pub scratch_backing_memory_byte_size: u64,
    /// Scratch bytes per lane of a wave64 wave.
    pub scratch_wave64_lane_byte_size: u32,
    /// `queue_properties` ([`QUEUE_PROPERTIES_IS_PTR64`]).
    pub queue_properties: u32,
}

fn put32(b: &mut [u8; amd_queue::BYTES], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8; amd_queue::BYTES], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get32(b: &[u8; amd_queue::BYTES], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get64(b: &[u8; amd_queue::BYTES], at: usize) -> u64 {
    join(get32(b, at), get32(b, at + 4))
}

impl AmdQueue {
    /// A descriptor of the ring of `ring_bytes` at `ring`, with no scratch: one producer,
    /// kernel dispatch, 64-bit addresses, the read id's offset stated.
    pub fn new(ring: u64, ring_bytes: u64) -> AmdQueue {
        AmdQueue {
            queue_type: QUEUE_TYPE_SINGLE,
            features: QUEUE_FEATURE_KERNEL_DISPATCH,
            base_address: ring,
            size: u32::try_from(ring_bytes / BYTES as u64).unwrap_or(u32::MAX),
            read_dispatch_id_field_base_byte_offset: amd_queue::READ_DISPATCH_ID as u32,
            queue_properties: QUEUE_PROPERTIES_IS_PTR64,
            ..AmdQueue::default()
        }
    }

    /// The bytes of the descriptor that hold its scratch (COMPUTE_TMPRING_SIZE to the
    /// wave64 lane size): what a runtime rewrites in a live queue's descriptor when the
    /// scratch grows, leaving the dispatch ids the producer and processor move alone.
    pub const SCRATCH_FIELDS: std::ops::Range<usize> =
        amd_queue::COMPUTE_TMPRING_SIZE..amd_queue::SCRATCH_WAVE64_LANE_BYTE_SIZE + 4;

    /// A descriptor of a queue of `gpu` on the ring of `ring_bytes` at `ring`, with its CU and
    /// wave ids and the scratch `(base, bytes)` shared by every wave slot of the GPU
    /// ([`AmdQueue::set_gpu_scratch`]).
    pub fn for_gpu(gpu: &Gpu, ring: u64, ring_bytes: u64, (base, bytes): (u64, u64)) -> AmdQueue {
        let mut q = AmdQueue::new(ring, ring_bytes);
        q.max_cu_id = gpu.compute_units.saturating_sub(1);
        q.max_wave_id = gpu.waves_per_cu.saturating_sub(1);
        q.set_gpu_scratch(gpu, base, bytes);
        q
    }

    /// Sets the scratch of a queue of `gpu`: `bytes` at `base` shared by its compute units
    /// times their waves, as [`AmdQueue::set_scratch`] counts it.
    pub fn set_gpu_scratch(&mut self, gpu: &Gpu, base: u64, bytes: u64) {
        let waves = gpu.compute_units.saturating_mul(gpu.waves_per_cu);
        self.set_scratch(gpu.hal(), base, bytes, waves);
    }

    /// The bytes of [`AmdQueue::SCRATCH_FIELDS`] for `gpu`'s scratch of `bytes` at `base`:
    /// what a live queue's descriptor is given at that offset when the scratch grows.
    pub fn scratch_update(gpu: &Gpu, base: u64, bytes: u64) -> Vec<u8> {
        let mut q = AmdQueue::default();
        q.set_gpu_scratch(gpu, base, bytes);
        q.to_bytes()[Self::SCRATCH_FIELDS].to_vec()
    }

    /// The descriptor's address for a queue whose read pointer (CREATE_QUEUE's
    /// `read_pointer_address`) is `read_pointer`: where the command processor finds it.
    pub const fn at_read_pointer(read_pointer: u64) -> Option<u64> {
        read_pointer.checked_sub(amd_queue::READ_DISPATCH_ID as u64)
    }

    /// Sets the scratch every kernel of the queue gets: `bytes` at `base`, shared by `waves`
    /// wave slots (the GPU's compute units times their waves), as the generation of `hal`
    /// counts it: the buffer resource ([`crate::dispatch::scratch_resource`]),
    /// COMPUTE_TMPRING_SIZE of `waves` waves of the bytes each gets (whole granules), and
    /// those bytes per lane of a wave64 wave. No scratch (`bytes` or `waves` 0) clears it.
    pub fn set_scratch(&mut self, hal: &crate::hal::Hal, base: u64, bytes: u64, waves: u32) {
        if bytes == 0 || waves == 0 {
            self.scratch_resource_descriptor = [0; 4];
            self.scratch_backing_memory_location = 0;
            self.scratch_backing_memory_byte_size = 0;
            self.compute_tmpring_size = 0;
            self.scratch_wave64_lane_byte_size = 0;
            return;
        }
        let granule = u64::from(hal.scratch_granule);
        let wave_bytes = bytes / u64::from(waves) / granule * granule;
        self.scratch_resource_descriptor = crate::dispatch::scratch_resource(base, bytes);
        self.scratch_backing_memory_location = base;
        self.scratch_backing_memory_byte_size = bytes;
        self.compute_tmpring_size = hal.tmpring_size(waves, wave_bytes);
        self.scratch_wave64_lane_byte_size =
            u32::try_from(wave_bytes / u64::from(crate::hal::Hal::lanes(true))).unwrap_or(u32::MAX);
    }

    /// The descriptor's bytes, little-endian, zero where a field is not kept here.
    pub fn to_bytes(&self) -> [u8; amd_queue::BYTES] {
        use amd_queue as o;
        let mut b = [0u8; o::BYTES];
        put32(&mut b, o::TYPE, self.queue_type);
        put32(&mut b, o::FEATURES, self.features);
        put64(&mut b, o::BASE_ADDRESS, self.base_address);
        put64(&mut b, o::DOORBELL_SIGNAL, self.doorbell_signal);
        put32(&mut b, o::SIZE, self.size);
        put64(&mut b, o::ID, self.id);
        put64(&mut b, o::WRITE_DISPATCH_ID, self.write_dispatch_id);
        put32(
            &mut b,
            o::GROUP_SEGMENT_APERTURE_BASE_HI,
            self.group_segment_aperture_base_hi,
        );
        put32(
            &mut b,
            o::PRIVATE_SEGMENT_APERTURE_BASE_HI,
            self.private_segment_aperture_base_hi,
        );
        put32(&mut b, o::MAX_CU_ID, self.max_cu_id);
        put32(&mut b, o::MAX_WAVE_ID, self.max_wave_id);
        put64(&mut b, o::READ_DISPATCH_ID, self.read_dispatch_id);
        put32(
            &mut b,
            o::READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET,
            self.read_dispatch_id_field_base_byte_offset,
        );
        put32(&mut b, o::COMPUTE_TMPRING_SIZE, self.compute_tmpring_size);
        for (i, w) in self.scratch_resource_descriptor.iter().enumerate() {
            put32(&mut b, o::SCRATCH_RESOURCE_DESCRIPTOR + 4 * i, *w);
        }
        put64(
            &mut b,
            o::SCRATCH_BACKING_MEMORY_LOCATION,
            self.scratch_backing_memory_location,
        );
        put64(
            &mut b,
            o::SCRATCH_BACKING_MEMORY_BYTE_SIZE,
            self.scratch_backing_memory_byte_size,
        );
        put32(
            &mut b,
            o::SCRATCH_WAVE64_LANE_BYTE_SIZE,
            self.scratch_wave64_lane_byte_size,
        );
        put32(&mut b, o::QUEUE_PROPERTIES, self.queue_properties);
        b
    }

    /// The fields kept here of the descriptor in `b` (any bytes decode).
    pub fn from_bytes(b: &[u8; amd_queue::BYTES]) -> AmdQueue {
        use amd_queue as o;
        let mut scratch_resource_descriptor = [0u32; 4];
        for (i, w) in scratch_resource_descriptor.iter_mut().enumerate() {
            *w = get32(b, o::SCRATCH_RESOURCE_DESCRIPTOR + 4 * i);
        }
        AmdQueue {
            queue_type: get32(b, o::TYPE),
            features: get32(b, o::FEATURES),
            base_address: get64(b, o::BASE_ADDRESS),
            doorbell_signal: get64(b, o::DOORBELL_SIGNAL),
            size: get32(b, o::SIZE),
            id: get64(b, o::ID),
            write_dispatch_id: get64(b, o::WRITE_DISPATCH_ID),
            group_segment_aperture_base_hi: get32(b, o::GROUP_SEGMENT_APERTURE_BASE_HI),
            private_segment_aperture_base_hi: get32(b, o::PRIVATE_SEGMENT_APERTURE_BASE_HI),
            max_cu_id: get32(b, o::MAX_CU_ID),
            max_wave_id: get32(b, o::MAX_WAVE_ID),
            read_dispatch_id: get64(b, o::READ_DISPATCH_ID),
            read_dispatch_id_field_base_byte_offset: get32(
                b,
                o::READ_DISPATCH_ID_FIELD_BASE_BYTE_OFFSET,
            ),
            compute_tmpring_size: get32(b, o::COMPUTE_TMPRING_SIZE),
            scratch_resource_descriptor,
            scratch_backing_memory_location: get64(b, o::SCRATCH_BACKING_MEMORY_LOCATION),
            scratch_backing_memory_byte_size: get64(b, o::SCRATCH_BACKING_MEMORY_BYTE_SIZE),
            scratch_wave64_lane_byte_size: get32(b, o::SCRATCH_WAVE64_LANE_BYTE_SIZE),
            queue_properties: get32(b, o::QUEUE_PROPERTIES),
        }
    }
}
