//! The GPUs rigd serves: what discovery found, matched with a path that drives it.
//!
//! KFD's GPUs come first, in KFD's node order, then AMD GPUs on the PCI bus that KFD does
//! not list, in bus order, then the configured simulated GPUs. A KFD GPU is described from
//! its topology node (processor, bus, VRAM, firmware), with rig-amd's reason where rig does
//! not drive its processor; rigd serves it through [`crate::path::kfd`] unless
//! `[kfd] serve = false`. A real GPU that no path drives (vfio is not written) is listed and
//! logged as not drivable, never silently replaced by the simulator. With no AMD GPU and no
//! `[[sim]]` configured, rigd serves one simulated gfx1100, the embedded default, and says
//! so in its log; configured `[[sim]]` GPUs are served beside the AMD GPUs. This module
//! also builds a device's facts from its GPU.

use std::path::Path as FsPath;
use std::sync::Arc;

use rig_proto::messages::{Completion, Facts, GpuInfo, PathKind, QueueKind, RingLimits, Waits};

use crate::config::{Config, SimGpuConfig};
use crate::device::Device;
use crate::discover::{KfdFound, PciGpu, scan_kfd, scan_pci};
use crate::path::{Backend, GpuDescription};

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

/// Errors of making the GPU list.
#[derive(Debug, thiserror::Error)]
pub enum GpusError {
    /// KFD's topology could not be read.
    #[error("reading KFD's GPUs")]
    Kfd(#[source] rig_kfd::topology::TopologyError),
    /// A simulated GPU could not be made.
    #[error("cannot make the simulated {processor}: {reason}")]
    Sim {
        /// Its processor.
        processor: String,
        /// Why.
        reason: String,
    },
}

fn not_drivable(index: u32, pci: &PciGpu) -> GpuEntry {
    let (path, why) = match pci.driver.as_deref() {
        Some("vfio-pci") => (
            PathKind::Vfio,
            "it is bound to vfio-pci and rigd's vfio path is not implemented yet",
        ),
        Some("amdgpu") => (
            PathKind::Kfd,
            "it is driven by amdgpu but KFD does not list it (no /dev/kfd, or no node of \
             KFD's topology is this PCI function), so rigd's kfd path cannot reach it",
        ),
        _ => (
            PathKind::Kfd,
            "no kernel driver is bound: rigd's kfd path needs amdgpu (and KFD) bound to it, \
             and its vfio path is not implemented yet",
        ),
    };
    GpuEntry {
        info: GpuInfo {
            index,
            name: format!("AMD:{index}"),
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
            unavailable: Some(why.into()),
        },
        backend: None,
        why_not: Some(why.into()),
        firmware: None,
    }
}

/// Whom workers run as; a `[kfd] worker_uids` the configuration check let pass but that
/// does not parse keeps them as rigd's user only where rigd is no one privileged.
fn worker_user(config: &crate::config::KfdConfig) -> crate::path::worker::WorkerUser {
    use crate::path::worker::WorkerUser;
    let euid = nix::unistd::geteuid().as_raw();
    WorkerUser::of(config, euid).unwrap_or_else(|e| {
        tracing::error!("{e}: KFD workers take the default range");
        let (first, last) = crate::path::worker::DEFAULT_WORKER_UIDS;
        if euid == 0 {
            WorkerUser::Dynamic {
                first,
                last,
                gid: config.worker_gid,
            }
        } else {
            WorkerUser::Rigd
        }
    })
}

fn kfd_entries(found: &KfdFound, config: &crate::config::KfdConfig, out: &mut Vec<GpuEntry>) {
    use crate::path::worker::{KernelSpec, WorkerCommand, Workers};
    // Each client's devices run in a worker process of its own; one probe worker describes
    // the GPUs rigd serves.
    let workers = Workers::new(WorkerCommand {
        program: config
            .worker
            .clone()
            .unwrap_or_else(crate::path::worker::default_program),
        kernel: match &config.emulated {
            Some(socket) => KernelSpec::Emulated {
                socket: socket.clone(),
                topology: found.kernel.topology().to_path_buf(),
            },
            None => KernelSpec::Host,
        },
        user: worker_user(config),
    });
    let served: Vec<rig_kfd::topology::Node> = found
        .nodes
        .iter()
        .filter(|n| config.serve && n.gpu().is_ok())
        .cloned()
        .collect();
    let mut made = workers.backends(&served).into_iter();
    for node in &found.nodes {
        let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let backend = match node.gpu() {
            Err(why) => Err(why.to_string()),
            Ok(_) if !config.serve => Err(
                "the configuration's `[kfd] serve = false` lists KFD's GPUs without serving them"
                    .to_string(),
            ),
            Ok(_) => made
                .next()
                .unwrap_or_else(|| Err("no worker described it".into()))
                .map_err(|e| format!("the kfd path could not open it: {e}")),
        };
        let (backend, why): (Option<Arc<dyn Backend>>, Option<String>) = match backend {
            Ok(b) => {
                tracing::info!(
                    gpu = index, arch = %node.processor_name(), bus = %node.bus(),
                    mec = node.mec_firmware(), sdma = node.sdma_firmware(),
                    "serving a GPU through KFD"
                );
                (Some(Arc::new(b)), None)
            }
            Err(why) => {
                tracing::warn!(
                    gpu = index, arch = %node.processor_name(), bus = %node.bus(),
                    gpu_id = node.gpu_id, mec = node.mec_firmware(), sdma = node.sdma_firmware(),
                    "found a GPU through KFD that rigd does not serve: {why}"
                );
                (None, Some(why))
            }
        };
        out.push(GpuEntry {
            info: GpuInfo {
                index,
                name: format!("AMD:{index}"),
                arch: node.processor_name(),
                path: PathKind::Kfd,
                bus: Some(node.bus()),
                budget: node.vram_bytes(),
                simulated: false,
                unavailable: why.clone(),
            },
            backend,
            why_not: why,
            firmware: Some(format!(
                "mec {}, sdma {}",
                node.mec_firmware(),
                node.sdma_firmware()
            )),
        });
    }
}

/// Finds the GPUs to serve: KFD's GPUs (`config.kfd`), `sysfs` scanned for AMD GPUs KFD
/// does not list, and `config`'s simulated ones.
pub fn find(config: &Config, sysfs: &FsPath) -> Result<Vec<GpuEntry>, GpusError> {
    let mut out = Vec::new();
    let kfd = scan_kfd(&config.kfd, sysfs).map_err(GpusError::Kfd)?;
    if let Some(found) = &kfd {
        kfd_entries(found, &config.kfd, &mut out);
    }
    let listed: Vec<String> = out.iter().filter_map(|e| e.info.bus.clone()).collect();
    let pci: Vec<PciGpu> = scan_pci(sysfs)
        .into_iter()
        .filter(|p| !listed.contains(&p.bus))
        .collect();
    for p in &pci {
        let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let e = not_drivable(index, p);
        tracing::warn!(
            gpu = %e.info.name, bus = %p.bus, device = format_args!("{:04x}", p.device),
            "found an AMD GPU that rigd cannot drive yet: {}",
            e.why_not.as_deref().unwrap_or_default()
        );
        out.push(e);
    }
    let sims: Vec<SimGpuConfig> = if config.sim.is_empty() && out.is_empty() {
        tracing::info!(
            "no AMD GPU found and no [[sim]] configured: serving the embedded default, one simulated gfx1100"
        );
        vec![SimGpuConfig::embedded_default()]
    } else {
        config.sim.clone()
    };
    for s in &sims {
        let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let backend = crate::path::sim::SimBackend::new(s).map_err(|reason| GpusError::Sim {
            processor: s.processor.clone(),
            reason,
        })?;
        let d = backend.description();
        tracing::info!(
            gpu = index, arch = %s.processor, memory = s.memory_bytes, hang_ms = s.hang_ms,
            "serving a simulated GPU"
        );
        out.push(GpuEntry {
            info: GpuInfo {
                index,
                name: format!("AMD:{index}"),
                arch: d.gpu.name(),
                path: PathKind::Sim,
                bus: None,
                budget: d.budget,
                simulated: true,
                unavailable: None,
            },
            backend: Some(Arc::new(backend)),
            why_not: None,
            firmware: None,
        });
    }
    Ok(out)
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
