//! The driver calls `tessera load` makes, through the driver a CUDA program loads (so the shim, when
//! preloaded, sees every call): the device's primary context, a module with a `spin` kernel, one stream,
//! device memory, and `spin` launches kept at most a few deep with events.

use crate::driver::{Driver, DriverError, check};
use std::ffi::{CString, c_int, c_uint, c_void};
use tessera_ffi::cuda::CUDA_ERROR_OUT_OF_MEMORY;
use tessera_ffi::sys::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream};

/// `spin(u64 ns)`: one thread busy-waits on the GPU's nanosecond timer (`%globaltimer`) until `ns` have
/// passed, so it takes that long on a real GPU; simgpu recognises the built-in by its entry name and
/// occupies its engine for `ns`. The one copy of the kernel, which the test probe loads too.
pub const SPIN_PTX: &str = include_str!("../../kernels/spin.ptx");

/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
const NO_TIMING: c_uint = 2;
/// Device memory is taken in blocks of this size, so a quota or a device smaller than asked for still
/// holds what fits.
const BLOCK: u64 = 512 << 20;

/// `CUresult`, as an integer.
type Res = c_uint;
type LaunchFn = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> Res;

/// The entry points used on the hot path, looked up once.
struct Api {
    launch: LaunchFn,
    record: unsafe extern "C" fn(CUevent, CUstream) -> Res,
    event_sync: unsafe extern "C" fn(CUevent) -> Res,
    stream_sync: unsafe extern "C" fn(CUstream) -> Res,
    alloc: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> Res,
    free: unsafe extern "C" fn(CUdeviceptr) -> Res,
}

/// A device's primary context with the spin module, a stream and `depth` events; released on drop.
pub struct Gpu {
    driver: Driver,
    api: Api,
    device: CUdevice,
    ctx: CUcontext,
    module: CUmodule,
    spin: CUfunction,
    stream: CUstream,
    events: Vec<CUevent>,
    launched: usize,
}

impl Gpu {
    /// Initializes the driver and sets device `ordinal` up for spins, with at most `depth` (>= 1) queued.
    pub fn open(ordinal: c_int, depth: usize) -> Result<Gpu, DriverError> {
        let driver = Driver::for_program()?;
        driver.init()?;
        let api = Api {
            launch: driver.call("cuLaunchKernel")?,
            record: driver.call("cuEventRecord")?,
            event_sync: driver.call("cuEventSynchronize")?,
            stream_sync: driver.call("cuStreamSynchronize")?,
            alloc: driver.call("cuMemAlloc_v2")?,
            free: driver.call("cuMemFree_v2")?,
        };
        let get_device: unsafe extern "C" fn(*mut CUdevice, c_int) -> Res = driver.call("cuDeviceGet")?;
        let mut device: CUdevice = 0;
        // SAFETY: valid out-pointer; the ordinal is checked by the driver.
        check("cuDeviceGet", unsafe { get_device(&mut device, ordinal) })?;
        let retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> Res = driver.call("cuDevicePrimaryCtxRetain")?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a device the driver returned.
        check("cuDevicePrimaryCtxRetain", unsafe { retain(&mut ctx, device) })?;
        // From here on, `Drop` releases whatever was created.
        let mut gpu = Gpu {
            driver,
            api,
            device,
            ctx,
            module: std::ptr::null_mut(),
            spin: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            events: Vec::new(),
            launched: 0,
        };
        gpu.prepare(depth.max(1))?;
        Ok(gpu)
    }

    /// Makes the context current, loads the module and creates the stream and events.
    fn prepare(&mut self, depth: usize) -> Result<(), DriverError> {
        let d = &self.driver;
        let set_current: unsafe extern "C" fn(CUcontext) -> Res = d.call("cuCtxSetCurrent")?;
        // SAFETY: a context retained in `open`.
        check("cuCtxSetCurrent", unsafe { set_current(self.ctx) })?;
        let load: unsafe extern "C" fn(*mut CUmodule, *const c_void) -> Res = d.call("cuModuleLoadData")?;
        let image = CString::new(SPIN_PTX).expect("the PTX has no NUL");
        // SAFETY: valid out-pointer; the image is NUL-terminated PTX that outlives the call.
        check("cuModuleLoadData", unsafe { load(&mut self.module, image.as_ptr().cast()) })?;
        let get: unsafe extern "C" fn(*mut CUfunction, CUmodule, *const std::ffi::c_char) -> Res =
            d.call("cuModuleGetFunction")?;
        // SAFETY: valid out-pointer, the module just loaded and a NUL-terminated name.
        check("cuModuleGetFunction(spin)", unsafe { get(&mut self.spin, self.module, c"spin".as_ptr()) })?;
        let create_stream: unsafe extern "C" fn(*mut CUstream, c_uint) -> Res = d.call("cuStreamCreate")?;
        // SAFETY: valid out-pointer and flags.
        check("cuStreamCreate", unsafe { create_stream(&mut self.stream, NON_BLOCKING) })?;
        let create_event: unsafe extern "C" fn(*mut CUevent, c_uint) -> Res = d.call("cuEventCreate")?;
        for _ in 0..depth {
            let mut event: CUevent = std::ptr::null_mut();
            // SAFETY: valid out-pointer and flags.
            check("cuEventCreate", unsafe { create_event(&mut event, NO_TIMING) })?;
            self.events.push(event);
        }
        Ok(())
    }

    /// Queues `spin(ns)`, first waiting for the launch `depth` launches ago to finish.
    pub fn spin(&mut self, ns: u64) -> Result<(), DriverError> {
        let slot = self.launched % self.events.len();
        if self.launched >= self.events.len() {
            // SAFETY: an event created in `prepare`, recorded after an earlier launch.
            check("cuEventSynchronize", unsafe { (self.api.event_sync)(self.events[slot]) })?;
        }
        let mut ns = ns;
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        // SAFETY: `spin` takes one u64, passed by pointer and copied at launch; one thread, no memory
        // touched; the stream belongs to the current context.
        let launched = unsafe {
            (self.api.launch)(self.spin, 1, 1, 1, 1, 1, 1, 0, self.stream, params.as_mut_ptr(), std::ptr::null_mut())
        };
        check("cuLaunchKernel(spin)", launched)?;
        // SAFETY: the event and stream were created in `prepare`.
        check("cuEventRecord", unsafe { (self.api.record)(self.events[slot], self.stream) })?;
        self.launched += 1;
        Ok(())
    }

    /// Waits until everything queued has run.
    pub fn finish(&self) -> Result<(), DriverError> {
        // SAFETY: the stream was created in `prepare`.
        check("cuStreamSynchronize", unsafe { (self.api.stream_sync)(self.stream) })
    }

    /// Takes up to `bytes` of device memory in blocks, stopping quietly when the quota or the device is
    /// full; returns the blocks.
    pub fn allocate(&self, bytes: u64) -> Result<Vec<CUdeviceptr>, DriverError> {
        let mut blocks = Vec::new();
        let mut left = bytes;
        while left > 0 {
            let size = left.min(BLOCK);
            let mut ptr: CUdeviceptr = 0;
            // SAFETY: valid out-pointer; the context is current.
            match unsafe { (self.api.alloc)(&mut ptr, size as usize) } {
                CUDA_ERROR_OUT_OF_MEMORY => break,
                code => check("cuMemAlloc", code)?,
            }
            blocks.push(ptr);
            left -= size;
        }
        Ok(blocks)
    }

    /// Frees blocks [`Gpu::allocate`] returned.
    pub fn free(&self, blocks: &mut Vec<CUdeviceptr>) -> Result<(), DriverError> {
        for ptr in blocks.drain(..) {
            // SAFETY: a live allocation of this context, freed once (drained from the list).
            check("cuMemFree", unsafe { (self.api.free)(ptr) })?;
        }
        Ok(())
    }
}

/// A `cu*Destroy`/`cu*Release` entry point taking one handle.
type Destroy<T> = unsafe extern "C" fn(T) -> Res;

impl Drop for Gpu {
    fn drop(&mut self) {
        // Best effort: the process is about to exit, and the driver reclaims everything then anyway.
        let d = &self.driver;
        if let Ok(destroy) = d.call::<Destroy<CUevent>>("cuEventDestroy_v2") {
            for event in self.events.drain(..) {
                // SAFETY: an event created in `prepare`, destroyed once.
                unsafe { destroy(event) };
            }
        }
        if !self.stream.is_null()
            && let Ok(destroy) = d.call::<Destroy<CUstream>>("cuStreamDestroy_v2")
        {
            // SAFETY: the stream created in `prepare`, destroyed once.
            unsafe { destroy(self.stream) };
        }
        if !self.module.is_null()
            && let Ok(unload) = d.call::<Destroy<CUmodule>>("cuModuleUnload")
        {
            // SAFETY: the module loaded in `prepare`; its function is not used after this.
            unsafe { unload(self.module) };
        }
        if let Ok(release) = d.call::<Destroy<CUdevice>>("cuDevicePrimaryCtxRelease_v2") {
            // SAFETY: releases the retain made in `open`, once.
            unsafe { release(self.device) };
        }
    }
}
