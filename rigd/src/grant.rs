//! Grants: a credential per allocation that a container cannot forge or widen.
//!
//! An administrator (the device plugin, at the kubelet's Allocate) asks rigd for a grant
//! ([`rig_proto::Request::Grant`]): an id, the GPUs it may open devices on with the bytes
//! of each GPU's memory it may hold, and how many devices. rigd binds a socket of its own
//! for it, `<grants dir>/<id>/rigd.sock` ([`socket_of`]; the grants directory is
//! [`DIR_NAME`] beside rigd's own socket), and every connection accepted on that socket
//! carries the grant: whatever uid the peer runs as, it opens devices only on the grant's
//! GPUs, and all connections on the socket together hold at most the grant's devices and
//! memory per GPU (the book's `GrantBook`), on top of (never wider than) the limits of
//! each connection's uid. The memory a share counts is all its devices hold on the GPU
//! (Pinned and other host memory too, as `limits.memory_bytes` counts it), so host memory
//! is no way past it; and a uid's connections on a grant's socket are a tenant of their
//! own under those limits (the book's `TenantKey`), so pods running as one uid (root)
//! take nothing from each other's room. Such a connection is never an administrator, root or not, and
//! sees no other grant's devices. The plugin mounts the grant's directory (never rigd's
//! own socket) into the container.
//!
//! Reaching the socket is the credential. rigd makes the grants directory mode 0700 (only
//! root on the host traverses it) and each grant's directory 0755 with its socket 0666: a
//! container reaches its grant's socket through the bind mount of that directory, whatever
//! its uid, and no host user but root reaches any.
//!
//! A grant lasts until it is revoked ([`rig_proto::Request::Revoke`]: its socket and
//! directory go, its connections' devices are lost, "the allocation was reclaimed", and
//! the connections are closed, which gives back all they held) or until rigd stops. At a
//! stop rigd removes the grants' sockets but leaves their directories, so that a container's
//! bind mount of one still names the directory where the plugin's next grant of the same id
//! (after rigd starts again) binds the socket anew.
//!
//! This module owns the grants' table, their ids and directories and their refusals; the
//! server ([`crate::server`]) accepts and serves their connections and the book admits
//! their requests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rig_proto::messages::{ErrorCode, GrantInfo, GrantSpec};

use crate::state::State;

/// The grants directory's name, beside rigd's own socket: `/run/rig/alloc`.
pub const DIR_NAME: &str = "alloc";

/// The file name of each grant's socket in its directory, as rigd's own socket is named.
pub const SOCKET_NAME: &str = "rigd.sock";

/// The grant a connection came on.
#[derive(Debug, Clone)]
pub struct GrantOf {
    /// The grant's key in the book: unique for the life of rigd, so a grant made again
    /// under an id revoked before is counted afresh.
    pub key: u64,
    /// Its id.
    pub id: Arc<str>,
}

/// Why a grant refuses a request of one of its connections, or a grant request is refused.
#[derive(Debug, thiserror::Error)]
pub enum GrantRefusal {
    /// A GPU the grant does not include.
    #[error(
        "this connection holds grant {grant}, which may open devices on gpu {} only, not on gpu {gpu}; ask for the allocation you need in the pod's resources",
        list(.granted)
    )]
    Gpu {
        /// The grant.
        grant: String,
        /// The GPU asked.
        gpu: u32,
        /// The GPUs it may open devices on.
        granted: Vec<u32>,
    },
    /// The grant's connections hold as many devices as it allows.
    #[error(
        "grant {grant} holds {open} devices open across its connections, the most it allows ({most}); close one first"
    )]
    Devices {
        /// The grant.
        grant: String,
        /// Devices open.
        open: u32,
        /// The grant's most.
        most: u32,
    },
    /// An administrator's request on a grant's socket.
    #[error(
        "this connection holds grant {grant}: a grant's socket serves its own devices only, never an administrator's request, whatever the uid"
    )]
    NotAdmin {
        /// The grant.
        grant: String,
    },
    /// An id that cannot name a grant (nor its directory).
    #[error(
        "{id:?} cannot name a grant: {why}; use 1 to {} ASCII letters, digits, '.', '_' and '-', not starting with '.'",
        rig_proto::MOST_GRANT_ID
    )]
    BadId {
        /// The id asked.
        id: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A grant that names no GPU, a GPU twice, or no device.
    #[error("grant {grant}: {why}")]
    BadShare {
        /// The grant.
        grant: String,
        /// What is wrong with it.
        why: String,
    },
    /// A revoke of a grant rigd does not hold.
    #[error("rigd holds no grant {0}; `rigctl grants` lists those it holds")]
    NoGrant(String),
    /// rigd does not know where its grants' sockets go (it serves no socket path).
    #[error("rigd serves no socket path, so it has no grants directory beside it")]
    NoDirectory,
    /// The grant's directory or socket could not be made.
    #[error("cannot make grant {grant}'s socket {path}: {why}")]
    Socket {
        /// The grant.
        grant: String,
        /// The path.
        path: PathBuf,
        /// Why, with its causes.
        why: String,
    },
    /// The connection's grant was revoked; its connection is being closed.
    #[error(
        "this connection's grant was revoked (the allocation was reclaimed); it is being closed"
    )]
    Revoked,
    /// rigd is stopping and makes no more grants.
    #[error("{}: it makes no more grants", crate::watch::SHUTTING_DOWN)]
    ShuttingDown,
}

impl GrantRefusal {
    /// The protocol code it travels with.
    pub fn code(&self) -> ErrorCode {
        match self {
            GrantRefusal::Gpu { .. } | GrantRefusal::NotAdmin { .. } => ErrorCode::PermissionDenied,
            GrantRefusal::Devices { .. } => ErrorCode::Quota,
            GrantRefusal::BadId { .. } | GrantRefusal::BadShare { .. } => {
                ErrorCode::InvalidArgument
            }
            GrantRefusal::NoGrant(_) => ErrorCode::InvalidArgument,
            GrantRefusal::NoDirectory | GrantRefusal::Socket { .. } => ErrorCode::Internal,
            GrantRefusal::ShuttingDown | GrantRefusal::Revoked => ErrorCode::Stopped,
        }
    }
}

/// `e` and its causes, one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        next = cause.source();
    }
    s
}

fn list(gpus: &[u32]) -> String {
    if gpus.is_empty() {
        return "(none)".into();
    }
    gpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The name a memory refusal of grant `id` on `gpu` gives its limit ([`rig_proto::Limit`]).
pub fn memory_limit_name(id: &str, gpu: u32) -> String {
    format!("grant {id} memory on gpu {gpu}")
}

/// `Ok` if `id` can name a grant and its directory.
pub fn check_id(id: &str) -> Result<(), GrantRefusal> {
    let bad = |why| {
        Err(GrantRefusal::BadId {
            id: rig_proto::cut(id, rig_proto::MOST_GRANT_ID).to_owned(),
            why,
        })
    };
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > rig_proto::MOST_GRANT_ID {
        return bad("it is too long");
    }
    if id.starts_with('.') {
        return bad("it starts with '.'");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("it holds a character other than a letter, a digit, '.', '_' or '-'");
    }
    Ok(())
}

/// The socket of grant `id` in grants directory `dir`.
pub fn socket_of(dir: &Path, id: &str) -> PathBuf {
    dir.join(id).join(SOCKET_NAME)
}

/// A grant rigd serves.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) key: u64,
    pub(crate) spec: GrantSpec,
    pub(crate) socket: PathBuf,
    pub(crate) made: Instant,
    /// Raised at its revocation: its accept loop and connections end.
    pub(crate) revoked: tokio::sync::watch::Sender<bool>,
    /// Its accept loop, which removes its socket and directory as it ends.
    pub(crate) accept: tokio::task::JoinHandle<()>,
}

/// The grants rigd serves, by id, and where their sockets go.
#[derive(Debug, Default)]
pub struct Grants {
    /// The grants directory, once rigd serves a socket path ([`Grants::serving_beside`]).
    dir: Mutex<Option<PathBuf>>,
    pub(crate) table: Mutex<BTreeMap<String, Live>>,
    next: std::sync::atomic::AtomicU64,
}

impl Grants {
    /// Puts the grants directory beside `socket`, rigd's own socket.
    pub fn serving_beside(&self, socket: &Path) {
        let dir = socket.parent().map(|p| p.join(DIR_NAME));
        *self.dir.lock().unwrap_or_else(|e| e.into_inner()) = dir;
    }

    /// The grants directory, if rigd serves a socket path.
    pub fn dir(&self) -> Option<PathBuf> {
        self.dir.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Live>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new key for a grant's book entry.
    pub(crate) fn new_key(&self) -> u64 {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Makes the grants directory (0700) and grant `id`'s directory in it (0755), and
    /// returns the path of its socket.
    pub(crate) fn prepare(&self, id: &str) -> Result<PathBuf, GrantRefusal> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.dir().ok_or(GrantRefusal::NoDirectory)?;
        let socket = socket_of(&dir, id);
        let fail = |path: &Path, e: std::io::Error| GrantRefusal::Socket {
            grant: id.to_owned(),
            path: path.to_owned(),
            why: e.to_string(),
        };
        let own = dir.join(id);
        std::fs::create_dir_all(&own).map_err(|e| fail(&own, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| fail(&dir, e))?;
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail(&own, e))?;
        Ok(socket)
    }

    /// The grants, with what their connections hold now.
    pub(crate) fn list(&self, state: &State) -> Vec<GrantInfo> {
        let table = self.table();
        let book = state.book();
        table
            .values()
            .map(|g| {
                let held = book.grants.get(&g.key);
                GrantInfo {
                    spec: g.spec.clone(),
                    socket: g.socket.display().to_string(),
                    age_ms: u64::try_from(g.made.elapsed().as_millis()).unwrap_or(u64::MAX),
                    connections: held.map_or(0, |h| h.connections),
                    devices: held.map_or(0, |h| h.devices),
                    gpu_bytes: g
                        .spec
                        .gpus
                        .iter()
                        .map(|x| held.and_then(|h| h.bytes.get(&x.gpu).copied()).unwrap_or(0))
                        .collect(),
                }
            })
            .collect()
    }
}

/// `Ok` if `spec`'s share can be granted on rigd's `served` GPUs: at least one GPU, each
/// once and served, and at least one device.
pub(crate) fn check_share(spec: &GrantSpec, served: usize) -> Result<(), crate::refusal::Refusal> {
    let bad = |why: String| {
        Err(GrantRefusal::BadShare {
            grant: spec.id.clone(),
            why,
        }
        .into())
    };
    if spec.gpus.is_empty() {
        return bad("it names no gpu".into());
    }
    if spec.devices == 0 {
        return bad("it allows no device".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in &spec.gpus {
        if g.gpu as usize >= served {
            return Err(crate::refusal::Refusal::NoGpu { gpu: g.gpu, served });
        }
        if !seen.insert(g.gpu) {
            return bad(format!("it names gpu {} twice", g.gpu));
        }
    }
    Ok(())
}

impl State {
    /// Enters grant `key` (id `id`) in the book with `spec`'s share.
    pub(crate) fn enter_grant(&self, key: u64, spec: &GrantSpec) {
        self.book().grants.insert(
            key,
            crate::book::GrantBook {
                id: spec.id.as_str().into(),
                gpus: spec.gpus.iter().map(|g| (g.gpu, g.bytes)).collect(),
                most_devices: spec.devices,
                devices: 0,
                bytes: BTreeMap::new(),
                connections: 0,
                live: true,
            },
        );
    }

    /// Revokes grant `key`: every device of its connections is lost, "the allocation was
    /// reclaimed"; the entry goes once no connection is left (their teardown gives back
    /// what they hold). Returns the devices lost. Waits for the devices' locks.
    pub(crate) fn revoke_grant(&self, key: u64) -> Vec<rig_proto::DeviceId> {
        let (slots, id) = {
            let mut book = self.book();
            let Some(g) = book.grants.get_mut(&key) else {
                return Vec::new();
            };
            g.live = false;
            let id = g.id.clone();
            if g.connections == 0 {
                book.grants.remove(&key);
            }
            let slots: Vec<_> = book
                .devices
                .values()
                .filter(|s| s.grant == Some(key))
                .cloned()
                .collect();
            (slots, id)
        };
        let mut lost = Vec::new();
        for slot in slots {
            let mut h = crate::table::Held::waited(&slot);
            if h.d.lost().is_none() {
                h.d.lose(rig_proto::Fault::new(
                    rig_proto::FaultKind::StoppedByAdministrator,
                    format!("the allocation was reclaimed: grant {id} was revoked"),
                ));
                lost.push(h.d.id());
            }
            self.settle(&mut h);
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_directories_and_nothing_else() {
        for good in ["gpu0-m3-18f2a", "a", "A.b_c-9", &"x".repeat(64)] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "é",
            &"x".repeat(65),
            "a\0",
        ] {
            let e = check_id(bad).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn refusals_name_the_grant_and_its_limit() {
        let g = GrantRefusal::Gpu {
            grant: "g1".into(),
            gpu: 1,
            granted: vec![0],
        };
        let m = g.to_string();
        assert!(
            m.contains("grant g1") && m.contains("gpu 0 only") && m.contains("not on gpu 1"),
            "{m}"
        );
        assert_eq!(g.code(), ErrorCode::PermissionDenied);
        let d = GrantRefusal::Devices {
            grant: "g1".into(),
            open: 2,
            most: 2,
        };
        assert!(d.to_string().contains("the most it allows (2)"));
        assert_eq!(memory_limit_name("g1", 0), "grant g1 memory on gpu 0");
    }
}
