//! What administrators ask of rigd beyond inspection: its status, GPU usage, processes,
//! and stopping a device or evicting a process.
//!
//! Only peers allowed to inspect (root, rigd's user, members of `daemon.group`) may ask;
//! the answers are built from the state and the sampler's view ([`crate::metrics`]).

/// The reason a device stopped by an administrator is lost with; its client reads it.
pub const STOPPED_BY_ADMIN: &str = "stopped by the administrator";
