//! The test-side builder: lays out a simulated sysfs as Linux shows it, and lists it for comparisons.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::faults::{self, Fault};
use crate::layout::{self, READ_ONLY, READ_WRITE, WRITE_ONLY};
use crate::spec::{MdevTypeSpec, PciSpec};

/// A simulated sysfs tree rooted at `root` (a directory the test owns).
#[derive(Clone, Debug)]
pub struct SimSysfs {
    /// The directory standing in for `/sys` (give it as `SIMSYSFS_ROOT` and `TESSERA_SYSFS_ROOT`).
    pub root: PathBuf,
}

impl SimSysfs {
    /// Creates the skeleton: `bus/pci/{devices,drivers,drivers_probe}`, the drivers `nvidia`, `vfio-pci`,
    /// `snd_hda_intel`, `nouveau` with `bind`, `unbind`, `new_id`, `kernel/iommu_groups`, `class/mdev_bus`,
    /// `bus/mdev/devices` and `devices/pci0000:00`.
    pub fn new(root: &Path) -> io::Result<SimSysfs> {
        for dir in ["bus/pci/devices", "kernel/iommu_groups", "class/mdev_bus", "bus/mdev/devices", layout::PCI_ROOT] {
            fs::create_dir_all(root.join(dir))?;
        }
        fs::create_dir_all(root.join(layout::STATE_DIR))?;
        layout::attr(&root.join("bus/pci/drivers_probe"), "", WRITE_ONLY)?;
        for driver in layout::DRIVERS {
            layout::ensure_driver(root, driver)?;
        }
        Ok(SimSysfs { root: root.to_path_buf() })
    }

    /// Adds a PCI function as the kernel shows it: its directory with the id files, `driver_override`,
    /// the `iommu_group` link and group membership, the `bus/pci/devices` link, the binding to `driver`,
    /// and for a virtual function the `physfn`/`virtfnN` links and the parent's `sriov_numvfs`.
    pub fn add_pci(&self, spec: &PciSpec) -> io::Result<()> {
        let addr = spec.address.as_str();
        if !valid_address(addr) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("PCI address {addr:?} is not DDDD:BB:DD.F in lowercase hex"),
            ));
        }
        let dev = self.root.join(layout::pci_dev(addr));
        fs::create_dir_all(&dev)?;
        let files = [
            ("vendor", format!("0x{:04x}\n", spec.vendor)),
            ("device", format!("0x{:04x}\n", spec.device)),
            ("class", format!("0x{:06x}\n", spec.class)),
            ("subsystem_vendor", format!("0x{:04x}\n", spec.subsystem_vendor)),
            ("subsystem_device", format!("0x{:04x}\n", spec.subsystem_device)),
            ("numa_node", format!("{}\n", spec.numa_node)),
        ];
        for (name, content) in files {
            layout::attr(&dev.join(name), &content, READ_ONLY)?;
        }
        layout::attr(&dev.join("driver_override"), "(null)\n", READ_WRITE)?;

        let group = format!("kernel/iommu_groups/{}", spec.iommu_group);
        fs::create_dir_all(self.root.join(&group).join("devices"))?;
        layout::link(&dev.join("iommu_group"), &layout::up(3).join(&group))?;
        layout::link(&self.root.join(&group).join("devices").join(addr), &layout::up(4).join(layout::pci_dev(addr)))?;
        layout::link(&self.root.join("bus/pci/devices").join(addr), &layout::up(3).join(layout::pci_dev(addr)))?;

        let defaults = self.root.join(layout::default_driver_file(addr));
        fs::create_dir_all(defaults.parent().expect("state file has a parent"))?;
        match &spec.default_driver {
            Some(d) => {
                layout::ensure_driver(&self.root, d)?;
                fs::write(&defaults, d)?;
            }
            None => layout::unlink(&defaults)?,
        }
        if let Some(driver) = &spec.driver {
            layout::ensure_driver(&self.root, driver)?;
            layout::bind_links(&self.root, addr, driver)?;
        }
        if let Some(pf) = &spec.physfn {
            self.add_virtfn(pf, addr)?;
        }
        Ok(())
    }

    /// Links a VF to its PF both ways and counts it in the PF's `sriov_numvfs` (raising `sriov_totalvfs`
    /// when it would be lower).
    fn add_virtfn(&self, pf: &str, vf: &str) -> io::Result<()> {
        let pf_dir = self.root.join(layout::pci_dev(pf));
        if !pf_dir.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("physical function {pf} is not added yet")));
        }
        layout::link(&self.root.join(layout::pci_dev(vf)).join("physfn"), &Path::new("..").join(pf))?;
        let count = fs::read_dir(&pf_dir)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("virtfn"))
            .count();
        layout::link(&pf_dir.join(format!("virtfn{count}")), &Path::new("..").join(vf))?;
        let numvfs = count + 1;
        layout::attr(&pf_dir.join("sriov_numvfs"), &format!("{numvfs}\n"), READ_WRITE)?;
        let total = layout::read_line(&pf_dir.join("sriov_totalvfs")).ok().and_then(|t| t.parse::<usize>().ok());
        if total.is_none_or(|t| t < numvfs) {
            self.set_sriov_totalvfs(pf, numvfs as u32)?;
        }
        Ok(())
    }

    /// Sets a physical function's `sriov_totalvfs` (how many VFs it could have).
    pub fn set_sriov_totalvfs(&self, pf: &str, total: u32) -> io::Result<()> {
        let pf_dir = self.root.join(layout::pci_dev(pf));
        layout::attr(&pf_dir.join("sriov_totalvfs"), &format!("{total}\n"), READ_ONLY)?;
        if !pf_dir.join("sriov_numvfs").exists() {
            layout::attr(&pf_dir.join("sriov_numvfs"), "0\n", READ_WRITE)?;
        }
        Ok(())
    }

    /// Adds an mdev type to a parent device (`mdev_supported_types/<type>/{name,description,
    /// available_instances,device_api,create,devices/}`) and the parent to `class/mdev_bus`.
    pub fn add_mdev_type(&self, parent: &str, spec: &MdevTypeSpec) -> io::Result<()> {
        let parent_dir = self.root.join(layout::pci_dev(parent));
        if !parent_dir.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("mdev parent {parent} is not added yet")));
        }
        let dir = self.root.join(layout::mdev_type(parent, &spec.type_id));
        fs::create_dir_all(dir.join("devices"))?;
        layout::attr(&dir.join("name"), &format!("{}\n", spec.name), READ_ONLY)?;
        layout::attr(&dir.join("description"), &format!("{}\n", spec.description), READ_ONLY)?;
        layout::attr(&dir.join("available_instances"), &format!("{}\n", spec.available_instances), READ_ONLY)?;
        layout::attr(&dir.join("device_api"), &format!("{}\n", spec.device_api), READ_ONLY)?;
        layout::attr(&dir.join("create"), "", WRITE_ONLY)?;
        layout::link(&self.root.join("class/mdev_bus").join(parent), &layout::up(2).join(layout::pci_dev(parent)))
    }

    /// Marks a created mdev as in use by a VFIO user (a `driver` link to `bus/mdev/drivers/vfio_mdev`,
    /// made on first use), or not (the link goes, and the driver directories once empty): the kernel then
    /// refuses its removal (see the crate docs for how this differs from the real kernel).
    pub fn set_mdev_in_use(&self, uuid: &str, in_use: bool) -> io::Result<()> {
        let dev = fs::canonicalize(self.root.join("bus/mdev/devices").join(uuid))?;
        let driver_dir = self.root.join("bus/mdev/drivers/vfio_mdev");
        fs::create_dir_all(&driver_dir)?;
        let root = fs::canonicalize(&self.root)?;
        let rel = dev.strip_prefix(&root).map_err(|_| io::Error::other("mdev outside the root"))?;
        if in_use {
            layout::link(
                &dev.join("driver"),
                &layout::up(rel.components().count()).join("bus/mdev/drivers/vfio_mdev"),
            )?;
            layout::link(&driver_dir.join(uuid), &layout::up(4).join(rel))
        } else {
            layout::unlink(&dev.join("driver"))?;
            layout::unlink(&driver_dir.join(uuid))?;
            // The driver directories came with the first in-use mdev: drop them once empty, so marking
            // and unmarking leaves the tree as it was (remove_dir refuses a non-empty directory).
            let _ = fs::remove_dir(&driver_dir);
            let _ = fs::remove_dir(self.root.join("bus/mdev/drivers"));
            Ok(())
        }
    }

    /// Every path under the root (relative; the simulator's own `.simsysfs` state left out) with its
    /// content, `-> target` for a link, or `<dir>`: two equal listings are two equal trees.
    pub fn listing(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        walk(&self.root, Path::new(""), &mut out);
        out
    }

    /// Makes the kernel fail (or kill the writer at) the next write to `rel_path` (relative to the root;
    /// links on the way are followed, so `bus/pci/devices/<addr>/driver_override` works). Faults queue:
    /// each is used by one matching write, in the order injected.
    pub fn inject(&self, rel_path: &str, fault: Fault) -> io::Result<()> {
        faults::append(&self.root, rel_path, fault)
    }
}

/// Whether `addr` is a sysfs PCI name: `DDDD:BB:DD.F`, lowercase hex.
pub fn valid_address(addr: &str) -> bool {
    let b = addr.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && hex(11..12)
}

/// Adds every entry below `dir` (shown as `rel`) to `out`.
fn walk(dir: &Path, rel: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        if rel.as_os_str().is_empty() && name == layout::STATE_DIR {
            continue;
        }
        let path = entry.path();
        let key = rel.join(&name);
        let shown = key.to_string_lossy().into_owned();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
            out.insert(shown, format!("-> {target}"));
        } else if meta.is_dir() {
            out.insert(shown, "<dir>".into());
            walk(&path, &key, out);
        } else {
            let content = fs::read(&path).map(|c| String::from_utf8_lossy(&c).into_owned()).unwrap_or_default();
            out.insert(shown, content);
        }
    }
}
