//! The hook table ([`crate::table`]) checked against NVIDIA's `cuda.h`, and so are the calls the shim
//! makes for itself (`own_calls!` in [`crate::real`]): a signature typed wrong there compiles in Rust
//! (the shim only passes the arguments on) and breaks the call at run time, so each line's parameters
//! are compared with the header's declaration of the same exported name.
//!
//! No bindgen: the table's Rust types are translated to their C names and handed to g++, which compares
//! them with the header's parameter types one by one in `static_assert`s, so a mismatch is a compile
//! error naming the function and the parameter. C++ rather than a C redeclaration because the
//! comparison is of ABIs, not spellings: the table deliberately takes an enum parameter as `c_int`
//! (any value a program passes is defined, which a Rust enum would not be) and an opaque struct
//! pointer as `*mut c_void`, both of which a C redeclaration would reject. Everything else must be the
//! header's type exactly, down to the pointee's `const`.
//!
//! Only the CUDA lines are checked: the header package (`tools/cuda-headers.sh`) has no `nvml.h` or
//! `cublas_api.h`.

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use tessera_ffi::nvml::{NvmlDevice, NvmlMemory, NvmlMemoryV2};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_BATCH_OP,
    CUDA_MEMCPY3D_PEER, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr, CUexecAffinityParam, CUfunction,
    CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUlaunchConfig, CUmemAllocationProp,
    CUmemGenericAllocationHandle, CUmemcpyAttributes, CUmemoryPool, CUmipmappedArray, CUstream,
};

/// One exported name of the table with its parameters as written there (`stringify!`d types).
pub(crate) struct Signature {
    lib: &'static str,
    name: &'static str,
    params: &'static [(&'static str, &'static str)],
}

/// The table's lines as [`Signature`]s (a `/ per_thread_name` is a name of its own, same parameters).
macro_rules! signatures {
    ($(
        $lib:ident fn $name:ident $args:tt $(/ $pt:ident)? $(=> $(@$wrap:ident)? $handler:path)?;
    )*) => {
        // The types are named only through `stringify!`: referring to each keeps the imports above in
        // step with the table (a type the table uses but this module lacks fails to compile here too).
        #[allow(dead_code)]
        type Used = ($(signatures!(@types $args),)*);

        pub(super) const SIGNATURES: &[Signature] = &[
            $(
                Signature { lib: stringify!($lib), name: stringify!($name), params: signatures!(@params $args) },
                $(Signature { lib: stringify!($lib), name: stringify!($pt), params: signatures!(@params $args) },)?
            )*
        ];
    };
    (@params ($($arg:ident : $ty:ty),* $(,)?)) => {
        &[$((stringify!($arg), stringify!($ty))),*]
    };
    (@types ($($arg:ident : $ty:ty),* $(,)?)) => {
        ($(*const $ty,)*)
    };
}

crate::table::intercepted!(signatures);

/// The calls the shim makes for itself, as [`Signature`]s.
mod own {
    use super::*;
    use tessera_ffi::nvml::NvmlProcessInfo;
    use tessera_ffi::sys::{CUevent, CUmemAccessDesc, CUmemAllocationGranularity_flags, CUuuid};

    crate::real::own_calls!(signatures);
}

/// Exported names the pinned header (CUDA 12.9) does not declare: CUDA 13's batch copies. Checked
/// absent from it, so that a newer header brings them into the check.
const NOT_IN_HEADER: &[&str] =
    &["cuMemcpyBatchAsync_v2", "cuMemcpyBatchAsync_v2_ptsz", "cuMemcpy3DBatchAsync_v2", "cuMemcpy3DBatchAsync_v2_ptsz"];

/// Exported names the header declares only under another name with the same parameters: the `_ptsz`
/// `cuGetProcAddress_v2` is an inline wrapper there, declared only for programs built for per-thread
/// default streams (not with `__CUDA_API_VERSION_INTERNAL`).
const DECLARED_AS: &[(&str, &str)] = &[("cuGetProcAddress_v2_ptsz", "cuGetProcAddress_v2")];

/// The C spelling of a Rust FFI type of the table: pointers with the pointee's `const` written after
/// it (`*const *mut c_void` is `void* const*`), `std::ffi` names as C's, the fixed-width integers as
/// `<stdint.h>`'s, and tessera-ffi's `sys` types (cudarc's bindings of `cuda.h`) under their own name.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    // `stringify!` spaces a pointer's tokens (`* const c_char`); the table's source does not.
    if let Some(pointer) = rust.strip_prefix('*').map(str::trim_start) {
        if let Some(pointee) = pointer.strip_prefix("mut ") {
            return format!("{}*", c_type(pointee));
        }
        if let Some(pointee) = pointer.strip_prefix("const ") {
            return format!("{} const*", c_type(pointee));
        }
    }
    match rust {
        "c_void" => "void",
        "c_char" => "char",
        "c_uchar" => "unsigned char",
        "c_ushort" => "unsigned short",
        "c_int" => "int",
        "c_uint" => "unsigned int",
        "c_ulonglong" => "unsigned long long",
        "u32" => "uint32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "f32" => "float",
        name if name.starts_with("CU") => name,
        other => panic!("no C name for the table's Rust type `{other}`: add it to c_type"),
    }
    .to_string()
}

/// The C++ source that includes `cuda.h` and asserts each CUDA line's signature (see the module
/// documentation).
fn check_source() -> (String, usize) {
    // `__CUDA_API_VERSION_INTERNAL` (what NVIDIA builds the driver with) makes the header declare every
    // exported version of a function: the `_ptds`/`_ptsz` ones and the legacy unsuffixed ones, not only
    // those its `#define`s pick for programs.
    let mut src = String::from(
        r#"#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

// Whether a parameter the table types `Rust` passes as the header's `C` does.
template <class Rust, class C> constexpr bool same_abi() {
    if constexpr (std::is_same_v<Rust, C>) {
        return true;
    } else if constexpr (std::is_pointer_v<Rust> && std::is_pointer_v<C>) {
        using RustTo = std::remove_pointer_t<Rust>;
        using CTo = std::remove_pointer_t<C>;
        if constexpr (std::is_const_v<RustTo> != std::is_const_v<CTo>) {
            return false;
        } else if constexpr (std::is_void_v<RustTo> && std::is_class_v<std::remove_cv_t<CTo>>) {
            return true; // an opaque pointer to one of the header's structs
        } else {
            return same_abi<std::remove_cv_t<RustTo>, std::remove_cv_t<CTo>>();
        }
    } else if constexpr (std::is_enum_v<C> && std::is_integral_v<Rust>) {
        return sizeof(Rust) == sizeof(C); // an enum taken as an integer of its size
    } else {
        return false;
    }
}

template <class F> struct sig;
template <class R, class... A> struct sig<R(A...)> {
    using ret = R;
    static constexpr std::size_t arity = sizeof...(A);
    template <std::size_t I> using arg = std::tuple_element_t<I, std::tuple<A...>>;
};
"#,
    );
    let mut checked = 0;
    let all = SIGNATURES.iter().chain(own::SIGNATURES);
    for s in all.filter(|s| s.lib == "Cuda" && !NOT_IN_HEADER.contains(&s.name)) {
        let name = s.name;
        let declared = DECLARED_AS.iter().find(|(n, _)| *n == name).map_or(name, |(_, d)| d);
        // The header may `#define` the name to another version; the table names the exported symbol.
        writeln!(src, "\n#undef {declared}\nusing sig_{name} = sig<decltype({declared})>;").unwrap();
        writeln!(
            src,
            "static_assert(same_abi<uint32_t, sig_{name}::ret>(), \"{name}: the table returns u32, cuda.h does not return CUresult\");"
        )
        .unwrap();
        let n = s.params.len();
        writeln!(
            src,
            "static_assert(sig_{name}::arity == {n}, \"{name}: the table has {n} parameters, cuda.h another number\");"
        )
        .unwrap();
        for (i, (arg, ty)) in s.params.iter().enumerate() {
            let c = c_type(ty);
            writeln!(
                src,
                "static_assert(same_abi<{c}, sig_{name}::arg<{i}>>(), \"{name}: parameter {} `{arg}: {ty}` (C `{c}`) is not cuda.h's\");",
                i + 1
            )
            .unwrap();
        }
        checked += 1;
    }
    (src, checked)
}

/// The folder holding NVIDIA's `cuda.h`, installed by `tools/cuda-headers.sh` into the target folder
/// when missing (as for the end-to-end tests' C programs: never a silent skip).
fn cuda_include_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = manifest.parent().expect("the shim is in the workspace").join("tools/cuda-headers.sh");
    // This test binary is `target/<profile>/deps/<name>`.
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe.ancestors().nth(3).expect("the test binary is inside the target folder");
    let out = Command::new(&script).arg(target).output().expect("run tools/cuda-headers.sh");
    assert!(
        out.status.success(),
        "tools/cuda-headers.sh (needs python3 with pip): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn every_cuda_hook_has_the_signature_of_cuda_h() {
    let (src, checked) = check_source();
    assert!(checked > 100, "only {checked} CUDA names found in the table and the shim's own calls");
    let include = cuda_include_dir();
    let header = std::fs::read_to_string(include.join("cuda.h")).expect("read cuda.h");
    for name in NOT_IN_HEADER {
        assert!(
            SIGNATURES.iter().any(|s| s.name == *name),
            "{name} is no longer in the table: drop it from NOT_IN_HEADER"
        );
        assert!(!header.contains(name), "cuda.h now declares {name}: drop it from NOT_IN_HEADER");
    }
    let dir = std::env::temp_dir().join(format!("tessera-table-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("table_check.cpp");
    std::fs::write(&file, &src).unwrap();
    let out = Command::new("g++")
        .args(["-std=c++17", "-fsyntax-only", "-Werror", "-I"])
        .arg(&include)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("run g++ (needed for this check of the hook table against cuda.h): {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the hook table disagrees with cuda.h (g++ {}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn c_type_spells_pointers_with_the_pointee_const() {
    assert_eq!(c_type("*mut *mut c_void"), "void**");
    assert_eq!(c_type("*const CUDA_MEMCPY2D"), "CUDA_MEMCPY2D const*");
    assert_eq!(c_type("*const *const c_char"), "char const* const*");
    assert_eq!(c_type("* const * mut CUdeviceptr"), "CUdeviceptr* const*");
    assert_eq!(c_type("usize"), "size_t");
}
