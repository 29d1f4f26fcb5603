//! Each process's device time and memory from NVML, figures tenants cannot write: the driver's per-process
//! SM utilization (`nvmlDeviceGetProcessUtilization`) and memory (`nvmlDeviceGetComputeRunningProcesses`),
//! loaded by `tessera_host::nvml` from the library the daemon is given (`Options::nvml`: the one that goes with
//! its driver; by default the machine's, `tessera_host::driver::machine_nvml`).
//!
//! Each query asks for the utilization since the previous one (`lastSeenTimeStamp`: that query's time)
//! and turns a process's percentage into device time over the interval between the two. A process first
//! seen in a query is not counted for it: NVML may then report a percentage over a window of its own (its
//! lifetime, or the driver's sample period), not over the interval; ignoring it errs toward charging less.

use std::collections::HashSet;
use std::ffi::c_uint;
use tessera_ffi::nvml::{
    NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_NOT_FOUND, NVML_SUCCESS, NvmlDevice, NvmlProcessInfoV1,
    NvmlProcessUtilizationSample, NvmlReturn,
};
use tessera_host::nvml::{Nvml, NvmlError};

type ProcessUtilization =
    unsafe extern "C" fn(NvmlDevice, *mut NvmlProcessUtilizationSample, *mut c_uint, u64) -> NvmlReturn;
type RunningProcesses = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfoV1) -> NvmlReturn;

/// Most processes read per query (more are asked for again with a larger buffer, up to this).
const MAX_SAMPLES: usize = 4096;

/// One device's queries.
struct Device {
    handle: NvmlDevice,
    /// When the last query was made (microseconds since the epoch), 0 before the first.
    last_us: u64,
    /// The processes the last query reported.
    seen: HashSet<u32>,
}

/// NVML, loaded, with the devices the daemon audits.
pub struct ProcessUsage {
    /// Kept loaded while the entry points below may be called.
    nvml: Nvml,
    utilization: ProcessUtilization,
    running: RunningProcesses,
    devices: Vec<Device>,
}

// SAFETY: the device handles are NVML's opaque, process-wide handles, valid on any thread; the value is
// used by one thread at a time (it is moved into the audit thread).
unsafe impl Send for ProcessUsage {}

/// Microseconds since the Unix epoch (NVML's time stamps).
fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl ProcessUsage {
    /// Loads NVML and opens devices `0..devices`; the error names the library and the call that failed.
    pub fn open(name: &str, devices: u32) -> Result<ProcessUsage, NvmlError> {
        let nvml = Nvml::load(name)?;
        // SAFETY: each type is the entry point's signature in nvml.h; the pointers are called only while
        // `nvml`, kept in the value, is loaded.
        let (utilization, running) = unsafe {
            (
                nvml.required::<ProcessUtilization>("nvmlDeviceGetProcessUtilization")?,
                nvml.required::<RunningProcesses>("nvmlDeviceGetComputeRunningProcesses")?,
            )
        };
        let list = nvml.handles(devices)?.into_iter().map(|handle| Device { handle, last_us: 0, seen: HashSet::new() });
        Ok(ProcessUsage { devices: list.collect(), utilization, running, nvml })
    }

    /// The error of `call` on device `device`, which answered `code`.
    fn failed(&self, call: &'static str, device: usize, code: NvmlReturn) -> NvmlError {
        NvmlError::CallFailed { library: self.nvml.name().to_string(), call, device: device as u32, code }
    }

    /// Device memory each process holds on device `device` (pid, bytes), as the driver counts it.
    pub fn memory(&self, device: usize) -> Result<Vec<(u32, u64)>, NvmlError> {
        let Some(d) = self.devices.get(device) else { return Ok(Vec::new()) };
        let mut buf = vec![NvmlProcessInfoV1::default(); 64];
        loop {
            let mut count = buf.len() as c_uint;
            // SAFETY: `buf` holds `count` entries; the handle is NVML's.
            match unsafe { (self.running)(d.handle, &mut count, buf.as_mut_ptr()) } {
                NVML_SUCCESS => {
                    let n = (count as usize).min(buf.len());
                    return Ok(buf[..n].iter().map(|p| (p.pid, p.used_gpu_memory)).collect());
                }
                NVML_ERROR_INSUFFICIENT_SIZE if buf.len() < MAX_SAMPLES => {
                    let want = (count as usize).clamp(buf.len() * 2, MAX_SAMPLES);
                    buf.resize(want, NvmlProcessInfoV1::default());
                }
                rc => return Err(self.failed("nvmlDeviceGetComputeRunningProcesses", device, rc)),
            }
        }
    }

    /// Device time (ns) each process used on device `device` since the previous call, and that interval
    /// (ns); the first call only starts the interval. Processes first seen now are left out (see the
    /// module documentation).
    pub fn sample(&mut self, device: usize) -> Result<(Vec<(u32, u64)>, u64), NvmlError> {
        let utilization = self.utilization;
        let Some(d) = self.devices.get_mut(device) else { return Ok((Vec::new(), 0)) };
        let mut buf = vec![NvmlProcessUtilizationSample::default(); 64];
        let samples = loop {
            let mut count = buf.len() as c_uint;
            // SAFETY: `buf` holds `count` samples; the handle is NVML's.
            let rc = unsafe { utilization(d.handle, buf.as_mut_ptr(), &mut count, d.last_us) };
            match rc {
                NVML_SUCCESS => break &buf[..(count as usize).min(buf.len())],
                NVML_ERROR_NOT_FOUND => break &buf[..0],
                NVML_ERROR_INSUFFICIENT_SIZE if buf.len() < MAX_SAMPLES => {
                    let want = (count as usize).clamp(buf.len() * 2, MAX_SAMPLES);
                    buf.resize(want, NvmlProcessUtilizationSample::default());
                }
                code => {
                    let call = "nvmlDeviceGetProcessUtilization";
                    let library = self.nvml.name().to_string();
                    return Err(NvmlError::CallFailed { library, call, device: device as u32, code });
                }
            }
        };
        let now = now_us();
        let interval_ns = match d.last_us {
            0 => 0,
            last => now.saturating_sub(last).saturating_mul(1_000),
        };
        d.last_us = now;
        // A driver may give several samples of one process: their mean percentage holds for the interval.
        let mut percents: Vec<(u32, u64, u64)> = Vec::new();
        let mut seen = HashSet::with_capacity(samples.len());
        for s in samples {
            seen.insert(s.pid);
            if interval_ns == 0 || !d.seen.contains(&s.pid) {
                continue;
            }
            let pct = u64::from(s.sm_util.min(100));
            match percents.iter_mut().find(|(pid, _, _)| *pid == s.pid) {
                Some((_, sum, n)) => (*sum, *n) = (*sum + pct, *n + 1),
                None => percents.push((s.pid, pct, 1)),
            }
        }
        d.seen = seen;
        let used = percents.into_iter().map(|(pid, sum, n)| (pid, interval_ns / 100 * sum / n)).collect();
        Ok((used, interval_ns))
    }
}
