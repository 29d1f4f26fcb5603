//! The boundary every exported function crosses: the call is counted ([`crate::calls`]), waits while a
//! checkpoint lock holds the process ([`crate::gate`]), panics become `CUDA_ERROR_UNKNOWN`, `Result`s
//! become codes, and output pointers are checked before they are written.

use std::panic::{AssertUnwindSafe, Location, catch_unwind};
use std::sync::OnceLock;
use tessera_ffi::cuda::*;

/// What implementations return: `Ok` becomes `CUDA_SUCCESS`.
pub(crate) type CuRes<T = ()> = Result<T, CuResult>;

/// Runs an implementation, turning its result (or a panic) into a `CUresult`; blocks first while the
/// process is locked by `cuCheckpointProcessLock`.
#[track_caller]
pub(crate) fn entry(f: impl FnOnce() -> CuRes) -> CuResult {
    let _inside = crate::gate::Inside::enter();
    ungated(f)
}

/// [`entry`] for the checkpoint API itself, which must work while the gate is closed (a process may lock
/// and checkpoint itself, and its requests are served by another thread).
///
/// With `SIMGPU_TRACE` set, every call that fails says so on stderr with the source line of the entry
/// point that answered it (which names the function), so that a program that gives up after a refusal
/// deep inside a library shows which call it was; `CUDA_ERROR_NOT_READY`, a query's answer, is not told.
#[track_caller]
pub(crate) fn ungated(f: impl FnOnce() -> CuRes) -> CuResult {
    crate::calls::count();
    let code = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("simgpu: internal error (panic) in a driver call; returning CUDA_ERROR_UNKNOWN");
            CUDA_ERROR_UNKNOWN
        }
    };
    if code != CUDA_SUCCESS && code != CUDA_ERROR_NOT_READY && tracing() {
        eprintln!("simgpu: the entry point at {} returned {code}", Location::caller());
    }
    code
}

/// Whether `SIMGPU_TRACE` is set, read once (the failure path of every call asks).
pub(crate) fn tracing() -> bool {
    static TRACING: OnceLock<bool> = OnceLock::new();
    *TRACING.get_or_init(|| std::env::var_os("SIMGPU_TRACE").is_some())
}

/// Body of every generated stub.
pub(crate) fn not_supported(name: &str) -> CuResult {
    crate::calls::count();
    if tracing() {
        eprintln!("simgpu: {name} is not simulated (CUDA_ERROR_NOT_SUPPORTED)");
    }
    CUDA_ERROR_NOT_SUPPORTED
}

/// Writes `value` through an output pointer, or fails with `CUDA_ERROR_INVALID_VALUE` when it is NULL.
pub(crate) fn out<T>(ptr: *mut T, value: T) -> CuRes {
    if ptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL; the CUDA API contract makes the caller pass a valid, writable pointer of this type.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Reads a caller-provided input structure, or fails with `CUDA_ERROR_INVALID_VALUE` when it is NULL.
pub(crate) fn input<T: Copy>(ptr: *const T) -> CuRes<T> {
    if ptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL; the API contract makes the caller pass a readable value of this type.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Reads a NUL-terminated C string argument.
pub(crate) fn c_str<'a>(ptr: *const std::ffi::c_char) -> CuRes<&'a str> {
    if ptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL and, by the API contract, NUL-terminated and alive for the call.
    unsafe { std::ffi::CStr::from_ptr(ptr) }.to_str().map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// Fails with `CUDA_ERROR_INVALID_VALUE` unless `ok`.
pub(crate) fn ensure(ok: bool) -> CuRes {
    if ok { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) }
}

/// An exported function's address, as `cuGetProcAddress` hands it out.
pub(crate) struct Export(pub *const ());

// SAFETY: the pointers are addresses of functions, immutable for the life of the library.
unsafe impl Sync for Export {}

/// Declares one entry point under its legacy name and its per-thread-default-stream name (`_ptsz` or
/// `_ptds`): both run `$body` with `$mode` bound to the [`DefaultStream`](crate::stream::DefaultStream)
/// their name implies, so each pair is written once (and both names listed in `src/implemented.rs`).
macro_rules! stream_variants {
    ($(
        $(#[$doc:meta])*
        fn $legacy:ident / $per_thread:ident ($($arg:ident : $ty:ty),* $(,)?) => |$mode:ident| $body:expr;
    )*) => {$(
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $legacy($($arg: $ty),*) -> tessera_ffi::cuda::CuResult {
            let $mode = crate::stream::DefaultStream::Legacy;
            crate::guard::entry(|| $body)
        }

        #[doc = concat!("`", stringify!($per_thread), "`: `", stringify!($legacy), "` on the per-thread default stream.")]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $per_thread($($arg: $ty),*) -> tessera_ffi::cuda::CuResult {
            let $mode = crate::stream::DefaultStream::PerThread;
            crate::guard::entry(|| $body)
        }
    )*};
}
