//! The SMU's message mailbox of MP1 13.0.0 (gfx1100), as amdgpu drives it (`smu_cmn.c`,
//! `smu_v13_0.c`, `smu_v13_0_0_ppt.c`), with the numbers of `smu_v13_0_0_ppsmc.h` and
//! `smu13_driver_if_v13_0_0.h`.
//!
//! A message is one exchange through three MP1 registers ([`crate::mmio`]'s `mp_13_0_0`):
//! the driver writes 0 to the response register (C2PMSG_90), the argument to C2PMSG_82 and
//! the message's id ([`Msg`]) to C2PMSG_66, then polls C2PMSG_90 until it is nonzero: the
//! [`Response`]. An answer's value is read back from C2PMSG_82. Before each message but
//! the first, amdgpu first polls C2PMSG_90 for the previous message's answer, so a message
//! is never sent while the SMU still works on one (`smu_cmn_send_smc_msg_with_param`).
//!
//! A clock message's argument is the clock's id ([`Clock`], `PPCLK_e`) in bits 31:16 and a
//! frequency in MHz in bits 15:0 ([`clock_arg`]); a workload mask's bits are
//! `WORKLOAD_PPLIB_*_BIT` ([`workload`]).
//!
//! This module owns the protocol's numbers; the registers' addresses are [`crate::mmio`]'s.

/// The message register: C2PMSG_66.
pub const MSG_REG: u32 = 66;
/// The argument register, both ways: C2PMSG_82.
pub const ARG_REG: u32 = 82;
/// The response register: C2PMSG_90.
pub const RESP_REG: u32 = 90;

/// `SMU13_0_0_DRIVER_IF_VERSION`: the driver-interface version amdgpu 6.12 was built for;
/// amdgpu only logs a firmware that reports another (`smu_v13_0_check_fw_version`: the
/// firmware is meant to be backward compatible).
pub const DRIVER_IF_VERSION: u32 = 0x3d;

/// The SMU's answer in C2PMSG_90 (`PPSMC_Result_*`, and `smu_cmn.c`'s `SMU_RESP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Response {
    /// 0 (`SMU_RESP_NONE`): not answered yet; the SMU still works on the message.
    None,
    /// 1 (`PPSMC_Result_OK`).
    Ok,
    /// 0xff (`PPSMC_Result_Failed`): taken, and it failed.
    Failed,
    /// 0xfe (`PPSMC_Result_UnknownCmd`): no such message; ignored.
    UnknownCmd,
    /// 0xfd (`PPSMC_Result_CmdRejectedPrereq`): a valid message whose prerequisites do not
    /// hold.
    RejectedPrereq,
    /// 0xfc (`PPSMC_Result_CmdRejectedBusy`): rejected, the SMU was busy (amdgpu: retry).
    RejectedBusy,
    /// Any other value (0xfb is `SMU_RESP_DEBUG_END`): amdgpu then takes the SMU as hung.
    Other(u32),
}

impl Response {
    /// The response of C2PMSG_90 value `v`.
    pub const fn of(v: u32) -> Response {
        match v {
            0 => Response::None,
            1 => Response::Ok,
            0xff => Response::Failed,
            0xfe => Response::UnknownCmd,
            0xfd => Response::RejectedPrereq,
            0xfc => Response::RejectedBusy,
            v => Response::Other(v),
        }
    }

    /// Its C2PMSG_90 value.
    pub const fn value(self) -> u32 {
        match self {
            Response::None => 0,
            Response::Ok => 1,
            Response::Failed => 0xff,
            Response::UnknownCmd => 0xfe,
            Response::RejectedPrereq => 0xfd,
            Response::RejectedBusy => 0xfc,
            Response::Other(v) => v,
        }
    }
}

macro_rules! msgs {
    ($($(#[$doc:meta])* $name:ident = $v:literal,)*) => {
        /// A message of `smu_v13_0_0_ppsmc.h` (`PPSMC_MSG_*`), those the bring-up sends.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Msg {
            $($(#[$doc])* $name,)*
        }

        impl Msg {
            /// Every message here.
            pub const ALL: &[Msg] = &[$(Msg::$name,)*];

            /// Its id, written to C2PMSG_66.
            pub const fn value(self) -> u32 {
                match self {
                    $(Msg::$name => $v,)*
                }
            }
        }
    };
}

msgs! {
    /// `PPSMC_MSG_TestMessage` (0x1).
    TestMessage = 0x1,
    /// `PPSMC_MSG_GetSmuVersion` (0x2): answers the firmware's version.
    GetSmuVersion = 0x2,
    /// `PPSMC_MSG_GetDriverIfVersion` (0x3): answers its driver-interface version.
    GetDriverIfVersion = 0x3,
    /// `PPSMC_MSG_SetAllowedFeaturesMaskLow` (0x4): features 31:0 the driver allows.
    SetAllowedFeaturesMaskLow = 0x4,
    /// `PPSMC_MSG_SetAllowedFeaturesMaskHigh` (0x5): features 63:32.
    SetAllowedFeaturesMaskHigh = 0x5,
    /// `PPSMC_MSG_EnableAllSmuFeatures` (0x6): starts the allowed features (DPM among them).
    EnableAllSmuFeatures = 0x6,
    /// `PPSMC_MSG_SetSoftMinByFreq` (0x19): a [`clock_arg`].
    SetSoftMinByFreq = 0x19,
    /// `PPSMC_MSG_SetSoftMaxByFreq` (0x1a): a [`clock_arg`].
    SetSoftMaxByFreq = 0x1a,
    /// `PPSMC_MSG_GetMinDpmFreq` (0x1d): the clock's id in bits 31:16; answers MHz.
    GetMinDpmFreq = 0x1d,
    /// `PPSMC_MSG_GetMaxDpmFreq` (0x1e): as [`Msg::GetMinDpmFreq`].
    GetMaxDpmFreq = 0x1e,
    /// `PPSMC_MSG_SetWorkloadMask` (0x24): a mask of [`workload`] bits.
    SetWorkloadMask = 0x24,
    /// `PPSMC_MSG_AllowGfxOff` (0x28).
    AllowGfxOff = 0x28,
    /// `PPSMC_MSG_DisallowGfxOff` (0x29): the GC stays powered (profiling needs it).
    DisallowGfxOff = 0x29,
}

/// `PPSMC_Message_Count`: every id at or past it is unknown to the firmware.
pub const MESSAGE_COUNT: u32 = 0x52;

impl Msg {
    /// The message of id `v`, if it is one of these.
    pub fn of(v: u32) -> Option<Msg> {
        Msg::ALL.iter().copied().find(|m| m.value() == v)
    }
}

/// A clock of `PPCLK_e` (`smu13_driver_if_v13_0_0.h`), those the stable-power state holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Clock {
    /// `PPCLK_GFXCLK` (0): the shader clock.
    Gfx,
    /// `PPCLK_SOCCLK` (1).
    Soc,
    /// `PPCLK_UCLK` (2): the memory clock.
    U,
    /// `PPCLK_FCLK` (3): the data fabric's clock.
    F,
}

/// `PPCLK_COUNT`: every clock id at or past it is none.
pub const CLOCK_COUNT: u32 = 13;

impl Clock {
    /// Every clock here.
    pub const ALL: [Clock; 4] = [Clock::Gfx, Clock::Soc, Clock::U, Clock::F];

    /// Its `PPCLK_e` id.
    pub const fn id(self) -> u32 {
        match self {
            Clock::Gfx => 0,
            Clock::Soc => 1,
            Clock::U => 2,
            Clock::F => 3,
        }
    }

    /// The clock of id `id`, if it is one of these.
    pub fn of(id: u32) -> Option<Clock> {
        Clock::ALL.into_iter().find(|c| c.id() == id)
    }
}

/// A clock message's argument: the clock's id in bits 31:16, `mhz` in 15:0
/// (`smu_v13_0_set_soft_freq_limited_range`, which keeps only `mhz`'s low 16 bits).
pub const fn clock_arg(clock: Clock, mhz: u16) -> u32 {
    clock.id() << 16 | mhz as u32
}

/// The bits of [`Msg::SetWorkloadMask`] (`WORKLOAD_PPLIB_*_BIT`).
pub mod workload {
    /// `WORKLOAD_PPLIB_DEFAULT_BIT`.
    pub const DEFAULT: u32 = 0;
    /// `WORKLOAD_PPLIB_COMPUTE_BIT`: the compute profile.
    pub const COMPUTE: u32 = 5;
    /// `WORKLOAD_PPLIB_COUNT`: bits at or past it name no workload.
    pub const COUNT: u32 = 8;
}

/// The firmware version's parts as amdgpu prints them (`smu_v13_0_check_fw_version`):
/// program (31:24), major (23:16), minor (15:8), debug (7:0).
pub const fn version_parts(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_headers() {
        // smu_v13_0_0_ppsmc.h and smu13_driver_if_v13_0_0.h (Linux 6.12).
        assert_eq!(Msg::SetWorkloadMask.value(), 0x24);
        assert_eq!(Msg::DisallowGfxOff.value(), 0x29);
        assert_eq!(Msg::of(0x1e), Some(Msg::GetMaxDpmFreq));
        assert_eq!(Msg::of(0x4d), None);
        assert!(Msg::ALL.iter().all(|m| m.value() < MESSAGE_COUNT));
        assert_eq!(clock_arg(Clock::U, 1249), 0x2_04e1);
        for v in [0, 1, 0xff, 0xfe, 0xfd, 0xfc, 0xfb] {
            assert_eq!(Response::of(v).value(), v);
        }
        assert_eq!(Response::of(0xfb), Response::Other(0xfb));
        assert_eq!(version_parts(0x004e_4f00), [0, 0x4e, 0x4f, 0]);
    }
}
