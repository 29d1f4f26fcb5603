//! `roundtrip`: every way of moving data in and out of device memory, and what the driver reports about
//! the memory it handed out.

use super::{dptr, open};
use crate::args::Args;
use crate::fail::{During, Outcome, code, ensure, verify};
use cudarc::driver::sys::CUpointer_attribute as P;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, result, sys};
use serde_json::json;
use std::ffi::c_void;
use std::sync::Arc;

/// A recognisable value for element `i`.
fn pattern(i: usize) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) ^ 0x5a5a_5a5a
}

/// Runs every copy and memory check on `--elements` u32s (default 2^20).
pub fn run(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let n: usize = args.number("elements", 1 << 20)?;
    ensure(n >= 64, || format!("--elements must be at least 64, not {n}"))?;
    let stream = ctx.default_stream();
    let host: Vec<u32> = (0..n).map(pattern).collect();
    let (free_before, total) = ctx.mem_get_info().during("cuMemGetInfo")?;

    let dev = stream.clone_htod(&host).during("htod copy")?;
    verify("htod then dtoh", &stream.clone_dtoh(&dev).during("dtoh copy")?, |i| host[i])?;
    let mut copy = stream.alloc_zeros::<u32>(n).during("alloc_zeros")?;
    stream.memcpy_dtod(&dev, &mut copy).during("dtod copy")?;
    verify("dtod", &stream.clone_dtoh(&copy).during("dtoh copy")?, |i| host[i])?;
    stream.synchronize().during("cuStreamSynchronize")?;
    let (free_with_buffers, _) = ctx.mem_get_info().during("cuMemGetInfo")?;

    Ok(json!({
        "elements": n,
        "buffer_bytes": n * 4,
        "memory": { "total": total, "free_before": free_before, "free_with_two_buffers": free_with_buffers },
        "memsets": memsets(&stream, &copy, n)?,
        "async": async_copies(&ctx, &host)?,
        "pitch": pitch()?,
        "managed": managed()?,
        "ranges": ranges(&ctx, &stream, &dev, n)?,
    }))
}

/// `cuMemsetD8` over the whole buffer, then `cuMemsetD32` over all but 16 elements at each end.
fn memsets(stream: &Arc<CudaStream>, buf: &CudaSlice<u32>, n: usize) -> Outcome {
    let p = dptr(buf, stream);
    // SAFETY: `buf` holds n u32s, 4n bytes; both memsets are synchronous and `buf` outlives them.
    unsafe { sys::cuMemsetD8_v2(p, 0xAB, n * 4) }.during("cuMemsetD8")?;
    verify("cuMemsetD8", &stream.clone_dtoh(buf).during("dtoh copy")?, |_| 0xABAB_ABAB_u32)?;
    // SAFETY: elements 16..n-16 lie inside `buf`.
    unsafe { sys::cuMemsetD32_v2(p + 64, 0xDEAD_BEEF, n - 32) }.during("cuMemsetD32")?;
    let got = stream.clone_dtoh(buf).during("dtoh copy")?;
    verify("cuMemsetD32", &got, |i| if (16..n - 16).contains(&i) { 0xDEAD_BEEF } else { 0xABAB_ABAB })?;
    Ok(json!({ "first": got[0], "second": got[16], "middle": got[n / 2], "last": got[n - 1] }))
}

/// Copies on a created stream, reading back into page-locked host memory.
fn async_copies(ctx: &Arc<CudaContext>, host: &[u32]) -> Outcome {
    let s = ctx.new_stream().during("cuStreamCreate")?;
    let dev = s.clone_htod(host).during("async htod copy")?;
    // SAFETY: every element is written by the copy below before it is read.
    let mut pinned = unsafe { ctx.alloc_pinned::<u32>(host.len()) }.during("cuMemHostAlloc")?;
    s.memcpy_dtoh(&dev, &mut pinned).during("async dtoh copy")?;
    s.synchronize().during("cuStreamSynchronize")?;
    verify("async copies through pinned memory", pinned.as_slice().during("pinned slice")?, |i| host[i])?;
    Ok(json!({ "elements": host.len(), "pinned": true }))
}

/// `cuMemAllocPitch`: every row written and read back at its pitched address.
fn pitch() -> Outcome {
    let (width, height) = (1000usize, 8usize);
    let (mut base, mut pitch) = (0, 0);
    // SAFETY: both outputs are valid pointers.
    unsafe { sys::cuMemAllocPitch_v2(&mut base, &mut pitch, width, height, 4) }.during("cuMemAllocPitch")?;
    ensure(pitch >= width, || format!("pitch {pitch} is narrower than a row of {width} bytes"))?;
    let row = |r: usize| (0..width).map(|c| (r * 31 + c) as u8).collect::<Vec<u8>>();
    for r in 0..height {
        // SAFETY: row r spans base + r*pitch .. + width, inside the pitched allocation.
        unsafe { result::memcpy_htod_sync(base + (r * pitch) as u64, &row(r)) }.during("cuMemcpyHtoD")?;
    }
    for r in 0..height {
        let mut back = vec![0u8; width];
        // SAFETY: as above, and `back` holds `width` bytes.
        unsafe { result::memcpy_dtoh_sync(&mut back, base + (r * pitch) as u64) }.during("cuMemcpyDtoH")?;
        verify(&format!("pitched row {r}"), &back, |c| row(r)[c])?;
    }
    // SAFETY: `base` came from cuMemAllocPitch and is freed once.
    unsafe { result::free_sync(base) }.during("cuMemFree")?;
    Ok(json!({ "width": width, "height": height, "pitch": pitch }))
}

/// Reads one pointer attribute.
///
/// # Safety
/// `T` must be the type (size) of the value the driver writes for `attr`.
unsafe fn pointer_attribute<T: Default>(ptr: sys::CUdeviceptr, attr: P) -> Outcome<T> {
    let mut value = T::default();
    // SAFETY: `value` is writable and, by the caller's guarantee, as large as what the driver writes.
    unsafe { sys::cuPointerGetAttribute(&mut value as *mut T as *mut c_void, attr, ptr) }
        .during(&format!("cuPointerGetAttribute({attr:?})"))?;
    Ok(value)
}

/// Managed memory written from the host at its device address, read back with a copy.
fn managed() -> Outcome {
    let n = 4096usize;
    // SAFETY: a plain allocation request; the memory is freed below.
    let p = unsafe { result::malloc_managed(n * 4, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
        .during("cuMemAllocManaged")?;
    // SAFETY: managed memory is host-accessible at its device address for n u32s, and no device work
    // uses it while this slice exists.
    let view = unsafe { std::slice::from_raw_parts_mut(p as *mut u32, n) };
    for (i, v) in view.iter_mut().enumerate() {
        *v = (i * 3) as u32;
    }
    let mut back = vec![0u32; n];
    // SAFETY: `p` addresses n u32s and `back` holds n.
    unsafe { result::memcpy_dtoh_sync(&mut back, p) }.during("cuMemcpyDtoH from managed memory")?;
    verify("managed memory written by the host", &back, |i| (i * 3) as u32)?;
    // SAFETY: IS_MANAGED is a 32-bit boolean.
    let is_managed: i32 = unsafe { pointer_attribute(p, P::CU_POINTER_ATTRIBUTE_IS_MANAGED) }?;
    // SAFETY: `p` came from cuMemAllocManaged and is freed once.
    unsafe { result::free_sync(p) }.during("cuMemFree")?;
    Ok(json!({ "elements": n, "is_managed": is_managed }))
}

/// `cuMemGetAddressRange` and `cuPointerGetAttribute` on an interior pointer of `dev`.
fn ranges(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, dev: &CudaSlice<u32>, n: usize) -> Outcome {
    let base = dptr(dev, stream);
    let inner = base + 4096;
    let (mut range_base, mut range_size) = (0, 0);
    // SAFETY: both outputs are valid pointers.
    unsafe { sys::cuMemGetAddressRange_v2(&mut range_base, &mut range_size, inner) }.during("cuMemGetAddressRange")?;
    // SAFETY: each type below is the documented value type of its attribute (CUmemorytype and the ordinal
    // are 32-bit, CUcontext is a pointer, the range start a CUdeviceptr, the range size a size_t).
    let (memory_type, ordinal, context, start, size) = unsafe {
        (
            pointer_attribute::<u32>(inner, P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE)?,
            pointer_attribute::<i32>(inner, P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)?,
            pointer_attribute::<usize>(inner, P::CU_POINTER_ATTRIBUTE_CONTEXT)?,
            pointer_attribute::<u64>(inner, P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)?,
            pointer_attribute::<usize>(inner, P::CU_POINTER_ATTRIBUTE_RANGE_SIZE)?,
        )
    };
    let plain_host = Box::new(0u64);
    let mut ignored = 0u32;
    let host_pointer = &*plain_host as *const u64 as sys::CUdeviceptr;
    // SAFETY: a valid 4-byte output; the pointer queried is ordinary host memory the driver never saw.
    let unknown = unsafe {
        sys::cuPointerGetAttribute(
            &mut ignored as *mut u32 as *mut c_void,
            P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            host_pointer,
        )
    };
    Ok(json!({
        "base": base,
        "queried": inner,
        "range_base": range_base,
        "range_size": range_size,
        "expected_size": n * 4,
        "memory_type": memory_type,
        "device_ordinal": ordinal,
        "context": context,
        "current_context": ctx.cu_ctx() as usize,
        "range_start_attribute": start,
        "range_size_attribute": size,
        "unknown_pointer_code": code(unknown),
    }))
}
