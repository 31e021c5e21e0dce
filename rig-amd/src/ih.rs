//! The interrupt handler's ring entries (the "IV" entries of soc15/soc21 GPUs), as amdgpu
//! decodes them (`amdgpu_ih.c`'s `amdgpu_ih_decode_iv_helper`), with the client ids of
//! `soc15_ih_clientid.h` and the source ids of `ivsrcid/`.
//!
//! The IH writes each interrupt as an [`ENTRY_BYTES`]-byte entry into a ring in memory
//! (`IH_RB_BASE`, a power-of-two size in `IH_RB_CNTL.RB_SIZE` as log2 of dwords), advances its
//! write pointer (bytes), and writes it back to `IH_RB_WPTR_ADDR` when
//! `IH_RB_CNTL.WPTR_WRITEBACK_ENABLE` is set; the driver reads entries from its read pointer
//! and writes the new read pointer to `IH_RB_RPTR`. A ring that fills sets `RB_OVERFLOW` in
//! `IH_RB_WPTR` and drops what does not fit.
//!
//! Entry words: 0 holds the client id (7:0), source id (15:8), ring id (23:16), VMID (27:24)
//! and whether the VMID is the MM hub's (bit 31); 1 and 2 a timestamp (47:0, and its source
//! in bit 31 of word 2); 3 the PASID (15:0) and node (23:16); 4 to 7 the source's data.
//! [`Entry`] reads and writes them.
//!
//! This module owns the format's numbers; the registers' addresses are [`crate::mmio`]'s.

/// Bytes of an entry.
pub const ENTRY_BYTES: usize = 32;

/// Client ids (`soc15_ih_clientid.h`), those rig decodes.
pub mod client {
    /// `SOC21_IH_CLIENTID_GFX` (0x0a): the GC hub's UTCL2 (page faults of GC clients).
    pub const GFX: u8 = 0x0a;
    /// `SOC21_IH_CLIENTID_VMC` (0x12): the MM hub's VM (page faults of MM clients).
    pub const VMC: u8 = 0x12;
    /// `SOC21_IH_CLIENTID_GRBM_CP` (0x14): the command processor.
    pub const GRBM_CP: u8 = 0x14;
}

/// Source ids (`ivsrcid/gfx/irqsrcs_gfx_11_0_0.h`, `ivsrcid/vmc/irqsrcs_vmc_1_0.h`).
pub mod src {
    /// `UTCL2_1_0__SRCID__FAULT` (0), of client [`super::client::GFX`]: a GC hub page fault.
    pub const UTCL2_FAULT: u8 = 0;
    /// `VMC_1_0__SRCID__VM_FAULT` (0), of client [`super::client::VMC`]: an MM hub page fault.
    pub const VM_FAULT: u8 = 0;
    /// `GFX_11_0_0__SRCID__CP_EOP_INTERRUPT` (181): an end-of-pipe release with an interrupt.
    pub const CP_EOP: u8 = 181;
    /// `GFX_11_0_0__SRCID__CP_BAD_OPCODE_ERROR` (183): a queue read a packet it cannot run.
    pub const CP_BAD_OPCODE: u8 = 183;
    /// `GFX_11_0_0__SRCID__CP_PRIV_REG_FAULT` (184): a queue wrote a privileged register.
    pub const CP_PRIV_REG_FAULT: u8 = 184;
    /// `GFX_11_0_0__SRCID__CP_PRIV_INSTR_FAULT` (185): a queue ran a privileged packet.
    pub const CP_PRIV_INSTR_FAULT: u8 = 185;
}

/// The bits of a page fault's `src_data[1]` (`gmc_v11_0_process_interrupt`): bits 3:0 are
/// the faulting address's bits 47:44 (`src_data[0]` its bits 43:12).
pub mod fault {
    /// The access was a write.
    pub const WRITE: u32 = 1 << 5;
    /// A retry fault (the access waits for the driver to map the page).
    pub const RETRY: u32 = 1 << 7;
}

/// One decoded entry (`struct amdgpu_iv_entry`'s fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// `client_id`.
    pub client_id: u8,
    /// `src_id`.
    pub src_id: u8,
    /// `ring_id`.
    pub ring_id: u8,
    /// `vmid` (4 bits).
    pub vmid: u8,
    /// `vmid_src`: the VMID is the MM hub's.
    pub vmid_src: bool,
    /// `timestamp` (48 bits).
    pub timestamp: u64,
    /// `timestamp_src`.
    pub timestamp_src: bool,
    /// `pasid`.
    pub pasid: u16,
    /// `node_id`.
    pub node_id: u8,
    /// `src_data[0..4]`.
    pub src_data: [u32; 4],
}

impl Entry {
    /// The entry in `bytes` (little-endian words).
    pub fn decode(bytes: &[u8; ENTRY_BYTES]) -> Entry {
        let dw = |i: usize| {
            u32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ])
        };
        let byte = |w: u32, shift: u32| (w >> shift).to_le_bytes()[0];
        let (d0, d2, d3) = (dw(0), dw(2), dw(3));
        Entry {
            client_id: byte(d0, 0),
            src_id: byte(d0, 8),
            ring_id: byte(d0, 16),
            vmid: byte(d0, 24) & 0xf,
            vmid_src: d0 >> 31 != 0,
            timestamp: u64::from(dw(1)) | u64::from(d2 & 0xffff) << 32,
            timestamp_src: d2 >> 31 != 0,
            pasid: u16::from_le_bytes([byte(d3, 0), byte(d3, 8)]),
            node_id: byte(d3, 16),
            src_data: [dw(4), dw(5), dw(6), dw(7)],
        }
    }

    /// Its bytes, as the IH writes them. Fields past their bits are cut to them.
    pub fn encode(&self) -> [u8; ENTRY_BYTES] {
        let ts = self.timestamp.to_le_bytes();
        let words = [
            u32::from(self.client_id)
                | u32::from(self.src_id) << 8
                | u32::from(self.ring_id) << 16
                | u32::from(self.vmid & 0xf) << 24
                | u32::from(self.vmid_src) << 31,
            u32::from_le_bytes([ts[0], ts[1], ts[2], ts[3]]),
            u32::from(u16::from_le_bytes([ts[4], ts[5]])) | u32::from(self.timestamp_src) << 31,
            u32::from(self.pasid) | u32::from(self.node_id) << 16,
            self.src_data[0],
            self.src_data[1],
            self.src_data[2],
            self.src_data[3],
        ];
        let mut out = [0u8; ENTRY_BYTES];
        for (i, w) in words.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// The faulting address of a page-fault entry (`src_data[0] << 12 | (src_data[1] & 0xf)
    /// << 44`).
    pub fn fault_addr(&self) -> u64 {
        u64::from(self.src_data[0]) << 12 | u64::from(self.src_data[1] & 0xf) << 44
    }

    /// `src_data` of a page fault at `addr`.
    pub fn fault_data(addr: u64, write: bool, retry: bool) -> [u32; 4] {
        let page = (addr >> 12).to_le_bytes();
        let hi = (addr >> 44).to_le_bytes()[0] & 0xf;
        [
            u32::from_le_bytes([page[0], page[1], page[2], page[3]]),
            u32::from(hi)
                | if write { fault::WRITE } else { 0 }
                | if retry { fault::RETRY } else { 0 },
            0,
            0,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_and_decodes_as_amdgpu_does() {
        let e = Entry {
            client_id: client::GFX,
            src_id: src::UTCL2_FAULT,
            ring_id: 0,
            vmid: 3,
            vmid_src: false,
            timestamp: 0x1234_5678_9abc,
            timestamp_src: true,
            pasid: 0x8001,
            node_id: 0,
            src_data: Entry::fault_data(0x0000_8765_4321_0000, true, false),
        };
        let b = e.encode();
        assert_eq!(Entry::decode(&b), e);
        // Word 0 by hand: client 0x0a, src 0, ring 0, vmid 3.
        assert_eq!(&b[0..4], &[0x0a, 0, 0, 0x03]);
        assert_eq!(e.fault_addr(), 0x0000_8765_4321_0000);
        assert_eq!(e.src_data[1], 0x8 | fault::WRITE);
    }
}
