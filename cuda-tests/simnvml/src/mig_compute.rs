//! Compute instances of a MIG GPU instance: their profiles (the whole GPU instance, and one compute slice on
//! larger ones; see [`simgpu::mig`]), capacity and placements, and creating, listing, describing and
//! destroying them. Creating and destroying need root, as for GPU instances ([`crate::mig_gpu`]).

use crate::mig_gpu::{code, privileged};
use crate::{guard, handles, out};
use simgpu::DeviceConfig;
use simgpu::mig::{self, CiProfile, ComputeInstance, GpuInstance};
use std::ffi::{c_char, c_uint};
use tessera_ffi::nvml::{
    COMPUTE_INSTANCE_INFO_V1_SIZE, COMPUTE_INSTANCE_PROFILE_INFO_V2, GPU_INSTANCE_PROFILE_NAME_LEN,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
    NvmlComputeInstance, NvmlComputeInstanceInfo, NvmlComputeInstancePlacement, NvmlComputeInstanceProfileInfo,
    NvmlComputeInstanceProfileInfoV2, NvmlGpuInstance, NvmlReturn,
};

/// The GPU instance's compute instance profile `profile`: `NVML_ERROR_INVALID_ARGUMENT` past the defined
/// values, `NVML_ERROR_NOT_SUPPORTED` for one it does not offer.
fn ci_profile(gi: &GpuInstance, profile: c_uint) -> Result<CiProfile, NvmlReturn> {
    if profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    mig::ci_profile(gi.profile, profile).ok_or(NVML_ERROR_NOT_SUPPORTED)
}

fn profile_info(dev: &DeviceConfig, gi: &GpuInstance, ci: CiProfile) -> NvmlComputeInstanceProfileInfo {
    let [copy, decoders, encoders, jpegs, ofas] = gi.profile.engines;
    NvmlComputeInstanceProfileInfo {
        id: ci.nvml_profile,
        slice_count: ci.slices,
        instance_count: gi.profile.slices / ci.slices,
        multiprocessor_count: mig::ci_sm_count(dev.profile, gi.profile, ci),
        shared_copy_engine_count: copy,
        shared_decoder_count: decoders,
        shared_encoder_count: encoders,
        shared_jpeg_count: jpegs,
        shared_ofa_count: ofas,
    }
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfo`: compute instance profile `profile` of the GPU instance;
/// `eng_profile` must be `NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: NvmlGpuInstance,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut NvmlComputeInstanceProfileInfo,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, dev, gi, _| {
        if info.is_null() || eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let ci = ci_profile(&gi, profile)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(info, profile_info(dev, &gi, ci)) }
    })
}

/// `nvmlGpuInstanceGetComputeInstanceProfileInfoV`: as the unversioned query with the profile's name, in the
/// v2 layout (`NVML_ERROR_ARGUMENT_VERSION_MISMATCH` for any other version).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpu_instance: NvmlGpuInstance,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut NvmlComputeInstanceProfileInfoV2,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, dev, gi, _| {
        if info.is_null() || eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: not NULL; the caller set the leading version word (crate safety contract).
        if unsafe { info.cast::<u32>().read() } != COMPUTE_INSTANCE_PROFILE_INFO_V2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let ci = ci_profile(&gi, profile)?;
        let i = profile_info(dev, &gi, ci);
        let mut name = [0 as c_char; GPU_INSTANCE_PROFILE_NAME_LEN];
        for (dst, b) in
            name.iter_mut().zip(mig::ci_name(gi.profile, ci).bytes().take(GPU_INSTANCE_PROFILE_NAME_LEN - 1))
        {
            *dst = b as c_char;
        }
        let v2 = NvmlComputeInstanceProfileInfoV2 {
            version: COMPUTE_INSTANCE_PROFILE_INFO_V2,
            id: i.id,
            slice_count: i.slice_count,
            instance_count: i.instance_count,
            multiprocessor_count: i.multiprocessor_count,
            shared_copy_engine_count: i.shared_copy_engine_count,
            shared_decoder_count: i.shared_decoder_count,
            shared_encoder_count: i.shared_encoder_count,
            shared_jpeg_count: i.shared_jpeg_count,
            shared_ofa_count: i.shared_ofa_count,
            name,
        };
        // SAFETY: a v2 struct by its version, writable (crate safety contract).
        unsafe { out::write(info, v2) }
    })
}

/// `nvmlGpuInstanceGetComputeInstanceRemainingCapacity`: how many more compute instances of `profile_id`
/// fit in the GPU instance now.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, _, gi, cis| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let ci = ci_profile(&gi, profile_id)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(count, mig::ci_remaining_capacity(ci, gi.profile, &cis)) }
    })
}

/// `nvmlGpuInstanceGetComputeInstancePossiblePlacements`: every placement of `profile_id` in the GPU
/// instance, taken or not; with `placements` NULL only the count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    placements: *mut NvmlComputeInstancePlacement,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, _, gi, _| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let ci = ci_profile(&gi, profile_id)?;
        let list: Vec<NvmlComputeInstancePlacement> = (0..=gi.profile.slices - ci.slices)
            .step_by(ci.slices as usize)
            .map(|start| NvmlComputeInstancePlacement { start, size: ci.slices })
            .collect();
        // SAFETY: `placements` is NULL or holds one element per placement (nvml.h asks the caller for that
        // room); `count` is writable.
        unsafe { out::write_all(count, placements, &list) }
    })
}

/// `nvmlGpuInstanceCreateComputeInstance`: root only; a new compute instance of `profile_id` on the lowest
/// free compute slices, `NVML_ERROR_INSUFFICIENT_RESOURCES` when none are.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |rt, dev, gi, _| {
        if compute_instance.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        privileged()?;
        let ci = ci_profile(&gi, profile_id)?;
        let ordinal = dev.ordinal as usize;
        let c = rt.mig.create_compute_instance(ordinal, gi.id, ci).map_err(code)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(compute_instance, handles::compute_instance(ordinal, gi.id, c.id)) }
    })
}

/// `nvmlGpuInstanceGetComputeInstances`: the compute instances of `profile_id`, by id. `compute_instances`
/// must hold the profile's instance count (as nvml.h asks); `*count` is set to how many were written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    compute_instances: *mut NvmlComputeInstance,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, dev, gi, cis| {
        if compute_instances.is_null() || count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let ci = ci_profile(&gi, profile_id)?;
        let list: Vec<NvmlComputeInstance> = cis
            .iter()
            .filter(|c| c.profile == ci)
            .map(|c| handles::compute_instance(dev.ordinal as usize, gi.id, c.id))
            .collect();
        // SAFETY: the array holds the profile's instance count, which bounds `list`; `count` is writable.
        unsafe { out::write_all(count, compute_instances, &list) }
    })
}

/// `nvmlGpuInstanceGetComputeInstanceById`: the compute instance `id`; `NVML_ERROR_NOT_FOUND` when none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: NvmlGpuInstance,
    id: c_uint,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, dev, gi, cis| {
        if compute_instance.is_null() || id as usize >= mig::MAX_COMPUTE_INSTANCES {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        cis.iter().find(|c| c.id == id).ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(compute_instance, handles::compute_instance(dev.ordinal as usize, gi.id, id)) }
    })
}

fn info_of(dev: &DeviceConfig, gi: &GpuInstance, ci: &ComputeInstance) -> NvmlComputeInstanceInfo {
    let ordinal = dev.ordinal as usize;
    NvmlComputeInstanceInfo {
        device: handles::handle(ordinal),
        gpu_instance: handles::gpu_instance(ordinal, gi.id),
        id: ci.id,
        profile_id: ci.profile.nvml_profile,
        placement: NvmlComputeInstancePlacement { start: ci.start, size: ci.profile.slices },
    }
}

/// `nvmlComputeInstanceGetInfo_v2`: parent device and GPU instance, id, profile id and placement.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: NvmlComputeInstance,
    info: *mut NvmlComputeInstanceInfo,
) -> NvmlReturn {
    guard::compute_instance(compute_instance, |_, dev, gi, ci| {
        // SAFETY: `info` is NULL or writable (crate safety contract).
        unsafe { out::write(info, info_of(dev, &gi, &ci)) }
    })
}

/// `nvmlComputeInstanceGetInfo` (the first version): as [`nvmlComputeInstanceGetInfo_v2`] without the
/// placement, which its struct lacks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo(
    compute_instance: NvmlComputeInstance,
    info: *mut NvmlComputeInstanceInfo,
) -> NvmlReturn {
    guard::compute_instance(compute_instance, |_, dev, gi, ci| {
        // SAFETY: `info` is NULL or a first-version struct, the prefix before `placement`.
        unsafe { out::write_prefix(info, &info_of(dev, &gi, &ci), COMPUTE_INSTANCE_INFO_V1_SIZE) }
    })
}

/// `nvmlComputeInstanceDestroy`: root only. No process runs inside a simulated MIG device, so it is never
/// `NVML_ERROR_IN_USE`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(compute_instance: NvmlComputeInstance) -> NvmlReturn {
    guard::compute_instance(compute_instance, |rt, dev, gi, ci| {
        privileged()?;
        rt.mig.destroy_compute_instance(dev.ordinal as usize, gi.id, ci.id).map_err(code)
    })
}
