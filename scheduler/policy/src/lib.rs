//! The scheduling policy, as pure functions and constants that both sides of Tessera apply alike, defined
//! once: the token rules (the default window, the burst a bucket may hold, what a share earns over time),
//! which the shim applies on its launch path when no daemon refills its bucket (a standalone share, or a
//! daemon gone silent: [`outage`]); the priorities; and the daemon's algorithms over what it observed of a device:
//! the grants of each interval ([`refill`]), the long-run fairness among competing vGPUs ([`fairness`]),
//! and the device time each finished kernel is charged ([`ledger`]).
//!
//! No dependencies and no I/O: the shim links it into every CUDA program, and every rule can be tested
//! on plain numbers.

pub mod fairness;
pub mod ledger;
pub mod outage;
pub mod refill;

/// The window a vGPU gets when none is given: most queued-but-unfinished device time, in nanoseconds.
/// The region reads an unset window (0) as this one, and the daemon's API gives it to a spec without one.
pub const DEFAULT_WINDOW_NS: u64 = 1_000_000;

/// Smallest burst: the device time an idle vGPU may bank.
pub const MIN_BURST_NS: i64 = 2_000_000;

/// Most tokens a bucket whose window is `window_ns` may hold: `max(2 × window, MIN_BURST_NS)`, at most
/// `i64::MAX`.
#[inline]
pub const fn burst(window_ns: u64) -> i64 {
    let twice = window_ns.saturating_mul(2);
    let twice = if twice > i64::MAX as u64 { i64::MAX } else { twice as i64 };
    if twice > MIN_BURST_NS { twice } else { MIN_BURST_NS }
}

/// Tokens (device nanoseconds) a share of `pct` percent earns over `elapsed_ns`: `pct% × elapsed`, at
/// most `i64::MAX`.
#[inline]
pub const fn earned(pct: u32, elapsed_ns: u64) -> i64 {
    let add = elapsed_ns as u128 * pct as u128 / 100;
    if add > i64::MAX as u128 { i64::MAX } else { add as i64 }
}

/// When (monotonic ns) a bucket holding `tokens` (at most 0) at `now` holds one token again at a share
/// of `pct` percent (taken as 1 to 100).
#[inline]
pub fn ready_at(tokens: i64, pct: u32, now: u64) -> u64 {
    let deficit = 1u128 + tokens.min(0).unsigned_abs() as u128;
    let pct = pct.clamp(1, 100) as u128;
    now.saturating_add(deficit.saturating_mul(100).div_ceil(pct).min(u64::MAX as u128) as u64)
}

/// Priorities (`VgpuConfig::priority` in the region).
pub mod priority {
    /// Runs only on what `normal` and `high` vGPUs leave.
    pub const LOW: u32 = 0;
    /// The default.
    pub const NORMAL: u32 = 1;
    /// While it has work, lower priorities on its device get no tokens.
    pub const HIGH: u32 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_burst_is_twice_the_window_and_at_least_the_minimum() {
        assert_eq!(burst(MS), 2 * MS as i64);
        assert_eq!(burst(5 * MS), 10 * MS as i64);
        assert_eq!(burst(10_000), MIN_BURST_NS);
        assert_eq!(burst(0), MIN_BURST_NS);
        assert_eq!(burst(DEFAULT_WINDOW_NS), MIN_BURST_NS);
    }

    #[test]
    fn a_huge_window_saturates_instead_of_wrapping() {
        assert_eq!(burst(u64::MAX), i64::MAX);
        assert_eq!(burst(i64::MAX as u64), i64::MAX);
        assert_eq!(burst(i64::MAX as u64 / 2 + 1), i64::MAX);
    }

    #[test]
    fn a_share_earns_its_percentage_of_the_time() {
        assert_eq!(earned(30, MS), 300_000);
        assert_eq!(earned(100, 7), 7);
        assert_eq!(earned(0, u64::MAX), 0);
        assert_eq!(earned(100, u64::MAX), i64::MAX, "saturates instead of wrapping");
    }

    #[test]
    fn ready_at_is_when_the_deficit_is_refilled() {
        assert_eq!(ready_at(0, 100, 50), 51);
        assert_eq!(ready_at(-999, 10, 0), 10_000);
        assert_eq!(ready_at(-1, 30, 0), 7, "rounded up: 2 ns at 30% take 6.7 ns");
        assert_eq!(ready_at(-1, 0, 0), 200, "a share of 0 is taken as 1%");
        assert_eq!(ready_at(i64::MIN, 1, u64::MAX - 5), u64::MAX);
    }
}
