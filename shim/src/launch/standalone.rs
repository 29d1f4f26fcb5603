//! A share without a daemon (`TESSERA_COMPUTE_SHARE=PCT`): the launching processes refill their bucket
//! themselves, lazily, as they pass the gate: `tokens += share × time since the last refill`, the
//! interval claimed by a compare-and-swap on `last_refill_ns` (so two refills never count the same time),
//! the bucket capped at a burst. A launch that finds it empty knows exactly when it will hold a token
//! again and sleeps until then.

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
    let from = last.max(since).min(now);
    let add = ((now - from) as u128 * pct as u128 / 100).min(i64::MAX as u128) as i64;
    let _ = s
        .tokens
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| (t < burst).then(|| t.saturating_add(add).min(burst)));
}

/// When (monotonic ns) a bucket holding `tokens` (at most 0) at `now` holds one token again at `pct`.
pub fn ready_at(tokens: i64, pct: u32, now: u64) -> u64 {
    let deficit = 1u128 + tokens.min(0).unsigned_abs() as u128;
    let pct = pct.clamp(1, 100) as u128;
    now.saturating_add(deficit.saturating_mul(100).div_ceil(pct).min(u64::MAX as u128) as u64)
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

    #[test]
    fn ready_at_is_when_the_deficit_is_refilled() {
        assert_eq!(ready_at(0, 100, 50), 51);
        assert_eq!(ready_at(-999, 10, 0), 10_000);
        assert_eq!(ready_at(-1, 30, 0), 7, "rounded up: 2 ns at 30% take 6.7 ns");
    }
}
