//! The token algorithm, as pure functions over what the daemon observed of one device's vGPUs: how many
//! nanoseconds of device time each vGPU is granted for an interval, and how its bucket is clamped.
//!
//! For an interval `dt`, the vGPUs that take part get `share% × dt` each when they have demand, nothing
//! when idle, and never more than their bucket has room for. Then, unless an idle vGPU is capped:
//! - the rest of the interval (idle vGPUs' entitlement, the share nobody was given, and what full buckets
//!   of uncapped vGPUs could not take) goes to the uncapped vGPUs with demand and room, in proportion to
//!   their shares (evenly when all are 0), highest priority first: `low` vGPUs absorb spare time only
//!   when no `normal` one can;
//! - except what the full bucket of a busy vGPU could not take (its part of the entitlement and of the
//!   spare time): it has work queued, and tokens, so what it misses is the device, which the others'
//!   queued work keeps (on a first-come-first-served engine). Giving its share away would let the others
//!   queue even more and crowd it out for good, whereas holding them to their shares leaves it the
//!   device. That part is given to nobody: the vGPU runs on the tokens it has;
//! - a capped vGPU never gets more than its share, and what it does not take is given to nobody.
//!
//! A suspended vGPU takes no part and gets nothing.
//!
//! Work conservation ([`catch_up`]): on an idle device whose every vGPU with demand has a launch waiting
//! for tokens, time would pass with the engine idle until the next grants let the first of them go. The
//! daemon grants that time at once instead, by the same rule as any interval: the split is what waiting
//! would have given, without the idle engine. While a `high` vGPU on the device is busy (or the
//! device's `high_until_ns` lies ahead), only the `high` vGPUs take part: they get the whole device, lower
//! priorities nothing (when the hold ends, the device loop lets those that wait go at once: see
//! the daemon's `device_loop::restart`).

use crate::priority;

/// How recently a launch counts as demand.
pub const RECENT_LAUNCH_NS: u64 = 2_000_000;
// The burst rule is shared with the shim, which refills buckets itself without a daemon.
pub use crate::burst;

/// What the daemon read of one vGPU's bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observed {
    /// Launches waiting for tokens.
    pub waiters: u32,
    /// Device time queued and not finished.
    pub inflight_ns: i64,
    /// Last launch (monotonic ns; 0: never).
    pub last_launch_ns: u64,
    /// Whether any process is attached (a vGPU without processes has no demand, whatever it left behind).
    pub processes: bool,
}

impl Observed {
    /// Busy: launches wait or work is queued.
    pub fn busy(&self) -> bool {
        self.processes && (self.waiters > 0 || self.inflight_ns > 0)
    }

    /// Has demand at `now_ns`: busy, or launched within [`RECENT_LAUNCH_NS`].
    pub fn demand(&self, now_ns: u64) -> bool {
        self.active_within(now_ns, RECENT_LAUNCH_NS)
    }

    /// Busy at `now_ns`, or launched within `window_ns` before it.
    pub fn active_within(&self, now_ns: u64, window_ns: u64) -> bool {
        self.busy()
            || (self.processes && self.last_launch_ns != 0 && now_ns.saturating_sub(self.last_launch_ns) < window_ns)
    }
}

/// One vGPU as the algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vgpu {
    /// Share in percent.
    pub share: u32,
    /// [`priority`] value.
    pub priority: u32,
    /// Capped.
    pub cap: bool,
    /// Suspended.
    pub suspended: bool,
    /// Has demand ([`Observed::demand`]).
    pub demand: bool,
    /// Busy ([`Observed::busy`]).
    pub busy: bool,
    /// Tokens its bucket can still take before the burst ([`room`]).
    pub room: u64,
    /// Launches of it wait at the gate.
    pub waiting: bool,
    /// Tokens its bucket holds (negative: debt).
    pub tokens: i64,
}

/// Nanoseconds of device time granted to each of `vgpus` (same order) for an interval of `dt_ns`;
/// `high_hold` is true while the device's `high_until_ns` lies ahead.
pub fn plan(vgpus: &[Vgpu], dt_ns: u64, high_hold: bool) -> Vec<u64> {
    let mut grants = vec![0u64; vgpus.len()];
    let part = takes_part(vgpus, high_hold);
    let group: Vec<usize> = (0..vgpus.len()).filter(|&i| part[i]).collect();
    let demanding: Vec<usize> = group.iter().copied().filter(|&i| vgpus[i].demand).collect();
    let (mut given, mut untaken) = (0u64, 0u64);
    for &i in &demanding {
        let entitled = (dt_ns as u128 * vgpus[i].share.min(100) as u128 / 100) as u64;
        grants[i] = entitled.min(vgpus[i].room);
        given += entitled;
        if !vgpus[i].cap && !vgpus[i].busy {
            untaken += entitled - grants[i];
        }
    }
    if group.iter().any(|&i| vgpus[i].cap && !vgpus[i].demand) {
        return grants;
    }
    let mut spare = dt_ns.saturating_sub(given) + untaken;
    let mut tiers: Vec<u32> = demanding.iter().map(|&i| vgpus[i].priority).collect();
    tiers.sort_unstable_by(|a, b| b.cmp(a));
    tiers.dedup();
    for tier in tiers {
        let takers: Vec<usize> =
            demanding.iter().copied().filter(|&i| !vgpus[i].cap && vgpus[i].priority == tier).collect();
        spare = fill(&mut grants, vgpus, &takers, spare);
    }
    grants
}

/// Longest interval [`catch_up`] grants for at once.
pub const CATCH_UP_MAX_NS: u64 = 100_000_000;
/// The interval whose grants measure the rate at which [`catch_up`] would fill each bucket.
const RATE_NS: u64 = 1_000_000;

/// What to grant `vgpus` at once (same order) while their device is idle: when every one of them that
/// takes part and has demand waits for tokens (none is between launches, about to queue work of its own;
/// none has tokens and is about to go), the grants of the shortest interval (at most [`CATCH_UP_MAX_NS`])
/// after which the first of them has tokens, as [`plan`] splits any interval. Nothing while a `high`
/// vGPU holds the device or has demand, nor when a vGPU there is capped (a capped vGPU's share is a
/// ceiling in time, and an idle capped vGPU keeps everyone to their shares: both want the device left idle).
pub fn catch_up(vgpus: &[Vgpu], high_hold: bool) -> Vec<u64> {
    let none = vec![0u64; vgpus.len()];
    let part = takes_part(vgpus, high_hold);
    let group: Vec<usize> = (0..vgpus.len()).filter(|&i| part[i]).collect();
    if high_hold || vgpus.iter().any(|v| v.cap) {
        return none;
    }
    let demanding: Vec<usize> = group.iter().copied().filter(|&i| vgpus[i].demand).collect();
    // A `high` vGPU with demand takes no tokens: it is between launches, or holds the device.
    let ready = |v: &Vgpu| v.priority < priority::HIGH && v.waiting && v.tokens <= 0;
    if demanding.is_empty() || demanding.iter().any(|&i| !ready(&vgpus[i])) {
        return none;
    }
    let rate = plan(vgpus, RATE_NS, false);
    // The first to have tokens: the least time to fill its debt at its rate.
    let first = demanding
        .iter()
        .filter(|&&i| rate[i] > 0)
        .map(|&i| {
            let need = 1u64.saturating_add(vgpus[i].tokens.unsigned_abs());
            (need.saturating_mul(RATE_NS).div_ceil(rate[i]), i, need)
        })
        .min();
    let Some((dt, i, need)) = first else { return none };
    let mut grants = plan(vgpus, dt.min(CATCH_UP_MAX_NS), false);
    // Rounding in the split must not leave it a nanosecond short, and its room must not either.
    if dt <= CATCH_UP_MAX_NS {
        grants[i] = grants[i].max(need.min(vgpus[i].room));
    }
    grants
}

/// Which of `vgpus` take part in an interval: those not suspended, and only the `high` ones while one of
/// them is busy or `high_hold` is set.
pub fn takes_part(vgpus: &[Vgpu], high_hold: bool) -> Vec<bool> {
    let high = |v: &Vgpu| v.priority >= priority::HIGH;
    let high_active = high_hold || vgpus.iter().any(|v| high(v) && !v.suspended && v.busy);
    vgpus.iter().map(|v| !v.suspended && (!high_active || high(v))).collect()
}

/// Shares `amount` among `takers` in proportion to their shares (evenly when those are all 0), none
/// beyond its room, again and again while some have room left; returns what nobody could take. The part
/// of the first round a busy taker cannot take is forfeited, not shared again (see the module
/// documentation).
fn fill(grants: &mut [u64], vgpus: &[Vgpu], takers: &[usize], mut amount: u64) -> u64 {
    let mut first = true;
    while amount > 0 {
        let open: Vec<usize> =
            takers.iter().copied().filter(|&i| grants[i] < vgpus[i].room || (first && vgpus[i].busy)).collect();
        let weights: u64 = open.iter().map(|&i| vgpus[i].share as u64).sum();
        let (mut handed, mut forfeited) = (0u64, 0u64);
        for &i in &open {
            let (w, total) = if weights == 0 { (1, open.len() as u64) } else { (vgpus[i].share as u64, weights) };
            let part = ((amount as u128 * w as u128).div_ceil(total as u128) as u64).min(amount - handed - forfeited);
            let take = part.min(vgpus[i].room.saturating_sub(grants[i]));
            grants[i] += take;
            handed += take;
            if vgpus[i].busy {
                forfeited += part - take;
            }
        }
        if handed == 0 && forfeited == 0 {
            break;
        }
        amount -= handed + forfeited;
        first = false;
    }
    amount
}

/// What a bucket holding `tokens` can still take before `burst`.
pub fn room(tokens: i64, burst: i64) -> u64 {
    burst.saturating_sub(tokens).max(0) as u64
}

/// A bucket of `tokens` after a grant of `grant` (negative: tokens taken), held to at most `burst` (it
/// may stay negative: debt).
pub fn refill(tokens: i64, grant: i64, burst: i64) -> i64 {
    tokens.saturating_add(grant).min(burst)
}

/// Whether waiters must be woken after a bucket went from `before` to `after`.
pub fn should_wake(before: i64, after: i64, waiters: u32) -> bool {
    waiters > 0 || (before <= 0 && after > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MIN_BURST_NS;

    const MS: u64 = 1_000_000;

    fn busy(share: u32) -> Vgpu {
        Vgpu {
            share,
            priority: priority::NORMAL,
            cap: false,
            suspended: false,
            demand: true,
            busy: true,
            room: u64::MAX,
            waiting: false,
            tokens: 0,
        }
    }

    fn idle(share: u32) -> Vgpu {
        Vgpu { demand: false, busy: false, ..busy(share) }
    }

    #[test]
    fn shares_split_the_interval() {
        assert_eq!(plan(&[busy(30), busy(70)], MS, false), [300_000, 700_000]);
        assert_eq!(plan(&[busy(10), busy(20), busy(30), busy(40)], MS, false), [100_000, 200_000, 300_000, 400_000]);
    }

    #[test]
    fn idle_and_unassigned_share_goes_to_demand() {
        // d: the idle 30% is absorbed by the others in proportion to their shares.
        let g = plan(&[idle(30), busy(30), busy(40)], 700 * 1000, false);
        assert_eq!(g, [0, 300_000, 400_000]);
        // Alone at 40%, a vGPU gets the whole device; shares of 0 split evenly.
        assert_eq!(plan(&[busy(40)], MS, false), [MS]);
        assert_eq!(plan(&[busy(0), busy(0)], MS, false), [MS / 2, MS / 2]);
        assert_eq!(plan(&[idle(50), idle(50)], MS, false), [0, 0]);
    }

    #[test]
    fn a_capped_idle_vgpu_keeps_everyone_to_their_share() {
        let capped_idle = Vgpu { cap: true, ..idle(30) };
        assert_eq!(plan(&[capped_idle, busy(30), busy(20)], MS, false), [0, 300_000, 200_000]);
        // A capped busy vGPU never exceeds its share; the others absorb what is left.
        let capped_busy = Vgpu { cap: true, ..busy(30) };
        assert_eq!(plan(&[capped_busy, busy(20)], MS, false), [300_000, 700_000]);
        assert_eq!(plan(&[capped_busy], MS, false), [300_000]);
    }

    #[test]
    fn high_priority_preempts_lower_ones() {
        let high = Vgpu { priority: priority::HIGH, ..busy(20) };
        assert_eq!(plan(&[busy(80), high], MS, false), [0, MS]);
        // Held by high_until_ns, or merely recently launched: lower ones still wait / share.
        let quiet_high = Vgpu { busy: false, demand: false, ..high };
        assert_eq!(plan(&[busy(80), quiet_high], MS, true), [0, 0]);
        assert_eq!(plan(&[busy(80), quiet_high], MS, false), [MS, 0]);
        // A suspended high vGPU preempts nobody.
        assert_eq!(plan(&[busy(80), Vgpu { suspended: true, ..high }], MS, false), [MS, 0]);
    }

    #[test]
    fn low_priority_absorbs_only_what_normal_leaves() {
        let low = Vgpu { priority: priority::LOW, ..busy(20) };
        assert_eq!(plan(&[low, busy(30)], MS, false), [200_000, 800_000]);
        assert_eq!(plan(&[low, idle(30)], MS, false), [MS, 0]);
    }

    /// Launched lately, nothing queued now: demand without being busy.
    fn recent(share: u32) -> Vgpu {
        Vgpu { busy: false, ..busy(share) }
    }

    #[test]
    fn what_the_full_bucket_of_a_vgpu_with_nothing_queued_cannot_take_goes_to_the_others() {
        let full = Vgpu { room: 0, ..recent(30) };
        assert_eq!(plan(&[full, busy(70)], MS, false), [0, MS]);
        let nearly = Vgpu { room: 100_000, ..recent(30) };
        assert_eq!(plan(&[nearly, busy(20), busy(50)], MS, false), [100_000, 257_143, 642_857]);
        // Normal vGPUs full: the low one takes the rest.
        let low = Vgpu { priority: priority::LOW, ..busy(10) };
        let tight = Vgpu { room: 200_000, ..recent(40) };
        assert_eq!(plan(&[low, tight, Vgpu { room: 0, ..recent(50) }], MS, false), [800_000, 200_000, 0]);
        // What a capped vGPU does not take is given to nobody.
        let capped_full = Vgpu { cap: true, room: 0, ..recent(30) };
        assert_eq!(plan(&[capped_full, busy(20)], MS, false), [0, 700_000]);
        // Nobody has room: nothing is handed out.
        assert_eq!(plan(&[full, Vgpu { room: 0, ..busy(70) }], MS, false), [0, 0]);
        assert_eq!((room(500, 2000), room(3000, 2000), room(-1000, 2000)), (1500, 0, 3000));
    }

    #[test]
    fn what_the_full_bucket_of_a_busy_vgpu_cannot_take_is_not_given_away() {
        // Its queued work waits behind the others': more tokens for them would crowd it out further.
        let crowded = Vgpu { room: 100_000, ..busy(30) };
        assert_eq!(plan(&[crowded, busy(20), busy(50)], MS, false), [100_000, 200_000, 500_000]);
        // Nor its part of an idle vGPU's share: the others get theirs (d: 30/(30+40) of the idle 30%).
        let full = Vgpu { room: 0, ..busy(40) };
        assert_eq!(plan(&[idle(30), busy(30), full], MS, false), [0, 428_572, 0]);
        // a: the 70% vGPU, not held by tokens, keeps the device while the 30% one is held to its share.
        assert_eq!(plan(&[busy(30), Vgpu { room: 300_000, ..busy(70) }], MS, false), [300_000, 300_000]);
    }

    /// Waiting for tokens, with `tokens` in its bucket.
    fn waits(share: u32, tokens: i64) -> Vgpu {
        let room = room(tokens, burst(MS));
        Vgpu { waiting: true, tokens, room, ..busy(share) }
    }

    #[test]
    fn an_idle_device_whose_vgpus_all_wait_for_tokens_lets_the_first_go_at_once() {
        // 30/70, both in debt: the 30% one needs 100 µs at 300 µs per ms, the 70% one 3 ms at 700 µs per
        // ms. Waiting 333,334 ns would let the first go: that interval is granted now, split by share.
        let g = catch_up(&[waits(30, -99_999), waits(70, -3 * (MS as i64))], false);
        assert_eq!(g, [100_001, 233_333]);
        assert!(-99_999 + g[0] as i64 > 0, "the first has tokens");
        // Alone on its device (the other idle), a vGPU waiting after a long kernel's debt gets it at once.
        assert_eq!(catch_up(&[waits(70, -5 * (MS as i64)), idle(30)], false), [5 * MS + 1, 0]);
        // Rounding never leaves the first short (the 67% one, sooner at its rate).
        let g = catch_up(&[waits(33, -1), waits(67, -1)], false);
        assert!(g[1] >= 2, "{g:?}");
    }

    #[test]
    fn no_catch_up_while_a_vgpu_is_about_to_queue_work_or_the_device_must_stay_idle() {
        let debt = -(MS as i64);
        // Between launches (demand, nothing waiting): it queues its next work at once, and the engine is
        // its; the other waits its turn.
        assert_eq!(catch_up(&[recent(30), waits(70, debt)], false), [0, 0]);
        // A waiting launch that has tokens goes by itself.
        assert_eq!(catch_up(&[waits(30, 5), waits(70, debt)], false), [0, 0]);
        // Nobody waits: nothing to do.
        assert_eq!(catch_up(&[idle(30), idle(70)], false), [0, 0]);
        // A capped vGPU's share is a ceiling in time; an idle capped one keeps everyone to their shares.
        assert_eq!(catch_up(&[Vgpu { cap: true, ..waits(30, debt) }, idle(70)], false), [0, 0]);
        assert_eq!(catch_up(&[Vgpu { cap: true, ..idle(30) }, waits(70, debt)], false), [0, 0]);
        // A `high` vGPU holds the device, or takes part.
        assert_eq!(catch_up(&[waits(30, debt), waits(70, debt)], true), [0, 0]);
        let high = Vgpu { priority: priority::HIGH, ..waits(20, debt) };
        assert_eq!(catch_up(&[waits(80, debt), high], false), [0, 0]);
        assert_eq!(catch_up(&[waits(80, debt), Vgpu { waiting: false, busy: false, ..high }], false), [0, 0]);
        // An idle `high` vGPU (no demand) leaves the others to catch up.
        let quiet_high = Vgpu { demand: false, busy: false, waiting: false, ..high };
        assert_eq!(catch_up(&[waits(80, debt), quiet_high], false), [MS + 1, 0]);
        // A suspended vGPU takes no part: the other goes.
        let suspended = Vgpu { suspended: true, ..waits(50, debt) };
        assert_eq!(catch_up(&[suspended, waits(50, debt)], false), [0, MS + 1]);
        // A debt beyond what one catch-up grants: the longest interval, split as any.
        let deep = -10 * (CATCH_UP_MAX_NS as i64);
        assert_eq!(catch_up(&[waits(50, deep), waits(50, deep)], false), [CATCH_UP_MAX_NS / 2, CATCH_UP_MAX_NS / 2]);
    }

    #[test]
    fn a_suspended_vgpu_gets_nothing() {
        let suspended = Vgpu { suspended: true, ..busy(50) };
        assert_eq!(plan(&[suspended, busy(50)], MS, false), [0, MS]);
        let capped_suspended = Vgpu { cap: true, ..suspended };
        assert_eq!(plan(&[capped_suspended, busy(50)], MS, false), [0, MS]);
    }

    #[test]
    fn demand_and_buckets() {
        let now = 10 * MS;
        let o = Observed { processes: true, ..Observed::default() };
        assert!(!o.demand(now));
        assert!(Observed { last_launch_ns: now - MS, ..o }.demand(now));
        assert!(!Observed { last_launch_ns: now - 3 * MS, ..o }.demand(now));
        assert!(Observed { waiters: 1, ..o }.busy());
        assert!(!Observed { inflight_ns: 5, processes: false, ..o }.demand(now), "left behind by the dead");
        assert_eq!(burst(MS), 2 * MS as i64);
        assert_eq!(burst(10_000), MIN_BURST_NS);
        assert_eq!(burst(5 * MS), 10 * MS as i64);
        assert_eq!(refill(-500, 300, 2000), -200, "debt is kept");
        assert_eq!(refill(1500, 1000, 2000), 2000, "no hoarding");
        assert_eq!(refill(5000, 0, 2000), 2000);
        assert!(should_wake(0, 1, 0) && should_wake(5, 6, 1) && !should_wake(5, 6, 0) && !should_wake(-9, -1, 0));
    }
}
