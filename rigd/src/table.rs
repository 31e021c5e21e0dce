//! The device table: each open device behind its own lock, and the two ways a request takes
//! that lock.
//!
//! Locks are per device, not global: the table itself (the `crate::book::Book`'s `devices`)
//! maps ids to `Arc`s of `Slot`s, and each slot holds its device behind its own mutex
//! ([`crate::device::Device`] keeps its own invariants), so a request on device A never waits
//! for device B's work.
//!
//! A request takes a device's lock as its `Mode` says: `Wait` (on a thread that may
//! block) always gets it; `Try` (inline, on an async worker) gets it or [`Busy`]. Busy is
//! only ever the answer of a lock step, so a request that is told it is busy has changed
//! nothing, and a handler given a `Held` device cannot produce one: it answers with a
//! [`crate::refusal::Refusal`] or not at all. With `Wait` the busy type is
//! [`std::convert::Infallible`], so the blocking path has no busy answer to give.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use rig_proto::messages::DeviceId;

use crate::device::{Device, Footprint};
use crate::state::{ClientId, State};

/// A device in the table: who owns it, on which GPU, and the device behind its own lock.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) owner: ClientId,
    /// The owner's user.
    pub(crate) uid: u32,
    /// The grant the owner connected on ([`crate::grant::GrantOf::key`]).
    pub(crate) grant: Option<u64>,
    pub(crate) gpu: u32,
    pub(crate) device: Mutex<Device>,
}

/// A lock a `Try` request would have waited for: it changed nothing.
#[derive(Debug)]
pub struct Busy;

/// How a request takes a device's lock.
pub(crate) trait Mode {
    /// What a lock found held is: [`Busy`], or nothing at all for a mode that waits.
    type Busy;

    /// Locks `slot`'s device as the mode says.
    fn lock(slot: &Slot) -> Result<MutexGuard<'_, Device>, Self::Busy>;
}

/// Waits for the lock (on a thread that may block).
#[derive(Debug)]
pub(crate) enum Wait {}

/// Gives up at once if another holds the lock (on an async worker).
#[derive(Debug)]
pub(crate) enum Try {}

impl Mode for Wait {
    type Busy = Infallible;

    fn lock(slot: &Slot) -> Result<MutexGuard<'_, Device>, Infallible> {
        Ok(slot.wait())
    }
}

impl Mode for Try {
    type Busy = Busy;

    fn lock(slot: &Slot) -> Result<MutexGuard<'_, Device>, Busy> {
        match slot.device.try_lock() {
            Ok(d) => Ok(d),
            Err(TryLockError::Poisoned(e)) => Ok(e.into_inner()),
            Err(TryLockError::WouldBlock) => Err(Busy),
        }
    }
}

impl Slot {
    /// Locks the device, waiting for it. A panic while it was held (a bug) does not stop
    /// rigd: the device is only ever changed by whole operations, so it is taken back as it
    /// is.
    pub(crate) fn wait(&self) -> MutexGuard<'_, Device> {
        self.device.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A device locked for a request, with what the request reserved for it.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    pub(crate) slot: &'a Slot,
    pub(crate) d: MutexGuard<'a, Device>,
    /// Charged ahead for what the request makes; dropped when the charges are settled.
    pub(crate) reserved: Footprint,
    /// Pieces in quarantine when the request began.
    pub(crate) quarantined: usize,
}

impl<'a> Held<'a> {
    /// Holds `slot`'s device as `M` says.
    pub(crate) fn new<M: Mode>(slot: &'a Slot) -> Result<Held<'a>, M::Busy> {
        let d = M::lock(slot)?;
        let quarantined = d.quarantined();
        Ok(Held {
            slot,
            d,
            reserved: Footprint::default(),
            quarantined,
        })
    }

    /// Holds `slot`'s device, waiting for it.
    pub(crate) fn waited(slot: &'a Slot) -> Held<'a> {
        let Ok(h) = Held::new::<Wait>(slot);
        h
    }
}

impl State {
    /// Takes device `id` out of the table, gives back all it holds and its charges, and
    /// drops the mappings of its word that the owner's other devices hold. Waits for the
    /// device's lock: run where a thread may block.
    pub(crate) fn remove_device(&self, id: DeviceId) {
        let (slot, peers) = {
            let mut book = self.book();
            let Some(slot) = book.devices.remove(&id) else {
                return;
            };
            let mut others = Vec::new();
            if let Some(c) = book.clients.get_mut(&slot.owner) {
                c.devices.remove(&id);
                others.extend(c.devices.iter().copied());
            }
            book.count_device(slot.uid, slot.grant, false);
            let peers: Vec<Arc<Slot>> = others
                .iter()
                .filter_map(|p| book.devices.get(p).cloned())
                .collect();
            (slot, peers)
        };
        {
            let mut d = slot.wait();
            let charged = d.close();
            self.book().apply(
                slot.owner,
                slot.uid,
                slot.grant,
                slot.gpu,
                charged,
                Footprint::default(),
            );
        }
        for p in peers {
            let mut h = Held::waited(&p);
            h.d.drop_peer_word(id);
            self.settle(&mut h);
        }
    }

    /// The devices, each with its owner's pid, as the table holds them now.
    pub(crate) fn snapshot(&self) -> Vec<(Arc<Slot>, u32)> {
        let book = self.book();
        book.devices
            .values()
            .map(|s| (s.clone(), book.pid_of(s.owner)))
            .collect()
    }

    /// The devices the connections of process `pid` hold.
    pub fn devices_of_pid(&self, pid: i32) -> Vec<DeviceId> {
        let book = self.book();
        book.devices
            .iter()
            .filter(|(_, slot)| {
                book.clients
                    .get(&slot.owner)
                    .is_some_and(|c| c.peer.pid == pid)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// The total memory held across all devices (for tests and the log). Waits for every
    /// device's lock.
    pub fn held_bytes(&self) -> u64 {
        self.snapshot()
            .iter()
            .map(|(s, _)| s.wait().held().total())
            .sum()
    }
}
