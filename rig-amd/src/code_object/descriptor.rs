//! The 64-byte kernel descriptor at each kernel's `<name>.kd` symbol.
//!
//! A dispatch names a kernel by its descriptor's address; the command processor reads the
//! code's address and the `COMPUTE_PGM_RSRC*` values from it. Layout from LLVM's
//! `AMDHSAKernelDescriptor.h` and AMDGPUUsage "Kernel Descriptor". Every field is a
//! little-endian integer at a fixed offset.

/// `kernel_code_properties` bit 0: the private segment buffer is in user SGPRs.
pub const ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER: u16 = 1 << 0;
/// Bit 1: the dispatch packet's address is in user SGPRs (the kernel reads its packet).
pub const ENABLE_SGPR_DISPATCH_PTR: u16 = 1 << 1;
/// Bit 2: the queue's address (`amd_queue_t`) is in user SGPRs, a runtime's structure.
pub const ENABLE_SGPR_QUEUE_PTR: u16 = 1 << 2;
/// Bit 3: the kernarg segment's address is in user SGPRs.
pub const ENABLE_SGPR_KERNARG_SEGMENT_PTR: u16 = 1 << 3;
/// Bit 4: the dispatch id is in user SGPRs.
pub const ENABLE_SGPR_DISPATCH_ID: u16 = 1 << 4;
/// Bit 5: flat scratch initialisation is in user SGPRs.
pub const ENABLE_SGPR_FLAT_SCRATCH_INIT: u16 = 1 << 5;
/// Bit 6: the private segment size is in user SGPRs.
pub const ENABLE_SGPR_PRIVATE_SEGMENT_SIZE: u16 = 1 << 6;
/// Bit 10: the kernel runs in wave32 (GFX10+; GFX9 always runs wave64).
pub const ENABLE_WAVEFRONT_SIZE32: u16 = 1 << 10;
/// Bit 11: the kernel's stack is dynamically sized.
pub const USES_DYNAMIC_STACK: u16 = 1 << 11;

/// A kernel descriptor, field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelDescriptor {
    /// Bytes of static local data share (offset 0).
    pub group_segment_fixed_size: u32,
    /// Bytes of scratch per work-item (offset 4).
    pub private_segment_fixed_size: u32,
    /// Bytes of the kernarg segment (offset 8).
    pub kernarg_size: u32,
    /// The code's byte offset from the descriptor's own address (offset 16).
    pub kernel_code_entry_byte_offset: i64,
    /// `COMPUTE_PGM_RSRC3` (offset 44).
    pub compute_pgm_rsrc3: u32,
    /// `COMPUTE_PGM_RSRC1` (offset 48).
    pub compute_pgm_rsrc1: u32,
    /// `COMPUTE_PGM_RSRC2` (offset 52).
    pub compute_pgm_rsrc2: u32,
    /// Which user SGPRs the kernel takes, and its wave size (offset 56).
    pub kernel_code_properties: u16,
    /// Kernel arguments preloaded into SGPRs: length in bits 6:0, offset in bits 15:7 (offset 58).
    pub kernarg_preload: u16,
}

impl KernelDescriptor {
    /// A descriptor's size in bytes.
    pub const SIZE: usize = 64;

    /// Reads a descriptor from its 64 bytes.
    pub fn from_bytes(b: &[u8; Self::SIZE]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let mut entry = [0; 8];
        entry.copy_from_slice(&b[16..24]);
        Self {
            group_segment_fixed_size: u32_at(0),
            private_segment_fixed_size: u32_at(4),
            kernarg_size: u32_at(8),
            kernel_code_entry_byte_offset: i64::from_le_bytes(entry),
            compute_pgm_rsrc3: u32_at(44),
            compute_pgm_rsrc1: u32_at(48),
            compute_pgm_rsrc2: u32_at(52),
            kernel_code_properties: u16_at(56),
            kernarg_preload: u16_at(58),
        }
    }

    /// The descriptor's 64 bytes, reserved fields zero.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0; Self::SIZE];
        b[0..4].copy_from_slice(&self.group_segment_fixed_size.to_le_bytes());
        b[4..8].copy_from_slice(&self.private_segment_fixed_size.to_le_bytes());
        b[8..12].copy_from_slice(&self.kernarg_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.kernel_code_entry_byte_offset.to_le_bytes());
        b[44..48].copy_from_slice(&self.compute_pgm_rsrc3.to_le_bytes());
        b[48..52].copy_from_slice(&self.compute_pgm_rsrc1.to_le_bytes());
        b[52..56].copy_from_slice(&self.compute_pgm_rsrc2.to_le_bytes());
        b[56..58].copy_from_slice(&self.kernel_code_properties.to_le_bytes());
        b[58..60].copy_from_slice(&self.kernarg_preload.to_le_bytes());
        b
    }

    /// Whether `kernel_code_properties` has all of `bits`.
    pub fn has(&self, bits: u16) -> bool {
        self.kernel_code_properties & bits == bits
    }

    /// The number of kernarg dwords preloaded into SGPRs.
    pub fn kernarg_preload_length(&self) -> u16 {
        self.kernarg_preload & 0x7f
    }

    /// The kernarg dword offset from which arguments are preloaded.
    pub fn kernarg_preload_offset(&self) -> u16 {
        self.kernarg_preload >> 7
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_their_offsets() {
        let d = KernelDescriptor {
            group_segment_fixed_size: 0x1111_1111,
            private_segment_fixed_size: 0x2222_2222,
            kernarg_size: 0x3333_3333,
            kernel_code_entry_byte_offset: -0x1000,
            compute_pgm_rsrc3: 0x4444_4444,
            compute_pgm_rsrc1: 0x5555_5555,
            compute_pgm_rsrc2: 0x6666_6666,
            kernel_code_properties: 0x7777,
            kernarg_preload: (3 << 7) | 5,
        };
        let b = d.to_bytes();
        assert_eq!(b[0], 0x11);
        assert_eq!(b[4], 0x22);
        assert_eq!(b[8], 0x33);
        assert_eq!(&b[16..24], &(-0x1000i64).to_le_bytes());
        assert_eq!(b[44], 0x44);
        assert_eq!(b[48], 0x55);
        assert_eq!(b[52], 0x66);
        assert_eq!(b[56], 0x77);
        assert_eq!(KernelDescriptor::from_bytes(&b), d);
        assert_eq!(d.kernarg_preload_length(), 5);
        assert_eq!(d.kernarg_preload_offset(), 3);
    }
}
