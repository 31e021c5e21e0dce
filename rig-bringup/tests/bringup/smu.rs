//! Stage 6 against the model: the SMU's start and the stable-power state, and each wrong
//! order or refused message.

use rig_amd::smu::{Clock, DRIVER_IF_VERSION, Msg, Response, clock_arg, workload};
use rig_bringup::{BringupError, Step};

use crate::{booted, dir, setup};

#[test]
fn the_smu_starts_and_holds_stable_power() {
    let Some(dir) = dir() else { return };
    let (mut b, _) = booted(&dir);
    let info = b.start_smu().unwrap();
    // The version the SMU file's header states (smu_13_0_0.bin's ucode_version).
    let smc = std::fs::read(dir.join("smu_13_0_0.bin")).unwrap();
    let fw = rig_amd::ucode::Firmware::parse(rig_amd::ucode::Kind::Smc, &smc).unwrap();
    assert_eq!(info.version, fw.common.ucode_version);
    assert_eq!(info.if_version, DRIVER_IF_VERSION);
    assert!(info.if_matches());
    let stable = b.stable_power().unwrap();
    // amdgpu's PROFILE_STANDARD on SMU 13.0.0: GFXCLK and UCLK at their maximum, SOCCLK
    // and FCLK at their minimum (the model's DPM ranges).
    assert_eq!(
        stable.clocks,
        [
            (Clock::Gfx, 2500),
            (Clock::Soc, 500),
            (Clock::U, 1249),
            (Clock::F, 800)
        ]
    );
    let smu = b.bar().0.smu();
    for (clock, mhz) in &stable.clocks {
        assert_eq!(smu.soft_range(*clock), (*mhz, *mhz));
    }
    assert_eq!(smu.workload(), 1 << workload::COMPUTE);
    assert!(!smu.gfxoff_allowed());
    assert!(smu.answered().iter().all(|a| a.response == Response::Ok));
    // Each message as smu_cmn sends it: response cleared, argument, message; then the
    // answer awaited and the argument read back.
    let steps: Vec<String> = b
        .trace()
        .iter()
        .filter_map(|s| match s {
            Step::Write { name, value, .. } if name.starts_with("MP1_") => {
                Some(format!("w{}={value:#x}", &name[15..]))
            }
            Step::Wait { name, .. } if name.starts_with("MP1_") => {
                Some(format!("wait{}", &name[15..]))
            }
            Step::Read { name, .. } if name.starts_with("MP1_") => {
                Some(format!("r{}", &name[15..]))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        steps[..9],
        [
            "w90=0x0", "w82=0x0", "w66=0x1", "wait90", "r82", "wait90", "w90=0x0", "w82=0x0",
            "w66=0x2"
        ]
    );
    let sent: Vec<u32> = smu.answered().iter().map(|a| a.msg).collect();
    assert_eq!(sent.len(), 6 + 4 * 4 + 2);
    assert_eq!(
        &sent[sent.len() - 2..],
        [Msg::SetWorkloadMask.value(), Msg::DisallowGfxOff.value()]
    );
}

#[test]
fn another_driver_interface_is_logged_and_the_smu_starts() {
    let Some(dir) = dir() else { return };
    let (mut b, _) = booted(&dir);
    b.bar_mut().0.set_smu_if_version(DRIVER_IF_VERSION + 1);
    let info = b.start_smu().unwrap();
    assert!(!info.if_matches());
    assert!(b.bar().0.smu().features_enabled());
}

#[test]
fn the_smu_before_its_firmware_or_stable_power_before_its_start_is_refused() {
    let Some(dir) = dir() else { return };
    let (mut b, set) = setup(&dir);
    b.boot_psp(&set).unwrap();
    assert!(matches!(b.start_smu(), Err(BringupError::Order(_))));
    b.load_firmware(&set).unwrap();
    assert!(matches!(b.stable_power(), Err(BringupError::Order(_))));
    assert!(b.bar().0.smu().answered().is_empty());
}

#[test]
fn refused_messages_come_back_typed() {
    let Some(dir) = dir() else { return };
    let (mut b, _) = booted(&dir);
    // A clock message before the features run: a valid message, bad prerequisites.
    let err = b
        .smu_message(Msg::SetSoftMinByFreq, clock_arg(Clock::Gfx, 1000))
        .unwrap_err();
    assert!(
        matches!(
            err,
            BringupError::Smu {
                response: Response::RejectedPrereq,
                ..
            }
        ),
        "{err}"
    );
    b.start_smu().unwrap();
    // A clock id past PPCLK_COUNT, and a workload bit past WORKLOAD_PPLIB_COUNT: failed.
    let err = b.smu_message(Msg::GetMaxDpmFreq, 13 << 16).unwrap_err();
    assert!(
        matches!(
            err,
            BringupError::Smu {
                response: Response::Failed,
                ..
            }
        ),
        "{err}"
    );
    let err = b
        .smu_message(Msg::SetWorkloadMask, 1 << workload::COUNT)
        .unwrap_err();
    assert!(
        matches!(
            err,
            BringupError::Smu {
                response: Response::Failed,
                ..
            }
        ),
        "{err}"
    );
    // The mailbox still works after refusals.
    assert_eq!(
        b.smu_message(Msg::GetMaxDpmFreq, clock_arg(Clock::U, 0))
            .unwrap(),
        1249
    );
}

#[test]
fn the_mailbox_answers_unknown_and_busy_and_nothing_before_its_firmware() {
    let Some(dir) = dir() else { return };
    let (b, set) = setup(&dir);
    let segs = b
        .discovery()
        .ip(rig_amd::discovery::hw_id::MP1, 0)
        .unwrap()
        .segment_bases(false);
    let mp1 = b.blocks().regs.mp1;
    let reg = |n: u32| {
        mp1.reg(&format!("MP1_SMN_C2PMSG_{n}"))
            .unwrap()
            .dword(&segs)
            .unwrap()
    };
    let (msg, arg, resp) = (reg(66), reg(82), reg(90));
    let mut b = b;
    // Before the PSP loads its firmware, the SMU answers nothing.
    let m = &mut b.bar_mut().0;
    m.mmio_write(resp, 0).unwrap();
    m.mmio_write(msg, Msg::TestMessage.value()).unwrap();
    assert_eq!(m.mmio_read(resp).unwrap(), 0);
    b.boot_psp(&set).unwrap();
    b.load_firmware(&set).unwrap();
    let m = &mut b.bar_mut().0;
    // An id the header does not list.
    m.mmio_write(resp, 0).unwrap();
    m.mmio_write(msg, 0x4d).unwrap();
    assert_eq!(
        Response::of(m.mmio_read(resp).unwrap()),
        Response::UnknownCmd
    );
    // A message sent before the last was answered: the later one is rejected as busy.
    m.mmio_write(resp, 0).unwrap();
    m.mmio_write(arg, 0).unwrap();
    m.mmio_write(msg, Msg::GetSmuVersion.value()).unwrap();
    m.mmio_write(msg, Msg::GetDriverIfVersion.value()).unwrap();
    assert_eq!(
        Response::of(m.mmio_read(resp).unwrap()),
        Response::RejectedBusy
    );
    let answered: Vec<Response> = m.smu().answered().iter().map(|a| a.response).collect();
    assert_eq!(answered, [Response::UnknownCmd, Response::RejectedBusy]);
}
