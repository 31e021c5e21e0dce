//! The crate's errors: each names the function, what was refused or failed, and what to do.

use std::io;
use std::path::PathBuf;

use crate::sysfs::Bdf;

/// What the PCI layer refused or what failed under it.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// The address names no PCI function under the sysfs root.
    #[error("no PCI function {bdf} (no {path}): check the address with lspci -D")]
    NoSuchFunction {
        /// The address asked for.
        bdf: Bdf,
        /// The sysfs folder that is absent.
        path: PathBuf,
    },
    /// A sysfs file could not be read or written.
    #[error("sysfs {path}")]
    Sysfs {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The function's driver is in use: unbinding it would pull it from under its users.
    #[error(
        "{bdf} is in use: its driver {driver} holds {users} open reference(s); stop what uses \
         it (a display server, a ROCm program, a console on its framebuffer) or unbind it yourself"
    )]
    InUse {
        /// The function.
        bdf: Bdf,
        /// Its current driver.
        driver: String,
        /// References to the driver's module beyond those of other modules.
        users: u64,
    },
    /// The function drives the boot display: taking it would blank the console.
    #[error("{bdf} is the boot display (boot_vga = 1): rig does not take it")]
    BootDisplay {
        /// The function.
        bdf: Bdf,
    },
    /// The function is bound to a driver the caller did not allow to be unbound.
    #[error("{bdf} is bound to {driver}, which this caller does not unbind")]
    DriverNotAllowed {
        /// The function.
        bdf: Bdf,
        /// Its driver.
        driver: String,
    },
    /// The function has no IOMMU group: the IOMMU is off.
    #[error(
        "{bdf} has no IOMMU group: turn the IOMMU on (intel_iommu=on or amd_iommu=on on the \
         kernel command line, VT-d or AMD-Vi in the firmware)"
    )]
    NoIommuGroup {
        /// The function.
        bdf: Bdf,
    },
    /// Another function of the group is bound to a driver that is not vfio's: the group cannot
    /// be handed to user space while a kernel driver does DMA in it.
    #[error(
        "IOMMU group {group} of {bdf} is not viable: {member} in the same group is bound to \
         {driver}; bind every function of the group to vfio-pci, or unbind it"
    )]
    GroupNotViable {
        /// The function asked for.
        bdf: Bdf,
        /// Its group.
        group: u32,
        /// The other function.
        member: Bdf,
        /// Its driver.
        driver: String,
    },
    /// vfio-pci is not loaded.
    #[error("the vfio-pci driver is not loaded (modprobe vfio-pci)")]
    NoVfioPci,
    /// After `driver_override` and a probe the function is not bound to vfio-pci.
    #[error("{bdf} did not bind to vfio-pci (its driver is {now}); see the kernel log")]
    BindFailed {
        /// The function.
        bdf: Bdf,
        /// Its driver after the probe (`none` if unbound).
        now: String,
    },
    /// The group or device is open elsewhere (another rigd, a VMM).
    #[error("{bdf}'s VFIO group {group} is busy: another program (a VMM, another rigd) holds it")]
    GroupBusy {
        /// The function.
        bdf: Bdf,
        /// Its group.
        group: u32,
    },
    /// Opening the container, group or device failed.
    #[error("opening {bdf} through VFIO")]
    Open {
        /// The function.
        bdf: Bdf,
        /// The cause from vfio-ioctls.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// An access past the end of a region (config space, a BAR) is refused before the kernel
    /// sees it.
    #[error("{region} access of {len} bytes at {offset:#x} is past its end ({size:#x} bytes)")]
    OutOfBounds {
        /// Which region.
        region: Region,
        /// Offset of the access.
        offset: u64,
        /// Length of the access.
        len: usize,
        /// The region's size.
        size: u64,
    },
    /// The region does not exist on this function (an absent BAR), or cannot be written.
    #[error("{region} is {why}")]
    RegionUnusable {
        /// Which region.
        region: Region,
        /// Why (absent, not writable, not mappable).
        why: &'static str,
    },
    /// A read or write through the device fd failed.
    #[error("{region} access at {offset:#x}")]
    Access {
        /// Which region.
        region: Region,
        /// Offset.
        offset: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Mapping a BAR or a DMA buffer into this process failed.
    #[error("mmap of {what}")]
    Mmap {
        /// What was mapped.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A DMA mapping was refused: misaligned, overlapping, or by the IOMMU driver.
    #[error("DMA map of {len:#x} bytes at IOVA {iova:#x}: {why}")]
    DmaMap {
        /// The IOVA.
        iova: u64,
        /// Its length.
        len: u64,
        /// Why.
        why: String,
    },
    /// Unmapping an IOVA that this function did not map.
    #[error("no DMA mapping at IOVA {0:#x}")]
    NotMapped(u64),
    /// Setting up or tearing down interrupts failed.
    #[error("{kind} interrupts: {why}")]
    Interrupts {
        /// Which kind.
        kind: IrqKind,
        /// Why.
        why: String,
    },
    /// A wait or trigger on interrupts before any were enabled.
    #[error("no interrupts are enabled on {bdf}: call enable_interrupts first")]
    NoInterrupts {
        /// The function.
        bdf: Bdf,
    },
    /// No interrupt arrived in time.
    #[error("no interrupt on vector {vector} within {millis} ms")]
    InterruptTimeout {
        /// The vector waited on.
        vector: usize,
        /// The wait.
        millis: u64,
    },
    /// The function offers no reset (no FLR, PM reset or bus reset the kernel can use).
    #[error("{bdf} cannot be reset: VFIO reports no reset method for it")]
    NoReset {
        /// The function.
        bdf: Bdf,
    },
    /// VFIO_DEVICE_RESET failed.
    #[error("resetting {bdf}")]
    Reset {
        /// The function.
        bdf: Bdf,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// Giving the function back to its driver failed: it is left bound to vfio-pci or unbound.
    #[error(
        "giving {bdf} back to {driver}: it may be left unbound (echo {bdf} > \
         /sys/bus/pci/drivers/{driver}/bind)"
    )]
    GiveBack {
        /// The function.
        bdf: Bdf,
        /// The driver it had.
        driver: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A region of the function, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Configuration space.
    Config,
    /// A BAR, by number.
    Bar(u8),
}

impl std::fmt::Display for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Region::Config => f.write_str("config space"),
            Region::Bar(n) => write!(f, "BAR{n}"),
        }
    }
}

/// An interrupt kind of a PCI function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// Legacy INTx.
    Intx,
    /// MSI.
    Msi,
    /// MSI-X.
    Msix,
}

impl IrqKind {
    pub(crate) fn index(self) -> u32 {
        match self {
            IrqKind::Intx => crate::abi::VFIO_PCI_INTX_IRQ_INDEX,
            IrqKind::Msi => crate::abi::VFIO_PCI_MSI_IRQ_INDEX,
            IrqKind::Msix => crate::abi::VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

impl std::fmt::Display for IrqKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IrqKind::Intx => "INTx",
            IrqKind::Msi => "MSI",
            IrqKind::Msix => "MSI-X",
        })
    }
}

/// The crate's result.
pub type Result<T> = std::result::Result<T, VfioError>;
