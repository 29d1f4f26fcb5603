//! Tampering contained: a tenant writes its vGPU's live file directly (it owns it), as the shim never
//! would — keeping its token bucket full, planting process slots, zeroing its memory counts — and the
//! daemon puts it right: the audit suspends a vGPU that takes more device time than it was granted (and
//! never an honest one), false process slots are freed, and memory counts are counted again from the
//! driver's figures. The test process plays the tenant (root may write any vGPU's file).

use crate::common;

use common::region::{BucketCheat, live_file, plant, poll_every};
use common::tessera::{Machine, pids};
use common::{Guarded, MIB, OUT_OF_MEMORY, finish, first_line, u64_at};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// vGPU `name` in a `vgpu list --json` answer.
fn entry<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array().expect("a list").iter().find(|v| v["name"] == name).expect("the vGPU is listed")
}

fn suspended(v: &Value) -> bool {
    v["suspended"].as_bool().expect("suspended is a boolean")
}

/// Device time the daemon charged each of `names` so far.
fn device_ns(m: &Machine, names: &[&str]) -> Vec<u64> {
    let list = m.list();
    names.iter().map(|n| u64_at(entry(&list, n), "device_ns")).collect()
}

/// Fails the test if any of the honest vGPUs `names` is suspended in `list`.
fn none_suspended(list: &Value, names: &[&str]) {
    for n in names {
        assert!(!suspended(entry(list, n)), "honest vGPU {n} was suspended: {}", entry(list, n));
    }
}

/// The two percentages of an audit reason: `took X% of device 0 over 10 s, entitled to Y%`.
fn figures(reason: &str) -> (f64, f64) {
    let number = |after: &str| -> f64 {
        let rest = &reason[reason.find(after).unwrap_or_else(|| panic!("{after:?} in {reason:?}")) + after.len()..];
        rest[..rest.find('%').unwrap()].parse().unwrap()
    };
    (number("took "), number("entitled to "))
}

#[test]
fn a_tenant_keeping_its_bucket_full_is_suspended_and_its_honest_neighbours_never_are() {
    let _turn = common::timing_turn();
    let mut m = Machine::new("tamper-bucket", "small");
    m.start();
    for (name, share) in [("a", "10"), ("b", "50"), ("c", "40")] {
        m.ok(&["vgpu", "create", name, "--device", "0", "--memory", "1GiB", "--share", share]);
    }
    let honest = ["b", "c"];
    // The three saturate the device until the test ends them: 60 s is past the slowest suspension allowed
    // below (28 s) with the measurements after it (17 s).
    let (b, c, a) = (m.saturate("b", "60", None), m.saturate("c", "60", None), m.saturate("a", "60", None));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!suspended(&m.show("a")), "suspended before it cheated");

    // The tenant of `a` keeps its bucket at the burst (2 ms for its 1 ms window), waking its launches.
    let bucket = &live_file(&m, "a").1.sched;
    let cheat = BucketCheat::start(bucket);
    let cheating = Instant::now();
    // Suspended once a 10 s window of the audit holds enough of the cheating: on a quiet host about 10 s
    // after it began. The bound is functional (an audit that never judges fails it): on a loaded host the
    // cheater's own launches get the CPU late, its overuse accrues more slowly, and a busy loop on each CPU
    // beside the test has made it 20 s. The window's arithmetic is the audit's unit tests'.
    let reason = poll_every(Duration::from_millis(250), "the audit to suspend a", Duration::from_secs(28), || {
        let list = m.list();
        none_suspended(&list, &honest);
        let a = entry(&list, "a");
        suspended(a).then(|| a["audit"].as_str().expect("the audit's reason").to_string())
    });
    eprintln!("suspended after {:.1} s of cheating: {reason}", cheating.elapsed().as_secs_f64());
    let (took, entitled) = figures(&reason);
    assert!(took > entitled + 5.0 && reason.contains("of device 0 over 10 s"), "{reason}");
    let text = m.ok(&["vgpu", "list"]);
    assert!(text.contains("suspended (audit: took"), "{text}");
    assert!(m.ok(&["vgpu", "show", "a"]).contains(&format!("state:         suspended (audit: {reason})")));

    // Suspended, it gets nothing however full its bucket; its neighbours keep their shares (50 and 40, and
    // a's idle 10 split between them: 55.6% and 44.4% on a quiet host, 48.8% and 39.3%, and 39.5% and
    // 31.8%, seen with a busy loop on each CPU beside the test and the host loaded). A functional bound, the
    // shares' accuracy being the share benchmarks': each keeps at least 60% of its own share (neither
    // starves behind the suspended one).
    std::thread::sleep(Duration::from_millis(200));
    let before = device_ns(&m, &["a", "b", "c"]);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    let after = device_ns(&m, &["a", "b", "c"]);
    let wall = t.elapsed().as_nanos() as f64;
    let share = |i: usize| (after[i] - before[i]) as f64 / wall;
    eprintln!("after the suspension: a {:.3}, b {:.3}, c {:.3}", share(0), share(1), share(2));
    assert!(share(0) < 0.01, "a suspended vGPU ran: {:.3}", share(0));
    assert!(share(1) >= 0.30 && share(2) >= 0.24, "b {:.3}, c {:.3}", share(1), share(2));

    // The honest vGPUs go on saturating and are never suspended while a's share goes to them for more than
    // a whole audit window (10 s) after the measurement.
    let window_end = Instant::now() + Duration::from_millis(10_500);
    while Instant::now() < window_end {
        none_suspended(&m.list(), &honest);
        std::thread::sleep(Duration::from_millis(250));
    }
    cheat.stop();
    none_suspended(&m.list(), &honest);

    // Resumed, it runs again and the reason is gone.
    m.ok(&["vgpu", "resume", "a"]);
    let shown = m.show("a");
    assert!(!suspended(&shown) && shown.get("audit").is_none(), "{shown}");
    let resumed = device_ns(&m, &["a"])[0];
    poll_every(Duration::from_millis(100), "a's kernels to run again", Duration::from_secs(10), || {
        (device_ns(&m, &["a"])[0] > resumed).then_some(())
    });
    // Their work shown, the three tenants are ended (dropped: killed and reaped).
    drop((a, b, c));
    let out = m.stop_daemon();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains(&format!("audit: vGPU \"a\" {reason}; suspended")), "{log}");
    assert!(!log.contains("audit: vGPU \"b\"") && !log.contains("audit: vGPU \"c\""), "{log}");
}

#[test]
fn planted_process_slots_are_freed_and_the_vgpu_can_be_removed() {
    // SAFETY: getuid cannot fail.
    assert_eq!(unsafe { libc::getuid() }, 0, "this test needs root, to run a process as another user");
    let other = common::user("tessera-test-b").0;
    let mut m = Machine::new("tamper-slots", "small");
    m.start();
    m.ok(&["vgpu", "create", "p", "--device", "0", "--memory", "1GiB", "--share", "10", "--user", "tessera-test-b"]);
    m.ok(&["vgpu", "create", "q", "--device", "0", "--memory", "1GiB", "--share", "10"]);

    // p (tessera-test-b's): its tenant plants pid 1, root's, alive, with 512 MiB counted.
    plant(live_file(&m, "p").1, 3, 1, 512 * MIB);
    assert_eq!(pids(&m.show("p")), [1], "planted");
    // Removed at once: the slot names no process of p's user.
    m.ok(&["vgpu", "rm", "p"]);

    // q (root's): a real tenant attached, and a live process of tessera-test-b planted beside it.
    let mut tenant = m.spawn_tenant("q", &["alloc", "--bytes", "64MiB"]);
    let tenant_pid = u64_at(&first_line(&mut tenant), "pid");
    let mut stranger =
        Guarded::spawn(Command::new("sleep").arg("60").uid(other).gid(other)).expect("sleep as another user");
    plant(live_file(&m, "q").1, 7, stranger.id(), 256 * MIB);
    // The daemon's watch frees it within a round or two; the real tenant stays.
    poll_every(Duration::from_millis(100), "the planted slot freed", Duration::from_secs(5), || {
        let q = m.show("q");
        (pids(&q) == [tenant_pid]).then_some(())
    });
    assert!(u64_at(&m.show("q"), "used") < 256 * MIB, "the planted bytes were given back");
    finish(tenant);
    let _ = stranger.kill();
    let _ = stranger.wait();
    m.ok(&["vgpu", "rm", "q"]);
    let log = String::from_utf8_lossy(&m.stop_daemon().stderr).into_owned();
    assert!(log.contains("vGPU \"p\": process slot of pid 1 freed (a process of uid 0"), "{log}");
    assert!(log.contains(&format!("process slot of pid {} freed (a process of uid {other}", stranger.id())), "{log}");
}

#[test]
fn a_zeroed_memory_count_does_not_let_a_tenant_past_its_quota() {
    let mut m = Machine::new("tamper-memory", "small");
    m.start();
    m.ok(&["vgpu", "create", "m", "--device", "0", "--memory", "512MiB", "--share", "10"]);
    // 128 MiB of context and 256 MiB allocated: 384 MiB of the 512 counted.
    let mut holder = m.spawn_tenant("m", &["alloc", "--bytes", "256MiB"]);
    assert_eq!(first_line(&mut holder)["allocated"], true);
    assert_eq!(u64_at(&m.show("m"), "used"), 384 * MIB);
    // Its tenant zeroes every count in its file, and the mark below which usage is summed.
    let file = live_file(&m, "m").1;
    file.procs_hwm.store(0, Ordering::SeqCst);
    for p in &file.procs {
        p.used[0].store(0, Ordering::SeqCst);
    }
    // The daemon counts the holder's memory again from the driver's figure.
    poll_every(Duration::from_millis(100), "the count restored", Duration::from_secs(10), || {
        (u64_at(&m.show("m"), "used") >= 384 * MIB).then_some(())
    });
    // So another process of the vGPU gets its context (512 MiB counted) but not 256 MiB more.
    let out = m.tenant("m", &["alloc", "--bytes", "256MiB", "--hold-ms", "0"]).output().expect("run a tenant");
    let run = common::finished(out);
    assert!(run.success, "{}\n{}", run.json, run.stderr);
    assert_eq!((run.json["allocated"].as_bool(), u64_at(&run.json, "cuda_error")), (Some(false), OUT_OF_MEMORY));
    finish(holder);
    let log = String::from_utf8_lossy(&m.stop_daemon().stderr).into_owned();
    assert!(log.contains("vGPU \"m\": pid") && log.contains("counted again"), "{log}");
}
