//! rigd's kfd path on the emulated KFD: memory of each kind, host mappings, a PM4 queue
//! whose client doorbell is forwarded to KFD's and whose release interrupts the device,
//! a GPU page fault reported to the device with its address, a stop that leaves no
//! queue behind in the emulated kernel, and AQL queues with their `amd_queue_t`: a kernel
//! with a private array runs with the scratch the descriptor gives it (gfx1100), scratch
//! the descriptor places where nothing is mapped faults the device there, and a gfx942
//! queue's descriptor holds what KFD's command processor reads; on a GPU whose BAR is
//! smaller than its VRAM, Device memory the host does not address, placed through the
//! path's staging copy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rig_amd::aql::{AmdQueue, Barrier, KernelDispatch, Packet};
use rig_amd::code_object::CodeObject;
use rig_amd::kernarg::{self, Grid};
use rig_kfd::seam::{Emulated, Kernel};
use rig_proto::messages::{MemoryKind, QueueKind};
use rig_shm::{Doorbell, SharedRegion};
use rigd::path::kfd::{KfdBackend, KfdProcess};
use rigd::path::{Backend, Events, Owner, Path, PathMemory, QueueHandle, QueueSpec, Stopped};

/// An emulated KFD and rigd's kfd backend for one of its GPUs (also the queue-slot tests').
pub(super) struct Setup {
    pub(super) _dir: tempfile::TempDir,
    pub(super) server: Arc<rig_kfd_emu::server::Server>,
    pub(super) backend: KfdBackend,
}

fn setup(processor: &str) -> Setup {
    setup_on(rig_kfd_emu::kernel::Config::default(), processor)
}

pub(super) fn setup_on(config: rig_kfd_emu::kernel::Config, processor: &str) -> Setup {
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

/// What a path's events reported (also the worker tests').
#[derive(Default)]
pub(super) struct Seen {
    pub(super) interrupts: AtomicU64,
    pub(super) faults: std::sync::Mutex<Vec<rig_proto::Fault>>,
}

pub(super) fn events(seen: &Arc<Seen>) -> Events {
    let (a, b) = (seen.clone(), seen.clone());
    Events {
        interrupt: Arc::new(move || {
            a.interrupts.fetch_add(1, Ordering::Relaxed);
        }),
        fault: Arc::new(move |why| b.faults.lock().unwrap().push(why)),
    }
}

pub(super) fn until(what: &str, f: impl Fn() -> bool) {
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
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
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
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
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

/// The path's interrupt handler is what wakes a client asleep on its word: the emulated
/// KFD, like the kernel, only signals the event the release's context names (the path's
/// signal event, id 1: the kernel keeps 0), and the path's event thread wakes the word's
/// futex. The sleeper's wait is unbounded but for a hang guard far beyond the round trip.
#[test]
fn a_release_naming_the_paths_context_wakes_the_sleepers_of_the_devices_word() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    assert_eq!(path.interrupt(), rig_kfd_emu::kernel::FIRST_SIGNAL_EVENT);
    let word = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    path.wake_on_interrupt(&word, 0).unwrap();
    assert!(
        path.wake_on_interrupt(&word, 0).is_err(),
        "a device has one word"
    );
    let (ring, _, pos, _, bell) = pm4_queue(&mut path);
    // Another mapping of the word's memfd, as the client's.
    let host = word.host.as_ref().unwrap();
    let client = SharedRegion::from_fd(host.dup_fd().unwrap()).unwrap();
    const GUARD: Duration = Duration::from_secs(30);
    let sleeper = std::thread::spawn(move || {
        let t = Instant::now();
        let w = client.atomic_u32(0);
        while w.load(Ordering::Acquire) == 0 && t.elapsed() < GUARD {
            rig_shm::futex::wait(w, 0, Some(GUARD));
        }
        t.elapsed()
    });
    // Asleep by now; were it not, it would see the value and end at once.
    std::thread::sleep(Duration::from_millis(50));
    let mut words = [0u32; 8];
    let mut r = rig_amd::pm4::ReleaseMem::timeline(
        rig_amd::pm4::ReleaseMem::write_back(rig_amd::gpu::Generation::Gfx11),
        word.address,
        7,
    );
    r.int_ctxid = path.interrupt();
    let n = r.encode(&mut words).unwrap();
    ring.write_u32s(0, &words[..n]);
    pos.store_u64(64, n as u64, Ordering::Release);
    bell.ring(n as u64);
    let slept = sleeper.join().unwrap();
    assert!(slept < GUARD / 2, "the release's interrupt woke no sleeper");
    assert_eq!(host.load_u64(0, Ordering::Acquire), 7);
    // The handler wakes the word before it tells the device.
    until("the interrupt", || {
        seen.interrupts.load(Ordering::Relaxed) > 0
    });
    assert_eq!(path.stop(None), Stopped::Stopped);
}

#[test]
fn a_gpu_page_fault_reaches_the_device_with_its_address() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
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
    let mut path = backends[1].open(Owner(1), events(&seen)).unwrap();
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
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
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
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    match path.alloc(MemoryKind::Mapped, 4096) {
        Err(rigd::path::Refusal::Refused(why)) => {
            assert!(why.what.contains("BAR"), "{why}");
            assert!(why.what.contains("4096 MiB"), "{why}");
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
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
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
    // The backend's HDP flush page is the GPU's, not the path's: it stays while the backend does.
    let remap = rig_kfd::abi::ALLOC_MEM_FLAGS_MMIO_REMAP;
    let left: Vec<_> = memory(&s)
        .into_iter()
        .filter(|m| m.0 & remap == 0)
        .collect();
    assert_eq!(left, [], "nothing left");
}

#[test]
fn a_staging_copy_that_never_finishes_is_a_fault_naming_its_bound() {
    let s = small_bar();
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    path.upload(&dev, 0, b"first").unwrap();
    // The kernel stops every queue of the process (as at its end): no fence comes.
    s.server.processes()[0].release();
    let start = Instant::now();
    let why = path.upload(&dev, 0, b"second").unwrap_err();
    let ms = rigd::path::kfd::STAGING_BOUND.as_millis();
    assert!(why.0.what.contains(&format!("within {ms} ms")), "{why}");
    assert!(start.elapsed() >= rigd::path::kfd::STAGING_BOUND);
}

/// An AQL queue of 64 packets on Pinned memory whose every kernel gets `scratch`: its ring
/// (every slot INVALID), its positions page (read at 0, write at 64) and the client's
/// doorbell.
struct Aql {
    ring: SharedRegion,
    pos: SharedRegion,
    bell: Doorbell,
    handle: QueueHandle,
    _memory: [PathMemory; 2],
}

fn aql_queue(path: &mut Box<dyn Path>, scratch: (u64, u64)) -> Aql {
    let ring = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let pos = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let r = ring.host.clone().unwrap();
    for slot in 0..64 {
        r.store_u32(
            slot * 64,
            u32::from(rig_amd::aql::TYPE_INVALID),
            Ordering::Relaxed,
        );
    }
    let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
    let handle = path
        .queue(QueueSpec {
            kind: QueueKind::Aql,
            ring: ring.address,
            bytes: 4096,
            read: pos.address,
            write: pos.address + 64,
            doorbell: bell.clone(),
            scratch,
        })
        .unwrap();
    Aql {
        ring: r,
        pos: pos.host.clone().unwrap(),
        bell,
        handle,
        _memory: [ring, pos],
    }
}

const ITEMS: usize = 256;

/// The committed gfx1100 `scratch` kernel (kernels/src/scratch.cl: a private array of 320
/// words per item), or `None`, saying so, when it is absent.
fn scratch_kernel() -> Option<CodeObject> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/out/gfx1100/scratch.co");
    let Ok(bytes) = std::fs::read(&path) else {
        println!(
            "skipped: {} is absent (kernels/build.sh makes it)",
            path.display()
        );
        return None;
    };
    Some(CodeObject::parse(&bytes).unwrap())
}

/// Places `co`'s `scratch` kernel in Device memory, its input and kernel arguments in Pinned
/// memory, and submits one dispatch of ITEMS items on `q`; answers the Pinned memory (input
/// at 4096, output after it), the seeds, and the code's memory.
fn launch_scratch(
    path: &mut Box<dyn Path>,
    co: &CodeObject,
    q: &Aql,
) -> (PathMemory, Vec<u32>, PathMemory) {
    let k = co.kernel("scratch").unwrap().clone();
    let code = path.alloc(MemoryKind::Device, co.image_size()).unwrap();
    let mut image = vec![0u8; co.image_size() as usize];
    co.place(code.address, &mut image).unwrap();
    path.upload(&code, 0, &image).unwrap();
    let mem = path.alloc(MemoryKind::Pinned, 8192).unwrap();
    let host = mem.host.clone().unwrap();
    let seeds: Vec<u32> = (0..ITEMS as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
        .collect();
    for (i, s) in seeds.iter().enumerate() {
        host.write(4096 + 4 * i, &s.to_le_bytes());
    }
    let (input, out) = (mem.address + 4096, mem.address + 4096 + 4 * ITEMS as u64);
    let mut params = input.to_le_bytes().to_vec();
    params.extend(out.to_le_bytes());
    let grid = Grid {
        groups: [(ITEMS / 64) as u32, 1, 1],
        group_size: [64, 1, 1],
        dynamic_lds: 0,
    };
    let mut ka = vec![0u8; 1024];
    let n = kernarg::layout(k.plan(), &params, &[], &grid, &mut ka).unwrap();
    host.write(0, &ka[..n]);
    let words = Packet::KernelDispatch(KernelDispatch {
        header: Default::default(),
        dimensions: 1,
        workgroup_size: [64, 1, 1],
        grid_size: [ITEMS as u32, 1, 1],
        private_segment_size: k.private_segment_size(),
        group_segment_size: 0,
        kernel_object: code.address + k.descriptor_offset(),
        kernarg_address: mem.address,
        completion_signal: 0,
    })
    .encode()
    .unwrap();
    for (i, w) in words.iter().enumerate().skip(1) {
        q.ring.store_u32(4 * i, *w, Ordering::Relaxed);
    }
    q.ring.store_u32(0, words[0], Ordering::Release);
    q.pos.store_u64(64, 1, Ordering::Release);
    q.bell.ring(1);
    (mem, seeds, code)
}

/// Scratch for every wave slot of the GPU, as rigd sizes a kernel's: its bytes per wave
/// times compute units times their waves.
fn scratch_bytes(gpu: &rig_amd::gpu::Gpu, co: &CodeObject) -> u64 {
    let k = co.kernel("scratch").unwrap();
    gpu.hal().wave_scratch(k.private_segment_size(), k.wave64())
        * u64::from(gpu.compute_units * gpu.waves_per_cu)
}

#[test]
fn an_aql_queue_runs_a_kernel_with_the_scratch_of_its_amd_queue() {
    let Some(co) = scratch_kernel() else {
        return;
    };
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let gpu = s.backend.description().gpu.clone();
    let scratch = path
        .alloc(MemoryKind::Device, scratch_bytes(&gpu, &co))
        .unwrap();
    let kernel = &s.server.processes()[0];
    let before = kernel.holdings().1;
    let q = aql_queue(&mut path, (scratch.address, scratch.bytes));
    assert_eq!(
        kernel.holdings().1,
        before + 5,
        "ring, positions, EOP buffer, context-save area and the amd_queue_t"
    );
    let (mem, seeds, _code) = launch_scratch(&mut path, &co, &q);
    until("the client's read position", || {
        q.pos.load_u64(0, Ordering::Acquire) == 1 || !seen.faults.lock().unwrap().is_empty()
    });
    assert!(seen.faults.lock().unwrap().is_empty(), "{:?}", seen.faults);
    let host = mem.host.as_ref().unwrap();
    for (i, seed) in seeds.iter().enumerate() {
        let t: Vec<u32> = (0..320u32)
            .map(|k| seed.wrapping_mul(k).wrapping_add(i as u32))
            .collect();
        let want = (0..64u32).fold(0u32, |acc, k| {
            acc.wrapping_add(t[(seed.wrapping_add(k * 37) % 320) as usize])
        });
        assert_eq!(
            host.load_u32(4096 + 4 * ITEMS + 4 * i, Ordering::Acquire),
            want,
            "out[{i}]"
        );
    }
    let d = kernel.amd_queues()[0].expect("the command processor reads the amd_queue_t");
    assert_eq!(
        d.read_dispatch_id, 1,
        "KFD's read pointer is the descriptor's"
    );
    assert_eq!(
        d.write_dispatch_id, 1,
        "KFD's write pointer is the descriptor's"
    );
    assert_eq!(d.scratch_backing_memory_location, scratch.address);
    let (queues, held) = (kernel.holdings().0, kernel.holdings().1);
    path.retire(q.handle).unwrap();
    // The path's staging queue (the image's upload into Device memory) stays until stop.
    assert_eq!(
        kernel.holdings().0,
        queues - 1,
        "the AQL queue left the kernel"
    );
    assert_eq!(
        kernel.holdings().1,
        held - 3,
        "retire frees the EOP buffer, the context-save area and the amd_queue_t"
    );
}

#[test]
fn scratch_the_amd_queue_places_where_nothing_is_mapped_faults_the_device_there() {
    let Some(co) = scratch_kernel() else {
        return;
    };
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let gpu = s.backend.description().gpu.clone();
    let bytes = scratch_bytes(&gpu, &co);
    // Far past anything the path handed out: mapped by no one.
    let bad = 0x70_0000_0000u64;
    let q = aql_queue(&mut path, (bad, bytes));
    let _launched = launch_scratch(&mut path, &co, &q);
    until("the fault", || !seen.faults.lock().unwrap().is_empty());
    let why = seen.faults.lock().unwrap()[0].clone();
    assert_eq!(why.kind, rig_proto::FaultKind::MemoryFault, "{why}");
    let at = why.address.expect("the faulting address");
    assert!(
        (bad..bad + bytes).contains(&at),
        "the kernel faults in the scratch its queue names: {why}"
    );
    assert_eq!(path.stop(None), Stopped::Stopped);
    assert_eq!(s.server.processes()[0].holdings().0, 0);
}

#[test]
fn a_gfx942_aql_queue_holds_its_ring_and_scratch_in_its_amd_queue() {
    let s = setup("gfx942");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let gpu = s.backend.description().gpu.clone();
    let waves = gpu.compute_units * gpu.waves_per_cu;
    let wave_bytes = 4096u64;
    let scratch = path
        .alloc(MemoryKind::Device, wave_bytes * u64::from(waves))
        .unwrap();
    let kernel = &s.server.processes()[0];
    let before = kernel.holdings().1;
    let _q = aql_queue(&mut path, (scratch.address, scratch.bytes));
    assert_eq!(
        kernel.queue_types(),
        vec![rig_kfd::abi::QUEUE_TYPE_COMPUTE_AQL]
    );
    let d = kernel.amd_queues()[0].expect("the command processor reads the amd_queue_t");
    let mut want = AmdQueue::new(d.base_address, 4096);
    want.id = d.id;
    want.max_cu_id = gpu.compute_units - 1;
    want.max_wave_id = gpu.waves_per_cu - 1;
    want.set_scratch(gpu.hal(), scratch.address, scratch.bytes, waves);
    assert_eq!(d, want);
    assert_eq!(d.size, 64, "packets of the ring");
    assert_eq!(d.read_dispatch_id_field_base_byte_offset, 128);
    // GFX9 counts WAVESIZE in 1 KiB granules: 4 of them a wave.
    assert_eq!(gpu.hal().scratch_granule, 1024);
    assert_eq!(gpu.hal().tmpring_wave_bytes(d.compute_tmpring_size), 4096);
    assert_eq!(d.scratch_wave64_lane_byte_size, 64);
    assert_eq!(
        d.scratch_resource_descriptor,
        rig_amd::dispatch::scratch_resource(scratch.address, scratch.bytes)
    );
    assert_eq!(path.stop(None), Stopped::Stopped);
    assert_eq!(kernel.holdings().0, 0, "no queue left in the kernel");
    assert_eq!(
        kernel.holdings().1,
        before + 2,
        "stop frees the queue's EOP buffer, context-save area and amd_queue_t (the ring and positions stay)"
    );
}

#[test]
fn an_aql_queues_read_position_reaches_the_client_as_its_packets_run() {
    let s = setup("gfx942");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let q = aql_queue(&mut path, (0, 0));
    // Barrier-AND packets with no signal complete at once; 200 go round the 64-slot ring
    // three times, each placed once the read position the client sees leaves it room.
    let barrier = Packet::BarrierAnd(Barrier {
        header: Default::default(),
        dep_signal: [0; 5],
        completion_signal: 0,
    })
    .encode()
    .unwrap();
    for i in 0..200u64 {
        until("room in the ring", || {
            q.pos.load_u64(0, Ordering::Acquire) + 64 > i
        });
        let at = (i % 64) as usize * 64;
        for (k, w) in barrier.iter().enumerate().skip(1) {
            q.ring.store_u32(at + 4 * k, *w, Ordering::Relaxed);
        }
        q.ring.store_u32(at, barrier[0], Ordering::Release);
        q.pos.store_u64(64, i + 1, Ordering::Release);
        q.bell.ring(i + 1);
    }
    until("every packet", || {
        q.pos.load_u64(0, Ordering::Acquire) == 200
    });
    let d = s.server.processes()[0].amd_queues()[0].unwrap();
    assert_eq!((d.read_dispatch_id, d.write_dispatch_id), (200, 200));
    assert!(seen.faults.lock().unwrap().is_empty(), "{:?}", seen.faults);
}

/// Host writes through the BAR (Mapped memory) pass the GPU's host data path: the
/// forwarder stores to its flush register before every doorbell it forwards, so the
/// emulated queue finds a flush before each (rig_kfd_emu::hdp).
#[test]
fn a_forwarded_doorbell_after_a_mapped_write_was_preceded_by_an_hdp_flush() {
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let mapped = path.alloc(MemoryKind::Mapped, 4096).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    mapped.host.as_ref().unwrap().write(0, b"through the BAR");
    submit(&ring, &pos, &bell, pos_va + 128, 7);
    until("the release", || pos.load_u64(128, Ordering::Acquire) == 7);
    let process = s.server.processes()[0].clone();
    assert_eq!(process.doorbells_flushed().len(), 1, "one queue");
    // The queue may have run the packets before the doorbell reached it (a queue thread that
    // started after the submission reads the write position at once), so the doorbell's count
    // can come after the release.
    until("the queue's doorbell", || {
        process.doorbells_flushed()[0].0 >= 1
    });
    let (doorbells, flushed) = process.doorbells_flushed()[0];
    assert_eq!(flushed, doorbells, "every doorbell came after an HDP flush");
    assert!(process.hdp_flushes() >= 1);
}

/// Where KFD gives no MMIO_REMAP page (ENOMEM), the path cannot flush the host's writes
/// through the BAR: Mapped memory is refused naming why, and Device and Pinned still work.
#[test]
fn mapped_memory_is_refused_where_kfd_gives_no_hdp_flush_page() {
    let s = setup_on(
        rig_kfd_emu::kernel::Config {
            mmio_remap: false,
            ..Default::default()
        },
        "gfx1100",
    );
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let e = path.alloc(MemoryKind::Mapped, 4096).unwrap_err();
    let why = e.to_string();
    assert!(matches!(e, rigd::path::Refusal::Refused(_)), "{why}");
    assert!(why.contains("HDP") && why.contains("MMIO_REMAP"), "{why}");
    assert!(
        why.contains("Cannot allocate memory"),
        "names KFD's errno: {why}"
    );
    assert_eq!(e.why().errno(), Some(libc::ENOMEM), "keeps it");
    let dev = path.alloc(MemoryKind::Device, 4096).unwrap();
    let pinned = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let (ring, _, pos, pos_va, bell) = pm4_queue(&mut path);
    submit(&ring, &pos, &bell, pos_va + 128, 5);
    until("the release", || pos.load_u64(128, Ordering::Acquire) == 5);
    path.free(dev);
    path.free(pinned);
}

/// A queue in rig's device layout: its ring, then a page of positions (read at 0, write at
/// 64, a fence or release word at 128), in ONE Pinned allocation of `ring_bytes + 4096`.
struct OneAllocation {
    memory: PathMemory,
    host: SharedRegion,
    bell: Doorbell,
    handle: QueueHandle,
}

fn one_allocation_queue(
    path: &mut Box<dyn Path>,
    kind: QueueKind,
    ring_bytes: u64,
) -> OneAllocation {
    let memory = path.alloc(MemoryKind::Pinned, ring_bytes + 4096).unwrap();
    let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
    let handle = path
        .queue(QueueSpec {
            kind,
            ring: memory.address,
            bytes: ring_bytes,
            read: memory.address + ring_bytes,
            write: memory.address + ring_bytes + 64,
            doorbell: bell.clone(),
            scratch: (0, 0),
        })
        .unwrap();
    OneAllocation {
        host: memory.host.clone().unwrap(),
        memory,
        bell,
        handle,
    }
}

#[test]
fn pm4_and_sdma_queues_whose_ring_and_positions_share_an_allocation_run_under_linux_6_12s_rule() {
    // The emulated CREATE_QUEUE refuses (EINVAL) a ring not a mapping of its own size and
    // positions not in a one-page mapping of their own, as kfd_queue_buffer_get does; rig's
    // device keeps ring and positions in one allocation, which the path maps again.
    let s = setup("gfx1100");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let kernel = &s.server.processes()[0];
    let before = kernel.holdings();
    let ring_bytes = 8192;
    let pm4 = one_allocation_queue(&mut path, QueueKind::Pm4, ring_bytes);
    assert_eq!(
        kernel.holdings().1,
        before.1 + 5,
        "the allocation, its ring and positions mapped again, the EOP buffer and the \
         context-save area"
    );
    // A release to the positions page's word at 128: the command processor reads the ring
    // and the write position, and writes the read position, through the second mappings,
    // which are the client's pages.
    let pos = ring_bytes as usize;
    let mut words = [0u32; 8];
    let n = rig_amd::pm4::ReleaseMem::timeline(
        rig_amd::pm4::ReleaseMem::write_back(rig_amd::gpu::Generation::Gfx11),
        pm4.memory.address + ring_bytes + 128,
        0x600d_cafe,
    )
    .encode(&mut words)
    .unwrap();
    pm4.host.write_u32s(0, &words[..n]);
    pm4.host.store_u64(pos + 64, n as u64, Ordering::Release);
    pm4.bell.ring(n as u64);
    until("the release", || {
        pm4.host.load_u64(pos + 128, Ordering::Acquire) == 0x600d_cafe
    });
    until("the read position in the client's page", || {
        pm4.host.load_u64(pos, Ordering::Acquire) == n as u64
    });
    until("the interrupt", || {
        seen.interrupts.load(Ordering::Relaxed) > 0
    });

    // An SDMA queue in the same layout copies Pinned bytes and writes its fence.
    let layout = rig_amd::sdma::Layout::for_gpu(rig_amd::gpu::Gpu::by_name("gfx1100").unwrap());
    let src = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    let dst = path.alloc(MemoryKind::Pinned, 4096).unwrap();
    src.host
        .as_ref()
        .unwrap()
        .write(0, b"through the second mapping");
    let held = kernel.holdings().1;
    let sdma = one_allocation_queue(&mut path, QueueKind::Sdma, 4096);
    assert_eq!(
        kernel.holdings().1,
        held + 3,
        "the allocation, its ring and positions mapped again"
    );
    let mut w = [0u32; rig_amd::sdma::CopyLinear::WORDS + rig_amd::sdma::Fence::WORDS];
    let c = rig_amd::sdma::CopyLinear::new(src.address, dst.address, 26)
        .encode(layout, &mut w)
        .unwrap();
    rig_amd::sdma::Fence::new(layout, sdma.memory.address + 4096 + 128, 9)
        .encode(&mut w[c..])
        .unwrap();
    sdma.host.write_u32s(0, &w);
    let wptr = 4 * w.len() as u64;
    sdma.host.store_u64(4096 + 64, wptr, Ordering::Release);
    sdma.bell.ring(wptr);
    until("the SDMA fence", || {
        sdma.host.load_u32(4096 + 128, Ordering::Acquire) == 9
    });
    let mut got = [0u8; 26];
    dst.host.as_ref().unwrap().read(0, &mut got);
    assert_eq!(&got, b"through the second mapping");
    assert!(seen.faults.lock().unwrap().is_empty(), "{:?}", seen.faults);

    // Retire and stop leave no second mapping behind.
    path.retire(sdma.handle).unwrap();
    assert_eq!(
        kernel.holdings().1,
        held + 1,
        "the SDMA queue's allocation alone"
    );
    path.free(sdma.memory);
    for m in [src, dst] {
        path.free(m);
    }
    assert_eq!(kernel.holdings().1, before.1 + 5);
    assert_eq!(path.stop(None), Stopped::Stopped);
    assert_eq!(
        kernel.holdings(),
        (0, before.1 + 1, before.2),
        "no queue and, of the PM4 queue's buffers, only the client's allocation left"
    );
    path.free(pm4.memory);
    assert_eq!(kernel.holdings().1, before.1);
}

#[test]
fn an_aql_queue_whose_ring_and_positions_share_an_allocation_runs_round_its_ring() {
    // The ring's pages are mapped again for KFD; the positions are the amd_queue_t's.
    let s = setup("gfx942");
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let kernel = &s.server.processes()[0];
    let before = kernel.holdings();
    let memory = path.alloc(MemoryKind::Pinned, 4096 + 4096).unwrap();
    let host = memory.host.clone().unwrap();
    for slot in 0..64 {
        host.store_u32(
            slot * 64,
            u32::from(rig_amd::aql::TYPE_INVALID),
            Ordering::Relaxed,
        );
    }
    let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
    let spec = |ring: u64| QueueSpec {
        kind: QueueKind::Aql,
        ring,
        bytes: 4096,
        read: memory.address + 4096,
        write: memory.address + 4096 + 64,
        doorbell: bell.clone(),
        scratch: (0, 0),
    };
    let e = path.queue(spec(memory.address + 64)).unwrap_err();
    assert!(e.to_string().contains("does not begin a page"), "{e}");
    assert_eq!(
        kernel.holdings().1,
        before.1 + 1,
        "nothing left of the refusal"
    );
    let handle = path.queue(spec(memory.address)).unwrap();
    assert_eq!(
        kernel.holdings().1,
        before.1 + 5,
        "the allocation, its ring mapped again, the EOP buffer, the context-save area and \
         the amd_queue_t"
    );
    let barrier = Packet::BarrierAnd(Barrier {
        header: Default::default(),
        dep_signal: [0; 5],
        completion_signal: 0,
    })
    .encode()
    .unwrap();
    for i in 0..100u64 {
        until("room in the ring", || {
            host.load_u64(4096, Ordering::Acquire) + 64 > i
        });
        let at = (i % 64) as usize * 64;
        for (k, w) in barrier.iter().enumerate().skip(1) {
            host.store_u32(at + 4 * k, *w, Ordering::Relaxed);
        }
        host.store_u32(at, barrier[0], Ordering::Release);
        host.store_u64(4096 + 64, i + 1, Ordering::Release);
        bell.ring(i + 1);
    }
    until("every packet", || {
        host.load_u64(4096, Ordering::Acquire) == 100
    });
    assert!(seen.faults.lock().unwrap().is_empty(), "{:?}", seen.faults);
    path.retire(handle).unwrap();
    assert_eq!(
        kernel.holdings(),
        (0, before.1 + 1, before.2),
        "the client's allocation alone"
    );
    path.free(memory);
}

#[test]
fn a_queue_kfd_refuses_leaves_none_of_the_buffers_made_for_it() {
    // A kernel whose context-save rule asks more than rig_kfd::queue's sizes: CREATE_QUEUE
    // is EINVAL after the path made the queue's second mappings, EOP buffer and
    // context-save area, all of which it gives back.
    let s = setup_on(
        rig_kfd_emu::kernel::Config {
            models: vec!["gfx1100".into()],
            cwsr_extra_bytes: 4096,
            ..Default::default()
        },
        "gfx1100",
    );
    let seen = Arc::new(Seen::default());
    let mut path = s.backend.open(Owner(1), events(&seen)).unwrap();
    let kernel = &s.server.processes()[0];
    for kind in [QueueKind::Pm4, QueueKind::Aql] {
        let memory = path.alloc(MemoryKind::Pinned, 4096 + 4096).unwrap();
        let before = kernel.holdings();
        let bell = Doorbell::new(SharedRegion::create("doorbells", 4096).unwrap(), 0).unwrap();
        let e = path
            .queue(QueueSpec {
                kind,
                ring: memory.address,
                bytes: 4096,
                read: memory.address + 4096,
                write: memory.address + 4096 + 64,
                doorbell: bell,
                scratch: (0, 0),
            })
            .unwrap_err();
        assert!(e.to_string().contains("context-save area"), "{kind:?}: {e}");
        assert_eq!(
            e.why().errno(),
            Some(libc::EINVAL),
            "{kind:?}: KFD's errno is kept"
        );
        assert_eq!(
            kernel.holdings(),
            before,
            "{kind:?}: nothing of the queue is left"
        );
        path.free(memory);
    }
}

#[test]
fn the_sim_path_and_kfds_topology_state_the_same_shader_arrays() {
    // rig-amd owns shader arrays per engine (one on CDNA, two on RDNA): the simulated GPU
    // and the emulated KFD's topology both ask it.
    for processor in ["gfx942", "gfx1100"] {
        let s = setup(processor);
        let sim = rigd::path::sim::SimBackend::new(&rigd::config::SimGpuConfig {
            processor: processor.into(),
            memory_bytes: 64 << 20,
            hang_ms: 100,
            clock: Default::default(),
        })
        .unwrap();
        let (kfd, sim) = (&s.backend.description().wgps, &sim.description().wgps);
        let shape = |w: &Vec<Vec<u32>>| (w.len(), w[0].len());
        assert_eq!(shape(kfd), shape(sim), "{processor}");
        let arrays = rig_amd::gpu::Gpu::by_name(processor)
            .unwrap()
            .hal()
            .arrays_per_engine;
        assert_eq!(kfd[0].len(), arrays as usize, "{processor}");
    }
}
