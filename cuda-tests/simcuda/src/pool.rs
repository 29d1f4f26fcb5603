//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemFreeAsync` and memory pools. Allocation happens at
//! call time (always valid by the time the stream reaches it); freeing happens when the stream reaches
//! the free, as the real driver orders it.

use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure, entry, input, out};
use crate::memory::Kind;
use crate::stream::{DefaultStream, Op, resolve};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUdevice, CUdeviceptr, CUmemPoolProps, CUmemoryPool, CUstream};

/// A memory pool of one device.
pub struct Pool {
    /// Device index.
    pub device: usize,
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
    release_threshold: AtomicU64,
    /// Highest usage seen (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`).
    high_water: AtomicU64,
}

/// Each device's default pool and the pool `cuDeviceSetMemPool` made current.
static POOLS: Mutex<Option<HashMap<usize, (u64, u64)>>> = Mutex::new(None);

fn new_pool(d: &Driver, device: usize) -> u64 {
    d.pools.insert(Arc::new(Pool { device, release_threshold: AtomicU64::new(0), high_water: AtomicU64::new(0) }))
}

/// `(default pool, current pool)` of `device`, creating the default on first use.
fn device_pools(d: &Driver, device: usize) -> (u64, u64) {
    *POOLS.lock().get_or_insert_with(HashMap::new).entry(device).or_insert_with(|| {
        let h = new_pool(d, device);
        (h, h)
    })
}

fn pool_in_use(d: &Driver, pool: u64) -> u64 {
    d.memory.total_where(|a| a.pool == pool)
}

fn alloc_from(dptr: *mut CUdeviceptr, size: usize, pool: u64, h: CUstream, default: DefaultStream) -> CuRes {
    let d = driver()?;
    let s = resolve(h, default)?;
    ensure(!dptr.is_null())?;
    let p = d.pools.get(pool)?;
    ensure(p.device == s.device)?;
    let ctx = s.ctx.upgrade().ok_or(CUDA_ERROR_CONTEXT_IS_DESTROYED)?;
    let ptr = d.memory.allocate(d, size as u64, Kind::Pool, p.device, ctx.handle(), pool)?;
    p.high_water.fetch_max(pool_in_use(d, pool), Ordering::Relaxed);
    out(dptr, ptr)
}

fn alloc_async(dptr: *mut CUdeviceptr, size: usize, h: CUstream, default: DefaultStream) -> CuRes {
    let d = driver()?;
    let device = resolve(h, default)?.device;
    alloc_from(dptr, size, device_pools(d, device).1, h, default)
}

stream_variants! {
    /// `cuMemAllocAsync`: from the device's current pool.
    fn cuMemAllocAsync / cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, h: CUstream) => |m| alloc_async(dptr, size, h, m);
    /// `cuMemAllocFromPoolAsync`.
    fn cuMemAllocFromPoolAsync / cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, size: usize, pool: CUmemoryPool, h: CUstream) => |m| alloc_from(dptr, size, pool as u64, h, m);
}

fn free_async(dptr: CUdeviceptr, h: CUstream, default: DefaultStream) -> CuRes {
    let d = driver()?;
    let s = resolve(h, default)?;
    ensure(d.memory.at(dptr).is_some_and(|a| matches!(a.kind, Kind::Pool | Kind::Device)))?;
    s.submit(Op::Free(dptr))
}

stream_variants! {
    /// `cuMemFreeAsync`: the memory is released when the stream reaches this point.
    fn cuMemFreeAsync / cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h: CUstream) => |m| free_async(dptr, h, m);
}

/// `cuDeviceGetDefaultMemPool`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CuResult {
    entry(|| {
        let d = driver()?;
        out(pool, device_pools(d, d.device(dev)?).0 as CUmemoryPool)
    })
}

/// `cuDeviceGetMemPool`: the pool `cuMemAllocAsync` uses on the device.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CuResult {
    entry(|| {
        let d = driver()?;
        out(pool, device_pools(d, d.device(dev)?).1 as CUmemoryPool)
    })
}

/// `cuDeviceSetMemPool`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CuResult {
    entry(|| {
        let d = driver()?;
        let dev = d.device(dev)?;
        ensure(d.pools.get(pool as u64)?.device == dev)?;
        let default = device_pools(d, dev).0;
        POOLS.lock().get_or_insert_with(HashMap::new).insert(dev, (default, pool as u64));
        Ok(())
    })
}

/// `cuMemPoolCreate`: a pool on the device named by the properties' location.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!pool.is_null())?;
        // The location's id is the fourth 32-bit field (allocType, handleTypes, location.type, location.id).
        let id = input(props as *const [c_int; 4])?[3];
        let device = d.device(id)?;
        out(pool, new_pool(d, device) as CUmemoryPool)
    })
}

/// `cuMemPoolDestroy`: default pools cannot be destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.pools.get(pool as u64)?;
        ensure(device_pools(d, p.device).0 != pool as u64)?;
        d.pools.remove(pool as u64).map(|_| ())
    })
}

/// `cuMemPoolTrimTo`: nothing is cached, so there is nothing to trim.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, _keep: usize) -> CuResult {
    entry(|| driver()?.pools.get(pool as u64).map(|_| ()))
}

const ATTR_RELEASE_THRESHOLD: c_int = 4;
const ATTR_RESERVED_MEM_CURRENT: c_int = 5;
const ATTR_RESERVED_MEM_HIGH: c_int = 6;
const ATTR_USED_MEM_CURRENT: c_int = 7;
const ATTR_USED_MEM_HIGH: c_int = 8;

/// `cuMemPoolSetAttribute`: the release threshold is kept; reuse policies are accepted.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) -> CuResult {
    entry(|| {
        let p = driver()?.pools.get(pool as u64)?;
        ensure(!value.is_null())?;
        match attr {
            1..=3 => Ok(()),
            ATTR_RELEASE_THRESHOLD => {
                p.release_threshold.store(input(value as *const u64)?, Ordering::Relaxed);
                Ok(())
            }
            ATTR_RESERVED_MEM_HIGH | ATTR_USED_MEM_HIGH => {
                p.high_water.store(0, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `cuMemPoolGetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.pools.get(pool as u64)?;
        match attr {
            1..=3 => out(value as *mut c_int, 1),
            ATTR_RELEASE_THRESHOLD => out(value as *mut u64, p.release_threshold.load(Ordering::Relaxed)),
            ATTR_RESERVED_MEM_CURRENT | ATTR_USED_MEM_CURRENT => out(value as *mut u64, pool_in_use(d, pool as u64)),
            ATTR_RESERVED_MEM_HIGH | ATTR_USED_MEM_HIGH => out(value as *mut u64, p.high_water.load(Ordering::Relaxed)),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}
