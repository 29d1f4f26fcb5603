//! Initialization, version, error strings and the entry-point lookup (`cuGetProcAddress`).

use crate::driver::initialize;
use crate::guard::{CuRes, c_str, ensure, entry, out};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use tessera_ffi::cuda::*;
use tessera_ffi::proc_address::{self, FLAG_PER_THREAD_DEFAULT_STREAM, STATUS_SUCCESS};

/// `cuInit`: reads the configuration and joins the machine's shared state.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(flags: c_uint) -> CuResult {
    entry(|| {
        ensure(flags == 0)?;
        initialize().map(|_| ())
    })
}

/// The version this driver reports; readable before `cuInit`, as on the real driver.
fn driver_version() -> CuRes<u32> {
    static VERSION: OnceLock<Result<u32, CuResult>> = OnceLock::new();
    *VERSION.get_or_init(|| simgpu::Config::from_env().map(|c| c.driver_version).map_err(|_| CUDA_ERROR_INVALID_VALUE))
}

/// `cuDriverGetVersion`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CuResult {
    entry(|| out(version, driver_version()? as c_int))
}

/// Static NUL-terminated copies of the error texts (the API hands out `const char*` forever).
fn c_text(code: CuResult, name: bool) -> Option<*const c_char> {
    static TEXTS: OnceLock<Vec<(CuResult, std::ffi::CString, std::ffi::CString)>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        (0..1000u32)
            .filter_map(|c| {
                describe(c).map(|(n, s)| (c, std::ffi::CString::new(n).unwrap(), std::ffi::CString::new(s).unwrap()))
            })
            .collect()
    });
    texts.iter().find(|t| t.0 == code).map(|t| if name { t.1.as_ptr() } else { t.2.as_ptr() })
}

fn error_text(code: CuResult, dst: *mut *const c_char, name: bool) -> CuRes {
    ensure(!dst.is_null())?;
    match c_text(code, name) {
        Some(p) => out(dst, p),
        None => {
            out(dst, std::ptr::null())?;
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
}

/// `cuGetErrorString`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGetErrorString(error: CuResult, text: *mut *const c_char) -> CuResult {
    entry(|| error_text(error, text, false))
}

/// `cuGetErrorName`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGetErrorName(error: CuResult, text: *mut *const c_char) -> CuResult {
    entry(|| error_text(error, text, true))
}

/// Address of an exported symbol by exact name.
pub fn export_address(symbol: &str) -> Option<usize> {
    let i = crate::EXPORTS.binary_search_by(|(n, _)| n.cmp(&symbol)).ok()?;
    Some(crate::EXPORTS[i].1.0 as usize)
}

/// Resolves a request exactly as the real driver does (see `tessera_ffi::proc_address`).
fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuRes {
    let name = c_str(symbol)?;
    ensure(!pfn.is_null())?;
    let max = driver_version()?;
    ensure(version > 0 && version as u32 <= max)?;
    let (addr, st) = match proc_address::resolve(name, version as u32, flags) {
        Ok(exported) => match export_address(exported) {
            Some(a) => (a, STATUS_SUCCESS),
            None => (0, proc_address::STATUS_SYMBOL_NOT_FOUND),
        },
        Err(why) => (0, why.status()),
    };
    out(pfn, addr as *mut c_void)?;
    if !status.is_null() {
        out(status, st)?;
    }
    Ok(())
}

/// `cuGetProcAddress` (CUDA 11.3 signature, no status).
#[unsafe(no_mangle)]
pub extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    entry(|| get_proc_address(symbol, pfn, version, flags, std::ptr::null_mut()))
}

/// `cuGetProcAddress_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    entry(|| get_proc_address(symbol, pfn, version, flags, status))
}

/// `cuGetProcAddress_v2_ptsz`: the per-thread-default-stream build's lookup; a default request resolves
/// the per-thread variants.
#[unsafe(no_mangle)]
pub extern "C" fn cuGetProcAddress_v2_ptsz(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let flags = if flags == 0 { FLAG_PER_THREAD_DEFAULT_STREAM } else { flags };
    entry(|| get_proc_address(symbol, pfn, version, flags, status))
}
