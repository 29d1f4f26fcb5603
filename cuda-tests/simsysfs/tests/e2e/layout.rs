//! The builder lays out each scenario as Linux shows it (no preload library involved).

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{exists, fresh_root, link, read};
use simsysfs::{MdevTypeSpec, PciSpec, SimSysfs, scenarios};

fn mode(root: &std::path::Path, rel: &str) -> u32 {
    std::fs::metadata(root.join(rel)).unwrap().permissions().mode() & 0o7777
}

#[test]
fn skeleton_has_the_bus_drivers_and_write_only_attributes() {
    let root = fresh_root("layout-skeleton");
    SimSysfs::new(&root).unwrap();
    for dir in ["bus/pci/devices", "kernel/iommu_groups", "class/mdev_bus", "bus/mdev/devices", "devices/pci0000:00"] {
        assert!(root.join(dir).is_dir(), "{dir}");
    }
    assert_eq!(mode(&root, "bus/pci/drivers_probe"), 0o200);
    for driver in ["nvidia", "vfio-pci", "snd_hda_intel", "nouveau"] {
        for attr in ["bind", "unbind", "new_id"] {
            assert_eq!(mode(&root, &format!("bus/pci/drivers/{driver}/{attr}")), 0o200, "{driver}/{attr}");
        }
    }
}

#[test]
fn two_gpus_are_bound_to_nvidia_in_separate_groups() {
    let root = fresh_root("layout-two");
    scenarios::two_gpus(&root).unwrap();
    for (i, addr) in ["0000:10:00.0", "0000:11:00.0"].into_iter().enumerate() {
        let dev = format!("devices/pci0000:00/{addr}");
        assert_eq!(read(&root, &format!("{dev}/vendor")), "0x10de\n");
        assert_eq!(read(&root, &format!("{dev}/device")), "0x2330\n");
        assert_eq!(read(&root, &format!("{dev}/class")), "0x030200\n");
        assert_eq!(read(&root, &format!("{dev}/subsystem_vendor")), "0x10de\n");
        assert_eq!(read(&root, &format!("{dev}/subsystem_device")), "0x16c1\n");
        assert_eq!(read(&root, &format!("{dev}/numa_node")), format!("{i}\n"));
        assert_eq!(read(&root, &format!("{dev}/driver_override")), "(null)\n");
        assert_eq!(mode(&root, &format!("{dev}/vendor")), 0o444);
        assert_eq!(mode(&root, &format!("{dev}/driver_override")), 0o644);
        let group = 16 + i;
        assert_eq!(link(&root, &format!("{dev}/iommu_group")), Some(format!("../../../kernel/iommu_groups/{group}")));
        assert_eq!(link(&root, &format!("{dev}/driver")).as_deref(), Some("../../../bus/pci/drivers/nvidia"));
        assert_eq!(link(&root, &format!("bus/pci/devices/{addr}")), Some(format!("../../../{dev}")));
        assert_eq!(link(&root, &format!("bus/pci/drivers/nvidia/{addr}")), Some(format!("../../../../{dev}")));
        assert_eq!(
            link(&root, &format!("kernel/iommu_groups/{group}/devices/{addr}")),
            Some(format!("../../../../{dev}"))
        );
        // The links resolve (relative targets are right, not just well-formed).
        assert!(root.join(format!("bus/pci/devices/{addr}/iommu_group/devices/{addr}/vendor")).is_file());
        assert!(root.join(format!("bus/pci/devices/{addr}/driver/{addr}/driver/bind")).is_file());
    }
    let group: Vec<_> = std::fs::read_dir(root.join("kernel/iommu_groups/16/devices")).unwrap().collect();
    assert_eq!(group.len(), 1);
}

#[test]
fn gpu_with_audio_shares_one_group() {
    let root = fresh_root("layout-audio");
    scenarios::gpu_with_audio(&root).unwrap();
    let mut members: Vec<String> = std::fs::read_dir(root.join("kernel/iommu_groups/20/devices"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    members.sort();
    assert_eq!(members, ["0000:10:00.0", "0000:10:00.1"]);
    assert_eq!(read(&root, "bus/pci/devices/0000:10:00.0/class"), "0x030000\n");
    assert_eq!(read(&root, "bus/pci/devices/0000:10:00.1/class"), "0x040300\n");
    assert_eq!(read(&root, "bus/pci/devices/0000:10:00.1/device"), "0x1aef\n");
    assert_eq!(read(&root, "bus/pci/devices/0000:10:00.1/numa_node"), "-1\n");
    assert_eq!(
        link(&root, "bus/pci/devices/0000:10:00.1/driver").as_deref(),
        Some("../../../bus/pci/drivers/snd_hda_intel")
    );
}

#[test]
fn sriov_gpu_has_vfs_with_mdev_types() {
    let root = fresh_root("layout-sriov");
    scenarios::sriov_gpu(&root).unwrap();
    let pf = "devices/pci0000:00/0000:41:00.0";
    assert_eq!(read(&root, &format!("{pf}/sriov_totalvfs")), "16\n");
    assert_eq!(read(&root, &format!("{pf}/sriov_numvfs")), "4\n");
    for (i, vf) in scenarios::SRIOV_VFS.into_iter().enumerate() {
        assert_eq!(link(&root, &format!("{pf}/virtfn{i}")), Some(format!("../{vf}")));
        let dev = format!("devices/pci0000:00/{vf}");
        assert_eq!(link(&root, &format!("{dev}/physfn")).as_deref(), Some("../0000:41:00.0"));
        assert_eq!(link(&root, &format!("class/mdev_bus/{vf}")), Some(format!("../../{dev}")));
        assert!(root.join(format!("class/mdev_bus/{vf}/physfn/sriov_numvfs")).is_file());
        for t in scenarios::sriov_types() {
            let ty = format!("{dev}/mdev_supported_types/{}", t.type_id);
            assert_eq!(read(&root, &format!("{ty}/name")), format!("{}\n", t.name));
            assert_eq!(read(&root, &format!("{ty}/available_instances")), "1\n");
            assert_eq!(read(&root, &format!("{ty}/device_api")), "vfio-pci\n");
            assert!(read(&root, &format!("{ty}/description")).contains("framebuffer="));
            assert_eq!(mode(&root, &format!("{ty}/create")), 0o200);
            assert!(root.join(format!("{ty}/devices")).is_dir());
        }
    }
    assert!(!exists(&root, "class/mdev_bus/0000:41:00.0"), "the PF itself is no mdev parent");
}

#[test]
fn simgpu_host_matches_simgpu_bus_ids() {
    let root = fresh_root("layout-simgpu");
    scenarios::simgpu_host(&root, 3).unwrap();
    let lookup = |k: &str| (k == "SIMGPU_DEVICES").then(|| "h100,h100,h100".to_string());
    let config = simgpu_host::config::Config::from_lookup(lookup).unwrap();
    for d in &config.devices {
        // NVML prints `00000000:10:00.0`; sysfs names it `0000:10:00.0`.
        let bus_id = d.pci_bus_id().to_lowercase();
        let addr = &bus_id[4..];
        assert_eq!(read(&root, &format!("bus/pci/devices/{addr}/device")), "0x2330\n", "ordinal {}", d.ordinal);
        assert_eq!(
            link(&root, &format!("bus/pci/devices/{addr}/iommu_group")),
            Some(format!("../../../kernel/iommu_groups/{}", 16 + d.ordinal))
        );
    }
    assert!(!exists(&root, "bus/pci/devices/0000:13:00.0"));
}

#[test]
fn builder_refuses_bad_input_and_listing_shows_links_and_dirs() {
    let root = fresh_root("layout-builder");
    let sys = SimSysfs::new(&root).unwrap();
    assert!(sys.add_pci(&PciSpec::nvidia_gpu("0000:0A:00.0", 0x2330, 1)).is_err(), "uppercase");
    assert!(sys.add_pci(&PciSpec::nvidia_gpu("10:00.0", 0x2330, 1)).is_err(), "no domain");
    let t = MdevTypeSpec {
        type_id: "nvidia-1".into(),
        name: "x".into(),
        description: "y".into(),
        available_instances: 2,
        device_api: "vfio-pci".into(),
    };
    assert!(sys.add_mdev_type("0000:99:00.0", &t).is_err(), "unknown parent");
    sys.add_pci(&PciSpec::nvidia_gpu("0000:10:00.0", 0x2330, 1)).unwrap();
    let listing = sys.listing();
    assert_eq!(listing["devices/pci0000:00/0000:10:00.0"], "<dir>");
    assert_eq!(listing["devices/pci0000:00/0000:10:00.0/vendor"], "0x10de\n");
    assert_eq!(listing["bus/pci/devices/0000:10:00.0"], "-> ../../../devices/pci0000:00/0000:10:00.0");
    assert!(!listing.keys().any(|k| k.starts_with(".simsysfs")));
    assert!(simsysfs::pci_ids_fixture().is_file());
}
