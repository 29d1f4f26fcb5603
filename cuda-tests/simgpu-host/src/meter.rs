//! Engine time per process, read from the state file: the ground truth of how much of a simulated device
//! each process (or group of processes) obtained, for benchmarks and `tessera demo`.

use crate::state::SharedState;
use std::sync::atomic::Ordering;

/// Engine time (ns) each of `pids` has obtained on `device` so far (0 for a process not registered, or
/// no longer registered).
pub fn engine_time(state: &SharedState, device: usize, pids: &[u32]) -> Vec<u64> {
    pids.iter()
        .map(|&pid| {
            state
                .processes()
                .find(|p| p.pid.load(Ordering::Acquire) == pid)
                .and_then(|p| p.busy_ns.get(device))
                .map_or(0, |b| b.load(Ordering::Acquire))
        })
        .collect()
}

/// Cumulative engine time of groups of processes on one device. A process that exits leaves the state
/// file (its entry is cleared), so what it had obtained when last read stays counted in its group.
pub struct EngineMeter {
    device: usize,
    groups: Vec<Vec<u32>>,
    /// Per group, per process: the engine time last read.
    last: Vec<Vec<u64>>,
    /// Per group: what processes that have exited had obtained.
    carried: Vec<u64>,
}

impl EngineMeter {
    /// A meter of `groups` (each a list of pids; a group may be empty) on `device`.
    pub fn new(device: usize, groups: Vec<Vec<u32>>) -> EngineMeter {
        let last = groups.iter().map(|g| vec![0; g.len()]).collect();
        let carried = vec![0; groups.len()];
        EngineMeter { device, groups, last, carried }
    }

    /// Reads the state file: each group's engine time so far (the sum of its processes').
    pub fn read(&mut self, state: &SharedState) -> Vec<u64> {
        (0..self.groups.len())
            .map(|g| {
                for (i, now) in engine_time(state, self.device, &self.groups[g]).into_iter().enumerate() {
                    let last = &mut self.last[g][i];
                    if now >= *last {
                        *last = now;
                    } else if now == 0 {
                        self.carried[g] += *last;
                        *last = 0;
                    }
                }
                self.carried[g] + self.last[g].iter().sum::<u64>()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn what_an_exited_process_obtained_stays_counted() {
        let dir = std::env::temp_dir().join(format!("simgpu-meter-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state").to_string_lossy().into_owned();
        let config = Config::from_lookup(move |k| (k == "SIMGPU_STATE").then(|| path.clone())).unwrap();
        let state = SharedState::open(&config, true).unwrap();
        let me = std::process::id();
        let mut meter = EngineMeter::new(0, vec![vec![me], vec![]]);
        assert_eq!(meter.read(&state), [0, 0]);
        state.record_busy(0, 1_500, crate::state::now_ns());
        assert_eq!(engine_time(&state, 0, &[me, 0]), [1_500, 0]);
        assert_eq!(meter.read(&state), [1_500, 0]);
        state.unregister();
        assert_eq!(engine_time(&state, 0, &[me]), [0]);
        assert_eq!(meter.read(&state), [1_500, 0], "kept after the process left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
