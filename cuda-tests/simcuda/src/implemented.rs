// The driver symbols the simulated driver implements, by the module that implements each: the one
// declaration of what it exports. `build.rs` reads it (as Rust, through its own `implemented!` macro) and
// generates the table `cuGetProcAddress` answers from, naming each function by its path here, plus a
// `CUDA_ERROR_NOT_SUPPORTED` stub for every other symbol of the real driver. So the compiler checks this
// list: a name here that its module does not define fails to resolve, and a function a module exports
// but this list lacks collides with its stub. Keep each module's names in its own order.

implemented! {
    array: cuArrayCreate_v2, cuArray3DCreate_v2, cuArrayDestroy, cuMipmappedArrayCreate, cuMipmappedArrayDestroy;
    capture_mode: cuThreadExchangeStreamCaptureMode;
    checkpoint: cuCheckpointProcessLock, cuCheckpointProcessCheckpoint, cuCheckpointProcessRestore,
        cuCheckpointProcessUnlock, cuCheckpointProcessGetState, cuCheckpointProcessGetRestoreThreadId;
    context: cuCtxCreate, cuCtxCreate_v2, cuCtxCreate_v3, cuCtxCreate_v4, cuCtxDestroy, cuCtxDestroy_v2,
        cuCtxSetCurrent, cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPushCurrent_v2, cuCtxPopCurrent, cuCtxPopCurrent_v2,
        cuCtxGetDevice, cuCtxGetDevice_v2, cuCtxSynchronize, cuCtxSynchronize_v2, cuCtxGetFlags, cuCtxSetFlags,
        cuCtxGetApiVersion, cuCtxGetId, cuCtxGetLimit, cuCtxSetLimit, cuCtxGetStreamPriorityRange,
        cuCtxGetCacheConfig, cuCtxSetCacheConfig, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease,
        cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxGetState,
        cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2;
    copy: cuMemcpy, cuMemcpy_ptds, cuMemcpyAsync, cuMemcpyAsync_ptsz, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds,
        cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, cuMemcpyDtoHAsync_v2,
        cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, cuMemcpyDtoDAsync_v2,
        cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyPeer, cuMemcpyPeer_ptds, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz,
        cuMemsetD8_v2, cuMemsetD8_v2_ptds, cuMemsetD16_v2, cuMemsetD16_v2_ptds, cuMemsetD32_v2, cuMemsetD32_v2_ptds,
        cuMemsetD8Async, cuMemsetD8Async_ptsz, cuMemsetD16Async, cuMemsetD16Async_ptsz, cuMemsetD32Async,
        cuMemsetD32Async_ptsz;
    device: cuDeviceGet, cuDeviceGetCount, cuDeviceGetName, cuDeviceGetUuid, cuDeviceGetUuid_v2, cuDeviceTotalMem_v2,
        cuDeviceComputeCapability, cuDeviceGetAttribute, cuDeviceGetPCIBusId, cuDeviceGetByPCIBusId,
        cuDeviceCanAccessPeer;
    event: cuEventCreate, cuEventDestroy, cuEventDestroy_v2, cuEventSynchronize, cuEventQuery, cuEventElapsedTime,
        cuEventElapsedTime_v2, cuEventRecord, cuEventRecord_ptsz, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz;
    graph: cuGraphCreate, cuGraphDestroy, cuGraphInstantiateWithFlags, cuGraphInstantiate_v2, cuGraphExecDestroy,
        cuGraphUpload, cuGraphInstantiate, cuStreamBeginCapture, cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2,
        cuStreamBeginCapture_v2_ptsz, cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz,
        cuStreamEndCapture, cuStreamEndCapture_ptsz, cuStreamIsCapturing, cuStreamIsCapturing_ptsz,
        cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz, cuGraphLaunch, cuGraphLaunch_ptsz, cuGraphGetNodes;
    init: cuInit, cuDriverGetVersion, cuGetErrorString, cuGetErrorName, cuGetProcAddress,
        cuGetProcAddress_v2, cuGetProcAddress_v2_ptsz;
    launch: cuLaunchKernel, cuLaunchKernel_ptsz, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz,
        cuLaunchKernelEx, cuLaunchKernelEx_ptsz;
    export_table: cuGetExportTable;
    ipc: cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, cuIpcCloseMemHandle, cuIpcGetEventHandle,
        cuIpcOpenEventHandle;
    link: cuLinkCreate_v2, cuLinkCreate, cuLinkAddData_v2, cuLinkAddData, cuLinkAddFile_v2, cuLinkAddFile,
        cuLinkComplete, cuLinkDestroy;
    memory: cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocPitch_v2, cuMemFree_v2, cuMemAllocHost_v2, cuMemHostAlloc,
        cuMemFreeHost, cuMemHostRegister, cuMemHostRegister_v2, cuMemHostUnregister, cuMemHostGetDevicePointer,
        cuMemHostGetDevicePointer_v2, cuMemHostGetFlags, cuMemGetInfo_v2, cuMemGetAddressRange_v2,
        cuPointerGetAttribute, cuPointerGetAttributes, cuMemPrefetchAsync, cuMemAdvise;
    module: cuModuleLoadData, cuModuleLoadDataEx, cuModuleLoadFatBinary, cuModuleGetLoadingMode, cuModuleLoad, cuModuleUnload, cuModuleGetFunction,
        cuModuleGetGlobal_v2, cuModuleGetFunctionCount, cuLibraryLoadData, cuLibraryLoadFromFile, cuLibraryUnload,
        cuLibraryGetKernel, cuLibraryGetModule, cuLibraryGetGlobal, cuLibraryGetKernelCount,
        cuLibraryEnumerateKernels, cuKernelGetFunction, cuFuncGetName, cuKernelGetName, cuFuncGetModule,
        cuFuncGetParamInfo, cuKernelGetParamInfo,
        cuFuncGetAttribute, cuFuncSetAttribute, cuKernelGetAttribute, cuKernelSetAttribute, cuFuncSetCacheConfig;
    occupancy: cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
        cuOccupancyAvailableDynamicSMemPerBlock, cuOccupancyMaxPotentialBlockSize,
        cuOccupancyMaxPotentialBlockSizeWithFlags, cuOccupancyMaxActiveClusters;
    pool: cuDeviceGetDefaultMemPool, cuDeviceGetMemPool, cuDeviceSetMemPool, cuMemPoolCreate, cuMemPoolDestroy,
        cuMemPoolTrimTo, cuMemPoolSetAttribute, cuMemPoolGetAttribute, cuMemAllocAsync, cuMemAllocAsync_ptsz,
        cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, cuMemFreeAsync, cuMemFreeAsync_ptsz;
    stream: cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy, cuStreamDestroy_v2, cuStreamSynchronize,
        cuStreamSynchronize_ptsz, cuStreamQuery, cuStreamQuery_ptsz, cuStreamWaitEvent, cuStreamWaitEvent_ptsz,
        cuStreamGetFlags, cuStreamGetFlags_ptsz, cuStreamGetPriority, cuStreamGetPriority_ptsz, cuStreamGetCtx,
        cuStreamGetCtx_ptsz, cuStreamGetDevice, cuStreamGetDevice_ptsz, cuStreamGetId, cuStreamGetId_ptsz,
        cuLaunchHostFunc, cuLaunchHostFunc_ptsz, cuStreamAddCallback, cuStreamAddCallback_ptsz;
    vmm: cuMemGetAllocationGranularity, cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap,
        cuMemUnmap, cuMemSetAccess, cuMemGetAccess, cuMemRetainAllocationHandle,
        cuMemGetAllocationPropertiesFromHandle;
}
