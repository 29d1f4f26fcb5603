//! Removing the vGPUs of containers that have ended: a vGPU the plugin created (`k8s-…`) that had
//! processes attached (seen attached, or its peak memory or launches say so) and has had none for a grace
//! period (counted from when the plugin last saw one attached, or first saw it idle) is removed through the
//! daemon's API. A vGPU never joined is kept (its container may not have started yet; it goes when its replicas are allocated
//! again, see [`crate::allocate::stale_names`]).
//!
//! With the Kubernetes API, a vGPU whose pod the plugin knows ([`crate::pods`]) has its [`Fate`] decided
//! by that pod instead: removed at once when the pod is gone or has ended, kept while it lives (so a
//! container that crashes and restarts keeps its vGPU past the grace).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tessera_client::{Client, ErrorCode, Stats};

/// The prefix of the vGPUs the plugin creates.
pub const PREFIX: &str = "k8s-";

/// What becomes of a vGPU whose pod is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Its pod lives: keep it, whatever its processes do.
    Keep,
    /// Its pod is gone or has ended (why): remove it now.
    Remove(String),
}

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

    /// The vGPUs of `stats` to remove at `now`, with why, noting those with processes; those in `fates` go
    /// by their fate, the others by the grace.
    pub fn due(&mut self, stats: &Stats, now: Instant, fates: &HashMap<String, Fate>) -> Vec<(String, String)> {
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
            }
            match fates.get(&v.name) {
                Some(Fate::Remove(why)) => due.push((v.name.clone(), why.clone())),
                Some(Fate::Keep) => {}
                None if !v.processes.is_empty() || !joined_ever => {}
                None => {
                    let seen = *self.last_joined.entry(v.name.clone()).or_insert(now);
                    if now.duration_since(seen) >= self.grace {
                        due.push((v.name.clone(), "its container has ended".into()));
                    }
                }
            }
        }
        due
    }

    /// Removes the vGPUs due now (see [`Collector::due`]); returns the names removed (or found gone) and
    /// what it did, one line each (a vGPU with processes attached is kept: the daemon refuses).
    pub fn collect(&mut self, client: &Client, fates: &HashMap<String, Fate>) -> (Vec<String>, Vec<String>) {
        let Ok(stats) = client.stats(None) else { return (Vec::new(), Vec::new()) };
        let mut said = Vec::new();
        let mut removed = Vec::new();
        // A recorded vGPU already gone (removed by hand) leaves only its record to forget.
        for (name, fate) in fates {
            if matches!(fate, Fate::Remove(_)) && !stats.vgpus.iter().any(|v| &v.name == name) {
                removed.push(name.clone());
            }
        }
        for (name, why) in self.due(&stats, Instant::now(), fates) {
            match client.remove(&name) {
                Ok(()) => {
                    self.last_joined.remove(&name);
                    said.push(format!("removed vGPU {name}: {why}"));
                    removed.push(name);
                }
                Err(e) if e.code == ErrorCode::NotFound => {
                    self.last_joined.remove(&name);
                    removed.push(name);
                }
                Err(e) if e.code == ErrorCode::InUse => {
                    self.last_joined.remove(&name);
                }
                Err(e) => said.push(format!("cannot remove vGPU {name}: {e}")),
            }
        }
        (removed, said)
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

    /// The names [`Collector::due`] gives, without fates.
    fn due(c: &mut Collector, stats: &Stats, now: Instant) -> Vec<String> {
        c.due(stats, now, &HashMap::new()).into_iter().map(|(name, _)| name).collect()
    }

    #[test]
    fn vgpus_of_known_pods_go_by_their_fate() {
        let mut c = Collector::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let fates: HashMap<String, Fate> = [
            ("k8s-0-0".to_string(), Fate::Keep),
            ("k8s-0-1".to_string(), Fate::Remove("pod d/p container c is gone from the node".into())),
        ]
        .into();
        let joined = stats(&[("k8s-0-0", true), ("k8s-0-1", true), ("k8s-0-2", true)]);
        assert_eq!(
            c.due(&joined, t0, &fates),
            [("k8s-0-1".into(), "pod d/p container c is gone from the node".into())]
        );
        let idle = stats(&[("k8s-0-0", false), ("k8s-0-2", false)]);
        let later = t0 + Duration::from_secs(100);
        let names: Vec<String> = c.due(&idle, later, &fates).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["k8s-0-2"], "a living pod's vGPU stays past the grace; an unknown one does not");
    }

    #[test]
    fn only_joined_then_idle_plugin_vgpus_are_due_after_the_grace() {
        let mut c = Collector::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let s = |d: u64| t0 + Duration::from_secs(d);
        assert!(due(&mut c, &stats(&[("k8s-0-0", true), ("k8s-0-1", false), ("team", true)]), s(0)).is_empty());
        let idle = stats(&[("k8s-0-0", false), ("k8s-0-1", false), ("team", false)]);
        assert!(due(&mut c, &idle, s(9)).is_empty(), "within the grace");
        assert_eq!(due(&mut c, &idle, s(10)), ["k8s-0-0"], "never joined and not ours are kept");
        assert!(due(&mut c, &stats(&[("k8s-0-1", false)]), s(11)).is_empty(), "a removed vGPU is forgotten");
        assert!(due(&mut c, &stats(&[("k8s-0-0", false)]), s(30)).is_empty(), "a new vGPU of the name starts afresh");
        // Joined and left between two looks: its peak memory tells; the grace counts from the first look.
        let mut left = stats(&[("k8s-0-2", false)]);
        left.vgpus[0].memory.peak = 1 << 20;
        assert!(due(&mut c, &left, s(40)).is_empty());
        assert_eq!(due(&mut c, &left, s(50)), ["k8s-0-2"]);
    }
}
