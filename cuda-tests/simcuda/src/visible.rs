//! `CUDA_VISIBLE_DEVICES`: which devices this process enumerates, in which order, as the real driver reads
//! it. Maps each CUDA ordinal to a physical device and, for a MIG device, its instance.
//!
//! - Unset: every configured device, in ordinal order.
//! - Set: a comma-separated list of device indices, `GPU-<uuid>` (any unique prefix, `GPU-` included) or
//!   `MIG-<uuid>` entries (or the older `MIG-GPU-<uuid>/<gi>/<ci>` form), enumerated in the list's order.
//!   The first entry that names no usable device ends the list: the devices before it stay visible. An
//!   empty value leaves no device, and `cuInit` then fails with `CUDA_ERROR_NO_DEVICE`.
//! - A GPU in MIG mode cannot run CUDA work itself (only its MIG devices can), so naming it by index or
//!   UUID is an invalid entry; a `MIG-` UUID naming no existing compute instance is invalid too.
//! - A process enumerates at most one MIG device (CUDA 11+): a second `MIG-` entry ends the list.
//!
//! A MIG device keeps its parent's model (name, compute capability, PCI location) but has its GPU
//! instance's memory and its compute instance's SMs, and the MIG UUID; its allocations are charged both to
//! the parent device and to the GPU instance in the machine-wide MIG state ([`simgpu::mig_state`]).

use simgpu::mig::{self, ComputeInstance, GpuInstance};
use simgpu::mig_state::MigState;
use simgpu::{Config, DeviceConfig};

/// The MIG instance a CUDA device is.
#[derive(Debug, Clone, PartialEq)]
pub struct MigDevice {
    /// GPU instance id on the parent.
    pub gpu_instance: u32,
    /// Creation number of the compute instance (identifies it machine-wide).
    pub serial: u64,
    /// The `MIG-` UUID's bytes.
    pub uuid: [u8; 16],
}

/// One device this process enumerates.
#[derive(Debug, Clone, PartialEq)]
pub struct VisibleDevice {
    /// Index of the physical device in the configuration and the state file.
    pub physical: usize,
    /// The device as CUDA describes it: the physical one's, or for a MIG device its instance's memory and
    /// SMs (the ordinal stays the parent's).
    pub config: DeviceConfig,
    /// Set for a MIG device.
    pub mig: Option<MigDevice>,
}

impl VisibleDevice {
    /// The UUID `cuDeviceGetUuid` reports.
    pub fn uuid(&self) -> [u8; 16] {
        self.mig.as_ref().map_or_else(|| self.config.uuid(), |m| m.uuid)
    }
}

fn whole(c: &DeviceConfig) -> VisibleDevice {
    VisibleDevice { physical: c.ordinal as usize, config: c.clone(), mig: None }
}

fn mig_device(c: &DeviceConfig, gi: &GpuInstance, ci: &ComputeInstance) -> VisibleDevice {
    let mut config = c.clone();
    config.total_memory = gi.profile.memory_mib << 20;
    config.sm_count = mig::ci_sm_count(c.profile, gi.profile, ci.profile);
    let uuid = mig::mig_uuid(c.ordinal, gi, ci);
    VisibleDevice {
        physical: c.ordinal as usize,
        config,
        mig: Some(MigDevice { gpu_instance: gi.id, serial: ci.serial, uuid }),
    }
}

/// Every MIG device of the machine now, with its textual UUID.
fn mig_devices(config: &Config, state: &MigState) -> Vec<(String, VisibleDevice)> {
    let mut all = Vec::new();
    for c in config.devices.iter().filter(|c| c.profile.mig_capable) {
        let now = state.device(c.ordinal as usize);
        if !now.enabled {
            continue;
        }
        for (gi, ci) in now.mig_devices() {
            let v = mig_device(c, gi, ci);
            all.push((mig::uuid_text("MIG", &v.uuid()), v));
        }
        // The older form names the parent GPU and the instance ids.
        for (gi, ci) in now.mig_devices() {
            let v = mig_device(c, gi, ci);
            all.push((format!("MIG-{}/{}/{}", c.uuid_string(), gi.id, ci.id), v));
        }
    }
    all
}

/// The one candidate whose name starts with `entry` (case-insensitive), if exactly one does.
fn unique<'a, T>(entry: &str, candidates: impl Iterator<Item = (String, &'a T)>) -> Option<&'a T> {
    let entry = entry.to_ascii_lowercase();
    let mut found = candidates.filter(|(name, _)| name.to_ascii_lowercase().starts_with(&entry));
    let first = found.next()?;
    found.next().is_none().then_some(first.1)
}

/// The devices `value` (the variable's text, `None` when unset) makes visible on the machine `config`
/// describes, reading MIG modes and instances from `state` (needed only when the variable is set).
pub fn resolve(value: Option<&str>, config: &Config, state: Option<&MigState>) -> Vec<VisibleDevice> {
    let Some(value) = value else { return config.devices.iter().map(whole).collect() };
    let in_mig_mode =
        |c: &DeviceConfig| c.profile.mig_capable && state.is_some_and(|s| s.device(c.ordinal as usize).enabled);
    let migs = if value.to_ascii_uppercase().contains("MIG-") { state.map(|s| mig_devices(config, s)) } else { None };
    let mut visible: Vec<VisibleDevice> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let found = if entry.len() > 4 && entry[..4].eq_ignore_ascii_case("MIG-") {
            let candidates = migs.iter().flatten().map(|(name, v)| (name.clone(), v));
            unique(entry, candidates).filter(|_| visible.iter().all(|v| v.mig.is_none())).cloned()
        } else if entry.len() > 4 && entry[..4].eq_ignore_ascii_case("GPU-") {
            unique(entry, config.devices.iter().map(|c| (c.uuid_string(), c))).filter(|c| !in_mig_mode(c)).map(whole)
        } else {
            // Digits only: the real driver reads `-1` or `1x` as an invalid entry too.
            let index = entry.bytes().all(|b| b.is_ascii_digit()).then(|| entry.parse::<usize>().ok()).flatten();
            index.and_then(|i| config.devices.get(i)).filter(|c| !in_mig_mode(c)).map(whole)
        };
        // A device listed twice ends the list, as any other entry that adds no new device.
        match found {
            Some(v) if !visible.iter().any(|seen| seen.physical == v.physical && seen.mig == v.mig) => visible.push(v),
            _ => break,
        }
    }
    visible
}

/// Total and free memory of visible device `device` across all processes (`cuMemGetInfo`): a MIG device's
/// is its GPU instance's, bounded by what its parent has free.
pub fn memory_info(d: &crate::driver::Driver, device: usize) -> (u64, u64) {
    use std::sync::atomic::Ordering;
    let v = &d.visible[device];
    let parent = d.state.device(v.physical);
    let parent_free =
        parent.total_memory.load(Ordering::Acquire).saturating_sub(parent.used_memory.load(Ordering::Acquire));
    match (&v.mig, &d.mig) {
        (Some(m), Some(state)) => {
            let total = v.config.total_memory;
            let used = state.instance_used(v.physical, m.gpu_instance);
            (total, total.saturating_sub(used).min(parent_free))
        }
        _ => (parent.total_memory.load(Ordering::Acquire), parent_free),
    }
}
