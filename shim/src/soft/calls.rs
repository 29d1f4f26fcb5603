//! The calls that answer differently on soft memory: address-range and pointer-attribute queries
//! describe the program's allocation (not the page mappings underneath), and what cannot work on
//! virtualized memory is refused with `CUDA_ERROR_NOT_SUPPORTED` and a logged reason.

use super::active;
use crate::guard::{Res, Status, status};
use crate::log;
use crate::real::cuStreamSynchronize as SYNC;
use std::ffi::{c_uint, c_ulonglong, c_void};
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_SUPPORTED};
use tessera_ffi::sys::{CUdeviceptr, CUpointer_attribute as A, CUstream};

/// `cuMemGetAddressRange_v2`.
pub fn address_range(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
    real: impl FnOnce() -> Status,
) -> Res {
    let Some(s) = active().filter(|s| s.owns(dptr)) else { return status(real()) };
    let (b, n, _) = s.range(dptr).ok_or(CUDA_ERROR_NOT_FOUND)?;
    // SAFETY: each output is NULL (not wanted) or the program's writable variable.
    unsafe {
        if let Some(base) = base.as_mut() {
            *base = b;
        }
        if let Some(size) = size.as_mut() {
            *size = n as usize;
        }
    }
    Ok(())
}

/// A value of a pointer attribute, as the bytes the driver would write.
enum Value {
    U64(u64),
    I32(i32),
}

/// What the program's allocation at `ptr` answers for `attr`, where that differs from the mapping's
/// answer; `None` for the driver to answer. `Err` when `ptr` is in a soft space but in no allocation.
fn answer(attr: c_uint, ptr: CUdeviceptr) -> Option<Result<Value, Status>> {
    let s = active().filter(|s| s.owns(ptr))?;
    let Some((base, size, device)) = s.range(ptr) else { return Some(Err(CUDA_ERROR_INVALID_VALUE)) };
    let is = |a: A| attr == a as c_uint;
    Some(Ok(if is(A::CU_POINTER_ATTRIBUTE_CONTEXT) {
        Value::U64(s.context_of(device))
    } else if is(A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) || is(A::CU_POINTER_ATTRIBUTE_BUFFER_ID) {
        Value::U64(base)
    } else if is(A::CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
        Value::U64(size)
    } else if is(A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) {
        Value::I32(0)
    } else {
        return None;
    }))
}

/// Writes `v` to `data`.
///
/// # Safety
/// `data` is writable for the attribute's value.
unsafe fn write(data: *mut c_void, v: Value) {
    // SAFETY: per the contract.
    unsafe {
        match v {
            Value::U64(x) => data.cast::<u64>().write_unaligned(x),
            Value::I32(x) => data.cast::<i32>().write_unaligned(x),
        }
    }
}

/// `cuPointerGetAttribute`.
pub fn pointer_attribute(data: *mut c_void, attr: c_uint, ptr: CUdeviceptr, real: impl FnOnce() -> Status) -> Res {
    match answer(attr, ptr) {
        None => status(real()),
        Some(_) if data.is_null() => Err(CUDA_ERROR_INVALID_VALUE),
        Some(Err(e)) => Err(e),
        Some(Ok(v)) => {
            // SAFETY: non-NULL, the program's output for this attribute.
            unsafe { write(data, v) };
            Ok(())
        }
    }
}

/// `cuPointerGetAttributes`: the driver answers, then the attributes that differ are replaced.
pub fn pointer_attributes(
    num: c_uint,
    attrs: *mut c_uint,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())?;
    if attrs.is_null() || data.is_null() {
        return Ok(());
    }
    for i in 0..num as usize {
        // SAFETY: the driver accepted `num` attributes and output pointers.
        let (attr, out) = unsafe { (attrs.add(i).read(), data.add(i).read()) };
        if let Some(Ok(v)) = answer(attr, ptr)
            && !out.is_null()
        {
            // SAFETY: the program's output for this attribute.
            unsafe { write(out, v) };
        }
    }
    Ok(())
}

/// Refuses `what` on soft memory (it would hand out Tessera's mappings, which move): an error, logged.
pub fn refuse_soft(what: &str, ptr: CUdeviceptr) -> Res {
    if active().is_some_and(|s| s.owns(ptr)) {
        log::warn(format_args!(
            "{what} on {ptr:#x}: soft-mode memory is virtualized and may move, so it cannot be shared or \
             exported; run this program on a hard-mode vGPU (CUDA_ERROR_NOT_SUPPORTED)"
        ));
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// `cuIpcGetMemHandle`.
pub fn ipc_get_mem_handle(_handle: *mut c_void, dptr: CUdeviceptr, real: impl FnOnce() -> Status) -> Res {
    refuse_soft("cuIpcGetMemHandle", dptr)?;
    status(real())
}

/// `cuMemGetHandleForAddressRange`.
pub fn handle_for_address_range(
    _handle: *mut c_void,
    dptr: CUdeviceptr,
    _size: usize,
    _kind: c_uint,
    _flags: c_ulonglong,
    real: impl FnOnce() -> Status,
) -> Res {
    refuse_soft("cuMemGetHandleForAddressRange", dptr)?;
    status(real())
}

/// Waits for the work queued on `stream` (before a soft allocation it may use is freed).
pub fn synchronize_stream(stream: CUstream) -> Res {
    let f = SYNC.get().ok_or(CUDA_ERROR_NOT_SUPPORTED)?;
    // SAFETY: cuStreamSynchronize's C signature; the stream is the program's.
    status(unsafe { f(stream) })
}
