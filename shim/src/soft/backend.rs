//! The driver calls soft mode is built on, behind a trait so that the page-table and pool logic can be
//! tested against an in-memory device. [`Driver`] makes them on the real driver's functions directly,
//! never through the shim's own hooks: the chunks Tessera creates for a vGPU are not the program's
//! allocations and must not be charged as such.

use crate::guard::{Res, status};
use crate::real::{
    cuCtxSynchronize as SYNCHRONIZE, cuDevicePrimaryCtxRetain as PRIMARY_RETAIN, cuEventCreate as EVENT_CREATE,
    cuEventDestroy_v2 as EVENT_DESTROY, cuEventRecord as EVENT_RECORD, cuEventSynchronize as EVENT_SYNCHRONIZE,
    cuMemAddressReserve as RESERVE, cuMemAllocHost_v2 as HOST_ALLOC, cuMemCreate as CREATE, cuMemFreeHost as HOST_FREE,
    cuMemGetAllocationGranularity as GRANULARITY, cuMemMap as MAP, cuMemRelease as RELEASE,
    cuMemSetAccess as SET_ACCESS, cuMemUnmap as UNMAP, cuMemcpyDtoD_v2 as DTOD, cuMemcpyDtoHAsync_v2 as DTOH_ASYNC,
    cuMemcpyHtoDAsync_v2 as HTOD_ASYNC,
};
use std::ffi::c_void;
use tessera_ffi::sys::{
    CUcontext, CUdeviceptr, CUevent, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationGranularity_flags,
    CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocationType,
};

/// What soft mode needs from a device.
pub trait Backend: Send + Sync {
    /// The device's allocation granularity (the page size of a soft space).
    fn granularity(&self) -> Res<u64>;
    /// Reserves `size` bytes of device address space.
    fn reserve(&self, size: u64) -> Res<u64>;
    /// Creates `size` bytes of physical memory on the device; the handle.
    fn create(&self, size: u64) -> Res<u64>;
    /// Releases physical memory created with [`Backend::create`].
    fn release(&self, handle: u64);
    /// Maps `size` bytes of `handle` from `offset` at `va`, readable and writable by the device.
    fn map(&self, va: u64, size: u64, handle: u64, offset: u64) -> Res;
    /// Unmaps `[va, va + size)`.
    fn unmap(&self, va: u64, size: u64);
    /// Queues a copy of device memory to host memory from [`Backend::host_alloc`]; it has completed once
    /// [`Backend::synchronize`] returns.
    fn to_host(&self, dst: *mut u8, src: u64, len: u64) -> Res;
    /// Queues a copy of host memory from [`Backend::host_alloc`] to device memory; it has completed once
    /// [`Backend::synchronize`] returns.
    fn to_device(&self, dst: u64, src: *const u8, len: u64) -> Res;
    /// Copies device memory to device memory.
    fn within_device(&self, dst: u64, src: u64, len: u64) -> Res;
    /// Waits for every piece of work the process queued on the device.
    fn synchronize(&self) -> Res;
    /// Marks the copies queued so far: [`Backend::wait`] on the mark returns once they have completed.
    fn mark(&self) -> Res<u64>;
    /// Waits for a mark from [`Backend::mark`] and lets go of it; call once for every mark.
    fn wait(&self, mark: u64) -> Res;
    /// Host memory suited to copies (pinned where the driver offers it), or `None` when there is none.
    fn host_alloc(&self, len: u64) -> Option<*mut u8>;
    /// Frees memory from [`Backend::host_alloc`].
    fn host_free(&self, p: *mut u8, len: u64);
}

/// `CU_EVENT_DISABLE_TIMING`: a mark needs no timestamp.
const CU_EVENT_DISABLE_TIMING: u32 = 2;

/// `CUDA_ERROR_NOT_SUPPORTED`, for a driver without the VMM entry points.
const NOT_SUPPORTED: u32 = tessera_ffi::cuda::CUDA_ERROR_NOT_SUPPORTED;

/// Calls a real function, or fails with not-supported when the driver lacks it.
macro_rules! call {
    ($f:ident($($a:expr),*)) => {{
        let f = $f.get().ok_or(NOT_SUPPORTED)?;
        // SAFETY: the function has the C signature its RealFn declares; every pointer argument is valid
        // for the call (the callers' contracts).
        status(unsafe { f($($a),*) })
    }};
}

/// One device of the real driver, with the context soft mode's own copies and waits run in.
pub struct Driver {
    device: i32,
    /// Where soft mode's own work runs.
    ctx: u64,
    /// The context of the process's first soft allocation on the device.
    owner: u64,
}

impl Driver {
    /// Device ordinal `device`. Soft mode's own copies and waits run in the device's primary context,
    /// retained for the life of the process: the program may destroy any context of its own, and mapped
    /// memory is reachable from every context of its device. Without it, `fallback` (the context of the
    /// process's first soft allocation there).
    pub fn new(device: usize, fallback: u64) -> Driver {
        let mut primary: CUcontext = std::ptr::null_mut();
        let retained = (|| call!(PRIMARY_RETAIN(&mut primary, device as i32)))().is_ok() && !primary.is_null();
        Driver { device: device as i32, ctx: if retained { primary as u64 } else { fallback }, owner: fallback }
    }

    /// The context the process's soft memory on the device answers as its own: that of its first
    /// soft allocation there.
    pub fn context(&self) -> u64 {
        self.owner
    }

    fn prop(&self) -> CUmemAllocationProp {
        // SAFETY: CUmemAllocationProp is plain C data, for which all-zero is valid (and means "defaults").
        let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
        p.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type_ = CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = self.device;
        p
    }

    /// Runs `f` with this device's context current on the calling thread (restoring the previous one), in
    /// relaxed capture mode while a capture is in progress: the swapper's synchronizing calls must not
    /// invalidate a program's global-mode capture on another thread.
    fn in_context<T>(&self, f: impl FnOnce() -> Res<T>) -> Res<T> {
        crate::launch::capture::relaxed(|| crate::driver::in_context(self.ctx, f).flatten())
    }
}

impl Backend for Driver {
    fn granularity(&self) -> Res<u64> {
        let mut g = 0usize;
        let p = self.prop();
        let minimum = CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
        call!(GRANULARITY(&mut g, &p, minimum))?;
        Ok((g as u64).max(1))
    }

    fn reserve(&self, size: u64) -> Res<u64> {
        let mut va: CUdeviceptr = 0;
        call!(RESERVE(&mut va, size as usize, 0, 0, 0))?;
        Ok(va)
    }

    fn create(&self, size: u64) -> Res<u64> {
        let mut h: CUmemGenericAllocationHandle = 0;
        let p = self.prop();
        call!(CREATE(&mut h, size as usize, &p, 0))?;
        Ok(h)
    }

    fn release(&self, handle: u64) {
        let _ = (|| call!(RELEASE(handle)))();
    }

    fn map(&self, va: u64, size: u64, handle: u64, offset: u64) -> Res {
        call!(MAP(va, size as usize, offset as usize, handle, 0))?;
        // SAFETY: CUmemAccessDesc is plain C data; all-zero is valid and overwritten below.
        let mut access: CUmemAccessDesc = unsafe { std::mem::zeroed() };
        access.location.type_ = CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        access.flags = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        access.location.id = self.device;
        let r = call!(SET_ACCESS(va, size as usize, &access, 1));
        if r.is_err() {
            self.unmap(va, size);
        }
        r
    }

    fn unmap(&self, va: u64, size: u64) {
        let _ = (|| call!(UNMAP(va, size as usize)))();
    }

    // Both copies go to the legacy default stream, which also orders them after any of the program's
    // work still on blocking streams of the context; with pinned host memory they run while the caller
    // maps or unmaps the next page.
    fn to_host(&self, dst: *mut u8, src: u64, len: u64) -> Res {
        self.in_context(|| call!(DTOH_ASYNC(dst.cast(), src, len as usize, std::ptr::null_mut())))
    }

    fn to_device(&self, dst: u64, src: *const u8, len: u64) -> Res {
        self.in_context(|| call!(HTOD_ASYNC(dst, src.cast(), len as usize, std::ptr::null_mut())))
    }

    fn within_device(&self, dst: u64, src: u64, len: u64) -> Res {
        self.in_context(|| call!(DTOD(dst, src, len as usize)))
    }

    fn synchronize(&self) -> Res {
        self.in_context(|| call!(SYNCHRONIZE()))
    }

    fn mark(&self) -> Res<u64> {
        let mut event: CUevent = std::ptr::null_mut();
        self.in_context(|| {
            call!(EVENT_CREATE(&mut event, CU_EVENT_DISABLE_TIMING))?;
            // On the legacy default stream, where the copies are queued.
            let recorded = call!(EVENT_RECORD(event, std::ptr::null_mut()));
            if recorded.is_err() {
                let _ = call!(EVENT_DESTROY(event));
            }
            recorded
        })?;
        Ok(event as u64)
    }

    fn wait(&self, mark: u64) -> Res {
        let event = mark as CUevent;
        self.in_context(|| {
            let reached = call!(EVENT_SYNCHRONIZE(event));
            let _ = call!(EVENT_DESTROY(event));
            reached
        })
    }

    fn host_alloc(&self, len: u64) -> Option<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        self.in_context(|| call!(HOST_ALLOC(&mut p, len as usize))).ok()?;
        (!p.is_null()).then_some(p.cast())
    }

    fn host_free(&self, p: *mut u8, _len: u64) {
        let _ = self.in_context(|| call!(HOST_FREE(p.cast())));
    }
}
