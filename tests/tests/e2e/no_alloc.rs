//! The submit path allocates nothing once a submission was submitted before.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use rig_client::{Launch, Memory, Ref, Submission};
use rig_testkit::{Backend, Daemon};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
// side effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn submitting_again_allocates_nothing(b: Backend) {
    let d = Daemon::start(b, None);
    let dev = d.device();
    let add = dev
        .load_image(&b.code("add"))
        .unwrap()
        .resolve("add")
        .unwrap();
    let x = dev.buffer(1024, Memory::Pinned).unwrap();
    let y = dev.buffer(1024, Memory::Pinned).unwrap();
    let z = dev.buffer(1024, Memory::Device).unwrap();
    let s = Submission::new()
        .launch(
            Launch::new(&add, [1, 1, 1], [256, 1, 1])
                .params(&[0; 16])
                .refs(&[Ref::read(&x, 0), Ref::write(&y, 8)]),
        )
        .copy(&y, 0, &z, 0, 1024)
        .after(&[0])
        .fill(&x, 1, 5, 0);
    dev.submit(&s).unwrap().wait().unwrap();
    COUNTING.with(|c| c.set(true));
    let mut last = None;
    for _ in 0..200 {
        last = Some(dev.submit(&s).unwrap());
    }
    COUNTING.with(|c| c.set(false));
    last.unwrap().wait().unwrap();
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        0,
        "allocations on the submit path"
    );
}

fn submitting_a_wait_on_the_gpu_again_allocates_nothing(b: Backend) {
    use rig_client::Queue;
    let d = Daemon::start(b, None);
    let rig = d.rig();
    let (a, b) = (rig.open_device("0").unwrap(), rig.open_device("0").unwrap());
    // B's point stays unreached until the host writes the flag, so A's waits go to its GPU.
    let flag = crate::compute_words::flag(&b);
    let w = crate::compute_words::held_until(&b, &flag);
    let p = b
        .submit(&Submission::new().words(Queue::Compute, &w))
        .unwrap();
    let out = a.buffer(256, Memory::Pinned).unwrap();
    let s = Submission::new().fill(&out, 0, 256, 6).wait(&p);
    // The first submit compiles and asks rigd for B's word.
    a.submit(&s).unwrap();
    COUNTING.with(|c| c.set(true));
    let mut last = None;
    for _ in 0..100 {
        last = Some(a.submit(&s).unwrap());
    }
    COUNTING.with(|c| c.set(false));
    assert!(!p.signaled());
    crate::compute_words::release(&flag);
    last.unwrap().wait().unwrap();
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        0,
        "allocations on the submit path of a wait"
    );
}

rig_testkit::on_backends!(sim, kfd, gfx942, kfd_gfx942 =>
    submitting_again_allocates_nothing,
    submitting_a_wait_on_the_gpu_again_allocates_nothing,
);
