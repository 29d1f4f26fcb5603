//! Every real function the shim calls, one [`RealFn`] each, named after its symbol and resolved on
//! first use. Those of the intercepted functions come from the one table ([`crate::table`]); the others
//! are the calls the shim makes for itself. Both sets are declared in this one module, so a function
//! declared twice does not compile.
#![allow(non_upper_case_globals)] // the names of cuda.h and nvml.h

use super::{Lib, RealFn};
// The names the table's lines use, as at the table's other expansion site (`crate::hooks`).
#[allow(unused_imports)]
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};
use tessera_ffi::nvml::{NvmlDevice, NvmlMemory, NvmlMemoryV2, NvmlProcessInfo};
use tessera_ffi::sys::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_BATCH_OP,
    CUDA_MEMCPY3D_PEER, CUarray, CUcontext, CUctxCreateParams, CUdevice, CUdeviceptr, CUevent, CUexecAffinityParam,
    CUfunction, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUlaunchConfig, CUmemAccessDesc,
    CUmemAllocationGranularity_flags, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemcpyAttributes,
    CUmemoryPool, CUmipmappedArray, CUstream, CUuuid,
};

/// Declares `pub static name: RealFn<..>` for lines in the table's syntax (the handler, if any, is
/// ignored here; a `/ per_thread_name` gets its own pointer).
macro_rules! real_functions {
    ($(
        $lib:ident fn $name:ident $args:tt $(/ $pt:ident)? $(=> $(@$wrap:ident)? $handler:path)?;
    )*) => {
        $(
            real_functions!(@one $lib $name $args);
            $(real_functions!(@one $lib $pt $args);)?
        )*
    };
    (@one $lib:ident $name:ident ($($arg:ident : $ty:ty),* $(,)?)) => {
        #[doc = concat!("The real `", stringify!($name), "`.")]
        pub static $name: RealFn<unsafe extern "C" fn($($ty),*) -> u32> = RealFn::new(Lib::$lib, {
            const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(n) => n,
                Err(_) => panic!("symbol names contain no NUL"),
            };
            NAME
        });
    };
}

crate::table::intercepted!(real_functions);

/// Expands `$then! { ..the calls the shim makes for itself.. }`, none of them intercepted: here for
/// [`real_functions!`], and in the shim's tests to check their signatures against NVIDIA's `cuda.h` as
/// the table's are (`crate::table_check`).
macro_rules! own_calls {
    ($then:ident) => {
        $then! {
            // Where the calling thread's memory goes, device UUIDs, running the shim's work in a context.
            Cuda fn cuCtxGetDevice(device: *mut CUdevice);
            Cuda fn cuCtxGetCurrent(ctx: *mut CUcontext);
            Cuda fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int);
            Cuda fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice);
            Cuda fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice);
            Cuda fn cuDeviceGetCount(count: *mut c_int);
            Cuda fn cuCtxSynchronize();
            Cuda fn cuStreamCreate(stream: *mut CUstream, flags: c_uint);
            Cuda fn cuStreamSynchronize(stream: CUstream);

            // Measuring kernels' device time (and soft mode's swap marks).
            Cuda fn cuEventCreate(event: *mut CUevent, flags: c_uint);
            Cuda fn cuEventRecord(event: CUevent, stream: CUstream);
            Cuda fn cuEventSynchronize(event: CUevent);
            Cuda fn cuEventDestroy_v2(event: CUevent);
            Cuda fn cuEventQuery(event: CUevent);
            Cuda fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent);
            Cuda fn cuStreamIsCapturing(stream: CUstream, status: *mut c_int);
            Cuda fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int);

            // Soft mode's device memory, not the program's allocations.
            Cuda fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CUmemAllocationProp, option: CUmemAllocationGranularity_flags);
            Cuda fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: c_ulonglong);
            Cuda fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize);
            Cuda fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize);
            Cuda fn cuMemFreeHost(p: *mut c_void);

            // What a memory pool keeps of freed memory (crate::pool_cache).
            Cuda fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void);

            // NVML queries for the shim itself: what a context costs, which CUDA device a handle is.
            Nvml fn nvmlInit_v2();
            Nvml fn nvmlShutdown();
            Nvml fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut NvmlDevice);
            Nvml fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut NvmlDevice);
            Nvml fn nvmlDeviceGetComputeRunningProcesses_v3(device: NvmlDevice, count: *mut c_uint, infos: *mut NvmlProcessInfo);
            Nvml fn nvmlDeviceGetUUID(device: NvmlDevice, uuid: *mut c_char, length: c_uint);
            Nvml fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint);
        }
    };
}

own_calls!(real_functions);
#[cfg(test)]
pub(crate) use own_calls;
