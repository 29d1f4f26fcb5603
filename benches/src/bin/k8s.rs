//! The Kubernetes device plugin's cost (issue 19), in one run of `./target/release/k8s [rounds]` (300 by
//! default, a few seconds): a private daemon on one simulated `small` device, `tessera k8s device-plugin`
//! serving its socket (no kubelet: the plugin serves before it registers, and retries the registration),
//! and a gRPC client playing kubelet. Each round `Allocate`s one replica, cycling over the 10 replicas, so
//! that every call after the first ten also removes the vGPU an earlier container left on that replica
//! before creating the new one: the request's wall time from the client includes the daemon's `rm` and
//! `create`. Target: p99 ≤ 50 ms. Then the plugin's resident memory (`VmRSS`, and its peak `VmHWM`):
//! target ≤ 30 MiB.

use std::process::Stdio;
use std::time::{Duration, Instant};
use tessera_benches::{Machine, nearest_rank, verdict};
use tessera_deviceplugin::unix;
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::{AllocateRequest, ContainerAllocateRequest};

/// Target for `Allocate`'s 99th percentile.
const TARGET_P99_MS: f64 = 50.0;
/// Target for the plugin's resident memory.
const TARGET_RSS_MIB: f64 = 30.0;

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Field `key` of `/proc/PID/status`, in MiB.
fn status_mib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the plugin's status");
    let line = status.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in status"));
    let kib: f64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a figure in kB");
    kib / 1024.0
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(300, |r| r.parse().expect("rounds: a number"));
    let mut m = Machine::new("k8s", "small");
    m.start_daemon();
    let dir = m.dir.join("device-plugins");
    std::fs::create_dir_all(&dir).expect("create the device-plugin directory");
    let mut cmd = m.command("tessera", &["k8s", "device-plugin", "--dir", dir.to_str().unwrap()]);
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let plugin = KillOnDrop(cmd.spawn().expect("start the plugin"));
    let socket = dir.join("tessera-vgpu.sock");
    let uuid = m.client().stats(None).expect("stats").devices[0].uuid.clone().expect("a UUID");

    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap();
    let mut times = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        let channel = loop {
            match unix::channel(&socket).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => panic!("the plugin does not serve {}: {e}", socket.display()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let mut client = DevicePluginClient::new(channel);
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let ids = vec![format!("{uuid}-{}", round % 10)];
            let request = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids }] };
            let start = Instant::now();
            client.allocate(request).await.expect("Allocate");
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
        times
    });
    assert_eq!(m.client().list().expect("list").len(), 10.min(rounds), "one vGPU per replica");
    times.sort_by(f64::total_cmp);
    let p = |q: f64| nearest_rank(&times, q);
    let p99 = p(0.99);
    println!(
        "Allocate (1 replica, vGPU rm + create through the daemon), {rounds} calls: p50 {:.2} ms, p90 {:.2} ms, \
         p99 {p99:.2} ms, max {:.2} ms: {} (target p99 <= {TARGET_P99_MS} ms)",
        p(0.5),
        p(0.9),
        times[times.len() - 1],
        verdict(p99 <= TARGET_P99_MS)
    );
    let pid = plugin.0.id();
    let (rss, hwm) = (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"));
    println!(
        "plugin resident memory: {rss:.1} MiB now, {hwm:.1} MiB peak: {} (target <= {TARGET_RSS_MIB} MiB)",
        verdict(hwm <= TARGET_RSS_MIB)
    );
}
