//! Loading the real libraries underneath the shim, and addresses in them.

use super::libc_dl::real_dlsym;
use std::ffi::{CStr, CString, c_void};
use std::sync::OnceLock;

/// A library the shim intercepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    /// The CUDA driver.
    Cuda,
    /// NVML.
    Nvml,
    /// cuBLAS, loaded only when a program calls an intercepted cuBLAS function.
    Cublas,
}

impl Lib {
    /// Environment variable naming the real library, and the name the loader finds by default.
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Lib::Cuda => ("TESSERA_REAL_LIBCUDA", "libcuda.so.1"),
            Lib::Nvml => ("TESSERA_REAL_LIBNVML", "libnvidia-ml.so.1"),
            Lib::Cublas => ("TESSERA_REAL_LIBCUBLAS", "libcublas.so.12"),
        }
    }

    /// A function every real copy of the library exports, used to tell it from the shim.
    fn probe_symbol(self) -> &'static CStr {
        match self {
            Lib::Cuda => c"cuInit",
            Lib::Nvml => c"nvmlInit_v2",
            Lib::Cublas => c"cublasCreate_v2",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Each real library's handle once loaded, or why it could not be (the shim's per-process state).
static HANDLES: [OnceLock<Result<usize, LoadError>>; 3] = [const { OnceLock::new() }; 3];

/// Why a real library cannot be used; each names the variable that chooses it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The variable's value is not UTF-8.
    #[error("{var}={value:?} is not valid UTF-8")]
    NotUtf8 {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: std::ffi::OsString,
    },
    /// The path holds a NUL byte.
    #[error("{var}={path:?} contains a NUL byte")]
    Nul {
        /// The variable.
        var: &'static str,
        /// The path.
        path: String,
    },
    /// The loader refused it.
    #[error("cannot load the real library {path:?} (set {var}): {why}")]
    Load {
        /// The library.
        path: String,
        /// The variable.
        var: &'static str,
        /// `dlerror`'s message.
        why: String,
    },
    /// It is the shim itself, or lacks the library's first entry point.
    #[error("{path:?} is not the real library: it resolves to the Tessera shim itself or lacks {probe:?} (set {var})")]
    NotReal {
        /// The library.
        path: String,
        /// The variable.
        var: &'static str,
        /// The entry point looked for.
        probe: &'static CStr,
    },
}

/// What the loader is asked for: the variable's value when set, else the default name (and the variable).
/// A value that is not UTF-8 is an error naming the variable, never a silent fall back to the default.
fn requested(lib: Lib) -> Result<(String, &'static str), LoadError> {
    let (var, default) = lib.source();
    match std::env::var_os(var) {
        None => Ok((default.to_string(), var)),
        Some(v) => v.into_string().map(|v| (v, var)).map_err(|value| LoadError::NotUtf8 { var, value }),
    }
}

/// The file a loaded address belongs to, for messages.
fn file_of(addr: *mut c_void) -> String {
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader data and writes `info`; a name it returns is NUL-terminated.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return "?".into();
    }
    // SAFETY: as above.
    unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned()
}

/// The loaded object `addr` belongs to (its base address), if any.
fn object_of(addr: *const c_void) -> Option<usize> {
    // SAFETY: an all-zero Dl_info is a valid value for dladdr to overwrite.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader data and writes `info`.
    (unsafe { libc::dladdr(addr, &mut info) } != 0).then_some(info.dli_fbase as usize)
}

/// True when `addr` is in the shim's own object: a "real" library that resolves there is the shim
/// itself (asked for by mistake), and calling it would come straight back.
fn in_the_shim(addr: *mut c_void) -> bool {
    let ours = object_of(in_the_shim as *const c_void);
    ours.is_some() && object_of(addr) == ours
}

/// The message `dlerror` holds.
fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local NUL-terminated message or NULL.
    let why = unsafe { libc::dlerror() };
    if why.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated.
        unsafe { CStr::from_ptr(why) }.to_string_lossy().into_owned()
    }
}

fn open(lib: Lib) -> Result<usize, LoadError> {
    let (path, var) = requested(lib)?;
    let c_path = CString::new(path.clone()).map_err(|_| LoadError::Nul { var, path: path.clone() })?;
    // SAFETY: dlopen with a NUL-terminated path; loading the real driver runs its constructors, as
    // loading it without the shim would.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(LoadError::Load { path, var, why: dl_error() });
    }
    let theirs = real_dlsym(handle, lib.probe_symbol());
    if theirs.is_null() || in_the_shim(theirs) {
        // SAFETY: drops the reference just taken; nothing from this library is in use.
        unsafe { libc::dlclose(handle) };
        return Err(LoadError::NotReal { path, var, probe: lib.probe_symbol() });
    }
    crate::log::info(format_args!("real library for {path:?}: {}", file_of(theirs)));
    Ok(handle as usize)
}

/// The real library's handle, loaded on first use. A failure is reported once, at error level: every
/// intercepted call then returns the library's "not available" code, and this says why.
pub fn handle(lib: Lib) -> Result<*mut c_void, &'static LoadError> {
    let opened = HANDLES[lib.index()].get_or_init(|| open(lib).inspect_err(|e| crate::log::error(format_args!("{e}"))));
    match opened {
        Ok(h) => Ok(*h as *mut c_void),
        Err(e) => Err(e),
    }
}

/// True when `handle` (a program's `dlopen` result) is the real library's. Never loads the library: a
/// lookup on an unrelated handle must not pull a driver into the process, and this runs inside `dlsym`,
/// possibly from a constructor of the very library being loaded.
pub fn is_handle(lib: Lib, handle: *mut c_void) -> bool {
    if let Some(opened) = HANDLES[lib.index()].get() {
        return opened.as_ref().is_ok_and(|h| *h == handle as usize);
    }
    let Some(c_path) = requested(lib).ok().and_then(|(path, _)| CString::new(path).ok()) else { return false };
    // SAFETY: RTLD_NOLOAD only returns (and references) an object that is already loaded.
    let loaded = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if loaded.is_null() {
        return false;
    }
    // SAFETY: drops the reference RTLD_NOLOAD just took; the program still holds its own.
    unsafe { libc::dlclose(loaded) };
    loaded == handle
}

/// True when the shim has already loaded the real library (never loads it): for queries that must not
/// pull a driver into a process that does not use it.
pub fn is_loaded(lib: Lib) -> bool {
    HANDLES[lib.index()].get().is_some_and(|h| h.is_ok())
}

/// Address of `name` in the real library, or NULL when it lacks it (or cannot be loaded).
pub fn address(lib: Lib, name: &CStr) -> *mut c_void {
    handle(lib).map_or(std::ptr::null_mut(), |h| real_dlsym(h, name))
}
