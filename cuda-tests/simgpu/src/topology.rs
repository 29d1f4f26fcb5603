//! How the simulated devices connect to each other and to the host: a fixed, documented layout that
//! depends only on the number of devices, so every process derives the same one.
//!
//! - Devices sit in pairs behind one PCIe switch: 0-1, 2-3, 4-5, … (`NVML_TOPOLOGY_SINGLE` within a pair).
//! - A machine of 4 devices or more has two NUMA nodes (two CPU sockets); the devices are split between them
//!   by whole switches, the first half on node 0 (4 devices: 0-1 | 2-3; 8 devices: 0-3 | 4-7). Two devices
//!   of one node behind different switches meet at `NVML_TOPOLOGY_NODE`, devices of different nodes at
//!   `NVML_TOPOLOGY_SYSTEM`. Fewer than 4 devices share one node.
//! - The host's online CPUs are split evenly between the nodes (each node gets them all when there are fewer
//!   CPUs than nodes); a device's CPU affinity is its node's CPUs.
//! - There is no NVLink: peer-to-peer goes over PCIe, within a node only.

use tessera_ffi::nvml::{NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_NODE, NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_SYSTEM};

/// Devices behind one PCIe switch.
pub const DEVICES_PER_SWITCH: usize = 2;

/// The layout of a machine of `devices` devices on a host of `cpus` online CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// Devices of the machine.
    pub devices: usize,
    /// Online CPUs of the host.
    pub cpus: usize,
}

impl Topology {
    /// The layout for `devices` devices on this host.
    pub fn of_host(devices: usize) -> Topology {
        // SAFETY: sysconf has no preconditions; a failure answers -1, taken as one CPU.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        Topology { devices, cpus: cpus.max(1) as usize }
    }

    /// NUMA nodes of the machine.
    pub fn nodes(&self) -> usize {
        if self.devices >= 4 { 2 } else { 1 }
    }

    /// Devices on each node but perhaps the last: half the devices, rounded up to whole switches.
    fn per_node(&self) -> usize {
        let half = self.devices.div_ceil(self.nodes());
        half.div_ceil(DEVICES_PER_SWITCH) * DEVICES_PER_SWITCH
    }

    /// The PCIe switch device `ordinal` sits behind.
    pub fn switch_of(&self, ordinal: usize) -> usize {
        ordinal / DEVICES_PER_SWITCH
    }

    /// The NUMA node of device `ordinal`.
    pub fn node_of(&self, ordinal: usize) -> usize {
        ordinal / self.per_node()
    }

    /// `nvmlDeviceGetTopologyCommonAncestor` between devices `a` and `b` (an `NVML_TOPOLOGY_*` value).
    pub fn common_ancestor(&self, a: usize, b: usize) -> u32 {
        if a == b {
            NVML_TOPOLOGY_INTERNAL
        } else if self.switch_of(a) == self.switch_of(b) {
            NVML_TOPOLOGY_SINGLE
        } else if self.node_of(a) == self.node_of(b) {
            NVML_TOPOLOGY_NODE
        } else {
            NVML_TOPOLOGY_SYSTEM
        }
    }

    /// The CPUs of NUMA node `node`.
    pub fn node_cpus(&self, node: usize) -> std::ops::Range<usize> {
        let nodes = self.nodes();
        if self.cpus < nodes {
            return 0..self.cpus;
        }
        node * self.cpus / nodes..(node + 1) * self.cpus / nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_and_eight_devices() {
        let t = Topology { devices: 4, cpus: 2 };
        assert_eq!(t.common_ancestor(0, 0), NVML_TOPOLOGY_INTERNAL);
        assert_eq!(t.common_ancestor(0, 1), NVML_TOPOLOGY_SINGLE);
        assert_eq!(t.common_ancestor(1, 2), NVML_TOPOLOGY_SYSTEM);
        assert_eq!((t.node_cpus(0), t.node_cpus(1)), (0..1, 1..2));
        let t = Topology { devices: 8, cpus: 16 };
        assert_eq!(t.common_ancestor(0, 3), NVML_TOPOLOGY_NODE);
        assert_eq!(t.common_ancestor(3, 4), NVML_TOPOLOGY_SYSTEM);
        assert_eq!(t.node_of(7), 1);
        assert_eq!(t.node_cpus(1), 8..16);
        let t = Topology { devices: 6, cpus: 1 };
        assert_eq!((t.node_of(3), t.node_of(4)), (0, 1));
        assert_eq!(t.node_cpus(1), 0..1);
        let t = Topology { devices: 3, cpus: 4 };
        assert_eq!((t.nodes(), t.common_ancestor(0, 2)), (1, NVML_TOPOLOGY_NODE));
    }
}
