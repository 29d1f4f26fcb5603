//! Absolute times of a context's events, on `CLOCK_MONOTONIC` (the clock of every timestamp in the region).
//!
//! CUDA tells only the time between two events of a context (`cuEventElapsedTime`). So each context gets
//! a reference event, recorded on a stream of its own that nothing else uses (idle, so the event is
//! timestamped as soon as it is recorded) at a known host time: then `absolute(e) = host time of the
//! reference + elapsed(reference, e)`. On a real GPU this is the GPU's timeline mapped onto the host clock
//! at one point. The host time is the middle of the `cuEventRecord` call, which is retried until the call
//! took at most [`TIGHT_NS`] (a thread preempted during the call cannot tell when the event was taken).
//!
//! The mapping is taken again every [`REBASE_NS`]: the elapsed time is a 32-bit float of milliseconds
//! (about 0.1 µs of resolution 2 s away from the reference, 1 µs at 16 s), and the two clocks may drift
//! apart. Two reference events take turns, so that re-basing never waits: the next one is recorded, and
//! taken into use once it has completed.
//!
//! Only the measurement thread uses the clock; it makes the context current around the calls that need
//! it.

use super::events;
use crate::real::cuStreamCreate as STREAM_CREATE;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tessera_ffi::sys::CUstream;
use tessera_region::futex::monotonic_ns;

/// How often the reference is recorded again.
pub const REBASE_NS: u64 = 2_000_000_000;
/// Longest a reference's `cuEventRecord` may take for the host time around it to count.
pub const TIGHT_NS: u64 = 10_000;
/// Records tried per (re-)base.
const TRIES: usize = 20;
/// How long a re-base that found no tight record waits before trying again.
const RETRY_NS: u64 = 10_000_000;
/// `CU_STREAM_NON_BLOCKING`: the reference stream never waits for the legacy default stream.
const STREAM_NON_BLOCKING: c_uint = 1;

/// The references of one context.
pub struct Clock {
    ctx: u64,
    stream: usize,
    /// The two reference events.
    events: [usize; 2],
    /// Host time (monotonic ns) each was last recorded at.
    bases: [AtomicU64; 2],
    /// The one in use.
    current: AtomicUsize,
    /// Host time the other one was recorded at, while it has not completed (0: none pending).
    pending_ns: AtomicU64,
    /// No re-base before this (monotonic ns), after one found no tight record.
    retry_ns: AtomicU64,
}

/// Runs `f` with context `ctx` pushed current on the calling thread; `None` when it cannot be pushed.
fn in_context<T>(ctx: u64, f: impl FnOnce() -> Option<T>) -> Option<T> {
    crate::driver::in_context(ctx, f).ok().flatten()
}

impl Clock {
    /// The clock of context `ctx`: a stream and two events of its own, the first reference recorded and
    /// completed.
    pub fn new(ctx: u64) -> Option<Clock> {
        let clock = in_context(ctx, || {
            let mut stream: CUstream = std::ptr::null_mut();
            // SAFETY: cuStreamCreate's C signature; `stream` is a valid output.
            if unsafe { STREAM_CREATE.get()?(&mut stream, STREAM_NON_BLOCKING) } != 0 {
                return None;
            }
            let events = [events::new_timing_event()?, events::new_timing_event()?];
            let clock = Clock {
                ctx,
                stream: stream as usize,
                events,
                bases: [AtomicU64::new(0), AtomicU64::new(0)],
                current: AtomicUsize::new(0),
                pending_ns: AtomicU64::new(0),
                retry_ns: AtomicU64::new(0),
            };
            let at = clock.record(0).or_else(|| clock.record_any(0))?;
            clock.bases[0].store(at, Ordering::Release);
            Some(clock)
        })?;
        events::synchronize(clock.events[0]).then_some(clock)
    }

    /// Records reference `i` until a record is tight; the host time of the last record, if tight.
    fn record(&self, i: usize) -> Option<u64> {
        (0..TRIES).find_map(|_| {
            let (tight, at) = self.record_once(i)?;
            tight.then_some(at)
        })
    }

    /// Records reference `i` once more and takes its host time, tight or not.
    fn record_any(&self, i: usize) -> Option<u64> {
        self.record_once(i).map(|(_, at)| at)
    }

    /// Records reference `i`: whether the call was tight, and the host time in its middle.
    fn record_once(&self, i: usize) -> Option<(bool, u64)> {
        let before = monotonic_ns();
        if !events::record_event(self.events[i], self.stream as CUstream) {
            return None;
        }
        let took = monotonic_ns() - before;
        Some((took <= TIGHT_NS, before + took / 2))
    }

    /// Takes a completed pending reference into use, or records the other reference when the one in use
    /// is [`REBASE_NS`] old at `now_ns` (to be taken into use once it has completed). Never waits.
    pub fn rebase_if_due(&self, now_ns: u64) {
        let current = self.current.load(Ordering::Acquire);
        let other = 1 - current;
        let pending = self.pending_ns.load(Ordering::Acquire);
        if pending != 0 {
            if events::query(self.events[other]) {
                self.bases[other].store(pending, Ordering::Release);
                self.current.store(other, Ordering::Release);
                self.pending_ns.store(0, Ordering::Release);
            }
            return;
        }
        if now_ns.saturating_sub(self.bases[current].load(Ordering::Acquire)) < REBASE_NS
            || now_ns < self.retry_ns.load(Ordering::Acquire)
        {
            return;
        }
        match in_context(self.ctx, || self.record(other)) {
            Some(at) => self.pending_ns.store(at, Ordering::Release),
            // No tight record: the reference in use stays, and a later call tries again.
            None => self.retry_ns.store(now_ns + RETRY_NS, Ordering::Release),
        }
    }

    /// When (monotonic ns) completed event `e` of this context was timestamped.
    pub fn absolute(&self, e: usize) -> Option<u64> {
        let current = self.current.load(Ordering::Acquire);
        let since = events::elapsed_ns(self.events[current], e)?;
        self.bases[current].load(Ordering::Acquire).checked_add_signed(since)
    }
}
