//! The figures of a `stats` snapshot as Prometheus metrics (the table in README.md, "Prometheus
//! metrics"), encoded by the `prometheus-client` crate.
//!
//! The crate writes the OpenMetrics text format, which Prometheus asks for first. To clients that do not
//! ask for it (`curl`, `promtool check metrics`, older scrapers) the same families are served in the
//! classic text format (0.0.4): there a counter's `# HELP`/`# TYPE` lines name its samples (`…_total`)
//! and there is no `# EOF` line; the samples themselves are the same.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use tessera_client::{DeviceStats, Priority, Stats, VgpuStats};

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of the classic Prometheus text format.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Labels of one series.
type Labels = Vec<(&'static str, String)>;
/// A family of floating-point gauges.
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// Every priority, for the one-series-per-state `tessera_vgpu_priority`.
const PRIORITIES: [Priority; 3] = [Priority::Low, Priority::Normal, Priority::High];

/// Families being filled, registered in `registry`.
struct Families {
    registry: Registry,
    /// Names (without the prefix) of the counters, whose metadata the classic format names differently.
    counters: Vec<&'static str>,
}

impl Families {
    fn new() -> Families {
        Families { registry: Registry::with_prefix("tessera"), counters: Vec::new() }
    }

    /// A gauge family `tessera_NAME`.
    fn gauge(&mut self, name: &'static str, help: &str) -> Gauges {
        let family = Gauges::default();
        self.registry.register(name, help, family.clone());
        family
    }

    /// A counter family whose samples are `tessera_NAME_total`.
    fn counter<N, A>(&mut self, name: &'static str, help: &str) -> Family<Labels, Counter<N, A>>
    where
        Counter<N, A>: prometheus_client::encoding::EncodeMetric + Default + std::fmt::Debug + Send + Sync + 'static,
    {
        let family = Family::<Labels, Counter<N, A>>::default();
        self.registry.register(name, help, family.clone());
        self.counters.push(name);
        family
    }
}

fn device_labels(d: &DeviceStats) -> Labels {
    vec![("device", d.device.to_string()), ("uuid", d.uuid.clone().unwrap_or_default())]
}

fn vgpu_labels(v: &VgpuStats) -> Labels {
    vec![("vgpu", v.name.clone()), ("device", v.device.to_string())]
}

/// Sets the gauge of `labels` in `family` to `value`, if there is one (an unknown figure is no series).
fn set(family: &Gauges, labels: &Labels, value: Option<f64>) {
    if let Some(v) = value {
        family.get_or_create(labels).set(v);
    }
}

/// Nanoseconds as seconds.
fn seconds(ns: f64) -> f64 {
    ns / 1e9
}

/// The devices' families.
fn devices(f: &mut Families, devices: &[DeviceStats]) {
    let utilization = f.gauge(
        "device_utilization_ratio",
        "Share of the last sample period a kernel ran on the device, as the driver (NVML) reports it",
    );
    let busy = f.gauge(
        "device_busy_ratio",
        "Share of the device's time some vGPU's kernel ran, as Tessera measures it, over the last 1 s or 10 s",
    );
    let used = f.gauge("device_memory_used_bytes", "Device memory the vGPUs' processes use");
    let total = f.gauge("device_memory_total_bytes", "The device's memory");
    let power = f.gauge("device_power_watts", "Board power draw, as the driver reports it");
    let temperature = f.gauge("device_temperature_celsius", "GPU temperature, as the driver reports it");
    let share = f.gauge("device_share_configured_ratio", "Sum of the device's vGPUs' configured shares");
    for d in devices {
        let l = device_labels(d);
        set(&utilization, &l, d.utilization_pct.map(|p| p / 100.0));
        for (window, pct) in [("1s", d.busy.last_1s_pct), ("10s", d.busy.last_10s_pct)] {
            let mut w = l.clone();
            w.push(("window", window.into()));
            set(&busy, &w, Some(pct / 100.0));
        }
        set(&used, &l, Some(d.memory_used as f64));
        set(&total, &l, Some(d.memory_total as f64));
        set(&power, &l, d.power_watts);
        set(&temperature, &l, d.temperature_c);
        set(&share, &l, Some(f64::from(d.share_configured) / 100.0));
    }
}

/// The vGPUs' families.
fn vgpus(f: &mut Families, vgpus: &[VgpuStats]) {
    let share = f.gauge("vgpu_share_ratio", "The vGPU's configured share of its device's time");
    let achieved = f.gauge(
        "vgpu_achieved_ratio",
        "Share of its device's time the vGPU's kernels took, over the last 1 s or 10 s (Tessera's measure)",
    );
    let device_time = f.counter::<f64, AtomicU64>(
        "vgpu_device_seconds",
        "Device time the vGPU's kernels took, as its processes count it",
    );
    let launches = f.counter::<u64, AtomicU64>("vgpu_launches", "Kernel launches of the vGPU's processes");
    let waited = f.counter::<f64, AtomicU64>("vgpu_wait_seconds", "Time the vGPU's launches waited for tokens");
    let tokens = f.gauge("vgpu_tokens_seconds", "Device time in the vGPU's token bucket (negative: debt)");
    let memory = [
        (f.gauge("vgpu_memory_used_bytes", "Device memory the vGPU's processes use"), 0),
        (f.gauge("vgpu_memory_quota_bytes", "The vGPU's memory quota"), 1),
        (f.gauge("vgpu_memory_resident_bytes", "Soft mode: device memory holding the vGPU's live pages"), 2),
        (f.gauge("vgpu_memory_swapped_bytes", "Soft mode: the vGPU's live pages in host memory"), 3),
        (f.gauge("vgpu_memory_pooled_bytes", "Soft mode: device memory the vGPU holds but no live page uses"), 4),
    ];
    let processes = f.gauge("vgpu_processes", "Processes attached to the vGPU");
    let suspended = f.gauge("vgpu_suspended", "1 while the vGPU is suspended (by a request or by the audit), else 0");
    let priority = f.gauge("vgpu_priority", "1 for the vGPU's priority (label priority), 0 for the others");
    for v in vgpus {
        let l = vgpu_labels(v);
        set(&share, &l, Some(f64::from(v.share) / 100.0));
        for (window, pct) in [("1s", v.achieved.last_1s_pct), ("10s", v.achieved.last_10s_pct)] {
            let mut w = l.clone();
            w.push(("window", window.into()));
            set(&achieved, &w, Some(pct / 100.0));
        }
        device_time.get_or_create(&l).inc_by(seconds(v.device_ns as f64));
        launches.get_or_create(&l).inc_by(v.launches);
        waited.get_or_create(&l).inc_by(seconds(v.wait_ns as f64));
        set(&tokens, &l, Some(seconds(v.tokens_ns as f64)));
        let m = &v.memory;
        let bytes = [m.used, m.quota, m.resident, m.swapped, m.pooled];
        for (family, k) in &memory {
            set(family, &l, Some(bytes[*k] as f64));
        }
        set(&processes, &l, Some(v.processes.len() as f64));
        set(&suspended, &l, Some(f64::from(u8::from(v.suspended))));
        for p in PRIORITIES {
            let mut s = l.clone();
            s.push(("priority", p.name().into()));
            set(&priority, &s, Some(f64::from(u8::from(p == v.priority))));
        }
    }
}

/// `stats` as metrics: in the OpenMetrics text format when `openmetrics`, else in the classic one.
pub fn render(stats: &Stats, openmetrics: bool) -> String {
    let mut f = Families::new();
    devices(&mut f, &stats.devices);
    vgpus(&mut f, &stats.vgpus);
    let mut text = String::with_capacity(64 * 1024);
    // Writing into a String cannot fail; an error would only come from a metric's own encoder.
    if encode(&mut text, &f.registry).is_err() {
        return String::new();
    }
    if openmetrics { text } else { classic(&text, &f.counters) }
}

/// The OpenMetrics `text` in the classic format: counters' metadata lines name their `_total` samples,
/// and the `# EOF` line goes.
fn classic(text: &str, counters: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        let meta = line.strip_prefix("# HELP ").map(|r| ("# HELP ", r));
        let meta = meta.or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match meta {
            Some((kind, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let counter = name.strip_prefix("tessera_").is_some_and(|n| counters.contains(&n));
                let suffix = if counter { "_total" } else { "" };
                out.push_str(&format!("{kind}{name}{suffix} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
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
            device_ns: 2_500_000_000,
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
        let text = render(&sample(), false);
        for line in [
            r#"tessera_vgpu_device_seconds_total{vgpu="a",device="0"} 2.5"#,
            r#"tessera_vgpu_launches_total{vgpu="a",device="0"} 42"#,
            r#"tessera_vgpu_wait_seconds_total{vgpu="a",device="0"} 0.5"#,
            r#"tessera_vgpu_tokens_seconds{vgpu="a",device="0"} -1.5"#,
            r#"tessera_vgpu_share_ratio{vgpu="a",device="0"} 0.3"#,
            r#"tessera_vgpu_achieved_ratio{vgpu="a",device="0",window="10s"} 0.29"#,
            r#"tessera_vgpu_memory_quota_bytes{vgpu="a",device="0"} 1073741824.0"#,
            r#"tessera_vgpu_memory_pooled_bytes{vgpu="a",device="0"} 9.0"#,
            r#"tessera_vgpu_processes{vgpu="a",device="0"} 2.0"#,
            r#"tessera_vgpu_suspended{vgpu="a",device="0"} 1.0"#,
            r#"tessera_vgpu_priority{vgpu="a",device="0",priority="high"} 1.0"#,
            r#"tessera_vgpu_priority{vgpu="a",device="0",priority="low"} 0.0"#,
            r#"tessera_device_utilization_ratio{device="0",uuid="GPU-1"} 0.5"#,
            r#"tessera_device_busy_ratio{device="0",uuid="GPU-1",window="1s"} 0.6"#,
            r#"tessera_device_power_watts{device="0",uuid="GPU-1"} 123.5"#,
            r#"tessera_device_memory_total_bytes{device="0",uuid="GPU-1"} 17179869184.0"#,
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
        let text = render(&sample(), true);
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
