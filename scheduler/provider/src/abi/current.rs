//! The current (`Accel*`) ABI's types, as `include/accelerator.h` declares them; `layout.tsv` checks
//! both at build time.

use std::ffi::c_char;

/// `AccelResult` (the earlier ABI's `Result` has the same numbers).
pub type AccelResult = i32;
/// Success.
pub const ACCEL_SUCCESS: AccelResult = 0;
/// A NULL pointer, a zero count or a limit out of range.
pub const ACCEL_ERROR_INVALID_PARAM: AccelResult = 1;
/// No such device, template or partition.
pub const ACCEL_ERROR_NOT_FOUND: AccelResult = 2;
/// The device or this library cannot do it.
pub const ACCEL_ERROR_NOT_SUPPORTED: AccelResult = 3;
/// No room left (memory, partitions).
pub const ACCEL_ERROR_RESOURCE_EXHAUSTED: AccelResult = 4;
/// The driver, NVML or the daemon refused or could not be reached.
pub const ACCEL_ERROR_OPERATION_FAILED: AccelResult = 5;
/// A fault inside the library.
pub const ACCEL_ERROR_INTERNAL: AccelResult = 6;

/// `LogCallbackFunc`.
pub type LogCallback = Option<unsafe extern "C" fn(level: *const c_char, message: *const c_char)>;

/// `VirtualizationCapabilities`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct VirtualizationCapabilities {
    pub supports_partitioning: bool,
    pub supports_soft_isolation: bool,
    pub supports_hard_isolation: bool,
    pub supports_snapshot: bool,
    pub supports_metrics: bool,
    pub supports_remoting: bool,
    pub max_partitions: u32,
    pub max_workers_per_device: u32,
}

/// `DeviceBasicInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceBasicInfo {
    pub uuid: [c_char; 64],
    pub vendor: [c_char; 32],
    pub model: [c_char; 128],
    pub driver_version: [c_char; 80],
    pub firmware_version: [c_char; 64],
    pub device_node: [c_char; 64],
    pub index: i32,
    pub numa_node: i32,
    pub total_memory_bytes: u64,
    pub total_compute_units: u64,
    pub max_tflops: f64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
}

/// `DevicePropertyKV`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DevicePropertyKV {
    pub key: [c_char; 64],
    pub value: [c_char; 256],
}

/// `MAX_DEVICE_PROPERTIES`.
pub const MAX_DEVICE_PROPERTIES: usize = 64;

/// `DeviceProperties`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceProperties {
    pub properties: [DevicePropertyKV; MAX_DEVICE_PROPERTIES],
    pub count: usize,
}

/// `ExtendedDeviceInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedDeviceInfo {
    pub basic: DeviceBasicInfo,
    pub props: DeviceProperties,
    pub virtualization_capabilities: VirtualizationCapabilities,
}

/// `TopoLevelType` values.
pub type TopoLevel = i32;
pub const TOPO_LEVEL_INTERNAL: TopoLevel = 0;
pub const TOPO_LEVEL_SINGLE_SWITCH: TopoLevel = 1;
pub const TOPO_LEVEL_MULTI_SWITCH: TopoLevel = 2;
pub const TOPO_LEVEL_HOST_BRIDGE: TopoLevel = 3;
pub const TOPO_LEVEL_NUMA_NODE: TopoLevel = 4;
pub const TOPO_LEVEL_SYSTEM: TopoLevel = 5;
pub const TOPO_LEVEL_SELF: TopoLevel = 6;
pub const TOPO_LEVEL_UNKNOWN: TopoLevel = 7;

/// `DeviceTopoNode`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceTopoNode {
    pub peer_uuid: [c_char; 64],
    pub peer_index: i32,
    pub topo_level: TopoLevel,
}

/// `MAX_TOPOLOGY_DEVICES`.
pub const MAX_TOPOLOGY_DEVICES: usize = 64;

/// `DeviceTopologyInfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceTopologyInfo {
    pub device_uuid: [c_char; 64],
    pub device_index: i32,
    pub numa_node: i32,
    pub peers: [DeviceTopoNode; MAX_TOPOLOGY_DEVICES],
    pub peer_count: usize,
}

/// `ExtendedDeviceTopology`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedDeviceTopology {
    pub devices: [DeviceTopologyInfo; MAX_TOPOLOGY_DEVICES],
    pub device_count: usize,
}

/// `SnapshotContext`.
#[repr(C)]
pub struct SnapshotContext {
    pub process_ids: *mut libc::pid_t,
    pub process_count: usize,
    pub device_uuid: *const c_char,
}

/// `ExtraMetric`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtraMetric {
    pub key: [c_char; 64],
    pub value: f64,
}

/// `MAX_EXTRA_METRICS`.
pub const MAX_EXTRA_METRICS: usize = 64;

/// `ProcessInformation` (the same in both ABIs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInformation {
    pub process_id: [c_char; 32],
    pub device_uuid: [c_char; 64],
    pub compute_utilization_percent: f64,
    pub active_sms: u64,
    pub total_sms: u64,
    pub memory_used_bytes: u64,
    pub memory_reserved_bytes: u64,
    pub memory_utilization_percent: f64,
}

/// `DeviceMetrics` (the same in both ABIs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceMetrics {
    pub device_uuid: [c_char; 64],
    pub power_usage_watts: f64,
    pub temperature_celsius: f64,
    pub pcie_rx_bytes: u64,
    pub pcie_tx_bytes: u64,
    pub utilization_percent: u32,
    pub memory_used_bytes: u64,
    pub extra_metrics: [ExtraMetric; MAX_EXTRA_METRICS],
    pub extra_metrics_count: usize,
}

/// `MAX_MOUNT_PATH`.
pub const MAX_MOUNT_PATH: usize = 512;

/// `MountPath` (the earlier ABI's `Mount`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MountPath {
    pub host_path: [c_char; MAX_MOUNT_PATH],
    pub guest_path: [c_char; MAX_MOUNT_PATH],
}

/// `PartitionResultType` values.
pub const PARTITION_TYPE_ENVIRONMENT_VARIABLE: i32 = 0;
/// Device nodes to expose.
pub const PARTITION_TYPE_DEVICE_NODE: i32 = 1;

/// `MAX_PARTITION_ENVS`.
pub const MAX_PARTITION_ENVS: usize = 16;
/// `MAX_PARTITION_DEVICE_NODES`.
pub const MAX_PARTITION_DEVICE_NODES: usize = 16;

/// `DeviceNodeKV`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceNodeKV {
    pub host_path: [c_char; 512],
    pub guest_path: [c_char; 512],
}

/// `PartitionResult`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PartitionResult {
    pub r#type: i32,
    pub device_uuid: [c_char; 64],
    pub env_vars: [[c_char; 256]; MAX_PARTITION_ENVS],
    pub device_nodes: [DeviceNodeKV; MAX_PARTITION_DEVICE_NODES],
    pub device_node_count: u32,
    pub reserved: [c_char; 28],
}
