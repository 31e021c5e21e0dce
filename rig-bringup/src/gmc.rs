//! Stage 7 of docs/pci.md: the GMC of GC 11 (`gfxhub_v3_0.c`, `mmhub_v3_0.c`,
//! `gmc_v11_0.c`): both hubs' GART (VM context 0) for system memory and the GPU's own, a
//! page table per VMID in the format the hubs walk ([`rig_amd::gmc`]), and TLB invalidation
//! through engine 17.
//!
//! The GART is one flat table of [`GART_BYTES`] / 4 KiB PTEs at [`layout::GART_TABLE`],
//! placed at the top of the 48-bit MC space as amdgpu places it on a dGPU
//! (`AMDGPU_GART_PLACEMENT_HIGH`). Each VMID's tree (depth 3, 512 entries a table) is built
//! in the arena at [`layout::PAGE_TABLES`], its directories made as mappings need them; the
//! bring-up keeps which directory tables it made, never reading them back from VRAM. Every
//! address given to the hubs is physical (a VRAM offset: a dGPU's `vram_base_offset` is 0);
//! the rings and buffers the blocks read are MC addresses (the frame buffer's base plus the
//! offset).

use std::collections::HashMap;

use rig_amd::discovery::hw_id;
use rig_amd::gmc::{PAGE, TABLE_BYTES, VM_DEPTH, Walk, pte};
use rig_amd::mmio::Table;

use crate::{Bar, Bringup, BringupError, Until, layout};

/// The GART's bytes (`gmc_v11_0`'s default `gart_size`, 512 MiB).
pub const GART_BYTES: u64 = 512 << 20;
/// The GART's first MC address: the top of the 48-bit MC space less its size.
pub const GART_START: u64 = (1 << 48) - GART_BYTES;
/// The last page number of a VMID's space (`max_pfn - 1` of a 48-bit space).
pub const VM_LAST_PAGE: u64 = (1 << 36) - 1;

/// A hub the bring-up programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hub {
    /// The GC hub.
    Gc,
    /// The MM hub.
    Mm,
}

/// What the bring-up made of the GMC.
#[derive(Debug, Default)]
pub(crate) struct GmcState {
    pub(crate) ready: bool,
    /// Each VMID's root table (VRAM offset) and PASID.
    roots: HashMap<u8, (u64, u16)>,
    /// The directory tables made: (VMID, level of the entry's table, the entry's index
    /// path) to the VRAM offset of the table it points to.
    dirs: HashMap<(u8, u32, u64), u64>,
    /// The arena's next free table.
    next: u64,
}

impl<B: Bar> Bringup<B> {
    fn hub(&self, hub: Hub) -> (&'static Table, u16) {
        match hub {
            Hub::Gc => (self.blocks.regs.gc, hw_id::GC),
            Hub::Mm => (self.blocks.regs.mmhub, hw_id::MMHUB),
        }
    }

    /// The hub's register `name` under its prefix (`GCVM_`, `MMVM_`, `GCMC_`, `MMMC_`).
    pub(crate) fn hub_name(table: &Table, name: &str) -> String {
        let p = table
            .regs
            .iter()
            .find_map(|r| r.name.strip_suffix("VM_CONTEXT0_CNTL"))
            .unwrap_or("");
        format!("{p}{name}")
    }

    fn hub_write(&mut self, hub: Hub, name: &str, value: u32) -> Result<(), BringupError> {
        let (table, hw) = self.hub(hub);
        self.write(table, hw, &Self::hub_name(table, name), value)
    }

    fn hub_set<S: AsRef<str>>(
        &self,
        hub: Hub,
        reg: &str,
        fields: &[(S, u32)],
        word: u32,
    ) -> Result<u32, BringupError> {
        let (table, _) = self.hub(hub);
        let name = Self::hub_name(table, reg);
        set_fields(table, &name, fields, word)
    }

    fn write_pair(&mut self, hub: Hub, name: &str, v: u64) -> Result<(), BringupError> {
        self.hub_write(hub, &format!("{name}_LO32"), lo(v))?;
        self.hub_write(hub, &format!("{name}_HI32"), hi(v))
    }

    /// Stage 7's setup, in `gfxhub_v3_0_gart_enable`'s order for each hub: the GART's
    /// table, start and end (context 0), the AGP aperture closed and the system aperture
    /// over the frame buffer, the L1 TLB, the L2 cache, context 0 enabled with depth 0,
    /// contexts 1 to 15 enabled (depth 3, block size 9, every fault's default and
    /// interrupt on, no retry), then a flush of VMID 0.
    pub fn init_gmc(&mut self) -> Result<(), BringupError> {
        if !self.psp.autoload {
            return Err(BringupError::Order("the GMC before the GC's firmware"));
        }
        let zero = vec![0u8; (GART_BYTES / PAGE * 8) as usize];
        self.vram_write(layout::GART_TABLE, &zero, "GART table")?;
        let fb_top = self.fb_base + self.vram_bytes - 1;
        for hub in [Hub::Gc, Hub::Mm] {
            self.write_pair(
                hub,
                "VM_CONTEXT0_PAGE_TABLE_BASE_ADDR",
                layout::GART_TABLE | pte::VALID,
            )?;
            self.write_pair(hub, "VM_CONTEXT0_PAGE_TABLE_START_ADDR", GART_START >> 12)?;
            let end = (GART_START + GART_BYTES - 1) >> 12;
            self.write_pair(hub, "VM_CONTEXT0_PAGE_TABLE_END_ADDR", end)?;
            // AGP closed (BOT above TOP), the system aperture over the frame buffer.
            self.hub_write(hub, "MC_VM_AGP_BASE", 0)?;
            self.hub_write(hub, "MC_VM_AGP_BOT", 0xff_ffff)?;
            self.hub_write(hub, "MC_VM_AGP_TOP", 0)?;
            self.hub_write(
                hub,
                "MC_VM_SYSTEM_APERTURE_LOW_ADDR",
                lo(self.fb_base >> 18),
            )?;
            self.hub_write(hub, "MC_VM_SYSTEM_APERTURE_HIGH_ADDR", lo(fb_top >> 18))?;
            let tlb = self.hub_set(
                hub,
                "MC_VM_MX_L1_TLB_CNTL",
                &[
                    ("ENABLE_L1_TLB", 1),
                    ("SYSTEM_ACCESS_MODE", 3),
                    ("ENABLE_ADVANCED_DRIVER_MODEL", 1),
                    ("SYSTEM_APERTURE_UNMAPPED_ACCESS", 0),
                    ("MTYPE", 3),
                ],
                0,
            )?;
            self.hub_write(hub, "MC_VM_MX_L1_TLB_CNTL", tlb)?;
            let l2 = self.hub_set(hub, "VM_L2_CNTL", &[("ENABLE_L2_CACHE", 1)], 0)?;
            self.hub_write(hub, "VM_L2_CNTL", l2)?;
            let c0 = self.hub_set(
                hub,
                "VM_CONTEXT0_CNTL",
                &[("ENABLE_CONTEXT", 1), ("PAGE_TABLE_DEPTH", 0)],
                0,
            )?;
            self.hub_write(hub, "VM_CONTEXT0_CNTL", c0)?;
            let mut fields: Vec<(String, u32)> = vec![
                ("ENABLE_CONTEXT".into(), 1),
                ("PAGE_TABLE_DEPTH".into(), VM_DEPTH),
                ("PAGE_TABLE_BLOCK_SIZE".into(), 0),
                ("RETRY_PERMISSION_OR_INVALID_PAGE_FAULT".into(), 0),
            ];
            for f in [
                "RANGE",
                "DUMMY_PAGE",
                "PDE0",
                "VALID",
                "READ",
                "WRITE",
                "EXECUTE",
            ] {
                fields.push((format!("{f}_PROTECTION_FAULT_ENABLE_DEFAULT"), 1));
                fields.push((format!("{f}_PROTECTION_FAULT_ENABLE_INTERRUPT"), 1));
            }
            for vmid in 1..16u8 {
                let cntl = self.hub_set(hub, "VM_CONTEXT0_CNTL", &fields, 0)?;
                self.hub_write(hub, &format!("VM_CONTEXT{vmid}_CNTL"), cntl)?;
                let ctx = format!("VM_CONTEXT{vmid}_PAGE_TABLE");
                self.write_pair(hub, &format!("{ctx}_START_ADDR"), 0)?;
                self.write_pair(hub, &format!("{ctx}_END_ADDR"), VM_LAST_PAGE)?;
            }
            self.flush(hub, 0)?;
        }
        self.gmc.ready = true;
        self.gmc.next = layout::PAGE_TABLES;
        Ok(())
    }

    /// `gmc_v11_0_flush_vm_hub` through engine 17: a request for `vmid` invalidating the
    /// L2's PTEs and PDEs and the L1's PTEs, then a wait for its bit in the acknowledgement.
    pub fn flush(&mut self, hub: Hub, vmid: u8) -> Result<(), BringupError> {
        let req = self.hub_set(
            hub,
            "VM_INVALIDATE_ENG17_REQ",
            &[
                ("PER_VMID_INVALIDATE_REQ", 1 << vmid),
                ("FLUSH_TYPE", 0),
                ("INVALIDATE_L2_PTES", 1),
                ("INVALIDATE_L2_PDE0", 1),
                ("INVALIDATE_L2_PDE1", 1),
                ("INVALIDATE_L2_PDE2", 1),
                ("INVALIDATE_L1_PTES", 1),
                ("CLEAR_PROTECTION_FAULT_STATUS_ADDR", 0),
            ],
            0,
        )?;
        self.hub_write(hub, "VM_INVALIDATE_ENG17_REQ", req)?;
        let (table, hw) = self.hub(hub);
        let ack = Self::hub_name(table, "VM_INVALIDATE_ENG17_ACK");
        let during = || format!("the {hub:?} hub's invalidation of VMID {vmid}");
        self.wait(
            table,
            hw,
            &ack,
            Until::Masked {
                mask: 1 << vmid,
                expect: 1 << vmid,
            },
            &during,
        )?;
        Ok(())
    }

    /// Maps GART page `index` (MC address [`GART_START`] + `index` * 4 KiB) to physical
    /// address `phys` with PTE `flags` ([`pte`]; [`pte::VALID`] is added), then flushes
    /// VMID 0 of both hubs.
    pub fn gart_map(&mut self, index: u64, phys: u64, flags: u64) -> Result<(), BringupError> {
        if !self.gmc.ready {
            return Err(BringupError::Order("a GART mapping before the GMC's setup"));
        }
        if index >= GART_BYTES / PAGE || phys & (PAGE - 1) != 0 {
            return Err(BringupError::Mapping {
                vmid: 0,
                va: index * PAGE,
                phys,
            });
        }
        let entry = phys | flags | pte::VALID;
        self.vram_write(
            layout::GART_TABLE + index * 8,
            &entry.to_le_bytes(),
            "GART PTE",
        )?;
        self.flush(Hub::Gc, 0)?;
        self.flush(Hub::Mm, 0)
    }

    /// Gives VMID `vmid` (1 to 15) an empty page table and `pasid`: its root table, its
    /// context's base on both hubs, the IH's VMID-to-PASID entries, and a flush.
    pub fn vm_create(&mut self, vmid: u8, pasid: u16) -> Result<(), BringupError> {
        if !self.gmc.ready {
            return Err(BringupError::Order(
                "a VMID's page table before the GMC's setup",
            ));
        }
        if !(1..16).contains(&vmid) || self.gmc.roots.contains_key(&vmid) {
            return Err(BringupError::Vmid(vmid));
        }
        let root = self.table()?;
        self.gmc.roots.insert(vmid, (root, pasid));
        let osssys = self.blocks.regs.osssys;
        self.write(
            osssys,
            hw_id::OSSSYS,
            &format!("IH_VMID_{vmid}_LUT"),
            pasid.into(),
        )?;
        self.write(
            osssys,
            hw_id::OSSSYS,
            &format!("IH_VMID_{vmid}_LUT_MM"),
            pasid.into(),
        )?;
        for hub in [Hub::Gc, Hub::Mm] {
            let ctx = format!("VM_CONTEXT{vmid}_PAGE_TABLE_BASE_ADDR");
            self.write_pair(hub, &ctx, root | pte::VALID)?;
            self.flush(hub, vmid)?;
        }
        Ok(())
    }

    /// A zeroed table from the arena.
    fn table(&mut self) -> Result<u64, BringupError> {
        let at = self.gmc.next;
        if at + TABLE_BYTES > layout::PAGE_TABLES_END {
            return Err(BringupError::PageTablesFull);
        }
        self.gmc.next += TABLE_BYTES;
        self.vram_write(at, &[0u8; TABLE_BYTES as usize], "page table")?;
        Ok(at)
    }

    /// Maps the 4 KiB page at `va` of VMID `vmid` to physical address `phys` with PTE
    /// `flags` ([`pte`]; [`pte::VALID`] is added), making the directories it needs, then
    /// flushes the VMID on both hubs.
    pub fn vm_map(&mut self, vmid: u8, va: u64, phys: u64, flags: u64) -> Result<(), BringupError> {
        let &(root, _) = self.gmc.roots.get(&vmid).ok_or(BringupError::Vmid(vmid))?;
        if va & (PAGE - 1) != 0 || phys & (PAGE - 1) != 0 || va >> 12 > VM_LAST_PAGE {
            return Err(BringupError::Mapping { vmid, va, phys });
        }
        let walk = Walk {
            depth: VM_DEPTH,
            block_size: 0,
        };
        let page = va >> 12;
        let mut table = root;
        for level in 0..VM_DEPTH {
            let index = walk.index(level, page);
            // The entry, named by the pages it covers.
            let key = (vmid, level, page / walk.pages_per_entry(level));
            table = match self.gmc.dirs.get(&key) {
                Some(&t) => t,
                None => {
                    let t = self.table()?;
                    let pde = t | pte::VALID;
                    self.vram_write(table + index * 8, &pde.to_le_bytes(), "PDE")?;
                    self.gmc.dirs.insert(key, t);
                    t
                }
            };
        }
        let entry = phys | flags | pte::VALID;
        let index = walk.index(VM_DEPTH, page);
        self.vram_write(table + index * 8, &entry.to_le_bytes(), "PTE")?;
        for hub in [Hub::Gc, Hub::Mm] {
            self.flush(hub, vmid)?;
        }
        Ok(())
    }

    /// VMID `vmid`'s root table (a VRAM offset) and PASID, once made.
    pub fn vm_root(&self, vmid: u8) -> Option<(u64, u16)> {
        self.gmc.roots.get(&vmid).copied()
    }
}

/// `word` with `fields` of register `reg` of `table` set.
pub(crate) fn set_fields<S: AsRef<str>>(
    table: &'static Table,
    reg: &str,
    fields: &[(S, u32)],
    word: u32,
) -> Result<u32, BringupError> {
    let r = table.reg(reg).ok_or_else(|| BringupError::Register {
        table: table.name,
        name: reg.into(),
    })?;
    fields.iter().try_fold(word, |w, (name, v)| {
        let name = name.as_ref();
        let f = r.field(name).ok_or_else(|| BringupError::Register {
            table: table.name,
            name: format!("{reg}.{name}"),
        })?;
        Ok(f.set(w, *v))
    })
}

fn lo(v: u64) -> u32 {
    let b = v.to_le_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn hi(v: u64) -> u32 {
    let b = v.to_le_bytes();
    u32::from_le_bytes([b[4], b[5], b[6], b[7]])
}
