//! NVML queries the shim makes for itself through the real NVML: how much of a device this process
//! uses (to measure what a context costs), and which CUDA device an NVML handle is.
//!
//! NVML device → CUDA ordinal: the CUDA device with the same UUID when the program uses the driver (it is
//! loaded and initialized; right under `CUDA_VISIBLE_DEVICES` reordering), otherwise the NVML index (the
//! same ordering on a machine without `CUDA_VISIBLE_DEVICES`). An NVML-only program never gets the driver
//! loaded by this.

use crate::driver;
use crate::real::{
    Lib, nvmlDeviceGetComputeRunningProcesses_v3 as PROCESSES, nvmlDeviceGetHandleByIndex_v2 as BY_INDEX,
    nvmlDeviceGetHandleByUUID as BY_UUID, nvmlDeviceGetIndex as GET_INDEX, nvmlDeviceGetMemoryInfo as MEMORY_INFO,
    nvmlDeviceGetUUID as GET_UUID, nvmlInit_v2 as INIT, nvmlShutdown as SHUTDOWN,
};
use std::ffi::{CStr, CString, c_char, c_uint};
use std::sync::Mutex;
use tessera_ffi::nvml::{
    NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_ERROR_INSUFFICIENT_SIZE, NvmlDevice, NvmlMemory, NvmlProcessInfo,
};
use tessera_ffi::sys::CUdevice;

/// `usedGpuMemory` when NVML cannot tell (`NVML_VALUE_NOT_AVAILABLE`).
const NOT_AVAILABLE: u64 = u64::MAX;

/// NVML, initialized for as long as this lives (the program's own initialization count is untouched).
pub struct Session(());

impl Session {
    /// Initializes NVML; `None` when the real NVML is missing or fails.
    pub fn open() -> Option<Session> {
        // SAFETY: nvmlInit_v2 takes no arguments.
        (unsafe { INIT.get()?() } == 0).then_some(Session(()))
    }

    /// The NVML handle of CUDA device `dev`: by UUID, else by index.
    pub fn device(&self, dev: CUdevice) -> Option<NvmlDevice> {
        let mut d: NvmlDevice = std::ptr::null_mut();
        if let (Some(u), Some(by_uuid)) = (driver::uuid(dev), BY_UUID.get()) {
            let text = CString::new(driver::uuid_string(&u)).ok()?;
            // SAFETY: a NUL-terminated UUID and a valid output.
            if unsafe { by_uuid(text.as_ptr(), &mut d) } == 0 {
                return Some(d);
            }
        }
        // SAFETY: a valid output.
        (unsafe { BY_INDEX.get()?(c_uint::try_from(dev).ok()?, &mut d) } == 0).then_some(d)
    }

    /// Bytes this process uses on `device` as NVML lists it; `None` when it is not listed.
    pub fn own_usage(&self, device: NvmlDevice) -> Option<u64> {
        let f = PROCESSES.get()?;
        let mut infos: Vec<NvmlProcessInfo> = Vec::new();
        for _ in 0..4 {
            let mut count = infos.len() as c_uint;
            // SAFETY: `infos` holds `count` elements (NULL is allowed when it is 0).
            let r = unsafe { f(device, &mut count, infos.as_mut_ptr()) };
            if r == 0 {
                infos.truncate(count as usize);
                let pid = std::process::id();
                return infos.iter().find(|p| p.pid == pid).map(|p| p.used_gpu_memory).filter(|&b| b != NOT_AVAILABLE);
            }
            if r != NVML_ERROR_INSUFFICIENT_SIZE {
                return None;
            }
            infos.resize(count as usize + 8, NvmlProcessInfo::default());
        }
        None
    }

    /// Bytes in use on `device` by every process.
    pub fn device_used(&self, device: NvmlDevice) -> Option<u64> {
        let mut m = NvmlMemory::default();
        // SAFETY: nvmlDeviceGetMemoryInfo's C signature; `m` is a valid output.
        (unsafe { MEMORY_INFO.get()?(device, &mut m) } == 0).then_some(m.used)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(f) = SHUTDOWN.get() {
            // SAFETY: balances the nvmlInit_v2 of `open`.
            unsafe { f() };
        }
    }
}

/// NVML handles already matched to a CUDA ordinal by UUID.
static BY_HANDLE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The CUDA ordinal of NVML device `device` (see the module documentation); the caller has NVML
/// initialized, since it just queried the device.
pub fn cuda_ordinal(device: NvmlDevice) -> Option<usize> {
    let key = device as usize;
    let cached = BY_HANDLE.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(h, _)| *h == key).map(|e| e.1);
    if cached.is_some() {
        return cached;
    }
    let count = crate::real::is_loaded(Lib::Cuda).then(driver::device_count).flatten();
    if let (Some(count), Some(text)) = (count, nvml_uuid(device)) {
        let found = (0..count).find(|&i| {
            CUdevice::try_from(i).ok().and_then(driver::uuid).is_some_and(|u| driver::uuid_string(&u) == text)
        });
        if let Some(i) = found {
            BY_HANDLE.lock().unwrap_or_else(|p| p.into_inner()).push((key, i));
            return Some(i);
        }
    }
    let mut index: c_uint = 0;
    // SAFETY: nvmlDeviceGetIndex's C signature; a valid output.
    (unsafe { GET_INDEX.get()?(device, &mut index) } == 0).then_some(index as usize)
}

/// NVML's UUID text of `device`.
fn nvml_uuid(device: NvmlDevice) -> Option<String> {
    let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    // SAFETY: the buffer holds the length passed.
    if unsafe { GET_UUID.get()?(device, buf.as_mut_ptr(), buf.len() as c_uint) } != 0 {
        return None;
    }
    // SAFETY: NVML wrote a NUL-terminated string into the buffer.
    Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}
