//! The `DevicePlugin` service for one resource: the kubelet's calls answered from the
//! latest [`Snapshot`] through [`crate::resources`].

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::api;
use crate::api::device_plugin_server::DevicePlugin;
use crate::grants::{self, Ledger};
use crate::resources::{self, Resource, Settings, Snapshot};

/// The options both resources register with and answer GetDevicePluginOptions with.
pub fn options() -> api::DevicePluginOptions {
    api::DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

/// One resource's service.
#[derive(Debug, Clone)]
pub struct Service {
    resource: Resource,
    settings: Arc<Settings>,
    gpus: watch::Receiver<Snapshot>,
    /// Turns true when this generation of servers stops (the kubelet restarted, or the
    /// plugin stops): ListAndWatch streams end then, or the server could not finish.
    stop: watch::Receiver<bool>,
    /// The grants Allocate made.
    ledger: Ledger,
}

impl Service {
    /// The service of `resource`.
    pub fn new(
        resource: Resource,
        settings: Arc<Settings>,
        gpus: watch::Receiver<Snapshot>,
        stop: watch::Receiver<bool>,
        ledger: Ledger,
    ) -> Service {
        Service {
            resource,
            settings,
            gpus,
            stop,
            ledger,
        }
    }

    /// What one container given `ids` gets: its share, and (unless CDI answers) a grant of
    /// rigd's for it, whose socket's directory it mounts.
    async fn allocate_one(
        &self,
        ids: &[String],
        snapshot: &Snapshot,
    ) -> Result<api::ContainerAllocateResponse, Status> {
        let share =
            resources::share(self.resource, ids, snapshot, &self.settings).map_err(|e| {
                tracing::warn!(resource = %self.resource, error = %e, "allocate refused");
                Status::invalid_argument(e.to_string())
            })?;
        if self.settings.cdi {
            return Ok(resources::response(&share, &self.settings, None));
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let spec = share.grant(share.grant_id(nanos), &self.settings);
        let rigd = self.settings.rigd_socket.clone();
        let asked = spec.clone();
        let socket = tokio::task::spawn_blocking(move || grants::grant(&rigd, &asked))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| {
                let why = crate::health::error_chain(&e);
                tracing::warn!(resource = %self.resource, devices = ?ids, error = %why, "rigd made no grant; allocate refused");
                Status::unavailable(format!("rigd made no grant for the allocation: {why}"))
            })?;
        tracing::info!(
            resource = %self.resource,
            devices = ?ids,
            grant = %spec.id,
            socket = %socket.display(),
            gpus = ?share.bytes,
            "allocated"
        );
        self.ledger.made(spec);
        Ok(resources::response(&share, &self.settings, Some(&socket)))
    }

    fn list(&self, snapshot: &Snapshot) -> api::ListAndWatchResponse {
        api::ListAndWatchResponse {
            devices: resources::devices(self.resource, snapshot, &self.settings),
        }
    }
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<api::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _request: Request<api::Empty>,
    ) -> Result<Response<api::DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _request: Request<api::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut gpus = self.gpus.clone();
        let mut stop = self.stop.clone();
        let me = self.clone();
        tracing::debug!(resource = %self.resource, "the kubelet watches");
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let list = me.list(&gpus.borrow_and_update());
                if last.as_ref() != Some(&list) {
                    tracing::debug!(
                        resource = %me.resource,
                        devices = list.devices.len(),
                        healthy = list.devices.iter().filter(|d| d.health == resources::HEALTHY).count(),
                        "device list to the kubelet"
                    );
                    if tx.send(Ok(list.clone())).await.is_err() {
                        return;
                    }
                    last = Some(list);
                }
                tokio::select! {
                    changed = gpus.changed() => if changed.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<api::PreferredAllocationRequest>,
    ) -> Result<Response<api::PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                api::ContainerPreferredAllocationResponse {
                    device_i_ds: resources::prefer(
                        &c.available_device_i_ds,
                        &c.must_include_device_i_ds,
                        size,
                    ),
                }
            })
            .collect();
        Ok(Response::new(api::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<api::AllocateRequest>,
    ) -> Result<Response<api::AllocateResponse>, Status> {
        let snapshot = self.gpus.borrow().clone();
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            container_responses.push(self.allocate_one(&c.devices_ids, &snapshot).await?);
        }
        Ok(Response::new(api::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _request: Request<api::PreStartContainerRequest>,
    ) -> Result<Response<api::PreStartContainerResponse>, Status> {
        Ok(Response::new(api::PreStartContainerResponse {}))
    }
}
