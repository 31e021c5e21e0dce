//! rigd's configuration: the TOML file, its defaults, and the access check it drives.
//!
//! The repository's `config/rigd.toml` is compiled in as the embedded default, so the file an
//! operator reads is the configuration rigd runs with when none is given. This module owns
//! parsing and validation; it does not open sockets or look at GPUs.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The embedded default configuration (the repository's `config/rigd.toml`).
pub const DEFAULT_TOML: &str = include_str!("../../config/rigd.toml");

/// Where rigd looks for its configuration when `--config` is not given.
pub const SYSTEM_CONFIG: &str = "/etc/rig/rigd.toml";

/// The socket path every client uses when `RIG_SOCKET` is unset.
pub const DEFAULT_SOCKET: &str = "/run/rig/rigd.sock";

/// Errors of reading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for rigd.
    #[error("the configuration {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A value is out of its range.
    #[error("the configuration {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to write instead.
        message: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The daemon section.
    #[serde(default)]
    pub daemon: Daemon,
    /// Who may connect.
    #[serde(default)]
    pub access: Access,
    /// Limits per user and for all clients.
    #[serde(default)]
    pub limits: Limits,
    /// Simulated GPUs to serve.
    #[serde(default)]
    pub sim: Vec<SimGpuConfig>,
    /// Connection slots and timeouts.
    #[serde(default)]
    pub connections: Connections,
    /// Code objects.
    #[serde(default)]
    pub images: Images,
    /// The metrics endpoint.
    #[serde(default)]
    pub metrics: Metrics,
    /// The kfd path: where KFD is found (the machine's, or an emulated one).
    #[serde(default)]
    pub kfd: KfdConfig,
    /// The vfio path: which PCI functions rigd may take.
    #[serde(default)]
    pub vfio: VfioConfig,
    /// Where the configuration came from (`None`: the embedded default).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `[daemon]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Daemon {
    /// The control socket's path.
    pub socket: PathBuf,
    /// The group that owns the socket, by name or number. Owning it lets a user reach the
    /// socket; it never makes one an administrator ([`Daemon::admin_group`]).
    pub group: Option<String>,
    /// The group whose members are rigd's administrators (inspect every client, stop and
    /// evict), by name or number; left out, only root and rigd's own user are.
    pub admin_group: Option<String>,
    /// The socket's permission bits.
    pub mode: u32,
    /// The most connections served at once, over all users (each costs rigd a descriptor).
    pub max_connections: usize,
    /// The default log filter.
    pub log: String,
}

impl Default for Daemon {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(DEFAULT_SOCKET),
            group: None,
            admin_group: None,
            mode: 0o660,
            max_connections: 1024,
            log: "info".into(),
        }
    }
}

/// `[access]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Access {
    /// Users allowed, by name or uid.
    pub users: Vec<String>,
    /// Groups whose members are allowed, by name or gid.
    pub groups: Vec<String>,
    /// Whether every local user is allowed.
    pub any: bool,
}

/// `[limits]`: what clients may hold, per user (uid) across all its connections, and what
/// all clients together may make rigd hold. A value of 0 where the comment says so means
/// "sized at start" (see [`Limits`] fields and `config/rigd.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Bytes of memory one user may hold: allocations of every kind, host mappings, images,
    /// rings, segments and control pages of its devices.
    pub memory_bytes: u64,
    /// Devices one user may hold open.
    pub devices: u32,
    /// Allocations, host mappings, images and peer-word mappings one user may hold.
    pub objects: u32,
    /// The percentage of each GPU's own memory (Device and Mapped memory) one user may hold,
    /// so that no user starves the others of a GPU.
    pub gpu_share_percent: u32,
    /// Bytes of host memory rigd makes for all clients together (Pinned and Mapped memory,
    /// rings, segments, control and doorbell pages). 0: half the machine's memory.
    pub host_memory_bytes: u64,
    /// File descriptors rigd may hold for one user's memory and devices. 0: a quarter of
    /// what rigd's `RLIMIT_NOFILE` leaves after what it keeps for connections.
    pub fds: u32,
    /// Memory mappings rigd may hold for one user (mapped memfds, queue thread stacks). 0: a
    /// quarter of what `vm.max_map_count` leaves after what rigd keeps for itself.
    pub mappings: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 8 << 30,
            devices: 64,
            objects: 65536,
            gpu_share_percent: 50,
            host_memory_bytes: 0,
            fds: 0,
            mappings: 0,
        }
    }
}

/// The `[kfd]` section: where rigd looks for KFD.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KfdConfig {
    /// The KFD device; rigd lists KFD's GPUs when it exists.
    pub device: PathBuf,
    /// An emulated KFD's socket (`rig-kfd-emu --socket`), used instead of the machine's.
    pub emulated: Option<PathBuf>,
    /// The emulated KFD's topology tree (`rig-kfd-emu --topology`); the machine's is
    /// `<sysfs>/class/kfd/kfd/topology`.
    pub topology: Option<PathBuf>,
    /// Serve KFD's GPUs through the kfd path (on by default; off, they are listed with that
    /// reason).
    pub serve: bool,
    /// The `rig-worker` program rigd runs each client's KFD devices in (one KFD process and
    /// GPU address space per client); default: the file beside rigd's own executable.
    pub worker: Option<PathBuf>,
    /// One uid every worker runs as, instead of a dynamic uid each; `0` keeps them root,
    /// rigd's user (unsafe: a client's KFD process then holds root). A worker needs only
    /// `/dev/kfd` and the render nodes (their group, or the emulated KFD's socket).
    pub worker_uid: Option<u32>,
    /// The gid workers run as; default: the group of `device` where it may read and write
    /// it, else the worker's uid's number.
    pub worker_gid: Option<u32>,
    /// The uids rigd (as root) gives its workers when `worker_uid` is not set, `first-last`:
    /// each worker a uid of its own that no other worker holds and the user database does
    /// not name. Default: `61184-65519`, systemd's range for dynamic users.
    pub worker_uids: String,
}

impl Default for KfdConfig {
    fn default() -> Self {
        Self {
            device: PathBuf::from("/dev/kfd"),
            emulated: None,
            topology: None,
            serve: true,
            worker: None,
            worker_uid: None,
            worker_gid: None,
            worker_uids: format!(
                "{}-{}",
                crate::path::worker::DEFAULT_WORKER_UIDS.0,
                crate::path::worker::DEFAULT_WORKER_UIDS.1
            ),
        }
    }
}

/// The `[vfio]` section: the PCI functions rigd may take for its vfio path (the function
/// driven with no kernel driver, through VFIO). Left empty, rigd takes none.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct VfioConfig {
    /// The functions, each by its PCI address (`0000:03:00.0`) or by its vendor and device
    /// ids (`1002:744c`: every function with them); each named once.
    pub allow: Vec<VfioFunction>,
}

/// A function `[vfio] allow` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum VfioFunction {
    /// One function, by its PCI address.
    Address(rig_vfio::Bdf),
    /// Every function with these PCI ids.
    Ids {
        /// The vendor id (AMD's, 0x1002).
        vendor: u16,
        /// The device id.
        device: u16,
    },
}

impl VfioFunction {
    /// Whether it names the function at `bdf` with PCI ids `vendor`:`device`.
    pub fn names(&self, bdf: rig_vfio::Bdf, vendor: u16, device: u16) -> bool {
        match *self {
            VfioFunction::Address(a) => a == bdf,
            VfioFunction::Ids {
                vendor: v,
                device: d,
            } => (v, d) == (vendor, device),
        }
    }
}

impl std::fmt::Display for VfioFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VfioFunction::Address(a) => write!(f, "{a}"),
            VfioFunction::Ids { vendor, device } => write!(f, "{vendor:04x}:{device:04x}"),
        }
    }
}

impl std::str::FromStr for VfioFunction {
    type Err = String;

    /// A PCI address has a `.` before its function number; a vendor:device pair is two
    /// groups of four hex digits.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains('.') {
            return s.parse().map(VfioFunction::Address).map_err(|_| {
                format!(
                    "vfio.allow {s:?} is not a PCI address: write it as lspci -D prints it, \
                     domain:bus:device.function in hex, such as \"0000:03:00.0\""
                )
            });
        }
        let hex4 = |t: &str| {
            if t.len() == 4 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
                u16::from_str_radix(t, 16).ok()
            } else {
                None
            }
        };
        let (vendor, device) = s
            .split_once(':')
            .and_then(|(v, d)| Some((hex4(v)?, hex4(d)?)))
            .ok_or_else(|| {
                format!(
                    "vfio.allow {s:?} is neither a PCI address (\"0000:03:00.0\") nor a \
                     vendor:device pair of four hex digits each (\"1002:744c\", as lspci -nn prints it)"
                )
            })?;
        if vendor != rig_amd::gpu::AMD_VENDOR {
            return Err(format!(
                "vfio.allow {s:?} names vendor {vendor:04x}, not AMD ({:04x}): rigd's vfio path \
                 takes AMD GPUs only",
                rig_amd::gpu::AMD_VENDOR
            ));
        }
        Ok(VfioFunction::Ids { vendor, device })
    }
}

impl TryFrom<String> for VfioFunction {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl VfioConfig {
    fn validate(&self) -> Result<(), String> {
        for (i, a) in self.allow.iter().enumerate() {
            if let Some(j) = self.allow[..i].iter().position(|b| b == a) {
                return Err(format!(
                    "vfio.allow names {a} twice (entries {} and {}); list each function once",
                    j + 1,
                    i + 1
                ));
            }
        }
        Ok(())
    }
}

/// One `[[sim]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimGpuConfig {
    /// The processor, such as `gfx1100`.
    pub processor: String,
    /// Bytes of simulated VRAM.
    #[serde(default = "default_sim_memory")]
    pub memory_bytes: u64,
    /// The hang bound, in milliseconds.
    #[serde(default = "default_hang_ms")]
    pub hang_ms: u32,
    /// How its clock runs against the host's (`[sim.clock]`).
    #[serde(default)]
    pub clock: SimClockConfig,
}

/// The `[sim.clock]` table of a `[[sim]]` entry: how the simulated GPU's clock runs against
/// the host's, so that profiles can be tested against a known clock error
/// (`rig_sim::clock`). Every key is optional; the defaults are an exact 100 MHz counter.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimClockConfig {
    /// Ticks per second the GPU states (its facts' `clock_hz`).
    pub hz: u64,
    /// The counter at the GPU's creation.
    pub offset: u64,
    /// How much faster than `hz` the counter runs, in parts per million (negative: slower).
    pub drift_ppm: f64,
    /// Nanoseconds a read of the counter takes.
    pub read_ns: u64,
    /// The counter rigd reads less the counter the GPU's stamps write, in ticks (a GPU whose
    /// source reads another counter of the clock's rate, as KFD's on GFX12).
    pub constant: i64,
    /// One read of the counter (counting from 1 over the GPU's life) that is preempted for
    /// `stall_ms`.
    pub stall_read: Option<u64>,
    /// How long that read is preempted, in milliseconds.
    pub stall_ms: u64,
}

impl Default for SimClockConfig {
    fn default() -> Self {
        let m = rig_sim::ClockModel::default();
        SimClockConfig {
            hz: m.hz,
            offset: m.offset,
            drift_ppm: m.drift_ppm,
            read_ns: m.read_ns,
            constant: m.constant,
            stall_read: None,
            stall_ms: 0,
        }
    }
}

/// The most drift a simulated clock is given, in ppm: far past any crystal's.
const MOST_DRIFT_PPM: f64 = 10_000.0;
/// The longest a read of a simulated clock takes, in nanoseconds.
const MOST_READ_NS: u64 = 1_000_000;
/// The longest a preempted read of a simulated clock stalls, in milliseconds.
const MOST_STALL_MS: u64 = 10_000;

impl SimClockConfig {
    /// The simulator's model of this clock.
    pub fn model(&self) -> rig_sim::ClockModel {
        rig_sim::ClockModel {
            hz: self.hz,
            offset: self.offset,
            drift_ppm: self.drift_ppm,
            read_ns: self.read_ns,
            constant: self.constant,
            stall: self.stall_read.map(|read| rig_sim::Stall {
                read,
                ns: self.stall_ms.saturating_mul(1_000_000),
            }),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.hz == 0 {
            return Err("sim.clock.hz must be at least 1".into());
        }
        if self.drift_ppm.is_nan() || self.drift_ppm.abs() > MOST_DRIFT_PPM {
            return Err(format!(
                "sim.clock.drift_ppm {} must lie between -{MOST_DRIFT_PPM} and {MOST_DRIFT_PPM}",
                self.drift_ppm
            ));
        }
        if self.read_ns > MOST_READ_NS {
            return Err(format!(
                "sim.clock.read_ns {} is above {MOST_READ_NS}",
                self.read_ns
            ));
        }
        match self.stall_read {
            Some(0) => Err("sim.clock.stall_read counts reads from 1".into()),
            Some(_) if self.stall_ms == 0 || self.stall_ms > MOST_STALL_MS => Err(format!(
                "sim.clock.stall_ms {} must be from 1 to {MOST_STALL_MS} with stall_read",
                self.stall_ms
            )),
            None if self.stall_ms != 0 => {
                Err("sim.clock.stall_ms needs stall_read, the read it stalls".into())
            }
            _ => Ok(()),
        }
    }
}

fn default_sim_memory() -> u64 {
    4 << 30
}

fn default_hang_ms() -> u32 {
    2000
}

impl SimGpuConfig {
    /// The embedded default simulated GPU: one gfx1100 with the default memory and hang bound.
    pub fn embedded_default() -> Self {
        Self {
            processor: "gfx1100".into(),
            memory_bytes: default_sim_memory(),
            hang_ms: default_hang_ms(),
            clock: SimClockConfig::default(),
        }
    }
}

impl Config {
    /// Parses `text`, naming `path` in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        c.validate(path)?;
        Ok(c)
    }

    /// The embedded default.
    pub fn embedded() -> Self {
        // PANIC: the embedded file is checked by a unit test.
        Self::parse(DEFAULT_TOML, Path::new("<embedded config/rigd.toml>"))
            .expect("embedded configuration parses")
    }

    /// Loads the configuration: `explicit` if given (it must exist), else
    /// [`SYSTEM_CONFIG`] if it exists, else the embedded default.
    pub fn load(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        let path = match explicit {
            Some(p) => p.to_owned(),
            None if Path::new(SYSTEM_CONFIG).exists() => PathBuf::from(SYSTEM_CONFIG),
            None => return Ok(Self::embedded()),
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let mut c = Self::parse(&text, &path)?;
        c.source = Some(path);
        Ok(c)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        if self.daemon.mode & !0o777 != 0 {
            return Err(invalid(format!(
                "daemon.mode {:#o} has bits beyond 0o777; write permission bits such as 0o660",
                self.daemon.mode
            )));
        }
        if self.daemon.max_connections == 0 {
            return Err(invalid("daemon.max_connections must be at least 1".into()));
        }
        if let Err(e) = crate::logging::parse_filter(&self.daemon.log) {
            return Err(invalid(e.to_string()));
        }
        if self.daemon.socket.as_os_str().is_empty() {
            return Err(invalid("daemon.socket must not be empty".into()));
        }
        if let Err(e) = crate::path::worker::parse_uids(&self.kfd.worker_uids) {
            return Err(invalid(e));
        }
        // Checked here, so `--check`, a start and a reload refuse them alike.
        for (key, group) in [
            ("daemon.group", &self.daemon.group),
            ("metrics.group", &self.metrics.group),
        ] {
            if let Some(g) = group.as_ref().filter(|g| resolve_group(g).is_none()) {
                return Err(invalid(format!(
                    "{key} {g:?} names no group of this machine; create it (groupadd {g}, or systemd-sysusers with the package's sysusers.d file) or change {key}"
                )));
            }
        }
        if let Some(g) = self
            .daemon
            .admin_group
            .as_ref()
            .filter(|g| resolve_group(g).is_none())
        {
            return Err(invalid(format!(
                "daemon.admin_group {g:?} names no group of this machine; create it (groupadd {g}) or leave daemon.admin_group out (administrators are then root and rigd's user only)"
            )));
        }
        let l = &self.limits;
        if l.gpu_share_percent == 0 || l.gpu_share_percent > 100 {
            return Err(invalid(format!(
                "limits.gpu_share_percent {} must be from 1 to 100",
                l.gpu_share_percent
            )));
        }
        if l.devices == 0 || l.objects == 0 || l.memory_bytes == 0 {
            return Err(invalid(
                "limits.memory_bytes, limits.devices and limits.objects must be at least 1".into(),
            ));
        }
        for s in &self.sim {
            if rig_amd::gpu::Gpu::by_name(&s.processor).is_none() {
                let known: Vec<String> = rig_amd::gpu::GPUS.iter().map(|g| g.name()).collect();
                return Err(invalid(format!(
                    "sim.processor {:?} is not a GPU rig drives; use one of {}",
                    s.processor,
                    known.join(", ")
                )));
            }
            if s.memory_bytes < (1 << 20) {
                return Err(invalid(format!(
                    "sim.memory_bytes {} is below 1 MiB",
                    s.memory_bytes
                )));
            }
            if s.hang_ms == 0 {
                return Err(invalid("sim.hang_ms must be at least 1".into()));
            }
            s.clock.validate().map_err(invalid)?;
        }
        self.vfio.validate().map_err(invalid)?;
        self.connections.validate().map_err(invalid)?;
        self.images.validate().map_err(invalid)?;
        self.metrics.endpoint().map_err(invalid)?;
        Ok(())
    }
}

/// A connecting peer's identity, from `SO_PEERCRED` and `SO_PEERGROUPS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups, as recorded by the kernel when the peer connected.
    pub groups: Vec<u32>,
}

/// The access rule made from `[access]` with names resolved to numbers. SIGHUP may
/// replace it while rigd serves ([`AccessRule::replace`]); a connection is judged by the
/// rule in force when it is accepted.
#[derive(Debug)]
pub struct AccessRule {
    rules: std::sync::RwLock<Rules>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rules {
    any: bool,
    users: Vec<u32>,
    groups: Vec<u32>,
    own_uid: u32,
}

impl AccessRule {
    /// Resolves names. A name that does not exist on this machine is logged and skipped, so a
    /// configuration naming a group that the package has not yet made still starts.
    pub fn new(access: &Access, own_uid: u32) -> Self {
        let users = access
            .users
            .iter()
            .filter_map(|u| {
                let id = u.parse::<u32>().ok().or_else(|| {
                    nix::unistd::User::from_name(u)
                        .ok()
                        .flatten()
                        .map(|u| u.uid.as_raw())
                });
                if id.is_none() {
                    tracing::warn!(user = %u, "access.users names no user of this machine; skipped");
                }
                id
            })
            .collect();
        let groups = access
            .groups
            .iter()
            .filter_map(|g| {
                let id = resolve_group(g);
                if id.is_none() {
                    tracing::warn!(group = %g, "access.groups names no group of this machine; skipped");
                }
                id
            })
            .collect();
        Self {
            rules: std::sync::RwLock::new(Rules {
                any: access.any,
                users,
                groups,
                own_uid,
            }),
        }
    }

    fn rules(&self) -> std::sync::RwLockReadGuard<'_, Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `peer` may use rigd.
    pub fn allows(&self, peer: &Peer) -> bool {
        let r = self.rules();
        r.any
            || peer.uid == 0
            || peer.uid == r.own_uid
            || r.users.contains(&peer.uid)
            || r.groups.contains(&peer.gid)
            || peer.groups.iter().any(|g| r.groups.contains(g))
    }

    /// Puts `other`'s rules in force (a reload); says whether they differ from the old ones.
    pub fn replace(&self, other: AccessRule) -> bool {
        let new = other.rules.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut r = self.rules.write().unwrap_or_else(|e| e.into_inner());
        let changed = *r != new;
        *r = new;
        changed
    }
}

/// A group by name or number.
pub fn resolve_group(g: &str) -> Option<u32> {
    g.parse::<u32>().ok().or_else(|| {
        nix::unistd::Group::from_name(g)
            .ok()
            .flatten()
            .map(|g| g.gid.as_raw())
    })
}

/// `[connections]`: how many connections one user may hold and how long a connection may
/// take to say hello, to finish a frame it started, or to sit idle holding nothing.
/// `daemon.max_connections` is the cap over all users, which keeps rigd's descriptors
/// bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Connections {
    /// The most connections one uid may hold at once (root and rigd's own user included).
    pub per_uid: usize,
    /// Connections the kernel queues for rigd to accept (the `listen(2)` backlog): under a
    /// storm of connects, a client waits behind at most this many.
    pub backlog: u32,
    /// Milliseconds a new connection has to send its whole hello.
    pub hello_ms: u64,
    /// Milliseconds a frame may take from its first byte to its last, and an answer to be
    /// taken by the client.
    pub frame_ms: u64,
    /// Milliseconds a connection that holds no device may go without a request before it is
    /// closed; 0 never closes one. A connection holding a device is never closed for
    /// silence: its work goes through shared memory, not the socket.
    pub idle_ms: u64,
    /// Bytes of large frames (longer than 8 KiB) one uid may have in rigd's memory at
    /// once, over all its connections, arriving or being answered; at least one frame at
    /// the cap (16 MiB). A frame past it waits, unread, within `frame_ms`.
    pub frame_bytes_per_uid: usize,
    /// Bytes of large frames a second one uid may send over all its connections, after a
    /// burst of `frame_bytes_per_uid`; a frame past it waits, unread, within `frame_ms`.
    pub frame_bytes_per_second_per_uid: u64,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            per_uid: 64,
            backlog: 128,
            hello_ms: 5000,
            frame_ms: 10_000,
            idle_ms: 300_000,
            frame_bytes_per_uid: 64 << 20,
            frame_bytes_per_second_per_uid: 256 << 20,
        }
    }
}

impl Connections {
    fn validate(&self) -> Result<(), String> {
        if self.per_uid == 0 || self.backlog == 0 {
            return Err("connections.per_uid and connections.backlog must be at least 1".into());
        }
        if self.hello_ms == 0 || self.frame_ms == 0 {
            return Err("connections.hello_ms and connections.frame_ms must be at least 1".into());
        }
        if self.frame_bytes_per_second_per_uid < 1 << 20 {
            return Err(format!(
                "connections.frame_bytes_per_second_per_uid {} must be at least 1048576 (1 MiB a second)",
                self.frame_bytes_per_second_per_uid
            ));
        }
        if self.frame_bytes_per_uid < rig_proto::MAX_FRAME {
            return Err(format!(
                "connections.frame_bytes_per_uid {} must be at least one frame at the cap ({} bytes)",
                self.frame_bytes_per_uid,
                rig_proto::MAX_FRAME
            ));
        }
        Ok(())
    }
}

/// `[images]`: code objects clients load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Images {
    /// The most bytes of GPU memory one image may take once loaded (the span of its
    /// loadable segments), checked from its program headers before anything is allocated.
    pub max_bytes: u64,
}

impl Default for Images {
    fn default() -> Self {
        Self { max_bytes: 1 << 30 }
    }
}

impl Images {
    fn validate(&self) -> Result<(), String> {
        let most = rig_amd::code_object::MAX_IMAGE;
        if !(4096..=most).contains(&self.max_bytes) {
            return Err(format!(
                "images.max_bytes {} must lie between 4096 and {most} (4 GiB)",
                self.max_bytes
            ));
        }
        Ok(())
    }
}

/// `[metrics]`: the Prometheus endpoint (`GET /metrics` over HTTP, text format 0.0.4), off
/// unless `listen` names an address. It answers anyone who reaches it, so by default it
/// listens only on loopback or a local socket and shows other users' figures per uid, not
/// per process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// Where to serve: a unix socket path (beginning with `/`), a port alone (`9464`:
    /// loopback, `127.0.0.1:9464`), a TCP `address:port` on loopback (`[::1]:9464`), any
    /// other address only with [`Metrics::remote`], or empty for no endpoint.
    pub listen: String,
    /// The group owning a unix metrics socket, by name or number (mode 0660); left out,
    /// rigd's own group.
    pub group: Option<String>,
    /// Allow `listen` to name a TCP address other than loopback (every host that reaches it
    /// reads the figures).
    pub remote: bool,
    /// Series per client process (pid, uid, program) besides those per uid.
    pub per_client: bool,
}

/// Where the metrics endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsEndpoint {
    /// A unix socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(std::net::SocketAddr),
}

impl Metrics {
    /// The configured endpoint, `None` when metrics are off; an error names the key.
    pub fn endpoint(&self) -> Result<Option<MetricsEndpoint>, String> {
        let l = self.listen.trim();
        if l.is_empty() {
            return Ok(None);
        }
        if l.starts_with('/') {
            return Ok(Some(MetricsEndpoint::Unix(PathBuf::from(l))));
        }
        let addr = match l.parse::<u16>() {
            Ok(port) => std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)),
            Err(_) => l.parse::<std::net::SocketAddr>().map_err(|e| {
                format!(
                    "metrics.listen {l:?} is neither a unix socket path (beginning with /), a port, nor a TCP address such as 127.0.0.1:9464 ({e})"
                )
            })?,
        };
        if !addr.ip().is_loopback() && !self.remote {
            return Err(format!(
                "metrics.listen {addr} is not a loopback address: every host that reaches it reads the figures; listen on 127.0.0.1 or [::1] (or a unix socket path), or set metrics.remote = true to serve it there"
            ));
        }
        Ok(Some(MetricsEndpoint::Tcp(addr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_default_parses() {
        let c = Config::embedded();
        assert_eq!(c.daemon.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.daemon.mode, 0o660);
        assert!(c.sim.is_empty());
        assert_eq!(c.limits.devices, 64);
    }

    #[test]
    fn limits_are_checked() {
        for bad in [
            "[limits]\ngpu_share_percent = 0\n",
            "[limits]\ngpu_share_percent = 101\n",
            "[limits]\ndevices = 0\n",
        ] {
            let e = Config::parse(bad, Path::new("t.toml")).unwrap_err();
            assert!(e.to_string().contains("limits."), "{e}");
        }
        let c = Config::parse("[limits]\nfds = 100\n", Path::new("t.toml")).unwrap();
        assert_eq!((c.limits.fds, c.limits.mappings), (100, 0));
    }

    #[test]
    fn sims_and_errors() {
        let c = Config::parse(
            "[[sim]]\nprocessor = \"gfx1201\"\nhang_ms = 50\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.sim[0].processor, "gfx1201");
        assert_eq!(c.sim[0].hang_ms, 50);
        let e = Config::parse("[[sim]]\nprocessor = \"gfx90a\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gfx90a") && e.contains("gfx1100"), "{e}");
        let e = Config::parse("[daemon]\nmode = 0o4777\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("0o660"), "{e}");
        let e = Config::parse("[daemon]\nsockt = \"x\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sockt"), "{e}");
    }

    #[test]
    fn a_sims_clock_table() {
        let c = Config::parse(
            "[[sim]]\nprocessor = \"gfx1201\"\n[sim.clock]\ndrift_ppm = -25.5\noffset = 7\nconstant = -900\nread_ns = 800\nstall_read = 3\nstall_ms = 12\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let m = c.sim[0].clock.model();
        assert_eq!(
            (m.hz, m.offset, m.constant, m.read_ns),
            (100_000_000, 7, -900, 800)
        );
        assert_eq!(m.drift_ppm, -25.5);
        assert_eq!(
            m.stall,
            Some(rig_sim::Stall {
                read: 3,
                ns: 12_000_000
            })
        );
        assert_eq!(
            Config::parse("[[sim]]\nprocessor = \"gfx1100\"\n", Path::new("t.toml"))
                .unwrap()
                .sim[0]
                .clock,
            SimClockConfig::default()
        );
        for (bad, says) in [
            ("hz = 0", "hz"),
            ("drift_ppm = 20000.0", "drift_ppm"),
            ("read_ns = 2000000", "read_ns"),
            ("stall_ms = 5", "needs stall_read"),
            ("stall_read = 1", "stall_ms"),
            ("stall_read = 0\nstall_ms = 1", "from 1"),
            ("tick = 1", "tick"),
        ] {
            let e = Config::parse(
                &format!("[[sim]]\nprocessor = \"gfx1100\"\n[sim.clock]\n{bad}\n"),
                Path::new("t.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn metrics_endpoints() {
        let p = Path::new("t.toml");
        assert_eq!(Config::embedded().metrics.endpoint(), Ok(None));
        let c = Config::parse("[metrics]\nlisten = \"/run/rig/metrics.sock\"\n", p).unwrap();
        assert_eq!(
            c.metrics.endpoint(),
            Ok(Some(MetricsEndpoint::Unix("/run/rig/metrics.sock".into())))
        );
        let c = Config::parse("[metrics]\nlisten = \"[::1]:9464\"\n", p).unwrap();
        assert!(
            matches!(c.metrics.endpoint(), Ok(Some(MetricsEndpoint::Tcp(a))) if a.port() == 9464)
        );
        let e = Config::parse("[metrics]\nlisten = \"localhost\"\n", p).unwrap_err();
        assert!(e.to_string().contains("metrics.listen"), "{e}");
        // A port alone is loopback; any other address needs metrics.remote.
        let c = Config::parse("[metrics]\nlisten = \"9464\"\n", p).unwrap();
        assert_eq!(
            c.metrics.endpoint(),
            Ok(Some(MetricsEndpoint::Tcp(
                "127.0.0.1:9464".parse().unwrap()
            )))
        );
        let e = Config::parse("[metrics]\nlisten = \"0.0.0.0:9464\"\n", p).unwrap_err();
        assert!(e.to_string().contains("metrics.remote"), "{e}");
        let c = Config::parse("[metrics]\nlisten = \"0.0.0.0:9464\"\nremote = true\n", p).unwrap();
        assert!(c.metrics.endpoint().unwrap().is_some());
        assert!(!Config::embedded().metrics.per_client);
    }

    #[test]
    fn socket_groups_must_exist() {
        let p = Path::new("t.toml");
        for key in ["daemon", "metrics"] {
            let e = Config::parse(&format!("[{key}]\ngroup = \"no-such-group-rig\"\n"), p)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("{key}.group")) && e.contains("groupadd"),
                "{e}"
            );
        }
        Config::parse("[daemon]\ngroup = \"0\"\n", p).unwrap();
    }

    #[test]
    fn a_log_level_typo_is_refused() {
        let e = Config::parse("[daemon]\nlog = \"verbose\"\n", Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("daemon.log") && e.contains("info"), "{e}");
    }

    #[test]
    fn admin_group_must_exist() {
        let p = Path::new("t.toml");
        assert_eq!(Config::embedded().daemon.admin_group, None);
        let c = Config::parse("[daemon]\nadmin_group = \"4242\"\n", p).unwrap();
        assert_eq!(c.daemon.admin_group.as_deref(), Some("4242"));
        let e = Config::parse("[daemon]\nadmin_group = \"no-such-group-rig\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("daemon.admin_group") && e.contains("no-such-group-rig"),
            "{e}"
        );
    }

    #[test]
    fn vfio_functions_by_address_or_ids() {
        let p = Path::new("t.toml");
        assert!(Config::embedded().vfio.allow.is_empty());
        let c = Config::parse(
            "[vfio]\nallow = [\"0000:03:00.0\", \"c3:00.0\", \"1002:744C\"]\n",
            p,
        )
        .unwrap();
        let bdf = |s: &str| s.parse::<rig_vfio::Bdf>().unwrap();
        assert_eq!(
            c.vfio.allow,
            [
                VfioFunction::Address(bdf("0000:03:00.0")),
                VfioFunction::Address(bdf("0000:c3:00.0")),
                VfioFunction::Ids {
                    vendor: 0x1002,
                    device: 0x744c
                },
            ]
        );
        let shown: Vec<String> = c.vfio.allow.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["0000:03:00.0", "0000:c3:00.0", "1002:744c"]);
        assert!(c.vfio.allow[1].names(bdf("0000:c3:00.0"), 0x1002, 0x7448));
        assert!(!c.vfio.allow[1].names(bdf("0000:c3:00.1"), 0x1002, 0x7448));
        assert!(c.vfio.allow[2].names(bdf("0000:41:00.0"), 0x1002, 0x744c));
        assert!(!c.vfio.allow[2].names(bdf("0000:41:00.0"), 0x1002, 0x7448));
    }

    #[test]
    fn vfio_entries_that_do_not_parse_or_repeat_are_refused() {
        let p = Path::new("t.toml");
        for (entries, says) in [
            ("\"0000:3:00.0\"", "\"0000:3:00.0\" is not a PCI address"),
            ("\"0000:03:00.8\"", "is not a PCI address"),
            ("\"0000:03:00\"", "is neither a PCI address"),
            ("\"1002-744c\"", "is neither a PCI address"),
            ("\"1002:744\"", "four hex digits"),
            ("\"10de:2330\"", "names vendor 10de, not AMD (1002)"),
            (
                "\"0000:03:00.0\", \"1002:744c\", \"03:00.0\"",
                "vfio.allow names 0000:03:00.0 twice (entries 1 and 3)",
            ),
            (
                "\"1002:744c\", \"1002:744C\"",
                "vfio.allow names 1002:744c twice (entries 1 and 2)",
            ),
        ] {
            let e = Config::parse(&format!("[vfio]\nallow = [{entries}]\n"), p)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(says) && e.contains("vfio.allow"),
                "{entries}: {e}"
            );
        }
        let e = Config::parse("[vfio]\nalow = []\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("alow"), "{e}");
    }

    #[test]
    fn access_rule() {
        let a = Access {
            users: vec!["1234".into()],
            groups: vec!["77".into()],
            any: false,
        };
        let r = AccessRule::new(&a, 500);
        let p = |uid, gid, groups: &[u32]| Peer {
            pid: 1,
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert!(r.allows(&p(0, 0, &[])));
        assert!(r.allows(&p(500, 1, &[])));
        assert!(r.allows(&p(1234, 1, &[])));
        assert!(r.allows(&p(1000, 77, &[])));
        assert!(r.allows(&p(1000, 1, &[5, 77])));
        assert!(!r.allows(&p(1000, 1, &[5])));
        let any = AccessRule::new(
            &Access {
                any: true,
                ..Access::default()
            },
            500,
        );
        assert!(any.allows(&p(1000, 1, &[])));
    }
}
