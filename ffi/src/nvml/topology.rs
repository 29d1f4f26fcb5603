//! Topology values of `nvml.h`: how far apart two GPUs are (`nvmlGpuTopologyLevel_t`), peer-to-peer status
//! (`nvmlGpuP2PStatus_t`, `nvmlGpuP2PCapsIndex_t`) and affinity scopes (`nvmlAffinityScope_t`).

/// `NVML_TOPOLOGY_INTERNAL`: the same device (or two GPUs of one board).
pub const NVML_TOPOLOGY_INTERNAL: u32 = 0;
/// `NVML_TOPOLOGY_SINGLE`: one PCIe switch between them.
pub const NVML_TOPOLOGY_SINGLE: u32 = 10;
/// `NVML_TOPOLOGY_MULTIPLE`: several PCIe switches, no host bridge.
pub const NVML_TOPOLOGY_MULTIPLE: u32 = 20;
/// `NVML_TOPOLOGY_HOSTBRIDGE`: one PCIe host bridge.
pub const NVML_TOPOLOGY_HOSTBRIDGE: u32 = 30;
/// `NVML_TOPOLOGY_NODE` (`NVML_TOPOLOGY_CPU`): host bridges of one NUMA node.
pub const NVML_TOPOLOGY_NODE: u32 = 40;
/// `NVML_TOPOLOGY_SYSTEM`: the interconnect between NUMA nodes.
pub const NVML_TOPOLOGY_SYSTEM: u32 = 50;

/// `NVML_P2P_CAPS_INDEX_READ`.
pub const NVML_P2P_CAPS_INDEX_READ: u32 = 0;
/// `NVML_P2P_CAPS_INDEX_WRITE`.
pub const NVML_P2P_CAPS_INDEX_WRITE: u32 = 1;
/// `NVML_P2P_CAPS_INDEX_NVLINK`.
pub const NVML_P2P_CAPS_INDEX_NVLINK: u32 = 2;
/// `NVML_P2P_CAPS_INDEX_ATOMICS`.
pub const NVML_P2P_CAPS_INDEX_ATOMICS: u32 = 3;
/// `NVML_P2P_CAPS_INDEX_PCI` (formerly `…_PROP`).
pub const NVML_P2P_CAPS_INDEX_PCI: u32 = 4;
/// `NVML_P2P_CAPS_INDEX_UNKNOWN`: one past the defined indices.
pub const NVML_P2P_CAPS_INDEX_UNKNOWN: u32 = 5;

/// `NVML_P2P_STATUS_OK`.
pub const NVML_P2P_STATUS_OK: u32 = 0;
/// `NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED`: the path between the two crosses what P2P cannot.
pub const NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: u32 = 3;
/// `NVML_P2P_STATUS_NOT_SUPPORTED`.
pub const NVML_P2P_STATUS_NOT_SUPPORTED: u32 = 5;

/// `NVML_AFFINITY_SCOPE_NODE`: NUMA node scope.
pub const NVML_AFFINITY_SCOPE_NODE: u32 = 0;
/// `NVML_AFFINITY_SCOPE_SOCKET`: processor socket scope.
pub const NVML_AFFINITY_SCOPE_SOCKET: u32 = 1;
