//! Stage 8 of docs/pci.md: the IH ring of OSSSYS 6.0 (`ih_v6_0.c`), and its entries
//! decoded into what rig acts on ([`Event`]): page faults, releases (end-of-pipe
//! interrupts) and hangs (a queue that stopped on a bad packet or a privileged access).
//!
//! The ring ([`IH_RING_BYTES`]) lies at [`layout::IH_RING`], its write pointer's write-back
//! at [`layout::IH_WPTR`]; the bring-up reads entries from its read pointer to the written
//! back write pointer, as `amdgpu_ih_process` does, and writes the read pointer to
//! `IH_RB_RPTR` (amdgpu rings the IH's doorbell instead where it has one: a difference
//! docs/pci.md lists).

use rig_amd::discovery::hw_id;
use rig_amd::ih::{ENTRY_BYTES, Entry, client, src};

use crate::gmc::{Hub, set_fields};
use crate::{Bar, Bringup, BringupError, layout};

/// The ring's bytes (`ih_v6_0`'s ring 0: 256 KiB).
pub const IH_RING_BYTES: u64 = 256 << 10;

/// An IH entry, as rig acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A page fault of a hub (`gmc_v11_0_process_interrupt`).
    Fault {
        /// The hub.
        hub: Hub,
        /// The VMID.
        vmid: u8,
        /// The PASID the IH gave the VMID.
        pasid: u16,
        /// The faulting address.
        addr: u64,
        /// Whether the access was a write.
        write: bool,
        /// The hub's `VM_L2_PROTECTION_FAULT_STATUS` read for it (then cleared).
        status: u32,
    },
    /// An end-of-pipe interrupt: a release reached memory (`gfx_v11_0_eop_irq`).
    Release {
        /// The ring: ME (3:2), pipe (1:0) and queue (6:4) of `ring_id`.
        ring_id: u8,
        /// The VMID.
        vmid: u8,
        /// The PASID.
        pasid: u16,
        /// The interrupt's context (`src_data[0]`, the release's data).
        context: u32,
    },
    /// A queue stopped: a bad opcode, or a privileged register or instruction.
    Hang {
        /// The source id ([`src::CP_BAD_OPCODE`] and the two privileged faults).
        src_id: u8,
        /// The ring.
        ring_id: u8,
        /// The VMID.
        vmid: u8,
        /// The PASID.
        pasid: u16,
    },
    /// The ring overflowed: entries were lost.
    Overflow,
    /// Any other entry.
    Other(Entry),
}

/// The IH as far as the bring-up drove it.
#[derive(Debug, Default)]
pub(crate) struct IhState {
    ready: bool,
    /// The read pointer, bytes.
    rptr: u64,
}

impl<B: Bar> Bringup<B> {
    fn ih_set(&self, reg: &str, fields: &[(&str, u32)], word: u32) -> Result<u32, BringupError> {
        set_fields(self.blocks.regs.osssys, reg, fields, word)
    }

    fn ih_write(&mut self, reg: &str, value: u32) -> Result<(), BringupError> {
        self.write(self.blocks.regs.osssys, hw_id::OSSSYS, reg, value)
    }

    /// Stage 8's setup (`ih_v6_0_enable_ring`, then `ih_v6_0_toggle_ring`): the ring's MC
    /// address, `IH_RB_CNTL` (MC space 4, overflow enabled and cleared, its size, write-back,
    /// snooped), the write-back address, both pointers at 0, then the ring and its interrupt
    /// enabled.
    pub fn init_ih(&mut self) -> Result<(), BringupError> {
        if !self.gmc.ready {
            return Err(BringupError::Order("the IH ring before the GMC's setup"));
        }
        self.vram_write(layout::IH_RING, &vec![0; IH_RING_BYTES as usize], "IH ring")?;
        self.vram_write(layout::IH_WPTR, &[0; 4], "IH write-pointer write-back")?;
        let ring = self.mc(layout::IH_RING);
        self.ih_write("IH_RB_BASE", lo(ring >> 8))?;
        self.ih_write("IH_RB_BASE_HI", lo(ring >> 40) & 0xff)?;
        let size = (IH_RING_BYTES / 4).trailing_zeros();
        let cntl = self.ih_set(
            "IH_RB_CNTL",
            &[
                ("MC_SPACE", 4),
                ("WPTR_OVERFLOW_CLEAR", 1),
                ("WPTR_OVERFLOW_ENABLE", 1),
                ("RB_SIZE", size),
                ("WPTR_WRITEBACK_ENABLE", 1),
                ("MC_SNOOP", 1),
                ("MC_RO", 0),
                ("MC_VMID", 0),
            ],
            0,
        )?;
        self.ih_write("IH_RB_CNTL", cntl)?;
        let wb = self.mc(layout::IH_WPTR);
        self.ih_write("IH_RB_WPTR_ADDR_LO", lo(wb))?;
        self.ih_write("IH_RB_WPTR_ADDR_HI", lo(wb >> 32) & 0xffff)?;
        self.ih_write("IH_RB_WPTR", 0)?;
        self.ih_write("IH_RB_RPTR", 0)?;
        let on = self.ih_set("IH_RB_CNTL", &[("RB_ENABLE", 1), ("ENABLE_INTR", 1)], cntl)?;
        self.ih_write("IH_RB_CNTL", on)?;
        self.ih.ready = true;
        self.ih.rptr = 0;
        Ok(())
    }

    /// Takes every entry the IH wrote since the last call (`amdgpu_ih_process`), decoded,
    /// and gives the ring its new read pointer. A fault's hub status is read and cleared.
    pub fn take_interrupts(&mut self) -> Result<Vec<Event>, BringupError> {
        if !self.ih.ready {
            return Err(BringupError::Order("interrupts before the IH ring's setup"));
        }
        let mut word = [0u8; 4];
        self.bar
            .vram_read(layout::IH_WPTR, &mut word)
            .map_err(crate::bar_err)?;
        let wptr_value = u32::from_le_bytes(word);
        self.trace.push(crate::Step::VramRead {
            offset: layout::IH_WPTR,
            len: 4,
            what: "IH write pointer".into(),
        });
        let wptr_reg = self.blocks.regs.osssys.reg("IH_RB_WPTR");
        let field = |n: &str| {
            wptr_reg
                .and_then(|r| r.field(n))
                .map_or(0, |f| f.get(wptr_value))
        };
        let mut events = Vec::new();
        let mask = IH_RING_BYTES - 1;
        let mut wptr = u64::from(wptr_value & 0x3fffc) & mask;
        let osssys = self.blocks.regs.osssys;
        // ih_v6_0_get_wptr: an overflow seen in the write-back is confirmed in the register.
        let overflow = field("RB_OVERFLOW") != 0 && {
            let v = self.read(osssys, hw_id::OSSSYS, "IH_RB_WPTR")?;
            wptr = u64::from(v & 0x3fffc) & mask;
            wptr_reg
                .and_then(|r| r.field("RB_OVERFLOW"))
                .is_some_and(|f| f.get(v) != 0)
        };
        if overflow {
            // Skip to the oldest entry not overwritten and clear the flag.
            tracing::warn!("IH ring overflow: interrupts were lost");
            events.push(Event::Overflow);
            self.ih.rptr = (wptr + ENTRY_BYTES as u64) & mask;
            let cntl = self.read(osssys, hw_id::OSSSYS, "IH_RB_CNTL")?;
            let clear = self.ih_set("IH_RB_CNTL", &[("WPTR_OVERFLOW_CLEAR", 1)], cntl)?;
            self.ih_write("IH_RB_CNTL", clear)?;
            let back = self.ih_set("IH_RB_CNTL", &[("WPTR_OVERFLOW_CLEAR", 0)], cntl)?;
            self.ih_write("IH_RB_CNTL", back)?;
        }
        while self.ih.rptr != wptr {
            let mut bytes = [0u8; ENTRY_BYTES];
            let at = layout::IH_RING + self.ih.rptr;
            self.bar.vram_read(at, &mut bytes).map_err(crate::bar_err)?;
            self.trace.push(crate::Step::VramRead {
                offset: at,
                len: ENTRY_BYTES,
                what: "IH entry".into(),
            });
            self.ih.rptr = (self.ih.rptr + ENTRY_BYTES as u64) & mask;
            let e = Entry::decode(&bytes);
            events.push(self.event(e)?);
        }
        self.ih_write("IH_RB_RPTR", lo(self.ih.rptr))?;
        Ok(events)
    }

    fn event(&mut self, e: Entry) -> Result<Event, BringupError> {
        Ok(match (e.client_id, e.src_id) {
            (client::GFX, src::UTCL2_FAULT) | (client::VMC, src::VM_FAULT) => {
                let hub = if e.vmid_src { Hub::Mm } else { Hub::Gc };
                let (table, hw) = match hub {
                    Hub::Gc => (self.blocks.regs.gc, hw_id::GC),
                    Hub::Mm => (self.blocks.regs.mmhub, hw_id::MMHUB),
                };
                let status_name = Self::hub_name(table, "VM_L2_PROTECTION_FAULT_STATUS");
                let status = self.read(table, hw, &status_name)?;
                // gmc_v11_0_process_interrupt: WREG32_P(vm_l2_pro_fault_cntl, 1, ~1).
                let cntl_name = Self::hub_name(table, "VM_L2_PROTECTION_FAULT_CNTL");
                let cntl = self.read(table, hw, &cntl_name)?;
                self.write(table, hw, &cntl_name, cntl | 1)?;
                Event::Fault {
                    hub,
                    vmid: e.vmid,
                    pasid: e.pasid,
                    addr: e.fault_addr(),
                    write: e.src_data[1] & rig_amd::ih::fault::WRITE != 0,
                    status,
                }
            }
            (client::GRBM_CP, src::CP_EOP) => Event::Release {
                ring_id: e.ring_id,
                vmid: e.vmid,
                pasid: e.pasid,
                context: e.src_data[0],
            },
            (
                client::GRBM_CP,
                src::CP_BAD_OPCODE | src::CP_PRIV_REG_FAULT | src::CP_PRIV_INSTR_FAULT,
            ) => Event::Hang {
                src_id: e.src_id,
                ring_id: e.ring_id,
                vmid: e.vmid,
                pasid: e.pasid,
            },
            _ => Event::Other(e),
        })
    }
}

fn lo(v: u64) -> u32 {
    let b = v.to_le_bytes();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}
