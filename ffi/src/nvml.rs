//! NVML C types, as NVIDIA's `nvml.h` (API version 12) lays them out.
//!
//! Every value crosses the boundary as a plain integer or a `#[repr(C)]` struct, never as a Rust enum: a newer
//! program may pass a value an enum lacks, and holding such a value in an enum is undefined behaviour. Field
//! names are the C names in snake case; the layouts are checked against the header's sizes at compile time.

use std::ffi::{CStr, c_char};
use std::mem::{offset_of, size_of};

/// `nvmlReturn_t` as the C ABI carries it.
pub type NvmlReturn = u32;

/// `NVML_SUCCESS`: the operation was successful.
pub const NVML_SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_UNINITIALIZED`: NVML was not first initialized with `nvmlInit`.
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
/// `NVML_ERROR_INVALID_ARGUMENT`: a supplied argument is invalid.
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
/// `NVML_ERROR_NOT_SUPPORTED`: the operation is not available on the device.
pub const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
/// `NVML_ERROR_NO_PERMISSION`: the user may not perform the operation.
pub const NVML_ERROR_NO_PERMISSION: NvmlReturn = 4;
/// `NVML_ERROR_ALREADY_INITIALIZED`: deprecated; initialization is reference-counted.
pub const NVML_ERROR_ALREADY_INITIALIZED: NvmlReturn = 5;
/// `NVML_ERROR_NOT_FOUND`: a query to find an object was unsuccessful.
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
/// `NVML_ERROR_INSUFFICIENT_SIZE`: an input buffer is not large enough.
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
/// `NVML_ERROR_INSUFFICIENT_POWER`: external power cables are not properly attached.
pub const NVML_ERROR_INSUFFICIENT_POWER: NvmlReturn = 8;
/// `NVML_ERROR_DRIVER_NOT_LOADED`: the NVIDIA driver is not loaded.
pub const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
/// `NVML_ERROR_TIMEOUT`: a user-provided timeout passed.
pub const NVML_ERROR_TIMEOUT: NvmlReturn = 10;
/// `NVML_ERROR_IRQ_ISSUE`: the kernel detected an interrupt issue with a GPU.
pub const NVML_ERROR_IRQ_ISSUE: NvmlReturn = 11;
/// `NVML_ERROR_LIBRARY_NOT_FOUND`: the NVML shared library could not be found or loaded.
pub const NVML_ERROR_LIBRARY_NOT_FOUND: NvmlReturn = 12;
/// `NVML_ERROR_FUNCTION_NOT_FOUND`: this NVML does not implement the function.
pub const NVML_ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
/// `NVML_ERROR_CORRUPTED_INFOROM`: the infoROM is corrupted.
pub const NVML_ERROR_CORRUPTED_INFOROM: NvmlReturn = 14;
/// `NVML_ERROR_GPU_IS_LOST`: the GPU fell off the bus or is otherwise inaccessible.
pub const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
/// `NVML_ERROR_RESET_REQUIRED`: the GPU needs a reset before it can be used again.
pub const NVML_ERROR_RESET_REQUIRED: NvmlReturn = 16;
/// `NVML_ERROR_OPERATING_SYSTEM`: the operating system blocked the request.
pub const NVML_ERROR_OPERATING_SYSTEM: NvmlReturn = 17;
/// `NVML_ERROR_LIB_RM_VERSION_MISMATCH`: the driver and library versions differ.
pub const NVML_ERROR_LIB_RM_VERSION_MISMATCH: NvmlReturn = 18;
/// `NVML_ERROR_IN_USE`: the GPU is in use.
pub const NVML_ERROR_IN_USE: NvmlReturn = 19;
/// `NVML_ERROR_MEMORY`: insufficient memory.
pub const NVML_ERROR_MEMORY: NvmlReturn = 20;
/// `NVML_ERROR_NO_DATA`: no data.
pub const NVML_ERROR_NO_DATA: NvmlReturn = 21;
/// `NVML_ERROR_VGPU_ECC_NOT_SUPPORTED`: the vGPU operation is unavailable because ECC is enabled.
pub const NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: NvmlReturn = 22;
/// `NVML_ERROR_INSUFFICIENT_RESOURCES`: ran out of critical resources other than memory.
pub const NVML_ERROR_INSUFFICIENT_RESOURCES: NvmlReturn = 23;
/// `NVML_ERROR_FREQ_NOT_SUPPORTED`: the frequency is not supported.
pub const NVML_ERROR_FREQ_NOT_SUPPORTED: NvmlReturn = 24;
/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`: a struct's version field is invalid or unsupported.
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
/// `NVML_ERROR_DEPRECATED`: the functionality has been deprecated.
pub const NVML_ERROR_DEPRECATED: NvmlReturn = 26;
/// `NVML_ERROR_NOT_READY`: the system is not ready for the request.
pub const NVML_ERROR_NOT_READY: NvmlReturn = 27;
/// `NVML_ERROR_GPU_NOT_FOUND`: no GPUs were found.
pub const NVML_ERROR_GPU_NOT_FOUND: NvmlReturn = 28;
/// `NVML_ERROR_INVALID_STATE`: a resource is not in the state the operation needs.
pub const NVML_ERROR_INVALID_STATE: NvmlReturn = 29;
/// `NVML_ERROR_UNKNOWN`: an internal error occurred.
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// The text `nvmlErrorString` gives each code; codes not listed read "Unknown Error".
static ERROR_STRINGS: &[(NvmlReturn, &CStr)] = &[
    (NVML_SUCCESS, c"Success"),
    (NVML_ERROR_UNINITIALIZED, c"Uninitialized"),
    (NVML_ERROR_INVALID_ARGUMENT, c"Invalid Argument"),
    (NVML_ERROR_NOT_SUPPORTED, c"Not Supported"),
    (NVML_ERROR_NO_PERMISSION, c"Insufficient Permissions"),
    (NVML_ERROR_ALREADY_INITIALIZED, c"Already Initialized"),
    (NVML_ERROR_NOT_FOUND, c"Not Found"),
    (NVML_ERROR_INSUFFICIENT_SIZE, c"Insufficient Size"),
    (NVML_ERROR_INSUFFICIENT_POWER, c"Insufficient External Power"),
    (NVML_ERROR_DRIVER_NOT_LOADED, c"Driver Not Loaded"),
    (NVML_ERROR_TIMEOUT, c"Timeout"),
    (NVML_ERROR_IRQ_ISSUE, c"Interrupt Request Issue"),
    (NVML_ERROR_LIBRARY_NOT_FOUND, c"NVML Shared Library Not Found"),
    (NVML_ERROR_FUNCTION_NOT_FOUND, c"Function Not Found"),
    (NVML_ERROR_CORRUPTED_INFOROM, c"Corrupted infoROM"),
    (NVML_ERROR_GPU_IS_LOST, c"GPU is lost"),
    (NVML_ERROR_RESET_REQUIRED, c"GPU requires restart"),
    (NVML_ERROR_OPERATING_SYSTEM, c"The operating system has blocked the request."),
    (NVML_ERROR_LIB_RM_VERSION_MISMATCH, c"RM has detected an NVML/RM version mismatch."),
    (NVML_ERROR_IN_USE, c"In use by another client"),
    (NVML_ERROR_MEMORY, c"Insufficient Memory"),
    (NVML_ERROR_NO_DATA, c"No data"),
    (
        NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
        c"The requested vgpu operation is not available on target device, because ECC is enabled",
    ),
    (NVML_ERROR_INSUFFICIENT_RESOURCES, c"Ran out of critical resources, other than memory"),
    (NVML_ERROR_FREQ_NOT_SUPPORTED, c"The requested frequency is not supported"),
    (NVML_ERROR_ARGUMENT_VERSION_MISMATCH, c"The provided version is invalid/unsupported"),
    (NVML_ERROR_DEPRECATED, c"The requested functionality has been deprecated"),
    (NVML_ERROR_NOT_READY, c"The system is not ready for the request"),
    (NVML_ERROR_GPU_NOT_FOUND, c"No GPUs were found"),
    (NVML_ERROR_INVALID_STATE, c"Resource not in correct state to perform requested operation"),
    (NVML_ERROR_UNKNOWN, c"Unknown Error"),
];

/// The NUL-terminated text `nvmlErrorString` returns for `code`.
pub fn error_string(code: NvmlReturn) -> &'static CStr {
    ERROR_STRINGS.iter().find(|(c, _)| *c == code).map_or(c"Unknown Error", |(_, s)| s)
}

/// Opaque target of `nvmlDevice_t` (`struct nvmlDevice_st`); only ever handled through pointers.
#[repr(C)]
pub struct NvmlDeviceSt {
    _opaque: [u8; 0],
}

/// `nvmlDevice_t`: an opaque device handle.
pub type NvmlDevice = *mut NvmlDeviceSt;

/// `NVML_STRUCT_VERSION(data, ver)`: the value a versioned struct's `version` field must hold.
pub const fn struct_version(size: usize, version: u32) -> u32 {
    size as u32 | (version << 24)
}

/// `NVML_INIT_FLAG_NO_GPUS`: `nvmlInitWithFlags` does not fail when no GPU is found.
pub const NVML_INIT_FLAG_NO_GPUS: u32 = 1;
/// `NVML_INIT_FLAG_NO_ATTACH`: `nvmlInitWithFlags` does not attach GPUs.
pub const NVML_INIT_FLAG_NO_ATTACH: u32 = 2;

/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE`: room for `nvmlPciInfo_t::busId`.
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: usize = 32;
/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE`: room for `nvmlPciInfo_t::busIdLegacy`.
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: usize = 16;
/// `NVML_DEVICE_UUID_BUFFER_SIZE`: room for a GPU UUID string.
pub const NVML_DEVICE_UUID_BUFFER_SIZE: usize = 80;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`: room for a GPU or MIG UUID string.
pub const NVML_DEVICE_UUID_V2_BUFFER_SIZE: usize = 96;
/// `NVML_DEVICE_NAME_BUFFER_SIZE`: room for a device name (older limit).
pub const NVML_DEVICE_NAME_BUFFER_SIZE: usize = 64;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`: room for a device name.
pub const NVML_DEVICE_NAME_V2_BUFFER_SIZE: usize = 96;
/// `NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE`: room for the driver version string.
pub const NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: usize = 80;
/// `NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE`: room for the NVML version string.
pub const NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE: usize = 80;

/// `NVML_TEMPERATURE_GPU` (`nvmlTemperatureSensors_t`): the GPU die sensor, the only one defined.
pub const NVML_TEMPERATURE_GPU: u32 = 0;

/// `NVML_CLOCK_GRAPHICS` (`nvmlClockType_t`): graphics clock domain.
pub const NVML_CLOCK_GRAPHICS: u32 = 0;
/// `NVML_CLOCK_SM`: SM clock domain.
pub const NVML_CLOCK_SM: u32 = 1;
/// `NVML_CLOCK_MEM`: memory clock domain.
pub const NVML_CLOCK_MEM: u32 = 2;
/// `NVML_CLOCK_VIDEO`: video encoder/decoder clock domain.
pub const NVML_CLOCK_VIDEO: u32 = 3;

/// `NVML_FEATURE_DISABLED` (`nvmlEnableState_t`).
pub const NVML_FEATURE_DISABLED: u32 = 0;
/// `NVML_FEATURE_ENABLED` (`nvmlEnableState_t`).
pub const NVML_FEATURE_ENABLED: u32 = 1;

/// `NVML_DEVICE_MIG_DISABLE`: MIG mode off.
pub const NVML_DEVICE_MIG_DISABLE: u32 = 0;
/// `NVML_DEVICE_MIG_ENABLE`: MIG mode on.
pub const NVML_DEVICE_MIG_ENABLE: u32 = 1;

/// `NVML_COMPUTEMODE_DEFAULT` (`nvmlComputeMode_t`): many contexts per device.
pub const NVML_COMPUTEMODE_DEFAULT: u32 = 0;

/// `NVML_PSTATE_0` (`nvmlPstates_t`): maximum performance.
pub const NVML_PSTATE_0: u32 = 0;

/// `NVML_DEVICE_ARCH_VOLTA` (`nvmlDeviceArchitecture_t`).
pub const NVML_DEVICE_ARCH_VOLTA: u32 = 5;
/// `NVML_DEVICE_ARCH_TURING`.
pub const NVML_DEVICE_ARCH_TURING: u32 = 6;
/// `NVML_DEVICE_ARCH_AMPERE`.
pub const NVML_DEVICE_ARCH_AMPERE: u32 = 7;
/// `NVML_DEVICE_ARCH_ADA`.
pub const NVML_DEVICE_ARCH_ADA: u32 = 8;
/// `NVML_DEVICE_ARCH_HOPPER`.
pub const NVML_DEVICE_ARCH_HOPPER: u32 = 9;
/// `NVML_DEVICE_ARCH_BLACKWELL`.
pub const NVML_DEVICE_ARCH_BLACKWELL: u32 = 10;
/// `NVML_DEVICE_ARCH_UNKNOWN`.
pub const NVML_DEVICE_ARCH_UNKNOWN: u32 = 0xffff_ffff;

/// What `gpuInstanceId` and `computeInstanceId` of `nvmlProcessInfo_t` hold when MIG is off (`0xFFFFFFFF`).
pub const INSTANCE_ID_NONE: u32 = 0xffff_ffff;

/// `nvmlPciInfo_t`: PCI attributes of a device.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlPciInfo {
    /// `busIdLegacy`: `domain:bus:device.function` as `%04X:%02X:%02X.0`, NUL-terminated.
    pub bus_id_legacy: [u8; NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
    /// `domain`: PCI domain.
    pub domain: u32,
    /// `bus`: PCI bus, 0 to 0xff.
    pub bus: u32,
    /// `device`: device number on the bus, 0 to 31.
    pub device: u32,
    /// `pciDeviceId`: 16-bit device id in the high half, 16-bit vendor id in the low half.
    pub pci_device_id: u32,
    /// `pciSubSystemId`: 32-bit subsystem device id.
    pub pci_sub_system_id: u32,
    /// `busId`: `domain:bus:device.function` as `%08X:%02X:%02X.0`, NUL-terminated.
    pub bus_id: [u8; NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
}

/// Bytes of [`NvmlPciInfo`] that older layouts of `nvmlPciInfo_t` (taken by `nvmlDeviceGetPciInfo` and
/// `_v2`) share with the current one: everything before `busId`.
pub const NVML_PCI_INFO_LEGACY_PREFIX: usize = offset_of!(NvmlPciInfo, bus_id);

/// `nvmlPciInfoExt_v1_t`: PCI attributes including class codes (`nvmlDeviceGetPciInfoExt`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlPciInfoExtV1 {
    /// `version`: must be [`NVML_PCI_INFO_EXT_V1`].
    pub version: u32,
    /// `domain`: PCI domain.
    pub domain: u32,
    /// `bus`: PCI bus, 0 to 0xff.
    pub bus: u32,
    /// `device`: device number on the bus, 0 to 31.
    pub device: u32,
    /// `pciDeviceId`: 16-bit device id in the high half, 16-bit vendor id in the low half.
    pub pci_device_id: u32,
    /// `pciSubSystemId`: 32-bit subsystem device id.
    pub pci_sub_system_id: u32,
    /// `baseClass`: 8-bit PCI base class code.
    pub base_class: u32,
    /// `subClass`: 8-bit PCI sub class code.
    pub sub_class: u32,
    /// `busId`: `domain:bus:device.function` as `%08X:%02X:%02X.0`, NUL-terminated.
    pub bus_id: [u8; NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
}

/// `nvmlPciInfoExt_v1`: the version value of [`NvmlPciInfoExtV1`].
pub const NVML_PCI_INFO_EXT_V1: u32 = struct_version(size_of::<NvmlPciInfoExtV1>(), 1);

/// `nvmlMemory_t`: device memory figures (v1), in bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlMemory {
    /// `total`: physical device memory.
    pub total: u64,
    /// `free`: unallocated device memory.
    pub free: u64,
    /// `used`: reserved plus allocated device memory.
    pub used: u64,
}

/// `nvmlMemory_v2_t`: device memory figures with the system reservation, in bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlMemoryV2 {
    /// `version`: must be [`NVML_MEMORY_V2`].
    pub version: u32,
    /// `total`: physical device memory.
    pub total: u64,
    /// `reserved`: memory reserved for system use (driver or firmware).
    pub reserved: u64,
    /// `free`: unallocated device memory.
    pub free: u64,
    /// `used`: allocated device memory.
    pub used: u64,
}

/// `nvmlMemory_v2`: the version value of [`NvmlMemoryV2`].
pub const NVML_MEMORY_V2: u32 = struct_version(size_of::<NvmlMemoryV2>(), 2);

/// `nvmlUtilization_t`: percent of the last sample period the device was busy.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlUtilization {
    /// `gpu`: percent of time one or more kernels ran.
    pub gpu: u32,
    /// `memory`: percent of time device memory was read or written.
    pub memory: u32,
}

/// `nvmlProcessInfo_v1_t`: a process using a device, as `nvmlDeviceGetComputeRunningProcesses` (v1) reports it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlProcessInfoV1 {
    /// `pid`: process id.
    pub pid: u32,
    /// `usedGpuMemory`: device memory the process uses, in bytes.
    pub used_gpu_memory: u64,
}

/// `nvmlProcessInfo_v2_t`: a process using a device, as the `_v2` running-process queries report it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlProcessInfoV2 {
    /// `pid`: process id.
    pub pid: u32,
    /// `usedGpuMemory`: device memory the process uses, in bytes.
    pub used_gpu_memory: u64,
    /// `gpuInstanceId`: MIG GPU instance, or [`INSTANCE_ID_NONE`].
    pub gpu_instance_id: u32,
    /// `computeInstanceId`: MIG compute instance, or [`INSTANCE_ID_NONE`].
    pub compute_instance_id: u32,
}

/// `nvmlProcessInfo_t`, taken by the `_v3` running-process queries: the same layout as `nvmlProcessInfo_v2_t`.
pub type NvmlProcessInfo = NvmlProcessInfoV2;

/// `nvmlProcessUtilizationSample_t`: one process's utilization (`nvmlDeviceGetProcessUtilization`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlProcessUtilizationSample {
    /// `pid`: process id.
    pub pid: u32,
    /// `timeStamp`: CPU time of the sample, in microseconds.
    pub time_stamp: u64,
    /// `smUtil`: SM utilization, percent.
    pub sm_util: u32,
    /// `memUtil`: frame buffer memory utilization, percent.
    pub mem_util: u32,
    /// `encUtil`: encoder utilization, percent.
    pub enc_util: u32,
    /// `decUtil`: decoder utilization, percent.
    pub dec_util: u32,
}

/// `nvmlProcessUtilizationInfo_v1_t`: one process's utilization (`nvmlDeviceGetProcessesUtilizationInfo`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlProcessUtilizationInfoV1 {
    /// `timeStamp`: CPU time of the sample, in microseconds.
    pub time_stamp: u64,
    /// `pid`: process id.
    pub pid: u32,
    /// `smUtil`: SM utilization, percent.
    pub sm_util: u32,
    /// `memUtil`: frame buffer memory utilization, percent.
    pub mem_util: u32,
    /// `encUtil`: encoder utilization, percent.
    pub enc_util: u32,
    /// `decUtil`: decoder utilization, percent.
    pub dec_util: u32,
    /// `jpgUtil`: JPEG engine utilization, percent.
    pub jpg_util: u32,
    /// `ofaUtil`: optical flow engine utilization, percent.
    pub ofa_util: u32,
}

/// `nvmlProcessesUtilizationInfo_v1_t`: the request and answer of `nvmlDeviceGetProcessesUtilizationInfo`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlProcessesUtilizationInfoV1 {
    /// `version`: must be [`NVML_PROCESSES_UTILIZATION_INFO_V1`].
    pub version: u32,
    /// `processSamplesCount`: caller's array size in, number of samples out.
    pub process_samples_count: u32,
    /// `lastSeenTimeStamp`: only samples newer than this (microseconds) are returned.
    pub last_seen_time_stamp: u64,
    /// `procUtilArray`: the caller's array.
    pub proc_util_array: *mut NvmlProcessUtilizationInfoV1,
}

/// `nvmlProcessesUtilizationInfo_v1`: the version value of [`NvmlProcessesUtilizationInfoV1`].
pub const NVML_PROCESSES_UTILIZATION_INFO_V1: u32 = struct_version(size_of::<NvmlProcessesUtilizationInfoV1>(), 1);

// The header's layouts (x86-64 and aarch64 Linux), checked at compile time.
const _: () = {
    assert!(size_of::<NvmlPciInfo>() == 68);
    assert!(NVML_PCI_INFO_LEGACY_PREFIX == 36);
    assert!(size_of::<NvmlPciInfoExtV1>() == 64);
    assert!(size_of::<NvmlMemory>() == 24);
    assert!(size_of::<NvmlMemoryV2>() == 40);
    assert!(NVML_MEMORY_V2 == (40 | (2 << 24)));
    assert!(size_of::<NvmlUtilization>() == 8);
    assert!(size_of::<NvmlProcessInfoV1>() == 16);
    assert!(size_of::<NvmlProcessInfoV2>() == 24);
    assert!(size_of::<NvmlProcessUtilizationSample>() == 32);
    assert!(size_of::<NvmlProcessUtilizationInfoV1>() == 40);
    assert!(size_of::<NvmlProcessesUtilizationInfoV1>() == 24);
};

// MIG GPU instance profiles (`nvmlDeviceGetGpuInstanceProfileInfo` and `…InfoV`): read by `tessera info`,
// answered by the simulated NVML.

/// `nvmlGpuInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceProfileInfo {
    /// Profile id.
    pub id: u32,
    /// Whether peer-to-peer transfers work between instances.
    pub is_p2p_supported: u32,
    /// GPU slices the profile takes.
    pub slice_count: u32,
    /// Instances of it that fit on the device.
    pub instance_count: u32,
    /// SMs of one instance.
    pub multiprocessor_count: u32,
    /// Copy engines.
    pub copy_engine_count: u32,
    /// Decoders.
    pub decoder_count: u32,
    /// Encoders.
    pub encoder_count: u32,
    /// JPEG decoders.
    pub jpeg_count: u32,
    /// Optical-flow accelerators.
    pub ofa_count: u32,
    /// Memory of one instance in MiB.
    pub memory_size_mb: u64,
}

/// Length of the `name` field of the versioned profile structs (`NVML_DEVICE_NAME_V2_BUFFER_SIZE`).
pub const GPU_INSTANCE_PROFILE_NAME_LEN: usize = 96;

/// `nvmlGpuInstanceProfileInfo_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceProfileInfoV2 {
    /// [`GPU_INSTANCE_PROFILE_INFO_V2`].
    pub version: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub id: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub is_p2p_supported: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub slice_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub instance_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub multiprocessor_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub copy_engine_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub decoder_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub encoder_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub jpeg_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub ofa_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub memory_size_mb: u64,
    /// The profile's name, e.g. `MIG 1g.10gb`, NUL-terminated.
    pub name: [c_char; GPU_INSTANCE_PROFILE_NAME_LEN],
}

/// `nvmlGpuInstanceProfileInfo_v3_t` (no `isP2pSupported`; a `capabilities` word at the end).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceProfileInfoV3 {
    /// [`GPU_INSTANCE_PROFILE_INFO_V3`].
    pub version: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub id: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub slice_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub instance_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub multiprocessor_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub copy_engine_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub decoder_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub encoder_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub jpeg_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub ofa_count: u32,
    /// As in [`NvmlGpuInstanceProfileInfo`].
    pub memory_size_mb: u64,
    /// As in [`NvmlGpuInstanceProfileInfoV2`].
    pub name: [c_char; GPU_INSTANCE_PROFILE_NAME_LEN],
    /// `NVML_GPU_INSTANCE_PROFILE_CAPS_*` bits; none apply here.
    pub capabilities: u32,
}

// The header's sizes on 64-bit Linux.
const _: () = assert!(size_of::<NvmlGpuInstanceProfileInfo>() == 48);
const _: () = assert!(size_of::<NvmlGpuInstanceProfileInfoV2>() == 152);
const _: () = assert!(size_of::<NvmlGpuInstanceProfileInfoV3>() == 152);

/// `nvmlGpuInstanceProfileInfo_v2` (`NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)`).
pub const GPU_INSTANCE_PROFILE_INFO_V2: u32 = struct_version(size_of::<NvmlGpuInstanceProfileInfoV2>(), 2);
/// `nvmlGpuInstanceProfileInfo_v3` (`NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3)`).
pub const GPU_INSTANCE_PROFILE_INFO_V3: u32 = struct_version(size_of::<NvmlGpuInstanceProfileInfoV3>(), 3);

mod instances;
mod topology;
pub use instances::*;
pub use topology::*;
