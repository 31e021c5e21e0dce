//! Figures of the simulated GPU: doorbell-to-release latency, SDMA bandwidth against
//! memcpy/memset on this machine, the CPU an idle GPU with 64 queues uses, and how long
//! `Queue::stop()` takes in the middle of a long kernel (the goal is under 10 ms).
//!
//! Run with `cargo bench -p rig-sim --bench sim`; it prints one line per figure.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rig_amd::code_object::CodeObject;
use rig_amd::gpu::{Generation, Gpu, QueueKind};
use rig_amd::kernarg::{self, Grid};
use rig_amd::pm4::{self, ReleaseMem};
use rig_amd::regs::{self, initiator};
use rig_amd::sdma::{self, ConstFill, CopyLinear, Fence, Layout, Timestamp};
use rig_shm::{Doorbell, SharedRegion};
use rig_sim::{AddressSpace, Queue, QueueDesc, SimConfig, SimGpu};

const RING_VA: u64 = 0x1_0000_0000;
const POS_VA: u64 = 0x2_0000_0000;
const HOST_VA: u64 = 0x3_0000_0000;
const VRAM_VA: u64 = 0x4_0000_0000;

struct Client {
    queue: Queue,
    ring: SharedRegion,
    ring_bytes: u64,
    pos: SharedRegion,
    doorbell: Doorbell,
    /// Write position in bytes.
    wbytes: u64,
    unit: u64,
}

impl Client {
    fn new(space: &AddressSpace, kind: QueueKind, slot: u64) -> Client {
        let ring_bytes = 64 * 1024;
        let ring = SharedRegion::create("ring", ring_bytes as usize).unwrap();
        let ring_va = RING_VA + slot * ring_bytes;
        space
            .map_host(ring_va, &ring, 0, ring_bytes, false)
            .unwrap();
        let pos = SharedRegion::create("pos", 4096).unwrap();
        let pos_va = POS_VA + slot * 4096;
        space.map_host(pos_va, &pos, 0, 4096, true).unwrap();
        let bells = SharedRegion::create("bells", 4096).unwrap();
        let doorbell = Doorbell::new(bells, 0).unwrap();
        let queue = space
            .create_queue(
                QueueDesc {
                    kind,
                    ring_va,
                    ring_bytes,
                    rptr_va: pos_va,
                    wptr_va: pos_va + 8,
                    doorbell: doorbell.clone(),
                    queue_va: 0,
                    scratch: (0, 0),
                },
                Arc::new(|_| {}),
                Arc::new(|f| eprintln!("fault: {f}")),
            )
            .unwrap();
        let unit = if kind == QueueKind::Pm4 { 4 } else { 1 };
        Client {
            queue,
            ring,
            ring_bytes,
            pos,
            doorbell,
            wbytes: 0,
            unit,
        }
    }

    fn submit(&mut self, words: &[u32]) {
        for w in words {
            self.ring.store_u32(
                (self.wbytes % self.ring_bytes) as usize,
                *w,
                Ordering::Relaxed,
            );
            self.wbytes += 4;
        }
        let wpos = self.wbytes / self.unit;
        self.pos.store_u64(8, wpos, Ordering::Release);
        self.doorbell.ring(wpos);
    }
}

fn gpu() -> Arc<SimGpu> {
    SimGpu::new(SimConfig {
        vram_bytes: 1 << 30,
        ..SimConfig::default()
    })
    .unwrap()
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn latency() {
    let gpu = gpu();
    let space = gpu.create_address_space();
    let word = SharedRegion::create("timeline", 4096).unwrap();
    space.map_host(HOST_VA, &word, 0, 4096, true).unwrap();
    let mut c = Client::new(&space, QueueKind::Pm4, 0);
    for (name, pause) in [
        ("awake (back to back)", None),
        ("asleep (1 ms apart)", Some(Duration::from_millis(1))),
    ] {
        let mut times = Vec::new();
        let mut ring_cost = Vec::new();
        for v in 1..=2000u64 {
            let value = v + if pause.is_some() { 1 << 32 } else { 0 };
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            let release = pm4::Packet::ReleaseMem(ReleaseMem::timeline(0, HOST_VA, value))
                .to_words()
                .unwrap();
            let t = Instant::now();
            c.submit(&release);
            ring_cost.push(t.elapsed());
            while word.load_u64(0, Ordering::Acquire) != value {
                std::hint::spin_loop();
            }
            times.push(t.elapsed());
        }
        println!(
            "doorbell-to-release latency, processor {name}: p50 {:.1} us, p99 {:.1} us; \
             client submit (packet stores + doorbell) p50 {:.2} us",
            percentile(&mut times, 0.5).as_secs_f64() * 1e6,
            percentile(&mut times, 0.99).as_secs_f64() * 1e6,
            percentile(&mut ring_cost, 0.5).as_secs_f64() * 1e6,
        );
    }
}

fn bandwidth() {
    const N: usize = 64 << 20;
    let gpu = gpu();
    let space = gpu.create_address_space();
    let fence = SharedRegion::create("fence", 4096).unwrap();
    space.map_host(HOST_VA, &fence, 0, 4096, true).unwrap();
    space.alloc_vram(VRAM_VA, 2 * N as u64).unwrap();
    let layout = Layout::for_gpu(Gpu::by_name("gfx1100").unwrap());
    let mut c = Client::new(&space, QueueKind::Sdma, 0);
    let mut seq = 0u32;
    // The engine's time is taken from TIMESTAMP packets around the operation, so how soon
    // the host notices the fence does not count.
    let hz = gpu.clock().hz as f64;
    let mut run = |c: &mut Client, p: sdma::Packet| {
        seq += 1;
        let stamp = |at: u64| {
            sdma::Packet::Timestamp(Timestamp::global(at))
                .to_words(layout)
                .unwrap()
        };
        let mut w = stamp(HOST_VA + 8);
        w.extend(p.to_words(layout).unwrap());
        w.extend(stamp(HOST_VA + 16));
        w.extend(
            sdma::Packet::Fence(Fence {
                mtype: 0,
                address: HOST_VA,
                value: seq,
            })
            .to_words(layout)
            .unwrap(),
        );
        c.submit(&w);
        while fence.load_u32(0, Ordering::Acquire) != seq {
            std::thread::sleep(Duration::from_micros(50));
        }
        let ticks = fence.load_u64(16, Ordering::Acquire) - fence.load_u64(8, Ordering::Acquire);
        Duration::from_secs_f64(ticks as f64 / hz)
    };
    // Touch every page first, as memcpy's buffers are touched below.
    run(
        &mut c,
        sdma::Packet::ConstFill(ConstFill::dwords(VRAM_VA, 1, 2 * N as u64)),
    );
    let best = |f: &mut dyn FnMut() -> Duration| (0..20).map(|_| f()).min().unwrap();
    let copy = best(&mut || {
        run(
            &mut c,
            sdma::Packet::CopyLinear(CopyLinear::new(VRAM_VA, VRAM_VA + N as u64, N as u64)),
        )
    });
    let fill = best(&mut || {
        run(
            &mut c,
            sdma::Packet::ConstFill(ConstFill::dwords(VRAM_VA, 0x1234_5678, N as u64)),
        )
    });
    // A copy into fresh Device memory (pages no engine wrote since they were allocated), and
    // into the same memory once written: first touch costs what the host's kernel takes to
    // back a page, which a VM makes dear.
    const FRESH_VA: u64 = VRAM_VA + (1 << 28);
    let mut fresh = Vec::new();
    let mut written = Vec::new();
    for _ in 0..10 {
        space.alloc_vram(FRESH_VA, N as u64).unwrap();
        let into = || sdma::Packet::CopyLinear(CopyLinear::new(VRAM_VA, FRESH_VA, N as u64));
        fresh.push(run(&mut c, into()));
        written.push(run(&mut c, into()));
        space.unmap(FRESH_VA, N as u64).unwrap();
    }
    let (fresh, written) = (
        fresh.into_iter().min().unwrap(),
        written.into_iter().min().unwrap(),
    );
    // memcpy and memset between buffers of the same kind as VRAM: one mapping advised for
    // huge pages, touched before.
    // SAFETY: a fresh private anonymous mapping, as the simulator's VRAM is.
    let host = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * N,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    }
    .cast::<u8>();
    assert_ne!(host.cast(), libc::MAP_FAILED);
    // SAFETY: advice on the mapping just made; it changes no contents.
    unsafe { libc::madvise(host.cast(), 2 * N, libc::MADV_HUGEPAGE) };
    // SAFETY: the mapping has 2N bytes and nothing else uses it.
    unsafe { std::ptr::write_bytes(host, 1, 2 * N) };
    let memcpy = best(&mut || {
        let t = Instant::now();
        // SAFETY: two disjoint halves of the live mapping.
        unsafe { std::ptr::copy_nonoverlapping(host, host.add(N), N) };
        black_box(host);
        t.elapsed()
    });
    let memset = best(&mut || {
        let t = Instant::now();
        // SAFETY: the second half of the live mapping.
        unsafe { std::ptr::write_bytes(host.add(N), black_box(0x5a), N) };
        black_box(host);
        t.elapsed()
    });
    let gbs = |d: Duration| N as f64 / d.as_secs_f64() / 1e9;
    println!(
        "SDMA COPY_LINEAR 64 MiB: {:.2} GB/s; memcpy {:.2} GB/s; {:.0} %",
        gbs(copy),
        gbs(memcpy),
        100.0 * memcpy.as_secs_f64() / copy.as_secs_f64()
    );
    println!(
        "SDMA CONST_FILL 64 MiB: {:.2} GB/s; memset {:.2} GB/s; {:.0} %",
        gbs(fill),
        gbs(memset),
        100.0 * memset.as_secs_f64() / fill.as_secs_f64()
    );
    println!(
        "SDMA COPY_LINEAR 64 MiB into fresh Device memory: {:.2} GB/s; into written memory {:.2} GB/s; fresh {:.2}x the time",
        gbs(fresh),
        gbs(written),
        fresh.as_secs_f64() / written.as_secs_f64()
    );
}

fn cpu_seconds() -> f64 {
    // SAFETY: `usage` is a plain struct that getrusage fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; RUSAGE_SELF always exists.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn idle() {
    let gpu = gpu();
    let space = gpu.create_address_space();
    let queues: Vec<Client> = (0..64)
        .map(|i| {
            Client::new(
                &space,
                if i % 2 == 0 {
                    QueueKind::Pm4
                } else {
                    QueueKind::Sdma
                },
                i,
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let before = cpu_seconds();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_seconds() - before;
    println!(
        "idle GPU with {} queues: {:.3} ms of CPU over {:.1} s ({:.4} % of a core)",
        queues.len(),
        used * 1e3,
        t.elapsed().as_secs_f64(),
        100.0 * used / t.elapsed().as_secs_f64()
    );
}

const CODE_VA: u64 = 0x5_0000_0000;

/// A long dispatch of a corpus kernel taking `(a, b, c, n)` over `grid` work-items.
struct LongKernel {
    name: &'static str,
    what: &'static str,
    grid: [u32; 3],
    group: [u32; 3],
    n: u32,
    /// Bytes of each of a, b and c.
    bytes: u64,
    /// Whether every page of a, b and c is written before the kernels run.
    touched: bool,
}

/// `Queue::stop()` issued while a long kernel runs: p50 and max over fresh queues.
fn stop_latency() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/corpus");
    let cases = [
        LongKernel {
            name: "matmul",
            what: "matmul 1024x1024 (LDS tiles, barriers; compute-bound, minutes long)",
            grid: [1024, 1024, 1],
            group: [16, 16, 1],
            n: 1024,
            bytes: 4 << 20,
            touched: true,
        },
        LongKernel {
            name: "vadd_f32",
            what: "vadd 16 M f32 (short waves, 65536 groups)",
            grid: [16 << 20, 1, 1],
            group: [256, 1, 1],
            n: 16 << 20,
            bytes: 64 << 20,
            touched: true,
        },
        LongKernel {
            name: "vadd_f32",
            what: "vadd 16 M f32 on fresh VRAM (first-touch faults of huge pages)",
            grid: [16 << 20, 1, 1],
            group: [256, 1, 1],
            n: 16 << 20,
            bytes: 64 << 20,
            touched: false,
        },
    ];
    for case in cases {
        let path = dir.join(format!("{}.O2.co", case.name));
        let Ok(bytes) = std::fs::read(&path) else {
            println!("stop mid-kernel: skipped, {} is absent", path.display());
            continue;
        };
        let co = CodeObject::parse(&bytes).expect("corpus code object");
        let k = co.kernel(case.name).expect("kernel").clone();
        let gpu = gpu();
        let space = gpu.create_address_space();
        let mut image = vec![0u8; co.image_size() as usize];
        co.place(CODE_VA, &mut image).unwrap();
        space
            .alloc_vram(CODE_VA, (image.len() as u64).div_ceil(4096) * 4096)
            .unwrap();
        space.write(CODE_VA, &image).unwrap();
        let (a, b, c) = (VRAM_VA, VRAM_VA + case.bytes, VRAM_VA + 2 * case.bytes);
        space.alloc_vram(VRAM_VA, 3 * case.bytes).unwrap();
        if case.touched {
            // Page faults of fresh sparse VRAM can stall in the host kernel (huge-page
            // compaction); the fresh case shows that separately.
            let ones: Vec<u8> = std::iter::repeat_n(1.0f32.to_le_bytes(), 1 << 20)
                .flatten()
                .collect();
            for at in (0..3 * case.bytes).step_by(ones.len()) {
                space.write(VRAM_VA + at, &ones).unwrap();
            }
        }
        let args = SharedRegion::create("kernarg", 4096).unwrap();
        space.map_host(HOST_VA, &args, 0, 4096, true).unwrap();
        let mut params = Vec::new();
        for p in [a, b, c] {
            params.extend(p.to_le_bytes());
        }
        params.extend(case.n.to_le_bytes());
        let grid = Grid {
            groups: std::array::from_fn(|i| case.grid[i] / case.group[i]),
            group_size: case.group,
            dynamic_lds: 0,
        };
        let mut ka = vec![0u8; 1024];
        let n = kernarg::layout(k.plan(), &params, &[], &grid, &mut ka).unwrap();
        args.write(0, &ka[..n]);
        let props = k.code_properties();
        let mut user = Vec::new();
        for (bit, words) in [(0u16, 4), (1, 2), (2, 2), (3, 2), (4, 2), (5, 2), (6, 1)] {
            if props & (1 << bit) != 0 {
                if bit == 3 {
                    user.extend([HOST_VA as u32, (HOST_VA >> 32) as u32]);
                } else {
                    user.extend(std::iter::repeat_n(0, words));
                }
            }
        }
        let regs = regs::compute(Generation::Gfx11);
        let set = |offset: u16, values: &[u32]| {
            pm4::Packet::SetShReg(pm4::SetShReg { offset, values })
                .to_words()
                .unwrap()
        };
        let code = CODE_VA + k.code_offset();
        let mut w = set(regs.pgm_lo, &[(code >> 8) as u32, (code >> 40) as u32]);
        w.extend(set(regs.pgm_rsrc1, &[k.rsrc1(), k.rsrc2()]));
        w.extend(set(regs.pgm_rsrc3, &[k.rsrc3()]));
        w.extend(set(regs.num_thread_x, &case.group));
        w.extend(set(regs.user_data_0, &user));
        w.extend(
            pm4::Packet::DispatchDirect(pm4::DispatchDirect {
                dim: grid.groups,
                initiator: initiator::COMPUTE_SHADER_EN
                    | initiator::FORCE_START_AT_000
                    | initiator::CS_W32_EN,
            })
            .to_words()
            .unwrap(),
        );
        // The dispatch 32 times over, so the work outlasts the longest sleep below on a host
        // of many cores too (one vadd takes about a second on 2 cores, tens of ms on 16).
        let burst: Vec<u32> = std::iter::repeat_n(w.as_slice(), 32)
            .flatten()
            .copied()
            .collect();
        let mut times = Vec::new();
        for slot in 0..15u64 {
            let mut client = Client::new(&space, QueueKind::Pm4, slot);
            client.submit(&burst);
            // Well into the work: the burst of vadds takes seconds, one matmul minutes.
            std::thread::sleep(Duration::from_millis(30 + 7 * slot));
            let t = Instant::now();
            client.queue.stop();
            times.push(t.elapsed());
            assert!(client.pos.load_u64(0, Ordering::Acquire) * 4 < client.wbytes);
        }
        let max = *times.iter().max().unwrap();
        println!(
            "stop mid-kernel, {}: p50 {:.3} ms, max {:.3} ms over {} stops (goal: under 10 ms)",
            case.what,
            percentile(&mut times, 0.5).as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            times.len(),
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // RIG_SIM_BENCH=stop runs the stop figures only.
    if std::env::var("RIG_SIM_BENCH").as_deref() != Ok("stop") {
        latency();
        bandwidth();
        idle();
    }
    stop_latency();
}
