//! What `tessera top` keeps between its polls of the daemon's `stats`: the previous snapshot, from which
//! the rates come (launches per second, share of time waiting for tokens: differences of two polls of the
//! daemon's counters), and each vGPU's recent achieved shares for its sparkline.

use std::collections::{HashMap, VecDeque};
use tessera_client::{Stats, VgpuStats};

/// How many polls of achieved share each vGPU's history keeps (the sparkline shows the latest of them).
pub const KEPT: usize = 32;

/// One vGPU's rates between the last two polls.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Kernel launches per second.
    pub launches_per_s: f64,
    /// Time its launches spent waiting for tokens, in percent of the interval (the sum over its
    /// processes: two launches waiting side by side count twice).
    pub waiting_pct: f64,
}

/// The polls so far; see the module documentation.
#[derive(Debug, Default)]
pub struct History {
    previous: Option<Stats>,
    latest: Option<Stats>,
    shares: HashMap<String, VecDeque<f64>>,
}

impl History {
    /// Records a new poll.
    pub fn push(&mut self, stats: Stats) {
        for v in &stats.vgpus {
            let kept = self.shares.entry(v.name.clone()).or_default();
            kept.push_back(v.achieved.last_1s_pct);
            if kept.len() > KEPT {
                kept.pop_front();
            }
        }
        // A vGPU removed meanwhile forgets its history (one created again under its name starts anew).
        self.shares.retain(|name, _| stats.vgpus.iter().any(|v| &v.name == name));
        self.previous = self.latest.replace(stats);
    }

    /// The latest poll.
    pub fn latest(&self) -> Option<&Stats> {
        self.latest.as_ref()
    }

    /// The achieved shares of vGPU `name` over the polls kept, oldest first.
    pub fn shares(&self, name: &str) -> Vec<f64> {
        self.shares.get(name).map_or_else(Vec::new, |s| s.iter().copied().collect())
    }

    /// The rates of `v` (of the latest poll) since the previous poll; `None` after a single poll, for a
    /// vGPU new since, or when its counters went back (a daemon restarted with it).
    pub fn rates(&self, v: &VgpuStats) -> Option<Rates> {
        let (previous, latest) = (self.previous.as_ref()?, self.latest.as_ref()?);
        let before = previous.vgpus.iter().find(|p| p.name == v.name)?;
        let ns = latest.at_ns.checked_sub(previous.at_ns).filter(|&ns| ns > 0)? as f64;
        let launches = v.launches.checked_sub(before.launches)? as f64;
        let waited = v.wait_ns.checked_sub(before.wait_ns)? as f64;
        Some(Rates { launches_per_s: launches / ns * 1e9, waiting_pct: waited / ns * 100.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vgpu(name: &str, launches: u64, wait_ns: u64, share: f64) -> VgpuStats {
        let mut v = VgpuStats { name: name.into(), launches, wait_ns, ..VgpuStats::default() };
        v.achieved.last_1s_pct = share;
        v
    }

    fn stats(at_ns: u64, vgpus: Vec<VgpuStats>) -> Stats {
        Stats { at_ns, vgpus, devices: Vec::new() }
    }

    #[test]
    fn rates_are_differences_of_two_polls() {
        let mut h = History::default();
        h.push(stats(1_000_000_000, vec![vgpu("a", 100, 0, 10.0)]));
        assert_eq!(h.rates(&vgpu("a", 100, 0, 10.0)), None, "one poll gives no rate");
        h.push(stats(1_500_000_000, vec![vgpu("a", 600, 125_000_000, 20.0), vgpu("b", 5, 0, 1.0)]));
        let latest = h.latest().unwrap().clone();
        let a = h.rates(&latest.vgpus[0]).unwrap();
        assert_eq!((a.launches_per_s, a.waiting_pct), (1000.0, 25.0));
        assert_eq!(h.rates(&latest.vgpus[1]), None, "b is new");
        assert_eq!(h.shares("a"), [10.0, 20.0]);
        // A restarted daemon's counters start again: no rate rather than a wrapped one.
        h.push(stats(2_000_000_000, vec![vgpu("a", 3, 0, 5.0)]));
        assert_eq!(h.rates(&h.latest().unwrap().vgpus[0].clone()), None);
        assert!(h.shares("b").is_empty(), "b was removed");
    }

    #[test]
    fn the_history_is_bounded() {
        let mut h = History::default();
        for i in 0..(KEPT as u64 + 10) {
            h.push(stats(i * 1_000_000, vec![vgpu("a", i, 0, i as f64)]));
        }
        let shares = h.shares("a");
        assert_eq!(shares.len(), KEPT);
        assert_eq!(shares.last(), Some(&((KEPT + 9) as f64)));
    }
}
