//! Per-device query exports: identity, PCI, memory, activity, sensors, clocks and modes. The figures come
//! from [`crate::facts`]; this module only checks arguments and writes answers.

use crate::guard::Target;
use crate::{facts, guard, mig_device, out};
use std::ffi::{c_char, c_int, c_uint};
use tessera_ffi::nvml::{
    NVML_COMPUTEMODE_DEFAULT, NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INVALID_ARGUMENT, NVML_FEATURE_ENABLED,
    NVML_MEMORY_V2, NVML_PCI_INFO_EXT_V1, NVML_PCI_INFO_LEGACY_PREFIX, NVML_PSTATE_0, NVML_TEMPERATURE_GPU, NvmlDevice,
    NvmlMemory, NvmlMemoryV2, NvmlPciInfo, NvmlPciInfoExtV1, NvmlReturn, NvmlUtilization,
};

/// Defines exports of the form `f(device, *out) -> nvmlReturn_t` that write one value computed from the
/// runtime (`rt`) and the device's configuration (`dev`).
macro_rules! value_exports {
    ($($(#[$doc:meta])* $name:ident -> $ty:ty = |$rt:pat_param, $dev:pat_param| $value:expr;)*) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(device: NvmlDevice, value: *mut $ty) -> NvmlReturn {
                guard::device(device, |$rt, $dev| {
                    let v: $ty = $value;
                    // SAFETY: `value` is NULL or writable for one value (crate safety contract).
                    unsafe { out::write(value, v) }
                })
            }
        )*
    };
}

value_exports! {
    /// `nvmlDeviceGetIndex`: the device's ordinal.
    nvmlDeviceGetIndex -> c_uint = |_, dev| dev.ordinal;
    /// `nvmlDeviceGetMinorNumber`: the device's ordinal (as `/dev/nvidiaN`).
    nvmlDeviceGetMinorNumber -> c_uint = |_, dev| dev.ordinal;
    /// `nvmlDeviceGetPciInfo_v3`: PCI ids and bus ids.
    nvmlDeviceGetPciInfo_v3 -> NvmlPciInfo = |_, dev| facts::pci_info(dev);
    /// `nvmlDeviceGetUtilizationRates`: engine busy percentage over the last second, and memory activity.
    nvmlDeviceGetUtilizationRates -> NvmlUtilization = |rt, dev| facts::utilization(&rt.state, dev);
    /// `nvmlDeviceGetPowerUsage`: draw in milliwatts, rising with activity.
    nvmlDeviceGetPowerUsage -> c_uint = |rt, dev| facts::power_mw(&rt.state, dev);
    /// `nvmlDeviceGetPowerManagementLimit`: the profile's board power, in milliwatts.
    nvmlDeviceGetPowerManagementLimit -> c_uint = |_, dev| facts::power_limit_mw(dev);
    /// `nvmlDeviceGetPowerManagementDefaultLimit`: the profile's board power, in milliwatts.
    nvmlDeviceGetPowerManagementDefaultLimit -> c_uint = |_, dev| facts::power_limit_mw(dev);
    /// `nvmlDeviceGetEnforcedPowerLimit`: the profile's board power, in milliwatts.
    nvmlDeviceGetEnforcedPowerLimit -> c_uint = |_, dev| facts::power_limit_mw(dev);
    /// `nvmlDeviceGetPowerManagementMode`: enabled.
    nvmlDeviceGetPowerManagementMode -> u32 = |_, _| NVML_FEATURE_ENABLED;
    /// `nvmlDeviceGetPersistenceMode`: enabled.
    nvmlDeviceGetPersistenceMode -> u32 = |_, _| NVML_FEATURE_ENABLED;
    /// `nvmlDeviceGetComputeMode`: default (any number of contexts).
    nvmlDeviceGetComputeMode -> u32 = |_, _| NVML_COMPUTEMODE_DEFAULT;
    /// `nvmlDeviceGetPerformanceState`: P0.
    nvmlDeviceGetPerformanceState -> u32 = |_, _| NVML_PSTATE_0;
    /// `nvmlDeviceGetMultiGpuBoard`: 0 (one GPU per board).
    nvmlDeviceGetMultiGpuBoard -> c_uint = |_, _| 0;
    /// `nvmlDeviceGetMemoryBusWidth`: the profile's bus width in bits.
    nvmlDeviceGetMemoryBusWidth -> c_uint = |_, dev| dev.profile.memory_bus_width;
    /// `nvmlDeviceGetArchitecture`: from the compute capability.
    nvmlDeviceGetArchitecture -> u32 = |_, dev| facts::architecture(dev);
}

/// `nvmlDeviceGetName`: the profile's marketing name; a MIG device's is followed by its MIG profile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: NvmlDevice, name: *mut c_char, length: c_uint) -> NvmlReturn {
    guard::any_device(device, |_, target| {
        let text = match target {
            Target::Gpu(dev) => dev.profile.name.to_string(),
            Target::Mig(dev, gi, ci) => mig_device::name(dev, &gi, &ci),
        };
        // SAFETY: the caller passes `length` writable bytes at `name` (crate safety contract).
        unsafe { out::write_str(name, length, &text) }
    })
}

/// `nvmlDeviceGetUUID`: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, the same in every process; a MIG device's
/// is `MIG-…` ([`mig_device::uuid`]).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: NvmlDevice, uuid: *mut c_char, length: c_uint) -> NvmlReturn {
    guard::any_device(device, |_, target| {
        let text = match target {
            Target::Gpu(dev) => dev.uuid_string(),
            Target::Mig(dev, gi, ci) => mig_device::uuid(dev, &gi, &ci),
        };
        // SAFETY: the caller passes `length` writable bytes at `uuid` (crate safety contract).
        unsafe { out::write_str(uuid, length, &text) }
    })
}

/// The memory figures of a GPU or MIG device.
fn memory_of(rt: &crate::runtime::Runtime, target: Target) -> NvmlMemory {
    match target {
        Target::Gpu(dev) => facts::memory(&rt.state, dev),
        Target::Mig(_, gi, _) => mig_device::memory(&gi),
    }
}

/// `nvmlDeviceGetMemoryInfo`: total, free and used (allocations plus context reservations of every process);
/// for a MIG device its GPU instance's memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut NvmlMemory) -> NvmlReturn {
    guard::any_device(device, |rt, target| {
        // SAFETY: `memory` is NULL or writable (crate safety contract).
        unsafe { out::write(memory, memory_of(rt, target)) }
    })
}

/// `nvmlDeviceGetPciInfo` (v1): the fields older `nvmlPciInfo_t` layouts share (everything before `busId`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(device: NvmlDevice, pci: *mut NvmlPciInfo) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlDeviceGetPciInfo_v2(device, pci) }
}

/// `nvmlDeviceGetPciInfo_v2`: as [`nvmlDeviceGetPciInfo`]; callers of the current layout use `_v3`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(device: NvmlDevice, pci: *mut NvmlPciInfo) -> NvmlReturn {
    guard::device(device, |_, dev| {
        // SAFETY: `pci` is NULL or an old-layout nvmlPciInfo_t, which holds at least the legacy prefix.
        unsafe { out::write_prefix(pci, &facts::pci_info(dev), NVML_PCI_INFO_LEGACY_PREFIX) }
    })
}

/// `nvmlDeviceGetPciInfoExt`: PCI ids, bus id and class codes; checks the struct's `version`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfoExt(device: NvmlDevice, pci: *mut NvmlPciInfoExtV1) -> NvmlReturn {
    guard::device(device, |_, dev| {
        // SAFETY: `pci` is NULL or points to an nvmlPciInfoExt_t whose version the caller set.
        unsafe { check_version(pci.cast::<u32>(), NVML_PCI_INFO_EXT_V1) }?;
        // SAFETY: as above; the struct is writable.
        unsafe { out::write(pci, facts::pci_info_ext(dev)) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: as [`nvmlDeviceGetMemoryInfo`] with `reserved` 0 (MIG devices too); checks the struct's
/// `version` (`nvmlMemory_v2`), answering `NVML_ERROR_ARGUMENT_VERSION_MISMATCH` otherwise.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, memory: *mut NvmlMemoryV2) -> NvmlReturn {
    guard::any_device(device, |rt, target| {
        // SAFETY: `memory` is NULL or points to an nvmlMemory_v2_t whose version the caller set.
        unsafe { check_version(memory.cast::<u32>(), NVML_MEMORY_V2) }?;
        let m = memory_of(rt, target);
        let v2 = NvmlMemoryV2 { version: NVML_MEMORY_V2, total: m.total, reserved: 0, free: m.free, used: m.used };
        // SAFETY: as above; the struct is writable.
        unsafe { out::write(memory, v2) }
    })
}

/// Checks the leading `version` field of a versioned NVML struct.
///
/// # Safety
/// `version` is NULL or readable.
unsafe fn check_version(version: *const u32, expected: u32) -> out::Outcome {
    if version.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL; the caller guarantees it is readable.
    if unsafe { version.read() } == expected { Ok(()) } else { Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH) }
}

/// `nvmlDeviceGetTemperature`: the GPU die temperature in °C, rising with activity; only
/// `NVML_TEMPERATURE_GPU` is a valid sensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(device: NvmlDevice, sensor: u32, temp: *mut c_uint) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if sensor != NVML_TEMPERATURE_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: `temp` is NULL or writable (crate safety contract).
        unsafe { out::write(temp, facts::temperature_c(&rt.state, dev)) }
    })
}

/// `nvmlDeviceGetClockInfo`: current clock of a domain in MHz (see [`crate::facts`] for how it moves).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(device: NvmlDevice, clock_type: u32, clock: *mut c_uint) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        let mhz = facts::clock_mhz(&rt.state, dev, clock_type).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: `clock` is NULL or writable (crate safety contract).
        unsafe { out::write(clock, mhz) }
    })
}

/// `nvmlDeviceGetMaxClockInfo`: the highest clock of a domain in MHz, from the profile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: NvmlDevice,
    clock_type: u32,
    clock: *mut c_uint,
) -> NvmlReturn {
    guard::device(device, |_, dev| {
        let mhz = facts::max_clock_mhz(dev, clock_type).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: `clock` is NULL or writable (crate safety contract).
        unsafe { out::write(clock, mhz) }
    })
}

/// `nvmlDeviceGetCudaComputeCapability`: the profile's compute capability.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    guard::device(device, |_, dev| {
        if major.is_null() || minor.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let (ma, mi) = dev.profile.compute_capability;
        // SAFETY: both are writable (crate safety contract) and not NULL.
        unsafe {
            out::write(major, ma as c_int)?;
            out::write(minor, mi as c_int)
        }
    })
}
