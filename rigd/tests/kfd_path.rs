//! rigd's kfd path on the emulated KFD: memory of each kind, host mappings, a PM4 queue
//! whose client doorbell is forwarded to KFD's and whose release interrupts the device,
//! a GPU page fault reported to the device with its address, and a stop that leaves no
//! queue behind in the emulated kernel; on a GPU whose BAR is smaller than its VRAM, Device
//! memory the host does not address, placed through the path's staging copy.

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
    setup_on(rig_kfd_emu::kernel::Config::default(), processor)
}

fn setup_on(config: rig_kfd_emu::kernel::Config, processor: &str) -> Setup {
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

/// An emulated gfx1100 of 4 GiB without resizable BAR: 256 MiB reach the host.
fn small_bar() -> Setup {
    setup_on(
        rig_kfd_emu::kernel::Config {
            models: vec!["gfx1100".into()],
            bar_bytes: Some(256 << 20),
            ..Default::default()
        },
        "gfx1100",
    )
}

/// The allocations the emulated kernel holds for the path's process: (flags, bytes).
fn memory(s: &Setup) -> Vec<(u32, u64)> {
    s.server.processes()[0].memory()
}

fn is_vram(flags: u32) -> bool {
    flags & rig_kfd::abi::ALLOC_MEM_FLAGS_VRAM != 0
}

fn is_public(flags: u32) -> bool {
    flags & rig_kfd::abi::ALLOC_MEM_FLAGS_PUBLIC != 0
}

/// Copies `bytes` from GPU address `src` to `dst` on an SDMA queue of `path` (the client's
/// way: its ring in Pinned memory, its doorbell forwarded), waiting for the copy's fence.
fn sdma_copy(path: &mut Box<dyn Path>, src: u64, dst: u64, bytes: u64) {
    let layout = rig_amd::sdma::Layout::for_gpu(rig_amd::gpu::Gpu::by_name("gfx1100").unwrap());
    let ring = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let pos = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let page = SharedRegion::create("doorbells", 4096).unwrap();
    let bell = Doorbell::new(page, 0).unwrap();
    path.queue(QueueSpec {
        kind: QueueKind::Sdma,
        ring: ring.address,
        bytes: 4096,
        read: pos.address,
        write: pos.address + 64,
        doorbell: bell.clone(),
        scratch: (0, 0),
    })
    .unwrap();
    let mut words = Vec::new();
    let mut done = 0;
    while done < bytes {
        let n = (bytes - done).min(1 << 20);
        let mut w = [0u32; rig_amd::sdma::CopyLinear::WORDS];
        rig_amd::sdma::CopyLinear::new(src + done, dst + done, n)
            .encode(layout, &mut w)
            .unwrap();
        words.extend_from_slice(&w);
        done += n;
    }
    let mut f = [0u32; rig_amd::sdma::Fence::WORDS];
    rig_amd::sdma::Fence::new(layout, pos.address + 128, 7)
        .encode(&mut f)
        .unwrap();
    words.extend_from_slice(&f);
    let (r, p) = (ring.host.clone().unwrap(), pos.host.clone().unwrap());
    r.write_u32s(0, &words);
    let wptr = 4 * words.len() as u64;
    p.store_u64(64, wptr, Ordering::Release);
    bell.ring(wptr);
    until("the read-back copy", || {
        p.load_u64(128, Ordering::Acquire) == 7
    });
}

#[test]
fn a_small_bar_gives_the_host_no_vram_and_a_large_one_all_of_it() {
    let s = small_bar();
    let node = &s.server.kernel().gpus()[0].node;
    assert_eq!(
        node.mem_banks[0].heap_type,
        rig_kfd::topology::HEAP_FRAME_BUFFER_PRIVATE,
        "kfd_crat.c lists VRAM past a small BAR as one private bank"
    );
    let d = s.backend.description();
    assert_eq!(d.budget, 4 << 30);
    assert_eq!(d.host_visible, 0, "KFD gives no PUBLIC VRAM on a small BAR");
    let large = setup("gfx1100");
    assert_eq!(large.backend.description().host_visible, 4 << 30);
}

#[test]
fn device_memory_is_not_host_visible_and_an_upload_past_the_staging_buffer_verifies() {
    let s = small_bar();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    // More than two staging buffers, at an offset that is no multiple of a page.
    let len = 2 * rigd::path::kfd::STAGING_BYTES as usize + 12_345;
    let dev = path.alloc(MemoryKind::Device, len as u64 + 8192).unwrap();
    assert!(dev.host.is_none());
    let vram: Vec<(u32, u64)> = memory(&s).into_iter().filter(|m| is_vram(m.0)).collect();
    assert!(
        vram.iter().any(|m| m.1 == dev.bytes) && !vram.iter().any(|m| is_public(m.0)),
        "Device memory is VRAM without PUBLIC in the kernel: {vram:?}"
    );
    let data: Vec<u8> = (0..len).map(|i| (i * 31 + i / 4099) as u8).collect();
    path.upload(&dev, 100, &data).unwrap();
    // Read back by a copy into Pinned memory.
    let back = path.alloc(MemoryKind::Pinned, dev.bytes).unwrap();
    sdma_copy(&mut path, dev.address, back.address, dev.bytes);
    let mut got = vec![0u8; dev.bytes as usize];
    back.host.as_ref().unwrap().read(0, &mut got);
    assert!(
        got[..100].iter().all(|b| *b == 0),
        "the bytes before stay zero"
    );
    assert!(
        got[100..100 + len] == data[..],
        "first difference at {:?}",
        got[100..].iter().zip(&data).position(|(a, b)| a != b)
    );
    assert!(
        got[100 + len..].iter().all(|b| *b == 0),
        "the bytes after stay zero"
    );
}

#[test]
fn mapped_memory_past_the_bar_is_refused_naming_it_while_device_memory_works() {
    let s = small_bar();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    match path.alloc(MemoryKind::Mapped, 4096) {
        Err(rigd::path::Refusal::Refused(why)) => {
            assert!(why.contains("BAR"), "{why}");
            assert!(why.contains("4096 MiB"), "{why}");
        }
        other => panic!("Mapped memory on a small BAR answered {other:?}"),
    }
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    path.upload(&dev, 0, b"still placed").unwrap();
    assert!(
        !memory(&s).iter().any(|m| is_public(m.0)),
        "no PUBLIC VRAM asked of the kernel"
    );
}

#[test]
fn the_staging_queue_and_buffer_go_at_stop() {
    let s = small_bar();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    assert!(s.server.processes()[0].queue_types().is_empty());
    path.upload(&dev, 0, b"image").unwrap();
    assert_eq!(
        s.server.processes()[0].queue_types(),
        [rig_kfd::abi::QUEUE_TYPE_SDMA],
        "the staging copy's SDMA queue, made by the first upload"
    );
    let gtt = rig_kfd::abi::ALLOC_MEM_FLAGS_GTT;
    assert!(memory(&s).iter().any(|m| m.0 & gtt != 0), "its GTT buffer");
    path.upload(&dev, 8, b"again").unwrap();
    assert_eq!(s.server.processes()[0].queue_types().len(), 1, "reused");
    assert_eq!(path.stop(None), Stopped::Stopped);
    assert_eq!(s.server.processes()[0].holdings().0, 0, "no queue left");
    assert!(
        !memory(&s).iter().any(|m| m.0 & gtt != 0),
        "the staging buffer freed: {:?}",
        memory(&s)
    );
    path.free(dev);
    assert_eq!(memory(&s), [], "nothing left");
}

#[test]
fn a_staging_copy_that_never_finishes_is_a_fault_naming_its_bound() {
    let s = small_bar();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(events(&seen)).unwrap();
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    path.upload(&dev, 0, b"first").unwrap();
    // The kernel stops every queue of the process (as at its end): no fence comes.
    s.server.processes()[0].release();
    let start = Instant::now();
    let why = path.upload(&dev, 0, b"second").unwrap_err();
    let ms = rigd::path::kfd::STAGING_BOUND.as_millis();
    assert!(why.0.contains(&format!("within {ms} ms")), "{why}");
    assert!(start.elapsed() >= rigd::path::kfd::STAGING_BOUND);
}
