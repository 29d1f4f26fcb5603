//! `cuGetProcAddress` and `_v2`: the real driver chooses the variant for `(symbol, cudaVersion, flags)`
//! (legacy or per-thread stream, `_v2`/`_v3`) and fills `symbolStatus`; the shim then substitutes its
//! own entry for exactly the function the driver answered with, when that function is intercepted.

use crate::guard::{Res, Status, status};
use crate::hooks;
use std::ffi::{c_char, c_int, c_void};

fn substitute(pfn: *mut *mut c_void) {
    if pfn.is_null() {
        return;
    }
    // SAFETY: the driver just wrote a function pointer (or NULL) through this valid out-pointer.
    let answered = unsafe { *pfn };
    if let Some(hook) = (!answered.is_null()).then(|| hooks::for_real_address(answered)).flatten() {
        crate::log::debug(format_args!("cuGetProcAddress: {} -> shim", hook.name));
        // SAFETY: as above.
        unsafe { *pfn = hook.address() };
    }
}

/// `cuGetProcAddress` (CUDA 11.3-11.8 signature).
pub fn v1(
    _symbol: *const c_char,
    pfn: *mut *mut c_void,
    _version: c_int,
    _flags: u64,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())?;
    substitute(pfn);
    Ok(())
}

/// `cuGetProcAddress_v2` and `cuGetProcAddress_v2_ptsz`.
pub fn v2(
    _symbol: *const c_char,
    pfn: *mut *mut c_void,
    _version: c_int,
    _flags: u64,
    _status: *mut c_int,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())?;
    substitute(pfn);
    Ok(())
}
