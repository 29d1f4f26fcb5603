//! What `cuCheckpointProcessCheckpoint` and `cuCheckpointProcessRestore` do to a locked process's device
//! memory: every byte is copied into host memory of the process and the device memory is given back to
//! the machine (other processes can allocate it); restore takes the memory back and copies the bytes
//! back to the same device addresses.
//!
//! Device memory is host memory in the simulation. A real device's memory never goes back to the host's
//! kernel: freeing it returns it to the device, and taking it again costs the host nothing. So here the
//! host pages behind a checkpointed range stay where they are while the device memory is "given back":
//! the process's whole charge in the machine-wide state (allocations, VMM, arrays, context reservations)
//! is released, so other processes can allocate it and a process killed while checkpointed has nothing
//! left to reclaim; and its contents are lost as released memory's are: one word of every page is
//! overwritten ([`POISON`]), so a restore that failed to copy a page back shows in the data. Access is
//! left as it was: nothing can touch the range while the process is locked (every driver entry waits at
//! the gate, and the lock drained the streams), and changing the protection of gigabytes of 4 KiB pages
//! would cost the restore a page-table walk and a write fault per page. Restore copies every byte back and frees the host copy.
//! (Giving the pages back to the host's kernel instead would make every restore pay the kernel's zeroing
//! of fresh pages, which has no counterpart on a device: `benches/c/fresh_page_copy.c`.)

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
    /// Bytes of the copy.
    len: usize,
    /// Bytes of the mapping (at least `len`: a reused spare may be larger).
    mapped: usize,
}

/// Host copies given back since the last checkpoint: their pages are freed lazily (`MADV_FREE`, so the
/// kernel takes them whenever it needs memory) and the next checkpoint reuses those still there, as a
/// process that checkpoints again and again would keep its staging memory. What a checkpoint did not
/// reuse is unmapped at its end, so at most one checkpoint's worth is kept.
static SPARE: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());

impl HostCopy {
    fn new(len: u64) -> CuRes<HostCopy> {
        let want = usize::try_from(len).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        let mut spare = SPARE.lock();
        let fit = (spare.iter().enumerate()).filter(|(_, s)| s.1 >= want).min_by_key(|(_, s)| s.1).map(|(i, _)| i);
        if let Some(i) = fit {
            let (addr, mapped) = spare.swap_remove(i);
            return Ok(HostCopy { addr, len: want, mapped });
        }
        Ok(HostCopy { addr: map_anonymous(len)?, len: want, mapped: want.max(1) })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `addr` is our own read-write mapping of at least `len` bytes, alive until drop.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

impl Drop for HostCopy {
    /// Frees the pages lazily and keeps the mapping for the next checkpoint.
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, referenced by nothing else; its contents are no longer needed.
        unsafe { libc::madvise(self.addr as *mut c_void, self.mapped, libc::MADV_FREE) };
        SPARE.lock().push((self.addr, self.mapped));
    }
}

/// Unmaps the spare host copies no checkpoint reused.
fn unmap_spares() {
    for (addr, mapped) in SPARE.lock().drain(..) {
        // SAFETY: a mapping made by `HostCopy::new`, which no `HostCopy` holds any more.
        unsafe { libc::munmap(addr as *mut c_void, mapped) };
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
    /// Bytes released per device.
    charges: Vec<u64>,
    /// Bytes released in the GPU instance of the process's MIG device (which takes part of its parent's
    /// charge above), with the MIG device's compute instance creation number and physical device.
    mig: Option<(usize, u64, u64)>,
}

/// The checkpoint of this process, while it is CHECKPOINTED.
static SAVED: Mutex<Option<Saved>> = Mutex::new(None);

/// The memfd of a physical allocation as a `File`, without taking ownership of the descriptor.
fn memfd(p: &Physical) -> ManuallyDrop<File> {
    // SAFETY: the descriptor stays open as long as `p` lives; ManuallyDrop never closes it.
    ManuallyDrop::new(unsafe { File::from_raw_fd(p.raw_fd()) })
}

/// Bytes copied at once. Large enough for the host's `memcpy` to take its fastest path for large copies
/// (on glibc 2.36 here: 64 MiB copies run at ~60% of the speed of 256 MiB ones,
/// `gcc -O2 benches/c/copy_sizes.c -o /tmp/copy_sizes && /tmp/copy_sizes`).
const CHUNK: usize = 256 << 20;

/// Faults in `[addr, addr+len)` of a host copy at once, in huge pages where the host allows them, so the
/// copy into it runs at copy speed instead of taking a page fault per 4 KiB.
fn populate(addr: u64, len: usize) {
    // SAFETY: the range lies in a read-write mapping we own; neither advice changes data, and failure only
    // leaves the pages to fault in during the copy.
    unsafe {
        libc::madvise(addr as *mut c_void, len, libc::MADV_HUGEPAGE);
        libc::madvise(addr as *mut c_void, len, libc::MADV_POPULATE_WRITE)
    };
}

/// The word a checkpoint leaves at the start of every page of the device memory it released.
const POISON: u64 = 0xdead_c0de_c4ec_4b01;

/// Host page size the poisoning steps by.
const PAGE: usize = 4096;

/// Overwrites the first word of every page of `[addr, addr+len)`: released device memory keeps nothing.
fn poison(addr: u64, len: usize) {
    for at in (0..len).step_by(PAGE) {
        // SAFETY: the range lies in a read-write mapping we own that nothing else uses now (the process is
        // locked); page starts are 8-byte aligned.
        unsafe { std::ptr::write_volatile((addr + at as u64) as *mut u64, POISON) };
    }
}

/// Chunks the preparing thread may populate ahead of the copy.
const AHEAD: usize = 2;

/// Copies `len` bytes of device memory at `src` into a host copy at `dst` a chunk at a time, releasing
/// ([`poison`]ing) each source chunk once copied.
///
/// The destination's pages are faulted in (populated) and the copied source chunks poisoned by a second
/// thread while this one copies, as a device's copy engine moves bytes while the host prepares memory: the
/// copy then costs about the copy alone rather than the copy plus the kernel's page preparation.
fn copy_out(src: u64, dst: u64, len: usize) {
    let chunks = len.div_ceil(CHUNK);
    let span = |k: usize| (k * CHUNK, CHUNK.min(len - k * CHUNK));
    let release = |k: usize| {
        let (at, n) = span(k);
        poison(src + at as u64, n);
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<usize>(AHEAD);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<usize>();
    std::thread::scope(|scope| {
        let preparer = std::thread::Builder::new().name("simgpu-prepare".into()).spawn_scoped(scope, move || {
            for k in 0..chunks {
                let (at, n) = span(k);
                populate(dst + at as u64, n);
                if ready_tx.send(k).is_err() {
                    return;
                }
                while let Ok(k) = done_rx.try_recv() {
                    release(k);
                }
            }
            drop(ready_tx);
            while let Ok(k) = done_rx.recv() {
                release(k);
            }
        });
        if preparer.is_err() {
            // No second thread: prepare, copy and release each chunk in turn on this one.
            for k in 0..chunks {
                let (at, n) = span(k);
                populate(dst + at as u64, n);
                copy_chunk(src + at as u64, dst + at as u64, n);
                release(k);
            }
            return;
        }
        for k in ready_rx.iter() {
            let (at, n) = span(k);
            copy_chunk(src + at as u64, dst + at as u64, n);
            if done_tx.send(k).is_err() {
                release(k);
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

/// Copies a linear allocation out and releases it (its contents lost).
fn save_linear(base: u64, size: u64) -> CuRes<Linear> {
    let copy = HostCopy::new(size)?;
    copy_out(base, copy.addr, size as usize);
    Ok(Linear { base, copy })
}

fn restore_linear(l: Linear) -> CuRes {
    // The device pages are still there (see the module's comment): one copy, with nothing to prepare.
    copy_chunk(l.copy.addr, l.base, l.copy.len);
    Ok(())
}

/// Copies a physical allocation out and releases it (its contents lost), a chunk at a time.
fn save_vmm(physical: Arc<Physical>) -> CuRes<Vmm> {
    let mut copy = HostCopy::new(physical.size)?;
    let file = memfd(&physical);
    let mut at = 0;
    while at < copy.len {
        let n = CHUNK.min(copy.len - at);
        populate(copy.addr + at as u64, n);
        if file.read_exact_at(&mut copy.bytes()[at..at + n], at as u64).is_err() || !poison_memfd(&physical, at, n) {
            // Put back the chunks already released before giving up (this one was not: poisoning maps the
            // chunk first, and a failed read comes before it).
            let _ = file.write_all_at(&copy.bytes()[..at], 0);
            return Err(CUDA_ERROR_UNKNOWN);
        }
        at += n;
    }
    Ok(Vmm { physical, copy })
}

/// [`poison`]s `[at, at+n)` of a physical allocation's memfd through a mapping of its own.
fn poison_memfd(p: &Physical, at: usize, n: usize) -> bool {
    // SAFETY: a fresh shared mapping of a chunk of our own memfd (offsets are chunk-aligned, so page-aligned),
    // unmapped below; the memfd is at least `at + n` bytes long.
    let m = unsafe {
        libc::mmap(std::ptr::null_mut(), n, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, p.raw_fd(), at as i64)
    };
    if m == libc::MAP_FAILED {
        return false;
    }
    poison(m as u64, n);
    // SAFETY: the mapping made above, referenced by nothing else.
    unsafe { libc::munmap(m, n) };
    true
}

fn restore_vmm(mut v: Vmm) -> CuRes {
    let file = memfd(&v.physical);
    let mut at = 0;
    while at < v.copy.len {
        let n = CHUNK.min(v.copy.len - at);
        file.write_all_at(&v.copy.bytes()[at..at + n], at as u64).map_err(|_| CUDA_ERROR_UNKNOWN)?;
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
}

/// Checkpoints the (locked) process's device memory into host memory and releases the device memory.
/// Managed memory cannot be checkpointed (`CUDA_ERROR_NOT_SUPPORTED`, nothing changed).
pub(crate) fn checkpoint(d: &Driver) -> CuRes {
    let allocs = d.memory.all();
    if allocs.iter().any(|a| a.kind == Kind::Managed) {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let mut saved = Saved { linear: Vec::new(), vmm: Vec::new(), charges: Vec::new(), mig: None };
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
    unmap_spares();
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
    result
}
