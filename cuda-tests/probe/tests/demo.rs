//! `tessera demo`, the README's first command: it runs end to end on the simulated GPU within its time
//! bound, prints a progress line a second when stdout is not a terminal, ends with a summary naming its
//! three vGPUs with their configured shares and plausible figures, and leaves nothing behind. Its temporary
//! directory is private to the run (its name holds the demo's pid), here inside a folder of the test's own.

mod common;

use common::tessera::tessera;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a 4-second demo may take, setup and teardown included, on a busy two-core machine.
const BOUND: Duration = Duration::from_secs(40);

/// The summary's row of `name`: the share as configured, then the achieved share in percent.
fn row(summary: &str, name: &str) -> (String, f64) {
    let line = summary.lines().find(|l| l.split_whitespace().next() == Some(name));
    let line = line.unwrap_or_else(|| panic!("no row for {name} in the summary:\n{summary}"));
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    let achieved = words.iter().position(|w| w.contains('.') && w.ends_with('%')).expect("an achieved share");
    let share = words[..achieved].join(" ");
    (share, words[achieved].trim_end_matches('%').parse().expect("a percentage"))
}

#[test]
fn the_demo_shows_three_vgpus_and_cleans_up() {
    let tmp = std::env::temp_dir().join(format!("tessera-demo-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).expect("create the test's temporary folder");
    let start = Instant::now();
    let out = Command::new(tessera())
        .args(["demo", "--seconds", "4"])
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .output()
        .expect("run tessera demo");
    let took = start.elapsed();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tessera demo failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(took < BOUND, "tessera demo --seconds 4 took {took:?}");
    assert!(stdout.contains("simulated NVIDIA H100"), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with('[')).count(), 4, "a line a second:\n{stdout}");
    assert!(!stdout.contains('\x1b'), "no terminal control sequences when stdout is not a terminal");

    let summary = stdout.split_once("Summary over").map(|(_, s)| s).unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    let mut total = 0.0;
    for (name, configured) in [("inference", "50% high"), ("training", "30%"), ("notebook", "20% cap")] {
        let (share, achieved) = row(summary, name);
        assert_eq!(share, configured, "{name}'s configured share:\n{summary}");
        assert!(achieved > 0.0, "{name} got no engine time:\n{summary}");
        total += achieved;
    }
    assert!(total <= 100.5, "shares of one engine sum to at most 100%:\n{summary}");
    assert!(summary.contains("Engine utilization:"), "{summary}");

    let left: Vec<_> =
        std::fs::read_dir(&tmp).expect("read the temporary folder").flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "tessera demo left {left:?} behind");
    let _ = std::fs::remove_dir_all(&tmp);
}
