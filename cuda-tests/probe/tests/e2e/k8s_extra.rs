//! The device plugin's extra resources against the simulated kubelet (`common/kubelet.rs`, the real
//! `v1beta1` API): beside `tessera.io/vgpu` it registers `tessera.io/vgpu-memory` (1 GiB units) and
//! `tessera.io/vgpu-share` (1 % units), each on its own socket; their `ListAndWatch` lists floor(memory /
//! 1 GiB) and 100 devices per GPU with the GPU's health; their `Allocate` answers empty responses for known
//! IDs and `InvalidArgument` for others; all three register again after a kubelet restart;
//! `--no-extra-resources` leaves only the main one.

use crate::common;
use crate::common::kubelet;

use common::tessera::Machine;
use kubelet::{Kubelet, allocate_request, dial, plugin_dir, runtime, start_plugin, stop_plugin, uuids};
use std::path::Path;
use std::time::Duration;
use tessera_deviceplugin::v1beta1::{AllocateRequest, ContainerAllocateRequest, Empty, RegisterRequest};

/// The three registrations of the default plugin: (resource, endpoint).
const THREE: [(&str, &str); 3] = [
    ("tessera.io/vgpu", "tessera-vgpu.sock"),
    ("tessera.io/vgpu-memory", "tessera-vgpu-memory.sock"),
    ("tessera.io/vgpu-share", "tessera-vgpu-share.sock"),
];

/// (resource, endpoint) of each registration, sorted.
fn names(registrations: &[RegisterRequest]) -> Vec<(String, String)> {
    let mut v: Vec<_> = registrations.iter().map(|r| (r.resource_name.clone(), r.endpoint.clone())).collect();
    v.sort();
    v
}

/// [`THREE`] as [`names`] gives them.
fn three() -> Vec<(String, String)> {
    THREE.iter().map(|(r, e)| (r.to_string(), e.to_string())).collect()
}

/// The first list `ListAndWatch` sends on `endpoint`, as sorted (id, health) pairs.
fn first_list(dir: &Path, endpoint: &str) -> Vec<(String, String)> {
    runtime().block_on(async {
        let mut plugin = dial(dir, endpoint).await;
        let mut stream = plugin.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner();
        let list = stream.message().await.expect("a device list").expect("the stream stays open").devices;
        let mut pairs: Vec<(String, String)> = list.into_iter().map(|d| (d.id, d.health)).collect();
        pairs.sort();
        pairs
    })
}

/// The sorted (id, health) pairs of `ids`, all `health`.
fn all(ids: impl IntoIterator<Item = String>, health: &str) -> Vec<(String, String)> {
    let mut v: Vec<_> = ids.into_iter().map(|id| (id, health.to_string())).collect();
    v.sort();
    v
}

#[test]
fn three_resources_register_and_list_their_devices_and_extra_allocate_answers_empty() {
    let mut m = Machine::new("k8s-extra", "small,small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(&m, &dir, &[]);
    let (registrations, _) = kubelet.wait_for_registrations(3, Duration::from_secs(60));
    assert_eq!(names(&registrations), three());
    for r in &registrations {
        assert_eq!(r.version, "v1beta1");
        let options = r.options.expect("options");
        let main = r.resource_name == "tessera.io/vgpu";
        assert_eq!(options.get_preferred_allocation_available, main, "{r:?}");
        assert!(!options.pre_start_required, "{r:?}");
    }

    let uuids = uuids(&m);
    let stats = m.client().stats(None).expect("stats");
    let gib: Vec<u64> = stats.devices.iter().map(|d| d.memory_total / common::GIB).collect();
    assert_eq!(gib, [4, 4], "the small simulated GPU has 4 GiB");
    let memory_ids = || uuids.iter().zip(&gib).flat_map(|(u, n)| (0..*n).map(move |i| format!("{u}-mem-{i}")));
    let share_ids = || uuids.iter().flat_map(|u| (0..100).map(move |i| format!("{u}-share-{i}")));
    assert_eq!(first_list(&dir, "tessera-vgpu-memory.sock"), all(memory_ids(), "Healthy"));
    assert_eq!(first_list(&dir, "tessera-vgpu-share.sock"), all(share_ids(), "Healthy"));
    assert_eq!(first_list(&dir, "tessera-vgpu.sock").len(), 20, "the main resource keeps its 10 replicas a GPU");

    runtime().block_on(async {
        for (endpoint, good, bad) in [
            (
                "tessera-vgpu-memory.sock",
                [format!("{}-mem-0", uuids[0]), format!("{}-mem-3", uuids[1])],
                [format!("{}-mem-4", uuids[0]), format!("{}-share-0", uuids[0]), format!("{}-0", uuids[0])],
            ),
            (
                "tessera-vgpu-share.sock",
                [format!("{}-share-0", uuids[0]), format!("{}-share-99", uuids[1])],
                [format!("{}-share-100", uuids[1]), format!("{}-mem-0", uuids[1]), "GPU-nope-share-1".into()],
            ),
        ] {
            let mut plugin = dial(&dir, endpoint).await;
            let options = plugin.get_device_plugin_options(Empty {}).await.expect("options").into_inner();
            assert!(!options.get_preferred_allocation_available && !options.pre_start_required);

            // Two containers, each with a known unit: two empty answers.
            let two = AllocateRequest {
                container_requests: good
                    .iter()
                    .map(|id| ContainerAllocateRequest { devices_ids: vec![id.clone()] })
                    .collect(),
            };
            let answer = plugin.allocate(two).await.expect("Allocate of known units").into_inner();
            assert_eq!(answer.container_responses.len(), 2, "{endpoint}");
            for c in &answer.container_responses {
                assert!(
                    c.envs.is_empty() && c.mounts.is_empty() && c.devices.is_empty() && c.cdi_devices.is_empty(),
                    "{endpoint}: {c:?}"
                );
            }

            // Unknown IDs, alone or beside a known one, and no ID at all: InvalidArgument.
            let mut cases: Vec<Vec<String>> = bad.iter().map(|b| vec![b.clone()]).collect();
            cases.push(vec![good[0].clone(), bad[0].clone()]);
            cases.push(vec!["garbage".into()]);
            cases.push(Vec::new());
            for ids in cases {
                let status = plugin.allocate(allocate_request(&ids)).await.expect_err("an unknown unit is refused");
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{endpoint} {ids:?}: {status:?}");
            }
        }
    });
    assert!(m.client().list().expect("list").is_empty(), "an extra resource's Allocate created a vGPU");
}

#[test]
fn all_three_turn_unhealthy_when_nvml_loses_the_gpu_and_healthy_when_it_returns() {
    let mut m = Machine::new("k8s-extra-health", "small,small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(&m, &dir, &["--replicas", "2"]);
    kubelet.wait_for_registrations(3, Duration::from_secs(60));
    let uuids = uuids(&m);
    let sim = simgpu::Config::from_lookup(|k| m.sim.var(k).map(str::to_string)).expect("the machine's simgpu config");
    let lost = sim.lost_marker(1);

    runtime().block_on(async {
        let mut streams = Vec::new();
        for (_, endpoint) in THREE {
            let mut plugin = dial(&dir, endpoint).await;
            streams.push((endpoint, plugin.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner()));
        }
        // Each stream's next list within 30 s (the plugin reads the devices every 5 s): the health of the
        // devices of GPU 0 and of GPU 1, each of which must agree within the GPU.
        let mut next = async || {
            let mut states = Vec::new();
            for (endpoint, stream) in &mut streams {
                let list = tokio::time::timeout(Duration::from_secs(30), stream.message())
                    .await
                    .unwrap_or_else(|_| panic!("{endpoint}: a new device list within 30 s"))
                    .expect("the stream")
                    .expect("the stream stays open")
                    .devices;
                let health = |gpu: usize| {
                    let mut h: Vec<&str> = list
                        .iter()
                        .filter(|d| d.id.starts_with(&format!("{}-", uuids[gpu])))
                        .map(|d| d.health.as_str())
                        .collect();
                    h.dedup();
                    h.join(",")
                };
                let expected = match *endpoint {
                    "tessera-vgpu.sock" => 4,
                    "tessera-vgpu-memory.sock" => 8,
                    _ => 200,
                };
                assert_eq!(list.len(), expected, "{endpoint}: the lost GPU keeps its devices");
                states.push((endpoint.to_string(), health(0), health(1)));
            }
            states
        };
        let expect = |a: &str, b: &str| -> Vec<(String, String, String)> {
            THREE.iter().map(|(_, e)| (e.to_string(), a.to_string(), b.to_string())).collect()
        };
        assert_eq!(next().await, expect("Healthy", "Healthy"));
        std::fs::write(&lost, b"").expect("make GPU 1 lost");
        assert_eq!(next().await, expect("Healthy", "Unhealthy"), "GPU 1 lost: unhealthy on all three");
        std::fs::remove_file(&lost).expect("bring GPU 1 back");
        assert_eq!(next().await, expect("Healthy", "Healthy"), "GPU 1 back: healthy on all three");
    });
}

#[test]
fn all_three_register_again_within_5_s_after_a_kubelet_restart() {
    let mut m = Machine::new("k8s-extra-restart", "small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(&m, &dir, &[]);
    let (first, _) = kubelet.wait_for_registrations(3, Duration::from_secs(60));
    assert_eq!(names(&first), three());

    // kubelet restarts: its socket is made again and the plugins' sockets are removed.
    drop(kubelet);
    std::fs::remove_file(dir.join("kubelet.sock")).expect("remove kubelet.sock");
    for (_, endpoint) in THREE {
        std::fs::remove_file(dir.join(endpoint)).expect("remove a plugin socket");
    }
    let kubelet = Kubelet::start(&dir);
    let (second, took) = kubelet.wait_for_registrations(3, Duration::from_secs(60));
    eprintln!("all three registered again {:.0} ms after kubelet's new socket", took.as_secs_f64() * 1e3);
    assert!(took <= Duration::from_secs(5), "registered again only after {took:?}");
    assert_eq!(names(&second), three());
    assert_eq!(first_list(&dir, "tessera-vgpu-memory.sock").len(), 4, "served on its new socket");
    assert_eq!(first_list(&dir, "tessera-vgpu-share.sock").len(), 100, "served on its new socket");

    // kubelet restarts leaving the plugin's sockets: a new kubelet.sock alone brings three registrations.
    drop(kubelet);
    std::fs::remove_file(dir.join("kubelet.sock")).expect("remove kubelet.sock");
    let kubelet = Kubelet::start(&dir);
    let (third, took) = kubelet.wait_for_registrations(3, Duration::from_secs(60));
    assert!(took <= Duration::from_secs(5), "registered again only after {took:?}");
    assert_eq!(names(&third), three());
}

#[test]
fn no_extra_resources_registers_only_the_main_one() {
    let mut m = Machine::new("k8s-extra-off", "small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let mut plugin = start_plugin(&m, &dir, &["--no-extra-resources"]);
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    assert_eq!(registration.resource_name, "tessera.io/vgpu");
    // Every socket is made before the first registration, so the extra ones would be there by now.
    let mut files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(files, ["kubelet.sock", "tessera-vgpu.sock"]);
    assert_eq!(first_list(&dir, "tessera-vgpu.sock").len(), 10);
    assert!(
        kubelet.registrations().iter().all(|r| r.resource_name == "tessera.io/vgpu"),
        "{:?}",
        kubelet.registrations()
    );

    // Stopped, the plugin removes its sockets: with the extra resources on, all three.
    let _ = plugin.kill();
    let _ = plugin.wait();
    let mut plugin = start_plugin(&m, &dir, &[]);
    kubelet.wait_for_registrations(3, Duration::from_secs(60));
    stop_plugin(&mut plugin);
    for (_, endpoint) in THREE {
        assert!(!dir.join(endpoint).exists(), "the plugin left {endpoint} behind");
    }
}

#[test]
fn a_resource_too_long_for_its_extra_names_is_refused_unless_they_are_off() {
    let m = Machine::new("k8s-extra-options", "small");
    let dir = plugin_dir(&m);
    let dir = dir.to_str().unwrap();
    let long = format!("tessera.io/{}", "a".repeat(60));
    let stderr = m.fails(1, &["k8s", "device-plugin", "--dir", dir, "--resource", &long]);
    assert!(stderr.contains("--no-extra-resources") && stderr.contains("-memory"), "{stderr}");
    let checked =
        m.ok(&["k8s", "device-plugin", "--dir", dir, "--resource", &long, "--no-extra-resources", "--check-config"]);
    assert!(checked.contains(&format!("resource: {long}")) && !checked.contains("extra resource"), "{checked}");
    let checked = m.ok(&["k8s", "device-plugin", "--check-config", "--resource", "example.com/gpu"]);
    assert!(checked.contains("extra resource: example.com/gpu-memory on tessera-vgpu-memory.sock"), "{checked}");
    assert!(checked.contains("extra resource: example.com/gpu-share on tessera-vgpu-share.sock"), "{checked}");
}
