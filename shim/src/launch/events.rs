//! The CUDA events that measure launches: a fixed ring of end events per context, created on the
//! context's first gated launch (the only allocation and the only lock, off the fast path afterwards),
//! handed out and given back with one compare-and-swap each. Also the driver calls around them.
//!
//! A launch records one event, after it: when the kernel ended. When it started is not asked of the driver
//! (that would be a second call per launch): it is the later of its submission and the end of the launch
//! before it on its stream (see [`feedback`](super::feedback)). The events are created with
//! `CU_EVENT_BLOCKING_SYNC`, so the measurement thread sleeps in `cuEventSynchronize` instead of spinning
//! a core. A pool whose events stop working (its context was destroyed) is retired, and its slot reused
//! once its events have all come back. The measurement thread gives a pool a [`Clock`] when it first
//! needs the absolute times of its events.

use super::clock::Clock;
use crate::driver::Site;
use crate::log;
use crate::real::{
    cuEventCreate as EVENT_CREATE, cuEventElapsedTime as EVENT_ELAPSED, cuEventQuery as EVENT_QUERY,
    cuEventRecord as EVENT_RECORD, cuEventSynchronize as EVENT_SYNCHRONIZE,
};
use std::ffi::c_uint;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tessera_ffi::sys::{CUevent, CUstream};

/// End events per context: launches beyond this many unfinished ones are charged their estimate only.
pub const EVENTS: usize = 256;
/// Contexts measured at once.
pub const MAX_POOLS: usize = 16;

/// `CU_EVENT_DEFAULT` and `CU_EVENT_BLOCKING_SYNC`.
const EVENT_DEFAULT: c_uint = 0;
const EVENT_BLOCKING_SYNC: c_uint = 1;

/// One end event, and whether a launch holds it.
struct Slot {
    end: usize,
    busy: AtomicBool,
}

/// The end events of one context.
pub struct Pool {
    /// The context and its device.
    pub site: Site,
    slots: Box<[Slot]>,
    next: AtomicUsize,
    retired: AtomicBool,
    /// Absolute times of the context's events (made by the measurement thread, on first use).
    clock: OnceLock<Option<Clock>>,
}

static POOLS: [AtomicPtr<Pool>; MAX_POOLS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_POOLS];
/// Serializes pool creation (the slow path only).
static CREATING: Mutex<()> = Mutex::new(());

/// The pools published so far (slots fill in order and are never emptied, only replaced).
fn published() -> impl Iterator<Item = &'static Pool> {
    POOLS.iter().map_while(|slot| {
        // SAFETY: a published pool is leaked, never freed, so the reference lives as long as the process.
        unsafe { slot.load(Ordering::Acquire).as_ref() }
    })
}

/// The pool of the calling thread's current context, created on its first use; `None` without a
/// current context, or when [`MAX_POOLS`] contexts are already measured.
pub fn current() -> Option<&'static Pool> {
    let ctx = crate::current::current_context()?;
    published().find(|p| p.site.ctx == ctx && !p.retired.load(Ordering::Relaxed)).or_else(|| create(ctx))
}

#[cold]
fn create(ctx: u64) -> Option<&'static Pool> {
    let _one = CREATING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = published().find(|p| p.site.ctx == ctx && !p.retired.load(Ordering::Relaxed)) {
        return Some(p);
    }
    let site = crate::current::current_site().filter(|s| s.ctx == ctx)?;
    let reusable = |slot: &AtomicPtr<Pool>| {
        // SAFETY: as in `published`.
        unsafe { slot.load(Ordering::Acquire).as_ref() }.is_none_or(|p| {
            p.retired.load(Ordering::Acquire) && p.slots.iter().all(|e| !e.busy.load(Ordering::Acquire))
        })
    };
    let Some(slot) = POOLS.iter().find(|s| reusable(s)) else {
        log::warn(format_args!("more than {MAX_POOLS} contexts launch work: launches in more are not measured"));
        return None;
    };
    let slots: Box<[Slot]> = (0..EVENTS).map_while(|_| new_slot()).collect();
    if slots.len() < EVENTS {
        log::warn(format_args!("only {} of {EVENTS} events could be created in context {ctx:#x}", slots.len()));
    }
    let pool = Box::leak(Box::new(Pool {
        site,
        slots,
        next: AtomicUsize::new(0),
        retired: AtomicBool::new(false),
        clock: OnceLock::new(),
    }));
    // A retired pool this replaces stays allocated: a launch may still hold a reference to it.
    slot.store(pool, Ordering::Release);
    Some(pool)
}

fn new_event(flags: c_uint) -> Option<usize> {
    let mut e: CUevent = std::ptr::null_mut();
    // SAFETY: cuEventCreate's C signature; `e` is a valid output.
    (unsafe { EVENT_CREATE.get()?(&mut e, flags) } == 0).then_some(e as usize)
}

/// A new event with timing, in the calling thread's current context.
pub fn new_timing_event() -> Option<usize> {
    new_event(EVENT_DEFAULT)
}

/// Records `event` on `stream`.
pub fn record_event(event: usize, stream: CUstream) -> bool {
    // SAFETY: cuEventRecord's C signature; the event is ours and the stream is a valid handle.
    EVENT_RECORD.get().is_some_and(|f| unsafe { f(event as CUevent, stream) } == 0)
}

/// Whether `event`'s latest recording has completed (false also when the driver cannot tell).
pub fn query(event: usize) -> bool {
    // SAFETY: cuEventQuery's C signature; the event is ours.
    EVENT_QUERY.get().is_some_and(|f| unsafe { f(event as CUevent) } == 0)
}

/// Waits for `event`'s latest recording to complete.
pub fn synchronize(event: usize) -> bool {
    // SAFETY: cuEventSynchronize's C signature; the event is ours.
    EVENT_SYNCHRONIZE.get().is_some_and(|f| unsafe { f(event as CUevent) } == 0)
}

fn new_slot() -> Option<Slot> {
    Some(Slot { end: new_event(EVENT_BLOCKING_SYNC)?, busy: AtomicBool::new(false) })
}

impl Pool {
    /// Takes a free event (one compare-and-swap); `None` when the ring is full.
    pub fn acquire(&self) -> Option<usize> {
        let n = self.slots.len();
        // Two tries: the measurement thread keeps one event (the latest end) out of turn.
        (0..2).map(|_| self.next.fetch_add(1, Ordering::Relaxed) % n.max(1)).find(|&i| {
            n > 0 && self.slots[i].busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
        })
    }

    /// Gives event `i` back.
    pub fn release(&self, i: usize) {
        self.slots[i].busy.store(false, Ordering::Release);
    }

    /// Records event `i` on `stream`, after the launch it measures; on failure the pool is retired.
    pub fn record(&self, i: usize, stream: CUstream) -> bool {
        let ok = record_event(self.slots[i].end, stream);
        if !ok {
            self.retire();
        }
        ok
    }

    /// Waits for event `i` and returns when (monotonic ns) it was reached: when its launch ended. `None`
    /// (and the pool retired) when the driver cannot tell, or its context's events cannot be placed on
    /// the host clock. Measurement thread only: the first call makes the context's [`Clock`], and a call
    /// may re-base it.
    pub fn ended(&self, i: usize) -> Option<u64> {
        let clock = synchronize(self.slots[i].end)
            .then(|| self.clock.get_or_init(|| Clock::new(self.site.ctx)).as_ref())
            .flatten();
        let end = clock.and_then(|c| {
            c.rebase_if_due(super::admission::now_ns());
            c.absolute(self.slots[i].end)
        });
        if end.is_none() {
            self.retire();
        }
        end
    }

    /// Device time from event `from` to event `to` (negative when `to` ended first).
    pub fn between_ends(&self, from: usize, to: usize) -> Option<i64> {
        elapsed_ns(self.slots[from].end, self.slots[to].end)
    }

    /// Stops handing out this pool's slots (its context is gone); a new pool replaces it.
    pub fn retire(&self) {
        if !self.retired.swap(true, Ordering::AcqRel) {
            log::debug(format_args!("event pool of context {:#x} retired", self.site.ctx));
        }
    }

    /// True once retired.
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// `cuEventElapsedTime(a, b)` in nanoseconds.
pub fn elapsed_ns(a: usize, b: usize) -> Option<i64> {
    let mut ms = 0f32;
    // SAFETY: cuEventElapsedTime's C signature; `ms` is a valid output and both events are ours.
    let ok = EVENT_ELAPSED.get().is_some_and(|f| unsafe { f(&mut ms, a as CUevent, b as CUevent) } == 0);
    ok.then(|| (ms as f64 * 1e6).round() as i64)
}
