//! Looking at everyone's work: the metrics' view of the state, the inspection requests
//! (`ListClients`, `ListDevices`, `ShowDevice`) and the administrator's stop that
//! [`crate::admin`] asks of the devices.
//!
//! Inspection reads; it never changes a device. Only administrators see others' clients
//! and devices (decided at connect from the socket's credentials); any user sees its own
//! user's devices.

use std::collections::BTreeSet;
use std::sync::Arc;

use rig_proto::messages::{
    ClientInfo, DeviceId, DeviceInfo, DeviceReport, Facts, QueueKind, Response,
};

use crate::device::Device;
use crate::refusal::Refusal;
use crate::state::{ClientId, State};
use crate::table::{Held, Mode, Slot};

/// The device's facts, as `Facts` and `rigctl show` give them.
pub(crate) fn facts(d: &Device) -> Facts {
    crate::gpus::facts(d.description(), d)
}

/// The device in brief, its owner's pid given.
fn info(owner_pid: u32, d: &Device) -> DeviceInfo {
    DeviceInfo {
        device: d.id(),
        gpu: d.gpu(),
        owner_pid,
        memory: d.held(),
        lost: d.lost().cloned(),
    }
}

impl State {
    /// Whether `client` is an administrator: may inspect others and stop their work
    /// ([`crate::admin`]). Decided at connect from the socket's credentials.
    pub fn is_inspector(&self, client: ClientId) -> bool {
        self.book()
            .clients
            .get(&client)
            .is_some_and(|c| c.inspector)
    }

    /// What `client`, not an administrator, is answered for asking an administrator's
    /// request: naming its grant on a grant's socket (never an administrator, whatever its
    /// uid).
    pub(crate) fn not_admin(&self, client: ClientId) -> Refusal {
        let grant = self
            .book()
            .clients
            .get(&client)
            .and_then(|c| c.grant.as_ref().map(|g| g.id.to_string()));
        match grant {
            Some(grant) => crate::grant::GrantRefusal::NotAdmin { grant }.into(),
            None => Refusal::NotAdmin,
        }
    }

    /// One look at everything for [`crate::metrics`] (the sampler and rigctl's figures):
    /// the book briefly, then each device under its own lock.
    pub fn observe(&self) -> crate::metrics::Observed {
        use crate::metrics::{ClientSeen, DeviceSeen, GpuSeen, Observed};
        // Each growth makes a queue of the next generation; retired ones may linger.
        let generations = |d: &Device| {
            let (mut copy, mut compute) = (0u64, 0u64);
            for r in d.rings() {
                let g = if r.kind == QueueKind::Sdma {
                    &mut copy
                } else {
                    &mut compute
                };
                *g = (*g).max(u64::from(r.generation));
            }
            copy + compute
        };
        let (slots, clients) = {
            let book = self.book();
            let slots: Vec<(DeviceId, Arc<Slot>, i32)> = book
                .devices
                .iter()
                .map(|(id, slot)| {
                    let pid = book.clients.get(&slot.owner).map_or(0, |c| c.peer.pid);
                    (*id, slot.clone(), pid)
                })
                .collect();
            let clients: Vec<ClientSeen> = book
                .clients
                .values()
                .map(|c| ClientSeen {
                    pid: c.peer.pid,
                    uid: c.peer.uid,
                    program: c.program.clone(),
                    devices: c.devices.len(),
                    bytes: c.held.bytes,
                    grant: c.grant.as_ref().map(|g| g.id.clone()),
                    pod: c.pod.clone(),
                })
                .collect();
            (slots, clients)
        };
        let devices = slots
            .into_iter()
            .map(|(id, slot, pid)| {
                let d = slot.wait();
                DeviceSeen {
                    id: id.0,
                    gpu: slot.gpu,
                    pid,
                    uid: slot.uid,
                    held: d.held(),
                    submitted: d.submitted(),
                    reached: d.reached(),
                    generations: generations(&d),
                    lost: d.lost().cloned(),
                }
            })
            .collect();
        Observed {
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuSeen {
                    bus: g.info.bus.clone(),
                    simulated: g.info.simulated,
                    index: g.info.index,
                    name: g.info.name.clone(),
                    arch: g.info.arch.clone(),
                    total_bytes: g.info.budget,
                    firmware: g.firmware.clone(),
                    client_cost: g.backend.as_ref().and_then(|b| b.description().client_cost),
                })
                .collect(),
            devices,
            clients,
            losses: self.losses.counts(),
        }
    }

    /// `ListClients`: every connection, for an administrator.
    pub(crate) fn list_clients(&self, client: ClientId) -> Result<Response, Refusal> {
        if !self.is_inspector(client) {
            return Err(self.not_admin(client));
        }
        Ok(Response::Clients(
            self.book()
                .clients
                .values()
                .map(|c| ClientInfo {
                    pid: u32::try_from(c.peer.pid).unwrap_or(0),
                    uid: c.peer.uid,
                    gid: c.peer.gid,
                    program: c.program.to_string(),
                    devices: c.devices.iter().copied().collect(),
                    bytes: c.held.bytes,
                    grant: c.grant.as_ref().map(|g| g.id.to_string()),
                    pod: c.pod.clone(),
                })
                .collect(),
        ))
    }

    /// `ListDevices`: every device for an administrator, its own user's for anyone else.
    /// Busy (with [`crate::table::Try`]) at any device's lock: it changed nothing.
    pub(crate) fn list_devices<M: Mode>(
        &self,
        client: ClientId,
    ) -> Result<Result<Response, Refusal>, M::Busy> {
        // A non-administrator sees its own user's devices only: those of its connections
        // (on a grant's socket, those of its grant's connections of its user).
        let mine: Option<BTreeSet<ClientId>> = (!self.is_inspector(client)).then(|| {
            let book = self.book();
            let me = book.clients.get(&client);
            book.clients
                .iter()
                .filter(|(_, c)| me.is_some_and(|m| m.same_tenant(c)))
                .map(|(id, _)| *id)
                .collect()
        });
        let mut out = Vec::new();
        for (slot, pid) in self.snapshot() {
            if mine.as_ref().is_some_and(|m| !m.contains(&slot.owner)) {
                continue;
            }
            let d = M::lock(&slot)?;
            out.push(info(pid, &d));
        }
        Ok(Ok(Response::Devices(out)))
    }

    /// `ShowDevice`: one device in detail, for an administrator, its owner or its owner's
    /// user. Busy (with [`crate::table::Try`]) at the device's lock: it changed nothing.
    pub(crate) fn show_device<M: Mode>(
        &self,
        client: ClientId,
        id: DeviceId,
    ) -> Result<Result<Response, Refusal>, M::Busy> {
        let (slot, pid, allowed) = {
            let book = self.book();
            let Some(slot) = book.devices.get(&id).cloned() else {
                return Ok(Err(Refusal::NoDevice(id)));
            };
            let owner = book.clients.get(&slot.owner);
            let pid = book.pid_of(slot.owner);
            let asker = book.clients.get(&client);
            let allowed = slot.owner == client
                || asker.is_some_and(|c| c.inspector || owner.is_some_and(|o| o.same_tenant(c)));
            let on_grant = asker
                .and_then(|c| c.grant.as_ref())
                .map(|g| g.id.to_string());
            (slot, pid, allowed.then_some(()).ok_or(on_grant))
        };
        if let Err(on_grant) = allowed {
            // A grant's connection is told no such device: another grant's are not its
            // business, not even to learn that they exist.
            return Ok(Err(match on_grant {
                Some(_) => Refusal::NoDevice(id),
                None => Refusal::NotAdmin,
            }));
        }
        let d = M::lock(&slot)?;
        Ok(Ok(Response::Device(Box::new(DeviceReport {
            info: info(pid, &d),
            facts: facts(&d),
            rings: d.rings(),
            images: u32::try_from(d.image_count()).unwrap_or(u32::MAX),
            regions: u32::try_from(d.region_count()).unwrap_or(u32::MAX),
            submitted: d.submitted(),
            reached: d.reached(),
            faults: d.faults().to_vec(),
        }))))
    }

    /// Loses `id` as stopped by the administrator, whoever owns it ([`crate::admin`]), and
    /// returns its owner's pid; an unknown or already lost device is refused.
    pub fn admin_stop(&self, id: DeviceId) -> Result<u32, Refusal> {
        let (slot, owner) = {
            let book = self.book();
            let Some(slot) = book.devices.get(&id).cloned() else {
                return Err(Refusal::NoDevice(id));
            };
            let owner = book.pid_of(slot.owner);
            (slot, owner)
        };
        let mut h = Held::waited(&slot);
        if let Some(why) = h.d.lost() {
            return Err(Refusal::AlreadyLost {
                device: id,
                why: why.clone(),
            });
        }
        h.d.lose(rig_proto::Fault::new(
            rig_proto::FaultKind::StoppedByAdministrator,
            String::new(),
        ));
        // The stop gave back its queues' threads and what it had quarantined.
        self.settle(&mut h);
        Ok(owner)
    }
}
