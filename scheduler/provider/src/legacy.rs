//! The earlier ABI's entry points (`include/accelerator_legacy.h`): a thin adapter onto the same
//! implementation as [`crate::exports`]. Where the two ABIs share a signature and layout the call is
//! forwarded; otherwise only the argument shapes differ (a `PartitionAssignment` in and out, a `bool`
//! answer, a `workerId` naming the vGPU, a fixed `ProcessArray`).

use crate::abi::current::ACCEL_SUCCESS;
use crate::abi::current::{AccelResult, DeviceMetrics, LogCallback, ProcessInformation};
use crate::abi::legacy::*;
use crate::exports;
use crate::guard::{Fail, entry, non_null};
use crate::limits::{Limit, Target};
use crate::snapshot::Scope;
use crate::{context, devices, limits, partitions, snapshot, text, topology};
use std::ffi::c_char;

/// `VirtualGPUInit`: as `AccelInit`.
#[unsafe(no_mangle)]
pub extern "C" fn VirtualGPUInit() -> AccelResult {
    exports::AccelInit()
}

/// `GetDeviceCount`: as `AccelGetDeviceCount`.
///
/// # Safety
/// As `AccelGetDeviceCount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetDeviceCount(device_count: *mut usize) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { exports::AccelGetDeviceCount(device_count) }
}

/// `GetAllDevices`: the earlier `ExtendedDeviceInfo`.
///
/// # Safety
/// `devices` is NULL or holds `max_count` writable entries; `device_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetAllDevices(
    devices: *mut ExtendedDeviceInfo,
    max_count: usize,
    device_count: *mut usize,
) -> AccelResult {
    entry("GetAllDevices", || {
        non_null(devices, "devices")?;
        non_null(device_count, "deviceCount")?;
        if max_count == 0 {
            return Err(Fail::invalid("maxCount is 0"));
        }
        let reports = devices::reports(&*context::get()?);
        let n = reports.len().min(max_count);
        for (i, r) in reports.iter().take(n).enumerate() {
            // SAFETY: i < max_count entries the caller provides.
            let slot = unsafe { &mut *devices.add(i) };
            // SAFETY: all-zero bytes are a valid ExtendedDeviceInfo.
            *slot = unsafe { std::mem::zeroed() };
            devices::fill_legacy(slot, r);
        }
        // SAFETY: checked non-NULL.
        unsafe { *device_count = n };
        Ok(())
    })
}

/// `GetDeviceTopology`: the devices of `device_index_array`.
///
/// # Safety
/// `device_index_array` is NULL or holds `device_count` entries; `topology` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetDeviceTopology(
    device_index_array: *mut i32,
    device_count: usize,
    topology: *mut ExtendedDeviceTopology,
) -> AccelResult {
    entry("GetDeviceTopology", || {
        non_null(device_index_array, "deviceIndexArray")?;
        non_null(topology, "topology")?;
        if device_count == 0 {
            return Err(Fail::invalid("deviceCount is 0"));
        }
        // SAFETY: device_count entries, as the caller guarantees.
        let indices = unsafe { std::slice::from_raw_parts(device_index_array, device_count) }.to_vec();
        // SAFETY: checked non-NULL; the caller's struct; all-zero bytes are a valid value of it.
        let out = unsafe { &mut *topology };
        // SAFETY: as above.
        *out = unsafe { std::mem::zeroed() };
        topology::fill_legacy(&*context::get()?, &indices, out)
    })
}

/// `AssignPartition`: true when the partition was made (its UUID in `partitionUUID`).
///
/// # Safety
/// `assignment` is NULL or valid, its strings NUL-terminated within their arrays.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AssignPartition(assignment: *mut PartitionAssignment) -> bool {
    entry("AssignPartition", || {
        non_null(assignment, "assignment")?;
        // SAFETY: checked non-NULL; the caller's struct.
        let a = unsafe { &mut *assignment };
        let (template, device) = (text::get(&a.template_id), text::get(&a.device_uuid));
        if template.is_empty() || device.is_empty() {
            return Err(Fail::invalid("templateId and deviceUUID are required"));
        }
        let made = partitions::assign(&*context::get()?, &template, &device)?;
        text::put(&mut a.partition_uuid, &made.uuid);
        Ok(())
    }) == ACCEL_SUCCESS
}

/// `RemovePartition`: true when removed.
///
/// # Safety
/// The strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RemovePartition(template_id: *const c_char, device_uuid: *const c_char) -> bool {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { exports::AccelRemovePartition(template_id, device_uuid) == ACCEL_SUCCESS }
}

/// A legacy hard limit for worker `worker_id` (its vGPU's name).
///
/// # Safety
/// The strings are NULL or NUL-terminated.
unsafe fn worker_limit(name: &str, worker_id: *const c_char, device_uuid: *const c_char, limit: Limit) -> AccelResult {
    entry(name, || {
        // SAFETY: NULL or NUL-terminated, as the caller guarantees.
        let (worker, device) = unsafe { (text::arg(worker_id, "workerId")?, text::arg(device_uuid, "deviceUUID")?) };
        limits::check(limit)?;
        limits::set(&*context::get()?, &Target::Worker(worker), &device, limit)
    })
}

/// `SetMemHardLimit`: the worker's vGPU memory quota.
///
/// # Safety
/// The strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn SetMemHardLimit(
    worker_id: *const c_char,
    device_uuid: *const c_char,
    memory_limit_bytes: u64,
) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { worker_limit("SetMemHardLimit", worker_id, device_uuid, Limit::Memory(memory_limit_bytes)) }
}

/// `SetComputeUnitHardLimit`: the worker's vGPU share.
///
/// # Safety
/// The strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn SetComputeUnitHardLimit(
    worker_id: *const c_char,
    device_uuid: *const c_char,
    compute_unit_limit: u32,
) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { worker_limit("SetComputeUnitHardLimit", worker_id, device_uuid, Limit::Share(compute_unit_limit)) }
}

/// What a `ProcessArray` names: its processes, else its device.
///
/// # Safety
/// `processes` is NULL or valid.
unsafe fn scope(processes: *mut ProcessArray) -> Result<Scope, Fail> {
    non_null(processes, "processes")?;
    // SAFETY: checked non-NULL; the caller's struct.
    let p = unsafe { &*processes };
    if p.process_count > MAX_PROCESSES {
        return Err(Fail::invalid(format!("processCount {} is above {MAX_PROCESSES}", p.process_count)));
    }
    if p.process_count > 0 {
        return Ok(Scope::Processes(p.process_ids[..p.process_count].to_vec()));
    }
    let device = text::get(&p.device_uuid);
    if device.is_empty() {
        return Err(Fail::invalid("processes names neither processes nor a device"));
    }
    Ok(Scope::Device(device))
}

/// `Snapshot`.
///
/// # Safety
/// As [`scope`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Snapshot(processes: *mut ProcessArray) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    entry("Snapshot", || snapshot::run(&*context::get()?, &unsafe { scope(processes) }?, false))
}

/// `Resume`.
///
/// # Safety
/// As [`scope`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn Resume(processes: *mut ProcessArray) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    entry("Resume", || snapshot::run(&*context::get()?, &unsafe { scope(processes) }?, true))
}

/// `GetProcessInformation`: as `AccelGetProcessInformation` (same layout).
///
/// # Safety
/// As `AccelGetProcessInformation`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetProcessInformation(
    infos: *mut ProcessInformation,
    max_count: usize,
    count: *mut usize,
) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { exports::AccelGetProcessInformation(infos, max_count, count) }
}

/// `GetDeviceMetrics`: as `AccelGetDeviceMetrics` (same layout).
///
/// # Safety
/// As `AccelGetDeviceMetrics`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetDeviceMetrics(
    uuids: *const *const c_char,
    n: usize,
    metrics: *mut DeviceMetrics,
) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { exports::AccelGetDeviceMetrics(uuids, n, metrics) }
}

/// `GetVendorMountLibs`: as `AccelGetVendorMountLibs` (`Mount` is `MountPath`).
///
/// # Safety
/// As `AccelGetVendorMountLibs`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetVendorMountLibs(mounts: *mut Mount, max_count: usize, count: *mut usize) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    unsafe { exports::AccelGetVendorMountLibs(mounts, max_count, count) }
}

/// `RegisterLogCallback`: as `AccelRegisterLogCallback`.
#[unsafe(no_mangle)]
pub extern "C" fn RegisterLogCallback(callback: LogCallback) -> AccelResult {
    exports::AccelRegisterLogCallback(callback)
}
