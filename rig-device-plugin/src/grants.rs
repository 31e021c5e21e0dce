//! The plugin's grants in rigd: each allocation's credential ([`rig_proto::Request::Grant`],
//! a socket of rigd's own whose every connection holds the allocation's share), asked at
//! Allocate, and the [`Ledger`] of those the plugin holds.
//!
//! rigd keeps its grants as long as it runs; the plugin keeps the ledger as long as it runs.
//! Each makes the other whole after a restart ([`crate::reclaim`]): a grant rigd lists and
//! the ledger lacks (the plugin restarted) is taken into the ledger, and a grant the ledger
//! holds and rigd lacks (rigd restarted) is asked of rigd again under its id, so the socket
//! comes back in the directory the container has mounted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rig_proto::{Connection, GrantInfo, GrantSpec, Request, Response};

/// The file name of a grant's socket, as rigd names it.
pub const SOCKET_NAME: &str = "rigd.sock";

/// How long one call to rigd may wait.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Why rigd did not do what the plugin asked of its grants.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// rigd could not be reached.
    #[error("cannot reach rigd at {path}")]
    Connect {
        /// rigd's socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed.
    #[error("rigd's connection failed")]
    Protocol(#[from] rig_proto::Error),
    /// rigd refused.
    #[error("rigd refused {request}: {message}")]
    Refused {
        /// The request.
        request: &'static str,
        /// rigd's message.
        message: String,
    },
    /// rigd answered something else.
    #[error("rigd answered {request} with {answer}")]
    Unexpected {
        /// The request.
        request: &'static str,
        /// What it answered.
        answer: String,
    },
}

/// One call to rigd at `socket`, on a connection of its own, bounded in time.
fn call(socket: &Path, request: &Request) -> Result<Response, GrantError> {
    let stream =
        std::os::unix::net::UnixStream::connect(socket).map_err(|source| GrantError::Connect {
            path: socket.to_owned(),
            source,
        })?;
    let bound = |source| GrantError::Connect {
        path: socket.to_owned(),
        source,
    };
    stream
        .set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(bound)?;
    stream
        .set_write_timeout(Some(ANSWER_WITHIN))
        .map_err(bound)?;
    let mut conn = Connection::handshake(stream, crate::health::PROGRAM)?;
    match conn.call(request, &[])?.0 {
        Response::Error(e) => Err(GrantError::Refused {
            request: request.name(),
            message: e.message,
        }),
        r => Ok(r),
    }
}

fn unexpected(request: &Request, r: &Response) -> GrantError {
    let mut answer = format!("{r:?}");
    answer.truncate(120);
    GrantError::Unexpected {
        request: request.name(),
        answer,
    }
}

/// Asks rigd for grant `spec`; the path of its socket on the host.
pub fn grant(socket: &Path, spec: &GrantSpec) -> Result<PathBuf, GrantError> {
    let request = Request::Grant(Box::new(spec.clone()));
    match call(socket, &request)? {
        Response::Granted { socket } => Ok(socket.into()),
        r => Err(unexpected(&request, &r)),
    }
}

/// Asks rigd to revoke grant `id`.
pub fn revoke(socket: &Path, id: &str) -> Result<(), GrantError> {
    let request = Request::Revoke { id: id.to_owned() };
    match call(socket, &request)? {
        Response::Done => Ok(()),
        r => Err(unexpected(&request, &r)),
    }
}

/// The grants rigd holds.
pub fn list(socket: &Path) -> Result<Vec<GrantInfo>, GrantError> {
    match call(socket, &Request::Grants)? {
        Response::Grants(g) => Ok(g),
        r => Err(unexpected(&Request::Grants, &r)),
    }
}

/// A grant the plugin holds: what it asked, and since when.
#[derive(Debug, Clone)]
pub struct Held {
    /// The grant as last asked of rigd.
    pub spec: GrantSpec,
    /// When it was made (for an adopted grant: as rigd's age says).
    pub made: Instant,
    /// Whether the kubelet has listed its devices for a container (then a later list
    /// without them means the container is gone).
    pub seen: bool,
}

/// The grants the plugin holds, by id, shared by the Allocate handlers and the reclaimer.
#[derive(Debug, Clone, Default)]
pub struct Ledger(Arc<Mutex<BTreeMap<String, Held>>>);

impl Ledger {
    /// The ledger, locked.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enters a grant made now.
    pub fn made(&self, spec: GrantSpec) {
        self.lock().insert(
            spec.id.clone(),
            Held {
                spec,
                made: Instant::now(),
                seen: false,
            },
        );
    }
}
