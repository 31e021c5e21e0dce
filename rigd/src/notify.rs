//! systemd's service-manager protocol (`Type=notify`): readiness, reloading, stopping and the
//! watchdog, sent with the `sd-notify` crate. Outside systemd (`$NOTIFY_SOCKET` unset) every
//! call does nothing.
//!
//! This module owns what rigd tells systemd; the serving loop decides when (see `main.rs`).

use std::io;
use std::path::Path;
use std::time::Duration;

use sd_notify::NotifyState;

/// Tells systemd rigd serves `socket` (the path of the listening socket rigd actually holds,
/// the one systemd passed when socket-activated), with `gpus` GPUs.
pub fn ready(socket: &Path, gpus: usize) -> io::Result<()> {
    let status = format!("serving {} GPU(s) on {}", gpus, socket.display());
    sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&status)])
}

/// Tells systemd rigd is reloading its configuration (SIGHUP).
pub fn reloading() -> io::Result<()> {
    let now = sd_notify::NotifyState::monotonic_usec_now()?;
    sd_notify::notify(&[NotifyState::Reloading, now])
}

/// Tells systemd a reload is over and what it changed.
pub fn reloaded(status: &str) -> io::Result<()> {
    sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)])
}

/// Tells systemd rigd is stopping.
pub fn stopping() -> io::Result<()> {
    sd_notify::notify(&[NotifyState::Stopping])
}

/// How often to ping the watchdog: half of `WatchdogSec=` (systemd's advice), or `None` when
/// systemd watches nothing for rigd.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| (d / 2).max(Duration::from_millis(1)))
}

/// Pings the watchdog (`WATCHDOG=1`): the serving loop is alive.
pub fn watchdog() -> io::Result<()> {
    sd_notify::notify(&[NotifyState::Watchdog])
}
