//! MIG GPU and compute instances (`nvmlDeviceCreateGpuInstance`, `nvmlGpuInstanceCreateComputeInstance` and
//! their queries), as `nvml.h` lays out their handles, placements and information structs.

use super::{GPU_INSTANCE_PROFILE_NAME_LEN, NvmlDevice, struct_version};
use std::ffi::c_char;
use std::mem::size_of;

/// Opaque target of `nvmlGpuInstance_t` (`struct nvmlGpuInstance_st`).
#[repr(C)]
pub struct NvmlGpuInstanceSt {
    _opaque: [u8; 0],
}

/// `nvmlGpuInstance_t`: an opaque GPU instance handle.
pub type NvmlGpuInstance = *mut NvmlGpuInstanceSt;

/// Opaque target of `nvmlComputeInstance_t` (`struct nvmlComputeInstance_st`).
#[repr(C)]
pub struct NvmlComputeInstanceSt {
    _opaque: [u8; 0],
}

/// `nvmlComputeInstance_t`: an opaque compute instance handle.
pub type NvmlComputeInstance = *mut NvmlComputeInstanceSt;

/// `nvmlGpuInstancePlacement_t`: where a GPU instance sits among the device's memory slices.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmlGpuInstancePlacement {
    /// Index of the first memory slice it occupies.
    pub start: u32,
    /// Memory slices it occupies.
    pub size: u32,
}

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceInfo {
    /// The parent device.
    pub device: NvmlDevice,
    /// Instance id, unique within the device.
    pub id: u32,
    /// The GPU instance profile id it was created with.
    pub profile_id: u32,
    /// Its placement.
    pub placement: NvmlGpuInstancePlacement,
}

/// `nvmlComputeInstancePlacement_t`: where a compute instance sits among its GPU instance's compute slices.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NvmlComputeInstancePlacement {
    /// Index of the first compute slice it occupies.
    pub start: u32,
    /// Compute slices it occupies.
    pub size: u32,
}

/// `nvmlComputeInstanceInfo_t` (the layout `nvmlComputeInstanceGetInfo_v2` fills; the unversioned
/// `nvmlComputeInstanceGetInfo` fills everything before `placement`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlComputeInstanceInfo {
    /// The parent device.
    pub device: NvmlDevice,
    /// The parent GPU instance.
    pub gpu_instance: NvmlGpuInstance,
    /// Instance id, unique within the GPU instance.
    pub id: u32,
    /// The compute instance profile id it was created with.
    pub profile_id: u32,
    /// Its placement within the GPU instance's compute slices.
    pub placement: NvmlComputeInstancePlacement,
}

/// Bytes of `nvmlComputeInstanceInfo_t` before `placement`: what the unversioned `nvmlComputeInstanceGetInfo`
/// writes.
pub const COMPUTE_INSTANCE_INFO_V1_SIZE: usize = std::mem::offset_of!(NvmlComputeInstanceInfo, placement);

/// `nvmlComputeInstanceProfileInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmlComputeInstanceProfileInfo {
    /// Profile id, unique within the GPU instance.
    pub id: u32,
    /// Compute slices the profile takes.
    pub slice_count: u32,
    /// Instances of it that fit in the GPU instance.
    pub instance_count: u32,
    /// SMs of one instance.
    pub multiprocessor_count: u32,
    /// Copy engines shared with the GPU instance.
    pub shared_copy_engine_count: u32,
    /// Decoders shared with the GPU instance.
    pub shared_decoder_count: u32,
    /// Encoders shared with the GPU instance.
    pub shared_encoder_count: u32,
    /// JPEG decoders shared with the GPU instance.
    pub shared_jpeg_count: u32,
    /// Optical-flow accelerators shared with the GPU instance.
    pub shared_ofa_count: u32,
}

/// `nvmlComputeInstanceProfileInfo_v2_t`: the version word, [`NvmlComputeInstanceProfileInfo`]'s fields and
/// the profile's name.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlComputeInstanceProfileInfoV2 {
    /// [`COMPUTE_INSTANCE_PROFILE_INFO_V2`].
    pub version: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub id: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub slice_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub instance_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub multiprocessor_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub shared_copy_engine_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub shared_decoder_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub shared_encoder_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub shared_jpeg_count: u32,
    /// As in [`NvmlComputeInstanceProfileInfo`].
    pub shared_ofa_count: u32,
    /// The profile's name, e.g. `MIG 1c.3g.40gb`, NUL-terminated.
    pub name: [c_char; GPU_INSTANCE_PROFILE_NAME_LEN],
}

/// `nvmlComputeInstanceProfileInfo_v2` (`NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)`).
pub const COMPUTE_INSTANCE_PROFILE_INFO_V2: u32 = struct_version(size_of::<NvmlComputeInstanceProfileInfoV2>(), 2);

/// `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`: compute instance profile values are below it.
pub const NVML_COMPUTE_INSTANCE_PROFILE_COUNT: u32 = 0x8;
/// `NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED`: every engine but the SMs shared; the only engine profile.
pub const NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED: u32 = 0x0;

// The header's sizes on 64-bit Linux.
const _: () = {
    assert!(size_of::<NvmlGpuInstancePlacement>() == 8);
    assert!(size_of::<NvmlGpuInstanceInfo>() == 24);
    assert!(size_of::<NvmlComputeInstancePlacement>() == 8);
    assert!(size_of::<NvmlComputeInstanceInfo>() == 32);
    assert!(COMPUTE_INSTANCE_INFO_V1_SIZE == 24);
    assert!(size_of::<NvmlComputeInstanceProfileInfo>() == 36);
    assert!(size_of::<NvmlComputeInstanceProfileInfoV2>() == 136);
};
