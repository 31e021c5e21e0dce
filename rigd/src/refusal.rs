//! Every way rigd refuses a request, in one place, and its one conversion to the wire.
//!
//! A handler that cannot do what it was asked returns a [`Refusal`]; the request path turns
//! it into a [`Response`] at the boundary ([`From<Refusal> for Response`], as Firecracker's
//! `convert_to_response` does), so each message is written once, here, and each refusal has
//! one protocol code ([`Refusal::code`]). Shortages of memory and requests that can never
//! succeed are ordinary answers on the wire ([`Response::NoMemory`], [`Response::Never`]),
//! and refusals here too, so that a handler stops at them with `?`.
//!
//! No refusal says "busy": a lock found busy (only when a request is tried inline) is
//! [`crate::table::Busy`], which only the lock steps produce, before anything changed.

use rig_proto::messages::{
    DeviceId, ErrorCode, ErrorReply, ImageId, Limit, RegionId, Response, Shortage,
};
use rig_proto::{Fault, TooLong};

use crate::device::Footprint;
use crate::image::ImageError;
use crate::server::SlotError;

/// What a non-administrator is answered when it asks about others or to stop their work.
pub const NOT_ADMIN: &str = "only rigd's administrators may ask this (status, GPU figures, other users' clients, devices and processes, stop, evict): root, rigd's own user and members of the group daemon.admin_group names in rigd.toml (none by default); run it as one of them, or have an operator set daemon.admin_group and add you to that group";

/// Why rigd answered a request with something other than what it asked.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// rigd is stopping: it lost every device and opens no more.
    #[error("{}: it opens no more devices", crate::watch::SHUTTING_DOWN)]
    ShuttingDown,
    /// The client named a device that is not one of its own.
    #[error("no device {} belongs to this client; open one first", .0.0)]
    NotYourDevice(DeviceId),
    /// An inspector or administrator named a device rigd does not have.
    #[error("no device {}; `rigctl devices` lists them", .0.0)]
    NoDevice(DeviceId),
    /// No GPU of that index.
    #[error("no gpu {gpu}: rigd serves {served} gpus; `rigctl gpus` lists them")]
    NoGpu {
        /// The index asked.
        gpu: u32,
        /// How many GPUs rigd serves.
        served: usize,
    },
    /// A GPU rigd lists but has no path for.
    #[error("gpu {gpu} ({name}) is not drivable yet: {why}")]
    NotDrivable {
        /// Its index.
        gpu: u32,
        /// Its name.
        name: String,
        /// Why rigd cannot drive it.
        why: String,
    },
    /// The device has no region of that id.
    #[error("device {} has no region {}", .device.0, .region.0)]
    NoRegion {
        /// The device.
        device: DeviceId,
        /// The region asked.
        region: RegionId,
    },
    /// The device has no image of that id.
    #[error("device {} has no image {}", .device.0, .image.0)]
    NoImage {
        /// The device.
        device: DeviceId,
        /// The image asked.
        image: ImageId,
    },
    /// An administrator's eviction named a process holding no device.
    #[error("process {pid} holds no device of rigd; `rigctl clients` lists those that do")]
    NoProcess {
        /// The process asked.
        pid: u32,
    },
    /// The device is lost and takes no more work.
    #[error("device {} is lost: {why}", .device.0)]
    Lost {
        /// The device.
        device: DeviceId,
        /// Why rigd lost it.
        why: Fault,
    },
    /// An administrator asked to stop a device already lost.
    #[error("device {} is already lost: {why}", .device.0)]
    AlreadyLost {
        /// The device.
        device: DeviceId,
        /// Why rigd lost it.
        why: Fault,
    },
    /// The device is stopped and takes no more work.
    #[error("device {} is stopped; close it and open another", .0.0)]
    Stopped(DeviceId),
    /// A second stop of one device.
    #[error("device {} is already stopped", .0.0)]
    AlreadyStopped(DeviceId),
    /// An allocation's size is zero or not a multiple of 4.
    #[error("cannot allocate {bytes} bytes: the size must be positive and a multiple of 4")]
    AllocSize {
        /// The size asked.
        bytes: u64,
    },
    /// A host mapping's size is zero or its offset not page-aligned.
    #[error(
        "cannot map {bytes} bytes at offset {offset}: the size must be positive and the offset a multiple of 4096"
    )]
    MapSpan {
        /// The size asked.
        bytes: u64,
        /// The offset asked.
        offset: u64,
    },
    /// `MapHost` came without its memfd.
    #[error("map-host needs the memfd to map passed with it")]
    NoMemfd,
    /// A string of the request is longer than its bound.
    #[error(transparent)]
    TooLong(#[from] TooLong),
    /// The host memory passed is unfit as passed, and the client can fix that.
    #[error("{0}")]
    Unfit(String),
    /// Only an administrator may ask this.
    #[error("{NOT_ADMIN}")]
    NotAdmin,
    /// `[access]` does not let the peer use rigd (refused at accept).
    #[error(
        "user {uid} may not use rigd; ask the administrator to add it to rigd's group or [access] users"
    )]
    NotAllowed {
        /// The peer's user.
        uid: u32,
    },
    /// No connection slot for the peer (refused at accept).
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// An administrator's request that rigd's administration ([`crate::admin`]) answers,
    /// not the devices' state.
    #[error("{0} is an administrator's request, which the device state does not answer")]
    AdminsRequest(&'static str),
    /// A request the administration does not answer.
    #[error("{0} is not an administrator's request")]
    NotAdminsRequest(&'static str),
    /// A limit of the user or of all clients refuses the request.
    #[error(transparent)]
    Quota(#[from] Quota),
    /// The grant of the connection's socket refuses the request, or a grant request is
    /// refused.
    #[error(transparent)]
    Grant(#[from] crate::grant::GrantRefusal),
    /// A shortage of memory: the GPU's, the host's or the user's quota. Answered as
    /// [`Response::NoMemory`].
    #[error("{bytes} bytes refused: the {shortage:?} budget holds no more")]
    NoMemory {
        /// The bytes asked.
        bytes: u64,
        /// Which budget refused.
        shortage: Shortage,
        /// The configured limit that refused, if one did.
        limit: Option<Limit>,
    },
    /// The request can never succeed on this device. Answered as [`Response::Never`].
    #[error("{0}")]
    Never(String),
    /// The code object was refused before anything was allocated for it.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The code object was refused for the device's GPU or at placing.
    #[error("{0}")]
    ImageRefused(String),
    /// A kernel that reads a runtime's service rig does not provide.
    #[error(
        "kernel {name} reads {services}, a runtime's service rig does not provide; build it without printf, hostcall or device-side enqueue"
    )]
    Services {
        /// The kernel.
        name: String,
        /// The services it reads.
        services: String,
    },
    /// A kernel that reads its dispatch packet, on a GPU whose queue has none.
    #[error(
        "kernel {name} reads its dispatch packet, which a GPU of one die (PM4 queue) does not have; compile it as code object v5 or later"
    )]
    DispatchPacket {
        /// The kernel.
        name: String,
    },
    /// The GPU or its path failed; the device may be lost.
    #[error("{0}")]
    Fault(String),
    /// rigd itself failed.
    #[error("{0}")]
    Internal(String),
}

/// A limit that refuses a request, with the figures it names.
#[derive(Debug, thiserror::Error)]
pub enum Quota {
    /// The user holds as many devices as `limits.devices` allows.
    #[error(
        "user {uid} has {open} devices open across its connections, the most rigd's limits.devices ({most}) allows; close one first"
    )]
    Devices {
        /// The user.
        uid: u32,
        /// Devices it holds.
        open: u32,
        /// `limits.devices`.
        most: u32,
    },
    /// The user holds as many objects as `limits.objects` allows.
    #[error(
        "user {uid} holds {held} allocations, mappings and images across its connections, the most rigd's limits.objects ({most}) allows; free some first"
    )]
    Objects {
        /// The user.
        uid: u32,
        /// Objects it holds.
        held: u64,
        /// `limits.objects`.
        most: u32,
    },
    /// The user's descriptors would pass `limits.fds`.
    #[error(
        "rigd holds {held} file descriptors for user {uid}'s memory and devices and needs {need} more, beyond rigd's limits.fds ({most}); free Pinned or Mapped allocations or host mappings, or make fewer larger ones"
    )]
    Fds {
        /// The user.
        uid: u32,
        /// Descriptors held for it.
        held: u64,
        /// Descriptors the request needs.
        need: u64,
        /// `limits.fds`, as sized.
        most: u64,
    },
    /// All clients' descriptors would pass what `RLIMIT_NOFILE` leaves.
    #[error(
        "rigd holds {held} file descriptors for all clients, the most its RLIMIT_NOFILE ({nofile}) leaves after what it keeps for connections ({most}); retry once others free memory, or raise LimitNOFILE"
    )]
    AllFds {
        /// Descriptors held for all clients.
        held: u64,
        /// rigd's `RLIMIT_NOFILE`.
        nofile: u64,
        /// What it leaves for clients.
        most: u64,
    },
    /// The user's mappings would pass `limits.mappings`.
    #[error(
        "rigd holds {held} memory mappings for user {uid} and needs {need} more, beyond rigd's limits.mappings ({most}); free Pinned or Mapped allocations, host mappings or devices, or make fewer larger ones"
    )]
    Maps {
        /// The user.
        uid: u32,
        /// Mappings held for it.
        held: u64,
        /// Mappings the request needs.
        need: u64,
        /// `limits.mappings`, as sized.
        most: u64,
    },
    /// All clients' mappings would pass what `vm.max_map_count` leaves.
    #[error(
        "rigd holds {held} memory mappings for all clients, the most vm.max_map_count ({max_map_count}) leaves after what rigd keeps for itself ({most}); retry once others free memory, or raise vm.max_map_count"
    )]
    AllMaps {
        /// Mappings held for all clients.
        held: u64,
        /// The system's `vm.max_map_count`.
        max_map_count: u64,
        /// What it leaves for clients.
        most: u64,
    },
    /// A memory limit refuses a device's opening or growth, much of it the memory the GPU's
    /// driver makes for the device's queues besides their rings.
    #[error(
        "user {uid} needs {} more, {} of it the memory the GPU's driver makes for the device's queues besides their rings (each compute queue's context-save area and EOP buffer, `rigctl gpus` shows what a queue costs), and {}: {} ({}) is {} short; close devices or free memory first",
        mib(*.bytes),
        mib(*.queue_bytes),
        if .limit.name == "limits.gpu_share_percent" { "its share of the GPU's memory holds no more" } else { "the limit holds no more" },
        .limit.name,
        mib(.limit.value),
        mib(.limit.missing)
    )]
    Queues {
        /// The user.
        uid: u32,
        /// The bytes asked.
        bytes: u64,
        /// The bytes of them its queues' driver memory takes.
        queue_bytes: u64,
        /// The limit that refused.
        limit: Limit,
    },
}

/// Bytes as MiB with one decimal, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

impl Refusal {
    /// The GPU's own memory cannot give `bytes` (it names no figure).
    pub fn gpu_short(bytes: u64) -> Refusal {
        Refusal::NoMemory {
            bytes,
            shortage: Shortage::Gpu,
            limit: None,
        }
    }

    /// The refusal of a memory limit, said in terms of the device's queues when `need`
    /// holds memory the path makes for them (opening and growing devices): a bare byte
    /// count would hide that the queues' memory (44 MiB a compute queue on a gfx1100) is
    /// what the user's devices take. Other refusals pass as they are.
    pub fn naming_queues(self, need: Footprint, uid: u32) -> Refusal {
        match self {
            Refusal::NoMemory {
                bytes,
                limit: Some(limit),
                ..
            } if need.queue_bytes > 0 => Refusal::Quota(Quota::Queues {
                uid,
                bytes,
                queue_bytes: need.queue_bytes,
                limit,
            }),
            other => other,
        }
    }

    /// The protocol code the refusal travels with; `None` for the refusals that travel as
    /// answers of their own ([`Response::NoMemory`], [`Response::Never`]).
    pub fn code(&self) -> Option<ErrorCode> {
        use Refusal as R;
        Some(match self {
            R::NotYourDevice(_) | R::NoDevice(_) | R::NoProcess { .. } => ErrorCode::NoSuchDevice,
            R::NoGpu { .. } | R::NotDrivable { .. } => ErrorCode::NoSuchGpu,
            R::NoRegion { .. } => ErrorCode::NoSuchRegion,
            R::NoImage { .. } => ErrorCode::NoSuchImage,
            R::Lost { .. } | R::AlreadyLost { .. } => ErrorCode::Lost,
            R::Stopped(_) | R::AlreadyStopped(_) | R::ShuttingDown => ErrorCode::Stopped,
            R::AllocSize { .. } | R::MapSpan { .. } | R::Unfit(_) => ErrorCode::InvalidArgument,
            R::NoMemfd | R::TooLong(_) | R::AdminsRequest(_) | R::NotAdminsRequest(_) => {
                ErrorCode::BadRequest
            }
            R::NotAdmin | R::NotAllowed { .. } => ErrorCode::PermissionDenied,
            R::Quota(_) | R::Slot(_) => ErrorCode::Quota,
            R::Grant(g) => g.code(),
            R::Image(_) | R::ImageRefused(_) => ErrorCode::ImageRefused,
            R::Services { .. } | R::DispatchPacket { .. } => ErrorCode::EntryRefused,
            R::Fault(_) => ErrorCode::Fault,
            R::Internal(_) => ErrorCode::Internal,
            R::NoMemory { .. } | R::Never(_) => return None,
        })
    }
}

impl From<Refusal> for Response {
    fn from(r: Refusal) -> Response {
        match r {
            Refusal::NoMemory {
                bytes,
                shortage,
                limit,
            } => Response::NoMemory {
                bytes,
                shortage,
                limit,
            },
            Refusal::Never(reason) => Response::Never { reason },
            r => Response::Error(r.into()),
        }
    }
}

impl From<Refusal> for ErrorReply {
    fn from(r: Refusal) -> ErrorReply {
        // A shortage or a never, where only an error can go (an administrator's answer),
        // is a request the daemon could not serve.
        ErrorReply::new(r.code().unwrap_or(ErrorCode::Internal), r.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortages_and_nevers_are_answers_and_the_rest_errors_with_their_code() {
        assert_eq!(
            Response::from(Refusal::gpu_short(8)),
            Response::NoMemory {
                bytes: 8,
                shortage: Shortage::Gpu,
                limit: None
            }
        );
        assert_eq!(
            Response::from(Refusal::Never("no".into())),
            Response::Never {
                reason: "no".into()
            }
        );
        let Response::Error(e) = Response::from(Refusal::NotYourDevice(DeviceId(3))) else {
            panic!()
        };
        assert_eq!(e.code, ErrorCode::NoSuchDevice);
        assert_eq!(
            e.message,
            "no device 3 belongs to this client; open one first"
        );
    }

    #[test]
    fn a_memory_limit_on_an_opening_names_the_queues() {
        let limit = Limit {
            name: "limits.memory_bytes".into(),
            value: 1 << 20,
            missing: 1 << 19,
        };
        let short = Refusal::NoMemory {
            bytes: 3 << 20,
            shortage: Shortage::Quota,
            limit: Some(limit),
        };
        let need = Footprint {
            queue_bytes: 2 << 20,
            ..Footprint::default()
        };
        let r = short.naming_queues(need, 7);
        assert_eq!(r.code(), Some(ErrorCode::Quota));
        let m = r.to_string();
        assert!(
            m.starts_with("user 7 needs 3.0 MiB more, 2.0 MiB of it")
                && m.contains("limits.memory_bytes (1.0 MiB) is 0.5 MiB short"),
            "{m}"
        );
        // Without queue memory the shortage stays an answer.
        let plain = Refusal::gpu_short(1).naming_queues(Footprint::default(), 7);
        assert_eq!(plain.code(), None);
    }
}
