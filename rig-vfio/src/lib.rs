//! The PCI layer of rig's vfio path: a PCI function driven from user space, with no kernel
//! driver, through Linux's VFIO.
//!
//! VFIO hands a PCI function to a process safely because the IOMMU stands between the
//! function and memory: the function can reach only the pages the process mapped for it
//! (a *DMA mapping*, IOVA to pages, in an IOMMU domain that VFIO calls a *container*). The
//! IOMMU isolates *groups*, not functions: every function of a group must be bound to
//! vfio-pci (or to a driver that does no DMA, like a bridge's `pcieport`) before the group
//! can be opened.
//!
//! What this crate does, on top of `vfio-ioctls` and `vfio-bindings`:
//!
//! - [`Sysfs`] takes a function by its address ([`Bdf`]) from its driver and binds vfio-pci
//!   through `driver_override` and `drivers_probe`, or refuses with the reason (in use, boot
//!   display, no IOMMU group, a group shared with a kernel driver); it gives the function
//!   back to the driver it had. Its root is a parameter, so the logic runs in unit tests
//!   against a folder tree.
//! - [`PciFunction`] opens the container, the group and the device (the legacy container
//!   route; [`Routes`] says whether the kernel also offers iommufd and the device cdev),
//!   reads and writes config space, maps BARs ([`Bar`]: mmap where the region allows it,
//!   reads and writes through the device file otherwise), maps memfd pages
//!   ([`DmaBuffer`]) for DMA through the IOMMU and unmaps them, enables bus mastering,
//!   delivers MSI/MSI-X vectors to eventfds, resets the function and says which reset the
//!   kernel used ([`ResetKind`]), and releases it in a documented order.
//! - [`abi`] lists the ioctl numbers and structs it relies on; a test compiles a C program
//!   against the system's `linux/vfio.h` and pins them.
//!
//! All `unsafe` is in one private module (`sys`): mappings, volatile access, the DMA-map call
//! and two ioctls. No Rust reference is ever made to a BAR or a DMA page.
//!
//! The real test runs in a QEMU guest on QEMU's `edu` device (`tests/guest_edu.rs`, with the
//! `rig-vfio-edu` program inside the guest); `docs/vfio.md` says what it covers.

#![deny(missing_docs)]

pub mod abi;
mod error;
mod function;
mod sys;
pub mod sysfs;

pub use error::{IrqKind, Region, Result, VfioError};
pub use function::{Bar, DmaBuffer, Options, PAGE, PciFunction, ResetKind};
pub use sysfs::{Bdf, Routes, Sysfs, Taken, Unbind};
