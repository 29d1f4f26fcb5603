//! The Kubernetes device plugin (`tessera k8s device-plugin`) against a simulated kubelet that speaks the
//! real `v1beta1` gRPC API over unix sockets (the types generated from the vendored `api.proto`): it
//! registers with the version, endpoint and resource name; `ListAndWatch` advertises N replicas per
//! simulated GPU; `Allocate` creates the vGPU in the daemon and returns the envs, mounts and device nodes;
//! malformed requests get gRPC errors; a kubelet restart (a new `kubelet.sock`, the plugin's socket
//! removed) is followed by a new registration within 5 s; SIGTERM stops the plugin, which removes its
//! socket; bad options are refused naming the problem; a GPU NVML loses turns unhealthy and back; an ended
//! container's vGPU is removed after the grace period, a plugin restart keeps the vGPUs.

use crate::common;
use crate::common::kubelet;

use common::tessera::Machine;
use kubelet::{Kubelet, allocate_request, dial, plugin_dir, runtime, start_plugin, stop_plugin, uuids};
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_deviceplugin::v1beta1::{ContainerPreferredAllocationRequest, Empty, PreferredAllocationRequest};

#[test]
fn registers_advertises_replicas_and_allocates_vgpus_in_the_daemon() {
    let mut m = Machine::new("k8s-allocate", "small,small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    // Stand-in device nodes (the simulated machine has no /dev/nvidia*; only nodes that exist are given).
    let dev = m.file("dev");
    std::fs::create_dir_all(&dev).expect("create the device directory");
    for node in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"] {
        std::fs::write(dev.join(node), b"").expect("make a stand-in device node");
    }
    let _plugin = start_plugin(&m, &dir, &["--dev-dir", dev.to_str().unwrap()]);
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    assert_eq!(
        (registration.version.as_str(), registration.endpoint.as_str(), registration.resource_name.as_str()),
        ("v1beta1", "tessera-vgpu.sock", "tessera.io/vgpu")
    );
    assert!(registration.options.expect("options").get_preferred_allocation_available);
    let uuids = uuids(&m);
    assert_eq!(uuids.len(), 2);

    runtime().block_on(async {
        let mut plugin = dial(&dir, &registration.endpoint).await;
        let options = plugin.get_device_plugin_options(Empty {}).await.expect("options").into_inner();
        assert!(options.get_preferred_allocation_available && !options.pre_start_required);

        // ListAndWatch: 10 replicas of each GPU, healthy.
        let mut stream = plugin.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner();
        let listed = stream.message().await.expect("a device list").expect("the stream stays open").devices;
        let mut expected: Vec<String> = uuids.iter().flat_map(|u| (0..10).map(move |i| format!("{u}-{i}"))).collect();
        let mut ids: Vec<String> = listed.iter().map(|d| d.id.clone()).collect();
        ids.sort();
        expected.sort();
        assert_eq!(ids, expected);
        assert!(listed.iter().all(|d| d.health == "Healthy" && d.id.len() <= 63), "{listed:?}");

        // GetPreferredAllocation: 3 replicas of the GPU with the most free ones.
        let available: Vec<String> =
            [format!("{}-0", uuids[0])].into_iter().chain((0..5).map(|i| format!("{}-{i}", uuids[1]))).collect();
        let preferred = plugin
            .get_preferred_allocation(PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: available,
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: 3,
                }],
            })
            .await
            .expect("GetPreferredAllocation")
            .into_inner();
        let chosen = &preferred.container_responses[0].device_i_ds;
        assert_eq!(chosen.len(), 3, "{chosen:?}");
        assert!(chosen.iter().all(|id| id.starts_with(&uuids[1])), "{chosen:?} not all of {}", uuids[1]);

        // Malformed requests: gRPC InvalidArgument, and no vGPU created.
        for bad in [
            vec!["GPU-not-a-gpu-0".to_string()],
            vec![format!("{}-10", uuids[0])],
            vec![format!("{}-1", uuids[0]), format!("{}-1", uuids[1])],
            vec![format!("{}-2", uuids[0]), format!("{}-2", uuids[0])],
            vec!["garbage".to_string()],
            Vec::new(),
        ] {
            let status = plugin.allocate(allocate_request(&bad)).await.expect_err("a malformed request is refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bad:?}: {status:?}");
        }
        assert!(m.client().list().expect("list").is_empty(), "a refused request created a vGPU");

        // Allocate 2 replicas of GPU 1: a vGPU of 2/10 of it, and what the container needs.
        let ids = [format!("{}-4", uuids[1]), format!("{}-3", uuids[1])];
        let response = plugin.allocate(allocate_request(&ids)).await.expect("Allocate").into_inner();
        let container = &response.container_responses[0];
        let name = container.envs.get("TESSERA_VGPU").expect("TESSERA_VGPU").clone();
        assert_eq!(name, "k8s-1-3");
        assert_eq!(container.envs.get("NVIDIA_VISIBLE_DEVICES"), Some(&uuids[1]));
        let vgpu = m.client().show(&name).expect("the vGPU exists in the daemon");
        let total = m.client().stats(None).unwrap().devices[1].memory_total;
        assert_eq!((vgpu.spec.device, vgpu.spec.share, vgpu.spec.memory), (1, 20, total / 10 * 2));
        assert!(m.list().to_string().contains("k8s-1-3"), "tessera vgpu list shows it");

        let mount = |at: &str| container.mounts.iter().find(|x| x.container_path == at).cloned();
        // The directory holding the region and socket is mounted at its own path (a file's mount would go
        // stale when the daemon makes a new socket).
        let daemon_dir = m.region().parent().unwrap().to_str().unwrap().to_string();
        let held = mount(&daemon_dir).expect("the daemon's directory is mounted");
        assert_eq!(held.host_path, daemon_dir);
        assert_eq!(container.envs.get("TESSERA_REGION").map(String::as_str), m.region().to_str());
        assert_eq!(container.envs.get("TESSERA_SOCKET").map(String::as_str), m.socket().to_str());
        let preload = mount("/etc/ld.so.preload").expect("/etc/ld.so.preload is mounted");
        assert!(preload.read_only);
        let names = std::fs::read_to_string(&preload.host_path).expect("the preload file exists");
        let shim = mount(names.trim()).expect("the file /etc/ld.so.preload names is mounted");
        assert!(shim.read_only && shim.host_path.ends_with("libtessera.so"), "{shim:?}");
        assert!(Path::new(&shim.host_path).is_file(), "{shim:?}");
        let nodes: Vec<&str> = container.devices.iter().map(|d| d.container_path.as_str()).collect();
        assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"], "those in --dev-dir");

        // The replicas come back to another container once the first has ended: its leftover vGPU goes.
        let again = plugin.allocate(allocate_request(&[format!("{}-3", uuids[1])])).await.expect("Allocate");
        assert_eq!(again.into_inner().container_responses[0].envs["TESSERA_VGPU"], "k8s-1-3");
        assert_eq!(m.client().show("k8s-1-3").unwrap().spec.share, 10);

        // A process started with the envs a container of 5 replicas of GPU 0 gets is held to 5/10 of it.
        let ids: Vec<String> = (0..5).map(|i| format!("{}-{i}", uuids[0])).collect();
        let response = plugin.allocate(allocate_request(&ids)).await.expect("Allocate").into_inner();
        let envs = response.container_responses[0].envs.clone();
        let name = envs["TESSERA_VGPU"].clone();
        let out = m.tenant(&name, &["mem-info"]).envs(&envs).output().expect("run mem-info");
        let info = common::finished(out).json;
        let total = m.client().stats(None).unwrap().devices[0].memory_total;
        assert_eq!(common::u64_at(&info, "total"), total / 10 * 5, "{info}");
    });
}

#[test]
fn a_restarted_kubelet_gets_a_new_registration_within_5_s() {
    let mut m = Machine::new("k8s-restart", "small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let mut plugin = start_plugin(&m, &dir, &["--replicas", "4", "--resource", "example.com/shared-gpu"]);
    let (first, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    assert_eq!(first.resource_name, "example.com/shared-gpu");
    let listed = |endpoint: String| {
        let dir = dir.clone();
        runtime().block_on(async move {
            let mut plugin = dial(&dir, &endpoint).await;
            let mut stream = plugin.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner();
            stream.message().await.expect("a list").expect("open").devices.len()
        })
    };
    assert_eq!(listed(first.endpoint.clone()), 4);

    // kubelet restarts: its socket is made again and the plugins' sockets are removed.
    drop(kubelet);
    std::fs::remove_file(dir.join("kubelet.sock")).expect("remove kubelet.sock");
    std::fs::remove_file(dir.join(&first.endpoint)).expect("remove the plugin's socket");
    let kubelet = Kubelet::start(&dir);
    let (second, took) = kubelet.wait_for_registration(Duration::from_secs(60));
    eprintln!("registered again {:.0} ms after kubelet's new socket", took.as_secs_f64() * 1e3);
    assert!(took <= Duration::from_secs(5), "registered again only after {took:?}");
    assert_eq!(second, first);
    assert_eq!(listed(second.endpoint.clone()), 4, "the plugin serves on its new socket");

    // kubelet restarts leaving the plugin's socket: a new kubelet.sock alone brings a new registration.
    drop(kubelet);
    std::fs::remove_file(dir.join("kubelet.sock")).expect("remove kubelet.sock");
    let kubelet = Kubelet::start(&dir);
    let (_, took) = kubelet.wait_for_registration(Duration::from_secs(60));
    assert!(took <= Duration::from_secs(5), "registered again only after {took:?}");

    // SIGTERM: the plugin stops cleanly and removes its socket.
    stop_plugin(&mut plugin);
    assert!(!dir.join(&first.endpoint).exists(), "the plugin left its socket behind");
}

#[test]
fn bad_options_are_refused_naming_the_problem() {
    let m = Machine::new("k8s-options", "small");
    let dir = plugin_dir(&m);
    let dir = dir.to_str().unwrap();
    for (args, says) in [
        (&["--replicas", "0"][..], "--replicas 0"),
        (&["--replicas", "101"][..], "1 to 100"),
        (&["--resource", "vgpu"][..], "domain/name"),
        (&["--resource", "Tessera.io/vgpu"][..], "DNS name"),
        (&["--socket-name", "kubelet.sock"][..], "other than kubelet.sock"),
        (&["--dir", "/nonexistent/device-plugins"][..], "no such directory"),
    ] {
        let dir = if args.contains(&"--dir") { &[][..] } else { &["--dir", dir][..] };
        let stderr = m.fails(1, &[&["k8s", "device-plugin"][..], dir, args].concat());
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let stderr = m.fails(2, &["k8s", "device-plugin", "--dir", dir, "--gc-grace", "soon"]);
    assert!(stderr.contains("not a time"), "{stderr}");
}

#[test]
fn a_gpu_nvml_loses_turns_unhealthy_and_healthy_again_when_it_returns() {
    let mut m = Machine::new("k8s-health", "small,small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(&m, &dir, &["--replicas", "2"]);
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    let uuids = uuids(&m);
    let sim = simgpu::Config::from_lookup(|k| m.sim.var(k).map(str::to_string)).expect("the machine's simgpu config");
    let lost = sim.lost_marker(1);

    runtime().block_on(async {
        let mut plugin = dial(&dir, &registration.endpoint).await;
        let mut stream = plugin.list_and_watch(Empty {}).await.expect("ListAndWatch").into_inner();
        // The next list within 30 s (the plugin reads the devices every 5 s) as (id, health) pairs.
        let mut next = async || {
            let list = tokio::time::timeout(Duration::from_secs(30), stream.message())
                .await
                .expect("a new device list within 30 s")
                .expect("the stream")
                .expect("the stream stays open");
            let mut pairs: Vec<(String, String)> = list.devices.into_iter().map(|d| (d.id, d.health)).collect();
            pairs.sort();
            pairs
        };
        let health = |gpu: usize, state: &str| -> Vec<(String, String)> {
            (0..2).map(|i| (format!("{}-{i}", uuids[gpu]), state.to_string())).collect()
        };
        let all = |a: &str, b: &str| {
            let mut v = [health(0, a), health(1, b)].concat();
            v.sort();
            v
        };
        assert_eq!(next().await, all("Healthy", "Healthy"));

        std::fs::write(&lost, b"").expect("make GPU 1 lost");
        assert_eq!(next().await, all("Healthy", "Unhealthy"), "GPU 1 lost keeps its IDs, unhealthy");
        let refused = plugin.allocate(allocate_request(&[format!("{}-0", uuids[1])])).await;
        assert_eq!(refused.expect_err("no vGPU on a lost GPU").code(), tonic::Code::FailedPrecondition);

        std::fs::remove_file(&lost).expect("bring GPU 1 back");
        assert_eq!(next().await, all("Healthy", "Healthy"), "GPU 1 is back");
        let ok = plugin.allocate(allocate_request(&[format!("{}-0", uuids[1])])).await.expect("Allocate");
        assert_eq!(ok.into_inner().container_responses[0].envs["TESSERA_VGPU"], "k8s-1-0");
    });
}

#[test]
fn an_ended_containers_vgpu_is_removed_and_a_plugin_restart_keeps_the_others() {
    let mut m = Machine::new("k8s-gc", "small");
    m.start();
    let dir = plugin_dir(&m);
    let kubelet = Kubelet::start(&dir);
    let mut plugin = start_plugin(&m, &dir, &["--gc-grace", "1s"]);
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    let uuid = uuids(&m).remove(0);
    let (ended, waiting) = runtime().block_on(async {
        let mut plugin = dial(&dir, &registration.endpoint).await;
        let mut name = async |i: u32| {
            let r = plugin.allocate(allocate_request(&[format!("{uuid}-{i}")])).await.expect("Allocate");
            r.into_inner().container_responses[0].envs["TESSERA_VGPU"].clone()
        };
        (name(0).await, name(1).await)
    });

    // A plugin restart keeps the vGPUs it handed out.
    let _ = plugin.kill();
    let _ = plugin.wait();
    let _plugin = start_plugin(&m, &dir, &["--gc-grace", "1s"]);
    let names = |m: &Machine| m.client().list().expect("list").into_iter().map(|v| v.spec.name).collect::<Vec<_>>();
    assert_eq!(names(&m), [ended.clone(), waiting.clone()]);

    // The first container runs a process in its vGPU and ends: the vGPU goes; the other, never joined
    // (its container may not have started yet), stays.
    let out = m.tenant(&ended, &["mem-info"]).output().expect("run mem-info");
    assert!(common::finished(out).success, "the tenant ran");
    let deadline = Instant::now() + Duration::from_secs(60);
    while names(&m).contains(&ended) {
        assert!(Instant::now() < deadline, "vGPU {ended} of the ended container is still there");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(names(&m), [waiting]);
}
