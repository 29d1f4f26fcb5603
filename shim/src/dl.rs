//! `dlsym` and `dlvsym` interposition.
//!
//! Both entry points are naked trampolines: they ask [`hook_for`] whether the lookup names an intercepted
//! function on the driver's handle (or `RTLD_DEFAULT`/`RTLD_NEXT`), return the shim's entry if so, and
//! otherwise *jump* to libc's implementation. Jumping rather than calling keeps the caller's return address
//! in place, which is what `RTLD_NEXT` is resolved against: a preloaded allocator asking for the next
//! `malloc` still gets libc's, not its own.

use crate::real::libc_dl::{LIBC_DLSYM, LIBC_DLVSYM, libc_functions};
use crate::{hooks, real};
use std::ffi::{CStr, c_char, c_void};

/// `RTLD_DEFAULT` as the C headers define it.
const RTLD_DEFAULT: usize = 0;
/// `RTLD_NEXT` as the C headers define it.
const RTLD_NEXT: usize = usize::MAX;

/// The shim's entry for `name` when a lookup on `handle` should see it, else NULL.
///
/// Called by the trampolines before anything else; also makes sure libc's functions are known, since
/// the trampolines jump to them right after.
extern "C" fn hook_for(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    libc_functions();
    std::panic::catch_unwind(|| {
        if name.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: dlsym's contract: a NUL-terminated symbol name.
        let name = unsafe { CStr::from_ptr(name) };
        let Some(hook) = hooks::find(name.to_bytes()) else { return std::ptr::null_mut() };
        let h = handle as usize;
        let ours = h == RTLD_DEFAULT || h == RTLD_NEXT || real::is_handle(hook.lib, handle);
        if ours { hook.address() } else { std::ptr::null_mut() }
    })
    .unwrap_or(std::ptr::null_mut())
}

/// `dlsym`: intercepted CUDA/NVML names resolve to the shim; everything else is libc's answer.
///
/// # Safety
/// As libc's `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // Entry: rsp = 8 (mod 16). Two pushes and 8 bytes keep the call aligned.
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {hook}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "jmp qword ptr [rip + {libc}]",
        "2:",
        "ret",
        hook = sym hook_for,
        libc = sym LIBC_DLSYM,
    )
}

/// `dlvsym`: as [`dlsym`], with the version passed through to libc for names that are not intercepted.
///
/// # Safety
/// As libc's `dlvsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
    // Entry: rsp = 8 (mod 16). Three pushes leave it aligned for the call.
    std::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        "call {hook}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jnz 2f",
        "jmp qword ptr [rip + {libc}]",
        "2:",
        "ret",
        hook = sym hook_for,
        libc = sym LIBC_DLVSYM,
    )
}
