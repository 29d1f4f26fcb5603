//! The audit: a vGPU whose processes take more device time than the daemon granted it is suspended.
//!
//! A tenant can write its vGPU's live file, bucket included (or run kernels without the shim), so what
//! the shim and that file say cannot be what the daemon goes by. Every second the audit compares two
//! figures no tenant can write:
//! - what the vGPU **took**: the device time of its processes, from the driver's per-process utilization
//!   (see [`crate::tenants::nvml_usage`]). A process counts for the vGPU whose (validated, see
//!   [`crate::tenants::integrity`]) process slot names it, or, named by none, for the only managed vGPU of the
//!   device its user owns;
//! - what it was **entitled** to: the tokens the daemon itself added to its bucket (refills, by share,
//!   with what idle vGPUs left, and the restart after a `high` hold), counted by the refill loop as it adds
//!   them ([`credit`]). Tokens are device time, and an honest vGPU spends exactly what it was given, give or
//!   take one bucket (`max(2 × window, 2 ms)`) and the work in its window. It is entitled to its share at
//!   least (a tenant keeping its own bucket full leaves the daemon no room to grant it anything), and a
//!   `high` vGPU to the whole device (its launches take no tokens while it holds it).
//!
//! Over the last [`WINDOW`] seconds, a vGPU that took more than its entitlement plus [`TOLERANCE_PCT`]
//! points of the device is suspended (`flags::AUDIT`), with a line on stderr naming it and the figures;
//! `tessera vgpu resume` lifts it, and its audit starts over. A vGPU is judged only on a full window of
//! its own (created, resumed or freshly audited: 10 s first).
//!
//! Limits: the entitlement is only as right as the daemon's charges. Tokens pay for what the charger
//! charges; a vGPU charged less device time than its kernels took (its time charged to a neighbour, say)
//! keeps a fuller bucket, is granted less, and takes more than it was granted: from the figures the audit
//! has, that is indistinguishable from a tenant whose kernels the charger never saw (it runs some without
//! the shim, and the neighbours that waited behind them are charged for the wait), so the audit suspends
//! it. Restarts of a vGPU's processes and idle stretches within the window do not matter: it is judged on
//! sums over the window.

use crate::state::State;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use tessera_region::{MAX_VGPUS, priority};

/// Seconds a vGPU is judged over.
pub const WINDOW: usize = 10;
/// Points of the device a vGPU may take beyond its entitlement over a window (measurement noise: the
/// driver's percentages are whole numbers, the host's scheduling jitters).
pub const TOLERANCE_PCT: f64 = 5.0;

/// Tokens the daemon added to each slot's bucket (ns; negative when it took some back), since it started
/// (kept in the daemon's [`State`](crate::state::State)).
pub struct Credits([AtomicI64; MAX_VGPUS]);

impl Default for Credits {
    fn default() -> Credits {
        Credits([const { AtomicI64::new(0) }; MAX_VGPUS])
    }
}

impl Credits {
    /// Counts `ns` of tokens the daemon just added to slot `slot`'s bucket (negative: took back).
    pub fn credit(&self, slot: usize, ns: i64) {
        if let Some(c) = self.0.get(slot) {
            c.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// The tokens counted for slot `slot` so far.
    pub fn credited(&self, slot: usize) -> i64 {
        self.0.get(slot).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// One audit interval of one vGPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interval {
    /// Its length.
    pub elapsed_ns: u64,
    /// Device time the vGPU's processes took in it (the driver's figure).
    pub took_ns: u64,
    /// Tokens the daemon added to its bucket in it.
    pub granted_ns: i64,
}

/// A vGPU found taking more than it was entitled to over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overuse {
    /// Percent of the device it took.
    pub took_pct: f64,
    /// Percent it was entitled to.
    pub entitled_pct: f64,
    /// Seconds judged.
    pub seconds: f64,
}

impl Overuse {
    /// `took 50% of device 0 over 10 s, entitled to 20%`.
    pub fn describe(&self, device: u32) -> String {
        format!(
            "took {:.0}% of device {device} over {:.0} s, entitled to {:.0}%",
            self.took_pct, self.seconds, self.entitled_pct
        )
    }
}

/// The last [`WINDOW`] intervals of one vGPU.
#[derive(Debug, Clone, Default)]
pub struct History {
    intervals: VecDeque<Interval>,
}

impl History {
    /// Adds an interval, forgetting the oldest beyond [`WINDOW`].
    pub fn push(&mut self, i: Interval) {
        if self.intervals.len() == WINDOW {
            self.intervals.pop_front();
        }
        self.intervals.push_back(i);
    }

    /// Forgets everything: the vGPU is judged again only after a full window.
    pub fn clear(&mut self) {
        self.intervals.clear();
    }

    /// The overuse over the window, when it is full and the vGPU took more than its entitlement plus
    /// [`TOLERANCE_PCT`]: what it was granted, but at least `floor_pct` (its share: what it is owed
    /// whenever it has work, which a tenant that keeps its own bucket full leaves the daemon no room to
    /// grant; 100 for a `high` vGPU).
    pub fn overuse(&self, floor_pct: f64) -> Option<Overuse> {
        if self.intervals.len() < WINDOW {
            return None;
        }
        let elapsed: u64 = self.intervals.iter().map(|i| i.elapsed_ns).sum();
        if elapsed == 0 {
            return None;
        }
        let took: u64 = self.intervals.iter().map(|i| i.took_ns).fold(0, u64::saturating_add);
        let granted: i64 = self.intervals.iter().map(|i| i.granted_ns).fold(0, i64::saturating_add);
        let pct = |ns: f64| ns * 100.0 / elapsed as f64;
        let took_pct = pct(took as f64).min(100.0);
        let entitled_pct = pct(granted.max(0) as f64).max(floor_pct).min(100.0);
        (took_pct > entitled_pct + TOLERANCE_PCT).then_some(Overuse {
            took_pct,
            entitled_pct,
            seconds: elapsed as f64 / 1e9,
        })
    }
}

/// One managed vGPU of a device, as an audit round sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Its slot.
    pub slot: usize,
    /// Its user.
    pub owner: u32,
    /// [`priority`] value.
    pub priority: u32,
    /// Share in percent.
    pub share: u32,
    /// Suspended: not audited (and judged afresh once resumed).
    pub suspended: bool,
}

/// The audit's memory of one device's vGPUs.
pub struct Auditor {
    histories: Vec<History>,
    credits: Vec<i64>,
    /// The daemon's state, whose credits the device loops count.
    state: Arc<State>,
}

impl Auditor {
    /// An auditor for a region of [`MAX_VGPUS`] slots, of the daemon whose state is `state`.
    pub fn new(state: Arc<State>) -> Auditor {
        let credits = (0..MAX_VGPUS).map(|s| state.credits.credited(s)).collect();
        Auditor { histories: vec![History::default(); MAX_VGPUS], credits, state }
    }

    /// One round over `members` (the device's managed vGPUs), given every managed vGPU's attached pids
    /// `attached` (slot, pid; of every device) and the device time `used` of each process on this device
    /// (pid, ns; `owner_of` gives a pid's uid) over an interval of `elapsed_ns`. A process attached to a
    /// vGPU of another device counts for nobody here (launches on other devices than a vGPU's are not
    /// limited). Returns the vGPUs to suspend.
    pub fn round(
        &mut self,
        members: &[Member],
        attached: &[(usize, u32)],
        used: &[(u32, u64)],
        owner_of: impl Fn(u32) -> Option<u32>,
        elapsed_ns: u64,
    ) -> Vec<(usize, Overuse)> {
        let mut took = vec![0u64; MAX_VGPUS];
        for &(pid, ns) in used {
            let joined = attached.iter().find(|&&(_, p)| p == pid).map(|&(s, _)| s);
            let slot = joined.filter(|&s| members.iter().any(|m| m.slot == s)).or_else(|| {
                joined.is_none().then_some(())?;
                let uid = owner_of(pid)?;
                let mut mine = members.iter().filter(|m| m.owner == uid);
                match (mine.next(), mine.next()) {
                    (Some(m), None) => Some(m.slot),
                    _ => None,
                }
            });
            if let Some(t) = slot.and_then(|s| took.get_mut(s)) {
                *t = t.saturating_add(ns);
            }
        }
        let mut found = Vec::new();
        for (slot, &took) in took.iter().enumerate() {
            let now = self.state.credits.credited(slot);
            let granted = now.wrapping_sub(std::mem::replace(&mut self.credits[slot], now));
            let h = &mut self.histories[slot];
            match members.iter().find(|m| m.slot == slot) {
                Some(m) if !m.suspended && elapsed_ns > 0 => {
                    h.push(Interval { elapsed_ns, took_ns: took, granted_ns: granted });
                    let floor = if m.priority >= priority::HIGH { 100.0 } else { f64::from(m.share.min(100)) };
                    if let Some(o) = h.overuse(floor) {
                        h.clear();
                        found.push((slot, o));
                    }
                }
                Some(_) if elapsed_ns == 0 => {}
                _ => h.clear(),
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn second(took_pct: u64, granted_pct: i64) -> Interval {
        Interval { elapsed_ns: S, took_ns: took_pct * S / 100, granted_ns: granted_pct * S as i64 / 100 }
    }

    #[test]
    fn a_full_window_over_the_entitlement_by_more_than_the_tolerance_is_overuse() {
        let mut h = History::default();
        for _ in 0..WINDOW - 1 {
            h.push(second(50, 20));
        }
        assert_eq!(h.overuse(0.0), None, "nine seconds are not a window");
        h.push(second(50, 20));
        let o = h.overuse(0.0).unwrap();
        assert_eq!((o.took_pct.round(), o.entitled_pct.round(), o.seconds.round()), (50.0, 20.0, 10.0));
        assert_eq!(o.describe(0), "took 50% of device 0 over 10 s, entitled to 20%");
        assert_eq!(h.overuse(100.0), None, "a high vGPU is entitled to the whole device");
        assert_eq!(h.overuse(45.0), None, "nor beyond its share: granted less, it is owed its share");
        // Granted nothing (its bucket kept full by its tenant): entitled to its share.
        let mut full = History::default();
        for _ in 0..WINDOW {
            full.push(second(33, 0));
        }
        assert_eq!(full.overuse(20.0).unwrap().describe(0), "took 33% of device 0 over 10 s, entitled to 20%");
        h.clear();
        assert_eq!(h.overuse(0.0), None);
    }

    #[test]
    fn an_honest_vgpu_within_the_tolerance_is_never_overuse() {
        let mut h = History::default();
        // Took what it was given, a little more (one bucket's worth) or all of an idle device.
        for (took, granted) in [(80, 80), (24, 20), (100, 100), (0, 0), (60, 57)] {
            for _ in 0..WINDOW {
                h.push(second(took, granted));
            }
            assert_eq!(h.overuse(10.0), None, "took {took}%, granted {granted}%");
        }
        // Averaged over the window: one second of a burst does not condemn it.
        for _ in 0..WINDOW - 1 {
            h.push(second(30, 30));
        }
        h.push(second(70, 30));
        assert_eq!(h.overuse(10.0), None);
        // Negative or absurd grants never make the figures overflow or go beyond the device.
        for _ in 0..WINDOW {
            h.push(Interval { elapsed_ns: S, took_ns: u64::MAX, granted_ns: i64::MIN });
        }
        let o = h.overuse(10.0).unwrap();
        assert_eq!((o.took_pct, o.entitled_pct), (100.0, 10.0));
    }

    #[test]
    fn rounds_attribute_processes_and_suspend_only_the_overuser() {
        let state = Arc::new(State::default());
        let mut a = Auditor::new(Arc::clone(&state));
        let members = [
            Member { slot: 40, owner: 1000, priority: priority::NORMAL, share: 10, suspended: false },
            Member { slot: 41, owner: 1001, priority: priority::NORMAL, share: 10, suspended: false },
            Member { slot: 42, owner: 1001, priority: priority::NORMAL, share: 10, suspended: false },
        ];
        // Slot 40 is granted 20% but its pid 7 takes 50%; slot 41 takes its 40% (pid 8); pid 9 (uid 1000,
        // in no slot) counts for slot 40, the only vGPU of its user; pid 10 (uid 1001, two vGPUs) for none,
        // nor pid 11 (uid 1000), attached to slot 50, a vGPU of another device.
        let owner = |pid| Some(if pid == 9 || pid == 11 { 1000 } else { 1001 });
        let mut found = Vec::new();
        for _ in 0..WINDOW {
            state.credits.credit(40, S as i64 / 5);
            state.credits.credit(41, 2 * S as i64 / 5);
            let used = [(7, 4 * S / 10), (8, 4 * S / 10), (9, S / 10), (10, S / 2), (11, S)];
            found = a.round(&members, &[(40, 7), (41, 8), (50, 11)], &used, owner, S);
        }
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, 40);
        assert_eq!((found[0].1.took_pct.round(), found[0].1.entitled_pct.round()), (50.0, 20.0));
        // Judged again only after a full window of its own; suspended, not judged at all.
        state.credits.credit(40, S as i64 / 5);
        assert!(a.round(&members, &[(40, 7)], &[(7, S)], owner, S).is_empty());
        let suspended = [Member { suspended: true, ..members[0] }];
        for _ in 0..2 * WINDOW {
            assert!(a.round(&suspended, &[(40, 7)], &[(7, S)], owner, S).is_empty());
        }
    }

    /// The `overhead` benchmark's `busy` vGPU, as the audit sees it: a saturating process started and
    /// killed every few seconds (a new pid each time), idle in between, absorbing the whole device while
    /// its neighbour is idle and keeping to its grants beside it. Judged on what it took against what it
    /// was granted over 10 s, restarts and idle stretches included, it is never suspended; a tenant
    /// restarted the same way that takes 90% beside the neighbour while granted 50% is.
    #[test]
    fn a_tenant_restarted_every_few_seconds_is_judged_on_its_grants_across_restarts() {
        // (took %, granted %) for each second of a ten-second cycle; (0, 0): no process.
        let honest = [(95, 100), (50, 50), (50, 50), (95, 100), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0)];
        let greedy = [(90, 50), (90, 50), (90, 50), (90, 50), (90, 50), (90, 50), (90, 50), (90, 50), (0, 0), (0, 0)];
        let run = |slot: usize, cycle: [(u64, u64); 10]| {
            let members = [
                Member { slot, owner: 1000, priority: priority::NORMAL, share: 50, suspended: false },
                Member { slot: slot + 1, owner: 1000, priority: priority::NORMAL, share: 50, suspended: false },
            ];
            let state = Arc::new(State::default());
            let mut a = Auditor::new(Arc::clone(&state));
            let mut found = Vec::new();
            for second in 0..60u64 {
                let (took, granted) = cycle[second as usize % 10];
                let pid = 5000 + second as u32 / 10;
                state.credits.credit(slot, (granted * S / 100) as i64);
                let (used, attached) =
                    if took > 0 { (vec![(pid, took * S / 100)], vec![(slot, pid)]) } else { (vec![], vec![]) };
                found.extend(a.round(&members, &attached, &used, |_| Some(1000), S));
            }
            found
        };
        assert!(run(20, honest).is_empty(), "an honest tenant is never suspended");
        let found = run(30, greedy);
        assert!(!found.is_empty() && found.iter().all(|(slot, _)| *slot == 30), "{found:?}");
    }
}
