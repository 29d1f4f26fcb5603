//! The `DevicePlugin` gRPC service kubelet calls: the options, the advertised replicas (a stream that
//! sends the list again whenever a GPU's health changes), the preferred allocation, and `Allocate`, which
//! creates the container's vGPU through the daemon (sized by the container's pod when the Kubernetes API
//! is at hand, see [`crate::pods`]).

use crate::allocate::{Plan, Refusal, container_response, plan, spec_for, stale_names};
use crate::config::Config;
use crate::inventory::{Gpu, replica_id};
use crate::kube_api::KubeApi;
use crate::pods::{PodRef, SharedRecords, describe, pick};
use crate::preferred::preferred;
use crate::sizing::Sizing;
use crate::v1beta1::device_plugin_server::DevicePlugin;
use crate::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, NumaNode, PreStartContainerRequest, PreStartContainerResponse,
    PreferredAllocationRequest, PreferredAllocationResponse, TopologyInfo,
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
    /// One `Allocate` at a time: each removes leftovers of the replicas it creates a vGPU for (and, with
    /// the API, two must not pick the same pod).
    allocating: tokio::sync::Mutex<()>,
    /// The Kubernetes API and the records of which pod each vGPU is for, when the plugin has credentials.
    pods: Option<(KubeApi, SharedRecords)>,
}

impl Service {
    /// A service answering from `gpus` (kept current by the caller) and creating vGPUs with `client`.
    pub fn new(config: Config, client: Client, gpus: watch::Receiver<Vec<Gpu>>) -> Service {
        Service { config, client, gpus, allocating: tokio::sync::Mutex::new(()), pods: None }
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
        let pods = api.pods_on_node().await.map_err(Status::unavailable)?;
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
    let mut devices = Vec::with_capacity(gpus.len() * replicas as usize);
    for gpu in gpus {
        let topology = gpu.numa_node.map(|id| TopologyInfo { nodes: vec![NumaNode { id }] });
        for i in 0..replicas {
            devices.push(Device {
                id: replica_id(&gpu.key, i),
                health: if gpu.healthy { HEALTHY } else { UNHEALTHY }.into(),
                topology: topology.clone(),
            });
        }
    }
    devices
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

/// Creates the vGPU of each job, first removing leftovers of ended containers that held its replicas (and
/// their records, before, so the collector cannot take the new vGPU for the old one), then recording which
/// pod it is for; on a failure removes those it created and returns the error.
fn create_all(
    client: &Client,
    config: &Config,
    jobs: &[Job],
    records: Option<&SharedRecords>,
) -> Result<Vec<ContainerAllocateResponse>, Status> {
    let record = |f: &mut dyn FnMut(&mut crate::pods::Records) -> Result<(), String>| match records {
        Some(r) => {
            let mut guard = r.lock().map_err(|_| Status::internal("the pod records are poisoned"))?;
            f(&mut guard).map_err(Status::internal)
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
        created.push(status.spec.name.clone());
        if let Some(pod) = pod {
            record(&mut |r| r.insert(&status.spec.name, pod.clone()))?;
        }
        responses.push(container_response(config, &plan.gpu, &status.spec.name));
        Ok(responses)
    });
    if result.is_err() {
        let _ = record(&mut |r| r.forget(created.iter().map(String::as_str)));
        for name in created {
            let _ = client.remove(&name);
        }
    }
    result
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let replicas = self.config.replicas;
        let stream = WatchStream::new(self.gpus.clone())
            .map(move |gpus| Ok(ListAndWatchResponse { devices: devices(&gpus, replicas) }));
        Ok(Response::new(Box::pin(stream)))
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
        let (client, config) = (self.client.clone(), self.config.clone());
        let records = self.pods.as_ref().map(|(_, r)| r.clone());
        let container_responses =
            tokio::task::spawn_blocking(move || create_all(&client, &config, &jobs, records.as_ref()))
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
