//! The GPUs rigd serves: what each path's discovery found, folded into one list.
//!
//! The paths of [`crate::path::PATHS`] list their GPUs in that list's order: the real GPUs
//! first (KFD's in KFD's node order, then the vfio path's in bus order), then the AMD GPUs
//! on the PCI bus that no path listed, in bus order, then the simulated GPUs. A path lists
//! a GPU it does not drive with its reason (rig-amd's, where rig does not drive its
//! processor); an AMD PCI function no path reached is listed and logged as not drivable,
//! with the reason of the path whose driver it is bound to, never silently replaced by the
//! simulator. This module also builds a device's facts from its GPU.

use std::path::Path as FsPath;
use std::sync::Arc;

use rig_proto::messages::{Completion, Facts, GpuInfo, QueueKind, RingLimits, Waits};

use crate::config::Config;
use crate::device::Device;
use crate::discover::{PciGpu, scan_pci};
use crate::path::{Backend, Found, GpuDescription, PATHS, Reach, Survey};

/// One GPU rigd lists.
#[derive(Debug, Clone)]
pub struct GpuEntry {
    /// What `rigctl gpus` and clients see.
    pub info: GpuInfo,
    /// The path that drives it; `None` if none does yet.
    pub backend: Option<Arc<dyn Backend>>,
    /// Why it is not drivable, when it is not.
    pub why_not: Option<String>,
    /// Its firmware versions as discovery found them (a KFD node's `mec N, sdma M`); `None`
    /// where discovery read none (the admin answer then reads the PCI function's).
    pub firmware: Option<String>,
}

/// Errors of making the GPU list: a path's discovery failed.
pub type GpusError = crate::path::DiscoverError;

/// An AMD PCI function no path listed: the reason of the path whose kernel driver it is
/// bound to, else what drivers rigd's paths reach GPUs through. Its `path` is that path's
/// kind, else the first real path's.
fn unreached(pci: &PciGpu) -> Found {
    let hardware: Vec<_> = PATHS
        .iter()
        .filter_map(|p| match p.reach {
            Reach::Hardware { drivers, unreached } => Some((p.kind, drivers, unreached)),
            Reach::Simulated => None,
        })
        .collect();
    let reached = || {
        hardware
            .iter()
            .map(|(kind, drivers, _)| format!("{} ({kind:?})", drivers.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let owner = pci
        .driver
        .as_deref()
        .and_then(|d| hardware.iter().find(|(_, drivers, _)| drivers.contains(&d)));
    let (path, why) = match (owner, pci.driver.as_deref()) {
        (Some((kind, _, unreached)), _) => (*kind, unreached(pci)),
        (None, Some(driver)) => (
            hardware
                .first()
                .map_or(rig_proto::messages::PathKind::Sim, |h| h.0),
            format!(
                "it is bound to {driver}, and no path of rigd reaches a GPU through that \
                 driver (rigd's paths reach GPUs through {})",
                reached()
            ),
        ),
        (None, None) => (
            hardware
                .first()
                .map_or(rig_proto::messages::PathKind::Sim, |h| h.0),
            format!(
                "no kernel driver is bound: rigd's paths reach GPUs through {}",
                reached()
            ),
        ),
    };
    Found {
        // The processor rig-amd's PCI-id table names (revision aside: every row of a
        // device id names one processor).
        arch: rig_amd::pci_ids::product(pci.device, 0).map_or_else(
            || format!("unknown (pci 1002:{:04x})", pci.device),
            |p| p.processor.to_owned(),
        ),
        path,
        bus: Some(pci.bus.clone()),
        budget: 0,
        simulated: false,
        backend: Err(why),
        firmware: None,
    }
}

/// Finds the GPUs to serve: every path's discovery of [`PATHS`] in order, and `sysfs`
/// scanned for AMD GPUs no real path listed (before the simulated paths' turn).
pub fn find(config: &Config, sysfs: &FsPath) -> Result<Vec<GpuEntry>, GpusError> {
    let mut found: Vec<Found> = Vec::new();
    let survey = |found: &[Found], p: &crate::path::PathInfo| {
        (p.discover)(&Survey {
            config,
            sysfs,
            listed: found,
        })
    };
    for p in PATHS
        .iter()
        .filter(|p| matches!(p.reach, Reach::Hardware { .. }))
    {
        let more = survey(&found, p)?;
        found.extend(more);
    }
    let pci: Vec<Found> = scan_pci(sysfs)
        .iter()
        .filter(|p| !found.iter().any(|f| f.bus.as_ref() == Some(&p.bus)))
        .map(unreached)
        .collect();
    let unreached = found.len()..found.len() + pci.len();
    found.extend(pci);
    for p in PATHS.iter().filter(|p| matches!(p.reach, Reach::Simulated)) {
        let more = survey(&found, p)?;
        found.extend(more);
    }
    Ok(found
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let (backend, why) = match f.backend {
                Ok(b) => (Some(b), None),
                Err(why) => (None, Some(why)),
            };
            match &why {
                None => tracing::info!(
                    gpu = index, path = ?f.path, arch = %f.arch, bus = f.bus.as_deref(),
                    firmware = f.firmware.as_deref(), budget = f.budget, "serving a GPU"
                ),
                Some(why) if unreached.contains(&i) => tracing::warn!(
                    gpu = index, arch = %f.arch, bus = f.bus.as_deref(),
                    "found an AMD GPU that rigd cannot drive yet: {why}"
                ),
                Some(why) => tracing::warn!(
                    gpu = index, path = ?f.path, arch = %f.arch, bus = f.bus.as_deref(),
                    firmware = f.firmware.as_deref(),
                    "found a GPU that rigd does not serve: {why}"
                ),
            }
            GpuEntry {
                info: GpuInfo {
                    index,
                    name: format!("AMD:{index}"),
                    arch: f.arch,
                    path: f.path,
                    bus: f.bus,
                    budget: f.budget,
                    simulated: f.simulated,
                    unavailable: why.clone(),
                },
                backend,
                why_not: why,
                firmware: f.firmware,
            }
        })
        .collect())
}

/// The facts of device `d` on the GPU `desc` describes (its facts, plus what a
/// client needs to encode packets).
pub fn facts(desc: &GpuDescription, d: &Device) -> Facts {
    let g = &desc.gpu;
    let compute = g.compute_queue();
    let waits = g.waits_64();
    Facts {
        arch: g.name(),
        budget: desc.budget,
        queues: vec!["COMPUTE:0".into(), "COPY:0".into()],
        copy_engine: Some(1),
        completion: Completion::Store,
        waits: Waits {
            stores: waits,
            hosts: waits,
        },
        may_block: false,
        hang_ms: desc.hang_ms,
        maps_host: desc.maps_host,
        host_addresses: false,
        alignment: 4096,
        cache_bytes: desc.cache_bytes,
        word: d.word().map_or(0, |(_, address)| address),
        bus: desc.bus.clone(),
        gc: g.gc,
        sdma: g.sdma,
        mec: desc.mec,
        compute,
        lds_bytes: g.lds_bytes,
        wave_size: g.wave_size,
        waves_per_cu: g.waves_per_cu,
        dies: g.dies,
        wgps: desc.wgps.clone(),
        linear_copy_bytes: g.linear_copy_bytes(),
        clock_hz: desc.clock_hz,
        clock: desc.clock,
        most_ring: RingLimits {
            compute: d.most_ring(compute),
            copy: d.most_ring(QueueKind::Sdma),
        },
    }
}

/// The host's `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        }
        Err(_) => 0,
    }
}
