//! Memory hooks: quota accounting on every device-memory path, and the memory figures programs see.
//!
//! Every allocation reserves its bytes in the quota before the driver is asked, gives them back if the
//! driver fails, and records what it was charged in the [`alloc_table`](crate::alloc_table) under the
//! pointer or handle the driver returned; the matching free takes that record out before the driver
//! frees (so the driver cannot hand the same key out again first) and gives the bytes back once the
//! driver has freed. A stream-ordered free keeps its bytes charged until the stream has executed it
//! ([`pending_free`]): allocations and `cuMemGetInfo` settle those that have been executed first, and
//! an allocation that would not fit otherwise waits for the process's own pending frees on its device.
//!
//! The device charged is the current context's (the stream's, for stream-ordered allocations made on
//! the current context's streams, which is how the runtime allocates), or the allocation properties'
//! location for `cuMemCreate`. A VMM allocation stays charged while its handle, a retained handle or a
//! mapping of it lives, as the driver keeps the memory for all of those.

use crate::alloc_table::{Entry, Kind, TABLE};
use crate::footprint::{self, Extent};
use crate::guard::{Res, Status, status};
use crate::quota::{self, Quota};
use crate::{contexts, current, driver, pending_free, pool_cache, soft};
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr,
    CUexecAffinityParam, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemoryPool, CUmipmappedArray, CUstream,
};

/// One charge: what, where, and who owns it.
struct Charge {
    what: &'static str,
    kind: Kind,
    device: usize,
    owner: u64,
    bytes: u64,
}

/// Reserves `bytes` on device `dev` for `what`, after giving back the process's stream-ordered frees
/// that have been executed; when the request would not fit otherwise, waits for the process's pending
/// frees on the device first (their memory is what the driver would reuse). While no free is pending this
/// is [`Quota::reserve`] after one atomic load.
fn reserve(q: &Quota, dev: usize, bytes: u64, what: &str) -> Res {
    if pending_free::any() {
        pending_free::settle();
        if q.used(dev).saturating_add(bytes) > q.limit(dev) && pending_free::on_device(dev) {
            pending_free::wait_device(dev);
        }
    }
    if pool_cache::any() && q.used(dev).saturating_add(bytes) > q.limit(dev) {
        pool_cache::trim_device(q, dev);
    }
    q.reserve(dev, bytes, what)
}

impl Charge {
    /// Reserves, calls the driver, and records the result under `key()` (read from the driver's output),
    /// or gives the bytes back if the driver failed.
    fn run(self, q: &Quota, real: impl FnOnce() -> Status, key: impl FnOnce() -> u64) -> Res {
        reserve(q, self.device, self.bytes, self.what)?;
        if let Err(e) = status(real()) {
            q.release(self.device, self.bytes);
            return Err(e);
        }
        TABLE.insert(self.kind, key(), Entry::new(self.device as u32, self.bytes, self.owner));
        Ok(())
    }
}

/// An allocation of `bytes` on the current context's device (`bytes` is `None` when it cannot be
/// represented: charged as everything, so refused).
fn on_current(
    q: &Quota,
    what: &'static str,
    kind: Kind,
    bytes: Option<u64>,
    real: impl FnOnce() -> Status,
    key: impl FnOnce() -> u64,
) -> Res {
    let Some(site) = current::current_site() else { return status(real()) };
    let c = Charge { what, kind, device: site.device, owner: site.ctx, bytes: bytes.unwrap_or(u64::MAX) };
    c.run(q, real, key)
}

/// A free of `(kind, key)`: the record comes out first, the bytes go back once the driver freed (to what
/// its memory pool keeps charged, for linear memory a pool gave), and the record is restored if the driver
/// refused.
fn free_of(kind: Kind, key: u64, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    let Some(e) = TABLE.take(kind, key) else { return status(real()) };
    // Asked before the driver frees it.
    let pool = if kind == Kind::Linear { pool_of(key) } else { 0 };
    match status(real()) {
        Ok(()) if pool != 0 => {
            pool_cache::freed(q, pool, e.device as usize, e.bytes);
            Ok(())
        }
        Ok(()) => {
            q.release(e.device as usize, e.bytes);
            Ok(())
        }
        Err(code) => {
            TABLE.insert(kind, key, e);
            Err(code)
        }
    }
}

/// Drops one reference to a VMM handle, giving its bytes back with the last one.
fn unref_physical(q: &Quota, handle: u64) {
    if let Some(Some(e)) = TABLE.release(Kind::Physical, handle) {
        q.release(e.device as usize, e.bytes);
    }
}

/// Reads a driver output after the driver succeeded.
///
/// # Safety
/// `p` is the output pointer the driver just wrote through successfully.
unsafe fn written<T: Copy>(p: *const T) -> T {
    // SAFETY: per the contract.
    unsafe { *p }
}

/// A soft-mode allocation of `size` bytes, written to `dptr`.
fn soft_alloc(s: &'static soft::Soft, dptr: *mut CUdeviceptr, size: u64, what: &'static str) -> Res {
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let va = s.alloc(size, what)?;
    // SAFETY: non-NULL: the program's output variable.
    unsafe { dptr.write(va) };
    Ok(())
}

/// `cuMemAlloc_v2`.
pub fn alloc(dptr: *mut CUdeviceptr, size: usize, real: impl FnOnce() -> Status) -> Res {
    if let Some(s) = soft::active() {
        return soft_alloc(s, dptr, size as u64, "cuMemAlloc");
    }
    let Some(q) = quota::active()? else { return status(real()) };
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(dptr) };
    on_current(q, "cuMemAlloc", Kind::Linear, Some(size as u64), real, key)
}

/// `cuMemAllocPitch_v2`: charged `pitch × height`; reserved with rows rounded to
/// [`footprint::PITCH_ALIGN`], then corrected to the pitch the driver chose.
pub fn alloc_pitch(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
    real: impl FnOnce() -> Status,
) -> Res {
    if let Some(s) = soft::active() {
        if pitch.is_null() || width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let row = footprint::pitch_of(width).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let bytes = row.checked_mul(height as u64).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        soft_alloc(s, dptr, bytes, "cuMemAllocPitch")?;
        // SAFETY: non-NULL: the program's output variable.
        unsafe { pitch.write(row as usize) };
        return Ok(());
    }
    let Some(q) = quota::active()? else { return status(real()) };
    let Some(site) = current::current_site() else { return status(real()) };
    let (what, d) = ("cuMemAllocPitch", site.device);
    let estimate = footprint::pitched(width, height).unwrap_or(u64::MAX);
    reserve(q, d, estimate, what)?;
    if let Err(e) = status(real()) {
        q.release(d, estimate);
        return Err(e);
    }
    // SAFETY: the driver succeeded, so both outputs were written.
    let (ptr, pitch) = unsafe { (written(dptr), written(pitch)) };
    let actual = (pitch as u64).saturating_mul(height as u64);
    if let Err(e) = q.adjust(d, estimate, actual, what) {
        if let Some(free) = crate::real::cuMemFree_v2.get() {
            // SAFETY: frees the allocation the driver just made for us.
            unsafe { free(ptr) };
        }
        q.release(d, estimate);
        return Err(e);
    }
    TABLE.insert(Kind::Linear, ptr, Entry::new(d as u32, actual, site.ctx));
    Ok(())
}

/// `cuMemAllocManaged`: managed memory counts as device memory.
pub fn alloc_managed(dptr: *mut CUdeviceptr, size: usize, _flags: c_uint, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(dptr) };
    on_current(q, "cuMemAllocManaged", Kind::Linear, Some(size as u64), real, key)
}

/// `cuMemFree_v2`.
pub fn free(dptr: CUdeviceptr, real: impl FnOnce() -> Status) -> Res {
    if let Some(r) = soft::active().and_then(|s| s.free(dptr)) {
        return r;
    }
    free_of(Kind::Linear, dptr, real)
}

/// The soft space serves a stream-ordered allocation at once, unless the stream is being captured into
/// a graph (the graph then owns a native allocation).
fn soft_for_stream(stream: CUstream) -> Option<&'static soft::Soft> {
    soft::active().filter(|_| crate::launch::capturing(stream) == Some(false))
}

/// `cuMemAllocAsync` and `_ptsz` (`PER_THREAD`).
pub fn alloc_async<const PER_THREAD: bool>(
    dptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
    real: impl FnOnce() -> Status,
) -> Res {
    if let Some(s) = soft_for_stream(crate::launch::explicit_stream::<PER_THREAD>(stream)) {
        return soft_alloc(s, dptr, size as u64, "cuMemAllocAsync");
    }
    let Some(q) = quota::active()? else { return status(real()) };
    POOLED.store(true, Ordering::Relaxed);
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(dptr) };
    on_current(q, "cuMemAllocAsync", Kind::Linear, Some(size as u64), real, key)
}

/// `cuMemAllocFromPoolAsync` and `_ptsz` (`PER_THREAD`).
pub fn alloc_from_pool<const PER_THREAD: bool>(
    dptr: *mut CUdeviceptr,
    size: usize,
    _pool: CUmemoryPool,
    stream: CUstream,
    real: impl FnOnce() -> Status,
) -> Res {
    if let Some(s) = soft_for_stream(crate::launch::explicit_stream::<PER_THREAD>(stream)) {
        return soft_alloc(s, dptr, size as u64, "cuMemAllocFromPoolAsync");
    }
    let Some(q) = quota::active()? else { return status(real()) };
    POOLED.store(true, Ordering::Relaxed);
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(dptr) };
    on_current(q, "cuMemAllocFromPoolAsync", Kind::Linear, Some(size as u64), real, key)
}

/// `cuMemFreeAsync` and `_ptsz` (`PER_THREAD`): the bytes stay charged until the stream has executed the
/// free ([`pending_free`]). A soft allocation is freed once the stream's work queued before has finished
/// (it could still use the memory).
pub fn free_async<const PER_THREAD: bool>(dptr: CUdeviceptr, stream: CUstream, real: impl FnOnce() -> Status) -> Res {
    let stream = crate::launch::explicit_stream::<PER_THREAD>(stream);
    if let Some(s) = soft::active().filter(|s| s.owns(dptr)) {
        soft::calls::synchronize_stream(stream)?;
        return s.free(dptr).unwrap_or(Err(CUDA_ERROR_INVALID_VALUE));
    }
    let Some(_) = quota::active()? else { return status(real()) };
    let Some(e) = TABLE.take(Kind::Linear, dptr) else { return status(real()) };
    // Asked before the free is queued: the stream may have executed it by the time it returns.
    let pool = pool_of(dptr);
    if let Err(code) = status(real()) {
        TABLE.insert(Kind::Linear, dptr, e);
        return Err(code);
    }
    pending_free::queue(e.device as usize, e.bytes, e.owner, stream, pool);
    Ok(())
}

/// Whether this process has allocated from a memory pool (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`):
/// only then does a free ask which pool its memory came from ([`pool_of`]).
static POOLED: AtomicBool = AtomicBool::new(false);

/// `CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`.
const POINTER_MEMPOOL: c_uint = 17;

/// The memory pool the allocation at `dptr` came from (0: none, or the driver cannot say). Asked of the
/// driver only in a process that allocated from pools (one load otherwise).
fn pool_of(dptr: CUdeviceptr) -> usize {
    if !POOLED.load(Ordering::Relaxed) {
        return 0;
    }
    let Some(f) = crate::real::cuPointerGetAttribute.get() else { return 0 };
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: cuPointerGetAttribute's C signature; this attribute writes one pool handle.
    match unsafe { f((&raw mut pool).cast::<c_void>(), POINTER_MEMPOOL, dptr) } {
        0 => pool as usize,
        _ => 0,
    }
}

/// After the program changed `pool`: what the pool keeps charged follows what it keeps.
fn pool_changed(pool: CUmemoryPool, real: impl FnOnce() -> Status) -> Res {
    status(real())?;
    if let Ok(Some(q)) = quota::active() {
        pool_cache::changed(q, pool as usize);
    }
    Ok(())
}

/// `cuMemPoolTrimTo`.
pub fn pool_trim(pool: CUmemoryPool, _keep: usize, real: impl FnOnce() -> Status) -> Res {
    pool_changed(pool, real)
}

/// `cuMemPoolSetAttribute`: a release threshold lowered gives back what the pool keeps beyond it.
pub fn pool_set_attribute(pool: CUmemoryPool, _attr: c_int, _value: *mut c_void, real: impl FnOnce() -> Status) -> Res {
    pool_changed(pool, real)
}

/// `cuMemPoolDestroy`: what the pool kept is the device's again.
pub fn pool_destroy(pool: CUmemoryPool, real: impl FnOnce() -> Status) -> Res {
    status(real())?;
    if let Ok(Some(q)) = quota::active() {
        pool_cache::destroyed(q, pool as usize);
    }
    Ok(())
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;

/// `cuMemCreate`: charged on the properties' device; memory located elsewhere (host) is not device
/// memory and passes through.
pub fn create(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    _flags: c_ulonglong,
    real: impl FnOnce() -> Status,
) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    // Leading fields: type, requestedHandleTypes, location.type, location.id (32 bits each).
    // SAFETY: `prop` is NULL or the caller's readable properties, which start with these four fields.
    let head = unsafe { prop.cast::<[u32; 4]>().as_ref() }.copied();
    let device = head.filter(|h| h[2] == LOCATION_DEVICE).and_then(|h| driver::device_index(h[3] as c_int));
    let Some(device) = device else { return status(real()) };
    let c = Charge { what: "cuMemCreate", kind: Kind::Physical, device, owner: 0, bytes: size as u64 };
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(handle) };
    c.run(q, real, key)
}

/// `cuMemRelease`: drops the handle's own reference.
pub fn release(handle: CUmemGenericAllocationHandle, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    let dropped = TABLE.release(Kind::Physical, handle);
    match status(real()) {
        Ok(()) => {
            if let Some(Some(e)) = dropped {
                q.release(e.device as usize, e.bytes);
            }
            Ok(())
        }
        Err(code) => {
            match dropped {
                Some(Some(e)) => TABLE.insert(Kind::Physical, handle, e),
                Some(None) => {
                    TABLE.retain(Kind::Physical, handle);
                }
                None => {}
            }
            Err(code)
        }
    }
}

/// `cuMemMap`: a mapping holds a reference to its handle.
pub fn map(
    ptr: CUdeviceptr,
    size: usize,
    _offset: usize,
    handle: CUmemGenericAllocationHandle,
    _flags: c_ulonglong,
    real: impl FnOnce() -> Status,
) -> Res {
    let Some(_) = quota::active()? else { return status(real()) };
    status(real())?;
    if TABLE.retain(Kind::Physical, handle) {
        TABLE.insert(Kind::Mapping, ptr, Entry::new(0, size as u64, handle));
    }
    Ok(())
}

/// `cuMemUnmap`: drops the references of the mappings the range covers (mappings are unmapped whole, so
/// they tile the range from its start).
pub fn unmap(ptr: CUdeviceptr, size: usize, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    status(real())?;
    let end = ptr.saturating_add(size as u64);
    let mut at = ptr;
    while at < end {
        let Some(m) = TABLE.take(Kind::Mapping, at) else { break };
        unref_physical(q, m.owner);
        at = at.saturating_add(m.bytes.max(1));
    }
    Ok(())
}

/// `cuMemRetainAllocationHandle`: one more reference to the handle.
pub fn retain_handle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
    real: impl FnOnce() -> Status,
) -> Res {
    soft::calls::refuse_soft("cuMemRetainAllocationHandle", addr as CUdeviceptr)?;
    let Some(_) = quota::active()? else { return status(real()) };
    status(real())?;
    // SAFETY: the driver succeeded, so it wrote the handle.
    TABLE.retain(Kind::Physical, unsafe { written(handle) });
    Ok(())
}

/// `cuArrayCreate_v2`.
pub fn array_create(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    // SAFETY: `desc` is NULL or the caller's descriptor.
    let Some(e) = (unsafe { Extent::of_2d(desc) }) else { return status(real()) };
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(handle) } as u64;
    on_current(q, "cuArrayCreate", Kind::Array, e.array_bytes(), real, key)
}

/// `cuArray3DCreate_v2`.
pub fn array3d_create(
    handle: *mut CUarray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    real: impl FnOnce() -> Status,
) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    // SAFETY: `desc` is NULL or the caller's descriptor.
    let Some(e) = (unsafe { Extent::of_3d(desc) }) else { return status(real()) };
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(handle) } as u64;
    on_current(q, "cuArray3DCreate", Kind::Array, e.array_bytes(), real, key)
}

/// `cuArrayDestroy`.
pub fn array_destroy(handle: CUarray, real: impl FnOnce() -> Status) -> Res {
    free_of(Kind::Array, handle as u64, real)
}

/// `cuMipmappedArrayCreate`.
pub fn mipmapped_create(
    handle: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
    real: impl FnOnce() -> Status,
) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    // SAFETY: `desc` is NULL or the caller's descriptor.
    let Some(e) = (unsafe { Extent::of_3d(desc) }) else { return status(real()) };
    let bytes = e.mipmapped_bytes(levels);
    // SAFETY: the key is read only after the driver succeeded, having written it.
    let key = || unsafe { written(handle) } as u64;
    on_current(q, "cuMipmappedArrayCreate", Kind::Mipmap, bytes, real, key)
}

/// `cuMipmappedArrayDestroy`.
pub fn mipmapped_destroy(handle: CUmipmappedArray, real: impl FnOnce() -> Status) -> Res {
    free_of(Kind::Mipmap, handle as u64, real)
}

/// `cuCtxCreate` and `cuCtxCreate_v2`.
pub fn ctx_create(pctx: *mut CUcontext, _flags: c_uint, dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    current::changing(|| contexts::create(pctx, dev, real))
}

/// `cuCtxCreate_v3`.
pub fn ctx_create_v3(
    pctx: *mut CUcontext,
    _params: *mut CUexecAffinityParam,
    _num_params: c_int,
    _flags: c_uint,
    dev: CUdevice,
    real: impl FnOnce() -> Status,
) -> Res {
    current::changing(|| contexts::create(pctx, dev, real))
}

/// `cuCtxCreate_v4`.
pub fn ctx_create_v4(
    pctx: *mut CUcontext,
    _params: *mut CUctxCreateParams,
    _flags: c_uint,
    dev: CUdevice,
    real: impl FnOnce() -> Status,
) -> Res {
    current::changing(|| contexts::create(pctx, dev, real))
}

/// `cuCtxDestroy` and `cuCtxDestroy_v2`.
pub fn ctx_destroy(ctx: CUcontext, real: impl FnOnce() -> Status) -> Res {
    current::changing(|| contexts::destroy(ctx, real))
}

/// `cuDevicePrimaryCtxRetain`. Retaining makes nothing current, but the cached current context is
/// invalidated anyway: a runtime makes the primary context current right after retaining it, and should
/// it ever do so by a route the shim does not intercept, no thread keeps its answer from before.
pub fn primary_retain(pctx: *mut CUcontext, dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    current::changing(|| contexts::primary_retain(pctx, dev, real))
}

/// `cuDevicePrimaryCtxRelease` and `_v2`.
pub fn primary_release(dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    current::changing(|| contexts::primary_release(dev, real))
}

/// `cuDevicePrimaryCtxReset` and `_v2`.
pub fn primary_reset(dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    current::changing(|| contexts::primary_release(dev, real))
}

/// `cuMemGetInfo_v2`: `total = min(limit, real total)`, `free = min(total - used, real free)` on the
/// current context's device. The driver answers first, so its errors (NULL outputs included) are its own.
pub fn get_info(free: *mut usize, total: *mut usize, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    status(real())?;
    if free.is_null() || total.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let Some(site) = current::current_site() else { return Ok(()) };
    q.reclaim_if_due();
    pending_free::settle_now();
    // SAFETY: both pointers are non-NULL and the driver just wrote through them.
    let (f, t) = unsafe { (written(free), written(total)) };
    if let Some((f, t)) = q.view(site.device, f as u64, t as u64) {
        // SAFETY: as above; the values are at most the driver's, so they fit.
        unsafe { (free.write(f as usize), total.write(t as usize)) };
    }
    Ok(())
}

/// `cuDeviceTotalMem_v2`: the device's limit (at most its real size).
pub fn total_mem(bytes: *mut usize, dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    let Some(q) = quota::active()? else { return status(real()) };
    status(real())?;
    if bytes.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let Some(d) = driver::device_index(dev) else { return Ok(()) };
    // SAFETY: non-NULL, and the driver just wrote through it.
    let real_total = unsafe { written(bytes) } as u64;
    if let Some((_, t)) = q.view(d, real_total, real_total) {
        // SAFETY: as above; at most the driver's value.
        unsafe { bytes.write(t as usize) };
    }
    Ok(())
}
