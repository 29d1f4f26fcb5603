//! Changes never stall reads: while `create`, `set` and `rm` run in a loop (each saved to `vgpus.json`
//! with an `fsync`) and every CPU is kept busy by a spinning process, `list` and `stats` are answered
//! within 50 ms at the 99th percentile; and a change is answered only once it is in the state file.

use crate::common;

use common::Guarded;
use common::tessera::Machine;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tessera_client::{Change, VgpuSpec};

/// Reads measured.
const READS: usize = 400;
/// Changes at least carried out while they are measured.
const MIN_CHANGES: usize = 30;
/// The 99th percentile a read must stay under.
const P99: Duration = Duration::from_millis(50);

/// One spinning shell per CPU, killed when dropped.
fn busy_loops() -> Vec<Guarded> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    (0..cpus)
        .map(|_| {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"]).stdin(Stdio::null());
            Guarded::spawn(&mut cmd).expect("start a busy loop")
        })
        .collect()
}

fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    sorted[(sorted.len() * pct / 100).min(sorted.len() - 1)]
}

#[test]
fn reads_are_answered_quickly_while_changes_are_saved_on_a_busy_machine() {
    let mut m = Machine::new("hostile-writes", "small");
    m.start();
    let state = m.file("state").join("vgpus.json");
    let client = m.client();
    client.create(VgpuSpec::new("stay", 0, 1 << 30, 10)).expect("create a vGPU to read");
    let _busy = busy_loops();
    let stop = AtomicBool::new(false);
    let made = AtomicUsize::new(0);
    let (changes, slowest_change, reads) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let client = m.client();
            let (mut changes, mut slowest) = (0usize, Duration::ZERO);
            let mut timed = |what: &str, f: &mut dyn FnMut() -> Result<(), tessera_client::Error>| {
                let t = Instant::now();
                f().unwrap_or_else(|e| panic!("{what}: {e}"));
                slowest = slowest.max(t.elapsed());
                changes += 1;
                made.fetch_add(1, Ordering::Release);
            };
            while !stop.load(Ordering::Acquire) {
                timed("create", &mut || client.create(VgpuSpec::new("w", 0, 256 << 20, 5)).map(drop));
                // Answered once saved: the file holds it when the reply comes.
                let saved = std::fs::read_to_string(&state).expect("read the state file");
                assert!(saved.contains("\"w\""), "create answered before it was saved: {saved}");
                let change = Change { share: Some(7), memory: Some(512 << 20), ..Change::default() };
                timed("set", &mut || client.set("w", change.clone()).map(drop));
                let saved = std::fs::read_to_string(&state).expect("read the state file");
                assert!(saved.contains("\"share\": 7"), "set answered before it was saved: {saved}");
                timed("rm", &mut || client.remove("w"));
                let saved = std::fs::read_to_string(&state).expect("read the state file");
                assert!(!saved.contains("\"w\""), "rm answered before it was saved: {saved}");
            }
            (changes, slowest)
        });
        let mut reads = Vec::with_capacity(READS * 2);
        let deadline = Instant::now() + Duration::from_secs(60);
        while reads.len() < READS || (made.load(Ordering::Acquire) < MIN_CHANGES && Instant::now() < deadline) {
            let t = Instant::now();
            if reads.len() % 2 == 0 {
                client.list().expect("list");
            } else {
                client.stats(None).expect("stats");
            }
            reads.push(t.elapsed());
            if writer.is_finished() {
                break;
            }
        }
        stop.store(true, Ordering::Release);
        let (changes, slowest) = writer.join().expect("the writer");
        (changes, slowest, reads)
    });
    for (kind, first) in [("list", 0), ("stats", 1)] {
        let mut of: Vec<Duration> = reads.iter().skip(first).step_by(2).copied().collect();
        of.sort();
        eprintln!("{kind}: p50 {:?}, p99 {:?}, max {:?}", percentile(&of, 50), percentile(&of, 99), of[of.len() - 1]);
    }
    let mut sorted = reads.clone();
    sorted.sort();
    let (p50, p99, max) = (percentile(&sorted, 50), percentile(&sorted, 99), sorted[sorted.len() - 1]);
    eprintln!(
        "{} reads: p50 {p50:?}, p99 {p99:?}, max {max:?}; {changes} changes, slowest {slowest_change:?}",
        reads.len()
    );
    assert!(changes >= MIN_CHANGES, "only {changes} changes were made while reading");
    assert!(p99 <= P99, "list/stats p99 {p99:?} > {P99:?} (p50 {p50:?}, max {max:?}) while changes were saved");
}
