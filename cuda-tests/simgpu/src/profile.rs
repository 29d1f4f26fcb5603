//! Built-in device profiles: the figures a simulated device reports.

/// Static description of one simulated device model.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Short name used in `SIMGPU_DEVICES`.
    pub key: &'static str,
    /// Marketing name `cuDeviceGetName` and NVML report.
    pub name: &'static str,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Core clock in kHz.
    pub clock_khz: u32,
    /// Memory clock in kHz.
    pub memory_clock_khz: u32,
    /// Memory bus width in bits.
    pub memory_bus_width: u32,
    /// L2 cache in bytes.
    pub l2_cache_bytes: u32,
    /// Device memory each context costs (the driver's own reservation).
    pub context_memory: u64,
    /// Whether the model supports MIG partitioning.
    pub mig_capable: bool,
    /// Board power draw reported by NVML, in milliwatts.
    pub power_mw: u32,
}

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The profiles `SIMGPU_DEVICES` accepts.
pub static PROFILES: &[Profile] = &[
    Profile {
        key: "h100",
        name: "NVIDIA H100 80GB HBM3",
        total_memory: 80 * GIB,
        sm_count: 132,
        compute_capability: (9, 0),
        clock_khz: 1_980_000,
        memory_clock_khz: 2_619_000,
        memory_bus_width: 5120,
        l2_cache_bytes: 50 * MIB as u32,
        context_memory: 500 * MIB,
        mig_capable: true,
        power_mw: 700_000,
    },
    Profile {
        key: "a100",
        name: "NVIDIA A100-SXM4-40GB",
        total_memory: 40 * GIB,
        sm_count: 108,
        compute_capability: (8, 0),
        clock_khz: 1_410_000,
        memory_clock_khz: 1_215_000,
        memory_bus_width: 5120,
        l2_cache_bytes: 40 * MIB as u32,
        context_memory: 420 * MIB,
        mig_capable: true,
        power_mw: 400_000,
    },
    Profile {
        key: "small",
        name: "Simulated GPU 4GB",
        total_memory: 4 * GIB,
        sm_count: 20,
        compute_capability: (8, 6),
        clock_khz: 1_500_000,
        memory_clock_khz: 7_000_000,
        memory_bus_width: 128,
        l2_cache_bytes: 2 * MIB as u32,
        context_memory: 128 * MIB,
        mig_capable: false,
        power_mw: 75_000,
    },
];

/// Looks a profile up by key, accepting the long aliases `h100-80gb`, `a100-40gb` and `small-4gb`.
pub fn find(key: &str) -> Option<&'static Profile> {
    let key = key.trim().to_ascii_lowercase();
    let key = match key.as_str() {
        "h100-80gb" => "h100",
        "a100-40gb" => "a100",
        "small-4gb" => "small",
        k => k,
    };
    PROFILES.iter().find(|p| p.key == key)
}
