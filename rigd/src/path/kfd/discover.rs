//! The kfd path's discovery: KFD's GPU nodes (the machine's `/dev/kfd` and sysfs topology,
//! or an emulated KFD the configuration names), each served through a worker process per
//! client unless `[kfd] serve = false` or rig-amd names no processor rig drives for it.

use std::path::Path as FsPath;
use std::sync::Arc;

use rig_kfd::seam::{Emulated, Host, Kernel};
use rig_kfd::topology::Node;
use rig_proto::messages::PathKind;

use crate::config::KfdConfig;
use crate::path::worker::{KernelSpec, WorkerCommand, WorkerUser, Workers};
use crate::path::{Backend, DiscoverError, Found, Survey};

/// What KFD shows: the kernel it is reached through and its GPU nodes in node order.
#[derive(Debug, Clone)]
pub struct KfdFound {
    /// The machine's kernel or the emulated KFD.
    pub kernel: Arc<dyn Kernel>,
    /// Its GPU nodes.
    pub nodes: Vec<Node>,
}

/// KFD's GPUs: those of the emulated KFD if `[kfd] emulated` is set, else the machine's if
/// `[kfd] device` exists with its topology under `<sysfs>/class/kfd/kfd/topology`;
/// `Ok(None)` if there is no KFD. A topology that cannot be read is an error naming the file.
pub fn scan_kfd(
    config: &KfdConfig,
    sysfs: &FsPath,
) -> Result<Option<KfdFound>, rig_kfd::topology::TopologyError> {
    let root = config
        .topology
        .clone()
        .unwrap_or_else(|| sysfs.join("class/kfd/kfd/topology"));
    let kernel: Arc<dyn Kernel> = match &config.emulated {
        Some(socket) => Arc::new(Emulated::new(socket, &root)),
        // Both the device and its topology under the scanned sysfs: a test's sysfs tree
        // without one sees no KFD whatever the machine has.
        None if config.device.exists() && root.exists() => Arc::new(Host::new()),
        None => return Ok(None),
    };
    let nodes = rig_kfd::topology::read(&root)?
        .into_iter()
        .filter(Node::is_gpu)
        .collect();
    Ok(Some(KfdFound { kernel, nodes }))
}

/// Whom workers run as; a `[kfd] worker_uids` the configuration check let pass but that
/// does not parse keeps them as rigd's user only where rigd is no one privileged.
fn worker_user(config: &KfdConfig) -> WorkerUser {
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

/// Why the kfd path does not reach an AMD GPU bound to amdgpu that KFD does not list.
pub(crate) fn unreached(_: &crate::discover::PciGpu) -> String {
    "it is driven by amdgpu but KFD does not list it (no /dev/kfd, or no node of KFD's \
     topology is this PCI function), so rigd's kfd path cannot reach it"
        .into()
}

/// KFD's GPUs, in KFD's node order: each served through its clients' workers (one probe
/// worker describes them, since rigd itself never opens KFD), or listed with why not.
pub(crate) fn discover(survey: &Survey<'_>) -> Result<Vec<Found>, DiscoverError> {
    let config = &survey.config.kfd;
    let Some(found) = scan_kfd(config, survey.sysfs).map_err(|e| DiscoverError {
        path: PathKind::Kfd,
        what: "reading KFD's GPUs".into(),
        source: Box::new(e),
    })?
    else {
        return Ok(Vec::new());
    };
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
    let served: Vec<Node> = found
        .nodes
        .iter()
        .filter(|n| config.serve && n.gpu().is_ok())
        .cloned()
        .collect();
    let mut made = workers.backends(&served).into_iter();
    Ok(found
        .nodes
        .iter()
        .map(|node| {
            let backend = match node.gpu() {
                Err(why) => Err(why.to_string()),
                Ok(_) if !config.serve => Err("the configuration's `[kfd] serve = false` lists \
                                               KFD's GPUs without serving them"
                    .to_string()),
                Ok(_) => made
                    .next()
                    .unwrap_or_else(|| Err("no worker described it".into()))
                    .map(|b| Arc::new(b) as Arc<dyn Backend>)
                    .map_err(|e| format!("the kfd path could not open it: {e}")),
            };
            Found {
                arch: node.processor_name(),
                path: PathKind::Kfd,
                bus: Some(node.bus()),
                budget: node.vram_bytes(),
                simulated: false,
                backend,
                firmware: Some(format!(
                    "mec {}, sdma {}",
                    node.mec_firmware(),
                    node.sdma_firmware()
                )),
            }
        })
        .collect())
}
