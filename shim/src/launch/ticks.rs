//! A cheaper clock than `CLOCK_MONOTONIC` for the one question a batched launch asks of time: has its
//! stream been left long enough to run dry since the thread's last launch there? The vDSO's
//! `clock_gettime` costs tens of nanoseconds in a virtual machine, most of a launch's budget; the
//! processor's time-stamp counter costs a few. It is used only where the kernel itself keeps time with it
//! (`tsc` is the current clocksource, which Linux picks only when the counter is invariant and
//! synchronized across processors); elsewhere this falls back to the monotonic clock.
//!
//! Ticks become nanoseconds by a rate measured against the monotonic clock between the first use and a
//! read at least [`CALIBRATION_NS`] later (until then, [`Ticks::ns_to_ticks`] is `None` and callers
//! measure every launch, as without batches).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_region::futex::monotonic_ns;

/// Least time between the two reads the tick rate is taken from.
pub const CALIBRATION_NS: u64 = 2_000_000;
/// Fixed-point shift of the rate (ticks per nanosecond × 2^`SHIFT`).
const SHIFT: u32 = 24;

/// The process's tick source.
pub struct Ticks {
    /// Whether ticks are the time-stamp counter (otherwise they are monotonic nanoseconds).
    counter: bool,
    /// The first reading: (ticks, monotonic ns).
    origin: (u64, u64),
    /// Ticks per nanosecond × 2^`SHIFT` once measured (0: not yet).
    rate: AtomicU64,
}

static TICKS: OnceLock<Ticks> = OnceLock::new();

/// The process's tick source, set up on first use.
pub fn source() -> &'static Ticks {
    TICKS.get_or_init(|| {
        let counter = counter_is_clocksource();
        let mut t = Ticks { counter, origin: (0, 0), rate: AtomicU64::new(0) };
        t.origin = (t.now(), monotonic_ns());
        if !counter {
            t.rate.store(1 << SHIFT, Ordering::Relaxed);
        }
        t
    })
}

/// Whether the kernel keeps time with the time-stamp counter (then the counter is invariant and the same
/// on every processor).
fn counter_is_clocksource() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc")
}

impl Ticks {
    /// The current tick.
    #[inline]
    pub fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.counter {
            // SAFETY: `rdtsc` has no preconditions; it only reads the time-stamp counter.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        monotonic_ns()
    }

    /// `ns` nanoseconds in ticks; `None` until the rate is known. `now_ns` (a monotonic reading the
    /// caller has anyway) lets the rate be measured once enough time has passed.
    pub fn ns_to_ticks(&self, ns: u64, now_ns: u64) -> Option<u64> {
        let mut rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            if now_ns.saturating_sub(self.origin.1) < CALIBRATION_NS {
                return None;
            }
            // Both read together: a thread preempted between them would skew the rate.
            let (ticks, elapsed) = (self.now().saturating_sub(self.origin.0), monotonic_ns() - self.origin.1);
            rate = ((u128::from(ticks) << SHIFT) / u128::from(elapsed)).clamp(1, u64::MAX.into()) as u64;
            self.rate.store(rate, Ordering::Relaxed);
        }
        Some(((u128::from(ns) * u128::from(rate)) >> SHIFT).min(u64::MAX.into()) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance_and_convert_once_calibrated() {
        let t = source();
        let a = t.now();
        std::thread::sleep(std::time::Duration::from_millis(3));
        assert!(t.now() > a);
        let per_ms = t.ns_to_ticks(1_000_000, monotonic_ns()).expect("calibrated after 3 ms");
        let (t0, n0) = (t.now(), monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (t1, n1) = (t.now(), monotonic_ns());
        let measured = (t1 - t0) as f64 / ((n1 - n0) as f64 / 1e6);
        // Functional: a wrong unit or scale, not the rate's precision (the host may preempt the reads).
        assert!((measured / per_ms as f64 - 1.0).abs() < 0.25, "{measured} ticks/ms against {per_ms}");
    }
}
