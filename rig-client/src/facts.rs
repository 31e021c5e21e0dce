//! What a program learns of GPUs and devices: [`GpuInfo`] (a GPU rigd serves) and
//! [`Facts`] (an open device's processor, memory and limits).
//!
//! This module owns the client's own forms of them, converted from the protocol's at the
//! boundary ([`GpuInfo::of`], [`Facts::of`]). The protocol's messages are positional and
//! its versions must match, so a field added there is a protocol bump; here a field is
//! added without breaking a program (the types are non-exhaustive), and what only the
//! client's encoders need (the timeline word's address, the SDMA packet bound, IP
//! versions) stays inside the crate.

use crate::error::{Error, Result};
use crate::types::Queue;

/// How rigd reaches a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GpuPath {
    /// The simulated GPU.
    Sim,
    /// Linux's amdgpu driver through `/dev/kfd`.
    Kfd,
    /// The PCI function itself through VFIO.
    Vfio,
}

/// How a device reads its GPU's clock against the host's, as the path allows
/// (docs/profiling.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClockSource {
    /// rigd reads a counter of the clock: the device measures at open and again as it
    /// converts stamps, at most every 62.5 ms.
    Source {
        /// The counter is another counter of the clock's rate, a constant apart from the
        /// stamps' (KFD's on GFX12): the device takes the constant once, at open, from
        /// stamps its compute queue writes.
        apart: bool,
    },
    /// No counter can be read: the device measures once, at open, with a stamp its compute
    /// queue writes between two readings of the host's clock.
    RoundTrip,
}

impl ClockSource {
    /// The client's form of the protocol's.
    pub(crate) fn of(c: rig_proto::ClockSource) -> ClockSource {
        match c {
            rig_proto::ClockSource::Source { apart } => ClockSource::Source { apart },
            rig_proto::ClockSource::RoundTrip => ClockSource::RoundTrip,
        }
    }
}

/// A GPU rigd serves, as [`crate::Rig::gpus`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GpuInfo {
    /// Its number among the GPUs rigd serves, in bus order.
    pub index: u32,
    /// Its name, such as `"AMD:0"`: what [`crate::Rig::open_device`] takes.
    pub name: String,
    /// Its processor, such as `"gfx1100"`.
    pub arch: String,
    /// How rigd reaches it.
    pub path: GpuPath,
    /// Its PCI function, such as `"0000:41:00.0"`; `None` for the simulated GPU.
    pub bus: Option<String>,
    /// The bytes of its own memory.
    pub memory_bytes: u64,
    /// Why rigd cannot drive it (listed, but opening it fails with this reason); `None`
    /// when it can.
    pub unavailable: Option<String>,
}

impl GpuInfo {
    /// The client's form of rigd's listing of one GPU.
    pub(crate) fn of(g: rig_proto::GpuInfo) -> GpuInfo {
        GpuInfo {
            index: g.index,
            name: g.name,
            arch: g.arch,
            path: match g.path {
                rig_proto::PathKind::Sim => GpuPath::Sim,
                rig_proto::PathKind::Kfd => GpuPath::Kfd,
                rig_proto::PathKind::Vfio => GpuPath::Vfio,
            },
            bus: g.bus,
            memory_bytes: g.budget,
            unavailable: g.unavailable,
        }
    }
}

/// The packets a queue reads, for [`crate::Submission::words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Packets {
    /// PM4 packets: the compute queue of a GPU of one die.
    Pm4,
    /// AQL packets, 64 bytes each: the compute queue of a GPU of several dies.
    Aql,
    /// SDMA packets: the copy queue.
    Sdma,
}

impl Packets {
    pub(crate) fn of(kind: rig_proto::QueueKind) -> Packets {
        match kind {
            rig_proto::QueueKind::Pm4 => Packets::Pm4,
            rig_proto::QueueKind::Aql => Packets::Aql,
            rig_proto::QueueKind::Sdma => Packets::Sdma,
        }
    }
}

/// An open device's facts ([`crate::Device::facts`]): its processor, memory, queues and
/// limits, as rigd handed them over at open (`docs/client.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Facts {
    /// The GPU's processor, such as `"gfx1201"`.
    pub arch: String,
    /// The bytes of the GPU's own memory.
    pub memory_bytes: u64,
    /// The device's queues, in the order rigd numbers them: `COMPUTE:0`, then `COPY:0`.
    pub queues: Vec<Queue>,
    /// The packets `COMPUTE:0` reads: [`Packets::Pm4`] or [`Packets::Aql`].
    pub compute_packets: Packets,
    /// Milliseconds after which rigd loses work whose timeline has not moved (a hang);
    /// `None` where the kernel driver bounds how long work runs.
    pub hang_ms: Option<u64>,
    /// True iff the device maps the program's own memory ([`crate::Device::map_host`]).
    pub maps_host: bool,
    /// True iff the compute queue waits itself for other devices' points (on the same GPU
    /// through the same [`crate::Rig`]); otherwise `submit` waits for them on the host.
    pub gpu_waits: bool,
    /// Bytes of the L2 and MALL together, where rigd's path knows them.
    pub cache_bytes: Option<u64>,
    /// The GPU's PCI function, where it has one.
    pub bus: Option<String>,
    /// The version of the compute queues' firmware (the MEC's).
    pub mec: u32,
    /// The local data share of a work-group, in bytes.
    pub lds_bytes: u32,
    /// Lanes of a wave the GPU runs by default (32 or 64).
    pub wave_size: u32,
    /// The most waves a compute unit runs at once.
    pub waves_per_cu: u32,
    /// Dies (XCCs) that run the compute queue's work.
    pub dies: u32,
    /// Work-group processors that run work: `wgps[e][a]` has bit `w` set iff processor `w`
    /// of shader array `a` of shader engine `e` does.
    pub wgps: Vec<Vec<u32>>,
    /// The frequency of the GPU's clock that profile stamps count, in hertz.
    pub clock_hz: u64,
    /// How the device reads that clock against the host's (docs/profiling.md).
    pub clock: ClockSource,
}

impl Facts {
    /// The client's form of the facts rigd sent; a queue name the client does not know
    /// means rigd and rig-client are out of step.
    pub(crate) fn of(f: &rig_proto::Facts) -> Result<Facts> {
        let queues = f
            .queues
            .iter()
            .map(|q| {
                Queue::by_name(q).ok_or_else(|| {
                    Error::Protocol(format!(
                        "rigd listed a queue {q:?} this client does not know"
                    ))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Facts {
            arch: f.arch.clone(),
            memory_bytes: f.budget,
            queues,
            compute_packets: Packets::of(f.compute),
            hang_ms: f.hang_ms,
            maps_host: f.maps_host,
            gpu_waits: f.waits.stores,
            cache_bytes: f.cache_bytes,
            bus: f.bus.clone(),
            mec: f.mec,
            lds_bytes: f.lds_bytes,
            wave_size: f.wave_size,
            waves_per_cu: f.waves_per_cu,
            dies: f.dies,
            wgps: f.wgps.clone(),
            clock_hz: f.clock_hz,
            clock: ClockSource::of(f.clock),
        })
    }
}
