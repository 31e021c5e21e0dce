//! The control server: accepting connections, the handshake, peer credentials, and passing
//! each request to the state owner.
//!
//! One tokio task per connection reads a request, runs it through the state's
//! [`Handler`] under its lock ([`crate::state`]) and sends the answer back, one request at
//! a time (a connection's work is bounded by that, and by the frame cap
//! rig-proto enforces before it allocates). A `Semaphore` caps connections. Shutdown
//! follows mini-redis: a broadcast tells every handler to stop, and each handler holds an
//! `mpsc::Sender` clone, so the server knows all are done when the receiver sees none left.

use std::future::Future;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use rig_proto::messages::{ErrorCode, ErrorReply};
use rig_proto::{ServerConnection, reply_for};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, broadcast, mpsc as tmpsc};

use crate::config::{AccessRule, Peer};
use crate::state::{ClientId, Handler, Shared, lock};

/// How long a new connection has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server needs besides the listener.
#[derive(Debug, Clone)]
pub struct Server {
    /// The state requests change.
    pub state: Shared,
    /// Who may connect.
    pub access: Arc<AccessRule>,
    /// The most connections served at once.
    pub max_connections: usize,
}

/// Reads a peer's credentials: `SO_PEERCRED` and its supplementary groups from `/proc`.
pub fn peer_of(stream: &UnixStream) -> std::io::Result<Peer> {
    let cred = stream.peer_cred()?;
    let pid = cred.pid().unwrap_or(0);
    Ok(Peer {
        pid,
        uid: cred.uid(),
        gid: cred.gid(),
        groups: supplementary_groups(pid),
    })
}

fn supplementary_groups(pid: i32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Server {
    /// Serves `listener` until `shutdown` completes, then stops taking connections, tells
    /// every handler to finish and waits for them.
    pub async fn run(self, listener: UnixListener, shutdown: impl Future<Output = ()>) {
        let limit = Arc::new(Semaphore::new(self.max_connections));
        let (notify, _) = broadcast::channel::<()>(1);
        let (done_tx, mut done_rx) = tmpsc::channel::<()>(1);
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            };
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // EMFILE and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let server = self.clone();
            let mut stop = notify.subscribe();
            let done = done_tx.clone();
            tokio::spawn(async move {
                server.connection(stream, &mut stop).await;
                drop(permit);
                drop(done);
            });
        }
        tracing::info!("shutting down: no more connections, finishing the connected ones");
        let _ = notify.send(());
        drop(done_tx);
        let _ = done_rx.recv().await;
    }

    async fn connection(&self, stream: UnixStream, stop: &mut broadcast::Receiver<()>) {
        let peer = match peer_of(&stream) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a peer's credentials; dropping it");
                return;
            }
        };
        let mut conn = ServerConnection::new(stream);
        let hello = tokio::select! {
            h = tokio::time::timeout(HELLO_TIMEOUT, conn.read_hello()) => h,
            _ = stop.recv() => return,
        };
        let hello = match hello {
            Ok(Ok(Some(h))) => h,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::info!(pid = peer.pid, uid = peer.uid, error = %e, "handshake refused");
                return;
            }
            Err(_) => {
                tracing::info!(
                    pid = peer.pid,
                    uid = peer.uid,
                    "no hello within 5 s; dropping the connection"
                );
                return;
            }
        };
        if !self.access.allows(&peer) {
            tracing::warn!(pid = peer.pid, uid = peer.uid, gid = peer.gid, program = %hello.program, "peer not allowed by [access]; refused");
            let _ = conn
                .refuse(ErrorReply::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "user {} may not use rigd; ask the administrator to add it to rigd's group or [access] users",
                        peer.uid
                    ),
                ))
                .await;
            return;
        }
        if conn.welcome(DAEMON_NAME, std::process::id()).await.is_err() {
            return;
        }
        let program = hello.program.clone();
        let client = lock(&self.state).connect(peer.clone(), program.clone());
        tracing::info!(client = client.0, pid = peer.pid, uid = peer.uid, gid = peer.gid, program = %program, "client connected");
        self.serve(client, &mut conn, stop).await;
        lock(&self.state).disconnect(client);
    }

    async fn serve(
        &self,
        client: ClientId,
        conn: &mut ServerConnection,
        stop: &mut broadcast::Receiver<()>,
    ) {
        loop {
            let next = tokio::select! {
                r = conn.read_request() => r,
                _ = stop.recv() => return,
            };
            let (request, fds) = match next {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) if !e.is_fatal() => {
                    tracing::debug!(client = client.0, error = %e, "malformed request");
                    if conn.send(&reply_for(&e), &[]).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!(client = client.0, error = %e, "connection broken");
                    return;
                }
            };
            let (response, fds) = lock(&self.state).handle(client, request, fds);
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if let Err(e) = conn.send(&response, &borrowed).await {
                tracing::debug!(client = client.0, error = %e, "cannot send a reply");
                return;
            }
        }
    }
}

/// The daemon's name in the handshake.
pub const DAEMON_NAME: &str = concat!("rigd ", env!("CARGO_PKG_VERSION"));
