//! `snapshot` and `resume` through the manager, against the fake driver of [`crate::snapshot::sequences`]' tests,
//! with real (sleeping) child processes in the vGPU's process slots.

use super::*;
use crate::snapshot::sequences::tests::FakeDriver;
use std::process::{Child, Command};
use tessera_region::reclaim::start_time;

const GIB: u64 = 1 << 30;

struct Fixture {
    dir: std::path::PathBuf,
    region: &'static RegionFile,
    children: Vec<Child>,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("tessera-snapshot-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let region = Box::leak(Box::new(RegionFile::open(dir.join("region").to_str().unwrap()).unwrap()));
        Fixture { dir, region, children: Vec::new() }
    }

    fn manager(&self, driver: &Arc<FakeDriver>) -> Manager {
        let m =
            Manager::start(self.region, Store::open(&self.dir.join("state")).unwrap(), vec![8 * GIB], Arc::default())
                .unwrap();
        m.with_checkpointer(Box::new(Arc::clone(driver)))
    }

    /// A live process attached to vGPU `name` in process slot `k`, using `bytes` on device 0.
    fn tenant(&mut self, name: &str, k: usize, bytes: u64) -> u32 {
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        self.children.push(child);
        let index = slots::find(&self.region.lock().unwrap(), name).unwrap();
        let v = &self.region.region().vgpus[index];
        let p = &v.live.procs[k];
        p.start_time.store(start_time(pid).unwrap(), Ordering::SeqCst);
        p.used[0].store(bytes, Ordering::SeqCst);
        p.set_owner(0, pid);
        v.live.procs_hwm.fetch_max(k as u32 + 1, Ordering::SeqCst);
        pid
    }

    fn kill(&mut self, pid: u32) {
        let child = self.children.iter_mut().find(|c| c.id() == pid).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn create(m: &Manager, name: &str) {
    let r = m.handle(Request::Create { spec: VgpuSpec::new(name, 0, 4 * GIB, 20) });
    assert!(r.ok, "{r:?}");
}

fn ok(m: &Manager, r: Request) -> VgpuStatus {
    let resp = m.handle(r.clone());
    assert!(resp.ok, "{r:?}: {:?}", resp.error);
    resp.vgpus.into_iter().next().unwrap()
}

fn err(m: &Manager, r: Request) -> (ErrorCode, String) {
    let resp = m.handle(r.clone());
    assert!(!resp.ok, "{r:?} should fail");
    (resp.code.unwrap(), resp.error.unwrap())
}

fn snapshot(name: &str, pids: &[u32]) -> Request {
    Request::Snapshot { name: name.into(), pids: pids.to_vec() }
}

fn resume(name: &str, pids: &[u32]) -> Request {
    Request::Resume { name: name.into(), pids: pids.to_vec() }
}

#[test]
fn a_whole_vgpu_is_suspended_and_checkpointed_then_resumed() {
    let mut f = Fixture::new("whole");
    let d = Arc::new(FakeDriver::default());
    let m = f.manager(&d);
    create(&m, "a");
    let (p1, p2) = (f.tenant("a", 0, GIB), f.tenant("a", 1, 2 * GIB));
    let d2 = Arc::new(FakeDriver::new(GIB, &[(p1, GIB), (p2, 2 * GIB)]));
    let m = {
        drop(m);
        f.manager(&d2)
    };
    let st = ok(&m, snapshot("a", &[]));
    assert!(st.spec.suspended && st.snapshotted, "{st:?}");
    assert_eq!((st.snapshot_pids, st.snapshot_bytes), (vec![p1, p2], 3 * GIB));
    assert_eq!(st.used, 3 * GIB, "their quota stays theirs");
    assert_eq!(d2.free(), 4 * GIB);
    let stats = m.handle(Request::Stats { name: None }).stats.unwrap();
    assert!(stats.vgpus[0].snapshotted && stats.vgpus[0].memory.snapshot == 3 * GIB);
    assert_eq!(stats.devices[0].memory_used, 0, "nothing of it on the device");
    // Twice: refused, naming what is held.
    let (code, e) = err(&m, snapshot("a", &[]));
    assert!(code == ErrorCode::Invalid && e.contains("vGPU a is snapshotted already (2 process(es)"), "{e}");
    assert_eq!(err(&m, snapshot("zz", &[])).0, ErrorCode::NotFound);
    // Short of memory: refused, still snapshotted; then it comes back.
    d2.take_memory((3 * GIB + GIB / 2) as i64);
    let (code, e) = err(&m, resume("a", &[]));
    assert!(code == ErrorCode::ResourceExhausted && e.contains("vGPU a: device 0 has not enough"), "{e}");
    assert!(ok(&m, Request::Show { name: "a".into() }).snapshotted);
    d2.take_memory(-((3 * GIB + GIB / 2) as i64));
    let st = ok(&m, resume("a", &[]));
    assert!(!st.spec.suspended && !st.snapshotted && st.snapshot_bytes == 0, "{st:?}");
    assert_eq!((d2.state_of(p1), d2.state_of(p2)), (ProcessState::Running, ProcessState::Running));
    // Running: nothing to resume.
    let (code, e) = err(&m, resume("a", &[]));
    assert!(code == ErrorCode::Invalid && e.contains("vGPU a is running"), "{e}");
    // A vGPU merely suspended resumes as before.
    ok(&m, Request::Suspend { name: "a".into() });
    assert!(!ok(&m, resume("a", &[])).spec.suspended);
}

#[test]
fn a_failed_snapshot_leaves_the_vgpu_running_and_names_the_process() {
    let mut f = Fixture::new("failed");
    let d = Arc::new(FakeDriver::default());
    let m = f.manager(&d);
    create(&m, "a");
    let (p1, p2) = (f.tenant("a", 0, GIB), f.tenant("a", 1, GIB));
    let d = Arc::new(FakeDriver::new(0, &[(p1, GIB), (p2, GIB)]));
    let m = {
        drop(m);
        f.manager(&d)
    };
    d.fail("lock", p2, 909);
    let (code, e) = err(&m, snapshot("a", &[]));
    assert!(code == ErrorCode::Timeout && e.contains(&format!("process {p2} did not stop")), "{e}");
    let st = ok(&m, Request::Show { name: "a".into() });
    assert!(!st.spec.suspended && !st.snapshotted, "undone: {st:?}");
    assert_eq!(d.state_of(p1), ProcessState::Running);
}

#[test]
fn processes_are_snapshotted_by_pid_and_one_killed_meanwhile_is_forgotten() {
    let mut f = Fixture::new("pids");
    let d = Arc::new(FakeDriver::default());
    let m = f.manager(&d);
    create(&m, "a");
    let (p1, p2) = (f.tenant("a", 0, GIB), f.tenant("a", 1, GIB));
    let d = Arc::new(FakeDriver::new(0, &[(p1, GIB), (p2, GIB)]));
    let m = {
        drop(m);
        f.manager(&d)
    };
    let st = ok(&m, snapshot("a", &[p1]));
    assert!(!st.spec.suspended && st.snapshotted && st.snapshot_pids == [p1], "{st:?}");
    assert_eq!(d.state_of(p2), ProcessState::Running, "the others go on");
    let (code, e) = err(&m, snapshot("a", &[1]));
    assert!(code == ErrorCode::NotFound && e.contains("pid 1 is not a process of vGPU a"), "{e}");
    assert!(err(&m, snapshot("a", &[p1])).1.contains("is snapshotted already"));
    assert!(err(&m, resume("a", &[p2])).1.contains(&format!("pid {p2} of vGPU a is not snapshotted")));
    // The rest of the vGPU too; then one process comes back alone.
    let st = ok(&m, snapshot("a", &[]));
    assert!(st.spec.suspended && st.snapshot_pids == [p1, p2], "{st:?}");
    let st = ok(&m, resume("a", &[p1]));
    assert!(st.spec.suspended && st.snapshot_pids == [p2], "still suspended as a whole: {st:?}");
    // Killed while snapshotted: its slot and quota are reclaimed, the snapshot forgets it.
    f.kill(p2);
    let st = ok(&m, Request::Show { name: "a".into() });
    assert_eq!((st.used, st.processes.clone()), (GIB, vec![p1]), "{st:?}");
    let st = ok(&m, resume("a", &[]));
    assert!(!st.spec.suspended && !st.snapshotted, "{st:?}");
}

#[test]
fn a_restarted_daemon_finds_its_snapshots_from_the_driver() {
    let mut f = Fixture::new("restart");
    let d = Arc::new(FakeDriver::default());
    let m = f.manager(&d);
    create(&m, "a");
    let (p1, p2) = (f.tenant("a", 0, GIB), f.tenant("a", 1, 2 * GIB));
    let d = Arc::new(FakeDriver::new(0, &[(p1, GIB), (p2, 2 * GIB)]));
    let m = {
        drop(m);
        f.manager(&d)
    };
    ok(&m, snapshot("a", &[]));
    drop(m);
    let m = f.manager(&d);
    let st = ok(&m, Request::Show { name: "a".into() });
    assert!(st.spec.suspended && st.snapshotted && st.snapshot_bytes == 3 * GIB, "{st:?}");
    ok(&m, resume("a", &[]));
    assert_eq!(d.state_of(p2), ProcessState::Running);
    // A process left locked by a daemon that died in the middle is let go.
    d.lock(p1, Duration::ZERO).unwrap();
    drop(m);
    let m = f.manager(&d);
    assert_eq!(d.state_of(p1), ProcessState::Running);
    assert!(!ok(&m, Request::Show { name: "a".into() }).snapshotted);
}
