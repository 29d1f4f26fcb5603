//! The manager's `snapshot` and `resume` requests (see [`crate::snapshot::sequences`] for the driver calls).
//!
//! A whole-vGPU snapshot suspends the vGPU first (its launches stop at the next kernel boundary, and a
//! process joining it meanwhile waits at its first launch), then locks and checkpoints every attached
//! process. With pids, only those processes are locked and checkpointed (the lock alone stops them) and the
//! vGPU goes on. The checkpointed processes keep their process slots and quota usage (they take the same
//! memory back at resume, so a joining process can never take their quota), but none of it is on the device.
//!
//! `resume` restores and unlocks the checkpointed processes (only `pids` when given) and, for the whole
//! vGPU, lifts the suspension; on a vGPU merely suspended it only lifts the suspension, as before snapshots
//! existed. A process that died while snapshotted is dropped from the snapshot (its slot and quota are
//! reclaimed as any dead process's). A restarted daemon finds its snapshots again from the driver's state
//! of each attached process ([`Manager::with_checkpointer`]).

use super::*;
use crate::snapshot::checkpoint::ProcessState;
use crate::snapshot::sequences::{Held, Snapshot};
use tessera_region::pid_ns::ProcView;
use tessera_region::reclaim::is_alive;

impl Manager {
    /// Gives the manager the driver's checkpoint calls, and takes up the snapshots a previous daemon left:
    /// every attached process the driver says is checkpointed is held again (as a whole-vGPU snapshot if the
    /// vGPU is suspended); one left locked (that daemon stopped in the middle) is let go.
    pub fn with_checkpointer(mut self, checkpoint: Box<dyn Checkpointer>) -> Manager {
        self.checkpoint = checkpoint;
        let config = self.current();
        let mut found = Snapshots::new();
        for spec in &config.vgpus {
            let mut snapshot = Snapshot::default();
            let attached = self.attached(spec).unwrap_or_else(|e| {
                say!("tessera daemon: {e}; no snapshot of it is taken up");
                Vec::new()
            });
            for h in attached {
                match self.checkpoint.state(h.pid) {
                    Ok(ProcessState::Checkpointed) => snapshot.processes.push(h),
                    Ok(ProcessState::Locked) => match self.checkpoint.unlock(h.pid) {
                        Ok(()) => say!(
                            "tessera daemon: vGPU {:?}: pid {} was left stopped by a snapshot broken off; let go",
                            spec.name,
                            h.pid
                        ),
                        Err(e) => say!("tessera daemon: vGPU {:?}: pid {} is left stopped: {e}", spec.name, h.pid),
                    },
                    _ => {}
                }
            }
            if !snapshot.processes.is_empty() {
                snapshot.whole = spec.suspended;
                say!(
                    "tessera daemon: vGPU {:?} is snapshotted (pid {:?}, {} in host memory)",
                    spec.name,
                    snapshot.pids(),
                    crate::vgpus::config::bytes(snapshot.bytes())
                );
                found.insert(spec.name.clone(), snapshot);
            }
        }
        *self.snapshots() = found;
        self
    }

    /// The snapshots, locked (briefly: never across a driver call).
    pub(super) fn snapshots(&self) -> MutexGuard<'_, Snapshots> {
        self.snapshots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// vGPU `spec`'s attached processes, with their pids as the daemon sees them (the driver's checkpoint
    /// calls take those) and the device memory each uses on its device. A process of a pid namespace the
    /// daemon cannot see cannot be checkpointed: an error naming it.
    fn attached(&self, spec: &VgpuSpec) -> Result<Vec<Held>, Error> {
        let locked = self.region.guard();
        let Some(index) = slots::find(&locked, &spec.name) else { return Ok(Vec::new()) };
        let d = spec.device as usize;
        let view = ProcView::new();
        locked.region().vgpus[index]
            .attached()
            .map(|(_, pid, p)| {
                let start = p.start_time.load(Ordering::Acquire);
                let ns = p.ns();
                let here = view.here(ns, pid, start).ok_or_else(|| {
                    Error::new(
                        ErrorCode::Unavailable,
                        format!(
                            "vGPU {}: its process {pid} (of pid namespace {ns}) cannot be seen by the daemon, so it \
                             cannot be checkpointed; run the daemon in the host's pid namespace (hostPID)",
                            spec.name
                        ),
                    )
                })?;
                Ok(Held { pid: here, start, bytes: p.used.get(d).map_or(0, |u| u.load(Ordering::Acquire)) })
            })
            .collect()
    }

    /// vGPU `name`'s snapshot without its processes that died (their slots are reclaimed as any dead
    /// process's).
    fn live_snapshot(&self, name: &str) -> Snapshot {
        let mut snapshots = self.snapshots();
        let Some(s) = snapshots.get_mut(name) else { return Snapshot::default() };
        s.processes.retain(|h| is_alive(h.pid, h.start));
        if s.is_empty() {
            snapshots.remove(name);
            return Snapshot::default();
        }
        s.clone()
    }

    /// Records vGPU `name`'s snapshot (removed when empty).
    fn record(&self, name: &str, snapshot: Snapshot) {
        let mut snapshots = self.snapshots();
        if snapshot.is_empty() {
            snapshots.remove(name);
        } else {
            snapshots.insert(name.to_string(), snapshot);
        }
    }

    /// Suspends vGPU `name` or lets it go, as `suspend` and `resume` always have.
    fn set_suspended(&self, name: &str, suspended: bool) -> Result<(), Error> {
        let mut config = self.config();
        let next = config.suspend(name, suspended, &self.devices)?;
        self.reconfigure(&mut config, next, name, false).map(drop)
    }

    /// The status of vGPU `name` now.
    fn status_of(&self, name: &str) -> Vec<VgpuStatus> {
        let config = self.current();
        config.get(name).map(|s| vec![slots::status(&self.region.guard(), s)]).unwrap_or_default()
    }

    /// `snapshot`: the whole vGPU (`pids` empty) or those of its processes.
    pub(super) fn snapshot(&self, name: &str, pids: &[u32]) -> Result<Reply, Error> {
        let _one_at_a_time = self.snapshot_op.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let spec = self.current().get(name)?.clone();
        reclaim_dead(self.region.region(), &ProcView::new());
        let mut snapshot = self.live_snapshot(name);
        let attached = self.attached(&spec)?;
        let targets: Vec<Held> = if pids.is_empty() {
            if snapshot.whole {
                return Err(Error::new(
                    ErrorCode::Invalid,
                    format!(
                        "vGPU {name} is snapshotted already ({} process(es), {} in host memory); `tessera vgpu \
                         resume {name}` brings it back",
                        snapshot.processes.len(),
                        crate::vgpus::config::bytes(snapshot.bytes())
                    ),
                ));
            }
            attached.into_iter().filter(|h| !snapshot.holds(h.pid)).collect()
        } else {
            let mut targets = Vec::new();
            for &pid in pids {
                if snapshot.holds(pid) {
                    return Err(Error::new(
                        ErrorCode::Invalid,
                        format!("pid {pid} of vGPU {name} is snapshotted already"),
                    ));
                }
                let Some(h) = attached.iter().find(|h| h.pid == pid) else {
                    let theirs: Vec<String> = attached.iter().map(|h| h.pid.to_string()).collect();
                    return Err(Error::new(
                        ErrorCode::NotFound,
                        format!(
                            "pid {pid} is not a process of vGPU {name} (its processes: {})",
                            if theirs.is_empty() { "none".to_string() } else { theirs.join(", ") }
                        ),
                    ));
                };
                if !targets.contains(h) {
                    targets.push(h.clone());
                }
            }
            targets
        };
        let suspended_here = pids.is_empty() && !spec.suspended;
        let start = Instant::now();
        if suspended_here {
            self.set_suspended(name, true)?;
        }
        let suspended = start.elapsed();
        let outcome = sequences::take(self.checkpoint.as_ref(), name, &targets);
        match outcome {
            Ok(checkpointed) => {
                snapshot.whole |= pids.is_empty();
                snapshot.processes.extend(checkpointed);
                say!(
                    "tessera daemon: vGPU {name:?} snapshotted{}: {} in host memory (suspended in {} ms, \
                     checkpointed in {} ms)",
                    if pids.is_empty() { String::new() } else { format!(" (pid {pids:?})") },
                    crate::vgpus::config::bytes(snapshot.bytes()),
                    suspended.as_millis(),
                    (start.elapsed() - suspended).as_millis()
                );
                self.record(name, snapshot);
                Ok(Reply::ok(self.status_of(name)))
            }
            Err(failed) => {
                // What the undo could not bring back counts as snapshotted; the rest is as it was.
                let left = !failed.left.is_empty();
                snapshot.processes.extend(failed.left);
                snapshot.whole |= left && pids.is_empty();
                self.record(name, snapshot);
                if suspended_here
                    && !left
                    && let Err(e) = self.set_suspended(name, false)
                {
                    say!("tessera daemon: vGPU {name:?}: the snapshot failed and it stays suspended: {e}");
                }
                Err(failed.error)
            }
        }
    }

    /// `resume`: the whole vGPU (`pids` empty: every checkpointed process, then the suspension lifted) or
    /// those of its checkpointed processes.
    pub(super) fn resume(&self, name: &str, pids: &[u32]) -> Result<Reply, Error> {
        let _one_at_a_time = self.snapshot_op.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let spec = self.current().get(name)?.clone();
        reclaim_dead(self.region.region(), &ProcView::new());
        let mut snapshot = self.live_snapshot(name);
        let targets: Vec<Held> = if pids.is_empty() {
            if snapshot.is_empty() && !spec.suspended {
                return Err(Error::new(
                    ErrorCode::Invalid,
                    format!("vGPU {name} is running (neither suspended nor snapshotted): nothing to resume"),
                ));
            }
            snapshot.processes.clone()
        } else {
            let mut targets = Vec::new();
            for &pid in pids {
                let Some(h) = snapshot.processes.iter().find(|h| h.pid == pid) else {
                    return Err(Error::new(
                        ErrorCode::Invalid,
                        format!(
                            "pid {pid} of vGPU {name} is not snapshotted (snapshotted: {})",
                            if snapshot.processes.is_empty() {
                                "none".into()
                            } else {
                                format!("{:?}", snapshot.pids())
                            }
                        ),
                    ));
                };
                if !targets.contains(h) {
                    targets.push(h.clone());
                }
            }
            targets
        };
        let start = Instant::now();
        match sequences::bring_back(self.checkpoint.as_ref(), name, spec.device, &targets) {
            Ok(()) => {
                say!(
                    "tessera daemon: vGPU {name:?} restored: {} back on device {} in {} ms",
                    crate::vgpus::config::bytes(targets.iter().map(|h| h.bytes).sum()),
                    spec.device,
                    start.elapsed().as_millis()
                );
                snapshot.processes.retain(|h| !targets.contains(h));
                if pids.is_empty() {
                    snapshot.whole = false;
                }
                self.record(name, snapshot);
            }
            Err(failed) => {
                // Those brought back are no longer held; those left stay so.
                snapshot.processes.retain(|h| !targets.contains(h) || failed.left.contains(h));
                self.record(name, snapshot);
                return Err(failed.error);
            }
        }
        if pids.is_empty() && spec.suspended {
            self.set_suspended(name, false)?;
        }
        Ok(Reply::ok(self.status_of(name)))
    }
}

#[cfg(test)]
mod tests;
