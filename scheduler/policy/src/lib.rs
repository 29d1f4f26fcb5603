//! The token rules that the shim (a share without a daemon, or a daemon gone silent) and the daemon (its
//! refills) must apply alike, defined once: a vGPU's default window and the most tokens its bucket may
//! hold. Pure constants and `const fn`s, with no dependencies: the shim calls them on its launch path.

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
}
