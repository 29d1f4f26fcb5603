//! `procaddress`: the driver's `cuGetProcAddress` answers, checked row by row against the probed table of
//! the real driver and against `dlsym` of the exported symbol each row names. Runs before `cuInit`, as the
//! CUDA runtime does when it looks up `cuInit` itself.

use crate::args::Args;
use crate::dl::DriverLibrary;
use crate::fail::{During, Failure, Outcome, code, ensure};
use cudarc::driver::sys;
use serde_json::{Value, json};
use std::ffi::{CString, c_char, c_int, c_void};
use tessera_ffi::proc_address::{ROWS, STATUS_SUCCESS};

/// `cuGetProcAddress_v2` and `cuGetProcAddress_v2_ptsz` share this signature (the status is an int enum).
type LookupV2 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
/// `cuGetProcAddress` (CUDA 11.3), which cudarc's CUDA 12.8 bindings no longer declare.
type LookupV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;

/// What one lookup returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    code: u32,
    pfn: usize,
    status: Option<i32>,
}

impl Answer {
    fn json(&self) -> Value {
        json!({ "code": self.code, "pfn_is_null": self.pfn == 0, "status": self.status })
    }
}

/// The lookup entry points cudarc does not declare, from `dlsym`.
struct Lookups {
    v1: LookupV1,
    ptsz: LookupV2,
}

impl Lookups {
    /// `cuGetProcAddress_v2` through cudarc's declaration.
    fn v2(&self, symbol: *const c_char, version: i32, flags: u64, want_status: bool) -> Answer {
        let (mut pfn, mut status): (*mut c_void, c_int) = (std::ptr::null_mut(), -1);
        let status_ptr = if want_status { &mut status as *mut c_int } else { std::ptr::null_mut() };
        // SAFETY: valid (or deliberately NULL) pointers; the status is written as a 32-bit enum, which
        // `c_int` storage holds whatever value the driver writes.
        let r = unsafe { sys::cuGetProcAddress_v2(symbol, &mut pfn, version, flags, status_ptr.cast()) };
        Answer { code: code(r), pfn: pfn as usize, status: want_status.then_some(status) }
    }

    /// `cuGetProcAddress` (the CUDA 11.3 signature without a status).
    fn v1(&self, symbol: *const c_char, version: i32, flags: u64) -> Answer {
        let mut pfn: *mut c_void = std::ptr::null_mut();
        // SAFETY: the function has the `cuGetProcAddress` signature; valid pointers.
        let r = unsafe { (self.v1)(symbol, &mut pfn, version, flags) };
        Answer { code: r, pfn: pfn as usize, status: None }
    }

    /// `cuGetProcAddress_v2_ptsz`, which cudarc does not declare.
    fn ptsz(&self, symbol: *const c_char, version: i32, flags: u64) -> Answer {
        let (mut pfn, mut status): (*mut c_void, c_int) = (std::ptr::null_mut(), -1);
        // SAFETY: the function has the `cuGetProcAddress_v2` signature; valid pointers.
        let r = unsafe { (self.ptsz)(symbol, &mut pfn, version, flags, &mut status) };
        Answer { code: r, pfn: pfn as usize, status: Some(status) }
    }
}

/// Checks every row with all three entry points and reports the edge cases.
pub fn run(_args: &Args) -> Outcome {
    let lib = DriverLibrary::open()?;
    let (v1, ptsz) = (lib.symbol("cuGetProcAddress"), lib.symbol("cuGetProcAddress_v2_ptsz"));
    ensure(!v1.is_null() && !ptsz.is_null(), || "cuGetProcAddress or cuGetProcAddress_v2_ptsz is not exported".into())?;
    // SAFETY: the exported symbols are functions with exactly these signatures.
    let lookups = unsafe {
        Lookups {
            v1: std::mem::transmute::<*mut c_void, LookupV1>(v1),
            ptsz: std::mem::transmute::<*mut c_void, LookupV2>(ptsz),
        }
    };
    let mut driver_version = 0;
    // SAFETY: one valid output int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }.during("cuDriverGetVersion")?;

    let mut mismatches: Vec<String> = Vec::new();
    let (mut v2_ok, mut v1_ok, mut ptsz_ok, mut ptsz_checked) = (0, 0, 0, 0);
    for row in ROWS {
        let want = lib.symbol(row.symbol) as usize;
        if want == 0 {
            mismatches.push(format!("{} (row {row:?}) is not exported", row.symbol));
            continue;
        }
        let base = CString::new(row.base).expect("no NUL in names");
        let (version, flags) = (row.min_version as i32, row.flags as u64);
        let mut check = |what: &str, got: Answer, expected: Answer| {
            if got == expected {
                true
            } else {
                mismatches.push(format!("{what}({}, {version}, {flags}) = {got:?}; wanted {}", row.base, row.symbol));
                false
            }
        };
        let found = Answer { code: 0, pfn: want, status: Some(STATUS_SUCCESS) };
        v2_ok += check("cuGetProcAddress_v2", lookups.v2(base.as_ptr(), version, flags, true), found) as usize;
        v1_ok += check("cuGetProcAddress", lookups.v1(base.as_ptr(), version, flags), Answer { status: None, ..found })
            as usize;
        // The _ptsz lookup treats a default request as a per-thread one; legacy requests stay legacy.
        let ptsz_flags = match row.flags {
            2 => Some(0),
            1 => Some(1),
            _ => None,
        };
        if let Some(f) = ptsz_flags {
            ptsz_checked += 1;
            ptsz_ok += check("cuGetProcAddress_v2_ptsz", lookups.ptsz(base.as_ptr(), version, f), found) as usize;
        }
    }
    if !mismatches.is_empty() {
        let shown: Vec<&String> = mismatches.iter().take(10).collect();
        return Err(Failure::new(format!("{} lookups disagree with the table, e.g. {shown:#?}", mismatches.len())));
    }
    Ok(json!({
        "driver_version": driver_version,
        "rows": ROWS.len(),
        "v2_matched": v2_ok,
        "v1_matched": v1_ok,
        "ptsz_checked": ptsz_checked,
        "ptsz_matched": ptsz_ok,
        "cases": cases(&lookups, driver_version),
    }))
}

/// Lookups that must not find a function, and argument errors.
fn cases(l: &Lookups, driver_version: i32) -> Value {
    let name = |s: &str| CString::new(s).expect("no NUL");
    let (unknown, batch, alloc) = (name("cuSimgpuNoSuchFunction"), name("cuMemcpyBatchAsync"), name("cuMemAlloc"));
    let mut pfn: *mut c_void = std::ptr::null_mut();
    // SAFETY: a NULL symbol is an argument error the driver must report, not dereference.
    let null_symbol = unsafe { sys::cuGetProcAddress_v2(std::ptr::null(), &mut pfn, 12000, 0, std::ptr::null_mut()) };
    // SAFETY: a NULL output pointer is an argument error the driver must report, not write through.
    let null_pfn =
        unsafe { sys::cuGetProcAddress_v2(alloc.as_ptr(), std::ptr::null_mut(), 12000, 0, std::ptr::null_mut()) };
    json!({
        "unknown_symbol": l.v2(unknown.as_ptr(), 12080, 0, true).json(),
        "unknown_symbol_v1": l.v1(unknown.as_ptr(), 12080, 0).json(),
        "version_not_sufficient": l.v2(batch.as_ptr(), 12000, 0, true).json(),
        "version_above_driver": l.v2(alloc.as_ptr(), driver_version + 10, 0, true).json(),
        "version_zero": l.v2(alloc.as_ptr(), 0, 0, true).json(),
        "no_status_pointer": l.v2(alloc.as_ptr(), 12000, 0, false).json(),
        "ptsz_unknown_symbol": l.ptsz(unknown.as_ptr(), 12080, 0).json(),
        "null_symbol_code": code(null_symbol),
        "null_pfn_code": code(null_pfn),
    })
}
