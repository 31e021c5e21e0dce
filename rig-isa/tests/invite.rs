//! When helper threads join a dispatch: a dispatch of little work runs on the calling thread
//! alone however long it takes on the clock (waking helpers costs more than it saves), and one
//! of much work gets helpers.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use rig_isa::testing::FlatMemory;
use rig_isa::{Dispatch, Memory, MemoryFault, execute};

const BASE: u64 = 0x7_8000_0000;
const DATA: u64 = BASE + 0x1000;

/// s_load_b32 s2, s[0:1], 0 ; s_waitcnt lgkmcnt(0) ; s_endpgm
const KERNEL: [u32; 4] = [0xf400_0080, 0xf800_0000, 0xbf89_fc07, 0xbfb0_0000];

/// A memory that notes which threads read `DATA` (each wave's `s_load`) and can make those
/// reads slow or make the calling thread wait for a helper.
struct Watched {
    inner: FlatMemory,
    readers: Mutex<HashSet<ThreadId>>,
    /// How long each read of DATA takes.
    delay: Duration,
    /// After this many of its reads, the thread that made the first read waits (up to 10 s)
    /// until another thread has read.
    wait_after: Option<usize>,
    first: Mutex<Option<ThreadId>>,
    reads: AtomicUsize,
}

impl Watched {
    fn new(delay: Duration, wait_after: Option<usize>) -> Watched {
        let inner = FlatMemory::new(BASE, 0x2000);
        let code: Vec<u8> = KERNEL.iter().flat_map(|w| w.to_le_bytes()).collect();
        inner.write(BASE, &code).unwrap();
        Watched {
            inner,
            readers: Mutex::new(HashSet::new()),
            delay,
            wait_after,
            first: Mutex::new(None),
            reads: AtomicUsize::new(0),
        }
    }

    fn readers(&self) -> usize {
        self.readers.lock().unwrap().len()
    }
}

impl Memory for Watched {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemoryFault> {
        if addr == DATA {
            let me = std::thread::current().id();
            self.readers.lock().unwrap().insert(me);
            let first = *self.first.lock().unwrap().get_or_insert(me);
            let n = self.reads.fetch_add(1, Ordering::Relaxed);
            if first == me && self.wait_after.is_some_and(|k| n >= k) {
                let start = Instant::now();
                while self.readers() < 2 && start.elapsed() < Duration::from_secs(10) {
                    std::thread::yield_now();
                }
            }
            std::thread::sleep(self.delay);
        }
        self.inner.read(addr, out)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryFault> {
        self.inner.write(addr, data)
    }

    fn atomic_u32(&self, addr: u64, op: &dyn Fn(u32) -> u32) -> Result<u32, MemoryFault> {
        self.inner.atomic_u32(addr, op)
    }

    fn atomic_u64(&self, addr: u64, op: &dyn Fn(u64) -> u64) -> Result<u64, MemoryFault> {
        self.inner.atomic_u64(addr, op)
    }
}

/// `groups` groups of one wave each, on up to `threads` threads.
fn dispatch(mem: &Watched, groups: u32, threads: usize) {
    let d = Dispatch {
        code_address: BASE,
        pgm_rsrc1: 0,
        pgm_rsrc2: 2 << 1,
        pgm_rsrc3: 0,
        user_sgprs: vec![DATA as u32, (DATA >> 32) as u32],
        grid_items: [32 * groups, 1, 1],
        group_size: [32, 1, 1],
        wave64: false,
        lds_bytes: 0,
        scratch: None,
    };
    let stats = execute(&d, mem, &AtomicBool::new(false), threads).expect("runs");
    assert_eq!(stats.workgroups, u64::from(groups));
}

#[test]
fn a_dispatch_of_little_work_runs_on_the_calling_thread_however_slow() {
    // Eight waves of three instructions, each taking milliseconds on the clock: far longer
    // than waking a helper, yet too little work to share.
    let mem = Watched::new(Duration::from_millis(3), None);
    dispatch(&mem, 8, 4);
    let readers = mem.readers.lock().unwrap();
    assert_eq!(readers.len(), 1, "helpers ran waves of a small dispatch");
    assert!(readers.contains(&std::thread::current().id()));
}

#[test]
fn a_dispatch_of_much_work_gets_helpers() {
    // 400 groups: the caller invites helpers after some of them, and waits (bounded) at its
    // 200th wave until one has run a wave.
    let mem = Watched::new(Duration::ZERO, Some(200));
    dispatch(&mem, 400, 4);
    assert!(
        mem.readers() >= 2,
        "no helper joined a dispatch of 400 groups"
    );
}
