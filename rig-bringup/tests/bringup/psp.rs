//! Stages 3 to 5 against the model: SOS boots, every image of the GC, SDMA and SMU is
//! taken, and each wrong order or bad file is refused.

use rig_amd::psp::GfxFw;
use rig_bringup::{BringupError, FirmwareSet, Step};
use rig_sim::pci::psp::State;

use crate::{VRAM, dir, setup};

#[test]
fn boots_sos_and_loads_every_gfx1100_firmware() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = setup(&dir);
    assert_eq!(b.vram_bytes(), VRAM);
    b.boot_psp(&set).unwrap();
    b.load_firmware(&set).unwrap();
    let psp = b.bar().0.psp();
    assert_eq!(psp.state(), State::RingCreated);
    assert!(psp.refusals().is_empty(), "{:?}", psp.refusals());
    assert_eq!(
        psp.tmr(),
        Some((rig_bringup::layout::TMR, rig_amd::psp::TMR_BYTES))
    );
    // Every image, in amdgpu's order (a real gfx1100's trace: SMU, SDMA threads, RS64 CP
    // code and stacks, MES and its KIQ, IMU, the RLC's parts, RLC_G last).
    let loaded: Vec<GfxFw> = psp.ip_loaded().iter().map(|l| l.fw).collect();
    use GfxFw::*;
    assert_eq!(
        loaded,
        [
            Smu,
            SdmaTh0,
            SdmaTh1,
            Rs64Pfp,
            Rs64Me,
            Rs64Mec,
            Rs64PfpP0Stack,
            Rs64PfpP1Stack,
            Rs64MeP0Stack,
            Rs64MeP1Stack,
            Rs64MecP0Stack,
            Rs64MecP1Stack,
            Rs64MecP2Stack,
            Rs64MecP3Stack,
            CpMes,
            MesStack,
            CpMesKiq,
            MesKiqStack,
            ImuI,
            ImuD,
            RlcGpm,
            RlcSrm,
            RlcIram,
            RlcDramBoot,
            RlcP,
            RlcV,
            RlcG,
        ]
    );
    // Sizes as a real gfx1100 loads them from these files (SMU 0x3fe00, RLC_G 0x6200, a
    // stack 0x22000), and where the PSP answered it placed each.
    let size = |t| psp.ip_loaded().iter().find(|l| l.fw == t).unwrap().size;
    assert_eq!(size(Smu), 0x3fe00);
    assert_eq!(size(RlcG), 0x6200);
    assert_eq!(size(Rs64MecP0Stack), 0x22000);
    let placed: Vec<(GfxFw, u64)> = psp.ip_loaded().iter().map(|l| (l.fw, l.at)).collect();
    assert_eq!(b.firmware_loaded(), placed.as_slice());
    assert!(psp.autoload_started());
    // The trace names each register it touched, in order: the bootloader's first steps.
    let first: Vec<&str> = b
        .trace()
        .iter()
        .filter_map(|s| match s {
            Step::Write { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .take(2)
        .collect();
    assert_eq!(first, ["MP0_SMN_C2PMSG_36", "MP0_SMN_C2PMSG_35"]);
    // After the bootloader: psp_v13_0_ring_create (69, 70, 71, 64), then one write pointer
    // (67) per command: SETUP_TMR, each image, AUTOLOAD_RLC.
    let after: Vec<&str> = b
        .trace()
        .iter()
        .filter_map(|s| match s {
            Step::Write { name, .. } if !name.ends_with("_35") && !name.ends_with("_36") => {
                Some(name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        after[..4],
        [
            "MP0_SMN_C2PMSG_69",
            "MP0_SMN_C2PMSG_70",
            "MP0_SMN_C2PMSG_71",
            "MP0_SMN_C2PMSG_64"
        ]
    );
    assert!(after[4..].iter().all(|n| *n == "MP0_SMN_C2PMSG_67"));
    assert_eq!(after.len() - 4, loaded.len() + 2);
}

#[test]
fn firmware_before_the_tmr_is_refused_before_anything_is_sent() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = setup(&dir);
    assert!(matches!(b.load_firmware(&set), Err(BringupError::Order(_))));
    assert!(b.bar().0.psp().ip_loaded().is_empty());
}

#[test]
fn another_chips_secure_os_is_never_answered() {
    let Some(dir) = dir() else { return };
    let (b, set) = setup(&dir);
    // A valid SOS file of another chip (gfx1201's) boots nothing on this one: the
    // bootloader never answers its first component, and the bring-up's wait says so.
    let other = std::fs::read(dir.join("psp_14_0_3_sos.bin")).unwrap();
    let mut wrong = FirmwareSet::default();
    for (name, bytes) in set.files() {
        let bytes = if name.ends_with("_sos.bin") {
            other.clone()
        } else {
            bytes.to_vec()
        };
        wrong.add(name, bytes).unwrap();
    }
    let mut b = b;
    let err = b.boot_psp(&wrong).unwrap_err();
    assert!(matches!(err, BringupError::Timeout { .. }), "{err}");
    assert_eq!(b.bar().0.psp().state(), State::Stuck);
}

#[test]
fn a_bad_header_is_refused_before_anything_is_sent() {
    let Some(dir) = dir() else { return };
    let mut bytes = std::fs::read(dir.join("gc_11_0_0_mec.bin")).unwrap();
    // size_bytes no longer the file's size.
    bytes[0] ^= 0x10;
    let mut set = FirmwareSet::default();
    let err = set.add("gc_11_0_0_mec.bin", bytes).unwrap_err();
    assert!(matches!(err, BringupError::Firmware { .. }), "{err}");
}

#[test]
fn an_image_under_another_type_or_changed_is_refused_by_the_psp() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = setup(&dir);
    b.boot_psp(&set).unwrap();
    // The ME's file under the PFP's name: its images are sent as the PFP's.
    let mut wrong = FirmwareSet::default();
    for (name, bytes) in set.files() {
        let bytes = if name.ends_with("_pfp.bin") {
            std::fs::read(dir.join("gc_11_0_0_me.bin")).unwrap()
        } else {
            bytes.to_vec()
        };
        wrong.add(name, bytes).unwrap();
    }
    let err = b.load_firmware(&wrong).unwrap_err();
    assert!(
        matches!(&err, BringupError::PspStatus { during, status } if during.contains("Rs64Pfp") && *status == rig_amd::psp::status::NOT_SUPPORTED),
        "{err}"
    );
    let loaded: Vec<GfxFw> = b.bar().0.psp().ip_loaded().iter().map(|l| l.fw).collect();
    assert_eq!(loaded, [GfxFw::Smu, GfxFw::SdmaTh0, GfxFw::SdmaTh1]);
}

#[test]
fn a_missing_file_stops_the_load_before_anything_is_sent() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = setup(&dir);
    b.boot_psp(&set).unwrap();
    let mut partial = FirmwareSet::default();
    for (name, bytes) in set.files() {
        if !name.ends_with("_imu.bin") {
            partial.add(name, bytes.to_vec()).unwrap();
        }
    }
    let err = b.load_firmware(&partial).unwrap_err();
    assert!(matches!(err, BringupError::MissingFirmware(_)), "{err}");
    assert!(b.bar().0.psp().ip_loaded().is_empty());
}
