//! Removing the vGPUs of containers that have ended: a vGPU the plugin created (`k8s-…`) that had
//! processes attached (seen attached, or its peak memory or launches say so) and has had none for a grace
//! period (counted from when the plugin last saw one attached, or first saw it idle) is removed through the
//! daemon's API. A vGPU never joined is kept (its container may not have started yet; it goes when its replicas are allocated
//! again, see [`crate::allocate::stale_names`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tessera_client::{Client, ErrorCode, Stats};

/// The prefix of the vGPUs the plugin creates.
pub const PREFIX: &str = "k8s-";

/// What the collector remembers of each plugin vGPU: when a process was last seen attached to it.
#[derive(Debug)]
pub struct Collector {
    grace: Duration,
    last_joined: HashMap<String, Instant>,
}

impl Collector {
    /// A collector removing vGPUs left without processes for `grace`.
    pub fn new(grace: Duration) -> Collector {
        Collector { grace, last_joined: HashMap::new() }
    }

    /// The vGPUs of `stats` to remove at `now`, noting those with processes.
    pub fn due(&mut self, stats: &Stats, now: Instant) -> Vec<String> {
        let mine: Vec<_> = stats.vgpus.iter().filter(|v| v.name.starts_with(PREFIX)).collect();
        self.last_joined.retain(|name, _| mine.iter().any(|v| &v.name == name));
        let mut due = Vec::new();
        for v in mine {
            // A process that joined and left between two looks leaves its mark in the figures.
            let joined_ever = !v.processes.is_empty()
                || v.memory.peak > 0
                || v.launches > 0
                || self.last_joined.contains_key(&v.name);
            if !v.processes.is_empty() {
                self.last_joined.insert(v.name.clone(), now);
            } else if joined_ever {
                let seen = *self.last_joined.entry(v.name.clone()).or_insert(now);
                if now.duration_since(seen) >= self.grace {
                    due.push(v.name.clone());
                }
            }
        }
        due
    }

    /// Removes the vGPUs due now; returns what it did, one line each (a vGPU joined again meanwhile is
    /// kept).
    pub fn collect(&mut self, client: &Client) -> Vec<String> {
        let Ok(stats) = client.stats(None) else { return Vec::new() };
        let mut said = Vec::new();
        for name in self.due(&stats, Instant::now()) {
            match client.remove(&name) {
                Ok(()) => {
                    self.last_joined.remove(&name);
                    said.push(format!("removed vGPU {name}: its container has ended"));
                }
                Err(e) if e.code == ErrorCode::InUse || e.code == ErrorCode::NotFound => {
                    self.last_joined.remove(&name);
                }
                Err(e) => said.push(format!("cannot remove vGPU {name}: {e}")),
            }
        }
        said
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::{ProcessStats, VgpuStats};

    fn stats(vgpus: &[(&str, bool)]) -> Stats {
        let vgpu = |&(name, joined): &(&str, bool)| VgpuStats {
            name: name.into(),
            processes: if joined { vec![ProcessStats { pid: 1, ..Default::default() }] } else { Vec::new() },
            ..Default::default()
        };
        Stats { vgpus: vgpus.iter().map(vgpu).collect(), ..Default::default() }
    }

    #[test]
    fn only_joined_then_idle_plugin_vgpus_are_due_after_the_grace() {
        let mut c = Collector::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let s = |d: u64| t0 + Duration::from_secs(d);
        assert!(c.due(&stats(&[("k8s-0-0", true), ("k8s-0-1", false), ("team", true)]), s(0)).is_empty());
        let idle = stats(&[("k8s-0-0", false), ("k8s-0-1", false), ("team", false)]);
        assert!(c.due(&idle, s(9)).is_empty(), "within the grace");
        assert_eq!(c.due(&idle, s(10)), ["k8s-0-0"], "never joined and not ours are kept");
        assert!(c.due(&stats(&[("k8s-0-1", false)]), s(11)).is_empty(), "a removed vGPU is forgotten");
        assert!(c.due(&stats(&[("k8s-0-0", false)]), s(30)).is_empty(), "a new vGPU of the name starts afresh");
        // Joined and left between two looks: its peak memory tells; the grace counts from the first look.
        let mut left = stats(&[("k8s-0-2", false)]);
        left.vgpus[0].memory.peak = 1 << 20;
        assert!(c.due(&left, s(40)).is_empty());
        assert_eq!(c.due(&left, s(50)), ["k8s-0-2"]);
    }
}
