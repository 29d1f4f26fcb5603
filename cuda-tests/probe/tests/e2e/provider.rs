//! The cluster provider library, libaccelerator_tessera.so (scheduler/provider), driven by C programs
//! compiled against its own headers on a simulated machine with several devices: every function of both
//! ABIs with its success and INVALID_PARAM cases, loading it as a hypervisor does (dlopen and dlsym of the
//! required names), calls from 8 threads at once, and a hard memory limit a worker sets for itself that
//! the shim then enforces; a limit the device has no room for.

use crate::common;

use common::cprog::{CBuild, Facts, workspace};
use common::tessera::Machine;
use common::{build_dir, shim_path};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

/// Three simulated devices, the middle one MIG-capable.
const DEVICES: &str = "small,a100,small";

/// The provider library cargo built.
fn library() -> PathBuf {
    let path = build_dir().join("libaccelerator_tessera.so");
    assert!(path.is_file(), "{} is missing: run `cargo build --release --workspace` first", path.display());
    path
}

/// `cuda-tests/c/<source>` compiled against the provider's headers and linked to the library.
fn program(source: &'static str) -> CBuild {
    let include = workspace().join("scheduler/provider/include");
    library();
    CBuild::program(source).flag(&format!("-I{}", include.display())).link_built("accelerator_tessera")
}

/// The daemon's vGPU names.
fn vgpus(m: &Machine) -> Vec<String> {
    m.client().list().expect("vgpu list").into_iter().map(|v| v.spec.name).collect()
}

#[test]
fn every_function_of_the_current_abi_on_a_multi_gpu_machine() {
    let mut m = Machine::new("provider-abi", DEVICES);
    m.start();
    let exe = program("provider_abi.c").build();
    let f = Facts::ok(m.sim.command_for(&exe, &["-"]));
    assert_eq!(f.get("devices"), "3");
    let devices = f.all("device");
    assert_eq!(devices.len(), 3, "{devices:?}");
    for (i, d) in devices.iter().enumerate() {
        let cols: Vec<&str> = d.split(' ').collect();
        assert_eq!(cols[0], i.to_string());
        assert!(cols[1].starts_with("GPU-") && cols[2].starts_with("/dev/nvidia"), "{d}");
        assert!(cols[5].parse::<f64>().unwrap() > 0.0, "maxTflops of {d}");
    }
    // Partitioning where MIG exists (the A100), soft and hard isolation and metrics everywhere.
    let caps = f.all("capabilities");
    assert!(caps[1].contains("partitioning=1") && caps[0].contains("partitioning=0"), "{caps:?}");
    assert!(caps.iter().all(|c| c.contains("soft=1 hard=1") && c.contains("metrics=1")), "{caps:?}");
    assert!(f.all("property").iter().any(|p| p.starts_with("1 computeCapability=8.0")), "{:?}", f.all("property"));
    // Every device against every other, each pair placed by NVML (no TOPO_LEVEL_UNKNOWN, 7).
    let topology = f.all("topology");
    assert_eq!(topology.len(), 6);
    assert!(topology.iter().all(|t| !t.ends_with(" 7")), "{topology:?}");
    // The limits made a vGPU for the process and told the shim to join it; shutdown removed it.
    let vgpu = f.get("vgpu");
    assert!(vgpu.starts_with("accel-") && vgpu.ends_with("-gpu0"), "{vgpu}");
    assert!(!vgpus(&m).contains(&vgpu.to_string()), "AccelShutdown left {vgpu}");
    // The program itself is in no vGPU (it never initialized CUDA): nothing of it to snapshot.
    assert_eq!(f.get("snapshot"), "2");
    // Tessera's accounting in the metrics, and what a container mounts.
    assert!(f.all("extra").iter().any(|e| e.ends_with("tessera.daemon 1.0")), "{:?}", f.all("extra"));
    let mounts = f.all("mount");
    assert!(mounts.iter().any(|l| l.contains("libtessera.so")), "{mounts:?}");
    assert!(
        mounts.iter().any(|l| l.contains("libcuda.so.1")) && mounts.iter().any(|l| l.contains("libnvidia-ml.so.1"))
    );
    assert!(f.get("log_lines").parse::<u32>().unwrap() > 0);
    assert!(f.get("checks").parse::<u32>().unwrap() >= 45, "{}", f.get("checks"));
}

#[test]
fn without_a_daemon_devices_answer_and_limits_fail_with_a_clear_code() {
    let m = Machine::new("provider-nodaemon", DEVICES);
    let exe = program("provider_abi.c").build();
    let f = Facts::ok(m.sim.command_for(&exe, &["-", "nodaemon"]));
    assert_eq!(f.get("devices"), "3");
    assert!(f.all("extra").iter().any(|e| e.ends_with("tessera.daemon 0.0")));
}

#[test]
fn every_function_of_the_earlier_abi() {
    let mut m = Machine::new("provider-legacy", DEVICES);
    m.start();
    let exe = program("provider_legacy.c").build();
    let f = Facts::ok(m.sim.command_for(&exe, &["legacy-w1"]));
    assert_eq!(f.get("devices"), "3");
    assert!(f.get("topology").starts_with("3 PCIe GPU-"), "{}", f.get("topology"));
    assert_eq!(f.get("assign_without_mig"), "0");
    assert_eq!(f.get("snapshot"), "2");
    // The worker's vGPU carries its limits.
    let v = m.client().show("legacy-w1").expect("the worker's vGPU");
    assert_eq!((v.spec.memory, v.spec.share, v.spec.device), (128 << 20, 30, 0));
}

#[test]
fn a_hypervisor_loads_it_by_path_and_resolves_every_name() {
    let m = Machine::new("provider-loader", DEVICES);
    let exe = CBuild::program("provider_loader.c").build();
    let lib = library();
    let f = Facts::ok(m.sim.command_for(&exe, &[lib.to_str().unwrap()]));
    assert_eq!(f.get("current_resolved"), "14");
    assert_eq!(f.get("legacy_resolved"), "14");
    assert_eq!(f.get("init"), "0");
    assert_eq!(f.get("count"), "0 3");
    assert_eq!(f.get("legacy_count"), "0 3");
    assert_eq!(f.get("shutdown"), "0");
}

#[test]
fn eight_threads_call_it_at_once() {
    let mut m = Machine::new("provider-threads", DEVICES);
    m.start();
    let exe = program("provider_threads.c").flag("-pthread").build();
    let f = Facts::ok(m.sim.command_for(&exe, &["10"]));
    assert_eq!(f.get("failures"), "0");
    assert!(f.get("calls").parse::<u32>().unwrap() >= 8 * 10 * 7);
}

/// A limit the device has no room for is `ACCEL_ERROR_RESOURCE_EXHAUSTED` (4), told by the daemon's error
/// code (`resource_exhausted`), not by its message; a bad value stays `INVALID_PARAM` and one that fits
/// succeeds.
#[test]
fn a_limit_the_device_has_no_room_for_is_resource_exhausted() {
    let mut m = Machine::new("provider-full", DEVICES);
    m.start();
    m.ok(&["vgpu", "create", "others", "--device", "0", "--memory", "1GiB", "--share", "80"]);
    m.ok(&["vgpu", "create", "worker", "--device", "0", "--memory", "1GiB", "--share", "10"]);
    let exe = program("provider_full.c").build();
    let run = |share: &str, fits: &str| {
        let mut cmd = m.sim.command_for(&exe, &[share, fits]);
        cmd.env("TESSERA_VGPU", "worker");
        Facts::ok(cmd)
    };
    let f = run("30", "20");
    assert_eq!(f.get("share"), "4", "shares 80 + 30 > 100: ACCEL_ERROR_RESOURCE_EXHAUSTED\n{}", f.stderr);
    assert_eq!(f.get("memory"), "4", "1 GiB + the whole device: ACCEL_ERROR_RESOURCE_EXHAUSTED\n{}", f.stderr);
    assert_eq!(f.get("fits"), "0", "80 + 20 fits\n{}", f.stderr);
    assert_eq!(m.client().show("worker").expect("show").spec.share, 20);
    let f = run("101", "20");
    assert_eq!(f.get("share"), "1", "a share over 100% is ACCEL_ERROR_INVALID_PARAM\n{}", f.stderr);
}

#[test]
fn a_worker_s_own_memory_limit_is_enforced_by_the_shim() {
    let mut m = Machine::new("provider-limit", DEVICES);
    m.start();
    let exe = program("provider_limit.c").link_driver().build();
    let mut cmd = m.sim.command_for(&exe, &["512"]);
    cmd.env("LD_PRELOAD", shim_path()).env("TESSERA_LOG", "info");
    let f = Facts::ok(cmd);
    assert_eq!(f.get("limit"), "0");
    assert_eq!(f.get("within"), "0", "half the limit is allocated");
    assert_eq!(f.get("beyond"), "2", "beyond the limit is CUDA_ERROR_OUT_OF_MEMORY\n{}", f.stderr);
    let vgpu = f.get("vgpu");
    let v = m.client().show(vgpu).expect("the worker's vGPU stays until AccelShutdown");
    assert_eq!(v.spec.memory, 512 << 20);
}

#[test]
fn snapshot_and_resume_of_a_worker_and_of_a_device() {
    let mut m = Machine::new("provider-snapshot", "small");
    m.configure(|sim| sim.with("SIMGPU_MEMORY", "1GiB").with("SIMGPU_CONTEXT_MEMORY", "32MiB"));
    m.start();
    m.ok(&["vgpu", "create", "snap", "--device", "0", "--memory", "512MiB", "--share", "40"]);
    let trigger = m.file("go");
    let args = ["softmem", "--mib", "64", "--free-large", "0", "--free-small", "0", "--rounds", "1", "--wait-file"];
    let mut tenant = m.spawn_tenant("snap", &[&args[..], &[trigger.to_str().unwrap()]].concat());
    let mut lines = BufReader::new(tenant.stdout.take().unwrap()).lines();
    let ready = lines.next().expect("the tenant says it is ready").unwrap();
    let v: serde_json::Value = serde_json::from_str(&ready).unwrap();
    let pid = v["pid"].as_u64().expect("its pid").to_string();
    let exe = program("provider_snapshot.c").build();
    let run = |args: &[&str]| {
        let f = Facts::ok(m.sim.command_for(&exe, args));
        eprintln!("provider_snapshot {args:?}: {:?}", f.all("log"));
        f.get("result").to_string()
    };

    assert_eq!(run(&["snapshot", &pid]), "0");
    assert_eq!(m.show("snap")["snapshotted"], true);
    assert_eq!(run(&["snapshot", "1"]), "2", "pid 1 is in no vGPU: NOT_FOUND");
    assert_eq!(run(&["resume", &pid]), "0");
    assert_eq!(m.show("snap")["snapshotted"], false);
    assert_eq!(run(&["snapshot-device"]), "0");
    assert_eq!(
        (m.show("snap")["snapshotted"].clone(), m.show("snap")["suspended"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(run(&["resume-device"]), "0");
    assert_eq!(m.show("snap")["snapshotted"], false);
    // Every byte came back: the tenant's round verifies its buffers.
    std::fs::write(&trigger, b"go").unwrap();
    let round: serde_json::Value = serde_json::from_str(&lines.next().expect("a round").unwrap()).unwrap();
    assert_eq!(round["verified"]["mismatched_words"], 0, "{round}");
    assert!(round["verified"]["bytes"].as_u64().unwrap() > 0, "{round}");
    assert!(tenant.wait().unwrap().success());
}

#[test]
fn a_partition_is_a_mig_instance_on_the_device_with_mig_mode_on() {
    let mut m = Machine::new("provider-mig", DEVICES);
    m.configure(|sim| sim.with("SIMGPU_MIG", "1"));
    m.start();
    let exe = program("provider_abi.c").build();
    let f = Facts::ok(m.sim.command_for(&exe, &["1g.5gb"]));
    assert!(f.all("property").contains(&"1 migMode=enabled"), "{:?}", f.all("property"));
    let partition = f.get("partition");
    assert!(partition.starts_with("MIG-"), "{partition}");
    let env = f.all("partition_env");
    assert!(env.contains(&format!("CUDA_VISIBLE_DEVICES={partition}").as_str()), "{env:?}");
    // The devices without MIG mode refused (checked by the program), and the instance is gone again.
    assert_eq!(f.all("partition_without_mig").len(), 2);
}
