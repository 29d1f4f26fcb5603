//! The earlier ABI's types (unprefixed functions), as `include/accelerator_legacy.h` declares them;
//! `layout.tsv` checks both at build time. `ProcessInformation`, `DeviceMetrics`, `Mount` (`MountPath`) and
//! `VirtualizationCapabilities`, `DeviceProperties` are laid out as in the current ABI and shared.

pub use super::current::{DeviceProperties, VirtualizationCapabilities};
use std::ffi::c_char;

pub use super::current::{DeviceMetrics, DevicePropertyKV, ExtraMetric, MountPath as Mount, ProcessInformation};

/// `DeviceBasicInfo` of the earlier ABI: `driverVersion[64]`, no `deviceNode`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceBasicInfo {
    pub uuid: [c_char; 64],
    pub vendor: [c_char; 32],
    pub model: [c_char; 128],
    pub driver_version: [c_char; 64],
    pub firmware_version: [c_char; 64],
    pub index: i32,
    pub numa_node: i32,
    pub total_memory_bytes: u64,
    pub total_compute_units: u64,
    pub max_tflops: f64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
}

/// `ExtendedDeviceInfo` of the earlier ABI.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedDeviceInfo {
    pub basic: DeviceBasicInfo,
    pub props: DeviceProperties,
    pub virtualization_capabilities: VirtualizationCapabilities,
}

/// `DeviceTopology`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceTopology {
    pub device_uuid: [c_char; 64],
    pub numa_node: i32,
}

/// `ExtendedDeviceTopology` of the earlier ABI.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExtendedDeviceTopology {
    pub devices: [DeviceTopology; 64],
    pub device_count: usize,
    pub topology_type: [c_char; 32],
}

/// `PartitionAssignment`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PartitionAssignment {
    pub template_id: [c_char; 64],
    pub device_uuid: [c_char; 64],
    pub partition_uuid: [c_char; 64],
}

/// `MAX_PROCESSES`.
pub const MAX_PROCESSES: usize = 1024;

/// `ProcessArray`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessArray {
    pub process_ids: [libc::pid_t; MAX_PROCESSES],
    pub process_count: usize,
    pub device_uuid: [c_char; 64],
}
