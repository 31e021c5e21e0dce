//! The processor a code object is for, read from the ELF header's `e_flags`.
//!
//! `e_flags` holds the processor as an `EF_AMDGPU_MACH` value (bits 7:0), the xnack and sramecc
//! settings of code object v4+ (bits 9:8 and 11:10), and from v6 the version of a generic
//! processor (bits 31:24). The values are LLVM's (AMDGPUUsage, "ELF Header"). A generic
//! processor, such as `gfx11-generic`, names code that runs on every processor of its family.

use std::fmt;

use crate::gpu::{IpVersion, parse_processor, processor_name};

/// Bits 7:0 of `e_flags`: the processor.
const EF_AMDGPU_MACH: u32 = 0xff;
/// Bits 9:8: the xnack setting (v4+).
const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
/// Bits 11:10: the sramecc setting (v4+).
const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
/// Bits 31:24: the generic version (v6+).
const EF_AMDGPU_GENERIC_VERSION_OFFSET: u32 = 24;

/// `EF_AMDGPU_MACH` values of the AMDGCN processors, with their names.
///
/// Every processor LLVM has given a value, not only those rig drives, so that a code object
/// for another GPU is refused by its name ("a code object for gfx90a").
static MACHS: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x055, "gfx1152"),
    (0x057, "gfx1154"),
    (0x058, "gfx1153"),
];

/// A family of processors that one generic code object runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GenericFamily {
    /// `gfx9-generic`: gfx900, gfx902, gfx904, gfx906, gfx909, gfx90c.
    Gfx9,
    /// `gfx9-4-generic`: gfx940, gfx941, gfx942, gfx950.
    Gfx9_4,
    /// `gfx10-1-generic`: gfx1010 to gfx1013.
    Gfx10_1,
    /// `gfx10-3-generic`: gfx1030 to gfx1036.
    Gfx10_3,
    /// `gfx11-generic`: gfx1100 to gfx1103 and gfx1150 to gfx1153.
    Gfx11,
    /// `gfx12-generic`: gfx1200, gfx1201.
    Gfx12,
}

/// `EF_AMDGPU_MACH` values of the generic processors.
static GENERIC_MACHS: &[(u32, GenericFamily)] = &[
    (0x051, GenericFamily::Gfx9),
    (0x052, GenericFamily::Gfx10_1),
    (0x053, GenericFamily::Gfx10_3),
    (0x054, GenericFamily::Gfx11),
    (0x059, GenericFamily::Gfx12),
    (0x05f, GenericFamily::Gfx9_4),
];

impl GenericFamily {
    /// The family's processor name, such as `gfx11-generic`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gfx9 => "gfx9-generic",
            Self::Gfx9_4 => "gfx9-4-generic",
            Self::Gfx10_1 => "gfx10-1-generic",
            Self::Gfx10_3 => "gfx10-3-generic",
            Self::Gfx11 => "gfx11-generic",
            Self::Gfx12 => "gfx12-generic",
        }
    }

    /// Whether code for this family runs on processor `p`.
    pub fn covers(self, p: IpVersion) -> bool {
        let (major, minor, stepping) = (p.major, p.minor, p.stepping);
        match self {
            Self::Gfx9 => major == 9 && minor == 0 && matches!(stepping, 0 | 2 | 4 | 6 | 9 | 12),
            Self::Gfx9_4 => {
                major == 9 && ((minor == 4 && stepping <= 2) || (minor, stepping) == (5, 0))
            }
            Self::Gfx10_1 => major == 10 && minor == 1 && stepping <= 3,
            Self::Gfx10_3 => major == 10 && minor == 3 && stepping <= 6,
            Self::Gfx11 => major == 11 && (minor == 0 || minor == 5) && stepping <= 3,
            Self::Gfx12 => major == 12 && minor == 0 && stepping <= 1,
        }
    }
}

/// The processor a code object is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Processor {
    /// One processor, such as gfx1100 (11.0.0).
    Gfx(IpVersion),
    /// Every processor of a family, from code object v6.
    Generic {
        /// The family.
        family: GenericFamily,
        /// The generic version from `e_flags` bits 31:24 (1 or more).
        version: u8,
    },
}

impl Processor {
    /// Its name as LLVM spells it, such as `gfx90a` or `gfx11-generic`.
    pub fn name(&self) -> String {
        match self {
            Self::Gfx(v) => processor_name(*v),
            Self::Generic { family, .. } => family.name().to_string(),
        }
    }

    /// Whether its code runs on processor `p`.
    pub fn runs_on(&self, p: IpVersion) -> bool {
        match self {
            Self::Gfx(v) => *v == p,
            Self::Generic { family, .. } => family.covers(p),
        }
    }
}

impl fmt::Display for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A target feature setting of code object v4+ (xnack, sramecc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// The processor does not have the feature.
    Unsupported,
    /// The code runs with the feature on or off.
    Any,
    /// The code needs the feature off.
    Off,
    /// The code needs the feature on.
    On,
}

impl Feature {
    fn from_bits(bits: u32) -> Self {
        match bits & 3 {
            0 => Self::Unsupported,
            1 => Self::Any,
            2 => Self::Off,
            _ => Self::On,
        }
    }

    /// The sign LLVM's target id gives the setting (`+`, `-`), if it names it.
    fn sign(self) -> Option<char> {
        match self {
            Self::On => Some('+'),
            Self::Off => Some('-'),
            Self::Unsupported | Self::Any => None,
        }
    }
}

/// What a code object's `e_flags` say it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// The processor.
    pub processor: Processor,
    /// The xnack setting (page-fault replay).
    pub xnack: Feature,
    /// The sramecc setting.
    pub sramecc: Feature,
}

impl Target {
    /// Reads the target from `e_flags`, or `None` if the processor is unknown.
    pub fn from_e_flags(flags: u32) -> Option<Self> {
        let mach = flags & EF_AMDGPU_MACH;
        let processor = if let Some(&(_, name)) = MACHS.iter().find(|(m, _)| *m == mach) {
            Processor::Gfx(parse_processor(name)?)
        } else {
            let &(_, family) = GENERIC_MACHS.iter().find(|(m, _)| *m == mach)?;
            let version = (flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET) as u8;
            if version == 0 {
                return None;
            }
            Processor::Generic { family, version }
        };
        Some(Self {
            processor,
            xnack: Feature::from_bits((flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8),
            sramecc: Feature::from_bits((flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10),
        })
    }

    /// The target id as LLVM writes it after `amdgcn-amd-amdhsa--`, such as
    /// `gfx942:sramecc+:xnack-`: the processor, then each feature that is on or off.
    pub fn id(&self) -> String {
        let mut s = self.processor.name();
        for (name, feature) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            if let Some(sign) = feature.sign() {
                s.push(':');
                s.push_str(name);
                s.push(sign);
            }
        }
        s
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GPUS;

    #[test]
    fn e_flags_of_llvm_19_objects() {
        // Values llvm-readelf-19 prints for objects clang-19 built.
        let t = Target::from_e_flags(0x41).unwrap();
        assert_eq!(t.processor, Processor::Gfx(IpVersion::new(11, 0, 0)));
        assert_eq!(t.id(), "gfx1100");
        let t = Target::from_e_flags(0x54c).unwrap();
        assert_eq!(t.processor.name(), "gfx942");
        assert_eq!((t.xnack, t.sramecc), (Feature::Any, Feature::Any));
        assert_eq!(t.id(), "gfx942");
        let t = Target::from_e_flags(0xb4c).unwrap();
        assert_eq!((t.xnack, t.sramecc), (Feature::On, Feature::Off));
        assert_eq!(t.id(), "gfx942:sramecc-:xnack+");
        let t = Target::from_e_flags(0x0100_0054).unwrap();
        assert_eq!(
            t.processor,
            Processor::Generic {
                family: GenericFamily::Gfx11,
                version: 1
            }
        );
        assert_eq!(t.id(), "gfx11-generic");
        // A generic processor without a generic version is malformed.
        assert!(Target::from_e_flags(0x54).is_none());
        assert!(Target::from_e_flags(0x27).is_none());
        assert_eq!(
            Target::from_e_flags(0x3f).unwrap().processor.name(),
            "gfx90a"
        );
    }

    #[test]
    fn every_gpu_rig_drives_has_a_mach_value_and_a_family() {
        for g in GPUS {
            let name = g.name();
            assert!(MACHS.iter().any(|(_, n)| *n == name), "{name}");
            let families = [
                GenericFamily::Gfx9_4,
                GenericFamily::Gfx11,
                GenericFamily::Gfx12,
            ];
            assert_eq!(
                families.iter().filter(|f| f.covers(g.processor)).count(),
                1,
                "{name}"
            );
        }
        let gfx11 = Processor::Generic {
            family: GenericFamily::Gfx11,
            version: 1,
        };
        assert!(gfx11.runs_on(IpVersion::new(11, 0, 0)));
        assert!(gfx11.runs_on(IpVersion::new(11, 5, 1)));
        assert!(!gfx11.runs_on(IpVersion::new(12, 0, 1)));
        assert!(!gfx11.runs_on(IpVersion::new(9, 4, 2)));
    }

    #[test]
    fn mach_values_are_unique() {
        for (i, (m, n)) in MACHS.iter().enumerate() {
            assert!(
                MACHS[i + 1..].iter().all(|(m2, n2)| m2 != m && n2 != n),
                "{n}"
            );
            assert!(GENERIC_MACHS.iter().all(|(g, _)| g != m));
        }
    }
}
