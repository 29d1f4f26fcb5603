//! The calling thread's current context and its device, cached per thread so that the hot paths
//! (allocations, launches) do not ask the driver on every call.
//!
//! A thread's current context changes only through calls the shim intercepts (`cuCtxSetCurrent`,
//! `cuCtxPushCurrent`, `cuCtxPopCurrent`, `cuCtxCreate`, `cuCtxDestroy`, `cuCtxDetach`, releasing or
//! resetting a primary context: every one of them is routed through [`around`] or [`changing`]), or
//! through the shim's own push and pop ([`crate::driver::in_context`], which calls [`forget_here`]).
//! Each of those bumps one process-wide generation after the driver has acted; a thread's cached answer
//! is used only while its generation is the current one. Destroying a context changes what other threads'
//! handles mean, which is why the generation is process-wide rather than per thread. A cache hit costs a
//! thread-local read and one atomic load; a miss asks the driver as [`driver::current`] does (two calls
//! that only read thread-local state), once per thread per change.

use crate::driver::{self, Site};
use crate::guard::{Res, Status, status};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped after every intercepted call that may change a thread's current context or what a context
/// handle names; starts above 0, the generation of an empty cache.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// What the driver said for the calling thread, at generation `generation`.
#[derive(Clone, Copy)]
struct Snapshot {
    generation: u64,
    /// The current context's handle; `None` when none is current.
    ctx: Option<u64>,
    /// Its device's quota slot; `None` without a context or for a device beyond the region's slots.
    device: Option<usize>,
}

const EMPTY: Snapshot = Snapshot { generation: 0, ctx: None, device: None };

thread_local! {
    // Plain data without a destructor: readable at any point of a thread's life, exit included.
    static CACHE: Cell<Snapshot> = const { Cell::new(EMPTY) };
}

/// The calling thread's snapshot, asking `query` (for `(context, device)`) only when the cached one is
/// older than the current generation.
fn snapshot(query: impl FnOnce() -> (Option<u64>, Option<usize>)) -> Snapshot {
    // Read before asking: a change landing while the driver answers bumps past it, so that answer is
    // asked again next time instead of being trusted.
    let generation = GENERATION.load(Ordering::Acquire);
    let cached = CACHE.with(Cell::get);
    if cached.generation == generation {
        return cached;
    }
    let (ctx, device) = query();
    let fresh = Snapshot { generation, ctx, device };
    CACHE.with(|c| c.set(fresh));
    fresh
}

/// The process-wide generation: an answer obtained while it had this value holds for as long as it keeps it.
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The calling thread's current context handle; `None` when none is current. Equivalent to
/// [`driver::current_context`], without a driver call while nothing changed contexts.
pub fn current_context() -> Option<u64> {
    snapshot(driver::context_and_device).ctx
}

/// Where the calling thread's allocations go; `None` when no context is current or its device has no
/// quota slot. Equivalent to [`driver::current`], without a driver call while nothing changed contexts.
pub fn current_site() -> Option<Site> {
    site_of(snapshot(driver::context_and_device))
}

fn site_of(s: Snapshot) -> Option<Site> {
    Some(Site { device: s.device?, ctx: s.ctx? })
}

/// Invalidates every thread's cached answer; called after the driver acted on a context call.
pub fn changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Invalidates the calling thread's cached answer only (the shim pushed or popped a context of its own).
pub fn forget_here() {
    CACHE.with(|c| c.set(EMPTY));
}

/// Runs `f` (which calls the driver on a context entry point), then invalidates every thread's cached
/// answer, also when `f` unwinds.
pub fn changing<T>(f: impl FnOnce() -> T) -> T {
    struct Bump;
    impl Drop for Bump {
        fn drop(&mut self) {
            changed();
        }
    }
    let _bump = Bump;
    f()
}

/// Handler of the context entry points that need nothing else from the shim (`cuCtxSetCurrent`,
/// `cuCtxPushCurrent`, `cuCtxPopCurrent`, `cuCtxDetach`): the driver's call, then [`changed`].
pub fn around(real: impl FnOnce() -> Status) -> Res {
    changing(|| status(real()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The generation is process-wide: tests that bump it or count misses run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A snapshot with a counter of the driver queries it made.
    fn ask(asked: &Cell<u32>, answer: (Option<u64>, Option<usize>)) -> Snapshot {
        snapshot(|| {
            asked.set(asked.get() + 1);
            answer
        })
    }

    #[test]
    fn the_driver_is_asked_once_per_change() {
        let _s = serial();
        let asked = Cell::new(0);
        forget_here();
        let first = ask(&asked, (Some(0xc0), Some(1)));
        assert_eq!((first.ctx, first.device, asked.get()), (Some(0xc0), Some(1), 1));
        for _ in 0..1000 {
            let again = ask(&asked, (Some(0xbad), Some(2)));
            assert_eq!((again.ctx, again.device), (Some(0xc0), Some(1)), "the cached answer");
        }
        assert_eq!(asked.get(), 1, "no query while nothing changed");
        changed();
        let after = ask(&asked, (Some(0xd0), Some(2)));
        assert_eq!((after.ctx, after.device, asked.get()), (Some(0xd0), Some(2), 2));
        // "No context" is an answer too, cached like any other until the next change.
        changing(|| ());
        assert_eq!(ask(&asked, (None, None)).ctx, None);
        assert_eq!(ask(&asked, (Some(1), Some(0))).ctx, None);
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_change_on_one_thread_invalidates_every_thread() {
        let _s = serial();
        let asked = Cell::new(0);
        forget_here();
        ask(&asked, (Some(7), Some(0)));
        std::thread::spawn(|| {
            // Another thread has its own cache: it asks for itself, then changes contexts.
            let asked = Cell::new(0);
            assert_eq!(ask(&asked, (Some(8), Some(1))).ctx, Some(8));
            assert_eq!(asked.get(), 1);
            around(|| 0).unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(ask(&asked, (Some(9), Some(0))).ctx, Some(9), "asked again after the other thread's change");
        assert_eq!(asked.get(), 2);
    }

    #[test]
    fn forgetting_here_leaves_other_threads_cached_and_errors_still_bump() {
        let _s = serial();
        let asked = Cell::new(0);
        forget_here();
        ask(&asked, (Some(3), Some(0)));
        let before = GENERATION.load(Ordering::Acquire);
        forget_here();
        assert_eq!(GENERATION.load(Ordering::Acquire), before, "only this thread's cache");
        assert_eq!(ask(&asked, (Some(4), Some(0))).ctx, Some(4));
        assert_eq!(around(|| 201), Err(201), "the driver's error is handed back");
        assert!(GENERATION.load(Ordering::Acquire) > before, "a failed call may have changed something too");
        let unwound = std::panic::catch_unwind(|| changing(|| panic!("handler failed")));
        assert!(unwound.is_err());
        let after_panic = GENERATION.load(Ordering::Acquire);
        assert!(after_panic > before + 1, "bumped on unwinding as well");
    }

    #[test]
    fn a_site_needs_both_a_context_and_a_device_slot() {
        let _s = serial();
        let site = |answer| {
            changed();
            site_of(snapshot(|| answer)).map(|s| (s.ctx, s.device))
        };
        assert_eq!(site((Some(5), Some(2))), Some((5, 2)));
        assert_eq!(site((Some(5), None)), None, "a device without a quota slot");
        assert_eq!(site((None, None)), None);
    }
}
