//! The kfd path through a client's worker process on the emulated KFD, beside the same
//! path in rigd's own process: the doorbell forward (the client's doorbell store until the
//! KFD doorbell holds it), the release round trip (the store until a PM4 release's value
//! is in the client's memory, spinning) and a path call's round trip (GET_CLOCK_COUNTERS),
//! as p50/p99, plus the CPU of the worker while its client sits idle.
//!
//! Run: `cargo bench -p rigd --bench worker`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_kfd::seam::{Emulated, Kernel};
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use rigd::config::KfdConfig;
use rigd::path::kfd::{KfdBackend, KfdProcess};
use rigd::path::worker::{KernelSpec, WorkerCommand, WorkerUser, Workers};
use rigd::path::{Backend, Events, Owner, Path, QueueSpec};

const ROUNDS: usize = 2000;

fn events() -> Events {
    Events {
        interrupt: Arc::new(|| {}),
        fault: Arc::new(|f| panic!("fault in the bench: {f}")),
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn spin(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::hint::spin_loop();
    }
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn measure(name: &str, path: &mut Box<dyn Path>, server: &rig_kfd_emu::server::Server) {
    let ring = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let pos = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
    path.queue(QueueSpec {
        kind: QueueKind::Pm4,
        ring: ring.address,
        bytes: 4096,
        read: pos.address,
        write: pos.address + 64,
        doorbell: bell.clone(),
        scratch: (0, 0),
    })
    .unwrap();
    // The emulated KFD's doorbell page of the path's process (the one holding a queue).
    let procs = server.processes();
    let holder = procs
        .iter()
        .find(|p| p.holdings().0 == 1)
        .expect("one KFD process holds the queue");
    let page = holder
        .mmap(
            rig_kfd_emu::kernel::doorbell_mmap_offset(0),
            rig_kfd_emu::kernel::DOORBELL_SLICE_BYTES,
        )
        .unwrap();
    let kfd_bell = Doorbell::new(page, 0).unwrap();
    let (r, p) = (ring.host.clone().unwrap(), pos.host.clone().unwrap());
    let (mut forward, mut round) = (Vec::new(), Vec::new());
    let mut at = 0u64;
    for i in 0..ROUNDS as u64 {
        let mut words = [0u32; 8];
        let rel = rig_amd::pm4::ReleaseMem::timeline(
            rig_amd::pm4::ReleaseMem::write_back(rig_amd::gpu::Generation::Gfx11),
            pos.address + 128,
            i + 1,
        );
        let n = rel.encode(&mut words).unwrap();
        for w in &words[..n] {
            r.store_u32(((at % 1024) * 4) as usize, *w, Ordering::Relaxed);
            at += 1;
        }
        p.store_u64(64, at, Ordering::Release);
        let t0 = Instant::now();
        bell.ring(at);
        spin("the forward", || kfd_bell.value() == at);
        let t1 = Instant::now();
        spin("the release", || {
            p.load_u64(128, Ordering::Acquire) == i + 1
        });
        let t2 = Instant::now();
        forward.push(t1 - t0);
        round.push(t2 - t0);
    }
    let mut calls: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(path.clock());
            t.elapsed()
        })
        .collect();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{name:>9}: doorbell forward p50 {:7.1} us p99 {:7.1} us | release round trip p50 {:7.1} us p99 {:7.1} us | path call p50 {:6.1} us p99 {:6.1} us",
        us(pct(&mut forward, 0.5)),
        us(pct(&mut forward, 0.99)),
        us(pct(&mut round, 0.5)),
        us(pct(&mut round, 0.99)),
        us(pct(&mut calls, 0.5)),
        us(pct(&mut calls, 0.99)),
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, topo) = (dir.path().join("kfd.sock"), dir.path().join("topology"));
    let server = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let node = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == "gfx1100")
        .unwrap();
    println!("kfd path on the emulated KFD's gfx1100, {ROUNDS} rounds each");
    {
        let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
        let backend = KfdBackend::new(KfdProcess::open(kernel).unwrap(), node.clone()).unwrap();
        let mut path = backend.open(Owner(1), events()).unwrap();
        measure("in rigd", &mut path, &server);
    }
    // The bench's own KFD process lives as long as the bench (the kernel's rule), holding
    // no queue or memory once its path and backend are gone.
    spin("the in-process KFD process to give everything back", || {
        server
            .processes()
            .iter()
            .all(|p| matches!(p.holdings(), (0, 0, _)))
    });
    let workers = Workers::new(WorkerCommand {
        program: env!("CARGO_BIN_EXE_rig-worker").into(),
        kernel: KernelSpec::Emulated {
            socket: sock.clone(),
            topology: topo.clone(),
        },
        user: WorkerUser::of(&KfdConfig::default(), nix::unistd::geteuid().as_raw()).unwrap(),
    });
    let backend = workers
        .backends(std::slice::from_ref(&node))
        .remove(0)
        .unwrap();
    spin("the describing worker to end", || {
        server.processes().len() == 1 && workers.running().is_empty()
    });
    let mut path = backend.open(Owner(1), events()).unwrap();
    measure("in worker", &mut path, &server);
    let pid = workers.running()[0].1;
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let ticks = cpu_ticks(pid) - before;
    println!("idle worker with a queue: {ticks} clock ticks of CPU over 2 s");
    drop(path);
    // 64 idle clients, each a worker with a device and a PM4 queue.
    const IDLE: u64 = 64;
    let mut idle: Vec<Box<dyn Path>> = (0..IDLE)
        .map(|c| {
            let mut p = backend.open(Owner(100 + c), events()).unwrap();
            let ring = p.alloc(MemoryKind::Pinned, 4096).unwrap();
            let pos = p.alloc(MemoryKind::Pinned, 4096).unwrap();
            let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
            p.queue(QueueSpec {
                kind: QueueKind::Pm4,
                ring: ring.address,
                bytes: 4096,
                read: pos.address,
                write: pos.address + 64,
                doorbell: bell,
                scratch: (0, 0),
            })
            .unwrap();
            p
        })
        .collect();
    let pids: Vec<u32> = workers.running().iter().map(|w| w.1).collect();
    assert_eq!(pids.len(), IDLE as usize);
    let me = std::process::id();
    let sum = |pids: &[u32]| pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>();
    let (w0, e0) = (sum(&pids), cpu_ticks(me));
    std::thread::sleep(Duration::from_secs(5));
    let (w1, e1) = (sum(&pids), cpu_ticks(me));
    println!(
        "{IDLE} idle clients (a worker, a device and a queue each): workers {} ticks, the emulated KFD (this process) {} ticks of CPU over 5 s ({} ticks a second)",
        w1 - w0,
        e1 - e0,
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100)
    );
    idle.clear();
    let cost = backend.description().client_cost.unwrap();
    println!(
        "a client's compute queue takes {} MiB of VRAM (EOP + context save); {} clients run at once; {} queues' buffers fit in VRAM",
        cost.queue_bytes >> 20,
        cost.at_once,
        cost.queues_fit
    );
}
