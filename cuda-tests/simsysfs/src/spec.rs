//! What a test asks the simulated host to contain: PCI functions and mdev types.

/// A PCI function as `add_pci` lays it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciSpec {
    /// Sysfs name, `DDDD:BB:DD.F` in lowercase hex.
    pub address: String,
    /// PCI vendor id (`vendor`).
    pub vendor: u16,
    /// PCI device id (`device`).
    pub device: u16,
    /// 24-bit class code (`class`), e.g. `0x030000` for a VGA controller.
    pub class: u32,
    /// Subsystem vendor id.
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    pub subsystem_device: u16,
    /// NUMA node; `-1` when the platform reports none.
    pub numa_node: i32,
    /// IOMMU group number.
    pub iommu_group: u32,
    /// The driver the device is bound to now.
    pub driver: Option<String>,
    /// The driver `drivers_probe` binds it to when no `driver_override` is set.
    pub default_driver: Option<String>,
    /// For a virtual function: its physical function's address.
    pub physfn: Option<String>,
}

impl Default for PciSpec {
    /// No address or ids, no driver, no NUMA node (`-1`, as Linux shows it), group 0.
    fn default() -> PciSpec {
        PciSpec {
            address: String::new(),
            vendor: 0,
            device: 0,
            class: 0,
            subsystem_vendor: 0,
            subsystem_device: 0,
            numa_node: -1,
            iommu_group: 0,
            driver: None,
            default_driver: None,
            physfn: None,
        }
    }
}

impl PciSpec {
    /// An NVIDIA GPU (`10de`, 3D controller class) bound to `nvidia`, alone in IOMMU group `group`.
    pub fn nvidia_gpu(address: &str, device: u16, group: u32) -> PciSpec {
        PciSpec {
            address: address.to_string(),
            vendor: 0x10de,
            device,
            class: 0x030200,
            subsystem_vendor: 0x10de,
            subsystem_device: 0,
            numa_node: -1,
            iommu_group: group,
            driver: Some("nvidia".into()),
            default_driver: Some("nvidia".into()),
            physfn: None,
        }
    }
}

/// An mdev type offered by a parent device (`mdev_supported_types/<type_id>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MdevTypeSpec {
    /// Directory name, e.g. `nvidia-692`.
    pub type_id: String,
    /// Content of `name`.
    pub name: String,
    /// Content of `description`.
    pub description: String,
    /// How many more instances can be created now.
    pub available_instances: u32,
    /// Content of `device_api`, e.g. `vfio-pci`.
    pub device_api: String,
}
