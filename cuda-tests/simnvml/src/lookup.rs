//! Exports that enumerate devices and turn indices, UUIDs and PCI bus ids into handles.

use crate::{guard, handles, mig_device, out, pci};
use std::ffi::{c_char, c_uint};
use tessera_ffi::nvml::{NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND, NvmlDevice, NvmlReturn};

/// `nvmlDeviceGetCount` (v1): same as [`nvmlDeviceGetCount_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount(device_count: *mut c_uint) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlDeviceGetCount_v2(device_count) }
}

/// `nvmlDeviceGetCount_v2`: the number of configured devices.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> NvmlReturn {
    guard::initialized(|rt| {
        // SAFETY: `device_count` is NULL or writable (crate safety contract).
        unsafe { out::write(device_count, rt.config.devices.len() as c_uint) }
    })
}

/// `nvmlDeviceGetHandleByIndex` (v1): same as [`nvmlDeviceGetHandleByIndex_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// `nvmlDeviceGetHandleByIndex_v2`: the handle of device `index`; `NVML_ERROR_INVALID_ARGUMENT` past the count.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut NvmlDevice) -> NvmlReturn {
    guard::initialized(|rt| {
        let dev = rt.device(index as usize)?;
        // SAFETY: `device` is NULL or writable (crate safety contract).
        unsafe { out::write(device, handles::handle(dev.ordinal as usize)) }
    })
}

/// `nvmlDeviceGetHandleByUUID`: the device whose `GPU-…` UUID, or MIG device whose `MIG-…` UUID, matches
/// (ignoring case);
/// `NVML_ERROR_INVALID_ARGUMENT` for text that is no UUID, `NVML_ERROR_NOT_FOUND` when none matches.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut NvmlDevice) -> NvmlReturn {
    guard::initialized(|rt| {
        // SAFETY: `uuid` is NULL or a NUL-terminated string (crate safety contract).
        let text = unsafe { out::read_str(uuid) }?.trim();
        let prefix = text.get(..4).unwrap_or_default();
        if !prefix.eq_ignore_ascii_case("GPU-") && !prefix.eq_ignore_ascii_case("MIG-") {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let gpu = rt.config.devices.iter().find(|d| d.uuid_string().eq_ignore_ascii_case(text));
        let found = gpu.map(|d| handles::handle(d.ordinal as usize)).or_else(|| {
            // A MIG device's UUID names it (a MIG device handle), as NVML allows since MIG exists.
            rt.config.devices.iter().find_map(|d| {
                let ordinal = d.ordinal as usize;
                let mig = rt.mig.device(ordinal);
                let (gi, ci) = mig.mig_devices().find(|(g, c)| mig_device::uuid(d, g, c).eq_ignore_ascii_case(text))?;
                Some(handles::mig_device(ordinal, gi.id, ci.id))
            })
        });
        // SAFETY: `device` is NULL or writable (crate safety contract).
        unsafe { out::write(device, found.ok_or(NVML_ERROR_NOT_FOUND)?) }
    })
}

/// `nvmlDeviceGetHandleByPciBusId` (v1): same as [`nvmlDeviceGetHandleByPciBusId_v2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    pci_bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device) }
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: the device at a bus id given as `domain:bus:device.function`,
/// `domain:bus:device` or `bus:device.function` (hexadecimal); `NVML_ERROR_INVALID_ARGUMENT` for other
/// text, `NVML_ERROR_NOT_FOUND` when no device sits there.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pci_bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard::initialized(|rt| {
        // SAFETY: `pci_bus_id` is NULL or a NUL-terminated string (crate safety contract).
        let text = unsafe { out::read_str(pci_bus_id) }?;
        let address = pci::Address::parse(text).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let dev = rt.config.devices.iter().find(|d| pci::Address::of(d) == address);
        let dev = dev.ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: `device` is NULL or writable (crate safety contract).
        unsafe { out::write(device, handles::handle(dev.ordinal as usize)) }
    })
}
