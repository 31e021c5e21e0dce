//! Reloading what can change while rigd serves (SIGHUP): `[access]`, `daemon.admin_group`
//! (both for connections accepted from then on), `[limits]` and `metrics.per_client` here,
//! the log filter in [`crate::logging`]. Everything else (the socket, GPUs, connection caps
//! and timeouts, where metrics listen) needs a restart, and a reload that changes it says so.
//!
//! A configuration that does not validate changes nothing: rigd goes on with the one in
//! force and logs why.

use std::sync::Arc;

use crate::config::{AccessRule, Config};
use crate::state::Shared;

/// What a reload touches, taken from a started [`crate::Daemon`].
#[derive(Debug, Clone)]
pub struct Reloader {
    pub(crate) access: Arc<AccessRule>,
    pub(crate) state: Shared,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) running: Arc<Config>,
}

impl Reloader {
    /// Puts `new`'s `[access]`, `daemon.admin_group`, `[limits]` and `metrics.per_client` in
    /// force. Returns one line per thing that changed, and per changed setting that needs a
    /// restart.
    pub fn apply(&self, new: &Config) -> Vec<String> {
        let mut said = Vec::new();
        let own = nix::unistd::geteuid().as_raw();
        if self.access.replace(AccessRule::new(&new.access, own)) {
            said.push(format!(
                "[access] users={:?} groups={:?} any={}",
                new.access.users, new.access.groups, new.access.any
            ));
        }
        // Validation resolved the group; a group removed since is nobody's.
        let admin_gid = new
            .daemon
            .admin_group
            .as_deref()
            .and_then(crate::config::resolve_group);
        if self.state.set_admin_gid(admin_gid) {
            said.push(format!(
                "daemon.admin_group={} (for connections from now on)",
                new.daemon.admin_group.as_deref().unwrap_or("none")
            ));
        }
        if self.metrics.set_per_client(new.metrics.per_client) {
            said.push(format!("metrics.per_client={}", new.metrics.per_client));
        }
        if self.state.set_limits(new.limits) {
            let l = &new.limits;
            said.push(format!(
                "[limits] memory_bytes={} devices={} objects={} gpu_share_percent={} host_memory_bytes={} fds={} mappings={}",
                l.memory_bytes,
                l.devices,
                l.objects,
                l.gpu_share_percent,
                l.host_memory_bytes,
                l.fds,
                l.mappings
            ));
        }
        let old = &self.running;
        let restart = [
            ("daemon.socket", old.daemon.socket != new.daemon.socket),
            ("daemon.group", old.daemon.group != new.daemon.group),
            ("daemon.mode", old.daemon.mode != new.daemon.mode),
            (
                "daemon.max_connections",
                old.daemon.max_connections != new.daemon.max_connections,
            ),
            ("[connections]", old.connections != new.connections),
            ("[images]", old.images != new.images),
            ("[[sim]]", old.sim != new.sim),
            ("[kfd]", old.kfd != new.kfd),
            ("[vfio]", old.vfio != new.vfio),
            ("metrics.listen", old.metrics.listen != new.metrics.listen),
            ("metrics.group", old.metrics.group != new.metrics.group),
            ("metrics.remote", old.metrics.remote != new.metrics.remote),
        ];
        for (key, differs) in restart {
            if differs {
                said.push(format!("{key} changed but needs a restart to take effect"));
            }
        }
        said
    }
}
