//! Simulated NVML (`libnvidia-ml.so.1`): reports the simulated devices configured by the `SIMGPU_*`
//! variables, with memory, processes and activity read from the machine-wide state file the simulated
//! driver writes. It only observes: it never registers itself in that file.
//!
//! Export layer: this file (initialization and system queries), [`lookup`] (device enumeration and
//! handles), [`device`] (per-device queries), [`metadata`] (core count and MIG profiles), [`mig_gpu`] (MIG
//! mode and GPU instances), [`mig_compute`] (compute instances), [`mig_device`] (MIG device handles),
//! [`topology`] (how the devices connect, NUMA and CPU affinity), [`process`] (process queries) and
//! [`stubs`] (known symbols answering `NVML_ERROR_NOT_SUPPORTED`). The rest are
//! private helpers.
//! Every export catches panics and follows `nvml.h` for return codes.
//!
//! Safety contract of every `unsafe extern "C"` export (stated once here rather than on each): each pointer
//! argument is NULL or valid as `nvml.h` documents for that argument (a string buffer for its `length`
//! bytes, an array for its count, a struct for one struct of the documented type).

// The contract above is the `# Safety` section of every export.
#![allow(clippy::missing_safety_doc)]

pub mod device;
pub mod lookup;
pub mod metadata;
pub mod mig_compute;
pub mod mig_device;
pub mod mig_gpu;
pub mod process;
pub mod stubs;
pub mod topology;

mod clock;
mod facts;
mod guard;
mod handles;
mod out;
mod pci;
mod runtime;
mod sampling;
mod usage;
mod versions;

use std::ffi::{c_char, c_int, c_uint};
use std::panic::catch_unwind;
use tessera_ffi::nvml::{NvmlReturn, error_string};

/// `nvmlInit` (the original entry point): same as [`nvmlInit_v2`].
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    // Called through an opaque pointer so that the body differs from `nvmlInit_v2`'s: identical functions
    // are merged into aliases, and `dladdr` would then name `nvmlInit`'s address `nvmlInit_v2`.
    std::hint::black_box(nvmlInit_v2 as extern "C" fn() -> NvmlReturn)()
}

/// `nvmlInit_v2`: counts one initialization; the first reads `SIMGPU_*` and maps the state file (a malformed
/// variable or an unusable state file is reported on stderr and answered with `NVML_ERROR_UNKNOWN`).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard::catch(runtime::init)
}

/// `nvmlInitWithFlags`: [`nvmlInit_v2`]; the flags (no-GPU tolerance, no attaching) change nothing here.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    nvmlInit_v2()
}

/// `nvmlShutdown`: counts one initialization off; `NVML_ERROR_UNINITIALIZED` when there is none.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard::catch(runtime::shutdown)
}

/// `nvmlErrorString`: static text describing `result`; usable without initialization.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    catch_unwind(|| error_string(result)).unwrap_or(c"Unknown Error").as_ptr()
}

/// `nvmlSystemGetDriverVersion`: the display driver release matching the simulated CUDA version.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    guard::initialized(|rt| {
        let text = versions::driver_version(rt.config.driver_version);
        // SAFETY: the caller passes `length` writable bytes at `version` (crate safety contract).
        unsafe { out::write_str(version, length, &text) }
    })
}

/// `nvmlSystemGetNVMLVersion`: `CUDA_MAJOR.DRIVER_RELEASE`, e.g. `13.580.65.06`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> NvmlReturn {
    guard::initialized(|rt| {
        let text = versions::nvml_version(rt.config.driver_version);
        // SAFETY: the caller passes `length` writable bytes at `version` (crate safety contract).
        unsafe { out::write_str(version, length, &text) }
    })
}

/// `nvmlSystemGetCudaDriverVersion`: `SIMGPU_DRIVER_VERSION` (what the simulated `cuDriverGetVersion` says).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(cuda_driver_version: *mut c_int) -> NvmlReturn {
    // SAFETY: same contract as ours.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version) }
}

/// `nvmlSystemGetCudaDriverVersion_v2`: as [`nvmlSystemGetCudaDriverVersion`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version: *mut c_int) -> NvmlReturn {
    guard::initialized(|rt| {
        // SAFETY: `cuda_driver_version` is NULL or writable (crate safety contract).
        unsafe { out::write(cuda_driver_version, rt.config.driver_version as c_int) }
    })
}
