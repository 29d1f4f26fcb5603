//! Memory hooks: quota accounting on every device-memory path.

use crate::guard::{Res, Status, status};
use std::ffi::{c_int, c_uint, c_ulonglong};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr,
    CUexecAffinityParam, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemoryPool, CUmipmappedArray, CUstream,
};

/// `cuMemAlloc_v2` (pass-through until quotas are enforced).
pub fn alloc(_dptr: *mut CUdeviceptr, _size: usize, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemAllocPitch_v2` (pass-through until quotas are enforced).
pub fn alloc_pitch(
    _dptr: *mut CUdeviceptr,
    _pitch: *mut usize,
    _width: usize,
    _height: usize,
    _elem: c_uint,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuMemAllocManaged` (pass-through until quotas are enforced).
pub fn alloc_managed(_dptr: *mut CUdeviceptr, _size: usize, _flags: c_uint, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemFree_v2` (pass-through until quotas are enforced).
pub fn free(_dptr: CUdeviceptr, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemAllocAsync` (pass-through until quotas are enforced).
pub fn alloc_async(_dptr: *mut CUdeviceptr, _size: usize, _stream: CUstream, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemAllocFromPoolAsync` (pass-through until quotas are enforced).
pub fn alloc_from_pool(
    _dptr: *mut CUdeviceptr,
    _size: usize,
    _pool: CUmemoryPool,
    _stream: CUstream,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuMemFreeAsync` (pass-through until quotas are enforced).
pub fn free_async(_dptr: CUdeviceptr, _stream: CUstream, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemCreate` (pass-through until quotas are enforced).
pub fn create(
    _handle: *mut CUmemGenericAllocationHandle,
    _size: usize,
    _prop: *const CUmemAllocationProp,
    _flags: c_ulonglong,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuMemRelease` (pass-through until quotas are enforced).
pub fn release(_handle: CUmemGenericAllocationHandle, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuArrayCreate_v2` (pass-through until quotas are enforced).
pub fn array_create(_handle: *mut CUarray, _desc: *const CUDA_ARRAY_DESCRIPTOR, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuArray3DCreate_v2` (pass-through until quotas are enforced).
pub fn array3d_create(
    _handle: *mut CUarray,
    _desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuArrayDestroy` (pass-through until quotas are enforced).
pub fn array_destroy(_handle: CUarray, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMipmappedArrayCreate` (pass-through until quotas are enforced).
pub fn mipmapped_create(
    _handle: *mut CUmipmappedArray,
    _desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    _levels: c_uint,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuMipmappedArrayDestroy` (pass-through until quotas are enforced).
pub fn mipmapped_destroy(_handle: CUmipmappedArray, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuCtxCreate_v2` (pass-through until quotas are enforced).
pub fn ctx_create(_pctx: *mut CUcontext, _flags: c_uint, _dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuCtxCreate_v3` (pass-through until quotas are enforced).
pub fn ctx_create_v3(
    _pctx: *mut CUcontext,
    _params: *mut CUexecAffinityParam,
    _num_params: c_int,
    _flags: c_uint,
    _dev: CUdevice,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuCtxCreate_v4` (pass-through until quotas are enforced).
pub fn ctx_create_v4(
    _pctx: *mut CUcontext,
    _params: *mut CUctxCreateParams,
    _flags: c_uint,
    _dev: CUdevice,
    real: impl FnOnce() -> Status,
) -> Res {
    status(real())
}

/// `cuCtxDestroy_v2` (pass-through until quotas are enforced).
pub fn ctx_destroy(_ctx: CUcontext, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuDevicePrimaryCtxRetain` (pass-through until quotas are enforced).
pub fn primary_retain(_pctx: *mut CUcontext, _dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuDevicePrimaryCtxRelease_v2` (pass-through until quotas are enforced).
pub fn primary_release(_dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuDevicePrimaryCtxReset_v2` (pass-through until quotas are enforced).
pub fn primary_reset(_dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuMemGetInfo_v2` (pass-through until quotas are enforced).
pub fn get_info(_free: *mut usize, _total: *mut usize, real: impl FnOnce() -> Status) -> Res {
    status(real())
}

/// `cuDeviceTotalMem_v2` (pass-through until quotas are enforced).
pub fn total_mem(_bytes: *mut usize, _dev: CUdevice, real: impl FnOnce() -> Status) -> Res {
    status(real())
}
