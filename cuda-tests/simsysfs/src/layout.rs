//! Where things live in the simulated tree, and the small file operations both the builder and the
//! simulated kernel use to change it, so the two lay out the same thing the same way.

use std::fs;
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// The PCI host bridge every simulated function sits under (flat: no bridges in between).
pub const PCI_ROOT: &str = "devices/pci0000:00";
/// Folder under the root holding the simulator's own state (defaults, dynamic ids, faults, lock).
pub const STATE_DIR: &str = ".simsysfs";
/// Drivers the skeleton registers.
pub const DRIVERS: [&str; 4] = ["nvidia", "vfio-pci", "snd_hda_intel", "nouveau"];
/// Mode of a write-only attribute (`bind`, `create`, ...), as the kernel makes it.
pub const WRITE_ONLY: u32 = 0o200;
/// Mode of a read-only attribute.
pub const READ_ONLY: u32 = 0o444;
/// Mode of a read-write attribute (`driver_override`, `sriov_numvfs`).
pub const READ_WRITE: u32 = 0o644;

/// Relative path of a PCI function's directory.
pub fn pci_dev(address: &str) -> PathBuf {
    Path::new(PCI_ROOT).join(address)
}

/// Relative path of a registered driver's directory.
pub fn driver_dir(driver: &str) -> PathBuf {
    Path::new("bus/pci/drivers").join(driver)
}

/// Relative path of a created mdev's directory.
pub fn mdev_dev(parent: &str, uuid: &str) -> PathBuf {
    pci_dev(parent).join(uuid)
}

/// Relative path of an mdev type's directory.
pub fn mdev_type(parent: &str, type_id: &str) -> PathBuf {
    pci_dev(parent).join("mdev_supported_types").join(type_id)
}

/// Relative path of a device's stored default driver (simulator state, not shown by sysfs).
pub fn default_driver_file(address: &str) -> PathBuf {
    Path::new(STATE_DIR).join("default_driver").join(address)
}

/// Relative path of a driver's dynamic ids added through `new_id` (simulator state).
pub fn dynamic_ids_file(driver: &str) -> PathBuf {
    Path::new(STATE_DIR).join("new_id").join(driver)
}

/// Writes an attribute file with `content` and `mode` (replacing any old one).
pub fn attr(path: &Path, content: &str, mode: u32) -> io::Result<()> {
    fs::write(path, content)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Makes (or replaces) a symbolic link `path -> target`.
pub fn link(path: &Path, target: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(_) => fs::remove_file(path)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    symlink(target, path)
}

/// Removes a link or file; a missing one is fine (the kernel's teardown is idempotent here).
pub fn unlink(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The relative path from a directory `depth` levels below the root back up to the root (`../../..`).
pub fn up(depth: usize) -> PathBuf {
    (0..depth).map(|_| "..").collect()
}

/// Links `root/bus/pci/drivers/<driver>/<address>` and `<dev>/driver`: the device is bound.
pub fn bind_links(root: &Path, address: &str, driver: &str) -> io::Result<()> {
    link(&root.join(pci_dev(address)).join("driver"), &up(3).join(driver_dir(driver)))?;
    link(&root.join(driver_dir(driver)).join(address), &up(4).join(pci_dev(address)))
}

/// Removes both links [`bind_links`] makes.
pub fn unbind_links(root: &Path, address: &str, driver: &str) -> io::Result<()> {
    unlink(&root.join(pci_dev(address)).join("driver"))?;
    unlink(&root.join(driver_dir(driver)).join(address))
}

/// Registers a driver (its directory with `bind`, `unbind`, `new_id`) unless it exists.
pub fn ensure_driver(root: &Path, driver: &str) -> io::Result<()> {
    let dir = root.join(driver_dir(driver));
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(&dir)?;
    for name in ["bind", "unbind", "new_id"] {
        attr(&dir.join(name), "", WRITE_ONLY)?;
    }
    Ok(())
}

/// The driver a device is bound to: the last component of its `driver` link.
pub fn bound_driver(root: &Path, address: &str) -> Option<String> {
    let target = fs::read_link(root.join(pci_dev(address)).join("driver")).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// Reads a one-line attribute, without its newline.
pub fn read_line(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim_end_matches('\n').to_string())
}
