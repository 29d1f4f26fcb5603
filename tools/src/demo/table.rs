//! The demo's text, as pure functions of its vGPUs and [`Snapshot`]s: the live table (redrawn in a
//! terminal, printed once a second otherwise) and the closing summary.

use super::Tenant;
use super::entitlement::{self, Verdict};
use super::figures::{Snapshot, VgpuFigures};
use crate::grid::{Align, render};
use tessera_ffi::units::{format_size, thousands};

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

/// What each kind of vGPU should get, for the reader of the summary.
fn role(t: &Tenant) -> String {
    match (t.high, t.cap) {
        (true, _) => format!("{} is high priority: while it has work the others wait; its pauses are theirs.", t.name),
        (false, true) => format!("{} is capped: it never gets more than its {}%.", t.name, t.share),
        (false, false) => format!("{} takes what the others leave, beyond its {}%.", t.name, t.share),
    }
}

/// The summary of the run from `start` to `end`: per vGPU the configured share, the time it had demand,
/// the share it was entitled to given the demand of all, the share it achieved, the difference and the
/// verdict; then memory quota and peak use, launches and time waited for tokens; engine utilization, the
/// rule, and what each vGPU's settings mean.
pub fn summary(tenants: &[Tenant], start: &Snapshot, end: &Snapshot) -> String {
    let (demand, policy) = entitlement::between(&start.totals, &end.totals);
    let achieved = end.shares_since(start);
    let elapsed_ns = end.seconds_since(start) * 1e9;
    let rows: Vec<Vec<String>> = tenants
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let waited = end.vgpus[i].wait_ns.saturating_sub(start.vgpus[i].wait_ns) as f64;
            let held = if elapsed_ns > 0.0 { waited / elapsed_ns * 100.0 } else { 0.0 };
            let entitled = entitlement::entitled(policy[i], achieved[i], held);
            let verdict = Verdict::of(achieved[i], entitled, t.cap.then_some(t.share as f64));
            vec![
                t.name.to_string(),
                configured(t),
                format!("{:.0}%", demand[i]),
                format!("{:.1}%", policy[i]),
                format!("{:.1}%", held.min(999.0)),
                format!("{entitled:.1}%"),
                format!("{:.1}%", achieved[i]),
                format!("{:+.1}", achieved[i] - entitled),
                verdict.text(),
            ]
        })
        .collect();
    let header = ["VGPU", "SHARE", "DEMAND", "POLICY", "HELD", "ENTITLED", "ACHIEVED", "DIFF", "VERDICT"];
    let right = Align::Right;
    let align = [Align::Left, Align::Left, right, right, right, right, right, right, Align::Left];
    let measured = match end.engine_busy_ns {
        Some(_) => "engine time per process, from the simulated GPU",
        None => "device time the shim measured",
    };
    let mut out = format!("Summary over {:.1} s (achieved share: {measured}):\n", end.seconds_since(start));
    out += &render(&header, &rows, &align);
    let usage = per_vgpu(tenants, start, end, &achieved, |t, v, _, [launches, waited]| {
        vec![t.name.to_string(), format_size(v.limit), format_size(v.peak), launches, waited]
    });
    let header = ["VGPU", "MEMORY QUOTA", "PEAK USE", "LAUNCHES", "WAITED FOR TOKENS"];
    out += &render(&header, &usage, &[Align::Left, Align::Right, Align::Right, Align::Right, Align::Right]);
    out += &format!("Engine utilization: {}.\n", utilization(end.utilization_since(start), 1));
    out += &format!(
        "DEMAND: time the vGPU had work. POLICY: the daemon's split given who had work, sampled every {} ms\n\
         (no work: nothing; a high vGPU with work: the device; else its share, and spare time to the\n\
         uncapped vGPUs with work). HELD: time its launches waited for tokens. ENTITLED: POLICY, but no\n\
         more than it asked (ACHIEVED + HELD). met: ACHIEVED at most {:.0} points below ENTITLED (capped:\n\
         and at most {:.0} above its share).\n",
        entitlement::SAMPLE.as_millis(),
        entitlement::TOLERANCE,
        entitlement::TOLERANCE
    );
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

    /// Figures after `s` seconds in which the vGPUs got `got` percent of the engine, and were entitled to
    /// 40%, 48% and 12% (inference busy 40% of the time).
    fn snapshot(at: Instant, s: u64, got: [u64; 3]) -> Snapshot {
        let v = |percent: u64, used: u64| VgpuFigures {
            launches: s * 100 * percent,
            wait_ns: s * 10_000_000 * percent,
            device_ns: 0,
            used: used * GIB,
            peak: (used + 1) * GIB,
            limit: 4 * GIB,
            engine_ns: Some(s * 10_000_000 * percent),
        };
        let part = |pct: f64| s as f64 * 1e9 * pct / 100.0;
        Snapshot {
            at: at + Duration::from_secs(s),
            vgpus: vec![v(got[0], 1), v(got[1], 2), v(got[2], 3)],
            engine_busy_ns: Some(s * 1_000_000_000),
            totals: entitlement::Totals {
                sampled_ns: part(100.0),
                demand_ns: vec![part(40.0), part(100.0), part(100.0)],
                entitled_ns: vec![part(40.0), part(48.0), part(12.0)],
            },
        }
    }

    #[test]
    fn the_live_table_and_the_summary_line_up_every_figure() {
        let t0 = Instant::now();
        let got = [40, 45, 15];
        let (start, recent, now) = (snapshot(t0, 0, got), snapshot(t0, 9, got), snapshot(t0, 10, got));
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
        let summary = summary(&tenants(), &start, &now);
        let expected = "\
Summary over 10.0 s (achieved share: engine time per process, from the simulated GPU):
VGPU       SHARE     DEMAND  POLICY   HELD  ENTITLED  ACHIEVED  DIFF  VERDICT
inference  50% high     40%   40.0%  40.0%     40.0%     40.0%  +0.0  met
training   30%         100%   48.0%  45.0%     48.0%     45.0%  -3.0  met
notebook   20% cap     100%   12.0%  15.0%     12.0%     15.0%  +3.0  met
VGPU       MEMORY QUOTA  PEAK USE  LAUNCHES  WAITED FOR TOKENS
inference       4.0 GiB   2.0 GiB    40,000              4.0 s
training        4.0 GiB   3.0 GiB    45,000              4.5 s
notebook        4.0 GiB   4.0 GiB    15,000              1.5 s
Engine utilization: 100.0%.
DEMAND: time the vGPU had work. POLICY: the daemon's split given who had work, sampled every 5 ms
(no work: nothing; a high vGPU with work: the device; else its share, and spare time to the
uncapped vGPUs with work). HELD: time its launches waited for tokens. ENTITLED: POLICY, but no
more than it asked (ACHIEVED + HELD). met: ACHIEVED at most 5 points below ENTITLED (capped:
and at most 5 above its share).
inference is high priority: while it has work the others wait; its pauses are theirs.
training takes what the others leave, beyond its 30%.
notebook is capped: it never gets more than its 20%.
";
        assert_eq!(summary, expected);
    }

    #[test]
    fn the_summary_says_who_missed_and_by_how_much() {
        let t0 = Instant::now();
        let got = [40, 34, 26];
        let summary = summary(&tenants(), &snapshot(t0, 0, got), &snapshot(t0, 10, got));
        let verdict = |name: &str| {
            let line = summary.lines().find(|l| l.starts_with(name)).unwrap();
            line[line.find(['+', '-']).unwrap()..].split_once("  ").unwrap().1.trim().to_string()
        };
        assert_eq!(verdict("inference"), "met");
        assert_eq!(verdict("training"), "missed by 14.0 pts", "{summary}");
        assert_eq!(verdict("notebook"), "over cap by 6.0 pts", "{summary}");
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
