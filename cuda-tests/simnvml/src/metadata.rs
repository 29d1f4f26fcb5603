//! Device metadata exports beyond the basic queries: CUDA core count and the MIG GPU instance profiles, from
//! the device's profile. The profile queries describe what MIG offers on any MIG-capable device, whether its
//! MIG mode is on or not (tools list profiles before turning MIG on); the instances themselves are in
//! [`crate::mig_gpu`].

use crate::{guard, out};
use simgpu::DeviceConfig;
use simgpu::profile::MigProfile;
use std::ffi::{c_char, c_uint};
use tessera_ffi::nvml::{
    GPU_INSTANCE_PROFILE_INFO_V2, GPU_INSTANCE_PROFILE_INFO_V3, GPU_INSTANCE_PROFILE_NAME_LEN as NAME_LEN,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NvmlDevice,
    NvmlGpuInstanceProfileInfo, NvmlGpuInstanceProfileInfoV2, NvmlGpuInstanceProfileInfoV3, NvmlReturn,
};

/// CUDA cores per SM of a compute capability, as NVIDIA's architecture documents give them.
fn cores_per_sm(cc: (u32, u32)) -> Option<u32> {
    match cc {
        (7, _) | (8, 0) => Some(64),
        (8, _) | (9, 0) | (10, _) | (12, _) => Some(128),
        _ => None,
    }
}

/// The device's MIG profile selected by `profile` (an `NVML_GPU_INSTANCE_PROFILE_*` value):
/// `NVML_ERROR_NOT_SUPPORTED` on a device without MIG or for a profile the model lacks.
fn mig_profile(dev: &DeviceConfig, profile: c_uint) -> Result<&'static MigProfile, NvmlReturn> {
    dev.profile.mig_profiles.iter().find(|m| m.nvml_profile == profile).ok_or(NVML_ERROR_NOT_SUPPORTED)
}

/// The unversioned answer for `m`.
fn info_of(m: &MigProfile) -> NvmlGpuInstanceProfileInfo {
    let [copy, decoders, encoders, jpegs, ofas] = m.engines;
    NvmlGpuInstanceProfileInfo {
        id: m.id,
        is_p2p_supported: 0,
        slice_count: m.slices,
        instance_count: m.instances,
        multiprocessor_count: m.sm_count,
        copy_engine_count: copy,
        decoder_count: decoders,
        encoder_count: encoders,
        jpeg_count: jpegs,
        ofa_count: ofas,
        memory_size_mb: m.memory_mib,
    }
}

/// `MIG <name>` as a NUL-padded C array.
fn name_of(m: &MigProfile) -> [c_char; NAME_LEN] {
    let mut name = [0 as c_char; NAME_LEN];
    for (dst, b) in name.iter_mut().zip(format!("MIG {}", m.name).bytes().take(NAME_LEN - 1)) {
        *dst = b as c_char;
    }
    name
}

/// `nvmlDeviceGetNumGpuCores`: SMs times the CUDA cores per SM of the compute capability;
/// `NVML_ERROR_NOT_SUPPORTED` for an architecture without a known figure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumGpuCores(device: NvmlDevice, cores: *mut c_uint) -> NvmlReturn {
    guard::device(device, |_, dev| {
        let per_sm = cores_per_sm(dev.profile.compute_capability).ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        // SAFETY: `cores` is NULL or writable (crate safety contract).
        unsafe { out::write(cores, dev.sm_count * per_sm) }
    })
}

/// `nvmlDeviceGetGpuInstanceProfileInfo`: the model's GPU instance profile `profile`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: NvmlDevice,
    profile: c_uint,
    info: *mut NvmlGpuInstanceProfileInfo,
) -> NvmlReturn {
    guard::device(device, |_, dev| {
        if info.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let m = mig_profile(dev, profile)?;
        // SAFETY: `info` is writable for one struct (crate safety contract) and not NULL.
        unsafe { out::write(info, info_of(m)) }
    })
}

/// `nvmlDeviceGetGpuInstanceProfileInfoV`: as [`nvmlDeviceGetGpuInstanceProfileInfo`] with the profile's
/// name, in the `v2` or `v3` layout the struct's `version` names (`NVML_ERROR_ARGUMENT_VERSION_MISMATCH`
/// for any other).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: NvmlDevice,
    profile: c_uint,
    info: *mut NvmlGpuInstanceProfileInfoV2,
) -> NvmlReturn {
    guard::device(device, |_, dev| {
        if info.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: not NULL; the caller set the leading version word of its struct (crate safety contract).
        let version = unsafe { info.cast::<u32>().read() };
        if version != GPU_INSTANCE_PROFILE_INFO_V2 && version != GPU_INSTANCE_PROFILE_INFO_V3 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let m = mig_profile(dev, profile)?;
        let i = info_of(m);
        if version == GPU_INSTANCE_PROFILE_INFO_V3 {
            let v3 = NvmlGpuInstanceProfileInfoV3 {
                version,
                id: i.id,
                slice_count: i.slice_count,
                instance_count: i.instance_count,
                multiprocessor_count: i.multiprocessor_count,
                copy_engine_count: i.copy_engine_count,
                decoder_count: i.decoder_count,
                encoder_count: i.encoder_count,
                jpeg_count: i.jpeg_count,
                ofa_count: i.ofa_count,
                memory_size_mb: i.memory_size_mb,
                name: name_of(m),
                capabilities: 0,
            };
            // SAFETY: the caller's version says its struct is a v3 one, writable (crate safety contract).
            return unsafe { out::write(info.cast::<NvmlGpuInstanceProfileInfoV3>(), v3) };
        }
        let v2 = NvmlGpuInstanceProfileInfoV2 {
            version,
            id: i.id,
            is_p2p_supported: i.is_p2p_supported,
            slice_count: i.slice_count,
            instance_count: i.instance_count,
            multiprocessor_count: i.multiprocessor_count,
            copy_engine_count: i.copy_engine_count,
            decoder_count: i.decoder_count,
            encoder_count: i.encoder_count,
            jpeg_count: i.jpeg_count,
            ofa_count: i.ofa_count,
            memory_size_mb: i.memory_size_mb,
            name: name_of(m),
        };
        // SAFETY: a v2 struct, writable (crate safety contract).
        unsafe { out::write(info, v2) }
    })
}
