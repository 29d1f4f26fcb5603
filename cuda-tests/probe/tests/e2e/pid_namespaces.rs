//! Tenants in pid namespaces of their own, as containers run them (`unshare --pid --fork --mount-proc`:
//! the tenant is pid 1 there, with its own `/proc`), beside a daemon in this test's namespace. Such a
//! tenant records the pids of its namespace; the daemon must neither take it for whatever process has
//! that pid here (and free its slot while it runs) nor keep its slot once it is gone, and the tenant must
//! see the daemon alive though it cannot look its pid up. Each test has a daemon of its own on the
//! `small` device. Time bounds are functional: the daemon frees a dead process's slot within seconds.

use crate::common;

use common::tessera::Machine;
use common::{Guarded, first_line};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// `cmd` (its program, arguments and environment) run as pid 1 of a new pid namespace with its own
/// `/proc`, through a user namespace when this test is not root; killed with `unshare` when that dies.
fn in_pid_namespace(cmd: &Command) -> Command {
    let mut wrapped = Command::new("unshare");
    // SAFETY: geteuid only reads this process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        wrapped.args(["--user", "--map-root-user"]);
    }
    wrapped.args(["--pid", "--fork", "--mount-proc", "--kill-child"]).arg(cmd.get_program()).args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) => wrapped.env(key, v),
            None => wrapped.env_remove(key),
        };
    }
    wrapped.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    wrapped
}

/// The `NSpid` line of `/proc/PID/status`: the process's pid in this namespace, then in each nested one.
fn ns_pids(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap_or_default();
    line.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// The child of `parent` (as `/proc` here shows it), waiting for it to appear (20 s at most).
fn child_of(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        });
        if let Some(pid) = found {
            return pid;
        }
        assert!(Instant::now() < deadline, "unshare (pid {parent}) started no child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tessera vgpu show NAME --json`, as one vGPU's status.
fn shown(m: &Machine, name: &str) -> Value {
    let v = m.show(name);
    if v.is_array() { v[0].clone() } else { v }
}

/// The vGPU's bytes in use and attached pids.
fn usage(m: &Machine, name: &str) -> (u64, Vec<u64>) {
    let v = shown(m, name);
    let pids = v["processes"].as_array().map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
    (v["used"].as_u64().unwrap_or(0), pids)
}

/// Waits until `done` (30 s at most).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lets the daemon run at least `rounds` of its reclaim of dead processes (and 3 s of its other
/// once-a-second rounds): each round is seen freeing the slot of a tenant of vGPU `sentinel` killed
/// before it.
fn let_the_daemon_reclaim(m: &Machine, sentinel: &str, rounds: usize) {
    let start = Instant::now();
    let mut done = 0;
    while done < rounds || start.elapsed() < Duration::from_secs(3) {
        let mut tenant = m.spawn_tenant(sentinel, &["alloc", "--bytes", "16MiB"]);
        assert_eq!(first_line(&mut tenant)["allocated"], true);
        drop(tenant);
        wait_until("the daemon frees the killed sentinel's slot", || usage(m, sentinel).1.is_empty());
        done += 1;
    }
}

#[test]
fn a_tenant_in_its_own_pid_namespace_is_counted_while_it_runs_and_freed_when_it_dies() {
    let mut m = Machine::new("pidns-tenant", "small");
    m.start();
    m.ok(&["vgpu", "create", "a", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    m.ok(&["vgpu", "create", "sentinel", "--device", "0", "--memory", "256MiB", "--share", "10"]);
    let mut tenant = Guarded::spawn(&mut in_pid_namespace(&m.tenant("a", &["alloc", "--bytes", "256MiB"])))
        .expect("run unshare(1) (util-linux)");
    let report = first_line(&mut tenant);
    assert_eq!(report["allocated"], true, "{report}");
    let probe = child_of(tenant.id());
    let pids = ns_pids(probe);
    assert_eq!(pids.len(), 2, "the tenant runs in a nested pid namespace: NSpid {pids:?}");
    assert_eq!(pids[1], 1, "it is pid 1 there, as a container's first process");
    let (used, attached) = usage(&m, "a");
    assert!(used >= 256 * MIB, "its memory is counted: {used}");
    assert_eq!(attached, [probe as u64], "the daemon names it by its pid here, not its pid 1 there");
    let stats = m.client().stats(Some("a")).expect("the stats request");
    let named: Vec<(u32, String)> = stats.vgpus[0].processes.iter().map(|p| (p.pid, p.command.clone())).collect();
    assert_eq!(named, [(probe, "simgpu-probe".to_string())], "the stats request names it by its pid here");

    // The daemon's rounds (reclaim, slot integrity, recount, audit) leave it alone: were its pid 1 taken
    // for this namespace's pid 1, its slot would be freed within a second.
    let_the_daemon_reclaim(&m, "sentinel", 3);
    assert_eq!(usage(&m, "a"), (used, vec![probe as u64]), "still counted after the daemon's rounds");
    // The simulated driver, like the real one, knows it by its pid here, and its NVML queries (the daemon's
    // rounds make them) left its memory in place.
    let state = m.sim.driver_state();
    let entry = state.process(probe).expect("the simulated driver finds the tenant by its pid here");
    assert!(entry.memory[0].load(Ordering::Acquire) >= 256 * MIB, "the driver still counts its memory");
    // Its bytes still count against the vGPU's quota, for any other process.
    let out = m.tenant("a", &["alloc", "--bytes", "900MiB", "--hold-ms", "0"]).output().unwrap();
    let refused = common::finished(out).json;
    assert_eq!(refused["allocated"], false, "1 GiB quota, 256 MiB held in the namespace: {refused}");
    let err = m.fails(1, &["vgpu", "rm", "a"]);
    assert!(err.contains(&format!("pid {probe}")), "removal refused, naming its pid here: {err}");

    // Gone with its namespace: its slot is freed and its memory given back.
    drop(tenant);
    wait_until("the daemon frees the namespaced tenant's slot", || usage(&m, "a") == (0, vec![]));
    m.ok(&["vgpu", "rm", "a"]);
}

#[test]
fn a_tenant_in_its_own_pid_namespace_sees_the_daemon_alive() {
    let mut m = Machine::new("pidns-daemon", "small");
    m.start();
    // The daemon's pid means nothing in the tenant's namespace; its heartbeat tells it is there, so the
    // tenant is told the vGPU is not the daemon's, rather than that no daemon runs.
    let out = in_pid_namespace(&m.tenant("nosuch", &["mem-info"])).output().expect("run unshare(1)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let says = format!("there is no vGPU \"nosuch\": the Tessera daemon (pid {})", m.daemon_pid());
    assert!(!out.status.success() && stderr.contains(&says), "{stderr}");
}
