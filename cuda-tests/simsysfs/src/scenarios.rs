//! Ready-made simulated hosts for the tests of issue 18.

use std::io;
use std::path::Path;

use crate::{MdevTypeSpec, PciSpec, SimSysfs};

/// PCI device id of an H100 SXM5 (simgpu's default profile).
pub const H100: u16 = 0x2330;
/// PCI device id of an RTX A6000 (a display GPU with an HDMI audio function).
pub const RTX_A6000: u16 = 0x2230;
/// PCI device id of the GA102 HDMI audio function.
pub const GA102_AUDIO: u16 = 0x1aef;
/// PCI device id of an A100 PCIe 40GB (SR-IOV capable, vGPU through mdevs on its VFs).
pub const A100_PCIE: u16 = 0x20f1;

/// Two H100s, `0000:10:00.0` (NUMA 0, IOMMU group 16) and `0000:11:00.0` (NUMA 1, group 17), on `nvidia`.
pub fn two_gpus(root: &Path) -> io::Result<SimSysfs> {
    let s = SimSysfs::new(root)?;
    for (i, addr) in ["0000:10:00.0", "0000:11:00.0"].into_iter().enumerate() {
        let mut gpu = PciSpec::nvidia_gpu(addr, H100, 16 + i as u32);
        gpu.subsystem_device = 0x16c1;
        gpu.numa_node = i as i32;
        s.add_pci(&gpu)?;
    }
    Ok(s)
}

/// An RTX A6000 `0000:10:00.0` (VGA class, `nvidia`) and its HDMI audio `0000:10:00.1` (`snd_hda_intel`),
/// both in IOMMU group 20; no NUMA node.
pub fn gpu_with_audio(root: &Path) -> io::Result<SimSysfs> {
    let s = SimSysfs::new(root)?;
    let mut gpu = PciSpec::nvidia_gpu("0000:10:00.0", RTX_A6000, 20);
    gpu.class = 0x030000;
    gpu.subsystem_device = 0x1459;
    s.add_pci(&gpu)?;
    s.add_pci(&PciSpec {
        address: "0000:10:00.1".into(),
        device: GA102_AUDIO,
        class: 0x040300,
        driver: Some("snd_hda_intel".into()),
        default_driver: Some("snd_hda_intel".into()),
        ..gpu
    })?;
    Ok(s)
}

/// Addresses of the four VFs [`sriov_gpu`] makes.
pub const SRIOV_VFS: [&str; 4] = ["0000:41:00.4", "0000:41:00.5", "0000:41:00.6", "0000:41:00.7"];

/// The mdev types every VF of [`sriov_gpu`] offers (one instance each, as an A100 VF offers).
pub fn sriov_types() -> Vec<MdevTypeSpec> {
    [("nvidia-471", "GRID A100-4C", 4), ("nvidia-472", "GRID A100-5C", 5), ("nvidia-474", "GRID A100-10C", 10)]
        .into_iter()
        .map(|(id, name, gib)| MdevTypeSpec {
            type_id: id.into(),
            name: name.into(),
            description: format!("num_heads=1, frl_config=60, framebuffer={gib}G, max_instance=1"),
            available_instances: 1,
            device_api: "vfio-pci".into(),
        })
        .collect()
}

/// An A100 PF `0000:41:00.0` (group 40, NUMA 0, `sriov_totalvfs` 16) with four VFs [`SRIOV_VFS`]
/// (groups 41-44, `nvidia`), each carrying [`sriov_types`] and listed in `class/mdev_bus`.
pub fn sriov_gpu(root: &Path) -> io::Result<SimSysfs> {
    let s = SimSysfs::new(root)?;
    let mut pf = PciSpec::nvidia_gpu("0000:41:00.0", A100_PCIE, 40);
    pf.subsystem_device = 0x145f;
    pf.numa_node = 0;
    s.add_pci(&pf)?;
    s.set_sriov_totalvfs(&pf.address, 16)?;
    for (i, vf) in SRIOV_VFS.into_iter().enumerate() {
        s.add_pci(&PciSpec {
            address: vf.into(),
            iommu_group: 41 + i as u32,
            physfn: Some(pf.address.clone()),
            ..pf.clone()
        })?;
        for t in sriov_types() {
            s.add_mdev_type(vf, &t)?;
        }
    }
    Ok(s)
}

/// `n` H100s at simgpu's bus ids `0000:10:00.0`, `0000:11:00.0`, ... (simgpu ordinals `0..n`), each on
/// `nvidia` in its own IOMMU group (`16 + ordinal`), NUMA 0.
pub fn simgpu_host(root: &Path, n: u32) -> io::Result<SimSysfs> {
    let s = SimSysfs::new(root)?;
    for i in 0..n {
        let mut gpu = PciSpec::nvidia_gpu(&format!("0000:{:02x}:00.0", 0x10 + i), H100, 16 + i);
        gpu.subsystem_device = 0x16c1;
        gpu.numa_node = 0;
        s.add_pci(&gpu)?;
    }
    Ok(s)
}
