//! Symbol lookup that never goes through the Tessera shim: when the shim is preloaded in the process
//! (a worker that loaded the provider library), its interposed `dlsym` answers NVML names with its own
//! hooks, which report a vGPU's view and fix the shim's configuration on first use. Tessera's own NVML
//! queries want the device as it is, so they call libc's `dlsym`, found in libc's symbol table
//! (`tessera_ffi::elf`).

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

/// libc's `dlsym` (or libdl's before glibc 2.34), `None` when neither is found.
fn libc_dlsym() -> Option<unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void> {
    static FOUND: OnceLock<Option<usize>> = OnceLock::new();
    let address = (*FOUND.get_or_init(|| {
        tessera_ffi::elf::lookup("libc.so", "dlsym").or_else(|| tessera_ffi::elf::lookup("libdl.so", "dlsym"))
    }))?;
    // SAFETY: the address is libc's dlsym, whose C signature this is.
    Some(unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void>(address)
    })
}

/// `name` in the library of `handle` (a `dlopen` handle), by libc's own `dlsym`; null when absent.
///
/// # Safety
/// `handle` is a live `dlopen` handle.
pub unsafe fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match libc_dlsym() {
        // SAFETY: a dlopen handle and a NUL-terminated name.
        Some(f) => unsafe { f(handle, name.as_ptr()) },
        // SAFETY: as above, through the dynamic linker's dlsym.
        None => unsafe { libc::dlsym(handle, name.as_ptr()) },
    }
}
