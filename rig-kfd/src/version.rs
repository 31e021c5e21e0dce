//! KFD interface versions and what the path may use at each.
//!
//! KFD answers GET_VERSION with a major and minor number; minor versions add ioctls and
//! never remove any (the header's change log). [`negotiate`] takes the answer and says which
//! of the path's optional ioctls the kernel has, or why it cannot drive it.

use std::fmt;

/// A KFD interface version (`KFD_IOCTL_MAJOR_VERSION`.`KFD_IOCTL_MINOR_VERSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Changes only on an incompatible interface.
    pub major: u32,
    /// Grows with each addition.
    pub minor: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The oldest KFD the path drives: 1.11 (Linux 6.1), the interface whose layouts this crate
/// pins and tests against `linux/kfd_ioctl.h`, with every ioctl the path cannot do without.
pub const MINIMUM: Version = Version {
    major: 1,
    minor: 11,
};

/// KFD 1.12 added EXPORT_DMABUF.
pub const EXPORT_DMABUF: Version = Version {
    major: 1,
    minor: 12,
};

/// KFD 1.13 added RUNTIME_ENABLE (with the debugger interface).
pub const RUNTIME_ENABLE: Version = Version {
    major: 1,
    minor: 13,
};

/// What the kernel's KFD offers beyond [`MINIMUM`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// The version found.
    pub version: Version,
    /// EXPORT_DMABUF: Mapped memory reaches a client as a dma-buf.
    pub export_dmabuf: bool,
    /// RUNTIME_ENABLE: the path announces itself as the runtime before making queues.
    pub runtime_enable: bool,
}

/// Why the path cannot drive a KFD.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The major version is not the one this crate speaks.
    #[error(
        "KFD interface {found} has major version {}, rig speaks major version {}; \
         this kernel's /dev/kfd is not one rig can drive",
        found.major, MINIMUM.major
    )]
    Major {
        /// What the kernel answered.
        found: Version,
    },
    /// The minor version is below [`MINIMUM`].
    #[error(
        "KFD interface {found} is older than {MINIMUM}, the oldest rig drives; \
         run a kernel of Linux 6.1 or later (or a newer amdgpu-dkms)"
    )]
    TooOld {
        /// What the kernel answered.
        found: Version,
    },
}

/// The features of a KFD that answered `found`, or why the path cannot drive it.
pub fn negotiate(found: Version) -> Result<Features, VersionError> {
    if found.major != MINIMUM.major {
        return Err(VersionError::Major { found });
    }
    if found < MINIMUM {
        return Err(VersionError::TooOld { found });
    }
    Ok(Features {
        version: found,
        export_dmabuf: found >= EXPORT_DMABUF,
        runtime_enable: found >= RUNTIME_ENABLE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> Version {
        Version { major, minor }
    }

    #[test]
    fn below_the_minimum_is_a_clear_error() {
        let e = negotiate(v(1, 10)).unwrap_err();
        assert_eq!(e, VersionError::TooOld { found: v(1, 10) });
        let text = e.to_string();
        assert!(text.contains("1.10") && text.contains("1.11"), "{text}");
        assert!(matches!(
            negotiate(v(2, 0)),
            Err(VersionError::Major { .. })
        ));
        assert!(matches!(
            negotiate(v(0, 99)),
            Err(VersionError::Major { .. })
        ));
    }

    #[test]
    fn features_follow_the_version() {
        let f = negotiate(v(1, 11)).unwrap();
        assert!(!f.export_dmabuf && !f.runtime_enable);
        let f = negotiate(v(1, 12)).unwrap();
        assert!(f.export_dmabuf && !f.runtime_enable);
        let f = negotiate(v(1, 17)).unwrap();
        assert!(f.export_dmabuf && f.runtime_enable);
    }
}
