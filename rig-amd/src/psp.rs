//! The PSP bootloader's mailbox protocol, as amdgpu drives it (`amdgpu_psp.h`, `psp_v13_0.c`,
//! `psp_v14_0.c`).
//!
//! Before its secure OS runs, the PSP's bootloader takes components of the SOS file one at a
//! time: the driver waits for bit 31 of C2PMSG_35 ([`READY`]: the bootloader is idle), copies
//! the component to a 1 MiB-aligned buffer, writes the buffer's address shifted right by 20 to
//! C2PMSG_36, writes the command ([`BootCommand`]) to C2PMSG_35, and waits for bit 31 again.
//! After the secure OS, it waits for C2PMSG_81 (the sign of life, nonzero once SOS runs) to
//! change, and C2PMSG_58 holds SOS's version. The kernel-mode ring is then made through
//! C2PMSG_69/70 (its address), C2PMSG_71 (its size) and C2PMSG_64 (`ring type << 16`, with
//! bit 31 the response flag and bits 15:0 the status).
//!
//! This module owns the protocol's numbers; the registers' addresses are [`crate::mmio`]'s.

use crate::ucode::PspFw;

/// Bit 31 of C2PMSG_35 (the bootloader is ready for a command) and of C2PMSG_64 (the
/// secure OS answered).
pub const READY: u32 = 1 << 31;
/// The buffer a component is copied to: 1 MiB, aligned to 1 MiB (`PSP_1_MEG`).
pub const BUFFER_BYTES: u64 = 1 << 20;
/// `PSP_RING_TYPE__KM`: the kernel-mode ring.
pub const RING_TYPE_KM: u32 = 2;
/// The kernel-mode ring's bytes (`psp_ring_init`).
pub const RING_BYTES: u32 = 0x1000;

/// A bootloader command (`enum psp_bootloader_cmd`), written to C2PMSG_35.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BootCommand {
    /// `PSP_BL__LOAD_KEY_DATABASE` (0x80000).
    KeyDatabase,
    /// `PSP_BL__LOAD_TOS_SPL_TABLE` (0x10000000).
    SplTable,
    /// `PSP_BL__LOAD_SYSDRV` (0x10000).
    SysDrv,
    /// `PSP_BL__LOAD_SOCDRV` (0xb0000).
    SocDrv,
    /// `PSP_BL__LOAD_INTFDRV` (0xd0000).
    IntfDrv,
    /// `PSP_BL__LOAD_DBGDRV` (0xc0000).
    DbgDrv,
    /// `PSP_BL__LOAD_RASDRV` (0xe0000).
    RasDrv,
    /// `PSP_BL__LOAD_IPKEYMGRDRV` (0xf0000).
    IpKeyMgrDrv,
    /// `PSP_BL__LOAD_SOSDRV` (0x20000): the secure OS, last.
    SosDrv,
}

/// The order `psp_hw_start` loads the components in (each only if the file has it).
pub const BOOT_ORDER: [BootCommand; 9] = [
    BootCommand::KeyDatabase,
    BootCommand::SplTable,
    BootCommand::SysDrv,
    BootCommand::SocDrv,
    BootCommand::IntfDrv,
    BootCommand::DbgDrv,
    BootCommand::RasDrv,
    BootCommand::IpKeyMgrDrv,
    BootCommand::SosDrv,
];

impl BootCommand {
    /// The value written to C2PMSG_35.
    pub const fn value(self) -> u32 {
        match self {
            BootCommand::KeyDatabase => 0x8_0000,
            BootCommand::SplTable => 0x1000_0000,
            BootCommand::SysDrv => 0x1_0000,
            BootCommand::SocDrv => 0xb_0000,
            BootCommand::IntfDrv => 0xd_0000,
            BootCommand::DbgDrv => 0xc_0000,
            BootCommand::RasDrv => 0xe_0000,
            BootCommand::IpKeyMgrDrv => 0xf_0000,
            BootCommand::SosDrv => 0x2_0000,
        }
    }

    /// The command of C2PMSG_35 value `v`, if it is one of these.
    pub fn of(v: u32) -> Option<BootCommand> {
        BOOT_ORDER.into_iter().find(|c| c.value() == v)
    }

    /// The SOS file's component it loads.
    pub const fn component(self) -> PspFw {
        match self {
            BootCommand::KeyDatabase => PspFw::Kdb,
            BootCommand::SplTable => PspFw::Spl,
            BootCommand::SysDrv => PspFw::SysDrv,
            BootCommand::SocDrv => PspFw::SocDrv,
            BootCommand::IntfDrv => PspFw::IntfDrv,
            BootCommand::DbgDrv => PspFw::DbgDrv,
            BootCommand::RasDrv => PspFw::RasDrv,
            BootCommand::IpKeyMgrDrv => PspFw::IpKeyMgrDrv,
            BootCommand::SosDrv => PspFw::Sos,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_through_their_values() {
        for c in BOOT_ORDER {
            assert_eq!(BootCommand::of(c.value()), Some(c));
        }
        assert_eq!(BootCommand::of(0x3_0000), None);
        assert_eq!(BOOT_ORDER.last(), Some(&BootCommand::SosDrv));
    }
}
