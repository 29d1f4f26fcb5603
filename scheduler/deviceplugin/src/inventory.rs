//! The node's GPUs as the plugin advertises them: read from the daemon's `stats` (ordinal, UUID, memory,
//! PCI address) through `tessera-client`, completed with what NVML tells about each (its `/dev/nvidiaN`
//! minor number, its NUMA node). Each GPU is advertised to kubelet as `replicas` devices named
//! `<UUID>-<i>` ([`replica_id`]).

use tessera_client::{Client, DeviceStats};
use tessera_host::driver::Driver;
use tessera_host::nvml::Nvml;

/// The most characters kubelet accepts in a device ID.
pub const MAX_ID: usize = 63;

/// One GPU of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The daemon's device ordinal (what a vGPU spec names).
    pub ordinal: u32,
    /// What names it in replica IDs and `NVIDIA_VISIBLE_DEVICES`: its UUID, or `gpu<ordinal>` when NVML
    /// does not tell one.
    pub key: String,
    /// Its memory, in bytes.
    pub memory_total: u64,
    /// N of `/dev/nvidiaN` (NVML's minor number; the ordinal when NVML does not tell).
    pub minor: u32,
    /// Its NUMA node, when NVML tells one.
    pub numa_node: Option<i64>,
    /// Its PCI address, when the daemon told it (how NVML is asked about it).
    pub bus_id: Option<String>,
    /// At the last refresh the daemon reported it and NVML did not call it lost.
    pub healthy: bool,
}

/// The ID of replica `index` of the GPU with key `key`.
pub fn replica_id(key: &str, index: u32) -> String {
    format!("{key}-{index}")
}

/// The GPU key and replica index of replica ID `id`, or `None` when it is not of the form `<key>-<i>`.
pub fn parse_replica_id(id: &str) -> Option<(&str, u32)> {
    let (key, index) = id.rsplit_once('-')?;
    if key.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((key, index.parse().ok()?))
}

/// The NVML facts of one device (minor number, NUMA node), by PCI bus id; NVML is opened once.
pub struct NvmlFacts {
    nvml: Option<Nvml>,
}

impl NvmlFacts {
    /// Opens the NVML that goes with the driver in use (the machine's, else the simulated one); without
    /// one, every fact is unknown.
    pub fn open() -> NvmlFacts {
        let nvml = Driver::load().ok().and_then(|driver| Nvml::open(&driver.origin));
        NvmlFacts { nvml }
    }

    /// No NVML: every fact unknown.
    pub fn none() -> NvmlFacts {
        NvmlFacts { nvml: None }
    }

    /// What NVML tells of the device at `bus_id`: (lost, minor number, NUMA node); not lost and unknown
    /// facts without NVML or a bus id.
    fn of(&self, bus_id: Option<&str>) -> (bool, Option<u32>, Option<i64>) {
        let Some(device) = self.nvml.as_ref().zip(bus_id).and_then(|(nvml, id)| nvml.device(id)) else {
            return (false, None, None);
        };
        if device.is_lost() {
            return (true, None, None);
        }
        (false, device.minor_number(), device.numa_node().map(i64::from))
    }
}

/// The GPU a device of `stats` is. What the daemon or NVML no longer tells of a GPU it told before (a lost
/// GPU has no UUID or bus id any more) is taken from `before`, so the GPU keeps its replica IDs and turns
/// unhealthy rather than becoming another GPU.
fn gpu_of(device: &DeviceStats, facts: &NvmlFacts, before: Option<&Gpu>) -> Gpu {
    let bus_id = device.pci_bus_id.clone().or_else(|| before.and_then(|b| b.bus_id.clone()));
    let (lost, minor, numa_node) = facts.of(bus_id.as_deref());
    let key = device.uuid.clone().or_else(|| before.map(|b| b.key.clone()));
    Gpu {
        ordinal: device.device,
        key: key.unwrap_or_else(|| format!("gpu{}", device.device)),
        memory_total: device.memory_total,
        minor: minor.or(before.map(|b| b.minor)).unwrap_or(device.device),
        numa_node: numa_node.or(before.and_then(|b| b.numa_node)),
        bus_id,
        healthy: !lost,
    }
}

/// The GPUs now: those the daemon reports, healthy unless NVML calls them lost, then those of `before` it
/// no longer reports, kept and unhealthy (kubelet must stop placing containers on them, and may see them
/// come back). When the daemon does not answer, every GPU of `before` is unhealthy (no vGPU can be
/// created) and the error is returned beside.
pub fn refresh(client: &Client, facts: &NvmlFacts, before: &[Gpu]) -> (Vec<Gpu>, Option<String>) {
    let stats = match client.stats(None) {
        Ok(stats) => stats,
        Err(e) => {
            let gpus = before.iter().map(|g| Gpu { healthy: false, ..g.clone() }).collect();
            return (gpus, Some(format!("cannot read the daemon's devices: {e}")));
        }
    };
    let mut gpus: Vec<Gpu> =
        stats.devices.iter().map(|d| gpu_of(d, facts, before.iter().find(|b| b.ordinal == d.device))).collect();
    for lost in before {
        if !gpus.iter().any(|g| g.key == lost.key) {
            gpus.push(Gpu { healthy: false, ..lost.clone() });
        }
    }
    (gpus, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_ids_round_trip_and_fit_kubelet() {
        let uuid = "GPU-fef8089b-4820-abfc-e83e-94318197576e";
        let id = replica_id(uuid, 99);
        assert!(id.len() <= MAX_ID, "{id}");
        assert_eq!(parse_replica_id(&id), Some((uuid, 99)));
        assert_eq!(parse_replica_id("gpu0-3"), Some(("gpu0", 3)));
        for bad in ["", "GPU", "GPU-", "-3", "GPU-x", "GPU-1a", "GPU-+1", "GPU-99999999999"] {
            assert_eq!(parse_replica_id(bad), None, "{bad:?}");
        }
    }
}
