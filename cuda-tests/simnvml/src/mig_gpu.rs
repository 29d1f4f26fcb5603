//! MIG mode and GPU instances: `nvmlDeviceGetMigMode`/`SetMigMode`, the GPU instance capacity and placement
//! queries, and creating, listing, describing and destroying GPU instances, on the machine-wide MIG state
//! ([`simgpu::mig_state`]) with NVIDIA's placement rules ([`simgpu::mig`]).
//!
//! As on a real driver, changing the partitioning (MIG mode, creating or destroying instances) needs root
//! (`NVML_ERROR_NO_PERMISSION` otherwise); the queries answer everyone. A simulated machine starts with the
//! MIG modes `SIMGPU_MIG` names, so tests need no root to turn MIG on. Profile ids are NVML's
//! `nvmlGpuInstanceProfileInfo_t::id` (19 for `1g.10gb`, …), as these entry points take them.

use crate::{guard, handles, out};
use simgpu::DeviceConfig;
use simgpu::mig::{self, GpuInstance, MigError};
use simgpu::profile::MigProfile;
use std::ffi::c_uint;
use std::sync::atomic::Ordering;
use tessera_ffi::nvml::{
    NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE, NVML_ERROR_IN_USE, NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NO_PERMISSION, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS, NvmlDevice, NvmlGpuInstance, NvmlGpuInstanceInfo, NvmlGpuInstancePlacement, NvmlReturn,
};

/// The NVML return code for `e`.
pub fn code(e: MigError) -> NvmlReturn {
    match e {
        MigError::NotEnabled => NVML_ERROR_NOT_SUPPORTED,
        MigError::Invalid => NVML_ERROR_INVALID_ARGUMENT,
        MigError::Insufficient => NVML_ERROR_INSUFFICIENT_RESOURCES,
        MigError::InUse => NVML_ERROR_IN_USE,
        MigError::NotFound => NVML_ERROR_NOT_FOUND,
    }
}

/// `NVML_ERROR_NO_PERMISSION` unless the caller is root, as the driver answers partitioning changes.
pub fn privileged() -> out::Outcome {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 { Ok(()) } else { Err(NVML_ERROR_NO_PERMISSION) }
}

/// `NVML_ERROR_NOT_SUPPORTED` unless the device has MIG mode on.
fn mig_on(rt: &crate::runtime::Runtime, dev: &DeviceConfig) -> out::Outcome {
    if dev.profile.mig_capable && rt.mig.device(dev.ordinal as usize).enabled {
        Ok(())
    } else {
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
}

/// The device's GPU instance profile with id `id`.
fn profile_by_id(dev: &DeviceConfig, id: c_uint) -> Option<&'static MigProfile> {
    dev.profile.mig_profiles.iter().find(|m| m.id == id)
}

/// `nvmlGpuInstanceInfo_t` of `gi` on `dev`.
fn info_of(dev: &DeviceConfig, gi: &GpuInstance) -> NvmlGpuInstanceInfo {
    NvmlGpuInstanceInfo {
        device: handles::handle(dev.ordinal as usize),
        id: gi.id,
        profile_id: gi.profile.id,
        placement: NvmlGpuInstancePlacement { start: gi.start, size: gi.profile.memory_slices },
    }
}

/// `nvmlDeviceGetMigMode`: the device's MIG mode, current and pending (the same: a mode change takes effect
/// at once here); `NVML_ERROR_NOT_SUPPORTED` on models without MIG.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if !dev.profile.mig_capable {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if current_mode.is_null() || pending_mode.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let mode =
            if rt.mig.device(dev.ordinal as usize).enabled { NVML_DEVICE_MIG_ENABLE } else { NVML_DEVICE_MIG_DISABLE };
        // SAFETY: both are writable (crate safety contract) and not NULL.
        unsafe {
            out::write(current_mode, mode)?;
            out::write(pending_mode, mode)
        }
    })
}

/// `nvmlDeviceSetMigMode`: root only. The mode takes effect at once unless the device is busy — processes
/// hold contexts on it, or (turning MIG off) GPU instances exist — when `*activationStatus` is
/// `NVML_ERROR_IN_USE` and the mode stays as it was.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: NvmlDevice,
    mode: c_uint,
    activation_status: *mut NvmlReturn,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if !dev.profile.mig_capable {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        if activation_status.is_null() || (mode != NVML_DEVICE_MIG_ENABLE && mode != NVML_DEVICE_MIG_DISABLE) {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        privileged()?;
        let ordinal = dev.ordinal as usize;
        rt.state.reclaim_dead();
        let busy = rt.state.processes().any(|p| p.contexts[ordinal].load(Ordering::Acquire) > 0);
        let status = if busy {
            NVML_ERROR_IN_USE
        } else {
            rt.mig.set_mode(ordinal, mode == NVML_DEVICE_MIG_ENABLE).map_or_else(code, |()| NVML_SUCCESS)
        };
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(activation_status, status) }
    })
}

/// `nvmlDeviceGetGpuInstanceRemainingCapacity`: how many more instances of profile `profile_id` fit now.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: NvmlDevice,
    profile_id: c_uint,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        mig_on(rt, dev)?;
        let profile = profile_by_id(dev, profile_id).ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        let existing: Vec<GpuInstance> =
            rt.mig.device(dev.ordinal as usize).gpu_instances.iter().map(|(g, _)| *g).collect();
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(count, mig::remaining_capacity(profile, &existing)) }
    })
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: every placement the profile allows, taken or not
/// (`nvidia-smi mig -lgipp`); with `placements` NULL only the count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: NvmlDevice,
    profile_id: c_uint,
    placements: *mut NvmlGpuInstancePlacement,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        mig_on(rt, dev)?;
        let profile = profile_by_id(dev, profile_id).ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        let list: Vec<NvmlGpuInstancePlacement> = profile
            .placements
            .iter()
            .map(|&start| NvmlGpuInstancePlacement { start, size: profile.memory_slices })
            .collect();
        // SAFETY: `placements` is NULL or holds one element per placement the profile has (nvml.h asks the
        // caller for that room); `count` is writable.
        unsafe { out::write_all(count, placements, &list) }
    })
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements` (the deprecated unversioned name): as
/// [`nvmlDeviceGetGpuInstancePossiblePlacements_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements(
    device: NvmlDevice,
    profile_id: c_uint,
    placements: *mut NvmlGpuInstancePlacement,
    count: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profile_id, placements, count) }
}

/// Creates a GPU instance at `placement` (or where the driver chooses) and writes its handle.
fn create(
    device: NvmlDevice,
    profile_id: c_uint,
    placement: Option<*const NvmlGpuInstancePlacement>,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if gpu_instance.is_null() || placement.is_some_and(|p| p.is_null()) {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        privileged()?;
        mig_on(rt, dev)?;
        let profile = profile_by_id(dev, profile_id).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let start = match placement {
            // SAFETY: checked not NULL above; readable (crate safety contract).
            Some(p) => match unsafe { p.read() } {
                NvmlGpuInstancePlacement { start, size } if size == profile.memory_slices => Some(start),
                _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
            },
            None => None,
        };
        let ordinal = dev.ordinal as usize;
        let gi = rt.mig.create_gpu_instance(ordinal, profile, start).map_err(code)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(gpu_instance, handles::gpu_instance(ordinal, gi.id)) }
    })
}

/// `nvmlDeviceCreateGpuInstance`: a new instance of profile `profile_id` on the highest free placement;
/// `NVML_ERROR_INSUFFICIENT_RESOURCES` when none is free.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: NvmlDevice,
    profile_id: c_uint,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    create(device, profile_id, None, gpu_instance)
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`: a new instance at `placement`, which must be one of the
/// profile's (`NVML_ERROR_INVALID_ARGUMENT`) and free (`NVML_ERROR_INSUFFICIENT_RESOURCES`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: NvmlDevice,
    profile_id: c_uint,
    placement: *const NvmlGpuInstancePlacement,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    create(device, profile_id, Some(placement), gpu_instance)
}

/// `nvmlGpuInstanceDestroy`: root only; `NVML_ERROR_IN_USE` while it has compute instances.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: NvmlGpuInstance) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |rt, dev, gi, _| {
        privileged()?;
        rt.mig.destroy_gpu_instance(dev.ordinal as usize, gi.id).map_err(code)
    })
}

/// `nvmlDeviceGetGpuInstances`: the instances of profile `profile_id`, by id. `gpu_instances` must hold the
/// profile's instance count (as nvml.h asks); `*count` is set to how many were written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: NvmlDevice,
    profile_id: c_uint,
    gpu_instances: *mut NvmlGpuInstance,
    count: *mut c_uint,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if gpu_instances.is_null() || count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        mig_on(rt, dev)?;
        let profile = profile_by_id(dev, profile_id).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let ordinal = dev.ordinal as usize;
        let list: Vec<NvmlGpuInstance> = rt
            .mig
            .device(ordinal)
            .gpu_instances
            .iter()
            .filter(|(g, _)| g.profile.id == profile.id)
            .map(|(g, _)| handles::gpu_instance(ordinal, g.id))
            .collect();
        // SAFETY: `gpu_instances` holds the profile's instance count, which bounds `list`; `count` is writable.
        unsafe { out::write_all(count, gpu_instances, &list) }
    })
}

/// `nvmlDeviceGetGpuInstanceById`: the instance with id `id`; `NVML_ERROR_NOT_FOUND` when there is none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: NvmlDevice,
    id: c_uint,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if gpu_instance.is_null() || id as usize >= mig::MAX_GPU_INSTANCES {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        mig_on(rt, dev)?;
        let ordinal = dev.ordinal as usize;
        rt.mig.device(ordinal).gpu_instance(id).ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(gpu_instance, handles::gpu_instance(ordinal, id)) }
    })
}

/// `nvmlGpuInstanceGetInfo`: parent device, id, profile id and placement.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: NvmlGpuInstance,
    info: *mut NvmlGpuInstanceInfo,
) -> NvmlReturn {
    guard::gpu_instance(gpu_instance, |_, dev, gi, _| {
        // SAFETY: `info` is NULL or writable (crate safety contract).
        unsafe { out::write(info, info_of(dev, &gi)) }
    })
}
