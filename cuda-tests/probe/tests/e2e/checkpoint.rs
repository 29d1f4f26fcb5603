//! The driver's process checkpoint API (`cuCheckpointProcess*`) on the simulated driver, driven as NVIDIA's
//! `cuda-checkpoint` drives it: a controller process (`simgpu-probe checkpoint-ctl`, which loads
//! `libcuda.so.1` with libloading) locks, checkpoints, restores and unlocks a tenant process
//! (`simgpu-probe checkpoint-tenant`) by pid.

use crate::common;

use common::{GIB, Guarded, MIB, OUT_OF_MEMORY, Sim, at, u64_at};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const SUCCESS: u64 = 0;
const INVALID_VALUE: u64 = 1;
const NOT_INITIALIZED: u64 = 3;
const OPERATING_SYSTEM: u64 = 304;
const NOT_PERMITTED: u64 = 800;
const ILLEGAL_STATE: u64 = 401;
const NOT_READY: u64 = 600;
const NOT_SUPPORTED: u64 = 801;

const RUNNING: u64 = 0;
const LOCKED: u64 = 1;
const CHECKPOINTED: u64 = 2;

/// A generous bound on any one answer: a missed wake-up or a hang fails the test instead of stalling it.
const ANSWER: Duration = Duration::from_secs(60);

/// A probe process that answers stdin lines with JSON lines.
struct Probe {
    child: Guarded,
    lines: Receiver<Value>,
}

impl Probe {
    fn spawn(sim: &Sim, args: &[&str]) -> Probe {
        Probe::start(sim.spawn(args))
    }

    /// A probe run by `cmd` (e.g. as another user).
    fn spawn_command(mut cmd: std::process::Command) -> Probe {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        Probe::start(Guarded::spawn(&mut cmd).expect("spawn simgpu-probe"))
    }

    fn start(mut child: Guarded) -> Probe {
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("probe printed {line:?}: {e}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Probe { child, lines }
    }

    /// The next JSON line, failing the test after [`ANSWER`].
    fn line(&mut self) -> Value {
        match self.lines.recv_timeout(ANSWER) {
            Ok(v) => {
                assert!(v.get("error").is_none(), "probe failed: {v}");
                v
            }
            Err(e) => {
                let _ = self.child.kill();
                let out = self.child.stderr.take().map(|mut s| {
                    let mut text = String::new();
                    let _ = std::io::Read::read_to_string(&mut s, &mut text);
                    text
                });
                panic!("no answer from the probe within {ANSWER:?} ({e}); stderr: {out:?}")
            }
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "{line}").expect("write to the probe");
        stdin.flush().expect("flush");
    }

    /// Sends a line and returns the answer.
    fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        self.line()
    }
}

/// A tenant holding `mib` MiB (plus its other buffers), with its first report.
fn tenant(sim: &Sim, mib: u64, extra: &[&str]) -> (Probe, Value, i32) {
    let mib = mib.to_string();
    let mut args = vec!["checkpoint-tenant", "--mib", &mib];
    args.extend_from_slice(extra);
    let mut t = Probe::spawn(sim, &args);
    let report = t.line();
    let pid = u64_at(&report, "pid") as i32;
    (t, report, pid)
}

/// The controller, ready.
fn controller(sim: &Sim) -> Probe {
    let mut c = Probe::spawn(sim, &["checkpoint-ctl"]);
    assert_eq!(at(&c.line(), "ready"), true);
    c
}

/// Runs `action` on `pid`; the answer line.
fn act(c: &mut Probe, action: &str, pid: i32) -> Value {
    c.ask(&format!("{action} {pid}"))
}

/// The `CUresult` of `action` on `pid`.
fn code(c: &mut Probe, action: &str, pid: i32) -> u64 {
    u64_at(&act(c, action, pid), "code")
}

/// The checkpoint state of `pid`.
fn state(c: &mut Probe, pid: i32) -> u64 {
    let v = act(c, "state", pid);
    assert_eq!(u64_at(&v, "code"), SUCCESS, "{v}");
    u64_at(&v, "value")
}

/// Bytes in the tenant's buffers.
fn buffer_bytes(report: &Value) -> u64 {
    at(report, "buffers").as_array().expect("buffers").iter().map(|b| u64_at(b, "size")).sum()
}

fn used(sim: &Sim) -> u64 {
    sim.driver_state().device(0).used_memory.load(Ordering::Acquire)
}

fn process_memory(sim: &Sim, pid: i32) -> u64 {
    let s = sim.driver_state();
    s.process(pid as u32).map_or(0, |p| p.memory[0].load(Ordering::Acquire))
}

#[test]
fn checkpoint_releases_device_memory_and_restore_brings_every_byte_back() {
    let sim = Sim::new("ckpt-roundtrip").with("SIMGPU_DEVICES", "small");
    let (mut t, report, pid) = tenant(&sim, 256, &[]);
    let mut c = controller(&sim);
    let held = process_memory(&sim, pid);
    // The tenant's charge: its buffers, its array and its context.
    assert_eq!(held, buffer_bytes(&report) + u64_at(&report, "array_bytes") + 128 * MIB, "tenant holds {held}");
    let used_running = used(&sim);
    assert_eq!(state(&mut c, pid), RUNNING);
    let tid = act(&mut c, "tid", pid);
    assert_eq!(u64_at(&tid, "code"), SUCCESS);
    let tid = u64_at(&tid, "value");
    assert!(std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists(), "restore thread {tid} of {pid}");

    assert_eq!(code(&mut c, "lock", pid), SUCCESS);
    assert_eq!(state(&mut c, pid), LOCKED);
    assert_eq!(used(&sim), used_running, "locking releases nothing");
    assert_eq!(code(&mut c, "checkpoint", pid), SUCCESS);
    assert_eq!(state(&mut c, pid), CHECKPOINTED);
    assert_eq!(used(&sim), used_running - held, "the checkpoint gave back every byte the tenant held");
    assert_eq!(process_memory(&sim, pid), 0);

    // Another process can now use the memory: nearly all of the device.
    let free = 4 * GIB - used(&sim);
    let take = free - 128 * MIB - MIB;
    let mut holder = sim.spawn(&["alloc", "--bytes", &take.to_string()]);
    let got = common::first_line(&mut holder);
    assert_eq!(at(&got, "allocated"), true, "{got}");

    // Restore needs the memory back: refused while the holder has it, the tenant stays checkpointed.
    assert_eq!(code(&mut c, "restore", pid), OUT_OF_MEMORY);
    assert_eq!(state(&mut c, pid), CHECKPOINTED);
    assert_eq!(process_memory(&sim, pid), 0, "a refused restore keeps nothing");
    common::finish(holder);
    assert_eq!(code(&mut c, "restore", pid), SUCCESS);
    assert_eq!(state(&mut c, pid), LOCKED, "a restore leaves the process locked");
    assert_eq!(used(&sim), used_running);
    assert_eq!(process_memory(&sim, pid), held);
    assert_eq!(code(&mut c, "unlock", pid), SUCCESS);
    assert_eq!(state(&mut c, pid), RUNNING);

    // Every byte is back at its address, and the tenant computes on.
    let v = t.ask("verify");
    assert_eq!(u64_at(&v, "verified_bytes"), buffer_bytes(&report));
    assert_eq!(at(&v, "kernel_ok"), true);
    // A second cycle works the same.
    for action in ["lock", "checkpoint", "restore", "unlock"] {
        assert_eq!(code(&mut c, action, pid), SUCCESS, "{action}");
    }
    assert_eq!(u64_at(&t.ask("verify"), "verified_bytes"), buffer_bytes(&report));
    common::finish(t.child);
}

#[test]
fn every_call_in_the_wrong_state_is_an_illegal_state_and_changes_nothing() {
    let sim = Sim::new("ckpt-states");
    let (mut t, report, pid) = tenant(&sim, 4, &[]);
    let mut c = controller(&sim);
    for action in ["checkpoint", "restore", "unlock"] {
        assert_eq!(code(&mut c, action, pid), ILLEGAL_STATE, "{action} while RUNNING");
        assert_eq!(state(&mut c, pid), RUNNING);
    }
    assert_eq!(code(&mut c, "lock-dirty", pid), INVALID_VALUE, "reserved fields must be zero");
    assert_eq!(state(&mut c, pid), RUNNING);
    assert_eq!(code(&mut c, "lock", pid), SUCCESS);
    for action in ["lock", "restore"] {
        assert_eq!(code(&mut c, action, pid), ILLEGAL_STATE, "{action} while LOCKED");
        assert_eq!(state(&mut c, pid), LOCKED);
    }
    assert_eq!(code(&mut c, "checkpoint", pid), SUCCESS);
    for action in ["lock", "checkpoint", "unlock"] {
        assert_eq!(code(&mut c, action, pid), ILLEGAL_STATE, "{action} while CHECKPOINTED");
        assert_eq!(state(&mut c, pid), CHECKPOINTED);
    }
    assert_eq!(code(&mut c, "restore-remap", pid), NOT_SUPPORTED, "GPU remapping is not simulated");
    assert_eq!(state(&mut c, pid), CHECKPOINTED);
    assert_eq!(code(&mut c, "restore", pid), SUCCESS);

    // While locked, the tenant's driver calls wait for the unlock.
    t.send("call");
    std::thread::sleep(Duration::from_millis(200)); // gives a broken gate the chance to let the call through
    let unlock = act(&mut c, "unlock", pid);
    assert_eq!(u64_at(&unlock, "code"), SUCCESS);
    let call = t.line();
    assert!(
        u64_at(&call, "returned_ns") >= u64_at(&unlock, "started_ns"),
        "a driver call returned while the process was locked: {call} (unlock {unlock})"
    );
    assert_eq!(u64_at(&t.ask("verify"), "verified_bytes"), buffer_bytes(&report));
    common::finish(t.child);
}

#[test]
fn lock_waits_for_submitted_work_and_a_timeout_leaves_the_process_running() {
    let sim = Sim::new("ckpt-timeout");
    let (mut t, _, pid) = tenant(&sim, 1, &[]);
    let mut c = controller(&sim);
    let kernel_ns = 3_000_000_000u64;
    let spin = t.ask(&format!("spin {kernel_ns}"));
    let kernel_end = u64_at(&spin, "launched_ns") + kernel_ns;

    let lock = c.ask(&format!("lock {pid} 100"));
    assert_eq!(u64_at(&lock, "code"), NOT_READY, "a 100 ms lock cannot outwait a 3 s kernel: {lock}");
    assert!(u64_at(&lock, "returned_ns") - u64_at(&lock, "started_ns") >= 100_000_000, "{lock}");
    assert_eq!(state(&mut c, pid), RUNNING);
    // Still running: its calls go through at once.
    let call = t.ask("call");
    assert!(u64_at(&call, "returned_ns") < kernel_end, "{call}");

    let lock = act(&mut c, "lock", pid);
    assert_eq!(u64_at(&lock, "code"), SUCCESS);
    assert!(u64_at(&lock, "returned_ns") >= kernel_end, "the lock returned before the kernel ended: {lock}");
    assert_eq!(code(&mut c, "unlock", pid), SUCCESS);
    common::finish(t.child);
}

#[test]
fn a_tenant_killed_while_checkpointed_leaks_nothing_and_its_pid_answers_an_error() {
    let sim = Sim::new("ckpt-kill").with("SIMGPU_DEVICES", "small");
    let mut other = sim.spawn(&["alloc", "--bytes", "512MiB"]);
    common::first_line(&mut other);
    let baseline = used(&sim);
    let (mut t, _, pid) = tenant(&sim, 256, &[]);
    let mut c = controller(&sim);
    assert_eq!(code(&mut c, "lock", pid), SUCCESS);
    assert_eq!(code(&mut c, "checkpoint", pid), SUCCESS);
    assert_eq!(used(&sim), baseline);
    t.child.kill().expect("kill the tenant");
    // Killed but not reaped: a zombie, which answers like a process without CUDA.
    let deadline = std::time::Instant::now() + ANSWER;
    let mut zombie = code(&mut c, "state", pid);
    while zombie == SUCCESS && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        zombie = code(&mut c, "state", pid);
    }
    assert_eq!(zombie, NOT_INITIALIZED, "a zombie");
    t.child.wait().expect("reap the tenant");
    let s = sim.driver_state();
    s.reclaim_dead();
    assert_eq!(s.device(0).used_memory.load(Ordering::Acquire), baseline, "nothing leaked, nothing subtracted twice");
    for action in ["state", "restore", "unlock", "lock"] {
        assert_eq!(code(&mut c, action, pid), OPERATING_SYSTEM, "{action} on a pid with no process");
    }
    common::finish(other);
}

#[test]
fn unknown_processes_and_managed_memory_are_refused() {
    let sim = Sim::new("ckpt-refused");
    let mut c = controller(&sim);
    // A process that never initialised CUDA.
    let sleeper = Guarded::spawn(std::process::Command::new("sleep").arg("60")).expect("spawn sleep");
    let sleeper_pid = sleeper.id() as i32;
    for action in ["state", "lock", "tid"] {
        assert_eq!(code(&mut c, action, sleeper_pid), NOT_INITIALIZED, "{action} on a process without CUDA");
    }
    drop(sleeper);
    // A pid with no process (the sleeper's, reaped above), and pids that cannot be one.
    assert_eq!(code(&mut c, "state", sleeper_pid), OPERATING_SYSTEM);
    assert_eq!(code(&mut c, "lock", 0), INVALID_VALUE);
    assert_eq!(code(&mut c, "state", -1), INVALID_VALUE);

    // Managed memory cannot be checkpointed; the process stays locked and carries on after the unlock.
    let (mut t, report, pid) = tenant(&sim, 1, &["--managed", "1"]);
    assert_eq!(code(&mut c, "lock", pid), SUCCESS);
    assert_eq!(code(&mut c, "checkpoint", pid), NOT_SUPPORTED);
    assert_eq!(state(&mut c, pid), LOCKED);
    assert_eq!(code(&mut c, "unlock", pid), SUCCESS);
    assert_eq!(u64_at(&t.ask("verify"), "verified_bytes"), buffer_bytes(&report));
    common::finish(t.child);
}

#[test]
fn a_c_program_checkpoints_itself_through_the_real_header_with_and_without_the_shim() {
    let program = common::cprog::CBuild::program("checkpoint_self.c").link_driver().build();
    for shim in [false, true] {
        let sim = Sim::new("ckpt-self");
        let sim = if shim { sim.with_shim() } else { sim.without_shim() };
        let facts = common::cprog::Facts::ok(sim.command_for(&program, &[]));
        for s in ["lock", "checkpoint", "restore", "unlock"] {
            assert_eq!(facts.num(&format!("size.{s}")), 64, "sizeof CUcheckpoint*Args of cuda.h");
        }
        assert_eq!(facts.num("state.running"), RUNNING as i64);
        assert_eq!(facts.num("state.locked"), LOCKED as i64);
        assert_eq!(facts.num("state.checkpointed"), CHECKPOINTED as i64);
        assert_eq!(facts.num("state.restored"), LOCKED as i64);
        assert_eq!(facts.num("state.unlocked"), RUNNING as i64);
        assert!(facts.num("tid") > 0);
        assert_eq!(facts.num("verified"), 4 << 20, "every word back after the restore (shim: {shim})");
        assert_eq!(facts.num("free.after"), facts.num("free.before"));
    }
}

#[test]
fn a_requester_waiting_on_a_tenant_that_dies_gets_an_error_not_a_hang() {
    let sim = Sim::new("ckpt-dies");
    let (mut t, _, pid) = tenant(&sim, 1, &[]);
    let mut c = controller(&sim);
    let kernel_ns = 30_000_000_000u64;
    let spin = t.ask(&format!("spin {kernel_ns}"));
    let kernel_end = u64_at(&spin, "launched_ns") + kernel_ns;
    c.send(&format!("lock {pid}")); // no timeout: waits for the 30 s kernel
    std::thread::sleep(Duration::from_millis(300));
    t.child.kill().expect("kill the tenant");
    let lock = c.line();
    let answer = u64_at(&lock, "code");
    assert!(answer == NOT_INITIALIZED || answer == OPERATING_SYSTEM, "the lock of a dead process: {lock}");
    assert!(u64_at(&lock, "returned_ns") < kernel_end, "the requester waited for the dead tenant's kernel");
    t.child.wait().expect("reap the tenant");
    assert_eq!(code(&mut c, "state", pid), OPERATING_SYSTEM);
}

#[test]
fn only_the_same_user_or_root_may_control_a_process() {
    let (owner, other) = (common::user("tessera-test-a"), common::user("tessera-test-b"));
    // A state file both users may open, in a folder without the sticky bit.
    let dir = std::env::temp_dir().join(format!("simgpu-ckpt-perm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.join("state");
    std::fs::File::create(&file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    let sim = Sim::new("ckpt-perm").with("SIMGPU_STATE", &file.to_string_lossy());
    let as_user = |who: (u32, u32), args: &[&str]| {
        let mut cmd = sim.command(args);
        cmd.uid(who.0).gid(who.1);
        Probe::spawn_command(cmd)
    };
    let mut t = as_user(owner, &["checkpoint-tenant", "--mib", "1"]);
    let pid = u64_at(&t.line(), "pid") as i32;
    let mut stranger = as_user(other, &["checkpoint-ctl"]);
    assert_eq!(at(&stranger.line(), "ready"), true);
    for action in ["state", "tid", "lock", "checkpoint", "restore", "unlock"] {
        assert_eq!(code(&mut stranger, action, pid), NOT_PERMITTED, "{action} by another user");
    }
    let mut same = as_user(owner, &["checkpoint-ctl"]);
    assert_eq!(at(&same.line(), "ready"), true);
    assert_eq!(state(&mut same, pid), RUNNING);
    let mut root = controller(&sim);
    for action in ["lock", "checkpoint", "restore", "unlock"] {
        assert_eq!(code(&mut root, action, pid), SUCCESS, "{action} by root");
    }
    assert_eq!(at(&t.ask("verify"), "kernel_ok"), true);
    common::finish(t.child);
    let _ = std::fs::remove_dir_all(&dir);
}
