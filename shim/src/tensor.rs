//! The tensor-core policy of a vGPU created or set with `--tensor-cores off` ([`TENSOR_CORES_OFF`]):
//!
//! - TF32 off: [`TF32_OVERRIDE`] (`NVIDIA_TF32_OVERRIDE=0`) is in the environment before any CUDA library
//!   initializes. `tessera run` puts it in the program's environment; under plain `LD_PRELOAD`,
//!   [`TF32_AT_LOAD`], a constructor of the shim, sets it when the shim is loaded: before `main`, and so
//!   before any library the program loads later initializes. The policy wins over a value the user set.
//! - [`set_math_mode`]: the tensor-op modes a program gives `cublasSetMathMode` become pedantic math. The
//!   vGPU's flag is read live on every call, so `tessera vgpu set NAME --tensor-cores off` applies to the
//!   later calls of running processes.
//!
//! A process without a vGPU, or whose vGPU allows tensor cores, is untouched.

use crate::config::Config;
use crate::guard::{Res, Status, status};
use crate::log;
use crate::real::Lib;
use std::ffi::{OsStr, c_void};
use tessera_ffi::cublas::{CUBLAS_STATUS_NOT_INITIALIZED, TF32_OVERRIDE, pedantic};
use tessera_ffi::region::flags::TENSOR_CORES_OFF;

/// True when the process's vGPU has tensor cores off now. Joins the vGPU if nothing has yet (cuBLAS
/// initializes the driver first, so normally `cuInit` did); a configuration or region that is unusable
/// (already reported) is `CUBLAS_STATUS_NOT_INITIALIZED`, as `cuInit` refuses the GPU then.
fn tensor_cores_off() -> Res<bool> {
    let quota = crate::quota::active().map_err(|_| CUBLAS_STATUS_NOT_INITIALIZED)?;
    Ok(quota.is_some_and(|q| q.slot().0.flags() & TENSOR_CORES_OFF != 0))
}

/// `cublasSetMathMode`: with tensor cores off, a tensor-op `mode` reaches the real function as pedantic
/// math (see [`pedantic`]); every other call passes through unchanged.
pub fn set_math_mode(handle: *mut c_void, mode: u32, real: impl FnOnce() -> Status) -> Res {
    let forced = pedantic(mode);
    if !tensor_cores_off()? || forced == mode {
        return status(real());
    }
    log::debug(format_args!("cublasSetMathMode: mode {mode} given as {forced}: this vGPU has tensor cores off"));
    match crate::real::cublasSetMathMode.get() {
        // SAFETY: the real cublasSetMathMode, with the caller's handle and a valid math mode.
        Some(f) => status(unsafe { f(handle, forced) }),
        None => Err(crate::real::missing(Lib::Cublas)),
    }
}

/// Run by the loader when it loads the shim (an `.init_array` entry): [`tf32_at_load`].
#[used]
#[unsafe(link_section = ".init_array")]
static TF32_AT_LOAD: extern "C" fn() = tf32_at_load;

/// Sets [`TF32_OVERRIDE`] when `TESSERA_VGPU` names a vGPU with tensor cores off. Never panics, fails or
/// prints on stdout: whatever goes wrong (a malformed variable, no region, no such vGPU), it does nothing,
/// and `cuInit` reports the problem.
extern "C" fn tf32_at_load() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(vgpu) = vgpu_with_tensor_cores_off() {
            force_tf32_off(&vgpu);
        }
    });
}

/// The process's vGPU when the region says its tensor cores are off. Reads the region without joining it.
fn vgpu_with_tensor_cores_off() -> Option<String> {
    std::env::var_os("TESSERA_VGPU")?;
    let config = Config::from_lookup(|k| std::env::var_os(k)).ok()?;
    let vgpu = config.vgpu?;
    let flags = tessera_ffi::region::file::vgpu_flags(&config.region, &vgpu).ok()??;
    (flags & TENSOR_CORES_OFF != 0).then_some(vgpu)
}

/// Sets [`TF32_OVERRIDE`] in this process's environment, replacing (with a warning) another value.
fn force_tf32_off(vgpu: &str) {
    let (var, value) = TF32_OVERRIDE;
    let old = std::env::var_os(var);
    if old.as_deref() == Some(OsStr::new(value)) {
        return;
    }
    if !single_threaded() {
        log::warn(format_args!(
            "vGPU {vgpu:?} has tensor cores off, but the shim was loaded after threads started and cannot set \
             {var}={value}; use `tessera run` or set it yourself"
        ));
        return;
    }
    match old {
        Some(v) => log::warn(format_args!("{var}={v:?} replaced by {value}: vGPU {vgpu:?} has tensor cores off")),
        None => log::debug(format_args!("{var}={value} set: vGPU {vgpu:?} has tensor cores off")),
    }
    // SAFETY: the process has one thread (checked just above), so nothing reads or writes the environment
    // concurrently.
    unsafe { std::env::set_var(var, value) };
}

/// True when this process has exactly one thread (as when the loader runs a preloaded library's
/// constructors): only then is changing the environment safe.
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}
