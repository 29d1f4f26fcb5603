//! The current ABI's entry points (`include/accelerator.h`): each checks its pointers and counts, then
//! calls the implementation of its concern inside [`entry`] (panics caught, failures logged).

use crate::abi::current::*;
use crate::guard::{Fail, entry, non_null};
use crate::limits::{Limit, Target};
use crate::snapshot::Scope;
use crate::{context, devices, limits, log, metrics, mounts, partitions, processes, snapshot, text, topology};
use std::ffi::c_char;

/// `INVALID_PARAM` for a zero `maxCount`/count.
fn non_zero(n: usize, what: &str) -> Result<(), Fail> {
    if n == 0 { Err(Fail::invalid(format!("{what} is 0"))) } else { Ok(()) }
}

/// Opens the driver, NVML and device list.
#[unsafe(no_mangle)]
pub extern "C" fn AccelInit() -> AccelResult {
    entry("AccelInit", || context::get().map(|_| ()))
}

/// Closes them and removes the vGPUs this process created for its limits.
#[unsafe(no_mangle)]
pub extern "C" fn AccelShutdown() -> AccelResult {
    entry("AccelShutdown", || {
        if let Some(ctx) = context::close() {
            limits::release(&ctx);
        }
        Ok(())
    })
}

/// The number of devices.
///
/// # Safety
/// `device_count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetDeviceCount(device_count: *mut usize) -> AccelResult {
    entry("AccelGetDeviceCount", || {
        non_null(device_count, "deviceCount")?;
        let n = context::get()?.gpus.len();
        // SAFETY: checked non-NULL; the caller's writable size_t.
        unsafe { *device_count = n };
        Ok(())
    })
}

/// Up to `max_count` devices.
///
/// # Safety
/// `devices` is NULL or holds `max_count` writable entries; `device_count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetAllDevices(
    devices: *mut ExtendedDeviceInfo,
    max_count: usize,
    device_count: *mut usize,
) -> AccelResult {
    entry("AccelGetAllDevices", || {
        non_null(devices, "devices")?;
        non_null(device_count, "deviceCount")?;
        non_zero(max_count, "maxCount")?;
        let ctx = context::get()?;
        let reports = devices::reports(&ctx);
        let n = reports.len().min(max_count);
        for (i, r) in reports.iter().take(n).enumerate() {
            // SAFETY: i < max_count entries the caller provides; zeroes are a valid value of the struct.
            let slot = unsafe { &mut *devices.add(i) };
            // SAFETY: all-zero bytes are a valid ExtendedDeviceInfo (integers, floats, bools and chars).
            *slot = unsafe { std::mem::zeroed() };
            devices::fill(slot, r);
        }
        // SAFETY: checked non-NULL.
        unsafe { *device_count = n };
        Ok(())
    })
}

/// Every device and its peers.
///
/// # Safety
/// `topology` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetAllDevicesTopology(topology: *mut ExtendedDeviceTopology) -> AccelResult {
    entry("AccelGetAllDevicesTopology", || {
        non_null(topology, "topology")?;
        let ctx = context::get()?;
        // SAFETY: checked non-NULL; the caller's struct.
        let out = unsafe { &mut *topology };
        // SAFETY: all-zero bytes are a valid ExtendedDeviceTopology.
        *out = unsafe { std::mem::zeroed() };
        topology::fill(&ctx, out);
        Ok(())
    })
}

/// Creates a partition (MIG instance) of `template_id` on `device_uuid`.
///
/// # Safety
/// The strings are NULL or NUL-terminated; `partition_result` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelAssignPartition(
    template_id: *const c_char,
    device_uuid: *const c_char,
    partition_result: *mut PartitionResult,
) -> AccelResult {
    entry("AccelAssignPartition", || {
        // SAFETY: NULL or NUL-terminated, as the caller guarantees.
        let (template, device) =
            unsafe { (text::arg(template_id, "templateId")?, text::arg(device_uuid, "deviceUUID")?) };
        non_null(partition_result, "partitionResult")?;
        let made = partitions::assign(&*context::get()?, &template, &device)?;
        // SAFETY: checked non-NULL; the caller's struct.
        let out = unsafe { &mut *partition_result };
        // SAFETY: all-zero bytes are a valid PartitionResult.
        *out = unsafe { std::mem::zeroed() };
        partitions::fill(out, &made);
        Ok(())
    })
}

/// Removes a partition of `template_id`: `device_uuid` is the partition's (as assigned) or its device's.
///
/// # Safety
/// The strings are NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelRemovePartition(template_id: *const c_char, device_uuid: *const c_char) -> AccelResult {
    entry("AccelRemovePartition", || {
        // SAFETY: NULL or NUL-terminated, as the caller guarantees.
        let (template, device) =
            unsafe { (text::arg(template_id, "templateId")?, text::arg(device_uuid, "deviceUUID")?) };
        partitions::remove(&*context::get()?, &template, &device)
    })
}

/// Sets the calling process's memory quota on `device_uuid`.
///
/// # Safety
/// `device_uuid` is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelSetMemHardLimit(device_uuid: *const c_char, memory_limit_bytes: u64) -> AccelResult {
    entry("AccelSetMemHardLimit", || {
        // SAFETY: NULL or NUL-terminated, as the caller guarantees.
        let device = unsafe { text::arg(device_uuid, "deviceUUID")? };
        limits::check(Limit::Memory(memory_limit_bytes))?;
        limits::set(&*context::get()?, &Target::Caller, &device, Limit::Memory(memory_limit_bytes))
    })
}

/// Sets the calling process's compute share (percent) on `device_uuid`.
///
/// # Safety
/// `device_uuid` is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelSetComputeUnitHardLimit(
    device_uuid: *const c_char,
    compute_unit_limit: u32,
) -> AccelResult {
    entry("AccelSetComputeUnitHardLimit", || {
        // SAFETY: NULL or NUL-terminated, as the caller guarantees.
        let device = unsafe { text::arg(device_uuid, "deviceUUID")? };
        limits::check(Limit::Share(compute_unit_limit))?;
        limits::set(&*context::get()?, &Target::Caller, &device, Limit::Share(compute_unit_limit))
    })
}

/// What a `SnapshotContext` names: its processes, else its device.
///
/// # Safety
/// `context` is NULL or valid, its `processIds` NULL or holding `processCount` entries, its `deviceUUID`
/// NULL or NUL-terminated.
unsafe fn scope(context: *mut SnapshotContext) -> Result<Scope, Fail> {
    non_null(context, "context")?;
    // SAFETY: checked non-NULL; the caller's struct.
    let c = unsafe { &*context };
    if c.process_count > 0 {
        non_null(c.process_ids, "context->processIds")?;
        // SAFETY: processCount entries, as the caller guarantees.
        let pids = unsafe { std::slice::from_raw_parts(c.process_ids, c.process_count) };
        return Ok(Scope::Processes(pids.to_vec()));
    }
    if c.device_uuid.is_null() {
        return Err(Fail::invalid("context names neither processes nor a device"));
    }
    // SAFETY: NUL-terminated, as the caller guarantees.
    Ok(Scope::Device(unsafe { text::arg(c.device_uuid, "context->deviceUUID")? }))
}

/// Snapshots processes or a device.
///
/// # Safety
/// As [`scope`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelSnapshot(context: *mut SnapshotContext) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    entry("AccelSnapshot", || snapshot::run(&*context::get()?, &unsafe { scope(context) }?, false))
}

/// Resumes processes or a device.
///
/// # Safety
/// As [`scope`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelResume(context: *mut SnapshotContext) -> AccelResult {
    // SAFETY: the caller's guarantees, passed on.
    entry("AccelResume", || snapshot::run(&*context::get()?, &unsafe { scope(context) }?, true))
}

/// Up to `max_count` processes on the devices.
///
/// # Safety
/// `process_infos` is NULL or holds `max_count` writable entries; `process_info_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetProcessInformation(
    process_infos: *mut ProcessInformation,
    max_count: usize,
    process_info_count: *mut usize,
) -> AccelResult {
    entry("AccelGetProcessInformation", || {
        non_null(process_infos, "processInfos")?;
        non_null(process_info_count, "processInfoCount")?;
        non_zero(max_count, "maxCount")?;
        let list = processes::list(&*context::get()?);
        let n = list.len().min(max_count);
        for (i, p) in list.iter().take(n).enumerate() {
            // SAFETY: i < max_count entries the caller provides.
            let slot = unsafe { &mut *process_infos.add(i) };
            // SAFETY: all-zero bytes are a valid ProcessInformation.
            *slot = unsafe { std::mem::zeroed() };
            processes::fill(slot, p);
        }
        // SAFETY: checked non-NULL.
        unsafe { *process_info_count = n };
        Ok(())
    })
}

/// The metrics of `device_count` devices, in order.
///
/// # Safety
/// `device_uuids` is NULL or holds `device_count` NUL-terminated strings; `metrics` NULL or
/// `device_count` writable entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetDeviceMetrics(
    device_uuids: *const *const c_char,
    device_count: usize,
    metrics: *mut DeviceMetrics,
) -> AccelResult {
    entry("AccelGetDeviceMetrics", || {
        non_null(device_uuids, "deviceUUIDs")?;
        non_null(metrics, "metrics")?;
        non_zero(device_count, "deviceCount")?;
        // SAFETY: device_count pointers, as the caller guarantees.
        let pointers = unsafe { std::slice::from_raw_parts(device_uuids, device_count) };
        let mut uuids = Vec::with_capacity(device_count);
        for (i, &p) in pointers.iter().enumerate() {
            // SAFETY: NULL or NUL-terminated, as the caller guarantees.
            uuids.push(unsafe { text::arg(p, &format!("deviceUUIDs[{i}]")) }?);
        }
        let ctx = context::get()?;
        let gpus = uuids.iter().map(|u| ctx.gpu(u).cloned()).collect::<Result<Vec<_>, _>>()?;
        let stats = crate::daemon::client().and_then(|c| c.stats(None).ok());
        for (i, gpu) in gpus.iter().enumerate() {
            // SAFETY: i < device_count entries the caller provides.
            let slot = unsafe { &mut *metrics.add(i) };
            // SAFETY: all-zero bytes are a valid DeviceMetrics.
            *slot = unsafe { std::mem::zeroed() };
            metrics::fill(&ctx, gpu, stats.as_ref(), slot);
        }
        Ok(())
    })
}

/// Up to `max_count` files a container needs mounted.
///
/// # Safety
/// `mounts` is NULL or holds `max_count` writable entries; `mount_count` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn AccelGetVendorMountLibs(
    mounts: *mut MountPath,
    max_count: usize,
    mount_count: *mut usize,
) -> AccelResult {
    entry("AccelGetVendorMountLibs", || {
        non_null(mounts, "mounts")?;
        non_null(mount_count, "mountCount")?;
        non_zero(max_count, "maxCount")?;
        let list = mounts::list(&*context::get()?);
        let n = list.len().min(max_count);
        for (i, path) in list.iter().take(n).enumerate() {
            // SAFETY: i < max_count entries the caller provides.
            let slot = unsafe { &mut *mounts.add(i) };
            let p = path.to_string_lossy();
            text::put(&mut slot.host_path, &p);
            text::put(&mut slot.guest_path, &p);
        }
        // SAFETY: checked non-NULL.
        unsafe { *mount_count = n };
        Ok(())
    })
}

/// Registers the log callback (NULL unregisters).
#[unsafe(no_mangle)]
pub extern "C" fn AccelRegisterLogCallback(callback: LogCallback) -> AccelResult {
    entry("AccelRegisterLogCallback", || {
        log::register(callback);
        Ok(())
    })
}
