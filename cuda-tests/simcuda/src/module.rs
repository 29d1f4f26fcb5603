//! Modules and libraries loaded from PTX text, cubins and fatbins (`simgpu::image`), their functions
//! (kernels) and globals.

use crate::context::current;
use crate::driver::{Driver, driver};
use crate::guard::{CuRes, c_str, ensure, entry, out};
use crate::memory;
use parking_lot::Mutex;
use simgpu::image::{self, Entry, ImageError, Kind, Param};
use simgpu::kernels::Builtin;
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int, c_uint, c_void};
use std::sync::Arc;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUdeviceptr, CUfunction, CUjit_option, CUkernel, CUlibrary, CUlibraryOption, CUmodule};

/// A loaded module (or library, which the simulation treats the same way).
pub struct Module {
    /// Owning context handle (0 for libraries loaded with no context current).
    pub ctx: u64,
    /// Kernel entry points in image order.
    pub entries: Vec<Entry>,
    /// Globals: name to (address, bytes).
    globals: HashMap<String, (u64, u64)>,
    /// Function handles handed out so far, by name.
    functions: Mutex<HashMap<String, u64>>,
}

/// A kernel of a module.
pub struct Function {
    /// Entry name.
    pub name: CString,
    /// The built-in it is, if any.
    pub builtin: Option<Builtin>,
    /// Module handle.
    pub module: u64,
    /// Its parameters (offset and size in the parameter buffer), when the image says.
    pub params: Option<Vec<Param>>,
    /// Its name, shared with the engine calls of its launches.
    pub short_name: Arc<str>,
    /// How long a launch of it occupies the engine when it is not a built-in (`SIMGPU_KERNEL_TIMES`).
    pub uncomputed_ns: u64,
    /// Attributes set with `cuFuncSetAttribute`.
    attrs: Mutex<HashMap<c_int, c_int>>,
}

/// What a program passes to be loaded: one image, or, from a fatbin wrapper of version 2 (what nvcc
/// registers for programs built with `-rdc`), the device-linked container and the relocatable fatbins it
/// was linked from.
struct Images<'a> {
    /// The image, or the device-linked container.
    linked: &'a [u8],
    /// The relocatable fatbins, linked for the device when nothing in `linked` runs on it.
    prelinked: Vec<&'a [u8]>,
}

impl<'a> Images<'a> {
    /// One image.
    fn one(image: &'a [u8]) -> Images<'a> {
        Images { linked: image, prelinked: Vec::new() }
    }
}

/// Parses and loads an image into the current context (or, with `allow_no_context`, none: a library,
/// then loaded for device 0): the part of it the device runs (`simgpu::image::load`). When nothing in
/// a device-linked container runs on the device (built for another architecture), its relocatable
/// fatbins are linked for it instead, each contributing the part that runs there, as the JIT linker
/// joins them.
fn load(d: &Driver, images: Images, allow_no_context: bool) -> CuRes<u64> {
    let (device, ctx) = match current() {
        Ok(c) => (c.device, c.handle()),
        Err(e) if !allow_no_context => return Err(e),
        Err(_) => (0, 0),
    };
    let cc = d.device_config(device).profile.compute_capability;
    let parsed = match image::load(images.linked, cc) {
        Err(ImageError::NoBinaryForGpu) if !images.prelinked.is_empty() => {
            images.prelinked.iter().try_fold(image::Module::default(), |mut linked, &object| {
                linked.merge(image::load(object, cc)?)?;
                Ok(linked)
            })
        }
        parsed => parsed,
    }
    .map_err(|e| match e {
        ImageError::NoBinaryForGpu => CUDA_ERROR_NO_BINARY_FOR_GPU,
        ImageError::Invalid(_) | ImageError::NotPtx => CUDA_ERROR_INVALID_IMAGE,
    })?;
    let mut globals = HashMap::new();
    for g in &parsed.globals {
        let size = g.size.max(1) as u64;
        let addr = d.memory.allocate(d, size, memory::Kind::Device, device, ctx, 0)?;
        let init = &g.init[..g.init.len().min(g.size)];
        // SAFETY: device memory is mapped in this process at its address; the allocation just made holds
        // at least `size >= init.len()` bytes, and nothing else refers to it yet.
        unsafe { std::ptr::copy_nonoverlapping(init.as_ptr(), addr as *mut u8, init.len()) };
        globals.insert(g.name.clone(), (addr, g.size as u64));
    }
    Ok(d.modules.insert(Arc::new(Module {
        ctx,
        entries: parsed.entries,
        globals,
        functions: Mutex::new(HashMap::new()),
    })))
}

/// Relocatable fatbins a version 2 wrapper may list (a longer list is taken for damage).
const MAX_PRELINKED: usize = 1 << 16;

/// The image a program passes by pointer, whole: a cubin or fatbin as long as its headers say, PTX
/// text up to its NUL; a fatbin wrapper (`__fatBinC_Wrapper_t`) is followed to its container, and a
/// version 2 wrapper's NULL-terminated list of relocatable fatbins is read too.
fn images<'a>(image: *const c_void) -> CuRes<Images<'a>> {
    ensure(!image.is_null())?;
    // SAFETY: the caller passes a readable image; every valid one has at least 4 bytes (PTX text is
    // longer than its mandatory `.version` directive, binaries begin with a 4-byte magic).
    let head = |len: usize| unsafe { std::slice::from_raw_parts(image as *const u8, len) };
    if image::kind(head(4)) != Kind::Wrapper {
        return image_bytes(image).map(Images::one);
    }
    // SAFETY: the wrapper is `{ u32 magic, u32 version, const void *data, void *filename_or_fatbins }`,
    // 8-byte aligned (nvcc's `__fatBinC_Wrapper_t`).
    let (version, data, list) = unsafe {
        let words = image as *const *const c_void;
        (*(image as *const u32).add(1), *words.add(1), *words.add(2) as *const *const c_void)
    };
    let linked = image_bytes(data).map_err(|_| CUDA_ERROR_INVALID_IMAGE)?;
    match version {
        // Version 1's second pointer names a file offline tools wrote, not read here.
        1 => Ok(Images::one(linked)),
        2 if list.is_null() => Ok(Images::one(linked)),
        2 => {
            let mut prelinked = Vec::new();
            for i in 0..MAX_PRELINKED {
                // SAFETY: version 2's second pointer is a NULL-terminated array of container pointers,
                // read up to its NULL.
                let object = unsafe { *list.add(i) };
                if object.is_null() {
                    return Ok(Images { linked, prelinked });
                }
                let bytes = image_bytes(object)?;
                if image::kind(bytes) != Kind::Fatbin {
                    return Err(CUDA_ERROR_INVALID_IMAGE);
                }
                prelinked.push(bytes);
            }
            Err(CUDA_ERROR_INVALID_IMAGE)
        }
        _ => Err(CUDA_ERROR_INVALID_IMAGE),
    }
}

/// One image a program passes by pointer, whole: a cubin or fatbin as long as its headers say, PTX text
/// up to its NUL (a wrapper is not one: [`images`] follows it).
fn image_bytes<'a>(image: *const c_void) -> CuRes<&'a [u8]> {
    ensure(!image.is_null())?;
    // SAFETY: as in `images`: a readable image of at least 4 bytes.
    let head = |len: usize| unsafe { std::slice::from_raw_parts(image as *const u8, len) };
    match image::kind(head(4)) {
        // SAFETY (both): a cubin begins with its 64-byte ELF header and a fatbin with its 16-byte
        // header, which say how long the image is; the API contract is that the whole image is readable.
        Kind::Cubin => {
            let first = image::cubin::extent(head(64)).ok_or(CUDA_ERROR_INVALID_IMAGE)?;
            let whole = image::cubin::sections_end(head(first)).unwrap_or(first).max(first);
            Ok(head(whole))
        }
        Kind::Fatbin => Ok(head(image::fatbin::extent(head(image::fatbin::HEADER)).ok_or(CUDA_ERROR_INVALID_IMAGE)?)),
        Kind::Wrapper => Err(CUDA_ERROR_INVALID_IMAGE),
        // SAFETY: PTX images are NUL-terminated strings by the API contract.
        Kind::Text => Ok(unsafe { std::ffi::CStr::from_ptr(image as *const c_char) }.to_bytes()),
    }
}

fn unload(d: &Driver, handle: u64) -> CuRes {
    let m = d.modules.remove(handle)?;
    for (_, (addr, _)) in m.globals.iter() {
        let _ = d.memory.free(d, *addr);
    }
    for (_, f) in m.functions.lock().drain() {
        let _ = d.functions.remove(f);
    }
    Ok(())
}

/// Unloads every module a destroyed context owned.
pub fn unload_context(d: &Driver, ctx: u64) {
    for (h, m) in d.modules.all() {
        if m.ctx == ctx {
            let _ = unload(d, h);
        }
    }
}

fn function(d: &Driver, module: u64, name: &str) -> CuRes<u64> {
    let m = d.modules.get(module)?;
    let Some(entry) = m.entries.iter().find(|e| e.name == name) else { return Err(CUDA_ERROR_NOT_FOUND) };
    let mut functions = m.functions.lock();
    if let Some(&h) = functions.get(name) {
        return Ok(h);
    }
    let f = Function {
        name: CString::new(name).map_err(|_| CUDA_ERROR_INVALID_VALUE)?,
        builtin: Builtin::from_name(name),
        module,
        params: entry.params.clone(),
        short_name: Arc::from(name),
        uncomputed_ns: d.config.kernel_ns(name),
        attrs: Mutex::new(HashMap::new()),
    };
    let h = d.functions.insert(Arc::new(f));
    functions.insert(name.to_string(), h);
    Ok(h)
}

fn global(d: &Driver, module: u64, name: *const c_char, dptr: *mut CUdeviceptr, bytes: *mut usize) -> CuRes {
    let m = d.modules.get(module)?;
    let &(addr, size) = m.globals.get(c_str(name)?).ok_or(CUDA_ERROR_NOT_FOUND)?;
    if !dptr.is_null() {
        out(dptr, addr)?;
    }
    if !bytes.is_null() {
        out(bytes, size as usize)?;
    }
    Ok(())
}

/// `cuModuleLoadData`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!module.is_null())?;
        out(module, load(d, images(image)?, false)? as CUmodule)
    })
}

/// `cuModuleLoadDataEx`: JIT options are accepted and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadDataEx(
    module: *mut CUmodule,
    image: *const c_void,
    _n: c_uint,
    _options: *mut CUjit_option,
    _values: *mut *mut c_void,
) -> CuResult {
    cuModuleLoadData(module, image)
}

/// `cuModuleGetLoadingMode`: `CU_MODULE_LAZY_LOADING` (2), the default since CUDA 12.2, unless
/// `CUDA_MODULE_LOADING=EAGER` (`CU_MODULE_EAGER_LOADING`, 1), as the real driver reads it.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleGetLoadingMode(mode: *mut c_int) -> CuResult {
    entry(|| {
        driver()?;
        let eager = std::env::var("CUDA_MODULE_LOADING").is_ok_and(|v| v.eq_ignore_ascii_case("EAGER"));
        out(mode, if eager { 1 } else { 2 })
    })
}

/// `cuModuleLoadFatBinary`: a fatbin container (or the wrapper nvcc emits around one).
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoadFatBinary(module: *mut CUmodule, fat_cubin: *const c_void) -> CuResult {
    cuModuleLoadData(module, fat_cubin)
}

/// `cuModuleLoad`: a PTX, cubin or fatbin file.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!module.is_null())?;
        let bytes = std::fs::read(c_str(fname)?).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
        out(module, load(d, Images::one(&bytes), false)? as CUmodule)
    })
}

/// `cuModuleUnload`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(module: CUmodule) -> CuResult {
    entry(|| unload(driver()?, module as u64))
}

/// `cuModuleGetFunction`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleGetFunction(f: *mut CUfunction, module: CUmodule, name: *const c_char) -> CuResult {
    entry(|| {
        ensure(!f.is_null())?;
        out(f, function(driver()?, module as u64, c_str(name)?)? as CUfunction)
    })
}

/// `cuModuleGetGlobal_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    module: CUmodule,
    name: *const c_char,
) -> CuResult {
    entry(|| global(driver()?, module as u64, name, dptr, bytes))
}

/// `cuModuleGetFunctionCount`.
#[unsafe(no_mangle)]
pub extern "C" fn cuModuleGetFunctionCount(count: *mut c_uint, module: CUmodule) -> CuResult {
    entry(|| out(count, driver()?.modules.get(module as u64)?.entries.len() as c_uint))
}

/// `cuLibraryLoadData`: options are accepted and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryLoadData(
    library: *mut CUlibrary,
    code: *const c_void,
    _jit_options: *mut CUjit_option,
    _jit_values: *mut *mut c_void,
    _n_jit: c_uint,
    _lib_options: *mut CUlibraryOption,
    _lib_values: *mut *mut c_void,
    _n_lib: c_uint,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!library.is_null())?;
        out(library, load(d, images(code)?, true)? as CUlibrary)
    })
}

/// `cuLibraryLoadFromFile`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryLoadFromFile(
    library: *mut CUlibrary,
    fname: *const c_char,
    _jit_options: *mut CUjit_option,
    _jit_values: *mut *mut c_void,
    _n_jit: c_uint,
    _lib_options: *mut CUlibraryOption,
    _lib_values: *mut *mut c_void,
    _n_lib: c_uint,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!library.is_null())?;
        let bytes = std::fs::read(c_str(fname)?).map_err(|_| CUDA_ERROR_FILE_NOT_FOUND)?;
        out(library, load(d, Images::one(&bytes), true)? as CUlibrary)
    })
}

/// `cuLibraryUnload`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryUnload(library: CUlibrary) -> CuResult {
    entry(|| unload(driver()?, library as u64))
}

/// `cuLibraryGetKernel`: a `CUkernel` is usable wherever a `CUfunction` is.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryGetKernel(kernel: *mut CUkernel, library: CUlibrary, name: *const c_char) -> CuResult {
    entry(|| {
        ensure(!kernel.is_null())?;
        out(kernel, function(driver()?, library as u64, c_str(name)?)? as CUkernel)
    })
}

/// `cuLibraryGetModule`: the library is its own module.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryGetModule(module: *mut CUmodule, library: CUlibrary) -> CuResult {
    entry(|| {
        driver()?.modules.get(library as u64)?;
        out(module, library as CUmodule)
    })
}

/// `cuLibraryGetGlobal`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryGetGlobal(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    library: CUlibrary,
    name: *const c_char,
) -> CuResult {
    entry(|| global(driver()?, library as u64, name, dptr, bytes))
}

/// `cuLibraryGetKernelCount`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryGetKernelCount(count: *mut c_uint, library: CUlibrary) -> CuResult {
    entry(|| out(count, driver()?.modules.get(library as u64)?.entries.len() as c_uint))
}

/// `cuLibraryEnumerateKernels`.
#[unsafe(no_mangle)]
pub extern "C" fn cuLibraryEnumerateKernels(kernels: *mut CUkernel, n: c_uint, library: CUlibrary) -> CuResult {
    entry(|| {
        let d = driver()?;
        let m = d.modules.get(library as u64)?;
        ensure(!kernels.is_null() && n as usize >= m.entries.len())?;
        for (i, e) in m.entries.iter().enumerate() {
            // SAFETY: the caller provides room for `n` handles, at least the number of entries (checked).
            out(unsafe { kernels.add(i) }, function(d, library as u64, &e.name)? as CUkernel)?;
        }
        Ok(())
    })
}

/// `cuKernelGetFunction`: kernels and functions share handles.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelGetFunction(f: *mut CUfunction, kernel: CUkernel) -> CuResult {
    entry(|| {
        driver()?.functions.get(kernel as u64)?;
        out(f, kernel as CUfunction)
    })
}

/// `cuFuncGetName`.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetName(name: *mut *const c_char, f: CUfunction) -> CuResult {
    entry(|| out(name, driver()?.functions.get(f as u64)?.name.as_ptr()))
}

/// `cuKernelGetName`.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelGetName(name: *mut *const c_char, k: CUkernel) -> CuResult {
    cuFuncGetName(name, k as CUfunction)
}

/// `cuFuncGetParamInfo` (CUDA 12.4): where parameter `index` lies in the parameter buffer, and its size;
/// `CUDA_ERROR_INVALID_VALUE` past the last one.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetParamInfo(f: CUfunction, index: usize, offset: *mut usize, size: *mut usize) -> CuResult {
    entry(|| {
        let func = driver()?.functions.get(f as u64)?;
        let param = func.params.as_ref().and_then(|p| p.get(index)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ensure(!offset.is_null() || !size.is_null())?;
        if !offset.is_null() {
            out(offset, param.offset as usize)?;
        }
        if !size.is_null() {
            out(size, param.size as usize)?;
        }
        Ok(())
    })
}

/// `cuKernelGetParamInfo` (CUDA 12.4): kernels and functions share handles.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelGetParamInfo(k: CUkernel, index: usize, offset: *mut usize, size: *mut usize) -> CuResult {
    cuFuncGetParamInfo(k as CUfunction, index, offset, size)
}

/// `cuFuncGetModule`.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetModule(module: *mut CUmodule, f: CUfunction) -> CuResult {
    entry(|| out(module, driver()?.functions.get(f as u64)?.module as CUmodule))
}

/// The value of a function attribute: what was set, else what a simple kernel reports.
fn function_attribute(d: &Driver, f: &Function, attr: c_int, device: usize) -> CuRes<c_int> {
    if let Some(v) = f.attrs.lock().get(&attr) {
        return Ok(*v);
    }
    let (major, minor) = d.device_config(device).profile.compute_capability;
    Ok(match attr {
        0 => 1024,                              // MAX_THREADS_PER_BLOCK
        1..=3 => 0,                             // SHARED_SIZE_BYTES, CONST_SIZE_BYTES, LOCAL_SIZE_BYTES
        4 => 32,                                // NUM_REGS
        5 | 6 => (major * 10 + minor) as c_int, // PTX_VERSION, BINARY_VERSION
        7 => 0,                                 // CACHE_MODE_CA
        8 => 48 * 1024,                         // MAX_DYNAMIC_SHARED_SIZE_BYTES
        9 => -1,                                // PREFERRED_SHARED_MEMORY_CARVEOUT
        10..=16 => 0,                           // cluster attributes
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    })
}

/// `cuFuncGetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncGetAttribute(value: *mut c_int, attr: c_int, f: CUfunction) -> CuResult {
    entry(|| {
        let d = driver()?;
        let func = d.functions.get(f as u64)?;
        let device = current().map(|c| c.device).unwrap_or(0);
        out(value, function_attribute(d, &func, attr, device)?)
    })
}

/// `cuFuncSetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetAttribute(f: CUfunction, attr: c_int, value: c_int) -> CuResult {
    entry(|| {
        let func = driver()?.functions.get(f as u64)?;
        ensure(matches!(attr, 8..=16))?;
        func.attrs.lock().insert(attr, value);
        Ok(())
    })
}

/// `cuKernelGetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelGetAttribute(value: *mut c_int, attr: c_int, k: CUkernel, dev: c_int) -> CuResult {
    entry(|| {
        let d = driver()?;
        let func = d.functions.get(k as u64)?;
        out(value, function_attribute(d, &func, attr, d.device(dev)?)?)
    })
}

/// `cuKernelSetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuKernelSetAttribute(attr: c_int, value: c_int, k: CUkernel, dev: c_int) -> CuResult {
    entry(|| {
        driver()?.device(dev)?;
        match cuFuncSetAttribute(k as CUfunction, attr, value) {
            CUDA_SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

/// `cuFuncSetCacheConfig`: accepted; there is no cache to configure.
#[unsafe(no_mangle)]
pub extern "C" fn cuFuncSetCacheConfig(f: CUfunction, _config: c_int) -> CuResult {
    entry(|| driver()?.functions.get(f as u64).map(|_| ()))
}
