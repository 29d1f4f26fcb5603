//! Snapshots of vGPUs: which processes the daemon checkpointed ([`Snapshot`], per vGPU), and the two
//! sequences of driver calls that take and give back a snapshot, each all or nothing.
//!
//! - [`take`]: lock every process (each waits at most [`LOCK_TIMEOUT`] for its in-flight work), then
//!   checkpoint each. Any failure undoes what was done (the checkpointed are restored, the locked unlocked)
//!   and the error names the process that failed; a process the undo could not bring back is reported as
//!   left checkpointed (or locked), so that the caller records it and `resume` can retry: a vGPU is never
//!   half snapshotted without saying so.
//! - [`bring_back`]: restore every checkpointed process, then unlock each. The device lacking memory for
//!   one (others took it meanwhile) checkpoints again those restored so far: the vGPU stays snapshotted
//!   and the error says how much memory it needs, so the request can be retried once memory is freed.
//!
//! Each step asks the driver the process's state first, so that a sequence broken off (an error, a
//! restarted daemon) is picked up where it stopped.

use crate::api::protocol::{Error, ErrorCode};
use crate::snapshot::checkpoint::{CallError, Checkpointer, NOT_INITIALIZED, ProcessState};
use crate::vgpus::config::bytes;
use std::collections::HashMap;
use tessera_client::{LOCK_TIMEOUT, Stats, VgpuStatus};

/// One process checkpointed by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its pid.
    pub pid: u32,
    /// Its start time (from `/proc/PID/stat`), against pid reuse.
    pub start: u64,
    /// Device memory it had (its quota usage as its process slot counts it), now in host memory.
    pub bytes: u64,
}

/// A vGPU's snapshot: the processes checkpointed, and whether the whole vGPU was snapshotted (then it is
/// suspended too, and a process joining it meanwhile waits at its first launch until `resume`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Snapshotted as a whole (`snapshot NAME` without pids).
    pub whole: bool,
    /// The processes checkpointed.
    pub processes: Vec<Held>,
}

impl Snapshot {
    /// Bytes its processes had on the device, now in host memory.
    pub fn bytes(&self) -> u64 {
        self.processes.iter().map(|h| h.bytes).sum()
    }

    /// The pids of its processes.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(|h| h.pid).collect()
    }

    /// Nothing is snapshotted.
    pub fn is_empty(&self) -> bool {
        !self.whole && self.processes.is_empty()
    }

    /// Whether process `pid` is checkpointed.
    pub fn holds(&self, pid: u32) -> bool {
        self.processes.iter().any(|h| h.pid == pid)
    }
}

/// Every snapshotted vGPU's snapshot, by name.
pub type Snapshots = HashMap<String, Snapshot>;

/// The error of a failed call, as the API reports it: a lock that timed out is `timeout`, a driver without
/// the API `unavailable`, anything else `internal`.
fn failed(name: &str, doing: &str, e: &CallError) -> Error {
    let code = match e.code {
        0 => ErrorCode::Unavailable,
        600 | 909 => ErrorCode::Timeout,
        _ => ErrorCode::Internal,
    };
    let why = if code == ErrorCode::Timeout {
        format!(
            "process {} did not stop within {} s (its work in flight did not finish): {e}",
            e.pid,
            LOCK_TIMEOUT.as_secs()
        )
    } else {
        e.to_string()
    };
    Error::new(code, format!("vGPU {name}: {doing} failed: {why}"))
}

/// What a failed [`take`] or [`bring_back`] left: the error, and the processes it could not put back as
/// they were (to be recorded as snapshotted, so that `resume` can retry them).
#[derive(Debug)]
pub struct Failed {
    /// What went wrong, for the reply.
    pub error: Error,
    /// Processes left checkpointed or locked.
    pub left: Vec<Held>,
}

/// Undoes a partial snapshot: restores the processes in `checkpointed`, then unlocks those in `locked` (a
/// superset). Returns the processes it could not bring back, and why.
fn undo(c: &dyn Checkpointer, checkpointed: &[Held], locked: &[Held]) -> (Vec<Held>, Vec<String>) {
    let mut left = Vec::new();
    let mut why = Vec::new();
    for h in checkpointed {
        if let Err(e) = c.restore(h.pid) {
            why.push(e.to_string());
            left.push(h.clone());
        }
    }
    let restored_failed = left.clone();
    for h in locked.iter().filter(|h| !restored_failed.contains(h)) {
        if let Err(e) = c.unlock(h.pid) {
            why.push(e.to_string());
            left.push(h.clone());
        }
    }
    (left, why)
}

/// The error of a failure `error` after an undo that left `left` (for `why`).
fn with_undo(mut error: Error, name: &str, left: &[Held], why: &[String]) -> Error {
    if left.is_empty() {
        error.message.push_str("; nothing was changed");
    } else {
        let pids: Vec<String> = left.iter().map(|h| h.pid.to_string()).collect();
        error.message.push_str(&format!(
            "; undoing it failed too ({}): pid {} stay(s) stopped and count as snapshotted; `tessera vgpu resume \
             {name}` tries again",
            why.join("; "),
            pids.join(", ")
        ));
    }
    error
}

/// Locks, then checkpoints, every process of `targets` (of vGPU `name`); all or nothing (see the module
/// documentation). A process that has not initialized CUDA (the driver answers
/// `CUDA_ERROR_NOT_INITIALIZED` for its state) has nothing on the device and is left out; returns those
/// checkpointed.
pub fn take(c: &dyn Checkpointer, name: &str, targets: &[Held]) -> Result<Vec<Held>, Failed> {
    let targets: Vec<Held> =
        targets.iter().filter(|h| !c.state(h.pid).is_err_and(|e| e.code == NOT_INITIALIZED)).cloned().collect();
    let mut locked = Vec::new();
    for h in &targets {
        if let Err(e) = c.lock(h.pid, LOCK_TIMEOUT) {
            let (left, why) = undo(c, &[], &locked);
            return Err(Failed { error: with_undo(failed(name, "snapshot", &e), name, &left, &why), left });
        }
        locked.push(h.clone());
    }
    let mut checkpointed = Vec::new();
    for h in &targets {
        if let Err(e) = c.checkpoint(h.pid) {
            // A checkpoint that failed half way may have left the process checkpointed: asked, not assumed.
            if c.state(h.pid) == Ok(ProcessState::Checkpointed) {
                checkpointed.push(h.clone());
            }
            let (left, why) = undo(c, &checkpointed, &locked);
            return Err(Failed { error: with_undo(failed(name, "snapshot", &e), name, &left, &why), left });
        }
        checkpointed.push(h.clone());
    }
    Ok(checkpointed)
}

/// Restores, then unlocks, every process of `held` (of vGPU `name`, on `device`), whatever step each was
/// left at. Lacking device memory for one, it checkpoints again those it restored: `resource_exhausted`,
/// and every process stays snapshotted.
pub fn bring_back(c: &dyn Checkpointer, name: &str, device: u32, held: &[Held]) -> Result<(), Failed> {
    let mut restored = Vec::new();
    for (k, h) in held.iter().enumerate() {
        let state = c.state(h.pid).unwrap_or(ProcessState::Checkpointed);
        if state != ProcessState::Checkpointed {
            continue;
        }
        let Err(e) = c.restore(h.pid) else {
            restored.push(h.clone());
            continue;
        };
        // Put back as it was: those restored so far go back to host memory.
        let mut left: Vec<Held> = Vec::new();
        let mut why = Vec::new();
        for r in &restored {
            if let Err(e) = c.checkpoint(r.pid) {
                why.push(e.to_string());
                left.push(r.clone());
            }
        }
        let error = if e.out_of_memory() {
            let wanted: u64 = held[k..].iter().map(|h| h.bytes).sum();
            let mut m = format!(
                "vGPU {name}: device {device} has not enough free memory to restore pid {} ({} still to bring back \
                 of the {} its processes held); the vGPU stays snapshotted: free memory on device {device} and \
                 resume again",
                h.pid,
                bytes(wanted),
                bytes(held.iter().map(|h| h.bytes).sum())
            );
            if !left.is_empty() {
                m.push_str(&format!(" ({}: those processes are restored but stopped)", why.join("; ")));
            }
            Error::new(ErrorCode::ResourceExhausted, m)
        } else {
            let mut error = failed(name, "resume", &e);
            error.message.push_str("; the vGPU stays snapshotted");
            error
        };
        return Err(Failed { error, left: held.to_vec() });
    }
    let mut stuck = Vec::new();
    let mut why = Vec::new();
    for h in held {
        if c.state(h.pid).is_ok_and(|s| s == ProcessState::Locked)
            && let Err(e) = c.unlock(h.pid)
        {
            why.push(e.to_string());
            stuck.push(h.clone());
        }
    }
    if stuck.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = stuck.iter().map(|h| h.pid.to_string()).collect();
    let error = Error::new(
        ErrorCode::Internal,
        format!(
            "vGPU {name}: memory restored, but pid {} could not be let go ({}); `tessera vgpu resume {name}` tries \
             again",
            pids.join(", "),
            why.join("; ")
        ),
    );
    Err(Failed { error, left: stuck })
}

/// `snapshot` without its processes no longer among `attached` (dead: their slots were reclaimed, the
/// snapshot forgets them at its next `snapshot` or `resume`).
fn among(snapshot: &Snapshot, attached: &[u32]) -> Snapshot {
    let processes = snapshot.processes.iter().filter(|h| attached.contains(&h.pid)).cloned().collect();
    Snapshot { whole: snapshot.whole, processes }
}

/// Writes vGPU `status`'s snapshot figures from `snapshots`.
pub fn annotate_status(status: &mut VgpuStatus, snapshots: &Snapshots) {
    if let Some(s) = snapshots.get(&status.spec.name) {
        let s = among(s, &status.processes);
        status.snapshotted = !s.is_empty();
        status.snapshot_pids = s.pids();
        status.snapshot_bytes = s.bytes();
    }
}

/// Writes the snapshot figures into `stats`: each snapshotted vGPU's, and its device's memory in use
/// without what is in host memory.
pub fn annotate_stats(stats: &mut Stats, snapshots: &Snapshots) {
    for v in &mut stats.vgpus {
        let Some(s) = snapshots.get(&v.name) else { continue };
        let s = among(s, &v.processes.iter().map(|p| p.pid).collect::<Vec<_>>());
        v.snapshotted = !s.is_empty();
        v.memory.snapshot = s.bytes();
        for p in &mut v.processes {
            p.snapshotted = s.holds(p.pid);
        }
        if let Some(d) = stats.devices.iter_mut().find(|d| d.device == v.device) {
            d.memory_used = d.memory_used.saturating_sub(s.bytes());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
