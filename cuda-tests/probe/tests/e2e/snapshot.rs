//! Snapshot and resume of a vGPU end to end (`tessera vgpu snapshot/resume`, the API's `snapshot` and
//! `resume`): the daemon suspends the vGPU and checkpoints its processes through the simulated driver's
//! process checkpoint API, their device memory is freed for another vGPU's tenant, and resume brings every
//! byte back at the same addresses (the tenants check them through the pointers they kept, and launch
//! kernels on them); a resume short of memory fails clearly and leaves the vGPU snapshotted until memory
//! is freed; a tenant killed while snapshotted leaks nothing; the CLI's errors name the problem.
//!
//! The tenants run the probe's `softmem` scenario with nothing freed (`--free-large 0 --free-small 0`):
//! buffers with distinct contents, then "ready", then, at each trigger file, every byte checked and
//! `vector_add_f32` run. The device is shrunk to 1 GiB with 32 MiB contexts so that the sizes below make
//! the point without using much of the machine's memory.

use crate::common;

use common::tessera::Machine;
use common::{Guarded, MIB, u64_at};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest a tenant may take to say what the test waits for (a loaded machine included).
const PATIENCE: Duration = Duration::from_secs(60);

/// A tenant running `softmem`, its stdout lines and stderr collected by threads of their own.
struct Tenant {
    child: Guarded,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    trigger: PathBuf,
    /// The CUDA process's pid, as it reports it.
    pid: u32,
}

impl Tenant {
    /// Starts `softmem` with `mib` MiB of buffers in vGPU `vgpu` (`rounds` triggered rounds) and waits
    /// until it is ready.
    fn start(m: &Machine, vgpu: &str, tag: &str, mib: u64, rounds: u32) -> Tenant {
        let trigger = m.file(&format!("go-{tag}"));
        let (mib, rounds) = (mib.to_string(), rounds.to_string());
        let args =
            ["softmem", "--mib", &mib, "--free-large", "0", "--free-small", "0", "--rounds", &rounds, "--wait-file"];
        let mut cmd = m.tenant(vgpu, &[&args[..], &[trigger.to_str().unwrap()]].concat());
        cmd.stdin(std::process::Stdio::null());
        let mut child = Guarded::spawn(&mut cmd).expect("spawn a tenant");
        let (tx, lines) = channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut t = Tenant { child, lines, stderr, trigger, pid: 0 };
        let ready = t.expect("ready");
        t.pid = u64_at(&ready, "pid") as u32;
        t
    }

    /// The next line, which must carry `key`.
    fn expect(&mut self, key: &str) -> Value {
        let line = self.lines.recv_timeout(PATIENCE).unwrap_or_else(|e| {
            panic!("tenant said nothing ({e}) while the test waited for {key:?}; stderr:\n{}", self.stderr())
        });
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("tenant printed {line:?} ({e})"));
        assert!(v.get(key).is_some(), "tenant printed {v} instead of {key:?}; stderr:\n{}", self.stderr());
        v
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Triggers its next round and checks that every byte was as written and its kernel ran right.
    fn verify_round(&mut self) -> Value {
        std::fs::write(&self.trigger, b"go").unwrap();
        let round = self.expect("round");
        for what in ["verified", "kernel"] {
            assert_eq!(u64_at(&round, &format!("{what}.mismatched_words")), 0, "{what}: {round}");
        }
        assert!(u64_at(&round, "verified.bytes") > 0, "{round}");
        round
    }

    /// Waits for it to finish its last round and exit successfully.
    fn finish(mut self) {
        self.expect("done");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "tenant exited {status}; stderr:\n{}", self.stderr());
    }
}

/// A machine with one 1 GiB device (32 MiB contexts) and a running daemon.
fn machine(tag: &str) -> Machine {
    let mut m = Machine::new(tag, "small");
    m.configure(|sim| sim.with("SIMGPU_MEMORY", "1GiB").with("SIMGPU_CONTEXT_MEMORY", "32MiB"));
    m.start();
    m
}

/// Device memory in use on device 0, every process together, as the simulated driver (its NVML too)
/// counts it.
fn device_used(m: &Machine) -> u64 {
    m.sim.driver_state().device(0).used_memory.load(Ordering::Acquire)
}

fn eventually<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::region::poll_every(Duration::from_millis(20), what, PATIENCE, f)
}

fn pids(v: &Value, key: &str) -> Vec<u32> {
    let mut p: Vec<u32> = v[key].as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as u32).collect();
    p.sort();
    p
}

fn sorted(mut p: Vec<u32>) -> Vec<u32> {
    p.sort();
    p
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_snapshot_frees_the_device_for_another_vgpu_and_resume_brings_every_byte_back() {
    let m = machine("data");
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "768MiB", "--share", "40"]);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "1GiB", "--share", "40", "--mode", "soft"]);
    let mut t1 = Tenant::start(&m, "a", "t1", 300, 2);
    let mut t2 = Tenant::start(&m, "a", "t2", 300, 2);
    let before = device_used(&m);
    let a = m.show("a");
    let a_used = u64_at(&a, "used");
    assert!(a_used >= 600 * MIB, "{a}");
    let free_before = (1 << 30) - before;

    let out = m.ok(&["vgpu", "snapshot", "a"]);
    eprint!("{out}");
    assert!(out.starts_with("vGPU a snapshotted: suspended, 2 process(es) checkpointed;"), "{out}");
    assert!(out.contains("`tessera vgpu resume a` brings it back"), "{out}");
    let a = m.show("a");
    assert!(a["suspended"] == true && a["snapshotted"] == true, "{a}");
    assert_eq!(pids(&a, "snapshot_pids"), sorted(vec![t1.pid, t2.pid]), "{a}");
    assert_eq!(u64_at(&a, "snapshot_bytes"), a_used, "their bytes, held in host memory: {a}");
    assert_eq!(u64_at(&a, "used"), a_used, "and still their quota: {a}");
    // The driver released every byte of theirs (and their contexts); stats no longer count them.
    let after = device_used(&m);
    eprintln!("device memory in use: {} MiB before, {} MiB after the snapshot", before / MIB, after / MIB);
    assert!(after + a_used <= before, "device use went from {before} to {after}, not down by {a_used}");
    let stats = m.client().stats(Some("a")).unwrap();
    assert!(stats.vgpus[0].snapshotted && stats.vgpus[0].memory.snapshot == a_used, "{stats:?}");
    assert!(stats.vgpus[0].processes.iter().all(|p| p.snapshotted), "{stats:?}");
    assert_eq!(stats.devices[0].memory_used, 0, "{stats:?}");

    // Another vGPU's tenant takes more than was free before the snapshot.
    let b_mib = 500;
    assert!((b_mib + 32) * MIB > free_before, "the test's sizes: {free_before} bytes were free before");
    let mut other = Tenant::start(&m, "b", "b", b_mib, 1);
    assert!(device_used(&m) >= after + b_mib * MIB, "b holds its memory on the device");

    // Resume now: not enough memory; a clear error, and everything stays snapshotted.
    let e = m.fails(1, &["vgpu", "resume", "a"]);
    eprint!("{e}");
    assert!(e.contains("vGPU a: device 0 has not enough free memory to restore pid"), "{e}");
    assert!(e.contains("the vGPU stays snapshotted"), "{e}");
    let a = m.show("a");
    assert!(a["snapshotted"] == true && a["suspended"] == true, "{a}");
    assert_eq!(pids(&a, "snapshot_pids"), sorted(vec![t1.pid, t2.pid]), "{a}");
    let api = m.client().resume("a", &[]).unwrap_err();
    assert_eq!(api.code, tessera_client::ErrorCode::ResourceExhausted, "{api}");

    // Freed: the resume succeeds, and every byte is back where the tenants left it.
    other.verify_round();
    other.finish();
    let out = m.ok(&["vgpu", "resume", "a"]);
    eprint!("{out}");
    assert!(out.starts_with("vGPU a resumed: 2 process(es) restored"), "{out}");
    let a = m.show("a");
    assert!(a["snapshotted"] == false && a["suspended"] == false && u64_at(&a, "snapshot_bytes") == 0, "{a}");
    assert_eq!(device_used(&m), before, "the same memory back on the device");
    for t in [&mut t1, &mut t2] {
        let r = t.verify_round();
        eprintln!("pid {}: {r}", t.pid);
    }
    // And they go on launching.
    for t in [&mut t1, &mut t2] {
        t.verify_round();
    }
    t1.finish();
    t2.finish();
    assert!(u64_at(&m.show("a"), "launches") > 0);
}

#[test]
fn a_tenant_killed_while_snapshotted_leaks_nothing() {
    let m = machine("killed");
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "768MiB", "--share", "40"]);
    let mut stays = Tenant::start(&m, "a", "stays", 100, 1);
    let baseline = (device_used(&m), u64_at(&m.show("a"), "used"));
    let dies = Tenant::start(&m, "a", "dies", 200, 1);
    m.ok(&["vgpu", "snapshot", "a"]);
    assert_eq!(pids(&m.show("a"), "snapshot_pids"), sorted(vec![stays.pid, dies.pid]));
    // SAFETY: kill sends a signal to the tenant the test started.
    assert_eq!(unsafe { libc::kill(dies.pid as i32, libc::SIGKILL) }, 0);
    drop(dies);
    // Its slot and quota usage are reclaimed; the snapshot forgets it.
    let a = eventually("the killed tenant's slot freed", || {
        Some(m.show("a")).filter(|a| pids(a, "processes") == [stays.pid])
    });
    assert_eq!(pids(&a, "snapshot_pids"), [stays.pid], "{a}");
    assert_eq!(u64_at(&a, "used"), baseline.1, "the quota usage is back to what the survivor uses: {a}");
    m.ok(&["vgpu", "resume", "a"]);
    assert_eq!(device_used(&m), baseline.0, "device memory back to what the survivor uses");
    let a = m.show("a");
    assert_eq!((u64_at(&a, "used"), a["snapshotted"].as_bool()), (baseline.1, Some(false)), "{a}");
    stays.verify_round();
    stays.finish();
    remove(&m.file("go-dies"));
}

#[test]
fn the_cli_names_what_is_wrong() {
    let m = machine("cli");
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "256MiB", "--share", "40"]);
    let e = m.fails(1, &["vgpu", "snapshot", "zz"]);
    assert!(e.contains("no vGPU named \"zz\""), "{e}");
    let e = m.fails(1, &["vgpu", "resume", "zz"]);
    assert!(e.contains("no vGPU named \"zz\""), "{e}");
    let e = m.fails(1, &["vgpu", "resume", "a"]);
    assert!(e.contains("vGPU a is running (neither suspended nor snapshotted): nothing to resume"), "{e}");
    let mut t = Tenant::start(&m, "a", "t", 32, 1);
    let out = m.ok(&["vgpu", "snapshot", "a"]);
    assert!(out.starts_with("vGPU a snapshotted: suspended, 1 process(es) checkpointed"), "{out}");
    let e = m.fails(1, &["vgpu", "snapshot", "a"]);
    assert!(e.contains("vGPU a is snapshotted already (1 process(es)"), "{e}");
    let e = m.fails(1, &["vgpu", "resume", "a", "--pid", "1"]);
    assert!(e.contains("pid 1 of vGPU a is not snapshotted"), "{e}");
    let list = m.ok(&["vgpu", "list"]);
    assert!(list.contains("snapshotted (1 process(es)"), "{list}");
    let out = m.ok(&["vgpu", "resume", "a", "--pid", &t.pid.to_string()]);
    assert!(out.starts_with(&format!("vGPU a: pid {} resumed: 1 process(es) restored", t.pid)), "{out}");
    assert_eq!(m.show("a")["suspended"], true, "a vGPU snapshotted as a whole stays suspended");
    let out = m.ok(&["vgpu", "resume", "a"]);
    assert_eq!(out, "vGPU a resumed\n");
    t.verify_round();
    t.finish();
    let e = m.fails(2, &["vgpu", "snapshot", "a", "--pid", "x"]);
    assert!(e.contains("--pid"), "{e}");
}

#[test]
fn a_soft_vgpu_is_snapshotted_through_the_driver_too() {
    let m = machine("soft");
    m.ok(&["vgpu", "create", "s", "--device", "0", "--memory", "2GiB", "--share", "40", "--mode", "soft"]);
    let mut t = Tenant::start(&m, "s", "t", 200, 2);
    let before = device_used(&m);
    let used = u64_at(&m.show("s"), "used");
    m.ok(&["vgpu", "snapshot", "s"]);
    let s = m.show("s");
    assert!(s["snapshotted"] == true && u64_at(&s, "snapshot_bytes") == used, "{s}");
    assert_eq!(u64_at(&s, "swapped"), 0, "soft mode's own swap is not what moved it: {s}");
    let after = device_used(&m);
    assert!(after + used <= before, "device use went from {before} to {after}, not down by {used}");
    m.ok(&["vgpu", "resume", "s"]);
    assert_eq!(device_used(&m), before);
    t.verify_round();
    t.verify_round();
    t.finish();
}

#[test]
fn a_restarted_daemon_finds_the_snapshot_and_resumes_it() {
    let mut m = machine("restart");
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "512MiB", "--share", "40"]);
    let mut t = Tenant::start(&m, "a", "t", 100, 1);
    let before = device_used(&m);
    m.ok(&["vgpu", "snapshot", "a"]);
    let bytes = u64_at(&m.show("a"), "snapshot_bytes");
    let out = m.stop_daemon();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    m.start();
    let a = m.show("a");
    assert!(a["snapshotted"] == true && a["suspended"] == true, "{a}");
    assert_eq!((pids(&a, "snapshot_pids"), u64_at(&a, "snapshot_bytes")), (vec![t.pid], bytes), "{a}");
    m.ok(&["vgpu", "resume", "a"]);
    assert_eq!(device_used(&m), before);
    t.verify_round();
    t.finish();
}

#[test]
fn a_process_joining_a_snapshotted_vgpu_waits_at_its_first_launch_until_resume() {
    let m = machine("join");
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "512MiB", "--share", "40"]);
    let mut t = Tenant::start(&m, "a", "t", 32, 1);
    m.ok(&["vgpu", "snapshot", "a"]);
    // `tessera run` execs the probe: the child's pid is the CUDA process's.
    let joiner = m.spawn_tenant("a", &["kernels"]);
    let pid = joiner.id();
    let a = eventually("the joining process attached", || {
        Some(m.show("a")).filter(|a| pids(a, "processes").contains(&pid))
    });
    assert_eq!(pids(&a, "snapshot_pids"), [t.pid], "the joiner is not part of the snapshot: {a}");
    std::thread::sleep(Duration::from_millis(300));
    let mut joiner = joiner.into_child();
    assert!(joiner.try_wait().unwrap().is_none(), "it waits at its first launch while the vGPU is snapshotted");
    m.ok(&["vgpu", "resume", "a"]);
    let r = common::tessera::report(joiner);
    assert!(r.get("error").is_none(), "{r}");
    t.verify_round();
    t.finish();
}
