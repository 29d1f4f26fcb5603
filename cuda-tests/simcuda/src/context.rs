//! Contexts: creation and destruction, the per-thread current-context stack, and primary contexts.

use crate::driver::{Driver, driver};
use crate::guard::{CuRes, entry, out};
use crate::stream::{Stream, StreamKind};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::ThreadId;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUcontext, CUctxCreateParams, CUdevice, CUexecAffinityParam};

/// One CUDA context.
pub struct Context {
    /// Device index.
    pub device: usize,
    /// True for a device's primary context.
    pub primary: bool,
    /// `CU_CTX_*` flags.
    pub flags: AtomicU32,
    /// The handle the context was registered under.
    pub handle: OnceLock<u64>,
    /// Every stream created in the context, for `cuCtxSynchronize` and legacy-stream ordering.
    pub streams: Mutex<Vec<Weak<Stream>>>,
    /// The legacy default (NULL) stream.
    pub legacy: OnceLock<Arc<Stream>>,
    /// Per-thread default streams.
    per_thread: Mutex<HashMap<ThreadId, Arc<Stream>>>,
    /// Set once destroyed; handles still held by the program then fail.
    pub destroyed: AtomicBool,
    /// Values set with `cuCtxSetLimit`.
    limits: Mutex<HashMap<c_int, usize>>,
}

/// Bookkeeping of one device's primary context.
#[derive(Default)]
pub struct Primary {
    /// The context while it exists.
    pub handle: Option<u64>,
    /// `cuDevicePrimaryCtxRetain` count.
    pub refs: u32,
    /// Flags set with `cuDevicePrimaryCtxSetFlags`.
    pub flags: u32,
}

thread_local! {
    static CURRENT: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl Context {
    /// Creates a context on `device`, charging the device memory a context costs.
    pub fn create(d: &Driver, device: usize, flags: u32, primary: bool) -> CuRes<Arc<Context>> {
        d.charge(device, d.device_config(device).context_memory)?;
        if let Some(me) = d.state.me() {
            me.contexts[d.physical(device)].fetch_add(1, Ordering::AcqRel);
        }
        let ctx = Arc::new(Context {
            device,
            primary,
            flags: AtomicU32::new(flags),
            handle: OnceLock::new(),
            streams: Mutex::new(Vec::new()),
            legacy: OnceLock::new(),
            per_thread: Mutex::new(HashMap::new()),
            destroyed: AtomicBool::new(false),
            limits: Mutex::new(HashMap::new()),
        });
        let handle = d.contexts.insert(ctx.clone());
        let _ = ctx.handle.set(handle);
        let _ = ctx.legacy.set(Stream::new(&ctx, StreamKind::Legacy, 0, 0));
        Ok(ctx)
    }

    /// The registered handle.
    pub fn handle(&self) -> u64 {
        *self.handle.get().expect("registered at creation")
    }

    /// The legacy default stream.
    pub fn legacy(&self) -> &Arc<Stream> {
        self.legacy.get().expect("created with the context")
    }

    /// The calling thread's per-thread default stream, created on first use.
    pub fn per_thread_stream(self: &Arc<Self>) -> Arc<Stream> {
        let id = std::thread::current().id();
        self.per_thread.lock().entry(id).or_insert_with(|| Stream::new(self, StreamKind::PerThread, 0, 0)).clone()
    }

    /// Live streams of the context, the legacy stream first.
    pub fn all_streams(&self) -> Vec<Arc<Stream>> {
        let mut v = vec![self.legacy().clone()];
        let mut list = self.streams.lock();
        list.retain(|w| w.strong_count() > 0);
        v.extend(list.iter().filter_map(Weak::upgrade));
        v
    }

    /// Waits until every stream of the context is idle.
    pub fn synchronize(&self) {
        for s in self.all_streams() {
            s.synchronize();
        }
    }

    /// Destroys the context: waits for its work, frees its memory and modules, returns its reservation.
    pub fn destroy(self: &Arc<Self>, d: &Driver) {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.synchronize();
        for s in self.all_streams() {
            s.close();
        }
        crate::export_table::context_gone(self.handle());
        crate::module::unload_context(d, self.handle());
        d.memory.free_context(d, self.handle());
        let _ = d.contexts.remove(self.handle());
        d.uncharge(self.device, d.device_config(self.device).context_memory);
        if let Some(me) = d.state.me() {
            let _ = me.contexts[d.physical(self.device)]
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1));
        }
        CURRENT.with(|c| c.borrow_mut().retain(|&h| h != self.handle()));
    }
}

/// The calling thread's current context.
pub fn current() -> CuRes<Arc<Context>> {
    let d = driver()?;
    let handle = CURRENT.with(|c| c.borrow().last().copied()).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    let ctx = d.contexts.get(handle).map_err(|_| CUDA_ERROR_CONTEXT_IS_DESTROYED)?;
    if ctx.destroyed.load(Ordering::Acquire) {
        return Err(CUDA_ERROR_CONTEXT_IS_DESTROYED);
    }
    Ok(ctx)
}

/// The context behind a handle, or the current one for NULL.
pub fn resolve(handle: CUcontext) -> CuRes<Arc<Context>> {
    if handle.is_null() { current() } else { driver()?.contexts.get(handle as u64) }
}

fn set_current(handle: u64) {
    CURRENT.with(|c| {
        let mut stack = c.borrow_mut();
        stack.pop();
        if handle != 0 {
            stack.push(handle);
        }
    });
}

fn create(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CuRes {
    let d = driver()?;
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ctx = Context::create(d, d.device(dev)?, flags, false)?;
    CURRENT.with(|c| c.borrow_mut().push(ctx.handle()));
    out(pctx, ctx.handle() as CUcontext)
}

/// `cuCtxCreate` (pre-3.2 ABI, identical in shape).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CuResult {
    entry(|| create(pctx, flags, dev))
}

/// `cuCtxCreate_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CuResult {
    entry(|| create(pctx, flags, dev))
}

/// `cuCtxCreate_v3`: execution-affinity parameters are accepted and ignored (no SM partitioning).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *mut CUexecAffinityParam,
    _num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    entry(|| create(pctx, flags, dev))
}

/// `cuCtxCreate_v4`: creation parameters are accepted and ignored.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    _params: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CuResult {
    entry(|| create(pctx, flags, dev))
}

fn destroy(ctx: CUcontext) -> CuRes {
    let d = driver()?;
    let c = d.contexts.get(ctx as u64)?;
    if c.primary {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    c.destroy(d);
    Ok(())
}

/// `cuCtxDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy(ctx: CUcontext) -> CuResult {
    entry(|| destroy(ctx))
}

/// `cuCtxDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CuResult {
    entry(|| destroy(ctx))
}

/// `cuCtxSetCurrent`: replaces the top of the calling thread's stack (NULL pops it).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CuResult {
    entry(|| {
        let d = driver()?;
        if !ctx.is_null() {
            d.contexts.get(ctx as u64)?;
        }
        set_current(ctx as u64);
        Ok(())
    })
}

/// `cuCtxGetCurrent`: NULL when no context is current.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CuResult {
    entry(|| {
        driver()?;
        let top = CURRENT.with(|c| c.borrow().last().copied()).unwrap_or(0);
        out(pctx, top as CUcontext)
    })
}

fn push(ctx: CUcontext) -> CuRes {
    driver()?.contexts.get(ctx as u64)?;
    CURRENT.with(|c| c.borrow_mut().push(ctx as u64));
    Ok(())
}

fn pop(pctx: *mut CUcontext) -> CuRes {
    driver()?;
    let top = CURRENT.with(|c| c.borrow_mut().pop()).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if !pctx.is_null() {
        out(pctx, top as CUcontext)?;
    }
    Ok(())
}

/// `cuCtxPushCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> CuResult {
    entry(|| push(ctx))
}

/// `cuCtxPushCurrent_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CuResult {
    entry(|| push(ctx))
}

/// `cuCtxPopCurrent`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> CuResult {
    entry(|| pop(pctx))
}

/// `cuCtxPopCurrent_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CuResult {
    entry(|| pop(pctx))
}

/// `cuCtxGetDevice`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CuResult {
    entry(|| out(dev, current()?.device as CUdevice))
}

/// `cuCtxGetDevice_v2`: the device of `ctx` (or of the current context for NULL).
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetDevice_v2(dev: *mut CUdevice, ctx: CUcontext) -> CuResult {
    entry(|| out(dev, resolve(ctx)?.device as CUdevice))
}

/// `cuCtxSynchronize`: waits for every stream of the current context.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CuResult {
    entry(|| {
        crate::capture_mode::unsafe_call()?;
        current()?.synchronize();
        crate::pool::on_synchronize(crate::driver::driver()?);
        Ok(())
    })
}

/// `cuCtxSynchronize_v2`: waits for every stream of `ctx`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CuResult {
    entry(|| {
        resolve(ctx)?.synchronize();
        crate::pool::on_synchronize(crate::driver::driver()?);
        Ok(())
    })
}

/// `cuCtxGetFlags`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CuResult {
    entry(|| out(flags, current()?.flags.load(Ordering::Relaxed)))
}

/// `cuCtxSetFlags`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetFlags(flags: c_uint) -> CuResult {
    entry(|| {
        current()?.flags.store(flags, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuCtxGetApiVersion`: contexts report the 3.2 API, as the real driver does.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CuResult {
    entry(|| {
        resolve(ctx)?;
        out(version, 3020)
    })
}

/// `cuCtxGetId`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetId(ctx: CUcontext, id: *mut u64) -> CuResult {
    entry(|| out(id, resolve(ctx)?.handle()))
}

/// `cuCtxGetLimit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> CuResult {
    entry(|| {
        let ctx = current()?;
        let v = ctx.limits.lock().get(&limit).copied();
        // Defaults the real driver reports for stack size, printf FIFO and malloc heap, ...; the shared
        // memory a context's kernels may use (`CU_LIMIT_SHMEM_SIZE`, 7) is the device's per-block maximum
        // outside CUDA-in-graphics contexts (which simgpu has not: `CU_LIMIT_CIG_ENABLED`, 8, is 0).
        let default = match limit {
            0 => 1024,
            1 => 1 << 20,
            2 => 8 << 20,
            3 => 2,
            4 => 2048,
            5 => 128,
            6 => 0,
            7 => {
                let c = driver()?.device_config(ctx.device);
                let optin = tessera_ffi::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
                crate::device::attribute(c, optin as c_int).unwrap_or(0) as usize
            }
            8 | 9 => 0,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(value, v.unwrap_or(default))
    })
}

/// `cuCtxSetLimit`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CuResult {
    entry(|| {
        if !(0..=6).contains(&limit) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        current()?.limits.lock().insert(limit, value);
        Ok(())
    })
}

/// `cuCtxGetStreamPriorityRange`: least 0, greatest -5, as on recent GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CuResult {
    entry(|| {
        current()?;
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, -5)?;
        }
        Ok(())
    })
}

/// `cuCtxGetCacheConfig`: always "prefer none".
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> CuResult {
    entry(|| {
        current()?;
        out(config, 0)
    })
}

/// `cuCtxSetCacheConfig`: accepted; the simulation has no cache.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCacheConfig(_config: c_int) -> CuResult {
    entry(|| current().map(|_| ()))
}

/// `cuDevicePrimaryCtxRetain`: creates the primary context on first retain.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CuResult {
    entry(|| {
        let d = driver()?;
        let dev = d.device(dev)?;
        if pctx.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut p = d.primary[dev].lock();
        let handle = match p.handle {
            Some(h) => h,
            None => {
                let h = Context::create(d, dev, p.flags, true)?.handle();
                p.handle = Some(h);
                h
            }
        };
        p.refs += 1;
        out(pctx, handle as CUcontext)
    })
}

fn primary_release(dev: CUdevice) -> CuRes {
    let d = driver()?;
    let dev = d.device(dev)?;
    let mut p = d.primary[dev].lock();
    if p.refs == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    p.refs -= 1;
    if p.refs == 0
        && let Some(h) = p.handle.take()
    {
        d.contexts.get(h)?.destroy(d);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxRelease`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CuResult {
    entry(|| primary_release(dev))
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CuResult {
    entry(|| primary_release(dev))
}

fn primary_reset(dev: CUdevice) -> CuRes {
    let d = driver()?;
    let dev = d.device(dev)?;
    let mut p = d.primary[dev].lock();
    if let Some(h) = p.handle.take() {
        d.contexts.get(h)?.destroy(d);
    }
    p.refs = 0;
    Ok(())
}

/// `cuDevicePrimaryCtxReset`: destroys the primary context and everything in it.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CuResult {
    entry(|| primary_reset(dev))
}

/// `cuDevicePrimaryCtxReset_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CuResult {
    entry(|| primary_reset(dev))
}

/// `cuDevicePrimaryCtxGetState`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.primary[d.device(dev)?].lock();
        out(flags, p.flags)?;
        out(active, p.handle.is_some() as c_int)
    })
}

fn primary_set_flags(dev: CUdevice, flags: c_uint) -> CuRes {
    let d = driver()?;
    let mut p = d.primary[d.device(dev)?].lock();
    p.flags = flags;
    if let Some(h) = p.handle {
        d.contexts.get(h)?.flags.store(flags, Ordering::Relaxed);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxSetFlags`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) -> CuResult {
    entry(|| primary_set_flags(dev, flags))
}

/// `cuDevicePrimaryCtxSetFlags_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CuResult {
    entry(|| primary_set_flags(dev, flags))
}
