//! The bring-up of an AMD GPU's PCI function with no kernel driver: what amdgpu does at probe
//! time, done by rigd on the PCI path (docs/pci.md has the plan, stage by stage).
//!
//! The bring-up reaches the GPU only through [`Bar`]: 32-bit reads and writes of BAR0's
//! registers and byte copies through the VRAM BAR. rig-vfio's mapped BARs implement it on a
//! real GPU; rig-sim's register-level model (`rig_sim::pci::PciModel`) implements it in
//! tests, so the bring-up cannot tell them apart. Registers are named by rig-amd's tables
//! ([`rig_amd::mmio`]) and placed at the bases the GPU's own discovery table gives.
//!
//! Every access is recorded in order ([`Bringup::trace`]: the register's name, its dword and
//! the value, each wait with its mask, each VRAM copy), so a session with a real GPU or
//! amdgpu's own trace can compare the sequence step by step (docs/pci.md).
//!
//! Stages done here: VRAM size and IP discovery ([`Bringup::discover`]), the PSP's
//! bootloader, its ring and the TMR, and the firmware images of the GC, SDMA and SMU
//! through the PSP ([`Bringup::boot_psp`], [`Bringup::load_firmware`]; module [`psp`]);
//! the SMU's start and stable power ([`Bringup::start_smu`], [`Bringup::stable_power`];
//! module [`smu`]); the GMC's GART and per-VMID page tables ([`Bringup::init_gmc`],
//! [`Bringup::vm_create`], [`Bringup::vm_map`]; module [`gmc`]); the IH ring and its
//! entries decoded ([`Bringup::init_ih`], [`Bringup::take_interrupts`]; module [`ih`]).
//! The bring-up's own memory lies in VRAM at fixed offsets ([`layout`]), addressed by the
//! blocks at the frame buffer's MC base plus the offset, and by page tables at the offset.

pub mod gmc;
pub mod ih;
pub mod psp;
pub mod smu;

use std::path::Path;
use std::time::{Duration, Instant};

use rig_amd::discovery::{Blocks, Discovery, DiscoveryError, TMR_OFFSET, TMR_SIZE, hw_id};
use rig_amd::mmio::Table;
use rig_amd::psp::ImageError;
use rig_amd::ucode::{Firmware, Kind, UcodeError};
use thiserror::Error;

/// The seam between the bring-up and the GPU's PCI function: BAR0's registers by dword and
/// the VRAM BAR by byte offset.
pub trait Bar {
    /// Why an access failed.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Reads BAR0 dword `dword`.
    fn read32(&mut self, dword: u32) -> Result<u32, Self::Error>;
    /// Writes `value` to BAR0 dword `dword`.
    fn write32(&mut self, dword: u32, value: u32) -> Result<(), Self::Error>;
    /// Reads VRAM at `offset` into `out`.
    fn vram_read(&mut self, offset: u64, out: &mut [u8]) -> Result<(), Self::Error>;
    /// Writes `data` to VRAM at `offset`.
    fn vram_write(&mut self, offset: u64, data: &[u8]) -> Result<(), Self::Error>;
}

/// Where the bring-up keeps its own memory in VRAM before a GMC exists (offsets from VRAM's
/// start, below the discovery table 64 KiB under VRAM's top).
pub mod layout {
    /// The PSP's 1 MiB bootloader buffer (`fw_pri`), 1 MiB aligned.
    pub const PSP_BUFFER: u64 = 1 << 20;
    /// The kernel-mode ring (`RING_BYTES`).
    pub const PSP_RING: u64 = 2 << 20;
    /// The command buffer (`CMD_BYTES`).
    pub const PSP_CMD: u64 = PSP_RING + 0x1000;
    /// The fence word.
    pub const PSP_FENCE: u64 = PSP_RING + 0x2000;
    /// The TMR, 1 MiB aligned (`TMR_BYTES`).
    pub const TMR: u64 = 4 << 20;
    /// Where firmware images are copied for `LOAD_IP_FW`, each 4 KiB aligned.
    pub const FW_IMAGES: u64 = 16 << 20;
    /// The GART's flat table (`GART_BYTES` / 4 KiB entries of 8 bytes: 1 MiB).
    pub const GART_TABLE: u64 = 32 << 20;
    /// The arena of the VMIDs' page tables.
    pub const PAGE_TABLES: u64 = 34 << 20;
    /// The arena's end.
    pub const PAGE_TABLES_END: u64 = 50 << 20;
    /// The IH ring (`IH_RING_BYTES`).
    pub const IH_RING: u64 = 50 << 20;
    /// The IH's write-pointer write-back.
    pub const IH_WPTR: u64 = IH_RING + (256 << 10);
    /// The least VRAM these need.
    pub const MIN_VRAM: u64 = 64 << 20;
}

/// `mmRCC_CONFIG_MEMSIZE` of `amdgpu_discovery.c`: the dword amdgpu reads VRAM's size (MiB)
/// from before it has the discovery table.
pub const RCC_CONFIG_MEMSIZE: u32 = 0xde3;

/// Why the bring-up stopped.
#[derive(Debug, Error)]
pub enum BringupError {
    /// An access through the BAR failed.
    #[error("BAR access failed")]
    Bar(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// `RCC_CONFIG_MEMSIZE` reads a size the discovery table cannot lie under.
    #[error("RCC_CONFIG_MEMSIZE reads {mib} MiB; the bring-up needs at least 64 MiB of VRAM")]
    VramSize {
        /// What it read.
        mib: u32,
    },
    /// The discovery table in VRAM did not parse or choose blocks.
    #[error("the IP discovery table 64 KiB below VRAM's top")]
    Discovery(#[from] DiscoveryError),
    /// A block's discovery entry or register is missing.
    #[error("register {name} is not in table {table} at the discovery table's bases")]
    Register {
        /// The table.
        table: &'static str,
        /// The register.
        name: String,
    },
    /// A firmware file could not be read.
    #[error(
        "cannot read firmware file {path} (install firmware-amd-graphics, or set RIG_AMD_FIRMWARE)"
    )]
    FirmwareRead {
        /// Its path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A firmware file's name says no kind.
    #[error("{0} is not a firmware file name amdgpu reads")]
    FirmwareName(String),
    /// A firmware file's header is wrong.
    #[error("firmware file {file} is malformed")]
    Firmware {
        /// Its name.
        file: String,
        /// What is wrong.
        #[source]
        source: UcodeError,
    },
    /// A firmware file has no images the PSP loads.
    #[error("firmware file cannot be loaded through the PSP")]
    Images(#[from] ImageError),
    /// The set lacks a file the GPU needs.
    #[error("no firmware file {0} in the set")]
    MissingFirmware(String),
    /// A register did not reach the value the bring-up waits for.
    #[error("{name} did not reach {until:?} within {timeout:?} (last read {last:#x}): {during}")]
    Timeout {
        /// What the wait was for.
        during: String,
        /// The register.
        name: String,
        /// What it waited for.
        until: Until,
        /// The last value read.
        last: u32,
        /// How long it waited.
        timeout: Duration,
    },
    /// The PSP's fence did not come.
    #[error(
        "the PSP did not answer {during} within {timeout:?} (fence {last:#x}, waiting for {expect:#x})"
    )]
    Fence {
        /// The command.
        during: String,
        /// The fence value waited for.
        expect: u32,
        /// The fence's last value.
        last: u32,
        /// How long it waited.
        timeout: Duration,
    },
    /// The PSP answered a command with a failing status.
    #[error("the PSP refused {during} with status {status:#x}")]
    PspStatus {
        /// The command.
        during: String,
        /// The response's status word.
        status: u32,
    },
    /// A stage ran before the one it needs.
    #[error("{0}")]
    Order(&'static str),
    /// The SMU answered a message with another response than OK.
    #[error("the SMU answered {msg:?} (argument {arg:#x}) with {response:?}")]
    Smu {
        /// The message.
        msg: rig_amd::smu::Msg,
        /// Its argument.
        arg: u32,
        /// The answer.
        response: rig_amd::smu::Response,
    },
    /// The SMU answered a clock's frequency no clock message can carry.
    #[error("the SMU gave {clock:?} a DPM frequency of {mhz} MHz, past 16 bits")]
    SmuClock {
        /// The clock.
        clock: rig_amd::smu::Clock,
        /// The frequency.
        mhz: u32,
    },
    /// A VMID outside 1 to 15, or one given a page table already (or none yet).
    #[error("VMID {0} is not one of 1 to 15 with (or, for a new one, without) a page table")]
    Vmid(u8),
    /// A mapping not page aligned or outside the space.
    #[error(
        "cannot map VMID {vmid}'s {va:#x} to {phys:#x}: not 4 KiB aligned or outside the space"
    )]
    Mapping {
        /// The VMID.
        vmid: u8,
        /// The virtual address.
        va: u64,
        /// The physical address.
        phys: u64,
    },
    /// The page-table arena is full.
    #[error("the page-table arena in VRAM is full")]
    PageTablesFull,
}

/// One access of the bring-up, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A register read.
    Read {
        /// The register.
        name: String,
        /// Its BAR0 dword.
        dword: u32,
        /// The value read.
        value: u32,
    },
    /// A register write.
    Write {
        /// The register.
        name: String,
        /// Its BAR0 dword.
        dword: u32,
        /// The value written.
        value: u32,
    },
    /// A wait until `until` held, after `reads` reads.
    Wait {
        /// The register.
        name: String,
        /// What it waited for.
        until: Until,
        /// The reads it took.
        reads: u32,
    },
    /// A copy into VRAM.
    VramWrite {
        /// Where.
        offset: u64,
        /// Its bytes.
        len: usize,
        /// What it holds.
        what: String,
    },
    /// A read from VRAM.
    VramRead {
        /// Where.
        offset: u64,
        /// Its bytes.
        len: usize,
        /// What it holds.
        what: String,
    },
}

/// What a wait waits for (amdgpu's `psp_wait_for` and its `check_changed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// `(value & mask) == expect`.
    Masked {
        /// The mask.
        mask: u32,
        /// The value.
        expect: u32,
    },
    /// The value differs from `from`.
    Changed {
        /// The value before.
        from: u32,
    },
}

impl Until {
    fn holds(self, v: u32) -> bool {
        match self {
            Until::Masked { mask, expect } => v & mask == expect,
            Until::Changed { from } => v != from,
        }
    }
}

/// A GPU's firmware files, each parsed when added.
#[derive(Debug, Default)]
pub struct FirmwareSet {
    files: Vec<(String, Vec<u8>)>,
}

impl FirmwareSet {
    /// The files amdgpu reads for `blocks` on GC 11 (`gc_*_{pfp,me,mec,mes_2,mes1,imu,rlc}`,
    /// `psp_*_sos`, `sdma_*`, `smu_*`), from `dir`.
    pub fn read(dir: &Path, blocks: &Blocks) -> Result<FirmwareSet, BringupError> {
        let mut set = FirmwareSet::default();
        for name in FirmwareSet::names(blocks) {
            let path = dir.join(&name);
            let bytes = std::fs::read(&path).map_err(|source| BringupError::FirmwareRead {
                path: path.display().to_string(),
                source,
            })?;
            set.add(&name, bytes)?;
        }
        Ok(set)
    }

    /// The file names the bring-up needs for `blocks`.
    pub fn names(blocks: &Blocks) -> Vec<String> {
        let [gc, psp, sdma, smu] = blocks.firmware();
        let mut names: Vec<String> = ["pfp", "me", "mec", "mes_2", "mes1", "imu", "rlc"]
            .iter()
            .map(|p| format!("{gc}_{p}.bin"))
            .collect();
        names.push(format!("{psp}_sos.bin"));
        names.push(format!("{sdma}.bin"));
        names.push(format!("{smu}.bin"));
        names
    }

    /// Adds the file `name` (its last path component), refusing one whose header its kind's
    /// reader refuses.
    pub fn add(&mut self, name: &str, bytes: Vec<u8>) -> Result<(), BringupError> {
        let kind =
            Kind::of_file_name(name).ok_or_else(|| BringupError::FirmwareName(name.into()))?;
        Firmware::parse(kind, &bytes).map_err(|source| BringupError::Firmware {
            file: name.into(),
            source,
        })?;
        self.files.retain(|(n, _)| n != name);
        self.files.push((name.into(), bytes));
        Ok(())
    }

    /// The files, in the order added.
    pub fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(n, b)| (n.as_str(), b.as_slice()))
    }

    /// The file whose name ends with `suffix`, parsed.
    fn find(&self, suffix: &str) -> Result<(&str, Firmware<'_>), BringupError> {
        let (name, bytes) = self
            .files
            .iter()
            .find(|(n, _)| n.ends_with(suffix))
            .ok_or_else(|| BringupError::MissingFirmware(format!("*{suffix}")))?;
        // `add` parsed it already; parsing again borrows it without keeping parsed copies.
        let kind =
            Kind::of_file_name(name).ok_or_else(|| BringupError::FirmwareName(name.clone()))?;
        let fw = Firmware::parse(kind, bytes).map_err(|source| BringupError::Firmware {
            file: name.clone(),
            source,
        })?;
        Ok((name, fw))
    }
}

/// The bring-up of one GPU, over its BAR.
#[derive(Debug)]
pub struct Bringup<B: Bar> {
    bar: B,
    discovery: Discovery,
    blocks: Blocks,
    vram_bytes: u64,
    /// The frame buffer's MC base (MC_VM_FB_LOCATION_BASE << 24).
    fb_base: u64,
    trace: Vec<Step>,
    timeout: Duration,
    psp: psp::PspState,
    smu: smu::SmuState,
    gmc: gmc::GmcState,
    ih: ih::IhState,
}

impl<B: Bar> Bringup<B> {
    /// Stage 2: reads VRAM's size (`RCC_CONFIG_MEMSIZE`), then the discovery table 64 KiB
    /// below VRAM's top, and chooses the blocks it names. `timeout` bounds each wait later.
    pub fn discover(mut bar: B, timeout: Duration) -> Result<Self, BringupError> {
        let mut trace = Vec::new();
        let mib = bar.read32(RCC_CONFIG_MEMSIZE).map_err(bar_err)?;
        trace.push(Step::Read {
            name: "RCC_CONFIG_MEMSIZE".into(),
            dword: RCC_CONFIG_MEMSIZE,
            value: mib,
        });
        let vram_bytes = u64::from(mib) << 20;
        if vram_bytes < layout::MIN_VRAM {
            return Err(BringupError::VramSize { mib });
        }
        let mut bin = vec![0u8; TMR_SIZE];
        let at = vram_bytes - TMR_OFFSET;
        bar.vram_read(at, &mut bin).map_err(bar_err)?;
        trace.push(Step::VramRead {
            offset: at,
            len: TMR_SIZE,
            what: "IP discovery table".into(),
        });
        let discovery = Discovery::parse(&bin)?;
        let blocks = Blocks::of(&discovery)?;
        tracing::info!(gc = ?blocks.gc, psp = ?blocks.psp, "IP discovery read");
        let mut b = Bringup {
            bar,
            discovery,
            blocks,
            vram_bytes,
            fb_base: 0,
            trace,
            timeout,
            psp: psp::PspState::default(),
            smu: smu::SmuState::default(),
            gmc: gmc::GmcState::default(),
            ih: ih::IhState::default(),
        };
        let mmhub = b.blocks.regs.mmhub;
        let name = ["MMMC_VM_FB_LOCATION_BASE", "MC_VM_FB_LOCATION_BASE"]
            .into_iter()
            .find(|n| mmhub.reg(n).is_some())
            .ok_or(BringupError::Register {
                table: mmhub.name,
                name: "MC_VM_FB_LOCATION_BASE".into(),
            })?;
        let base = b.read(mmhub, hw_id::MMHUB, name)?;
        b.fb_base = u64::from(base & 0xff_ffff) << 24;
        Ok(b)
    }

    /// The discovery table it read.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The blocks the table chose.
    pub fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// VRAM's size.
    pub fn vram_bytes(&self) -> u64 {
        self.vram_bytes
    }

    /// Every access so far, in order.
    pub fn trace(&self) -> &[Step] {
        &self.trace
    }

    /// The BAR.
    pub fn bar(&self) -> &B {
        &self.bar
    }

    /// The BAR, to reach the device beside the bring-up (the GPU's own accesses, in tests
    /// the model's).
    pub fn bar_mut(&mut self) -> &mut B {
        &mut self.bar
    }

    /// The MC address the GPU's blocks use for VRAM offset `offset`.
    fn mc(&self, offset: u64) -> u64 {
        self.fb_base + offset
    }

    fn dword(&self, table: &'static Table, hw: u16, name: &str) -> Result<u32, BringupError> {
        let missing = || BringupError::Register {
            table: table.name,
            name: name.into(),
        };
        let segs = self
            .discovery
            .ip(hw, 0)
            .ok_or_else(missing)?
            .segment_bases(self.discovery.base_addr_64);
        table
            .reg(name)
            .and_then(|r| r.dword(&segs))
            .ok_or_else(missing)
    }

    fn read(&mut self, table: &'static Table, hw: u16, name: &str) -> Result<u32, BringupError> {
        let dword = self.dword(table, hw, name)?;
        let value = self.bar.read32(dword).map_err(bar_err)?;
        self.trace.push(Step::Read {
            name: name.into(),
            dword,
            value,
        });
        Ok(value)
    }

    fn write(
        &mut self,
        table: &'static Table,
        hw: u16,
        name: &str,
        value: u32,
    ) -> Result<(), BringupError> {
        let dword = self.dword(table, hw, name)?;
        self.bar.write32(dword, value).map_err(bar_err)?;
        self.trace.push(Step::Write {
            name: name.into(),
            dword,
            value,
        });
        Ok(())
    }

    /// Polls until `until` holds (amdgpu's `psp_wait_for`), for at most the timeout; the
    /// last value read.
    fn wait(
        &mut self,
        table: &'static Table,
        hw: u16,
        name: &str,
        until: Until,
        during: &dyn Fn() -> String,
    ) -> Result<u32, BringupError> {
        let dword = self.dword(table, hw, name)?;
        let start = Instant::now();
        let mut reads = 0;
        loop {
            let last = self.bar.read32(dword).map_err(bar_err)?;
            reads += 1;
            if until.holds(last) {
                self.trace.push(Step::Wait {
                    name: name.into(),
                    until,
                    reads,
                });
                return Ok(last);
            }
            if start.elapsed() >= self.timeout {
                return Err(BringupError::Timeout {
                    during: during(),
                    name: name.into(),
                    until,
                    last,
                    timeout: self.timeout,
                });
            }
            std::thread::sleep(Duration::from_micros(10));
        }
    }

    fn vram_write(&mut self, offset: u64, data: &[u8], what: &str) -> Result<(), BringupError> {
        self.bar.vram_write(offset, data).map_err(bar_err)?;
        self.trace.push(Step::VramWrite {
            offset,
            len: data.len(),
            what: what.into(),
        });
        Ok(())
    }
}

fn bar_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> BringupError {
    BringupError::Bar(Box::new(e))
}
