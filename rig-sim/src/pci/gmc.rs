//! The GMC of the register-level model: the GC and MM hubs' VM contexts translating a
//! client's virtual address through the page tables the driver wrote in VRAM, in the format
//! [`rig_amd::gmc`] states, and faulting as the hardware does.
//!
//! A translation reads, for the access's hub and VMID, the context's `CNTL` (enable, depth,
//! block size), `PAGE_TABLE_BASE_ADDR` (the root PDE), `START` and `END`, then walks: a page
//! outside `START..=END` is a range fault, a root or directory entry without
//! [`pte::VALID`] a PDE fault, a PTE without it an invalid-page fault, a PTE without the
//! access's permission bit a permission fault. A PDB0 entry with [`pte::PDE_PTE`] maps a
//! 2 MiB page. Entries and the root hold physical addresses: VRAM's, or with [`pte::SYSTEM`]
//! a system-memory bus address, which the model does not hold yet
//! ([`ModelError::SystemMemory`]).
//!
//! The walk's results are cached per page (the hubs' TLBs and L2 cache of PTEs): a changed
//! entry is seen only after an invalidation through `VM_INVALIDATE_ENG17_REQ` for its VMID,
//! which the model acknowledges at once in `VM_INVALIDATE_ENG17_ACK`. On a fault the hub's
//! `VM_L2_PROTECTION_FAULT_STATUS` and `_ADDR` take the first fault (later ones set
//! `MORE_FAULTS` until a write of `VM_L2_PROTECTION_FAULT_CNTL` with
//! `CLEAR_PROTECTION_FAULT_STATUS_ADDR` clears them), and, where the context's `CNTL` enables
//! that fault's interrupt, the IH ring takes an entry (client `GFX` with source
//! `UTCL2_FAULT` for the GC hub, `VMC` with `VM_FAULT` for the MM hub; the VMID, the PASID
//! of the IH's `IH_VMID_n_LUT`, the address and whether it was a write). Which bits a real
//! hub sets in `PERMISSION_FAULTS` is not public; the model sets bit 0 for a permission fault
//! and `MAPPING_ERROR` for the others (docs/pci.md). PRT pages and fragments are not modelled
//! yet: a PRT PTE is walked as any other.

use rig_amd::gmc::{Access, Walk, entry_addr, pte};
use rig_amd::ih::{Entry, client, src};
use rig_amd::mmio::{Block, Table};

use super::{ModelError, PciModel};

/// A hub: which VM contexts translate an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hub {
    /// The GC hub (`GCVM_*`): shaders, the command processor, SDMA on GC 11.
    Gc,
    /// The MM hub (`MMVM_*`): the other clients.
    Mm,
}

/// Where a translated address lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phys {
    /// VRAM, at this offset.
    Vram(u64),
    /// System memory, at this bus address.
    System(u64),
}

/// Why a translation faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The context is not enabled.
    Disabled,
    /// The page lies outside the context's `START..=END`.
    Range,
    /// The context's `PAGE_TABLE_BASE_ADDR` is not a valid PDE.
    NoRoot,
    /// The entry for the page in the directory at `level` (0 the root) is not valid.
    Pde {
        /// The directory's level.
        level: u32,
    },
    /// The PTE is not valid.
    Invalid,
    /// The PTE lacks the access's permission.
    Permission,
}

/// A translation fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The hub.
    pub hub: Hub,
    /// The VMID.
    pub vmid: u8,
    /// The faulting virtual address.
    pub addr: u64,
    /// The access.
    pub access: Access,
    /// Why.
    pub kind: FaultKind,
}

/// A cached translation: the PTE's bits and the physical page.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cached {
    pte: u64,
    page: Phys,
}

impl PciModel {
    fn hub_table(&self, hub: Hub) -> (&'static Table, Block) {
        match hub {
            Hub::Gc => (self.blocks.regs.gc, Block::Gc),
            Hub::Mm => (self.blocks.regs.mmhub, Block::Mmhub),
        }
    }

    /// The hub's register prefix (`GC`, `MM` or none) of its `VM_CONTEXT0_CNTL`.
    fn prefix(table: &Table) -> &'static str {
        table
            .regs
            .iter()
            .find_map(|r| r.name.strip_suffix("VM_CONTEXT0_CNTL"))
            .unwrap_or("")
    }

    fn hub_reg(&self, hub: Hub, name: &str) -> u32 {
        let (table, block) = self.hub_table(hub);
        self.reg(block, &format!("{}{name}", Self::prefix(table)))
    }

    fn hub_field(&self, hub: Hub, reg: &str, field: &str, value: u32) -> u32 {
        let (table, _) = self.hub_table(hub);
        table
            .reg(&format!("{}{reg}", Self::prefix(table)))
            .and_then(|r| r.field(field))
            .map_or(0, |f| f.get(value))
    }

    fn pair(&self, hub: Hub, name: &str) -> u64 {
        u64::from(self.hub_reg(hub, &format!("{name}_HI32"))) << 32
            | u64::from(self.hub_reg(hub, &format!("{name}_LO32")))
    }

    fn read_entry(&self, addr: u64, system: bool) -> Result<u64, ModelError> {
        if system {
            return Err(ModelError::SystemMemory { addr });
        }
        let mut b = [0u8; 8];
        super::read_pages(&self.vram.pages, self.vram.size, addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Translates `va` for `access` through VMID `vmid`'s context of `hub`, as a client of
    /// that hub would; a fault is recorded and raised as the hardware does (see the module's
    /// docs) and returned as [`ModelError::PageFault`].
    pub fn translate(
        &mut self,
        hub: Hub,
        vmid: u8,
        va: u64,
        access: Access,
    ) -> Result<Phys, ModelError> {
        let page = va >> 12;
        let within = va & 0xfff;
        let at = |p: Phys| match p {
            Phys::Vram(a) => Phys::Vram(a + within),
            Phys::System(a) => Phys::System(a + within),
        };
        if let Some(c) = self.tlb.get(&(hub, vmid, page)).copied() {
            if c.pte & access.bit() == 0 {
                return Err(self.fault(hub, vmid, va, access, FaultKind::Permission));
            }
            return Ok(at(c.page));
        }
        match self.walk(hub, vmid, page)? {
            Ok(c) => {
                self.tlb.insert((hub, vmid, page), c);
                if c.pte & access.bit() == 0 {
                    return Err(self.fault(hub, vmid, va, access, FaultKind::Permission));
                }
                Ok(at(c.page))
            }
            Err(kind) => Err(self.fault(hub, vmid, va, access, kind)),
        }
    }

    /// The walk of `page` (a virtual page number): the translation, or why it faults.
    fn walk(&self, hub: Hub, vmid: u8, page: u64) -> Result<Result<Cached, FaultKind>, ModelError> {
        let ctx = format!("VM_CONTEXT{vmid}");
        let cntl = self.hub_reg(hub, &format!("{ctx}_CNTL"));
        let field = |f: &str| self.hub_field(hub, "VM_CONTEXT0_CNTL", f, cntl);
        if field("ENABLE_CONTEXT") == 0 {
            return Ok(Err(FaultKind::Disabled));
        }
        let walk = Walk {
            depth: field("PAGE_TABLE_DEPTH"),
            block_size: field("PAGE_TABLE_BLOCK_SIZE"),
        };
        let start = self.pair(hub, &format!("{ctx}_PAGE_TABLE_START_ADDR")) & 0xf_ffff_ffff;
        let end = self.pair(hub, &format!("{ctx}_PAGE_TABLE_END_ADDR")) & 0xf_ffff_ffff;
        if page < start || page > end {
            return Ok(Err(FaultKind::Range));
        }
        let rel = page - start;
        let root = self.pair(hub, &format!("{ctx}_PAGE_TABLE_BASE_ADDR"));
        if root & pte::VALID == 0 {
            return Ok(Err(FaultKind::NoRoot));
        }
        let mut table = (entry_addr(root), root & pte::SYSTEM != 0);
        for level in 0..=walk.depth {
            let index = if walk.depth == 0 {
                rel
            } else {
                walk.index(level, rel)
            };
            let entry = self.read_entry(table.0 + index * 8, table.1)?;
            let last = level == walk.depth;
            let huge = !last && level + 1 == walk.depth && entry & pte::PDE_PTE != 0;
            if entry & pte::VALID == 0 {
                return Ok(Err(if last || huge {
                    FaultKind::Invalid
                } else {
                    FaultKind::Pde { level }
                }));
            }
            if last || huge {
                let within = if huge {
                    (rel % walk.pages_per_entry(level)) * 4096
                } else {
                    0
                };
                let addr = entry_addr(entry) + within;
                let page = if entry & pte::SYSTEM != 0 {
                    Phys::System(addr)
                } else {
                    Phys::Vram(addr)
                };
                return Ok(Ok(Cached { pte: entry, page }));
            }
            table = (entry_addr(entry), entry & pte::SYSTEM != 0);
        }
        // PANIC: the loop returns at its last level.
        unreachable!("a walk ends at its last level")
    }

    /// Records a fault in the hub's status registers and, where enabled, the IH ring.
    fn fault(
        &mut self,
        hub: Hub,
        vmid: u8,
        va: u64,
        access: Access,
        kind: FaultKind,
    ) -> ModelError {
        let fault = Fault {
            hub,
            vmid,
            addr: va,
            access,
            kind,
        };
        tracing::debug!(?fault, "model GMC: page fault");
        let (table, block) = self.hub_table(hub);
        let p = Self::prefix(table);
        let status_name = format!("{p}VM_L2_PROTECTION_FAULT_STATUS");
        if let Some(reg) = table.reg(&status_name) {
            let old = self.reg(block, &status_name);
            let f = |n: &str| reg.field(n).unwrap_or(rig_amd::regs::Field::new(0, 0));
            let status = if old != 0 {
                f("MORE_FAULTS").set(old, 1)
            } else {
                let mut s = f("VMID").put(u32::from(vmid));
                s = f("RW").set(s, u32::from(access == Access::Write));
                s = match kind {
                    FaultKind::Permission => f("PERMISSION_FAULTS").set(s, 1),
                    _ => f("MAPPING_ERROR").set(s, 1),
                };
                let page = (va >> 12).to_le_bytes();
                self.set_reg(
                    block,
                    &format!("{p}VM_L2_PROTECTION_FAULT_ADDR_LO32"),
                    u32::from_le_bytes([page[0], page[1], page[2], page[3]]),
                );
                self.set_reg(
                    block,
                    &format!("{p}VM_L2_PROTECTION_FAULT_ADDR_HI32"),
                    u32::from(page[4] & 0xf),
                );
                s
            };
            self.set_reg(block, &status_name, status);
        }
        let cntl_name = format!("{p}VM_CONTEXT{vmid}_CNTL");
        let cntl = self.reg(block, &cntl_name);
        let enable = match kind {
            FaultKind::Disabled => None,
            FaultKind::Range => Some("RANGE_PROTECTION_FAULT_ENABLE_INTERRUPT"),
            FaultKind::NoRoot | FaultKind::Pde { .. } => {
                Some("PDE0_PROTECTION_FAULT_ENABLE_INTERRUPT")
            }
            FaultKind::Invalid => Some("VALID_PROTECTION_FAULT_ENABLE_INTERRUPT"),
            FaultKind::Permission => Some(match access {
                Access::Read => "READ_PROTECTION_FAULT_ENABLE_INTERRUPT",
                Access::Write => "WRITE_PROTECTION_FAULT_ENABLE_INTERRUPT",
                Access::Execute => "EXECUTE_PROTECTION_FAULT_ENABLE_INTERRUPT",
            }),
        };
        if enable.is_some_and(|e| self.hub_field(hub, "VM_CONTEXT0_CNTL", e, cntl) != 0) {
            let lut = match hub {
                Hub::Gc => format!("IH_VMID_{vmid}_LUT"),
                Hub::Mm => format!("IH_VMID_{vmid}_LUT_MM"),
            };
            let pasid = self.reg(Block::Osssys, &lut).to_le_bytes();
            let (client_id, src_id) = match hub {
                Hub::Gc => (client::GFX, src::UTCL2_FAULT),
                Hub::Mm => (client::VMC, src::VM_FAULT),
            };
            self.post_interrupt(Entry {
                client_id,
                src_id,
                ring_id: 0,
                vmid,
                vmid_src: hub == Hub::Mm,
                timestamp: 0,
                timestamp_src: false,
                pasid: u16::from_le_bytes([pasid[0], pasid[1]]),
                node_id: 0,
                src_data: Entry::fault_data(va, access == Access::Write, false),
            });
        }
        ModelError::PageFault(fault)
    }

    /// A write of the hub's `VM_INVALIDATE_ENG17_REQ`: drops the cached translations of each
    /// VMID it names and acknowledges them.
    pub(crate) fn invalidate(&mut self, hub: Hub, value: u32) {
        let (table, block) = self.hub_table(hub);
        let p = Self::prefix(table);
        let req = table
            .reg(&format!("{p}VM_INVALIDATE_ENG17_REQ"))
            .and_then(|r| r.field("PER_VMID_INVALIDATE_REQ"))
            .map_or(0, |f| f.get(value));
        self.tlb
            .retain(|&(h, vmid, _), _| h != hub || req & (1 << vmid) == 0);
        self.set_reg(block, &format!("{p}VM_INVALIDATE_ENG17_ACK"), req);
    }

    /// A write of the hub's `VM_L2_PROTECTION_FAULT_CNTL`: bit
    /// `CLEAR_PROTECTION_FAULT_STATUS_ADDR` clears the fault status and address.
    pub(crate) fn fault_cntl(&mut self, hub: Hub, value: u32) {
        let (table, block) = self.hub_table(hub);
        let p = Self::prefix(table);
        let clear = table
            .reg(&format!("{p}VM_L2_PROTECTION_FAULT_CNTL"))
            .and_then(|r| r.field("CLEAR_PROTECTION_FAULT_STATUS_ADDR"))
            .is_some_and(|f| f.get(value) != 0);
        if clear {
            for r in ["STATUS", "ADDR_LO32", "ADDR_HI32"] {
                self.set_reg(block, &format!("{p}VM_L2_PROTECTION_FAULT_{r}"), 0);
            }
        }
    }

    /// Reads `out.len()` bytes at `va` as a client of `hub` running under `vmid`.
    pub fn gpu_read(
        &mut self,
        hub: Hub,
        vmid: u8,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), ModelError> {
        let mut done = 0;
        while done < out.len() {
            let at = va + done as u64;
            let n = (4096 - (at % 4096) as usize).min(out.len() - done);
            match self.translate(hub, vmid, at, Access::Read)? {
                Phys::Vram(a) => self.vram_read(a, &mut out[done..done + n])?,
                Phys::System(a) => return Err(ModelError::SystemMemory { addr: a }),
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `va` as a client of `hub` running under `vmid`.
    pub fn gpu_write(
        &mut self,
        hub: Hub,
        vmid: u8,
        va: u64,
        data: &[u8],
    ) -> Result<(), ModelError> {
        let mut done = 0;
        while done < data.len() {
            let at = va + done as u64;
            let n = (4096 - (at % 4096) as usize).min(data.len() - done);
            match self.translate(hub, vmid, at, Access::Write)? {
                Phys::Vram(a) => self.vram_write(a, &data[done..done + n])?,
                Phys::System(a) => return Err(ModelError::SystemMemory { addr: a }),
            }
            done += n;
        }
        Ok(())
    }
}
