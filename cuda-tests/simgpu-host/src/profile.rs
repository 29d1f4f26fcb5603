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
    /// The model's MIG GPU instance profiles, as NVML describes them (`nvmlDeviceGetGpuInstanceProfileInfo`);
    /// empty on models without MIG.
    pub mig_profiles: &'static [MigProfile],
    /// Board power draw reported by NVML, in milliwatts.
    pub power_mw: u32,
}

/// One MIG GPU instance profile of a model: what `nvidia-smi mig -lgip` lists for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MigProfile {
    /// The `NVML_GPU_INSTANCE_PROFILE_*` value that selects it in NVML's queries.
    pub nvml_profile: u32,
    /// The profile id NVML reports (`nvmlGpuInstanceProfileInfo_t::id`, the ID column of `nvidia-smi`).
    pub id: u32,
    /// Its name without the `MIG ` prefix, e.g. `1g.10gb`.
    pub name: &'static str,
    /// Compute slices (of 7) it takes: NVML's `sliceCount`.
    pub slices: u32,
    /// Memory slices (of 8) it takes: the `size` of its placements.
    pub memory_slices: u32,
    /// The memory slices its instances may start at (`nvidia-smi mig -lgipp`), lowest first.
    pub placements: &'static [u32],
    /// How many instances of it fit on one device.
    pub instances: u32,
    /// Streaming multiprocessors of one instance.
    pub sm_count: u32,
    /// Memory of one instance in MiB (`memorySizeMB`).
    pub memory_mib: u64,
    /// Copy engines, decoders, encoders, JPEG decoders and optical-flow accelerators of one instance.
    pub engines: [u32; 5],
}

const MIB: u64 = 1 << 20;

/// `NVML_GPU_INSTANCE_PROFILE_*` values (nvml.h).
mod gi {
    pub const SLICE_1: u32 = 0x0;
    pub const SLICE_2: u32 = 0x1;
    pub const SLICE_3: u32 = 0x2;
    pub const SLICE_4: u32 = 0x3;
    pub const SLICE_7: u32 = 0x4;
    pub const SLICE_1_REV1: u32 = 0x7;
    pub const SLICE_1_REV2: u32 = 0x9;
}

/// Placement starts of the A100 and H100 (`nvidia-smi mig -lgipp`), by profile shape.
mod starts {
    /// One memory slice, anywhere but the eighth (which only the whole-GPU profile reaches).
    pub const ONE: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
    /// Two memory slices for one compute slice (`1g.20gb`).
    pub const PAIRS: &[u32] = &[0, 2, 4, 6];
    /// Two memory slices for two compute slices (`2g.*`).
    pub const TWO: &[u32] = &[0, 2, 4];
    /// Four memory slices for three compute slices (`3g.*`): either half.
    pub const HALVES: &[u32] = &[0, 4];
    /// Only the first slice (`4g.*` and `7g.*`).
    pub const FIRST: &[u32] = &[0];
}

/// A [`MigProfile`] row: NVML profile, id, name, compute slices, memory slices and placement starts,
/// instances, SMs, MiB, engines.
#[allow(clippy::too_many_arguments)]
const fn mig(
    nvml_profile: u32,
    id: u32,
    name: &'static str,
    (slices, memory_slices, placements): (u32, u32, &'static [u32]),
    instances: u32,
    sm_count: u32,
    memory_mib: u64,
    engines: [u32; 5],
) -> MigProfile {
    MigProfile { nvml_profile, id, name, slices, memory_slices, placements, instances, sm_count, memory_mib, engines }
}

/// MIG profiles of the H100 80GB (SXM), as NVIDIA's driver lists them.
static H100_MIG: &[MigProfile] = &[
    mig(gi::SLICE_1, 19, "1g.10gb", (1, 1, starts::ONE), 7, 16, 9984, [1, 1, 0, 1, 0]),
    mig(gi::SLICE_1_REV1, 20, "1g.10gb+me", (1, 1, starts::ONE), 1, 16, 9984, [1, 1, 0, 1, 1]),
    mig(gi::SLICE_1_REV2, 15, "1g.20gb", (1, 2, starts::PAIRS), 4, 26, 20096, [1, 1, 0, 1, 0]),
    mig(gi::SLICE_2, 14, "2g.20gb", (2, 2, starts::TWO), 3, 32, 20096, [2, 2, 0, 2, 0]),
    mig(gi::SLICE_3, 9, "3g.40gb", (3, 4, starts::HALVES), 2, 60, 40448, [3, 3, 0, 3, 0]),
    mig(gi::SLICE_4, 5, "4g.40gb", (4, 4, starts::FIRST), 1, 64, 40448, [4, 4, 0, 4, 0]),
    mig(gi::SLICE_7, 0, "7g.80gb", (7, 8, starts::FIRST), 1, 132, 81152, [8, 7, 0, 7, 1]),
];

/// MIG profiles of the A100 40GB (SXM4), as NVIDIA's driver lists them.
static A100_MIG: &[MigProfile] = &[
    mig(gi::SLICE_1, 19, "1g.5gb", (1, 1, starts::ONE), 7, 14, 4864, [1, 0, 0, 0, 0]),
    mig(gi::SLICE_1_REV1, 20, "1g.5gb+me", (1, 1, starts::ONE), 1, 14, 4864, [1, 1, 0, 1, 1]),
    mig(gi::SLICE_1_REV2, 15, "1g.10gb", (1, 2, starts::PAIRS), 4, 14, 9984, [1, 1, 0, 0, 0]),
    mig(gi::SLICE_2, 14, "2g.10gb", (2, 2, starts::TWO), 3, 28, 9984, [2, 1, 0, 0, 0]),
    mig(gi::SLICE_3, 9, "3g.20gb", (3, 4, starts::HALVES), 2, 42, 20096, [3, 2, 0, 0, 0]),
    mig(gi::SLICE_4, 5, "4g.20gb", (4, 4, starts::FIRST), 1, 56, 20096, [4, 2, 0, 0, 0]),
    mig(gi::SLICE_7, 0, "7g.40gb", (7, 8, starts::FIRST), 1, 98, 40320, [7, 5, 0, 1, 1]),
];
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
        mig_profiles: H100_MIG,
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
        mig_profiles: A100_MIG,
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
        mig_profiles: &[],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profiles_agree_with_the_model() {
        for p in PROFILES {
            assert_eq!(p.mig_capable, !p.mig_profiles.is_empty(), "{}", p.key);
            for m in p.mig_profiles {
                assert!(m.sm_count <= p.sm_count && m.memory_mib * MIB <= p.total_memory, "{} {}", p.key, m.name);
                assert!(m.slices * m.instances <= 7, "{} {}", p.key, m.name);
                assert!(m.placements.len() as u32 >= m.instances, "{} {}", p.key, m.name);
                assert!(m.placements.iter().all(|s| s + m.memory_slices <= 8), "{} {}", p.key, m.name);
            }
            let ids: Vec<u32> = p.mig_profiles.iter().map(|m| m.nvml_profile).collect();
            assert!(ids.iter().enumerate().all(|(i, id)| !ids[..i].contains(id)), "{}: duplicate profile", p.key);
        }
    }
}
