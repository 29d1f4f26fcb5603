//! The demo's text, as pure functions of its vGPUs and [`Snapshot`]s: the live table (redrawn in a
//! terminal), the line a second printed instead when stdout is not a terminal, and the closing summary.

use super::Tenant;
use super::figures::{Snapshot, VgpuFigures};
use crate::grid::{Align, render};
use tessera_ffi::units::format_size;

/// Width of the share bars of the live table.
const BAR: usize = 10;

/// A vGPU's configured share and its qualifiers: `50% high`, `20% cap`, `30%`.
pub fn configured(t: &Tenant) -> String {
    let mut s = format!("{}%", t.share);
    if t.high {
        s += " high";
    }
    if t.cap {
        s += " cap";
    }
    s
}

/// `n` with thousands separators: `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds as seconds with one decimal: `12.3 s`.
fn seconds(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

/// A bar of [`BAR`] cells, filled in proportion to `percent`.
fn bar(percent: f64) -> String {
    let filled = ((percent / 100.0 * BAR as f64).round() as usize).min(BAR);
    "█".repeat(filled) + &"░".repeat(BAR - filled)
}

/// The engine's utilization, or `n/a` on a real GPU.
fn utilization(value: Option<f64>, decimals: usize) -> String {
    value.map_or("n/a".into(), |u| format!("{u:.decimals$}%"))
}

/// One row per vGPU from `row`, given the tenant, its figures at `now`, its share (of `shares`) and its
/// launches and time waited for tokens since `start`, formatted.
fn per_vgpu(
    tenants: &[Tenant],
    start: &Snapshot,
    now: &Snapshot,
    shares: &[f64],
    row: impl Fn(&Tenant, &VgpuFigures, f64, [String; 2]) -> Vec<String>,
) -> Vec<Vec<String>> {
    let figures = now.vgpus.iter().zip(&start.vgpus).zip(shares);
    tenants
        .iter()
        .zip(figures)
        .map(|(t, ((v, first), &share))| {
            let since = [
                thousands(v.launches.saturating_sub(first.launches)),
                seconds(v.wait_ns.saturating_sub(first.wait_ns)),
            ];
            row(t, v, share, since)
        })
        .collect()
}

/// The live table: elapsed time and engine utilization, then per vGPU its configured share, the share it
/// achieved over the last second (since `recent`), memory used and quota, and launches and time waited
/// for tokens since `start`.
pub fn live(tenants: &[Tenant], start: &Snapshot, recent: &Snapshot, now: &Snapshot, total_seconds: u64) -> String {
    let rows = per_vgpu(tenants, start, now, &now.shares_since(recent), |t, v, share, [launches, waited]| {
        vec![
            t.name.to_string(),
            configured(t),
            format!("{share:.0}%"),
            bar(share),
            format!("{} / {}", format_size(v.used), format_size(v.limit)),
            launches,
            waited,
        ]
    });
    let header = ["VGPU", "SHARE", "NOW", "", "MEMORY USED / QUOTA", "LAUNCHES", "WAITED"];
    let align = [Align::Left, Align::Left, Align::Right, Align::Left, Align::Left, Align::Right, Align::Right];
    format!(
        "{:5.1} s of {total_seconds} s    engine busy {}\n{}",
        now.seconds_since(start),
        utilization(now.utilization_since(recent), 0),
        render(&header, &rows, &align)
    )
}

/// One line for a log: elapsed seconds, each vGPU's share over the last second, engine utilization.
pub fn progress_line(tenants: &[Tenant], start: &Snapshot, recent: &Snapshot, now: &Snapshot) -> String {
    let shares: Vec<String> =
        tenants.iter().zip(now.shares_since(recent)).map(|(t, s)| format!("{} {s:.0}%", t.name)).collect();
    format!(
        "[{:4.1} s] {}  engine {}",
        now.seconds_since(start),
        shares.join("  "),
        utilization(now.utilization_since(recent), 0)
    )
}

/// What each kind of vGPU should get, for the reader of the summary.
fn role(t: &Tenant) -> String {
    match (t.high, t.cap) {
        (true, _) => format!("{} is high priority: while it has work the others wait; its pauses are theirs.", t.name),
        (false, true) => format!("{} is capped: it never gets more than its {}%.", t.name, t.share),
        (false, false) => format!("{} takes what the others leave, beyond its {}%.", t.name, t.share),
    }
}

/// The summary of the run from `start` to `end`: per vGPU the configured and achieved share, memory quota
/// and peak use, launches and time waited for tokens; then engine utilization and what each vGPU's
/// settings mean.
pub fn summary(tenants: &[Tenant], start: &Snapshot, end: &Snapshot) -> String {
    let rows = per_vgpu(tenants, start, end, &end.shares_since(start), |t, v, share, [launches, waited]| {
        vec![
            t.name.to_string(),
            configured(t),
            format!("{share:.1}%"),
            format_size(v.limit),
            format_size(v.peak),
            launches,
            waited,
        ]
    });
    let header = ["VGPU", "SHARE", "ACHIEVED", "MEMORY QUOTA", "PEAK USE", "LAUNCHES", "WAITED FOR TOKENS"];
    let align = [Align::Left, Align::Left, Align::Right, Align::Right, Align::Right, Align::Right, Align::Right];
    let measured = match end.engine_busy_ns {
        Some(_) => "engine time per process, from the simulated GPU",
        None => "device time the shim measured",
    };
    let mut out = format!("Summary over {:.1} s (achieved share: {measured}):\n", end.seconds_since(start));
    out += &render(&header, &rows, &align);
    out += &format!("Engine utilization: {}.\n", utilization(end.utilization_since(start), 1));
    for t in tenants {
        out += &role(t);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const GIB: u64 = 1 << 30;

    fn tenants() -> Vec<Tenant> {
        let t = |name, share, high, cap| Tenant { name, share, quota: 4 * GIB, high, cap, load: &[], work: "" };
        vec![t("inference", 50, true, false), t("training", 30, false, false), t("notebook", 20, false, true)]
    }

    /// Figures after `s` seconds in which the vGPUs got 40%, 45% and 15% of the engine.
    fn snapshot(at: Instant, s: u64) -> Snapshot {
        let v = |percent: u64, used: u64| VgpuFigures {
            launches: s * 100 * percent,
            wait_ns: s * 10_000_000 * percent,
            device_ns: 0,
            used: used * GIB,
            peak: (used + 1) * GIB,
            limit: 4 * GIB,
            engine_ns: Some(s * 10_000_000 * percent),
        };
        Snapshot {
            at: at + Duration::from_secs(s),
            vgpus: vec![v(40, 1), v(45, 2), v(15, 3)],
            engine_busy_ns: Some(s * 1_000_000_000),
        }
    }

    #[test]
    fn the_live_table_and_the_summary_line_up_every_figure() {
        let t0 = Instant::now();
        let (start, recent, now) = (snapshot(t0, 0), snapshot(t0, 9), snapshot(t0, 10));
        let live = live(&tenants(), &start, &recent, &now, 20);
        let expected = [
            " 10.0 s of 20 s    engine busy 100%",
            "VGPU       SHARE     NOW              MEMORY USED / QUOTA  LAUNCHES  WAITED",
            "inference  50% high  40%  ████░░░░░░  1.0 GiB / 4.0 GiB      40,000   4.0 s",
            "training   30%       45%  █████░░░░░  2.0 GiB / 4.0 GiB      45,000   4.5 s",
            "notebook   20% cap   15%  ██░░░░░░░░  3.0 GiB / 4.0 GiB      15,000   1.5 s",
        ];
        assert_eq!(live, expected.join("\n") + "\n");
        assert!(live.lines().all(|l| l.chars().count() < 80), "fits a terminal");
        assert_eq!(
            progress_line(&tenants(), &start, &recent, &now),
            "[10.0 s] inference 40%  training 45%  notebook 15%  engine 100%"
        );
        let summary = summary(&tenants(), &start, &now);
        let expected = "\
Summary over 10.0 s (achieved share: engine time per process, from the simulated GPU):
VGPU       SHARE     ACHIEVED  MEMORY QUOTA  PEAK USE  LAUNCHES  WAITED FOR TOKENS
inference  50% high     40.0%       4.0 GiB   2.0 GiB    40,000              4.0 s
training   30%          45.0%       4.0 GiB   3.0 GiB    45,000              4.5 s
notebook   20% cap      15.0%       4.0 GiB   4.0 GiB    15,000              1.5 s
Engine utilization: 100.0%.
inference is high priority: while it has work the others wait; its pauses are theirs.
training takes what the others leave, beyond its 30%.
notebook is capped: it never gets more than its 20%.
";
        assert_eq!(summary, expected);
    }

    #[test]
    fn small_pieces() {
        assert_eq!(
            (thousands(0), thousands(999), thousands(1_000), thousands(1_234_567)),
            ("0".into(), "999".into(), "1,000".into(), "1,234,567".into())
        );
        assert_eq!((bar(0.0), bar(100.0), bar(250.0)), ("░".repeat(10), "█".repeat(10), "█".repeat(10)));
        assert_eq!(utilization(None, 1), "n/a");
    }
}
