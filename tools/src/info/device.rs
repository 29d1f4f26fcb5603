//! One device's entry of the `tessera info --json` document: the legacy fields platforms read today and
//! BEP-1000's compute units, precision support, memory specification and partitioning, each read through
//! the CUDA driver API or NVML (or derived from what they tell, as documented); what neither tells is `null`.

use super::slots;
use crate::driver::{Driver, DriverError};
use serde_json::{Value, json};
use std::path::Path;
use tessera_ffi::sys::CUdevice_attribute as A;
use tessera_host::nvml::{Mig, Nvml};
use tessera_host::precision::{self, Cc};

/// What the resource slots need to know of a device besides its document entry.
pub struct Facts {
    /// CUDA ordinal.
    pub index: i32,
    /// Device memory in bytes.
    pub memory: u64,
    /// MIG, when the device has it.
    pub mig: Option<Mig>,
}

/// The entry of device `dev` and its facts.
pub fn describe(d: &Driver, nvml: Option<&Nvml>, dev: i32) -> Result<(Value, Facts), DriverError> {
    let attr = |a: A| d.attribute(dev, a as i32);
    let cc: Cc = (
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let memory = d.total_memory(dev)?;
    let bus_id = d.pci_bus_id(dev)?;
    let nv = nvml.and_then(|n| n.device(&bus_id));
    let positive = |v: i32| u64::try_from(v).ok().filter(|&v| v > 0);

    let mut units = vec![json!({"name": "SM", "count": sms})];
    if let Some(cores) = nv.as_ref().and_then(|n| n.cuda_cores()) {
        units.push(json!({"name": "CUDA Core", "count": cores}));
    }
    let tensor = precision::tensor_cores_per_sm(cc) * sms.max(0) as u32;
    if tensor > 0 {
        units.push(json!({"name": "Tensor Core", "count": tensor}));
    }
    let formats: Vec<Value> =
        precision::FORMATS.iter().map(|f| json!({"format": f, "support": precision::support(f, cc)})).collect();

    // The driver's attribute first; NVML's figure where the driver gives none.
    let clock_khz = positive(attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?)
        .or_else(|| nv.as_ref().and_then(|n| n.max_memory_clock_mhz()).map(|mhz| u64::from(mhz) * 1000));
    let bus_width = positive(attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?)
        .or_else(|| nv.as_ref().and_then(|n| n.memory_bus_width()).map(u64::from));
    let memory_spec = json!({
        "total_memory": memory,
        // No driver or NVML query reports the memory technology.
        "memory_type": null,
        "bandwidth": bandwidth_gib_s(clock_khz, bus_width),
        "memory_clock_mhz": clock_khz.map(|k| k / 1000),
        "bus_width_bits": bus_width,
        // Neither the driver nor NVML reports the L1 size or the number of memory channels.
        "l1_cache_per_core": null,
        "l2_cache": positive(attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?),
        "shared_mem_per_core": positive(attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?),
        "memory_channels": null,
    });

    let mig = nv.as_ref().and_then(|n| n.mig());
    let mut partitioning = Vec::new();
    if let Some(m) = &mig {
        let profiles: Vec<Value> = m
            .profiles
            .iter()
            .map(|p| {
                json!({"name": p.name, "profile_id": p.id, "slices": p.slices, "instances": p.instances,
                       "sm_count": p.sm_count, "memory_size": p.memory_bytes})
            })
            .collect();
        partitioning.push(json!({
            "technology": "MIG",
            "max_partitions": m.profiles.iter().map(|p| p.instances).max(),
            "enabled": m.enabled,
            "profiles": profiles,
        }));
    }
    if let Some(max) = slots::fractional_limit(dev) {
        partitioning.push(json!({
            "technology": "fGPU",
            "max_partitions": max,
            "share_granularity_percent": slots::MIN_SHARE_PERCENT,
        }));
    }

    let entry = json!({
        "device_id": dev.to_string(),
        "index": dev,
        "name": d.name(dev)?,
        "uuid": d.uuid(dev).ok(),
        "hw_location": bus_id,
        "numa_node": numa_node(Path::new("/sys/bus/pci/devices"), &bus_id),
        "memory_size": memory,
        "processing_units": sms,
        "compute_capability": format!("{}.{}", cc.0, cc.1),
        "architecture": nv.as_ref().and_then(|n| n.architecture()),
        "compute_units": units,
        "precision_support": formats,
        "memory_spec": memory_spec,
        "partitioning_support": partitioning,
    });
    Ok((entry, Facts { index: dev, memory, mig }))
}

/// Peak memory bandwidth in GiB/s: memory clock × bus width × 2 (double data rate) / 8 bits, rounded to
/// hundredths; `None` unless both figures are known.
pub fn bandwidth_gib_s(clock_khz: Option<u64>, bus_width_bits: Option<u64>) -> Option<f64> {
    let bytes_per_s = (clock_khz? as f64) * 1000.0 * (bus_width_bits? as f64) * 2.0 / 8.0;
    Some((bytes_per_s / (1u64 << 30) as f64 * 100.0).round() / 100.0)
}

/// The NUMA node of the PCI device `bus_id` under `sysfs` (`/sys/bus/pci/devices`): its `numa_node` file,
/// read only when the device there is NVIDIA's (vendor `0x10de`), so that a bus id that names no GPU on
/// this machine says nothing; `-1` (no NUMA affinity) is `None`.
pub fn numa_node(sysfs: &Path, bus_id: &str) -> Option<u32> {
    let dir = sysfs.join(bus_id.to_ascii_lowercase());
    let vendor = std::fs::read_to_string(dir.join("vendor")).ok()?;
    if vendor.trim() != "0x10de" {
        return None;
    }
    std::fs::read_to_string(dir.join("numa_node")).ok()?.trim().parse::<u32>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_clock_times_width_times_two_over_eight() {
        // H100 SXM: 2619 MHz × 5120 bits × 2 / 8 = 3.35 TB/s = 3122.09 GiB/s.
        assert_eq!(bandwidth_gib_s(Some(2_619_000), Some(5120)), Some(3122.09));
        // A100 40GB: 1215 MHz, 5120 bits: 1.555 TB/s.
        assert_eq!(bandwidth_gib_s(Some(1_215_000), Some(5120)), Some(1448.39));
        assert_eq!(bandwidth_gib_s(None, Some(5120)), None);
        assert_eq!(bandwidth_gib_s(Some(1), None), None);
    }

    #[test]
    fn numa_node_only_of_an_nvidia_device() {
        let root = std::env::temp_dir().join(format!("tessera-info-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let put = |id: &str, vendor: &str, node: &str| {
            let dir = root.join(id);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("vendor"), vendor).unwrap();
            std::fs::write(dir.join("numa_node"), node).unwrap();
        };
        put("0000:3b:00.0", "0x10de\n", "1\n");
        put("0000:5e:00.0", "0x8086\n", "0\n");
        put("0000:af:00.0", "0x10de\n", "-1\n");
        assert_eq!(numa_node(&root, "0000:3B:00.0"), Some(1));
        assert_eq!(numa_node(&root, "0000:5E:00.0"), None, "not a GPU");
        assert_eq!(numa_node(&root, "0000:AF:00.0"), None, "no NUMA affinity");
        assert_eq!(numa_node(&root, "0000:10:00.0"), None, "no such device");
        std::fs::remove_dir_all(root).unwrap();
    }
}
