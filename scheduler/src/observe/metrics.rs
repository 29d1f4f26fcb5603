//! The figures of a `stats` snapshot as Prometheus metrics (the table in docs/api.md, "Prometheus
//! metrics"), encoded by the `prometheus-client` crate.
//!
//! The crate writes the OpenMetrics text format, which Prometheus asks for first. To clients that do not
//! ask for it (`curl`, `promtool check metrics`, older scrapers) the same families are served in the
//! classic text format (0.0.4): there a counter's `# HELP`/`# TYPE` lines name its samples (`…_total`)
//! and there is no `# EOF` line; the samples themselves are the same.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tessera_client::{DeviceStats, Priority, Stats, VgpuStats};

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the classic Prometheus text format.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One figure of a series.
#[derive(Debug, Clone, Copy)]
enum Number {
    /// A float (ratios, seconds, watts).
    F(f64),
    /// A count or a size.
    U(u64),
}

/// A label a family adds to the item's own (e.g. `window="1s"`), if any.
type Extra = Option<(&'static str, &'static str)>;

/// A family of series of items `T` (devices or vGPUs): its name (after `tessera_`), help, type, and the
/// series each item gives (none: the figure is unknown).
struct Family<T> {
    name: &'static str,
    help: &'static str,
    counter: bool,
    series: fn(&T) -> Vec<(Extra, Number)>,
}

/// A family of one series per item.
const fn one<T>(
    name: &'static str,
    help: &'static str,
    counter: bool,
    series: fn(&T) -> Vec<(Extra, Number)>,
) -> Family<T> {
    Family { name, help, counter, series }
}

/// The value of a series without an extra label.
fn just(n: Number) -> Vec<(Extra, Number)> {
    vec![(None, n)]
}

/// A ratio from percent.
fn ratio(pct: f64) -> Number {
    Number::F(pct / 100.0)
}

/// Nanoseconds as seconds.
fn seconds(ns: f64) -> Number {
    Number::F(ns / 1e9)
}

/// Every priority, for the one-series-per-state `tessera_vgpu_priority`.
const PRIORITIES: [(Priority, &str); 3] =
    [(Priority::Low, "low"), (Priority::Normal, "normal"), (Priority::High, "high")];

/// The devices' families (labels `device`, `uuid`).
const DEVICE_FAMILIES: &[Family<DeviceStats>] = &[
    one(
        "device_utilization_ratio",
        "Share of the last sample period a kernel ran on the device, as the driver (NVML) reports it",
        false,
        |d| d.utilization_pct.map(ratio).map(just).unwrap_or_default(),
    ),
    one(
        "device_busy_ratio",
        "Share of the device's time some vGPU's kernel ran, as Tessera measures it, over the last 1 s or 10 s",
        false,
        |d| {
            vec![
                (Some(("window", "1s")), ratio(d.busy.last_1s_pct)),
                (Some(("window", "10s")), ratio(d.busy.last_10s_pct)),
            ]
        },
    ),
    one("device_memory_used_bytes", "Device memory the vGPUs' processes use", false, |d| {
        just(Number::U(d.memory_used))
    }),
    one("device_memory_total_bytes", "The device's memory", false, |d| just(Number::U(d.memory_total))),
    one("device_power_watts", "Board power draw, as the driver reports it", false, |d| {
        d.power_watts.map(Number::F).map(just).unwrap_or_default()
    }),
    one("device_temperature_celsius", "GPU temperature, as the driver reports it", false, |d| {
        d.temperature_c.map(Number::F).map(just).unwrap_or_default()
    }),
    one("device_share_configured_ratio", "Sum of the device's vGPUs' configured shares", false, |d| {
        just(ratio(f64::from(d.share_configured)))
    }),
];

/// The vGPUs' families (labels `vgpu`, `device`).
const VGPU_FAMILIES: &[Family<VgpuStats>] = &[
    one("vgpu_share_ratio", "The vGPU's configured share of its device's time", false, |v| {
        just(ratio(f64::from(v.share)))
    }),
    one(
        "vgpu_achieved_ratio",
        "Share of its device's time the vGPU's kernels took, over the last 1 s or 10 s (Tessera's measure)",
        false,
        |v| {
            let a = v.achieved;
            vec![(Some(("window", "1s")), ratio(a.last_1s_pct)), (Some(("window", "10s")), ratio(a.last_10s_pct))]
        },
    ),
    one(
        "vgpu_device_seconds",
        "Device time the daemon charged the vGPU's kernels (its own count, which no tenant can write; from 0 when \
         the daemon starts)",
        true,
        |v| just(seconds(v.charged_ns as f64)),
    ),
    one("vgpu_launches", "Kernel launches of the vGPU's processes", true, |v| just(Number::U(v.launches))),
    one("vgpu_wait_seconds", "Time the vGPU's launches waited for tokens", true, |v| just(seconds(v.wait_ns as f64))),
    one("vgpu_tokens_seconds", "Device time in the vGPU's token bucket (negative: debt)", false, |v| {
        just(seconds(v.tokens_ns as f64))
    }),
    one("vgpu_memory_used_bytes", "Device memory the vGPU's processes use", false, |v| just(Number::U(v.memory.used))),
    one("vgpu_memory_quota_bytes", "The vGPU's memory quota", false, |v| just(Number::U(v.memory.quota))),
    one("vgpu_memory_resident_bytes", "Soft mode: device memory holding the vGPU's live pages", false, |v| {
        just(Number::U(v.memory.resident))
    }),
    one("vgpu_memory_swapped_bytes", "Soft mode: the vGPU's live pages in host memory", false, |v| {
        just(Number::U(v.memory.swapped))
    }),
    one("vgpu_memory_pooled_bytes", "Soft mode: device memory the vGPU holds but no live page uses", false, |v| {
        just(Number::U(v.memory.pooled))
    }),
    one("vgpu_processes", "Processes attached to the vGPU", false, |v| just(Number::U(v.processes.len() as u64))),
    one("vgpu_suspended", "1 while the vGPU is suspended (by a request or by the audit), else 0", false, |v| {
        just(Number::U(u64::from(v.suspended)))
    }),
    one("vgpu_priority", "1 for the vGPU's priority (label priority), 0 for the others", false, |v| {
        PRIORITIES.iter().map(|&(p, name)| (Some(("priority", name)), Number::U(u64::from(p == v.priority)))).collect()
    }),
];

/// Writes one series' value.
fn value(n: Number, counter: bool, into: MetricEncoder) -> Result<(), std::fmt::Error> {
    match (n, counter) {
        (Number::F(f), false) => ConstGauge::new(f).encode(into),
        (Number::U(u), false) => ConstGauge::new(u).encode(into),
        (Number::F(f), true) => ConstCounter::new(f).encode(into),
        (Number::U(u), true) => ConstCounter::new(u).encode(into),
    }
}

/// Writes `families`, one series per item of `items` (with its two labels) and extra label.
fn write<T>(
    encoder: &mut DescriptorEncoder,
    families: &[Family<T>],
    items: &[(&T, [(&'static str, &str); 2])],
) -> Result<(), std::fmt::Error> {
    for f in families {
        let kind = if f.counter { MetricType::Counter } else { MetricType::Gauge };
        let name = format!("tessera_{}", f.name);
        let mut metric = encoder.encode_descriptor(&name, f.help, None, kind)?;
        for (item, [a, b]) in items {
            for (extra, n) in (f.series)(item) {
                match extra {
                    None => value(n, f.counter, metric.encode_family(&[*a, *b])?)?,
                    Some(e) => value(n, f.counter, metric.encode_family(&[*a, *b, e])?)?,
                }
            }
        }
    }
    Ok(())
}

/// One `stats` snapshot, encoded on a scrape.
#[derive(Debug)]
struct Snapshot(Stats);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ordinals: Vec<String> = self.0.devices.iter().map(|d| d.device.to_string()).collect();
        let devices: Vec<_> = self
            .0
            .devices
            .iter()
            .zip(&ordinals)
            .map(|(d, o)| (d, [("device", o.as_str()), ("uuid", d.uuid.as_deref().unwrap_or_default())]))
            .collect();
        write(&mut encoder, DEVICE_FAMILIES, &devices)?;
        let ordinals: Vec<String> = self.0.vgpus.iter().map(|v| v.device.to_string()).collect();
        let vgpus: Vec<_> = self
            .0
            .vgpus
            .iter()
            .zip(&ordinals)
            .map(|(v, o)| (v, [("vgpu", v.name.as_str()), ("device", o.as_str())]))
            .collect();
        write(&mut encoder, VGPU_FAMILIES, &vgpus)
    }
}

/// `stats` as metrics: in the OpenMetrics text format when `openmetrics`, else in the classic one.
pub fn render(stats: Stats, openmetrics: bool) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(stats)));
    let mut text = String::with_capacity(96 * 1024);
    // Writing into a String cannot fail; an error could only come from an encoder.
    if encode(&mut text, &registry).is_err() {
        return String::new();
    }
    if openmetrics { text } else { classic(&text) }
}

/// The OpenMetrics `text` in the classic format: counters' metadata lines name their `_total` samples,
/// and the `# EOF` line goes.
fn classic(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = line.strip_prefix("# HELP tessera_").or_else(|| line.strip_prefix("# TYPE tessera_"));
        let renamed = meta.and_then(|rest| {
            let (name, tail) = rest.split_once(' ')?;
            VGPU_FAMILIES.iter().any(|f| f.counter && f.name == name).then_some((name, tail))
        });
        match renamed {
            Some((name, tail)) => {
                // "# HELP tessera_" or "# TYPE tessera_": the prefix the name followed.
                out.push_str(&line[..15]);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Whether a request's `Accept` header asks for the OpenMetrics format.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::{Achieved, MemoryStats, ProcessStats};

    fn sample() -> Stats {
        let v = VgpuStats {
            name: "a".into(),
            device: 0,
            share: 30,
            priority: Priority::High,
            suspended: true,
            achieved: Achieved { last_1s_pct: 25.0, last_10s_pct: 29.0 },
            tokens_ns: -1_500_000_000,
            launches: 42,
            device_ns: 2_400_000_000,
            charged_ns: 2_500_000_000,
            wait_ns: 500_000_000,
            memory: MemoryStats {
                quota: 1 << 30,
                used: 1 << 20,
                resident: 7,
                swapped: 8,
                pooled: 9,
                ..Default::default()
            },
            processes: vec![ProcessStats { pid: 1, ..Default::default() }; 2],
            ..VgpuStats::default()
        };
        let d = DeviceStats {
            device: 0,
            uuid: Some("GPU-1".into()),
            utilization_pct: Some(50.0),
            power_watts: Some(123.5),
            temperature_c: None,
            memory_total: 1 << 34,
            memory_used: 1 << 20,
            share_configured: 30,
            busy: Achieved { last_1s_pct: 60.0, last_10s_pct: 55.0 },
            ..DeviceStats::default()
        };
        Stats { at_ns: 1, vgpus: vec![v], devices: vec![d] }
    }

    #[test]
    fn every_figure_is_a_series_in_base_units() {
        let text = render(sample(), false);
        for line in [
            r#"tessera_vgpu_device_seconds_total{vgpu="a",device="0"} 2.5"#,
            r#"tessera_vgpu_launches_total{vgpu="a",device="0"} 42"#,
            r#"tessera_vgpu_wait_seconds_total{vgpu="a",device="0"} 0.5"#,
            r#"tessera_vgpu_tokens_seconds{vgpu="a",device="0"} -1.5"#,
            r#"tessera_vgpu_share_ratio{vgpu="a",device="0"} 0.3"#,
            r#"tessera_vgpu_achieved_ratio{vgpu="a",device="0",window="10s"} 0.29"#,
            r#"tessera_vgpu_memory_quota_bytes{vgpu="a",device="0"} 1073741824"#,
            r#"tessera_vgpu_memory_pooled_bytes{vgpu="a",device="0"} 9"#,
            r#"tessera_vgpu_processes{vgpu="a",device="0"} 2"#,
            r#"tessera_vgpu_suspended{vgpu="a",device="0"} 1"#,
            r#"tessera_vgpu_priority{vgpu="a",device="0",priority="high"} 1"#,
            r#"tessera_vgpu_priority{vgpu="a",device="0",priority="low"} 0"#,
            r#"tessera_device_utilization_ratio{device="0",uuid="GPU-1"} 0.5"#,
            r#"tessera_device_busy_ratio{device="0",uuid="GPU-1",window="1s"} 0.6"#,
            r#"tessera_device_power_watts{device="0",uuid="GPU-1"} 123.5"#,
            r#"tessera_device_memory_total_bytes{device="0",uuid="GPU-1"} 17179869184"#,
            "# TYPE tessera_vgpu_launches_total counter",
            "# HELP tessera_vgpu_device_seconds_total Device time",
            "# TYPE tessera_vgpu_tokens_seconds gauge",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("temperature_celsius{"), "an unknown figure is no series:\n{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }

    #[test]
    fn openmetrics_keeps_the_crates_metadata_and_ends_with_eof() {
        let text = render(sample(), true);
        assert!(text.contains("# TYPE tessera_vgpu_launches counter\n"), "{text}");
        assert!(text.contains(r#"tessera_vgpu_launches_total{vgpu="a",device="0"} 42"#), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn only_an_accept_header_naming_openmetrics_gets_it() {
        assert!(wants_openmetrics(Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5")));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
    }
}
