//! Direct symbol lookup in the driver library, to compare against what `cuGetProcAddress` answers and to
//! reach exports cudarc does not declare.

use crate::fail::{Failure, Outcome};
use std::ffi::{CStr, CString, c_void};

/// The driver library as the dynamic loader opened it (`libcuda.so.1`, the name programs link against;
/// the same object cudarc loads through its `libcuda.so` alias).
pub struct DriverLibrary {
    handle: *mut c_void,
}

impl DriverLibrary {
    /// Opens `libcuda.so.1` through the normal library search path.
    pub fn open() -> Outcome<DriverLibrary> {
        // SAFETY: dlopen with a static NUL-terminated name; the driver's initializers have no preconditions.
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            // SAFETY: dlerror returns a NUL-terminated message owned by libc, or NULL.
            let err = unsafe { libc::dlerror() };
            let why = if err.is_null() {
                "unknown error".to_string()
            } else {
                // SAFETY: non-NULL dlerror results are valid C strings until the next dl* call.
                unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned()
            };
            return Err(Failure::new(format!("dlopen(libcuda.so.1): {why}")));
        }
        Ok(DriverLibrary { handle })
    }

    /// The address the library exports under `name`, or NULL.
    pub fn symbol(&self, name: &str) -> *mut c_void {
        let Ok(name) = CString::new(name) else { return std::ptr::null_mut() };
        // SAFETY: the handle came from dlopen and is still open; the name is NUL-terminated.
        unsafe { libc::dlsym(self.handle, name.as_ptr()) }
    }
}

impl Drop for DriverLibrary {
    fn drop(&mut self) {
        // SAFETY: closes the reference taken in `open`; cudarc holds its own, so the library stays loaded.
        unsafe { libc::dlclose(self.handle) };
    }
}
