//! A minimal client for tests: rings in shared host memory, doorbells, and waits.
#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rig_amd::code_object::{CodeObject, Kernel};
use rig_amd::gpu::QueueKind;
use rig_amd::kernarg::{self, Grid};
use rig_shm::{Doorbell, SharedRegion};
use rig_sim::{
    AddressSpace, Interrupt, Queue, QueueDesc, QueueFault, QueueStatus, SimConfig, SimGpu,
};

pub const RING_VA: u64 = 0x1_0000_0000;
pub const POS_VA: u64 = 0x2_0000_0000;
pub const VRAM_VA: u64 = 0x4_0000_0000;
pub const HOST_VA: u64 = 0x8_0000_0000;

pub fn gpu(model: &str) -> Arc<SimGpu> {
    SimGpu::new(SimConfig {
        model: model.into(),
        vram_bytes: 4 << 30,
        ..SimConfig::default()
    })
    .unwrap()
}

/// What a queue's callbacks saw.
#[derive(Default)]
pub struct Seen {
    pub interrupts: Mutex<Vec<Interrupt>>,
    pub faults: Mutex<Vec<(QueueFault, Option<QueueStatus>)>>,
    /// A 32-bit host word the interrupt callback reads, as a driver's handler would before
    /// it wakes the word's sleepers...
    pub word: Mutex<Option<(SharedRegion, usize)>>,
    /// ...and what it read there at each interrupt.
    pub word_at_interrupt: Mutex<Vec<u32>>,
}

/// A queue driven the way a client drives it.
pub struct TestQueue {
    pub queue: Arc<Mutex<Option<Queue>>>,
    pub kind: QueueKind,
    pub space: AddressSpace,
    pub ring: SharedRegion,
    pub ring_va: u64,
    pub ring_bytes: u64,
    pub pos: SharedRegion,
    pub rptr_va: u64,
    pub wptr_va: u64,
    pub doorbell: Doorbell,
    /// Write position, in the queue's units.
    pub wpos: u64,
    pub seen: Arc<Seen>,
}

impl TestQueue {
    /// A queue of `kind` in `space`, with `slot` choosing distinct GPU addresses.
    pub fn new(space: &AddressSpace, kind: QueueKind, ring_bytes: u64, slot: u64) -> TestQueue {
        let map_bytes = ring_bytes.max(4096);
        let ring = SharedRegion::create("ring", map_bytes as usize).unwrap();
        let ring_va = RING_VA + slot * (1 << 28);
        // An AQL queue writes its ring (headers go back to INVALID); a client starts every slot
        // INVALID.
        let aql = kind == QueueKind::Aql;
        if aql {
            for slot in 0..map_bytes as usize / 64 {
                ring.store_u32(slot * 64, 1, Ordering::Relaxed);
            }
        }
        space.map_host(ring_va, &ring, 0, map_bytes, aql).unwrap();
        let pos = SharedRegion::create("pos", 4096).unwrap();
        let pos_va = POS_VA + slot * 0x10000;
        space.map_host(pos_va, &pos, 0, 4096, true).unwrap();
        let bells = SharedRegion::create("bells", 4096).unwrap();
        let doorbell = Doorbell::new(bells, 64).unwrap();
        let seen = Arc::new(Seen::default());
        let queue_cell: Arc<Mutex<Option<Queue>>> = Arc::new(Mutex::new(None));
        let (s1, s2, qc) = (seen.clone(), seen.clone(), queue_cell.clone());
        let q = space
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
                Arc::new(move |i| {
                    if let Some((r, at)) = &*s1.word.lock().unwrap() {
                        let v = r.load_u32(*at, Ordering::Acquire);
                        s1.word_at_interrupt.lock().unwrap().push(v);
                    }
                    s1.interrupts.lock().unwrap().push(i)
                }),
                Arc::new(move |f| {
                    // The status must already say faulted when the fault is reported.
                    let status = qc
                        .try_lock()
                        .ok()
                        .and_then(|q| q.as_ref().map(|q| q.status()));
                    s2.faults.lock().unwrap().push((f, status));
                }),
            )
            .unwrap();
        *queue_cell.lock().unwrap() = Some(q);
        TestQueue {
            queue: queue_cell,
            kind,
            space: space.clone(),
            ring,
            ring_va,
            ring_bytes,
            pos,
            rptr_va: pos_va,
            wptr_va: pos_va + 8,
            doorbell,
            wpos: 0,
            seen,
        }
    }

    fn unit(&self) -> u64 {
        match self.kind {
            QueueKind::Pm4 => 4,
            QueueKind::Sdma => 1,
            QueueKind::Aql => 64,
        }
    }

    /// Places `words` in the ring (no doorbell).
    pub fn place(&mut self, words: &[u32]) {
        let mut at = self.wpos * self.unit();
        for w in words {
            let off = (at % self.ring_bytes) as usize;
            self.ring.store_u32(off, *w, Ordering::Relaxed);
            at += 4;
        }
        self.wpos = at / self.unit();
    }

    /// Places one AQL packet: its body first, then its header word with release order.
    pub fn place_aql(&mut self, words: [u32; 16]) {
        let off = ((self.wpos * 64) % self.ring_bytes) as usize;
        for (i, w) in words.iter().enumerate().skip(1) {
            self.ring.store_u32(off + 4 * i, *w, Ordering::Relaxed);
        }
        self.ring.store_u32(off, words[0], Ordering::Release);
        self.wpos += 1;
    }

    /// Publishes the write position and rings.
    pub fn ring_bell(&self) {
        self.pos.store_u64(8, self.wpos, Ordering::Release);
        self.doorbell.ring(self.wpos);
    }

    /// Places `words` and rings.
    pub fn submit(&mut self, words: &[u32]) {
        self.place(words);
        self.ring_bell();
    }

    pub fn rptr(&self) -> u64 {
        self.pos.load_u64(0, Ordering::Acquire)
    }

    /// Waits until the queue read everything submitted.
    pub fn wait_idle(&self) {
        let t = Instant::now();
        while self.rptr() != self.wpos {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "queue stuck at {} of {}: {:?}",
                self.rptr(),
                self.wpos,
                self.status()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn status(&self) -> QueueStatus {
        self.queue.lock().unwrap().as_ref().unwrap().status()
    }

    pub fn stop(&self) {
        self.queue.lock().unwrap().as_ref().unwrap().stop();
    }

    /// Waits for the queue to fault and returns the fault.
    pub fn wait_fault(&self) -> QueueFault {
        let t = Instant::now();
        loop {
            if let Some((f, _)) = self.seen.faults.lock().unwrap().first() {
                return f.clone();
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no fault: {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Waits until `f` is true.
pub fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A host region mapped writable at `va`.
pub fn host(space: &AddressSpace, va: u64, bytes: usize) -> SharedRegion {
    let r = SharedRegion::create("data", bytes).unwrap();
    space.map_host(va, &r, 0, bytes as u64, true).unwrap();
    r
}

/// The LLVM-compiled `scratch` kernel (kernels/src/scratch.cl, a private array) placed at
/// `code_va`, and its launch over `items` work-items in groups of 64 staged in host memory
/// at `HOST_VA`: the kernel arguments there, the inputs (`seeds`) from 4096, the outputs
/// after them ([`scratch_output`] says what each must hold).
pub struct ScratchLaunch {
    pub kernel: Kernel,
    pub mem: SharedRegion,
    pub seeds: Vec<u32>,
    pub grid: Grid,
}

/// [`ScratchLaunch`] in `space`; `None`, saying so, when kernels/build.sh has not made the
/// code object.
pub fn stage_scratch(space: &AddressSpace, code_va: u64, items: usize) -> Option<ScratchLaunch> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/out/gfx1100/scratch.co");
    let Ok(bytes) = std::fs::read(&path) else {
        println!(
            "skipped: {} is absent (kernels/build.sh makes it)",
            path.display()
        );
        return None;
    };
    let co = CodeObject::parse(&bytes).unwrap();
    let kernel = co.kernel("scratch").unwrap().clone();
    assert!(kernel.private_segment_size() > 0);
    let mut image = vec![0u8; co.image_size() as usize];
    co.place(code_va, &mut image).unwrap();
    space
        .alloc_vram(code_va, (image.len() as u64).div_ceil(4096) * 4096)
        .unwrap();
    space.write(code_va, &image).unwrap();
    let mem = host(space, HOST_VA, 8192);
    let (input, out) = (HOST_VA + 4096, HOST_VA + 4096 + (items * 4) as u64);
    let seeds: Vec<u32> = (0..items as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
        .collect();
    for (i, s) in seeds.iter().enumerate() {
        mem.write(4096 + 4 * i, &s.to_le_bytes());
    }
    let mut params = input.to_le_bytes().to_vec();
    params.extend(out.to_le_bytes());
    let grid = Grid {
        groups: [(items / 64) as u32, 1, 1],
        group_size: [64, 1, 1],
        dynamic_lds: 0,
    };
    let mut ka = vec![0u8; 1024];
    let n = kernarg::layout(kernel.plan(), &params, &[], &grid, &mut ka).unwrap();
    mem.write(0, &ka[..n]);
    Some(ScratchLaunch {
        kernel,
        mem,
        seeds,
        grid,
    })
}

/// What `scratch` writes for work-item `i` whose input is `seed` (the host's run of
/// kernels/src/scratch.cl).
pub fn scratch_output(i: usize, seed: u32) -> u32 {
    let t: Vec<u32> = (0..320u32)
        .map(|k| seed.wrapping_mul(k).wrapping_add(i as u32))
        .collect();
    (0..64u32).fold(0u32, |acc, k| {
        acc.wrapping_add(t[(seed.wrapping_add(k * 37) % 320) as usize])
    })
}
