//! What the daemon reports of the host's GPUs for virtual machines (`devices`, `mdev-types`, `mdev-list`,
//! `reconcile`, see `docs/protocol.md`): each GPU's PCI function and IOMMU group, its SR-IOV relatives, its
//! mdev types and mdevs, and the mode it is in.

use serde::{Deserialize, Serialize};

/// What a GPU is used for now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceMode {
    /// Tessera vGPUs are configured on it or processes are attached to them.
    TesseraShared,
    /// The driver says MIG mode is on.
    Mig,
    /// Bound to `vfio-pci`: given (or ready to be given) whole to a virtual machine.
    Vfio,
    /// Offers mdev types (itself or its SR-IOV virtual functions): cut into mdev vGPUs for virtual machines.
    MdevHost,
    /// Bound to a host driver, not used by Tessera.
    Driver,
    /// Bound to no driver.
    #[default]
    None,
}

impl DeviceMode {
    /// The mode as the wire and the CLI spell it (`tessera-shared`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceMode::TesseraShared => "tessera-shared",
            DeviceMode::Mig => "mig",
            DeviceMode::Vfio => "vfio",
            DeviceMode::MdevHost => "mdev-host",
            DeviceMode::Driver => "driver",
            DeviceMode::None => "none",
        }
    }
}

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    /// `DDDD:BB:DD.F`, lowercase.
    pub address: String,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Subsystem vendor id.
    #[serde(default)]
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    #[serde(default)]
    pub subsystem_device: u16,
    /// Class code (`0x030000`: VGA controller).
    pub class: u32,
    /// Vendor name from `pci.ids` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_name: Option<String>,
    /// Device name from `pci.ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// Subsystem name from `pci.ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_name: Option<String>,
    /// Class (or subclass) name from `pci.ids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// The driver it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Its `driver_override` (absent when `(null)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_override: Option<String>,
    /// NUMA node (absent when the kernel says -1 or nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// IOMMU group (absent when the IOMMU is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
}

/// One mdev type a parent device offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdevType {
    /// The parent device's address.
    pub parent: String,
    /// The type's directory name (`nvidia-63`).
    pub type_id: String,
    /// Its `name` (`GRID T4-2Q`).
    pub name: String,
    /// Its `description`.
    #[serde(default)]
    pub description: String,
    /// How many more mdevs of it can be created now.
    pub available_instances: u32,
    /// Its `device_api` (`vfio-pci`).
    #[serde(default)]
    pub device_api: String,
}

/// One mediated device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mdev {
    /// Its UUID.
    pub uuid: String,
    /// Its parent device's address.
    pub parent: String,
    /// Its type's directory name.
    pub type_id: String,
    /// A driver holds it (a virtual machine uses it): it cannot be removed.
    pub in_use: bool,
    /// Tessera created it (recorded in the daemon's state directory): `reconcile` removes it when unused.
    pub tessera_created: bool,
}

/// One GPU (class 0x0300/0x0302, or an NVIDIA display/3D function) and what goes with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Its PCI function.
    #[serde(flatten)]
    pub function: PciFunction,
    /// The mode it is in.
    pub mode: DeviceMode,
    /// Why that mode (`vGPU(s) a, b`), when the daemon knows more than the mode says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode_detail: Option<String>,
    /// Tessera's device ordinal for it, when the driver's bus ids match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tessera_device: Option<u32>,
    /// Every function of its IOMMU group, itself included, in address order.
    #[serde(default)]
    pub group: Vec<PciFunction>,
    /// SR-IOV: its physical function, if it is a virtual function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physfn: Option<String>,
    /// SR-IOV: its virtual functions, if it is a physical function.
    #[serde(default)]
    pub vfs: Vec<String>,
    /// The mdev types it offers.
    #[serde(default)]
    pub mdev_types: Vec<MdevType>,
    /// The mdevs made on it.
    #[serde(default)]
    pub mdevs: Vec<Mdev>,
}

/// What `bind-vfio` or `unbind-vfio` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindReport {
    /// The IOMMU group moved.
    pub iommu_group: u32,
    /// Each member: `(address, driver before, driver after)`.
    pub moved: Vec<(String, Option<String>, Option<String>)>,
}

/// What `reconcile` (asked for, or at the daemon's start) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// Records of mdevs Tessera created that no longer exist, dropped.
    #[serde(default)]
    pub records_dropped: Vec<String>,
    /// Mdevs Tessera created that nothing used, removed.
    #[serde(default)]
    pub orphans_removed: Vec<String>,
    /// Functions of a bind or unbind interrupted midway, put back to their binding before it.
    #[serde(default)]
    pub rolled_back: Vec<String>,
    /// What could not be done (each naming the device and the reason); the rest was still done.
    #[serde(default)]
    pub problems: Vec<String>,
}

impl ReconcileReport {
    /// Nothing was found to do.
    pub fn is_empty(&self) -> bool {
        self.records_dropped.is_empty()
            && self.orphans_removed.is_empty()
            && self.rolled_back.is_empty()
            && self.problems.is_empty()
    }
}
