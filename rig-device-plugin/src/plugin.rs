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
}

impl Service {
    /// The service of `resource`.
    pub fn new(
        resource: Resource,
        settings: Arc<Settings>,
        gpus: watch::Receiver<Snapshot>,
        stop: watch::Receiver<bool>,
    ) -> Service {
        Service {
            resource,
            settings,
            gpus,
            stop,
        }
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
            let r = resources::allocate(self.resource, &c.devices_ids, &snapshot, &self.settings)
                .map_err(|e| {
                tracing::warn!(resource = %self.resource, error = %e, "allocate refused");
                Status::invalid_argument(e.to_string())
            })?;
            tracing::info!(
                resource = %self.resource,
                devices = ?c.devices_ids,
                gpus = r.envs.get(resources::VISIBLE_GPUS_ENV).map(String::as_str).unwrap_or(""),
                bytes = r.envs.get(resources::MEMORY_LIMIT_ENV).map(String::as_str).unwrap_or(""),
                "allocated"
            );
            container_responses.push(r);
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
