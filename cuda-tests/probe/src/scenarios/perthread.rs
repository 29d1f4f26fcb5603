//! `ptsz-free`: stream-ordered memory on the calling thread's default stream, reached the way programs
//! built with `--default-stream per-thread` reach it: the `_ptsz` entry points with a NULL stream, which
//! there means the thread's own stream, not the legacy one.

use super::open;
use crate::args::Args;
use crate::dl::DriverLibrary;
use crate::fail::{During, Outcome, ensure};
use crate::ptx::Kernels;
use cudarc::driver::sys;
use serde_json::json;
use simgpu::state::now_ns;
use std::ffi::c_void;

type AllocAsync = unsafe extern "C" fn(*mut sys::CUdeviceptr, usize, sys::CUstream) -> sys::CUresult;
type FreeAsync = unsafe extern "C" fn(sys::CUdeviceptr, sys::CUstream) -> sys::CUresult;
type Launch = unsafe extern "C" fn(
    sys::CUfunction,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    sys::CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> sys::CUresult;

/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: sys::CUstream = 2 as sys::CUstream;

/// Allocates 1 MiB with `cuMemAllocAsync_ptsz`, queues `spin(--ns)` (default 200 ms) with
/// `cuLaunchKernel_ptsz`, frees with `cuMemFreeAsync_ptsz`, all on NULL, and reports whether the kernel
/// had finished when the free returned (`cuStreamQuery` of the per-thread stream) and how long the free
/// took. A driver queues the free behind the kernel and returns at once; a free that must wait for the
/// work queued before it (soft memory is reused as soon as it is freed) waits for that stream.
pub fn free_after_kernel(args: &Args) -> Outcome {
    let ns = args.duration_ns("ns", 200_000_000)?;
    let ctx = open(args)?;
    let kernels = Kernels::load(&ctx)?;
    ctx.bind_to_thread().during("cuCtxSetCurrent")?;
    let lib = DriverLibrary::open()?;
    let (alloc, free, launch) =
        (lib.symbol("cuMemAllocAsync_ptsz"), lib.symbol("cuMemFreeAsync_ptsz"), lib.symbol("cuLaunchKernel_ptsz"));
    ensure(!alloc.is_null() && !free.is_null() && !launch.is_null(), || "a _ptsz entry point is not exported".into())?;
    // SAFETY: the three exports have these C signatures (cuda.h's, per-thread variants alike).
    let (alloc, free, launch) = unsafe {
        (
            std::mem::transmute::<*mut c_void, AllocAsync>(alloc),
            std::mem::transmute::<*mut c_void, FreeAsync>(free),
            std::mem::transmute::<*mut c_void, Launch>(launch),
        )
    };
    let null = std::ptr::null_mut();
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: `p` is a valid output; NULL is the thread's default stream to a _ptsz entry point.
    unsafe { alloc(&mut p, 1 << 20, null) }.during("cuMemAllocAsync_ptsz")?;
    let mut spin_ns = ns;
    let mut params = [(&mut spin_ns as *mut u64).cast::<c_void>()];
    // SAFETY: `spin` takes one u64, which `params` points to for the duration of the call.
    unsafe { launch(kernels.spin_function(), 1, 1, 1, 1, 1, 1, 0, null, params.as_mut_ptr(), null.cast()) }
        .during("cuLaunchKernel_ptsz")?;
    let before = now_ns();
    // SAFETY: `p` came from the allocation above and is freed once.
    unsafe { free(p, null) }.during("cuMemFreeAsync_ptsz")?;
    let free_ns = now_ns() - before;
    // SAFETY: cuStreamQuery of the thread's default stream of the current context.
    let query = unsafe { sys::cuStreamQuery(PER_THREAD) };
    let done = query == sys::CUresult::CUDA_SUCCESS;
    ensure(done || query == sys::CUresult::CUDA_ERROR_NOT_READY, || format!("cuStreamQuery: {query:?}"))?;
    // SAFETY: as above.
    unsafe { sys::cuStreamSynchronize(PER_THREAD) }.during("cuStreamSynchronize")?;
    Ok(json!({ "kernel_ns": ns, "free_ns": free_ns, "kernel_done_at_free": done }))
}
