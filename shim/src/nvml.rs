//! NVML hooks: memory figures virtualized to the quota.

use crate::guard::{Res, Status, status};
use tessera_ffi::nvml::{NvmlDevice, NvmlMemory, NvmlMemoryV2};

/// `nvmlDeviceGetMemoryInfo` (pass-through until quotas are enforced).
pub fn memory_info(_device: NvmlDevice, _memory: *mut NvmlMemory, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `nvmlDeviceGetMemoryInfo_v2` (pass-through until quotas are enforced).
pub fn memory_info_v2(_device: NvmlDevice, _memory: *mut NvmlMemoryV2, real: impl FnOnce() -> Status) -> Res {
    status(real())
}
