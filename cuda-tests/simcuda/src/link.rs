//! The driver's JIT linker (`cuLinkCreate_v2`, `cuLinkAddData_v2`, `cuLinkAddFile_v2`, `cuLinkComplete`,
//! `cuLinkDestroy`): PTX, cubins, fatbins and relocatable objects are gathered for the current device
//! (each must run on it, as when loaded), and completing writes one cubin of their kernels and globals
//! for the device's architecture (`simgpu::image::cubin::write`), which the module calls load. The image
//! stays valid until the link state is destroyed, as the real one does.

use crate::context::current;
use crate::driver::driver;
use crate::guard::{CuRes, c_str, ensure, entry, out};
use parking_lot::Mutex;
use simgpu::image::{self, Arch, Capability, ImageError, Kind, Module, cubin};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Arc;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUjit_option, CUjitInputType, CUlinkState};

/// One link in progress.
pub struct Link {
    /// The device's capability, from the context current at `cuLinkCreate`.
    cc: Capability,
    /// What was added so far.
    module: Mutex<Module>,
    /// The image `cuLinkComplete` handed out, kept until `cuLinkDestroy`.
    image: Mutex<Option<Vec<u8>>>,
}

/// The part of `bytes` (of input type `kind`) that runs on a device of `cc`.
fn input(kind: CUjitInputType, bytes: &[u8], cc: Capability) -> CuRes<Module> {
    let loaded = match kind {
        CUjitInputType::CU_JIT_INPUT_PTX => image::load(bytes, cc),
        CUjitInputType::CU_JIT_INPUT_CUBIN | CUjitInputType::CU_JIT_INPUT_OBJECT
            if image::kind(bytes) == Kind::Cubin =>
        {
            image::load(bytes, cc)
        }
        CUjitInputType::CU_JIT_INPUT_FATBINARY if image::kind(bytes) == Kind::Fatbin => image::load(bytes, cc),
        // Archives of objects (`.a`) and NVVM IR (which needs LTO through nvJitLink) are not read.
        CUjitInputType::CU_JIT_INPUT_LIBRARY | CUjitInputType::CU_JIT_INPUT_NVVM => {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        _ => Err(ImageError::Invalid("the data is not of the type given".into())),
    };
    loaded.map_err(|e| match e {
        ImageError::NoBinaryForGpu => CUDA_ERROR_NO_BINARY_FOR_GPU,
        ImageError::NotPtx => CUDA_ERROR_INVALID_PTX,
        ImageError::Invalid(_) => CUDA_ERROR_INVALID_IMAGE,
    })
}

/// Adds `bytes` to the link `state`; a kernel or global defined twice is refused.
fn add(state: CUlinkState, kind: CUjitInputType, bytes: &[u8]) -> CuRes {
    let link = driver()?.links.get(state as u64)?;
    let more = input(kind, bytes, link.cc)?;
    link.module.lock().merge(more).map_err(|_| CUDA_ERROR_INVALID_IMAGE)
}

/// `cuLinkCreate_v2`: JIT options are accepted and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkCreate_v2(
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
    state: *mut CUlinkState,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!state.is_null())?;
        let device = current()?.device;
        let cc = d.device_config(device).profile.compute_capability;
        let link = Link { cc, module: Mutex::default(), image: Mutex::default() };
        out(state, d.links.insert(Arc::new(link)) as CUlinkState)
    })
}

/// `cuLinkCreate` (the ABI before CUDA 6.5): as `cuLinkCreate_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkCreate(n: c_uint, o: *mut CUjit_option, v: *mut *mut c_void, s: *mut CUlinkState) -> CuResult {
    cuLinkCreate_v2(n, o, v, s)
}

/// `cuLinkAddData_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkAddData_v2(
    state: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    _name: *const c_char,
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
) -> CuResult {
    entry(|| {
        ensure(!data.is_null() && size > 0)?;
        // SAFETY: the caller passes `size` readable bytes at `data`.
        add(state, kind, unsafe { std::slice::from_raw_parts(data as *const u8, size) })
    })
}

/// `cuLinkAddData` (the ABI before CUDA 6.5): as `cuLinkAddData_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkAddData(
    state: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CuResult {
    cuLinkAddData_v2(state, kind, data, size, name, n, options, values)
}

/// `cuLinkAddFile_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkAddFile_v2(
    state: CUlinkState,
    kind: CUjitInputType,
    path: *const c_char,
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
) -> CuResult {
    entry(|| {
        let bytes = std::fs::read(c_str(path)?).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
        add(state, kind, &bytes)
    })
}

/// `cuLinkAddFile` (the ABI before CUDA 6.5): as `cuLinkAddFile_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkAddFile(
    state: CUlinkState,
    kind: CUjitInputType,
    path: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CuResult {
    cuLinkAddFile_v2(state, kind, path, n, options, values)
}

/// `cuLinkComplete`: the linked cubin, owned by the link state.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkComplete(state: CUlinkState, cubin_out: *mut *mut c_void, size_out: *mut usize) -> CuResult {
    entry(|| {
        ensure(!cubin_out.is_null() && !size_out.is_null())?;
        let link = driver()?.links.get(state as u64)?;
        let module = link.module.lock();
        // Nothing added: there is nothing to link (the real linker fails the same way).
        ensure(!module.entries.is_empty() || !module.globals.is_empty())?;
        let arch = Arch { sm: link.cc.0 * 10 + link.cc.1, specific: false };
        let mut image = link.image.lock();
        let bytes = image.insert(cubin::write(&module, arch));
        out(size_out, bytes.len())?;
        out(cubin_out, bytes.as_mut_ptr() as *mut c_void)
    })
}

/// `cuLinkDestroy`: frees the link state and the image it completed.
#[unsafe(no_mangle)]
pub extern "C" fn cuLinkDestroy(state: CUlinkState) -> CuResult {
    entry(|| driver()?.links.remove(state as u64).map(drop))
}
