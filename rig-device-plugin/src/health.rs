//! GPU health from rigd: a thread asks rigd for its GPUs (`ListGpus`, over rig-proto's
//! blocking [`Connection`]) every poll interval and publishes a [`Snapshot`] whenever it
//! changes. A GPU is healthy while rigd answers and lists it as served; it turns unhealthy
//! when rigd lists it as not served (its path failed, or rigd cannot drive it), stops
//! listing it, or does not answer at all (stopped, restarting, or stuck), and healthy again
//! once rigd serves it.

use std::path::PathBuf;
use std::time::Duration;

use rig_proto::{Connection, Request, Response};
use tokio::sync::watch;

use crate::resources::{GpuState, Snapshot};

/// How long one poll may wait for rigd before rigd counts as not answering.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The program name the plugin gives rigd (as `rigctl clients` shows it).
pub const PROGRAM: &str = "rig-device-plugin";

/// Starts polling rigd at `socket` every `interval`. The thread ends once every receiver
/// of the returned channel is dropped.
pub fn watch(socket: PathBuf, interval: Duration) -> watch::Receiver<Snapshot> {
    let (tx, rx) = watch::channel(Snapshot::new());
    std::thread::Builder::new()
        .name("rigd-health".into())
        .spawn(move || poll(&socket, interval, &tx))
        .expect("spawn the health thread");
    rx
}

fn poll(socket: &std::path::Path, interval: Duration, tx: &watch::Sender<Snapshot>) {
    let mut conn: Option<Connection> = None;
    while !tx.is_closed() {
        let listed = ask(socket, &mut conn);
        tx.send_if_modified(|snapshot| apply(snapshot, listed));
        std::thread::sleep(interval);
    }
}

/// rigd's GPUs, or why rigd did not say. Keeps the connection between polls and makes a
/// new one after any failure.
fn ask(
    socket: &std::path::Path,
    conn: &mut Option<Connection>,
) -> Result<Vec<rig_proto::GpuInfo>, String> {
    if conn.is_none() {
        // The stream's timeouts bound the hello too: a socket that accepts but whose rigd
        // never answers (stuck, or systemd's socket with rigd stopped) is "not answering".
        let stream = std::os::unix::net::UnixStream::connect(socket)
            .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
        stream
            .set_read_timeout(Some(ANSWER_WITHIN))
            .and_then(|()| stream.set_write_timeout(Some(ANSWER_WITHIN)))
            .map_err(|e| e.to_string())?;
        *conn = Some(Connection::handshake(stream, PROGRAM).map_err(|e| error_chain(&e))?);
    }
    let c = conn.as_mut().expect("connected above");
    match c.call(&Request::ListGpus, &[]) {
        Ok((Response::Gpus(gpus), _)) => Ok(gpus),
        Ok((Response::Error(e), _)) => {
            *conn = None;
            Err(format!("rigd refused ListGpus: {}", e.message))
        }
        Ok((other, _)) => {
            *conn = None;
            Err(format!("rigd answered ListGpus with {other:?}"))
        }
        Err(e) => {
            *conn = None;
            Err(error_chain(&e))
        }
    }
}

/// Folds one poll's result into the snapshot; true when anything changed. Logs each GPU
/// that turns healthy or unhealthy.
pub fn apply(snapshot: &mut Snapshot, listed: Result<Vec<rig_proto::GpuInfo>, String>) -> bool {
    let before = snapshot.clone();
    match listed {
        Ok(gpus) => {
            let listed: std::collections::BTreeSet<u32> = gpus.iter().map(|g| g.index).collect();
            for g in gpus {
                snapshot.insert(
                    g.index,
                    GpuState {
                        name: g.name,
                        arch: g.arch,
                        budget: g.budget,
                        unhealthy: g
                            .unavailable
                            .map(|why| format!("rigd does not serve it: {why}")),
                    },
                );
            }
            for (index, gpu) in snapshot.iter_mut() {
                if !listed.contains(index) {
                    gpu.unhealthy = Some("rigd no longer lists it".into());
                }
            }
        }
        Err(why) => {
            for gpu in snapshot.values_mut() {
                gpu.unhealthy = Some(format!("rigd does not answer: {why}"));
            }
        }
    }
    for (index, gpu) in snapshot.iter() {
        let was = before.get(index).map(|g| g.unhealthy.is_none());
        let is = gpu.unhealthy.is_none();
        match (was, is) {
            (Some(true), true) | (Some(false), false) => {}
            (_, true) => {
                tracing::info!(gpu = index, name = %gpu.name, bytes = gpu.budget, "GPU healthy")
            }
            (_, false) => tracing::warn!(
                gpu = index,
                name = %gpu.name,
                why = gpu.unhealthy.as_deref().unwrap_or(""),
                "GPU unhealthy"
            ),
        }
    }
    *snapshot != before
}

/// An error and its sources, one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(index: u32, unavailable: Option<&str>) -> rig_proto::GpuInfo {
        rig_proto::GpuInfo {
            index,
            name: format!("AMD:{index}"),
            arch: "gfx1100".into(),
            path: rig_proto::PathKind::Sim,
            bus: None,
            budget: 1 << 30,
            simulated: true,
            unavailable: unavailable.map(Into::into),
        }
    }

    #[test]
    fn gpus_turn_unhealthy_and_back_and_are_never_forgotten() {
        let mut s = Snapshot::new();
        assert!(apply(&mut s, Ok(vec![info(0, None), info(1, None)])));
        assert!(!apply(&mut s, Ok(vec![info(0, None), info(1, None)])));
        assert!(apply(&mut s, Err("connection refused".into())));
        assert!(s.values().all(|g| g.unhealthy.is_some()));
        assert!(apply(
            &mut s,
            Ok(vec![info(0, None), info(1, Some("kfd failed"))])
        ));
        assert!(s[&0].unhealthy.is_none());
        assert!(s[&1].unhealthy.as_deref().unwrap().contains("kfd failed"));
        assert!(apply(&mut s, Ok(vec![info(0, None)])));
        assert_eq!(s.len(), 2);
        assert!(s[&1].unhealthy.is_some());
    }
}
