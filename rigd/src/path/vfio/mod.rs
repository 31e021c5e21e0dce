//! The `vfio` path: a GPU's PCI function driven with no kernel driver, through VFIO, on
//! `rig-vfio`'s PCI layer (`docs/vfio.md`).
//!
//! What exists is the path's seam: its configuration (`[vfio] allow`, the functions rigd
//! may take) and its discovery, which lists the AMD functions bound to vfio-pci, and those
//! `[vfio] allow` names, with their IOMMU groups and why rigd does not serve them. The AMD
//! bring-up above the PCI layer (firmware, GMC page tables, queues) is not written, so no
//! function is served on this path yet: each is listed with that reason and never opened
//! (its discovery reads sysfs only, and no [`crate::path::Backend`] is made).

pub(crate) mod discover;
