//! The one table of intercepted functions, and what it generates.
//!
//! Each line of [`hooks!`](crate::hooks) declares an intercepted symbol once: its library, exact exported
//! name, C signature, optionally `/ per_thread_name` for the `_ptsz`/`_ptds` variant sharing the handler,
//! and the handler. From it come the
//! exported entry point, the lazily resolved pointer to the real function, and the [`Hook`] row that
//! `dlsym`, `dlvsym` and `cuGetProcAddress` consult. Adding a hook is one line.
//!
//! A handler receives the call's arguments and a closure that calls the real function with them
//! unchanged, so it can check before, call, and adjust after. A line ending `=> @around handler` gives the
//! handler only that closure: for calls that need something done around them whatever their arguments.

use crate::real::{self, Lib};
use std::ffi::{CString, c_void};
use std::sync::OnceLock;

/// One intercepted symbol.
pub struct Hook {
    /// Exported name.
    pub name: &'static str,
    /// Library it belongs to.
    pub lib: Lib,
    /// The shim's entry point (use [`Hook::address`]).
    pub entry: *const (),
}

// SAFETY: `entry` is the address of a function, immutable for the life of the library.
unsafe impl Sync for Hook {}

impl Hook {
    /// The shim's entry point.
    pub fn address(&self) -> *mut c_void {
        self.entry as *mut c_void
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

/// Declares intercepted functions (see the module documentation).
macro_rules! hooks {
    ($(
        $lib:ident fn $name:ident $args:tt $(/ $pt:ident)? => $(@$wrap:ident)? $handler:path;
    )*) => {
        /// Pointers to the real functions, resolved on first use.
        #[allow(non_upper_case_globals)]
        pub mod real_fns {
            use super::*;
            $(
                hooks!(@real $lib $name $args);
                $(hooks!(@real $lib $pt $args);)?
            )*
        }

        $(
            hooks!(@entries $lib $name [$($pt)?] $args [$(@$wrap)?] $handler);
        )*

        /// Every intercepted symbol.
        pub static HOOKS: &[crate::hooks::Hook] = &[
            $(
                hooks!(@row $lib $name),
                $(hooks!(@row $lib $pt),)?
            )*
        ];
    };
    (@real $lib:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?)) => {
        pub static $name: crate::real::RealFn<unsafe extern "C" fn($($ty),*) -> u32> =
            crate::real::RealFn::new(crate::real::Lib::$lib, {
                const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                    Ok(n) => n,
                    Err(_) => panic!("hook names contain no NUL"),
                };
                NAME
            });
    };
    (@entries $lib:ident $name:ident [$($pt:ident)?] $args:tt $wrap:tt $handler:path) => {
        hooks!(@entry $lib $name $args => $wrap $handler);
        $(hooks!(@entry $lib $pt $args => $wrap $handler);)?
    };
    (@entry $lib:ident $name:ident $args:tt => [@around] $handler:path) => {
        hooks!(@entry $lib $name $args => |real| $handler(real));
    };
    (@entry $lib:ident $name:ident $args:tt => [] $handler:path) => {
        hooks!(@entry $lib $name $args => |real| hooks!(@pass real $args $handler));
    };
    (@pass $real:ident ($($arg:ident : $ty:ty),* $(,)?) $handler:path) => {
        $handler($($arg,)* $real)
    };
    (@entry $lib:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?) => |$r:ident| $call:expr) => {
        #[doc = concat!("Intercepted `", stringify!($name), "`.")]
        ///
        /// # Safety
        /// As the real function.
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
            crate::guard::call(stringify!($name), || {
                crate::log::trace(format_args!("call {}", stringify!($name)));
                let $r = || match real_fns::$name.get() {
                    // SAFETY: the real function has this exact C signature.
                    Some(f) => unsafe { f($($arg),*) },
                    None => crate::hooks::missing(crate::real::Lib::$lib),
                };
                $call
            })
        }
    };
    (@row $lib:ident $name:ident) => {
        crate::hooks::Hook { name: stringify!($name), lib: crate::real::Lib::$lib, entry: $name as *const () }
    };
}

pub(crate) use hooks;

/// The hook named `name`, if the symbol is intercepted.
pub fn find(name: &[u8]) -> Option<&'static Hook> {
    crate::table::HOOKS.iter().find(|h| h.name.as_bytes() == name)
}

/// The hook substituting for the real driver function at `addr` (how `cuGetProcAddress` answers are
/// swapped).
pub fn for_real_address(addr: *mut c_void) -> Option<&'static Hook> {
    static BY_REAL: OnceLock<Vec<(usize, &'static Hook)>> = OnceLock::new();
    let table = BY_REAL.get_or_init(|| {
        let mut v: Vec<(usize, &'static Hook)> = crate::table::HOOKS
            .iter()
            .filter(|h| h.lib == Lib::Cuda)
            .filter_map(|h| {
                let name = CString::new(h.name).ok()?;
                let a = real::address(h.lib, &name);
                (!a.is_null()).then_some((a as usize, h))
            })
            .collect();
        v.sort_by_key(|(a, _)| *a);
        v
    });
    let i = table.binary_search_by_key(&(addr as usize), |(a, _)| *a).ok()?;
    Some(table[i].1)
}

#[cfg(test)]
mod tests {
    use crate::real::Lib;

    /// A misspelt hook would export a name no program calls and intercept nothing.
    #[test]
    fn every_driver_hook_is_a_symbol_the_real_driver_exports() {
        for hook in crate::table::HOOKS.iter().filter(|h| h.lib == Lib::Cuda) {
            assert!(
                tessera_ffi::proc_address::is_exported(hook.name) || hook.name == "cuGetProcAddress_v2_ptsz",
                "{} is not an exported driver symbol",
                hook.name
            );
        }
    }
}
