//! Device handles: pointers into a static table, one byte per possible device, so a handle can be validated
//! by its address alone and stays the same across `nvmlShutdown`/`nvmlInit`, as real NVML's do. GPU
//! instance, compute instance and MIG device handles are made the same way from tables with one byte per
//! possible instance id; whether the instance still exists is the caller's check (a handle of a destroyed
//! instance is invalid until an instance with the same ids is made again, as NVML allows).

use simgpu::config::MAX_DEVICES;
use simgpu::mig::{MAX_COMPUTE_INSTANCES as CIS, MAX_GPU_INSTANCES as GIS};
use tessera_ffi::nvml::{NVML_ERROR_INVALID_ARGUMENT, NvmlComputeInstance, NvmlDevice, NvmlGpuInstance, NvmlReturn};

/// The table whose element addresses are the handles. Never read or written through a handle.
static SLOTS: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

/// The handle of device `ordinal` (which must be below [`MAX_DEVICES`]).
pub fn handle(ordinal: usize) -> NvmlDevice {
    // Handles are opaque to callers; the cast only lends them the C pointer type.
    (&SLOTS[ordinal] as *const u8).cast_mut().cast()
}

/// The ordinal `handle` stands for; `NVML_ERROR_INVALID_ARGUMENT` when it is not one of ours.
/// Whether that device exists under the current configuration is the caller's check.
pub fn ordinal(handle: NvmlDevice) -> Result<usize, NvmlReturn> {
    let offset = (handle as usize).wrapping_sub(SLOTS.as_ptr() as usize);
    if offset < MAX_DEVICES { Ok(offset) } else { Err(NVML_ERROR_INVALID_ARGUMENT) }
}

static GPU_INSTANCES: [u8; MAX_DEVICES * GIS] = [0; MAX_DEVICES * GIS];
static COMPUTE_INSTANCES: [u8; MAX_DEVICES * GIS * CIS] = [0; MAX_DEVICES * GIS * CIS];
static MIG_DEVICES: [u8; MAX_DEVICES * GIS * CIS] = [0; MAX_DEVICES * GIS * CIS];

fn slot_of(table: &[u8], index: usize) -> *mut u8 {
    (&table[index] as *const u8).cast_mut()
}

fn index_in(table: &[u8], handle: usize) -> Option<usize> {
    let offset = handle.wrapping_sub(table.as_ptr() as usize);
    (offset < table.len()).then_some(offset)
}

/// The handle of GPU instance `gi` of device `ordinal`.
pub fn gpu_instance(ordinal: usize, gi: u32) -> NvmlGpuInstance {
    slot_of(&GPU_INSTANCES, ordinal * GIS + gi as usize).cast()
}

/// The device ordinal and GPU instance id `handle` stands for; `NVML_ERROR_INVALID_ARGUMENT` when it is
/// not one of ours.
pub fn gpu_instance_ids(handle: NvmlGpuInstance) -> Result<(usize, u32), NvmlReturn> {
    let i = index_in(&GPU_INSTANCES, handle as usize).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    Ok((i / GIS, (i % GIS) as u32))
}

fn triple(ordinal: usize, gi: u32, ci: u32) -> usize {
    (ordinal * GIS + gi as usize) * CIS + ci as usize
}

fn split(i: usize) -> (usize, u32, u32) {
    (i / (GIS * CIS), ((i / CIS) % GIS) as u32, (i % CIS) as u32)
}

/// The handle of compute instance `ci` of GPU instance `gi` of device `ordinal`.
pub fn compute_instance(ordinal: usize, gi: u32, ci: u32) -> NvmlComputeInstance {
    slot_of(&COMPUTE_INSTANCES, triple(ordinal, gi, ci)).cast()
}

/// The device ordinal, GPU instance id and compute instance id `handle` stands for.
pub fn compute_instance_ids(handle: NvmlComputeInstance) -> Result<(usize, u32, u32), NvmlReturn> {
    index_in(&COMPUTE_INSTANCES, handle as usize).map(split).ok_or(NVML_ERROR_INVALID_ARGUMENT)
}

/// The MIG device handle of compute instance `ci` of GPU instance `gi` of device `ordinal`.
pub fn mig_device(ordinal: usize, gi: u32, ci: u32) -> NvmlDevice {
    slot_of(&MIG_DEVICES, triple(ordinal, gi, ci)).cast()
}

/// The device ordinal, GPU instance id and compute instance id of a MIG device handle; `None` for any
/// other pointer.
pub fn mig_device_ids(handle: NvmlDevice) -> Option<(usize, u32, u32)> {
    index_in(&MIG_DEVICES, handle as usize).map(split)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_foreign_pointers_are_rejected() {
        for i in 0..MAX_DEVICES {
            assert_eq!(ordinal(handle(i)), Ok(i));
        }
        assert!(ordinal(std::ptr::null_mut()).is_err());
        assert!(ordinal((handle(0) as usize - 1) as NvmlDevice).is_err());
        assert!(ordinal((handle(MAX_DEVICES - 1) as usize + 1) as NvmlDevice).is_err());
    }

    #[test]
    fn instance_handles_round_trip() {
        assert_eq!(gpu_instance_ids(gpu_instance(3, 13)), Ok((3, 13)));
        assert_eq!(compute_instance_ids(compute_instance(15, 15, 7)), Ok((15, 15, 7)));
        assert_eq!(mig_device_ids(mig_device(2, 9, 0)), Some((2, 9, 0)));
        assert_eq!(mig_device_ids(handle(2)), None);
        assert!(ordinal(mig_device(0, 0, 0)).is_err());
        assert!(gpu_instance_ids(std::ptr::null_mut()).is_err());
    }
}
