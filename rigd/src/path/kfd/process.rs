//! rigd's (or a worker's) one KFD process and its event thread: the kernel makes one KFD
//! process per address space, so every device of the process shares its GPU VM. The
//! thread waits on three events: the process's signal event (id 1; the kernel keeps id 0),
//! whose id every release names as its interrupt context, so that the kernel finds the
//! event at once, and whose slot the thread arms before each wait (KFD signals an event
//! from an interrupt only if its slot was written); the memory-exception event, whose
//! faulting address picks the device it reaches; and the hardware-exception event, which
//! reaches every device. The thread is the path's interrupt handler: on the signal event it
//! wakes the sleepers of every device's word ([`crate::path::wake`]), as the kernel's own
//! handler wakes the threads waiting on the event, and then tells each device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use rig_kfd::abi;
use rig_kfd::kfd::Kfd;
use rig_kfd::seam::{Kernel, Pages};

use super::kfd_why;
use crate::path::wake::Sleepers;
use crate::path::{Events, Why};

/// How long the event thread's wait lasts before it re-checks that its backend lives: an
/// idle client's worker makes one WAIT_EVENTS a second.
const EVENT_WAIT_MS: u32 = 1000;

/// A path's listener of the backend's events: its device's callbacks and address ranges.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) events: Events,
    pub(super) ranges: Mutex<Vec<(u64, u64)>>,
    pub(super) interrupts: AtomicU64,
    /// When `interrupts` last grew, as nanoseconds past [`stamp_epoch`] plus one (0: never);
    /// stamped before the count grows, so a reader of the count sees its stamp or a later one.
    pub(super) interrupted_at: AtomicU64,
    /// The device's word, which every interrupt wakes.
    pub(super) sleepers: Sleepers,
}

/// The instant `Listener::interrupted_at` counts from.
pub(super) fn stamp_epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// rigd's one KFD process (the kernel makes one per address space): the open KFD and the
/// event thread every GPU's devices share.
#[derive(Debug)]
pub struct KfdProcess {
    pub(super) kfd: Kfd,
    /// Every device's listener, with its GPU's id.
    pub(super) listeners: Mutex<Vec<(u32, Weak<Listener>)>>,
    /// The id of the signal event the event thread waits on: the interrupt context of
    /// every release of the process's devices.
    pub(super) signal: u32,
}

impl KfdProcess {
    /// Opens KFD through `kernel`, negotiates its version, announces the runtime and starts
    /// the event thread.
    pub fn open(kernel: Arc<dyn Kernel>) -> Result<Arc<KfdProcess>, Why> {
        let kfd = Kfd::open(kernel).map_err(|e| kfd_why(&e))?;
        kfd.runtime_enable().map_err(|e| kfd_why(&e))?;
        let signal = kfd
            .create_event(abi::EVENT_SIGNAL, true, 0, 0)
            .map_err(|e| kfd_why(&e))?;
        let process = Arc::new(KfdProcess {
            kfd,
            listeners: Mutex::new(Vec::new()),
            signal: signal.event_id,
        });
        start_events(&process, signal)?;
        Ok(process)
    }

    /// The interrupt context the process's releases carry: its signal event's id.
    pub fn interrupt(&self) -> u32 {
        self.signal
    }
}

fn start_events(process: &Arc<KfdProcess>, signal: abi::CreateEventArgs) -> Result<(), Why> {
    let kfd = &process.kfd;
    let page = kfd
        .mmap(
            "the event page",
            signal.event_page_offset,
            abi::SIGNAL_EVENT_LIMIT as usize * 8,
        )
        .map_err(|e| kfd_why(&e))?;
    let memory = kfd
        .create_event(abi::EVENT_MEMORY, true, 0, 0)
        .map_err(|e| kfd_why(&e))?;
    let hw = kfd
        .create_event(abi::EVENT_HW_EXCEPTION, true, 0, 0)
        .map_err(|e| kfd_why(&e))?;
    // Armed before any queue runs: an interrupt signals the event only then.
    page.atomic_u64(signal.event_slot_index as usize * 8)
        .store(1, Ordering::Release);
    let weak = Arc::downgrade(process);
    std::thread::Builder::new()
        .name("rigd-kfd-events".into())
        .spawn(move || {
            event_loop(
                weak,
                page,
                signal.event_slot_index,
                [signal.event_id, memory.event_id, hw.event_id],
            )
        })
        .map_err(|e| format!("no thread for KFD's events: {e}"))?;
    Ok(())
}

fn event_loop(process: Weak<KfdProcess>, page: Pages, slot: u32, ids: [u32; 3]) {
    let slot = slot as usize * 8;
    // Ends once rigd no longer holds the process (every backend dropped).
    while let Some(s) = process.upgrade() {
        let mut wait = ids.map(abi::EventData::waiting_for);
        let result = s.kfd.wait_events(&mut wait, EVENT_WAIT_MS);
        // The devices open now, after the wait: one opened during it gets its wake too.
        let listeners: Vec<(u32, Arc<Listener>)> = s
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|(g, l)| l.upgrade().map(|l| (*g, l)))
            .collect();
        match result {
            Ok(abi::WAIT_RESULT_COMPLETE) => {}
            Ok(_) => continue,
            Err(e) => {
                for (_, l) in &listeners {
                    (l.events.fault)(rig_proto::Fault::new(
                        rig_proto::FaultKind::Internal,
                        format!("waiting for KFD's events failed: {e}"),
                    ));
                }
                return;
            }
        }
        // Re-armed before the devices look at their words: a release whose interrupt KFD
        // dropped while the slot was acknowledged wrote its word before that interrupt,
        // so before this store, so before the devices' checks below.
        page.atomic_u64(slot).store(1, Ordering::Release);
        // Every device checks its own word; an interrupt of one wakes all of them. The
        // releases wrote their words before they interrupted, so the sleepers find them.
        let at = u64::try_from(stamp_epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        for (_, l) in &listeners {
            l.interrupted_at.fetch_max(at, Ordering::Release);
            l.interrupts.fetch_add(1, Ordering::Release);
            l.sleepers.wake();
            (l.events.interrupt)();
        }
        let m = wait[1].memory_exception();
        if m.gpu_id != 0 {
            let read_only = m.failure.read_only != 0;
            let why = rig_proto::Fault {
                address: Some(m.va),
                // A read-only page refuses only writes; KFD does not say which access
                // found a page not present.
                write: read_only.then_some(true),
                ..rig_proto::Fault::new(
                    rig_proto::FaultKind::MemoryFault,
                    if read_only {
                        "write to a read-only page"
                    } else {
                        "page not present"
                    },
                )
            };
            let of_gpu: Vec<&Arc<Listener>> = listeners
                .iter()
                .filter(|(g, _)| *g == m.gpu_id)
                .map(|(_, l)| l)
                .collect();
            let owner: Vec<&Arc<Listener>> = of_gpu
                .iter()
                .copied()
                .filter(|l| {
                    l.ranges
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .any(|(a, b)| m.va >= *a && m.va < *b)
                })
                .collect();
            let to = if owner.is_empty() { of_gpu } else { owner };
            for l in to {
                (l.events.fault)(why.clone());
            }
        }
        let h = wait[2].hw_exception();
        if h.gpu_id != 0 {
            for (_, l) in listeners.iter().filter(|(g, _)| *g == h.gpu_id) {
                (l.events.fault)(rig_proto::Fault::new(
                    rig_proto::FaultKind::Reset,
                    if h.reset_cause == abi::HW_EXCEPTION_ECC {
                        "after an ECC error"
                    } else {
                        "after a hang"
                    },
                ));
            }
        }
    }
}
