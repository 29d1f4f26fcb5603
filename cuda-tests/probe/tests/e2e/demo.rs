//! `tessera demo`, the README's first command: it runs end to end on the simulated GPU within its time
//! bound, prints its live table once a second when stdout is not a terminal, ends with a summary naming
//! its three vGPUs with their configured shares, what each was entitled to and achieved, and a verdict
//! (every one `met` on a quiet run), and leaves nothing behind. Its temporary
//! directory is private to the run (its name holds the demo's pid), here inside a folder of the test's own.

use crate::common;

use common::tessera::tessera;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a 4-second demo may take, setup and teardown included, on a busy two-core machine.
const BOUND: Duration = Duration::from_secs(40);

/// The words of the first line of `text` whose first word is `first`.
fn words<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(first));
    line.unwrap_or_else(|| panic!("no line starting with {first}:\n{text}")).split_whitespace().collect()
}

/// A percentage cell (`41.2%`) as a number.
fn percent(cell: &str) -> f64 {
    cell.trim_end_matches('%').parse().unwrap_or_else(|e| panic!("{cell:?} is not a percentage: {e}"))
}

#[test]
fn the_demo_shows_three_vgpus_and_cleans_up() {
    // The verdicts are measured shares: one measuring test at a time.
    let _turn = common::timing_turn();
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
    // Piped, the live table is printed once a second, with its columns.
    let tables: Vec<&str> = stdout.split("\n\n").filter(|t| t.contains(" s of 4 s")).collect();
    assert_eq!(tables.len(), 4, "a table a second:\n{stdout}");
    for table in &tables {
        assert_eq!(
            words(table, "VGPU"),
            ["VGPU", "SHARE", "NOW", "MEMORY", "USED", "/", "QUOTA", "LAUNCHES", "WAITED"],
            "{table}"
        );
        for name in ["inference", "training", "notebook"] {
            assert!(words(table, name).len() >= 9, "{name}'s row:\n{table}");
        }
    }
    assert!(!stdout.contains('\x1b'), "no terminal control sequences when stdout is not a terminal");

    let summary = stdout.split_once("Summary over").map(|(_, s)| s).unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    eprintln!("Summary over{summary}");
    assert_eq!(
        words(summary, "VGPU"),
        ["VGPU", "SHARE", "DEMAND", "POLICY", "HELD", "ENTITLED", "ACHIEVED", "DIFF", "VERDICT"],
        "{summary}"
    );
    let mut total = 0.0;
    for (name, configured) in [("inference", "50% high"), ("training", "30%"), ("notebook", "20% cap")] {
        let row = words(summary, name);
        let at = 1 + configured.split_whitespace().count();
        assert_eq!(row[1..at].join(" "), configured, "{name}'s configured share:\n{summary}");
        let [demand, policy, held, entitled, achieved] = [0, 1, 2, 3, 4].map(|i| percent(row[at + i]));
        let diff: f64 = row[at + 5].parse().expect("a difference");
        assert!((0.0..=100.5).contains(&demand) && held >= 0.0, "{name}:\n{summary}");
        assert!(achieved > 0.0, "{name} got no engine time:\n{summary}");
        assert!(entitled <= policy + 0.1 && entitled <= achieved + held + 0.15, "{name}'s entitlement:\n{summary}");
        assert!((achieved - entitled - diff).abs() < 0.15, "{name}'s difference:\n{summary}");
        // A quiet run: each got what it was entitled to, within the stated tolerance.
        assert_eq!(row[at + 6..].join(" "), "met", "{name}:\n{summary}");
        total += achieved;
    }
    assert!(total <= 100.5, "shares of one engine sum to at most 100%:\n{summary}");
    assert!(summary.contains("Engine utilization:") && summary.contains("met: ACHIEVED at most 5 points"), "{summary}");

    let left: Vec<_> =
        std::fs::read_dir(&tmp).expect("read the temporary folder").flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "tessera demo left {left:?} behind");
    let _ = std::fs::remove_dir_all(&tmp);
}
