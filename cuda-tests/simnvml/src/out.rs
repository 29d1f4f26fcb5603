//! Reading the caller's C arguments and writing results through its pointers, with NVML's conventions:
//! a NULL pointer is `NVML_ERROR_INVALID_ARGUMENT`, a buffer too small is `NVML_ERROR_INSUFFICIENT_SIZE`.

use std::ffi::{CStr, c_char, c_uint};
use tessera_ffi::nvml::{NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_INVALID_ARGUMENT, NvmlReturn};

/// What an entry point's body returns: the value, or the NVML error code to return instead.
pub type Outcome<T = ()> = Result<T, NvmlReturn>;

/// Writes `value` through `ptr`.
///
/// # Safety
/// `ptr` is NULL or valid for writing one `T`.
pub unsafe fn write<T>(ptr: *mut T, value: T) -> Outcome {
    if ptr.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL, and the caller guarantees it is valid for writing one T.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Writes the first `bytes` bytes of `value` through `ptr`: for callers whose (older) struct is a prefix of
/// the current layout.
///
/// # Safety
/// `ptr` is NULL or valid for writing `bytes` bytes, and `bytes <= size_of::<T>()`.
pub unsafe fn write_prefix<T>(ptr: *mut T, value: &T, bytes: usize) -> Outcome {
    if ptr.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    assert!(bytes <= size_of::<T>());
    // SAFETY: `value` is readable for size_of::<T>() >= bytes bytes; the caller guarantees `ptr` is writable
    // for `bytes` bytes; a local and the caller's buffer cannot overlap.
    unsafe { std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), ptr.cast::<u8>(), bytes) };
    Ok(())
}

/// Copies `text` and a terminating NUL into the caller's buffer of `length` bytes.
///
/// # Safety
/// `buf` is NULL or valid for writing `length` bytes.
pub unsafe fn write_str(buf: *mut c_char, length: c_uint, text: &str) -> Outcome {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (length as usize) <= text.len() {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller guarantees `length` writable bytes at `buf`, and text.len() + 1 <= length; `text` is
    // Rust-owned and cannot overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

/// Reads a NUL-terminated UTF-8 argument; NULL or malformed text is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives the returned borrow.
pub unsafe fn read_str<'a>(ptr: *const c_char) -> Outcome<&'a str> {
    if ptr.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL; the caller guarantees NUL termination and lifetime.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map_err(|_| NVML_ERROR_INVALID_ARGUMENT)
}

/// Answers a list query the NVML way: `*count` holds the capacity of `array` on entry. When `items` do not
/// fit, `*count` is set to the number needed and the answer is `NVML_ERROR_INSUFFICIENT_SIZE` (so a
/// capacity of 0 asks for the size, and `array` may then be NULL); otherwise the items are copied and
/// `*count` is set to how many.
///
/// # Safety
/// `count` is NULL or valid for reading and writing a `c_uint`; `array` is NULL or valid for writing
/// `*count` elements.
pub unsafe fn write_list<T: Copy>(count: *mut c_uint, array: *mut T, items: &[T]) -> Outcome {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL; the caller guarantees it is readable.
    let capacity = unsafe { count.read() } as usize;
    let needed = c_uint::try_from(items.len()).map_err(|_| NVML_ERROR_INSUFFICIENT_SIZE)?;
    if capacity < items.len() {
        // SAFETY: as above, and writable.
        unsafe { count.write(needed) };
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    if !items.is_empty() && array.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: `array` holds at least capacity >= items.len() writable elements (caller's guarantee; it is not
    // NULL when anything is copied) and cannot overlap our Vec-backed slice; `count` is writable.
    unsafe {
        std::ptr::copy_nonoverlapping(items.as_ptr(), array, items.len());
        count.write(needed);
    }
    Ok(())
}

/// Answers a list query whose `count` is output only and whose array the caller sized from the device's
/// own limits (nvml.h's MIG instance and placement queries): copies `items` unless `array` is NULL (a size
/// query) and sets `*count` to how many there are.
///
/// # Safety
/// `count` is valid for writing a `c_uint`; `array` is NULL or valid for writing `items.len()` elements.
pub unsafe fn write_all<T: Copy>(count: *mut c_uint, array: *mut T, items: &[T]) -> Outcome {
    // SAFETY: the caller's guarantees; `items` is our own slice and cannot overlap `array`.
    unsafe {
        if !array.is_null() {
            std::ptr::copy_nonoverlapping(items.as_ptr(), array, items.len());
        }
        write(count, items.len() as c_uint)
    }
}
