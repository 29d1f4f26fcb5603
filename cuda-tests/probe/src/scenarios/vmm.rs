//! `vmm`: one physical allocation mapped at one address, written, unmapped, mapped at another address and
//! read back — the data must follow the handle.

use super::open;
use crate::args::Args;
use crate::fail::{During, Outcome, code, ensure, verify};
use cudarc::driver::{result, sys};
use serde_json::json;

/// Allocation properties for pinned memory on device `ordinal`.
pub(super) fn properties(ordinal: i32) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: location(ordinal),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

fn location(ordinal: i32) -> sys::CUmemLocation {
    sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal }
}

/// Reserves `size` bytes of device address space.
pub(super) fn reserve(size: usize) -> Outcome<sys::CUdeviceptr> {
    let mut ptr = 0;
    // SAFETY: a valid output pointer; no fixed address is requested.
    unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) }.during("cuMemAddressReserve")?;
    Ok(ptr)
}

/// Maps `handle` at `ptr` and grants the device read-write access.
pub(super) fn map(
    ptr: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
    ordinal: i32,
) -> Outcome<()> {
    // SAFETY: `ptr` starts a reservation of at least `size` bytes with nothing mapped in it.
    unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) }.during("cuMemMap")?;
    let desc = sys::CUmemAccessDesc {
        location: location(ordinal),
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: the range was just mapped; one valid descriptor.
    unsafe { sys::cuMemSetAccess(ptr, size, &desc, 1) }.during("cuMemSetAccess")
}

/// Runs the remap check on `--device`.
pub fn run(args: &Args) -> Outcome {
    let ctx = open(args)?;
    let ordinal = args.device()? as i32;
    let prop = properties(ordinal);
    let mut granularity = 0;
    // SAFETY: valid output and properties pointers.
    unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    }
    .during("cuMemGetAllocationGranularity")?;
    let size = granularity;
    let (free_before, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    let (a, b) = (reserve(size)?, reserve(size)?);
    ensure(a != b, || "two reservations returned the same address".into())?;

    let mut handle = 0;
    // SAFETY: valid output and properties pointers; size is a multiple of the granularity.
    unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.during("cuMemCreate")?;
    let (free_after_create, _) = ctx.mem_get_info().during("cuMemGetInfo")?;

    let pattern: Vec<u32> = (0..size / 4).map(|i| (i as u32).wrapping_mul(0x9E37_79B9)).collect();
    map(a, size, handle, ordinal)?;
    // SAFETY: `a` maps `size` bytes read-write; `pattern` holds size bytes.
    unsafe { result::memcpy_htod_sync(a, &pattern) }.during("cuMemcpyHtoD through A")?;
    // SAFETY: `a` is mapped with the whole range.
    unsafe { sys::cuMemUnmap(a, size) }.during("cuMemUnmap(A)")?;
    let mut probe = [0u32; 4];
    // SAFETY: `probe` holds 16 bytes; the source is unmapped, which the driver must refuse.
    let read_after_unmap = unsafe { result::memcpy_dtoh_sync(&mut probe, a) };

    map(b, size, handle, ordinal)?;
    let mut back = vec![0u32; size / 4];
    // SAFETY: `b` maps `size` bytes; `back` holds size bytes.
    unsafe { result::memcpy_dtoh_sync(&mut back, b) }.during("cuMemcpyDtoH through B")?;
    verify("data read through B", &back, |i| pattern[i])?;

    let (mut range_base, mut range_size) = (0, 0);
    // SAFETY: valid output pointers.
    unsafe { sys::cuMemGetAddressRange_v2(&mut range_base, &mut range_size, b + 100) }
        .during("cuMemGetAddressRange")?;
    let mut retained = 0;
    // SAFETY: `b` is mapped; valid output pointer.
    unsafe { sys::cuMemRetainAllocationHandle(&mut retained, b as *mut std::ffi::c_void) }
        .during("cuMemRetainAllocationHandle")?;

    // SAFETY: each call undoes one step above, in reverse order; nothing uses the ranges any more.
    unsafe {
        sys::cuMemUnmap(b, size).during("cuMemUnmap(B)")?;
        sys::cuMemRelease(retained).during("cuMemRelease(retained)")?;
        sys::cuMemRelease(handle).during("cuMemRelease")?;
    }
    let (free_after_release, _) = ctx.mem_get_info().during("cuMemGetInfo")?;

    // Physical memory created after a release (which a driver may hand out again) is charged again,
    // and works like any other.
    let mut again = 0;
    // SAFETY: as the first cuMemCreate.
    unsafe { sys::cuMemCreate(&mut again, size, &prop, 0) }.during("cuMemCreate (again)")?;
    let (free_after_recreate, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    map(a, size, again, ordinal)?;
    let inverse: Vec<u32> = pattern.iter().map(|w| !w).collect();
    // SAFETY: `a` maps `size` bytes read-write; both buffers hold size bytes.
    unsafe { result::memcpy_htod_sync(a, &inverse) }.during("cuMemcpyHtoD (again)")?;
    // SAFETY: as above.
    unsafe { result::memcpy_dtoh_sync(&mut back, a) }.during("cuMemcpyDtoH (again)")?;
    verify("data through memory created again", &back, |i| inverse[i])?;
    // SAFETY: `a` maps the whole range of `again`, released once.
    unsafe {
        sys::cuMemUnmap(a, size).during("cuMemUnmap(A, again)")?;
        sys::cuMemRelease(again).during("cuMemRelease (again)")?;
    }
    let (free_after_second_release, _) = ctx.mem_get_info().during("cuMemGetInfo")?;
    // SAFETY: both reservations are unmapped and freed once, with their full sizes.
    unsafe {
        sys::cuMemAddressFree(a, size).during("cuMemAddressFree(A)")?;
        sys::cuMemAddressFree(b, size).during("cuMemAddressFree(B)")?;
    }
    Ok(json!({
        "granularity": granularity,
        "size": size,
        "a": a,
        "b": b,
        "elements_verified": back.len(),
        "read_after_unmap_code": read_after_unmap.err().map(|e| code(e.0)),
        "range_base": range_base,
        "range_size": range_size,
        "retained_same_handle": retained == handle,
        "free_before": free_before,
        "free_after_create": free_after_create,
        "free_after_release": free_after_release,
        "free_after_recreate": free_after_recreate,
        "free_after_second_release": free_after_second_release,
    }))
}
