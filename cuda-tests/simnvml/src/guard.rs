//! Entry-point scaffolding shared by every export: panic catching, the initialization check and handle
//! validation, so each export is one call with its own logic in a closure.

use crate::handles;
use crate::out::Outcome;
use crate::runtime::{self, Runtime};
use simgpu::DeviceConfig;
use simgpu::mig::{ComputeInstance, GpuInstance};
use std::panic::{AssertUnwindSafe, catch_unwind};
use tessera_ffi::nvml::{NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT, NvmlComputeInstance, NvmlGpuInstance};
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

/// [`initialized`], answering `NVML_ERROR_INVALID_ARGUMENT` unless `handle` names a configured device, and
/// `NVML_ERROR_GPU_IS_LOST` while the device is lost ([`simgpu::Config::lost_marker`]).
pub fn device(handle: NvmlDevice, body: impl FnOnce(&Runtime, &DeviceConfig) -> Outcome) -> NvmlReturn {
    initialized(|rt| body(rt, reachable(rt, rt.device(handles::ordinal(handle)?)?)?))
}

/// `dev`, unless it is lost: then `NVML_ERROR_GPU_IS_LOST`, as NVML answers for a GPU fallen off the bus.
fn reachable<'a>(rt: &Runtime, dev: &'a DeviceConfig) -> Result<&'a DeviceConfig, NvmlReturn> {
    if rt.config.lost_marker(dev.ordinal).exists() { Err(NVML_ERROR_GPU_IS_LOST) } else { Ok(dev) }
}

/// What a device handle names: a whole GPU, or a MIG device (one compute instance of one GPU instance).
pub enum Target<'a> {
    /// A whole GPU.
    Gpu(&'a DeviceConfig),
    /// A MIG device of the GPU.
    Mig(&'a DeviceConfig, GpuInstance, ComputeInstance),
}

/// [`initialized`], answering `NVML_ERROR_INVALID_ARGUMENT` unless `handle` names a configured device or an
/// existing MIG device, and `NVML_ERROR_GPU_IS_LOST` while its GPU is lost.
pub fn any_device(handle: NvmlDevice, body: impl FnOnce(&Runtime, Target) -> Outcome) -> NvmlReturn {
    initialized(|rt| {
        let Some((ordinal, gi, ci)) = handles::mig_device_ids(handle) else {
            return body(rt, Target::Gpu(reachable(rt, rt.device(handles::ordinal(handle)?)?)?));
        };
        let dev = reachable(rt, rt.device(ordinal)?)?;
        let (g, c) = rt.compute_instance(ordinal, gi, ci).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        body(rt, Target::Mig(dev, g, c))
    })
}

/// [`initialized`], answering `NVML_ERROR_INVALID_ARGUMENT` unless `handle` names an existing GPU instance;
/// `body` gets the instance and its compute instances.
pub fn gpu_instance(
    handle: NvmlGpuInstance,
    body: impl FnOnce(&Runtime, &DeviceConfig, GpuInstance, Vec<ComputeInstance>) -> Outcome,
) -> NvmlReturn {
    initialized(|rt| {
        let (ordinal, id) = handles::gpu_instance_ids(handle)?;
        let dev = rt.device(ordinal)?;
        let (gi, cis) = rt.mig.device(ordinal).gpu_instance(id).cloned().ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        body(rt, dev, gi, cis)
    })
}

/// [`initialized`], answering `NVML_ERROR_INVALID_ARGUMENT` unless `handle` names an existing compute
/// instance; `body` gets it and its GPU instance.
pub fn compute_instance(
    handle: NvmlComputeInstance,
    body: impl FnOnce(&Runtime, &DeviceConfig, GpuInstance, ComputeInstance) -> Outcome,
) -> NvmlReturn {
    initialized(|rt| {
        let (ordinal, gi, ci) = handles::compute_instance_ids(handle)?;
        let dev = rt.device(ordinal)?;
        let (g, c) = rt.compute_instance(ordinal, gi, ci).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        body(rt, dev, g, c)
    })
}
