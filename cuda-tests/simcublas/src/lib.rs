//! A minimal simulated cuBLAS, loadable as `libcublas.so.12`: handles and math modes only.
//!
//! It exists to test Tessera's tensor-core policy without a GPU: every mode `cublasSetMathMode`
//! receives is kept on the handle (read back with `cublasGetMathMode`) and, when `SIMCUBLAS_LOG` names a
//! file, appended to it as one decimal number per line.

use std::ffi::c_void;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};

/// `cublasStatus_t`.
type Status = u32;
const CUBLAS_STATUS_SUCCESS: Status = 0;
const CUBLAS_STATUS_NOT_INITIALIZED: Status = 1;
const CUBLAS_STATUS_INVALID_VALUE: Status = 7;
const CUBLAS_STATUS_INTERNAL_ERROR: Status = 14;

/// A cuBLAS handle: just its math mode (`CUBLAS_DEFAULT_MATH` = 0 at creation).
struct Handle {
    mode: AtomicU32,
}

fn guard(f: impl FnOnce() -> Status) -> Status {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(CUBLAS_STATUS_INTERNAL_ERROR)
}

/// `cublasCreate_v2`.
///
/// # Safety
/// As the cuBLAS function: pointers valid, handles made by `cublasCreate_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasCreate_v2(handle: *mut *mut c_void) -> Status {
    guard(|| {
        if handle.is_null() {
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        let h = Box::into_raw(Box::new(Handle { mode: AtomicU32::new(0) }));
        // SAFETY: non-NULL out-pointer supplied by the caller.
        unsafe { *handle = h as *mut c_void };
        CUBLAS_STATUS_SUCCESS
    })
}

/// `cublasDestroy_v2`.
///
/// # Safety
/// As the cuBLAS function: pointers valid, handles made by `cublasCreate_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasDestroy_v2(handle: *mut c_void) -> Status {
    guard(|| {
        if handle.is_null() {
            return CUBLAS_STATUS_NOT_INITIALIZED;
        }
        // SAFETY: handles are only made by cublasCreate_v2 from a Box.
        drop(unsafe { Box::from_raw(handle as *mut Handle) });
        CUBLAS_STATUS_SUCCESS
    })
}

/// `cublasSetMathMode`: keeps and logs the mode received.
///
/// # Safety
/// As the cuBLAS function: pointers valid, handles made by `cublasCreate_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasSetMathMode(handle: *mut c_void, mode: u32) -> Status {
    guard(|| {
        if handle.is_null() {
            return CUBLAS_STATUS_NOT_INITIALIZED;
        }
        // SAFETY: a handle made by cublasCreate_v2 and not destroyed (the cuBLAS contract).
        unsafe { &*(handle as *const Handle) }.mode.store(mode, Ordering::Relaxed);
        if let Some(path) = std::env::var_os("SIMCUBLAS_LOG") {
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| writeln!(f, "{mode}"));
            if written.is_err() {
                return CUBLAS_STATUS_INTERNAL_ERROR;
            }
        }
        CUBLAS_STATUS_SUCCESS
    })
}

/// `cublasGetMathMode`.
///
/// # Safety
/// As the cuBLAS function: pointers valid, handles made by `cublasCreate_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetMathMode(handle: *mut c_void, mode: *mut u32) -> Status {
    guard(|| {
        if handle.is_null() {
            return CUBLAS_STATUS_NOT_INITIALIZED;
        }
        if mode.is_null() {
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        // SAFETY: a live handle and a non-NULL out-pointer.
        unsafe { *mode = (*(handle as *const Handle)).mode.load(Ordering::Relaxed) };
        CUBLAS_STATUS_SUCCESS
    })
}
