//! The vfio path's discovery: the AMD GPU functions of `<sysfs>/bus/pci/devices` that are
//! bound to vfio-pci or that `[vfio] allow` names, read through `rig-vfio`'s [`Sysfs`]
//! (driver, IOMMU group, and the checks a take would make), each listed with why it is not
//! served. Nothing here writes to sysfs or opens a device.
//!
//! A function is this path's when it is bound to vfio-pci, or when `[vfio] allow` names it
//! and no path before this one listed it (a function KFD lists stays KFD's). An AMD function
//! neither bound to vfio-pci nor allowed is not this path's: [`crate::gpus`] lists it with
//! the reason of the path whose driver it is bound to.

use rig_amd::gpu::{AMD_VENDOR, Gpu};
use rig_proto::messages::PathKind;
use rig_vfio::sysfs::VFIO_PCI;
use rig_vfio::{Bdf, Sysfs, Unbind, VfioError};

use crate::config::VfioFunction;
use crate::discover::PciGpu;
use crate::path::{DiscoverError, Found, Survey};

/// Why the vfio path does not reach an AMD GPU bound to vfio-pci that its discovery did not
/// list: its sysfs folder's name is no PCI address.
pub(crate) fn unreached(pci: &PciGpu) -> String {
    format!(
        "it is bound to vfio-pci, but its sysfs name {:?} is not a PCI address, so rigd's vfio \
         path cannot take it",
        pci.bus
    )
}

/// `e` and its sources, outermost first.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

/// The vfio path's functions, in bus order, each with why it is not served.
pub(crate) fn discover(survey: &Survey<'_>) -> Result<Vec<Found>, DiscoverError> {
    let allow = &survey.config.vfio.allow;
    let sysfs = Sysfs::new(survey.sysfs);
    let pci = crate::discover::scan_pci(survey.sysfs);
    for a in allow {
        if let VfioFunction::Address(bdf) = a
            && !pci.iter().any(|p| p.bus == bdf.to_string())
        {
            tracing::warn!(
                function = %bdf,
                "vfio.allow names {bdf}, which is no AMD GPU function of this machine \
                 (lspci -D lists its functions)"
            );
        }
    }
    Ok(pci
        .iter()
        .filter(|p| {
            !survey
                .listed
                .iter()
                .any(|f| f.bus.as_deref() == Some(p.bus.as_str()))
        })
        .filter_map(|p| {
            let bdf: Bdf = p.bus.parse().ok()?;
            let allowed = allow.iter().any(|a| a.names(bdf, AMD_VENDOR, p.device));
            let on_vfio = p.driver.as_deref() == Some(VFIO_PCI);
            (allowed || on_vfio).then(|| listed(&sysfs, p, bdf, allowed, on_vfio))
        })
        .collect())
}

/// One function of the path, with why it is not served: the first of what its processor is,
/// what `[vfio] allow` says, its driver, what a take would refuse, and the bring-up.
fn listed(sysfs: &Sysfs, p: &PciGpu, bdf: Bdf, allowed: bool, on_vfio: bool) -> Found {
    let ids = format!("{AMD_VENDOR:04x}:{:04x}", p.device);
    // Revision aside: every row of a device id in rig-amd's PCI-id table names one processor.
    let processor = rig_amd::pci_ids::product(p.device, 0).map(|p| p.processor);
    let found = |why: String| Found {
        arch: processor.map_or_else(|| format!("unknown (pci {ids})"), str::to_owned),
        path: PathKind::Vfio,
        bus: Some(p.bus.clone()),
        budget: 0,
        simulated: false,
        backend: Err(why),
        firmware: None,
    };
    let group = if on_vfio {
        sysfs.iommu_group(bdf).ok().flatten()
    } else {
        None
    };
    let in_group = |why: String| match group {
        Some(g) => format!("{why} (IOMMU group {g})"),
        None => why,
    };
    let why = match processor {
        None => {
            format!("rig-amd's PCI-id table does not know {ids}, so rigd cannot tell its processor")
        }
        Some(proc) if Gpu::by_name(proc).is_none() => {
            format!("{proc} is not in rig's GPU table (rig-amd's gpu::GPUS)")
        }
        Some(_) if !allowed => format!(
            "it is bound to vfio-pci, but `[vfio] allow` names neither {bdf} nor {ids}, so \
             rigd leaves it alone"
        ),
        Some(proc) if !on_vfio => format!(
            "`[vfio] allow` names it, but {}: bind it to vfio-pci (docs/vfio.md); rigd takes \
             no function from another driver before the PCI bring-up of {proc} is implemented",
            match p.driver.as_deref() {
                Some(d) => format!("it is bound to {d}, not to vfio-pci"),
                None => "no driver is bound to it, not even vfio-pci".into(),
            }
        ),
        // Nothing may be unbound: the function is on vfio-pci already.
        Some(proc) => match sysfs.check(bdf, &Unbind::Only(Vec::new())) {
            // It names the group itself.
            Err(e @ VfioError::GroupNotViable { .. }) => return found(chain(&e)),
            Err(e) => chain(&e),
            Ok(_) => format!("the PCI bring-up of {proc} is not implemented yet"),
        },
    };
    tracing::debug!(
        function = %bdf, driver = p.driver.as_deref(), iommu_group = group, allowed,
        "a function of the vfio path"
    );
    found(in_group(why))
}
