//! What a simulated device reports: identity from its profile, memory and activity from the shared state,
//! and sensor readings derived from that activity.
//!
//! Derivations (all from the busy percentage of the last second, `utilization_percent`):
//! - memory-controller activity: half the SM activity (kernels spend part of their time on memory traffic);
//! - temperature: 30 °C idle, rising by 1 °C per 2 % of activity, to 80 °C;
//! - power: a tenth of the board's power figure idle, rising linearly to the full figure at 100 %;
//! - clocks: graphics, SM and video run at their maximum while busy and at a fifth of it when idle; the
//!   memory clock always runs at its maximum; the video clock's maximum is nine tenths of the SM clock's.

use crate::pci;
use simgpu::{DeviceConfig, SharedState};
use std::sync::atomic::Ordering;
use tessera_ffi::nvml::{
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_MEM, NVML_CLOCK_SM, NVML_CLOCK_VIDEO, NVML_DEVICE_ARCH_ADA,
    NVML_DEVICE_ARCH_AMPERE, NVML_DEVICE_ARCH_BLACKWELL, NVML_DEVICE_ARCH_HOPPER, NVML_DEVICE_ARCH_TURING,
    NVML_DEVICE_ARCH_UNKNOWN, NVML_DEVICE_ARCH_VOLTA, NVML_PCI_INFO_EXT_V1, NvmlMemory, NvmlPciInfo, NvmlPciInfoExtV1,
    NvmlUtilization,
};

/// Busy percentage (0..=100) of the device over the last second.
pub fn activity(state: &SharedState, dev: &DeviceConfig) -> u32 {
    state.utilization_percent(dev.ordinal as usize)
}

/// Memory-controller activity accompanying `sm_percent` of SM activity.
pub fn memory_activity(sm_percent: u32) -> u32 {
    sm_percent / 2
}

/// `nvmlUtilization_t` of the device.
pub fn utilization(state: &SharedState, dev: &DeviceConfig) -> NvmlUtilization {
    let gpu = activity(state, dev);
    NvmlUtilization { gpu, memory: memory_activity(gpu) }
}

/// Total, used and free device memory: used is every process's allocations and context reservations,
/// after reclaiming what dead processes held.
pub fn memory(state: &SharedState, dev: &DeviceConfig) -> NvmlMemory {
    state.reclaim_dead();
    let d = state.device(dev.ordinal as usize);
    let total = d.total_memory.load(Ordering::Acquire);
    let used = d.used_memory.load(Ordering::Acquire);
    NvmlMemory { total, used, free: total.saturating_sub(used) }
}

/// `nvmlPciInfo_t` of the device.
pub fn pci_info(dev: &DeviceConfig) -> NvmlPciInfo {
    let a = pci::Address::of(dev);
    let (pci_device_id, pci_sub_system_id) = pci::ids(dev);
    NvmlPciInfo {
        bus_id_legacy: pci::c_array(&pci::legacy_bus_id(dev)),
        domain: a.domain,
        bus: a.bus,
        device: a.device,
        pci_device_id,
        pci_sub_system_id,
        bus_id: pci::c_array(&dev.pci_bus_id()),
    }
}

/// `nvmlPciInfoExt_v1_t` of the device.
pub fn pci_info_ext(dev: &DeviceConfig) -> NvmlPciInfoExtV1 {
    let p = pci_info(dev);
    NvmlPciInfoExtV1 {
        version: NVML_PCI_INFO_EXT_V1,
        domain: p.domain,
        bus: p.bus,
        device: p.device,
        pci_device_id: p.pci_device_id,
        pci_sub_system_id: p.pci_sub_system_id,
        base_class: pci::CLASS_DISPLAY,
        sub_class: pci::SUBCLASS_3D,
        bus_id: p.bus_id,
    }
}

/// GPU die temperature in °C.
pub fn temperature_c(state: &SharedState, dev: &DeviceConfig) -> u32 {
    30 + activity(state, dev) / 2
}

/// Power limit in milliwatts: the profile's board power.
pub fn power_limit_mw(dev: &DeviceConfig) -> u32 {
    dev.profile.power_mw
}

/// Power draw in milliwatts.
pub fn power_mw(state: &SharedState, dev: &DeviceConfig) -> u32 {
    let max = u64::from(power_limit_mw(dev));
    let idle = max / 10;
    (idle + (max - idle) * u64::from(activity(state, dev)) / 100) as u32
}

/// Highest clock of domain `clock` (an `nvmlClockType_t`) in MHz; `None` for an unknown domain.
pub fn max_clock_mhz(dev: &DeviceConfig, clock: u32) -> Option<u32> {
    let sm = dev.profile.clock_khz / 1000;
    match clock {
        NVML_CLOCK_GRAPHICS | NVML_CLOCK_SM => Some(sm),
        NVML_CLOCK_MEM => Some(dev.profile.memory_clock_khz / 1000),
        NVML_CLOCK_VIDEO => Some(sm * 9 / 10),
        _ => None,
    }
}

/// Current clock of domain `clock` in MHz; `None` for an unknown domain.
pub fn clock_mhz(state: &SharedState, dev: &DeviceConfig, clock: u32) -> Option<u32> {
    let max = max_clock_mhz(dev, clock)?;
    let busy = activity(state, dev) > 0;
    Some(if clock == NVML_CLOCK_MEM || busy { max } else { max / 5 })
}

/// `nvmlDeviceArchitecture_t` of the device's compute capability.
pub fn architecture(dev: &DeviceConfig) -> u32 {
    match dev.profile.compute_capability {
        (7, 0..=2) => NVML_DEVICE_ARCH_VOLTA,
        (7, _) => NVML_DEVICE_ARCH_TURING,
        (8, 9) => NVML_DEVICE_ARCH_ADA,
        (8, _) => NVML_DEVICE_ARCH_AMPERE,
        (9, _) => NVML_DEVICE_ARCH_HOPPER,
        (10 | 12, _) => NVML_DEVICE_ARCH_BLACKWELL,
        _ => NVML_DEVICE_ARCH_UNKNOWN,
    }
}
