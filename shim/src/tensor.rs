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
use tessera_region::flags::TENSOR_CORES_OFF;

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
/// prints on stdout: a malformed variable or no such vGPU does nothing (`cuInit` reports the problem); a
/// region that exists but cannot be read now (e.g. its lock held past its bound) sets it too: the program
/// may still join its vGPU later, and TF32 must then already be off if the vGPU says so (fail closed).
extern "C" fn tf32_at_load() {
    let _ = std::panic::catch_unwind(|| match vgpu_with_tensor_cores_off(|k| std::env::var_os(k)) {
        Ok(Some(vgpu)) => force_tf32_off(&vgpu),
        Ok(None) => {}
        Err((vgpu, e)) => {
            log::debug(format_args!("cannot read vGPU {vgpu:?}'s tensor-core policy at load ({e}): TF32 off"));
            force_tf32_off(&vgpu);
        }
    });
}

/// The process's vGPU (from the variables `env` gives) when the region says its tensor cores are off; the
/// vGPU and the error when the region exists but could not be read. Reads the region without joining it.
fn vgpu_with_tensor_cores_off(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Option<String>, (String, tessera_region::file::RegionError)> {
    if env("TESSERA_VGPU").is_none() {
        return Ok(None);
    }
    let Ok(config) = Config::from_lookup(env) else { return Ok(None) };
    let Some(vgpu) = config.vgpu else { return Ok(None) };
    if !std::path::Path::new(&config.region).exists() {
        // No region yet: `cuInit` refuses the GPU.
        return Ok(None);
    }
    match tessera_region::file::vgpu_flags(&config.region, &vgpu) {
        Ok(flags) => Ok(flags.filter(|f| f & TENSOR_CORES_OFF != 0).map(|_| vgpu)),
        Err(e) => Err((vgpu, e)),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_that_cannot_be_read_at_load_turns_tf32_off_and_a_missing_one_does_nothing() {
        let dir = std::env::temp_dir().join(format!("tessera-tensor-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let region = dir.join("region");
        let env = |region: &std::path::Path| {
            let region = region.as_os_str().to_owned();
            move |k: &str| match k {
                "TESSERA_VGPU" => Some("train".into()),
                "TESSERA_REGION" => Some(region.clone()),
                _ => None,
            }
        };
        // No region yet: cuInit refuses the GPU, nothing to set.
        assert_eq!(vgpu_with_tensor_cores_off(env(&region)).ok(), Some(None));
        // A region that is there but unreadable (here: truncated): fail closed.
        std::fs::write(&region, b"not a region").unwrap();
        let (vgpu, e) = vgpu_with_tensor_cores_off(env(&region)).expect_err("unreadable");
        assert_eq!(vgpu, "train");
        assert!(e.to_string().contains("bytes"), "{e}");
        // Without TESSERA_VGPU nothing is read.
        assert_eq!(vgpu_with_tensor_cores_off(|_| None).ok(), Some(None));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
