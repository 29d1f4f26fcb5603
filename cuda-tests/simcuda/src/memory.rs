//! Linear memory: device, managed and host allocations, memory info, address ranges and pointer
//! attributes. Device memory is host memory mapped on demand; each byte is charged against the device's
//! machine-wide total in the shared state.

use crate::context::current;
use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure, entry, out};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_uint, c_void};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUcontext, CUdeviceptr, CUpointer_attribute};

pub use crate::array::Array;
pub use crate::pool::Pool;

/// What an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAlloc`, `cuMemAllocPitch`, module globals.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// Stream-ordered (`cuMemAllocAsync`, pools).
    Pool,
    /// Page-locked host memory allocated by the driver.
    Host,
    /// Host memory registered with `cuMemHostRegister` (not ours to unmap).
    Registered,
    /// Another process's device memory, opened with `cuIpcOpenMemHandle` (charged to that process).
    Imported,
}

/// One linear allocation.
#[derive(Clone, Debug)]
pub struct Alloc {
    /// First address.
    pub base: u64,
    /// Bytes the program asked for.
    pub size: u64,
    /// What it is.
    pub kind: Kind,
    /// Device index (device memory) or the current device at allocation (host memory).
    pub device: usize,
    /// Owning context handle.
    pub ctx: u64,
    /// Device memory charged for it.
    pub charge: u64,
    /// Pool handle for stream-ordered allocations.
    pub pool: u64,
}

/// Every linear allocation of the process, by base address.
#[derive(Default)]
pub struct AddressSpace {
    allocs: Mutex<BTreeMap<u64, Alloc>>,
}

/// Maps `len` bytes of zeroed, lazily backed memory.
pub fn map_anonymous(len: u64) -> CuRes<u64> {
    let len = usize::try_from(len.max(1)).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED { Err(CUDA_ERROR_OUT_OF_MEMORY) } else { Ok(p as u64) }
}

fn unmap(base: u64, len: u64) {
    // SAFETY: (base, len) is exactly a mapping created by `map_anonymous` and no longer referenced.
    unsafe { libc::munmap(base as *mut c_void, len.max(1) as usize) };
}

impl AddressSpace {
    /// Allocates and charges `size` bytes of `kind` memory on `device` for context `ctx`.
    pub fn allocate(&self, d: &Driver, size: u64, kind: Kind, device: usize, ctx: u64, pool: u64) -> CuRes<u64> {
        self.allocate_covered(d, size, 0, kind, device, ctx, pool)
    }

    /// [`AddressSpace::allocate`], `covered` bytes of which are charged to the device already (a pool's
    /// cache serves them).
    #[allow(clippy::too_many_arguments)] // the allocation's fields, as `Alloc` has them
    pub fn allocate_covered(
        &self,
        d: &Driver,
        size: u64,
        covered: u64,
        kind: Kind,
        device: usize,
        ctx: u64,
        pool: u64,
    ) -> CuRes<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let charge = if kind == Kind::Host { 0 } else { size };
        let fresh = charge.saturating_sub(covered);
        d.charge(device, fresh)?;
        let base = map_anonymous(size).inspect_err(|_| d.uncharge(device, fresh))?;
        self.allocs.lock().insert(base, Alloc { base, size, kind, device, ctx, charge, pool });
        Ok(base)
    }

    /// Records `size` bytes of another process's device memory mapped at `base` (`crate::ipc`): nothing
    /// is charged here.
    pub fn import(&self, base: u64, size: u64, device: usize, ctx: u64) {
        self.allocs.lock().insert(base, Alloc { base, size, kind: Kind::Imported, device, ctx, charge: 0, pool: 0 });
    }

    /// Records program-owned host memory registered with the driver.
    pub fn register(&self, base: u64, size: u64, device: usize, ctx: u64) -> CuRes {
        let mut allocs = self.allocs.lock();
        if allocs.range(..base + size).next_back().is_some_and(|(_, a)| a.base + a.size > base) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        allocs.insert(base, Alloc { base, size, kind: Kind::Registered, device, ctx, charge: 0, pool: 0 });
        Ok(())
    }

    /// Frees the allocation starting at `base` (callers wait for queued work that may use it).
    pub fn free(&self, d: &Driver, base: u64) -> CuRes<Alloc> {
        let a = self.allocs.lock().remove(&base).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if a.kind != Kind::Registered {
            unmap(a.base, a.size);
        }
        crate::ipc::forget(d, base);
        // A pool keeps what is freed from it (see `crate::pool`).
        match d.pools.get(a.pool).ok().filter(|_| a.kind == Kind::Pool) {
            Some(p) => p.cache(a.charge),
            None => d.uncharge(a.device, a.charge),
        }
        Ok(a)
    }

    /// Frees everything a destroyed context owned.
    pub fn free_context(&self, d: &Driver, ctx: u64) {
        let owned: Vec<u64> = self.allocs.lock().values().filter(|a| a.ctx == ctx).map(|a| a.base).collect();
        for base in owned {
            let _ = self.free(d, base);
        }
    }

    /// The allocation containing `addr`.
    pub fn find(&self, addr: u64) -> Option<Alloc> {
        let allocs = self.allocs.lock();
        let (_, a) = allocs.range(..=addr).next_back()?;
        (addr < a.base + a.size.max(1)).then(|| a.clone())
    }

    /// Bytes in the allocations matching `pred`.
    pub fn total_where(&self, pred: impl Fn(&Alloc) -> bool) -> u64 {
        self.allocs.lock().values().filter(|a| pred(a)).map(|a| a.size).sum()
    }

    /// Every allocation, in address order.
    pub fn all(&self) -> Vec<Alloc> {
        self.allocs.lock().values().cloned().collect()
    }

    /// The allocation starting exactly at `base`.
    pub fn at(&self, base: u64) -> Option<Alloc> {
        self.allocs.lock().get(&base).cloned()
    }
}

/// True when `[addr, addr+len)` lies in memory the simulated device can access: a linear allocation or
/// mapped, accessible VMM range.
pub fn accessible(d: &Driver, addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(end) = addr.checked_add(len) else { return false };
    match d.memory.find(addr) {
        Some(a) => end <= a.base + a.size,
        None => d.reservations.accessible(addr, len),
    }
}

/// Checks that a device range is accessible.
pub fn check(d: &Driver, addr: u64, len: u64) -> CuRes {
    if accessible(d, addr, len) { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) }
}

/// True when `addr` is memory the driver knows (device, host, VMM); false for ordinary host memory.
pub fn known(d: &Driver, addr: u64) -> bool {
    d.memory.find(addr).is_some() || d.reservations.contains(addr)
}

fn alloc_device(dptr: *mut CUdeviceptr, size: usize, kind: Kind) -> CuRes {
    let d = driver()?;
    let ctx = current()?;
    ensure(!dptr.is_null())?;
    let p = d.memory.allocate(d, size as u64, kind, ctx.device, ctx.handle(), 0)?;
    out(dptr, p)
}

/// `cuMemAlloc_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CuResult {
    entry(|| {
        crate::capture_mode::unsafe_call()?;
        alloc_device(dptr, size, Kind::Device)
    })
}

/// `cuMemAllocManaged`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: c_uint) -> CuResult {
    entry(|| {
        // CU_MEM_ATTACH_GLOBAL (1) or CU_MEM_ATTACH_HOST (2), exactly one.
        ensure(flags == 1 || flags == 2)?;
        alloc_device(dptr, size, Kind::Managed)
    })
}

/// Pitch alignment of `cuMemAllocPitch`.
const PITCH_ALIGN: usize = 512;

/// `cuMemAllocPitch_v2`: rows padded to 512 bytes; the whole pitched size is allocated.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> CuResult {
    entry(|| {
        ensure(matches!(elem, 4 | 8 | 16) && width > 0 && height > 0 && !pitch.is_null())?;
        let p = width.checked_next_multiple_of(PITCH_ALIGN).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let total = p.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        alloc_device(dptr, total, Kind::Device)?;
        out(pitch, p)
    })
}

/// `cuMemFree_v2`: waits for the context's work first, since kernels may still use the memory.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CuResult {
    entry(|| {
        let d = driver()?;
        if dptr == 0 {
            return Ok(());
        }
        let a = d.memory.at(dptr).filter(|a| !matches!(a.kind, Kind::Host | Kind::Registered | Kind::Imported));
        let a = a.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if let Ok(ctx) = d.contexts.get(a.ctx) {
            ctx.synchronize();
        }
        d.memory.free(d, dptr).map(|_| ())
    })
}

fn alloc_host(pp: *mut *mut c_void, size: usize) -> CuRes {
    let d = driver()?;
    let ctx = current()?;
    ensure(!pp.is_null())?;
    let p = d.memory.allocate(d, size as u64, Kind::Host, ctx.device, ctx.handle(), 0)?;
    // Page-locked memory is resident from the start: a real driver faults in and locks every page
    // before returning, so the cost is the allocation's and copies into it run at copy speed.
    // SAFETY: the mapping just created, `size` bytes long; populating changes no data, and failure
    // only leaves the pages to fault in on first use.
    unsafe { libc::madvise(p as *mut c_void, size, libc::MADV_POPULATE_WRITE) };
    out(pp, p as *mut c_void)
}

/// `cuMemAllocHost_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CuResult {
    entry(|| alloc_host(pp, size))
}

/// `cuMemHostAlloc`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, _flags: c_uint) -> CuResult {
    entry(|| alloc_host(pp, size))
}

/// `cuMemFreeHost`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(d.memory.at(p as u64).is_some_and(|a| a.kind == Kind::Host))?;
        d.memory.free(d, p as u64).map(|_| ())
    })
}

fn host_register(p: *mut c_void, size: usize) -> CuRes {
    let d = driver()?;
    let ctx = current()?;
    ensure(!p.is_null() && size > 0)?;
    d.memory.register(p as u64, size as u64, ctx.device, ctx.handle())
}

/// `cuMemHostRegister`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, _flags: c_uint) -> CuResult {
    entry(|| host_register(p, size))
}

/// `cuMemHostRegister_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, _flags: c_uint) -> CuResult {
    entry(|| host_register(p, size))
}

/// `cuMemHostUnregister`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(d.memory.at(p as u64).is_some_and(|a| a.kind == Kind::Registered))?;
        d.memory.free(d, p as u64).map(|_| ())
    })
}

fn host_device_pointer(dptr: *mut CUdeviceptr, p: *mut c_void) -> CuRes {
    let d = driver()?;
    ensure(d.memory.find(p as u64).is_some_and(|a| matches!(a.kind, Kind::Host | Kind::Registered)))?;
    // Unified addressing: the device sees host memory at the same address.
    out(dptr, p as u64)
}

/// `cuMemHostGetDevicePointer`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostGetDevicePointer(dptr: *mut CUdeviceptr, p: *mut c_void, _flags: c_uint) -> CuResult {
    entry(|| host_device_pointer(dptr, p))
}

/// `cuMemHostGetDevicePointer_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostGetDevicePointer_v2(dptr: *mut CUdeviceptr, p: *mut c_void, _flags: c_uint) -> CuResult {
    entry(|| host_device_pointer(dptr, p))
}

/// `cuMemHostGetFlags`: driver-allocated host memory is portable and mapped.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(d.memory.find(p as u64).is_some_and(|a| a.kind == Kind::Host))?;
        out(flags, 0x3)
    })
}

fn mem_info(free: *mut usize, total: *mut usize) -> CuRes {
    let d = driver()?;
    let ctx = current()?;
    ensure(!free.is_null() && !total.is_null())?;
    let (t, free_now) = crate::visible::memory_info(d, ctx.device);
    out(free, free_now as usize)?;
    out(total, t as usize)
}

/// `cuMemGetInfo_v2`: free and total memory of the current context's device, across all processes.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CuResult {
    entry(|| mem_info(free, total))
}

/// `cuMemGetAddressRange_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAddressRange_v2(base: *mut CUdeviceptr, size: *mut usize, dptr: CUdeviceptr) -> CuResult {
    entry(|| {
        let d = driver()?;
        let (b, s) = match d.memory.find(dptr) {
            Some(a) => (a.base, a.size),
            None => d.reservations.mapped_range(dptr).ok_or(CUDA_ERROR_NOT_FOUND)?,
        };
        if !base.is_null() {
            out(base, b)?;
        }
        if !size.is_null() {
            out(size, s as usize)?;
        }
        Ok(())
    })
}

/// `CU_MEMORYTYPE_HOST`.
const MEMORYTYPE_HOST: c_uint = 1;
/// `CU_MEMORYTYPE_DEVICE`.
const MEMORYTYPE_DEVICE: c_uint = 2;

/// Writes one pointer attribute for `ptr`; `Err(INVALID_VALUE)` when the pointer is unknown.
fn pointer_attribute(d: &Driver, attr: c_int, data: *mut c_void, ptr: CUdeviceptr) -> CuRes {
    use CUpointer_attribute as A;
    let linear = d.memory.find(ptr);
    let vmm = if linear.is_none() { d.reservations.mapped_range(ptr) } else { None };
    let (base, size, kind, device, ctx) = match (&linear, vmm) {
        (Some(a), _) => (a.base, a.size, a.kind, a.device, a.ctx),
        (None, Some((b, s))) => (b, s, Kind::Device, d.reservations.device_of(ptr).unwrap_or(0), 0),
        (None, None) => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    let is_host = matches!(kind, Kind::Host | Kind::Registered);
    let a = attr as u32;
    match a {
        x if x == A::CU_POINTER_ATTRIBUTE_CONTEXT as u32 => out(data as *mut CUcontext, ctx as CUcontext),
        x if x == A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE as u32 => {
            out(data as *mut c_uint, if is_host { MEMORYTYPE_HOST } else { MEMORYTYPE_DEVICE })
        }
        x if x == A::CU_POINTER_ATTRIBUTE_DEVICE_POINTER as u32 => out(data as *mut CUdeviceptr, ptr),
        x if x == A::CU_POINTER_ATTRIBUTE_HOST_POINTER as u32 => {
            if is_host || kind == Kind::Managed {
                out(data as *mut *mut c_void, ptr as *mut c_void)
            } else {
                Err(CUDA_ERROR_INVALID_VALUE)
            }
        }
        x if x == A::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32 => {
            out(data as *mut c_int, (kind == Kind::Managed) as c_int)
        }
        x if x == A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL as u32 => out(data as *mut c_int, device as c_int),
        x if x == A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR as u32 => out(data as *mut CUdeviceptr, base),
        x if x == A::CU_POINTER_ATTRIBUTE_RANGE_SIZE as u32 => out(data as *mut usize, size as usize),
        x if x == A::CU_POINTER_ATTRIBUTE_MAPPED as u32 => out(data as *mut c_int, 1),
        x if x == A::CU_POINTER_ATTRIBUTE_BUFFER_ID as u32 => out(data as *mut u64, base),
        x if x == A::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as u32 => out(data as *mut c_int, 1),
        x if x == A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE as u32 => {
            out(data as *mut c_int, (linear.is_some() && kind == Kind::Device) as c_int)
        }
        x if x == A::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS as u32 => out(data as *mut c_uint, 3),
        x if x == A::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE as u32 => {
            out(data as *mut *mut c_void, linear.as_ref().map_or(0, |a| a.pool) as *mut c_void)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuPointerGetAttribute`.
#[unsafe(no_mangle)]
pub extern "C" fn cuPointerGetAttribute(data: *mut c_void, attr: CUpointer_attribute, ptr: CUdeviceptr) -> CuResult {
    // SAFETY: CUpointer_attribute is a C enum of 32 bits; reading it as an integer avoids trusting that
    // the program passed one of the values cudarc's Rust enum knows.
    let attr: c_int = unsafe { std::mem::transmute_copy(&attr) };
    entry(|| {
        ensure(!data.is_null())?;
        pointer_attribute(driver()?, attr, data, ptr)
    })
}

/// `cuPointerGetAttributes`: unknown pointers get zeroed values and success, as documented.
#[unsafe(no_mangle)]
pub extern "C" fn cuPointerGetAttributes(
    num: c_uint,
    attrs: *mut CUpointer_attribute,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(num == 0 || (!attrs.is_null() && !data.is_null()))?;
        for i in 0..num as usize {
            // SAFETY: the caller passes `num` attributes and `num` output pointers; attributes are read as
            // plain integers (see cuPointerGetAttribute).
            let (attr, slot) = unsafe { ((attrs as *const c_int).add(i).read(), *data.add(i)) };
            if slot.is_null() {
                continue;
            }
            if pointer_attribute(d, attr, slot, ptr).is_err() {
                // SAFETY: every attribute's value is at most 8 bytes; zero what the program provided.
                unsafe { (slot as *mut u8).write_bytes(0, attribute_size(attr)) };
            }
        }
        Ok(())
    })
}

/// Size of the value written for a pointer attribute.
fn attribute_size(attr: c_int) -> usize {
    use CUpointer_attribute as A;
    let a = attr as u32;
    let four = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_MAPPED,
        A::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
        A::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        A::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,
    ];
    if four.iter().any(|f| *f as u32 == a) { 4 } else { 8 }
}

/// `cuMemPrefetchAsync`: accepted; managed memory is always resident in the simulation.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPrefetchAsync(_ptr: CUdeviceptr, _count: usize, _dst: c_int, _stream: *mut c_void) -> CuResult {
    entry(|| driver().map(|_| ()))
}

/// `cuMemAdvise`: accepted; advice changes nothing in the simulation.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAdvise(_ptr: CUdeviceptr, _count: usize, _advice: c_int, _dev: c_int) -> CuResult {
    entry(|| driver().map(|_| ()))
}
