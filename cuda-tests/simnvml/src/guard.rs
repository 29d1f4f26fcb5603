//! Entry-point scaffolding shared by every export: panic catching, the initialization check and handle
//! validation, so each export is one call with its own logic in a closure.

use crate::handles;
use crate::out::Outcome;
use crate::runtime::{self, Runtime};
use simgpu::DeviceConfig;
use std::panic::{AssertUnwindSafe, catch_unwind};
use tessera_ffi::nvml::{NVML_ERROR_UNKNOWN, NVML_SUCCESS, NvmlDevice, NvmlReturn};

/// Runs `body`, turning its outcome into a return code; a panic becomes `NVML_ERROR_UNKNOWN` (the panic
/// message goes to stderr through the panic hook) instead of unwinding into C.
pub fn catch(body: impl FnOnce() -> Outcome) -> NvmlReturn {
    // AssertUnwindSafe: a body that panics leaves nothing behind that a later call trusts; shared state is
    // atomics and the runtime registry tolerates poisoning.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// [`catch`], answering `NVML_ERROR_UNINITIALIZED` unless NVML is initialized.
pub fn initialized(body: impl FnOnce(&Runtime) -> Outcome) -> NvmlReturn {
    catch(|| body(&*runtime::current()?))
}

/// [`initialized`], answering `NVML_ERROR_INVALID_ARGUMENT` unless `handle` names a configured device.
pub fn device(handle: NvmlDevice, body: impl FnOnce(&Runtime, &DeviceConfig) -> Outcome) -> NvmlReturn {
    initialized(|rt| body(rt, rt.device(handles::ordinal(handle)?)?))
}
