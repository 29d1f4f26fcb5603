//! Device attributes a CUDA program sees match the configured profiles.

use crate::common;

use common::{GIB, MIB, Sim, at, u64_at};
use serde_json::Value;
use simgpu::{Config, DeviceConfig};

/// Checks one reported device against its configuration (profile plus overrides).
fn assert_matches(dev: &Value, want: &DeviceConfig) {
    let p = want.profile;
    let num = |k: &str| u64_at(dev, k);
    assert_eq!(at(dev, "name"), p.name, "{dev}");
    assert_eq!(num("total_memory"), want.total_memory);
    assert_eq!(num("mem_info_total"), want.total_memory);
    // The probe's own primary context is the only memory in use on its private machine.
    assert_eq!(num("mem_info_free"), want.total_memory - want.context_memory);
    assert_eq!(num("sm_count"), want.sm_count as u64);
    assert_eq!(at(dev, "compute_capability"), &serde_json::json!([p.compute_capability.0, p.compute_capability.1]));
    assert_eq!(num("clock_khz"), p.clock_khz as u64);
    assert_eq!(num("memory_clock_khz"), p.memory_clock_khz as u64);
    assert_eq!(num("memory_bus_width"), p.memory_bus_width as u64);
    assert_eq!(num("l2_cache_bytes"), p.l2_cache_bytes as u64);
    assert_eq!(num("max_threads_per_block"), 1024);
    assert_eq!(num("warp_size"), 32);
    assert_eq!(num("unified_addressing"), 1);
    assert_eq!(num("vmm_supported"), 1);
    assert_eq!(num("memory_pools_supported"), 1);
    assert_eq!(num("pci_domain"), 0);
    assert_eq!(num("pci_bus"), want.pci_bus() as u64);
    assert_eq!(num("pci_device"), 0);
    assert_eq!(at(dev, "uuid"), want.uuid_string().as_str());
    assert_eq!(at(dev, "pci_bus_id").as_str().unwrap(), format!("0000:{:02X}:00.0", want.pci_bus()));
    assert_eq!(num("ordinal_by_pci_bus_id"), want.ordinal as u64);
}

/// The configuration `vars` describe, as the driver reads it.
fn config(vars: &[(&str, &str)]) -> Config {
    Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap()
}

#[test]
fn h100_defaults() {
    let r = Sim::new("h100").ok(&["attributes"]);
    assert_eq!(u64_at(&r, "driver_version"), 13000);
    assert_eq!(u64_at(&r, "device_count"), 1);
    let dev = at(&r, "devices.0");
    // Literal figures of the profile, independently of simgpu's tables...
    assert_eq!(at(dev, "name"), "NVIDIA H100 80GB HBM3");
    assert_eq!(u64_at(dev, "total_memory"), 80 * GIB);
    assert_eq!(u64_at(dev, "mem_info_free"), 80 * GIB - 500 * MIB);
    assert_eq!(u64_at(dev, "sm_count"), 132);
    assert_eq!(at(dev, "compute_capability"), &serde_json::json!([9, 0]));
    assert_eq!(u64_at(dev, "max_threads_per_sm"), 2048);
    assert_eq!(at(dev, "pci_bus_id"), "0000:10:00.0");
    // ...and everything else as the configuration defines it.
    assert_matches(dev, &config(&[]).devices[0]);
}

#[test]
fn two_devices_with_memory_override() {
    let vars = [("SIMGPU_DEVICES", "h100,small"), ("SIMGPU_MEMORY", "1=2GiB")];
    let sim = vars.iter().fold(Sim::new("two-devices"), |s, (k, v)| s.with(k, v));
    let r = sim.ok(&["attributes"]);
    assert_eq!(u64_at(&r, "device_count"), 2);
    let want = config(&vars);
    for (i, d) in want.devices.iter().enumerate() {
        assert_matches(at(&r, &format!("devices.{i}")), d);
    }
    let small = at(&r, "devices.1");
    assert_eq!(at(small, "name"), "Simulated GPU 4GB");
    assert_eq!(u64_at(small, "total_memory"), 2 * GIB, "SIMGPU_MEMORY=1=2GiB overrides the profile's 4 GiB");
    assert_eq!(u64_at(small, "mem_info_free"), 2 * GIB - 128 * MIB);
    assert_eq!(u64_at(small, "sm_count"), 20);
    assert_eq!(at(small, "compute_capability"), &serde_json::json!([8, 6]));
    assert_eq!(at(small, "pci_bus_id"), "0000:11:00.0");
    assert_eq!(u64_at(&r, "devices.0.total_memory"), 80 * GIB, "device 0 keeps its profile's memory");
    assert_ne!(at(&r, "devices.0.uuid"), at(small, "uuid"));
}
