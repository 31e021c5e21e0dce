//! The GPU's virtual memory as the GC and MM hubs of GC 11 / MMHUB 3.0 walk it
//! (`amdgpu_vm.h`, `gmc_v11_0.c`, `gfxhub_v3_0.c`, `mmhub_v3_0.c`).
//!
//! Each hub has 16 VM contexts, one per VMID. A context's `CNTL` register enables it and
//! says how deep its table is (`PAGE_TABLE_DEPTH`) and how many address bits its last level
//! takes beyond 9 (`PAGE_TABLE_BLOCK_SIZE`); `PAGE_TABLE_BASE_ADDR` holds the root entry (a
//! PDE: the root table's address with [`pte::VALID`]); `START`/`END` bound the page numbers it
//! translates. Context 0 is the GART: amdgpu gives it depth 0, one flat table of PTEs over
//! `gart_start..=gart_end`. Contexts 1 to 15 get depth 3 and block size 9
//! (`amdgpu_vm_adjust_size(adev, 256 * 1024, 9, 3, 48)`): four levels of 512 eight-byte
//! entries (PDB2, PDB1, PDB0, PTB), 9 address bits each above the 12 of a 4 KiB page, 48 bits
//! in all ([`Walk`]).
//!
//! An entry is 64 bits ([`pte`]): bits 47:12 a physical address (VRAM's, or with
//! [`pte::SYSTEM`] a system-memory bus address), bit 0 valid, and in a PTE the permission
//! bits. A PDB0 entry with [`pte::PDE_PTE`] is itself a PTE (a 2 MiB page). Addresses in
//! entries and in `PAGE_TABLE_BASE_ADDR` are physical, not MC addresses
//! (`gmc_v11_0_get_vm_pde`'s `amdgpu_gmc_vram_mc2pa`).
//!
//! This module owns the format's numbers; the registers' addresses are [`crate::mmio`]'s.

/// The bits of a page-table entry (`AMDGPU_PTE_*`, `AMDGPU_PDE_*` of `amdgpu_vm.h`, GFX 9 to
/// 11; GFX 12 moves `PDE_PTE` and `PRT`).
pub mod pte {
    /// `AMDGPU_PTE_VALID`.
    pub const VALID: u64 = 1 << 0;
    /// `AMDGPU_PTE_SYSTEM`: the address is system memory's (a bus address), not VRAM's.
    pub const SYSTEM: u64 = 1 << 1;
    /// `AMDGPU_PTE_SNOOPED`: accesses snoop the CPU's caches.
    pub const SNOOPED: u64 = 1 << 2;
    /// `AMDGPU_PTE_EXECUTABLE`.
    pub const EXECUTABLE: u64 = 1 << 4;
    /// `AMDGPU_PTE_READABLE`.
    pub const READABLE: u64 = 1 << 5;
    /// `AMDGPU_PTE_WRITEABLE`.
    pub const WRITEABLE: u64 = 1 << 6;
    /// `AMDGPU_PTE_PRT`: a partially resident page (reads zero, writes drop).
    pub const PRT: u64 = 1 << 51;
    /// `AMDGPU_PDE_PTE`: this PDB0 entry is a PTE of a 2 MiB page.
    pub const PDE_PTE: u64 = 1 << 54;
    /// The address bits, 47:12.
    pub const ADDR: u64 = 0x0000_ffff_ffff_f000;
    /// `AMDGPU_PTE_FRAG(x)`: the fragment field, bits 11:7.
    pub const fn frag(x: u64) -> u64 {
        (x & 0x1f) << 7
    }
}

/// Entries in one table of a VMID's tree (`block_size` 9).
pub const ENTRIES: u64 = 512;
/// Bytes of one table.
pub const TABLE_BYTES: u64 = ENTRIES * 8;
/// The page table depth amdgpu gives contexts 1 to 15 on GC 11 (`num_level`).
pub const VM_DEPTH: u32 = 3;
/// The address bits of a VMID's space (`amdgpu_vm_adjust_size`'s 48).
pub const VA_BITS: u32 = 48;
/// Bytes of a GPU page.
pub const PAGE: u64 = 4096;

/// The VM contexts of a hub.
pub const CONTEXTS: u8 = 16;

/// How an access uses its page, for the permission it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// A read (needs [`pte::READABLE`]).
    Read,
    /// A write (needs [`pte::WRITEABLE`]).
    Write,
    /// An instruction fetch (needs [`pte::EXECUTABLE`]).
    Execute,
}

impl Access {
    /// The PTE bit it needs.
    pub const fn bit(self) -> u64 {
        match self {
            Access::Read => pte::READABLE,
            Access::Write => pte::WRITEABLE,
            Access::Execute => pte::EXECUTABLE,
        }
    }
}

/// The shape of a context's walk, from its `CNTL` register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// `PAGE_TABLE_DEPTH`: directory levels above the PTB (0: one flat table).
    pub depth: u32,
    /// `PAGE_TABLE_BLOCK_SIZE`: address bits of the PTB beyond 9.
    pub block_size: u32,
}

impl Walk {
    /// The index into the table at `level` (0 the root, `depth` the PTB) of page number
    /// `page` (counted from the context's start), for a walk of more than one level.
    pub fn index(self, level: u32, page: u64) -> u64 {
        let ptb_bits = 9 + self.block_size;
        let below = (self.depth - level) * 9;
        let shift = if level == self.depth {
            0
        } else {
            ptb_bits + below - 9
        };
        let bits = if level == self.depth { ptb_bits } else { 9 };
        (page >> shift) & ((1 << bits) - 1)
    }

    /// Pages one entry at `level` covers.
    pub fn pages_per_entry(self, level: u32) -> u64 {
        if level == self.depth {
            1
        } else {
            1 << (9 + self.block_size + (self.depth - level - 1) * 9)
        }
    }
}

/// The address of an entry: bits 47:12 of `entry`.
pub const fn entry_addr(entry: u64) -> u64 {
    entry & pte::ADDR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_the_headers() {
        // amdgpu_vm.h (Linux 6.12).
        assert_eq!(pte::PDE_PTE, 0x40_0000_0000_0000);
        assert_eq!(pte::frag(9), 9 << 7);
        assert_eq!(entry_addr(0x8000_1234_5678_9071), 0x1234_5678_9000);
    }

    #[test]
    fn a_four_level_walk_takes_nine_bits_a_level() {
        let w = Walk {
            depth: VM_DEPTH,
            block_size: 0,
        };
        // VA 0x0000_8040_2010_1000: 0x100 in each directory, 0x101 in the PTB.
        let page = 0x0000_8040_2010_1000u64 >> 12;
        assert_eq!(w.index(0, page), 0x100);
        assert_eq!(w.index(1, page), 0x100);
        assert_eq!(w.index(2, page), 0x100);
        assert_eq!(w.index(3, page), 0x101);
        assert_eq!(w.pages_per_entry(2), 512);
        assert_eq!(w.pages_per_entry(0), 512 * 512 * 512);
    }
}
