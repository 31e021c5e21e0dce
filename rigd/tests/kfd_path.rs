//! rigd's kfd path on the emulated KFD: memory of each kind, host mappings, a PM4 queue
//! whose client doorbell is forwarded to KFD's and whose release interrupts the device,
//! a GPU page fault reported to the device with its address, and a stop that leaves no
//! queue behind in the emulated kernel.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rig_kfd::seam::{Emulated, Kernel};
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use rigd::path::kfd::{KfdBackend, KfdProcess};
use rigd::path::{Backend, Events, Path, QueueSpec, Stopped};

struct Setup {
    _dir: tempfile::TempDir,
    server: Arc<rig_kfd_emu::server::Server>,
    backend: KfdBackend,
}

fn setup(processor: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfd.sock");
    let topo = dir.path().join("topology");
    let server = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
    let node = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == processor)
        .unwrap();
    let backend = KfdBackend::new(KfdProcess::open(kernel).unwrap(), node).unwrap();
    Setup {
        _dir: dir,
        server,
        backend,
    }
}

#[derive(Default)]
struct Seen {
    interrupts: AtomicU64,
    faults: std::sync::Mutex<Vec<rig_proto::Fault>>,
}

fn events(seen: &Arc<Seen>) -> Events {
    let (a, b) = (seen.clone(), seen.clone());
    Events {
        client: 1,
        interrupt: Arc::new(move || {
            a.interrupts.fetch_add(1, Ordering::Relaxed);
        }),
        fault: Arc::new(move |why| b.faults.lock().unwrap().push(why)),
    }
}

fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A PM4 queue on Pinned memory, and the client's doorbell for it.
fn pm4_queue(path: &mut Box<dyn Path>) -> (SharedRegion, u64, SharedRegion, u64, Doorbell) {
    let ring = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let pos = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let page = SharedRegion::create("doorbells", 4096).unwrap();
    let bell = Doorbell::new(page, 0).unwrap();
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
    let (r, p) = (ring.host.clone().unwrap(), pos.host.clone().unwrap());
    (r, ring.address, p, pos.address, bell)
}

fn submit(ring: &SharedRegion, pos: &SharedRegion, bell: &Doorbell, address: u64, value: u64) {
    let mut words = [0u32; 8];
    let r = rig_amd::pm4::ReleaseMem::timeline(
        rig_amd::pm4::ReleaseMem::write_back(rig_amd::gpu::Generation::Gfx11),
        address,
        value,
    );
    let n = r.encode(&mut words).unwrap();
    ring.write_u32s(0, &words[..n]);
    pos.store_u64(64, n as u64, Ordering::Release);
    bell.ring(n as u64);
}

#[test]
fn the_description_comes_from_the_node_and_kfd() {
    let s = setup("gfx1201");
    let d = s.backend.description();
    assert_eq!(d.gpu.name(), "gfx1201");
    assert_eq!(d.budget, 4 << 30);
    assert_eq!(
        d.clock_hz, 100_000_000,
        "measured through GET_CLOCK_COUNTERS"
    );
    assert_eq!(d.mec, 2390);
    assert!(d.cache_bytes.is_some());
    assert_eq!(d.bus.as_deref(), Some("0000:04:00.0"));
}

#[test]
fn memory_of_each_kind_and_host_mappings() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let dev = path.alloc(MemoryKind::Device, 10_000).unwrap();
    assert_eq!(dev.bytes, 12288);
    assert!(dev.host.is_none());
    path.upload(&dev, 100, b"image bytes").unwrap();
    let mapped = path.alloc(MemoryKind::Mapped, 4096).unwrap();
    mapped.host.as_ref().unwrap().write(0, b"bar");
    let pinned = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    assert_ne!(pinned.address, mapped.address);
    let client = SharedRegion::create("client", 8192).unwrap();
    let m = path.map_host(client.dup_fd().unwrap(), 4096, 4096).unwrap();
    assert!(m.kind.is_none());
    for x in [dev, mapped, pinned, m] {
        path.free(x);
    }
}

#[test]
fn a_release_through_the_forwarded_doorbell_interrupts_the_device() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    submit(&ring, &pos, &bell, pos_va + 128, 0xfeed_f00d);
    until("the release", || {
        pos.load_u64(128, Ordering::Acquire) == 0xfeed_f00d
    });
    until("the interrupt", || {
        seen.interrupts.load(Ordering::Relaxed) > 0
    });
    assert!(path.progress() > 0);
    assert_eq!(path.stop(None), Stopped::Stopped);
    assert_eq!(
        s.server.processes()[0].holdings().0,
        0,
        "no queue left in the kernel"
    );
}

#[test]
fn a_gpu_page_fault_reaches_the_device_with_its_address() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let (ring, ring_va, pos, _, bell) = pm4_queue(&mut path);
    // Inside the device's own range but past its ring: unmapped.
    let bad = ring_va + 4096 + 64;
    submit(&ring, &pos, &bell, bad, 1);
    until("the fault", || !seen.faults.lock().unwrap().is_empty());
    let why = seen.faults.lock().unwrap()[0].clone();
    assert!(why.to_string().contains(&format!("{bad:#x}")), "{why}");
    assert_eq!(why.kind, rig_proto::FaultKind::MemoryFault, "{why}");
    assert_eq!(why.address, Some(bad), "{why}");
    // Reported once: the exception event resets when the path's wait takes it.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(seen.faults.lock().unwrap().len(), 1);
}

#[test]
fn two_gpus_of_one_kfd_process_each_wake_their_own_devices() {
    let dir = tempfile::tempdir().unwrap();
    let (sock, topo) = (dir.path().join("kfd.sock"), dir.path().join("topology"));
    let server = rig_kfd_emu::start(rig_kfd_emu::kernel::Config::default(), &sock, &topo).unwrap();
    let process = KfdProcess::open(Arc::new(Emulated::new(&sock, &topo))).unwrap();
    let nodes: Vec<_> = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .filter(|n| n.is_gpu() && n.processor_name() != "gfx942")
        .collect();
    let backends: Vec<KfdBackend> = nodes
        .into_iter()
        .map(|n| KfdBackend::new(process.clone(), n).unwrap())
        .collect();
    assert_eq!(
        server.processes().len(),
        1,
        "one KFD process, as the kernel keeps"
    );
    // A release on the second GPU, whose interrupt names event 0 like every release.
    let seen = Arc::new(Seen::default());
    let mut path = backends[1].open(events(&seen)).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    submit(&ring, &pos, &bell, pos_va + 128, 42);
    until("the release", || pos.load_u64(128, Ordering::Acquire) == 42);
    until("the interrupt", || {
        seen.interrupts.load(Ordering::Relaxed) > 0
    });
}

fn setup_with(config: rig_kfd_emu::kernel::Config, processor: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfd.sock");
    let topo = dir.path().join("topology");
    let server = rig_kfd_emu::start(config, &sock, &topo).unwrap();
    let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
    let node = rig_kfd::topology::read(&topo)
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == processor)
        .unwrap();
    let backend = KfdBackend::new(KfdProcess::open(kernel).unwrap(), node).unwrap();
    Setup {
        _dir: dir,
        server,
        backend,
    }
}

/// Host writes through the BAR (Mapped memory) pass the GPU's host data path: the
/// forwarder stores to its flush register before every doorbell it forwards, so the
/// emulated queue finds a flush before each (rig_kfd_emu::hdp).
#[test]
fn a_forwarded_doorbell_after_a_mapped_write_was_preceded_by_an_hdp_flush() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let mapped = path.alloc(MemoryKind::Mapped, 4096).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    mapped.host.as_ref().unwrap().write(0, b"through the BAR");
    submit(&ring, &pos, &bell, pos_va + 128, 7);
    until("the release", || pos.load_u64(128, Ordering::Acquire) == 7);
    let process = s.server.processes()[0].clone();
    let counts = process.doorbells_flushed();
    assert_eq!(counts.len(), 1, "one queue");
    let (doorbells, flushed) = counts[0];
    assert!(doorbells >= 1, "the queue saw its doorbells");
    assert_eq!(flushed, doorbells, "every doorbell came after an HDP flush");
    assert!(process.hdp_flushes() >= 1);
}

/// Where KFD gives no MMIO_REMAP page (ENOMEM), the path cannot flush the host's writes
/// through the BAR: Mapped memory is refused naming why, and Device and Pinned still work.
#[test]
fn mapped_memory_is_refused_where_kfd_gives_no_hdp_flush_page() {
    let s = setup_with(
        rig_kfd_emu::kernel::Config {
            mmio_remap: false,
            ..Default::default()
        },
        "gfx1100",
    );
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let e = path.alloc(MemoryKind::Mapped, 4096).unwrap_err();
    let why = e.to_string();
    assert!(matches!(e, rigd::path::Refusal::Refused(_)), "{why}");
    assert!(why.contains("HDP") && why.contains("MMIO_REMAP"), "{why}");
    assert!(
        why.contains("Cannot allocate memory"),
        "names KFD's errno: {why}"
    );
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    let pinned = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    submit(&ring, &pos, &bell, pos_va + 128, 5);
    until("the release", || pos.load_u64(128, Ordering::Acquire) == 5);
    path.free(dev);
    path.free(pinned);
}
