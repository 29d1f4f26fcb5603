//! `stubs`: entry points the simulation exports but does not implement must answer
//! `CUDA_ERROR_NOT_SUPPORTED`, whether reached through `dlsym` or `cuGetProcAddress`.

use crate::args::Args;
use crate::dl::DriverLibrary;
use crate::fail::{During, Failure, Outcome, code};
use cudarc::driver::{result, sys};
use serde_json::{Map, json};
use std::ffi::{CString, c_void};
use tessera_ffi::proc_address;

/// Exported symbols simgpu does not simulate (graphics interop, green contexts, texture and surface objects...).
const STUBS: &[&str] = &[
    "cuCtxAttach",
    "cuGraphClone",
    "cuGraphicsMapResources",
    "cuDeviceGetLuid",
    "cuGreenCtxCreate",
    "cuTexObjectCreate",
    "cuSurfObjectCreate",
    "cuGraphicsUnregisterResource",
];

/// Any entry point, called with six zero (NULL) arguments.
type ZeroArgs = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> u32;

/// Calls the entry point at `addr` with all-zero arguments.
///
/// # Safety
/// `addr` must be a driver entry point taking at most six integer or pointer arguments, for which NULL
/// and zero values are rejected rather than used (true of every stub, which ignores its arguments).
unsafe fn call_with_zeros(addr: *mut c_void) -> u32 {
    // SAFETY: on the supported ABIs (x86-64 SysV, AArch64) surplus integer arguments are ignored by a
    // callee declaring fewer, and the caller guarantees what the callee does with zeros.
    unsafe { std::mem::transmute::<*mut c_void, ZeroArgs>(addr)(0, 0, 0, 0, 0, 0) }
}

/// Calls each stub by `dlsym` and by `cuGetProcAddress`, plus `cuGetExportTable` with an id no table has.
pub fn run(_args: &Args) -> Outcome {
    result::init().during("cuInit")?;
    let lib = DriverLibrary::open()?;
    let mut driver_version = 0;
    // SAFETY: one valid output int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }.during("cuDriverGetVersion")?;
    let mut stubs = Map::new();
    for &symbol in STUBS {
        let addr = lib.symbol(symbol);
        if addr.is_null() {
            return Err(Failure::new(format!("{symbol} is not exported")));
        }
        // SAFETY: `symbol` is one of the unimplemented exports above, which take no more than six
        // arguments and ignore them.
        let via_dlsym = unsafe { call_with_zeros(addr) };
        let base = proc_address::bases_of(symbol).next().unwrap_or(symbol);
        let resolved = proc_address::resolve(base, driver_version as u32, 0).ok();
        let c_base = CString::new(base).expect("no NUL");
        let mut pfn: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid symbol name and output pointer; no status wanted.
        unsafe { sys::cuGetProcAddress_v2(c_base.as_ptr(), &mut pfn, driver_version, 0, std::ptr::null_mut()) }
            .during(&format!("cuGetProcAddress({base})"))?;
        let via_proc_address = (!pfn.is_null()).then(|| {
            // SAFETY: `pfn` is the driver's entry for `base`, an unimplemented export like `symbol`.
            unsafe { call_with_zeros(pfn) }
        });
        stubs.insert(
            symbol.into(),
            json!({ "dlsym": via_dlsym, "base": base, "resolved": resolved, "proc_address": via_proc_address }),
        );
    }
    let mut table: *const c_void = std::ptr::null();
    let id = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: valid output and id pointers.
    let export_table = unsafe { sys::cuGetExportTable(&mut table, &id) };
    Ok(json!({
        "stubs": stubs,
        "cuGetExportTable": code(export_table),
        "unknown_symbol_exported": !lib.symbol("cuSimgpuNoSuchEntryPoint").is_null(),
    }))
}
