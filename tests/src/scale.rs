//! The scale harness: N client processes, each opening every one of G simulated GPUs, submit
//! S values in all (fills, copies and launches of a small kernel, mixed), check that every
//! value is reached and every result matches a host oracle, and time control requests while
//! they work; and the figures of rigd's CPU while the same clients sit idle.
//!
//! The program that uses it (`tests/tests/e2e/scale.rs`, the `scale` bench) is rigd and every
//! client too: [`Daemon::start`] and [`spawn_worker`] run it again with an environment that
//! [`serve_main`] and [`worker_main`] recognise. rigd is configured for the scale asked
//! ([`config`]): the embedded defaults allow one user 64 connections and 64 devices, fewer
//! than 256 processes of one user holding 8 devices each.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rig_client::{Buffer, Device, Kernel, Launch, Memory, Ref, Rig, Submission};

/// The socket the child that serves rigd listens on.
pub const SERVE_ENV: &str = "RIG_SCALE_SERVE";
/// The plan, in the children (four numbers: clients, GPUs, steps, control period).
pub const PLAN_ENV: &str = "RIG_SCALE_PLAN";
/// The socket a worker connects to.
pub const SOCKET_ENV: &str = "RIG_SCALE_SOCKET";
/// A worker's number.
pub const WORKER_ENV: &str = "RIG_SCALE_WORKER";

/// Floats of the seed area each step reads from.
const SEED_FLOATS: u64 = 1024;
/// Floats of one step's slot (what a fill, a copy or a launch writes).
const SLOT_FLOATS: u64 = 64;
const SLOT_BYTES: u64 = 4 * SLOT_FLOATS;
/// Fill bytes: each makes a finite, normal float of every 4 bytes (0x3c3c3c3c ...).
const FILL_BYTES: [u8; 8] = [0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43];
/// Steps of one kind in a row.
const RUN: u64 = 16;

/// What a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Client processes.
    pub clients: u32,
    /// Simulated GPUs; every client opens each.
    pub gpus: u32,
    /// Values each device submits (0: the clients open their devices and sit idle).
    pub steps: u32,
    /// Every this many steps of a device its client times a control request.
    pub control_every: u32,
}

impl Plan {
    /// Values submitted in all.
    pub fn submissions(&self) -> u64 {
        u64::from(self.clients) * u64::from(self.gpus) * u64::from(self.steps)
    }

    fn to_env(self) -> String {
        format!(
            "{} {} {} {}",
            self.clients, self.gpus, self.steps, self.control_every
        )
    }

    fn from_env() -> Option<Plan> {
        let v = std::env::var(PLAN_ENV).ok()?;
        let n: Vec<u32> = v.split(' ').filter_map(|s| s.parse().ok()).collect();
        match n[..] {
            [clients, gpus, steps, control_every] => Some(Plan {
                clients,
                gpus,
                steps,
                control_every: control_every.max(1),
            }),
            _ => None,
        }
    }
}

/// rigd's configuration for `plan` on `socket`: `plan.gpus` simulated gfx1100s and limits
/// that let one user (every client here runs as the same user) hold `plan.clients`
/// connections with `plan.gpus` devices each, one buffer and one image per device.
pub fn config(socket: &Path, plan: Plan) -> rigd::config::Config {
    let mut c = rigd::config::Config::embedded();
    c.daemon.socket = socket.to_owned();
    c.daemon.mode = 0o600;
    let devices = plan.clients * plan.gpus;
    // A few more connections than clients: the harness's own, and the readiness probe's.
    c.daemon.max_connections = c.daemon.max_connections.max(plan.clients as usize + 16);
    c.connections.per_uid = plan.clients as usize + 16;
    // Connects come all at once.
    c.connections.backlog = c.connections.backlog.max(plan.clients + 16);
    c.limits.devices = devices.max(1);
    // Each device: its own descriptors and mappings, a buffer (one of each), an image.
    c.limits.fds = (devices * 8).max(1024);
    c.limits.mappings = (devices * 12).max(4096);
    c.limits.objects = c.limits.objects.max(devices * 4);
    // Each device's small buffers are cut from slabs (rig_client::slab): a Pinned and a
    // Device slab of SLAB_BYTES each, charged whole.
    let slabs = 2 * rig_client::SLABS.slab_bytes;
    c.limits.memory_bytes = c
        .limits
        .memory_bytes
        .max(u64::from(devices) * (slabs + (1 << 20)));
    // One user runs every client: it may take a whole GPU.
    c.limits.gpu_share_percent = 100;
    // The endpoint beside the socket: the bench reads rigd's own request latencies there.
    c.metrics.listen = socket.with_file_name("metrics.sock").display().to_string();
    c.sim = vec![
        rigd::config::SimGpuConfig {
            processor: "gfx1100".into(),
            // VRAM for each device's Device slab, its image and the control requests' buffers.
            memory_bytes: (u64::from(plan.clients) * (rig_client::SLABS.slab_bytes + (1 << 20)))
                .max(1 << 30),
            // 2048 devices share the machine's cores: a device may wait many seconds for
            // its queue's turn, which the default bound (2 s) would take for a hang.
            hang_ms: 300_000,
            clock: Default::default(),
        };
        plan.gpus.clamp(1, 8) as usize
    ];
    c
}

/// Serves rigd if this process was started as [`Daemon::start`]'s child, and returns its
/// exit code; `None` in any other process.
pub fn serve_main() -> Option<i32> {
    let socket = PathBuf::from(std::env::var_os(SERVE_ENV)?);
    let Some(plan) = Plan::from_env() else {
        eprintln!("the scale rigd: {PLAN_ENV} is not a plan");
        return Some(2);
    };
    // The daemon stops when the program that started it exits.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    let config = config(&socket, plan);
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(serve(&socket, &config)));
    Some(match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the scale rigd on {}: {e}", socket.display());
            1
        }
    })
}

/// rigd as `rigd::serve_until_sigterm` serves it, with its listen backlog and metrics
/// endpoint as the `rigd` binary sets them up.
async fn serve(socket: &Path, config: &rigd::config::Config) -> Result<(), String> {
    let (listener, file) =
        rigd::listen::bind(socket, None, config.daemon.mode).map_err(|e| e.to_string())?;
    rigd::listen::set_backlog(&listener, config.connections.backlog).map_err(|e| e.to_string())?;
    let daemon = rigd::Daemon::start(config, Path::new("/sys")).map_err(|e| e.to_string())?;
    daemon.serving(socket);
    let endpoint = match config.metrics.endpoint()? {
        Some(at) => Some(
            rigd::metrics::Endpoint::bind(&at, None)
                .await
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let metrics = endpoint.map(|e| tokio::spawn(rigd::metrics::serve(e, daemon.metrics())));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    daemon
        .run(listener, async move {
            term.recv().await;
        })
        .await;
    if let Some(m) = metrics {
        m.abort();
    }
    drop(file);
    Ok(())
}

/// A rigd of the harness's own, stopped (SIGTERM) when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Daemon {
    /// Starts this program again with `args` (what makes it call [`serve_main`]) as a rigd
    /// for `plan`, and waits until it answers.
    pub fn start(args: &[&str], plan: Plan) -> Daemon {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rig-scale-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let socket = dir.join("rigd.sock");
        let child = Command::new(std::env::current_exe().expect("this program's path"))
            .args(args)
            .env(SERVE_ENV, &socket)
            .env(PLAN_ENV, plan.to_env())
            .env_remove(SOCKET_ENV)
            .stdout(Stdio::null())
            .spawn()
            .expect("start rigd");
        let d = Daemon { child, dir, socket };
        let start = Instant::now();
        while Rig::connect_to(&d.socket).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "rigd did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its metrics endpoint.
    pub fn metrics_socket(&self) -> PathBuf {
        self.socket.with_file_name("metrics.sock")
    }

    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A worker process: started by [`spawn_worker`], it says `ready` on its stdout once its
/// devices are open, waits for a line on its stdin, then works its plan and prints its
/// figures ([`WorkerReport`]).
#[derive(Debug)]
pub struct Worker {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

/// Starts worker `k` of `plan` on `socket`: this program again with `args` (what makes it
/// call [`worker_main`]).
pub fn spawn_worker(args: &[&str], socket: &Path, plan: Plan, k: u32) -> Worker {
    let mut child = Command::new(std::env::current_exe().expect("this program's path"))
        .args(args)
        .env(SOCKET_ENV, socket)
        .env(WORKER_ENV, k.to_string())
        .env(PLAN_ENV, plan.to_env())
        .env_remove(SERVE_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a worker");
    let out = BufReader::new(child.stdout.take().expect("the worker's stdout"));
    Worker { child, out }
}

impl Worker {
    fn line(&mut self) -> String {
        let mut l = String::new();
        // A test harness's own words may share the line ("test scale_worker ... "): ours
        // begin at the prefix.
        loop {
            l.clear();
            match self.out.read_line(&mut l) {
                Ok(0) | Err(_) => return String::new(),
                Ok(_) => {
                    if let Some(at) = l.find("scale: ") {
                        return l[at..].trim_end().to_owned();
                    }
                }
            }
        }
    }

    /// Waits until the worker has opened its devices; false if it failed first.
    pub fn ready(&mut self) -> bool {
        self.line() == "scale: ready"
    }

    /// Lets it work.
    pub fn go(&mut self) {
        use std::io::Write;
        if let Some(i) = self.child.stdin.as_mut() {
            let _ = i.write_all(b"go\n");
            let _ = i.flush();
        }
    }

    /// Waits for its figures and its exit.
    pub fn finish(mut self) -> Result<WorkerReport, String> {
        let l = self.line();
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("a worker failed ({status}); its stderr says why"));
        }
        WorkerReport::parse(&l).ok_or_else(|| format!("a worker's report is malformed: {l:?}"))
    }
}

/// What a worker did.
#[derive(Debug, Clone, Default)]
pub struct WorkerReport {
    /// Values it submitted and saw reached, over all its devices.
    pub submissions: u64,
    /// Results it checked against the oracle (one per value).
    pub checked: u64,
    /// Control requests it timed: allocations of Device memory, in ns.
    pub alloc_ns: Vec<u64>,
    /// Control requests it timed: the GPU list, in ns.
    pub list_ns: Vec<u64>,
    /// Its submitting phase, in ns.
    pub work_ns: u64,
}

impl WorkerReport {
    fn line(&self) -> String {
        let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        format!(
            "scale: done {} {} {} {} {}",
            self.submissions,
            self.checked,
            self.work_ns,
            join(&self.alloc_ns),
            join(&self.list_ns)
        )
    }

    fn parse(l: &str) -> Option<WorkerReport> {
        let f: Vec<&str> = l.strip_prefix("scale: done ")?.split(' ').collect();
        let list = |s: &str| -> Option<Vec<u64>> {
            s.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().ok())
                .collect()
        };
        Some(WorkerReport {
            submissions: f.first()?.parse().ok()?,
            checked: f.get(1)?.parse().ok()?,
            work_ns: f.get(2)?.parse().ok()?,
            // Empty lists leave nothing after their space (and the line is trimmed).
            alloc_ns: list(f.get(3).copied().unwrap_or(""))?,
            list_ns: list(f.get(4).copied().unwrap_or(""))?,
        })
    }
}

/// One device of a worker: its buffer (seed area, then a slot per step), the `add` kernel,
/// and what the oracle says each slot holds at the end.
struct Lane {
    dev: Device,
    buf: Buffer,
    add: Kernel,
    want: Vec<u8>,
    first: u64,
    last: u64,
}

/// A deterministic small-integer float for position `i` of a stream `seed`.
fn value(seed: u64, i: u64) -> f32 {
    let mut x = (seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 1000) as f32 * 0.25
}

fn seed_off(at: u64) -> u64 {
    4 * at
}

fn slot_off(step: u64) -> u64 {
    4 * SEED_FLOATS + SLOT_BYTES * step
}

impl Lane {
    fn open(rig: &Rig, gpu: &str, code: &[u8], key: u64, steps: u64) -> Result<Lane, String> {
        let e = |what: &str, err: rig_client::Error| format!("{gpu}: {what}: {err}");
        let dev = rig.open_device(gpu).map_err(|x| e("open", x))?;
        let add = dev
            .load_image(code)
            .and_then(|i| i.resolve("add"))
            .map_err(|x| e("the add kernel", x))?;
        let bytes = slot_off(steps);
        let buf = dev
            .buffer(bytes, Memory::Pinned)
            .map_err(|x| e("the buffer", x))?;
        // The seed area, then each slot a pattern of its own that a launch adds to.
        let mut init = Vec::with_capacity(bytes as usize);
        for i in 0..SEED_FLOATS + SLOT_FLOATS * steps {
            init.extend_from_slice(&value(key, i).to_le_bytes());
        }
        buf.write(|b| b.copy_from_slice(&init))
            .map_err(|x| e("writing the buffer", x))?;
        let first = dev.signaled();
        Ok(Lane {
            dev,
            buf,
            add,
            want: init,
            first,
            last: first,
        })
    }

    /// Submits step `j` (a fill, a copy or a launch by `j` and `key`) and records its result
    /// in the oracle.
    fn step(&mut self, key: u64, j: u64) -> Result<(), String> {
        let slot = slot_off(j);
        let at = (j * 7 + key) % (SEED_FLOATS - SLOT_FLOATS);
        // Kinds come in runs of RUN steps: a fill or a copy runs on the copy queue, a launch
        // on the compute queue, and a value that changes queue waits for the value before
        // it on the other one. rig-sim wakes every such wait of a GPU at each engine write,
        // which 256 devices on one GPU turn into a storm (docs/performance.md, "Scale").
        let s = match (j / RUN + key) % 3 {
            0 => {
                let byte = FILL_BYTES[((j ^ key) % 8) as usize];
                self.want[slot as usize..(slot + SLOT_BYTES) as usize].fill(byte);
                Submission::new().fill(&self.buf, slot, SLOT_BYTES, byte)
            }
            1 => {
                let (src, dst) = (seed_off(at) as usize, slot as usize);
                self.want.copy_within(src..src + SLOT_BYTES as usize, dst);
                Submission::new().copy(&self.buf, seed_off(at), &self.buf, slot, SLOT_BYTES)
            }
            _ => {
                // add(x, y): y[i] += x[i], x and y offsets into the one buffer.
                for i in 0..SLOT_FLOATS as usize {
                    let f = |o: usize| {
                        let b = &self.want[o..o + 4];
                        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
                    };
                    let x = f(seed_off(at) as usize + 4 * i);
                    let y = f(slot as usize + 4 * i);
                    let o = slot as usize + 4 * i;
                    self.want[o..o + 4].copy_from_slice(&(y + x).to_le_bytes());
                }
                let mut p = [0u8; 16];
                p[..8].copy_from_slice(&seed_off(at).to_le_bytes());
                p[8..].copy_from_slice(&slot.to_le_bytes());
                Submission::new().launch(
                    Launch::new(&self.add, [1, 1, 1], [SLOT_FLOATS as u32, 1, 1])
                        .params(&p)
                        .refs(&[Ref::read(&self.buf, 0), Ref::write(&self.buf, 8)]),
                )
            }
        };
        let point = self.dev.submit(&s).map_err(|e| format!("submit: {e}"))?;
        if point.value() != self.last + 1 {
            return Err(format!(
                "step {j} got value {}, not the next after {}",
                point.value(),
                self.last
            ));
        }
        self.last = point.value();
        Ok(())
    }

    /// Waits for the last value and checks every slot. Returns the values checked.
    fn check(&self, steps: u64) -> Result<u64, String> {
        self.dev
            .last()
            .wait()
            .map_err(|e| format!("{}: waiting: {e}", self.dev.name()))?;
        let reached = self.dev.signaled();
        if reached < self.last || self.last - self.first != steps {
            return Err(format!(
                "{}: reached {reached}, submitted {} values from {}; {steps} expected",
                self.dev.name(),
                self.last - self.first,
                self.first
            ));
        }
        let got = self
            .buf
            .read(|b| b.to_vec())
            .map_err(|e| format!("reading back: {e}"))?;
        for j in 0..steps {
            let r = slot_off(j) as usize..slot_off(j + 1) as usize;
            if got[r.clone()] != self.want[r] {
                return Err(format!(
                    "{}: step {j} left a result the oracle does not expect",
                    self.dev.name()
                ));
            }
        }
        Ok(steps)
    }
}

/// The `add` kernel, built into the program so that it runs wherever it is copied.
const ADD_CODE: &[u8] = include_bytes!("../../kernels/out/gfx1100/add.co");

/// Runs a worker if this process was started as [`spawn_worker`]'s child, and returns its
/// exit code; `None` in any other process.
pub fn worker_main() -> Option<i32> {
    let socket = PathBuf::from(std::env::var_os(SOCKET_ENV)?);
    let k: u64 = std::env::var(WORKER_ENV).ok()?.parse().ok()?;
    let plan = Plan::from_env()?;
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    Some(match work(&socket, k, plan) {
        Ok(r) => {
            println!("{}", r.line());
            0
        }
        Err(e) => {
            eprintln!("scale worker {k}: {e}");
            1
        }
    })
}

fn work(socket: &Path, k: u64, plan: Plan) -> Result<WorkerReport, String> {
    let rig = Rig::connect_to(socket).map_err(|e| format!("connect: {e}"))?;
    let gpus = rig.gpus().map_err(|e| format!("gpus: {e}"))?;
    if gpus.len() < plan.gpus as usize {
        return Err(format!(
            "rigd serves {} GPUs, not {}",
            gpus.len(),
            plan.gpus
        ));
    }
    let steps = u64::from(plan.steps);
    let mut lanes = gpus[..plan.gpus as usize]
        .iter()
        .enumerate()
        .map(|(g, gpu)| Lane::open(&rig, &gpu.name, ADD_CODE, k * 64 + g as u64, steps))
        .collect::<Result<Vec<_>, _>>()?;
    println!("scale: ready");
    let mut go = String::new();
    let _ = std::io::stdin().read_line(&mut go);
    let mut r = WorkerReport::default();
    let began = Instant::now();
    for j in 0..steps {
        for (g, lane) in lanes.iter_mut().enumerate() {
            lane.step(k * 64 + g as u64, j)?;
            if (j + g as u64) % u64::from(plan.control_every) == 0 {
                let t = Instant::now();
                let b = lane
                    .dev
                    .buffer(64 << 10, Memory::Device)
                    .map_err(|e| format!("alloc: {e}"))?;
                r.alloc_ns.push(t.elapsed().as_nanos() as u64);
                drop(b);
                let t = Instant::now();
                rig.gpus().map_err(|e| format!("gpus: {e}"))?;
                r.list_ns.push(t.elapsed().as_nanos() as u64);
            }
        }
    }
    for lane in &lanes {
        r.checked += lane.check(steps)?;
        r.submissions += lane.last - lane.first;
    }
    r.work_ns = began.elapsed().as_nanos() as u64;
    for lane in lanes.drain(..) {
        lane.dev.close().map_err(|e| format!("close: {e}"))?;
    }
    Ok(r)
}

/// What a whole run measured.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// Values submitted, reached and checked, over all clients.
    pub submissions: u64,
    /// Results checked.
    pub checked: u64,
    /// From the first `go` to the last report.
    pub elapsed: Duration,
    /// Every client's timed allocations, in ns, sorted.
    pub alloc_ns: Vec<u64>,
    /// Every client's timed GPU lists, in ns, sorted.
    pub list_ns: Vec<u64>,
    /// What the `ready` hook of [`run`] returned.
    pub ticks_at_go: u64,
}

/// The `p` quantile (0 to 1) of sorted `v`, in microseconds.
pub fn quantile_us(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// Starts every worker of `plan`, waits until all have opened their devices, runs `ready`
/// while they all sit idle, lets them work, and gathers their reports. `progress` hears
/// each milestone.
pub fn run(
    args: &[&str],
    socket: &Path,
    plan: Plan,
    mut progress: impl FnMut(&str),
    ready: impl FnOnce() -> u64,
) -> Result<RunReport, String> {
    let mut workers: Vec<Worker> = (0..plan.clients)
        .map(|k| spawn_worker(args, socket, plan, k))
        .collect();
    for (k, w) in workers.iter_mut().enumerate() {
        if !w.ready() {
            return Err(format!("worker {k} did not open its devices"));
        }
    }
    progress(&format!(
        "{} clients hold {} devices",
        plan.clients,
        plan.clients * plan.gpus
    ));
    let ticks_at_go = ready();
    progress("submitting");
    let began = Instant::now();
    for w in &mut workers {
        w.go();
    }
    let mut all = RunReport {
        ticks_at_go,
        ..RunReport::default()
    };
    for (k, w) in workers.into_iter().enumerate() {
        let r = w.finish().map_err(|e| format!("worker {k}: {e}"))?;
        all.submissions += r.submissions;
        all.checked += r.checked;
        all.alloc_ns.extend(r.alloc_ns);
        all.list_ns.extend(r.list_ns);
        if (k + 1) % 32 == 0 {
            progress(&format!("{} clients done", k + 1));
        }
    }
    all.elapsed = began.elapsed();
    all.alloc_ns.sort_unstable();
    all.list_ns.sort_unstable();
    Ok(all)
}

/// Idle clients: `plan.clients` processes holding `plan.gpus` devices each and doing
/// nothing until dropped.
#[derive(Debug)]
pub struct Idle(Vec<Worker>);

impl Idle {
    /// Starts them (their plan's steps are ignored: they never get `go` until dropped) and
    /// waits until every device is open.
    pub fn start(args: &[&str], socket: &Path, plan: Plan) -> Result<Idle, String> {
        let plan = Plan { steps: 0, ..plan };
        let mut workers: Vec<Worker> = (0..plan.clients)
            .map(|k| spawn_worker(args, socket, plan, k))
            .collect();
        for (k, w) in workers.iter_mut().enumerate() {
            if !w.ready() {
                return Err(format!("idle client {k} did not open its devices"));
            }
        }
        Ok(Idle(workers))
    }

    /// Lets them close their devices and exit.
    pub fn finish(self) -> Result<(), String> {
        let mut workers = self.0;
        for w in &mut workers {
            w.go();
        }
        for w in workers {
            w.finish()?;
        }
        Ok(())
    }
}

/// One thread of a process, as `/proc/PID/task/TID` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    /// Its id.
    pub tid: i32,
    /// Its name.
    pub name: String,
    /// Its scheduler state (`S` sleeping, `R` running...).
    pub state: char,
    /// Clock ticks it ran, user and system (`utime + stime`).
    pub ticks: u64,
    /// Nanoseconds it ran (`schedstat`).
    pub run_ns: u64,
    /// Times it was switched in (`schedstat`): each wake-up counts one.
    pub runs: u64,
}

/// Every thread of process `pid`.
pub fn threads(pid: i32) -> Vec<ThreadCpu> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<ThreadCpu> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (head, tail) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_owned();
            let f: Vec<&str> = tail.split_whitespace().collect();
            // After the name: state is field 3, utime 14 and stime 15 (proc(5)).
            let state = f.first()?.chars().next()?;
            let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            let sched = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
            let mut s = sched.split_whitespace().map(|x| x.parse::<u64>().ok());
            let run_ns = s.next()??;
            let runs = s.nth(1)??;
            Some(ThreadCpu {
                tid,
                name,
                state,
                ticks,
                run_ns,
                runs,
            })
        })
        .collect();
    v.sort_by_key(|t| t.tid);
    v
}

/// Process `pid`'s CPU so far, user and system, in clock ticks (`/proc/PID/stat`).
pub fn process_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second of `/proc`'s CPU times: Linux's `USER_HZ`, 100 on every
/// architecture rig runs on.
pub const CLOCK_TICKS: u64 = 100;

/// How each thread of `pid` moved over `window`: the threads alive at both ends, with
/// their ticks, run time and wake-ups in the window.
pub fn thread_deltas(pid: i32, window: Duration) -> Vec<ThreadCpu> {
    let before = threads(pid);
    std::thread::sleep(window);
    let after = threads(pid);
    after
        .into_iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.tid == a.tid)?;
            Some(ThreadCpu {
                ticks: a.ticks - b.ticks,
                run_ns: a.run_ns - b.run_ns,
                runs: a.runs - b.runs,
                ..a
            })
        })
        .collect()
}
