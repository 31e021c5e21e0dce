//! Stage 6 of docs/pci.md: the SMU (MP1 13.0.0), through its message mailbox as amdgpu's
//! `smu_cmn_send_smc_msg_with_param` drives it ([`rig_amd::smu`] has the numbers): its
//! start (`TestMessage`, the firmware's version, the driver-interface check, the features)
//! and the stable-power state the seed's measures need.

use rig_amd::discovery::hw_id;
use rig_amd::psp::GfxFw;
use rig_amd::smu::{
    ARG_REG, Clock, DRIVER_IF_VERSION, MSG_REG, Msg, RESP_REG, Response, clock_arg, version_parts,
    workload,
};

use crate::{Bar, Bringup, BringupError, Until};

/// What the SMU reported at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmuInfo {
    /// `GetSmuVersion`'s answer: program, major, minor, debug ([`version_parts`]).
    pub version: u32,
    /// `GetDriverIfVersion`'s answer.
    pub if_version: u32,
}

impl SmuInfo {
    /// Whether the firmware's driver interface is the one rig was written against
    /// ([`DRIVER_IF_VERSION`]); amdgpu goes on either way, and so does the bring-up.
    pub fn if_matches(&self) -> bool {
        self.if_version == DRIVER_IF_VERSION
    }
}

/// The clocks the stable-power state holds, MHz, each at its soft minimum and maximum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StablePower {
    /// Each clock and the frequency it is held at.
    pub clocks: Vec<(Clock, u16)>,
}

/// Where the SMU is, as far as the bring-up drove it.
#[derive(Debug, Default)]
pub(crate) struct SmuState {
    /// A message was sent (amdgpu's `SMU_FW_INIT` over: later ones wait for the last).
    sent: bool,
    info: Option<SmuInfo>,
    stable: Option<StablePower>,
}

impl<B: Bar> Bringup<B> {
    fn mp1(n: u32) -> String {
        format!("MP1_SMN_C2PMSG_{n}")
    }

    /// One message to the SMU with argument `arg`; the value it leaves in C2PMSG_82. Before
    /// each message but the first it waits for the previous one's answer, clears the
    /// response register, writes the argument and the message, and waits for the answer;
    /// an answer other than [`Response::Ok`] is [`BringupError::Smu`].
    pub fn smu_message(&mut self, msg: Msg, arg: u32) -> Result<u32, BringupError> {
        if !self.psp.loaded.iter().any(|(t, _)| *t == GfxFw::Smu) {
            return Err(BringupError::Order(
                "an SMU message before the PSP loaded the SMU's firmware",
            ));
        }
        let mp1 = self.blocks.regs.mp1;
        let resp = Self::mp1(RESP_REG);
        let nonzero = Until::Changed { from: 0 };
        if self.smu.sent {
            let during = || format!("the SMU's answer to the message before {msg:?}");
            self.wait(mp1, hw_id::MP1, &resp, nonzero, &during)?;
        }
        self.write(mp1, hw_id::MP1, &resp, 0)?;
        self.write(mp1, hw_id::MP1, &Self::mp1(ARG_REG), arg)?;
        self.write(mp1, hw_id::MP1, &Self::mp1(MSG_REG), msg.value())?;
        self.smu.sent = true;
        let during = || format!("the SMU's answer to {msg:?}");
        let response = Response::of(self.wait(mp1, hw_id::MP1, &resp, nonzero, &during)?);
        let out = self.read(mp1, hw_id::MP1, &Self::mp1(ARG_REG))?;
        if response != Response::Ok {
            return Err(BringupError::Smu { msg, arg, response });
        }
        Ok(out)
    }

    /// Stage 6's start: `TestMessage`, the firmware's version and driver interface
    /// (`smu_v13_0_check_fw_version`: another interface version is logged, not refused),
    /// then every feature allowed and enabled (`smu_v13_0_0_get_allowed_feature_mask`
    /// allows all that the driver's feature mask does not clear; rig clears none).
    pub fn start_smu(&mut self) -> Result<SmuInfo, BringupError> {
        if (
            self.blocks.smu.major,
            self.blocks.smu.minor,
            self.blocks.smu.stepping,
        ) != (13, 0, 0)
        {
            return Err(BringupError::Order(
                "the SMU stage drives MP1 13.0.0 (gfx1100) only",
            ));
        }
        self.smu_message(Msg::TestMessage, 0)?;
        let version = self.smu_message(Msg::GetSmuVersion, 0)?;
        let if_version = self.smu_message(Msg::GetDriverIfVersion, 0)?;
        let info = SmuInfo {
            version,
            if_version,
        };
        let [program, major, minor, patch] = version_parts(version);
        if info.if_matches() {
            tracing::info!(program, major, minor, patch, "SMU firmware running");
        } else {
            tracing::warn!(
                program,
                major,
                minor,
                patch,
                if_version,
                expected = DRIVER_IF_VERSION,
                "SMU driver interface version not matched; going on, as amdgpu does"
            );
        }
        self.smu_message(Msg::SetAllowedFeaturesMaskLow, u32::MAX)?;
        self.smu_message(Msg::SetAllowedFeaturesMaskHigh, u32::MAX)?;
        self.smu_message(Msg::EnableAllSmuFeatures, 0)?;
        self.smu.info = Some(info);
        Ok(info)
    }

    /// What the SMU reported at its start, once [`Bringup::start_smu`] ran.
    pub fn smu_info(&self) -> Option<SmuInfo> {
        self.smu.info
    }

    /// The seed's `stable_power`: the clocks held where amdgpu's
    /// `AMD_DPM_FORCED_LEVEL_PROFILE_STANDARD` holds them (`smu_v13_0_0_populate_umd_state_clk`:
    /// GFXCLK and UCLK at their DPM maximum, SOCCLK and FCLK at their minimum), each by
    /// `SetSoftMaxByFreq` then `SetSoftMinByFreq` to one frequency; the compute workload
    /// profile; and GFXOFF disallowed, so the counters' block stays powered.
    pub fn stable_power(&mut self) -> Result<StablePower, BringupError> {
        if self.smu.info.is_none() {
            return Err(BringupError::Order("stable power before the SMU's start"));
        }
        let mut clocks = Vec::new();
        for clock in Clock::ALL {
            let query = clock_arg(clock, 0);
            let min = self.smu_message(Msg::GetMinDpmFreq, query)?;
            let max = self.smu_message(Msg::GetMaxDpmFreq, query)?;
            let at = match clock {
                Clock::Gfx | Clock::U => max,
                Clock::Soc | Clock::F => min,
            };
            let mhz = u16::try_from(at).map_err(|_| BringupError::SmuClock { clock, mhz: at })?;
            self.smu_message(Msg::SetSoftMaxByFreq, clock_arg(clock, mhz))?;
            self.smu_message(Msg::SetSoftMinByFreq, clock_arg(clock, mhz))?;
            clocks.push((clock, mhz));
        }
        self.smu_message(Msg::SetWorkloadMask, 1 << workload::COMPUTE)?;
        self.smu_message(Msg::DisallowGfxOff, 0)?;
        let stable = StablePower { clocks };
        self.smu.stable = Some(stable.clone());
        Ok(stable)
    }

    /// The stable-power state held, if [`Bringup::stable_power`] ran.
    pub fn stable(&self) -> Option<&StablePower> {
        self.smu.stable.as_ref()
    }
}
