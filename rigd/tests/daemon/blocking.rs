//! A slow stop of one client's device holds up no one else: rigd runs it on its blocking
//! pool under that device's lock alone, so another client's hello, open and alloc are
//! answered while it lasts, even on a runtime of one async worker.
//!
//! The stop is made slow by a path that waits at `stop` for the test to let it go (a real
//! simulated GPU's path otherwise), so the test knows the stop is in progress.

use std::os::fd::OwnedFd;
use std::path::Path as FsPath;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use rig_proto::Connection;
use rig_proto::messages::{GpuInfo, MemoryKind, PathKind, QueueKind, Request, Response};
use rig_shm::SharedRegion;
use rigd::config::{Config, SimGpuConfig};
use rigd::gpus::GpuEntry;
use rigd::path::sim::SimBackend;
use rigd::path::{
    Backend, Events, Fault, GpuDescription, MapRefusal, Owner, Path, PathMemory, QueueHandle,
    QueueSpec, Refusal, Stopped,
};

/// Where a stop waits: it says it arrived, then waits until opened.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Gate {
    fn arrive_and_wait(&self) {
        let mut s = self.state.lock().unwrap();
        s.0 = true;
        self.changed.notify_all();
        // Bounded, so a broken test cannot hang the suite.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !s.1 && Instant::now() < deadline {
            s = self
                .changed
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }

    fn arrived(&self) -> bool {
        self.state.lock().unwrap().0
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// The simulated GPU, whose devices' stops wait at the gate.
#[derive(Debug)]
struct GatedBackend {
    sim: SimBackend,
    gate: Arc<Gate>,
}

impl Backend for GatedBackend {
    fn description(&self) -> &GpuDescription {
        self.sim.description()
    }

    fn open(&self, owner: Owner, events: Events) -> Result<Box<dyn Path>, Refusal> {
        Ok(Box::new(GatedPath {
            sim: self.sim.open(owner, events)?,
            gate: self.gate.clone(),
        }))
    }
}

#[derive(Debug)]
struct GatedPath {
    sim: Box<dyn Path>,
    gate: Arc<Gate>,
}

impl Path for GatedPath {
    fn alloc(&mut self, kind: MemoryKind, bytes: u64) -> Result<PathMemory, Refusal> {
        self.sim.alloc(kind, bytes)
    }
    fn map_host(&mut self, fd: OwnedFd, offset: u64, bytes: u64) -> Result<PathMemory, MapRefusal> {
        self.sim.map_host(fd, offset, bytes)
    }
    fn map_peer(
        &mut self,
        region: &SharedRegion,
        offset: u64,
        bytes: u64,
    ) -> Result<PathMemory, Refusal> {
        self.sim.map_peer(region, offset, bytes)
    }
    fn free(&mut self, memory: PathMemory) {
        self.sim.free(memory)
    }
    fn upload(&mut self, memory: &PathMemory, offset: u64, data: &[u8]) -> Result<(), Fault> {
        self.sim.upload(memory, offset, data)
    }
    fn interrupt(&self) -> u32 {
        self.sim.interrupt()
    }
    fn wake_on_interrupt(&mut self, memory: &PathMemory, offset: u64) -> Result<(), Refusal> {
        self.sim.wake_on_interrupt(memory, offset)
    }
    fn queue(&mut self, spec: QueueSpec) -> Result<QueueHandle, Refusal> {
        self.sim.queue(spec)
    }
    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        self.sim.retire(queue)
    }
    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal> {
        self.sim.hand_scratch(address, bytes)
    }
    fn most_ring(&self, kind: QueueKind) -> u64 {
        self.sim.most_ring(kind)
    }
    fn clock(&self) -> u64 {
        self.sim.clock()
    }
    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        self.gate.arrive_and_wait();
        self.sim.stop(fault)
    }
    fn busy_since(&self) -> Option<Instant> {
        self.sim.busy_since()
    }
    fn progress(&self) -> u64 {
        self.sim.progress()
    }
}

fn entry(backend: Arc<dyn Backend>, index: u32) -> GpuEntry {
    GpuEntry {
        info: GpuInfo {
            index,
            name: format!("AMD:{index}"),
            arch: "gfx1100".into(),
            path: PathKind::Sim,
            bus: None,
            budget: backend.description().budget,
            simulated: true,
            unavailable: None,
        },
        backend: Some(backend),
        why_not: None,
        firmware: None,
    }
}

fn sim() -> SimBackend {
    SimBackend::new(&SimGpuConfig {
        processor: "gfx1100".into(),
        memory_bytes: 256 << 20,
        hang_ms: 10_000,
        clock: Default::default(),
    })
    .unwrap()
}

#[test]
fn a_slow_stop_of_one_device_delays_no_other_client() {
    let gate = Arc::new(Gate::default());
    // GPU 0's stops wait at the gate; GPU 1 is a plain simulated GPU.
    let gpus = vec![
        entry(
            Arc::new(GatedBackend {
                sim: sim(),
                gate: gate.clone(),
            }),
            0,
        ),
        entry(Arc::new(sim()), 1),
    ];
    let config = Config::parse("[access]\nany = true\n", FsPath::new("test.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("rigd.sock");
    // One async worker: work run on it would stall every connection.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let daemon = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let (listener, file) =
                    rigd::listen::bind(&socket, None, config.daemon.mode).unwrap();
                let daemon = rigd::Daemon::with_gpus(&config, gpus);
                daemon
                    .run(listener, async move {
                        let _ = stop_rx.await;
                    })
                    .await;
                drop(file);
            })
        })
    };
    let start = Instant::now();
    let mut a = loop {
        match Connection::connect(&socket, "slow") {
            Ok(c) => break c,
            Err(_) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("rigd did not come up: {e}"),
        }
    };
    let Response::DeviceOpened(opened) = a.call(&Request::OpenDevice { gpu: 0 }, &[]).unwrap().0
    else {
        panic!("open on gpu 0 refused")
    };
    let device = opened.device;
    let stopper = std::thread::spawn(move || {
        let r = a
            .call(
                &Request::StopDevice {
                    device,
                    last: 0,
                    fault: None,
                },
                &[],
            )
            .unwrap()
            .0;
        (a, r)
    });
    let start = Instant::now();
    while !gate.arrived() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the stop never reached the path"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // While that stop lasts, another client connects, opens devices on both GPUs and
    // allocates on each.
    let (tx, rx) = mpsc::channel();
    let other = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let mut b = Connection::connect(&socket, "other").unwrap();
            for gpu in [1, 0] {
                let Response::DeviceOpened(o) =
                    b.call(&Request::OpenDevice { gpu }, &[]).unwrap().0
                else {
                    panic!("open on gpu {gpu} refused")
                };
                let r = b
                    .call(
                        &Request::Alloc {
                            device: o.device,
                            memory: MemoryKind::Device,
                            bytes: 1 << 20,
                        },
                        &[],
                    )
                    .unwrap()
                    .0;
                assert!(matches!(r, Response::Allocated { .. }), "{r:?}");
            }
            let _ = tx.send(());
            b
        })
    };
    let answered = rx.recv_timeout(Duration::from_secs(10));
    // Let the stop go whatever happened, so nothing is left hanging.
    gate.open();
    assert!(
        answered.is_ok(),
        "another client's hello, open and alloc waited for a stop of a device not theirs"
    );
    let (_a, r) = stopper.join().unwrap();
    assert_eq!(r, Response::Done);
    drop(other.join().unwrap());
    let _ = stop_tx.send(());
    daemon.join().unwrap();
}
