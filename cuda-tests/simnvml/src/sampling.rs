//! Per-process SM utilization for `nvmlDeviceGetProcessUtilization`, from the busy time the simulated
//! driver records for each process on each device.
//!
//! The state file keeps only each process's cumulative busy time, so this library remembers the readings it
//! has taken (the last [`KEPT`] per device and process). A query with `lastSeenTimeStamp` T measures from
//! the newest reading taken at or before T; when there is none (T = 0, or the first query in this process)
//! it measures from the process's start, i.e. over its lifetime. `smUtil` is the busy time within that
//! window over the window's length. As real NVML does, only processes busy during the window are reported.

use crate::clock;
use simgpu::SharedState;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use tessera_region::pid_ns::ProcView;

/// Readings remembered per device and process.
pub const KEPT: usize = 64;

/// One process's utilization over a window ending now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Process id.
    pub pid: u32,
    /// When the sample was taken, microseconds since the Unix epoch.
    pub time_us: u64,
    /// Percent of the window the process's kernels ran.
    pub sm_percent: u32,
}

/// A process, told apart from a later one reusing its pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    device: usize,
    pid: u32,
    start_ticks: u64,
}

/// Cumulative busy time at one moment.
#[derive(Debug, Clone, Copy)]
struct Reading {
    time_us: u64,
    busy_ns: u64,
}

/// Readings taken by earlier queries.
#[derive(Default)]
pub struct History {
    readings: Mutex<HashMap<Key, VecDeque<Reading>>>,
}

impl History {
    /// Samples of the processes busy on device `ordinal` since `last_seen_us` (see the module docs), and
    /// remembers this reading for later queries.
    pub fn samples(&self, state: &SharedState, ordinal: usize, last_seen_us: u64) -> Vec<Sample> {
        state.reclaim_dead();
        let now = clock::now_us();
        // The map only ever holds complete readings, so a poisoned lock still guards consistent data.
        let mut readings = self.readings.lock().unwrap_or_else(PoisonError::into_inner);
        let mut present = Vec::new();
        let mut samples = Vec::new();
        let view = ProcView::new();
        for p in state.processes() {
            // Named by its pid on the host, as the reader sees it.
            let Some(pid) = p.pid_here(&view) else { continue };
            let busy_ns = p.busy_ns[ordinal].load(Ordering::Acquire);
            if busy_ns == 0 {
                continue;
            }
            let key = Key { device: ordinal, pid, start_ticks: p.start_time.load(Ordering::Acquire) };
            present.push(key);
            let history = readings.entry(key).or_default();
            let since = (last_seen_us > 0)
                .then(|| history.iter().rev().find(|r| r.time_us <= last_seen_us).copied())
                .flatten()
                .unwrap_or_else(|| Reading { time_us: lifetime_start(key.start_ticks, now, busy_ns), busy_ns: 0 });
            let busy = busy_ns.saturating_sub(since.busy_ns);
            if busy > 0 && now > last_seen_us {
                samples.push(Sample {
                    pid,
                    time_us: now,
                    sm_percent: percent(busy, now.saturating_sub(since.time_us)),
                });
            }
            if history.len() == KEPT {
                history.pop_front();
            }
            history.push_back(Reading { time_us: now, busy_ns });
        }
        readings.retain(|k, _| k.device != ordinal || present.contains(k));
        samples
    }
}

/// When a process started; with no recorded start time, as late as its busy time allows.
fn lifetime_start(start_ticks: u64, now_us: u64, busy_ns: u64) -> u64 {
    clock::start_us(start_ticks).unwrap_or_else(|| now_us.saturating_sub(busy_ns / 1_000))
}

/// `busy_ns` as a percentage (at most 100) of a window of `window_us`.
fn percent(busy_ns: u64, window_us: u64) -> u32 {
    let window_ns = u128::from(window_us.max(1)) * 1_000;
    (u128::from(busy_ns) * 100 / window_ns).min(100) as u32
}

#[cfg(test)]
mod tests {
    #[test]
    fn percent_is_bounded() {
        assert_eq!(super::percent(500_000, 1_000), 50);
        assert_eq!(super::percent(5_000_000, 1_000), 100);
        assert_eq!(super::percent(1, 0), 0);
    }
}
