//! Memory-quota scenarios: every allocation path against the quota's boundary, processes and threads
//! racing for one quota, contexts' cost, and the memory figures a program sees (driver and NVML). Run
//! under the shim with `TESSERA_MEMORY_LIMIT` (and `TESSERA_VGPU`); without a quota they report the
//! device's own figures.

use super::{open, vmm};
use crate::args::Args;
use crate::fail::{During, Failure, Outcome, code, ensure};
use crate::report;
use cudarc::driver::{CudaContext, result, sys};
use serde_json::{Value, json};
use std::ffi::{CStr, c_uint, c_void};
use std::io::{BufRead, Read};
use std::sync::Arc;
use tessera_ffi::nvml::{NVML_MEMORY_V2, NvmlDevice, NvmlMemory, NvmlMemoryV2};

/// `CUDA_SUCCESS`.
const SUCCESS: u32 = 0;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: u32 = 2;
/// Bytes each boundary request is built around.
const SIZE: u64 = 16 << 20;

/// Free and total memory of the current context's device, as the program sees them.
pub(super) fn mem_info() -> Outcome<(u64, u64)> {
    let (f, t) = result::mem_get_info().during("cuMemGetInfo")?;
    Ok((f as u64, t as u64))
}

/// An allocation path, as `--path` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Alloc,
    Pitch,
    Managed,
    Async,
    Pool,
    Vmm,
    Array,
    Array3d,
    Mipmap,
}

const PATHS: &[(&str, Path)] = &[
    ("alloc", Path::Alloc),
    ("pitch", Path::Pitch),
    ("managed", Path::Managed),
    ("async", Path::Async),
    ("pool", Path::Pool),
    ("vmm", Path::Vmm),
    ("array", Path::Array),
    ("array3d", Path::Array3d),
    ("mipmap", Path::Mipmap),
];

/// Which request of a path: around [`SIZE`], the smallest bigger one, or the smallest there is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    Exact,
    More,
    Min,
}

/// Something allocated through a path.
enum Held {
    Ptr(sys::CUdeviceptr),
    Array(sys::CUarray),
    Mipmap(sys::CUmipmappedArray),
    Vmm(sys::CUmemGenericAllocationHandle),
}

/// What a path needs besides the context: a stream and a pool for the stream-ordered paths, the VMM
/// granularity.
struct Bench {
    path: Path,
    ordinal: i32,
    stream: sys::CUstream,
    pool: sys::CUmemoryPool,
    granularity: u64,
}

/// Bytes of an 8-bit, one-channel array (each zero dimension counts as one).
fn texels(w: u64, h: u64, d: u64) -> u64 {
    w * h.max(1) * d.max(1)
}

/// Bytes of a 2D 8-bit mipmapped array of `levels` levels, each halving both dimensions.
fn mip_bytes(w: u64, h: u64, levels: u32) -> u64 {
    (0..levels).map(|l| texels((w >> l).max(1), (h >> l).max(1), 0)).sum()
}

const MIP_LEVELS: u32 = 4;

fn array3d(w: u64, h: u64, d: u64) -> sys::CUDA_ARRAY3D_DESCRIPTOR {
    sys::CUDA_ARRAY3D_DESCRIPTOR {
        Width: w as usize,
        Height: h as usize,
        Depth: d as usize,
        Format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
        NumChannels: 1,
        Flags: 0,
    }
}

impl Bench {
    fn new(path: Path, ordinal: i32) -> Outcome<Bench> {
        let mut b = Bench { path, ordinal, stream: std::ptr::null_mut(), pool: std::ptr::null_mut(), granularity: 1 };
        if matches!(path, Path::Async | Path::Pool) {
            // SAFETY: a valid output pointer.
            unsafe { sys::cuStreamCreate(&mut b.stream, 0) }.during("cuStreamCreate")?;
        }
        if path == Path::Pool {
            // SAFETY: a valid output pointer and device.
            unsafe { sys::cuDeviceGetDefaultMemPool(&mut b.pool, ordinal) }.during("cuDeviceGetDefaultMemPool")?;
        }
        if path == Path::Vmm {
            let mut g = 0;
            let prop = vmm::properties(ordinal);
            // SAFETY: valid output and properties pointers.
            unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut g,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            }
            .during("cuMemGetAllocationGranularity")?;
            b.granularity = g as u64;
        }
        Ok(b)
    }

    /// Bytes the quota is charged for `r` on this path.
    fn bytes(&self, r: Request) -> u64 {
        let (exact, more, min) = match self.path {
            Path::Alloc | Path::Managed | Path::Async | Path::Pool => (SIZE, SIZE + 1, 1),
            Path::Vmm => (SIZE, SIZE + self.granularity, self.granularity),
            // 4096 rows of 4096 bytes; one byte more per row adds a whole pitch step (512) per row.
            Path::Pitch => (SIZE, 4608 * 4096, 512),
            Path::Array => (SIZE, texels(4097, 4096, 0), 1),
            Path::Array3d => (SIZE, texels(257, 256, 256), 1),
            Path::Mipmap => (mip_bytes(2048, 2048, MIP_LEVELS), mip_bytes(2049, 2048, MIP_LEVELS), 1),
        };
        match r {
            Request::Exact => exact,
            Request::More => more,
            Request::Min => min,
        }
    }

    /// Makes request `r`: `Ok` with what was allocated, or the driver's (or the quota's) error code.
    fn alloc(&self, r: Request) -> Result<Held, u32> {
        let bytes = self.bytes(r) as usize;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: every call gets valid output pointers and descriptors; what succeeds is freed by `free`.
        let status = unsafe {
            match self.path {
                Path::Alloc => sys::cuMemAlloc_v2(&mut ptr, bytes),
                Path::Managed => sys::cuMemAllocManaged(&mut ptr, bytes, 1),
                Path::Async => sys::cuMemAllocAsync(&mut ptr, bytes, self.stream),
                Path::Pool => sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, self.pool, self.stream),
                Path::Pitch => {
                    let width = match r {
                        Request::Exact => 4096,
                        Request::More => 4097,
                        Request::Min => 1,
                    };
                    let height = if r == Request::Min { 1 } else { 4096 };
                    let mut pitch = 0;
                    sys::cuMemAllocPitch_v2(&mut ptr, &mut pitch, width, height, 4)
                }
                Path::Vmm => {
                    let mut h = 0;
                    let s = sys::cuMemCreate(&mut h, bytes, &vmm::properties(self.ordinal), 0);
                    return if s == sys::CUresult::CUDA_SUCCESS { Ok(Held::Vmm(h)) } else { Err(code(s)) };
                }
                Path::Array => {
                    let (w, h) = match r {
                        Request::Exact => (4096, 4096),
                        Request::More => (4097, 4096),
                        Request::Min => (1, 1),
                    };
                    let desc = sys::CUDA_ARRAY_DESCRIPTOR {
                        Width: w,
                        Height: h,
                        Format: sys::CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
                        NumChannels: 1,
                    };
                    let mut a = std::ptr::null_mut();
                    let s = sys::cuArrayCreate_v2(&mut a, &desc);
                    return if s == sys::CUresult::CUDA_SUCCESS { Ok(Held::Array(a)) } else { Err(code(s)) };
                }
                Path::Array3d => {
                    let desc = match r {
                        Request::Exact => array3d(256, 256, 256),
                        Request::More => array3d(257, 256, 256),
                        Request::Min => array3d(1, 1, 1),
                    };
                    let mut a = std::ptr::null_mut();
                    let s = sys::cuArray3DCreate_v2(&mut a, &desc);
                    return if s == sys::CUresult::CUDA_SUCCESS { Ok(Held::Array(a)) } else { Err(code(s)) };
                }
                Path::Mipmap => {
                    let (desc, levels) = match r {
                        Request::Exact => (array3d(2048, 2048, 0), MIP_LEVELS),
                        Request::More => (array3d(2049, 2048, 0), MIP_LEVELS),
                        Request::Min => (array3d(1, 1, 0), 1),
                    };
                    let mut m = std::ptr::null_mut();
                    let s = sys::cuMipmappedArrayCreate(&mut m, &desc, levels);
                    return if s == sys::CUresult::CUDA_SUCCESS { Ok(Held::Mipmap(m)) } else { Err(code(s)) };
                }
            }
        };
        if status == sys::CUresult::CUDA_SUCCESS { Ok(Held::Ptr(ptr)) } else { Err(code(status)) }
    }

    /// Frees what [`Bench::alloc`] returned (stream-ordered frees are waited for).
    fn free(&self, held: Held) -> Outcome<()> {
        // SAFETY: each handle came from the matching allocation and is freed once.
        unsafe {
            match held {
                Held::Ptr(p) if matches!(self.path, Path::Async | Path::Pool) => {
                    sys::cuMemFreeAsync(p, self.stream).during("cuMemFreeAsync")?;
                    sys::cuStreamSynchronize(self.stream).during("cuStreamSynchronize")
                }
                Held::Ptr(p) => sys::cuMemFree_v2(p).during("cuMemFree"),
                Held::Array(a) => sys::cuArrayDestroy(a).during("cuArrayDestroy"),
                Held::Mipmap(m) => sys::cuMipmappedArrayDestroy(m).during("cuMipmappedArrayDestroy"),
                Held::Vmm(h) => sys::cuMemRelease(h).during("cuMemRelease"),
            }
        }
    }
}

/// The result code of an allocation attempt, freeing it at once when it succeeded.
fn attempt(b: &Bench, r: Request) -> Outcome<u32> {
    match b.alloc(r) {
        Ok(h) => b.free(h).map(|_| SUCCESS),
        Err(c) => Ok(c),
    }
}

/// `quota-boundary --path P`: fills the quota with `cuMemAlloc` so that exactly one request of the path
/// fits, then: that request succeeds and leaves nothing free; the path's smallest request is refused;
/// once freed, the request one step bigger is refused and the request itself fits again.
pub fn boundary(args: &Args) -> Outcome {
    let name = args.text("path").ok_or_else(|| Failure::new("--path is required"))?;
    let path = PATHS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).ok_or_else(|| {
        Failure::new(format!("--path {name:?}: use one of {:?}", PATHS.iter().map(|(n, _)| *n).collect::<Vec<_>>()))
    })?;
    let ctx = open(args)?;
    let b = Bench::new(path, args.device()? as i32)?;
    let (free_before, total) = mem_info()?;
    let size = b.bytes(Request::Exact);
    ensure(free_before >= size, || format!("only {free_before} bytes free; the boundary needs {size}"))?;
    let filler = match free_before - size {
        0 => None,
        // SAFETY: a plain allocation, freed below.
        n => Some(unsafe { result::malloc_sync(n as usize) }.during("cuMemAlloc (filler)")?),
    };
    let free_with_filler = mem_info()?.0;
    let exact = b.alloc(Request::Exact);
    let exact_code = exact.as_ref().err().copied().unwrap_or(SUCCESS);
    let free_at_limit = mem_info()?.0;
    let smallest_over = attempt(&b, Request::Min)?;
    if let Ok(h) = exact {
        b.free(h)?;
    }
    let free_after_free = mem_info()?.0;
    let one_step_over = attempt(&b, Request::More)?;
    let again = attempt(&b, Request::Exact)?;
    if let Some(p) = filler {
        // SAFETY: allocated above, freed once.
        unsafe { result::free_sync(p) }.during("cuMemFree (filler)")?;
    }
    let free_end = mem_info()?.0;
    drop(ctx);
    Ok(json!({
        "path": name, "total": total, "free_before": free_before, "size": size,
        "size_more": b.bytes(Request::More), "free_with_filler": free_with_filler, "exact": exact_code,
        "free_at_limit": free_at_limit, "smallest_over": smallest_over, "free_after_free": free_after_free,
        "one_step_over": one_step_over, "again": again, "free_end": free_end,
    }))
}

/// Reads lines from stdin: the first (`go`) before racing, then to the end before freeing.
fn stdin_line() -> Outcome<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
    Ok(line)
}

/// `quota-race --chunk BYTES [--count N]`: reports `ready`, waits for a line on stdin, allocates
/// `--chunk`-sized blocks until refused (or `--count` of them), reports how many it got, holds them until
/// stdin closes, frees them.
pub fn race(args: &Args) -> Outcome {
    let chunk = args.size("chunk", 1 << 20)? as usize;
    let count: usize = args.number("count", usize::MAX)?;
    let ctx = open(args)?;
    let (free_before, total) = mem_info()?;
    report::emit_now("quota-race", json!({ "ready": true, "free_before": free_before, "total": total }));
    stdin_line()?;
    let mut held = Vec::new();
    let mut refused = None;
    while held.len() < count {
        // SAFETY: plain allocations, freed below.
        match unsafe { result::malloc_sync(chunk) } {
            Ok(p) => held.push(p),
            Err(e) => {
                refused = Some(code(e.0));
                break;
            }
        }
    }
    let free_after = mem_info()?.0;
    report::emit_now(
        "quota-race",
        json!({ "chunks": held.len(), "bytes": held.len() * chunk, "refused_with": refused, "free_after": free_after }),
    );
    std::io::stdin().read_to_end(&mut Vec::new()).map_err(|e| Failure::new(format!("reading stdin: {e}")))?;
    for p in held {
        // SAFETY: allocated above, freed once.
        unsafe { result::free_sync(p) }.during("cuMemFree")?;
    }
    drop(ctx);
    Ok(Value::Null)
}

/// One thread of `quota-threads`: `rounds` times, four allocations of 1-2 MiB, then their frees.
fn churn(ctx: &Arc<CudaContext>, id: u64, rounds: u64) -> Outcome<(u64, u64)> {
    ctx.bind_to_thread().during("cuCtxSetCurrent")?;
    let (mut granted, mut refused) = (0, 0);
    for round in 0..rounds {
        let mut held = Vec::new();
        for k in 0..4u64 {
            let bytes = (1 << 20) + ((id * 7919 + round * 104_729 + k * 15_485_863) % (1 << 20));
            // SAFETY: plain allocations, freed below.
            match unsafe { result::malloc_sync(bytes as usize) } {
                Ok(p) => {
                    granted += 1;
                    held.push(p);
                }
                Err(e) if code(e.0) == OUT_OF_MEMORY => refused += 1,
                Err(e) => return Err(e).during("cuMemAlloc"),
            }
        }
        for p in held {
            // SAFETY: allocated above, freed once.
            unsafe { result::free_sync(p) }.during("cuMemFree")?;
        }
    }
    Ok((granted, refused))
}

/// `quota-threads --threads N --rounds R`: N threads allocate and free concurrently; reports how many
/// requests were granted and refused, and the free memory before and after.
pub fn threads(args: &Args) -> Outcome {
    let n: u64 = args.number("threads", 8)?;
    let rounds: u64 = args.number("rounds", 200)?;
    let ctx = open(args)?;
    let free_before = mem_info()?.0;
    let workers: Vec<_> = (0..n)
        .map(|id| {
            let ctx = ctx.clone();
            std::thread::spawn(move || churn(&ctx, id, rounds))
        })
        .collect();
    let (mut granted, mut refused) = (0, 0);
    for w in workers {
        let (g, r) = w.join().map_err(|_| Failure::new("a worker thread panicked"))??;
        granted += g;
        refused += r;
    }
    let free_after = mem_info()?.0;
    drop(ctx);
    Ok(
        json!({ "threads": n, "granted": granted, "refused": refused, "free_before": free_before, "free_after": free_after }),
    )
}

/// `quota-contexts --bytes B`: creates a second context (`cuCtxCreate`), allocates `B` in it and an
/// array, and destroys it without freeing; reports free memory at each step.
pub fn contexts(args: &Args) -> Outcome {
    let bytes = args.size("bytes", SIZE)? as usize;
    let ctx = open(args)?;
    let free_before = mem_info()?.0;
    let mut second: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a valid output pointer; the context is destroyed below.
    let created = unsafe { sys::cuCtxCreate_v2(&mut second, 0, args.device()? as i32) };
    if created != sys::CUresult::CUDA_SUCCESS {
        return Ok(json!({ "created": code(created), "free_before": free_before }));
    }
    let free_with_context = mem_info()?.0;
    // SAFETY: allocations in the new (current) context, deliberately left for cuCtxDestroy to free.
    let alloc = unsafe { result::malloc_sync(bytes) }.map(|_| SUCCESS).unwrap_or_else(|e| code(e.0));
    let desc = array3d(1024, 1024, 0);
    let mut array = std::ptr::null_mut();
    // SAFETY: as above.
    let array_code = code(unsafe { sys::cuArray3DCreate_v2(&mut array, &desc) });
    let free_with_allocations = mem_info()?.0;
    // SAFETY: destroys the context created above, with everything in it.
    unsafe { sys::cuCtxDestroy_v2(second) }.during("cuCtxDestroy")?;
    ctx.bind_to_thread().during("cuCtxSetCurrent")?;
    let free_after = mem_info()?.0;
    Ok(json!({
        "created": SUCCESS, "free_before": free_before, "free_with_context": free_with_context, "alloc": alloc,
        "array": array_code, "free_with_allocations": free_with_allocations, "free_after": free_after,
    }))
}

/// The real (or preloaded) NVML entry points `mem-info` uses.
struct Nvml {
    handle: *mut c_void,
}

impl Nvml {
    fn open() -> Outcome<Nvml> {
        // SAFETY: dlopen with a static NUL-terminated name.
        let handle = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
        ensure(!handle.is_null(), || "dlopen(libnvidia-ml.so.1) failed".into())?;
        let n = Nvml { handle };
        // SAFETY: nvmlInit_v2 takes no arguments.
        let r = unsafe { n.sym::<unsafe extern "C" fn() -> u32>(c"nvmlInit_v2")?() };
        ensure(r == 0, || format!("nvmlInit_v2 returned {r}"))?;
        Ok(n)
    }

    /// The function `name`, typed `F` (an `unsafe extern "C" fn` of the symbol's C signature).
    fn sym<F: Copy>(&self, name: &CStr) -> Outcome<F> {
        // SAFETY: a handle from dlopen and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.handle, name.as_ptr()) };
        ensure(!p.is_null(), || format!("NVML lacks {name:?}"))?;
        // SAFETY: F is a function pointer type of the symbol's signature (the callers' contract).
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// Memory figures of device `index` through both versions, and the NULL-output codes.
    fn memory(&self, index: u32) -> Outcome {
        type ByIndex = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> u32;
        type V1 = unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> u32;
        type V2 = unsafe extern "C" fn(NvmlDevice, *mut NvmlMemoryV2) -> u32;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: valid output pointer.
        let r = unsafe { self.sym::<ByIndex>(c"nvmlDeviceGetHandleByIndex_v2")?(index, &mut dev) };
        ensure(r == 0, || format!("nvmlDeviceGetHandleByIndex_v2 returned {r}"))?;
        let (v1, v2) = (self.sym::<V1>(c"nvmlDeviceGetMemoryInfo")?, self.sym::<V2>(c"nvmlDeviceGetMemoryInfo_v2")?);
        let mut m1 = NvmlMemory::default();
        let mut m2 = NvmlMemoryV2 { version: NVML_MEMORY_V2, ..Default::default() };
        // SAFETY: valid device handle and outputs (or NULL, which NVML must refuse).
        let (r1, r2, null1, null2) = unsafe {
            (v1(dev, &mut m1), v2(dev, &mut m2), v1(dev, std::ptr::null_mut()), v2(dev, std::ptr::null_mut()))
        };
        Ok(json!({
            "v1": { "code": r1, "total": m1.total, "free": m1.free, "used": m1.used },
            "v2": { "code": r2, "total": m2.total, "free": m2.free, "used": m2.used, "reserved": m2.reserved },
            "null_v1": null1, "null_v2": null2,
        }))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Ok(shutdown) = self.sym::<unsafe extern "C" fn() -> u32>(c"nvmlShutdown") {
            // SAFETY: balances nvmlInit_v2.
            unsafe { shutdown() };
        }
        // SAFETY: the handle came from dlopen.
        unsafe { libc::dlclose(self.handle) };
    }
}

/// `mem-info [--alloc BYTES]`: the memory figures the program sees — `cuMemGetInfo`, `cuDeviceTotalMem`,
/// NVML's memory info (v1 and v2) — with `--alloc` bytes held, and what NULL outputs return.
pub fn mem_info_scenario(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let ordinal = args.device()?;
    let held = match args.size("alloc", 0)? {
        0 => None,
        // SAFETY: a plain allocation, freed below.
        n => Some(unsafe { result::malloc_sync(n as usize) }.during("cuMemAlloc")?),
    };
    let (free, total) = mem_info()?;
    let mut total_mem = 0;
    let (mut f, mut t) = (0, 0);
    // SAFETY: valid outputs, or NULL where the driver must refuse them.
    let (total_mem_code, null_total_mem, null_free, null_total) = unsafe {
        (
            code(sys::cuDeviceTotalMem_v2(&mut total_mem, ordinal as i32)),
            code(sys::cuDeviceTotalMem_v2(std::ptr::null_mut(), ordinal as i32)),
            code(sys::cuMemGetInfo_v2(std::ptr::null_mut(), &mut t)),
            code(sys::cuMemGetInfo_v2(&mut f, std::ptr::null_mut())),
        )
    };
    let nvml = Nvml::open()?.memory(ordinal as u32)?;
    if let Some(p) = held {
        // SAFETY: allocated above, freed once.
        unsafe { result::free_sync(p) }.during("cuMemFree")?;
    }
    drop(ctx);
    Ok(json!({
        "free": free, "total": total, "total_mem": total_mem, "total_mem_code": total_mem_code,
        "null_codes": { "total_mem": null_total_mem, "mem_get_info_free": null_free, "mem_get_info_total": null_total },
        "nvml": nvml,
    }))
}

/// `quota-vmm`: a physical allocation stays charged while mapped, even once its handle is released (the
/// driver keeps the memory until the last mapping goes); reports free memory at each step.
pub fn vmm_lifetime(args: &Args) -> Outcome {
    let _ctx = open(args)?;
    let ordinal = args.device()? as i32;
    let b = Bench::new(Path::Vmm, ordinal)?;
    let size = SIZE as usize;
    ensure(SIZE.is_multiple_of(b.granularity), || format!("granularity {} does not divide {SIZE}", b.granularity))?;
    let free_before = mem_info()?.0;
    let va = vmm::reserve(size)?;
    let mut handle = 0;
    // SAFETY: valid output and properties; the size is a multiple of the granularity (checked above).
    unsafe { sys::cuMemCreate(&mut handle, size, &vmm::properties(ordinal), 0) }.during("cuMemCreate")?;
    vmm::map(va, size, handle, ordinal)?;
    // SAFETY: the handle is ours; its mapping keeps the memory.
    unsafe { sys::cuMemRelease(handle) }.during("cuMemRelease")?;
    let free_released_but_mapped = mem_info()?.0;
    let mut retained = 0;
    // SAFETY: `va` is mapped; a valid output.
    unsafe { sys::cuMemRetainAllocationHandle(&mut retained, va as *mut c_void) }
        .during("cuMemRetainAllocationHandle")?;
    // SAFETY: the whole mapping is unmapped; the retained handle still holds the memory.
    unsafe { sys::cuMemUnmap(va, size) }.during("cuMemUnmap")?;
    let free_retained = mem_info()?.0;
    // SAFETY: the last reference; then the address range goes back.
    unsafe {
        sys::cuMemRelease(retained).during("cuMemRelease(retained)")?;
        sys::cuMemAddressFree(va, size).during("cuMemAddressFree")?;
    }
    let free_after = mem_info()?.0;
    Ok(json!({
        "size": size, "granularity": b.granularity, "free_before": free_before,
        "free_released_but_mapped": free_released_but_mapped, "free_retained": free_retained, "free_after": free_after,
    }))
}
