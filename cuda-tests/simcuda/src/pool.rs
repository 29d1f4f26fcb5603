//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemFreeAsync` and memory pools. Allocation happens at
//! call time (always valid by the time the stream reaches it); freeing happens when the stream reaches
//! the free, as the real driver orders it.
//!
//! Pools cache, as the real driver documents: memory freed from a pool stays reserved by it (charged to
//! the device, so other processes cannot have it) and serves the pool's next allocations; the pool gives
//! it back to the device on the next stream, event or context synchronization while it holds more than
//! its release threshold (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, 0 by default), or when `cuMemPoolTrimTo`
//! asks. `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` is what it holds in all, `USED_MEM_CURRENT` what its live
//! allocations hold.

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
    /// Bytes freed from the pool that it still holds (charged to the device).
    cached: AtomicU64,
    /// Highest reservation seen (`CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`).
    reserved_high: AtomicU64,
}

impl Pool {
    /// Takes up to `size` bytes of the pool's cache for an allocation; returns how many.
    fn take_cached(&self, size: u64) -> u64 {
        let mut taken = 0;
        let _ = self.cached.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            taken = c.min(size);
            Some(c - taken)
        });
        taken
    }

    /// Keeps `bytes` freed from the pool's allocations (still charged to the device).
    pub fn cache(&self, bytes: u64) {
        self.cached.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives cached memory back to the device until the pool holds at most `keep` bytes in all (what its
    /// live allocations hold, `in_use`, it keeps whatever `keep` says).
    fn release_to(&self, d: &Driver, in_use: u64, keep: u64) {
        let mut released = 0;
        let _ = self.cached.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            released = c.min((in_use + c).saturating_sub(keep));
            Some(c - released)
        });
        d.uncharge(self.device, released);
    }

    /// Records the pool's reservation after an allocation.
    fn note_reserved(&self, in_use: u64) {
        self.reserved_high.fetch_max(in_use + self.cached.load(Ordering::Acquire), Ordering::Relaxed);
    }
}

/// What a synchronization does to every pool (`cuStreamSynchronize`, `cuEventSynchronize`,
/// `cuCtxSynchronize`): each gives back what it holds beyond its release threshold.
pub fn on_synchronize(d: &Driver) {
    for (handle, p) in d.pools.all() {
        if p.cached.load(Ordering::Acquire) > 0 {
            p.release_to(d, pool_in_use(d, handle), p.release_threshold.load(Ordering::Acquire));
        }
    }
}

/// Each device's default pool and the pool `cuDeviceSetMemPool` made current.
static POOLS: Mutex<Option<HashMap<usize, (u64, u64)>>> = Mutex::new(None);

fn new_pool(d: &Driver, device: usize) -> u64 {
    d.pools.insert(Arc::new(Pool {
        device,
        release_threshold: AtomicU64::new(0),
        high_water: AtomicU64::new(0),
        cached: AtomicU64::new(0),
        reserved_high: AtomicU64::new(0),
    }))
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
    // Served from the pool's cache first: those bytes are charged to the device already.
    let reused = p.take_cached(size as u64);
    let ptr = d
        .memory
        .allocate_covered(d, size as u64, reused, Kind::Pool, p.device, ctx.handle(), pool)
        .inspect_err(|_| p.cache(reused))?;
    let in_use = pool_in_use(d, pool);
    p.high_water.fetch_max(in_use, Ordering::Relaxed);
    p.note_reserved(in_use);
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

/// `cuMemPoolDestroy`: default pools cannot be destroyed; what the pool caches goes back to the device.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.pools.get(pool as u64)?;
        ensure(device_pools(d, p.device).0 != pool as u64)?;
        p.release_to(d, 0, 0);
        d.pools.remove(pool as u64).map(|_| ())
    })
}

/// `cuMemPoolTrimTo`: gives cached memory back until the pool holds at most `keep` bytes (what its live
/// allocations hold stays).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.pools.get(pool as u64)?;
        p.release_to(d, pool_in_use(d, pool as u64), keep as u64);
        Ok(())
    })
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
            ATTR_RESERVED_MEM_HIGH => {
                p.reserved_high.store(0, Ordering::Relaxed);
                Ok(())
            }
            ATTR_USED_MEM_HIGH => {
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
            ATTR_RESERVED_MEM_CURRENT => {
                out(value as *mut u64, pool_in_use(d, pool as u64) + p.cached.load(Ordering::Acquire))
            }
            ATTR_USED_MEM_CURRENT => out(value as *mut u64, pool_in_use(d, pool as u64)),
            ATTR_RESERVED_MEM_HIGH => out(value as *mut u64, p.reserved_high.load(Ordering::Relaxed)),
            ATTR_USED_MEM_HIGH => out(value as *mut u64, p.high_water.load(Ordering::Relaxed)),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}
