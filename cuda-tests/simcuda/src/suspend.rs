//! What `cuCheckpointProcessCheckpoint` and `cuCheckpointProcessRestore` do to a locked process's device
//! memory: every byte is copied into host memory of the process and the device memory is given back to
//! the machine (other processes can allocate it); restore takes the memory back and copies the bytes
//! back to the same device addresses.
//!
//! Device memory is host memory in the simulation, so "giving it back" means: linear allocations keep their
//! address range but lose their pages (`MADV_DONTNEED`) and all access (`PROT_NONE`); VMM physical
//! allocations (memfds) have their pages punched out and their mappings made inaccessible; and the
//! process's whole charge in the machine-wide state (allocations, VMM, arrays, context reservations) is
//! released, so a process killed while checkpointed has nothing left to reclaim.

use crate::driver::Driver;
use crate::guard::CuRes;
use crate::memory::{Kind, map_anonymous};
use crate::vmm::Physical;
use parking_lot::Mutex;
use std::ffi::c_void;
use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tessera_ffi::cuda::*;

/// Host memory holding a copy of device memory.
struct HostCopy {
    addr: u64,
    len: usize,
}

impl HostCopy {
    fn new(len: u64) -> CuRes<HostCopy> {
        Ok(HostCopy { addr: map_anonymous(len)?, len: len as usize })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `addr` is our own read-write mapping of `len` bytes, alive until drop.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

impl Drop for HostCopy {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, referenced by nothing else.
        unsafe { libc::munmap(self.addr as *mut c_void, self.len.max(1)) };
    }
}

/// One linear allocation's saved bytes.
struct Linear {
    base: u64,
    copy: HostCopy,
}

/// One VMM physical allocation's saved bytes.
struct Vmm {
    physical: Arc<Physical>,
    copy: HostCopy,
}

/// Everything a checkpoint took away, kept until the restore.
struct Saved {
    linear: Vec<Linear>,
    vmm: Vec<Vmm>,
    /// VMM mappings: (start, length, access flags) to make accessible again.
    mappings: Vec<(u64, u64, u32)>,
    /// Bytes released per device.
    charges: Vec<u64>,
    /// Bytes released in the GPU instance of the process's MIG device (which takes part of its parent's
    /// charge above), with the MIG device's compute instance creation number and physical device.
    mig: Option<(usize, u64, u64)>,
}

/// The checkpoint of this process, while it is CHECKPOINTED.
static SAVED: Mutex<Option<Saved>> = Mutex::new(None);

fn protect(addr: u64, len: u64, prot: i32) -> CuRes {
    // SAFETY: callers pass ranges of device memory this driver mapped and still owns.
    let r = unsafe { libc::mprotect(addr as *mut c_void, len.max(1) as usize, prot) };
    if r == 0 { Ok(()) } else { Err(CUDA_ERROR_UNKNOWN) }
}

fn access_prot(access: u32) -> i32 {
    match access {
        3 => libc::PROT_READ | libc::PROT_WRITE,
        1 => libc::PROT_READ,
        _ => libc::PROT_NONE,
    }
}

/// The memfd of a physical allocation as a `File`, without taking ownership of the descriptor.
fn memfd(p: &Physical) -> ManuallyDrop<File> {
    // SAFETY: the descriptor stays open as long as `p` lives; ManuallyDrop never closes it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(p.raw_fd()) })
}

/// Bytes copied between releasing pages: the host holds at most this much of an allocation twice.
const CHUNK: usize = 64 << 20;

/// Faults in `[addr, addr+len)` of one of our mappings at once, in huge pages where the host allows them
/// (as a device's memory is always there), so the copy into it runs at copy speed instead of taking a page
/// fault per 4 KiB.
fn populate(addr: u64, len: usize) {
    // SAFETY: the range lies in a read-write mapping we own; neither advice changes data, and failure only
    // leaves the pages to fault in during the copy.
    unsafe {
        libc::madvise(addr as *mut c_void, len, libc::MADV_HUGEPAGE);
        libc::madvise(addr as *mut c_void, len, libc::MADV_POPULATE_WRITE)
    };
}

/// Drops the pages of `[addr, addr+len)` of one of our private anonymous mappings.
fn discard(addr: u64, len: usize) {
    // SAFETY: the range lies in a private anonymous mapping we own whose contents are no longer needed.
    unsafe { libc::madvise(addr as *mut c_void, len, libc::MADV_DONTNEED) };
}

/// Chunks the preparing thread may populate ahead of the copy: the host holds at most this many chunks
/// of an allocation twice (besides the one being copied).
const AHEAD: usize = 2;

/// Copies `len` bytes from `src` to `dst` a chunk at a time, dropping each source chunk once copied.
///
/// The destination's pages are faulted in (populated) and the source's dropped by a second thread while
/// this one copies, as a device's copy engine moves bytes while the host prepares memory: the copy then
/// costs about the copy alone rather than the copy plus the kernel's page preparation.
fn move_bytes(src: u64, dst: u64, len: usize) {
    let chunks = len.div_ceil(CHUNK);
    let span = |k: usize| (k * CHUNK, CHUNK.min(len - k * CHUNK));
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<usize>(AHEAD);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|scope| {
        let preparer = std::thread::Builder::new().name("simgpu-prepare".into()).spawn_scoped(scope, move || {
            let drop_done = |k: usize| {
                let (at, n) = span(k);
                discard(src + at as u64, n);
            };
            for k in 0..chunks {
                let (at, n) = span(k);
                populate(dst + at as u64, n);
                if ready_tx.send(k).is_err() {
                    return;
                }
                while let Ok(k) = done_rx.try_recv() {
                    drop_done(k);
                }
            }
            drop(ready_tx);
            while let Ok(k) = done_rx.recv() {
                drop_done(k);
            }
        });
        if preparer.is_err() {
            // No second thread: prepare, copy and drop in turn on this one.
            for k in 0..chunks {
                let (at, n) = span(k);
                populate(dst + at as u64, n);
                copy_chunk(src + at as u64, dst + at as u64, n);
                discard(src + at as u64, n);
            }
            return;
        }
        for k in ready_rx.iter() {
            let (at, n) = span(k);
            copy_chunk(src + at as u64, dst + at as u64, n);
            if done_tx.send(k).is_err() {
                discard(src + at as u64, n);
            }
        }
        drop(done_tx);
    });
}

/// Copies one chunk between two of our mappings.
fn copy_chunk(src: u64, dst: u64, n: usize) {
    // SAFETY: both ranges lie in distinct live mappings of at least `n` bytes that nothing else uses now
    // (the process is locked).
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) };
}

/// Copies a linear allocation out and releases its pages.
fn save_linear(base: u64, size: u64) -> CuRes<Linear> {
    let copy = HostCopy::new(size)?;
    move_bytes(base, copy.addr, size as usize);
    protect(base, size, libc::PROT_NONE)?;
    Ok(Linear { base, copy })
}

fn restore_linear(l: Linear) -> CuRes {
    protect(l.base, l.copy.len as u64, libc::PROT_READ | libc::PROT_WRITE)?;
    move_bytes(l.copy.addr, l.base, l.copy.len);
    Ok(())
}

/// Copies a physical allocation out and punches its pages out of the memfd, a chunk at a time.
fn save_vmm(physical: Arc<Physical>) -> CuRes<Vmm> {
    let mut copy = HostCopy::new(physical.size)?;
    let file = memfd(&physical);
    let mut at = 0;
    while at < copy.len {
        let n = CHUNK.min(copy.len - at);
        populate(copy.addr + at as u64, n);
        if file.read_exact_at(&mut copy.bytes()[at..at + n], at as u64).is_err() {
            // Put back the chunks already punched out before giving up.
            let _ = file.write_all_at(&copy.bytes()[..at], 0);
            return Err(CUDA_ERROR_UNKNOWN);
        }
        // SAFETY: fallocate on our own memfd; punching a hole keeps its size and frees its pages.
        unsafe {
            libc::fallocate(
                physical.raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at as libc::off_t,
                n as libc::off_t,
            )
        };
        at += n;
    }
    Ok(Vmm { physical, copy })
}

fn restore_vmm(mut v: Vmm) -> CuRes {
    let file = memfd(&v.physical);
    let mut at = 0;
    while at < v.copy.len {
        let n = CHUNK.min(v.copy.len - at);
        file.write_all_at(&v.copy.bytes()[at..at + n], at as u64).map_err(|_| CUDA_ERROR_UNKNOWN)?;
        discard(v.copy.addr + at as u64, n);
        at += n;
    }
    Ok(())
}

/// Puts back what a partial checkpoint already took (after a failure half-way).
fn undo(saved: Saved) {
    for l in saved.linear {
        let _ = restore_linear(l);
    }
    for v in saved.vmm {
        let _ = restore_vmm(v);
    }
    for (start, len, access) in saved.mappings {
        let _ = protect(start, len, access_prot(access));
    }
}

/// Checkpoints the (locked) process's device memory into host memory and releases the device memory.
/// Managed memory cannot be checkpointed (`CUDA_ERROR_NOT_SUPPORTED`, nothing changed).
pub(crate) fn checkpoint(d: &Driver) -> CuRes {
    let allocs = d.memory.all();
    if allocs.iter().any(|a| a.kind == Kind::Managed) {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let mut saved = Saved { linear: Vec::new(), vmm: Vec::new(), mappings: Vec::new(), charges: Vec::new(), mig: None };
    for a in allocs.iter().filter(|a| matches!(a.kind, Kind::Device | Kind::Pool)) {
        match save_linear(a.base, a.size) {
            Ok(l) => saved.linear.push(l),
            Err(e) => {
                undo(saved);
                return Err(e);
            }
        }
    }
    // Every physical allocation: the registered handles and those only mappings still hold.
    let mappings = d.reservations.mappings();
    let mut physicals: Vec<Arc<Physical>> = d.physical.all().into_iter().map(|(_, p)| p).collect();
    physicals.extend(mappings.iter().map(|m| m.3.clone()));
    physicals.sort_by_key(|p| Arc::as_ptr(p) as usize);
    physicals.dedup_by_key(|p| Arc::as_ptr(p) as usize);
    for (start, len, access, _, _) in &mappings {
        saved.mappings.push((*start, *len, *access));
        let _ = protect(*start, *len, libc::PROT_NONE);
    }
    for p in physicals {
        match save_vmm(p) {
            Ok(v) => saved.vmm.push(v),
            Err(e) => {
                undo(saved);
                return Err(e);
            }
        }
    }
    d.released.clear();
    let me = d.state.me().ok_or(CUDA_ERROR_NOT_INITIALIZED)?;
    for dev in 0..d.config.devices.len() {
        let bytes = me.memory[dev].load(Ordering::Acquire);
        d.state.release(dev, bytes);
        saved.charges.push(bytes);
    }
    // A process sees at most one MIG device; its GPU instance's memory is given back too.
    if let (Some(v), Some(mig)) = (d.visible.iter().find(|v| v.mig.is_some()), &d.mig) {
        let bytes = mig.held();
        mig.uncharge(bytes);
        saved.mig = v.mig.as_ref().map(|m| (v.physical, m.serial, bytes));
    }
    *SAVED.lock() = Some(saved);
    Ok(())
}

/// Takes the device memory back and copies the saved bytes to their addresses. Without enough free
/// device memory: `CUDA_ERROR_OUT_OF_MEMORY`, and the process stays checkpointed.
pub(crate) fn restore(d: &Driver) -> CuRes {
    let mut slot = SAVED.lock();
    let saved = slot.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
    if let (Some((physical, serial, bytes)), Some(mig)) = (saved.mig, &d.mig)
        && bytes > 0
        && mig.charge(physical, serial, bytes).is_err()
    {
        *slot = Some(saved);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    for (dev, &bytes) in saved.charges.iter().enumerate() {
        if bytes > 0 && !d.state.reserve(dev, bytes) {
            for (done, &b) in saved.charges.iter().enumerate().take(dev) {
                d.state.release(done, b);
            }
            if let (Some((_, _, bytes)), Some(mig)) = (saved.mig, &d.mig) {
                mig.uncharge(bytes);
            }
            *slot = Some(saved);
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    let mut result = Ok(());
    for l in saved.linear {
        result = result.and(restore_linear(l));
    }
    for v in saved.vmm {
        result = result.and(restore_vmm(v));
    }
    for (start, len, access) in saved.mappings {
        result = result.and(protect(start, len, access_prot(access)));
    }
    result
}
