//! rigd: the daemon that owns a machine's AMD GPUs and serves them to clients.
//!
//! Clients (programs linking `rig-client`, and `rigctl`) connect to rigd's unix socket and
//! speak rig-proto. For each device a client opens, rigd makes the hardware queues, the
//! argument segment and the timeline word in memory it shares with the client by memfd;
//! the client then submits with plain stores and a doorbell store, never through rigd.
//! Everything that changes what a GPU may touch goes through the socket.
//!
//! Design choices:
//! - **A lock per device.** Connection tasks ([`server`]) decode requests; one table
//!   ([`cmd`]) sends each to its handler, whose refusals become answers in one place
//!   ([`refusal`]); the state ([`state`], [`book`], [`table`]) keeps what is global
//!   (clients, what each user is charged, the device table) under one small lock held
//!   only for lookups and accounting, and each device
//!   ([`device::Device`], whose methods keep its invariants) under its own, so a request on
//!   one device never waits for another's work. Requests whose route says they may block
//!   ([`rig_proto::Route::blocks`]: making, growing, stopping and closing devices, loading
//!   images) run on tokio's blocking pool, never on an async worker; a client's disconnect
//!   is handled after its last request. The [`watch`] thread takes the paths' fault
//!   reports and runs the hang watchdog.
//! - **Paths.** Every way of reaching a GPU implements [`path::Backend`] and
//!   [`path::Path`]; the device maker ([`device`]) builds the same device from any. Two
//!   serve: the simulated GPU's (served when configured, or as the embedded default when
//!   no AMD GPU is present, and the log says so) and KFD's (a real AMD GPU through
//!   `/dev/kfd`, `docs/kfd.md`). The vfio path ([`path::vfio`], on the `rig-vfio` crate,
//!   `docs/vfio.md`) lists the functions bound to vfio-pci and serves none until the AMD
//!   bring-up above its PCI layer exists.
//! - **Isolation.** Each device has its own GPU address space; a fault or hang loses that
//!   device alone ([`device::Device::lose`]) and every other client goes on.
//! - **Privilege boundary.** The socket is mode 0660 with a configured group, and each
//!   peer's `SO_PEERCRED` and `SO_PEERGROUPS` are checked against `[access]`
//!   ([`config::AccessRule`]) at accept, before anything is read from it; connections are
//!   capped per user and in all, and bounded in time ([`server`]).
//! - **Tenants.** Limits hold per user across its connections and for all clients
//!   together ([`config::Limits`], sized at start from the process's limits into
//!   [`book::Budget`]), and per allocation for the connections on a grant's socket
//!   ([`grant`], what the Kubernetes device plugin hands a pod; [`pod`] names a client's
//!   pod); memory given back is reused only once no work that may touch it can run
//!   ([`device::Device::free`]).
//!
//! - **Operations.** [`metrics`] keeps the figures (request latencies counted where they
//!   happen, GPU and device figures sampled from the state) and serves them to Prometheus;
//!   [`admin`] answers `rigctl status`, `gpus`, `top`, `stop` and `evict`; [`reload`] puts a
//!   SIGHUP's `[access]` and `[limits]` in force; [`logging`] picks journald or plain lines;
//!   [`notify`] speaks systemd's readiness and watchdog protocol.
//!
//! The binary (`src/main.rs`) is a thin shell over [`Daemon`].
#![deny(missing_docs)]

pub mod admin;
pub mod book;
pub mod cmd;
pub mod config;
pub mod device;
pub mod discover;
pub mod gpus;
pub mod grant;
pub mod heap;
pub mod image;
pub mod inspect;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod path;
pub mod pod;
pub mod refusal;
pub mod reload;
pub mod server;
pub mod state;
pub mod table;
pub mod watch;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use config::{AccessRule, Config};

/// Errors of starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The GPU list could not be made.
    #[error(transparent)]
    Gpus(#[from] gpus::GpusError),
}

/// Errors of [`serve_until_sigterm`].
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be taken.
    #[error(transparent)]
    Listen(#[from] listen::ListenError),
    /// The daemon could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// SIGTERM could not be watched.
    #[error("cannot watch for SIGTERM")]
    Signal(#[source] std::io::Error),
}

/// Serves `config`'s GPUs on `socket` (with `daemon.mode`'s permissions) until SIGTERM,
/// then stops cleanly: a rigd of a program's own, as the demo and the workspace's tests start
/// one. The `rigd` binary does more (systemd, SIGINT, exit codes).
pub async fn serve_until_sigterm(socket: &Path, config: &Config) -> Result<(), ServeError> {
    let (listener, file) = listen::bind(socket, None, config.daemon.mode)?;
    let daemon = Daemon::start(config, Path::new("/sys"))?;
    daemon.serving(socket);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(ServeError::Signal)?;
    daemon
        .run(listener, async move {
            term.recv().await;
        })
        .await;
    drop(file);
    Ok(())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one: every Pinned or Mapped allocation and
/// host mapping is a descriptor in rigd, and the per-user limits are sized from this one
/// ([`book::Budget`]).
fn raise_nofile() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(soft, hard, error = %e, "cannot raise RLIMIT_NOFILE to its hard limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE"),
    }
}

/// A started daemon: its GPUs found and its state owner running.
#[derive(Debug)]
pub struct Daemon {
    server: server::Server,
    watch: std::thread::JoinHandle<()>,
    watch_tx: std::sync::mpsc::Sender<watch::Msg>,
    gpus: usize,
    reloader: reload::Reloader,
    metrics: Arc<metrics::Metrics>,
    admin: Arc<admin::Admin>,
    sampler: Option<(
        std::thread::JoinHandle<()>,
        Arc<std::sync::atomic::AtomicBool>,
    )>,
}

impl Daemon {
    /// Finds GPUs (scanning `sysfs`, normally `/sys`) and starts the state owner.
    pub fn start(config: &Config, sysfs: &Path) -> Result<Self, StartError> {
        raise_nofile();
        let gpus = gpus::find(config, sysfs)?;
        Ok(Self::serving_gpus(config, gpus, sysfs))
    }

    /// Starts the state owner over `gpus` as given (a program embedding rigd with paths of
    /// its own), with `config`'s limits, access and connections; `config`'s `[[sim]]` and
    /// GPU scan are not used.
    pub fn with_gpus(config: &Config, gpus: Vec<gpus::GpuEntry>) -> Self {
        Self::serving_gpus(config, gpus, Path::new("/sys"))
    }

    /// Starts the state owner over `gpus`; `sysfs` is where `rigctl gpus` reads products and
    /// firmware of real GPUs.
    fn serving_gpus(config: &Config, gpus: Vec<gpus::GpuEntry>, sysfs: &Path) -> Self {
        let n = gpus.len();
        let (tx, rx) = std::sync::mpsc::channel();
        // Administrators are their own group: the socket's group only lets users connect.
        let inspect_gid = config
            .daemon
            .admin_group
            .as_deref()
            .and_then(config::resolve_group);
        let mut st = state::State::new(gpus, config.limits, inspect_gid, tx.clone());
        st.max_image_bytes = config.images.max_bytes;
        let shared: state::Shared = Arc::new(st);
        let metrics = Arc::new(metrics::Metrics::new());
        metrics.set_per_client(config.metrics.per_client);
        let on_work = metrics.clone();
        let watch = watch::spawn_watch(shared.clone(), rx, Box::new(move || on_work.wake()));
        let access = Arc::new(AccessRule::new(
            &config.access,
            nix::unistd::geteuid().as_raw(),
        ));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = match metrics::spawn_sampler(metrics.clone(), shared.clone(), stop.clone()) {
            Ok(t) => Some((t, stop)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the metrics sampler; GPU figures stay at zero");
                None
            }
        };
        let admin = Arc::new(admin::Admin {
            state: shared.clone(),
            metrics: metrics.clone(),
            sysfs: sysfs.to_owned(),
            config: config.source.clone(),
            socket: std::sync::Mutex::new(None),
        });
        let reloader = reload::Reloader {
            access: access.clone(),
            state: shared.clone(),
            metrics: metrics.clone(),
            running: Arc::new(config.clone()),
        };
        Self {
            reloader,
            metrics: metrics.clone(),
            admin: admin.clone(),
            sampler,
            watch,
            watch_tx: tx,
            server: server::Server {
                state: shared,
                access,
                max_connections: config.daemon.max_connections,
                connections: config.connections,
                metrics: metrics.clone(),
                admin: admin.clone(),
                frame_budgets: server::FrameBudgets::default(),
                grants: Arc::default(),
            },
            gpus: n,
        }
    }

    /// What SIGHUP reloads ([`reload::Reloader::apply`]), usable while [`Daemon::run`] serves.
    pub fn reloader(&self) -> reload::Reloader {
        self.reloader.clone()
    }

    /// Records the socket it serves, for `rigctl status`; the grants' sockets go beside it
    /// ([`grant::DIR_NAME`]).
    pub fn serving(&self, socket: &Path) {
        self.admin.serving(socket.to_owned());
        self.server.grants.serving_beside(socket);
    }

    /// Its figures, for the metrics endpoint.
    pub fn metrics(&self) -> Arc<metrics::Metrics> {
        self.metrics.clone()
    }

    /// How many GPUs it lists.
    pub fn gpus(&self) -> usize {
        self.gpus
    }

    /// Serves `listener` until `shutdown` completes; then finishes every connection, stops
    /// every device and gives back all memory.
    pub async fn run(self, listener: tokio::net::UnixListener, shutdown: impl Future<Output = ()>) {
        let Daemon {
            server,
            watch,
            watch_tx,
            sampler,
            metrics: self_metrics,
            ..
        } = self;
        server.run(listener, shutdown).await;
        if let Some((thread, stop)) = sampler {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            self_metrics.wake();
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        let _ = watch_tx.send(watch::Msg::Shutdown);
        drop(watch_tx);
        let _ = tokio::task::spawn_blocking(move || watch.join()).await;
    }
}
