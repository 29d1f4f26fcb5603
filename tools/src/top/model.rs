//! What `tessera top` shows, as plain cells computed from a [`Stats`] poll and top's [`History`]: the
//! device rows, the vGPU rows in the chosen [`Sort`], and the processes of the selected vGPU (or of all).
//! Pure functions, so that the terminal view and `--once` show the same columns, and tests can check them.

use super::history::{History, Rates};
use tessera_client::{DeviceStats, Mode, Priority, Stats, VgpuStats};
use tessera_ffi::units::{binary_scale, thousands};

/// The order of the vGPU rows; `s` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// By name, A to Z.
    #[default]
    Name,
    /// Largest share achieved over the last second first.
    Achieved,
    /// Largest configured share first.
    Share,
    /// Most device memory in use first.
    Memory,
    /// Most launches per second first.
    Launches,
    /// Most time waiting for tokens first.
    Waiting,
}

impl Sort {
    /// The next order in the cycle.
    pub fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::Achieved,
            Sort::Achieved => Sort::Share,
            Sort::Share => Sort::Memory,
            Sort::Memory => Sort::Launches,
            Sort::Launches => Sort::Waiting,
            Sort::Waiting => Sort::Name,
        }
    }

    /// Its name in the header: `sort: achieved`.
    pub fn label(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Achieved => "achieved",
            Sort::Share => "share",
            Sort::Memory => "memory",
            Sort::Launches => "launches/s",
            Sort::Waiting => "waiting",
        }
    }
}

/// A column of a table: its title, width (the widest cell it holds), alignment, and whether it is shown
/// only when the terminal is wider than the 80 columns the view is designed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its title.
    pub title: &'static str,
    /// Its width in cells.
    pub width: u16,
    /// Numbers, right-aligned.
    pub right: bool,
    /// Shown only when there is room.
    pub optional: bool,
}

const fn col(title: &'static str, width: u16, right: bool, optional: bool) -> Column {
    Column { title, width, right, optional }
}

/// The vGPU table's columns; the required ones fit 80 columns with the selection mark.
pub const VGPU_COLUMNS: [Column; 15] = [
    col("NAME", 9, false, false),
    col("DEV", 3, true, true),
    col("SHARE", 7, false, false),
    col("NOW", 4, true, false),
    col("10S", 4, true, false),
    col("TREND", 6, false, false),
    col("TOKENS", 7, true, false),
    col("LNCH/S", 6, true, false),
    col("WAIT", 4, true, false),
    col("MEMORY", 9, true, false),
    col("RESIDENT", 8, true, true),
    col("SWAPPED", 7, true, true),
    col("PRIO", 4, false, false),
    col("STATE", 9, false, false),
    col("PROCS", 5, true, true),
];

/// The device table's columns.
pub const DEVICE_COLUMNS: [Column; 10] = [
    col("DEV", 3, true, false),
    col("DEVICE", 16, false, false),
    col("BUSY", 4, true, false),
    col("10S", 4, true, false),
    col("MEMORY", 9, true, false),
    col("SHARES", 6, true, false),
    col("UTIL", 4, true, false),
    col("POWER", 5, true, false),
    col("TEMP", 4, true, false),
    col("VGPUS", 5, true, false),
];

/// The processes panel's columns (`VGPU` only when it lists every vGPU's processes).
pub const PROCESS_COLUMNS: [Column; 5] = [
    col("VGPU", 9, false, false),
    col("PID", 7, true, false),
    col("COMMAND", 16, false, false),
    col("MODE", 4, false, false),
    col("MEMORY", 6, true, false),
];

/// Sizes in few characters: `512M`, `6.0G`, `80G`.
pub fn short_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    match binary_scale(bytes) {
        (_, 0) => format!("{bytes}B"),
        (value, unit) if value < 9.95 => format!("{value:.1}{}", UNITS[unit]),
        (value, unit) => format!("{value:.0}{}", UNITS[unit]),
    }
}

/// A percentage without decimals, `-` when unknown.
fn pct(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{:.0}%", v.clamp(0.0, 999.0)))
}

/// Tokens (ns of device time, negative: debt) as milliseconds: `1.5ms`, `-12ms`.
fn tokens(ns: i64) -> String {
    let ms = ns as f64 / 1e6;
    if ms.abs() < 9.95 { format!("{ms:.1}ms") } else { format!("{ms:.0}ms") }
}

/// A count per second with thousands separators: `12,345`.
fn per_second(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| thousands(v.max(0.0).round() as u64))
}

/// A sparkline of `values` (percent), one block character each, at most `width` of the latest.
pub fn sparkline(values: &[f64], width: usize) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let start = values.len().saturating_sub(width);
    values[start..].iter().map(|v| BLOCKS[((v.clamp(0.0, 100.0) / 100.0 * 7.0).round() as usize).min(7)]).collect()
}

/// `high`, `norm` or `low`.
fn priority(p: Priority) -> &'static str {
    match p {
        Priority::High => "high",
        Priority::Normal => "norm",
        Priority::Low => "low",
    }
}

/// `suspended`; `capped` when a capped vGPU's launches waited for tokens since the last poll (its cap
/// holds it); `idle` without processes or launches since the last poll; else `running`.
pub fn state(v: &VgpuStats, rates: Option<Rates>) -> &'static str {
    match rates {
        _ if v.suspended => "suspended",
        Some(r) if v.cap && r.waiting_pct > 0.0 => "capped",
        _ if v.processes.is_empty() => "idle",
        Some(r) if r.launches_per_s == 0.0 => "idle",
        _ => "running",
    }
}

/// Whether `v` has soft-mode memory to tell about.
fn soft(v: &VgpuStats) -> bool {
    v.mode == Mode::Soft || v.processes.iter().any(|p| p.soft)
}

/// The cells of vGPU `v`'s row, one per [`VGPU_COLUMNS`] entry.
pub fn vgpu_cells(v: &VgpuStats, history: &History) -> Vec<String> {
    let rates = history.rates(v);
    let share = format!("{}%{}", v.share, if v.cap { " cap" } else { "" });
    let soft_size = |bytes: u64| if soft(v) { short_size(bytes) } else { "-".into() };
    vec![
        v.name.clone(),
        v.device.to_string(),
        share,
        pct(Some(v.achieved.last_1s_pct)),
        pct(Some(v.achieved.last_10s_pct)),
        sparkline(&history.shares(&v.name), VGPU_COLUMNS[5].width as usize),
        tokens(v.tokens_ns),
        per_second(rates.map(|r| r.launches_per_s)),
        pct(rates.map(|r| r.waiting_pct)),
        format!("{}/{}", short_size(v.memory.used), short_size(v.memory.quota)),
        soft_size(v.memory.resident),
        soft_size(v.memory.swapped),
        priority(v.priority).into(),
        state(v, rates).into(),
        v.processes.len().to_string(),
    ]
}

/// An optional figure with its unit, `-` when unknown.
fn optional(value: Option<f64>, unit: &str) -> String {
    value.map_or("-".into(), |v| format!("{v:.0}{unit}"))
}

/// The cells of device `d`'s row, one per [`DEVICE_COLUMNS`] entry.
pub fn device_cells(d: &DeviceStats) -> Vec<String> {
    vec![
        d.device.to_string(),
        if d.name.is_empty() { "-".into() } else { d.name.clone() },
        pct(Some(d.busy.last_1s_pct)),
        pct(Some(d.busy.last_10s_pct)),
        format!("{}/{}", short_size(d.memory_used), short_size(d.memory_total)),
        format!("{}%", d.share_configured),
        pct(d.utilization_pct),
        optional(d.power_watts, "W"),
        optional(d.temperature_c, "C"),
        d.vgpus.len().to_string(),
    ]
}

/// The vGPUs of `stats` in `sort` order (ties by name).
pub fn sorted<'a>(stats: &'a Stats, history: &History, sort: Sort) -> Vec<&'a VgpuStats> {
    let mut vgpus: Vec<&VgpuStats> = stats.vgpus.iter().collect();
    let rate = |v: &VgpuStats, f: fn(Rates) -> f64| history.rates(v).map_or(-1.0, f);
    let key = |v: &VgpuStats| -> f64 {
        match sort {
            Sort::Name => 0.0,
            Sort::Achieved => v.achieved.last_1s_pct,
            Sort::Share => v.share as f64,
            Sort::Memory => v.memory.used as f64,
            Sort::Launches => rate(v, |r| r.launches_per_s),
            Sort::Waiting => rate(v, |r| r.waiting_pct),
        }
    };
    vgpus.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    vgpus
}

/// The processes panel: its title and rows (cells per [`PROCESS_COLUMNS`], without `VGPU` when one vGPU
/// is selected).
pub fn processes(vgpus: &[&VgpuStats], selected: Option<&VgpuStats>) -> (String, Vec<Vec<String>>) {
    let row = |v: &VgpuStats, p: &tessera_client::ProcessStats| {
        let command = if p.command.is_empty() { "?".to_string() } else { p.command.clone() };
        let mode = if p.soft { "soft" } else { "hard" };
        vec![v.name.clone(), p.pid.to_string(), command, mode.into(), short_size(p.used)]
    };
    match selected {
        None => {
            let rows = vgpus.iter().flat_map(|v| v.processes.iter().map(|p| row(v, p))).collect();
            ("PROCESSES of every vGPU (↑/↓ selects one)".into(), rows)
        }
        Some(v) => {
            let mut title = format!(
                "PROCESSES of {}: {} of {} in use",
                v.name,
                short_size(v.memory.used),
                short_size(v.memory.quota)
            );
            if soft(v) {
                title +=
                    &format!(", {} resident, {} swapped", short_size(v.memory.resident), short_size(v.memory.swapped));
            }
            if v.processes.is_empty() {
                title += "; none attached";
            }
            (title, v.processes.iter().map(|p| row(v, p)[1..].to_vec()).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::ProcessStats;

    #[test]
    fn figures_are_short() {
        assert_eq!(
            [0, 512 << 20, 6 << 30, 80 << 30, (15 << 30) / 2].map(short_size),
            ["0B", "512M", "6.0G", "80G", "7.5G"]
        );
        assert_eq!([tokens(1_500_000), tokens(-12_000_000), tokens(0)], ["1.5ms", "-12ms", "0.0ms"]);
        assert_eq!([per_second(Some(12345.4)), per_second(None)], ["12,345", "-"]);
        assert_eq!(sparkline(&[0.0, 50.0, 100.0, 250.0], 3), "▅██");
        assert_eq!([pct(None), pct(Some(33.4))], ["-", "33%"]);
    }

    #[test]
    fn sorts_cycle_back_to_name() {
        let mut s = Sort::Name;
        let mut labels = Vec::new();
        for _ in 0..6 {
            labels.push(s.label());
            s = s.next();
        }
        assert_eq!(s, Sort::Name);
        assert_eq!(labels, ["name", "achieved", "share", "memory", "launches/s", "waiting"]);
    }

    #[test]
    fn states_say_what_holds_a_vgpu() {
        let attached = VgpuStats { processes: vec![ProcessStats::default()], ..VgpuStats::default() };
        let busy = Some(Rates { launches_per_s: 100.0, waiting_pct: 5.0 });
        assert_eq!(state(&attached, busy), "running");
        assert_eq!(state(&VgpuStats { cap: true, ..attached.clone() }, busy), "capped");
        assert_eq!(state(&VgpuStats { suspended: true, ..attached.clone() }, busy), "suspended");
        assert_eq!(state(&VgpuStats::default(), None), "idle");
        assert_eq!(state(&attached, Some(Rates::default())), "idle");
        assert_eq!(state(&attached, None), "running", "attached, rates not known yet");
    }
}
