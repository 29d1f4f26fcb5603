//! `cuGetProcAddress`, `_v2` and `_v2_ptsz`: the real driver chooses the variant for
//! `(symbol, cudaVersion, flags)` (legacy or per-thread stream, `_v2`/`_v3`), fills `symbolStatus` and
//! returns its code; the shim then substitutes its own entry for exactly the function the driver chose,
//! when that function is intercepted. Everything else the driver answered is handed back untouched.
//!
//! The driver's choice is recognised by address (the answer is one of its exports), else by name from
//! the probed table of the real driver's answers: a driver may hand out internal entry points that are not
//! its exports, and the table is authoritative for every version up to the one it was probed at.

use crate::guard::{Res, Status, status};
use crate::hooks::{self, Hook};
use crate::real::Lib;
use std::ffi::{CStr, c_char, c_int, c_void};
use tessera_ffi::proc_address::{self as table, FLAG_DEFAULT, FLAG_PER_THREAD_DEFAULT_STREAM, PROBED_VERSION};

/// The hook for the function the probed table says the driver returns for this request, if intercepted.
/// `None` above the probed version: a newer driver may have a newer variant the table does not know.
fn by_table(symbol: &[u8], version: c_int, flags: u64) -> Option<&'static Hook> {
    let version = u32::try_from(version).ok().filter(|v| *v <= PROBED_VERSION)?;
    let exported = table::resolve(std::str::from_utf8(symbol).ok()?, version, flags).ok()?;
    hooks::find(exported.as_bytes()).filter(|h| h.lib == Lib::Cuda)
}

/// Replaces the driver's answer in `*pfn` with the shim's entry when the answered function is intercepted.
fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if pfn.is_null() || symbol.is_null() {
        return;
    }
    // SAFETY: the driver just wrote a function pointer (or NULL) through this valid out-pointer.
    let answered = unsafe { *pfn };
    if answered.is_null() {
        return;
    }
    // SAFETY: the driver accepted `symbol` as a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    if let Some(hook) = hooks::for_real_address(answered).or_else(|| by_table(name, version, flags)) {
        crate::log::debug(format_args!("cuGetProcAddress: {} -> shim", hook.name));
        // SAFETY: as above.
        unsafe { *pfn = hook.address() };
    }
}

/// `cuGetProcAddress` (CUDA 11.3-11.8 signature).
pub fn v1(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())?;
    substitute(symbol, pfn, version, flags);
    Ok(())
}

/// `cuGetProcAddress_v2`: as [`v1`]; the driver fills `symbolStatus`.
pub fn v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    _status: *mut c_int,
    real: impl FnOnce() -> Status,
) -> Res {
    v1(symbol, pfn, version, flags, real)
}

/// `cuGetProcAddress_v2_ptsz` (what the runtime of a per-thread-default-stream build calls): a default
/// request is answered with the per-thread variants.
pub fn v2_ptsz(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    _status: *mut c_int,
    real: impl FnOnce() -> Status,
) -> Res {
    let flags = if flags == FLAG_DEFAULT { FLAG_PER_THREAD_DEFAULT_STREAM } else { flags };
    v1(symbol, pfn, version, flags, real)
}

#[cfg(test)]
mod tests {
    use super::by_table;

    fn chosen(symbol: &str, version: i32, flags: u64) -> Option<&'static str> {
        by_table(symbol.as_bytes(), version, flags).map(|h| h.name)
    }

    #[test]
    fn the_table_names_the_variant_for_the_request() {
        assert_eq!(chosen("cuMemAllocAsync", 12000, 0), Some("cuMemAllocAsync"));
        assert_eq!(chosen("cuMemAllocAsync", 12000, 1), Some("cuMemAllocAsync"));
        assert_eq!(chosen("cuMemAllocAsync", 12000, 2), Some("cuMemAllocAsync_ptsz"));
        assert_eq!(chosen("cuGetProcAddress", 12000, 0), Some("cuGetProcAddress_v2"));
        assert_eq!(chosen("cuGetProcAddress", 11030, 0), Some("cuGetProcAddress"));
        assert_eq!(chosen("cuCtxCreate", 11040, 0), Some("cuCtxCreate_v3"));
        assert_eq!(chosen("cuMemAlloc", 3020, 2), Some("cuMemAlloc_v2"));
        assert_eq!(chosen("cuLaunchKernel", 12000, 2), Some("cuLaunchKernel_ptsz"));
        assert_eq!(chosen("cuGraphLaunch", 12000, 0), Some("cuGraphLaunch"));
    }

    #[test]
    fn nothing_for_functions_not_intercepted_unknown_or_beyond_the_table() {
        assert_eq!(chosen("cuStreamSynchronize", 12000, 2), None);
        assert_eq!(chosen("cuMemAlloc", 3010, 0), None); // cuMemAlloc (v1) is not intercepted
        assert_eq!(chosen("cuNoSuchFunction", 12000, 0), None);
        assert_eq!(chosen("cuMemAllocAsync", 11010, 0), None); // version not sufficient
        assert_eq!(chosen("cuCtxCreate", tessera_ffi::proc_address::PROBED_VERSION as i32 + 10, 0), None);
        assert_eq!(chosen("cuCtxCreate", -1, 0), None);
    }
}
