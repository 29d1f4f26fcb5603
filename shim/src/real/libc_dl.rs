//! libc's own `dlsym` and `dlvsym`, found by reading libc's symbol table (see [`crate::elf`]): the
//! shim's lookups go through them, never through its own interposed `dlsym` (see [`crate::dl`]).

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// libc's `dlsym` (0 until found); [`crate::dl`]'s trampoline jumps through it.
pub static LIBC_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// libc's `dlvsym` (0 until found); [`crate::dl`]'s trampoline jumps through it.
pub static LIBC_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds libc's `dlsym` and `dlvsym` (in `libdl` before glibc 2.34). Aborts if they cannot be found:
/// without them no library could be resolved at all, and the trampolines would jump to address zero.
pub fn libc_functions() -> (usize, usize) {
    let cached = (LIBC_DLSYM.load(Ordering::Acquire), LIBC_DLVSYM.load(Ordering::Acquire));
    if cached.0 != 0 && cached.1 != 0 {
        return cached;
    }
    let find = |name: &str| crate::elf::lookup("libc.so", name).or_else(|| crate::elf::lookup("libdl.so", name));
    match (find("dlsym"), find("dlvsym")) {
        (Some(s), Some(v)) => {
            LIBC_DLSYM.store(s, Ordering::Release);
            LIBC_DLVSYM.store(v, Ordering::Release);
            (s, v)
        }
        _ => {
            eprintln!("tessera: cannot find libc's dlsym/dlvsym; the shim cannot run in this process");
            std::process::abort();
        }
    }
}

/// libc's `dlsym`, for the shim's own lookups (which must never come back to the shim's entry points).
pub fn real_dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let f: unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void =
        // SAFETY: the address is libc's dlsym, whose C signature this is.
        unsafe { std::mem::transmute(libc_functions().0) };
    // SAFETY: calling dlsym with a caller-provided handle and a NUL-terminated name.
    unsafe { f(handle, name.as_ptr()) }
}
