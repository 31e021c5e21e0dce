//! The emulated KFD through rig-kfd's seam, as the amdgpu path reaches it: topology, memory,
//! queues that run packets on the simulated GPU, events, faults, teardown, and every errno
//! the emulation answers reaching the program as a clear error.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_kfd::abi::{self, EventData};
use rig_kfd::kfd::{Kfd, KfdError};
use rig_kfd::queue::{ContextSave, EOP_BUFFER_BYTES};
use rig_kfd::seam::{Emulated, Kernel, Pages};
use rig_kfd::sys::Errno;
use rig_kfd::topology::{self, Node};
use rig_kfd::version::{Version, VersionError};
use rig_kfd_emu::kernel::{
    Config, DOORBELL_SLICE_BYTES, DOORBELL_STRIDE, EVENT_PAGE_BYTES, GPUVM_BASE,
};
use rig_kfd_emu::server::Server;

struct Emu {
    _dir: tempfile::TempDir,
    server: Arc<Server>,
    kernel: Arc<dyn Kernel>,
    sock: std::path::PathBuf,
    topo: std::path::PathBuf,
}

/// The parent's or the child's end of the link to the other process.
struct Link(std::os::unix::net::UnixStream);

impl Link {
    fn send(&mut self, v: u64) {
        use std::io::Write;
        self.0.write_all(&v.to_le_bytes()).unwrap();
    }

    fn recv(&mut self) -> u64 {
        use std::io::Read;
        let mut b = [0u8; 8];
        self.0.read_exact(&mut b).unwrap();
        u64::from_le_bytes(b)
    }
}

/// A child process (KFD makes one KFD process per process: a second client must be a
/// process of its own) running `f` with its end of the link; returns the parent's end and
/// the child's pid.
fn in_child(f: impl FnOnce(&mut Link)) -> (Link, libc::pid_t) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    // SAFETY: the child runs only `f` (which talks to the emulation through sockets and
    // allocates through glibc's fork-safe malloc) and leaves with _exit, running nothing
    // of the parent's other threads' state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(a);
        let mut link = Link(b);
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut link))).is_ok();
        // SAFETY: ends the child without unwinding into the test harness's copy.
        unsafe { libc::_exit(if ok { 0 } else { 101 }) };
    }
    drop(b);
    // A child that hangs fails the test instead of hanging it.
    a.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    (Link(a), pid)
}

/// Waits for the child `pid`; true if it ran to its end.
fn child_succeeded(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waits for this test's own child.
    let got = unsafe { libc::waitpid(pid, &mut status, 0) };
    got == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

impl Emu {
    /// A kernel seam of this process's own (a forked child's calls must not share the
    /// parent's channels).
    fn own_kernel(&self) -> Arc<dyn Kernel> {
        Arc::new(Emulated::new(&self.sock, &self.topo))
    }
}

fn emulate(config: Config) -> Emu {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfd.sock");
    let topo = dir.path().join("topology");
    let server = rig_kfd_emu::start(config, &sock, &topo).unwrap();
    let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
    Emu {
        _dir: dir,
        server,
        kernel,
        sock,
        topo,
    }
}

/// One process bound to one GPU, with a bump allocator of GPU addresses.
struct Proc {
    kfd: Kfd,
    node: Node,
    _render: OwnedFd,
    render_raw: OwnedFd,
    next_va: u64,
}

fn errno(e: &KfdError) -> i32 {
    match e {
        KfdError::Ioctl {
            errno: Errno(n), ..
        } => *n,
        other => panic!("not an ioctl error: {other}"),
    }
}

impl Proc {
    fn open(emu: &Emu, processor: &str) -> Proc {
        Proc::open_through(emu.kernel.clone(), processor)
    }

    fn open_through(kernel: Arc<dyn Kernel>, processor: &str) -> Proc {
        let kfd = Kfd::open(kernel.clone()).unwrap();
        let node = topology::read(kernel.topology())
            .unwrap()
            .into_iter()
            .find(|n| n.is_gpu() && n.processor_name() == processor)
            .unwrap();
        let render = kfd
            .acquire_vm(node.gpu_id, node.drm_render_minor().unwrap())
            .unwrap();
        kfd.runtime_enable().unwrap();
        let render_raw = render.try_clone().unwrap();
        Proc {
            kfd,
            node,
            _render: render,
            render_raw,
            next_va: GPUVM_BASE,
        }
    }

    fn va(&mut self, bytes: u64) -> u64 {
        let va = self.next_va;
        self.next_va += bytes.div_ceil(4096) * 4096 + 4096;
        va
    }

    /// Allocates and maps `bytes` of `flags` memory; returns (va, handle, mmap offset).
    fn mem(&mut self, bytes: u64, flags: u32) -> (u64, u64, u64) {
        let va = self.va(bytes);
        let (h, off) = self
            .kfd
            .alloc(
                self.node.gpu_id,
                va,
                bytes,
                flags | abi::ALLOC_MEM_FLAGS_WRITABLE,
            )
            .unwrap();
        self.kfd.map(h, self.node.gpu_id).unwrap();
        (va, h, off)
    }

    fn host(&self, off: u64, bytes: usize) -> Pages {
        self.kfd
            .kernel()
            .mmap(self.render_raw.as_fd(), off, bytes)
            .unwrap()
    }
}

/// A PM4 queue with every buffer KFD asks for.
struct Pm4 {
    ring: Pages,
    pos: Pages,
    pos_va: u64,
    args: abi::CreateQueueArgs,
    bells: Option<Pages>,
}

fn pm4_queue_args(p: &mut Proc) -> Pm4 {
    let (ring_va, _, ring_off) = p.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let (pos_va, _, pos_off) = p.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let (eop_va, _, _) = p.mem(EOP_BUFFER_BYTES, abi::ALLOC_MEM_FLAGS_VRAM);
    let cs = ContextSave::of(&p.node);
    let (ctx_va, _, _) = p.mem(cs.total_bytes(), abi::ALLOC_MEM_FLAGS_VRAM);
    let args = abi::CreateQueueArgs {
        ring_base_address: ring_va,
        write_pointer_address: pos_va + 64,
        read_pointer_address: pos_va,
        ring_size: 4096,
        gpu_id: p.node.gpu_id,
        queue_type: abi::QUEUE_TYPE_COMPUTE,
        queue_percentage: 100,
        queue_priority: 7,
        eop_buffer_address: eop_va,
        eop_buffer_size: EOP_BUFFER_BYTES,
        ctx_save_restore_address: ctx_va,
        ctx_save_restore_size: cs.cwsr_bytes as u32,
        ctl_stack_size: cs.ctl_stack_bytes as u32,
        ..Default::default()
    };
    Pm4 {
        ring: p.host(ring_off, 4096),
        pos: p.host(pos_off, 4096),
        pos_va,
        args,
        bells: None,
    }
}

impl Pm4 {
    fn create(&mut self, p: &Proc) {
        p.kfd.create_queue(&mut self.args).unwrap();
        let base = self.args.doorbell_offset & !(DOORBELL_SLICE_BYTES - 1);
        self.bells = Some(
            p.kfd
                .mmap("doorbells", base, DOORBELL_SLICE_BYTES as usize)
                .unwrap(),
        );
    }

    /// Writes `words` at the ring's start and rings the doorbell.
    fn submit(&self, p: &Proc, words: &[u32]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.ring.write(0, &bytes);
        let wptr = words.len() as u64;
        self.pos.atomic_u64(64).store(wptr, Ordering::Release);
        let at = (self.args.doorbell_offset & (DOORBELL_SLICE_BYTES - 1)) as usize;
        p.kfd.kernel().ring(self.bells.as_ref().unwrap(), at, wptr);
    }
}

fn release(p: &Proc, address: u64, value: u64, ctx: u32) -> Vec<u32> {
    let mut out = [0u32; 8];
    let r = rig_amd::pm4::ReleaseMem {
        int_ctxid: ctx,
        ..rig_amd::pm4::ReleaseMem::timeline(
            rig_amd::pm4::ReleaseMem::write_back(p.node.gpu().unwrap().generation),
            address,
            value,
        )
    };
    let n = r.encode(&mut out).unwrap();
    out[..n].to_vec()
}

#[test]
fn the_topology_presents_the_three_gpus_and_rig_drives_each() {
    let emu = emulate(Config::default());
    let nodes = topology::read(emu.kernel.topology()).unwrap();
    let gpus: Vec<String> = nodes
        .iter()
        .filter(|n| n.is_gpu())
        .map(|n| n.gpu().unwrap().name())
        .collect();
    assert_eq!(gpus, ["gfx1100", "gfx1201", "gfx942"]);
    let mi300 = nodes
        .iter()
        .find(|n| n.processor_name() == "gfx942")
        .unwrap();
    assert_eq!(mi300.dies(), 8);
    assert_eq!(mi300.compute_units(), 304);
    assert!(mi300.cache_bytes().unwrap() > 256 << 20);
    let kfd = Kfd::open(emu.kernel.clone()).unwrap();
    let ap = kfd.apertures().unwrap();
    assert_eq!(ap.len(), 3);
    assert_eq!(ap[0].gpuvm_base, GPUVM_BASE);
    let clock = kfd.clock_counters(ap[1].gpu_id).unwrap();
    assert_eq!(clock.system_clock_freq, 1_000_000_000);
    assert!(clock.cpu_clock_counter > 0);
}

#[test]
fn a_pm4_queue_runs_a_release_whose_interrupt_signals_the_event() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1100");
    let ev = p.kfd.create_event(abi::EVENT_SIGNAL, true, 0, 0).unwrap();
    assert_eq!(
        ev.event_id, 1,
        "KFD keeps id 0 and numbers signal events from 1"
    );
    let page = p
        .kfd
        .mmap("events", ev.event_page_offset, EVENT_PAGE_BYTES as usize)
        .unwrap();
    let mut q = pm4_queue_args(&mut p);
    q.create(&p);
    // Armed slot: KFD signals an event from an interrupt only if its slot was written.
    page.atomic_u64(ev.event_slot_index as usize * 8)
        .store(1, Ordering::Release);
    let words = release(&p, q.pos_va + 128, 0x1234_5678_9abc, ev.event_id);
    q.submit(&p, &words);
    let mut wait = [EventData::waiting_for(ev.event_id)];
    let r = p.kfd.wait_events(&mut wait, 10_000).unwrap();
    assert_eq!(r, abi::WAIT_RESULT_COMPLETE);
    assert_eq!(
        q.pos.atomic_u64(128).load(Ordering::Acquire),
        0x1234_5678_9abc
    );
    // The kernel acknowledged the slot; the auto-reset event waits again.
    assert_eq!(
        page.atomic_u64(ev.event_slot_index as usize * 8)
            .load(Ordering::Acquire),
        u64::MAX
    );
    let r = p.kfd.wait_events(&mut wait, 10).unwrap();
    assert_eq!(r, abi::WAIT_RESULT_TIMEOUT);
    p.kfd.destroy_queue(q.args.queue_id).unwrap();
}

#[test]
fn a_page_fault_reaches_the_memory_exception_event_with_its_address() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1201");
    let ev = p.kfd.create_event(abi::EVENT_MEMORY, false, 0, 0).unwrap();
    let mut q = pm4_queue_args(&mut p);
    q.create(&p);
    let bad = 0x7000_0000_0000u64;
    q.submit(&p, &release(&p, bad, 1, 0));
    let mut wait = [EventData::waiting_for(ev.event_id)];
    assert_eq!(
        p.kfd.wait_events(&mut wait, 10_000).unwrap(),
        abi::WAIT_RESULT_COMPLETE
    );
    let m = wait[0].memory_exception();
    assert_eq!(m.va, bad);
    assert_eq!(m.gpu_id, p.node.gpu_id);
    assert_eq!(m.failure.not_present, 1);
}

#[test]
fn memory_errnos_are_the_kernels() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1100");
    let g = p.node.gpu_id;
    let vram = abi::ALLOC_MEM_FLAGS_VRAM | abi::ALLOC_MEM_FLAGS_WRITABLE;
    let va = p.va(1 << 20);
    // Unaligned address, unaligned or zero size, outside the aperture, no type, two types.
    for (at, size, flags) in [
        (va + 8, 4096, vram),
        (va, 4000, vram),
        (va, 0, vram),
        (0x1000, 4096, vram),
        (va, 4096, abi::ALLOC_MEM_FLAGS_WRITABLE),
        (va, 4096, vram | abi::ALLOC_MEM_FLAGS_GTT),
    ] {
        let e = p.kfd.alloc(g, at, size, flags).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "{at:#x} {size} {flags:#x}: {e}");
    }
    let (h, _) = p.kfd.alloc(g, va, 1 << 20, vram).unwrap();
    // Overlapping addresses.
    let e = p.kfd.alloc(g, va + 4096, 4096, vram).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL);
    // An unknown GPU, an unknown handle.
    assert_eq!(
        errno(&p.kfd.alloc(0xdead, va, 4096, vram).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(errno(&p.kfd.free(h + 77).unwrap_err()), libc::EINVAL);
    assert_eq!(errno(&p.kfd.map(h + 77, g).unwrap_err()), libc::EINVAL);
    // Freeing memory still mapped.
    p.kfd.map(h, g).unwrap();
    let e = p.kfd.free(h).unwrap_err();
    assert_eq!(errno(&e), libc::EBUSY);
    assert!(e.to_string().contains("FREE_MEMORY_OF_GPU"), "{e}");
    p.kfd.unmap(h, g).unwrap();
    p.kfd.free(h).unwrap();
    // More VRAM than the GPU has.
    let big = p.va(8 << 30);
    let e = p.kfd.alloc(g, big, 8 << 30, vram).unwrap_err();
    assert_eq!(errno(&e), libc::ENOMEM);
    // A USERPTR whose pages the kernel cannot reach.
    let mut a = abi::AllocMemoryOfGpuArgs {
        va_addr: p.va(4096),
        size: 4096,
        gpu_id: g,
        mmap_offset: 0x10_0000,
        flags: abi::ALLOC_MEM_FLAGS_USERPTR,
        ..Default::default()
    };
    let e = rig_kfd::seam::call(&*emu.kernel, p.kfd.fd(), &mut a, rig_kfd::seam::Extra::None);
    assert_eq!(e, Err(Errno(libc::EFAULT)));
    // A second render node for the same GPU's VM.
    let minor = p.node.drm_render_minor().unwrap();
    let e = p.kfd.acquire_vm(g, minor).unwrap_err();
    assert_eq!(errno(&e), libc::EBUSY);
    // Memory on a GPU whose VM the process never acquired.
    let other = topology::read(emu.kernel.topology()).unwrap()[2].gpu_id;
    assert_eq!(
        errno(&p.kfd.alloc(other, va, 4096, vram).unwrap_err()),
        libc::EINVAL
    );
}

#[test]
fn queue_errnos_are_the_kernels() {
    let emu = emulate(Config {
        max_queues_per_process: 2,
        max_queues_per_device: 3,
        ..Config::default()
    });
    let mut p = Proc::open(&emu, "gfx1100");
    let q = pm4_queue_args(&mut p);
    type Change = Box<dyn Fn(&mut abi::CreateQueueArgs)>;
    let bad: Vec<(&str, Change)> = vec![
        ("ring not a power of two", Box::new(|a| a.ring_size = 3000)),
        ("priority past 15", Box::new(|a| a.queue_priority = 16)),
        (
            "percentage past 100",
            Box::new(|a| a.queue_percentage = 101),
        ),
        ("unknown type", Box::new(|a| a.queue_type = 9)),
        ("unknown gpu", Box::new(|a| a.gpu_id = 1)),
        (
            "ring not mapped",
            Box::new(|a| a.ring_base_address = 0x6000_0000_0000),
        ),
        ("eop size", Box::new(|a| a.eop_buffer_size = 2048)),
        (
            "context-save area too small",
            Box::new(|a| a.ctx_save_restore_size -= 4096),
        ),
        ("control stack size", Box::new(|a| a.ctl_stack_size += 4096)),
        (
            "context-save area unmapped",
            Box::new(|a| a.ctx_save_restore_address += 1 << 30),
        ),
    ];
    for (what, change) in bad {
        let mut a = q.args;
        change(&mut a);
        let e = p.kfd.create_queue(&mut a).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
    }
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut a = q.args;
        p.kfd.create_queue(&mut a).unwrap();
        ids.push(a.queue_id);
    }
    // The process holds its most queues on the GPU.
    let e = p.kfd.create_queue(&mut q.args.clone()).unwrap_err();
    assert_eq!(errno(&e), libc::ENOSPC);
    // Another process fills the device's last slot, then the device refuses.
    let kernel = emu.own_kernel();
    let (mut link, child) = in_child(move |link| {
        let mut p2 = Proc::open_through(kernel, "gfx1100");
        let q2 = pm4_queue_args(&mut p2);
        p2.kfd.create_queue(&mut q2.args.clone()).unwrap();
        let e = p2.kfd.create_queue(&mut q2.args.clone()).unwrap_err();
        link.send(errno(&e) as u64);
        link.send(u64::from(e.to_string().contains("CREATE_QUEUE")));
        link.recv();
    });
    assert_eq!(link.recv() as i32, libc::EPERM);
    assert!(link.recv() == 1, "the error names CREATE_QUEUE");
    // RUNTIME_ENABLE once queues exist.
    let e = p.kfd.runtime_enable().unwrap_err();
    assert_eq!(errno(&e), libc::EEXIST);
    assert_eq!(errno(&p.kfd.destroy_queue(999).unwrap_err()), libc::EINVAL);
    for id in ids {
        p.kfd.destroy_queue(id).unwrap();
    }
    p.kfd.create_queue(&mut q.args.clone()).unwrap();
    link.send(0);
    assert!(child_succeeded(child));
}

/// Every CREATE_QUEUE the emulation refuses leaves the GPU's queue count as it was: after
/// many refusals of each kind (the buffer checks before the count, the queue processor's
/// checks and a doorbell past the process's doorbell page after it), the GPU still takes as
/// many queues as its limit, and its count is back to zero once the processes end.
#[test]
fn refused_queues_give_back_the_gpus_queue_count() {
    // A process may ask one queue more than its doorbell page holds; the GPU holds one
    // queue more than that page.
    let slots = (DOORBELL_SLICE_BYTES / DOORBELL_STRIDE) as usize;
    let emu = emulate(Config {
        max_queues_per_process: slots + 1,
        max_queues_per_device: slots + 1,
        ..Config::default()
    });
    let mut p = Proc::open(&emu, "gfx1100");
    let gpu = emu
        .server
        .kernel()
        .gpus()
        .iter()
        .position(|g| g.facts.gpu_id == p.node.gpu_id)
        .unwrap();
    let count = || emu.server.kernel().gpus()[gpu].queues();
    let q = pm4_queue_args(&mut p);
    type Change = Box<dyn Fn(&mut abi::CreateQueueArgs)>;
    let bad: Vec<(&str, Option<i32>, Change)> = vec![
        (
            "ring not mapped",
            Some(libc::EINVAL),
            Box::new(|a| a.ring_base_address = 0x6000_0000_0000),
        ),
        (
            "ring mapping not the ring's size (Linux 6.12)",
            Some(libc::EINVAL),
            Box::new(|a| a.ring_size = 8192),
        ),
        (
            "write pointer not mapped (Linux 6.12)",
            Some(libc::EINVAL),
            Box::new(|a| a.write_pointer_address = 0x6000_0000_0000),
        ),
        (
            "context-save area too small",
            Some(libc::EINVAL),
            Box::new(|a| a.ctx_save_restore_size -= 4096),
        ),
        (
            "eop size",
            Some(libc::EINVAL),
            Box::new(|a| a.eop_buffer_size = 2048),
        ),
        // Past the kernel's checks: the queue processor refuses these.
        (
            "ring not 256-byte aligned",
            None,
            Box::new(|a| a.ring_base_address += 128),
        ),
        (
            "read pointer not 8-byte aligned",
            None,
            Box::new(|a| a.read_pointer_address += 4),
        ),
    ];
    for (what, want, change) in &bad {
        for _ in 0..16 {
            let mut a = q.args;
            change(&mut a);
            let e = p.kfd.create_queue(&mut a).unwrap_err();
            if let Some(want) = want {
                assert_eq!(errno(&e), *want, "{what}: {e}");
            }
        }
        assert_eq!(count(), 0, "{what}");
    }
    // The doorbell page full: the process's next queue has a slot but no doorbell.
    let mut ids = Vec::new();
    for _ in 0..slots {
        let mut a = q.args;
        p.kfd.create_queue(&mut a).unwrap();
        ids.push(a.queue_id);
    }
    assert_eq!(count(), slots);
    for _ in 0..16 {
        let e = p.kfd.create_queue(&mut q.args.clone()).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "{e}");
    }
    assert_eq!(count(), slots, "a refusal past the count gave it back");
    // So the GPU's last queue is still there for another process, and then it is full.
    let kernel = emu.own_kernel();
    let (mut link, child) = in_child(move |link| {
        let mut p2 = Proc::open_through(kernel, "gfx1100");
        let q2 = pm4_queue_args(&mut p2);
        for _ in 0..2 {
            let r = p2.kfd.create_queue(&mut q2.args.clone());
            link.send(r.err().map_or(0, |e| errno(&e) as u64));
        }
        link.recv();
    });
    assert_eq!(link.recv(), 0, "the GPU's last queue");
    assert_eq!(link.recv() as i32, libc::EPERM, "past the GPU's most");
    assert_eq!(count(), slots + 1);
    for id in ids {
        p.kfd.destroy_queue(id).unwrap();
    }
    link.send(0);
    assert!(child_succeeded(child));
    // The child's queue goes with its exit.
    let deadline = Instant::now() + Duration::from_secs(10);
    while count() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(count(), 0);
}

#[test]
fn event_errnos_are_the_kernels() {
    let emu = emulate(Config::default());
    let p = Proc::open(&emu, "gfx942");
    // KFD checks no event type: an unknown one is made as an "other" event, which the
    // host cannot signal (as Linux 6.1 answered in tests/guest_kfd.rs).
    let other = p.kfd.create_event(77, false, 0, 0).unwrap();
    assert!(other.event_id >= rig_kfd_emu::kernel::FIRST_NONSIGNAL_EVENT);
    assert_eq!(
        errno(&p.kfd.set_event(other.event_id).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(errno(&p.kfd.destroy_event(5).unwrap_err()), libc::EINVAL);
    let mem = p.kfd.create_event(abi::EVENT_MEMORY, false, 0, 0).unwrap();
    assert_eq!(
        errno(&p.kfd.set_event(mem.event_id).unwrap_err()),
        libc::EINVAL
    );
    let mut wait = [EventData::waiting_for(4242)];
    assert_eq!(
        errno(&p.kfd.wait_events(&mut wait, 0).unwrap_err()),
        libc::EINVAL
    );
    let sig = p.kfd.create_event(abi::EVENT_SIGNAL, false, 0, 0).unwrap();
    p.kfd.set_event(sig.event_id).unwrap();
    let mut wait = [
        EventData::waiting_for(sig.event_id),
        EventData::waiting_for(mem.event_id),
    ];
    assert_eq!(
        p.kfd.wait_events(&mut wait, 0).unwrap(),
        abi::WAIT_RESULT_COMPLETE
    );
    // One wait takes at most 64 events (rig-kfd's bound, before any call).
    let e = p
        .kfd
        .wait_events(&mut [EventData::waiting_for(4242); 65], 0)
        .unwrap_err();
    assert!(matches!(e, KfdError::TooMany { limit: 64, .. }), "{e}");
}

#[test]
fn below_the_minimum_version_opening_fails_clearly() {
    let emu = emulate(Config {
        version: Version {
            major: 1,
            minor: 10,
        },
        ..Config::default()
    });
    let e = Kfd::open(emu.kernel.clone()).unwrap_err();
    assert!(
        matches!(e, KfdError::Version(VersionError::TooOld { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("1.10"), "{e}");
}

#[test]
fn export_needs_the_version_that_has_it() {
    let emu = emulate(Config {
        version: Version {
            major: 1,
            minor: 11,
        },
        ..Config::default()
    });
    let mut p = Proc::open(&emu, "gfx1100");
    let (_, h, _) = p.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let e = p.kfd.export_dmabuf(h).unwrap_err();
    assert!(matches!(e, KfdError::Lacks { .. }), "{e}");
}

#[test]
fn a_dmabuf_of_mapped_vram_shares_its_pages() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1100");
    let (_, h, off) = p.mem(
        8192,
        abi::ALLOC_MEM_FLAGS_VRAM | abi::ALLOC_MEM_FLAGS_PUBLIC,
    );
    let fd = p.kfd.export_dmabuf(h).unwrap();
    let seen = rig_shm::SharedRegion::from_fd(fd).unwrap();
    let host = p.host(off, 8192);
    host.write(4100, b"through the BAR");
    let mut out = [0u8; 15];
    seen.read(4100, &mut out);
    assert_eq!(&out, b"through the BAR");
    // Private VRAM has no host pages to export.
    let (_, private, _) = p.mem(4096, abi::ALLOC_MEM_FLAGS_VRAM);
    assert_eq!(
        errno(&p.kfd.export_dmabuf(private).unwrap_err()),
        libc::EINVAL
    );
}

#[test]
fn a_closed_process_leaves_no_queue_memory_or_event_behind() {
    let emu = emulate(Config::default());
    let kernel = emu.own_kernel();
    let (mut link, child) = in_child(move |link| {
        let mut p = Proc::open_through(kernel, "gfx1100");
        let mut q = pm4_queue_args(&mut p);
        q.create(&p);
        p.kfd.create_event(abi::EVENT_SIGNAL, false, 0, 0).unwrap();
        link.send(1);
        link.recv();
        drop(q);
        drop(p);
    });
    link.recv();
    let procs = emu.server.processes();
    assert_eq!(procs.len(), 1);
    let held = procs[0].holdings();
    assert_eq!((held.0, held.2), (1, 1));
    assert!(held.1 >= 4);
    // The process closes its files and exits: KFD's process ends with it.
    link.send(0);
    assert!(child_succeeded(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !emu.server.processes().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the KFD process outlived its process"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(procs[0].holdings(), (0, 0, 0));
    assert_eq!(emu.server.kernel().gpus()[0].sim.vram_free(), 4 << 30);
    assert_eq!(emu.server.kernel().gpus()[0].vram_available(), 4 << 30);
}

/// amdgpu reserves VRAM at ALLOC_MEMORY_OF_GPU, host-visible (PUBLIC) or not, against the
/// GPU's VRAM across processes; FREE and the process's end give it back.
#[test]
fn vram_is_reserved_at_alloc_across_processes_public_or_not() {
    let emu = emulate(Config {
        models: vec!["gfx1100".into()],
        vram_bytes: 64 << 20,
        ..Config::default()
    });
    let vram = abi::ALLOC_MEM_FLAGS_VRAM | abi::ALLOC_MEM_FLAGS_WRITABLE;
    let public = vram | abi::ALLOC_MEM_FLAGS_PUBLIC;
    let mut a = Proc::open(&emu, "gfx1100");
    let g = a.node.gpu_id;
    // Two unmapped allocations of 40 MiB do not fit 64, whether mapped yet or not.
    let (va1, va2) = (a.va(40 << 20), a.va(40 << 20));
    let (h, _) = a.kfd.alloc(g, va1, 40 << 20, vram).unwrap();
    let e = a.kfd.alloc(g, va2, 40 << 20, vram).unwrap_err();
    assert_eq!(errno(&e), libc::ENOMEM);
    assert_eq!(a.kfd.available_memory(g).unwrap(), 24 << 20);
    // Another process's host-visible VRAM counts too.
    let kernel = emu.own_kernel();
    let (mut link, child) = in_child(move |link| {
        let mut b = Proc::open_through(kernel, "gfx1100");
        let (vb1, vb2) = (b.va(40 << 20), b.va(16 << 20));
        let e = b.kfd.alloc(g, vb1, 40 << 20, public).unwrap_err();
        link.send(errno(&e) as u64);
        b.kfd.alloc(g, vb2, 16 << 20, public).unwrap();
        link.send(b.kfd.available_memory(g).unwrap());
        link.recv();
        link.send(b.kfd.available_memory(g).unwrap());
        link.recv();
    });
    assert_eq!(link.recv() as i32, libc::ENOMEM);
    assert_eq!(link.recv(), 8 << 20);
    a.kfd.free(h).unwrap();
    link.send(0);
    assert_eq!(link.recv(), 48 << 20);
    // A process that ends gives back what it held.
    link.send(0);
    assert!(child_succeeded(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.kfd.available_memory(g).unwrap() != 64 << 20 {
        assert!(
            Instant::now() < deadline,
            "the ended process's VRAM stayed reserved"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn two_processes_have_separate_gpu_vms_on_one_gpu() {
    let emu = emulate(Config::default());
    let mut a = Proc::open(&emu, "gfx1100");
    let kernel = emu.own_kernel();
    let (mut link, child) = in_child(move |link| {
        let mut b = Proc::open_through(kernel, "gfx1100");
        let (va_b, _, off_b) = b.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
        link.send(va_b);
        link.recv();
        b.host(off_b, 4096).write(0, b"b");
        link.send(0);
    });
    // The same GPU address in both: two allocations, no overlap error.
    let (va_a, _, off_a) = a.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let va_b = link.recv();
    assert_eq!(va_a, va_b);
    a.host(off_a, 4096).write(0, b"a");
    link.send(0);
    link.recv();
    let mut x = [0u8; 1];
    a.host(off_a, 4096).read(0, &mut x);
    assert_eq!(&x, b"a");
    assert!(child_succeeded(child));
}

#[test]
fn the_emulation_runs_as_a_process_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfd.sock");
    let topo = dir.path().join("topology");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rig-kfd-emu"))
        .arg("--socket")
        .arg(&sock)
        .arg("--topology")
        .arg(&topo)
        .arg("--gpus")
        .arg("gfx1201")
        .spawn()
        .unwrap();
    let kernel: Arc<dyn Kernel> = Arc::new(Emulated::new(&sock, &topo));
    let deadline = Instant::now() + Duration::from_secs(20);
    let kfd = loop {
        match Kfd::open(kernel.clone()) {
            Ok(k) => break k,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "the emulation did not come up: {e}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let nodes = topology::read(kernel.topology()).unwrap();
    let gpu = nodes.iter().find(|n| n.is_gpu()).unwrap();
    assert_eq!(gpu.gpu().unwrap().name(), "gfx1201");
    assert!(kfd.available_memory(gpu.gpu_id).unwrap() > 0);
    child.kill().unwrap();
    child.wait().unwrap();
    // A kernel that went away: the call fails, naming the ioctl.
    let e = kfd.clock_counters(gpu.gpu_id).unwrap_err();
    assert!(e.to_string().contains("GET_CLOCK_COUNTERS"), "{e}");
}

#[test]
fn an_aql_queues_pointers_must_each_lie_in_a_page_of_their_own() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx942");
    let q = pm4_queue_args(&mut p);
    // The runtime's amd_queue_t: a page of its own holding both dispatch ids.
    let (page, _, _) = p.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let (two_pages, _, _) = p.mem(8192, abi::ALLOC_MEM_FLAGS_GTT);
    let aql = abi::CreateQueueArgs {
        queue_type: abi::QUEUE_TYPE_COMPUTE_AQL,
        read_pointer_address: page + 128,
        write_pointer_address: page + 56,
        ..q.args
    };
    type Change = Box<dyn Fn(&mut abi::CreateQueueArgs)>;
    let bad: Vec<(&str, Change)> = vec![
        (
            "read pointer in a mapping of two pages",
            Box::new(move |a| a.read_pointer_address = two_pages + 128),
        ),
        (
            "write pointer in a mapping that begins before its page",
            Box::new(move |a| a.write_pointer_address = two_pages + 4096 + 56),
        ),
        (
            "read pointer where nothing is mapped",
            Box::new(move |a| a.read_pointer_address = two_pages + (1 << 30)),
        ),
    ];
    for (what, change) in bad {
        let mut a = aql;
        change(&mut a);
        let e = p.kfd.create_queue(&mut a).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
    }
    let mut a = aql;
    p.kfd.create_queue(&mut a).unwrap();
    assert_eq!(
        emu.server.processes()[0].amd_queues().len(),
        1,
        "the queue's amd_queue_t is found at its read pointer"
    );
}

/// `kfd_open` finds the caller's KFD process by its address space: a second open in one
/// process reaches the same KFD process, one GPU VM.
#[test]
fn two_opens_in_one_process_share_one_kfd_process() {
    let emu = emulate(Config::default());
    let mut a = Proc::open(&emu, "gfx1100");
    let b = Kfd::open(emu.own_kernel()).unwrap();
    assert_eq!(emu.server.processes().len(), 1, "one KFD process");
    let g = a.node.gpu_id;
    let (va, h, _) = a.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    // The allocation made through one file is the other's: its handle frees through it,
    // and its address is taken in the one VM.
    assert_eq!(
        errno(&b.alloc(g, va, 4096, abi::ALLOC_MEM_FLAGS_GTT).unwrap_err()),
        libc::EINVAL,
        "the address is taken in the shared VM"
    );
    b.unmap(h, g).unwrap();
    b.free(h).unwrap();
    assert_eq!(emu.server.processes()[0].holdings().1, 0);
    // The VM is bound to a's render node; another render node for it is EBUSY.
    let e = b
        .acquire_vm(g, a.node.drm_render_minor().unwrap())
        .unwrap_err();
    assert_eq!(errno(&e), libc::EBUSY);
    // Closing a file does not end the KFD process: it lives as long as its process.
    drop(b);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(emu.server.processes().len(), 1);
    a.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
}

/// `kfd_ioctl` answers EBADF to a process other than the one that opened the file (a forked
/// child using an inherited descriptor), which touches nothing of the opener's.
#[test]
fn a_forked_child_using_the_parents_file_gets_ebadf_and_touches_nothing() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1100");
    let g = p.node.gpu_id;
    let (va, h, _) = p.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    let before = emu.server.processes()[0].holdings();
    let next = p.va(4096);
    let (mut link, child) = in_child(|link| {
        // The parent's Kfd, inherited with its descriptors.
        // Answers go back as values (0: the call succeeded), not as the child's panics.
        let calls = [
            p.kfd.free(h).err(),
            p.kfd.unmap(h, g).err(),
            p.kfd.alloc(g, next, 4096, abi::ALLOC_MEM_FLAGS_GTT).err(),
            p.kfd.create_event(abi::EVENT_SIGNAL, false, 0, 0).err(),
        ];
        for e in &calls {
            link.send(e.as_ref().map_or(0, |e| errno(e) as u64));
        }
        let named = calls[0]
            .as_ref()
            .is_some_and(|e| e.to_string().contains("FREE_MEMORY_OF_GPU"));
        link.send(u64::from(named));
    });
    for _ in 0..4 {
        assert_eq!(link.recv() as i32, libc::EBADF);
    }
    assert_eq!(link.recv(), 1, "the error names the ioctl");
    assert!(child_succeeded(child));
    assert_eq!(emu.server.processes().len(), 1, "the child made no process");
    assert_eq!(emu.server.processes()[0].holdings(), before);
    // The parent's memory is still its own.
    assert_eq!(
        errno(
            &p.kfd
                .alloc(g, va, 4096, abi::ALLOC_MEM_FLAGS_GTT)
                .unwrap_err()
        ),
        libc::EINVAL
    );
    p.kfd.unmap(h, g).unwrap();
    p.kfd.free(h).unwrap();
}

/// ACQUIRE_VM's `drm_fd` is a descriptor of the calling process (`fget`): a process that
/// names another's open render node gets EINVAL, as for any descriptor it does not hold, and
/// binds nothing; the opener's render nodes still work, its own mmaps still reach its pages.
#[test]
fn acquire_vm_with_another_processs_render_node_is_einval() {
    use zerocopy::IntoBytes;
    let emu = emulate(Config::default());
    let mut a = Proc::open(&emu, "gfx1100");
    let (_, _, off) = a.mem(4096, abi::ALLOC_MEM_FLAGS_GTT);
    a.host(off, 4096).write(0, b"a");
    // A second render node of A's, for a GPU A has not acquired yet.
    let other = topology::read(emu.kernel.topology())
        .unwrap()
        .into_iter()
        .find(|n| n.is_gpu() && n.processor_name() == "gfx1201")
        .unwrap();
    let spare = emu
        .kernel
        .open(rig_kfd::seam::File::Render(
            other.drm_render_minor().unwrap(),
        ))
        .unwrap();
    let named = [
        (std::os::fd::AsRawFd::as_raw_fd(&spare), other.gpu_id),
        (std::os::fd::AsRawFd::as_raw_fd(&a._render), a.node.gpu_id),
    ];
    let kernel = emu.kernel.clone();
    let gfx1100 = a.node.clone();
    let (mut link, child) = in_child(move |link| {
        // B: a process of its own, with a KFD process of its own.
        let kfd = Kfd::open(kernel.clone()).unwrap();
        for (raw, gpu_id) in named {
            // B closes its inherited copy, so A's descriptor is no longer one of B's (as in
            // a process that never held it); the seam's table still names A's render node,
            // so the emulation is asked with A's token.
            // SAFETY: the child never uses or drops these descriptors again.
            unsafe { libc::close(raw) };
            let mut args = abi::AcquireVmArgs {
                drm_fd: raw as u32,
                gpu_id,
            };
            let r = kfd.kernel().ioctl(
                kfd.fd(),
                abi::ACQUIRE_VM.request(),
                args.as_mut_bytes(),
                rig_kfd::seam::Extra::None,
            );
            link.send(r.err().map_or(0, |Errno(e)| e as u64));
        }
        // B's own render node works.
        let own = kfd
            .acquire_vm(gfx1100.gpu_id, gfx1100.drm_render_minor().unwrap())
            .map(|_| 0)
            .unwrap_or_else(|e| errno(&e));
        link.send(own as u64);
        link.recv();
    });
    assert_eq!(link.recv() as i32, libc::EINVAL, "A's unbound render node");
    assert_eq!(link.recv() as i32, libc::EINVAL, "A's bound render node");
    assert_eq!(link.recv(), 0, "B's own render node");
    // While B lives: A's render nodes are still A's.
    let mut x = [0u8; 1];
    a.host(off, 4096).read(0, &mut x);
    assert_eq!(&x, b"a", "A's mmap still reaches A's pages");
    link.send(0);
    assert!(child_succeeded(child));
    let mut args = abi::AcquireVmArgs {
        drm_fd: std::os::fd::AsRawFd::as_raw_fd(&spare) as u32,
        gpu_id: other.gpu_id,
    };
    a.kfd
        .kernel()
        .ioctl(
            a.kfd.fd(),
            abi::ACQUIRE_VM.request(),
            args.as_mut_bytes(),
            rig_kfd::seam::Extra::None,
        )
        .unwrap();
    a.host(off, 4096).read(0, &mut x);
    assert_eq!(&x, b"a", "after B exits too");
}

/// ALLOC_MEMORY_OF_GPU with MMIO_REMAP: one page, mapped through `/dev/kfd` at the offset
/// it answers; ENOMEM where the GPU has no remapped register page.
#[test]
fn the_mmio_remap_page_is_one_page_mapped_through_kfd() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1201");
    let g = p.node.gpu_id;
    let flags = abi::ALLOC_MEM_FLAGS_MMIO_REMAP | abi::ALLOC_MEM_FLAGS_WRITABLE;
    let va = p.va(8192);
    let e = p.kfd.alloc(g, va, 8192, flags).unwrap_err();
    assert_eq!(errno(&e), libc::EINVAL, "not one page: {e}");
    let (h, off) = p.kfd.alloc(g, va, 4096, flags).unwrap();
    assert_eq!(
        off,
        u64::from(g) << 46,
        "KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID"
    );
    let page = p.kfd.mmap("the HDP page", off, 4096).unwrap();
    assert_eq!(
        page.atomic_u32(abi::MMIO_REMAP_HDP_MEM_FLUSH_CNTL)
            .load(Ordering::Acquire),
        rig_kfd_emu::hdp::IDLE
    );
    assert!(p.kfd.mmap("the HDP page", off, 8192).is_err());
    p.kfd.map(h, g).unwrap();
    p.kfd.unmap(h, g).unwrap();
    p.kfd.free(h).unwrap();

    let emu = emulate(Config {
        mmio_remap: false,
        ..Config::default()
    });
    let mut p = Proc::open(&emu, "gfx1201");
    let va = p.va(4096);
    let e = p.kfd.alloc(p.node.gpu_id, va, 4096, flags).unwrap_err();
    assert_eq!(errno(&e), libc::ENOMEM, "{e}");
}

/// The KFD process ends with its process's address space, its memory with its last file:
/// a process that exits while a child it forked still holds its file loses its queues at
/// once and its memory only when the child's inherited file closes.
#[test]
fn an_inherited_file_keeps_an_exited_processs_memory_until_it_closes() {
    let emu = emulate(Config::default());
    let kernel = emu.own_kernel();
    let (mut release, held) = std::os::unix::net::UnixStream::pair().unwrap();
    let (mut link, child) = in_child(move |link| {
        let mut p = Proc::open_through(kernel, "gfx1100");
        let mut q = pm4_queue_args(&mut p);
        q.create(&p);
        // A grandchild inherits the file and keeps it until the test says.
        let (_grandchild_link, _) = in_child(move |_| {
            use std::io::Read;
            let _ = (&held).read(&mut [0u8; 1]);
        });
        link.send(1);
        // p's files close here in this process; the grandchild's copies stay open.
    });
    link.recv();
    assert!(child_succeeded(child));
    let procs = emu.server.processes();
    assert_eq!(procs.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while procs[0].holdings().0 != 0 {
        assert!(Instant::now() < deadline, "the queue outlived its process");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        procs[0].holdings().1 >= 4,
        "the memory stays while a file of it is open"
    );
    assert_eq!(emu.server.processes().len(), 1);
    use std::io::Write;
    release.write_all(&[1]).unwrap();
    while !emu.server.processes().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the memory outlived its last file"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(procs[0].holdings(), (0, 0, 0));
    assert_eq!(emu.server.kernel().gpus()[0].vram_available(), 4 << 30);
}

#[test]
fn queue_buffers_each_need_a_mapping_of_their_own_as_linux_6_12_asks() {
    let emu = emulate(Config::default());
    let mut p = Proc::open(&emu, "gfx1100");
    let gtt = abi::ALLOC_MEM_FLAGS_GTT;
    let q = pm4_queue_args(&mut p);
    // rig's old layout: the ring, then a page of positions, in one allocation.
    let (one, _, _) = p.mem(8192, gtt);
    let (two_pages, _, _) = p.mem(8192, gtt);
    let (big, _, _) = p.mem(16384, gtt);
    let (eop_big, _, _) = p.mem(8192, abi::ALLOC_MEM_FLAGS_VRAM);
    type Change = Box<dyn Fn(&mut abi::CreateQueueArgs)>;
    let bad: Vec<(&str, Change)> = vec![
        (
            "ring and positions in one allocation",
            Box::new(move |a| {
                a.ring_base_address = one;
                a.read_pointer_address = one + 4096;
                a.write_pointer_address = one + 4096 + 64;
            }),
        ),
        (
            "positions in a 2-page mapping",
            Box::new(move |a| {
                a.read_pointer_address = two_pages;
                a.write_pointer_address = two_pages + 64;
            }),
        ),
        (
            "write pointer in a 2-page mapping",
            Box::new(move |a| a.write_pointer_address = two_pages + 64),
        ),
        (
            "ring inside a bigger mapping",
            Box::new(move |a| a.ring_base_address = big),
        ),
        (
            "ring not at its mapping's start",
            Box::new(move |a| a.ring_base_address = big + 4096),
        ),
        (
            "EOP buffer inside a bigger mapping",
            Box::new(move |a| a.eop_buffer_address = eop_big),
        ),
        (
            "context-save area not at its mapping's start",
            Box::new(|a| a.ctx_save_restore_address += 4096),
        ),
    ];
    for (what, change) in bad {
        let mut a = q.args;
        change(&mut a);
        let e = p.kfd.create_queue(&mut a).unwrap_err();
        assert_eq!(errno(&e), libc::EINVAL, "{what}: {e}");
        // The same for an SDMA queue, which has no EOP or context-save area to blame.
        if what.starts_with("ring") || what.contains("position") || what.contains("pointer") {
            a.queue_type = abi::QUEUE_TYPE_SDMA;
            let e = p.kfd.create_queue(&mut a).unwrap_err();
            assert_eq!(errno(&e), libc::EINVAL, "SDMA, {what}: {e}");
        }
    }
    // Each buffer in a mapping of its own is taken, for both types; a ring of 16 KiB in
    // its 16 KiB mapping too.
    let mut a = q.args;
    p.kfd.create_queue(&mut a).unwrap();
    let mut s = q.args;
    s.queue_type = abi::QUEUE_TYPE_SDMA;
    s.ring_base_address = big;
    s.ring_size = 16384;
    p.kfd.create_queue(&mut s).unwrap();
    p.kfd.destroy_queue(a.queue_id).unwrap();
    p.kfd.destroy_queue(s.queue_id).unwrap();
}

#[test]
fn get_clock_counters_samples_the_host_after_the_counter_and_its_gap() {
    // The counter KFD reads is 1000 ticks apart from the stamps' clock, and 2 ms pass
    // between its read and the host's sample, as a slow gap would.
    let gap_ns = 2_000_000;
    let emu = emulate(Config {
        models: vec!["gfx1201".into()],
        clock: rig_kfd_emu::ClockModel {
            constant: 1_000,
            ..Default::default()
        },
        clock_gap_ns: gap_ns,
        ..Config::default()
    });
    let kfd = Kfd::open(emu.kernel.clone()).unwrap();
    let gpu = kfd.apertures().unwrap()[0].gpu_id;
    let raw = || {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_RAW).unwrap();
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    };
    let stamps = emu.server.kernel().gpus()[0].sim.clock();
    let mono = rig_sim::clock::monotonic_ns;
    let (m0, r0) = (mono(), raw());
    let c = kfd.clock_counters(gpu).unwrap();
    let (r1, m1) = (raw(), mono());
    // The counter was read first, the gap before the call returned...
    let read_at = stamps.monotonic_ns_at(c.gpu_clock_counter - 1_000);
    assert!(
        m0 <= read_at + 10 && read_at + gap_ns <= m1,
        "{m0} <= {read_at}, + {gap_ns} <= {m1}"
    );
    // ... and the host's raw clock after the gap.
    assert!(
        r0 + gap_ns <= c.cpu_clock_counter && c.cpu_clock_counter <= r1,
        "{r0} + {gap_ns} <= {} <= {r1}",
        c.cpu_clock_counter
    );
}
