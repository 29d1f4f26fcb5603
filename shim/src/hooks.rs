//! What the one table of intercepted functions ([`crate::table`]) generates here.
//!
//! Each line of the table declares an intercepted symbol once: its library, exact exported
//! name, C signature, optionally `/ per_thread_name` for the `_ptsz`/`_ptds` variant sharing the handler,
//! and the handler. From it come the
//! exported entry point, the lazily resolved pointer to the real function (in [`crate::real`]), and the [`Hook`] row that
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

/// Declares intercepted functions (see the module documentation).
macro_rules! hooks {
    ($(
        $lib:ident fn $name:ident $args:tt $(/ $pt:ident)? => $(@$wrap:ident)? $handler:path;
    )*) => {
        $(
            hooks!(@entries $lib $name [$($pt)?] $args [$(@$wrap)?] $handler);
        )*

        /// Every intercepted symbol.
        pub static HOOKS: &[Hook] = &[
            $(
                hooks!(@row $lib $name),
                $(hooks!(@row $lib $pt),)?
            )*
        ];
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
            // The closures below capture this one reference, not each argument: they are moved down the
            // handler's path (a launch's passes several functions), and one word moves for free.
            let args = &($($arg,)*);
            crate::guard::call(stringify!($name), move || {
                crate::log::trace(format_args!("call {}", stringify!($name)));
                #[allow(unused_variables)]
                let ($($arg,)*) = *args;
                let $r = move || {
                    let ($($arg,)*) = *args;
                    match crate::real::$name.get() {
                        // SAFETY: the real function has this exact C signature.
                        Some(f) => unsafe { f($($arg),*) },
                        None => crate::real::missing(crate::real::Lib::$lib),
                    }
                };
                $call
            })
        }
    };
    (@row $lib:ident $name:ident) => {
        Hook { name: stringify!($name), lib: Lib::$lib, entry: $name as *const () }
    };
}

// The exported entry points and [`HOOKS`], from the one table. The handler modules and the names the
// table's lines use are in scope for it here.
use crate::{init, memory, nvml, proc_address, soft, tensor};
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort};
use tessera_ffi::nvml::{NvmlDevice, NvmlMemory, NvmlMemoryV2};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_BATCH_OP,
    CUDA_MEMCPY3D_PEER, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr, CUexecAffinityParam, CUfunction,
    CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUlaunchConfig, CUmemAllocationProp,
    CUmemGenericAllocationHandle, CUmemcpyAttributes, CUmemoryPool, CUmipmappedArray, CUstream,
};

crate::table::intercepted!(hooks);

/// The hook named `name`, if the symbol is intercepted.
pub fn find(name: &[u8]) -> Option<&'static Hook> {
    HOOKS.iter().find(|h| h.name.as_bytes() == name)
}

/// The hook substituting for the real driver function at `addr` (how `cuGetProcAddress` answers are
/// swapped).
pub fn for_real_address(addr: *mut c_void) -> Option<&'static Hook> {
    static BY_REAL: OnceLock<Vec<(usize, &'static Hook)>> = OnceLock::new();
    let table = BY_REAL.get_or_init(|| {
        let mut v: Vec<(usize, &'static Hook)> = HOOKS
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
        for hook in super::HOOKS.iter().filter(|h| h.lib == Lib::Cuda) {
            assert!(
                tessera_ffi::proc_address::is_exported(hook.name) || hook.name == "cuGetProcAddress_v2_ptsz",
                "{} is not an exported driver symbol",
                hook.name
            );
        }
    }
}
