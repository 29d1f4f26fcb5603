//! Compute-share benchmarks on the simulated engine under saturating load, each measured in one run:
//!
//! - `a`: two vGPUs 30/70;
//! - `b`: four vGPUs 10/20/30/40;
//! - `c`: a share changed live from 30 to 60 (the other from 70 to 40);
//! - `d`: one vGPU idle (30), the others (30, 40) absorb its share;
//! - `e`: a `high` vGPU arrives beside a saturating `normal` one.
//!
//! `cargo run --release -p tessera-benches --bin shares -- a [seconds]` prints the achieved shares over every
//! 10 s window (sliding by 1 s) and engine utilization, and writes `target/bench/shares-<x>.csv`
//! (per-100-ms shares) for `benches/plot.py`.

use std::path::PathBuf;
use std::time::Duration;
use tessera_benches::{Machine, Series, sample, shares_between, write_csv};

/// Kernel length of the saturating loads.
const KERNEL: &str = "500us";
/// Sampling step.
const STEP: Duration = Duration::from_millis(100);

struct Vgpu {
    name: &'static str,
    share: u32,
    busy: bool,
}

fn out_dir() -> PathBuf {
    let dir = tessera_benches::build_dir().join("..").join("bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    dir
}

/// Creates the vGPUs, starts a load in each busy one and samples for `seconds`; `at` may act mid-run.
fn run(tag: &str, vgpus: &[Vgpu], seconds: f64, at: impl FnMut(&Machine, f64)) -> (Series, Vec<&'static str>) {
    let mut m = Machine::new(tag, "h100");
    m.start_daemon();
    for v in vgpus {
        let share = v.share.to_string();
        m.tessera(&["vgpu", "create", v.name, "--device", "0", "--memory", "8GiB", "--share", &share]);
    }
    let mut loads = Vec::new();
    let groups: Vec<Vec<u32>> = vgpus
        .iter()
        .map(|v| {
            if !v.busy {
                return vec![];
            }
            let child = m.load(v.name, KERNEL, seconds + 1.0);
            let pid = child.id();
            loads.push(child);
            vec![pid]
        })
        .collect();
    let state = m.state();
    let mut at = at;
    let series = sample(&state, &groups, STEP, Duration::from_secs_f64(seconds), |t| at(&m, t));
    for mut l in loads {
        let _ = l.kill();
        let _ = l.wait();
    }
    (series, vgpus.iter().map(|v| v.name).collect())
}

/// Prints min/max achieved share per vGPU over every 10 s window sliding by 1 s, after a 1 s warm-up.
fn report_windows(series: &Series, names: &[&str], configured: &[f64]) {
    let per_s = (1.0 / STEP.as_secs_f64()) as usize;
    let (first, last) = (per_s, series.t.len() - 1);
    let mut worst = vec![0.0f64; names.len()];
    let mut busy_min = f64::MAX;
    let mut a = first;
    while a + 10 * per_s <= last {
        let s = shares_between(series, a, a + 10 * per_s);
        for g in 0..names.len() {
            worst[g] = worst[g].max((s[g] - configured[g]).abs());
        }
        busy_min = busy_min.min(s.iter().sum());
        a += per_s;
    }
    let whole = shares_between(series, first, last);
    for g in 0..names.len() {
        println!(
            "{:>6}: configured {:5.1}%  achieved {:6.2}% over the run, worst 10 s window off by {:.2} points",
            names[g], configured[g], whole[g], worst[g]
        );
    }
    println!("engine busy: {:.2}% over the run, lowest 10 s window {:.2}%", whole.iter().sum::<f64>(), busy_min);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("a");
    let seconds: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(25.0);
    let v = |name, share, busy| Vgpu { name, share, busy };
    match which {
        "a" => {
            let (s, names) = run("a", &[v("a30", 30, true), v("b70", 70, true)], seconds, |_, _| {});
            write_csv(&out_dir().join("shares-a.csv"), &names, &s);
            report_windows(&s, &names, &[30.0, 70.0]);
        }
        "b" => {
            let vs = [v("v10", 10, true), v("v20", 20, true), v("v30", 30, true), v("v40", 40, true)];
            let (s, names) = run("b", &vs, seconds, |_, _| {});
            write_csv(&out_dir().join("shares-b.csv"), &names, &s);
            report_windows(&s, &names, &[10.0, 20.0, 30.0, 40.0]);
        }
        "d" => {
            let vs = [v("idle30", 30, false), v("b30", 30, true), v("c40", 40, true)];
            let (s, names) = run("d", &vs, seconds, |_, _| {});
            write_csv(&out_dir().join("shares-d.csv"), &names, &s);
            report_windows(&s, &names, &[0.0, 30.0 / 0.7, 40.0 / 0.7]);
        }
        "c" => {
            let change_at = seconds / 2.0;
            let mut changed = false;
            let (s, names) = run("c", &[v("a", 30, true), v("b", 70, true)], seconds, |m, t| {
                if !changed && t >= change_at {
                    m.tessera(&["vgpu", "set", "b", "--share", "40"]);
                    m.tessera(&["vgpu", "set", "a", "--share", "60"]);
                    changed = true;
                }
            });
            write_csv(&out_dir().join("shares-c.csv"), &names, &s);
            let i = s.t.iter().position(|&t| t >= change_at).expect("change inside the run");
            // Converged: the first 100 ms step after the change from which every later step is within 1 point.
            let steps: Vec<f64> = (i + 1..s.t.len()).map(|k| shares_between(&s, k - 1, k)[0]).collect();
            let settled = (0..steps.len()).find(|&k| steps[k..].iter().all(|x| (x - 60.0).abs() <= 1.0));
            match settled {
                Some(k) => println!("share of a: 30% -> 60% converged within 1 point after {} ms", (k + 1) * 100),
                None => println!("share of a: 30% -> 60% did not converge within 1 point in 100 ms steps"),
            }
            let after = shares_between(&s, i + 10, s.t.len() - 1);
            println!("after the change: a {:.2}%, b {:.2}%", after[0], after[1]);
        }
        other => {
            eprintln!("unknown scenario {other:?}; use a, b, c or d (e: see benches/README)");
            std::process::exit(2);
        }
    }
}
