//! `tessera daemon --metrics ADDR` end to end: a real Prometheus server (Debian's `prometheus`, on a
//! loopback port, with a generated configuration) scrapes the daemon while two vGPUs saturate their
//! device, and its query API gives each vGPU's rate of device seconds split near the configured shares;
//! `promtool check metrics` finds nothing to report in a scrape; bad `--metrics` values, and an address
//! in use, are refused with an error naming them. Each test has a daemon of its own.

use crate::common;

use common::Guarded;
use common::tessera::Machine;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::VgpuSpec;

/// Installs Prometheus and promtool unless they are there (never skips: fails naming what is missing).
fn debian_tools() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/apt-once.sh");
    let out = Command::new(&script)
        .args(["prometheus:prometheus", "prometheus:promtool"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(out.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` from `127.0.0.1:port` with `accept` (HTTP/1.0, so the server closes after the body):
/// (status, content type, body).
fn get(port: u16, path: &str, accept: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n")?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let kind = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
        .map_or(String::new(), |(_, v)| v.trim().to_string());
    Ok((status, kind, body.to_string()))
}

/// `text` for a URL's query string.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server scraping `127.0.0.1:target` every second, its files in `dir`; killed on drop
/// (and with the test, should it die).
struct Prometheus {
    port: u16,
    _server: Guarded,
    log: std::path::PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, target: u16) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
                 - job_name: tessera\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = dir.join("prometheus.log");
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("prometheus.err")).unwrap());
        let server = Guarded::spawn(&mut cmd).expect("start prometheus");
        Prometheus { port, _server: server, log: dir.join("prometheus.err") }
    }

    /// The result vector of PromQL `query` (empty while Prometheus is not answering yet).
    fn query(&self, query: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", url_encoded(query));
        let Ok((200, _, body)) = get(self.port, &path, "application/json") else { return Vec::new() };
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert_eq!(v["status"], "success", "{query}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// What it logged, for a failure message.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The value of each series of a query's result, by label `label`.
fn by(result: &[Value], label: &str) -> Vec<(String, f64)> {
    let mut values: Vec<(String, f64)> = result
        .iter()
        .map(|s| {
            let value = s["value"][1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
            (s["metric"][label].as_str().unwrap_or_default().to_string(), value)
        })
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    values
}

#[test]
fn a_real_prometheus_scrapes_each_vgpus_device_seconds_at_its_share() {
    debian_tools();
    let mut m = Machine::new("metrics-prom", "small");
    let port = free_port();
    m.start_with(&["--metrics", &format!("127.0.0.1:{port}")]);
    let client = m.client();
    client.create(VgpuSpec::new("a", 0, 1 << 30, 30)).unwrap();
    client.create(VgpuSpec::new("b", 0, 1 << 30, 70)).unwrap();
    let tenants = [m.saturate("a", "90", None), m.saturate("b", "90", None)];
    let prometheus = Prometheus::start(&m.dir, port);

    // Until Prometheus has 10 s of samples of both vGPUs (60 s at most: its start and a loaded host).
    let rate = "rate(tessera_vgpu_device_seconds_total[10s])";
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let result = prometheus.query("tessera_vgpu_launches_total > 0");
        if result.len() == 2 {
            break Instant::now();
        }
        assert!(Instant::now() < deadline, "no scrape with both vGPUs launching within 60 s: {}", prometheus.log());
        std::thread::sleep(Duration::from_millis(250));
    };
    std::thread::sleep((first + Duration::from_secs(12)).saturating_duration_since(Instant::now()));
    let rates = by(&prometheus.query(rate), "vgpu");
    let shown = format!("{rate}: {rates:?}; stats: {:?}", client.stats(None).unwrap());
    eprintln!("{shown}");
    let [(a, ra), (b, rb)] = &rates[..] else { panic!("one rate per vGPU: {shown}") };
    assert_eq!((a.as_str(), b.as_str()), ("a", "b"), "{shown}");
    // Loose, functional bounds (as in api.rs): both saturate, so they split what the device ran by their
    // shares; how much it ran depends on the host (its CPUs run the simulated engine and the tenants:
    // 0.149 device seconds per second with the rest of the suite loading 2 CPUs to a load average of 4).
    let total = ra + rb;
    assert!(total > 0.05 && total <= 1.1, "device seconds per second: {shown}");
    assert!(
        (0.15..=0.45).contains(&(ra / total)),
        "a (30%) took {:.0}% of the device time: {shown}",
        ra / total * 100.0
    );
    assert!(*ra <= 0.45 && *rb <= 0.85, "over a share: {shown}");

    // The device series carry the driver's UUID, and the utilization NVML reported.
    let up = by(&prometheus.query("up{job=\"tessera\"}"), "job");
    assert_eq!(up, [("tessera".to_string(), 1.0)], "the target is up");
    let utilization = prometheus.query("tessera_device_utilization_ratio");
    assert_eq!(utilization.len(), 1, "{utilization:?}");
    let uuid = utilization[0]["metric"]["uuid"].as_str().unwrap_or_default();
    assert!(uuid.starts_with("GPU-"), "{utilization:?}");
    // The same figures `stats` returns, which NVML filled (`small`: a 75 W board, so 7.5-75 W).
    let device = client.stats(None).unwrap().devices.remove(0);
    assert_eq!(device.uuid.as_deref(), Some(uuid));
    assert!(device.name.starts_with("Simulated GPU"), "{device:?}");
    let (watts, celsius) = (device.power_watts.unwrap_or(0.0), device.temperature_c.unwrap_or(0.0));
    assert!((7.5..=75.0).contains(&watts) && (30.0..=80.0).contains(&celsius), "{device:?}");
    assert!(device.utilization_pct.is_some_and(|u| u > 0.0), "the device ran: {device:?}");
    drop(prometheus);
    drop(tenants);
}

#[test]
fn promtool_finds_nothing_to_report_in_a_scrape_and_other_paths_are_not_found() {
    debian_tools();
    let mut m = Machine::new("metrics-lint", "small");
    let port = free_port();
    m.start_with(&["--metrics", &format!("127.0.0.1:{port}")]);
    let client = m.client();
    client.create(VgpuSpec::new("a", 0, 1 << 30, 30)).unwrap();
    client.create(VgpuSpec::new("b", 0, 1 << 30, 20)).unwrap();
    let tenant = m.saturate("a", "60", None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.stats(None).unwrap().vgpus.iter().all(|v| v.processes.is_empty()) {
        assert!(Instant::now() < deadline, "the tenant never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, kind, body) = get(port, "/metrics", "*/*").expect("scrape");
    assert_eq!((status, kind.as_str()), (200, "text/plain; version=0.0.4; charset=utf-8"), "{body}");
    for series in [
        r#"tessera_vgpu_processes{vgpu="a",device="0"} 1"#,
        r#"tessera_vgpu_share_ratio{vgpu="b",device="0"} 0.2"#,
        "tessera_device_power_watts{",
        "tessera_device_temperature_celsius{",
    ] {
        assert!(body.contains(series), "no {series} in\n{body}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{body}");

    let (status, kind, body) = get(port, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    assert!(status == 200 && kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(get(port, "/", "*/*").unwrap().0, 404);
    assert_eq!(get(port, "/metrics/x", "*/*").unwrap().0, 404);
    drop(tenant);
}

#[test]
fn bad_metrics_addresses_and_one_in_use_are_refused_naming_them() {
    let mut m = Machine::new("metrics-bad", "small");
    for (value, says) in [
        ("9400", "has no port"),
        ("127.0.0.1", "has no port"),
        ("127.0.0.1:99999", "not a host and a port"),
        (" ", "is empty"),
    ] {
        let e = m.fails(1, &["daemon", "--metrics", value]);
        assert!(e.contains("--metrics") && e.contains(says), "{value:?}: {e}");
        assert!(!m.socket().exists(), "{value:?}: the daemon did not start");
    }
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let e = m.fails(1, &["daemon", "--metrics", &address]);
    assert!(e.contains(&format!("--metrics {address}")) && e.contains("in use"), "{e}");
    drop(taken);
    // Nothing of the refused start stays in the way.
    m.start_with(&["--metrics", &address]);
    let (status, _, body) = get(taken_port(&address), "/metrics", "*/*").unwrap();
    assert_eq!(status, 200, "{body}");
}

/// The port of `address` (`HOST:PORT`).
fn taken_port(address: &str) -> u16 {
    address.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).expect("HOST:PORT")
}
