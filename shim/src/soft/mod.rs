//! Soft memory mode (`TESSERA_MODE=soft`, or a vGPU created with `--mode soft`): the process's device
//! allocations live in per-device virtual address spaces of its own ([`space`]), backed by physical
//! chunks Tessera pools, compacts and swaps to host memory.
//!
//! - Small allocations are blocks of lock-free [`slab`]s; large ones take whole pages.
//! - Launches and copies take a [`residency`] hold first; swapped-out pages come back before the call.
//! - A [`pager`] thread carries out the daemon's requests (swap out, defragment), compacts on its own
//!   above a fragmentation threshold and publishes the process's byte counts in its region slot.
//! - When the device has no memory left, a process of a vGPU the daemon manages asks for it (its
//!   vGPU's `want`) and retries while the daemon has vGPUs that are not running swap out.
//!
//! Without soft mode [`active`] is `None` and nothing here runs.

mod backend;
pub mod calls;
#[cfg(test)]
mod fake;
mod pager;
mod residency;
mod slab;
mod space;
#[cfg(test)]
mod space_tests;

use crate::config::Mode;
use crate::guard::{Res, Status};
use crate::{log, quota};
use backend::{Backend, Driver};
use residency::{Hold, RESIDENT, Residency};
use space::{Space, Totals};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};
use tessera_region::{MAX_DEVICES, ProcSlot, VgpuSlot, flags, wanted};

/// Address space reserved per device (virtual only: it costs no device memory).
const SPACE_BYTES: u64 = 256 << 30;
/// Pages per physical chunk: the unit of device memory created, pooled and given back.
const CHUNK_PAGES: usize = 8;
/// How often a caller waiting for device memory tries again.
const RETRY: Duration = Duration::from_millis(2);

/// The process's soft memory.
pub struct Soft {
    spaces: [OnceLock<Result<Space<Driver>, Status>>; MAX_DEVICES],
    residency: Residency,
    /// Held while data moves (eviction, restore, compaction).
    moving: Mutex<()>,
    /// This process's region slot, where its byte counts are published (`None` without a quota).
    slot: Option<&'static ProcSlot>,
    /// The managed vGPU the daemon's requests come from (`None` standalone).
    vgpu: Option<&'static VgpuSlot>,
    pager: OnceLock<()>,
    /// Longest an allocation, launch or copy waits for device memory other vGPUs are asked to free.
    memory_wait: Duration,
}

static SOFT: OnceLock<Option<Soft>> = OnceLock::new();

/// The process's soft memory; `None` in hard mode.
#[inline]
pub fn active() -> Option<&'static Soft> {
    SOFT.get_or_init(set_up).as_ref()
}

fn set_up() -> Option<Soft> {
    let config = crate::init::config().ok()?;
    let quota = quota::active().ok().flatten();
    let managed = quota.map(|q| q.slot().0).filter(|v| v.flags() & flags::MANAGED != 0);
    let soft = match (config.mode, managed) {
        (asked, Some(_)) => {
            // The mode recorded in this process's slot when it joined: what the daemon counts it as.
            let soft = quota.is_some_and(|q| q.me().is_soft());
            if asked.is_some_and(|m| (m == Mode::Soft) != soft) {
                log::warn(format_args!(
                    "TESSERA_MODE is ignored: the daemon manages this vGPU and its mode ({}) applies",
                    if soft { "soft" } else { "hard" }
                ));
            }
            soft
        }
        (asked, None) => asked == Some(Mode::Soft),
    };
    if !soft {
        return None;
    }
    log::info(format_args!("memory mode: soft (allocations virtualized, pooled, movable)"));
    Some(Soft {
        spaces: std::array::from_fn(|_| OnceLock::new()),
        residency: Residency::default(),
        moving: Mutex::new(()),
        slot: quota.map(|q| q.me()),
        vgpu: managed,
        pager: OnceLock::new(),
        memory_wait: Duration::from_nanos(config.memory_wait_ns),
    })
}

/// A hold keeping `s`'s memory on the device while a launch or copy is submitted; swapped-out memory is
/// brought back first.
#[inline(always)]
fn hold(s: &'static Soft) -> Res<Hold<'static>> {
    match s.residency.try_hold() {
        Some(h) => Ok(h),
        None => hold_after_bringing_back(s),
    }
}

/// [`hold`] when the memory is not resident (or is being moved): waits for it to come back.
#[cold]
fn hold_after_bringing_back(s: &'static Soft) -> Res<Hold<'static>> {
    loop {
        s.bring_back()?;
        if let Some(h) = s.residency.try_hold() {
            return Ok(h);
        }
    }
}

/// Runs a launch or copy `real` under a [`hold`] (in soft mode). Inlined into every launch and copy
/// handler: in hard mode it is one load and a compare.
#[inline(always)]
pub fn around(real: impl FnOnce() -> Status) -> Res {
    let Some(s) = active() else { return crate::guard::status(real()) };
    let _hold = hold(s)?;
    crate::guard::status(real())
}

/// Nanoseconds since `t`.
fn ns_since(t: Instant) -> u64 {
    t.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

impl Soft {
    fn lock_moving(&self) -> MutexGuard<'_, ()> {
        self.moving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The spaces created so far, with their devices.
    fn spaces(&self) -> impl Iterator<Item = (usize, &Space<Driver>)> {
        self.spaces.iter().enumerate().filter_map(|(d, s)| Some((d, s.get()?.as_ref().ok()?)))
    }

    /// Device `device`'s space, reserved on first use in context `ctx`.
    fn space(&'static self, device: usize, ctx: u64) -> Res<&'static Space<Driver>> {
        let space = self.spaces[device]
            .get_or_init(|| {
                Space::new(Driver::new(device, ctx), SPACE_BYTES, CHUNK_PAGES).inspect_err(|e| {
                    log::error(format_args!("soft mode: cannot reserve address space on device {device}: error {e}"))
                })
            })
            .as_ref()
            .map_err(|e| *e)?;
        self.pager.get_or_init(|| pager::start(self));
        Ok(space)
    }

    /// The space holding `ptr`.
    fn owner(&self, ptr: u64) -> Option<(usize, &Space<Driver>)> {
        self.spaces().find(|(_, s)| s.contains(ptr))
    }

    /// Allocates `size` bytes on the calling thread's device, charged to the quota as `what`.
    pub fn alloc(&'static self, size: u64, what: &'static str) -> Res<u64> {
        if size == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let site = crate::current::current_site().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        let quota = quota::active()?;
        if let Some(q) = quota {
            q.reserve(site.device, size, what)?;
        }
        let space = self.space(site.device, site.ctx);
        let result = space.and_then(|s| self.with_memory(site.device, || s.chunk_bytes(), || s.alloc(size)));
        match result {
            Ok(va) => {
                if space.is_ok_and(|s| size > s.page_size() / 2) {
                    self.publish();
                }
                Ok(va)
            }
            Err(e) => {
                if let Some(q) = quota {
                    q.release(site.device, size);
                }
                Err(e)
            }
        }
    }

    /// Frees a soft allocation; `None` when `ptr` is not in a soft space.
    pub fn free(&self, ptr: u64) -> Option<Res> {
        let (device, space) = self.owner(ptr)?;
        Some(space.free(ptr).map(|bytes| {
            if let Ok(Some(q)) = quota::active() {
                q.release(device, bytes);
            }
            if bytes > space.page_size() / 2 {
                self.publish();
            }
        }))
    }

    /// The soft allocation containing `ptr`: its start, size and device.
    pub fn range(&self, ptr: u64) -> Option<(u64, u64, usize)> {
        let (device, space) = self.owner(ptr)?;
        space.range(ptr).map(|(b, s)| (b, s, device))
    }

    /// Whether `ptr` lies in a soft space.
    pub fn owns(&self, ptr: u64) -> bool {
        self.owner(ptr).is_some()
    }

    /// The context soft memory of device `device` answers as its own.
    pub fn context_of(&self, device: usize) -> u64 {
        self.spaces().find(|(d, _)| *d == device).map_or(0, |(_, s)| s.backend().context())
    }

    /// Runs `f` until it succeeds or fails with something other than out-of-memory; while it runs out of
    /// memory, and the daemon manages the vGPU, asks for `bytes()` on `device` and retries for up to
    /// `TESSERA_MEMORY_WAIT`.
    fn with_memory<T>(&self, device: usize, bytes: impl Fn() -> u64, mut f: impl FnMut() -> Res<T>) -> Res<T> {
        let mut asked = Asked::new(self.vgpu, self.slot, device);
        let started = Instant::now();
        loop {
            match f() {
                Err(CUDA_ERROR_OUT_OF_MEMORY) if asked.can_wait() && started.elapsed() < self.memory_wait => {
                    asked.ask(bytes());
                    std::thread::sleep(RETRY);
                }
                other => return other,
            }
        }
    }

    /// Brings swapped pages back (with [`Soft::with_memory`]'s waiting for what is missing), then marks
    /// the memory resident.
    fn bring_back(&self) -> Res {
        let device = self.vgpu.map_or(0, |v| v.config.device.load(Ordering::Relaxed) as usize);
        let missing = || self.spaces().map(|(_, s)| s.totals().swapped).sum();
        self.with_memory(device, missing, || self.restore_all()).inspect_err(|e| {
            log::error(format_args!("soft mode: cannot bring swapped memory back: error {e}"));
        })
    }

    /// One attempt of [`Soft::bring_back`]. The data lock is released on return, so that the pager may
    /// be asked to swap this process out while it waits for memory.
    fn restore_all(&self) -> Res {
        let guard = self.lock_moving();
        if self.residency.state() == RESIDENT {
            return Ok(());
        }
        let t = Instant::now();
        let mut copied = 0;
        let mut result = Ok(());
        for (_, space) in self.spaces() {
            match space.restore() {
                Ok(b) => copied += b,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.charge_swap_in(ns_since(t), copied);
        result?;
        self.residency.set(RESIDENT);
        drop(guard);
        self.publish();
        Ok(())
    }

    /// Charges swap-in time to the vGPU's bucket (the time is device time spent for it) and counts it.
    fn charge_swap_in(&self, ns: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if let Some(v) = self.vgpu {
            v.sched().tokens.fetch_sub(ns.min(i64::MAX as u64) as i64, Ordering::AcqRel);
        }
        if let Some(p) = self.slot {
            p.soft.swap_in_ns.fetch_add(ns, Ordering::Relaxed);
        }
        log::debug(format_args!("soft mode: brought {bytes} bytes back in {} µs", ns / 1000));
    }

    /// Stops launches and copies, waits for the device, and runs `f` on every space; the state after is
    /// `SWAPPED` when pages remain in host memory.
    fn between_kernels<T>(&self, mut f: impl FnMut(&Space<Driver>) -> Res<T>) -> Vec<Res<T>> {
        self.residency.stop();
        let mut out = Vec::new();
        for (_, space) in self.spaces() {
            out.push(space.backend().synchronize().and_then(|()| f(space)));
        }
        let swapped = self.spaces().any(|(_, s)| s.has_swapped());
        self.residency.set(if swapped { residency::SWAPPED } else { RESIDENT });
        out
    }

    /// Swaps every resident page out to host memory and gives the device memory back.
    pub fn evict(&self) -> u64 {
        let _guard = self.lock_moving();
        let t = Instant::now();
        let bytes: u64 = self
            .between_kernels(|s| s.evict())
            .into_iter()
            .filter_map(|r| r.inspect_err(|e| log::error(format_args!("soft mode: swap-out failed: error {e}"))).ok())
            .sum();
        let ns = ns_since(t);
        if let Some(p) = self.slot {
            p.soft.swap_out_ns.fetch_add(ns, Ordering::Relaxed);
            p.soft.swapped_out_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        log::info(format_args!("soft mode: swapped {bytes} bytes out in {} µs", ns / 1000));
        self.publish();
        bytes
    }

    /// Compacts every space (when nothing is swapped out); the device memory given back.
    pub fn compact(&self) -> u64 {
        let _guard = self.lock_moving();
        if self.residency.state() != RESIDENT {
            return 0;
        }
        let released: u64 = self
            .between_kernels(|s| s.compact())
            .into_iter()
            .filter_map(|r| r.inspect_err(|e| log::error(format_args!("soft mode: compaction failed: error {e}"))).ok())
            .map(|c| c.released)
            .sum();
        log::info(format_args!("soft mode: compaction gave {released} bytes back"));
        self.publish();
        released
    }

    /// The process's byte counts.
    pub fn totals(&self) -> Totals {
        self.spaces().map(|(_, s)| s.totals()).fold(Totals::default(), |a, b| Totals {
            resident: a.resident + b.resident,
            pooled: a.pooled + b.pooled,
            fragmented: a.fragmented + b.fragmented,
            swapped: a.swapped + b.swapped,
        })
    }

    /// Publishes the byte counts in the process's region slot.
    fn publish(&self) {
        let Some(p) = self.slot else { return };
        let t = self.totals();
        p.soft.resident.store(t.resident, Ordering::Relaxed);
        p.soft.pooled.store(t.pooled, Ordering::Relaxed);
        p.soft.fragmented.store(t.fragmented, Ordering::Relaxed);
        p.soft.swapped.store(t.swapped, Ordering::Relaxed);
    }
}

/// Device memory asked of the daemon for one waiting caller (in the process's slot, which the daemon sums
/// per vGPU), withdrawn when dropped.
struct Asked {
    vgpu: Option<&'static VgpuSlot>,
    slot: Option<&'static ProcSlot>,
    device: usize,
    asked: bool,
    rung: Option<Instant>,
}

/// How often a waiting caller rings the daemon again.
const RING_EVERY: Duration = Duration::from_millis(50);

impl Asked {
    fn new(vgpu: Option<&'static VgpuSlot>, slot: Option<&'static ProcSlot>, device: usize) -> Asked {
        Asked { vgpu, slot, device: device.min(MAX_DEVICES - 1), asked: false, rung: None }
    }

    /// Whether waiting can help: only the daemon frees other vGPUs' memory.
    fn can_wait(&self) -> bool {
        self.vgpu.is_some()
    }

    /// Asks for `bytes` (once; later calls only ring again now and then).
    fn ask(&mut self, bytes: u64) {
        let Some(v) = self.vgpu else { return };
        if let (false, Some(p)) = (self.asked, self.slot) {
            self.asked = true;
            p.wanted.store(wanted::pack(self.device, bytes), Ordering::Release);
        }
        if self.rung.is_none_or(|t| t.elapsed() >= RING_EVERY) {
            self.rung = Some(Instant::now());
            crate::launch::ring(v.sched());
        }
    }
}

impl Drop for Asked {
    fn drop(&mut self) {
        if let (true, Some(p)) = (self.asked, self.slot) {
            p.wanted.store(0, Ordering::Release);
        }
    }
}
