//! Stops that could not destroy every queue keep the device's memory: once a stop answered
//! `Unknown` (a queue may still run), memory waiting in quarantine and every later free stay
//! held for the device's life, whatever the timeline word (which the client writes) or the
//! path's `busy_since` (whose queue list no longer holds the queue) say; and a retire the
//! path cannot do loses the device with the path's fault and fails the growth.
//!
//! The path is a simulated GPU's behind a wrapper that, once told to, cannot destroy
//! queues (its retire fails, leaving the queue running, and its stop answers `Unknown`, as
//! KFD's DESTROY_QUEUE does when the hardware scheduler does not unmap a queue), and that
//! counts the memory given back to it.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use rig_proto::messages::{Generations, MemoryKind, QueueKind};
use rig_proto::{DeviceId, RegionId};
use rig_shm::SharedRegion;
use rig_shm::layout::{SUBMITTED_OFFSET, TIMELINE_WORD_OFFSET};
use rigd::config::SimGpuConfig;
use rigd::device::{Device, FdList, MakeError};
use rigd::path::sim::SimBackend;
use rigd::path::{
    Backend, Events, Fault, MapRefusal, Owner, Path, PathMemory, QueueHandle, QueueSpec, Refusal,
    Stopped,
};

#[derive(Debug, Default)]
struct Control {
    /// Set: queues can no longer be destroyed.
    stuck: AtomicBool,
    /// Memory given back through the path.
    frees: AtomicUsize,
}

#[derive(Debug)]
struct Stuck {
    sim: Box<dyn Path>,
    control: Arc<Control>,
}

impl Path for Stuck {
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
        self.control.frees.fetch_add(1, Ordering::Relaxed);
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
    fn hand_scratch(&mut self, address: u64, bytes: u64) -> Result<(), Refusal> {
        self.sim.hand_scratch(address, bytes)
    }
    fn retire(&mut self, queue: QueueHandle) -> Result<(), Fault> {
        if self.control.stuck.load(Ordering::Relaxed) {
            return Err(Fault("the queue did not unmap (ETIME)".into()));
        }
        self.sim.retire(queue)
    }
    fn most_ring(&self, kind: QueueKind) -> u64 {
        self.sim.most_ring(kind)
    }
    fn clock(&self) -> u64 {
        self.sim.clock()
    }
    fn stop(&mut self, fault: Option<&rig_proto::Fault>) -> Stopped {
        // The simulated queues do stop; the path cannot say so.
        let s = self.sim.stop(fault);
        if self.control.stuck.load(Ordering::Relaxed) {
            Stopped::Unknown
        } else {
            s
        }
    }
    fn busy_since(&self) -> Option<Instant> {
        self.sim.busy_since()
    }
    fn progress(&self) -> u64 {
        self.sim.progress()
    }
}

fn device() -> (Device, Arc<Control>) {
    let sim = SimBackend::new(&SimGpuConfig {
        processor: "gfx1100".into(),
        memory_bytes: 256 << 20,
        hang_ms: 10_000,
        clock: Default::default(),
    })
    .unwrap();
    let events = Events {
        interrupt: Arc::new(|| {}),
        fault: Arc::new(|_| {}),
    };
    let control = Arc::new(Control::default());
    let path = Box::new(Stuck {
        sim: sim.open(Owner(1), events).unwrap(),
        control: control.clone(),
    });
    let desc = sim.description().clone();
    let interrupt = rigd::device::interrupt_fd().unwrap();
    let d = Device::make(DeviceId(1), 0, desc, path, interrupt, Arc::default()).unwrap();
    (d, control)
}

/// Allocates region `id` of Pinned memory.
fn alloc(d: &mut Device, id: u64) {
    d.alloc(
        RegionId(id),
        MemoryKind::Pinned,
        4096,
        &mut FdList::default(),
    )
    .unwrap();
}

#[test]
fn memory_given_back_around_a_stop_that_could_not_stop_every_queue_stays_held() {
    let (mut d, control) = device();
    alloc(&mut d, 1);
    alloc(&mut d, 2);
    // Work up to 5 was submitted when region 1 was given back: quarantined.
    let (page, _) = d.word().unwrap();
    let page = page.clone();
    page.store_u64(SUBMITTED_OFFSET as usize, 5, Ordering::Release);
    assert!(d.free(RegionId(1)));
    assert_eq!(d.quarantined(), 1);
    control.stuck.store(true, Ordering::Relaxed);
    assert_eq!(d.stop(5, None), Stopped::Unknown);
    // The word reads 5 (the client writes it, or the work ended), and the path lists no
    // running queue: neither tells that the queue it could not stop touches nothing.
    page.store_u64(TIMELINE_WORD_OFFSET as usize, 5, Ordering::Release);
    let frees = control.frees.load(Ordering::Relaxed);
    let seen = d.watch(Instant::now());
    assert_eq!(d.quarantined(), 1, "the quarantine was released");
    assert!(!seen.busy, "nothing a later look can free");
    assert!(d.free(RegionId(2)));
    assert_eq!(d.quarantined(), 2);
    d.watch(Instant::now());
    d.close();
    assert_eq!(
        control.frees.load(Ordering::Relaxed),
        frees,
        "memory was given back to a path that could not stop a queue"
    );
}

#[test]
fn a_retire_the_path_cannot_do_loses_the_device_and_keeps_its_memory() {
    let (mut d, control) = device();
    // A submission bigger than the first compute ring: a second compute queue.
    let (grown, _) = d.grow(1 << 16, 0, 0, Generations::default()).unwrap();
    assert!(grown.compute.is_some());
    control.stuck.store(true, Ordering::Relaxed);
    let installed = Generations {
        compute: 1,
        copy: 0,
        args: 0,
    };
    // The client installed the new queue: the first one retires, and cannot be destroyed.
    match d.grow(0, 0, 0, installed) {
        Err(e @ MakeError::Retire { .. }) => {
            assert!(e.to_string().contains("did not unmap"), "{e}")
        }
        r => panic!("a retire the path could not do answered {r:?}"),
    }
    let lost = d.lost().expect("the device is lost").to_string();
    assert!(lost.contains("could not destroy a retired queue"), "{lost}");
    assert!(d.is_stopped());
    let frees = control.frees.load(Ordering::Relaxed);
    d.close();
    assert_eq!(
        control.frees.load(Ordering::Relaxed),
        frees,
        "memory was given back to a path that could not stop a queue"
    );
}
