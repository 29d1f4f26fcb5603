//! Every function the shim intercepts, declared once (see [`crate::hooks`]).

use crate::hooks::hooks;
use crate::{init, memory, nvml, proc_address, tensor};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use tessera_ffi::nvml::{NvmlDevice, NvmlMemory, NvmlMemoryV2};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr,
    CUexecAffinityParam, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemoryPool, CUmipmappedArray, CUstream,
};
use tessera_ffi::sys::{CUfunction, CUgraphExec, CUlaunchConfig};

hooks! {
    Cuda fn cuInit(flags: c_uint) => init::cu_init;
    Cuda fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) => proc_address::v1;
    Cuda fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) => proc_address::v2;
    Cuda fn cuGetProcAddress_v2_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) => proc_address::v2_ptsz;

    Cuda fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) => memory::alloc;
    Cuda fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint) => memory::alloc_pitch;
    Cuda fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: c_uint) => memory::alloc_managed;
    Cuda fn cuMemFree_v2(dptr: CUdeviceptr) => memory::free;
    Cuda fn cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, stream: CUstream) / cuMemAllocAsync_ptsz => memory::alloc_async;
    Cuda fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream) / cuMemAllocFromPoolAsync_ptsz => memory::alloc_from_pool;
    Cuda fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) / cuMemFreeAsync_ptsz => memory::free_async;
    Cuda fn cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: c_ulonglong) => memory::create;
    Cuda fn cuMemRelease(handle: CUmemGenericAllocationHandle) => memory::release;
    Cuda fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: c_ulonglong) => memory::map;
    Cuda fn cuMemUnmap(ptr: CUdeviceptr, size: usize) => memory::unmap;
    Cuda fn cuMemRetainAllocationHandle(handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void) => memory::retain_handle;
    Cuda fn cuArrayCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) => memory::array_create;
    Cuda fn cuArray3DCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) => memory::array3d_create;
    Cuda fn cuArrayDestroy(handle: CUarray) => memory::array_destroy;
    Cuda fn cuMipmappedArrayCreate(handle: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) => memory::mipmapped_create;
    Cuda fn cuMipmappedArrayDestroy(handle: CUmipmappedArray) => memory::mipmapped_destroy;
    Cuda fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => memory::ctx_create;
    Cuda fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) => memory::ctx_create;
    Cuda fn cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut CUexecAffinityParam, num_params: c_int, flags: c_uint, dev: CUdevice) => memory::ctx_create_v3;
    Cuda fn cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut CUctxCreateParams, flags: c_uint, dev: CUdevice) => memory::ctx_create_v4;
    Cuda fn cuCtxDestroy(ctx: CUcontext) => memory::ctx_destroy;
    Cuda fn cuCtxDestroy_v2(ctx: CUcontext) => memory::ctx_destroy;
    Cuda fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) => memory::primary_retain;
    Cuda fn cuDevicePrimaryCtxRelease(dev: CUdevice) => memory::primary_release;
    Cuda fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) => memory::primary_release;
    Cuda fn cuDevicePrimaryCtxReset(dev: CUdevice) => memory::primary_reset;
    Cuda fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) => memory::primary_reset;
    Cuda fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => memory::get_info;
    Cuda fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) => memory::total_mem;

    Nvml fn nvmlDeviceGetMemoryInfo(device: NvmlDevice, memory: *mut NvmlMemory) => nvml::memory_info;
    Nvml fn nvmlDeviceGetMemoryInfo_v2(device: NvmlDevice, memory: *mut NvmlMemoryV2) => nvml::memory_info_v2;

    // Launch gating: a NULL stream means another stream to the `_ptsz` variants, so each has its own line.
    Cuda fn cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) => crate::launch::kernel::<false>;
    Cuda fn cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) => crate::launch::kernel::<true>;
    Cuda fn cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) => crate::launch::kernel_ex::<false>;
    Cuda fn cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) => crate::launch::kernel_ex::<true>;
    Cuda fn cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void) => crate::launch::cooperative::<false>;
    Cuda fn cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: CUstream, params: *mut *mut c_void) => crate::launch::cooperative::<true>;
    Cuda fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) => crate::launch::graph::<false>;
    Cuda fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) => crate::launch::graph::<true>;

    // Tensor-core policy: tensor-op math modes become pedantic on a vGPU with tensor cores off.
    Cublas fn cublasSetMathMode(handle: *mut c_void, mode: u32) => tensor::set_math_mode;
}
