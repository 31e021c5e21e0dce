//! The interrupt handler of the register-level model: OSSSYS 6.0's IH ring 0, written as the
//! hardware writes it ([`rig_amd::ih`] states the entry format).
//!
//! The model's blocks raise an interrupt as an [`Entry`] ([`PciModel::post_interrupt`]).
//! With `IH_RB_CNTL.RB_ENABLE` set, the IH writes it at its write pointer in the ring at
//! `IH_RB_BASE`/`_HI` (bits 39:8 and 47:40 of its MC address; `MC_SPACE` 2, a bus address in
//! system memory, is not modelled yet), of `4 << RB_SIZE` bytes, advances the pointer in
//! `IH_RB_WPTR` (bytes, modulo the ring), writes that register's value to
//! `IH_RB_WPTR_ADDR_LO`/`_HI` where `WPTR_WRITEBACK_ENABLE` is set, and with `ENABLE_INTR`
//! counts an interrupt to the host (the MSI rig-vfio will deliver). An entry that would
//! reach the read pointer in `IH_RB_RPTR` is dropped and sets `RB_OVERFLOW` (with
//! `WPTR_OVERFLOW_ENABLE`, and written back; without it the ring wraps over unread
//! entries), until the driver writes `IH_RB_CNTL` with `WPTR_OVERFLOW_CLEAR`. A disabled ring
//! drops the entry. The timestamp is the count of entries the IH has taken (the model has no
//! GPU clock here).

use rig_amd::ih::{ENTRY_BYTES, Entry};
use rig_amd::mmio::Block;

use super::PciModel;

/// Why an entry was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The ring is not enabled.
    Disabled,
    /// The ring is full (`RB_OVERFLOW`).
    Overflow,
    /// The ring or its write-back lies outside VRAM's MC range (system memory is not
    /// modelled yet).
    Outside {
        /// The MC address.
        addr: u64,
    },
}

/// What the IH did with the interrupts raised.
#[derive(Debug, Default)]
pub(crate) struct IhState {
    pub(crate) taken: u64,
    pub(crate) interrupts: u64,
    pub(crate) dropped: Vec<(Entry, Dropped)>,
}

impl PciModel {
    fn ih_field(&self, reg: &str, field: &str, value: u32) -> u32 {
        self.blocks
            .regs
            .osssys
            .reg(reg)
            .and_then(|r| r.field(field))
            .map_or(0, |f| f.get(value))
    }

    /// The VRAM offset of MC address `mc`, if it lies in the frame buffer's range.
    fn mc_to_vram(&self, mc: u64) -> Option<u64> {
        let name = ["MMMC_VM_FB_LOCATION_BASE", "MC_VM_FB_LOCATION_BASE"]
            .into_iter()
            .find(|n| self.blocks.regs.mmhub.reg(n).is_some())?;
        let base = u64::from(self.reg(Block::Mmhub, name) & 0xff_ffff) << 24;
        let off = mc.checked_sub(base)?;
        (off < self.vram.size).then_some(off)
    }

    /// Raises `entry` (a block's interrupt) into the IH ring; see the module's docs.
    pub fn post_interrupt(&mut self, mut entry: Entry) {
        let cntl = self.reg(Block::Osssys, "IH_RB_CNTL");
        let table = self.blocks.regs.osssys.reg("IH_RB_CNTL");
        let f = move |n: &str| table.and_then(|r| r.field(n)).map_or(0, |f| f.get(cntl));
        if f("RB_ENABLE") == 0 {
            self.ih.dropped.push((entry, Dropped::Disabled));
            return;
        }
        entry.timestamp = self.ih.taken & 0xffff_ffff_ffff;
        self.ih.taken += 1;
        let size = 4u64 << f("RB_SIZE");
        let base = (u64::from(self.reg(Block::Osssys, "IH_RB_BASE"))
            | u64::from(self.reg(Block::Osssys, "IH_RB_BASE_HI") & 0xff) << 32)
            << 8;
        let wptr_reg = self.reg(Block::Osssys, "IH_RB_WPTR");
        let wptr = u64::from(wptr_reg & 0x3fffc) % size;
        let rptr = u64::from(self.reg(Block::Osssys, "IH_RB_RPTR") & 0x3fffc) % size;
        let next = (wptr + ENTRY_BYTES as u64) % size;
        let overflow_enabled = f("WPTR_OVERFLOW_ENABLE") != 0;
        if self.ih_field("IH_RB_WPTR", "RB_OVERFLOW", wptr_reg) != 0
            || (next == rptr && overflow_enabled)
        {
            let value = wptr_reg | self.field_put("IH_RB_WPTR", "RB_OVERFLOW", 1);
            self.set_reg(Block::Osssys, "IH_RB_WPTR", value);
            self.write_back(f("WPTR_WRITEBACK_ENABLE") != 0, value, entry);
            self.ih.dropped.push((entry, Dropped::Overflow));
            return;
        }
        let Some(at) = self.mc_to_vram(base + wptr).filter(|_| f("MC_SPACE") != 2) else {
            self.ih
                .dropped
                .push((entry, Dropped::Outside { addr: base + wptr }));
            return;
        };
        if self.vram_write(at, &entry.encode()).is_err() {
            self.ih
                .dropped
                .push((entry, Dropped::Outside { addr: base + wptr }));
            return;
        }
        let value = u32::try_from(next).unwrap_or(0);
        self.set_reg(Block::Osssys, "IH_RB_WPTR", value);
        self.write_back(f("WPTR_WRITEBACK_ENABLE") != 0, value, entry);
        if f("ENABLE_INTR") != 0 {
            self.ih.interrupts += 1;
        }
    }

    /// Writes `IH_RB_WPTR`'s `value` to the write-back address, where `enabled`.
    fn write_back(&mut self, enabled: bool, value: u32, entry: Entry) {
        if !enabled {
            return;
        }
        let wb = u64::from(self.reg(Block::Osssys, "IH_RB_WPTR_ADDR_HI") & 0xffff) << 32
            | u64::from(self.reg(Block::Osssys, "IH_RB_WPTR_ADDR_LO") & !3);
        match self.mc_to_vram(wb) {
            Some(at) if self.vram_write(at, &value.to_le_bytes()).is_ok() => {}
            _ => self.ih.dropped.push((entry, Dropped::Outside { addr: wb })),
        }
    }

    /// A write of `IH_RB_CNTL`: `WPTR_OVERFLOW_CLEAR` clears `RB_OVERFLOW`.
    pub(crate) fn ih_cntl(&mut self, value: u32) {
        if self.ih_field("IH_RB_CNTL", "WPTR_OVERFLOW_CLEAR", value) != 0 {
            let wptr = self.reg(Block::Osssys, "IH_RB_WPTR");
            let flag = self.field_put("IH_RB_WPTR", "RB_OVERFLOW", 1);
            self.set_reg(Block::Osssys, "IH_RB_WPTR", wptr & !flag);
        }
    }

    fn field_put(&self, reg: &str, field: &str, v: u32) -> u32 {
        self.blocks
            .regs
            .osssys
            .reg(reg)
            .and_then(|r| r.field(field))
            .map_or(0, |f| f.put(v))
    }

    /// The interrupts the IH sent the host (entries written with `ENABLE_INTR`).
    pub fn interrupts(&self) -> u64 {
        self.ih.interrupts
    }

    /// The entries the IH did not write, and why.
    pub fn interrupts_dropped(&self) -> &[(Entry, Dropped)] {
        &self.ih.dropped
    }
}
