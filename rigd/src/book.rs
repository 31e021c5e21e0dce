//! The book: who is connected, what each user (uid), each grant and all clients together
//! hold, and the limits those holdings are admitted against.
//!
//! Limits hold per user across all its connections, and for all clients together
//! ([`Budget`]); a connection on a grant's socket ([`crate::grant`]) is held besides by the
//! grant's share, with every other connection on that socket (`GrantBook`). A request
//! that makes something reserves what it may cost, checked and charged in one hold of the
//! book (`State::reserve`), so two requests of one user on two
//! devices cannot both pass a check that only one of them fits; once done, the device's
//! charges are brought to its [`Footprint`] and the reservation dropped, again in one hold
//! (`State::settle`). The book is held briefly: never while a path works or a device's
//! lock is awaited (lock order: a device, then the book).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, MutexGuard};

use rig_proto::messages::{DeviceId, Shortage};

use crate::config::{Limits, Peer};
use crate::device::Footprint;
use crate::refusal::{Quota, Refusal};
use crate::state::{ClientId, State};
use crate::table::{Held, Slot};
use crate::watch::Msg;

/// A connected client.
#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) peer: Peer,
    /// Shared, not copied, by every look at the book ([`State::observe`]).
    pub(crate) program: Arc<str>,
    pub(crate) devices: BTreeSet<DeviceId>,
    /// Whether it ever opened a device (its leaving is logged at info then).
    pub(crate) opened: bool,
    pub(crate) inspector: bool,
    /// What this connection's devices hold (running total).
    pub(crate) held: Footprint,
    /// The grant whose socket it connected on; `None` on rigd's own socket.
    pub(crate) grant: Option<crate::grant::GrantOf>,
    /// Its pod and container, as its cgroup named them at connect ([`crate::pod`]).
    pub(crate) pod: Option<rig_proto::PodOf>,
}

/// What one grant may hold and holds, across the connections on its socket: admitted on
/// top of each connection's user's limits ([`State::reserve`]).
#[derive(Debug)]
pub(crate) struct GrantBook {
    /// Its id, for refusals.
    pub(crate) id: Arc<str>,
    /// The GPUs it may open devices on, each with the bytes of memory it may hold for
    /// devices there (as [`GrantBook::bytes`] counts them).
    pub(crate) gpus: BTreeMap<u32, u64>,
    /// The most devices its connections may hold open together.
    pub(crate) most_devices: u32,
    /// Devices they hold open, reservations included.
    pub(crate) devices: u32,
    /// Memory they hold for devices on each GPU, reservations included: every byte
    /// `limits.memory_bytes` counts (Device, Mapped and Pinned memory, host mappings,
    /// images, each device's rings and control pages), not the GPU's own memory alone, so
    /// that host memory is no way past the share.
    pub(crate) bytes: BTreeMap<u32, u64>,
    /// Its connections in the book.
    pub(crate) connections: u32,
    /// False once revoked: the entry goes with its last connection.
    pub(crate) live: bool,
}

impl Client {
    /// Whether `other` counts as the same tenant: of the same user, on the same socket
    /// (rigd's own, or one grant's).
    pub(crate) fn same_tenant(&self, other: &Client) -> bool {
        self.peer.uid == other.peer.uid
            && self.grant.as_ref().map(|g| g.key) == other.grant.as_ref().map(|g| g.key)
    }
}

/// Whose holdings the per-user limits count together: a uid, and the grant whose socket
/// its connections came on (`None`: rigd's own socket). The connections of one uid on
/// two grants' sockets are two tenants, so that pods running as one uid (root, as most
/// do) each get the user's limits, as they each get their grant's share, and none can
/// take another's (or the host user's) room under them.
pub(crate) type TenantKey = (u32, Option<u64>);

/// What one user (uid) holds across all its connections: the limits count these.
#[derive(Debug, Default)]
pub(crate) struct Tenant {
    pub(crate) devices: u32,
    pub(crate) held: Footprint,
    /// Device and Mapped memory it holds, by GPU.
    pub(crate) gpu_bytes: BTreeMap<u32, u64>,
}

/// The limits as they apply while rigd runs: the configured ones with the sized defaults
/// filled in from the process's limits and the machine's memory.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Host memory rigd makes for all clients together.
    pub host_bytes: u64,
    /// Descriptors rigd may hold for one user.
    pub uid_fds: u64,
    /// Mappings rigd may hold for one user.
    pub uid_maps: u64,
    /// Descriptors rigd may hold for all clients: `RLIMIT_NOFILE` less what it keeps.
    pub fds: u64,
    /// Mappings rigd may hold for all clients: `vm.max_map_count` less what it keeps.
    pub maps: u64,
    /// rigd's `RLIMIT_NOFILE` (soft, as raised at start).
    pub nofile: u64,
    /// The system's `vm.max_map_count`.
    pub max_map_count: u64,
}

impl Budget {
    /// Sizes the limits from `limits` and the process's limits as they are now.
    pub fn new(limits: &Limits) -> Budget {
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(65530);
        let host_total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(8 << 30, |kib| kib.saturating_mul(1024));
        Self::sized(limits, nofile, max_map_count, host_total)
    }

    /// Sizes the limits for a process with these limits on a machine of `host_total` bytes.
    pub fn sized(limits: &Limits, nofile: u64, max_map_count: u64, host_total: u64) -> Budget {
        // Kept for connections, passed descriptors in flight, logs and libraries.
        let fds = nofile.saturating_sub(FD_RESERVE + nofile / 16);
        // Kept for libraries, heaps, the runtime's threads and the simulators' VRAM.
        let maps = max_map_count.saturating_sub(MAP_RESERVE + max_map_count / 16);
        let or = |configured: u64, sized: u64| if configured == 0 { sized } else { configured };
        Budget {
            host_bytes: or(limits.host_memory_bytes, host_total / 2),
            uid_fds: or(u64::from(limits.fds), fds / 4),
            uid_maps: or(u64::from(limits.mappings), maps / 4),
            fds,
            maps,
            nofile,
            max_map_count,
        }
    }
}

/// Descriptors rigd keeps for itself beyond `RLIMIT_NOFILE / 16`.
const FD_RESERVE: u64 = 512;
/// Mappings rigd keeps for itself beyond `vm.max_map_count / 16`.
const MAP_RESERVE: u64 = 1024;

/// The global part of the state, under [`State`]'s one small lock.
#[derive(Debug)]
pub(crate) struct Book {
    /// The limits in force (SIGHUP replaces them: [`State::set_limits`]) and as sized.
    pub(crate) limits: Limits,
    pub(crate) budget: Budget,
    pub(crate) clients: BTreeMap<ClientId, Client>,
    /// What each user holds, across its connections, reservations included: a user's
    /// connections on each grant's socket apart from its others ([`TenantKey`]).
    pub(crate) tenants: BTreeMap<TenantKey, Tenant>,
    /// What all clients hold, reservations included.
    pub(crate) total: Footprint,
    /// The device table: every open device, by id.
    pub(crate) devices: BTreeMap<DeviceId, Arc<Slot>>,
    /// What each grant may hold and holds, by its key ([`crate::grant::GrantOf::key`]).
    pub(crate) grants: BTreeMap<u64, GrantBook>,
    /// Set once rigd is shutting down ([`State::lose_all_at_shutdown`]): a device that
    /// enters the table from then on is lost as it enters.
    pub(crate) stopping: bool,
}

impl Book {
    /// An empty book under `limits`.
    pub(crate) fn new(limits: Limits, budget: Budget) -> Book {
        Book {
            limits,
            budget,
            clients: BTreeMap::new(),
            tenants: BTreeMap::new(),
            total: Footprint::default(),
            devices: BTreeMap::new(),
            grants: BTreeMap::new(),
            stopping: false,
        }
    }

    /// Moves the charges of a device of `owner` (of user `uid`, on grant `grant`'s socket)
    /// on `gpu` from `was` to `now`. The user and the grant are charged even once the
    /// connection is gone (its devices are given back after it leaves the book).
    pub(crate) fn apply(
        &mut self,
        owner: ClientId,
        uid: u32,
        grant: Option<u64>,
        gpu: u32,
        was: Footprint,
        now: Footprint,
    ) {
        self.total = self.total.minus(was).plus(now);
        if let Some(c) = self.clients.get_mut(&owner) {
            c.held = c.held.minus(was).plus(now);
        }
        let t = self.tenants.entry((uid, grant)).or_default();
        t.held = t.held.minus(was).plus(now);
        let g = t.gpu_bytes.entry(gpu).or_default();
        *g = g
            .saturating_sub(was.gpu_bytes)
            .saturating_add(now.gpu_bytes);
        if let Some(g) = grant.and_then(|k| self.grants.get_mut(&k)) {
            let b = g.bytes.entry(gpu).or_default();
            *b = b.saturating_sub(was.bytes).saturating_add(now.bytes);
        }
    }

    /// The key of the grant `client` connected on, if any.
    pub(crate) fn grant_of(&self, client: ClientId) -> Option<u64> {
        self.clients
            .get(&client)
            .and_then(|c| c.grant.as_ref())
            .map(|g| g.key)
    }

    /// Counts a device more (`true`) or less for user `uid` and grant `grant`.
    pub(crate) fn count_device(&mut self, uid: u32, grant: Option<u64>, more: bool) {
        let step = |n: &mut u32| {
            *n = if more {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            }
        };
        step(&mut self.tenants.entry((uid, grant)).or_default().devices);
        if let Some(g) = grant.and_then(|k| self.grants.get_mut(&k)) {
            step(&mut g.devices);
        }
    }

    /// The device `id` if `client` owns it.
    pub(crate) fn owned(&self, client: ClientId, id: DeviceId) -> Result<Arc<Slot>, Refusal> {
        match self.devices.get(&id) {
            Some(s) if s.owner == client => Ok(s.clone()),
            _ => Err(Refusal::NotYourDevice(id)),
        }
    }

    /// The user of `client`; `u32::MAX` for one not in the book.
    pub(crate) fn uid_of(&self, client: ClientId) -> u32 {
        self.clients.get(&client).map_or(u32::MAX, |c| c.peer.uid)
    }

    /// The pid of `client`'s process; 0 for one not in the book.
    /// The credentials `client` connected with, while it is connected.
    pub(crate) fn peer_of(&self, client: ClientId) -> Option<crate::config::Peer> {
        self.clients.get(&client).map(|c| c.peer.clone())
    }

    pub(crate) fn pid_of(&self, client: ClientId) -> u32 {
        self.clients
            .get(&client)
            .map_or(0, |c| u32::try_from(c.peer.pid).unwrap_or(0))
    }
}

impl State {
    /// The book, held briefly: never while a path works or a device's lock is awaited.
    pub(crate) fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The limits in force, as sized.
    pub fn budget(&self) -> Budget {
        self.book().budget
    }

    /// Puts reloaded `[limits]` in force (SIGHUP): later requests are admitted against them;
    /// what clients already hold stays. Says whether they changed.
    pub fn set_limits(&self, limits: Limits) -> bool {
        let mut book = self.book();
        let changed = limits != book.limits;
        book.budget = Budget::new(&limits);
        book.limits = limits;
        changed
    }

    /// Reserves `need` (and a device more, if `device`) for `client` on `gpu`: checked
    /// against the limits and charged in one hold of the book, so no other request can
    /// pass the same check on the same room. Else the refusal naming the limit.
    pub(crate) fn reserve(
        &self,
        client: ClientId,
        gpu: u32,
        need: Footprint,
        device: bool,
    ) -> Result<(), Refusal> {
        let mut book = self.book();
        let uid = book.uid_of(client);
        let grant = book.grant_of(client);
        if let Err(r) = self.admit(&book, client, gpu, need, device) {
            return Err(r.naming_queues(need, uid));
        }
        if device {
            book.count_device(uid, grant, true);
        }
        book.apply(client, uid, grant, gpu, Footprint::default(), need);
        Ok(())
    }

    /// Reserves `need` for the request holding `h` (see [`State::reserve`]). A refusal
    /// first runs rigd's round of reclamation ([`State::reclaim`]) and asks once more if it
    /// gave anything back.
    pub(crate) fn reserve_for(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        need: Footprint,
    ) -> Result<(), Refusal> {
        match self.reserve(client, h.slot.gpu, need, false) {
            Err(_) if self.reclaim(h) => self.reserve(client, h.slot.gpu, need, false)?,
            r => r?,
        }
        h.reserved = h.reserved.plus(need);
        Ok(())
    }

    /// rigd's round of reclamation for the device `h` holds: gives back its quarantined
    /// memory that no work can touch any more (the watch thread would at its next tick) and
    /// charges its user for what it holds now. Says whether anything went back; what the
    /// request reserved so far stays reserved.
    pub(crate) fn reclaim(&self, h: &mut Held<'_>) -> bool {
        if !h.d.reclaim() {
            return false;
        }
        let (was, now) = h.d.recharge();
        let s = h.slot;
        self.book().apply(s.owner, s.uid, s.grant, s.gpu, was, now);
        true
    }

    /// Reserves `bytes` more bytes of Device memory and one more object on the GPU of the
    /// device `h` holds.
    pub(crate) fn reserve_memory(
        &self,
        client: ClientId,
        h: &mut Held<'_>,
        bytes: u64,
    ) -> Result<(), Refusal> {
        let need = Footprint {
            bytes,
            objects: 1,
            gpu_bytes: bytes,
            ..Footprint::default()
        };
        self.reserve_for(client, h, need)
    }

    /// Brings the charges of the device `h` holds up to what it holds now, and drops what
    /// the request reserved, in one hold of the book. Wakes the watch thread if the request
    /// put memory in quarantine, so its release comes within a busy tick.
    pub(crate) fn settle(&self, h: &mut Held<'_>) {
        let (was, now) = h.d.recharge();
        let reserved = std::mem::take(&mut h.reserved);
        if was != now || reserved != Footprint::default() {
            let s = h.slot;
            self.book()
                .apply(s.owner, s.uid, s.grant, s.gpu, was.plus(reserved), now);
        }
        if h.d.quarantined() > h.quarantined {
            let _ = self.faults.send(Msg::Wake);
        }
    }

    /// `Ok` if `client` may take `need` more (and a device more, if `device`) on `gpu`;
    /// else the refusal naming the limit.
    fn admit(
        &self,
        book: &Book,
        client: ClientId,
        gpu: u32,
        need: Footprint,
        device: bool,
    ) -> Result<(), Refusal> {
        let uid = book.uid_of(client);
        let none = Tenant::default();
        let t = book
            .tenants
            .get(&(uid, book.grant_of(client)))
            .unwrap_or(&none);
        let total = &book.total;
        let l = &book.limits;
        let b = &book.budget;
        let refuse = |q: Quota| {
            tracing::info!(uid, client = client.0, "client refused for a limit: {q}");
            Err(Refusal::Quota(q))
        };
        if let Some(key) = book.grant_of(client) {
            match book.grants.get(&key) {
                Some(g) if g.live => admit_grant(g, uid, client, gpu, need, device)?,
                // Revoked while the connection was being closed: it holds nothing more.
                _ => return Err(crate::grant::GrantRefusal::Revoked.into()),
            }
        }
        if device && t.devices >= l.devices {
            return refuse(Quota::Devices {
                uid,
                open: t.devices,
                most: l.devices,
            });
        }
        if need.objects > 0 && t.held.objects.saturating_add(need.objects) > u64::from(l.objects) {
            return refuse(Quota::Objects {
                uid,
                held: t.held.objects,
                most: l.objects,
            });
        }
        if need.fds > 0 && t.held.fds.saturating_add(need.fds) > b.uid_fds {
            return refuse(Quota::Fds {
                uid,
                held: t.held.fds,
                need: need.fds,
                most: b.uid_fds,
            });
        }
        if need.fds > 0 && total.fds.saturating_add(need.fds) > b.fds {
            return refuse(Quota::AllFds {
                held: total.fds,
                nofile: b.nofile,
                most: b.fds,
            });
        }
        if need.maps > 0 && t.held.maps.saturating_add(need.maps) > b.uid_maps {
            return refuse(Quota::Maps {
                uid,
                held: t.held.maps,
                need: need.maps,
                most: b.uid_maps,
            });
        }
        if need.maps > 0 && total.maps.saturating_add(need.maps) > b.maps {
            return refuse(Quota::AllMaps {
                held: total.maps,
                max_map_count: b.max_map_count,
                most: b.maps,
            });
        }
        let short = |limit: &str, value: u64, held: u64, shortage: Shortage| {
            let missing = held.saturating_add(need.bytes).saturating_sub(value);
            tracing::info!(
                uid,
                client = client.0,
                asked = need.bytes,
                missing,
                limit,
                value,
                "client refused memory for a limit"
            );
            Err(Refusal::NoMemory {
                bytes: need.bytes,
                shortage,
                limit: Some(rig_proto::Limit {
                    name: limit.to_owned(),
                    value,
                    missing,
                }),
            })
        };
        if t.held.bytes.saturating_add(need.bytes) > l.memory_bytes {
            return short(
                "limits.memory_bytes",
                l.memory_bytes,
                t.held.bytes,
                Shortage::Quota,
            );
        }
        // At 100 percent the GPU's own memory is the bound, and the GPU refuses.
        if need.gpu_bytes > 0 && l.gpu_share_percent < 100 {
            let g = gpu;
            let budget = self.gpus.get(g as usize).map_or(0, |e| e.info.budget);
            let share = budget / 100 * u64::from(l.gpu_share_percent)
                + budget % 100 * u64::from(l.gpu_share_percent) / 100;
            let held = t.gpu_bytes.get(&g).copied().unwrap_or(0);
            if held.saturating_add(need.gpu_bytes) > share {
                return short("limits.gpu_share_percent", share, held, Shortage::Quota);
            }
        }
        if need.host_bytes > 0 && total.host_bytes.saturating_add(need.host_bytes) > b.host_bytes {
            return short(
                "limits.host_memory_bytes",
                b.host_bytes,
                total.host_bytes,
                Shortage::Host,
            );
        }
        Ok(())
    }
}

/// `Ok` if grant `g` holds room for `need` (and a device more, if `device`) on `gpu`; else
/// the refusal naming the grant and its limit.
fn admit_grant(
    g: &GrantBook,
    uid: u32,
    client: ClientId,
    gpu: u32,
    need: Footprint,
    device: bool,
) -> Result<(), Refusal> {
    use crate::grant::GrantRefusal;
    let refuse = |r: GrantRefusal| {
        tracing::info!(uid, client = client.0, "client refused for its grant: {r}");
        Err(Refusal::Grant(r))
    };
    let Some(&most) = g.gpus.get(&gpu) else {
        return refuse(GrantRefusal::Gpu {
            grant: g.id.to_string(),
            gpu,
            granted: g.gpus.keys().copied().collect(),
        });
    };
    if device && g.devices >= g.most_devices {
        return refuse(GrantRefusal::Devices {
            grant: g.id.to_string(),
            open: g.devices,
            most: g.most_devices,
        });
    }
    let held = g.bytes.get(&gpu).copied().unwrap_or(0);
    if need.bytes > 0 && held.saturating_add(need.bytes) > most {
        let missing = held.saturating_add(need.bytes).saturating_sub(most);
        tracing::info!(
            uid,
            client = client.0,
            grant = %g.id,
            gpu,
            asked = need.bytes,
            missing,
            "client refused memory for its grant"
        );
        return Err(Refusal::NoMemory {
            bytes: need.bytes,
            shortage: Shortage::Quota,
            limit: Some(rig_proto::Limit {
                name: crate::grant::memory_limit_name(&g.id, gpu),
                value: most,
                missing,
            }),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_sized_from_the_process_limits() {
        let b = Budget::sized(&Limits::default(), 1024, 65530, 16 << 30);
        assert_eq!(b.fds, 1024 - 512 - 64);
        assert_eq!(b.uid_fds, b.fds / 4);
        assert_eq!(b.maps, 65530 - 1024 - 4095);
        assert_eq!(b.uid_maps, b.maps / 4);
        assert_eq!(b.host_bytes, 8 << 30);
        let set = Limits {
            fds: 10,
            mappings: 20,
            host_memory_bytes: 30,
            ..Limits::default()
        };
        let b = Budget::sized(&set, 1024, 65530, 16 << 30);
        assert_eq!((b.uid_fds, b.uid_maps, b.host_bytes), (10, 20, 30));
    }
}
