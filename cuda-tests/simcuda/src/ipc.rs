//! Device memory shared between processes (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle_v2`,
//! `cuIpcCloseMemHandle`). Simulated device memory is host memory: exporting an allocation moves it,
//! contents and address unchanged, onto a memfd the process keeps open, and the handle names that process
//! (pid and start time) and descriptor; another process of the same user opens it through
//! `/proc/<pid>/fd/<fd>` and maps it, uncharged: the allocation stays charged to the process that
//! allocated it, as on a real device. A handle whose process is gone, or that names no export, is
//! `CUDA_ERROR_INVALID_HANDLE`; a process cannot open its own (`CUDA_ERROR_INVALID_CONTEXT`).
//!
//! Events shared between processes (`cuIpcGetEventHandle`, `cuIpcOpenEventHandle`) the same way: an
//! event created with `CU_EVENT_INTERPROCESS` keeps its recorded and completed generations and the time
//! of its last completion on a memfd page ([`SharedMarks`]) its handle names; each process that opens it
//! maps the page, so a stream or a thread in one process waits for what another records.

use crate::context::current;
use crate::driver::{Driver, driver};
use crate::guard::{CuRes, ensure, entry, out};
use crate::memory::Kind;
use std::ffi::c_uint;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle};

/// What a memory handle's first bytes say.
const MAGIC: [u8; 8] = *b"simgpuIP";
/// What an event handle's first bytes say.
const EVENT_MAGIC: [u8; 8] = *b"simgpuIE";

/// A handle's contents (64 bytes, as `CUipcMemHandle` and `CUipcEventHandle` hold them).
#[derive(Clone, Copy)]
struct Handle {
    pid: u32,
    fd: i32,
    start_time: u64,
    size: u64,
    device: u32,
}

impl Handle {
    /// A handle naming descriptor `fd` of this process, with the process's start time, so that a handle
    /// outliving its process is refused rather than opened in a process that took its pid.
    fn here(fd: i32, size: u64, device: u32) -> CuRes<Handle> {
        let pid = std::process::id();
        let start_time = simgpu::process::start_time(pid).ok_or(CUDA_ERROR_OPERATING_SYSTEM)?;
        Ok(Handle { pid, fd, start_time, size, device })
    }

    fn encode(self, magic: [u8; 8]) -> [std::ffi::c_char; 64] {
        let mut bytes = [0u8; 64];
        bytes[..8].copy_from_slice(&magic);
        bytes[8..12].copy_from_slice(&self.pid.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.fd.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.start_time.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.size.to_le_bytes());
        bytes[32..36].copy_from_slice(&self.device.to_le_bytes());
        bytes.map(|b| b as std::ffi::c_char)
    }

    fn decode(reserved: &[std::ffi::c_char; 64], magic: [u8; 8]) -> CuRes<Handle> {
        let b: [u8; 64] = reserved.map(|c| c as u8);
        ensure(b[..8] == magic).map_err(|_| CUDA_ERROR_INVALID_HANDLE)?;
        let four = |at: usize| -> [u8; 4] { b[at..at + 4].try_into().expect("4 bytes") };
        let eight = |at: usize| -> [u8; 8] { b[at..at + 8].try_into().expect("8 bytes") };
        Ok(Handle {
            pid: u32::from_le_bytes(four(8)),
            fd: i32::from_le_bytes(four(12)),
            start_time: u64::from_le_bytes(eight(16)),
            size: u64::from_le_bytes(eight(24)),
            device: u32::from_le_bytes(four(32)),
        })
    }

    /// Opens the memfd the handle names in its process (which must still be the one that made it) and
    /// checks its size: `CUDA_ERROR_INVALID_HANDLE` otherwise.
    fn open_file(&self) -> CuRes<OwnedFd> {
        ensure(simgpu::process::start_time(self.pid) == Some(self.start_time))
            .map_err(|_| CUDA_ERROR_INVALID_HANDLE)?;
        let path = std::ffi::CString::new(format!("/proc/{}/fd/{}", self.pid, self.fd)).expect("no NUL");
        // SAFETY: opens a path we built; the descriptor is owned below.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        ensure(raw >= 0).map_err(|_| CUDA_ERROR_INVALID_HANDLE)?;
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our descriptor into a valid buffer.
        ensure(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0 && st.st_size as u64 == self.size)
            .map_err(|_| CUDA_ERROR_INVALID_HANDLE)?;
        Ok(fd)
    }
}

/// Maps `fd` (`size` bytes) shared, at `at` (replacing what is there) or where the kernel chooses.
fn map_shared(fd: i32, size: u64, at: Option<u64>) -> CuRes<u64> {
    let flags = libc::MAP_SHARED | if at.is_some() { libc::MAP_FIXED } else { 0 };
    // SAFETY: maps a memfd we hold (or just opened) of at least `size` bytes; with MAP_FIXED, `at` is the
    // start of an allocation of exactly `size` bytes this process owns, which the new mapping replaces.
    let p = unsafe {
        libc::mmap(at.unwrap_or(0) as *mut _, size as usize, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0)
    };
    if p == libc::MAP_FAILED { Err(CUDA_ERROR_OUT_OF_MEMORY) } else { Ok(p as u64) }
}

/// A new memfd of `size` zero bytes.
fn memfd(name: &std::ffi::CStr, size: u64) -> CuRes<OwnedFd> {
    // SAFETY: a plain memfd_create with a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    ensure(raw >= 0).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sizes the memfd we own.
    ensure(unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } == 0)
        .map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    Ok(fd)
}

/// Moves the device allocation at `base` (`size` bytes) onto a new memfd, contents and address kept.
fn export(base: u64, size: u64) -> CuRes<OwnedFd> {
    let fd = memfd(c"simgpu-ipc", size)?;
    let staging = map_shared(fd.as_raw_fd(), size, None)?;
    // SAFETY: both ranges are `size` bytes mapped in this process; the staging mapping is fresh.
    unsafe { std::ptr::copy_nonoverlapping(base as *const u8, staging as *mut u8, size as usize) };
    // SAFETY: the staging mapping is ours and no longer needed.
    unsafe { libc::munmap(staging as *mut _, size as usize) };
    map_shared(fd.as_raw_fd(), size, Some(base))?;
    Ok(fd)
}

/// Closes the export of the allocation at `base`, if any (it is being freed).
pub fn forget(d: &Driver, base: u64) {
    d.ipc_exports.lock().remove(&base);
}

/// `cuIpcGetMemHandle`: `dptr` must start a `cuMemAlloc` allocation.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcGetMemHandle(handle: *mut CUipcMemHandle, dptr: CUdeviceptr) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!handle.is_null())?;
        let a = d.memory.at(dptr).filter(|a| a.kind == Kind::Device).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let mut exports = d.ipc_exports.lock();
        let fd = match exports.entry(a.base) {
            std::collections::hash_map::Entry::Occupied(e) => e.get().as_raw_fd(),
            std::collections::hash_map::Entry::Vacant(e) => {
                // Work queued on the allocation finishes first: its contents are copied.
                if let Ok(ctx) = d.contexts.get(a.ctx) {
                    ctx.synchronize();
                }
                e.insert(export(a.base, a.size)?).as_raw_fd()
            }
        };
        out(handle, CUipcMemHandle { reserved: Handle::here(fd, a.size, a.device as u32)?.encode(MAGIC) })
    })
}

fn open(d: &Driver, handle: &CUipcMemHandle) -> CuRes<u64> {
    let h = Handle::decode(&handle.reserved, MAGIC)?;
    let ctx = current()?;
    ensure(h.pid != std::process::id()).map_err(|_| CUDA_ERROR_INVALID_CONTEXT)?;
    // The descriptor is closed once mapped (the mapping keeps the file).
    let fd = h.open_file()?;
    let base = map_shared(fd.as_raw_fd(), h.size, None)?;
    d.memory.import(base, h.size, (h.device as usize).min(d.visible.len().saturating_sub(1)), ctx.handle());
    Ok(base)
}

/// `cuIpcOpenMemHandle_v2`: maps another process's allocation; flags (lazy peer access) change nothing.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcOpenMemHandle_v2(dptr: *mut CUdeviceptr, handle: CUipcMemHandle, _flags: c_uint) -> CuResult {
    entry(|| {
        let d = driver()?;
        ensure(!dptr.is_null())?;
        out(dptr, open(d, &handle)?)
    })
}

/// `cuIpcOpenMemHandle` (the ABI before CUDA 11): as `cuIpcOpenMemHandle_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcOpenMemHandle(dptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) -> CuResult {
    cuIpcOpenMemHandle_v2(dptr, handle, flags)
}

/// `cuIpcCloseMemHandle`: unmaps memory `cuIpcOpenMemHandle` mapped.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CuResult {
    entry(|| {
        let d = driver()?;
        let a = d.memory.at(dptr).filter(|a| a.kind == Kind::Imported).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if let Ok(ctx) = d.contexts.get(a.ctx) {
            ctx.synchronize();
        }
        d.memory.free(d, a.base).map(drop)
    })
}

/// The words of an interprocess event's page.
const MARKS: usize = 3;

/// An interprocess event's page: its recorded and completed generations and the simulated time of its
/// last completion, on a memfd this process keeps open (a handle names it) and maps.
pub struct SharedMarks {
    fd: OwnedFd,
    words: *const AtomicU64,
}

// SAFETY: the page is only reached through atomics; the mapping lives as long as the value.
unsafe impl Send for SharedMarks {}
// SAFETY: as above.
unsafe impl Sync for SharedMarks {}

impl SharedMarks {
    const SIZE: u64 = (MARKS * size_of::<u64>()) as u64;

    /// A new page, all zero: never recorded.
    pub fn create() -> CuRes<SharedMarks> {
        Self::map(memfd(c"simgpu-ipc-event", Self::SIZE)?)
    }

    fn map(fd: OwnedFd) -> CuRes<SharedMarks> {
        let words = map_shared(fd.as_raw_fd(), Self::SIZE, None)? as *const AtomicU64;
        Ok(SharedMarks { fd, words })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < MARKS);
        // SAFETY: the mapping holds MARKS page-aligned u64 words for the value's life; other processes
        // change them only through atomics too.
        unsafe { &*self.words.add(i) }
    }

    /// The latest recording's generation.
    pub fn recorded(&self) -> &AtomicU64 {
        self.word(0)
    }

    /// The latest completed recording's generation.
    pub fn completed(&self) -> &AtomicU64 {
        self.word(1)
    }

    /// The simulated time of the latest completion, in nanoseconds.
    pub fn completed_at(&self) -> &AtomicU64 {
        self.word(2)
    }
}

impl Drop for SharedMarks {
    fn drop(&mut self) {
        // SAFETY: unmaps the page this value mapped and alone uses.
        unsafe { libc::munmap(self.words as *mut _, Self::SIZE as usize) };
    }
}

/// `cuIpcGetEventHandle`: `event` must have been created with `CU_EVENT_INTERPROCESS` (and so
/// `CU_EVENT_DISABLE_TIMING`), otherwise `CUDA_ERROR_INVALID_VALUE`.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcGetEventHandle(handle: *mut CUipcEventHandle, event: CUevent) -> CuResult {
    entry(|| {
        let e = driver()?.events.get(event as u64)?;
        let shared = e.shared().ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let h = Handle::here(shared.fd.as_raw_fd(), SharedMarks::SIZE, 0)?;
        out(handle, CUipcEventHandle { reserved: h.encode(EVENT_MAGIC) })
    })
}

/// `cuIpcOpenEventHandle`: an event another process shared, which behaves as one created here with
/// `CU_EVENT_DISABLE_TIMING`; destroyed with `cuEventDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcOpenEventHandle(event: *mut CUevent, handle: CUipcEventHandle) -> CuResult {
    entry(|| {
        let d = driver()?;
        current()?;
        ensure(!event.is_null())?;
        let h = Handle::decode(&handle.reserved, EVENT_MAGIC)?;
        let shared = SharedMarks::map(h.open_file()?)?;
        let e = d.events.insert(Arc::new(crate::event::Event::opened(shared)));
        out(event, e as CUevent)
    })
}
