//! The snapshot state machine against a fake driver that keeps each process's state and the device's
//! free memory as the real one documents them, and fails where told.

use super::*;
use crate::snapshot::checkpoint::OUT_OF_MEMORY;
use std::sync::Mutex;
use std::time::Duration;

/// A driver in memory: each process's state and device memory, the device's free memory, the calls made,
/// and the calls that fail (by call and pid).
#[derive(Default)]
pub(crate) struct FakeDriver {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    states: HashMap<u32, ProcessState>,
    memory: HashMap<u32, u64>,
    free: u64,
    calls: Vec<String>,
    failing: Vec<(&'static str, u32, u32)>,
}

impl FakeDriver {
    /// A device with `free` bytes free and processes `(pid, bytes on the device)`, all running.
    pub(crate) fn new(free: u64, processes: &[(u32, u64)]) -> FakeDriver {
        let d = FakeDriver::default();
        {
            let mut i = d.inner.lock().unwrap();
            i.free = free;
            for &(pid, bytes) in processes {
                i.states.insert(pid, ProcessState::Running);
                i.memory.insert(pid, bytes);
            }
        }
        d
    }

    /// Makes `call` (`lock`, `checkpoint`, `restore`, `unlock`) on `pid` fail with `code`.
    pub(crate) fn fail(&self, call: &'static str, pid: u32, code: u32) {
        self.inner.lock().unwrap().failing.push((call, pid, code));
    }

    /// Lets every call succeed again.
    pub(crate) fn heal(&self) {
        self.inner.lock().unwrap().failing.clear();
    }

    pub(crate) fn state_of(&self, pid: u32) -> ProcessState {
        self.inner.lock().unwrap().states.get(&pid).copied().unwrap_or(ProcessState::Running)
    }

    pub(crate) fn free(&self) -> u64 {
        self.inner.lock().unwrap().free
    }

    /// Takes `bytes` of the device (another tenant), or gives them back (negative).
    pub(crate) fn take_memory(&self, bytes: i64) {
        let mut i = self.inner.lock().unwrap();
        i.free = (i.free as i64 - bytes) as u64;
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.inner.lock().unwrap().calls.clone()
    }

    /// One call: `from` is the state it needs, `to` the state after; `memory` what it does to the device.
    fn step(&self, call: &'static str, pid: u32, from: ProcessState, to: ProcessState) -> Result<(), CallError> {
        let mut i = self.inner.lock().unwrap();
        i.calls.push(format!("{call} {pid}"));
        let err = |code| CallError { call, pid, code, message: None };
        if let Some(&(_, _, code)) = i.failing.iter().find(|(c, p, _)| *c == call && *p == pid) {
            return Err(err(code));
        }
        let Some(&now) = i.states.get(&pid) else { return Err(err(crate::snapshot::checkpoint::NOT_INITIALIZED)) };
        if now != from {
            return Err(err(401));
        }
        let bytes = i.memory[&pid];
        match call {
            "checkpoint" => i.free += bytes,
            "restore" if i.free < bytes => return Err(err(OUT_OF_MEMORY)),
            "restore" => i.free -= bytes,
            _ => {}
        }
        i.states.insert(pid, to);
        Ok(())
    }
}

impl Checkpointer for FakeDriver {
    fn lock(&self, pid: u32, _: Duration) -> Result<(), CallError> {
        self.step("lock", pid, ProcessState::Running, ProcessState::Locked)
    }
    fn checkpoint(&self, pid: u32) -> Result<(), CallError> {
        self.step("checkpoint", pid, ProcessState::Locked, ProcessState::Checkpointed)
    }
    fn restore(&self, pid: u32) -> Result<(), CallError> {
        self.step("restore", pid, ProcessState::Checkpointed, ProcessState::Locked)
    }
    fn unlock(&self, pid: u32) -> Result<(), CallError> {
        self.step("unlock", pid, ProcessState::Locked, ProcessState::Running)
    }
    fn state(&self, pid: u32) -> Result<ProcessState, CallError> {
        let i = self.inner.lock().unwrap();
        i.states.get(&pid).copied().ok_or(CallError {
            call: "state",
            pid,
            code: crate::snapshot::checkpoint::NOT_INITIALIZED,
            message: None,
        })
    }
}

const GIB: u64 = 1 << 30;

fn held(processes: &[(u32, u64)]) -> Vec<Held> {
    processes.iter().map(|&(pid, bytes)| Held { pid, start: 1, bytes }).collect()
}

#[test]
fn a_snapshot_checkpoints_every_process_and_a_resume_brings_them_back() {
    let procs = [(10, GIB), (11, 2 * GIB)];
    let d = FakeDriver::new(GIB, &procs);
    assert_eq!(take(&d, "a", &held(&procs)).unwrap(), held(&procs));
    assert_eq!((d.state_of(10), d.state_of(11)), (ProcessState::Checkpointed, ProcessState::Checkpointed));
    assert_eq!(d.free(), 4 * GIB, "their memory is the device's again");
    assert_eq!(d.calls(), ["lock 10", "lock 11", "checkpoint 10", "checkpoint 11"], "every process stops first");
    bring_back(&d, "a", 0, &held(&procs)).unwrap();
    assert_eq!((d.state_of(10), d.state_of(11)), (ProcessState::Running, ProcessState::Running));
    assert_eq!(d.free(), GIB);
}

#[test]
fn a_process_that_does_not_stop_undoes_the_snapshot_and_is_named() {
    let procs = [(10, GIB), (11, GIB), (12, GIB)];
    let d = FakeDriver::new(0, &procs);
    d.fail("lock", 12, 909);
    let f = take(&d, "a", &held(&procs)).unwrap_err();
    assert_eq!(f.error.code, ErrorCode::Timeout);
    let m = &f.error.message;
    assert!(m.contains("vGPU a") && m.contains("process 12 did not stop within 10 s"), "{m}");
    assert!(m.contains("nothing was changed") && f.left.is_empty(), "{m}");
    assert!(procs.iter().all(|&(p, _)| d.state_of(p) == ProcessState::Running), "the locked ones are let go");
}

#[test]
fn a_failed_checkpoint_restores_the_others_and_a_failed_undo_says_what_is_left() {
    let procs = [(10, GIB), (11, GIB), (12, GIB)];
    let d = FakeDriver::new(0, &procs);
    d.fail("checkpoint", 11, 999);
    let f = take(&d, "a", &held(&procs)).unwrap_err();
    assert_eq!(f.error.code, ErrorCode::Internal);
    assert!(
        f.error.message.contains("cuCheckpointProcessCheckpoint") || f.error.message.contains("checkpoint on pid 11")
    );
    assert!(procs.iter().all(|&(p, _)| d.state_of(p) == ProcessState::Running));
    assert_eq!(d.free(), 0, "the one checkpointed got its memory back");
    // The undo fails too: the process left is reported, not forgotten.
    d.heal();
    d.fail("checkpoint", 12, 999);
    d.fail("restore", 10, 999);
    let f = take(&d, "a", &held(&procs)).unwrap_err();
    assert_eq!(f.left, held(&[(10, GIB)]));
    assert!(f.error.message.contains("pid 10 stay(s) stopped") && f.error.message.contains("resume a"), "{}", f.error);
    assert_eq!(d.state_of(10), ProcessState::Checkpointed);
    // And a resume picks it up where it was left.
    d.heal();
    bring_back(&d, "a", 0, &f.left).unwrap();
    assert_eq!(d.state_of(10), ProcessState::Running);
}

#[test]
fn a_resume_short_of_memory_leaves_everything_snapshotted_and_succeeds_once_memory_is_freed() {
    let procs = [(10, GIB), (11, 2 * GIB)];
    let d = FakeDriver::new(0, &procs);
    take(&d, "a", &held(&procs)).unwrap();
    d.take_memory((2 * GIB) as i64); // another tenant takes 2 of the 3 GiB
    let f = bring_back(&d, "a", 0, &held(&procs)).unwrap_err();
    assert_eq!(f.error.code, ErrorCode::ResourceExhausted);
    let m = &f.error.message;
    assert!(m.contains("vGPU a: device 0 has not enough free memory to restore pid 11"), "{m}");
    assert!(m.contains("still to bring back") && m.contains("stays snapshotted"), "{m}");
    assert!(m.contains("(2.0 GiB (2147483648 bytes) still") && m.contains("of the 3.0 GiB"), "{m}");
    assert_eq!((d.state_of(10), d.state_of(11)), (ProcessState::Checkpointed, ProcessState::Checkpointed));
    assert_eq!(d.free(), GIB, "the one restored went back to host memory");
    d.take_memory(-((2 * GIB) as i64));
    bring_back(&d, "a", 0, &held(&procs)).unwrap();
    assert_eq!((d.state_of(10), d.state_of(11)), (ProcessState::Running, ProcessState::Running));
}

#[test]
fn a_process_without_cuda_is_left_out() {
    let d = FakeDriver::new(0, &[(10, GIB)]);
    assert_eq!(take(&d, "a", &held(&[(10, GIB), (99, 0)])).unwrap(), held(&[(10, GIB)]));
    assert_eq!(d.calls(), ["lock 10", "checkpoint 10"]);
}

#[test]
fn no_checkpoint_api_is_unavailable() {
    let c = crate::snapshot::checkpoint::Unavailable("the driver x has no cuCheckpointProcessLock".into());
    let f = take(&c, "a", &held(&[(10, GIB)])).unwrap_err();
    assert_eq!(f.error.code, ErrorCode::Unavailable);
    assert!(f.error.message.contains("has no cuCheckpointProcessLock"), "{}", f.error);
}

#[test]
fn stats_show_the_snapshot_and_the_device_without_it() {
    let mut stats = Stats::default();
    stats.vgpus.push(tessera_client::VgpuStats {
        name: "a".into(),
        processes: vec![tessera_client::ProcessStats { pid: 10, ..Default::default() }],
        ..Default::default()
    });
    stats.devices.push(tessera_client::DeviceStats { memory_used: 3 * GIB, ..Default::default() });
    let mut snapshots = Snapshots::new();
    snapshots.insert("a".into(), Snapshot { whole: true, processes: held(&[(10, 2 * GIB)]) });
    annotate_stats(&mut stats, &snapshots);
    assert!(stats.vgpus[0].snapshotted && stats.vgpus[0].processes[0].snapshotted);
    assert_eq!((stats.vgpus[0].memory.snapshot, stats.devices[0].memory_used), (2 * GIB, GIB));
}
