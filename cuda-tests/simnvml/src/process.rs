//! Process query exports: the processes using a device and their utilization.
//!
//! Running-process lists follow NVML's sizing contract: `*infoCount` is the capacity of `infos` on entry;
//! when the list does not fit it is set to the size needed and the answer is
//! `NVML_ERROR_INSUFFICIENT_SIZE` (so `*infoCount == 0` asks for the size and `infos` may be NULL).
//! Only compute processes exist in the simulation: graphics and MPS lists are always empty.

use crate::guard::Target;
use crate::out::{self, Outcome};
use crate::runtime::Runtime;
use crate::sampling::Sample;
use crate::usage::{self, Usage};
use crate::{facts, guard};
use simgpu::DeviceConfig;
use std::ffi::{c_uint, c_ulonglong};
use tessera_ffi::nvml::{
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND, NVML_PROCESSES_UTILIZATION_INFO_V1, NvmlDevice, NvmlProcessInfo, NvmlProcessInfoV1,
    NvmlProcessInfoV2, NvmlProcessUtilizationInfoV1, NvmlProcessUtilizationSample, NvmlProcessesUtilizationInfoV1,
    NvmlReturn,
};

/// Which processes a running-process query lists.
#[derive(Clone, Copy)]
enum Kind {
    /// Processes with memory or a context on the device.
    Compute,
    /// Graphics or MPS processes: none in the simulation.
    None,
}

/// Answers a running-process query in the caller's element layout `T`, for a GPU or a MIG device.
///
/// # Safety
/// `count` and `infos` follow the crate safety contract for the query.
unsafe fn running<T: Copy + From<Usage>>(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut T,
    kind: Kind,
) -> NvmlReturn {
    guard::any_device(device, |rt, target| {
        let items: Vec<T> = match (kind, target) {
            (Kind::Compute, Target::Gpu(dev)) => {
                usage::running(&rt.state, dev.ordinal as usize).into_iter().map(T::from).collect()
            }
            // No process runs inside a simulated MIG device (the simulated driver does not open them).
            (Kind::Compute, Target::Mig(..)) | (Kind::None, _) => Vec::new(),
        };
        // SAFETY: forwarded from our caller.
        unsafe { out::write_list(count, infos, &items) }
    })
}

/// Defines running-process exports: `name(element type, kind)`.
macro_rules! running_exports {
    ($($(#[$doc:meta])* $name:ident($ty:ty, $kind:expr);)*) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(device: NvmlDevice, info_count: *mut c_uint, infos: *mut $ty) -> NvmlReturn {
                // SAFETY: same contract as ours.
                unsafe { running(device, info_count, infos, $kind) }
            }
        )*
    };
}

running_exports! {
    /// `nvmlDeviceGetComputeRunningProcesses` (v1): processes with memory or contexts on the device, with
    /// the bytes each holds, as `nvmlProcessInfo_v1_t`.
    nvmlDeviceGetComputeRunningProcesses(NvmlProcessInfoV1, Kind::Compute);
    /// `nvmlDeviceGetComputeRunningProcesses_v2`: as v1, as `nvmlProcessInfo_v2_t` (no MIG instance ids).
    nvmlDeviceGetComputeRunningProcesses_v2(NvmlProcessInfoV2, Kind::Compute);
    /// `nvmlDeviceGetComputeRunningProcesses_v3`: as v1, as `nvmlProcessInfo_t` (no MIG instance ids).
    nvmlDeviceGetComputeRunningProcesses_v3(NvmlProcessInfo, Kind::Compute);
    /// `nvmlDeviceGetGraphicsRunningProcesses` (v1): always empty.
    nvmlDeviceGetGraphicsRunningProcesses(NvmlProcessInfoV1, Kind::None);
    /// `nvmlDeviceGetGraphicsRunningProcesses_v2`: always empty.
    nvmlDeviceGetGraphicsRunningProcesses_v2(NvmlProcessInfoV2, Kind::None);
    /// `nvmlDeviceGetGraphicsRunningProcesses_v3`: always empty.
    nvmlDeviceGetGraphicsRunningProcesses_v3(NvmlProcessInfo, Kind::None);
    /// `nvmlDeviceGetMPSComputeRunningProcesses` (v1): always empty.
    nvmlDeviceGetMPSComputeRunningProcesses(NvmlProcessInfoV1, Kind::None);
    /// `nvmlDeviceGetMPSComputeRunningProcesses_v2`: always empty.
    nvmlDeviceGetMPSComputeRunningProcesses_v2(NvmlProcessInfoV2, Kind::None);
    /// `nvmlDeviceGetMPSComputeRunningProcesses_v3`: always empty.
    nvmlDeviceGetMPSComputeRunningProcesses_v3(NvmlProcessInfo, Kind::None);
}

impl From<Sample> for NvmlProcessUtilizationSample {
    fn from(s: Sample) -> Self {
        NvmlProcessUtilizationSample {
            pid: s.pid,
            time_stamp: s.time_us,
            sm_util: s.sm_percent,
            mem_util: facts::memory_activity(s.sm_percent),
            enc_util: 0,
            dec_util: 0,
        }
    }
}

impl From<Sample> for NvmlProcessUtilizationInfoV1 {
    fn from(s: Sample) -> Self {
        NvmlProcessUtilizationInfoV1 {
            time_stamp: s.time_us,
            pid: s.pid,
            sm_util: s.sm_percent,
            mem_util: facts::memory_activity(s.sm_percent),
            ..Default::default()
        }
    }
}

/// Answers a utilization query: `NVML_ERROR_NOT_FOUND` (count 0) when no process was busy since
/// `last_seen_us`; with a NULL `array`, the number of samples and `NVML_ERROR_INSUFFICIENT_SIZE`; otherwise
/// the list contract of running-process queries.
///
/// # Safety
/// `count` and `array` follow the crate safety contract for the query.
unsafe fn utilization<T: Copy + From<Sample>>(
    rt: &Runtime,
    dev: &DeviceConfig,
    count: *mut c_uint,
    array: *mut T,
    last_seen_us: u64,
) -> Outcome {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let samples = rt.history.samples(&rt.state, dev.ordinal as usize, last_seen_us);
    let items: Vec<T> = samples.into_iter().map(T::from).collect();
    if items.is_empty() || array.is_null() {
        // SAFETY: `count` is writable (crate safety contract) and not NULL.
        unsafe { count.write(items.len() as c_uint) };
        return Err(if items.is_empty() { NVML_ERROR_NOT_FOUND } else { NVML_ERROR_INSUFFICIENT_SIZE });
    }
    // SAFETY: forwarded from our caller.
    unsafe { out::write_list(count, array, &items) }
}

/// `nvmlDeviceGetProcessUtilization`: per-process SM utilization since `lastSeenTimeStamp` (microseconds),
/// or over each process's lifetime when this library has no reading that old (see [`crate::sampling`]).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    samples: *mut NvmlProcessUtilizationSample,
    process_samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        // SAFETY: the count and array follow the crate safety contract.
        unsafe { utilization(rt, dev, process_samples_count, samples, last_seen_time_stamp) }
    })
}

/// `nvmlDeviceGetProcessesUtilizationInfo`: [`nvmlDeviceGetProcessUtilization`] in the versioned layout;
/// `NVML_ERROR_ARGUMENT_VERSION_MISMATCH` unless `version` is `nvmlProcessesUtilizationInfo_v1`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessesUtilizationInfo(
    device: NvmlDevice,
    info: *mut NvmlProcessesUtilizationInfoV1,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        if info.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: not NULL, and the caller set every field (crate safety contract).
        let request = unsafe { info.read() };
        if request.version != NVML_PROCESSES_UTILIZATION_INFO_V1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        // SAFETY: the count field lives in the caller's writable struct; the array is the caller's, sized by
        // that count (crate safety contract).
        unsafe {
            let count = &raw mut (*info).process_samples_count;
            utilization(rt, dev, count, request.proc_util_array, request.last_seen_time_stamp)
        }
    })
}
