//! Every GPU of the host as sysfs shows it: `bus/pci/devices/*` whose class is VGA (0x0300) or 3D
//! (0x0302), or any display function of NVIDIA's (vendor 0x10de, class 0x03), with its IOMMU group and
//! every member of it, its SR-IOV relatives (`physfn`, `virtfn*`), its mdev types and mdevs, and the mode
//! sysfs alone tells (the daemon adds what only it knows: Tessera's vGPUs and MIG).

use crate::pci_ids::PciIds;
use crate::sysfs::{self, Sysfs};
use std::collections::HashSet;
use std::path::Path;
use tessera_client::devices::{DeviceMode, Gpu, Mdev, MdevType, PciFunction};

/// NVIDIA's PCI vendor id.
pub const NVIDIA: u16 = 0x10de;
/// The driver of VFIO passthrough.
pub const VFIO_DRIVER: &str = "vfio-pci";

/// Whether a function of `vendor` and `class` is a GPU.
pub fn is_gpu(vendor: u16, class: u32) -> bool {
    matches!(class >> 8, 0x0300 | 0x0302) || (vendor == NVIDIA && class >> 16 == 0x03)
}

/// Function `address` (normalised) as sysfs shows it, named from `ids`; `None` when there is no such
/// device.
pub fn function(sys: &Sysfs, ids: &PciIds, address: &str) -> Option<PciFunction> {
    let dir = sys.pci_device(address);
    let vendor = sysfs::read_hex(&dir.join("vendor"))? as u16;
    let device = sysfs::read_hex(&dir.join("device")).unwrap_or(0) as u16;
    let class = sysfs::read_hex(&dir.join("class")).unwrap_or(0);
    let subsystem_vendor = sysfs::read_hex(&dir.join("subsystem_vendor")).unwrap_or(0) as u16;
    let subsystem_device = sysfs::read_hex(&dir.join("subsystem_device")).unwrap_or(0) as u16;
    Some(PciFunction {
        address: address.to_string(),
        vendor,
        device,
        subsystem_vendor,
        subsystem_device,
        class,
        vendor_name: ids.vendor(vendor).map(str::to_string),
        device_name: ids.device(vendor, device).map(str::to_string),
        subsystem_name: ids.subsystem(vendor, device, subsystem_vendor, subsystem_device).map(str::to_string),
        class_name: ids.class(class).map(str::to_string),
        driver: driver(sys, address),
        driver_override: driver_override(sys, address),
        numa_node: sysfs::read(&dir.join("numa_node")).and_then(|n| n.parse().ok()).filter(|&n: &i32| n >= 0),
        iommu_group: iommu_group(sys, address),
    })
}

/// The driver `address` is bound to.
pub fn driver(sys: &Sysfs, address: &str) -> Option<String> {
    sysfs::link_name(&sys.pci_device(address).join("driver"))
}

/// `address`'s `driver_override` (`None` for `(null)` or empty).
pub fn driver_override(sys: &Sysfs, address: &str) -> Option<String> {
    sysfs::read(&sys.pci_device(address).join("driver_override")).filter(|o| !o.is_empty() && o != "(null)")
}

/// `address`'s IOMMU group.
pub fn iommu_group(sys: &Sysfs, address: &str) -> Option<u32> {
    sysfs::link_name(&sys.pci_device(address).join("iommu_group"))?.parse().ok()
}

/// The addresses in IOMMU group `group`, sorted.
pub fn group_members(sys: &Sysfs, group: u32) -> Vec<String> {
    sys.names(&sys.path("kernel/iommu_groups").join(group.to_string()).join("devices"))
}

/// The mdev types parent `address` offers.
pub fn mdev_types(sys: &Sysfs, address: &str) -> Vec<MdevType> {
    let dir = sys.pci_device(address).join("mdev_supported_types");
    sys.names(&dir)
        .into_iter()
        .map(|type_id| {
            let t = dir.join(&type_id);
            let text = |name: &str| sysfs::read(&t.join(name)).unwrap_or_default();
            MdevType {
                parent: address.to_string(),
                name: text("name"),
                description: text("description"),
                available_instances: text("available_instances").parse().unwrap_or(0),
                device_api: text("device_api"),
                type_id,
            }
        })
        .collect()
}

/// Every device that can parent mdevs (`class/mdev_bus`).
pub fn mdev_parents(sys: &Sysfs) -> Vec<String> {
    sys.names(&sys.path("class/mdev_bus"))
}

/// Every mdev type of every parent.
pub fn all_mdev_types(sys: &Sysfs) -> Vec<MdevType> {
    mdev_parents(sys).iter().flat_map(|p| mdev_types(sys, p)).collect()
}

/// Every mdev (`bus/mdev/devices`); `created` holds the UUIDs Tessera recorded as its own.
pub fn mdevs(sys: &Sysfs, created: &HashSet<String>) -> Vec<Mdev> {
    let dir = sys.path("bus/mdev/devices");
    sys.names(&dir).into_iter().filter_map(|uuid| mdev(&dir.join(&uuid), uuid, created)).collect()
}

/// The mdev at `path` (a `bus/mdev/devices` entry).
fn mdev(path: &Path, uuid: String, created: &HashSet<String>) -> Option<Mdev> {
    // Its directory lives under its parent's: the link's target's parent names the parent device.
    let real = std::fs::canonicalize(path).ok()?;
    let parent = real.parent()?.file_name()?.to_string_lossy().into_owned();
    Some(Mdev {
        type_id: sysfs::link_name(&real.join("mdev_type")).unwrap_or_default(),
        in_use: std::fs::symlink_metadata(real.join("driver")).is_ok(),
        tessera_created: created.contains(&uuid),
        parent,
        uuid,
    })
}

/// Every GPU with what goes with it, in address order; `created` as for [`mdevs`].
pub fn gpus(sys: &Sysfs, ids: &PciIds, created: &HashSet<String>) -> Vec<Gpu> {
    let all_mdevs = mdevs(sys, created);
    sys.names(&sys.path("bus/pci/devices"))
        .into_iter()
        .filter_map(|address| function(sys, ids, &address))
        .filter(|f| is_gpu(f.vendor, f.class))
        .map(|function| gpu(sys, ids, function, &all_mdevs))
        .collect()
}

/// One GPU's relatives, types, mdevs and mode.
fn gpu(sys: &Sysfs, ids: &PciIds, function: PciFunction, all_mdevs: &[Mdev]) -> Gpu {
    let dir = sys.pci_device(&function.address);
    let group = function
        .iommu_group
        .map(|g| group_members(sys, g).iter().filter_map(|a| self::function(sys, ids, a)).collect())
        .unwrap_or_else(|| vec![function.clone()]);
    let mut vfs: Vec<(u32, String)> = sys
        .names(&dir)
        .into_iter()
        .filter_map(|n| Some((n.strip_prefix("virtfn")?.parse().ok()?, sysfs::link_name(&dir.join(&n))?)))
        .collect();
    vfs.sort();
    let vfs: Vec<String> = vfs.into_iter().map(|(_, a)| a).collect();
    let mdev_types = mdev_types(sys, &function.address);
    let mdevs: Vec<Mdev> = all_mdevs.iter().filter(|m| m.parent == function.address).cloned().collect();
    let hosts_mdevs = !mdev_types.is_empty() || vfs.iter().any(|vf| !mdev_types_dir_empty(sys, vf));
    let mode = match function.driver.as_deref() {
        Some(VFIO_DRIVER) => DeviceMode::Vfio,
        _ if hosts_mdevs => DeviceMode::MdevHost,
        Some(_) => DeviceMode::Driver,
        None => DeviceMode::None,
    };
    Gpu {
        physfn: sysfs::link_name(&dir.join("physfn")),
        function,
        mode,
        mode_detail: None,
        tessera_device: None,
        group,
        vfs,
        mdev_types,
        mdevs,
    }
}

/// Whether `address` offers no mdev type.
fn mdev_types_dir_empty(sys: &Sysfs, address: &str) -> bool {
    sys.names(&sys.pci_device(address).join("mdev_supported_types")).is_empty()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    /// A hand-built tree as Linux lays it out (the simulated kernel's builder is for the end-to-end tests).
    pub(crate) struct Tree {
        pub root: PathBuf,
    }

    impl Tree {
        pub(crate) fn new(tag: &str) -> Tree {
            let root = std::env::temp_dir().join(format!("tessera-pt-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for d in ["bus/pci/devices", "bus/pci/drivers", "kernel/iommu_groups", "class/mdev_bus", "bus/mdev/devices"]
            {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            std::fs::write(root.join("bus/pci/drivers_probe"), "").unwrap();
            Tree { root }
        }

        pub(crate) fn sys(&self) -> Sysfs {
            Sysfs::at(&self.root)
        }

        pub(crate) fn add(&self, addr: &str, vendor: u16, device: u16, class: u32, group: u32, driver: Option<&str>) {
            let dev = self.root.join("devices/pci0000:00").join(addr);
            std::fs::create_dir_all(&dev).unwrap();
            for (name, value) in [
                ("vendor", format!("0x{vendor:04x}\n")),
                ("device", format!("0x{device:04x}\n")),
                ("class", format!("0x{class:06x}\n")),
                ("subsystem_vendor", "0x10de\n".into()),
                ("subsystem_device", "0x12a2\n".into()),
                ("numa_node", "1\n".into()),
                ("driver_override", "(null)\n".into()),
            ] {
                std::fs::write(dev.join(name), value).unwrap();
            }
            let g = self.root.join("kernel/iommu_groups").join(group.to_string()).join("devices");
            std::fs::create_dir_all(&g).unwrap();
            symlink(format!("../../../../devices/pci0000:00/{addr}"), g.join(addr)).unwrap();
            symlink(format!("../../../kernel/iommu_groups/{group}"), dev.join("iommu_group")).unwrap();
            symlink(format!("../../../devices/pci0000:00/{addr}"), self.root.join("bus/pci/devices").join(addr))
                .unwrap();
            for drv in ["nvidia", "vfio-pci", "snd_hda_intel"] {
                let d = self.root.join("bus/pci/drivers").join(drv);
                std::fs::create_dir_all(&d).unwrap();
                for attr in ["bind", "unbind", "new_id"] {
                    std::fs::write(d.join(attr), "").unwrap();
                }
            }
            if let Some(drv) = driver {
                symlink(format!("../../../bus/pci/drivers/{drv}"), dev.join("driver")).unwrap();
            }
        }

        pub(crate) fn add_type(&self, parent: &str, type_id: &str, available: u32) {
            let t = self.root.join("devices/pci0000:00").join(parent).join("mdev_supported_types").join(type_id);
            std::fs::create_dir_all(t.join("devices")).unwrap();
            for (name, value) in [
                ("name", "GRID T4-2Q\n".to_string()),
                ("description", "num_heads=4, frl_config=60\n".into()),
                ("available_instances", format!("{available}\n")),
                ("device_api", "vfio-pci\n".into()),
                ("create", String::new()),
            ] {
                std::fs::write(t.join(name), value).unwrap();
            }
            let link = self.root.join("class/mdev_bus").join(parent);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(format!("../../devices/pci0000:00/{parent}"), link).unwrap();
            }
        }

        pub(crate) fn add_mdev(&self, parent: &str, type_id: &str, uuid: &str) {
            let m = self.root.join("devices/pci0000:00").join(parent).join(uuid);
            std::fs::create_dir_all(&m).unwrap();
            std::fs::write(m.join("remove"), "").unwrap();
            symlink(format!("../mdev_supported_types/{type_id}"), m.join("mdev_type")).unwrap();
            symlink(
                format!("../../../devices/pci0000:00/{parent}/{uuid}"),
                self.root.join("bus/mdev/devices").join(uuid),
            )
            .unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    const IDS: &str = "10de  NVIDIA Corporation\n\t1eb8  TU104GL [Tesla T4]\n\t\t10de 12a2  T4 16GB\n\
        C 03  Display controller\n\t02  3D controller\nC 04  Multimedia controller\n\t03  Audio device\n";

    #[test]
    fn gpus_their_groups_vfs_types_and_mdevs_are_found() {
        let t = Tree::new("discover");
        t.add("0000:10:00.0", 0x10de, 0x1eb8, 0x030200, 7, Some("nvidia"));
        t.add("0000:10:00.1", 0x10de, 0x10f8, 0x040300, 7, Some("snd_hda_intel"));
        t.add("0000:11:00.0", 0x10de, 0x1eb8, 0x030000, 8, Some("vfio-pci"));
        t.add("0000:12:00.0", 0x8086, 0x1234, 0x020000, 9, None);
        t.add("0000:41:00.0", 0x10de, 0x1eb8, 0x030200, 10, Some("nvidia"));
        t.add("0000:41:00.4", 0x10de, 0x1eb9, 0x030200, 11, Some("nvidia"));
        let (pf, vf) = (t.root.join("devices/pci0000:00/0000:41:00.0"), t.root.join("devices/pci0000:00/0000:41:00.4"));
        symlink("../0000:41:00.4", pf.join("virtfn0")).unwrap();
        symlink("../0000:41:00.0", vf.join("physfn")).unwrap();
        t.add_type("0000:41:00.4", "nvidia-63", 3);
        t.add_mdev("0000:41:00.4", "nvidia-63", "8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45");
        std::fs::write(t.root.join("devices/pci0000:00/0000:10:00.0/numa_node"), "-1\n").unwrap();

        let sys = t.sys();
        let created: HashSet<String> = ["8a3e4b0c-5f2d-4c1e-9b7a-2d6f0e1c3a45".to_string()].into();
        let gpus = gpus(&sys, &PciIds::parse(IDS), &created);
        let addrs: Vec<&str> = gpus.iter().map(|g| g.function.address.as_str()).collect();
        assert_eq!(addrs, ["0000:10:00.0", "0000:11:00.0", "0000:41:00.0", "0000:41:00.4"], "audio, NIC are no GPUs");
        let g = &gpus[0];
        assert_eq!((g.function.vendor, g.function.device, g.function.class), (0x10de, 0x1eb8, 0x030200));
        assert_eq!(g.function.device_name.as_deref(), Some("TU104GL [Tesla T4]"));
        assert_eq!(g.function.subsystem_name.as_deref(), Some("T4 16GB"));
        assert_eq!(g.function.class_name.as_deref(), Some("3D controller"));
        assert_eq!((g.function.numa_node, g.function.iommu_group), (None, Some(7)));
        assert_eq!((g.function.driver.as_deref(), g.mode), (Some("nvidia"), DeviceMode::Driver));
        let members: Vec<(&str, Option<&str>)> =
            g.group.iter().map(|m| (m.address.as_str(), m.driver.as_deref())).collect();
        assert_eq!(members, [("0000:10:00.0", Some("nvidia")), ("0000:10:00.1", Some("snd_hda_intel"))]);
        assert_eq!(g.group[1].class_name.as_deref(), Some("Audio device"));
        assert_eq!((gpus[1].mode, gpus[1].function.numa_node), (DeviceMode::Vfio, Some(1)));
        assert_eq!((gpus[2].vfs.clone(), gpus[2].mode), (vec!["0000:41:00.4".to_string()], DeviceMode::MdevHost));
        let vf = &gpus[3];
        assert_eq!((vf.physfn.as_deref(), vf.mode), (Some("0000:41:00.0"), DeviceMode::MdevHost));
        assert_eq!(vf.mdev_types.len(), 1);
        let ty = &vf.mdev_types[0];
        assert_eq!((ty.type_id.as_str(), ty.name.as_str(), ty.available_instances), ("nvidia-63", "GRID T4-2Q", 3));
        assert_eq!(ty.device_api, "vfio-pci");
        assert_eq!(vf.mdevs.len(), 1);
        let m = &vf.mdevs[0];
        assert_eq!(
            (m.parent.as_str(), m.type_id.as_str(), m.in_use, m.tessera_created),
            ("0000:41:00.4", "nvidia-63", false, true)
        );
        assert_eq!(all_mdev_types(&sys).len(), 1);
    }

    #[test]
    fn gpu_classes() {
        assert!(is_gpu(0x1002, 0x030000) && is_gpu(0x8086, 0x030200) && is_gpu(0x10de, 0x038000));
        assert!(!is_gpu(0x10de, 0x040300) && !is_gpu(0x1002, 0x038000) && !is_gpu(0x8086, 0x020000));
    }
}
