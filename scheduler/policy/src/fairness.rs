//! Long-run fairness among the vGPUs that compete for a device (pure).
//!
//! [`refill::plan`](crate::refill::plan) splits each interval by share among the vGPUs with demand, and
//! gives the share of one without demand to the others. A vGPU whose process is briefly off the CPU
//! (the host preempting it, a page fault storm, a hypervisor stealing the vCPU) empties its queue and
//! loses its demand for those milliseconds, and the others take its time. Such stalls hit every process
//! alike, so the vGPUs with large shares lose more than they gain: on a loaded host a 30/70 split drifts
//! toward 36/64. The split is kept over the long run by remembering it.
//!
//! Every tick, among the vGPUs that *compete* (they launched within [`ACTIVE_NS`], so a short stall does
//! not drop them; uncapped; taking part under the priority rules), the device time they used since the
//! last tick is compared with what their shares would have given each of that same total. The
//! difference accumulates in a lag (positive: owed time), bounded by [`LAG_MAX_NS`]. Among those with
//! demand now, each tick moves tokens from the vGPUs that are ahead to those that are behind: a
//! [`REPAY_DIVISOR`]th of each lag, adjusted to sum to zero, so the device is granted exactly as much as
//! before. A vGPU that stops competing forgets its lag: time it left idle for longer is not owed back;
//! and a vGPU competing alone owes nobody.

/// A vGPU that launched this recently still competes, while it stalls.
pub const ACTIVE_NS: u64 = 50_000_000;
/// Most device time a vGPU may be owed, or owe.
pub const LAG_MAX_NS: i64 = 50_000_000;
/// Part of a lag settled each tick.
pub const REPAY_DIVISOR: i64 = 16;

/// One vGPU's tick, as the fairness rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Share in percent.
    pub share: u32,
    /// Competes for the device (see the module documentation).
    pub competes: bool,
    /// Has demand now: may be given tokens or have them taken.
    pub demand: bool,
    /// Device time charged to it since the last tick.
    pub used_ns: u64,
}

/// Updates `lags` (one per member, kept between ticks) from one tick of `members` and returns the token
/// adjustment of each member for this tick (positive: tokens given); the adjustments sum to zero.
pub fn settle(lags: &mut [i64], members: &[Member]) -> Vec<i64> {
    let weight = |m: &Member, all_zero: bool| if all_zero { 1 } else { m.share as i64 };
    let competing: Vec<usize> = (0..members.len()).filter(|&i| members[i].competes).collect();
    let zero = competing.iter().all(|&i| members[i].share == 0);
    let total_weight: i64 = competing.iter().map(|&i| weight(&members[i], zero)).sum();
    let used: i64 = competing.iter().map(|&i| members[i].used_ns.min(i64::MAX as u64) as i64).sum();
    for (i, lag) in lags.iter_mut().enumerate() {
        *lag = match members[i].competes && competing.len() > 1 {
            false => 0,
            true => {
                let fair = (used as i128 * weight(&members[i], zero) as i128 / total_weight.max(1) as i128) as i64;
                lag.saturating_add(fair - members[i].used_ns.min(i64::MAX as u64) as i64).clamp(-LAG_MAX_NS, LAG_MAX_NS)
            }
        };
    }
    let mut adjust = vec![0i64; members.len()];
    let takers: Vec<usize> = competing.iter().copied().filter(|&i| members[i].demand).collect();
    if takers.len() < 2 {
        return adjust;
    }
    let zero = takers.iter().all(|&i| members[i].share == 0);
    let weights: i64 = takers.iter().map(|&i| weight(&members[i], zero)).sum();
    let raw: i64 = takers.iter().map(|&i| lags[i] / REPAY_DIVISOR).sum();
    for &i in &takers {
        adjust[i] = lags[i] / REPAY_DIVISOR - raw * weight(&members[i], zero) / weights.max(1);
    }
    // Rounding leaves a few nanoseconds; the first taker absorbs them, so the sum is exactly zero.
    let rest: i64 = adjust.iter().sum();
    adjust[takers[0]] -= rest;
    adjust
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn member(share: u32, used_ns: u64) -> Member {
        Member { share, competes: true, demand: true, used_ns }
    }

    #[test]
    fn a_fair_split_owes_nothing() {
        let mut lags = vec![0; 2];
        for _ in 0..100 {
            assert_eq!(settle(&mut lags, &[member(30, 300_000), member(70, 700_000)]), [0, 0]);
        }
        assert_eq!(lags, [0, 0]);
    }

    #[test]
    fn time_taken_during_a_stall_is_given_back_afterwards() {
        let mut lags = vec![0; 2];
        // b stalls for 5 ticks (no demand, no use) while a takes the whole device.
        let stalled = Member { demand: false, ..member(70, 0) };
        for _ in 0..5 {
            assert_eq!(settle(&mut lags, &[member(30, MS), stalled]), [0, 0], "nothing moves while b has no demand");
        }
        assert_eq!(lags, [-3_500_000, 3_500_000], "b is owed 70% of the 5 ms");
        // Both busy again: tokens move from a to b until the lag is settled.
        let adjust = settle(&mut lags, &[member(30, 300_000), member(70, 700_000)]);
        assert!(adjust[0] < 0 && adjust[1] > 0 && adjust[0] + adjust[1] == 0, "{adjust:?}");
        let mut total = adjust[1];
        for _ in 0..200 {
            // The device follows the tokens: b uses what it was given on top of its share.
            let given = settle(&mut lags, &[member(30, (300_000 - total.min(300_000)) as u64), member(70, 700_000)]);
            total = given[1];
        }
        assert!(lags[1] < 100_000, "settled: {lags:?}");
    }

    #[test]
    fn lags_are_bounded_and_forgotten_when_a_vgpu_stops_competing() {
        let mut lags = vec![0; 2];
        for _ in 0..1000 {
            settle(&mut lags, &[member(50, MS), Member { demand: false, ..member(50, 0) }]);
        }
        assert_eq!(lags, [-LAG_MAX_NS, LAG_MAX_NS]);
        settle(&mut lags, &[member(50, MS), Member { competes: false, demand: false, ..member(50, 0) }]);
        assert_eq!(lags, [0, 0], "alone, a owes nobody; b left and is owed nothing");
    }

    #[test]
    fn adjustments_sum_to_zero_and_spare_those_without_demand() {
        let mut lags = vec![2_000_000, -3_000_000, 1_000_000, 5_000_000];
        let quiet = Member { demand: false, ..member(10, 0) };
        let adjust = settle(&mut lags, &[member(20, 200_000), member(30, 300_000), member(40, 400_000), quiet]);
        assert_eq!(adjust.iter().sum::<i64>(), 0);
        assert_eq!(adjust[3], 0, "a vGPU without demand is neither given nor taken tokens");
        assert!(adjust[0] > 0 && adjust[1] < 0, "{adjust:?}");
    }
}
