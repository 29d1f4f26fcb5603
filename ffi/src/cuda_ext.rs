//! Driver entry points cudarc does not declare, as C function-pointer types named after the exported
//! symbol (`cuLaunchKernel_ptsz` is the type of the function `cuLaunchKernel_ptsz`), and the checkpoint
//! API's types. Declarations only: what the shim, the simulated driver and the tests use to call or
//! implement these symbols.
//!
//! - The `_ptsz`/`_ptds` entry points: the per-thread-default-stream variants of the stream-ordered calls,
//!   which `cuda.h` substitutes under `CUDA_API_PER_THREAD_DEFAULT_STREAM` and `cuGetProcAddress` hands out
//!   for per-thread requests. Each has exactly its legacy counterpart's signature (taken from cudarc's
//!   declaration of that counterpart; the OpenGL ones from `cudaGL.h`, with `GLuint` as `c_uint`).
//! - The checkpoint API of r570+ drivers (CUDA 12.8): `cuCheckpointProcess*`, which cudarc's 12.8 bindings
//!   have the argument structures of but no functions for.
//!
//! Every function returns `CUresult` as the plain integer [`CuResult`].
#![allow(non_camel_case_types, non_snake_case)] // the names of cuda.h

use crate::cuda::CuResult;
use cudarc::driver::sys::{
    CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS, CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS, CUDA_GRAPH_INSTANTIATE_PARAMS,
    CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_BATCH_OP, CUDA_MEMCPY3D_PEER, CUarray, CUarrayMapInfo, CUcontext,
    CUdevice, CUdeviceptr, CUevent, CUexternalSemaphore, CUfunction, CUgraph, CUgraphEdgeData, CUgraphExec,
    CUgraphNode, CUgraphicsResource, CUgreenCtx, CUhostFn, CUlaunchConfig, CUmemDecompressParams, CUmemLocation,
    CUmemcpyAttributes, CUmemoryPool, CUstream, CUstreamAttrID, CUstreamAttrValue, CUstreamBatchMemOpParams,
    CUstreamCallback, CUstreamCaptureMode, CUstreamCaptureStatus, cuuint32_t, cuuint64_t,
};
use std::ffi::{c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};

pub use cudarc::driver::sys::{
    CUcheckpointCheckpointArgs, CUcheckpointLockArgs, CUcheckpointRestoreArgs, CUcheckpointUnlockArgs,
};

/// Declares per-thread entry points, `name / legacy_name(parameters);`: a type named after each, and
/// [`PER_THREAD_ENTRY_POINTS`].
macro_rules! per_thread {
    ($($name:ident / $legacy:ident($($arg:ident: $ty:ty),* $(,)?);)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: `", stringify!($legacy), "` on the calling thread's default stream.")]
            pub type $name = unsafe extern "C" fn($($arg: $ty),*) -> CuResult;
        )*

        /// Every per-thread entry point the real driver exports, with its legacy counterpart:
        /// `(per-thread name, legacy name)`, sorted by per-thread name.
        pub const PER_THREAD_ENTRY_POINTS: &[(&str, &str)] = &[$((stringify!($name), stringify!($legacy))),*];
    };
}

per_thread! {
    cuEventRecordWithFlags_ptsz / cuEventRecordWithFlags(hEvent: CUevent, hStream: CUstream, flags: c_uint);
    cuEventRecord_ptsz / cuEventRecord(hEvent: CUevent, hStream: CUstream);
    cuGLMapBufferObjectAsync_v2_ptsz / cuGLMapBufferObjectAsync_v2(
        dptr: *mut CUdeviceptr,
        size: *mut usize,
        buffer: c_uint,
        hStream: CUstream,
    );
    cuGLMapBufferObject_v2_ptds / cuGLMapBufferObject_v2(dptr: *mut CUdeviceptr, size: *mut usize, buffer: c_uint);
    cuGraphInstantiateWithParams_ptsz / cuGraphInstantiateWithParams(
        phGraphExec: *mut CUgraphExec,
        hGraph: CUgraph,
        instantiateParams: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
    );
    cuGraphLaunch_ptsz / cuGraphLaunch(hGraphExec: CUgraphExec, hStream: CUstream);
    cuGraphUpload_ptsz / cuGraphUpload(hGraphExec: CUgraphExec, hStream: CUstream);
    cuGraphicsMapResources_ptsz / cuGraphicsMapResources(
        count: c_uint,
        resources: *mut CUgraphicsResource,
        hStream: CUstream,
    );
    cuGraphicsUnmapResources_ptsz / cuGraphicsUnmapResources(
        count: c_uint,
        resources: *mut CUgraphicsResource,
        hStream: CUstream,
    );
    cuLaunchCooperativeKernel_ptsz / cuLaunchCooperativeKernel(
        f: CUfunction,
        gridDimX: c_uint,
        gridDimY: c_uint,
        gridDimZ: c_uint,
        blockDimX: c_uint,
        blockDimY: c_uint,
        blockDimZ: c_uint,
        sharedMemBytes: c_uint,
        hStream: CUstream,
        kernelParams: *mut *mut c_void,
    );
    cuLaunchHostFunc_ptsz / cuLaunchHostFunc(hStream: CUstream, fn_: CUhostFn, userData: *mut c_void);
    cuLaunchKernelEx_ptsz / cuLaunchKernelEx(
        config: *const CUlaunchConfig,
        f: CUfunction,
        kernelParams: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuLaunchKernel_ptsz / cuLaunchKernel(
        f: CUfunction,
        gridDimX: c_uint,
        gridDimY: c_uint,
        gridDimZ: c_uint,
        blockDimX: c_uint,
        blockDimY: c_uint,
        blockDimZ: c_uint,
        sharedMemBytes: c_uint,
        hStream: CUstream,
        kernelParams: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuMemAllocAsync_ptsz / cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, hStream: CUstream);
    cuMemAllocFromPoolAsync_ptsz / cuMemAllocFromPoolAsync(
        dptr: *mut CUdeviceptr,
        bytesize: usize,
        pool: CUmemoryPool,
        hStream: CUstream,
    );
    cuMemBatchDecompressAsync_ptsz / cuMemBatchDecompressAsync(
        paramsArray: *mut CUmemDecompressParams,
        count: usize,
        flags: c_uint,
        errorIndex: *mut usize,
        stream: CUstream,
    );
    cuMemDiscardAndPrefetchBatchAsync_ptsz / cuMemDiscardAndPrefetchBatchAsync(
        dptrs: *mut CUdeviceptr,
        sizes: *mut usize,
        count: usize,
        prefetchLocs: *mut CUmemLocation,
        prefetchLocIdxs: *mut usize,
        numPrefetchLocs: usize,
        flags: c_ulonglong,
        hStream: CUstream,
    );
    cuMemDiscardBatchAsync_ptsz / cuMemDiscardBatchAsync(
        dptrs: *mut CUdeviceptr,
        sizes: *mut usize,
        count: usize,
        flags: c_ulonglong,
        hStream: CUstream,
    );
    cuMemFreeAsync_ptsz / cuMemFreeAsync(dptr: CUdeviceptr, hStream: CUstream);
    cuMemMapArrayAsync_ptsz / cuMemMapArrayAsync(mapInfoList: *mut CUarrayMapInfo, count: c_uint, hStream: CUstream);
    cuMemPrefetchAsync_ptsz / cuMemPrefetchAsync(
        devPtr: CUdeviceptr,
        count: usize,
        dstDevice: CUdevice,
        hStream: CUstream,
    );
    cuMemPrefetchAsync_v2_ptsz / cuMemPrefetchAsync_v2(
        devPtr: CUdeviceptr,
        count: usize,
        location: CUmemLocation,
        flags: c_uint,
        hStream: CUstream,
    );
    cuMemPrefetchBatchAsync_ptsz / cuMemPrefetchBatchAsync(
        dptrs: *mut CUdeviceptr,
        sizes: *mut usize,
        count: usize,
        prefetchLocs: *mut CUmemLocation,
        prefetchLocIdxs: *mut usize,
        numPrefetchLocs: usize,
        flags: c_ulonglong,
        hStream: CUstream,
    );
    cuMemcpy2DAsync_v2_ptsz / cuMemcpy2DAsync_v2(pCopy: *const CUDA_MEMCPY2D, hStream: CUstream);
    cuMemcpy2DUnaligned_v2_ptds / cuMemcpy2DUnaligned_v2(pCopy: *const CUDA_MEMCPY2D);
    cuMemcpy2D_v2_ptds / cuMemcpy2D_v2(pCopy: *const CUDA_MEMCPY2D);
    cuMemcpy3DAsync_v2_ptsz / cuMemcpy3DAsync_v2(pCopy: *const CUDA_MEMCPY3D, hStream: CUstream);
    cuMemcpy3DBatchAsync_ptsz / cuMemcpy3DBatchAsync(
        numOps: usize,
        opList: *mut CUDA_MEMCPY3D_BATCH_OP,
        failIdx: *mut usize,
        flags: c_ulonglong,
        hStream: CUstream,
    );
    cuMemcpy3DBatchAsync_v2_ptsz / cuMemcpy3DBatchAsync_v2(
        numOps: usize,
        opList: *mut CUDA_MEMCPY3D_BATCH_OP,
        flags: c_ulonglong,
        hStream: CUstream,
    );
    cuMemcpy3DPeerAsync_ptsz / cuMemcpy3DPeerAsync(pCopy: *const CUDA_MEMCPY3D_PEER, hStream: CUstream);
    cuMemcpy3DPeer_ptds / cuMemcpy3DPeer(pCopy: *const CUDA_MEMCPY3D_PEER);
    cuMemcpy3D_v2_ptds / cuMemcpy3D_v2(pCopy: *const CUDA_MEMCPY3D);
    cuMemcpyAsync_ptsz / cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, ByteCount: usize, hStream: CUstream);
    cuMemcpyAtoA_v2_ptds / cuMemcpyAtoA_v2(
        dstArray: CUarray,
        dstOffset: usize,
        srcArray: CUarray,
        srcOffset: usize,
        ByteCount: usize,
    );
    cuMemcpyAtoD_v2_ptds / cuMemcpyAtoD_v2(
        dstDevice: CUdeviceptr,
        srcArray: CUarray,
        srcOffset: usize,
        ByteCount: usize,
    );
    cuMemcpyAtoHAsync_v2_ptsz / cuMemcpyAtoHAsync_v2(
        dstHost: *mut c_void,
        srcArray: CUarray,
        srcOffset: usize,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyAtoH_v2_ptds / cuMemcpyAtoH_v2(
        dstHost: *mut c_void,
        srcArray: CUarray,
        srcOffset: usize,
        ByteCount: usize,
    );
    cuMemcpyBatchAsync_ptsz / cuMemcpyBatchAsync(
        dsts: *mut CUdeviceptr,
        srcs: *mut CUdeviceptr,
        sizes: *mut usize,
        count: usize,
        attrs: *mut CUmemcpyAttributes,
        attrsIdxs: *mut usize,
        numAttrs: usize,
        failIdx: *mut usize,
        hStream: CUstream,
    );
    cuMemcpyBatchAsync_v2_ptsz / cuMemcpyBatchAsync_v2(
        dsts: *mut CUdeviceptr,
        srcs: *mut CUdeviceptr,
        sizes: *mut usize,
        count: usize,
        attrs: *mut CUmemcpyAttributes,
        attrsIdxs: *mut usize,
        numAttrs: usize,
        hStream: CUstream,
    );
    cuMemcpyDtoA_v2_ptds / cuMemcpyDtoA_v2(
        dstArray: CUarray,
        dstOffset: usize,
        srcDevice: CUdeviceptr,
        ByteCount: usize,
    );
    cuMemcpyDtoDAsync_v2_ptsz / cuMemcpyDtoDAsync_v2(
        dstDevice: CUdeviceptr,
        srcDevice: CUdeviceptr,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyDtoD_v2_ptds / cuMemcpyDtoD_v2(dstDevice: CUdeviceptr, srcDevice: CUdeviceptr, ByteCount: usize);
    cuMemcpyDtoHAsync_v2_ptsz / cuMemcpyDtoHAsync_v2(
        dstHost: *mut c_void,
        srcDevice: CUdeviceptr,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyDtoH_v2_ptds / cuMemcpyDtoH_v2(dstHost: *mut c_void, srcDevice: CUdeviceptr, ByteCount: usize);
    cuMemcpyHtoAAsync_v2_ptsz / cuMemcpyHtoAAsync_v2(
        dstArray: CUarray,
        dstOffset: usize,
        srcHost: *const c_void,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyHtoA_v2_ptds / cuMemcpyHtoA_v2(
        dstArray: CUarray,
        dstOffset: usize,
        srcHost: *const c_void,
        ByteCount: usize,
    );
    cuMemcpyHtoDAsync_v2_ptsz / cuMemcpyHtoDAsync_v2(
        dstDevice: CUdeviceptr,
        srcHost: *const c_void,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyHtoD_v2_ptds / cuMemcpyHtoD_v2(dstDevice: CUdeviceptr, srcHost: *const c_void, ByteCount: usize);
    cuMemcpyPeerAsync_ptsz / cuMemcpyPeerAsync(
        dstDevice: CUdeviceptr,
        dstContext: CUcontext,
        srcDevice: CUdeviceptr,
        srcContext: CUcontext,
        ByteCount: usize,
        hStream: CUstream,
    );
    cuMemcpyPeer_ptds / cuMemcpyPeer(
        dstDevice: CUdeviceptr,
        dstContext: CUcontext,
        srcDevice: CUdeviceptr,
        srcContext: CUcontext,
        ByteCount: usize,
    );
    cuMemcpy_ptds / cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, ByteCount: usize);
    cuMemsetD16Async_ptsz / cuMemsetD16Async(dstDevice: CUdeviceptr, us: c_ushort, N: usize, hStream: CUstream);
    cuMemsetD16_v2_ptds / cuMemsetD16_v2(dstDevice: CUdeviceptr, us: c_ushort, N: usize);
    cuMemsetD2D16Async_ptsz / cuMemsetD2D16Async(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        us: c_ushort,
        Width: usize,
        Height: usize,
        hStream: CUstream,
    );
    cuMemsetD2D16_v2_ptds / cuMemsetD2D16_v2(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        us: c_ushort,
        Width: usize,
        Height: usize,
    );
    cuMemsetD2D32Async_ptsz / cuMemsetD2D32Async(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        ui: c_uint,
        Width: usize,
        Height: usize,
        hStream: CUstream,
    );
    cuMemsetD2D32_v2_ptds / cuMemsetD2D32_v2(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        ui: c_uint,
        Width: usize,
        Height: usize,
    );
    cuMemsetD2D8Async_ptsz / cuMemsetD2D8Async(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        uc: c_uchar,
        Width: usize,
        Height: usize,
        hStream: CUstream,
    );
    cuMemsetD2D8_v2_ptds / cuMemsetD2D8_v2(
        dstDevice: CUdeviceptr,
        dstPitch: usize,
        uc: c_uchar,
        Width: usize,
        Height: usize,
    );
    cuMemsetD32Async_ptsz / cuMemsetD32Async(dstDevice: CUdeviceptr, ui: c_uint, N: usize, hStream: CUstream);
    cuMemsetD32_v2_ptds / cuMemsetD32_v2(dstDevice: CUdeviceptr, ui: c_uint, N: usize);
    cuMemsetD8Async_ptsz / cuMemsetD8Async(dstDevice: CUdeviceptr, uc: c_uchar, N: usize, hStream: CUstream);
    cuMemsetD8_v2_ptds / cuMemsetD8_v2(dstDevice: CUdeviceptr, uc: c_uchar, N: usize);
    cuSignalExternalSemaphoresAsync_ptsz / cuSignalExternalSemaphoresAsync(
        extSemArray: *const CUexternalSemaphore,
        paramsArray: *const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS,
        numExtSems: c_uint,
        stream: CUstream,
    );
    cuStreamAddCallback_ptsz / cuStreamAddCallback(
        hStream: CUstream,
        callback: CUstreamCallback,
        userData: *mut c_void,
        flags: c_uint,
    );
    cuStreamAttachMemAsync_ptsz / cuStreamAttachMemAsync(
        hStream: CUstream,
        dptr: CUdeviceptr,
        length: usize,
        flags: c_uint,
    );
    cuStreamBatchMemOp_ptsz / cuStreamBatchMemOp(
        stream: CUstream,
        count: c_uint,
        paramArray: *mut CUstreamBatchMemOpParams,
        flags: c_uint,
    );
    cuStreamBatchMemOp_v2_ptsz / cuStreamBatchMemOp_v2(
        stream: CUstream,
        count: c_uint,
        paramArray: *mut CUstreamBatchMemOpParams,
        flags: c_uint,
    );
    cuStreamBeginCaptureToGraph_ptsz / cuStreamBeginCaptureToGraph(
        hStream: CUstream,
        hGraph: CUgraph,
        dependencies: *const CUgraphNode,
        dependencyData: *const CUgraphEdgeData,
        numDependencies: usize,
        mode: CUstreamCaptureMode,
    );
    cuStreamBeginCapture_ptsz / cuStreamBeginCapture(hStream: CUstream);
    cuStreamBeginCapture_v2_ptsz / cuStreamBeginCapture_v2(hStream: CUstream, mode: CUstreamCaptureMode);
    cuStreamCopyAttributes_ptsz / cuStreamCopyAttributes(dst: CUstream, src: CUstream);
    cuStreamEndCapture_ptsz / cuStreamEndCapture(hStream: CUstream, phGraph: *mut CUgraph);
    cuStreamGetAttribute_ptsz / cuStreamGetAttribute(
        hStream: CUstream,
        attr: CUstreamAttrID,
        value_out: *mut CUstreamAttrValue,
    );
    cuStreamGetCaptureInfo_ptsz / cuStreamGetCaptureInfo(
        hStream: CUstream,
        captureStatus_out: *mut CUstreamCaptureStatus,
        id_out: *mut cuuint64_t,
    );
    cuStreamGetCaptureInfo_v2_ptsz / cuStreamGetCaptureInfo_v2(
        hStream: CUstream,
        captureStatus_out: *mut CUstreamCaptureStatus,
        id_out: *mut cuuint64_t,
        graph_out: *mut CUgraph,
        dependencies_out: *mut *const CUgraphNode,
        numDependencies_out: *mut usize,
    );
    cuStreamGetCaptureInfo_v3_ptsz / cuStreamGetCaptureInfo_v3(
        hStream: CUstream,
        captureStatus_out: *mut CUstreamCaptureStatus,
        id_out: *mut cuuint64_t,
        graph_out: *mut CUgraph,
        dependencies_out: *mut *const CUgraphNode,
        edgeData_out: *mut *const CUgraphEdgeData,
        numDependencies_out: *mut usize,
    );
    cuStreamGetCtx_ptsz / cuStreamGetCtx(hStream: CUstream, pctx: *mut CUcontext);
    cuStreamGetCtx_v2_ptsz / cuStreamGetCtx_v2(hStream: CUstream, pCtx: *mut CUcontext, pGreenCtx: *mut CUgreenCtx);
    cuStreamGetDevice_ptsz / cuStreamGetDevice(hStream: CUstream, device: *mut CUdevice);
    cuStreamGetFlags_ptsz / cuStreamGetFlags(hStream: CUstream, flags: *mut c_uint);
    cuStreamGetId_ptsz / cuStreamGetId(hStream: CUstream, streamId: *mut c_ulonglong);
    cuStreamGetPriority_ptsz / cuStreamGetPriority(hStream: CUstream, priority: *mut c_int);
    cuStreamIsCapturing_ptsz / cuStreamIsCapturing(hStream: CUstream, captureStatus: *mut CUstreamCaptureStatus);
    cuStreamQuery_ptsz / cuStreamQuery(hStream: CUstream);
    cuStreamSetAttribute_ptsz / cuStreamSetAttribute(
        hStream: CUstream,
        attr: CUstreamAttrID,
        value: *const CUstreamAttrValue,
    );
    cuStreamSynchronize_ptsz / cuStreamSynchronize(hStream: CUstream);
    cuStreamUpdateCaptureDependencies_ptsz / cuStreamUpdateCaptureDependencies(
        hStream: CUstream,
        dependencies: *mut CUgraphNode,
        numDependencies: usize,
        flags: c_uint,
    );
    cuStreamUpdateCaptureDependencies_v2_ptsz / cuStreamUpdateCaptureDependencies_v2(
        hStream: CUstream,
        dependencies: *mut CUgraphNode,
        dependencyData: *const CUgraphEdgeData,
        numDependencies: usize,
        flags: c_uint,
    );
    cuStreamWaitEvent_ptsz / cuStreamWaitEvent(hStream: CUstream, hEvent: CUevent, Flags: c_uint);
    cuStreamWaitValue32_ptsz / cuStreamWaitValue32(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint32_t,
        flags: c_uint,
    );
    cuStreamWaitValue32_v2_ptsz / cuStreamWaitValue32_v2(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint32_t,
        flags: c_uint,
    );
    cuStreamWaitValue64_ptsz / cuStreamWaitValue64(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint64_t,
        flags: c_uint,
    );
    cuStreamWaitValue64_v2_ptsz / cuStreamWaitValue64_v2(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint64_t,
        flags: c_uint,
    );
    cuStreamWriteValue32_ptsz / cuStreamWriteValue32(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint32_t,
        flags: c_uint,
    );
    cuStreamWriteValue32_v2_ptsz / cuStreamWriteValue32_v2(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint32_t,
        flags: c_uint,
    );
    cuStreamWriteValue64_ptsz / cuStreamWriteValue64(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint64_t,
        flags: c_uint,
    );
    cuStreamWriteValue64_v2_ptsz / cuStreamWriteValue64_v2(
        stream: CUstream,
        addr: CUdeviceptr,
        value: cuuint64_t,
        flags: c_uint,
    );
    cuWaitExternalSemaphoresAsync_ptsz / cuWaitExternalSemaphoresAsync(
        extSemArray: *const CUexternalSemaphore,
        paramsArray: *const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS,
        numExtSems: c_uint,
        stream: CUstream,
    );
}

/// `CUprocessState` as the C ABI carries it (a 32-bit enum; a newer driver has more states, see
/// [`crate::cuda`] on why enums do not cross the boundary as Rust enums).
pub type CuProcessState = u32;
/// `CU_PROCESS_STATE_RUNNING`: the default state.
pub const CU_PROCESS_STATE_RUNNING: CuProcessState = 0;
/// `CU_PROCESS_STATE_LOCKED`: CUDA API locks are taken; further CUDA calls block.
pub const CU_PROCESS_STATE_LOCKED: CuProcessState = 1;
/// `CU_PROCESS_STATE_CHECKPOINTED`: device memory is saved to host memory and device resources released.
pub const CU_PROCESS_STATE_CHECKPOINTED: CuProcessState = 2;
/// `CU_PROCESS_STATE_FAILED`: an uncorrectable error occurred during checkpoint or restore.
pub const CU_PROCESS_STATE_FAILED: CuProcessState = 3;

/// `cuCheckpointProcessLock(pid, args)`: locks a RUNNING process (its CUDA calls block); `args` optional
/// (`timeoutMs`, 0 for none).
pub type cuCheckpointProcessLock = unsafe extern "C" fn(pid: c_int, args: *mut CUcheckpointLockArgs) -> CuResult;
/// `cuCheckpointProcessCheckpoint(pid, args)`: moves a LOCKED process's device memory to the host and
/// releases its device resources (state CHECKPOINTED); `args` optional.
pub type cuCheckpointProcessCheckpoint =
    unsafe extern "C" fn(pid: c_int, args: *mut CUcheckpointCheckpointArgs) -> CuResult;
/// `cuCheckpointProcessRestore(pid, args)`: restores a CHECKPOINTED process (state LOCKED); `args`
/// optional. (CUDA 13 adds a GPU remapping list to the argument structure, same 64-byte size.)
pub type cuCheckpointProcessRestore = unsafe extern "C" fn(pid: c_int, args: *mut CUcheckpointRestoreArgs) -> CuResult;
/// `cuCheckpointProcessUnlock(pid, args)`: unlocks a LOCKED process (state RUNNING); `args` optional.
pub type cuCheckpointProcessUnlock = unsafe extern "C" fn(pid: c_int, args: *mut CUcheckpointUnlockArgs) -> CuResult;
/// `cuCheckpointProcessGetState(pid, state)`.
pub type cuCheckpointProcessGetState = unsafe extern "C" fn(pid: c_int, state: *mut CuProcessState) -> CuResult;
/// `cuCheckpointProcessGetRestoreThreadId(pid, tid)`: the thread that performs a restore.
pub type cuCheckpointProcessGetRestoreThreadId = unsafe extern "C" fn(pid: c_int, tid: *mut c_int) -> CuResult;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Every `_ptsz`/`_ptds` symbol the real driver hands out is declared, and nothing else.
    #[test]
    fn declares_every_per_thread_entry_point_of_the_probed_driver() {
        let mut probed: Vec<&str> = crate::proc_address::EXPORTED_SYMBOLS
            .iter()
            .copied()
            .filter(|s| s.ends_with("_ptsz") || s.ends_with("_ptds"))
            .collect();
        probed.sort();
        let declared: Vec<&str> = PER_THREAD_ENTRY_POINTS.iter().map(|(name, _)| *name).collect();
        assert_eq!(declared, probed);
        for (name, legacy) in PER_THREAD_ENTRY_POINTS {
            assert_eq!(name.strip_suffix("_ptsz").or_else(|| name.strip_suffix("_ptds")), Some(*legacy));
        }
    }

    /// The layouts of cuda.h 12.8/12.9.
    #[test]
    fn checkpoint_argument_layouts() {
        for size in [
            size_of::<CUcheckpointLockArgs>(),
            size_of::<CUcheckpointCheckpointArgs>(),
            size_of::<CUcheckpointRestoreArgs>(),
            size_of::<CUcheckpointUnlockArgs>(),
        ] {
            assert_eq!(size, 64);
        }
        assert_eq!(offset_of!(CUcheckpointLockArgs, timeoutMs), 0);
        assert_eq!(offset_of!(CUcheckpointLockArgs, reserved0), 4);
        assert_eq!(offset_of!(CUcheckpointLockArgs, reserved1), 8);
    }

    #[test]
    fn signatures_are_plain_function_pointers() {
        assert_eq!(size_of::<cuLaunchKernel_ptsz>(), size_of::<*const c_void>());
        assert_eq!(size_of::<Option<cuCheckpointProcessLock>>(), size_of::<*const c_void>());
    }
}
