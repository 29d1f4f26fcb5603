//! The two extra resources registered beside the main one, for the Kubernetes scheduler's node-level
//! accounting: `<resource>-memory` (one unit = 1 GiB of a GPU's memory, floor(memory / 1 GiB) devices per
//! GPU, IDs `<GPU>-mem-<i>`) and `<resource>-share` (one unit = 1 % of a GPU's time, 100 devices per GPU,
//! IDs `<GPU>-share-<i>`). Each is served on its own socket with its own `ListAndWatch`, whose health
//! follows the GPU's as the main resource's does. Their `Allocate` gives the container nothing: the sizes
//! reach the vGPU through the pod spec (read through the Kubernetes API), not through these devices.

use crate::config::Config;
use crate::inventory::Gpu;
use crate::service::{DeviceStream, device_stream};
use crate::v1beta1::device_plugin_server::DevicePlugin;
use crate::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse, DevicePluginOptions, Empty, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// Bytes of GPU memory one unit of the memory resource stands for (1 GiB).
pub const MEMORY_UNIT: u64 = 1 << 30;
/// Units of the share resource per GPU: one unit is 1 % of its time.
pub const SHARE_UNITS: u32 = 100;

/// Which extra resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `<resource>-memory`: 1 GiB units.
    Memory,
    /// `<resource>-share`: 1 % units.
    Share,
}

impl Kind {
    /// Both kinds, in registration order.
    pub const ALL: [Kind; 2] = [Kind::Memory, Kind::Share];

    /// What is appended to the main resource's name (and socket's) to name this one.
    pub fn suffix(self) -> &'static str {
        match self {
            Kind::Memory => "-memory",
            Kind::Share => "-share",
        }
    }

    /// The word between the GPU key and the index in a device ID.
    fn tag(self) -> &'static str {
        match self {
            Kind::Memory => "mem",
            Kind::Share => "share",
        }
    }

    /// How many devices of this kind `gpu` is advertised as.
    pub fn count(self, gpu: &Gpu) -> u32 {
        match self {
            Kind::Memory => u32::try_from(gpu.memory_total / MEMORY_UNIT).unwrap_or(u32::MAX),
            Kind::Share => SHARE_UNITS,
        }
    }

    /// The ID of device `index` of this kind of the GPU with key `key`.
    pub fn id(self, key: &str, index: u32) -> String {
        format!("{key}-{}-{index}", self.tag())
    }

    /// The IDs of every device of this kind of `gpu`.
    pub fn ids(self, gpu: &Gpu) -> Vec<String> {
        (0..self.count(gpu)).map(|i| self.id(&gpu.key, i)).collect()
    }

    /// The GPU key and index of device ID `id` of this kind, or `None` when it is not `<key>-<tag>-<i>`.
    pub fn parse(self, id: &str) -> Option<(&str, u32)> {
        let (rest, index) = id.rsplit_once('-')?;
        let key = rest.strip_suffix(self.tag())?.strip_suffix('-')?;
        if key.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((key, index.parse().ok()?))
    }
}

/// One extra resource as registered: its kind, resource name and socket file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extra {
    /// Which one.
    pub kind: Kind,
    /// Its resource name: the main one's with the kind's suffix.
    pub resource: String,
    /// Its socket file name in the device-plugin directory.
    pub socket_name: String,
}

/// The extra resources of `config`: none when they are turned off, else memory then share.
pub fn extras(config: &Config) -> Vec<Extra> {
    if !config.extra_resources {
        return Vec::new();
    }
    let stem = config.socket_name.strip_suffix(".sock").unwrap_or(&config.socket_name);
    Kind::ALL
        .into_iter()
        .map(|kind| Extra {
            kind,
            resource: format!("{}{}", config.resource, kind.suffix()),
            socket_name: format!("{stem}{}.sock", kind.suffix()),
        })
        .collect()
}

/// Whether `id` is a device of `kind` that `gpus` has.
fn known(kind: Kind, id: &str, gpus: &[Gpu]) -> bool {
    kind.parse(id).is_some_and(|(key, index)| gpus.iter().any(|g| g.key == key && index < kind.count(g)))
}

/// The `DevicePlugin` service of one extra resource.
pub struct ExtraService {
    kind: Kind,
    gpus: watch::Receiver<Vec<Gpu>>,
}

impl ExtraService {
    /// The service of `kind`, advertising from `gpus` (kept current by the caller, as for the main one).
    pub fn new(kind: Kind, gpus: watch::Receiver<Vec<Gpu>>) -> ExtraService {
        ExtraService { kind, gpus }
    }
}

/// The options every extra resource registers with: no preferred allocation (any unit is as good as
/// another), nothing before a container starts.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: false }
}

#[tonic::async_trait]
impl DevicePlugin for ExtraService {
    async fn get_device_plugin_options(&self, _: Request<Empty>) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let kind = self.kind;
        Ok(Response::new(device_stream(self.gpus.clone(), move |gpu| kind.ids(gpu))))
    }

    async fn get_preferred_allocation(
        &self,
        _: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        Err(Status::unimplemented("no preferred allocation for an extra resource (not registered with one)"))
    }

    /// Empty responses for known IDs (the units are accounting only); unknown IDs are refused.
    async fn allocate(&self, request: Request<AllocateRequest>) -> Result<Response<AllocateResponse>, Status> {
        let gpus = self.gpus.borrow().clone();
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            if c.devices_ids.is_empty() {
                return Err(Status::invalid_argument("the container asks for no device"));
            }
            if let Some(bad) = c.devices_ids.iter().find(|id| !known(self.kind, id, &gpus)) {
                return Err(Status::invalid_argument(format!(
                    "unknown device id {bad:?}: not a {} device <GPU>-{}-<i> of this node",
                    self.kind.suffix().trim_start_matches('-'),
                    self.kind.tag()
                )));
            }
            container_responses.push(ContainerAllocateResponse::default());
        }
        Ok(Response::new(AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(key: &str, memory_total: u64) -> Gpu {
        Gpu { ordinal: 0, key: key.into(), memory_total, minor: 0, numa_node: None, bus_id: None, healthy: true }
    }

    #[test]
    fn ids_round_trip_fit_kubelet_and_count_whole_gib() {
        let uuid = "GPU-fef8089b-4820-abfc-e83e-94318197576e";
        for kind in Kind::ALL {
            let id = kind.id(uuid, 99);
            assert!(id.len() <= crate::inventory::MAX_ID, "{id}");
            assert_eq!(kind.parse(&id), Some((uuid, 99)));
        }
        assert_eq!(Kind::Memory.parse(&Kind::Share.id(uuid, 1)), None);
        assert_eq!(Kind::Share.parse(&Kind::Memory.id(uuid, 1)), None);
        for bad in ["", "mem-1", "-mem-1", "GPU-mem-", "GPU-mem-x", "GPU-1", "GPUmem-1"] {
            assert_eq!(Kind::Memory.parse(bad), None, "{bad:?}");
        }
        assert_eq!(Kind::Memory.count(&gpu("g", 4 * MEMORY_UNIT + MEMORY_UNIT - 1)), 4);
        assert_eq!(Kind::Memory.count(&gpu("g", MEMORY_UNIT - 1)), 0);
        assert_eq!(Kind::Share.count(&gpu("g", 0)), 100);
        let gpus = [gpu("g", 2 * MEMORY_UNIT)];
        assert!(known(Kind::Memory, "g-mem-1", &gpus) && !known(Kind::Memory, "g-mem-2", &gpus));
        assert!(known(Kind::Share, "g-share-99", &gpus) && !known(Kind::Share, "g-share-100", &gpus));
        assert!(!known(Kind::Share, "h-share-0", &gpus));
    }
}
