//! Every function the shim intercepts, declared once: library, exported name, C signature, optionally
//! `/ per_thread_name` for the `_ptsz`/`_ptds` variant sharing the handler, and the handler (see
//! [`crate::hooks`] for the line syntax).
//!
//! The list is data only: [`intercepted!`] hands it to a macro, and each expansion site brings the names
//! the lines use into scope. [`crate::hooks`] makes the exported entry points and the lookup table from it
//! (and resolves the handler paths there); [`crate::real`] makes the pointers to the real functions. So
//! this file depends on no other module, and the modules that call a real function depend only on
//! [`crate::real`], never on the handlers.

/// Expands `$then! { ..every intercepted function.. }`.
macro_rules! intercepted {
    ($then:ident) => {
        $then! {
            Cuda fn cuInit(flags: c_uint) => init::cu_init;
            Cuda fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) => proc_address::v1;
            Cuda fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) => proc_address::v2;
            Cuda fn cuGetProcAddress_v2_ptsz(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) => proc_address::v2_ptsz;

            Cuda fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) => memory::alloc;
            Cuda fn cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, pitch: *mut usize, width: usize, height: usize, elem: c_uint) => memory::alloc_pitch;
            Cuda fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: c_uint) => memory::alloc_managed;
            Cuda fn cuMemFree_v2(dptr: CUdeviceptr) => memory::free;
            // Stream-ordered memory: a NULL stream means another stream to the `_ptsz` variants (as for launches).
            Cuda fn cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, stream: CUstream) => memory::alloc_async::<false>;
            Cuda fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, stream: CUstream) => memory::alloc_async::<true>;
            Cuda fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream) => memory::alloc_from_pool::<false>;
            Cuda fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, stream: CUstream) => memory::alloc_from_pool::<true>;
            Cuda fn cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) => memory::free_async::<false>;
            Cuda fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, stream: CUstream) => memory::free_async::<true>;
            // What a memory pool keeps of freed memory stays charged until it gives it back.
            Cuda fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) => memory::pool_trim;
            Cuda fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) => memory::pool_set_attribute;
            Cuda fn cuMemPoolDestroy(pool: CUmemoryPool) => memory::pool_destroy;
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
            // Changing the calling thread's current context: the per-thread cache of it ([`crate::current`])
            // is invalidated after the driver acts (as by the context calls above, in their handlers).
            Cuda fn cuCtxSetCurrent(ctx: CUcontext) => @around crate::current::around;
            Cuda fn cuCtxPushCurrent(ctx: CUcontext) => @around crate::current::around;
            Cuda fn cuCtxPushCurrent_v2(ctx: CUcontext) => @around crate::current::around;
            Cuda fn cuCtxPopCurrent(pctx: *mut CUcontext) => @around crate::current::around;
            Cuda fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) => @around crate::current::around;
            Cuda fn cuCtxDetach(ctx: CUcontext) => @around crate::current::around;
            Cuda fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => memory::get_info;
            Cuda fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) => memory::total_mem;

            // Soft memory: queries that must describe the program's allocation, calls that cannot work on it.
            Cuda fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) => soft::calls::address_range;
            Cuda fn cuPointerGetAttribute(data: *mut c_void, attr: c_uint, ptr: CUdeviceptr) => soft::calls::pointer_attribute;
            Cuda fn cuPointerGetAttributes(num: c_uint, attrs: *mut c_uint, data: *mut *mut c_void, ptr: CUdeviceptr) => soft::calls::pointer_attributes;
            Cuda fn cuIpcGetMemHandle(handle: *mut c_void, dptr: CUdeviceptr) => soft::calls::ipc_get_mem_handle;
            Cuda fn cuMemGetHandleForAddressRange(handle: *mut c_void, dptr: CUdeviceptr, size: usize, kind: c_uint, flags: c_ulonglong) => soft::calls::handle_for_address_range;

            // Copies and memsets: soft memory swapped out comes back first.
            Cuda fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize) / cuMemcpy_ptds => @around crate::soft::around;
            Cuda fn cuMemcpy2DAsync_v2(p_copy: *const CUDA_MEMCPY2D, h_stream: CUstream) / cuMemcpy2DAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpy2DUnaligned_v2(p_copy: *const CUDA_MEMCPY2D) / cuMemcpy2DUnaligned_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpy2D_v2(p_copy: *const CUDA_MEMCPY2D) / cuMemcpy2D_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpy3DAsync_v2(p_copy: *const CUDA_MEMCPY3D, h_stream: CUstream) / cuMemcpy3DAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpy3DBatchAsync(num_ops: usize, op_list: *mut CUDA_MEMCPY3D_BATCH_OP, fail_idx: *mut usize, flags: c_ulonglong, h_stream: CUstream) / cuMemcpy3DBatchAsync_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpy3DBatchAsync_v2(num_ops: usize, op_list: *mut CUDA_MEMCPY3D_BATCH_OP, flags: c_ulonglong, h_stream: CUstream) / cuMemcpy3DBatchAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpy3DPeer(p_copy: *const CUDA_MEMCPY3D_PEER) / cuMemcpy3DPeer_ptds => @around crate::soft::around;
            Cuda fn cuMemcpy3DPeerAsync(p_copy: *const CUDA_MEMCPY3D_PEER, h_stream: CUstream) / cuMemcpy3DPeerAsync_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpy3D_v2(p_copy: *const CUDA_MEMCPY3D) / cuMemcpy3D_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, byte_count: usize, h_stream: CUstream) / cuMemcpyAsync_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyAtoD_v2(dst_device: CUdeviceptr, src_array: CUarray, src_offset: usize, byte_count: usize) / cuMemcpyAtoD_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyBatchAsync(dsts: *mut CUdeviceptr, srcs: *mut CUdeviceptr, sizes: *mut usize, count: usize, attrs: *mut CUmemcpyAttributes, attrs_idxs: *mut usize, num_attrs: usize, fail_idx: *mut usize, h_stream: CUstream) / cuMemcpyBatchAsync_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyBatchAsync_v2(dsts: *mut CUdeviceptr, srcs: *mut CUdeviceptr, sizes: *mut usize, count: usize, attrs: *mut CUmemcpyAttributes, attrs_idxs: *mut usize, num_attrs: usize, h_stream: CUstream) / cuMemcpyBatchAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyDtoA_v2(dst_array: CUarray, dst_offset: usize, src_device: CUdeviceptr, byte_count: usize) / cuMemcpyDtoA_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyDtoDAsync_v2(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) / cuMemcpyDtoDAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyDtoD_v2(dst_device: CUdeviceptr, src_device: CUdeviceptr, byte_count: usize) / cuMemcpyDtoD_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyDtoHAsync_v2(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize, h_stream: CUstream) / cuMemcpyDtoHAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyDtoH_v2(dst_host: *mut c_void, src_device: CUdeviceptr, byte_count: usize) / cuMemcpyDtoH_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyHtoDAsync_v2(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize, h_stream: CUstream) / cuMemcpyHtoDAsync_v2_ptsz => @around crate::soft::around;
            Cuda fn cuMemcpyHtoD_v2(dst_device: CUdeviceptr, src_host: *const c_void, byte_count: usize) / cuMemcpyHtoD_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyPeer(dst_device: CUdeviceptr, dst_context: CUcontext, src_device: CUdeviceptr, src_context: CUcontext, byte_count: usize) / cuMemcpyPeer_ptds => @around crate::soft::around;
            Cuda fn cuMemcpyPeerAsync(dst_device: CUdeviceptr, dst_context: CUcontext, src_device: CUdeviceptr, src_context: CUcontext, byte_count: usize, h_stream: CUstream) / cuMemcpyPeerAsync_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD16Async(dst_device: CUdeviceptr, us: c_ushort, n: usize, h_stream: CUstream) / cuMemsetD16Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD16_v2(dst_device: CUdeviceptr, us: c_ushort, n: usize) / cuMemsetD16_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemsetD2D16Async(dst_device: CUdeviceptr, dst_pitch: usize, us: c_ushort, width: usize, height: usize, h_stream: CUstream) / cuMemsetD2D16Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD2D16_v2(dst_device: CUdeviceptr, dst_pitch: usize, us: c_ushort, width: usize, height: usize) / cuMemsetD2D16_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemsetD2D32Async(dst_device: CUdeviceptr, dst_pitch: usize, ui: c_uint, width: usize, height: usize, h_stream: CUstream) / cuMemsetD2D32Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD2D32_v2(dst_device: CUdeviceptr, dst_pitch: usize, ui: c_uint, width: usize, height: usize) / cuMemsetD2D32_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemsetD2D8Async(dst_device: CUdeviceptr, dst_pitch: usize, uc: c_uchar, width: usize, height: usize, h_stream: CUstream) / cuMemsetD2D8Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD2D8_v2(dst_device: CUdeviceptr, dst_pitch: usize, uc: c_uchar, width: usize, height: usize) / cuMemsetD2D8_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemsetD32Async(dst_device: CUdeviceptr, ui: c_uint, n: usize, h_stream: CUstream) / cuMemsetD32Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD32_v2(dst_device: CUdeviceptr, ui: c_uint, n: usize) / cuMemsetD32_v2_ptds => @around crate::soft::around;
            Cuda fn cuMemsetD8Async(dst_device: CUdeviceptr, uc: c_uchar, n: usize, h_stream: CUstream) / cuMemsetD8Async_ptsz => @around crate::soft::around;
            Cuda fn cuMemsetD8_v2(dst_device: CUdeviceptr, uc: c_uchar, n: usize) / cuMemsetD8_v2_ptds => @around crate::soft::around;

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

            // Stream capture: launches recorded into a graph are not gated, and the shim counts captures in
            // progress so that a launch asks the driver about its stream only while one is.
            Cuda fn cuStreamBeginCapture(stream: CUstream) / cuStreamBeginCapture_ptsz => crate::launch::capture::begin;
            Cuda fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_int) / cuStreamBeginCapture_v2_ptsz => crate::launch::capture::begin_v2;
            Cuda fn cuStreamBeginCaptureToGraph(stream: CUstream, graph: CUgraph, deps: *const CUgraphNode, data: *const CUgraphEdgeData, count: usize, mode: c_int) / cuStreamBeginCaptureToGraph_ptsz => crate::launch::capture::begin_to_graph;
            Cuda fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) / cuStreamEndCapture_ptsz => crate::launch::capture::end;

            // Tensor-core policy: tensor-op math modes become pedantic on a vGPU with tensor cores off.
            Cublas fn cublasSetMathMode(handle: *mut c_void, mode: u32) => tensor::set_math_mode;
        }
    };
}

pub(crate) use intercepted;
