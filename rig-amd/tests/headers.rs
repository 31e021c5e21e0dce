//! The numbers of the PCI bring-up's fact modules ([`rig_amd::psp`],
//! [`rig_amd::smu`], [`rig_amd::gmc`], [`rig_amd::ih`]) against Linux's own headers, read
//! from a kernel tree: each number rig states is looked up by its name in the header that
//! defines it (an enum member or a `#define`), so a number copied wrong fails here.
//!
//! The tree comes from `$RIG_LINUX_TREE`, else `/usr/src/linux-source-6.12` (Debian's
//! `linux-source-6.12`, unpacked); without one the test prints why and passes, unless
//! `RIG_REQUIRE_LINUX_TREE` is set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rig_amd::psp::{BOOT_ORDER, BootCommand, GfxCmd, GfxFw, RING_TYPE_KM, status};
use rig_amd::smu::{Clock, Msg};

fn tree() -> Option<PathBuf> {
    let dir = std::env::var_os("RIG_LINUX_TREE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/src/linux-source-6.12"));
    if dir.join(AMD).is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("RIG_REQUIRE_LINUX_TREE").is_none(),
        "no Linux tree at {}",
        dir.display()
    );
    eprintln!("no Linux tree at {}: skipped", dir.display());
    None
}

const AMD: &str = "drivers/gpu/drm/amd";

/// Every `NAME = value` enum member and `#define NAME value` of the header, by name.
fn numbers(tree: &Path, header: &str) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(tree.join(AMD).join(header))
        .unwrap_or_else(|e| panic!("{header}: {e}"));
    let mut out = HashMap::new();
    let mut next = 0u64;
    for line in text.lines() {
        let line = line
            .split("//")
            .next()
            .unwrap_or("")
            .split("/*")
            .next()
            .unwrap_or("");
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == '=' || c == ',' || c == '(' || c == ')')
            .filter(|w| !w.is_empty())
            .collect();
        let value = |w: &str| {
            let w = w.trim_end_matches(['L', 'U', 'l', 'u']);
            match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => w.parse().ok(),
            }
        };
        match words.as_slice() {
            // `#define NAME (1ULL << n)`, as amdgpu_vm.h states its bits.
            ["#define", name, v, "<<", n, ..] => {
                if let (Some(v), Some(n)) = (value(v), value(n)) {
                    out.insert(name.to_string(), v << n);
                }
            }
            ["#define", name, v, ..] => {
                if let Some(v) = value(v) {
                    out.insert(name.to_string(), v);
                }
            }
            [name, v, ..] if line.contains('=') && !name.starts_with('#') => {
                if let Some(v) = value(v) {
                    out.insert(name.to_string(), v);
                    next = v + 1;
                }
            }
            // An enum member without a value (PPCLK_e's): the last one's plus one.
            [name] if line.trim_end().ends_with(',') && name.starts_with("PPCLK_") => {
                out.insert(name.to_string(), next);
                next += 1;
            }
            _ => {}
        }
    }
    out
}

fn check(header: &HashMap<String, u64>, file: &str, name: &str, ours: u64) {
    assert_eq!(header.get(name).copied(), Some(ours), "{name} in {file}");
}

#[test]
fn psp_numbers_are_psp_gfx_if_hs_and_amdgpu_psp_hs() {
    let Some(tree) = tree() else { return };
    let gfx = numbers(&tree, "amdgpu/psp_gfx_if.h");
    let f = "psp_gfx_if.h";
    for (cmd, name) in [
        (GfxCmd::SetupTmr, "GFX_CMD_ID_SETUP_TMR"),
        (GfxCmd::LoadIpFw, "GFX_CMD_ID_LOAD_IP_FW"),
        (GfxCmd::LoadToc, "GFX_CMD_ID_LOAD_TOC"),
        (GfxCmd::AutoloadRlc, "GFX_CMD_ID_AUTOLOAD_RLC"),
    ] {
        check(&gfx, f, name, cmd.value().into());
    }
    for &fw in GfxFw::ALL {
        // The header's name of each type: GFX_FW_TYPE_ and the variant's AMD spelling.
        let name = match fw {
            GfxFw::Smu => "SMU",
            GfxFw::SdmaTh0 => "SDMA_UCODE_TH0",
            GfxFw::SdmaTh1 => "SDMA_UCODE_TH1",
            GfxFw::Rs64Pfp => "RS64_PFP",
            GfxFw::Rs64Me => "RS64_ME",
            GfxFw::Rs64Mec => "RS64_MEC",
            GfxFw::Rs64PfpP0Stack => "RS64_PFP_P0_STACK",
            GfxFw::Rs64PfpP1Stack => "RS64_PFP_P1_STACK",
            GfxFw::Rs64MeP0Stack => "RS64_ME_P0_STACK",
            GfxFw::Rs64MeP1Stack => "RS64_ME_P1_STACK",
            GfxFw::Rs64MecP0Stack => "RS64_MEC_P0_STACK",
            GfxFw::Rs64MecP1Stack => "RS64_MEC_P1_STACK",
            GfxFw::Rs64MecP2Stack => "RS64_MEC_P2_STACK",
            GfxFw::Rs64MecP3Stack => "RS64_MEC_P3_STACK",
            GfxFw::CpMes => "CP_MES",
            GfxFw::MesStack => "MES_STACK",
            GfxFw::CpMesKiq => "CP_MES_KIQ",
            GfxFw::MesKiqStack => "MES_KIQ_STACK",
            GfxFw::ImuI => "IMU_I",
            GfxFw::ImuD => "IMU_D",
            GfxFw::RlcGpm => "RLC_RESTORE_LIST_GPM_MEM",
            GfxFw::RlcSrm => "RLC_RESTORE_LIST_SRM_MEM",
            GfxFw::RlcIram => "RLC_IRAM",
            GfxFw::RlcDramBoot => "RLC_DRAM_BOOT",
            GfxFw::RlcP => "RLC_P",
            GfxFw::RlcV => "RLC_V",
            GfxFw::GlobalTapDelays => "GLOBAL_TAP_DELAYS",
            GfxFw::Se0TapDelays => "SE0_TAP_DELAYS",
            GfxFw::Se1TapDelays => "SE1_TAP_DELAYS",
            GfxFw::Se2TapDelays => "SE2_TAP_DELAYS",
            GfxFw::Se3TapDelays => "SE3_TAP_DELAYS",
            GfxFw::RlcG => "RLC_G",
        };
        check(&gfx, f, &format!("GFX_FW_TYPE_{name}"), fw.value().into());
    }
    check(&gfx, f, "TEE_SUCCESS", status::SUCCESS.into());
    check(&gfx, f, "TEE_ERROR_CANCEL", status::CANCEL.into());
    check(
        &gfx,
        f,
        "TEE_ERROR_NOT_SUPPORTED",
        status::NOT_SUPPORTED.into(),
    );
    check(
        &gfx,
        f,
        "PSP_ERR_UNKNOWN_COMMAND",
        status::UNKNOWN_COMMAND.into(),
    );
    let psp = numbers(&tree, "amdgpu/amdgpu_psp.h");
    let f = "amdgpu_psp.h";
    for c in BOOT_ORDER {
        let name = match c {
            BootCommand::KeyDatabase => "PSP_BL__LOAD_KEY_DATABASE",
            BootCommand::SplTable => "PSP_BL__LOAD_TOS_SPL_TABLE",
            BootCommand::SysDrv => "PSP_BL__LOAD_SYSDRV",
            BootCommand::SocDrv => "PSP_BL__LOAD_SOCDRV",
            BootCommand::IntfDrv => "PSP_BL__LOAD_INTFDRV",
            BootCommand::DbgDrv => "PSP_BL__LOAD_DBGDRV",
            BootCommand::RasDrv => "PSP_BL__LOAD_RASDRV",
            BootCommand::IpKeyMgrDrv => "PSP_BL__LOAD_IPKEYMGRDRV",
            BootCommand::SosDrv => "PSP_BL__LOAD_SOSDRV",
        };
        check(&psp, f, name, c.value().into());
    }
    check(&psp, f, "PSP_RING_TYPE__KM", RING_TYPE_KM.into());
}

#[test]
fn smu_numbers_are_smu_v13_0_0_ppsmc_hs_and_its_driver_ifs() {
    let Some(tree) = tree() else { return };
    let f = "pm/swsmu/inc/pmfw_if/smu_v13_0_0_ppsmc.h";
    let ppsmc = numbers(&tree, f);
    for &m in Msg::ALL {
        check(&ppsmc, f, &format!("PPSMC_MSG_{m:?}"), m.value().into());
    }
    check(
        &ppsmc,
        f,
        "PPSMC_Message_Count",
        rig_amd::smu::MESSAGE_COUNT.into(),
    );
    use rig_amd::smu::Response;
    for (r, name) in [
        (Response::Ok, "PPSMC_Result_OK"),
        (Response::Failed, "PPSMC_Result_Failed"),
        (Response::UnknownCmd, "PPSMC_Result_UnknownCmd"),
        (Response::RejectedPrereq, "PPSMC_Result_CmdRejectedPrereq"),
        (Response::RejectedBusy, "PPSMC_Result_CmdRejectedBusy"),
    ] {
        check(&ppsmc, f, name, r.value().into());
    }
    let f = "pm/swsmu/inc/pmfw_if/smu13_driver_if_v13_0_0.h";
    let dif = numbers(&tree, f);
    check(
        &dif,
        f,
        "SMU13_0_0_DRIVER_IF_VERSION",
        rig_amd::smu::DRIVER_IF_VERSION.into(),
    );
    for (c, name) in [
        (Clock::Gfx, "PPCLK_GFXCLK"),
        (Clock::Soc, "PPCLK_SOCCLK"),
        (Clock::U, "PPCLK_UCLK"),
        (Clock::F, "PPCLK_FCLK"),
    ] {
        check(&dif, f, name, c.id().into());
    }
    check(&dif, f, "PPCLK_COUNT", rig_amd::smu::CLOCK_COUNT.into());
    use rig_amd::smu::workload;
    check(
        &dif,
        f,
        "WORKLOAD_PPLIB_COMPUTE_BIT",
        workload::COMPUTE.into(),
    );
    check(&dif, f, "WORKLOAD_PPLIB_COUNT", workload::COUNT.into());
}

#[test]
fn ih_ids_are_the_clientid_and_ivsrcid_headers() {
    let Some(tree) = tree() else { return };
    use rig_amd::ih::{client, src};
    let f = "include/soc15_ih_clientid.h";
    let ids = numbers(&tree, f);
    check(&ids, f, "SOC21_IH_CLIENTID_GFX", client::GFX.into());
    check(&ids, f, "SOC21_IH_CLIENTID_VMC", client::VMC.into());
    check(&ids, f, "SOC21_IH_CLIENTID_GRBM_CP", client::GRBM_CP.into());
    let f = "include/ivsrcid/gfx/irqsrcs_gfx_11_0_0.h";
    let gfx = numbers(&tree, f);
    check(
        &gfx,
        f,
        "GFX_11_0_0__SRCID__CP_EOP_INTERRUPT",
        src::CP_EOP.into(),
    );
    check(
        &gfx,
        f,
        "GFX_11_0_0__SRCID__CP_BAD_OPCODE_ERROR",
        src::CP_BAD_OPCODE.into(),
    );
    check(
        &gfx,
        f,
        "GFX_11_0_0__SRCID__CP_PRIV_REG_FAULT",
        src::CP_PRIV_REG_FAULT.into(),
    );
    check(
        &gfx,
        f,
        "GFX_11_0_0__SRCID__CP_PRIV_INSTR_FAULT",
        src::CP_PRIV_INSTR_FAULT.into(),
    );
    let f = "include/ivsrcid/vmc/irqsrcs_vmc_1_0.h";
    let vmc = numbers(&tree, f);
    check(&vmc, f, "UTCL2_1_0__SRCID__FAULT", src::UTCL2_FAULT.into());
    check(&vmc, f, "VMC_1_0__SRCID__VM_FAULT", src::VM_FAULT.into());
}

#[test]
fn pte_bits_are_amdgpu_vm_hs() {
    let Some(tree) = tree() else { return };
    use rig_amd::gmc::pte;
    let f = "amdgpu/amdgpu_vm.h";
    let vm = numbers(&tree, f);
    for (bit, name) in [
        (pte::VALID, "AMDGPU_PTE_VALID"),
        (pte::SYSTEM, "AMDGPU_PTE_SYSTEM"),
        (pte::SNOOPED, "AMDGPU_PTE_SNOOPED"),
        (pte::EXECUTABLE, "AMDGPU_PTE_EXECUTABLE"),
        (pte::READABLE, "AMDGPU_PTE_READABLE"),
        (pte::WRITEABLE, "AMDGPU_PTE_WRITEABLE"),
        (pte::PRT, "AMDGPU_PTE_PRT"),
        (pte::PDE_PTE, "AMDGPU_PDE_PTE"),
    ] {
        check(&vm, f, name, bit);
    }
}
