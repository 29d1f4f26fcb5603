//! The simulated kernel: which files under the root are attributes, and what a write to each does to the
//! tree. Pure Rust on the directory tree; errors are the errno the real kernel's store function returns.

mod mdev;
mod pci;

use std::path::Path;

/// An errno value (`libc::ENODEV`, ...).
pub type Errno = i32;

/// A kernel attribute a write can reach, named by its resolved path under the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attribute {
    /// `bus/pci/drivers/<driver>/bind`.
    Bind {
        /// The driver's name (`<driver>`).
        driver: String,
    },
    /// `bus/pci/drivers/<driver>/unbind`.
    Unbind {
        /// The driver's name (`<driver>`).
        driver: String,
    },
    /// `bus/pci/drivers/<driver>/new_id`.
    NewId {
        /// The driver's name (`<driver>`).
        driver: String,
    },
    /// `bus/pci/drivers_probe`.
    DriversProbe,
    /// `devices/pci0000:00/<address>/driver_override`.
    DriverOverride {
        /// The PCI device's address (`<address>`).
        address: String,
    },
    /// `devices/pci0000:00/<parent>/mdev_supported_types/<type_id>/create`.
    MdevCreate {
        /// The PCI address of the parent device (`<parent>`).
        parent: String,
        /// The mediated device type (`<type_id>`).
        type_id: String,
    },
    /// `devices/pci0000:00/<parent>/<uuid>/remove`.
    MdevRemove {
        /// The PCI address of the parent device (`<parent>`).
        parent: String,
        /// The mediated device's UUID (`<uuid>`).
        uuid: String,
    },
    /// `sriov_numvfs`: writable on Linux, not simulated (answers `EOPNOTSUPP`).
    SriovNumvfs,
    /// An attribute without a store function (`vendor`, `available_instances`, ...). Linux refuses the
    /// `open` for writing with `EACCES`; the simulator, which sees only the write, refuses that.
    ReadOnly,
}

/// Read-only attributes of a PCI function.
const PCI_READ_ONLY: [&str; 7] =
    ["vendor", "device", "class", "subsystem_vendor", "subsystem_device", "numa_node", "sriov_totalvfs"];
/// Read-only attributes of an mdev type.
const TYPE_READ_ONLY: [&str; 4] = ["name", "description", "available_instances", "device_api"];

impl Attribute {
    /// The attribute a path (relative to the resolved root, links resolved) names, or `None` for any other
    /// file (which the preload library leaves to the real `write`).
    pub fn classify(rel: &Path) -> Option<Attribute> {
        let parts: Vec<&str> = rel.iter().map(|c| c.to_str()).collect::<Option<_>>()?;
        let s = |x: &str| x.to_string();
        match parts.as_slice() {
            ["bus", "pci", "drivers_probe"] => Some(Attribute::DriversProbe),
            ["bus", "pci", "drivers", d, "bind"] => Some(Attribute::Bind { driver: s(d) }),
            ["bus", "pci", "drivers", d, "unbind"] => Some(Attribute::Unbind { driver: s(d) }),
            ["bus", "pci", "drivers", d, "new_id"] => Some(Attribute::NewId { driver: s(d) }),
            ["devices", host, a, "driver_override"] if is_host(host) => {
                Some(Attribute::DriverOverride { address: s(a) })
            }
            ["devices", host, _, "sriov_numvfs"] if is_host(host) => Some(Attribute::SriovNumvfs),
            ["devices", host, _, name] if is_host(host) && PCI_READ_ONLY.contains(name) => Some(Attribute::ReadOnly),
            ["devices", host, p, "mdev_supported_types", t, "create"] if is_host(host) => {
                Some(Attribute::MdevCreate { parent: s(p), type_id: s(t) })
            }
            ["devices", host, _, "mdev_supported_types", _, name] if is_host(host) && TYPE_READ_ONLY.contains(name) => {
                Some(Attribute::ReadOnly)
            }
            ["devices", host, p, u, "remove"] if is_host(host) && mdev::parse_uuid(u.as_bytes()).is_some() => {
                Some(Attribute::MdevRemove { parent: s(p), uuid: s(u) })
            }
            _ => None,
        }
    }
}

/// Whether a path component is a PCI host bridge directory (`pci0000:00`).
fn is_host(name: &str) -> bool {
    name.starts_with("pci")
}

/// Performs a write of `data` to `attr` on the tree at `root`, as the kernel's store function would:
/// `Ok` means the write returns its full count.
pub fn store(root: &Path, attr: &Attribute, data: &[u8]) -> Result<(), Errno> {
    match attr {
        Attribute::Bind { driver } => pci::bind(root, driver, data),
        Attribute::Unbind { driver } => pci::unbind(root, driver, data),
        Attribute::NewId { driver } => pci::new_id(root, driver, data),
        Attribute::DriversProbe => pci::drivers_probe(root, data),
        Attribute::DriverOverride { address } => pci::driver_override(root, address, data),
        Attribute::MdevCreate { parent, type_id } => mdev::create(root, parent, type_id, data),
        Attribute::MdevRemove { parent, uuid } => mdev::remove(root, parent, uuid, data),
        Attribute::SriovNumvfs => Err(libc::EOPNOTSUPP),
        Attribute::ReadOnly => Err(libc::EACCES),
    }
}

/// Maps a failure to change the tree itself (a test's directory vanished, disk full) to the errno the
/// writer sees; the real kernel has no such case, so it is `EIO`.
fn io_err(_: std::io::Error) -> Errno {
    libc::EIO
}
