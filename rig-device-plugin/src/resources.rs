//! The two resources, their device ids, and what the plugin answers about them: the
//! device lists, preferred allocations and allocations. Pure functions of the GPUs rigd
//! serves ([`Snapshot`]) and the plugin's [`Settings`], so they are tested without any
//! socket.
//!
//! - `rig.dev/gpu`: one device per whole GPU, id `gpu<index>` (`gpu0`), `index` being the
//!   GPU's index in rigd ([`rig_proto::GpuInfo::index`]).
//! - `rig.dev/gpu-memory`: one device per unit of a GPU's memory, id `gpu<index>-m<k>`
//!   (`gpu0-m7`), `k` from 0; a GPU of `budget` bytes has `budget / unit` of them. A pod
//!   asking `rig.dev/gpu-memory: 8` with 1 GiB units gets 8 GiB.
//!
//! A GPU is offered one way only, whole (listed in [`Settings::whole_gpus`]) or in shares
//! (every other GPU), since the kubelet accounts each resource apart and would otherwise
//! hand the same GPU out twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use rig_proto::{GrantGpu, GrantSpec, Holder};

use crate::api;

/// The health the kubelet knows: a device it may hand out.
pub const HEALTHY: &str = "Healthy";
/// The health the kubelet knows: a device it must not hand out.
pub const UNHEALTHY: &str = "Unhealthy";

/// The CDI kind of rig's devices (`rigctl cdi` writes its spec): a device is
/// `rig.dev/gpu=<index>`.
pub const CDI_KIND: &str = "rig.dev/gpu";

/// The environment variable naming the GPUs (rigd's indices, comma-separated) a container
/// was given.
pub const VISIBLE_GPUS_ENV: &str = "RIG_VISIBLE_GPUS";
/// The environment variable holding the bytes of GPU memory a container was given, over
/// all its GPUs.
pub const MEMORY_LIMIT_ENV: &str = "RIG_MEMORY_LIMIT";
/// The environment variable holding the bytes given on each GPU: `index:bytes`,
/// comma-separated.
pub const GPU_MEMORY_ENV: &str = "RIG_GPU_MEMORY";

/// One of the resources the plugin serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// Whole GPUs.
    Gpu,
    /// Units of GPU memory.
    GpuMemory,
}

impl Resource {
    /// Both, in the order they register.
    pub const ALL: [Resource; 2] = [Resource::Gpu, Resource::GpuMemory];

    /// The extended resource name pods ask for.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Gpu => "rig.dev/gpu",
            Resource::GpuMemory => "rig.dev/gpu-memory",
        }
    }

    /// The file name of the plugin's socket for it, in the device-plugins directory.
    pub fn socket_name(self) -> &'static str {
        match self {
            Resource::Gpu => "rig-gpu.sock",
            Resource::GpuMemory => "rig-gpu-memory.sock",
        }
    }
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One GPU as the plugin last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// rigd's name for it, such as `AMD:0`.
    pub name: String,
    /// Its processor, such as `gfx1100`.
    pub arch: String,
    /// Bytes of its own memory.
    pub budget: u64,
    /// Why it is unhealthy; `None` when rigd serves it.
    pub unhealthy: Option<String>,
}

/// Every GPU the plugin has seen since it started, by rigd's index. A GPU rigd stops
/// listing (or a rigd that does not answer) stays here, unhealthy, so the kubelet keeps
/// counting it and takes it back when it returns.
pub type Snapshot = BTreeMap<u32, GpuState>;

/// What the answers depend on besides the GPUs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// rigd's socket on the host.
    pub rigd_socket: PathBuf,
    /// Where the directory holding rigd's socket is mounted in a container.
    pub container_socket_dir: PathBuf,
    /// Bytes in one unit of `rig.dev/gpu-memory`.
    pub memory_unit: u64,
    /// GPUs offered whole; every other GPU is offered in memory units.
    pub whole_gpus: BTreeSet<u32>,
    /// Whether Allocate names CDI devices (`rig.dev/gpu=<index>`) instead of the mount.
    pub cdi: bool,
    /// Devices an allocation may open at once on each of its GPUs.
    pub devices_per_gpu: u32,
}

impl Settings {
    /// Whether GPU `index` is offered as `resource`.
    pub fn offers(&self, resource: Resource, index: u32) -> bool {
        self.whole_gpus.contains(&index) == (resource == Resource::Gpu)
    }

    /// rigd's socket as a container sees it.
    pub fn container_socket(&self) -> PathBuf {
        let name = self
            .rigd_socket
            .file_name()
            .unwrap_or_else(|| Path::new(rig_proto::DEFAULT_SOCKET).as_os_str());
        self.container_socket_dir.join(name)
    }

    /// The host directory mounted at [`Settings::container_socket_dir`].
    pub fn host_socket_dir(&self) -> &Path {
        self.rigd_socket.parent().unwrap_or(Path::new("/"))
    }
}

/// A device id parsed: the GPU and, for a memory unit, which one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceId {
    /// rigd's index of the GPU.
    pub gpu: u32,
    /// The unit, for `rig.dev/gpu-memory`.
    pub unit: Option<u32>,
}

impl DeviceId {
    /// Parses `gpu<index>` or `gpu<index>-m<k>`.
    pub fn parse(id: &str) -> Option<DeviceId> {
        let rest = id.strip_prefix("gpu")?;
        let (gpu, unit) = match rest.split_once("-m") {
            Some((g, u)) => (g, Some(u)),
            None => (rest, None),
        };
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        Some(DeviceId {
            gpu: number(gpu)?,
            unit: match unit {
                Some(u) => Some(number(u)?),
                None => None,
            },
        })
    }

    /// The resource a device of this shape belongs to.
    pub fn resource(self) -> Resource {
        match self.unit {
            Some(_) => Resource::GpuMemory,
            None => Resource::Gpu,
        }
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.unit {
            Some(k) => write!(f, "gpu{}-m{k}", self.gpu),
            None => write!(f, "gpu{}", self.gpu),
        }
    }
}

/// Units of `unit` bytes in a GPU of `budget` bytes (bounded, so a huge GPU and a tiny
/// unit cannot list millions of devices).
pub fn units(budget: u64, unit: u64) -> u32 {
    /// The kubelet sends every id in each request; 4096 units is 4 TiB at 1 GiB.
    const MOST_UNITS: u64 = 4096;
    (budget / unit.max(1)).min(MOST_UNITS) as u32
}

/// The device list of `resource` for ListAndWatch.
pub fn devices(resource: Resource, snapshot: &Snapshot, settings: &Settings) -> Vec<api::Device> {
    let mut out = Vec::new();
    for (&index, gpu) in snapshot {
        if !settings.offers(resource, index) {
            continue;
        }
        let health = if gpu.unhealthy.is_none() {
            HEALTHY
        } else {
            UNHEALTHY
        };
        let ids: Vec<DeviceId> = match resource {
            Resource::Gpu => vec![DeviceId {
                gpu: index,
                unit: None,
            }],
            Resource::GpuMemory => (0..units(gpu.budget, settings.memory_unit))
                .map(|k| DeviceId {
                    gpu: index,
                    unit: Some(k),
                })
                .collect(),
        };
        out.extend(ids.into_iter().map(|id| api::Device {
            id: id.to_string(),
            health: health.into(),
            topology: None,
        }));
    }
    out
}

/// The preferred allocation of `size` devices out of `available`, with every one of
/// `must_include`: for memory units, packed onto as few GPUs as fit, and onto the GPU
/// that fits most tightly (so that larger holes stay for larger asks); for whole GPUs, the
/// lowest indices. Ids that do not parse are never chosen.
pub fn prefer(available: &[String], must_include: &[String], size: usize) -> Vec<String> {
    let mut chosen: Vec<DeviceId> = must_include
        .iter()
        .filter_map(|id| DeviceId::parse(id))
        .collect();
    chosen.sort();
    chosen.dedup();
    let mut free: BTreeMap<u32, Vec<DeviceId>> = BTreeMap::new();
    for id in available.iter().filter_map(|id| DeviceId::parse(id)) {
        if !chosen.contains(&id) {
            free.entry(id.gpu).or_default().push(id);
        }
    }
    for ids in free.values_mut() {
        ids.sort();
        ids.dedup();
    }
    let mut need = size.saturating_sub(chosen.len());
    // The GPUs already holding part of the allocation first, fullest use of them.
    let started: BTreeSet<u32> = chosen.iter().map(|id| id.gpu).collect();
    for gpu in &started {
        if let Some(ids) = free.get_mut(gpu) {
            let take = need.min(ids.len());
            chosen.extend(ids.drain(..take));
            need -= take;
        }
    }
    while need > 0 {
        // One GPU that holds all that is left, the tightest such; else the GPU with the
        // most, and go on.
        let fits = free
            .iter()
            .filter(|(_, ids)| ids.len() >= need)
            .min_by_key(|(gpu, ids)| (ids.len(), **gpu))
            .map(|(gpu, _)| *gpu);
        let pick = fits.or_else(|| {
            free.iter()
                .filter(|(_, ids)| !ids.is_empty())
                .max_by_key(|(gpu, ids)| (ids.len(), std::cmp::Reverse(**gpu)))
                .map(|(gpu, _)| *gpu)
        });
        let Some(gpu) = pick else { break };
        let ids = free.get_mut(&gpu).expect("picked from the map");
        let take = need.min(ids.len());
        chosen.extend(ids.drain(..take));
        need -= take;
    }
    chosen.sort();
    chosen.iter().map(ToString::to_string).collect()
}

/// Why an Allocate is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// An id that is not one of this resource's.
    #[error("{id:?} is not a device of {resource}")]
    UnknownDevice {
        /// The id.
        id: String,
        /// The resource asked.
        resource: Resource,
    },
    /// An id of a GPU the plugin never saw, or not offered this way.
    #[error("{id:?} names a GPU this plugin does not offer as {resource}")]
    NotOffered {
        /// The id.
        id: String,
        /// The resource asked.
        resource: Resource,
    },
}

/// What an allocation of device ids gives, checked against what the plugin offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The resource.
    pub resource: Resource,
    /// The device ids, each once, sorted.
    pub ids: Vec<String>,
    /// Bytes of each GPU's memory granted, by GPU.
    pub bytes: BTreeMap<u32, u64>,
}

/// The share of a container given `ids` of `resource`; every id must be one the plugin
/// offers as `resource`.
pub fn share(
    resource: Resource,
    ids: &[String],
    snapshot: &Snapshot,
    settings: &Settings,
) -> Result<Share, AllocateError> {
    let mut bytes: BTreeMap<u32, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for id in ids {
        let parsed = DeviceId::parse(id)
            .filter(|d| d.resource() == resource)
            .ok_or_else(|| AllocateError::UnknownDevice {
                id: id.clone(),
                resource,
            })?;
        let gpu = snapshot
            .get(&parsed.gpu)
            .filter(|_| settings.offers(resource, parsed.gpu))
            .ok_or_else(|| AllocateError::NotOffered {
                id: id.clone(),
                resource,
            })?;
        if let Some(k) = parsed.unit
            && k >= units(gpu.budget, settings.memory_unit)
        {
            return Err(AllocateError::UnknownDevice {
                id: id.clone(),
                resource,
            });
        }
        if !seen.insert(parsed) {
            continue;
        }
        let granted = match resource {
            Resource::Gpu => gpu.budget,
            Resource::GpuMemory => settings.memory_unit,
        };
        *bytes.entry(parsed.gpu).or_default() += granted;
    }
    Ok(Share {
        resource,
        ids: seen.iter().map(ToString::to_string).collect(),
        bytes,
    })
}

impl Share {
    /// A new grant id for this share: its first device id and `nanos` (the time, in
    /// nanoseconds since the epoch, in hex), so that an allocation of the same devices
    /// after this one's end is another grant.
    pub fn grant_id(&self, nanos: u128) -> String {
        let first = self.ids.first().map_or("none", String::as_str);
        format!("{first}-{nanos:x}")
    }

    /// The grant rigd is asked for: the share's GPUs and bytes, and
    /// [`Settings::devices_per_gpu`] devices for each of its GPUs.
    pub fn grant(&self, id: String, settings: &Settings) -> GrantSpec {
        let gpus = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        GrantSpec {
            id,
            gpus: self
                .bytes
                .iter()
                .map(|(&gpu, &bytes)| GrantGpu { gpu, bytes })
                .collect(),
            devices: settings.devices_per_gpu.saturating_mul(gpus).max(1),
            holder: Holder {
                resource: self.resource.name().into(),
                devices: self.ids.clone(),
                namespace: None,
                pod: None,
                container: None,
            },
        }
    }
}

/// What a container given `share` needs: the directory of its grant's socket `granted`
/// (rigd's own per allocation) mounted read-only and `RIG_SOCKET` naming the socket inside
/// it, or with CDI on (`granted` `None`) the CDI devices whose spec mounts rigd's socket;
/// and the GPUs and memory granted ([`VISIBLE_GPUS_ENV`], [`MEMORY_LIMIT_ENV`],
/// [`GPU_MEMORY_ENV`]).
pub fn response(
    share: &Share,
    settings: &Settings,
    granted: Option<&Path>,
) -> api::ContainerAllocateResponse {
    let join = |items: Vec<String>| items.join(",");
    let mut envs = HashMap::new();
    let socket = match granted {
        Some(g) => settings.container_socket_dir.join(
            g.file_name()
                .unwrap_or(Path::new(crate::grants::SOCKET_NAME).as_os_str()),
        ),
        None => settings.container_socket(),
    };
    envs.insert(
        rig_proto::SOCKET_ENV.to_owned(),
        socket.display().to_string(),
    );
    envs.insert(
        VISIBLE_GPUS_ENV.to_owned(),
        join(share.bytes.keys().map(ToString::to_string).collect()),
    );
    envs.insert(
        MEMORY_LIMIT_ENV.to_owned(),
        share.bytes.values().sum::<u64>().to_string(),
    );
    envs.insert(
        GPU_MEMORY_ENV.to_owned(),
        join(
            share
                .bytes
                .iter()
                .map(|(g, b)| format!("{g}:{b}"))
                .collect(),
        ),
    );
    let (mounts, cdi_devices) = match granted {
        Some(g) => {
            let mount = api::Mount {
                container_path: settings.container_socket_dir.display().to_string(),
                host_path: g.parent().unwrap_or(Path::new("/")).display().to_string(),
                read_only: true,
            };
            (vec![mount], Vec::new())
        }
        None => {
            let names = share
                .bytes
                .keys()
                .map(|g| api::CdiDevice {
                    name: format!("{CDI_KIND}={g}"),
                })
                .collect();
            (Vec::new(), names)
        }
    };
    api::ContainerAllocateResponse {
        envs,
        mounts,
        devices: Vec::new(),
        annotations: HashMap::new(),
        cdi_devices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn settings() -> Settings {
        Settings {
            rigd_socket: "/run/rig/rigd.sock".into(),
            container_socket_dir: "/run/rig".into(),
            memory_unit: GIB,
            whole_gpus: [2].into(),
            cdi: false,
            devices_per_gpu: 4,
        }
    }

    fn snapshot() -> Snapshot {
        let gpu = |name: &str, budget| GpuState {
            name: name.into(),
            arch: "gfx1100".into(),
            budget,
            unhealthy: None,
        };
        [
            (0, gpu("AMD:0", 16 * GIB)),
            (1, gpu("AMD:1", 16 * GIB)),
            (2, gpu("AMD:2", 24 * GIB)),
        ]
        .into()
    }

    fn ids(gpu: u32, units: std::ops::Range<u32>) -> Vec<String> {
        units.map(|k| format!("gpu{gpu}-m{k}")).collect()
    }

    #[test]
    fn ids_round_trip_and_refuse_others() {
        for id in ["gpu0", "gpu12", "gpu3-m0", "gpu3-m4095"] {
            assert_eq!(DeviceId::parse(id).unwrap().to_string(), id);
        }
        for id in [
            "", "gpu", "gpu-1", "gpu1-m", "gpux", "gpu1-m+2", "GPU1", "gpu1-n2",
        ] {
            assert_eq!(DeviceId::parse(id), None, "{id}");
        }
    }

    #[test]
    fn each_gpu_is_offered_one_way() {
        let s = settings();
        let whole = devices(Resource::Gpu, &snapshot(), &s);
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].id, "gpu2");
        let shares = devices(Resource::GpuMemory, &snapshot(), &s);
        assert_eq!(shares.len(), 32);
        assert!(shares.iter().all(|d| d.health == HEALTHY));
        let mut sick = snapshot();
        sick.get_mut(&1).unwrap().unhealthy = Some("rigd does not answer".into());
        let shares = devices(Resource::GpuMemory, &sick, &s);
        assert_eq!(shares.iter().filter(|d| d.health == UNHEALTHY).count(), 16);
    }

    #[test]
    fn shares_pack_onto_the_tightest_gpu_that_fits() {
        // GPU 0 has 2 units free, GPU 1 all 16.
        let mut available = ids(0, 14..16);
        available.extend(ids(1, 0..16));
        assert_eq!(prefer(&available, &[], 2), ids(0, 14..16));
        assert_eq!(prefer(&available, &[], 8), ids(1, 0..8));
        // More than one GPU holds: the fullest first, then the rest.
        let mut want = ids(0, 14..16);
        want.extend(ids(1, 0..16));
        assert_eq!(prefer(&available, &[], 18), want);
        // What must be included stays, and its GPU is filled first.
        let must = vec!["gpu1-m5".to_string()];
        let mut want = ids(1, 0..3);
        want.push("gpu1-m5".into());
        want.sort();
        assert_eq!(prefer(&available, &must, 4), want);
        // Junk is never chosen.
        assert_eq!(prefer(&["junk".into()], &[], 1), Vec::<String>::new());
    }

    #[test]
    fn allocate_grants_the_socket_and_the_share() {
        let s = settings();
        let share = share(Resource::GpuMemory, &ids(1, 0..8), &snapshot(), &s).unwrap();
        assert_eq!(share.bytes, [(1, 8 * GIB)].into());
        let spec = share.grant(share.grant_id(0xabc), &s);
        assert_eq!(spec.id, "gpu1-m0-abc");
        assert_eq!(
            spec.gpus,
            [GrantGpu {
                gpu: 1,
                bytes: 8 * GIB
            }]
        );
        assert_eq!((spec.devices, spec.holder.devices.len()), (4, 8));
        assert_eq!(spec.holder.resource, "rig.dev/gpu-memory");
        let socket = Path::new("/run/rig/alloc/gpu1-m0-abc/rigd.sock");
        let r = response(&share, &s, Some(socket));
        assert_eq!(r.envs["RIG_SOCKET"], "/run/rig/rigd.sock");
        assert_eq!(r.envs[VISIBLE_GPUS_ENV], "1");
        assert_eq!(r.envs[MEMORY_LIMIT_ENV], (8 * GIB).to_string());
        assert_eq!(r.envs[GPU_MEMORY_ENV], format!("1:{}", 8 * GIB));
        assert_eq!(r.mounts.len(), 1);
        assert_eq!(r.mounts[0].host_path, "/run/rig/alloc/gpu1-m0-abc");
        assert!(r.mounts[0].read_only);
        assert!(r.cdi_devices.is_empty());

        let cdi = Settings {
            cdi: true,
            ..s.clone()
        };
        let whole = super::share(Resource::Gpu, &["gpu2".into()], &snapshot(), &cdi).unwrap();
        let r = response(&whole, &cdi, None);
        assert!(r.mounts.is_empty());
        assert_eq!(r.cdi_devices[0].name, "rig.dev/gpu=2");
        assert_eq!(r.envs[MEMORY_LIMIT_ENV], (24 * GIB).to_string());

        for (resource, id) in [
            (Resource::Gpu, "gpu0"),
            (Resource::GpuMemory, "gpu2-m0"),
            (Resource::GpuMemory, "gpu9-m0"),
            (Resource::GpuMemory, "gpu0-m16"),
            (Resource::Gpu, "gpu0-m1"),
        ] {
            assert!(
                super::share(resource, &[id.into()], &snapshot(), &s).is_err(),
                "{resource} {id}"
            );
        }
    }
}
