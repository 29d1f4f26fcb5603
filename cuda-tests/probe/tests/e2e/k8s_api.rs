//! The device plugin with the Kubernetes API: `tessera k8s device-plugin --kubeconfig FILE` against a fake
//! API server (plain HTTP/1.1 on 127.0.0.1, serving the pods of a list the test changes) and a private
//! daemon on the simulated GPU, its `Allocate` called over real gRPC on its socket. `Allocate` sizes the
//! vGPU from the pod asking for k replicas (annotations; container limits first; a bad value refused with
//! InvalidArgument and no vGPU); a vGPU whose pod is deleted or ends goes without waiting for the grace, one
//! whose pod lives (a container crash-looping) stays past it; a bad kubeconfig is refused naming the file.
//! Without credentials the plugin behaves as before (`k8s.rs`).

use crate::common;
use crate::common::fake_kube;
use crate::common::kubelet;

use common::Guarded;
use common::tessera::Machine;
use fake_kube::{FakeApi, pod};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera_deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use tessera_deviceplugin::v1beta1::{AllocateRequest, AllocateResponse, ContainerAllocateRequest};

/// The node the plugin runs on.
const NODE: &str = "node-a";
/// The bearer token in the kubeconfig, which the fake server expects.
const TOKEN: &str = "test-token-1234";

/// A machine with its daemon, a fake API server and a plugin using it.
struct Started {
    m: Machine,
    api: FakeApi,
    dir: PathBuf,
    kubeconfig: PathBuf,
    plugin: Guarded,
    /// The machine's GPU.
    uuid: String,
}

/// A machine for test `tag` on the `small` device with its daemon, a fake API server, and a plugin started
/// with `--kubeconfig` for it and `args`.
fn started(tag: &str, args: &[&str]) -> Started {
    let mut m = Machine::new(tag, "small");
    m.start();
    let api = FakeApi::start(TOKEN);
    let dir = kubelet::plugin_dir(&m);
    let kubeconfig = api.kubeconfig(&m.dir);
    let plugin = start_plugin(&m, &dir, &kubeconfig, args);
    let uuid = uuid(&m);
    Started { m, api, dir, kubeconfig, plugin, uuid }
}

/// Starts `tessera k8s device-plugin --dir DIR --kubeconfig FILE --node-name node-a ARGS` on `m`.
fn start_plugin(m: &Machine, dir: &Path, kubeconfig: &Path, args: &[&str]) -> Guarded {
    let (dir, kubeconfig) = (dir.to_str().unwrap(), kubeconfig.to_str().unwrap());
    let base = ["k8s", "device-plugin", "--dir", dir, "--kubeconfig", kubeconfig, "--node-name", NODE];
    let mut cmd = m.command(&[&base[..], args].concat());
    cmd.stdout(std::process::Stdio::null());
    Guarded::spawn(&mut cmd).expect("start the device plugin")
}

/// `Allocate` of one container for replicas `replicas` of GPU `uuid`.
async fn allocate(
    plugin: &mut DevicePluginClient<tonic::transport::Channel>,
    uuid: &str,
    replicas: &[u32],
) -> Result<AllocateResponse, tonic::Status> {
    let ids = replicas.iter().map(|i| format!("{uuid}-{i}")).collect();
    let request = AllocateRequest { container_requests: vec![ContainerAllocateRequest { devices_ids: ids }] };
    plugin.allocate(request).await.map(tonic::Response::into_inner)
}

/// The vGPU name an `Allocate` answered.
fn vgpu_of(response: &AllocateResponse) -> String {
    response.container_responses[0].envs["TESSERA_VGPU"].clone()
}

/// The UUID of the daemon's first device.
fn uuid(m: &Machine) -> String {
    m.client().stats(None).expect("stats").devices[0].uuid.clone().expect("the simulated NVML gives UUIDs")
}

/// The names of the daemon's vGPUs.
fn names(m: &Machine) -> Vec<String> {
    m.client().list().expect("list").into_iter().map(|v| v.spec.name).collect()
}

/// Waits up to 60 s until `done`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn allocate_sizes_the_vgpu_from_its_pod() {
    let Started { m, api, dir, kubeconfig: _, plugin: _plugin, uuid } = started("k8s-api-size", &[]);
    let total = m.client().stats(None).unwrap().devices[0].memory_total;

    // Annotations size pod "annotated" (1 replica); limits override them in pod "limited" (2 replicas);
    // an older pod asking for 1 on another node is not this node's.
    api.add(pod("elsewhere", "node-b", 0, 1, &[], &[("tessera.io/vgpu-share", "90")]));
    let notes = [("tessera.io/vgpu-memory", "768Mi"), ("tessera.io/vgpu-share", "35")];
    api.add(pod("annotated", NODE, 1, 1, &[], &notes));
    let limits = [("tessera.io/vgpu-memory", "1"), ("tessera.io/vgpu-share", "45")];
    api.add(pod("limited", NODE, 2, 2, &limits, &[("tessera.io/vgpu-memory", "3Gi"), ("tessera.io/vgpu-share", "20")]));
    api.add(pod("bad", NODE, 3, 3, &[], &[("tessera.io/vgpu-memory", "lots")]));
    api.add(pod("huge", NODE, 4, 4, &[], &[("tessera.io/vgpu-memory", "1000Gi")]));
    api.add(pod("bad-limit", NODE, 5, 5, &[("tessera.io/vgpu-share", "150")], &[]));

    kubelet::runtime().block_on(async {
        let mut plugin = kubelet::dial_when_served(&dir, "tessera-vgpu.sock").await;
        let envs = allocate(&mut plugin, &uuid, &[0]).await.expect("Allocate for pod annotated");
        let name = vgpu_of(&envs);
        let vgpu = m.client().show(&name).expect("the vGPU exists in the daemon");
        assert_eq!((vgpu.spec.memory, vgpu.spec.share), (768 << 20, 35), "sized by the annotations");
        // A process started with the container's envs sees that memory.
        let envs = envs.container_responses[0].envs.clone();
        let out = m.tenant(&name, &["mem-info"]).envs(&envs).output().expect("run mem-info");
        let info = common::finished(out).json;
        assert_eq!(common::u64_at(&info, "total"), 768 << 20, "{info}");

        let limited = vgpu_of(&allocate(&mut plugin, &uuid, &[1, 2]).await.expect("Allocate for pod limited"));
        let vgpu = m.client().show(&limited).unwrap();
        assert_eq!((vgpu.spec.memory, vgpu.spec.share), (1 << 30, 45), "container limits before annotations");

        // Bad values: InvalidArgument naming them, and no vGPU.
        for (replicas, says) in [
            (&[3, 4, 5][..], "tessera.io/vgpu-memory=\"lots\""),
            (&[3, 4, 5, 6][..], "more than the GPU"),
            (&[3, 4, 5, 6, 7][..], "container limit tessera.io/vgpu-share=\"150\""),
        ] {
            let status = allocate(&mut plugin, &uuid, replicas).await.expect_err("a bad value is refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert!(status.message().contains(says), "{status:?}");
        }
        assert_eq!(names(&m).len(), 2, "a refused request created a vGPU: {:?}", names(&m));

        // Pod annotated has its vGPU: another container asking for 1 replica with no pod left gets k/N.
        let plain = vgpu_of(&allocate(&mut plugin, &uuid, &[8]).await.expect("Allocate without a pod"));
        let vgpu = m.client().show(&plain).unwrap();
        assert_eq!((vgpu.spec.memory, vgpu.spec.share), (total / 10, 10), "no pod asks: k/N");
    });
    let requests = api.requests();
    assert!(
        requests.iter().all(|r| r.starts_with("/api/v1/pods?") && r.contains("fieldSelector=spec.nodeName%3Dnode-a")),
        "{requests:?}"
    );
    let records = std::fs::read_to_string(m.file("state/device-plugin/pods.json")).expect("pods.json");
    assert!(records.contains("uid-annotated") && records.contains("uid-limited"), "{records}");
}

#[test]
fn a_vgpu_goes_when_its_pod_is_deleted_or_ends_without_waiting_for_the_grace() {
    let Started { m, api, dir, kubeconfig, mut plugin, uuid } = started("k8s-api-gc", &["--gc-grace", "60m"]);
    for (i, name) in ["deleted", "finished", "running"].into_iter().enumerate() {
        api.add(pod(name, NODE, i as u32, i as u32 + 1, &[], &[]));
    }
    let [deleted, finished, running] = kubelet::runtime().block_on(async {
        let mut plugin = kubelet::dial_when_served(&dir, "tessera-vgpu.sock").await;
        let mut vgpus = Vec::new();
        for replicas in [&[0][..], &[1, 2], &[3, 4, 5]] {
            vgpus.push(vgpu_of(&allocate(&mut plugin, &uuid, replicas).await.expect("Allocate")));
        }
        <[String; 3]>::try_from(vgpus).unwrap()
    });
    for name in ["deleted", "finished", "running"] {
        api.change(name, |p| p["status"]["phase"] = json!("Running"));
    }
    // The pairing outlives a plugin restart (it is in pods.json).
    let _ = plugin.kill();
    let _ = plugin.wait();
    let _plugin = start_plugin(&m, &dir, &kubeconfig, &["--gc-grace", "60m"]);
    let out = m.tenant(&deleted, &["mem-info"]).output().expect("run mem-info");
    assert!(common::finished(out).success, "the tenant ran");

    api.delete("deleted");
    wait_until("the deleted pod's vGPU is removed", || !names(&m).contains(&deleted));
    api.change("finished", |p| p["status"]["phase"] = json!("Succeeded"));
    wait_until("the finished pod's vGPU is removed", || !names(&m).contains(&finished));
    assert_eq!(names(&m), [running], "a running pod's vGPU stays");
    let records = std::fs::read_to_string(m.file("state/device-plugin/pods.json")).expect("pods.json");
    assert!(!records.contains("uid-deleted") && records.contains("uid-running"), "{records}");
}

#[test]
fn while_the_api_does_not_answer_recorded_vgpus_stay_and_allocate_is_unavailable() {
    let Started { m, api, dir, kubeconfig: _, plugin: _plugin, uuid } = started("k8s-api-down", &["--gc-grace", "1s"]);
    api.add(pod("gone", NODE, 0, 1, &[], &[]));
    let runtime = kubelet::runtime();
    let mut plugin = runtime.block_on(kubelet::dial_when_served(&dir, "tessera-vgpu.sock"));
    let gone = vgpu_of(&runtime.block_on(allocate(&mut plugin, &uuid, &[0])).expect("Allocate"));
    // Joined, then idle: only its pod's fate keeps it past the grace.
    let out = m.tenant(&gone, &["mem-info"]).output().expect("run mem-info");
    assert!(common::finished(out).success, "the tenant ran");
    // The API goes down and, meanwhile, the pod is deleted.
    api.set_down(true);
    let down_at = Instant::now();
    api.delete("gone");
    let status = runtime.block_on(allocate(&mut plugin, &uuid, &[1])).expect_err("no pod can be looked up");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    // kube retries a 503 until the plugin's bound: "cannot list" or "timed out", naming the node.
    assert!(status.message().contains("the pods on node node-a"), "{status:?}");
    assert_eq!(names(&m), std::slice::from_ref(&gone), "nothing made for the refused Allocate");
    // Two of the plugin's rounds (every 5 s) with the API down, well past the 1 s grace: the recorded vGPU
    // is neither judged by a pod list it does not have nor by the grace.
    let asked = api.requests().len();
    wait_until("two rounds of the plugin with the API down", || {
        down_at.elapsed() > Duration::from_secs(11) && api.requests().len() > asked
    });
    assert_eq!(names(&m), std::slice::from_ref(&gone), "kept while the API does not answer");
    api.set_down(false);
    wait_until("the deleted pod's vGPU is removed once the API answers", || names(&m).is_empty());
}

#[test]
fn a_crash_looping_pods_vgpu_stays_past_the_grace() {
    let Started { m, api, dir, kubeconfig: _, plugin: _plugin, uuid } = started("k8s-api-crash", &["--gc-grace", "1s"]);
    api.add(pod("crashing", NODE, 0, 1, &[], &[]));
    let (crashing, unknown) = kubelet::runtime().block_on(async {
        let mut plugin = kubelet::dial_when_served(&dir, "tessera-vgpu.sock").await;
        let crashing = vgpu_of(&allocate(&mut plugin, &uuid, &[0]).await.expect("Allocate"));
        // No pod asks for 2 replicas: a vGPU of no known pod, under the grace rule.
        let unknown = vgpu_of(&allocate(&mut plugin, &uuid, &[1, 2]).await.expect("Allocate"));
        (crashing, unknown)
    });
    // The container runs, crashes and is restarted over and over: its pod stays Running.
    api.change("crashing", |p| {
        p["status"] = json!({"phase": "Running", "containerStatuses": [{
            "name": "main", "ready": false, "restartCount": 5, "image": "x", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}
        }]});
    });
    for vgpu in [&crashing, &unknown] {
        let out = m.tenant(vgpu, &["mem-info"]).output().expect("run mem-info");
        assert!(common::finished(out).success, "the tenant ran");
    }
    // The vGPU of no known pod, joined after the other, goes after the grace; the crash-looping pod's stays.
    wait_until("the unknown pod's vGPU is removed after the grace", || !names(&m).contains(&unknown));
    assert_eq!(names(&m), std::slice::from_ref(&crashing), "the crash-looping pod's vGPU was removed");
    api.change("crashing", |p| p["status"]["phase"] = json!("Failed"));
    wait_until("the failed pod's vGPU is removed", || !names(&m).contains(&crashing));
}

#[test]
fn a_bad_kubeconfig_is_refused_naming_the_file() {
    let m = Machine::new("k8s-api-options", "small");
    let dir = kubelet::plugin_dir(&m);
    let garbage = m.file("garbage-kubeconfig");
    std::fs::write(&garbage, "this: [is not a kubeconfig").unwrap();
    let no_server = m.file("no-server-kubeconfig");
    std::fs::write(&no_server, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n").unwrap();
    for file in [m.file("missing-kubeconfig"), garbage, no_server] {
        let args = ["k8s", "device-plugin", "--dir", dir.to_str().unwrap(), "--kubeconfig", file.to_str().unwrap()];
        let stderr = m.fails(1, &args);
        assert!(stderr.contains(&format!("--kubeconfig {}", file.display())), "{stderr}");
    }
}
