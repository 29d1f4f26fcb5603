//! The node's GPUs as the plugin advertises them: read from the daemon's `stats` (ordinal, UUID, memory,
//! PCI address) through `tessera-client`, completed with what NVML tells about each (its `/dev/nvidiaN`
//! minor number, its NUMA node). Each GPU is advertised to kubelet as `replicas` devices named
//! `<UUID>-<i>` ([`replica_id`]).

use tessera_client::{Client, DeviceStats};
use tessera_hwinfo::driver::Driver;
use tessera_hwinfo::nvml::Nvml;

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
    /// The daemon reported it at the last refresh.
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

    /// (minor number, NUMA node) of the device at `bus_id`, each `None` when unknown.
    fn of(&self, bus_id: Option<&str>) -> (Option<u32>, Option<i64>) {
        let Some(device) = self.nvml.as_ref().zip(bus_id).and_then(|(nvml, id)| nvml.device(id)) else {
            return (None, None);
        };
        (device.minor_number(), device.numa_node().map(i64::from))
    }
}

/// The GPU a device of `stats` is.
fn gpu_of(device: &DeviceStats, facts: &NvmlFacts) -> Gpu {
    let (minor, numa_node) = facts.of(device.pci_bus_id.as_deref());
    Gpu {
        ordinal: device.device,
        key: device.uuid.clone().unwrap_or_else(|| format!("gpu{}", device.device)),
        memory_total: device.memory_total,
        minor: minor.unwrap_or(device.device),
        numa_node,
        healthy: true,
    }
}

/// The GPUs now: those the daemon reports, healthy, then those of `before` it no longer reports, kept and
/// unhealthy (kubelet must stop placing containers on them, and may see them come back). When the daemon
/// does not answer, every GPU of `before` is unhealthy (no vGPU can be created) and the error is returned
/// beside.
pub fn refresh(client: &Client, facts: &NvmlFacts, before: &[Gpu]) -> (Vec<Gpu>, Option<String>) {
    let stats = match client.stats(None) {
        Ok(stats) => stats,
        Err(e) => {
            let gpus = before.iter().map(|g| Gpu { healthy: false, ..g.clone() }).collect();
            return (gpus, Some(format!("cannot read the daemon's devices: {e}")));
        }
    };
    let mut gpus: Vec<Gpu> = stats.devices.iter().map(|d| gpu_of(d, facts)).collect();
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
