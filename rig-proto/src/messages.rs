//! The messages of the control protocol: the handshake, every request a client or `rigctl`
//! sends, and every reply rigd gives.
//!
//! This module owns the shape of the data only. How a message becomes bytes on the socket
//! is [`crate::frame`]'s business; what a request does to a GPU is rigd's. Everything here
//! is plain data (no handles, no pointers), so rigd, `rig-client` and `rigctl` share it.
//!
//! Memory that rigd shares with a client travels as a [`Share`]: the index of a file
//! descriptor passed with the same frame ([`FdIndex`]), plus an offset and a length within
//! it. The client maps the descriptor and finds the thing at that offset.
//!
//! The encoding of a message is the order of its fields and variants, so variants and
//! fields are only ever appended, and any change bumps [`crate::VERSION`]. The handshake
//! types ([`Hello`], [`HelloReply`]) are frozen across versions: every rigd can read
//! every client's first frame and answer it.

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
// Identifiers
// ---------------------------------------------------------------------------------------

/// A device a client opened, unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeviceId(pub u64);

/// Memory of a device (an allocation or a mapping), unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RegionId(pub u64);

/// Loaded code on a device, unique for the life of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ImageId(pub u64);

/// The position of a file descriptor among those passed with the same frame, from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FdIndex(pub u32);

// ---------------------------------------------------------------------------------------
// Handshake (frozen: never reorder or change these three types)
// ---------------------------------------------------------------------------------------

/// The first frame a client sends: who it is and which protocol it speaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Always [`crate::MAGIC`]; anything else is not a rig client.
    pub magic: u64,
    /// The protocol version the client speaks, [`crate::VERSION`] of its build.
    pub version: u32,
    /// The client's program name, as `rigctl clients` shows it: at most
    /// [`crate::MOST_PROGRAM`] bytes, in a payload of at most [`crate::MOST_HELLO`].
    pub program: String,
}

/// rigd's answer to [`Hello`]. After `Refused` the daemon closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HelloReply {
    /// The daemon speaks the client's version; requests may follow.
    Welcome(Welcome),
    /// The daemon will not serve this client: a version mismatch (code
    /// [`ErrorCode::VersionMismatch`]), a bad magic or a refused peer.
    Refused {
        /// The protocol version the daemon speaks.
        daemon: u32,
        /// Why, as for any refused request.
        error: ErrorReply,
    },
}

/// What a client learns of the daemon when it is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version both sides now speak.
    pub version: u32,
    /// The daemon's name and build, such as `"rigd 0.1.0"`.
    pub daemon: String,
    /// The daemon's process id.
    pub pid: u32,
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

/// A request after the handshake. rigd answers each with one [`Response`], in order.
///
/// Each line says what the request needs; a request whose need is unmet is answered
/// with [`Response::Error`]. "Live device" means a device this client opened and has
/// neither stopped nor closed, and that rigd has not lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Needs nothing: the GPUs rigd serves; answered with [`Response::Gpus`].
    ListGpus,
    /// Needs a GPU index from `ListGpus` and room in the client's quota; answered with
    /// [`Response::DeviceOpened`] and its descriptors.
    OpenDevice {
        /// The GPU's index, [`GpuInfo::index`].
        gpu: u32,
    },
    /// Needs a device of this client, live or not: stops it if needed and gives back
    /// everything it holds; answered with [`Response::Done`].
    CloseDevice {
        /// The device to close.
        device: DeviceId,
    },
    /// Needs a live device and `bytes` positive and a multiple of 4; answered with
    /// [`Response::Allocated`], [`Response::NoMemory`] or, for memory the device does not
    /// have, [`Response::Never`].
    Alloc {
        /// The device.
        device: DeviceId,
        /// The kind of memory.
        memory: MemoryKind,
        /// How many bytes.
        bytes: u64,
    },
    /// Needs a region of this device, which no work of the device can still use (after a
    /// stop too); answered with [`Response::Done`].
    Free {
        /// The device the region belongs to.
        device: DeviceId,
        /// A region `Alloc`, `MapHost` or `LoadImage` made.
        region: RegionId,
    },
    /// Needs a live device whose facts say `maps_host`, exactly one descriptor passed (a
    /// memfd the client also maps), `offset` page-aligned and `bytes` positive; maps the
    /// pages that hold those bytes. The memfd must allow sealing (`MFD_ALLOW_SEALING`): rigd
    /// seals it against shrinking and answers `InvalidArgument` when it cannot. Answered with
    /// [`Response::Mapped`], [`Response::NoMemory`] or [`Response::Never`].
    MapHost {
        /// The device.
        device: DeviceId,
        /// Bytes to map from `offset`.
        bytes: u64,
        /// Byte offset into the passed memfd, a multiple of 4096.
        offset: u64,
    },
    /// Needs a live device; loads an AMDGPU code object into the device's own memory.
    /// Answered with [`Response::ImageLoaded`], [`Response::NoMemory`], or an error with code
    /// [`ErrorCode::ImageRefused`] naming why.
    LoadImage {
        /// The device.
        device: DeviceId,
        /// The ELF bytes of the code object. Encoded as any byte sequence is (its length,
        /// then its bytes), and decoded as one copy rather than byte by byte.
        #[serde(with = "serde_bytes")]
        code_object: Vec<u8>,
    },
    /// Needs a live device and an image of it; makes what a launch of `name` needs (its
    /// scratch included). Answered with [`Response::Entry`], [`Response::Absent`],
    /// [`Response::NoMemory`], or an error with code [`ErrorCode::EntryRefused`].
    ResolveEntry {
        /// The device.
        device: DeviceId,
        /// The image.
        image: ImageId,
        /// The kernel's name, without `.kd`: at most [`crate::MOST_ENTRY_NAME`] bytes.
        name: String,
    },
    /// Needs a live device and an image of it; may start making `name`'s entry and
    /// reports nothing, failures included. Answered with [`Response::Done`].
    Prepare {
        /// The device.
        device: DeviceId,
        /// The image.
        image: ImageId,
        /// The kernel's name: at most [`crate::MOST_ENTRY_NAME`] bytes.
        name: String,
    },
    /// Needs an image of this device that no work can still run (after a stop too);
    /// releases its entries. The image's region stays until freed. Answered with
    /// [`Response::Done`].
    Unload {
        /// The device.
        device: DeviceId,
        /// The image.
        image: ImageId,
    },
    /// Needs a live device; makes rings or an argument segment big enough for a
    /// submission (a byte count of 0 asks nothing of that part). Answered with
    /// [`Response::Grown`] and its descriptors, or [`Response::NoMemory`].
    Grow {
        /// The device.
        device: DeviceId,
        /// Bytes the submission needs on the compute ring.
        compute_bytes: u64,
        /// Bytes the submission needs on the copy ring.
        copy_bytes: u64,
        /// Bytes the submission needs in the argument segment.
        segment_bytes: u64,
        /// The generations the client has installed, so rigd retires older queues and
        /// replaces a grown one no work ran on.
        installed: Generations,
    },
    /// Needs a device of this client, live or not; answered with [`Response::Facts`].
    Facts {
        /// The device.
        device: DeviceId,
    },
    /// Needs a live device; reads the GPU's clock through the path's source, against
    /// readings of the host's `CLOCK_MONOTONIC` ([`ClockSample`]). Answered with
    /// [`Response::Clock`].
    SampleClock {
        /// The device.
        device: DeviceId,
    },
    /// Needs a device of this client that is not yet stopped; destroys its queues without
    /// waiting for their work, and makes the timeline word read `last` once no work runs.
    /// Answered with [`Response::Done`].
    StopDevice {
        /// The device.
        device: DeviceId,
        /// The last value the client gave to submit.
        last: u64,
        /// Why the client lost the device, if for a fault or a hang: at most
        /// [`crate::MOST_STOP_REASON`] bytes.
        fault: Option<String>,
    },
    /// Needs a device of this client, live or not; answered with [`Response::Status`], which
    /// says whether and why rigd lost it.
    DeviceStatus {
        /// The device.
        device: DeviceId,
    },
    /// Needs a peer allowed to inspect (root or rigd's group); answered with
    /// [`Response::Clients`].
    ListClients,
    /// Needs a peer allowed to inspect; answered with [`Response::Devices`].
    ListDevices,
    /// Needs a peer allowed to inspect, or the device's owner; answered with
    /// [`Response::Device`].
    ShowDevice {
        /// The device.
        device: DeviceId,
    },
    /// Needs a live `device` and a `peer` device of this client (live or not); maps `peer`'s
    /// timeline word read-only into `device`'s address space, once per pair, so `device`'s
    /// compute queue can wait for `peer`'s points. The mapping lasts until `device` closes,
    /// and the word keeps its last value once `peer` stops. Answered with
    /// [`Response::PeerWord`], or [`Response::Never`] if `device`'s GPU does not reach
    /// `peer`'s (the client then waits on the host); an unknown peer is
    /// [`ErrorCode::NoSuchDevice`].
    MapPeerWord {
        /// The device whose queue waits.
        device: DeviceId,
        /// The device whose timeline word it waits on.
        peer: DeviceId,
    },
    /// Needs a peer allowed to inspect; answered with [`Response::Daemon`]: rigd's version,
    /// uptime, configuration and socket.
    DaemonStatus,
    /// Needs a peer allowed to inspect; answered with [`Response::GpuStatus`]: each GPU's
    /// product, firmware, memory used and free, and busy fraction.
    GpuStatus,
    /// Needs a peer allowed to inspect; answered with [`Response::Processes`]: one row per
    /// client process (its connections together), its program as `/proc` names it.
    ListProcesses,
    /// Needs a peer allowed to inspect (an administrator): stops `device`, whoever owns it;
    /// its client finds it lost, "stopped by the administrator". Answered with
    /// [`Response::Done`].
    AdminStop {
        /// The device, as `ListDevices` lists it.
        device: DeviceId,
    },
    /// Needs a peer allowed to inspect: stops every device of process `pid` as
    /// [`Request::AdminStop`] does. Answered with [`Response::Evicted`].
    Evict {
        /// The client process.
        pid: u32,
    },
    /// Needs nothing: answered with [`Response::Pong`] at once, touching no device, so its
    /// round trip is the control path's own (`rigctl ping`).
    Ping,
    /// Needs an administrator: makes grant `id` (a Kubernetes allocation), a socket of
    /// rigd's own every connection on which holds at most the grant's share, whatever its
    /// uid. Asked again with the same id and share, it keeps the grant and its connections
    /// and takes the new pod and container names; with another share it ends the old grant
    /// first, as [`Request::Revoke`] does. Answered with [`Response::Granted`].
    Grant(Box<GrantSpec>),
    /// Needs an administrator and a grant of that id: ends it: its socket goes, the
    /// devices of its connections are lost, "the allocation was reclaimed", and its
    /// connections closed, which gives back all they held. Answered with [`Response::Done`].
    Revoke {
        /// The grant, [`GrantSpec::id`].
        id: String,
    },
    /// Needs an administrator: the grants rigd holds; answered with [`Response::Grants`].
    Grants,
}

/// What an allocation may hold: the share a [`Request::Grant`] gives every connection on
/// its socket, together, on top of (never wider than) the limits of each connection's uid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantSpec {
    /// The grant's name, also its socket's directory: 1 to [`crate::MOST_GRANT_ID`] bytes
    /// of ASCII letters, digits, `.`, `_` and `-`, not starting with `.`.
    pub id: String,
    /// The GPUs the grant may open devices on, each with the bytes of memory the grant
    /// may hold for devices on it ([`GrantGpu::bytes`]); no other GPU may be opened.
    pub gpus: Vec<GrantGpu>,
    /// The most devices the grant's connections may hold open together.
    pub devices: u32,
    /// Who holds it, as whoever asked knows (the device plugin: the kubelet's device ids,
    /// and the pod and container once the kubelet lists them).
    pub holder: Holder,
}

/// A GPU of a grant and the memory the grant may hold on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantGpu {
    /// The GPU's index, [`GpuInfo::index`].
    pub gpu: u32,
    /// Bytes of memory the grant may hold for devices on it: every byte rigd's
    /// `limits.memory_bytes` counts (Device, Mapped and Pinned memory, host mappings,
    /// images, the devices' rings and control pages).
    pub bytes: u64,
}

/// Who holds a grant, as the device plugin knows it. Every string is at most
/// [`crate::MOST_HOLDER_NAME`] bytes, and at most [`crate::MOST_GRANT_DEVICES`] device ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The extended resource, such as `rig.dev/gpu-memory`.
    pub resource: String,
    /// The kubelet's device ids of the allocation.
    pub devices: Vec<String>,
    /// The pod's namespace, once known.
    pub namespace: Option<String>,
    /// The pod's name, once known.
    pub pod: Option<String>,
    /// The container's name, once known.
    pub container: Option<String>,
}

/// A grant rigd holds, for [`Request::Grants`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantInfo {
    /// Its share and holder.
    pub spec: GrantSpec,
    /// Its socket's path.
    pub socket: String,
    /// Milliseconds since it was made.
    pub age_ms: u64,
    /// Connections on its socket now.
    pub connections: u32,
    /// Devices they hold open.
    pub devices: u32,
    /// Bytes they hold for devices on each GPU, as [`GrantGpu::bytes`] counts them, in
    /// [`GrantSpec::gpus`]'s order.
    pub gpu_bytes: Vec<u64>,
}

/// How rigd routes a [`Request`]: its name, the device it acts on, whether it may block,
/// whether only an administrator may ask it, and the descriptors that ride with it. Each
/// request's route is stated once, in [`Request::route`]; rigd and the framing read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The request's name, for logs, metrics and error messages.
    pub name: &'static str,
    /// The device of the asking client that rigd answers the request on, under that
    /// device's lock; `None` for a request on no one device of its client (one that
    /// opens, closes or inspects devices, or asks of rigd itself).
    pub device: Option<DeviceId>,
    /// Whether answering may block a thread: it makes, grows, stops or closes queues
    /// (joining their threads), parses and uploads a code object, maps a client's memory,
    /// or waits for every device (an administrator's). rigd answers these on its blocking
    /// pool, never on an async worker.
    pub blocks: bool,
    /// Whether only rigd's administrators may ask it.
    pub admin: bool,
    /// How many file descriptors must ride with it: exactly this many, no more.
    pub fds: usize,
}

impl Route {
    const fn of(name: &'static str) -> Route {
        Route {
            name,
            device: None,
            blocks: false,
            admin: false,
            fds: 0,
        }
    }

    const fn on(self, device: DeviceId) -> Route {
        Route {
            device: Some(device),
            ..self
        }
    }

    const fn blocking(self) -> Route {
        Route {
            blocks: true,
            ..self
        }
    }

    const fn admin(self) -> Route {
        Route {
            admin: true,
            blocks: true,
            ..self
        }
    }

    const fn with_fds(self, fds: usize) -> Route {
        Route { fds, ..self }
    }
}

impl Request {
    /// The request's route: the one place each request's name, device, blocking,
    /// administrator's need and descriptors are stated.
    pub fn route(&self) -> Route {
        let r = Route::of;
        match self {
            Request::ListGpus => r("list-gpus"),
            Request::OpenDevice { .. } => r("open-device").blocking(),
            Request::CloseDevice { .. } => r("close-device").blocking(),
            Request::Alloc { device, .. } => r("alloc").on(*device),
            Request::Free { device, .. } => r("free").on(*device),
            Request::MapHost { device, .. } => r("map-host").on(*device).blocking().with_fds(1),
            Request::LoadImage { device, .. } => r("load-image").on(*device).blocking(),
            Request::ResolveEntry { device, .. } => r("resolve-entry").on(*device),
            Request::Prepare { device, .. } => r("prepare").on(*device),
            Request::Unload { device, .. } => r("unload").on(*device),
            Request::Grow { device, .. } => r("grow").on(*device).blocking(),
            Request::Facts { device } => r("facts").on(*device),
            Request::SampleClock { device } => r("sample-clock").on(*device),
            Request::StopDevice { device, .. } => r("stop-device").on(*device).blocking(),
            Request::DeviceStatus { device } => r("device-status").on(*device),
            Request::ListClients => r("list-clients"),
            Request::ListDevices => r("list-devices"),
            Request::ShowDevice { .. } => r("show-device"),
            Request::MapPeerWord { device, .. } => r("map-peer-word").on(*device),
            Request::DaemonStatus => r("daemon-status").admin(),
            Request::GpuStatus => r("gpu-status").admin(),
            Request::ListProcesses => r("list-processes").admin(),
            Request::AdminStop { .. } => r("admin-stop").admin(),
            Request::Evict { .. } => r("evict").admin(),
            Request::Ping => r("ping"),
            Request::Grant(_) => r("grant").admin(),
            Request::Revoke { .. } => r("revoke").admin(),
            Request::Grants => r("grants").admin(),
        }
    }

    /// The request's name, for logs and error messages ([`Route::name`]).
    pub fn name(&self) -> &'static str {
        self.route().name
    }

    /// How many file descriptors must ride with this request ([`Route::fds`]).
    pub fn fds_needed(&self) -> usize {
        self.route().fds
    }
}

// ---------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------

/// rigd's answer to one [`Request`]. Every request may also be answered with `Error`.
// `Grown` (about 300 bytes) stays inline: an answer is built once per request and moved a
// few times, so a box would buy nothing measurable.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The request succeeded and has nothing to return.
    Done,
    /// The GPUs rigd serves, in index order.
    Gpus(Vec<GpuInfo>),
    /// A new device and the shared memory its submissions go through.
    DeviceOpened(Box<DeviceOpened>),
    /// New memory. `host` is the memfd share the client maps, for Pinned and Mapped memory.
    Allocated {
        /// The region.
        region: RegionId,
        /// The GPU address of its first byte, a multiple of [`Facts::alignment`].
        gpu_address: u64,
        /// Where the host reaches it; `None` for Device memory.
        host: Option<Share>,
    },
    /// Host memory the GPU now reaches.
    Mapped {
        /// The mapping, which `Free` ends (the memory itself stays the client's).
        region: RegionId,
        /// The GPU address of the byte at the request's offset.
        gpu_address: u64,
    },
    /// The device, the host or the client's quota cannot give the `bytes` bytes the
    /// request asked. Nothing was made; reclaiming memory and asking again may succeed.
    NoMemory {
        /// The bytes the request asked for.
        bytes: u64,
        /// Which budget refused them: the GPU's memory, rigd's host-memory cap, or the
        /// user's quota (its memory or its share of the GPU).
        shortage: Shortage,
        /// The configured limit that refused them, with its value and the bytes missing;
        /// `None` where the GPU's or the host's own memory refused (they name no figure).
        limit: Option<Limit>,
    },
    /// The request can never succeed on this device, as the reason says: Mapped memory on
    /// a path without it, host pages the path will not map (such as read-only ones).
    Never {
        /// Why.
        reason: String,
    },
    /// A loaded code object.
    ImageLoaded {
        /// The image, for `ResolveEntry`, `Prepare` and `Unload`.
        image: ImageId,
        /// The Device memory the image lies in; the client frees it after `Unload`.
        region: RegionId,
        /// The GPU address of the image's first byte.
        gpu_address: u64,
        /// The image's bytes in GPU memory.
        size: u64,
        /// The names of its kernels.
        kernels: Vec<String>,
    },
    /// What a launch of the kernel needs.
    Entry(Box<Entry>),
    /// The image has no kernel of that name.
    Absent,
    /// New queues or segment; the client installs each once the device reached every
    /// value it submitted.
    Grown(Grown),
    /// The device's facts.
    Facts(Box<Facts>),
    /// A reading of the GPU's clock.
    Clock(ClockSample),
    /// Whether the device is live, and how far its timeline is.
    Status(DeviceStatus),
    /// The connected clients.
    Clients(Vec<ClientInfo>),
    /// The open devices.
    Devices(Vec<DeviceInfo>),
    /// One device in detail.
    Device(Box<DeviceReport>),
    /// The request failed.
    Error(ErrorReply),
    /// Another device's timeline word, mapped read-only for [`Request::MapPeerWord`].
    PeerWord {
        /// The GPU address, in the requesting device's address space, of the peer's
        /// 8-byte timeline word.
        gpu_address: u64,
    },
    /// rigd itself, for [`Request::DaemonStatus`].
    Daemon(DaemonStatus),
    /// Each GPU's figures, for [`Request::GpuStatus`], in index order.
    GpuStatus(Vec<GpuStatus>),
    /// The client processes, for [`Request::ListProcesses`].
    Processes(Vec<ProcessInfo>),
    /// The devices [`Request::Evict`] stopped.
    Evicted {
        /// The devices stopped.
        devices: Vec<DeviceId>,
    },
    /// The answer to [`Request::Ping`].
    Pong,
    /// The grant's socket, for [`Request::Grant`]: the path of the socket in the grant's
    /// own directory, which is what a container mounts.
    Granted {
        /// The socket's path on the host.
        socket: String,
    },
    /// The grants, for [`Request::Grants`], by id.
    Grants(Vec<GrantInfo>),
}

/// rigd itself, as `rigctl status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// rigd's name and version, such as `rigd 0.1.0`.
    pub version: String,
    /// rigd's process id.
    pub pid: u32,
    /// Milliseconds since rigd started.
    pub uptime_ms: u64,
    /// The configuration file it read; `None` for the embedded default.
    pub config: Option<String>,
    /// The socket it serves (the one systemd passed, when socket-activated).
    pub socket: Option<String>,
    /// How many GPUs it serves.
    pub gpus: u32,
    /// Connections it serves now.
    pub connections: u32,
    /// Devices open now.
    pub devices: u32,
}

/// One GPU's figures, as `rigctl gpus` and `rigctl top` show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// Its index, [`GpuInfo::index`].
    pub index: u32,
    /// Its marketing name, such as `AMD Radeon RX 7900 XTX`, from rig-amd's PCI-id table
    /// (`simulated gfx1100` for the simulator); `None` when the table does not know it.
    pub product: Option<String>,
    /// Its PCI vendor, device and revision ids; `None` for the simulated GPU.
    pub pci_id: Option<(u16, u16, u8)>,
    /// Its firmware versions as the driver reports them, such as `mec 0x1c2`; `None` when
    /// unknown.
    pub firmware: Option<String>,
    /// What a client costs on it and how many it runs at once, for a GPU served through
    /// KFD; `None` for other paths (and from a rigd that predates the field).
    #[serde(default)]
    pub client_cost: Option<ClientCost>,
    /// Bytes of its own memory.
    pub total_bytes: u64,
    /// Bytes of it devices hold.
    pub used_bytes: u64,
    /// Devices open on it.
    pub devices: u32,
    /// Processes holding a device on it.
    pub clients: u32,
    /// Thousandths of the last second during which it had work on its queues.
    pub busy_permille: u32,
}

/// What a client costs on a GPU that KFD drives (each client is one KFD process), and the
/// bound past which KFD's scheduler time-slices clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCost {
    /// VRAM bytes each compute queue takes besides its ring: its EOP buffer and the
    /// context-save area KFD asks for.
    pub queue_bytes: u64,
    /// Clients (KFD processes) whose queues the GPU runs at once: the VMIDs amdgpu keeps
    /// for KFD. Past it the scheduler maps that many at a time and time-slices them.
    pub at_once: u32,
    /// Compute queues whose buffers its VRAM holds, nothing else allocated; past it a new
    /// queue is refused for lack of memory.
    pub queues_fit: u64,
}

/// One client process: its connections together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its process id.
    pub pid: u32,
    /// Its user id.
    pub uid: u32,
    /// Its program as `/proc/PID/comm` names it (the name its hello gave, if `/proc` does
    /// not say).
    pub program: String,
    /// The program names its connections' hellos gave (what it says it is), each once.
    pub hello: Vec<String>,
    /// Its connections to rigd.
    pub connections: u32,
    /// The devices it holds open.
    pub devices: Vec<DeviceId>,
    /// Bytes of memory its devices hold.
    pub bytes: u64,
    /// The grant whose socket its connections came on (the first's, should they differ);
    /// `None` on rigd's own socket.
    pub grant: Option<String>,
    /// Its pod and container, as its cgroup named them when it connected.
    pub pod: Option<PodOf>,
}

impl Response {
    /// How many file descriptors must ride with this response: one more than the highest
    /// [`FdIndex`] it names, so a descriptor the message does not name is an error.
    pub fn fds_needed(&self) -> usize {
        let mut most: Option<u32> = None;
        let mut see = |i: FdIndex| most = Some(most.map_or(i.0, |m| m.max(i.0)));
        match self {
            Response::DeviceOpened(d) => d.fd_indices().into_iter().for_each(&mut see),
            Response::Allocated { host: Some(s), .. } => see(s.fd),
            Response::Grown(g) => g.fd_indices().into_iter().for_each(&mut see),
            _ => {}
        }
        most.map_or(0, |m| m as usize + 1)
    }

    /// Checks the layout of what the answer shares or describes (see
    /// [`DeviceOpened::check`], [`Grown::check`], [`Entry::check`]).
    pub fn check(&self) -> Result<(), LayoutError> {
        match self {
            Response::DeviceOpened(d) => d.check(),
            Response::Grown(g) => g.check(),
            Response::Entry(e) => e.check(),
            Response::Allocated { host: Some(s), .. } => s.check("allocated memory", 1),
            _ => Ok(()),
        }
    }

    /// The reply as a result: `Err` for [`Response::Error`], `Ok` for any other answer.
    pub fn into_result(self) -> Result<Response, ErrorReply> {
        match self {
            Response::Error(e) => Err(e),
            other => Ok(other),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------

/// Bytes of a file descriptor passed with the frame that the receiver maps.
///
/// `offset` need not start a page: map from `offset` rounded down to 4096 (see
/// [`Share::page_span`]). Several shares may name one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// Which of the frame's descriptors.
    pub fd: FdIndex,
    /// Byte offset into the descriptor.
    pub offset: u64,
    /// Bytes from `offset`.
    pub bytes: u64,
}

impl Share {
    /// Checks that the share is not empty, does not overflow, and can hold a naturally
    /// aligned word of `word` bytes at its start (1 for no alignment).
    pub fn check(&self, what: &'static str, word: u64) -> Result<(), LayoutError> {
        if self.bytes < word.max(1) {
            return Err(LayoutError {
                what,
                why: "it is too small",
            });
        }
        if self.page_span().is_none() {
            return Err(LayoutError {
                what,
                why: "its offset and length overflow",
            });
        }
        if word > 1 && self.offset % word != 0 {
            return Err(LayoutError {
                what,
                why: "it is not aligned for its word",
            });
        }
        Ok(())
    }

    /// The page-aligned span to `mmap` that covers this share, as
    /// `(map_offset, map_len, offset_of_share_within_map)`; `None` if the numbers overflow.
    pub fn page_span(&self) -> Option<(u64, u64, u64)> {
        use rig_amd::PAGE_BYTES as PAGE;
        let start = self.offset - self.offset % PAGE;
        let end = self.offset.checked_add(self.bytes)?;
        let end = end.checked_add(PAGE - 1)? / PAGE * PAGE;
        Some((start, end - start, self.offset - start))
    }
}

/// A [`Share`] that the GPU also addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuShare {
    /// Where the host maps it.
    pub host: Share,
    /// The GPU address of its first byte.
    pub gpu_address: u64,
}

/// The packets a hardware queue reads: rig-amd's own type, which the wire carries in its
/// own form ([`crate::wire`]) (PM4 on a compute queue of a GPU of one die, AQL on one of
/// several dies, SDMA on the copy queue).
pub use crate::wire::QueueKind;

/// The bytes of one unit of a queue of `kind`'s read and write positions and doorbell
/// value, as [`rig_shm::layout`] states them: PM4 counts dwords, AQL counts 64-byte
/// packets, SDMA counts bytes.
pub fn position_unit(kind: QueueKind) -> u64 {
    match kind {
        QueueKind::Pm4 => rig_shm::layout::PM4_POSITION_UNIT,
        QueueKind::Aql => rig_shm::layout::AQL_POSITION_UNIT,
        QueueKind::Sdma => rig_shm::layout::SDMA_POSITION_UNIT,
    }
}

/// A hardware queue the client fills with plain stores.
///
/// Ownership: the client writes the ring's packets, `write` and the doorbell; the queue
/// (GPU) writes `read`. Positions are 64-bit words that only grow, in
/// [`position_unit`]s, and index the ring modulo its size. Submitting is:
/// place packets, store the new write position into `write` (release order), then store
/// it into the doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueShare {
    /// The packets it reads.
    #[serde(with = "crate::wire::queue_kind")]
    pub kind: QueueKind,
    /// 0 for the queue made at open, then one more for each growth of this ring.
    pub generation: u32,
    /// The ring, a power of two of bytes of Pinned memory.
    pub ring: GpuShare,
    /// 8 bytes the queue writes its read position to.
    pub read: GpuShare,
    /// 8 bytes the queue reads its write position from.
    pub write: GpuShare,
    /// The queue's doorbell: the start of a 64-byte slot ([`rig_shm::layout::DOORBELL_SLOT_BYTES`]) of the device's
    /// doorbell page, laid out and rung as `rig-shm`'s doorbell protocol states (the value
    /// at offset 0, the engine's sleeping word at offset 8). Storing a write position there
    /// tells the queue to read up to it.
    pub doorbell: Share,
}

impl QueueShare {
    /// Checks what a client relies on before it maps and stores: a ring of a power of two
    /// of at least [`rig_shm::layout::MIN_RING_BYTES`] bytes, and 8-byte aligned position words and doorbell.
    pub fn check(&self) -> Result<(), LayoutError> {
        self.ring.host.check("a ring", 1)?;
        if !self.ring.host.bytes.is_power_of_two()
            || self.ring.host.bytes < rig_shm::layout::MIN_RING_BYTES
        {
            return Err(LayoutError {
                what: "a ring",
                why: "its size is not a power of two of at least 256 bytes (rig_shm::layout::MIN_RING_BYTES)",
            });
        }
        self.read.host.check("a read position", 8)?;
        self.write.host.check("a write position", 8)?;
        self.doorbell.check("a doorbell", 8)?;
        if self.doorbell.offset % rig_shm::layout::DOORBELL_SLOT_BYTES as u64 != 0 {
            return Err(LayoutError {
                what: "a doorbell",
                why: "it does not start a 64-byte slot",
            });
        }
        Ok(())
    }
}

/// A share whose layout a client cannot use; rigd and the client disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rigd shared {what} the client cannot use: {why}; rigd and rig-client are out of step")]
pub struct LayoutError {
    /// What was shared.
    pub what: &'static str,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The argument segment: Pinned memory that launches' argument bytes go into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentShare {
    /// 0 for the segment made at open, then one more for each growth.
    pub generation: u32,
    /// The segment.
    pub memory: GpuShare,
}

/// The device's timeline word: 8 bytes of host memory, an unsigned 64-bit integer in the
/// host's byte order, that each value's release writes once its work completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordShare {
    /// Where it lies.
    pub memory: GpuShare,
    /// The value the word holds at open; the device's values start after it.
    pub first: u64,
}

/// The generations of queues and segment a client has installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Generations {
    /// Of the compute queue.
    pub compute: u32,
    /// Of the copy queue.
    pub copy: u32,
    /// Of the argument segment.
    pub args: u32,
}

/// A new device and everything a client maps to submit to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceOpened {
    /// The device.
    pub device: DeviceId,
    /// Its facts.
    pub facts: Facts,
    /// `"COMPUTE:0"`.
    pub compute: QueueShare,
    /// `"COPY:0"`.
    pub copy: QueueShare,
    /// The argument segment.
    pub args: SegmentShare,
    /// The timeline word.
    pub word: WordShare,
    /// 8 bytes into which the client stores (release) the last value it gave to submit,
    /// so rigd's hang watchdog and `rigctl` see outstanding work.
    pub submitted: Share,
    /// An eventfd that becomes readable after a release or a fault; a client sleeps on it.
    pub interrupt: FdIndex,
    /// 4 bytes that rigd sets nonzero (release) once it lost the device, before the stop
    /// writes the last value into the word: a client that sees its value reached reads this
    /// to tell a loss from a completion, then asks [`Request::DeviceStatus`] why.
    pub lost: Share,
    /// The interrupt context every release of the device carries (RELEASE_MEM's INT_CTXID,
    /// SDMA TRAP's INT_CONTEXT): the path's, nonzero (through KFD, the id of the signal
    /// event the path's interrupt handler waits on, so the kernel finds that event at once).
    pub context: u32,
}

impl DeviceOpened {
    /// Checks every share's layout (see [`QueueShare::check`]).
    pub fn check(&self) -> Result<(), LayoutError> {
        self.compute.check()?;
        self.copy.check()?;
        self.args.memory.host.check("the argument segment", 8)?;
        self.word.memory.host.check("the timeline word", 8)?;
        self.submitted.check("the submitted word", 8)?;
        self.lost.check("the lost flag", 4)?;
        Ok(())
    }

    /// Every descriptor index the message names.
    pub fn fd_indices(&self) -> Vec<FdIndex> {
        let mut v = Vec::with_capacity(16);
        for q in [&self.compute, &self.copy] {
            v.extend([
                q.ring.host.fd,
                q.read.host.fd,
                q.write.host.fd,
                q.doorbell.fd,
            ]);
        }
        v.extend([
            self.args.memory.host.fd,
            self.word.memory.host.fd,
            self.submitted.fd,
            self.lost.fd,
        ]);
        v.push(self.interrupt);
        v
    }
}

/// What a growth made.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Grown {
    /// A new compute queue, if the compute ring grew.
    pub compute: Option<QueueShare>,
    /// A new copy queue, if the copy ring grew.
    pub copy: Option<QueueShare>,
    /// A new argument segment, if it grew.
    pub args: Option<SegmentShare>,
}

impl Grown {
    /// Checks every share's layout (see [`QueueShare::check`]).
    pub fn check(&self) -> Result<(), LayoutError> {
        for q in [&self.compute, &self.copy].into_iter().flatten() {
            q.check()?;
        }
        if let Some(a) = &self.args {
            a.memory.host.check("the argument segment", 8)?;
        }
        Ok(())
    }

    /// Every descriptor index the message names.
    pub fn fd_indices(&self) -> Vec<FdIndex> {
        let mut v = Vec::new();
        for q in [&self.compute, &self.copy].into_iter().flatten() {
            v.extend([
                q.ring.host.fd,
                q.read.host.fd,
                q.write.host.fd,
                q.doorbell.fd,
            ]);
        }
        if let Some(a) = &self.args {
            v.push(a.memory.host.fd);
        }
        v
    }
}

// ---------------------------------------------------------------------------------------
// GPUs, memory, facts
// ---------------------------------------------------------------------------------------

/// How rigd reaches a GPU. Named in lowercase by self-describing formats (`"kfd"` in
/// `rigctl --json`), as rigctl's tables name it; bincode sends the variant's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// The simulated GPU.
    Sim,
    /// Linux's amdgpu driver through `/dev/kfd`.
    Kfd,
    /// The PCI function itself through VFIO.
    Vfio,
}

/// A GPU rigd serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Its number among the GPUs rigd serves, in bus order.
    pub index: u32,
    /// Its name, such as `"AMD:0"`.
    pub name: String,
    /// Its processor, such as `"gfx1100"`.
    pub arch: String,
    /// How rigd reaches it.
    pub path: PathKind,
    /// Its PCI function, such as `"0000:41:00.0"`; `None` for the simulated GPU.
    pub bus: Option<String>,
    /// The bytes of its own memory.
    pub budget: u64,
    /// True iff it is the simulated GPU.
    pub simulated: bool,
    /// Why rigd cannot drive it (listed, but `OpenDevice` refuses it); `None` when it can.
    pub unavailable: Option<String>,
}

/// The kinds of memory a device allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemoryKind {
    /// GPU memory the host does not address.
    Device,
    /// Host memory the GPU addresses, shared with the client as a memfd.
    Pinned,
    /// GPU memory the host addresses through the memory BAR, write-combined.
    Mapped,
}

/// Which budget a [`Response::NoMemory`] ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Shortage {
    /// The GPU's memory.
    Gpu,
    /// The host's memory or another resource of the path.
    Host,
    /// The client's quota in rigd's configuration.
    Quota,
}

/// A configured limit that refused a request's memory (in [`Response::NoMemory`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limit {
    /// The limit's name in rigd's configuration, such as `limits.memory_bytes`.
    pub name: String,
    /// Its value in bytes (for a share of the GPU, the bytes that share comes to).
    pub value: u64,
    /// The bytes beyond it that the request needed: what is missing.
    pub missing: u64,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes missing under {} ({} bytes)",
            self.missing, self.name, self.value
        )
    }
}

/// How a value's completion shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Completion {
    /// The queue that releases a value stores it into the timeline word.
    Store,
}

/// Which waits for another device's point the compute queue makes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Waits {
    /// Waits for a word that another device's work stores.
    pub stores: bool,
    /// Waits for a word that the host stores.
    pub hosts: bool,
}

/// A three-part IP version, such as GC 11.0.0 or SDMA 6.0.0: rig-amd's own type, which the
/// wire carries in its own form ([`crate::wire`]).
pub use crate::wire::IpVersion;

/// The largest ring a growth can make per queue; bigger submissions never fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RingLimits {
    /// Bytes of the largest compute ring.
    pub compute: u64,
    /// Bytes of the largest copy ring.
    pub copy: u64,
}

/// A device's facts (`docs/client.md`, What rigd hands over at open), plus what a client needs
/// to encode packets for the GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// The GPU's processor, such as `"gfx1201"`.
    pub arch: String,
    /// The bytes of the GPU's own memory.
    pub budget: u64,
    /// The queues: `["COMPUTE:0", "COPY:0"]`, indices 0 and 1.
    pub queues: Vec<String>,
    /// The queue of the copy engine: `Some(1)`.
    pub copy_engine: Option<u32>,
    /// `Store`: the releasing queue writes the word.
    pub completion: Completion,
    /// Which waits the compute queue makes (both or neither).
    pub waits: Waits,
    /// False: submitting writes memory and calls no system function.
    pub may_block: bool,
    /// Milliseconds after which work whose word has not moved hung; `None` where the
    /// kernel driver bounds how long work runs.
    pub hang_ms: Option<u64>,
    /// True iff the device maps host memory (`MapHost`).
    pub maps_host: bool,
    /// False: the host does not address Device memory.
    pub host_addresses: bool,
    /// 4096: allocations are whole pages at page-aligned GPU addresses.
    pub alignment: u64,
    /// Bytes of the L2 and MALL together, where the path knows them.
    pub cache_bytes: Option<u64>,
    /// The GPU address of the timeline word.
    pub word: u64,
    /// The GPU's PCI function, where it has one.
    pub bus: Option<String>,
    /// The GC version, which the compute queue's registers and packets follow.
    #[serde(with = "crate::wire::ip_version")]
    pub gc: IpVersion,
    /// The SDMA version, which the copy queue's packets follow.
    #[serde(with = "crate::wire::ip_version")]
    pub sdma: IpVersion,
    /// The version of the compute queues' firmware.
    pub mec: u32,
    /// The compute queue's packets: `Pm4` or `Aql`.
    #[serde(with = "crate::wire::queue_kind")]
    pub compute: QueueKind,
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
    /// The most bytes one SDMA linear-copy packet moves.
    pub linear_copy_bytes: u64,
    /// The frequency of the GPU's clock that profile stamps count, in hertz.
    pub clock_hz: u64,
    /// How the device reads that clock against the host's.
    pub clock: ClockSource,
    /// The largest rings a growth makes.
    pub most_ring: RingLimits,
}

// ---------------------------------------------------------------------------------------
// Code
// ---------------------------------------------------------------------------------------

/// What a launch of one kernel needs: its entry (`code`, `params`, `threads`) plus
/// what the client needs to encode its dispatch and fill its kernel arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The GPU address of the kernel descriptor (the symbol `name.kd`), which a dispatch names.
    pub code: u64,
    /// Bytes of the explicit arguments; a launch's parameters must be at least this long.
    pub params: u32,
    /// The most work-items of a work-group.
    pub max_threads: u32,
    /// Bytes of the kernel-argument segment the kernel reads, hidden arguments included.
    pub kernarg_size: u32,
    /// Alignment of the kernel-argument segment in bytes.
    pub kernarg_align: u32,
    /// Bytes of local data share a group takes before the launch's own.
    pub group_segment: u32,
    /// Bytes of scratch per work-item.
    pub private_segment: u32,
    /// True iff the kernel runs in waves of 64.
    pub wave64: bool,
    /// The 64 bytes of the kernel descriptor, as the code object holds them.
    pub descriptor: Descriptor,
    /// Where the hidden arguments the kernel reads lie, which the client fills after the
    /// explicit ones: rig-amd's own layout, the hidden part of the [`Entry::plan`] that
    /// `rig_amd::kernarg::layout` follows.
    #[serde(with = "crate::wire::hidden_layout")]
    pub hidden: crate::wire::HiddenLayout,
    /// The scratch a PM4 dispatch names; `None` if the kernel needs none or the queue (AQL)
    /// hands scratch itself.
    pub scratch: Option<Scratch>,
}

impl Entry {
    /// The kernel's argument plan, as `rig_amd::kernarg::layout` takes it.
    pub fn plan(&self) -> rig_amd::kernarg::KernargPlan {
        rig_amd::kernarg::KernargPlan {
            explicit_size: self.params,
            size: self.kernarg_size,
            align: self.kernarg_align,
            hidden: self.hidden,
        }
    }

    /// Checks that a client can fill the kernel arguments as described without writing
    /// outside `kernarg_size` bytes: explicit arguments fit, and each hidden argument is
    /// naturally aligned for its size (rig-amd's `Hidden::size`) inside the segment.
    pub fn check(&self) -> Result<(), LayoutError> {
        let what = "a kernel entry";
        if self.params > self.kernarg_size {
            return Err(LayoutError {
                what,
                why: "its explicit arguments exceed its argument segment",
            });
        }
        for (h, offset) in self.hidden.slots() {
            let size = h.size().unwrap_or(8);
            if offset % size != 0 {
                return Err(LayoutError {
                    what,
                    why: "a hidden argument has a bad size or alignment",
                });
            }
            if u64::from(offset) + u64::from(size) > u64::from(self.kernarg_size) {
                return Err(LayoutError {
                    what,
                    why: "a hidden argument lies past its argument segment",
                });
            }
        }
        Ok(())
    }
}

/// The 64 bytes of an AMDGPU kernel descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Descriptor(pub [u8; 64]);

impl Serialize for Descriptor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0[..].serialize(s)
    }
}

impl<'de> Deserialize<'de> for Descriptor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<u8>::deserialize(d)?;
        let n = v.len();
        let bytes: [u8; 64] = v.try_into().map_err(|_| {
            serde::de::Error::invalid_length(n, &"the 64 bytes of a kernel descriptor")
        })?;
        Ok(Descriptor(bytes))
    }
}

/// Scratch memory that a PM4 dispatch names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scratch {
    /// The GPU address of its first byte.
    pub gpu_address: u64,
    /// Its bytes.
    pub bytes: u64,
    /// Bytes of scratch a wave takes.
    pub wave_bytes: u32,
    /// How many waves it holds at once.
    pub waves: u32,
}

// ---------------------------------------------------------------------------------------
// Time and status
// ---------------------------------------------------------------------------------------

/// One read of the GPU's clock through the path's source, placed on the host's
/// `CLOCK_MONOTONIC`: the GPU's counter was read between `host_before_ns - gap_ns` and
/// `host_after_ns`.
///
/// Where rigd reads the counter itself, the two host times are its readings around the read,
/// and `gap_ns` is 0. Through KFD, whose `GET_CLOCK_COUNTERS` samples the host's raw clock
/// after it reads the counter, they are that sample mapped to `CLOCK_MONOTONIC` by a pair
/// of readings of rigd's own (the pair's interval around the mapped sample), and `gap_ns`
/// bounds the one-sided gap between the counter's read and the sample: the time from rigd's
/// reading before the call to the mapped sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSample {
    /// The source's counter, in ticks of [`Facts::clock_hz`].
    pub gpu: u64,
    /// The host's clock at the start of the read's interval, in nanoseconds.
    pub host_before_ns: u64,
    /// The host's clock at its end, in nanoseconds.
    pub host_after_ns: u64,
    /// How long before `host_before_ns` the counter may have been read, in nanoseconds.
    pub gap_ns: u64,
}

/// How a device reads the GPU's clock, the clock of its profile stamps, against the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClockSource {
    /// rigd reads a counter of the clock ([`Request::SampleClock`]): the device measures at
    /// open and again as it converts stamps, at most every 62.5 ms.
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

/// What ended a device's work: the kind of [`Fault`].
///
/// Stable: kinds are only ever appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FaultKind {
    /// An access the device's page table refused: `address` and `write` say which, `pc` the
    /// instruction where a kernel made it (none where the command processor or the copy
    /// engine did).
    MemoryFault,
    /// Words at `pc` that are no instruction of the GPU.
    IllegalInstruction,
    /// An instruction at `pc` the GPU (or the simulator's interpreter) does not run.
    UnsupportedInstruction,
    /// The kernel's `s_trap` at `pc`.
    Trap,
    /// A packet the queue cannot run (unknown, malformed, or ring positions out of range)
    /// at read position `position`.
    BadPacket,
    /// The hang watchdog: the work made no progress for the device's hang bound.
    Hang,
    /// The GPU was reset.
    Reset,
    /// The client stopped the device with a reason of its own (such as a consumer of a lost
    /// producer); `detail` is that reason.
    StoppedByClient,
    /// An administrator stopped the device.
    StoppedByAdministrator,
    /// rigd, its path or the simulator failed; `detail` says how.
    Internal,
    /// Given by the client, never by rigd: the device's work waited on the GPU for a point of
    /// another device that was lost before it reached it; `detail` names that device.
    Producer,
    /// Given by the client, never by rigd: rigd no longer answers, and the device's work is
    /// gone with it.
    Disconnected,
    /// Given by the client, never by rigd: a profiled value completed, but a clock stamp its
    /// work should have written reads as never written; `detail` names the value and stamp.
    Unstamped,
}

/// A hardware queue, as a fault names it: `COMPUTE:index` or `COPY:index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QueueRef {
    /// The packets it reads (`Sdma` for the copy engine's queue).
    #[serde(with = "crate::wire::queue_kind")]
    pub kind: QueueKind,
    /// Its number among the device's queues of its engine (0 for `COMPUTE:0`, `COPY:0`).
    pub index: u32,
}

impl std::fmt::Display for QueueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let engine = match self.kind {
            QueueKind::Sdma => "COPY",
            _ => "COMPUTE",
        };
        write!(f, "{engine}:{}", self.index)
    }
}

/// The most bytes of [`Fault::detail`]: rigd cuts a longer detail (a client's reason for
/// its stop among them) at a character boundary and marks the cut, since a fault is kept,
/// and shown by `rigctl`, as long as its device.
pub const MOST_FAULT_DETAIL: usize = 1024;

/// Why rigd lost a device: the fault of its work, a hang, a reset or a stop, with the facts
/// the GPU gave. Fields a kind has no fact for are `None`.
///
/// Its `Display` reads as a sentence, such as "memory fault at 0x0 (write) by the
/// instruction at 0x1a2c on COMPUTE:0 (vmid 1): write to an unmapped page".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fault {
    /// What happened.
    pub kind: FaultKind,
    /// The queue whose work faulted, where one did.
    pub queue: Option<QueueRef>,
    /// The VMID of the device's address space, where the GPU reported one.
    pub vmid: Option<u32>,
    /// The GPU address the faulting access named (for a memory fault).
    pub address: Option<u64>,
    /// Whether that access was a write (for a memory fault).
    pub write: Option<bool>,
    /// The GPU address of the faulting instruction (for a kernel's fault).
    pub pc: Option<u64>,
    /// The queue's read position at the packet, in its kind's units (for a bad packet).
    pub position: Option<u64>,
    /// What else the GPU, rigd or the client said, at most [`MOST_FAULT_DETAIL`] bytes as
    /// rigd sends it; may be empty.
    pub detail: String,
}

impl Fault {
    /// A fault of `kind` with `detail` and no other facts.
    pub fn new(kind: FaultKind, detail: impl Into<String>) -> Fault {
        Fault {
            kind,
            queue: None,
            vmid: None,
            address: None,
            write: None,
            pc: None,
            position: None,
            detail: detail.into(),
        }
    }

    /// The fault with `detail` cut to [`MOST_FAULT_DETAIL`] bytes at a character boundary,
    /// the mark [`crate::CUT_MARK`] included when cut.
    pub fn bounded(mut self) -> Fault {
        self.detail =
            crate::bounds::cut_marked(std::mem::take(&mut self.detail), MOST_FAULT_DETAIL);
        self
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |f: &mut std::fmt::Formatter<'_>, what: &str| match self.pc {
            Some(pc) => write!(f, "{what} at {pc:#x}"),
            None => f.write_str(what),
        };
        match self.kind {
            FaultKind::MemoryFault => {
                f.write_str("memory fault")?;
                if let Some(a) = self.address {
                    write!(f, " at {a:#x}")?;
                }
                match self.write {
                    Some(true) => f.write_str(" (write)")?,
                    Some(false) => f.write_str(" (read)")?,
                    None => {}
                }
                if let Some(pc) = self.pc {
                    write!(f, " by the instruction at {pc:#x}")?;
                }
            }
            FaultKind::IllegalInstruction => at(f, "illegal instruction")?,
            FaultKind::UnsupportedInstruction => at(f, "unsupported instruction")?,
            FaultKind::Trap => at(f, "trap")?,
            FaultKind::BadPacket => {
                f.write_str("bad packet")?;
                if let Some(p) = self.position {
                    write!(f, " at read position {p:#x}")?;
                }
            }
            FaultKind::Hang => f.write_str("hang")?,
            FaultKind::Reset => f.write_str("the GPU was reset")?,
            FaultKind::StoppedByClient => f.write_str("stopped by the client")?,
            FaultKind::StoppedByAdministrator => f.write_str("stopped by the administrator")?,
            FaultKind::Internal => f.write_str("internal error")?,
            // The detail names the producer and its own fault, which say it all.
            FaultKind::Producer if !self.detail.is_empty() => {
                return f.write_str(&self.detail);
            }
            FaultKind::Producer => f.write_str("a device its work waited for was lost")?,
            FaultKind::Disconnected => f.write_str("rigd no longer answers")?,
            FaultKind::Unstamped => f.write_str("a profile's clock stamp was never written")?,
        }
        match (self.queue, self.vmid) {
            (Some(q), Some(v)) => write!(f, " on {q} (vmid {v})")?,
            (Some(q), None) => write!(f, " on {q}")?,
            (None, Some(v)) => write!(f, " (vmid {v})")?,
            (None, None) => {}
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// How a device stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// `Some(fault)` once rigd lost the device (a fault, a hang, a reset, a stop with a
    /// reason); it runs no more work.
    pub lost: Option<Fault>,
    /// True once the device was stopped.
    pub stopped: bool,
    /// The last value the client published as submitted.
    pub submitted: u64,
    /// The value the timeline word holds.
    pub reached: u64,
}

// ---------------------------------------------------------------------------------------
// rigctl queries
// ---------------------------------------------------------------------------------------

/// A connected client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Its process id, from the socket's peer credentials.
    pub pid: u32,
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// The program name its `Hello` gave.
    pub program: String,
    /// The devices it holds open.
    pub devices: Vec<DeviceId>,
    /// Bytes of memory its devices hold, all kinds together.
    pub bytes: u64,
    /// The grant whose socket it connected on ([`Request::Grant`]); `None` on rigd's own.
    pub grant: Option<String>,
    /// Its pod and container as its cgroup names them (Kubernetes' kubepods hierarchy);
    /// `None` for a process outside a pod.
    pub pod: Option<PodOf>,
}

/// A process's pod and container, read from `/proc/PID/cgroup` when it connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodOf {
    /// The pod's UID.
    pub uid: String,
    /// The container's id (the runtime's, such as containerd's 64 hex digits); `None`
    /// where the cgroup ends at the pod.
    pub container: Option<String>,
}

/// Bytes a device holds, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryHeld {
    /// Device memory, images included.
    pub device: u64,
    /// Pinned memory, rings and segments included.
    pub pinned: u64,
    /// Mapped memory.
    pub mapped: u64,
    /// Host memory mapped with `MapHost`.
    pub host: u64,
}

impl MemoryHeld {
    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.device
            .saturating_add(self.pinned)
            .saturating_add(self.mapped)
            .saturating_add(self.host)
    }
}

/// An open device, in brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The device.
    pub device: DeviceId,
    /// The GPU index it runs on.
    pub gpu: u32,
    /// The process id of the client that opened it.
    pub owner_pid: u32,
    /// The memory it holds.
    pub memory: MemoryHeld,
    /// `Some(fault)` once rigd lost it.
    pub lost: Option<Fault>,
}

/// A ring's state as rigd reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingState {
    /// The queue's name, such as `"COMPUTE:0"`.
    pub queue: String,
    /// The packets it reads.
    #[serde(with = "crate::wire::queue_kind")]
    pub kind: QueueKind,
    /// Its generation.
    pub generation: u32,
    /// The ring's bytes.
    pub bytes: u64,
    /// The read position, in the kind's units.
    pub read: u64,
    /// The write position, in the kind's units.
    pub write: u64,
}

/// One device in detail, for `rigctl device`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// The brief.
    pub info: DeviceInfo,
    /// Its facts.
    pub facts: Facts,
    /// Its rings, retired ones that still run included.
    pub rings: Vec<RingState>,
    /// Images loaded.
    pub images: u32,
    /// Regions held.
    pub regions: u32,
    /// The last value the client published as submitted.
    pub submitted: u64,
    /// The value the timeline word holds.
    pub reached: u64,
    /// Faults reported for its work, oldest first.
    pub faults: Vec<Fault>,
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// What kind of failure an [`ErrorReply`] reports. Stable: codes are only ever appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request was malformed or not allowed in the connection's state.
    BadRequest,
    /// Client and daemon speak different protocol versions.
    VersionMismatch,
    /// The peer may not do this (another user's device, an inspection query).
    PermissionDenied,
    /// No GPU of that index.
    NoSuchGpu,
    /// No device of that id belongs to this client.
    NoSuchDevice,
    /// No region of that id belongs to the device.
    NoSuchRegion,
    /// No image of that id belongs to the device.
    NoSuchImage,
    /// An argument is out of range (zero bytes, an unaligned offset, a size not a multiple
    /// of 4).
    InvalidArgument,
    /// The client's quota forbids it (too many devices or connections).
    Quota,
    /// The code object was refused: not one, for another processor, or too much LDS.
    ImageRefused,
    /// The kernel cannot launch on this device, as the message says.
    EntryRefused,
    /// The device is lost; the message says why.
    Lost,
    /// The device is stopped and takes no more work.
    Stopped,
    /// The GPU or its path failed; the device may be lost.
    Fault,
    /// rigd itself failed; its log says more.
    Internal,
}

/// A failed request: a stable code and a lowercase message a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorReply {
    /// The kind of failure.
    pub code: ErrorCode,
    /// What happened and what to do about it.
    pub message: String,
}

impl ErrorReply {
    /// An error reply.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorReply {
            code,
            message: message.into(),
        }
    }
}
