//! NVML hooks: memory figures virtualized to the quota. The device's CUDA ordinal is found as
//! [`nvml_real::cuda_ordinal`] describes; `total = min(limit, real total)`, `used` is what every process
//! of the quota uses (contexts included), `free = min(total - used, real free)`. NULL outputs and struct
//! versions are checked by the real NVML first, so errors are exactly its own.

use crate::guard::{Res, Status, status};
use crate::nvml_real;
use crate::quota::{self, Quota};
use tessera_ffi::nvml::{NVML_ERROR_UNKNOWN, NvmlDevice, NvmlMemory, NvmlMemoryV2};

/// The quota and the device's ordinal, once the real call succeeded; `None` when the figures stay real.
fn quota_for(device: NvmlDevice, real: impl FnOnce() -> Status) -> Res<Option<(&'static Quota, usize)>> {
    // A quota that cannot be set up was reported already; refuse rather than show the whole device.
    let q = quota::active().map_err(|_| NVML_ERROR_UNKNOWN)?;
    status(real())?;
    Ok(q.and_then(|q| nvml_real::cuda_ordinal(device).map(|d| (q, d))))
}

/// Virtualized `(total, free, used)` from the real `total` and `free`.
fn figures(q: &Quota, d: usize, total: u64, free: u64) -> Option<(u64, u64, u64)> {
    q.reclaim_if_due();
    let (free, total) = q.view(d, free, total)?;
    Some((total, free, q.used(d)))
}

/// `nvmlDeviceGetMemoryInfo`.
pub fn memory_info(device: NvmlDevice, memory: *mut NvmlMemory, real: impl FnOnce() -> Status) -> Res {
    let Some((q, d)) = quota_for(device, real)? else { return Ok(()) };
    // SAFETY: the real NVML succeeded, so `memory` is a valid, written nvmlMemory_t.
    let m = unsafe { &mut *memory };
    if let Some((total, free, used)) = figures(q, d, m.total, m.free) {
        (m.total, m.free, m.used) = (total, free, used);
    }
    Ok(())
}

/// `nvmlDeviceGetMemoryInfo_v2`: as v1; nothing is `reserved` out of a quota.
pub fn memory_info_v2(device: NvmlDevice, memory: *mut NvmlMemoryV2, real: impl FnOnce() -> Status) -> Res {
    let Some((q, d)) = quota_for(device, real)? else { return Ok(()) };
    // SAFETY: the real NVML succeeded, so `memory` is a valid, written nvmlMemory_v2_t.
    let m = unsafe { &mut *memory };
    if let Some((total, free, used)) = figures(q, d, m.total, m.free) {
        (m.total, m.free, m.used, m.reserved) = (total, free, used, 0);
    }
    Ok(())
}
