//! Memory that a pool keeps after it was freed from it, kept charged. The driver does not give a pool's
//! freed memory back to the device when the free executes: the pool keeps it (its reservation) for its
//! next allocations, until a synchronization finds it holding more than its release threshold
//! (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, 0 by default) or `cuMemPoolTrimTo` asks. Giving the quota back
//! when the free executes would let the vGPU's real usage overshoot its quota by what its pools keep.
//!
//! - A stream-ordered free of a pool's memory, once executed ([`crate::pending_free`]), or a `cuMemFree` of
//!   it, moves its bytes to the pool's cached charge here ([`freed`]) instead of back to the quota. The
//!   pool is then reconciled: trimmed to its release threshold (what the driver would do at the next
//!   synchronization anyway, done now so that its peers need not wait for one) and its cached charge set
//!   to what the driver says it keeps beyond its live allocations (`RESERVED_MEM_CURRENT` minus
//!   `USED_MEM_CURRENT`).
//! - The program's own `cuMemPoolTrimTo` and `cuMemPoolSetAttribute` reconcile the pool; `cuMemPoolDestroy`
//!   gives its cached charge back.
//! - An allocation that would not fit the quota first trims the pools of its device that keep memory to
//!   their live allocations ([`trim_device`]): memory its own pools keep never makes a program's
//!   allocation fail.
//!
//! An allocation a pool serves from its cache is charged in full all the same: too much until the next
//! reconcile, never too little. Nothing here runs on the allocation's common case but one atomic load.

use crate::quota::Quota;
use crate::real::{cuMemPoolGetAttribute as POOL_GET, cuMemPoolTrimTo as POOL_TRIM};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use tessera_ffi::sys::CUmemoryPool;

/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
const RELEASE_THRESHOLD: i32 = 4;
/// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`.
const RESERVED_CURRENT: i32 = 5;
/// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`.
const USED_CURRENT: i32 = 7;

/// What one pool keeps, as charged.
struct Kept {
    /// The pool's handle.
    pool: usize,
    /// Its device (charged).
    device: usize,
    /// Bytes charged for memory the pool keeps beyond its live allocations.
    bytes: u64,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());
/// Whether any pool keeps a charge (what the allocation path looks at).
static ANY: AtomicBool = AtomicBool::new(false);

fn kept() -> MutexGuard<'static, Vec<Kept>> {
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether some pool of the process keeps memory charged.
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// Drops the pools that keep nothing charged any more and publishes whether any still does.
fn publish(kept: &mut Vec<Kept>) {
    kept.retain(|k| k.bytes > 0);
    ANY.store(!kept.is_empty(), Ordering::Release);
}

/// Keeps `bytes` of device `device`, freed from `pool` (the free executed), charged as the pool's cache,
/// then reconciles the pool ([`reconcile`]).
pub fn freed(q: &Quota, pool: usize, device: usize, bytes: u64) {
    let mut k = kept();
    let i = match k.iter().position(|k| k.pool == pool) {
        Some(i) => i,
        None => {
            k.push(Kept { pool, device, bytes: 0 });
            k.len() - 1
        }
    };
    k[i].bytes = k[i].bytes.saturating_add(bytes);
    reconcile(q, &mut k[i], None);
    publish(&mut k);
}

/// A pool attribute of 64 bits, if the driver answers.
fn attribute(pool: usize, attr: i32) -> Option<u64> {
    let f = POOL_GET.get()?;
    let mut v = 0u64;
    // SAFETY: cuMemPoolGetAttribute's C signature; these attributes are 64-bit values.
    (unsafe { f(pool as CUmemoryPool, attr, (&raw mut v).cast::<c_void>()) } == 0).then_some(v)
}

/// Asks the driver to give back what `pool` keeps beyond `keep` bytes in all.
fn trim(pool: usize, keep: u64) {
    if let Some(f) = POOL_TRIM.get() {
        // SAFETY: cuMemPoolTrimTo's C signature; the pool is the program's valid handle.
        unsafe { f(pool as CUmemoryPool, keep as usize) };
    }
}

/// Sets `k`'s charge to what the driver says its pool keeps beyond its live allocations, after trimming
/// it to `keep` bytes in all (`None`: to its release threshold). When the driver cannot tell, the charge
/// stays as it is.
fn reconcile(q: &Quota, k: &mut Kept, keep: Option<u64>) {
    let keep = keep.or_else(|| attribute(k.pool, RELEASE_THRESHOLD)).unwrap_or(0);
    trim(k.pool, keep);
    let (Some(reserved), Some(used)) = (attribute(k.pool, RESERVED_CURRENT), attribute(k.pool, USED_CURRENT)) else {
        return;
    };
    let held = reserved.saturating_sub(used);
    if held < k.bytes {
        q.release(k.device, k.bytes - held);
        k.bytes = held;
    } else if held > k.bytes {
        // The pool grew beyond what its allocations were charged (its cache fragmented): charged if the
        // quota has room, otherwise given back to the device.
        if q.reserve(k.device, held - k.bytes, "memory a pool keeps").is_ok() {
            k.bytes = held;
        } else {
            trim(k.pool, used);
        }
    }
}

/// Before an allocation on device `device` that would not fit the quota: every pool of the device that
/// keeps memory gives back all but its live allocations.
pub fn trim_device(q: &Quota, device: usize) {
    let mut k = kept();
    for e in k.iter_mut().filter(|e| e.device == device) {
        reconcile(q, e, Some(0));
    }
    publish(&mut k);
}

/// After the program changed `pool` (trimmed it, or set its release threshold): its charge follows.
pub fn changed(q: &Quota, pool: usize) {
    let mut k = kept();
    if let Some(e) = k.iter_mut().find(|e| e.pool == pool) {
        reconcile(q, e, None);
    }
    publish(&mut k);
}

/// After the program destroyed `pool`: what it kept is the device's again.
pub fn destroyed(q: &Quota, pool: usize) {
    let mut k = kept();
    if let Some(i) = k.iter().position(|e| e.pool == pool) {
        let e = k.swap_remove(i);
        q.release(e.device, e.bytes);
    }
    publish(&mut k);
}
