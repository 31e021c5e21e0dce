//! The plugin's life beside the kubelet: serve each resource on its own socket in the
//! kubelet's device-plugins directory, register it, and start over whenever the kubelet's
//! socket is re-created (a kubelet restart, which also deletes the plugins' sockets) or
//! one of the plugin's own sockets goes away.
//!
//! The directory is watched with inotify, so a restart is seen at once; the same checks
//! also run every [`RECHECK`], in case an event was missed (an overflowed queue, a
//! directory mounted anew).

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api;
use crate::api::device_plugin_server::DevicePluginServer;
use crate::api::registration_client::RegistrationClient;
use crate::grants::Ledger;
use crate::plugin::{self, Service};
use crate::resources::{Resource, Settings, Snapshot};
use crate::{Error, uds};

/// The kubelet's socket unless configured otherwise.
pub const DEFAULT_KUBELET_SOCKET: &str = "/var/lib/kubelet/device-plugins/kubelet.sock";

/// The device-plugin API version the plugin speaks.
pub const API_VERSION: &str = "v1beta1";

/// How often the sockets are checked besides inotify's events.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long to wait between attempts to register while the kubelet refuses or does not
/// answer.
const RETRY: Duration = Duration::from_millis(500);

/// How long one registration may take.
const REGISTER_WITHIN: Duration = Duration::from_secs(5);

/// How long a generation's servers may take to stop before they are aborted.
const STOP_WITHIN: Duration = Duration::from_secs(2);

/// A file's identity: a socket re-created at the same path is another file.
type FileId = (u64, u64);

fn file_id(path: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Serves and registers both resources until `shutdown` completes, against the kubelet
/// whose socket is `kubelet_socket`, answering from `gpus`, entering the grants Allocate
/// makes in `ledger`.
pub async fn run(
    kubelet_socket: &Path,
    settings: Arc<Settings>,
    gpus: watch::Receiver<Snapshot>,
    ledger: Ledger,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let dir = kubelet_socket.parent().unwrap_or(Path::new("/")).to_owned();
    std::fs::create_dir_all(&dir).map_err(|source| Error::Directory {
        path: dir.clone(),
        source,
    })?;
    let events = watch_dir(&dir)?;
    tokio::pin!(shutdown);
    let mut generation = 0u64;
    loop {
        // Wait for the kubelet.
        let kubelet = loop {
            if let Some(id) = file_id(kubelet_socket) {
                break id;
            }
            tracing::debug!(socket = %kubelet_socket.display(), "waiting for the kubelet's socket");
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = events.notified() => {}
                () = tokio::time::sleep(RECHECK) => {}
            }
        };
        generation += 1;
        let serving = Generation::start(&dir, &settings, &gpus, &ledger)?;
        let mut pending: Vec<Resource> = Resource::ALL.to_vec();
        let stopping = loop {
            let mut still = Vec::new();
            for resource in pending {
                match register(kubelet_socket, resource).await {
                    Ok(()) => tracing::info!(
                        resource = %resource,
                        endpoint = resource.socket_name(),
                        generation,
                        "registered with the kubelet"
                    ),
                    Err(e) => {
                        tracing::warn!(resource = %resource, error = %e, "registration failed; retrying");
                        still.push(resource);
                    }
                }
            }
            pending = still;
            if file_id(kubelet_socket) != Some(kubelet) {
                tracing::info!(
                    "the kubelet's socket was re-created (a kubelet restart): serving and registering again"
                );
                break false;
            }
            if let Some(gone) = serving.lost_socket() {
                tracing::info!(socket = %gone.display(), "the plugin's socket was removed: serving and registering again");
                break false;
            }
            let wait = if pending.is_empty() { RECHECK } else { RETRY };
            tokio::select! {
                () = &mut shutdown => break true,
                () = events.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        };
        serving.stop().await;
        if stopping {
            return Ok(());
        }
    }
}

/// Notified at inotify's events in `dir`: files made, removed or moved in or out. A
/// notification while nobody waits is kept for the next wait, so none is missed.
fn watch_dir(dir: &Path) -> Result<Arc<tokio::sync::Notify>, Error> {
    let err = |source| Error::Watch {
        path: dir.to_owned(),
        source,
    };
    let inotify = inotify::Inotify::init().map_err(err)?;
    let mask = inotify::WatchMask::CREATE
        | inotify::WatchMask::DELETE
        | inotify::WatchMask::MOVED_FROM
        | inotify::WatchMask::MOVED_TO
        | inotify::WatchMask::DELETE_SELF;
    inotify.watches().add(dir, mask).map_err(err)?;
    let mut stream = inotify.into_event_stream(vec![0u8; 4096]).map_err(err)?;
    let notify = Arc::new(tokio::sync::Notify::new());
    let wake = notify.clone();
    tokio::spawn(async move {
        // The stream ends or fails only with the inotify descriptor; RECHECK goes on.
        while let Some(Ok(event)) = stream.next().await {
            tracing::trace!(name = ?event.name, mask = ?event.mask, "device-plugins directory event");
            wake.notify_one();
        }
    });
    Ok(notify)
}

/// Says to the kubelet that `resource` is served on its socket.
async fn register(kubelet_socket: &Path, resource: Resource) -> Result<(), RegisterError> {
    tokio::time::timeout(REGISTER_WITHIN, register_once(kubelet_socket, resource))
        .await
        .map_err(|_| RegisterError::Timeout)?
}

async fn register_once(kubelet_socket: &Path, resource: Resource) -> Result<(), RegisterError> {
    let channel = uds::channel(kubelet_socket).await?;
    RegistrationClient::new(channel)
        .register(api::RegisterRequest {
            version: API_VERSION.into(),
            endpoint: resource.socket_name().into(),
            resource_name: resource.name().into(),
            options: Some(plugin::options()),
        })
        .await?;
    Ok(())
}

/// Why one registration failed (it is retried).
#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error("cannot reach the kubelet: {}", crate::health::error_chain(.0))]
    Connect(#[from] tonic::transport::Error),
    #[error("the kubelet refused: {}", .0.message())]
    Refused(#[from] tonic::Status),
    #[error("the kubelet did not answer within {REGISTER_WITHIN:?}")]
    Timeout,
}

/// The servers of both resources, from one registration to the next kubelet restart.
struct Generation {
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
    /// Each socket and the file it was bound as.
    sockets: Vec<(PathBuf, Option<FileId>)>,
}

impl Generation {
    fn start(
        dir: &Path,
        settings: &Arc<Settings>,
        gpus: &watch::Receiver<Snapshot>,
        ledger: &Ledger,
    ) -> Result<Generation, Error> {
        let (stop, stopped) = watch::channel(false);
        let mut generation = Generation {
            stop,
            servers: Vec::new(),
            sockets: Vec::new(),
        };
        for resource in Resource::ALL {
            let path = dir.join(resource.socket_name());
            // A socket left by an earlier plugin (or generation) is replaced.
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Bind { path, source }),
            }
            let listener = tokio::net::UnixListener::bind(&path).map_err(|source| Error::Bind {
                path: path.clone(),
                source,
            })?;
            let service = Service::new(
                resource,
                settings.clone(),
                gpus.clone(),
                stopped.clone(),
                ledger.clone(),
            );
            let mut until = stopped.clone();
            let server = tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                    let _ = until.wait_for(|s| *s).await;
                });
            generation.servers.push(tokio::spawn(server));
            generation.sockets.push((path.clone(), file_id(&path)));
            tracing::debug!(resource = %resource, socket = %path.display(), "serving");
        }
        Ok(generation)
    }

    /// A socket of this generation that was removed or replaced.
    fn lost_socket(&self) -> Option<&Path> {
        self.sockets
            .iter()
            .find(|(path, id)| file_id(path) != *id)
            .map(|(path, _)| path.as_path())
    }

    /// Ends the servers (and their ListAndWatch streams), and removes the sockets that are
    /// still this generation's.
    async fn stop(self) {
        let _ = self.stop.send(true);
        for mut server in self.servers {
            match tokio::time::timeout(STOP_WITHIN, &mut server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "a plugin server failed"),
                Ok(Err(e)) => tracing::warn!(error = %e, "a plugin server panicked"),
                Err(_) => {
                    tracing::warn!("a plugin server did not stop in time; aborted");
                    server.abort();
                }
            }
        }
        for (path, id) in &self.sockets {
            if file_id(path) == *id {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
