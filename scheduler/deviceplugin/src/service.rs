//! The `DevicePlugin` gRPC service kubelet calls: the options, the advertised replicas (a stream that
//! sends the list again whenever a GPU's health changes), the preferred allocation, and `Allocate`, which
//! creates the container's vGPU through the daemon.

use crate::allocate::{Plan, Refusal, plan, spec_for, stale_names};
use crate::config::Config;
use crate::container_edits::for_container;
use crate::inventory::{Gpu, replica_id};
use crate::preferred::preferred;
use crate::v1beta1::device_plugin_server::DevicePlugin;
use crate::v1beta1::{
    AllocateRequest, AllocateResponse, CdiDevice, ContainerAllocateResponse, ContainerPreferredAllocationResponse,
    Device, DevicePluginOptions, Empty, ListAndWatchResponse, NumaNode, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse, TopologyInfo,
};
use std::pin::Pin;
use tessera_client::{Client, ErrorCode};
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt, wrappers::WatchStream};
use tonic::{Request, Response, Status};

/// kubelet's word for a device that can be allocated.
pub const HEALTHY: &str = "Healthy";
/// kubelet's word for one that cannot.
pub const UNHEALTHY: &str = "Unhealthy";

/// The service: the configuration, the daemon's client, and the GPUs as last read.
pub struct Service {
    config: Config,
    client: Client,
    gpus: watch::Receiver<Vec<Gpu>>,
    /// One `Allocate` at a time: each removes leftovers of the replicas it creates a vGPU for.
    allocating: tokio::sync::Mutex<()>,
}

impl Service {
    /// A service answering from `gpus` (kept current by the caller) and creating vGPUs with `client`.
    pub fn new(config: Config, client: Client, gpus: watch::Receiver<Vec<Gpu>>) -> Service {
        Service { config, client, gpus, allocating: tokio::sync::Mutex::new(()) }
    }
}

/// The devices kubelet is told of: each GPU's replicas, with its health and NUMA node.
pub fn devices(gpus: &[Gpu], replicas: u32) -> Vec<Device> {
    advertised(gpus, |gpu| replica_ids(gpu, replicas))
}

/// The IDs of `gpu`'s replicas.
fn replica_ids(gpu: &Gpu, replicas: u32) -> Vec<String> {
    (0..replicas).map(|i| replica_id(&gpu.key, i)).collect()
}

/// The devices `ids` names for each GPU, each with that GPU's health and NUMA node (shared by the main
/// resource and the extra ones, so their health always agrees).
pub fn advertised(gpus: &[Gpu], ids: impl Fn(&Gpu) -> Vec<String>) -> Vec<Device> {
    let mut devices = Vec::new();
    for gpu in gpus {
        let topology = gpu.numa_node.map(|id| TopologyInfo { nodes: vec![NumaNode { id }] });
        let health = if gpu.healthy { HEALTHY } else { UNHEALTHY };
        devices.extend(ids(gpu).into_iter().map(|id| Device { id, health: health.into(), topology: topology.clone() }));
    }
    devices
}

/// A `ListAndWatch` stream: the devices `ids` names for each GPU of `gpus`, sent again whenever the GPUs
/// change (a GPU lost, back, gone).
pub fn device_stream(
    gpus: watch::Receiver<Vec<Gpu>>,
    ids: impl Fn(&Gpu) -> Vec<String> + Send + Sync + 'static,
) -> DeviceStream {
    let stream = WatchStream::new(gpus).map(move |gpus| Ok(ListAndWatchResponse { devices: advertised(&gpus, &ids) }));
    Box::pin(stream)
}

/// The gRPC status of a refusal.
fn refused(refusal: Refusal) -> Status {
    match refusal {
        Refusal::Invalid(m) => Status::invalid_argument(m),
        Refusal::Unavailable(m) => Status::failed_precondition(m),
    }
}

/// The gRPC status of a daemon error.
fn daemon_error(what: &str, e: tessera_client::Error) -> Status {
    let message = format!("{what}: {e}");
    match e.code {
        ErrorCode::InUse | ErrorCode::Invalid | ErrorCode::AlreadyExists => Status::failed_precondition(message),
        ErrorCode::Unavailable | ErrorCode::Timeout => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

/// Creates the vGPU of each plan, first removing leftovers of ended containers that held its replicas,
/// and (with `--cdi-dir`) writes the spec file listing them; on a failure removes those it created and
/// returns the error.
fn create_all(
    client: &Client,
    config: &Config,
    gpus: &[Gpu],
    plans: &[Plan],
) -> Result<Vec<ContainerAllocateResponse>, Status> {
    let mut created: Vec<String> = Vec::new();
    let result = plans.iter().try_fold(Vec::new(), |mut responses, plan| {
        for stale in stale_names(plan) {
            match client.remove(&stale) {
                Ok(()) | Err(tessera_client::Error { code: ErrorCode::NotFound, .. }) => {}
                Err(e) => return Err(daemon_error(&format!("removing vGPU {stale} of an earlier container"), e)),
            }
        }
        let spec = spec_for(plan, config.replicas);
        let status =
            client.create(spec.clone()).map_err(|e| daemon_error(&format!("creating vGPU {}", spec.name), e))?;
        let name = status.spec.name;
        created.push(name.clone());
        let mut response = for_container(&config.host_files(), &plan.gpu, Some(&name)).allocate_response();
        // With CDI the answer names the container's CDI device *and* keeps the envs, mounts and device
        // nodes: kubelet passes `cdi_devices` on to the runtime only from Kubernetes 1.28 (feature gate
        // DevicePluginCDIDevices, on by default from 1.29), and containerd applies them only with CDI
        // enabled (by default from 2.0); elsewhere the names are dropped without a word, and a container
        // with nothing else would start without its vGPU. Where both are applied they agree (one source,
        // `container_edits`), and the CDI library replaces an existing device node or mount of the same
        // container path and an environment variable of the same name, so the container gets one of each.
        if config.cdi_dir.is_some() {
            response.cdi_devices.push(CdiDevice { name: crate::cdi::qualified(&name) });
        }
        responses.push(response);
        Ok(responses)
    });
    // The spec file must list the new vGPUs before kubelet hears of them: the runtime reads it when it
    // creates the container.
    let result = result.and_then(|responses| match crate::cdi_file::sync(config, client, gpus) {
        Ok(_) => Ok(responses),
        Err(e) => Err(Status::internal(format!("writing the CDI spec: {e}"))),
    });
    if result.is_err() {
        for name in created {
            let _ = client.remove(&name);
        }
    }
    result
}

/// What `ListAndWatch` answers: a stream of device lists.
pub type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let replicas = self.config.replicas;
        Ok(Response::new(device_stream(self.gpus.clone(), move |gpu| replica_ids(gpu, replicas))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let size = usize::try_from(c.allocation_size)
                .map_err(|_| Status::invalid_argument(format!("allocation size {} is negative", c.allocation_size)))?;
            let device_i_ds = preferred(&c.available_device_i_ds, &c.must_include_device_i_ds, size);
            container_responses.push(ContainerPreferredAllocationResponse { device_i_ds });
        }
        Ok(Response::new(PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, request: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let gpus = self.gpus.borrow().clone();
        let mut plans: Vec<Plan> = Vec::new();
        for c in request.into_inner().container_requests {
            let p = plan(&c.devices_ids, &gpus, self.config.replicas).map_err(refused)?;
            if plans.iter().any(|o| o.gpu.key == p.gpu.key && o.replicas.iter().any(|r| p.replicas.contains(r))) {
                return Err(Status::invalid_argument(format!("device ids {:?} are asked for twice", c.devices_ids)));
            }
            plans.push(p);
        }
        let _one_at_a_time = self.allocating.lock().await;
        let (client, config) = (self.client.clone(), self.config.clone());
        let container_responses = tokio::task::spawn_blocking(move || create_all(&client, &config, &gpus, &plans))
            .await
            .map_err(|e| Status::internal(format!("allocation failed: {e}")))??;
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
