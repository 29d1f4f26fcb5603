//! The real libraries underneath the shim and lazily resolved pointers into them.

use crate::dl::real_dlsym;
use std::ffi::{CStr, CString, c_void};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// A library the shim intercepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    /// The CUDA driver.
    Cuda,
    /// NVML.
    Nvml,
}

impl Lib {
    /// Environment variable naming the real library, and the name the loader finds by default.
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Lib::Cuda => ("TESSERA_REAL_LIBCUDA", "libcuda.so.1"),
            Lib::Nvml => ("TESSERA_REAL_LIBNVML", "libnvidia-ml.so.1"),
        }
    }

    /// A function every real copy of the library exports, used to tell it from the shim.
    fn probe_symbol(self) -> &'static CStr {
        match self {
            Lib::Cuda => c"cuInit",
            Lib::Nvml => c"nvmlInit_v2",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

static HANDLES: [OnceLock<Result<usize, String>>; 2] = [OnceLock::new(), OnceLock::new()];

fn open(lib: Lib) -> Result<usize, String> {
    let (var, default) = lib.source();
    let path = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let c_path = CString::new(path.clone()).map_err(|_| format!("{var}={path:?} contains a NUL byte"))?;
    // SAFETY: dlopen with a NUL-terminated path; loading the real driver runs its constructors, as
    // loading it without the shim would.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local NUL-terminated message or NULL.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: non-NULL, NUL-terminated.
            unsafe { CStr::from_ptr(why) }.to_string_lossy().into_owned()
        };
        return Err(format!("cannot load the real library {path:?} (set {var}): {why}"));
    }
    let theirs = real_dlsym(handle, lib.probe_symbol());
    let ours = crate::hooks::find(lib.probe_symbol().to_bytes()).map(|h| h.address());
    if theirs.is_null() || Some(theirs) == ours {
        return Err(format!(
            "{path:?} is not the real library: it resolves to the Tessera shim itself or lacks {:?} (set {var})",
            lib.probe_symbol()
        ));
    }
    Ok(handle as usize)
}

/// The real library's handle, loaded on first use.
pub fn handle(lib: Lib) -> Result<*mut c_void, &'static str> {
    match HANDLES[lib.index()].get_or_init(|| open(lib)) {
        Ok(h) => Ok(*h as *mut c_void),
        Err(e) => Err(e.as_str()),
    }
}

/// Address of `name` in the real library, or NULL when it lacks it (or cannot be loaded).
pub fn address(lib: Lib, name: &CStr) -> *mut c_void {
    handle(lib).map_or(std::ptr::null_mut(), |h| real_dlsym(h, name))
}

/// A real entry point of type `F` (an `unsafe extern "C" fn`), resolved on first use.
pub struct RealFn<F> {
    lib: Lib,
    name: &'static CStr,
    slot: OnceLock<usize>,
    kind: PhantomData<F>,
}

impl<F: Copy> RealFn<F> {
    /// An unresolved entry point `name` of `lib`.
    pub const fn new(lib: Lib, name: &'static CStr) -> Self {
        RealFn { lib, name, slot: OnceLock::new(), kind: PhantomData }
    }

    /// The function, or `None` when the real library does not export it.
    pub fn get(&self) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>()) };
        let addr = *self.slot.get_or_init(|| address(self.lib, self.name) as usize);
        // SAFETY: F is the function-pointer type of this symbol (declared once in the hook table), and
        // the address is non-zero.
        (addr != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
    }
}
