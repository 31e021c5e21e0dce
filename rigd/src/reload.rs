//! Reloading what can change while rigd serves (SIGHUP): `[access]` and `[limits]` here, the
//! log filter in [`crate::logging`]. Everything else (the socket, GPUs, connection caps and
//! timeouts) needs a restart, and a reload that changes it says so.
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
    pub(crate) running: Arc<Config>,
}

impl Reloader {
    /// Puts `new`'s `[access]` and `[limits]` in force. Returns one line per thing that
    /// changed, and per changed setting that needs a restart.
    pub fn apply(&self, new: &Config) -> Vec<String> {
        let mut said = Vec::new();
        let own = nix::unistd::geteuid().as_raw();
        if self.access.replace(AccessRule::new(&new.access, own)) {
            said.push(format!(
                "[access] users={:?} groups={:?} any={}",
                new.access.users, new.access.groups, new.access.any
            ));
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
        ];
        for (key, differs) in restart {
            if differs {
                said.push(format!("{key} changed but needs a restart to take effect"));
            }
        }
        said
    }
}
