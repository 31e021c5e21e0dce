//! The SMU of the register-level model: MP1 13.0.0's message mailbox (C2PMSG_66 message,
//! 82 argument, 90 response; [`rig_amd::smu`] states the protocol).
//!
//! The SMU runs only once the PSP has loaded its firmware (`GFX_FW_TYPE_SMU`): before that a
//! message is never answered (C2PMSG_90 keeps what the driver wrote there). A running SMU
//! takes a message when C2PMSG_66 is written and has answered it by the driver's next read
//! of C2PMSG_90. A message written while the previous one is unanswered (the driver did not
//! wait) is answered [`Response::RejectedBusy`] once the previous one is done.
//!
//! It answers [`Msg::GetSmuVersion`] with the `ucode_version` of the SMU firmware file it
//! was given, [`Msg::GetDriverIfVersion`] with its driver-interface version
//! ([`DRIVER_IF_VERSION`] unless made with another). Clock messages need the features
//! enabled (`SetAllowedFeaturesMask*`, then `EnableAllSmuFeatures`), or are answered
//! [`Response::RejectedPrereq`]; a clock it has no DPM table for, or a frequency outside
//! the table's range, is answered [`Response::Failed`], as is a workload mask with bits past
//! `WORKLOAD_PPLIB_COUNT`. An id `smu_v13_0_0_ppsmc.h` does not list is answered
//! [`Response::UnknownCmd`]; one it lists that the model does not model is answered
//! [`Response::Failed`] and recorded, so a bring-up that sends one learns it at once. Which
//! prerequisites and ranges the real firmware checks is not public (docs/pci.md).
//!
//! Its DPM ranges are the ones a 7900 XTX's amdgpu reports (`pp_dpm_sclk` 500 to 2500 MHz,
//! `pp_dpm_mclk` 96 to 1249, SOCCLK 500 to 1200, FCLK 800 to 1900), figures for the model
//! only: a real SMU's come from its power-play table, which the bring-up reads from it.

use rig_amd::smu::{
    ARG_REG, CLOCK_COUNT, Clock, DRIVER_IF_VERSION, MESSAGE_COUNT, MSG_REG, Msg, RESP_REG,
    Response, workload,
};

/// One message the SMU answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// The id written to C2PMSG_66.
    pub msg: u32,
    /// The argument.
    pub arg: u32,
    /// The answer.
    pub response: Response,
}

/// The model's SMU.
#[derive(Debug)]
pub struct Smu {
    c2pmsg: [u32; 128],
    /// The message taken and not answered yet: id and argument.
    pending: Option<(u32, u32)>,
    /// A message written while `pending` was: answered busy after it.
    busy: bool,
    version: u32,
    if_version: u32,
    allowed: u64,
    enabled: bool,
    gfxoff: bool,
    workload: u32,
    /// Soft minimum and maximum of each clock of [`Clock::ALL`], MHz.
    soft: [(u16, u16); 4],
    answered: Vec<Answered>,
}

/// The DPM range of each clock of [`Clock::ALL`] (see the module's docs).
const DPM: [(u16, u16); 4] = [(500, 2500), (500, 1200), (96, 1249), (800, 1900)];

impl Default for Smu {
    fn default() -> Self {
        Smu {
            c2pmsg: [0; 128],
            pending: None,
            busy: false,
            version: 0,
            if_version: DRIVER_IF_VERSION,
            allowed: 0,
            enabled: false,
            gfxoff: true,
            workload: 1 << workload::DEFAULT,
            soft: DPM,
            answered: Vec::new(),
        }
    }
}

impl Smu {
    /// Takes the version its firmware file states (`ucode_version`).
    pub(crate) fn set_version(&mut self, version: u32) {
        self.version = version;
    }

    /// Takes the driver-interface version its firmware reports.
    pub(crate) fn set_if_version(&mut self, if_version: u32) {
        self.if_version = if_version;
    }

    /// The messages it answered, in order.
    pub fn answered(&self) -> &[Answered] {
        &self.answered
    }

    /// The soft minimum and maximum of `clock`, MHz.
    pub fn soft_range(&self, clock: Clock) -> (u16, u16) {
        self.soft[Self::slot(clock)]
    }

    /// The workload mask last set.
    pub fn workload(&self) -> u32 {
        self.workload
    }

    /// Whether GFXOFF is allowed.
    pub fn gfxoff_allowed(&self) -> bool {
        self.gfxoff
    }

    /// Whether `EnableAllSmuFeatures` was taken.
    pub fn features_enabled(&self) -> bool {
        self.enabled
    }

    fn slot(clock: Clock) -> usize {
        // PANIC: ALL holds every clock.
        Clock::ALL.iter().position(|&c| c == clock).unwrap()
    }

    /// A read of C2PMSG_`n`: reading the response register finds a taken message answered.
    pub(crate) fn read(&mut self, n: usize) -> u32 {
        if n == RESP_REG as usize {
            self.finish();
        }
        self.c2pmsg.get(n).copied().unwrap_or(0)
    }

    /// A write of C2PMSG_`n`; `running` whether the PSP has loaded the SMU's firmware.
    pub(crate) fn write(&mut self, n: usize, value: u32, running: bool) {
        if let Some(r) = self.c2pmsg.get_mut(n) {
            *r = value;
        }
        if n != MSG_REG as usize || !running {
            return;
        }
        if self.pending.is_some() {
            self.busy = true;
            tracing::debug!(
                msg = value,
                "model SMU: a message before the last was answered"
            );
            return;
        }
        self.pending = Some((value, self.c2pmsg[ARG_REG as usize]));
    }

    fn finish(&mut self) {
        let Some((msg, arg)) = self.pending.take() else {
            return;
        };
        let (response, out) = self.run(msg, arg);
        let response = if std::mem::take(&mut self.busy) {
            Response::RejectedBusy
        } else {
            response
        };
        self.c2pmsg[ARG_REG as usize] = out;
        self.c2pmsg[RESP_REG as usize] = response.value();
        self.answered.push(Answered { msg, arg, response });
    }

    /// Runs message `msg` with `arg`: the answer and the value left in C2PMSG_82.
    fn run(&mut self, msg: u32, arg: u32) -> (Response, u32) {
        let Some(m) = Msg::of(msg) else {
            // smu_v13_0_0_ppsmc.h lists every id below the count but 0x4d and 0x50.
            let listed = msg != 0 && msg < MESSAGE_COUNT && msg != 0x4d && msg != 0x50;
            if listed {
                tracing::warn!(msg, "model SMU: a message it does not model");
                return (Response::Failed, arg);
            }
            return (Response::UnknownCmd, arg);
        };
        let clock = || {
            let id = arg >> 16;
            Clock::of(id).filter(|_| id < CLOCK_COUNT)
        };
        let [lo_byte, hi_byte, ..] = arg.to_le_bytes();
        let mhz = u16::from_le_bytes([lo_byte, hi_byte]);
        match m {
            Msg::TestMessage => (Response::Ok, arg),
            Msg::GetSmuVersion => (Response::Ok, self.version),
            Msg::GetDriverIfVersion => (Response::Ok, self.if_version),
            Msg::SetAllowedFeaturesMaskLow => {
                self.allowed = self.allowed & !0xffff_ffff | u64::from(arg);
                (Response::Ok, arg)
            }
            Msg::SetAllowedFeaturesMaskHigh => {
                self.allowed = self.allowed & 0xffff_ffff | u64::from(arg) << 32;
                (Response::Ok, arg)
            }
            Msg::EnableAllSmuFeatures => {
                if self.allowed == 0 {
                    return (Response::RejectedPrereq, arg);
                }
                self.enabled = true;
                (Response::Ok, arg)
            }
            Msg::GetMinDpmFreq
            | Msg::GetMaxDpmFreq
            | Msg::SetSoftMinByFreq
            | Msg::SetSoftMaxByFreq => {
                if !self.enabled {
                    return (Response::RejectedPrereq, arg);
                }
                let Some(c) = clock() else {
                    return (Response::Failed, arg);
                };
                let i = Self::slot(c);
                let (lo, hi) = DPM[i];
                match m {
                    Msg::GetMinDpmFreq => (Response::Ok, u32::from(lo)),
                    Msg::GetMaxDpmFreq => (Response::Ok, u32::from(hi)),
                    _ if !(lo..=hi).contains(&mhz) => (Response::Failed, arg),
                    Msg::SetSoftMinByFreq => {
                        self.soft[i].0 = mhz;
                        (Response::Ok, arg)
                    }
                    _ => {
                        self.soft[i].1 = mhz;
                        (Response::Ok, arg)
                    }
                }
            }
            Msg::SetWorkloadMask => {
                if arg >> workload::COUNT != 0 {
                    return (Response::Failed, arg);
                }
                self.workload = arg;
                (Response::Ok, arg)
            }
            Msg::AllowGfxOff => {
                self.gfxoff = true;
                (Response::Ok, arg)
            }
            Msg::DisallowGfxOff => {
                self.gfxoff = false;
                (Response::Ok, arg)
            }
        }
    }
}
