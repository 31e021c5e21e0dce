//! rigd's figures: what each GPU, client and request costs, kept for the metrics endpoint
//! ([`serve`], Prometheus text format 0.0.4) and for `rigctl gpus`/`top`.
//!
//! Two sources. Request latencies, connections and losses are counted where they happen
//! (the server calls [`Metrics::request`], [`Metrics::connection`], [`Metrics::refused`];
//! each loss counts once in the state's [`Losses`], by [`LossReason`], the one mapping of
//! fault kinds to the reasons operators see). Everything else about GPUs and devices is
//! observed: a look ([`crate::state::State::observe`]) turns what changed since the last
//! one into counters: submissions and completions from each device's published and
//! reached timeline values, queue growths from ring generations, losses and faults from
//! the loss counts, and busy time (a GPU is busy while any of its live devices has
//! submitted beyond what it reached). A device that opens and closes between two looks is
//! not seen (its loss, if it was lost, is counted all the same). Looks also keep the
//! latest view ([`Metrics::view`]) that gauges and rigctl read.
//!
//! Looks cost nothing while nothing happens. The sampler thread ([`spawn_sampler`]) looks
//! every [`SAMPLE_MS`] ms while some GPU is busy; once a look finds none busy it sleeps
//! until woken ([`Metrics::wake`]): by a request, by the watch thread seeing work, or at
//! stop. A scrape and rigctl's figures take a look of their own first, so what they show
//! is never older than the question. With 256 idle clients holding 8 devices each, rigd
//! therefore locks no device and wakes no thread for its figures.
//!
//! Other users' work shows per uid (`rig_user_*`); per client process (`rig_process_*`:
//! pid, uid, program) only with `metrics.per_client` ([`Metrics::set_per_client`]). Both are
//! rebuilt at every look, so departed clients leave no series.
//!
//! This module owns the figures and their exposition; it changes nothing in the state.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};
use rig_proto::messages::MemoryHeld;

/// How often the sampler looks at the state while some GPU is busy, in milliseconds; it
/// sleeps while none is. A busy look after a sleep counts at most this long as busy (the
/// work began at some point of the sleep, which no look saw).
pub const SAMPLE_MS: u64 = 10;

/// The window over which a GPU's busy fraction is reported, in milliseconds.
pub const BUSY_WINDOW_MS: u64 = 1000;

/// A GPU as the state shows it.
#[derive(Debug, Clone)]
pub struct GpuSeen {
    /// Its index.
    pub index: u32,
    /// Its name, such as `AMD:0`.
    pub name: String,
    /// Its processor.
    pub arch: String,
    /// Bytes of its own memory.
    pub total_bytes: u64,
    /// Its PCI function; `None` for the simulated GPU.
    pub bus: Option<String>,
    /// Whether it is the simulated GPU.
    pub simulated: bool,
    /// Its firmware versions as discovery found them ([`crate::gpus::GpuEntry::firmware`]).
    pub firmware: Option<String>,
    /// What a client costs on it, from its path ([`crate::path::GpuDescription::client_cost`]).
    pub client_cost: Option<crate::path::ClientCost>,
}

/// A device as the state shows it.
#[derive(Debug, Clone)]
pub struct DeviceSeen {
    /// Its id.
    pub id: u64,
    /// Its GPU's index.
    pub gpu: u32,
    /// Its owner's pid and uid.
    pub pid: i32,
    /// Its owner's uid.
    pub uid: u32,
    /// What it holds.
    pub held: MemoryHeld,
    /// The last value its client published as submitted.
    pub submitted: u64,
    /// The value its timeline reached.
    pub reached: u64,
    /// Sum of its queues' generations (each growth makes a new one).
    pub generations: u64,
    /// Why it was lost, if it was.
    pub lost: Option<rig_proto::Fault>,
}

/// A connection as the state shows it.
#[derive(Debug, Clone)]
pub struct ClientSeen {
    /// Its pid.
    pub pid: i32,
    /// Its uid.
    pub uid: u32,
    /// The program its hello named (shared with the state's record, not copied).
    pub program: std::sync::Arc<str>,
    /// Devices it holds.
    pub devices: usize,
    /// Bytes it holds.
    pub bytes: u64,
    /// The grant whose socket it came on.
    pub grant: Option<std::sync::Arc<str>>,
    /// Its pod and container.
    pub pod: Option<rig_proto::PodOf>,
}

/// One look at the state.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The GPUs.
    pub gpus: Vec<GpuSeen>,
    /// Every open device.
    pub devices: Vec<DeviceSeen>,
    /// Every connection past its hello.
    pub clients: Vec<ClientSeen>,
    /// Devices lost so far, by GPU index and reason ([`Losses::counts`]).
    pub losses: BTreeMap<(u32, LossReason), u64>,
}

/// The latest figures of one GPU.
#[derive(Debug, Clone, Default)]
pub struct GpuView {
    /// Bytes of its own memory.
    pub total_bytes: u64,
    /// Bytes of it its devices hold (Device and Mapped memory).
    pub used_bytes: u64,
    /// Open devices.
    pub devices: u64,
    /// Processes holding a device on it.
    pub clients: u64,
    /// Busy fraction over the last [`BUSY_WINDOW_MS`] window, 0 to 1.
    pub busy: f64,
}

/// The latest figures of one process (its connections together).
#[derive(Debug, Clone)]
pub struct ProcessView {
    /// Its pid.
    pub pid: i32,
    /// Its uid.
    pub uid: u32,
    /// Its program, as `/proc/PID/comm` says (what it said in its hello if that is gone).
    pub program: String,
    /// Its connections.
    pub connections: u64,
    /// Devices it holds.
    pub devices: u64,
    /// Bytes it holds.
    pub bytes: u64,
}

/// What rigctl and the gauges read: the sampler's latest view.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// By GPU index.
    pub gpus: BTreeMap<u32, GpuView>,
    /// By pid.
    pub processes: BTreeMap<i32, ProcessView>,
}

/// A GPU's labels: index, name, processor.
#[derive(Debug, Clone)]
struct GpuLabels([String; 3]);

impl GpuLabels {
    fn get(&self) -> [&str; 3] {
        [&self.0[0], &self.0[1], &self.0[2]]
    }
}

const GPU_LABELS: [&str; 3] = ["gpu", "name", "arch"];

/// A pod's labels: its UID and container as the clients' cgroups name them, and the grant
/// whose socket they came on (each empty where unknown).
const POD_LABELS: [&str; 3] = ["pod_uid", "container", "grant"];

/// Every family rigd exposes.
#[derive(Debug)]
struct Families {
    gpu_memory_total: IntGaugeVec,
    gpu_memory_used: IntGaugeVec,
    gpu_memory_free: IntGaugeVec,
    gpu_devices: IntGaugeVec,
    gpu_clients: IntGaugeVec,
    gpu_busy_ratio: GaugeVec,
    gpu_busy_seconds: CounterVec,
    gpu_values_completed: IntCounterVec,
    gpu_submissions: IntCounterVec,
    gpu_faults: IntCounterVec,
    gpu_losses: IntCounterVec,
    gpu_queue_growths: IntCounterVec,
    process_memory: IntGaugeVec,
    process_devices: IntGaugeVec,
    user_memory: IntGaugeVec,
    user_devices: IntGaugeVec,
    user_clients: IntGaugeVec,
    pod_memory: IntGaugeVec,
    pod_devices: IntGaugeVec,
    requests: HistogramVec,
    connections: IntGauge,
    connections_total: IntCounter,
    refused: IntCounterVec,
    scrapes_refused: IntCounterVec,
    start_time: IntGauge,
    build_info: IntGaugeVec,
}

/// Makes and registers every family. Names and labels are constants, so only a programming
/// error could make this fail.
fn families(r: &Registry) -> prometheus::Result<Families> {
    fn reg<M: prometheus::core::Collector + Clone + 'static>(
        r: &Registry,
        m: M,
    ) -> prometheus::Result<M> {
        r.register(Box::new(m.clone()))?;
        Ok(m)
    }
    let ig = |name: &str, help: &str, labels: &[&str]| {
        reg(r, IntGaugeVec::new(Opts::new(name, help), labels)?)
    };
    let ic = |name: &str, help: &str, labels: &[&str]| {
        reg(r, IntCounterVec::new(Opts::new(name, help), labels)?)
    };
    Ok(Families {
        gpu_memory_total: ig(
            "gpu_memory_total_bytes",
            "Bytes of the GPU's own memory",
            &GPU_LABELS,
        )?,
        gpu_memory_used: ig(
            "gpu_memory_used_bytes",
            "Bytes of the GPU's own memory its devices hold (Device and Mapped memory)",
            &GPU_LABELS,
        )?,
        gpu_memory_free: ig(
            "gpu_memory_free_bytes",
            "Bytes of the GPU's own memory its devices do not hold",
            &GPU_LABELS,
        )?,
        gpu_devices: ig("gpu_devices", "Devices open on the GPU", &GPU_LABELS)?,
        gpu_clients: ig(
            "gpu_clients",
            "Processes holding a device on the GPU",
            &GPU_LABELS,
        )?,
        gpu_busy_ratio: reg(
            r,
            GaugeVec::new(
                Opts::new(
                    "gpu_busy_ratio",
                    "Fraction of the last second during which the GPU had work on its queues",
                ),
                &GPU_LABELS,
            )?,
        )?,
        gpu_busy_seconds: reg(
            r,
            CounterVec::new(
                Opts::new(
                    "gpu_busy_seconds_total",
                    "Time the GPU had work on its queues",
                ),
                &GPU_LABELS,
            )?,
        )?,
        gpu_values_completed: ic(
            "gpu_values_completed_total",
            "Timeline values the GPU's devices reached",
            &GPU_LABELS,
        )?,
        gpu_submissions: ic(
            "gpu_submissions_total",
            "Timeline values clients published as submitted on the GPU",
            &GPU_LABELS,
        )?,
        gpu_faults: ic(
            "gpu_faults_total",
            "Faults the GPU reported for work on it (each lost its device); hangs and stops are not faults",
            &GPU_LABELS,
        )?,
        gpu_losses: ic(
            "gpu_losses_total",
            "Devices lost on the GPU, by reason: fault, hang, administrator, shutdown, other",
            &["gpu", "name", "arch", "reason"],
        )?,
        gpu_queue_growths: ic(
            "gpu_queue_growths_total",
            "Queues replaced by larger ones on the GPU",
            &GPU_LABELS,
        )?,
        process_memory: ig(
            "process_memory_bytes",
            "Bytes a client process holds through its devices",
            &["pid", "uid", "program"],
        )?,
        process_devices: ig(
            "process_devices",
            "Devices a client process holds",
            &["pid", "uid", "program"],
        )?,
        user_memory: ig(
            "user_memory_bytes",
            "Bytes a user's client processes hold through their devices",
            &["uid"],
        )?,
        user_devices: ig(
            "user_devices",
            "Devices a user's client processes hold",
            &["uid"],
        )?,
        user_clients: ig(
            "user_clients",
            "A user's client processes holding a device",
            &["uid"],
        )?,
        pod_memory: ig(
            "pod_memory_bytes",
            "Bytes the clients of a pod's container (or of a grant) hold through their devices",
            &POD_LABELS,
        )?,
        pod_devices: ig(
            "pod_devices",
            "Devices the clients of a pod's container (or of a grant) hold",
            &POD_LABELS,
        )?,
        requests: reg(
            r,
            HistogramVec::new(
                HistogramOpts::new(
                    "request_duration_seconds",
                    "Time rigd took to answer a request, by kind",
                )
                // 10 µs to about 2.6 s.
                .buckets(prometheus::exponential_buckets(0.000_01, 4.0, 10)?),
                &["kind"],
            )?,
        )?,
        connections: reg(
            r,
            IntGauge::new("connections", "Connections rigd serves now")?,
        )?,
        connections_total: reg(
            r,
            IntCounter::new("connections_accepted_total", "Connections rigd accepted")?,
        )?,
        refused: ic(
            "connections_refused_total",
            "Connections refused at accept, by reason",
            &["reason"],
        )?,
        scrapes_refused: ic(
            "metrics_connections_closed_total",
            "Metrics endpoint connections closed unserved, by reason",
            &["reason"],
        )?,
        start_time: reg(
            r,
            IntGauge::new(
                "start_time_seconds",
                "When rigd started, in seconds since the Unix epoch",
            )?,
        )?,
        build_info: ig(
            "build_info",
            "Always 1: the version of rigd and of its control protocol",
            &["version", "protocol"],
        )?,
    })
}

/// What the sampler remembers of each device between looks.
#[derive(Debug, Clone, Copy)]
struct Last {
    submitted: u64,
    reached: u64,
    generations: u64,
}

#[derive(Debug, Default)]
struct Sampling {
    last: HashMap<u64, Last>,
    /// The loss counts as the last look read them.
    losses: BTreeMap<(u32, LossReason), u64>,
    at: Option<Instant>,
    /// Busy and total time in the current window, by GPU.
    window: HashMap<u32, (Duration, Duration)>,
    view: View,
}

/// rigd's figures.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    f: Families,
    sampling: Mutex<Sampling>,
    started: Instant,
    /// The state looks read, once the sampler is attached ([`spawn_sampler`]).
    state: std::sync::OnceLock<crate::state::Shared>,
    /// One look at a time, so that counters see observations in the order they were made.
    look: Mutex<()>,
    /// Wakes the sampler out of its idle sleep.
    alarm: Alarm,
    /// Whether the exposition has series per client process (`metrics.per_client`);
    /// without, only per uid.
    per_client: AtomicBool,
}

/// The sampler's idle sleep and what ends it.
#[derive(Debug, Default)]
struct Alarm {
    /// Whether the sampler sleeps (so a waker takes the lock only then).
    asleep: AtomicBool,
    /// Set by a wake, taken by the sampler.
    rung: Mutex<bool>,
    bell: Condvar,
}

/// Why a device was lost, as operators count it: `rig_gpu_losses_total`'s `reason` label
/// and the `cause` of the loss's log line. [`LossReason::of`] is the one mapping from the
/// fault kinds rigd keeps to these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossReason {
    /// The GPU reported a fault of the work: a page fault, an illegal or unsupported
    /// instruction, a trap, a bad packet. Only these count in `rig_gpu_faults_total`.
    Fault,
    /// The hang watchdog: the work made no progress for the GPU's hang bound.
    Hang,
    /// An administrator stopped it (`rigctl stop`, `rigctl evict`).
    Administrator,
    /// rigd stopped (SIGTERM, SIGINT) while it was open.
    Shutdown,
    /// Anything else: a GPU reset, rigd's own failure, the client's own verdict (a stop
    /// with a reason, such as a consumer of a lost producer).
    Other,
}

impl LossReason {
    /// Every reason, in the order the exposition lists them.
    pub const ALL: [LossReason; 5] = [
        LossReason::Fault,
        LossReason::Hang,
        LossReason::Administrator,
        LossReason::Shutdown,
        LossReason::Other,
    ];

    /// The reason of a loss for `why`.
    pub fn of(why: &rig_proto::Fault) -> LossReason {
        use rig_proto::FaultKind as K;
        match why.kind {
            K::MemoryFault
            | K::IllegalInstruction
            | K::UnsupportedInstruction
            | K::Trap
            | K::BadPacket => LossReason::Fault,
            K::Hang => LossReason::Hang,
            // Only rigd gives this kind (a client's stop is StoppedByClient), and rigd's own
            // stop at shutdown is told by its detail.
            K::StoppedByAdministrator if why.detail == crate::watch::SHUTTING_DOWN => {
                LossReason::Shutdown
            }
            K::StoppedByAdministrator => LossReason::Administrator,
            K::Reset
            | K::StoppedByClient
            | K::Internal
            | K::Producer
            | K::Disconnected
            | K::Unstamped => LossReason::Other,
        }
    }

    /// Its label value, as docs/operations.md lists them.
    pub fn label(self) -> &'static str {
        match self {
            LossReason::Fault => "fault",
            LossReason::Hang => "hang",
            LossReason::Administrator => "administrator",
            LossReason::Shutdown => "shutdown",
            LossReason::Other => "other",
        }
    }
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Devices lost, by GPU index and reason, counted at each loss
/// ([`crate::device::Device::lose_at`] counts once per device), so no loss goes unseen
/// however soon its device closes; looks read the counts.
#[derive(Debug, Default)]
pub struct Losses(Mutex<BTreeMap<(u32, LossReason), u64>>);

impl Losses {
    /// A device of GPU `gpu` was lost for `why`.
    pub fn count(&self, gpu: u32, why: &rig_proto::Fault) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((gpu, LossReason::of(why))).or_default() += 1;
    }

    /// The counts so far.
    pub fn counts(&self) -> BTreeMap<(u32, LossReason), u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The program of process `pid` as the kernel names it (`/proc/PID/comm`), if it lives.
pub fn program_of(pid: i32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered, all at zero.
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("rig".into()), None).unwrap_or_else(|_| Registry::new());
        // PANIC: the names, help texts and labels are constants checked by every test.
        let f = families(&registry).expect("metric families are well-formed");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        f.start_time.set(i64::try_from(now).unwrap_or(i64::MAX));
        f.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), &rig_proto::VERSION.to_string()])
            .set(1);
        Self {
            registry,
            f,
            sampling: Mutex::new(Sampling::default()),
            started: Instant::now(),
            state: std::sync::OnceLock::new(),
            look: Mutex::new(()),
            alarm: Alarm::default(),
            per_client: AtomicBool::new(false),
        }
    }

    /// Exposes series per client process (pid, uid, program) besides those per uid, or
    /// stops (`metrics.per_client`); says whether that changed. The next look applies it.
    pub fn set_per_client(&self, on: bool) -> bool {
        self.per_client.swap(on, Ordering::SeqCst) != on
    }

    /// How long rigd has run.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A request of `kind` took `took`. It may have started work or changed what devices
    /// hold: the sampler wakes if it slept.
    pub fn request(&self, kind: &'static str, took: Duration) {
        self.f
            .requests
            .with_label_values(&[kind])
            .observe(took.as_secs_f64());
        self.wake();
    }

    /// Something may have changed that the figures must follow (work began, a device
    /// opened, rigd stops): the sampler wakes if it sleeps. One atomic load when it does
    /// not.
    pub fn wake(&self) {
        if self.alarm.asleep.load(Ordering::SeqCst) {
            *self.alarm.rung.lock().unwrap_or_else(|e| e.into_inner()) = true;
            self.alarm.bell.notify_one();
        }
    }

    /// Sleeps until [`Metrics::wake`] rings (at once if one rang since [`Alarm::asleep`]
    /// was raised, which the sampler does before its look: no wake is lost between the
    /// look and the sleep).
    fn sleep(&self) {
        let a = &self.alarm;
        let mut rung = a.rung.lock().unwrap_or_else(|e| e.into_inner());
        while !*rung {
            rung = a.bell.wait(rung).unwrap_or_else(|e| e.into_inner());
        }
        *rung = false;
        a.asleep.store(false, Ordering::SeqCst);
    }

    /// Takes a look at the attached state now, if any; says whether some GPU was busy.
    fn refresh(&self) -> bool {
        let Some(state) = self.state.get() else {
            return false;
        };
        let _one = self.look.lock().unwrap_or_else(|e| e.into_inner());
        let o = state.observe();
        self.sample(&o, Instant::now())
    }

    /// A connection was accepted; the guard counts it until dropped.
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.f.connections.inc();
        self.f.connections_total.inc();
        ConnectionGuard(self.clone())
    }

    /// A connection was refused at accept for `reason` (`access`, `slots`).
    pub fn refused(&self, reason: &'static str) {
        self.f.refused.with_label_values(&[reason]).inc();
    }

    /// A metrics endpoint connection was closed unserved for `reason` (`peer`, `full`,
    /// `displaced`, `deadline`).
    fn scrape_refused(&self, reason: &'static str) {
        self.f.scrapes_refused.with_label_values(&[reason]).inc();
    }

    /// The view as of now (a look first, once the sampler is attached).
    pub fn view(&self) -> View {
        self.refresh();
        self.lock().view.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sampling> {
        self.sampling.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one look at the state's observation `o`, made at `now`; says whether some GPU
    /// was busy.
    pub fn sample(&self, o: &Observed, now: Instant) -> bool {
        let mut s = self.lock();
        let dt =
            s.at.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        s.at = Some(now);
        let labels: HashMap<u32, GpuLabels> = o
            .gpus
            .iter()
            .map(|g| {
                (
                    g.index,
                    GpuLabels([g.index.to_string(), g.name.clone(), g.arch.clone()]),
                )
            })
            .collect();
        let mut gpus: BTreeMap<u32, GpuView> = o
            .gpus
            .iter()
            .map(|g| {
                (
                    g.index,
                    GpuView {
                        total_bytes: g.total_bytes,
                        ..GpuView::default()
                    },
                )
            })
            .collect();
        let mut busy: HashMap<u32, bool> = HashMap::new();
        // Busy time between two looks far apart is not known: at most one period counts.
        let busy_dt = dt.min(Duration::from_millis(SAMPLE_MS));
        let mut pids_on: HashMap<u32, std::collections::BTreeSet<i32>> = HashMap::new();
        let mut seen = HashMap::with_capacity(o.devices.len());
        for d in &o.devices {
            let Some(l) = labels.get(&d.gpu) else {
                continue;
            };
            let l = &l.get();
            let before = s.last.get(&d.id).copied().unwrap_or(Last {
                submitted: 0,
                reached: 0,
                generations: d.generations,
            });
            let f = &self.f;
            f.gpu_submissions
                .with_label_values(l)
                .inc_by(d.submitted.saturating_sub(before.submitted));
            // A loss writes the last submitted value into the timeline so waiters wake:
            // those values were not completed.
            if d.lost.is_none() {
                f.gpu_values_completed
                    .with_label_values(l)
                    .inc_by(d.reached.saturating_sub(before.reached));
            }
            f.gpu_queue_growths
                .with_label_values(l)
                .inc_by(d.generations.saturating_sub(before.generations));
            seen.insert(
                d.id,
                Last {
                    submitted: d.submitted,
                    reached: d.reached,
                    generations: d.generations,
                },
            );
            if let Some(g) = gpus.get_mut(&d.gpu) {
                g.used_bytes += d.held.device + d.held.mapped;
                g.devices += 1;
            }
            pids_on.entry(d.gpu).or_default().insert(d.pid);
            if d.lost.is_none() && d.submitted > d.reached {
                busy.insert(d.gpu, true);
            }
        }
        s.last = seen;
        // Losses were counted where they happened: what is new since the last look.
        for g in &o.gpus {
            let l = &labels[&g.index].get();
            for reason in LossReason::ALL {
                let n = o.losses.get(&(g.index, reason)).copied().unwrap_or(0);
                let before = s.losses.get(&(g.index, reason)).copied().unwrap_or(0);
                let new = n.saturating_sub(before);
                self.f
                    .gpu_losses
                    .with_label_values(&[l[0], l[1], l[2], reason.label()])
                    .inc_by(new);
                if reason == LossReason::Fault {
                    self.f.gpu_faults.with_label_values(l).inc_by(new);
                }
            }
        }
        s.losses.clone_from(&o.losses);
        for (index, g) in gpus.iter_mut() {
            g.clients = pids_on.get(index).map_or(0, |p| p.len() as u64);
            let is_busy = busy.contains_key(index);
            let l = &labels[index].get();
            if is_busy {
                self.f
                    .gpu_busy_seconds
                    .with_label_values(l)
                    .inc_by(busy_dt.as_secs_f64());
            }
            let w = s.window.entry(*index).or_default();
            w.1 += dt;
            if is_busy {
                w.0 += busy_dt;
            }
            let (b, t) = *w;
            let previous = s.view.gpus.get(index).map_or(0.0, |v| v.busy);
            g.busy = previous;
            if t >= Duration::from_millis(BUSY_WINDOW_MS) {
                g.busy = b.as_secs_f64() / t.as_secs_f64();
                s.window.insert(*index, (Duration::ZERO, Duration::ZERO));
            }
            let f = &self.f;
            f.gpu_memory_total
                .with_label_values(l)
                .set(g.total_bytes as i64);
            f.gpu_memory_used
                .with_label_values(l)
                .set(g.used_bytes as i64);
            f.gpu_memory_free
                .with_label_values(l)
                .set(g.total_bytes.saturating_sub(g.used_bytes) as i64);
            f.gpu_devices.with_label_values(l).set(g.devices as i64);
            f.gpu_clients.with_label_values(l).set(g.clients as i64);
            f.gpu_busy_ratio.with_label_values(l).set(g.busy);
        }
        let mut processes: BTreeMap<i32, ProcessView> = BTreeMap::new();
        for c in &o.clients {
            let p = processes.entry(c.pid).or_insert_with(|| ProcessView {
                pid: c.pid,
                uid: c.uid,
                program: s
                    .view
                    .processes
                    .get(&c.pid)
                    .map(|p| p.program.clone())
                    .or_else(|| program_of(c.pid))
                    .unwrap_or_else(|| c.program.to_string()),
                connections: 0,
                devices: 0,
                bytes: 0,
            });
            p.connections += 1;
            p.devices += c.devices as u64;
            p.bytes += c.bytes;
        }
        // Rebuilt at every look, so a departed client's or user's series go with it.
        let f = &self.f;
        for v in [
            &f.process_memory,
            &f.process_devices,
            &f.user_memory,
            &f.user_devices,
            &f.user_clients,
            &f.pod_memory,
            &f.pod_devices,
        ] {
            v.reset();
        }
        // Pods and grants: the tenants of a cluster, always shown (as users are).
        let mut pods: BTreeMap<[String; 3], (u64, u64)> = BTreeMap::new();
        for c in o.clients.iter().filter(|c| c.devices > 0) {
            if c.grant.is_none() && c.pod.is_none() {
                continue;
            }
            let key = [
                c.pod.as_ref().map(|p| p.uid.clone()).unwrap_or_default(),
                c.pod
                    .as_ref()
                    .and_then(|p| p.container.clone())
                    .unwrap_or_default(),
                c.grant.as_deref().unwrap_or_default().to_owned(),
            ];
            let e = pods.entry(key).or_default();
            *e = (e.0 + c.bytes, e.1 + c.devices as u64);
        }
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let per_client = self.per_client.load(Ordering::SeqCst);
        let mut users: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        for p in processes.values().filter(|p| p.devices > 0) {
            let u = users.entry(p.uid).or_default();
            *u = (u.0 + p.bytes, u.1 + p.devices, u.2 + 1);
            if per_client {
                let (pid, uid) = (p.pid.to_string(), p.uid.to_string());
                let l = [pid.as_str(), uid.as_str(), p.program.as_str()];
                f.process_memory.with_label_values(&l).set(int(p.bytes));
                f.process_devices.with_label_values(&l).set(int(p.devices));
            }
        }
        for (uid, (bytes, devices, clients)) in users {
            let uid = uid.to_string();
            let l = [uid.as_str()];
            f.user_memory.with_label_values(&l).set(int(bytes));
            f.user_devices.with_label_values(&l).set(int(devices));
            f.user_clients.with_label_values(&l).set(int(clients));
        }
        for (key, (bytes, devices)) in &pods {
            let l = [key[0].as_str(), key[1].as_str(), key[2].as_str()];
            f.pod_memory.with_label_values(&l).set(int(*bytes));
            f.pod_devices.with_label_values(&l).set(int(*devices));
        }
        s.view = View { gpus, processes };
        !busy.is_empty()
    }

    /// The exposition, Prometheus text format 0.0.4 (what `promtool check metrics` reads).
    pub fn encode(&self) -> String {
        self.refresh();
        // The sampler's lock: no scrape sees a family half updated.
        let _s = self.lock();
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# rigd cannot encode its metrics: {e}\n"))
    }
}

/// Counts a connection while it lives.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<Metrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.f.connections.dec();
    }
}

/// The sampler thread: attaches `state` to `metrics` (so scrapes look too), then looks
/// every [`SAMPLE_MS`] while some GPU is busy and sleeps until [`Metrics::wake`] while none
/// is, until `stop` is raised (wake it after raising it).
pub fn spawn_sampler(
    metrics: Arc<Metrics>,
    state: crate::state::Shared,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let _ = metrics.state.set(state);
    std::thread::Builder::new()
        .name("rigd-metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                metrics.alarm.asleep.store(true, Ordering::SeqCst);
                if metrics.refresh() {
                    metrics.alarm.asleep.store(false, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(SAMPLE_MS));
                } else {
                    metrics.sleep();
                }
            }
        })
}

/// The most scrape connections held at once, over all peers. A connection past it takes
/// the place of the oldest one that has not sent its request yet, or is closed.
pub const MOST_SCRAPES: usize = 16;

/// The most scrape connections one peer holds at once: an IP address over TCP, a uid over
/// a unix socket. A connection past it takes the place of that peer's oldest one that has
/// not sent its request yet, or is closed.
pub const SCRAPES_PER_PEER: usize = 2;

/// The time a scraper has from its connect to the end of its request's headers, in all
/// (not per byte, so a slow sender cannot stretch it).
pub const SCRAPE_REQUEST_MS: u64 = 2000;

/// The time the answer has, from the request read, to be written and taken.
pub const SCRAPE_RESPONSE_MS: u64 = 5000;

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The TCP address could not be bound.
    #[error(
        "cannot listen on metrics.listen {addr}; choose a free address, or leave metrics.listen empty"
    )]
    Tcp {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The unix socket could not be taken.
    #[error("cannot take the metrics socket (metrics.listen)")]
    Unix(#[source] crate::listen::ListenError),
}

/// A bound metrics endpoint.
#[derive(Debug)]
pub enum Endpoint {
    /// A unix socket, removed when dropped.
    Unix(tokio::net::UnixListener, crate::listen::SocketFile),
    /// A TCP socket.
    Tcp(tokio::net::TcpListener),
}

impl Endpoint {
    /// Binds `at` (a unix socket gets mode 0660 and `group`). Must run inside a tokio runtime.
    pub async fn bind(
        at: &crate::config::MetricsEndpoint,
        group: Option<&str>,
    ) -> Result<Endpoint, EndpointError> {
        match at {
            crate::config::MetricsEndpoint::Unix(p) => crate::listen::bind(p, group, 0o660)
                .map(|(l, f)| Endpoint::Unix(l, f))
                .map_err(EndpointError::Unix),
            crate::config::MetricsEndpoint::Tcp(addr) => tokio::net::TcpListener::bind(addr)
                .await
                .map(Endpoint::Tcp)
                .map_err(|source| EndpointError::Tcp {
                    addr: *addr,
                    source,
                }),
        }
    }

    /// True for a TCP socket bound beyond loopback (`metrics.remote`), which every host
    /// that reaches its port may read.
    pub fn beyond_loopback(&self) -> bool {
        match self {
            Endpoint::Unix(..) => false,
            Endpoint::Tcp(l) => l.local_addr().is_ok_and(|a| !a.ip().is_loopback()),
        }
    }

    /// Where it listens, for the log.
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Unix(_, f) => f.path().display().to_string(),
            Endpoint::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string()),
        }
    }
}

/// Answers one HTTP request: `GET /metrics` is the exposition, anything else an error.
fn respond(
    metrics: &Metrics,
    req: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    use hyper::{Method, StatusCode, header};
    let reply = |status: StatusCode, kind: &'static str, body: String| {
        let mut r = hyper::Response::new(http_body_util::Full::new(hyper::body::Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
        r
    };
    if req.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "rigd serves its metrics at /metrics\n".into(),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "GET /metrics\n".into(),
        );
    }
    reply(StatusCode::OK, prometheus::TEXT_FORMAT, metrics.encode())
}

/// Who a scrape connection comes from, for [`SCRAPES_PER_PEER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerKey {
    Ip(std::net::IpAddr),
    Uid(u32),
    /// A unix peer whose credentials could not be read: all such count as one.
    Unknown,
}

/// A scrape connection being served.
#[derive(Debug)]
struct Scrape {
    peer: PeerKey,
    since: Instant,
    /// Set when its request's headers were read.
    asked: Arc<std::sync::OnceLock<Instant>>,
    task: tokio::task::AbortHandle,
}

/// The scrape connections being served; only the accept loop touches it.
#[derive(Debug, Default)]
struct Scrapes {
    live: Vec<Scrape>,
}

impl Scrapes {
    /// Whether a connection from `peer` may be served now, making room for it: the oldest
    /// connection that has not asked yet (of `peer` when it holds its most, else of all when
    /// all slots are taken) is closed. `Err` names why it may not.
    fn admit(&mut self, peer: PeerKey, metrics: &Metrics) -> Result<(), &'static str> {
        self.live.retain(|s| !s.task.is_finished());
        let of_peer = self.live.iter().filter(|s| s.peer == peer).count();
        let (from_peer, reason) = if of_peer >= SCRAPES_PER_PEER {
            (true, "peer")
        } else if self.live.len() >= MOST_SCRAPES {
            (false, "full")
        } else {
            return Ok(());
        };
        let victim = self
            .live
            .iter()
            .enumerate()
            .filter(|(_, s)| (!from_peer || s.peer == peer) && s.asked.get().is_none())
            .min_by_key(|(_, s)| s.since)
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                self.live.swap_remove(i).task.abort();
                metrics.scrape_refused("displaced");
                Ok(())
            }
            None => Err(reason),
        }
    }
}

async fn serve_one<I>(io: I, metrics: Arc<Metrics>, asked: Arc<std::sync::OnceLock<Instant>>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let m = metrics.clone();
    let seen = asked.clone();
    let service = hyper::service::service_fn(move |req| {
        let _ = seen.set(Instant::now());
        let m = m.clone();
        async move { Ok::<_, std::convert::Infallible>(respond(&m, &req)) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(SCRAPE_REQUEST_MS))
        // One scrape per connection: an idle keep-alive connection would hold a slot.
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(conn);
    // The whole request within its deadline, then the answer within its own.
    let served = tokio::select! {
        r = &mut conn => Some(r),
        () = tokio::time::sleep(Duration::from_millis(SCRAPE_REQUEST_MS)) => None,
    };
    let served = match (served, asked.get()) {
        (Some(r), _) => r,
        (None, None) => {
            metrics.scrape_refused("deadline");
            tracing::debug!("a metrics connection sent no whole request in time; closed");
            return;
        }
        (None, Some(at)) => {
            let by = *at + Duration::from_millis(SCRAPE_RESPONSE_MS);
            match tokio::time::timeout_at(by.into(), conn).await {
                Ok(r) => r,
                Err(_) => {
                    metrics.scrape_refused("deadline");
                    tracing::debug!("a metrics answer was not taken in time; closed");
                    return;
                }
            }
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "a metrics connection failed");
    }
}

/// Serves `endpoint` until dropped (abort the task to stop it). The accept loop never
/// waits for a slot: each connection is admitted or closed at once (within
/// [`SCRAPES_PER_PEER`] and [`MOST_SCRAPES`], displacing the oldest one not yet asking),
/// and each is bounded in time, so no peer keeps others out for longer than a deadline.
pub async fn serve(endpoint: Endpoint, metrics: Arc<Metrics>) {
    let mut scrapes = Scrapes::default();
    loop {
        let accepted = match &endpoint {
            Endpoint::Unix(l, _) => l.accept().await.map(|(s, _)| {
                let peer = s
                    .peer_cred()
                    .map_or(PeerKey::Unknown, |c| PeerKey::Uid(c.uid()));
                (Io::Unix(s), peer)
            }),
            Endpoint::Tcp(l) => l
                .accept()
                .await
                .map(|(s, a)| (Io::Tcp(s), PeerKey::Ip(a.ip().to_canonical()))),
        };
        let (io, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(reason) = scrapes.admit(peer, &metrics) {
            metrics.scrape_refused(reason);
            tracing::debug!(?peer, reason, "metrics connection closed at accept");
            continue;
        }
        let asked = Arc::new(std::sync::OnceLock::new());
        let m = metrics.clone();
        let a = asked.clone();
        let task = match io {
            Io::Unix(s) => tokio::spawn(serve_one(s, m, a)),
            Io::Tcp(s) => tokio::spawn(serve_one(s, m, a)),
        };
        scrapes.live.push(Scrape {
            peer,
            since: Instant::now(),
            asked,
            task: task.abort_handle(),
        });
    }
}

/// An accepted scrape connection.
enum Io {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(submitted: u64, reached: u64) -> Observed {
        Observed {
            gpus: vec![GpuSeen {
                index: 0,
                name: "AMD:0".into(),
                arch: "gfx1100".into(),
                total_bytes: 1 << 30,
                bus: None,
                simulated: true,
                firmware: None,
                client_cost: None,
            }],
            devices: vec![DeviceSeen {
                id: 1,
                gpu: 0,
                pid: 1,
                uid: 0,
                held: MemoryHeld::default(),
                submitted,
                reached,
                generations: 0,
                lost: None,
            }],
            clients: Vec::new(),
            losses: BTreeMap::new(),
        }
    }

    fn busy_seconds(m: &Metrics) -> f64 {
        m.f.gpu_busy_seconds
            .with_label_values(&["0", "AMD:0", "gfx1100"])
            .get()
    }

    /// The sampler sleeps while all is idle: a busy look a minute after the last one
    /// counts one period as busy, not the minute it slept through.
    #[test]
    fn a_busy_look_after_a_sleep_counts_one_period() {
        let m = Metrics::new();
        let t0 = Instant::now();
        assert!(!m.sample(&observed(1, 1), t0));
        assert!(m.sample(&observed(2, 1), t0 + Duration::from_secs(60)));
        let b = busy_seconds(&m);
        assert!(b > 0.0 && b <= SAMPLE_MS as f64 / 1000.0, "{b}");
        // Looks at the sampler's own pace count their whole interval.
        assert!(m.sample(
            &observed(3, 1),
            t0 + Duration::from_secs(60) + Duration::from_millis(5)
        ));
        let more = busy_seconds(&m) - b;
        assert!((more - 0.005).abs() < 1e-9, "{more}");
    }

    /// A wake while the sampler is awake is remembered: the next sleep ends at once.
    #[test]
    fn a_wake_between_the_look_and_the_sleep_is_not_lost() {
        let m = Metrics::new();
        m.alarm.asleep.store(true, Ordering::SeqCst);
        m.wake();
        // Returns at once: the wake rang before the sleep began.
        m.sleep();
        assert!(!m.alarm.asleep.load(Ordering::SeqCst));
    }
}
