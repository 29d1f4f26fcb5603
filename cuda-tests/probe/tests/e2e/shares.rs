//! Compute shares: launches take tokens measured in device time. A standalone share
//! (`TESSERA_COMPUTE_SHARE`) limits a saturating process to its share of the engine; a suspended vGPU
//! blocks in its next launch and resumes; a `high` vGPU holds lower priorities; a waiting launch wakes as
//! soon as tokens are granted. The region is written directly, as the daemon would.
//!
//! Every test measures time, so they take turns.

use crate::common;

use common::cprog::{Facts, direct_program};
use common::region::{TestRegion, notify, wait_for};
use common::{Guarded, INVALID_VALUE, Sim, finished, u64_at};
use serde_json::Value;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_region::{Sched, flags, priority};

/// Monotonic nanoseconds, the clock of the region's timestamps.
fn now_ns() -> u64 {
    simgpu::state::now_ns()
}

/// Starts the probe with `args` and extra variables `vars` (stdout and stderr piped).
fn spawn(sim: &Sim, args: &[&str], vars: &[(&str, &str)]) -> Guarded {
    let mut c = sim.command(args);
    c.envs(vars.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    Guarded::spawn(&mut c).expect("spawn simgpu-probe")
}

/// Waits for a spawned probe and returns its JSON, failing the test unless it succeeded.
fn done(child: impl Into<Child>) -> Value {
    let run = finished(child.into().wait_with_output().expect("wait for the probe"));
    assert!(run.success, "probe failed: {}\nstderr:\n{}", run.json, run.stderr);
    run.json
}

/// The fraction of its own wall time a saturate run had the engine (the driver's accounting).
fn engine_share(r: &Value) -> f64 {
    u64_at(r, "driver_busy_ns") as f64 / u64_at(r, "wall_ns") as f64
}

fn launches(s: &Sched) -> u64 {
    s.launches.load(Ordering::Acquire)
}

/// Waits until `s` has admitted at least `n` launches.
fn launched(s: &Sched, n: u64) {
    wait_for(&format!("{n} launches"), Duration::from_secs(10), || (launches(s) >= n).then_some(()));
}

#[test]
fn a_standalone_share_of_30_percent_gets_30_percent_of_the_engine() {
    let _turn = common::timing_turn();
    // Alone on the engine: what it gets is what its share allows, undisturbed by queueing behind others.
    let sim = Sim::shimmed("share-30").with("TESSERA_COMPUTE_SHARE", "30");
    let r = sim.ok(&["saturate", "--ns", "2ms", "--seconds", "3"]);
    let share = engine_share(&r);
    eprintln!("TESSERA_COMPUTE_SHARE=30 alone: {:.1}% of the engine ({r})", share * 100.0);
    // The ceiling is the point; the floor is looser because host stalls on a loaded machine (the launching
    // thread descheduled while its bucket is full) cost a lone process time it cannot make up.
    assert!((0.25..=0.33).contains(&share), "got {:.1}% of the engine, not 30 (+3, -5): {r}", share * 100.0);
    // Without the variable the same run takes far more of the engine: the limit is the share's doing. (It
    // saturates the engine on a quiet host; a bound near that would measure the host, not the share: a
    // 96 ms stall in its one second once left it 86%.)
    let free = Sim::shimmed("share-none").ok(&["saturate", "--ns", "2ms", "--seconds", "1"]);
    assert!(engine_share(&free) > 0.6, "an unlimited process got {:.1}%: {free}", engine_share(&free) * 100.0);
}

#[test]
fn two_standalone_shares_stay_within_their_limits() {
    let _turn = common::timing_turn();
    let sim = Sim::shimmed("share-30-60");
    let args = ["saturate", "--ns", "2ms", "--seconds", "3"];
    let ca = spawn(&sim, &args, &[("TESSERA_COMPUTE_SHARE", "30")]);
    let cb = spawn(&sim, &args, &[("TESSERA_COMPUTE_SHARE", "60")]);
    let (ra, rb) = (done(ca), done(cb));
    let (sa, sb) = (engine_share(&ra), engine_share(&rb));
    eprintln!("standalone 30% and 60% side by side: {:.1}% and {:.1}% of the engine", sa * 100.0, sb * 100.0);
    // Each stays within its share. Each is also charged for waiting behind the other's running kernel
    // (events measure stream time; bounded by the other's window plus one kernel), so both get less.
    assert!(sa <= 0.33 && sb <= 0.63, "over a share: {:.1}% and {:.1}%", sa * 100.0, sb * 100.0);
    // Functional floors (neither starves) and the order of the shares; how close each comes to its share is
    // the benchmarks' to measure: with a busy loop on each CPU beside them they got 23.5-24.4% and 33.3-45%.
    assert!(sa >= 0.10 && sb >= 0.20, "far under the shares: {:.1}% and {:.1}%", sa * 100.0, sb * 100.0);
    assert!(sb > sa, "60% got {:.1}%, no more than 30%'s {:.1}%", sb * 100.0, sa * 100.0);
}

#[test]
fn a_malformed_share_fails_cuinit_naming_the_variable() {
    let run = Sim::shimmed("share-bad").with("TESSERA_COMPUTE_SHARE", "150").run(&["attributes"]);
    assert!(!run.success, "{}", run.json);
    assert_eq!(u64_at(&run.json, "cuda_error"), INVALID_VALUE, "{}", run.json);
    assert!(run.stderr.contains("TESSERA_COMPUTE_SHARE"), "{}", run.stderr);
}

#[test]
fn a_suspended_vgpu_blocks_in_its_next_launch_and_resume_continues_it() {
    let _turn = common::timing_turn();
    let region = TestRegion::new("suspend");
    // A vGPU no daemon manages is set up only by a process with a limit of its own: a quota it never nears.
    let sim = Sim::shimmed("suspend")
        .with("TESSERA_VGPU", "susp")
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_MEMORY_LIMIT", "64GiB");
    let child = sim.spawn(&["saturate", "--ns", "1ms", "--seconds", "2"]);
    let v = region.vgpu("susp");
    let s = &v.live.sched;
    launched(s, 20);
    v.config.flags.fetch_or(flags::SUSPENDED, Ordering::SeqCst);
    notify(s);
    // In-flight kernels finish; the next launch blocks.
    std::thread::sleep(Duration::from_millis(100));
    let (held, device) = (launches(s), s.device_ns.load(Ordering::Acquire));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(launches(s), held, "a suspended vGPU launched");
    assert_eq!(s.device_ns.load(Ordering::Acquire), device, "a suspended vGPU's work ran on");
    assert!(s.waiters.load(Ordering::Acquire) >= 1, "the process is not waiting in a launch");
    let resumed = now_ns();
    v.config.flags.fetch_and(!flags::SUSPENDED, Ordering::SeqCst);
    notify(s);
    launched(s, held + 1);
    let wake_us = s.last_launch_ns.load(Ordering::Acquire).saturating_sub(resumed) as f64 / 1e3;
    eprintln!("resume to the next launch: {wake_us:.0} µs");
    // Resume is seen at the next wake-up, or at the gate's 2 ms re-check at the latest. The bound is loose
    // because a stalled host thread can add tens of ms here; it only says the launch went on promptly.
    assert!(wake_us < 50_000.0, "the launch went on {wake_us} µs after resume");
    let r = done(child);
    assert!(u64_at(&r, "longest_gap_ns") >= 500_000_000, "the process was not held: {r}");
}

#[test]
fn a_high_vgpu_holds_lower_priorities_until_it_goes_idle() {
    let _turn = common::timing_turn();
    let region = TestRegion::new("priority");
    // vGPUs no daemon manages are set up only by processes with a limit of their own: a quota never neared.
    let sim = Sim::shimmed("priority").with("TESSERA_REGION", region.path()).with("TESSERA_MEMORY_LIMIT", "64GiB");
    let low = spawn(&sim, &["saturate", "--ns", "500us", "--seconds", "3"], &[("TESSERA_VGPU", "low")]);
    let l = &region.vgpu("low").live.sched;
    launched(l, 20);
    let high = spawn(&sim, &["saturate", "--ns", "500us", "--seconds", "1"], &[("TESSERA_VGPU", "hi")]);
    let h = &region.vgpu("hi").live.sched;
    region.vgpu("hi").config.priority.store(priority::HIGH, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    let (held, hi_before) = (launches(l), launches(h));
    std::thread::sleep(Duration::from_millis(500));
    // None, unless the high process left its queue empty for longer than the hold (a host hiccup on a
    // loaded machine): then a window's worth (two 500 µs kernels) may slip in each time. Seen: up to 6
    // with 20% of the CPUs stolen, 33 with a busy loop on each CPU beside the test. Unheld, the normal vGPU
    // would launch about 500 here: the bound only tells held from not held.
    let slipped = launches(l) - held;
    assert!(slipped <= 100, "a normal vGPU launched {slipped} kernels in 500 ms while a high one had work");
    assert!(launches(h) > hi_before + 100, "the high vGPU did not run alone: {} launches", launches(h) - hi_before);
    let hr = done(high);
    let after_high = launches(l);
    let lr = done(low);
    assert!(launches(l) > after_high + 100, "low barely ran after high exited: {} launches", launches(l) - after_high);
    // The low vGPU went on once the high one was idle: its longest wait ended soon after the high
    // process's last work finished (`end_ns`: after its final synchronize returned). A kernel that
    // slipped in splits that wait in two, so the probe's longest gap then says nothing about the hold.
    let late_us = (u64_at(&lr, "longest_gap_end_ns") as f64 - u64_at(&hr, "end_ns") as f64) / 1e3;
    eprintln!("low priority continued {late_us:.0} µs after the high vGPU's work finished ({slipped} slipped in)");
    if slipped == 0 {
        // Loose, as above. The hold's shortening to HIGH_IDLE_NS when the high vGPU's last work finishes is
        // unit-tested in the shim's gate; the 1 ms target is benchmark (e)'s engine idle time after a burst.
        assert!(late_us < 50_000.0, "low continued {late_us} µs after high went idle: {lr}");
        assert!(u64_at(&lr, "longest_gap_ns") >= 500_000_000, "low was not held: {lr}");
    }
}

#[test]
fn a_launch_waiting_for_tokens_wakes_when_they_are_granted() {
    let _turn = common::timing_turn();
    let region = TestRegion::new("grant");
    // A vGPU no daemon manages is set up only by a process with a limit of its own: a quota it never nears.
    let sim = Sim::shimmed("grant")
        .with("TESSERA_VGPU", "granted")
        .with("TESSERA_REGION", region.path())
        .with("TESSERA_MEMORY_LIMIT", "64GiB");
    let child = sim.spawn(&["saturate", "--ns", "200us", "--seconds", "2"]);
    let v = region.vgpu("granted");
    let s = &v.live.sched;
    launched(s, 10);
    // Managed from now on, as by the daemon: no tokens until granted.
    s.tokens.store(0, Ordering::SeqCst);
    v.config.flags.fetch_or(flags::MANAGED, Ordering::SeqCst);
    let mut latencies = Vec::new();
    for _ in 0..20 {
        wait_for("a launch waiting for tokens", Duration::from_secs(5), || {
            (s.waiters.load(Ordering::Acquire) > 0 && s.tokens.load(Ordering::Acquire) <= 0).then_some(())
        });
        std::thread::sleep(Duration::from_millis(5));
        let before = launches(s);
        let granted = now_ns();
        s.tokens.store(200_000, Ordering::SeqCst);
        notify(s);
        launched(s, before + 1);
        latencies.push(s.last_launch_ns.load(Ordering::Acquire).saturating_sub(granted));
    }
    let demand = s.bell.load(Ordering::Acquire);
    v.config.flags.fetch_and(!flags::MANAGED, Ordering::SeqCst);
    notify(s);
    done(child);
    latencies.sort_unstable();
    let (p50, max) = (latencies[latencies.len() / 2] as f64 / 1e3, *latencies.last().unwrap() as f64 / 1e3);
    eprintln!("grant to launch: median {p50:.0} µs, max {max:.0} µs over {} grants", latencies.len());
    assert!(demand > 0, "waiting launches never signalled demand to the daemon");
    assert!(p50 < 1_000.0, "median wake-up {p50} µs after a grant (all: {latencies:?})");
}

#[test]
fn c_programs_launching_on_the_legacy_and_per_thread_default_streams_are_gated_and_measured() {
    for per_thread in [false, true] {
        let region = TestRegion::new(&format!("c-{per_thread}"));
        let sim = Sim::shimmed("c-gated")
            .with("TESSERA_VGPU", "c")
            .with("TESSERA_REGION", region.path())
            .with("TESSERA_COMPUTE_SHARE", "50");
        let facts = Facts::ok(sim.command_for(direct_program(per_thread), &[]));
        assert_eq!(facts.get("vector_add"), "ok", "per-thread build: {per_thread}");
        let s = &region.vgpu("c").live.sched;
        assert_eq!(launches(s), 1, "per-thread build: {per_thread}");
        assert!(s.device_ns.load(Ordering::Acquire) > 0, "the launch was not measured (per-thread: {per_thread})");
        assert_eq!(s.inflight_ns.load(Ordering::Acquire), 0, "per-thread build: {per_thread}");
    }
}
