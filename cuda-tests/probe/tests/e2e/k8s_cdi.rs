//! CDI on the simulated machine, checked against the CDI project's JSON schema (vendored in
//! `scheduler/deviceplugin/cdi-schema/`): `tessera cdi generate` lists the GPUs and vGPUs the daemon
//! reports, printed or written atomically, with clear errors; the device plugin with `--cdi-dir` writes
//! the spec of a new vGPU before answering `Allocate`, names its CDI device in the answer with the same
//! edits as the envs, mounts and device nodes, gives only device nodes that exist on the host, mounts the
//! daemon's directory, and drops removed vGPUs from the spec (the file itself when none is left).
//!
//! The simulated machine has no `/dev/nvidia*`: the tests make a directory of stand-in nodes (plain
//! files; only their existence is looked at) and give it as `--dev-dir`.

use crate::common;
use crate::common::kubelet;
use crate::validator;

use common::tessera::Machine;
use kubelet::{Kubelet, allocate_request, dial, plugin_dir, runtime, start_plugin, uuids};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A directory of stand-in device nodes `names` on machine `m`.
fn dev_dir(m: &Machine, names: &[&str]) -> PathBuf {
    let dir = m.file("dev");
    std::fs::create_dir_all(&dir).expect("create the device directory");
    for name in names {
        std::fs::write(dir.join(name), b"").expect("make a stand-in device node");
    }
    dir
}

/// A spec's device of name `name`.
fn device<'a>(spec: &'a Value, name: &str) -> Option<&'a Value> {
    spec["devices"].as_array().expect("devices").iter().find(|d| d["name"] == name)
}

/// The device names of a spec.
fn names(spec: &Value) -> Vec<String> {
    spec["devices"].as_array().expect("devices").iter().map(|d| d["name"].as_str().unwrap().to_string()).collect()
}

/// Parses a spec and checks it against the schema.
fn valid(text: &str) -> Value {
    let spec: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    validator::check(&spec).unwrap_or_else(|e| panic!("the spec does not follow the CDI schema:\n{e}\n{spec:#}"));
    spec
}

/// The container paths of a CDI device's device nodes.
fn node_paths(device: &Value) -> Vec<String> {
    let nodes = device["containerEdits"]["deviceNodes"].as_array().expect("deviceNodes");
    nodes.iter().map(|n| n["path"].as_str().unwrap().to_string()).collect()
}

#[test]
fn cdi_generate_lists_gpus_and_vgpus_and_follows_the_schema() {
    let mut m = Machine::new("cdi-generate", "small,small");
    // No daemon: a clear error.
    let stderr = m.fails(1, &["cdi", "generate"]);
    assert!(stderr.contains("daemon"), "{stderr}");

    m.start();
    m.ok(&["vgpu", "create", "team-a", "--device", "1", "--memory", "256MiB", "--share", "30"]);
    m.ok(&["vgpu", "create", "team-b", "--device", "0", "--memory", "256MiB", "--share", "20"]);
    let dev = dev_dir(&m, &["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1"]);
    let dev_arg = dev.to_str().unwrap();
    let printed = m.ok(&["cdi", "generate", "--dev-dir", dev_arg]);
    let spec = valid(&printed);
    assert_eq!((spec["cdiVersion"].as_str(), spec["kind"].as_str()), (Some("0.8.0"), Some("tessera.io/vgpu")));
    let uuids = uuids(&m);
    let expected = ["team-a", "team-b", "gpu0", &uuids[0], "gpu1", &uuids[1]].map(String::from);
    assert_eq!(names(&spec).into_iter().collect::<BTreeSet<_>>(), expected.into_iter().collect());

    let team_a = device(&spec, "team-a").unwrap();
    let env: Vec<&str> =
        team_a["containerEdits"]["env"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    let region = m.region();
    assert!(env.contains(&"TESSERA_VGPU=team-a"), "{env:?}");
    assert!(env.contains(&format!("NVIDIA_VISIBLE_DEVICES={}", uuids[1]).as_str()), "{env:?}");
    assert!(env.contains(&format!("TESSERA_REGION={}", region.display()).as_str()), "{env:?}");
    assert_eq!(node_paths(team_a), ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"]);
    let mounts = team_a["containerEdits"]["mounts"].as_array().unwrap();
    let daemon_dir = region.parent().unwrap().to_str().unwrap();
    assert!(mounts.iter().any(|x| x["hostPath"] == daemon_dir && x["containerPath"] == daemon_dir), "{mounts:?}");
    let whole = device(&spec, "gpu0").unwrap();
    assert_eq!(whole["containerEdits"], device(&spec, &uuids[0]).unwrap()["containerEdits"]);
    assert!(!whole["containerEdits"]["env"].to_string().contains("TESSERA_VGPU"), "{whole}");
    // The preload file the spec mounts exists.
    let preload = mounts.iter().find(|x| x["containerPath"] == "/etc/ld.so.preload").expect("a preload mount");
    assert!(Path::new(preload["hostPath"].as_str().unwrap()).is_file(), "{preload}");

    // The schema check is not a formality: the same spec with a device lacking its edits is refused.
    let mut broken = spec.clone();
    broken["devices"][0].as_object_mut().unwrap().remove("containerEdits");
    assert!(validator::check(&broken).is_err(), "a device without containerEdits passed the schema");

    // --output: the same text, written whole (no temporary file left beside it).
    let out_dir = m.file("cdi-out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let file = out_dir.join("tessera.json");
    m.ok(&["cdi", "generate", "--dev-dir", dev_arg, "--output", file.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), printed);
    let listing: Vec<_> = std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listing, ["tessera.json"]);

    // Paths that cannot be written: errors naming them.
    let missing = m.file("no-such-dir/tessera.json");
    let stderr = m.fails(1, &["cdi", "generate", "--output", missing.to_str().unwrap()]);
    assert!(stderr.contains("cannot write") && stderr.contains("no-such-dir/tessera.json"), "{stderr}");
    let stderr = m.fails(1, &["cdi", "generate", "--output", out_dir.to_str().unwrap()]);
    assert!(stderr.contains("is a directory"), "{stderr}");
}

#[test]
fn allocate_with_cdi_dir_names_a_device_of_the_spec_it_wrote_first() {
    let mut m = Machine::new("k8s-cdi", "small,small");
    m.start();
    let dir = plugin_dir(&m);
    let cdi_dir = m.file("cdi"); // made by the plugin
    let dev = dev_dir(&m, &["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"]);
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(
        &m,
        &dir,
        &["--cdi-dir", cdi_dir.to_str().unwrap(), "--dev-dir", dev.to_str().unwrap(), "--gc-grace", "1s"],
    );
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    let uuids = uuids(&m);
    let spec_file = cdi_dir.join("tessera-vgpu.json");

    runtime().block_on(async {
        let mut plugin = dial(&dir, &registration.endpoint).await;
        let ids = [format!("{}-4", uuids[1]), format!("{}-3", uuids[1])];
        let response = plugin.allocate(allocate_request(&ids)).await.expect("Allocate").into_inner();
        let c = &response.container_responses[0];
        let name = c.envs["TESSERA_VGPU"].clone();
        assert_eq!(name, "k8s-1-3");
        let cdi: Vec<&str> = c.cdi_devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(cdi, ["tessera.io/vgpu=k8s-1-3"]);

        // Written before the answer: read at once, no waiting.
        let spec = valid(&std::fs::read_to_string(&spec_file).expect("the spec is written before the answer"));
        let d = device(&spec, "k8s-1-3").expect("the answer's CDI device is in the spec");
        // The spec's edits are the answer's, one source.
        let env: BTreeSet<String> =
            d["containerEdits"]["env"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().into()).collect();
        let answered: BTreeSet<String> = c.envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(env, answered);
        let mounts: BTreeSet<(String, String)> = d["containerEdits"]["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["hostPath"].as_str().unwrap().into(), x["containerPath"].as_str().unwrap().into()))
            .collect();
        let answered: BTreeSet<(String, String)> =
            c.mounts.iter().map(|x| (x.host_path.clone(), x.container_path.clone())).collect();
        assert_eq!(mounts, answered);
        let nodes: Vec<&str> = c.devices.iter().map(|x| x.container_path.as_str()).collect();
        assert_eq!(node_paths(d), nodes);

        // Only nodes that exist on the host: no nvidia-uvm-tools here, GPU 1's node, not GPU 0's.
        assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"]);
        assert!(c.devices.iter().all(|x| Path::new(&x.host_path).starts_with(&dev)), "{:?}", c.devices);

        // The daemon's directory is mounted at its own path, so the variables name files in it.
        let region_dir = m.region().parent().unwrap().to_str().unwrap().to_string();
        let mount = c.mounts.iter().find(|x| x.container_path == region_dir).expect("the daemon's directory");
        assert_eq!((mount.host_path.as_str(), mount.read_only), (region_dir.as_str(), false));
        for var in ["TESSERA_REGION", "TESSERA_SOCKET"] {
            assert!(Path::new(&c.envs[var]).starts_with(&region_dir), "{var}={}", c.envs[var]);
        }
        assert!(!c.mounts.iter().any(|x| x.container_path == m.socket().to_str().unwrap()), "no single-file mount");

        // nvidia-uvm-tools appears: the next container gets it.
        std::fs::write(dev.join("nvidia-uvm-tools"), b"").unwrap();
        let response = plugin.allocate(allocate_request(&[format!("{}-0", uuids[0])])).await.expect("Allocate");
        let c = &response.into_inner().container_responses[0];
        let nodes: Vec<&str> = c.devices.iter().map(|x| x.container_path.as_str()).collect();
        assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0"]);
        let spec = valid(&std::fs::read_to_string(&spec_file).unwrap());
        assert_eq!(names(&spec), ["k8s-1-3", "k8s-0-0"], "the plugin's vGPUs, in the daemon's order");
    });

    // A removed vGPU (as garbage collection removes it) leaves the spec; the other stays.
    m.client().remove("k8s-1-3").expect("remove the vGPU");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let spec = valid(&std::fs::read_to_string(&spec_file).unwrap());
        if names(&spec) == ["k8s-0-0"] {
            break;
        }
        assert!(Instant::now() < deadline, "k8s-1-3 is still in the spec: {spec:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let listing: Vec<_> = std::fs::read_dir(&cdi_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listing, ["tessera-vgpu.json"], "one file per plugin, no temporary file left");

    // The last one removed: no file (runtimes refuse a spec without devices).
    m.client().remove("k8s-0-0").expect("remove the vGPU");
    let deadline = Instant::now() + Duration::from_secs(60);
    while spec_file.exists() {
        assert!(Instant::now() < deadline, "a spec without devices is left: {spec_file:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cdi_dir_that_cannot_be_made_is_refused_naming_it() {
    let m = Machine::new("k8s-cdi-options", "small");
    let dir = plugin_dir(&m);
    let stderr =
        m.fails(1, &["k8s", "device-plugin", "--dir", dir.to_str().unwrap(), "--cdi-dir", "/proc/no-such/cdi"]);
    assert!(stderr.contains("--cdi-dir /proc/no-such/cdi"), "{stderr}");
    let stderr = m.fails(1, &["k8s", "device-plugin", "--dir", dir.to_str().unwrap(), "--dev-dir", "dev"]);
    assert!(stderr.contains("--dev-dir"), "{stderr}");
}

#[test]
fn allocate_fails_and_keeps_no_vgpu_when_the_spec_cannot_be_written() {
    let mut m = Machine::new("k8s-cdi-unwritable", "small");
    m.start();
    let dir = plugin_dir(&m);
    // A directory where the spec file goes: it cannot be renamed over.
    let cdi_dir = m.file("cdi");
    std::fs::create_dir_all(cdi_dir.join("tessera-vgpu.json")).unwrap();
    let kubelet = Kubelet::start(&dir);
    let _plugin = start_plugin(&m, &dir, &["--cdi-dir", cdi_dir.to_str().unwrap()]);
    let (registration, _) = kubelet.wait_for_registration(Duration::from_secs(60));
    let uuid = uuids(&m).remove(0);
    runtime().block_on(async {
        let mut plugin = dial(&dir, &registration.endpoint).await;
        let status = plugin.allocate(allocate_request(&[format!("{uuid}-0")])).await.expect_err("no spec, no answer");
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        assert!(status.message().contains("CDI spec") && status.message().contains("tessera-vgpu.json"), "{status:?}");
    });
    assert!(m.client().list().expect("list").is_empty(), "the vGPU of a failed Allocate is left");
}
