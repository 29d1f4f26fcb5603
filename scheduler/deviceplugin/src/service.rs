//! The `DevicePlugin` gRPC service kubelet calls: the options, the advertised replicas (a stream that
//! sends the list again whenever a GPU's health changes), the preferred allocation, and `Allocate`, which
//! creates the container's vGPU through the daemon (sized by the container's pod when the Kubernetes API
//! is at hand, see [`crate::pods`]).

use crate::allocate::{Plan, Refusal, plan, spec_for, stale_names};
use crate::cdi_file::CdiFile;
use crate::config::Config;
use crate::container_edits::for_container;
use crate::inventory::{Gpu, replica_id};
use crate::kube_api::KubeApi;
use crate::pods::{PodRef, RecordsError, SharedRecords, describe, pick};
use crate::preferred::preferred;
use crate::sizing::Sizing;
use crate::v1beta1::device_plugin_server::DevicePlugin;
use crate::v1beta1::{
    AllocateRequest, AllocateResponse, CdiDevice, ContainerAllocateResponse, ContainerPreferredAllocationResponse,
    Device, DevicePluginOptions, Empty, ListAndWatchResponse, NumaNode, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse, TopologyInfo,
};
use std::pin::Pin;
use std::sync::Arc;
use tessera_client::{Client, ErrorCode};
use tokio::sync::watch;
use tokio_stream::{Stream, StreamExt, wrappers::WatchStream};
use tonic::{Request, Response, Status};

/// kubelet's word for a device that can be allocated.
pub const HEALTHY: &str = "Healthy";
/// kubelet's word for one that cannot.
pub const UNHEALTHY: &str = "Unhealthy";

/// The service: the configuration, the daemon's client, the GPUs as last read, and the plugin's CDI spec file.
pub struct Service {
    config: Config,
    client: Client,
    gpus: watch::Receiver<Vec<Gpu>>,
    /// The plugin's CDI spec file (written only with `--cdi-dir`), shared with [`crate::cdi_file::keep_synced`].
    cdi_file: Arc<CdiFile>,
    /// One `Allocate` at a time: each removes leftovers of the replicas it creates a vGPU for (and, with
    /// the API, two must not pick the same pod).
    allocating: tokio::sync::Mutex<()>,
    /// The Kubernetes API and the records of which pod each vGPU is for, when the plugin has credentials.
    pods: Option<(KubeApi, SharedRecords)>,
}

impl Service {
    /// A service answering from `gpus` (kept current by the caller), creating vGPUs with `client` and listing
    /// them in `cdi_file`.
    pub fn new(config: Config, client: Client, gpus: watch::Receiver<Vec<Gpu>>, cdi_file: Arc<CdiFile>) -> Service {
        Service { config, client, gpus, cdi_file, allocating: tokio::sync::Mutex::new(()), pods: None }
    }

    /// The service sizing vGPUs from the pods `api` lists and recording them in `records`.
    pub fn with_pods(mut self, api: KubeApi, records: SharedRecords) -> Service {
        self.pods = Some((api, records));
        self
    }

    /// What each plan is for: with the API, the pod container [`pick`] finds (one per plan, none twice)
    /// and the sizing it asks for, checked against the GPU; else k/N for no known pod.
    async fn size(&self, plans: Vec<Plan>) -> Result<Vec<Job>, Status> {
        let Some((api, records)) = &self.pods else {
            return Ok(plans.into_iter().map(|plan| Job { plan, sizing: Sizing::default(), pod: None }).collect());
        };
        let pods = api.pods_on_node().await.map_err(|e| Status::unavailable(e.to_string()))?;
        let mut taken: Vec<PodRef> = records.lock().map(|r| r.all().values().cloned().collect()).unwrap_or_default();
        let resource = &self.config.resource;
        let mut jobs = Vec::with_capacity(plans.len());
        for plan in plans {
            let k = plan.replicas.len() as u64;
            let found = pick(&pods, resource, k, &taken.iter().collect::<Vec<_>>()).map(|(p, c)| describe(p, c));
            let Some((pod, limits, annotations)) = found else {
                say(&format!(
                    "no pending pod on node {} has a container asking for {k} {resource} without a vGPU; \
                     giving {k}/{} of GPU {}",
                    api.node(),
                    self.config.replicas,
                    plan.gpu.key
                ));
                jobs.push(Job { plan, sizing: Sizing::default(), pod: None });
                continue;
            };
            let sizing = Sizing::of(resource, &limits, &annotations)
                .and_then(|s| s.check(resource, plan.gpu.memory_total).map(|()| s))
                .map_err(|e| Status::invalid_argument(format!("{pod}: {e}")))?;
            taken.push(pod.clone());
            jobs.push(Job { plan, sizing, pod: Some(pod) });
        }
        Ok(jobs)
    }
}

/// Prints one line about the plugin's work on stderr.
fn say(message: &str) {
    eprintln!("tessera device-plugin: {message}");
}

/// One container's vGPU to make: the replicas, its size, and the pod container it is for if known.
struct Job {
    plan: Plan,
    sizing: Sizing,
    pod: Option<PodRef>,
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
        ErrorCode::ResourceExhausted => Status::resource_exhausted(message),
        ErrorCode::Unavailable | ErrorCode::Timeout => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

/// Creates the vGPU of each job, first removing leftovers of ended containers that held its replicas (and
/// their records, before, so the collector cannot take the new vGPU for the old one), then recording which
/// pod it is for, and (with `--cdi-dir`) writes the spec file `cdi_file` listing them; on a failure removes
/// those it created and returns the error.
fn create_all(
    client: &Client,
    config: &Config,
    cdi_file: &CdiFile,
    gpus: &[Gpu],
    jobs: &[Job],
    records: Option<&SharedRecords>,
) -> Result<Vec<ContainerAllocateResponse>, Status> {
    let record = |f: &mut dyn FnMut(&mut crate::pods::Records) -> Result<(), RecordsError>| match records {
        Some(r) => {
            let mut guard = r.lock().map_err(|_| Status::internal("the pod records are poisoned"))?;
            f(&mut guard).map_err(|e| Status::internal(e.to_string()))
        }
        None => Ok(()),
    };
    let mut created: Vec<String> = Vec::new();
    let result = jobs.iter().try_fold(Vec::new(), |mut responses, Job { plan, sizing, pod }| {
        let stale = stale_names(plan);
        record(&mut |r| r.forget(stale.iter().map(String::as_str)))?;
        for stale in stale {
            match client.remove(&stale) {
                Ok(()) | Err(tessera_client::Error { code: ErrorCode::NotFound, .. }) => {}
                Err(e) => return Err(daemon_error(&format!("removing vGPU {stale} of an earlier container"), e)),
            }
        }
        let spec = spec_for(plan, config.replicas, sizing);
        let status =
            client.create(spec.clone()).map_err(|e| daemon_error(&format!("creating vGPU {}", spec.name), e))?;
        let name = status.spec.name;
        created.push(name.clone());
        if let Some(pod) = pod {
            record(&mut |r| r.insert(&name, pod.clone()))?;
        }
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
    let result = result.and_then(|responses| match cdi_file.sync(client, gpus) {
        Ok(_) => Ok(responses),
        Err(e) => Err(Status::internal(format!("writing the CDI spec: {e}"))),
    });
    if result.is_err() {
        let _ = record(&mut |r| r.forget(created.iter().map(String::as_str)));
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
        let jobs = self.size(plans).await?;
        let (client, config, cdi_file) = (self.client.clone(), self.config.clone(), self.cdi_file.clone());
        let records = self.pods.as_ref().map(|(_, r)| r.clone());
        let container_responses = tokio::task::spawn_blocking(move || {
            create_all(&client, &config, &cdi_file, &gpus, &jobs, records.as_ref())
        })
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
