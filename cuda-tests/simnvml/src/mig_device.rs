//! MIG devices: each compute instance, seen as a device of its own. Their handles
//! (`nvmlDeviceGetMigDeviceHandleByIndex`), what they answer (`MIG-…` UUIDs, names and memory, used by
//! [`crate::device`]) and the way back to the instances and the parent GPU.
//!
//! A MIG device's UUID is derived from its device, instance ids and creation number, so every process sees
//! the same one while it exists and a recreated instance gets a new one, as the driver does.

use crate::guard::{self, Target};
use crate::{handles, out};
use simgpu::DeviceConfig;
use simgpu::mig::{self, ComputeInstance, GpuInstance};
use std::ffi::c_uint;
use tessera_ffi::nvml::{
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, NvmlDevice, NvmlMemory, NvmlReturn,
};

/// `MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of a MIG device.
pub fn uuid(dev: &DeviceConfig, gi: &GpuInstance, ci: &ComputeInstance) -> String {
    let mut u = [0u8; 16];
    u[..4].copy_from_slice(b"SIMM");
    u[4] = dev.ordinal as u8;
    u[5] = gi.id as u8;
    u[6] = ci.id as u8;
    u[8..].copy_from_slice(&ci.serial.to_be_bytes());
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("MIG-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A MIG device's name: the GPU's followed by its profile, e.g. `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
pub fn name(dev: &DeviceConfig, gi: &GpuInstance, ci: &ComputeInstance) -> String {
    format!("{} {}", dev.profile.name, mig::ci_name(gi.profile, ci.profile))
}

/// A MIG device's memory: its GPU instance's, all free (no process runs inside a simulated MIG device).
pub fn memory(gi: &GpuInstance) -> NvmlMemory {
    let total = gi.profile.memory_mib << 20;
    NvmlMemory { total, free: total, used: 0 }
}

/// `nvmlDeviceGetMaxMigDeviceCount`: with MIG on, one per compute slice (7); 0 when MIG is off or absent,
/// as NVML answers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: NvmlDevice, count: *mut c_uint) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        let on = dev.profile.mig_capable && rt.mig.device(dev.ordinal as usize).enabled;
        // SAFETY: `count` is NULL or writable (crate safety contract).
        unsafe { out::write(count, if on { mig::COMPUTE_SLICES } else { 0 }) }
    })
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`: the `index`-th MIG device of the GPU (by GPU instance id, then
/// compute instance id); `NVML_ERROR_NOT_FOUND` past the last, `NVML_ERROR_INVALID_ARGUMENT` past the
/// maximum count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig_device: *mut NvmlDevice,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if mig_device.is_null() || index >= mig::COMPUTE_SLICES {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let ordinal = dev.ordinal as usize;
        let state = rt.mig.device(ordinal);
        if !dev.profile.mig_capable || !state.enabled {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        let (gi, ci) = state.mig_devices().nth(index as usize).ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: not NULL and writable (crate safety contract).
        unsafe { out::write(mig_device, handles::mig_device(ordinal, gi.id, ci.id)) }
    })
}

/// `nvmlDeviceIsMigDeviceHandle`: 1 for a MIG device handle, 0 for a GPU's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: NvmlDevice, is_mig_device: *mut c_uint) -> NvmlReturn {
    guard::any_device(device, |_, target| {
        // SAFETY: `is_mig_device` is NULL or writable (crate safety contract).
        unsafe { out::write(is_mig_device, matches!(target, Target::Mig(..)) as c_uint) }
    })
}

/// Writes `id` of a MIG device handle's instances; `NVML_ERROR_NOT_SUPPORTED` for a whole GPU.
fn instance_id(device: NvmlDevice, id: *mut c_uint, pick: fn(&GpuInstance, &ComputeInstance) -> u32) -> NvmlReturn {
    guard::any_device(device, |_, target| match target {
        // SAFETY: `id` is NULL or writable (crate safety contract).
        Target::Mig(_, gi, ci) => unsafe { out::write(id, pick(&gi, &ci)) },
        Target::Gpu(_) if id.is_null() => Err(NVML_ERROR_INVALID_ARGUMENT),
        Target::Gpu(_) => Err(NVML_ERROR_NOT_SUPPORTED),
    })
}

/// `nvmlDeviceGetGpuInstanceId`: the GPU instance id of a MIG device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: NvmlDevice, id: *mut c_uint) -> NvmlReturn {
    instance_id(device, id, |gi, _| gi.id)
}

/// `nvmlDeviceGetComputeInstanceId`: the compute instance id of a MIG device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: NvmlDevice, id: *mut c_uint) -> NvmlReturn {
    instance_id(device, id, |_, ci| ci.id)
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: the GPU a MIG device belongs to;
/// `NVML_ERROR_INVALID_ARGUMENT` for a handle that is no MIG device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: NvmlDevice,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard::any_device(mig_device, |_, target| match target {
        // SAFETY: `device` is NULL or writable (crate safety contract).
        Target::Mig(dev, ..) => unsafe { out::write(device, handles::handle(dev.ordinal as usize)) },
        Target::Gpu(_) => Err(NVML_ERROR_INVALID_ARGUMENT),
    })
}
