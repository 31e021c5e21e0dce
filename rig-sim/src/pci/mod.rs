//! The register-level model of an AMD GPU's PCI function: what the PCI path's bring-up talks
//! to where no AMD GPU is present (docs/pci.md).
//!
//! This first block has BAR0's MMIO dispatch and VRAM. BAR0 holds the registers of
//! [`rig_amd::mmio`]'s tables for the blocks [`Blocks::of`] chooses, each at its block's
//! discovery base plus its offset; an access to any other dword is an error of the model
//! ([`ModelError::NoRegister`]), so a bring-up that touches a register the model does not
//! know fails loudly rather than reading a made-up value. VRAM is sparse, and holds the IP
//! discovery binary ([`Discovery::to_bytes`]) 64 KiB below its top, where the firmware leaves
//! it. NBIO's `RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE` reads VRAM's size in MiB. MP0's C2PMSG
//! registers are the PSP's mailbox ([`psp`]), MP1's the SMU's ([`smu`]); the GC and MM hubs'
//! invalidation and fault-control registers act as [`gmc`] says, and `IH_RB_CNTL` as [`ih`]
//! says; every other register holds what was written (the model's blocks read them: the
//! hubs' VM contexts, the IH ring's registers). [`PciModel::translate`] walks the page
//! tables as a GPU client would, and faults into the IH ring.
//!
//! The model's discovery table names the versions of [`chip_versions`] with the segment bases
//! of the nearest chips whose bases a public header states (`sienna_cichlid_ip_offset.h` for
//! gfx1100 and gfx1201, `aldebaran_ip_offset.h` for gfx942): the real chips' bases are only in
//! their own discovery tables, which the bring-up reads, so it never depends on these.

pub mod gmc;
pub mod ih;
pub mod psp;
pub mod smu;

use std::collections::HashMap;

use rig_amd::discovery::{
    Blocks, Die, Discovery, DiscoveryError, Ip, TMR_OFFSET, chip_versions, hw_id,
};
use rig_amd::mmio::Block;
use rig_amd::ucode::UcodeError;
use thiserror::Error;

/// Why the model refused to be made or an access.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The model has no table for this processor.
    #[error("the register-level model has no {0} (it models gfx1100, gfx1201 and gfx942)")]
    Processor(String),
    /// Its discovery table did not build or choose blocks.
    #[error("the model's discovery table")]
    Discovery(#[from] DiscoveryError),
    /// The SOS file given to its PSP did not parse.
    #[error("the model's PSP firmware")]
    Firmware(#[from] UcodeError),
    /// A firmware file given to its PSP has no images it would load.
    #[error("the model's PSP cannot take this firmware file")]
    Images(#[from] rig_amd::psp::ImageError),
    /// A firmware file's name says no kind.
    #[error("{0} is not a firmware file name amdgpu reads")]
    FirmwareName(String),
    /// A GPU access faulted in a hub's translation (recorded and raised as [`gmc`] says).
    #[error("page fault: {0:?}")]
    PageFault(gmc::Fault),
    /// A translation or ring names system memory, which the model does not hold yet.
    #[error("system memory at bus address {addr:#x} is not modelled yet")]
    SystemMemory {
        /// The bus address.
        addr: u64,
    },
    /// VRAM too small to hold the discovery binary.
    #[error("{0} bytes of VRAM cannot hold the discovery binary 64 KiB below their top")]
    Vram(u64),
    /// Two registers of the tables land on one BAR0 dword.
    #[error("registers {a} and {b} both land on BAR0 dword {dword:#x}")]
    Collision {
        /// The dword.
        dword: u32,
        /// One register.
        a: &'static str,
        /// The other.
        b: &'static str,
    },
    /// No register of the model is at this BAR0 dword.
    #[error("no register of the model at BAR0 dword {dword:#x} (byte {:#x})", u64::from(*dword) * 4)]
    NoRegister {
        /// The dword address.
        dword: u32,
    },
    /// A VRAM access past its end.
    #[error("VRAM access of {len} bytes at {offset:#x} is past its {size:#x} bytes")]
    OutsideVram {
        /// Where it starts.
        offset: u64,
        /// Its length.
        len: usize,
        /// VRAM's size.
        size: u64,
    },
}

/// The segment bases (dwords) of instance 0 of each block the model's table names, from the
/// nearest public IP offset header (see the module's docs).
fn bases(processor: &str, hw: u16) -> Vec<u64> {
    // sienna_cichlid_ip_offset.h and aldebaran_ip_offset.h, instance 0 of each block.
    let navi: &[u64] = match hw {
        hw_id::GC | hw_id::SDMA0 | hw_id::SDMA1 => &[0x1260, 0xa000, 0x1_c000, 0x240_2c00],
        hw_id::MP0 | hw_id::MP1 => &[0x1_6000, 0xdc_0000, 0xe0_0000, 0xe4_0000, 0x243_fc00],
        hw_id::OSSSYS => &[0x10a0, 0x240_a000],
        hw_id::MMHUB => &[0x1_a000, 0x240_8800],
        hw_id::HDP => &[0x0f20, 0x240_a400],
        hw_id::NBIF => &[0x0, 0x14, 0x0d20, 0x1_0400, 0x241_b000],
        _ => &[],
    };
    let aldebaran: &[u64] = match hw {
        hw_id::GC => &[0x2000, 0xa000, 0x240_2c00],
        hw_id::SDMA0 => &[0x1260, 0x1_2540, 0x40_a800],
        hw_id::SDMA1 => &[0x1860, 0x1_2560, 0x40_ac00],
        hw_id::MP0 | hw_id::MP1 => &[0x1_6000, 0xdc_0000, 0xe0_0000, 0xe4_0000, 0x243_fc00],
        hw_id::OSSSYS => &[0x10a0, 0x240_a000],
        hw_id::MMHUB => &[0x1_a000, 0x240_8800],
        hw_id::HDP => &[0x0f20, 0x240_a400],
        hw_id::NBIF => &[0x0, 0x14, 0x0d20, 0x1_0400, 0x241_b000, 0x404_0000],
        _ => &[],
    };
    if processor == "gfx942" {
        aldebaran
    } else {
        navi
    }
    .to_vec()
}

/// The discovery table the model places in VRAM for `processor`.
pub fn model_discovery(processor: &str) -> Result<Discovery, ModelError> {
    let versions =
        chip_versions(processor).ok_or_else(|| ModelError::Processor(processor.into()))?;
    let ips = versions
        .iter()
        .map(|&(hw, version)| Ip {
            hw_id: hw,
            instance: 0,
            version,
            flags: 0,
            bases: bases(processor, hw),
        })
        .collect();
    Ok(Discovery {
        version: (1, 0),
        table_version: 4,
        table_id: 0,
        base_addr_64: false,
        dies: vec![Die { id: 0, ips }],
        gc: None,
        harvest: None,
    })
}

/// What a BAR0 dword is.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A register that holds what is written.
    Plain,
    /// NBIO's memory size register (read-only: VRAM in MiB).
    Memsize,
    /// MP0 C2PMSG_n, the PSP's mailbox.
    Psp(usize),
    /// MP1 C2PMSG_n, the SMU's mailbox.
    Smu(usize),
    /// A hub's `VM_INVALIDATE_ENG17_REQ`.
    Invalidate(gmc::Hub),
    /// A hub's `VM_L2_PROTECTION_FAULT_CNTL`.
    FaultCntl(gmc::Hub),
    /// OSSSYS's `IH_RB_CNTL`.
    IhCntl,
}

const PAGE: u64 = 4096;

/// The model of one GPU's PCI function.
#[derive(Debug)]
pub struct PciModel {
    discovery: Discovery,
    blocks: Blocks,
    slots: HashMap<u32, (Slot, &'static str)>,
    /// Each register's dword, by block and name.
    names: HashMap<(Block, &'static str), u32>,
    values: HashMap<u32, u32>,
    vram: Vram,
    psp: psp::Psp,
    smu: smu::Smu,
    /// The hubs' cached translations, by hub, VMID and virtual page.
    tlb: HashMap<(gmc::Hub, u8, u64), gmc::Cached>,
    ih: ih::IhState,
}

/// VRAM's pages, made on first write; unwritten bytes read zero.
#[derive(Debug)]
struct Vram {
    size: u64,
    pages: HashMap<u64, Box<[u8]>>,
}

impl psp::Memory for Vram {
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut out = vec![0u8; len];
        read_pages(&self.pages, self.size, addr, &mut out).ok()?;
        Some(out)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> bool {
        self.write_at(addr, data).is_ok()
    }
}

impl Vram {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), ModelError> {
        check(self.size, offset, data.len())?;
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let in_page = (at % PAGE) as usize;
            let n = (PAGE as usize - in_page).min(data.len() - done);
            let page = self
                .pages
                .entry(at / PAGE)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }
}

impl PciModel {
    /// The model of `processor` with `vram_bytes` of VRAM (a multiple of 1 MiB), whose PSP
    /// accepts the components of `sos_file` (with `aux`, its auxiliary set).
    pub fn new(
        processor: &str,
        vram_bytes: u64,
        sos_file: &[u8],
        aux: bool,
    ) -> Result<Self, ModelError> {
        if vram_bytes < TMR_OFFSET || !vram_bytes.is_multiple_of(1 << 20) {
            return Err(ModelError::Vram(vram_bytes));
        }
        let discovery = model_discovery(processor)?;
        let blocks = Blocks::of(&discovery)?;
        let mut slots = HashMap::new();
        let mut names = HashMap::new();
        let r = blocks.regs;
        for table in [r.gc, r.mp0, r.mp1, r.osssys, r.mmhub, r.hdp, r.nbio] {
            let hw = match table.block {
                Block::Gc => hw_id::GC,
                Block::Mp0 => hw_id::MP0,
                Block::Mp1 => hw_id::MP1,
                Block::Osssys => hw_id::OSSSYS,
                Block::Mmhub => hw_id::MMHUB,
                Block::Hdp => hw_id::HDP,
                Block::Nbio => hw_id::NBIF,
            };
            let segs = discovery
                .ip(hw, 0)
                .map(|ip| ip.segment_bases(discovery.base_addr_64))
                .unwrap_or_default();
            for reg in table.regs {
                let Some(dword) = reg.dword(&segs) else {
                    continue;
                };
                let c2pmsg = reg
                    .name
                    .rsplit_once("C2PMSG_")
                    .and_then(|(_, n)| n.parse().ok());
                let hub = match table.block {
                    Block::Gc => Some(gmc::Hub::Gc),
                    Block::Mmhub => Some(gmc::Hub::Mm),
                    _ => None,
                };
                let slot = match (table.block, c2pmsg, hub) {
                    (Block::Mp0, Some(n), _) => Slot::Psp(n),
                    (Block::Mp1, Some(n), _) => Slot::Smu(n),
                    (_, _, Some(h)) if reg.name.ends_with("VM_INVALIDATE_ENG17_REQ") => {
                        Slot::Invalidate(h)
                    }
                    (_, _, Some(h)) if reg.name.ends_with("VM_L2_PROTECTION_FAULT_CNTL") => {
                        Slot::FaultCntl(h)
                    }
                    (Block::Osssys, ..) if reg.name == "IH_RB_CNTL" => Slot::IhCntl,
                    _ if reg.name == "RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE" => Slot::Memsize,
                    _ => Slot::Plain,
                };
                names.insert((table.block, reg.name), dword);
                if let Some((_, a)) = slots.insert(dword, (slot, reg.name)) {
                    return Err(ModelError::Collision {
                        dword,
                        a,
                        b: reg.name,
                    });
                }
            }
        }
        let mut model = PciModel {
            psp: psp::Psp::new(sos_file, aux)?,
            discovery,
            blocks,
            slots,
            names,
            values: HashMap::new(),
            smu: smu::Smu::default(),
            tlb: HashMap::new(),
            ih: ih::IhState::default(),
            vram: Vram {
                size: vram_bytes,
                pages: HashMap::new(),
            },
        };
        let table = model.discovery.to_bytes()?;
        model.vram_write(vram_bytes - TMR_OFFSET, &table)?;
        Ok(model)
    }

    /// The discovery table it holds in VRAM.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The blocks its table chooses.
    pub fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// Its PSP.
    pub fn psp(&self) -> &psp::Psp {
        &self.psp
    }

    /// Its SMU.
    pub fn smu(&self) -> &smu::Smu {
        &self.smu
    }

    /// Makes its PSP accept the images of the firmware file `name` (its last path component)
    /// in `GFX_CMD_ID_LOAD_IP_FW`: the firmware it would authenticate (see [`psp`]). An SMU
    /// file also gives the SMU the version it reports (its `ucode_version`).
    pub fn accept_firmware(&mut self, name: &str, bytes: &[u8]) -> Result<(), ModelError> {
        self.psp.accept(name, bytes)?;
        if name.starts_with("smu_") {
            let fw = rig_amd::ucode::Firmware::parse(rig_amd::ucode::Kind::Smc, bytes)?;
            self.smu.set_version(fw.common.ucode_version);
        }
        Ok(())
    }

    /// Makes its SMU report driver-interface version `if_version` (a firmware built for
    /// another driver than amdgpu 6.12's).
    pub fn set_smu_if_version(&mut self, if_version: u32) {
        self.smu.set_if_version(if_version);
    }

    /// The value of register `name` of `block` (0 if the model has no such register).
    fn reg(&self, block: Block, name: &str) -> u32 {
        self.names
            .get(&(block, name))
            .and_then(|d| self.values.get(d))
            .copied()
            .unwrap_or(0)
    }

    /// Sets register `name` of `block`, if the model has it.
    fn set_reg(&mut self, block: Block, name: &str, value: u32) {
        if let Some(&d) = self.names.get(&(block, name)) {
            self.values.insert(d, value);
        }
    }

    /// VRAM's bytes.
    pub fn vram_bytes(&self) -> u64 {
        self.vram.size
    }

    /// A read of BAR0 dword `dword` (reading the SMU's response register lets it answer).
    pub fn mmio_read(&mut self, dword: u32) -> Result<u32, ModelError> {
        let (slot, _) = self
            .slots
            .get(&dword)
            .ok_or(ModelError::NoRegister { dword })?;
        Ok(match *slot {
            Slot::Plain => self.values.get(&dword).copied().unwrap_or(0),
            Slot::Memsize => (self.vram.size >> 20) as u32,
            Slot::Psp(n) => self.psp.read(n),
            Slot::Smu(n) => self.smu.read(n),
            Slot::Invalidate(_) | Slot::FaultCntl(_) | Slot::IhCntl => {
                self.values.get(&dword).copied().unwrap_or(0)
            }
        })
    }

    /// A write of `value` to BAR0 dword `dword`.
    pub fn mmio_write(&mut self, dword: u32, value: u32) -> Result<(), ModelError> {
        let (slot, _) = *self
            .slots
            .get(&dword)
            .ok_or(ModelError::NoRegister { dword })?;
        match slot {
            Slot::Plain => {
                self.values.insert(dword, value);
            }
            Slot::Memsize => {}
            Slot::Psp(n) => self.psp.write(n, value, &mut self.vram),
            Slot::Smu(n) => {
                let running = self
                    .psp
                    .ip_loaded()
                    .iter()
                    .any(|l| l.fw == rig_amd::psp::GfxFw::Smu);
                self.smu.write(n, value, running);
            }
            Slot::Invalidate(hub) => {
                self.values.insert(dword, value);
                self.invalidate(hub, value);
            }
            Slot::FaultCntl(hub) => {
                self.values.insert(dword, value);
                self.fault_cntl(hub, value);
            }
            Slot::IhCntl => {
                self.values.insert(dword, value);
                self.ih_cntl(value);
            }
        }
        Ok(())
    }

    /// Reads VRAM at `offset` (through the VRAM BAR).
    pub fn vram_read(&self, offset: u64, out: &mut [u8]) -> Result<(), ModelError> {
        read_pages(&self.vram.pages, self.vram.size, offset, out)
    }

    /// Writes VRAM at `offset`.
    pub fn vram_write(&mut self, offset: u64, data: &[u8]) -> Result<(), ModelError> {
        self.vram.write_at(offset, data)
    }
}

fn check(size: u64, offset: u64, len: usize) -> Result<(), ModelError> {
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(ModelError::OutsideVram { offset, len, size });
    }
    Ok(())
}

fn read_pages(
    vram: &HashMap<u64, Box<[u8]>>,
    size: u64,
    offset: u64,
    out: &mut [u8],
) -> Result<(), ModelError> {
    check(size, offset, out.len())?;
    let mut done = 0;
    while done < out.len() {
        let at = offset + done as u64;
        let in_page = (at % PAGE) as usize;
        let n = (PAGE as usize - in_page).min(out.len() - done);
        match vram.get(&(at / PAGE)) {
            Some(page) => out[done..done + n].copy_from_slice(&page[in_page..in_page + n]),
            None => out[done..done + n].fill(0),
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
