//! GPUs for virtual machines, end to end: a private daemon on the simulated GPU, run with the simulated
//! kernel (`libsimsysfs.so` preloaded, `SIMSYSFS_ROOT` = `TESSERA_SYSFS_ROOT` = a tree built from the
//! `simsysfs` scenarios), driven through the `tessera devices` / `tessera mdev` commands and the API. The
//! product's own sysfs-writing code does every write; the simulated kernel reacts as Linux does.

use crate::common;

use common::tessera::Machine;
use serde_json::Value;
use simsysfs::{Fault, SimSysfs, scenarios};
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tessera_client::ErrorCode;
use tessera_client::local::LocalDaemon;

const NOBODY: u32 = 65534;

/// A machine whose daemon and CLI see the simulated sysfs `tree` and the fixture `pci.ids`.
fn machine(tag: &str, devices: &str, tree: &SimSysfs) -> Machine {
    let mut m = Machine::new(&format!("pt-{tag}"), devices);
    let root = tree.root.to_string_lossy().into_owned();
    m.configure(|sim| {
        sim.with("LD_PRELOAD", &simsysfs::preload_library().to_string_lossy())
            .with("SIMSYSFS_ROOT", &root)
            .with("TESSERA_SYSFS_ROOT", &root)
            .with("TESSERA_PCI_IDS", &simsysfs::pci_ids_fixture().to_string_lossy())
    });
    m
}

/// A fresh directory for a tree, removed when the test's [`Scratch`] drops.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tessera-pt-sysfs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tessera devices --json`.
fn devices(m: &Machine) -> Vec<Value> {
    serde_json::from_str::<Value>(&m.ok(&["devices", "--json"])).unwrap().as_array().unwrap().clone()
}

/// The GPU at `address` in a listing.
fn gpu<'a>(list: &'a [Value], address: &str) -> &'a Value {
    list.iter().find(|g| g["address"] == address).unwrap_or_else(|| panic!("no GPU {address} in {list:?}"))
}

/// The driver of `address` in the tree.
fn driver(tree: &SimSysfs, address: &str) -> Option<String> {
    let link = tree.root.join("bus/pci/devices").join(address).join("driver");
    std::fs::read_link(link).ok().map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
}

fn differences(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} -> {:?}", a.get(k), b.get(k)))
        .collect()
}

fn assert_same_tree(before: &BTreeMap<String, String>, tree: &SimSysfs, what: &str) {
    let after = tree.listing();
    assert!(before == &after, "{what}: the tree differs: {:#?}", differences(before, &after));
}

#[test]
fn two_gpus_are_listed_and_a_bind_unbind_round_trip_leaves_the_tree_as_it_was() {
    let dir = Scratch::new("two");
    let tree = scenarios::two_gpus(&dir.0).unwrap();
    let mut m = machine("two", "small", &tree);
    m.start();
    let list = devices(&m);
    assert_eq!(list.len(), 2, "{list:?}");
    let g = gpu(&list, "0000:10:00.0");
    assert_eq!(g["vendor"], 0x10de);
    assert_eq!(g["vendor_name"], "NVIDIA Corporation");
    assert_eq!(g["device_name"], "GH100 [H100 SXM5 80GB]");
    assert_eq!(g["subsystem_name"], "H100 SXM5 80GB");
    assert_eq!(g["class_name"], "3D controller");
    assert_eq!(
        (&g["driver"], &g["numa_node"], &g["iommu_group"]),
        (&Value::from("nvidia"), &Value::from(0), &Value::from(16))
    );
    assert_eq!(g["group"].as_array().unwrap().len(), 1, "alone in its group");
    assert_eq!(g["mode"], "driver");
    assert_eq!(gpu(&list, "0000:11:00.0")["numa_node"], 1);
    let table = m.ok(&["devices"]);
    for want in [
        "0000:10:00.0",
        "0000:11:00.0",
        "10de:2330 NVIDIA Corporation GH100 [H100 SXM5 80GB]",
        "16: 0000:10:00.0 (nvidia)",
        "driver",
    ] {
        assert!(table.contains(want), "{want:?} in\n{table}");
    }

    let before = tree.listing();
    let out = m.ok(&["devices", "bind-vfio", "0000:10:00.0"]);
    assert!(out.contains("0000:10:00.0: nvidia -> vfio-pci"), "{out}");
    assert_eq!(driver(&tree, "0000:10:00.0").as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&tree, "0000:11:00.0").as_deref(), Some("nvidia"), "the other group is left alone");
    let list = devices(&m);
    assert_eq!(
        (&gpu(&list, "0000:10:00.0")["mode"], &gpu(&list, "0000:10:00.0")["driver_override"]),
        (&Value::from("vfio"), &Value::from("vfio-pci"))
    );
    assert_eq!(gpu(&list, "0000:11:00.0")["mode"], "driver");
    // Binding again changes nothing.
    m.ok(&["devices", "bind-vfio", "10:00.0"]);
    let out = m.ok(&["devices", "unbind-vfio", "0000:10:00.0"]);
    assert!(out.contains("0000:10:00.0: vfio-pci -> nvidia"), "{out}");
    assert_same_tree(&before, &tree, "after bind + unbind");
    let e = m.fails(1, &["devices", "unbind-vfio", "0000:10:00.0"]);
    assert!(e.contains("is not bound to vfio-pci"), "{e}");
    assert!(!m.dir.join("state/vfio-journal.json").exists(), "no journal is left");
}

#[test]
fn a_gpu_and_its_audio_function_move_together_and_come_back_together() {
    let dir = Scratch::new("audio");
    let tree = scenarios::gpu_with_audio(&dir.0).unwrap();
    let mut m = machine("audio", "small", &tree);
    m.start();
    let list = devices(&m);
    assert_eq!(list.len(), 1, "the audio function is no GPU: {list:?}");
    let members: Vec<(String, String)> = list[0]["group"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["address"].as_str().unwrap().into(), f["driver"].as_str().unwrap().into()))
        .collect();
    assert_eq!(members, [("0000:10:00.0".into(), "nvidia".into()), ("0000:10:00.1".into(), "snd_hda_intel".into())]);
    assert_eq!(list[0]["class_name"], "VGA compatible controller");

    let before = tree.listing();
    let report = m.client().vfio("0000:10:00.0", true).unwrap();
    assert_eq!(report.iommu_group, 20);
    assert_eq!(driver(&tree, "0000:10:00.0").as_deref(), Some("vfio-pci"));
    assert_eq!(driver(&tree, "0000:10:00.1").as_deref(), Some("vfio-pci"), "the whole group moves");
    m.client().vfio("0000:10:00.0", false).unwrap();
    assert_eq!(driver(&tree, "0000:10:00.1").as_deref(), Some("snd_hda_intel"));
    assert_same_tree(&before, &tree, "after the group's round trip");
}

#[test]
fn mdevs_are_created_listed_refused_while_in_use_removed_and_orphans_reconciled() {
    let dir = Scratch::new("sriov");
    let tree = scenarios::sriov_gpu(&dir.0).unwrap();
    let mut m = machine("sriov", "small", &tree);
    m.start();
    let list = devices(&m);
    let pf = gpu(&list, "0000:41:00.0");
    assert_eq!(pf["mode"], "mdev-host");
    assert_eq!(pf["vfs"], serde_json::json!(scenarios::SRIOV_VFS));
    let vf = gpu(&list, "0000:41:00.4");
    assert_eq!((&vf["physfn"], vf["mdev_types"].as_array().unwrap().len()), (&Value::from("0000:41:00.0"), 3));
    assert!(m.ok(&["devices"]).contains("PF, 4 VF(s)"));

    let types: Vec<Value> = serde_json::from_str(&m.ok(&["mdev", "types", "--json"])).unwrap();
    assert_eq!(types.len(), 12, "3 types on each of 4 VFs");
    let free = |m: &Machine| {
        let types = m.client().mdev_types().unwrap();
        types.iter().find(|t| t.parent == "0000:41:00.4" && t.type_id == "nvidia-471").unwrap().available_instances
    };
    assert_eq!(free(&m), 1);
    assert!(m.ok(&["mdev", "types"]).contains("GRID A100-4C"));

    let uuid = "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45";
    let out = m.ok(&["mdev", "create", "--parent", "0000:41:00.4", "--type", "nvidia-471", "--uuid", uuid]);
    assert!(out.contains(uuid), "{out}");
    assert_eq!(free(&m), 0, "create lowers available_instances");
    assert!(tree.root.join("bus/mdev/devices").join(uuid).exists());
    let mdevs = m.client().mdev_list().unwrap();
    assert_eq!(mdevs.len(), 1);
    assert_eq!(
        (mdevs[0].parent.as_str(), mdevs[0].type_id.as_str(), mdevs[0].tessera_created, mdevs[0].in_use),
        ("0000:41:00.4", "nvidia-471", true, false)
    );
    assert!(m.ok(&["mdev", "list"]).contains(uuid));
    let e = m.fails(1, &["mdev", "create", "--parent", "0000:41:00.4", "--type", "nvidia-471"]);
    assert!(e.contains("no instance available"), "{e}");
    // A UUID in use is refused before anything is recorded or written.
    let e = m.fails(1, &["mdev", "create", "--parent", "0000:41:00.5", "--type", "nvidia-472", "--uuid", uuid]);
    assert!(e.contains("exists already"), "{e}");
    // The kernel refusing the create leaves no record behind (the record is made first, then dropped).
    tree.inject("bus/pci/devices/0000:41:00.5/mdev_supported_types/nvidia-472/create", Fault::Errno(libc::EIO))
        .unwrap();
    let e = m.fails(1, &["mdev", "create", "--parent", "0000:41:00.5", "--type", "nvidia-472"]);
    assert!(e.contains("create"), "{e}");
    assert_eq!(m.client().mdev_list().unwrap().len(), 1, "only the first mdev");
    let records = std::fs::read_to_string(m.dir.join("state/mdevs.json")).unwrap();
    assert_eq!(records.matches("\"uuid\"").count(), 1, "one record: {records}");

    // In use (a VM's VFIO holds it): not removed.
    tree.set_mdev_in_use(uuid, true).unwrap();
    let e = m.fails(1, &["mdev", "rm", uuid]);
    assert!(e.contains("in use"), "{e}");
    assert!(m.client().mdev_list().unwrap()[0].in_use);
    let report = m.client().reconcile().unwrap();
    assert!(report.orphans_removed.is_empty(), "an mdev in use is no orphan: {report:?}");
    tree.set_mdev_in_use(uuid, false).unwrap();
    m.ok(&["mdev", "rm", uuid]);
    assert_eq!(free(&m), 1, "remove raises available_instances");
    assert!(m.client().mdev_list().unwrap().is_empty());

    // An orphan (created by Tessera, used by nothing) is removed by reconcile...
    let orphan = m.client().mdev_create("0000:41:00.5", "nvidia-472", None).unwrap();
    let out = m.ok(&["devices", "reconcile"]);
    assert!(out.contains("removed orphan mdev(s)") && out.contains(&orphan.uuid), "{out}");
    assert!(!tree.root.join("bus/mdev/devices").join(&orphan.uuid).exists());
    assert_eq!(m.ok(&["devices", "reconcile"]), "nothing to reconcile\n");

    // ... and at the daemon's start; a record whose mdev vanished is dropped.
    let orphan = m.client().mdev_create("0000:41:00.6", "nvidia-474", None).unwrap();
    let gone = m.client().mdev_create("0000:41:00.7", "nvidia-474", None).unwrap();
    let _ = m.stop_daemon();
    // Removed behind Tessera's back (by the simulated kernel, as another tool would).
    let remove = tree.root.join("bus/mdev/devices").join(&gone.uuid).join("remove");
    let status = m.sim.command_for("sh", &["-c", "printf 1 > \"$0\"", remove.to_str().unwrap()]).status().unwrap();
    assert!(status.success());
    assert!(!tree.root.join("bus/mdev/devices").join(&gone.uuid).exists());
    m.start();
    assert!(!tree.root.join("bus/mdev/devices").join(&orphan.uuid).exists(), "the daemon's start reconciled it");
    let records = std::fs::read_to_string(m.dir.join("state/mdevs.json")).unwrap();
    assert!(!records.contains(&orphan.uuid) && !records.contains(&gone.uuid), "{records}");
}

#[test]
fn a_gpu_tessera_tenants_use_is_shown_shared_and_never_bound() {
    let dir = Scratch::new("tenants");
    let tree = scenarios::simgpu_host(&dir.0, 1).unwrap();
    let mut m = machine("tenants", "small", &tree);
    m.start();
    m.ok(&["vgpu", "create", "team-a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
    // The daemon learns the device's bus id from the driver once its sensors are open.
    let deadline = Instant::now() + Duration::from_secs(30);
    let shared = loop {
        let list = devices(&m);
        let g = gpu(&list, "0000:10:00.0").clone();
        if g["mode"] == "tessera-shared" || Instant::now() > deadline {
            break g;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shared["mode"], "tessera-shared", "{shared}");
    assert_eq!(shared["tessera_device"], 0);
    assert!(shared["mode_detail"].as_str().unwrap().contains("team-a"), "{shared}");
    let stats = m.client().stats(None).unwrap();
    assert_eq!(stats.devices[0].pci_bus_id.as_deref(), Some("0000:10:00.0"));

    let before = tree.listing();
    let e = m.fails(1, &["devices", "bind-vfio", "0000:10:00.0"]);
    assert!(e.contains("used by Tessera") && e.contains("team-a"), "{e}");
    let e = m.client().vfio("0000:10:00.0", true).unwrap_err();
    assert_eq!(e.code, ErrorCode::InUse);
    assert_same_tree(&before, &tree, "a refused bind");

    // A process attached to the vGPU is named too.
    let tenant = m.saturate("team-a", "60", None);
    let deadline = Instant::now() + Duration::from_secs(60);
    let detail = loop {
        let detail = gpu(&devices(&m), "0000:10:00.0")["mode_detail"].as_str().unwrap_or("").to_string();
        if detail.contains("attached process") || Instant::now() > deadline {
            break detail;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(detail.contains("vGPU(s) team-a; attached process(es) "), "{detail}");
    let e = m.fails(1, &["devices", "bind-vfio", "0000:10:00.0"]);
    assert!(e.contains("attached process"), "{e}");
    drop(tenant);
    assert_same_tree(&before, &tree, "refused binds");

    // Once the vGPU is gone the GPU may go to a VM.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !m.tessera(&["vgpu", "rm", "team-a"]).status.success() {
        assert!(Instant::now() < deadline, "the dead tenant was never reclaimed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(gpu(&devices(&m), "0000:10:00.0")["mode"], "driver");
    m.ok(&["devices", "bind-vfio", "0000:10:00.0"]);
    m.ok(&["devices", "unbind-vfio", "0000:10:00.0"]);
    assert_same_tree(&before, &tree, "after the round trip");
}

#[test]
fn a_gpu_in_mig_mode_is_shown_as_mig() {
    let dir = Scratch::new("mig");
    let tree = scenarios::simgpu_host(&dir.0, 2).unwrap();
    let mut m = machine("mig", "h100,small", &tree);
    m.configure(|sim| sim.with("SIMGPU_MIG", "0"));
    m.start();
    // The daemon reads the MIG mode with the devices' other figures once its sensors are open.
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        let list = devices(&m);
        if gpu(&list, "0000:10:00.0")["mode"] == "mig" || Instant::now() > deadline {
            break list;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(gpu(&list, "0000:10:00.0")["mode"], "mig", "{list:?}");
    assert_eq!(gpu(&list, "0000:10:00.0")["tessera_device"], 0);
    assert_eq!(gpu(&list, "0000:11:00.0")["mode"], "driver", "MIG is off on device 1");
}

#[test]
fn an_interrupted_bind_is_rolled_back_and_a_crash_midway_is_undone_at_restart() {
    let dir = Scratch::new("interrupt");
    let tree = scenarios::gpu_with_audio(&dir.0).unwrap();
    let mut m = machine("interrupt", "small", &tree);
    m.start();
    let before = tree.listing();
    // The kernel refuses to unbind the audio function once the GPU is already on vfio-pci: the GPU comes back.
    tree.inject("bus/pci/drivers/snd_hda_intel/unbind", Fault::Errno(libc::EIO)).unwrap();
    let e = m.fails(1, &["devices", "bind-vfio", "0000:10:00.0"]);
    assert!(e.contains("EIO") && e.contains("snd_hda_intel/unbind") && e.contains("put back as it was"), "{e}");
    assert_same_tree(&before, &tree, "after a bind failing at the second function");
    // The kernel refuses the first bind to vfio-pci (the GPU is unbound and overridden by then).
    tree.inject("bus/pci/drivers/vfio-pci/bind", Fault::Errno(libc::ENODEV)).unwrap();
    let e = m.fails(1, &["devices", "bind-vfio", "0000:10:00.0"]);
    assert!(e.contains("ENODEV") && e.contains("put back as it was"), "{e}");
    assert_same_tree(&before, &tree, "after a bind failing at vfio-pci's bind");

    // The daemon is killed at the write binding to vfio-pci (after the unbind and the override).
    tree.inject("bus/pci/drivers/vfio-pci/bind", Fault::Kill).unwrap();
    let e = m.client().vfio("0000:10:00.0", true).unwrap_err();
    assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
    assert_ne!(tree.listing(), before, "the kill left the group half moved");
    assert!(m.dir.join("state/vfio-journal.json").exists(), "the journal was written before the first write");
    m.kill_daemon();
    m.start();
    assert_same_tree(&before, &tree, "after the restart's reconcile");
    assert!(!m.dir.join("state/vfio-journal.json").exists());
}

#[test]
fn without_privilege_nothing_is_written_and_the_message_says_root_is_needed() {
    let dir = Scratch::new("nobody");
    let tree = scenarios::sriov_gpu(&dir.0).unwrap();
    let m = machine("nobody", "small", &tree);
    std::os::unix::fs::chown(&m.dir, Some(NOBODY), Some(NOBODY)).unwrap();
    let as_nobody = |cmd: &mut std::process::Command| {
        cmd.uid(NOBODY).gid(NOBODY).env("SIMGPU_STATE", m.dir.join("simgpu.state"));
    };
    let mut cmd = m.command(&["daemon"]);
    as_nobody(&mut cmd);
    cmd.stderr(std::process::Stdio::piped());
    let daemon = LocalDaemon::start(cmd, &m.socket(), Duration::from_secs(20), || Ok(()))
        .unwrap_or_else(|e| panic!("daemon as nobody: {e}"));
    let before = tree.listing();
    let run = |args: &[&str]| {
        let mut cmd = m.command(args);
        as_nobody(&mut cmd);
        cmd.output().unwrap()
    };
    let listed = run(&["devices", "--json"]);
    assert!(listed.status.success(), "reading needs no privilege: {}", String::from_utf8_lossy(&listed.stderr));
    for args in [
        &["devices", "bind-vfio", "0000:41:00.0"][..],
        &["mdev", "create", "--parent", "0000:41:00.4", "--type", "nvidia-471"],
    ] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("needs root") && stderr.contains("nothing done"), "{args:?}: {stderr}");
    }
    assert_same_tree(&before, &tree, "refused for lack of privilege");
    drop(daemon);
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = Scratch::new("bad");
    let tree = scenarios::sriov_gpu(&dir.0).unwrap();
    let mut m = machine("bad", "small", &tree);
    let e = m.fails(1, &["devices"]);
    assert!(e.contains("no Tessera daemon"), "{e}");
    m.start();
    let before = tree.listing();
    let e = m.fails(2, &["devices", "bind-vfio", "10:00"]);
    assert!(e.contains("is not a PCI address"), "{e}");
    let e = m.fails(1, &["devices", "bind-vfio", "0000:99:00.0"]);
    assert!(e.contains("no PCI device 0000:99:00.0"), "{e}");
    let e = m.fails(1, &["mdev", "create", "--parent", "0000:41:00.4", "--type", "nvidia-999"]);
    assert!(e.contains("no mdev type \"nvidia-999\"") && e.contains("nvidia-471"), "{e}");
    let e = m.fails(2, &["mdev", "rm", "not-a-uuid"]);
    assert!(e.contains("is not a UUID"), "{e}");
    let e = m.fails(1, &["mdev", "rm", "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45"]);
    assert!(e.contains("no mdev"), "{e}");
    // The API checks what the CLI checks.
    let e = m.client().vfio("bogus", true).unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid);
    let e = m.client().mdev_create("0000:41:00.4", "nvidia-471", Some("../../etc")).unwrap_err();
    assert!(e.message.contains("is not a UUID"), "{e}");
    assert_same_tree(&before, &tree, "bad input");
    // A corrupt record file is named.
    std::fs::write(m.dir.join("state/mdevs.json"), "{ nope").unwrap();
    let e = m.fails(1, &["mdev", "list"]);
    assert!(e.contains("mdevs.json") && e.contains("move it away"), "{e}");
}
