//! What administrators ask of rigd beyond the per-device inspection of [`crate::state`]:
//! its status, each GPU's figures, the client processes, and stopping a device or every
//! device of a process.
//!
//! Only administrators may ask: root, rigd's user and members of `daemon.admin_group`,
//! decided from the socket's credentials at connect. Being allowed to use GPUs
//! (`daemon.group`, `[access]`) never makes a user one.
//! The answers come from the state ([`crate::state::State::observe`]), the sampler's view
//! ([`crate::metrics`]) and sysfs (product and firmware of real GPUs). A stopped device is
//! lost with [`STOPPED_BY_ADMIN`] as its reason, which its client reads as it reads any
//! loss; the log names the administrator who stopped it (the connection's pid and uid as
//! its credentials say, and the uid's user name), and the loss counts under the reason
//! `administrator` ([`crate::metrics::LossReason`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rig_proto::messages::{DaemonStatus, DeviceId, GpuStatus, ProcessInfo, Request, Response};

use crate::metrics::Metrics;
use crate::refusal::Refusal;
use crate::state::{ClientId, Shared};

/// The reason a device stopped by an administrator is lost with; its client reads it.
pub const STOPPED_BY_ADMIN: &str = "stopped by the administrator";

/// What the administrators' requests read.
#[derive(Debug)]
pub struct Admin {
    pub(crate) state: Shared,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) sysfs: PathBuf,
    pub(crate) config: Option<PathBuf>,
    pub(crate) socket: Mutex<Option<PathBuf>>,
}

/// An administrator as the log names one: the connection's credentials, and the user name
/// of its uid (`-` where the system has none).
#[derive(Debug)]
struct Asker {
    pid: i32,
    uid: u32,
    user: String,
}

/// Reads a sysfs attribute of PCI function `bus`, trimmed.
fn pci_attr(sysfs: &std::path::Path, bus: &str, name: &str) -> Option<String> {
    let p = sysfs.join("bus/pci/devices").join(bus).join(name);
    Some(std::fs::read_to_string(p).ok()?.trim().to_owned())
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

impl Admin {
    /// Records the socket rigd serves (for `rigctl status`).
    pub fn serving(&self, socket: PathBuf) {
        *self.socket.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket);
    }

    /// Answers one administrator's request of `client` (one whose route says
    /// [`rig_proto::Route::admin`]).
    pub fn handle(&self, client: ClientId, request: Request) -> Response {
        self.answer(client, request).unwrap_or_else(Response::from)
    }

    fn answer(&self, client: ClientId, request: Request) -> Result<Response, Refusal> {
        self.may_administer(client, request.name())?;
        Ok(match request {
            Request::DaemonStatus => Response::Daemon(self.status()),
            Request::GpuStatus => Response::GpuStatus(self.gpus()),
            Request::ListProcesses => Response::Processes(self.processes()),
            Request::AdminStop { device } => self.stop(client, device)?,
            Request::Evict { pid } => self.evict(client, pid)?,
            // The server's: a grant's socket is served as rigd's own is.
            Request::Grant(_) | Request::Revoke { .. } | Request::Grants => {
                return Err(Refusal::AdminsRequest(request.name()));
            }
            other => return Err(Refusal::NotAdminsRequest(other.name())),
        })
    }

    /// `Ok` if `client` is an administrator; else the refusal, which names the grant of a
    /// connection on a grant's socket (never an administrator, whatever its uid).
    pub(crate) fn may_administer(&self, client: ClientId, request: &str) -> Result<(), Refusal> {
        if self.state.is_inspector(client) {
            return Ok(());
        }
        tracing::debug!(
            client = client.0,
            request,
            "administrator's request refused: not an administrator"
        );
        Err(self.state.not_admin(client))
    }

    fn status(&self) -> DaemonStatus {
        let o = self.state.observe();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        DaemonStatus {
            version: crate::server::DAEMON_NAME.into(),
            pid: std::process::id(),
            uptime_ms: u64::try_from(self.metrics.uptime().as_millis()).unwrap_or(u64::MAX),
            config: self.config.as_ref().map(|p| p.display().to_string()),
            socket: self
                .socket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|p| p.display().to_string()),
            gpus: count(o.gpus.len()),
            connections: count(o.clients.len()),
            devices: count(o.devices.len()),
        }
    }

    fn gpus(&self) -> Vec<GpuStatus> {
        let o = self.state.observe();
        let view = self.metrics.view();
        o.gpus
            .iter()
            .map(|g| {
                // Memory and devices as they are now; busy from the sampler's window.
                let busy = view.gpus.get(&g.index).map_or(0.0, |v| v.busy);
                let on: Vec<_> = o.devices.iter().filter(|d| d.gpu == g.index).collect();
                let mut pids: Vec<i32> = on.iter().map(|d| d.pid).collect();
                pids.sort_unstable();
                pids.dedup();
                let used_bytes: u64 = on.iter().map(|d| d.held.device + d.held.mapped).sum();
                let pci = g.bus.as_deref().and_then(|bus| {
                    let vendor = hex(&pci_attr(&self.sysfs, bus, "vendor")?)?;
                    let device = hex(&pci_attr(&self.sysfs, bus, "device")?)?;
                    let revision = pci_attr(&self.sysfs, bus, "revision")
                        .and_then(|r| hex(&r))
                        .unwrap_or(0);
                    Some((
                        u16::try_from(vendor).ok()?,
                        u16::try_from(device).ok()?,
                        u8::try_from(revision).ok()?,
                    ))
                });
                let product = if g.simulated {
                    Some(format!("simulated {}", g.arch))
                } else {
                    pci.and_then(|(_, d, r)| rig_amd::pci_ids::product(d, r))
                        .map(|p| p.name.to_owned())
                };
                // What discovery read (a KFD node's), else amdgpu's fw_version/ files of the
                // PCI function: mec_fw_version (the compute firmware) and sdma_fw_version.
                let firmware = g.firmware.clone().or_else(|| {
                    let bus = g.bus.as_deref()?;
                    let mec = pci_attr(&self.sysfs, bus, "fw_version/mec_fw_version")?;
                    Some(
                        match pci_attr(&self.sysfs, bus, "fw_version/sdma_fw_version") {
                            Some(sdma) => format!("mec {mec}, sdma {sdma}"),
                            None => format!("mec {mec}"),
                        },
                    )
                });
                GpuStatus {
                    index: g.index,
                    product,
                    pci_id: pci,
                    firmware,
                    client_cost: g.client_cost.map(|c| rig_proto::ClientCost {
                        queue_bytes: c.queue_bytes,
                        at_once: c.at_once,
                        queues_fit: c.queues_fit,
                    }),
                    total_bytes: g.total_bytes,
                    used_bytes,
                    devices: u32::try_from(on.len()).unwrap_or(u32::MAX),
                    clients: u32::try_from(pids.len()).unwrap_or(u32::MAX),
                    busy_permille: (busy.clamp(0.0, 1.0) * 1000.0).round() as u32,
                }
            })
            .collect()
    }

    fn processes(&self) -> Vec<ProcessInfo> {
        let o = self.state.observe();
        let mut by_pid: std::collections::BTreeMap<i32, ProcessInfo> = Default::default();
        for c in &o.clients {
            let p = by_pid.entry(c.pid).or_insert_with(|| ProcessInfo {
                pid: u32::try_from(c.pid).unwrap_or(0),
                uid: c.uid,
                program: crate::metrics::program_of(c.pid).unwrap_or_else(|| c.program.to_string()),
                hello: Vec::new(),
                connections: 0,
                devices: Vec::new(),
                bytes: 0,
                grant: c.grant.as_ref().map(|g| g.to_string()),
                pod: c.pod.clone(),
            });
            p.connections += 1;
            p.bytes += c.bytes;
            if !p.hello.iter().any(|h| **h == *c.program) {
                p.hello.push(c.program.to_string());
            }
        }
        for d in &o.devices {
            if let Some(p) = by_pid.get_mut(&d.pid) {
                p.devices.push(DeviceId(d.id));
            }
        }
        by_pid.into_values().collect()
    }

    /// Who asked: `client`'s credentials and user name. The connection asks while it is
    /// served, so it is still in the book.
    fn asker(&self, client: ClientId) -> Asker {
        let peer = self.state.book().peer_of(client);
        let (pid, uid) = peer.map_or((0, u32::MAX), |p| (p.pid, p.uid));
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or_else(|| "-".to_owned(), |u| u.name);
        Asker { pid, uid, user }
    }

    fn stop(&self, client: ClientId, device: DeviceId) -> Result<Response, Refusal> {
        let by = self.asker(client);
        let owner = self.state.admin_stop(device)?;
        tracing::warn!(
            device = device.0,
            owner_pid = owner,
            by_user = %by.user,
            by_uid = by.uid,
            by_pid = by.pid,
            cause = %crate::metrics::LossReason::Administrator,
            "device stopped by an administrator"
        );
        Ok(Response::Done)
    }

    fn evict(&self, client: ClientId, pid: u32) -> Result<Response, Refusal> {
        let by = self.asker(client);
        let st = &self.state;
        let ids = st.devices_of_pid(i32::try_from(pid).unwrap_or(-1));
        if ids.is_empty() {
            return Err(Refusal::NoProcess { pid });
        }
        let mut stopped = Vec::new();
        for id in ids {
            if st.admin_stop(id).is_ok() {
                stopped.push(id);
            }
        }
        let ids: Vec<String> = stopped.iter().map(|d| d.0.to_string()).collect();
        tracing::warn!(
            pid,
            devices = %ids.join(","),
            by_user = %by.user,
            by_uid = by.uid,
            by_pid = by.pid,
            cause = %crate::metrics::LossReason::Administrator,
            "process evicted by an administrator"
        );
        Ok(Response::Evicted { devices: stopped })
    }
}
