//! The real libraries underneath the shim, and every function of theirs the shim calls.
//!
//! - [`library`]: loading the real CUDA driver, NVML and cuBLAS, and addresses in them.
//! - [`fns`]: one lazily resolved [`RealFn`] per real function, named after its symbol: those of the
//!   intercepted functions (generated from [`crate::table`]) and those the shim calls for itself.
//! - [`libc_dl`]: libc's own `dlsym`/`dlvsym`, which the shim's lookups go through.
//!
//! Every other module takes its real functions from here, so none has to import another for them.

mod fns;
pub mod libc_dl;
mod library;

pub use fns::*;
pub use library::{Lib, address, is_handle, is_loaded};

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::OnceLock;

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
        // SAFETY: F is the function-pointer type of this symbol (declared once, in `fns`), and the
        // address is non-zero.
        (addr != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&addr) })
    }
}

/// What a call of a real function that the real library does not export returns.
pub fn missing(lib: Lib) -> u32 {
    match lib {
        Lib::Cuda => tessera_ffi::cuda::CUDA_ERROR_NOT_SUPPORTED,
        Lib::Nvml => tessera_ffi::nvml::NVML_ERROR_FUNCTION_NOT_FOUND,
        Lib::Cublas => tessera_ffi::cublas::CUBLAS_STATUS_NOT_SUPPORTED,
    }
}
