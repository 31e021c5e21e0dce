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
//! Once the ring exists, the secure OS takes commands through it (`psp_gfx_if.h`): the driver
//! writes a [`CMD_BYTES`]-byte command buffer (`struct psp_gfx_cmd_resp`: the command's id at
//! +8, its fields from +28), then a [`FRAME_BYTES`]-byte frame (`struct psp_gfx_rb_frame`)
//! into the ring naming the buffer, a fence address and a fence value, and writes the ring's
//! new write pointer (in dwords) to C2PMSG_67. The secure OS answers each frame by writing
//! the response (its status at +[`RESP_AT`], [`status`]) into the command buffer and then the
//! fence value to the fence address; the driver polls the fence. [`GfxCmd`] lists the
//! commands the bring-up sends, [`GfxFw`] the firmware types of `GFX_CMD_ID_LOAD_IP_FW`, and
//! [`ip_images`] cuts a firmware file into the images amdgpu loads, as
//! `amdgpu_ucode_init_single_fw` cuts them.
//!
//! This module owns the protocol's numbers; the registers' addresses are [`crate::mmio`]'s.

use crate::ucode::{Firmware, Header, PspFw, RlcPart};

/// Bit 31 of C2PMSG_35 (the bootloader is ready for a command) and of C2PMSG_64 (the
/// secure OS answered).
pub const READY: u32 = 1 << 31;
/// The buffer a component is copied to: 1 MiB, aligned to 1 MiB (`PSP_1_MEG`).
pub const BUFFER_BYTES: u64 = 1 << 20;
/// `PSP_RING_TYPE__KM`: the kernel-mode ring.
pub const RING_TYPE_KM: u32 = 2;
/// The kernel-mode ring's bytes (`psp_ring_init`).
pub const RING_BYTES: u32 = 0x1000;

/// Bytes of a ring frame (`struct psp_gfx_rb_frame`): `cmd_buf_addr_lo/hi` (+0, +4),
/// `cmd_buf_size` (+8), `fence_addr_lo/hi` (+12, +16), `fence_value` (+20).
pub const FRAME_BYTES: usize = 64;
/// Bytes of a command buffer (`struct psp_gfx_cmd_resp`).
pub const CMD_BYTES: usize = 1024;
/// Where a command buffer holds its command's id (`cmd_id`).
pub const CMD_ID_AT: usize = 8;
/// Where a command buffer's command-specific fields begin (`union psp_gfx_commands cmd`).
pub const CMD_AT: usize = 28;
/// Where a command buffer's response begins (`struct psp_gfx_resp resp`): `status` (+0),
/// `session_id` (+4), `fw_addr_lo/hi` (+8, +12), `tmr_size` (+16).
pub const RESP_AT: usize = 864;
/// The alignment of the trusted memory region (`PSP_TMR_ALIGNMENT`).
pub const TMR_ALIGN: u64 = 1 << 20;
/// The trusted memory region's size where no TOC gives one (`PSP_TMR_SIZE` for every chip
/// but Aldebaran).
pub const TMR_BYTES: u64 = 0x40_0000;

/// The response status words of `psp_gfx_if.h`.
pub mod status {
    /// `TEE_SUCCESS`.
    pub const SUCCESS: u32 = 0;
    /// `TEE_ERROR_CANCEL`.
    pub const CANCEL: u32 = 0xffff_0002;
    /// `TEE_ERROR_NOT_SUPPORTED`.
    pub const NOT_SUPPORTED: u32 = 0xffff_000a;
    /// `PSP_ERR_UNKNOWN_COMMAND`.
    pub const UNKNOWN_COMMAND: u32 = 0x100;
}

/// A ring command (`enum psp_gfx_cmd_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GfxCmd {
    /// `GFX_CMD_ID_SETUP_TMR` (5): fields `buf_phy_addr_lo/hi` (+0, +4), `buf_size` (+8),
    /// a bitfield (+12, bit 1 `virt_phy_addr`), `system_phy_addr_lo/hi` (+16, +20).
    SetupTmr,
    /// `GFX_CMD_ID_LOAD_IP_FW` (6): fields `fw_phy_addr_lo/hi` (+0, +4), `fw_size` (+8),
    /// `fw_type` (+12, a [`GfxFw`]).
    LoadIpFw,
    /// `GFX_CMD_ID_LOAD_TOC` (0x20).
    LoadToc,
    /// `GFX_CMD_ID_AUTOLOAD_RLC` (0x21): every GC image is in, start the RLC's autoload.
    AutoloadRlc,
}

impl GfxCmd {
    /// Its `cmd_id`.
    pub const fn value(self) -> u32 {
        match self {
            GfxCmd::SetupTmr => 5,
            GfxCmd::LoadIpFw => 6,
            GfxCmd::LoadToc => 0x20,
            GfxCmd::AutoloadRlc => 0x21,
        }
    }

    /// The command of `cmd_id` `v`, if it is one of these.
    pub fn of(v: u32) -> Option<GfxCmd> {
        [
            GfxCmd::SetupTmr,
            GfxCmd::LoadIpFw,
            GfxCmd::LoadToc,
            GfxCmd::AutoloadRlc,
        ]
        .into_iter()
        .find(|c| c.value() == v)
    }
}

macro_rules! gfx_fw {
    ($($(#[$doc:meta])* $name:ident = $v:literal,)*) => {
        /// A firmware type of `GFX_CMD_ID_LOAD_IP_FW` (`enum psp_gfx_fw_type`), those the
        /// bring-up loads.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum GfxFw {
            $($(#[$doc])* $name,)*
        }

        impl GfxFw {
            /// Every type, in declaration order.
            pub const ALL: &[GfxFw] = &[$(GfxFw::$name,)*];

            /// Its `fw_type` value.
            pub const fn value(self) -> u32 {
                match self {
                    $(GfxFw::$name => $v,)*
                }
            }
        }
    };
}

gfx_fw! {
    /// `GFX_FW_TYPE_SMU` (18).
    Smu = 18,
    /// `GFX_FW_TYPE_SDMA_UCODE_TH0` (71): SDMA 6's context thread.
    SdmaTh0 = 71,
    /// `GFX_FW_TYPE_SDMA_UCODE_TH1` (72): SDMA 6's control thread.
    SdmaTh1 = 72,
    /// `GFX_FW_TYPE_RS64_PFP` (87).
    Rs64Pfp = 87,
    /// `GFX_FW_TYPE_RS64_ME` (88).
    Rs64Me = 88,
    /// `GFX_FW_TYPE_RS64_MEC` (89).
    Rs64Mec = 89,
    /// `GFX_FW_TYPE_RS64_PFP_P0_STACK` (90).
    Rs64PfpP0Stack = 90,
    /// `GFX_FW_TYPE_RS64_PFP_P1_STACK` (91).
    Rs64PfpP1Stack = 91,
    /// `GFX_FW_TYPE_RS64_ME_P0_STACK` (92).
    Rs64MeP0Stack = 92,
    /// `GFX_FW_TYPE_RS64_ME_P1_STACK` (93).
    Rs64MeP1Stack = 93,
    /// `GFX_FW_TYPE_RS64_MEC_P0_STACK` (94).
    Rs64MecP0Stack = 94,
    /// `GFX_FW_TYPE_RS64_MEC_P1_STACK` (95).
    Rs64MecP1Stack = 95,
    /// `GFX_FW_TYPE_RS64_MEC_P2_STACK` (96).
    Rs64MecP2Stack = 96,
    /// `GFX_FW_TYPE_RS64_MEC_P3_STACK` (97).
    Rs64MecP3Stack = 97,
    /// `GFX_FW_TYPE_CP_MES` (33).
    CpMes = 33,
    /// `GFX_FW_TYPE_MES_STACK` (34).
    MesStack = 34,
    /// `GFX_FW_TYPE_CP_MES_KIQ` (81).
    CpMesKiq = 81,
    /// `GFX_FW_TYPE_MES_KIQ_STACK` (82).
    MesKiqStack = 82,
    /// `GFX_FW_TYPE_IMU_I` (68).
    ImuI = 68,
    /// `GFX_FW_TYPE_IMU_D` (69).
    ImuD = 69,
    /// `GFX_FW_TYPE_RLC_RESTORE_LIST_GPM_MEM` (20).
    RlcGpm = 20,
    /// `GFX_FW_TYPE_RLC_RESTORE_LIST_SRM_MEM` (21).
    RlcSrm = 21,
    /// `GFX_FW_TYPE_RLC_IRAM` (26).
    RlcIram = 26,
    /// `GFX_FW_TYPE_RLC_DRAM_BOOT` (48).
    RlcDramBoot = 48,
    /// `GFX_FW_TYPE_RLC_P` (25).
    RlcP = 25,
    /// `GFX_FW_TYPE_RLC_V` (7).
    RlcV = 7,
    /// `GFX_FW_TYPE_GLOBAL_TAP_DELAYS` (27).
    GlobalTapDelays = 27,
    /// `GFX_FW_TYPE_SE0_TAP_DELAYS` (28).
    Se0TapDelays = 28,
    /// `GFX_FW_TYPE_SE1_TAP_DELAYS` (29).
    Se1TapDelays = 29,
    /// `GFX_FW_TYPE_SE2_TAP_DELAYS` (65).
    Se2TapDelays = 65,
    /// `GFX_FW_TYPE_SE3_TAP_DELAYS` (66).
    Se3TapDelays = 66,
    /// `GFX_FW_TYPE_RLC_G` (8): the RLC's main image, the last GC image.
    RlcG = 8,
}

impl GfxFw {
    /// The type of `fw_type` value `v`, if the bring-up loads it.
    pub fn of(v: u32) -> Option<GfxFw> {
        GfxFw::ALL.iter().copied().find(|f| f.value() == v)
    }

    /// Its place in amdgpu's load order (`psp_load_non_psp_fw`): the SMU's first, then the
    /// others in `enum AMDGPU_UCODE_ID` order, which is this enum's declaration order.
    pub fn rank(self) -> usize {
        // PANIC: ALL holds every variant.
        GfxFw::ALL.iter().position(|&f| f == self).unwrap()
    }

    /// Whether it belongs to the GC (loaded before [`GfxCmd::AutoloadRlc`]).
    pub fn is_gc(self) -> bool {
        !matches!(self, GfxFw::Smu | GfxFw::SdmaTh0 | GfxFw::SdmaTh1)
    }
}

/// Why a file has no PSP images.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The file's name says no role whose images the bring-up loads through the PSP.
    #[error("{0} is not a file whose images the PSP loads (RS64 CP, MES, IMU, RLC, SDMA 6, SMU)")]
    Role(String),
    /// The file's header is not the one its role needs.
    #[error("{file} has a header of another kind or version than its role needs")]
    Header {
        /// The file's name.
        file: String,
    },
}

/// The images amdgpu loads through `GFX_CMD_ID_LOAD_IP_FW` from the firmware file `name`
/// (its last path component), parsed as `fw`, as `amdgpu_ucode_init_single_fw` cuts them for
/// GC 11: an RS64 CP file's instruction image and its data image once per pipe stack, a MES
/// file's code and data (`*_mes1.bin` is the KIQ's), the IMU's instruction and data RAM,
/// the RLC's main image (`RLC_G`) and each nonzero part its header version places (save and
/// restore lists, IRAM, DRAM, RLC_P, RLC_V, tap delays), SDMA 6's two threads, and the
/// SMU's main image.
pub fn ip_images<'a>(name: &str, fw: &Firmware<'a>) -> Result<Vec<(GfxFw, &'a [u8])>, ImageError> {
    let stem = name.strip_suffix(".bin").unwrap_or(name);
    let role = stem.rsplit_once('_').map_or(stem, |(_, r)| r);
    let header = || ImageError::Header { file: name.into() };
    let mut out = Vec::new();
    match (&fw.header, role) {
        (Header::CpV2 { code, data, .. }, "pfp" | "me" | "mec") => {
            let (main, stacks): (GfxFw, &[GfxFw]) = match role {
                "pfp" => (
                    GfxFw::Rs64Pfp,
                    &[GfxFw::Rs64PfpP0Stack, GfxFw::Rs64PfpP1Stack],
                ),
                "me" => (GfxFw::Rs64Me, &[GfxFw::Rs64MeP0Stack, GfxFw::Rs64MeP1Stack]),
                _ => (
                    GfxFw::Rs64Mec,
                    &[
                        GfxFw::Rs64MecP0Stack,
                        GfxFw::Rs64MecP1Stack,
                        GfxFw::Rs64MecP2Stack,
                        GfxFw::Rs64MecP3Stack,
                    ],
                ),
            };
            out.push((main, fw.slice(*code)));
            out.extend(stacks.iter().map(|&s| (s, fw.slice(*data))));
        }
        (Header::Mes { code, data, .. }, _) if stem.contains("_mes") => {
            let kiq = role == "mes1";
            let (c, d) = if kiq {
                (GfxFw::CpMesKiq, GfxFw::MesKiqStack)
            } else {
                (GfxFw::CpMes, GfxFw::MesStack)
            };
            out.push((c, fw.slice(*code)));
            out.push((d, fw.slice(*data)));
        }
        (Header::Imu { iram, dram }, "imu") => {
            out.push((GfxFw::ImuI, fw.slice(*iram)));
            out.push((GfxFw::ImuD, fw.slice(*dram)));
        }
        (Header::Rlc { parts, .. }, "rlc") => {
            out.push((GfxFw::RlcG, fw.image()));
            for &(part, region) in parts {
                let t = match part {
                    RlcPart::SaveRestoreGpm => GfxFw::RlcGpm,
                    RlcPart::SaveRestoreSrm => GfxFw::RlcSrm,
                    RlcPart::Iram => GfxFw::RlcIram,
                    RlcPart::Dram => GfxFw::RlcDramBoot,
                    RlcPart::Rlcp => GfxFw::RlcP,
                    RlcPart::Rlcv => GfxFw::RlcV,
                    RlcPart::GlobalTapDelays => GfxFw::GlobalTapDelays,
                    RlcPart::SeTapDelays(0) => GfxFw::Se0TapDelays,
                    RlcPart::SeTapDelays(1) => GfxFw::Se1TapDelays,
                    RlcPart::SeTapDelays(2) => GfxFw::Se2TapDelays,
                    RlcPart::SeTapDelays(_) => GfxFw::Se3TapDelays,
                    // The register lists and the save/restore control list are read by the
                    // driver itself, not loaded through the PSP.
                    _ => continue,
                };
                if region.size > 0 {
                    out.push((t, fw.slice(region)));
                }
            }
        }
        (Header::SdmaV2 { ctx, ctl, .. }, _) if stem.starts_with("sdma_") => {
            out.push((GfxFw::SdmaTh0, fw.slice(*ctx)));
            out.push((GfxFw::SdmaTh1, fw.slice(*ctl)));
        }
        (Header::Smc { .. }, _) if stem.starts_with("smu_") => {
            out.push((GfxFw::Smu, fw.image()));
        }
        (_, "pfp" | "me" | "mec" | "imu" | "rlc") => return Err(header()),
        _ if stem.contains("_mes") || stem.starts_with("sdma_") || stem.starts_with("smu_") => {
            return Err(header());
        }
        _ => return Err(ImageError::Role(name.into())),
    }
    Ok(out)
}

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

    #[test]
    fn ring_numbers_are_the_headers() {
        for c in [
            GfxCmd::SetupTmr,
            GfxCmd::LoadIpFw,
            GfxCmd::LoadToc,
            GfxCmd::AutoloadRlc,
        ] {
            assert_eq!(GfxCmd::of(c.value()), Some(c));
        }
        assert_eq!(GfxFw::of(89), Some(GfxFw::Rs64Mec));
        assert_eq!(GfxFw::of(9), None);
        // The SMU first, RLC_G last (psp_load_non_psp_fw, then AUTOLOAD_RLC).
        assert_eq!(GfxFw::ALL.first(), Some(&GfxFw::Smu));
        assert_eq!(GfxFw::ALL.last(), Some(&GfxFw::RlcG));
        let mut values: Vec<u32> = GfxFw::ALL.iter().map(|f| f.value()).collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), GfxFw::ALL.len());
    }
}
