//! Virtual memory management with real remapping semantics: reservations are `PROT_NONE` address
//! ranges, physical allocations are memfds, and mapping is `mmap(MAP_FIXED | MAP_SHARED)`, so data
//! written through one mapping is there when the same handle is mapped elsewhere.

use crate::driver::driver;
use crate::guard::{CuRes, ensure, entry, input, out};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{
    CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemLocation,
};

/// Allocation granularity, minimum and recommended.
pub const GRANULARITY: u64 = 2 << 20;

/// A physical allocation made by `cuMemCreate`.
pub struct Physical {
    /// Handle it was created under.
    pub handle: u64,
    /// Device index.
    pub device: usize,
    /// Bytes (a multiple of the granularity).
    pub size: u64,
    /// The memfd holding its pages; taken by `drop` to keep for reuse.
    fd: Option<OwnedFd>,
    /// `cuMemRetainAllocationHandle` calls made while the handle was registered; each takes one
    /// `cuMemRelease` before the handle goes away.
    retains: AtomicU32,
}

impl Drop for Physical {
    /// Runs once the handle is released and no mapping holds it: the device memory goes back.
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            d.uncharge(self.device, self.size);
            if let Some(fd) = self.fd.take() {
                d.released.keep(self.device, self.size, fd, d.config.devices[self.device].total_memory);
            }
        }
    }
}

impl Physical {
    /// The memfd holding the allocation's pages (-1 once given up).
    pub(crate) fn raw_fd(&self) -> c_int {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }
}

/// Released physical memory kept for the next `cuMemCreate` of the same size. A real device's memory
/// is always there: creating an allocation on it does not fault pages in and copying into it runs at
/// copy speed. A fresh memfd's pages instead come into existence on first write, zeroed by the host,
/// which made every copy into new physical memory several times slower than into memory used before.
/// Like a real device, reused memory keeps what was last written to it.
#[derive(Default)]
pub struct Released {
    /// (device, size, memfd), most recently released last.
    kept: Mutex<Vec<(usize, u64, OwnedFd)>>,
}

impl Released {
    /// Keeps `fd` unless the device's kept memory would exceed its size (`limit`).
    fn keep(&self, device: usize, size: u64, fd: OwnedFd, limit: u64) {
        let mut kept = self.kept.lock();
        let held: u64 = kept.iter().filter(|k| k.0 == device).map(|k| k.1).sum();
        if held + size <= limit {
            kept.push((device, size, fd));
        }
    }

    /// Gives every kept memfd back to the host (a checkpointed process keeps no device memory).
    pub(crate) fn clear(&self) {
        self.kept.lock().clear();
    }

    /// A kept memfd of exactly `size` bytes on `device`.
    fn take(&self, device: usize, size: u64) -> Option<OwnedFd> {
        let mut kept = self.kept.lock();
        let i = kept.iter().rposition(|k| k.0 == device && k.1 == size)?;
        Some(kept.swap_remove(i).2)
    }
}

/// Maps the pages of `[start, end)` that hold data (`fd` from `offset` on) all at once, as a device's
/// page tables are written when access is granted: one call instead of a host page fault per 4 KiB on
/// first use, which made copying into memory used before several times slower than a copy. Pages
/// never written stay unbacked until written, so mapping memory that is never used costs nothing.
/// Read-populating a shared writable mapping maps the pages writable, a batch at a time.
fn populate_written(fd: c_int, start: u64, end: u64, offset: u64) {
    let file_end = offset + (end - start);
    let mut at = offset;
    while at < file_end {
        // SAFETY: lseek on a memfd we own; failure (no data further on) ends the walk.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 || data as u64 >= file_end {
            return;
        }
        // SAFETY: as above; a memfd ends in a hole, so this finds one.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        let hole = if hole < 0 { file_end } else { (hole as u64).min(file_end) };
        let va = start + (data as u64 - offset);
        // SAFETY: the range lies in one of our MAP_SHARED mappings with access granted; populating
        // changes no data. Failure only means the pages fault in on first use instead.
        unsafe { libc::madvise(va as *mut c_void, (hole - data as u64) as usize, libc::MADV_POPULATE_READ) };
        at = hole;
    }
}

/// A new memfd of `size` bytes, or `None` if the host has no room.
fn new_memfd(size: u64) -> Option<OwnedFd> {
    // SAFETY: memfd_create with a static NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"simgpu-vmm".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on the descriptor just created.
    (unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } == 0).then_some(fd)
}

struct Mapping {
    len: u64,
    /// Where in the physical allocation it starts.
    offset: u64,
    physical: Arc<Physical>,
    access: u32,
}

struct Reservation {
    size: u64,
    /// Mappings by absolute start address.
    maps: BTreeMap<u64, Mapping>,
}

/// Every address reservation of the process.
#[derive(Default)]
pub struct Reservations {
    inner: Mutex<BTreeMap<u64, Reservation>>,
}

fn reservation_of(map: &BTreeMap<u64, Reservation>, addr: u64) -> Option<(u64, &Reservation)> {
    let (&base, r) = map.range(..=addr).next_back()?;
    (addr < base + r.size).then_some((base, r))
}

fn mapping_of(r: &Reservation, addr: u64) -> Option<(u64, &Mapping)> {
    let (&start, m) = r.maps.range(..=addr).next_back()?;
    (addr < start + m.len).then_some((start, m))
}

/// Replaces `[addr, addr+len)` with inaccessible anonymous memory (the reservation's resting state).
fn reset_range(addr: u64, len: u64) -> CuRes {
    // SAFETY: the range lies inside a reservation this module owns; MAP_FIXED replaces only that range.
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED { Err(CUDA_ERROR_UNMAP_FAILED) } else { Ok(()) }
}

impl Reservations {
    /// True when `addr` lies in a reservation.
    pub fn contains(&self, addr: u64) -> bool {
        reservation_of(&self.inner.lock(), addr).is_some()
    }

    /// True when every byte of `[addr, addr+len)` is mapped with read-write access.
    pub fn accessible(&self, addr: u64, len: u64) -> bool {
        let map = self.inner.lock();
        let Some((_, r)) = reservation_of(&map, addr) else { return false };
        let end = addr + len;
        let mut at = addr;
        while at < end {
            match mapping_of(r, at) {
                Some((start, m)) if m.access == 3 => at = start + m.len,
                _ => return false,
            }
        }
        true
    }

    /// The mapping containing `addr`, as `(start, length)`.
    pub fn mapped_range(&self, addr: u64) -> Option<(u64, u64)> {
        let map = self.inner.lock();
        let (_, r) = reservation_of(&map, addr)?;
        mapping_of(r, addr).map(|(s, m)| (s, m.len))
    }

    /// Every mapping of every reservation: `(start, length, access flags, physical allocation, offset)`.
    pub(crate) fn mappings(&self) -> Vec<(u64, u64, u32, Arc<Physical>, u64)> {
        let map = self.inner.lock();
        map.values()
            .flat_map(|r| r.maps.iter().map(|(&s, m)| (s, m.len, m.access, m.physical.clone(), m.offset)))
            .collect()
    }

    /// Device of the physical memory mapped at `addr`.
    pub fn device_of(&self, addr: u64) -> Option<usize> {
        let map = self.inner.lock();
        let (_, r) = reservation_of(&map, addr)?;
        mapping_of(r, addr).map(|(_, m)| m.physical.device)
    }
}

/// Maps `size` bytes of `PROT_NONE` address space aligned to `align`, at `hint` when that range is free
/// (the driver treats the requested address as a hint).
fn reserve_range(hint: u64, size: u64, align: u64) -> Option<u64> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if hint != 0 && hint.is_multiple_of(align) {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the new one is PROT_NONE.
        let p = unsafe {
            libc::mmap(hint as *mut c_void, size as usize, libc::PROT_NONE, flags | libc::MAP_FIXED_NOREPLACE, -1, 0)
        };
        if p != libc::MAP_FAILED {
            return Some(p as u64);
        }
    }
    let span = size.checked_add(align)?;
    // SAFETY: a new PROT_NONE mapping at an address of the kernel's choosing.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), span as usize, libc::PROT_NONE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return None;
    }
    // Trim the over-allocation down to an aligned range of exactly `size`.
    let start = p as u64;
    let base = start.next_multiple_of(align);
    let (head, tail) = (base - start, span - (base - start) - size);
    // SAFETY: both pieces lie in the mapping just made and nothing uses them.
    unsafe {
        if head > 0 {
            libc::munmap(p, head as usize);
        }
        if tail > 0 {
            libc::munmap((base + size) as *mut c_void, tail as usize);
        }
    }
    Some(base)
}

fn aligned(v: u64) -> bool {
    v.is_multiple_of(GRANULARITY)
}

/// `cuMemGetAllocationGranularity`: 2 MiB for both the minimum and recommended granularity.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAllocationGranularity(
    g: *mut usize,
    prop: *const CUmemAllocationProp,
    _option: c_int,
) -> CuResult {
    entry(|| {
        driver()?;
        ensure(!prop.is_null())?;
        out(g, GRANULARITY as usize)
    })
}

/// `cuMemAddressReserve`: a `PROT_NONE` range aligned to `alignment` (default: the granularity), at `addr`
/// when that range is free.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    _flags: c_ulonglong,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        let size = size as u64;
        let align = if alignment == 0 { GRANULARITY } else { alignment as u64 };
        ensure(!ptr.is_null() && size > 0 && aligned(size) && align.is_power_of_two())?;
        let base = reserve_range(addr, size, align).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        d.reservations.inner.lock().insert(base, Reservation { size, maps: BTreeMap::new() });
        out(ptr, base)
    })
}

/// `cuMemAddressFree`: the whole reservation, which must have nothing mapped.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CuResult {
    entry(|| {
        let d = driver()?;
        let mut map = d.reservations.inner.lock();
        let r = map.get(&ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ensure(r.size == size as u64 && r.maps.is_empty())?;
        map.remove(&ptr);
        // SAFETY: the reservation is ours and nothing is mapped in it any more.
        unsafe { libc::munmap(ptr as *mut c_void, size) };
        Ok(())
    })
}

/// The fields of `CUmemAllocationProp` the simulation uses, read as integers.
fn prop_device(prop: *const CUmemAllocationProp) -> CuRes<c_int> {
    // type, requestedHandleTypes, location.type, location.id
    let [kind, _handles, location_type, id] = input(prop as *const [c_int; 4])?;
    // CU_MEM_ALLOCATION_TYPE_PINNED and CU_MEM_LOCATION_TYPE_DEVICE.
    ensure(kind == 1 && location_type == 1)?;
    Ok(id)
}

/// `cuMemCreate`: physical memory on the device in the properties, charged at once.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        let device = d.device(prop_device(prop)?)?;
        let size = size as u64;
        ensure(!handle.is_null() && size > 0 && aligned(size) && flags == 0)?;
        d.charge(device, size)?;
        let Some(fd) = d.released.take(device, size).or_else(|| new_memfd(size)) else {
            d.uncharge(device, size);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        };
        let h = d.physical.insert_with(|handle| {
            Arc::new(Physical { handle, device, size, fd: Some(fd), retains: AtomicU32::new(0) })
        });
        out(handle, h)
    })
}

/// `cuMemRelease`: the memory is freed once nothing maps it.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CuResult {
    entry(|| {
        let d = driver()?;
        let p = d.physical.get(handle)?;
        if p.retains.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1)).is_ok() {
            return Ok(());
        }
        d.physical.remove(handle).map(|_| ())
    })
}

/// `cuMemMap`: maps `size` bytes of the handle from `offset` at `ptr`, with no access until
/// `cuMemSetAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        let (size, offset) = (size as u64, offset as u64);
        let physical = d.physical.get(handle)?;
        ensure(flags == 0 && size > 0 && aligned(ptr) && aligned(size) && aligned(offset))?;
        ensure(offset.checked_add(size).is_some_and(|e| e <= physical.size))?;
        let mut map = d.reservations.inner.lock();
        let (base, r) = reservation_of(&map, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ensure(ptr + size <= base + r.size)?;
        let overlaps = r.maps.range(..ptr + size).next_back().is_some_and(|(s, m)| s + m.len > ptr);
        if overlaps {
            return Err(CUDA_ERROR_ALREADY_MAPPED);
        }
        // SAFETY: the range is inside our reservation and unmapped; MAP_FIXED replaces the PROT_NONE
        // placeholder with the memfd's pages.
        let p = unsafe {
            libc::mmap(
                ptr as *mut c_void,
                size as usize,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                physical.raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CUDA_ERROR_MAP_FAILED);
        }
        let r = map.get_mut(&base).expect("found above");
        r.maps.insert(ptr, Mapping { len: size, offset, physical, access: 0 });
        Ok(())
    })
}

/// `cuMemUnmap`: unmaps every mapping inside `[ptr, ptr+size)`; each must lie wholly inside it.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CuResult {
    entry(|| {
        let d = driver()?;
        let size = size as u64;
        let mut map = d.reservations.inner.lock();
        let (base, r) = reservation_of(&map, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        ensure(size > 0 && ptr + size <= base + r.size)?;
        let inside: Vec<u64> = r.maps.range(ptr..ptr + size).map(|(s, _)| *s).collect();
        ensure(!inside.is_empty() && inside.iter().all(|s| s + r.maps[s].len <= ptr + size))?;
        ensure(mapping_of(r, ptr).is_some_and(|(s, _)| s == ptr))?;
        reset_range(ptr, size)?;
        let r = map.get_mut(&base).expect("found above");
        for s in inside {
            r.maps.remove(&s);
        }
        Ok(())
    })
}

/// `cuMemSetAccess`: read-write (3), read-only (1) or none (0) for every mapping in the range.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(count > 0 && !desc.is_null())?;
        // location.type, location.id, flags
        let [_, _, access] = input(desc as *const [c_int; 3])?;
        let access = access as u32;
        ensure(access <= 3 && access != 2)?;
        let mut map = d.reservations.inner.lock();
        let (base, r) = reservation_of(&map, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let end = ptr + size as u64;
        ensure(end <= base + r.size)?;
        let mut at = ptr;
        while at < end {
            let (s, m) = mapping_of(r, at).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            at = s + m.len;
        }
        let prot = match access {
            3 => libc::PROT_READ | libc::PROT_WRITE,
            1 => libc::PROT_READ,
            _ => libc::PROT_NONE,
        };
        // SAFETY: every page of the range is one of our MAP_SHARED mappings (checked above).
        if unsafe { libc::mprotect(ptr as *mut c_void, size, prot) } != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let r = map.get_mut(&base).expect("found above");
        for (&start, m) in r.maps.range_mut(..end).filter(|(s, m)| **s + m.len > ptr) {
            m.access = access;
            if access != 0 {
                let (from, to) = (start.max(ptr), (start + m.len).min(end));
                populate_written(m.physical.raw_fd(), from, to, m.offset + (from - start));
            }
        }
        Ok(())
    })
}

/// `cuMemGetAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAccess(
    flags: *mut c_ulonglong,
    _location: *const CUmemLocation,
    ptr: CUdeviceptr,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        let map = d.reservations.inner.lock();
        let (_, r) = reservation_of(&map, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let (_, m) = mapping_of(r, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(flags, m.access as c_ulonglong)
    })
}

/// `cuMemRetainAllocationHandle`: the handle mapped at `addr`, retained again.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CuResult {
    entry(|| {
        let d = driver()?;
        let physical = {
            let map = d.reservations.inner.lock();
            let (_, r) = reservation_of(&map, addr as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            mapping_of(r, addr as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?.1.physical.clone()
        };
        let h = physical.handle;
        if d.physical.get(h).is_ok() {
            physical.retains.fetch_add(1, Ordering::AcqRel);
        } else {
            d.physical.reinsert(h, physical);
        }
        out(handle, h)
    })
}

/// `cuMemGetAllocationPropertiesFromHandle`: pinned device memory on the handle's device.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut CUmemAllocationProp,
    handle: CUmemGenericAllocationHandle,
) -> CuResult {
    entry(|| {
        let p = driver()?.physical.get(handle)?;
        ensure(!prop.is_null())?;
        // SAFETY: prop points to a writable CUmemAllocationProp; zero it, then set the integer fields.
        unsafe { (prop as *mut u8).write_bytes(0, std::mem::size_of::<CUmemAllocationProp>()) };
        out(prop as *mut [c_int; 4], [1, 0, 1, p.device as c_int])
    })
}
