//! The Kubernetes device plugin's cost (issue 19), in one run of `./target/release/k8s [calls]` (300 per
//! configuration by default, under a minute): two private daemons, each on one simulated `small` device,
//! each with its own `tessera k8s device-plugin` serving its socket (no kubelet: the plugin serves before
//! it registers, and retries the registration), and a gRPC client playing kubelet for both:
//!
//! - **API off**: the plugin has no Kubernetes credentials; each vGPU gets k/N of the GPU.
//! - **API on**: the plugin is given `--kubeconfig` for a fake API server started here (plain HTTP on
//!   127.0.0.1, `cuda-tests/probe/tests/e2e/common/fake_kube.rs`, the tests' own) listing 100 pods on the
//!   node: 90 others (running, some with vGPUs, some pending for other resources) and the last 10 of
//!   the benchmark's own pods, each pending until its `Allocate` and sized by its annotations
//!   `tessera.io/vgpu-memory` / `-share`. Each `Allocate` lists the node's pods, picks the pod, sizes the
//!   vGPU from its annotations and records the pairing in `pods.json`; the plugin's collector lists the
//!   pods too, in the background, as it does on a node.
//!
//! The two alternate in blocks of 30 calls, so that both see the same host. Each call `Allocate`s one
//! replica, cycling over the 10 replicas, so that every call after the first ten also removes the vGPU an
//! earlier container left on that replica before creating the new one (with the API on, that container's
//! pod is deleted first, as kubelet reuses a replica only once its pod is gone): the request's wall time
//! from the client includes the daemon's `rm` and `create`. Targets, for each configuration: `Allocate`
//! p99 ≤ 50 ms, and the plugin's peak resident memory (`VmHWM`) ≤ 30 MiB. Exits 1 when one is missed.

#[path = "../../../cuda-tests/probe/tests/e2e/common/fake_kube.rs"]
mod fake_kube;

use fake_kube::{FakeApi, pod};
use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tessera_benches::{Machine, nearest_rank, verdict};
use tessera_deviceplugin::unix;
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::{AllocateRequest, ContainerAllocateRequest};
use tonic::transport::Channel;

/// Target for `Allocate`'s 99th percentile.
const TARGET_P99_MS: f64 = 50.0;
/// Target for the plugin's resident memory.
const TARGET_RSS_MIB: f64 = 30.0;
/// The replicas the plugin advertises per GPU (its default).
const REPLICAS: usize = 10;
/// How many calls one configuration makes before the other takes its turn.
const BLOCK: usize = 30;
/// The node of the plugin with the API.
const NODE: &str = "bench-node";
/// The bearer token of the fake API server.
const TOKEN: &str = "bench-token";
/// The share the benchmark's pods ask for by annotation (not k/N = 10, so that the sizing shows).
const ANNOTATED_SHARE: u32 = 7;

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

/// The pods of the fake API server the plugin with the API sees, and the annotations of the
/// benchmark's own pods.
struct Cluster {
    api: FakeApi,
    memory_mib: u64,
}

impl Cluster {
    /// The fake server with the node's 90 other pods (and 20 on another node, which the server filters
    /// out), sizing the benchmark's pods at `memory_mib` MiB and [`ANNOTATED_SHARE`].
    fn start(memory_mib: u64) -> Cluster {
        let api = FakeApi::start(TOKEN);
        let running = |mut p: serde_json::Value| {
            p["status"] = json!({"phase": "Running"});
            p
        };
        for i in 0..90u32 {
            let name = format!("other-{i}");
            let limits = [("cpu", "500m"), ("memory", "1Gi")];
            api.add(match i % 9 {
                // Pods with a vGPU of an earlier plugin life (running: not candidates).
                0 | 1 => running(pod(&name, NODE, i, 1 + i % 2, &limits, &[("tessera.io/vgpu-share", "20")])),
                // Pods waiting for other resources.
                2 => pod(&name, NODE, i, 0, &limits, &[("example.com/team", "ml")]),
                _ => running(pod(&name, NODE, i, 0, &limits, &[])),
            });
        }
        for i in 0..20u32 {
            api.add(pod(&format!("remote-{i}"), "other-node", i, 1, &[], &[]));
        }
        Cluster { api, memory_mib }
    }

    /// Before call `i`: the pod of call `i - 10` (on the same replica) is deleted and call `i`'s pod is
    /// made, pending, newer than every other.
    fn before(&self, i: usize) {
        if i >= REPLICAS {
            self.api.delete(&format!("job-{}", i - REPLICAS));
        }
        let notes = [
            ("tessera.io/vgpu-memory", format!("{}Mi", self.memory_mib)),
            ("tessera.io/vgpu-share", ANNOTATED_SHARE.to_string()),
        ];
        let notes: Vec<(&str, &str)> = notes.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.api.add(pod(&format!("job-{i}"), NODE, 3600 + i as u32, 1, &[], &notes));
    }

    /// After call `i`: its pod runs.
    fn after(&self, i: usize) {
        self.api.change(&format!("job-{i}"), |p| p["status"] = json!({"phase": "Running"}));
    }
}

/// One configuration: a daemon, its plugin and the client calling it.
struct Setup {
    label: &'static str,
    m: Machine,
    plugin: KillOnDrop,
    uuid: String,
    client: DevicePluginClient<Channel>,
    cluster: Option<Cluster>,
    times: Vec<f64>,
}

impl Setup {
    /// A daemon and its plugin, with the Kubernetes API when `api`, and a client of the plugin.
    async fn start(label: &'static str, api: bool) -> Setup {
        let mut m = Machine::new(&format!("k8s-{}", label.replace(' ', "-")), "small");
        m.start_daemon();
        let device = m.client().stats(None).expect("stats").devices[0].clone();
        let uuid = device.uuid.expect("a UUID");
        let dir = m.dir.join("device-plugins");
        std::fs::create_dir_all(&dir).expect("create the device-plugin directory");
        let mut args = vec!["k8s".to_string(), "device-plugin".into(), "--dir".into(), dir.display().to_string()];
        let cluster = api.then(|| Cluster::start((device.memory_total >> 20) / REPLICAS as u64 - 1));
        if let Some(c) = &cluster {
            let kubeconfig = c.api.kubeconfig(&m.dir);
            args.extend(["--kubeconfig".into(), kubeconfig.display().to_string(), "--node-name".into(), NODE.into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = m.command("tessera", &args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let plugin = KillOnDrop(cmd.spawn().expect("start the plugin"));
        let socket = dir.join("tessera-vgpu.sock");
        let deadline = Instant::now() + Duration::from_secs(60);
        let channel = loop {
            match unix::channel(&socket).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => panic!("the plugin does not serve {}: {e}", socket.display()),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let client = DevicePluginClient::new(channel);
        Setup { label, m, plugin, uuid, client, cluster, times: Vec::new() }
    }

    /// The next call: `Allocate` of the next replica, timed (the fake cluster's changes are not).
    async fn call(&mut self) {
        let i = self.times.len();
        if let Some(c) = &self.cluster {
            c.before(i);
        }
        let ids = vec![format!("{}-{}", self.uuid, i % REPLICAS)];
        let request = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids }] };
        let start = Instant::now();
        self.client.allocate(request).await.unwrap_or_else(|e| panic!("Allocate ({}): {e}", self.label));
        self.times.push(start.elapsed().as_secs_f64() * 1e3);
        if let Some(c) = &self.cluster {
            c.after(i);
        }
    }

    /// Checks the vGPUs are what the configuration gives (so the API's sizing path did run), prints the
    /// figures, and says whether both targets are met.
    fn report(&self) -> bool {
        let vgpus = self.m.client().list().expect("list");
        assert_eq!(vgpus.len(), REPLICAS.min(self.times.len()), "{}: one vGPU per replica", self.label);
        let device = &self.m.client().stats(None).expect("stats").devices[0];
        let (memory, share) = match &self.cluster {
            Some(c) => (c.memory_mib << 20, ANNOTATED_SHARE),
            None => (device.memory_total / REPLICAS as u64, (100 / REPLICAS) as u32),
        };
        for v in &vgpus {
            assert_eq!((v.spec.memory, v.spec.share), (memory, share), "{}: vGPU {} sized", self.label, v.spec.name);
        }
        let mut times = self.times.clone();
        times.sort_by(f64::total_cmp);
        let p = |q: f64| nearest_rank(&times, q);
        let p99 = p(0.99);
        let what = match &self.cluster {
            Some(c) => format!("API on: 100 pods on the node, {} API requests", c.api.requests().len()),
            None => "API off".to_string(),
        };
        println!(
            "[{what}] Allocate (1 replica, vGPU rm + create through the daemon), {} calls: p50 {:.2} ms, p90 {:.2} \
             ms, p99 {p99:.2} ms, max {:.2} ms: {} (target p99 <= {TARGET_P99_MS} ms)",
            times.len(),
            p(0.5),
            p(0.9),
            times[times.len() - 1],
            verdict(p99 <= TARGET_P99_MS)
        );
        let pid = self.plugin.0.id();
        let (rss, hwm) = (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"));
        println!(
            "[{}] plugin resident memory: {rss:.1} MiB now, {hwm:.1} MiB peak: {} (target <= {TARGET_RSS_MIB} MiB)",
            self.label,
            verdict(hwm <= TARGET_RSS_MIB)
        );
        p99 <= TARGET_P99_MS && hwm <= TARGET_RSS_MIB
    }
}

fn main() {
    let calls: usize = std::env::args().nth(1).map_or(300, |r| r.parse().expect("calls: a number"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().unwrap();
    let met = runtime.block_on(async {
        let mut setups = [Setup::start("API off", false).await, Setup::start("API on", true).await];
        while setups.iter().any(|s| s.times.len() < calls) {
            for s in &mut setups {
                for _ in 0..BLOCK.min(calls - s.times.len()) {
                    s.call().await;
                }
            }
        }
        // Every configuration reports, whether or not an earlier one missed a target.
        let met: Vec<bool> = setups.iter().map(Setup::report).collect();
        met.into_iter().all(|ok| ok)
    });
    if !met {
        std::process::exit(1);
    }
}
