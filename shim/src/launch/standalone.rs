//! A share without a daemon (`TESSERA_COMPUTE_SHARE=PCT`): the launching processes refill their bucket
//! themselves, lazily, as they pass the gate: `tokens += share × time since the last refill`, the
//! interval claimed by a compare-and-swap on `last_refill_ns` (so two refills never count the same time),
//! the bucket capped at a burst. A launch that finds it empty knows exactly when it will hold a token
//! again (`tessera_policy::ready_at`) and sleeps until then. The arithmetic is the policy crate's; what
//! is here is claiming the interval and updating the bucket in shared memory.

use std::sync::atomic::Ordering;
use tessera_region::Sched;

/// The burst of a bucket whose window is `window_ns`: the daemon's rule (`tessera_policy::burst`), so a
/// bucket refilled here never holds more than the daemon would let it.
#[inline]
pub fn burst(window_ns: i64) -> i64 {
    // `VgpuConfig::window` is never negative (at most `i64::MAX`), so the cast keeps its value.
    tessera_policy::burst(window_ns as u64)
}

/// Adds `pct` percent of the time since the last refill to `s.tokens`, never past `burst` (tokens
/// already above it, granted by someone else, are left alone).
pub fn refill(s: &Sched, pct: u32, now: u64, burst: i64) {
    refill_since(s, pct, now, burst, 0);
}

/// [`refill`], counting no time before `since` (time someone else, the daemon, has granted for already).
pub fn refill_since(s: &Sched, pct: u32, now: u64, burst: i64, since: u64) {
    let last = s.last_refill_ns.load(Ordering::Acquire);
    if now <= last || s.last_refill_ns.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    let add = tessera_policy::earned(pct, now - last.max(since).min(now));
    let _ = s
        .tokens
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| (t < burst).then(|| t.saturating_add(add).min(burst)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::admission::tests::zeroed;

    fn sched() -> &'static Sched {
        zeroed()
    }

    #[test]
    fn refill_adds_the_share_of_elapsed_time_once() {
        let s = sched();
        s.last_refill_ns.store(1_000, Ordering::Relaxed);
        refill(s, 30, 1_001_000, i64::MAX);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 300_000);
        refill(s, 30, 1_001_000, i64::MAX);
        refill(s, 30, 900_000, i64::MAX);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 300_000, "the same instant, or an earlier one, adds nothing");
    }

    #[test]
    fn refill_stops_at_the_burst_and_leaves_larger_grants() {
        let s = sched();
        refill(s, 100, 10_000_000_000, burst(1_000_000));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 2_000_000);
        s.tokens.store(9_000_000, Ordering::Relaxed);
        refill(s, 100, 20_000_000_000, burst(1_000_000));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 9_000_000);
        assert_eq!(burst(5_000_000), 10_000_000);
    }
}
