//! MIG partitioning rules of the simulated devices, as NVIDIA's A100/H100 apply them: where GPU instances may
//! sit among the device's 8 memory slices and 7 compute slices, which ids they get, and the compute instance
//! profiles a GPU instance offers. Pure rules over the instances that exist; [`crate::mig_state`] keeps those
//! machine-wide.
//!
//! - A GPU instance of a profile occupies `memory_slices` slices from one of the profile's placement starts
//!   (`nvidia-smi mig -lgipp`); two instances never share a memory slice, the compute slices of all
//!   instances add up to at most 7, and a profile has at most `instances` instances (one `+me`).
//! - Its id follows from its placement, as on the real devices: 0 for the whole GPU, 1-2 for the halves
//!   (4 memory slices), 3-6 for the 2-slice placements, 7-13 for the 1-slice ones. Instances that can exist
//!   together therefore never share an id.
//! - A compute instance takes the whole GPU instance (the common `nvidia-smi mig -cgi … -C` case; id 0) or
//!   one of its compute slices (id = the slice).

use crate::profile::{MigProfile, Profile};

/// GPU instance ids are below this.
pub const MAX_GPU_INSTANCES: usize = 16;
/// Compute instance ids are below this.
pub const MAX_COMPUTE_INSTANCES: usize = 8;
/// Compute slices of a whole device.
pub const COMPUTE_SLICES: u32 = 7;
/// Memory slices of a whole device.
pub const MEMORY_SLICES: u32 = 8;

/// Why a MIG change or lookup cannot be done; each maps to one NVML return code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigError {
    /// MIG mode is off on the device (`NVML_ERROR_NOT_SUPPORTED`).
    NotEnabled,
    /// No such profile or placement (`NVML_ERROR_INVALID_ARGUMENT`).
    Invalid,
    /// Nothing free where it must go (`NVML_ERROR_INSUFFICIENT_RESOURCES`).
    Insufficient,
    /// Still has compute instances or instances exist (`NVML_ERROR_IN_USE`).
    InUse,
    /// No instance with that id (`NVML_ERROR_NOT_FOUND`).
    NotFound,
}

/// A GPU instance that exists.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuInstance {
    /// Its id on the device.
    pub id: u32,
    /// The profile it was created with.
    pub profile: &'static MigProfile,
    /// First memory slice it occupies.
    pub start: u32,
}

/// A compute instance profile of a GPU instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CiProfile {
    /// The `NVML_COMPUTE_INSTANCE_PROFILE_*` value, which is also its profile id.
    pub nvml_profile: u32,
    /// Compute slices it takes.
    pub slices: u32,
}

/// A compute instance that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeInstance {
    /// Its id within its GPU instance.
    pub id: u32,
    /// The profile it was created with.
    pub profile: CiProfile,
    /// First compute slice of its GPU instance it occupies.
    pub start: u32,
    /// Machine-wide creation number: a recreated instance gets a new one, hence a new UUID.
    pub serial: u64,
}

/// The id a GPU instance of `profile` placed at `start` has.
pub fn gpu_instance_id(profile: &MigProfile, start: u32) -> u32 {
    match profile.memory_slices {
        8 => 0,
        4 => 1 + start / 4,
        2 => 3 + start / 2,
        _ => 7 + start,
    }
}

/// Memory slices `start..start + size` as a bit mask.
fn mask(start: u32, size: u32) -> u32 {
    ((1u32 << size) - 1) << start
}

fn occupied(existing: &[GpuInstance]) -> u32 {
    existing.iter().fold(0, |m, g| m | mask(g.start, g.profile.memory_slices))
}

/// Whether a new instance of `profile` may start at `start` beside `existing`: `Invalid` for a start the
/// profile does not have, `Insufficient` when its slices or the profile's instance count are taken.
pub fn check_placement(profile: &MigProfile, start: u32, existing: &[GpuInstance]) -> Result<(), MigError> {
    if !profile.placements.contains(&start) {
        return Err(MigError::Invalid);
    }
    let same = existing.iter().filter(|g| g.profile.id == profile.id).count() as u32;
    let compute: u32 = existing.iter().map(|g| g.profile.slices).sum();
    if occupied(existing) & mask(start, profile.memory_slices) != 0
        || same >= profile.instances
        || compute + profile.slices > COMPUTE_SLICES
    {
        return Err(MigError::Insufficient);
    }
    Ok(())
}

/// Where `nvmlDeviceCreateGpuInstance` puts a new instance of `profile`: the highest free start, which keeps
/// the low slices the larger profiles need free.
pub fn choose_placement(profile: &MigProfile, existing: &[GpuInstance]) -> Result<u32, MigError> {
    profile
        .placements
        .iter()
        .rev()
        .copied()
        .find(|&s| check_placement(profile, s, existing).is_ok())
        .ok_or(MigError::Insufficient)
}

/// How many more instances of `profile` fit beside `existing` (`nvmlDeviceGetGpuInstanceRemainingCapacity`).
pub fn remaining_capacity(profile: &'static MigProfile, existing: &[GpuInstance]) -> u32 {
    let mut placed = existing.to_vec();
    let mut n = 0;
    while let Ok(start) = choose_placement(profile, &placed) {
        placed.push(GpuInstance { id: gpu_instance_id(profile, start), profile, start });
        n += 1;
    }
    n
}

/// `NVML_COMPUTE_INSTANCE_PROFILE_*` for a compute instance of `slices` compute slices.
fn ci_nvml_profile(slices: u32) -> u32 {
    match slices {
        1 => 0x0,
        2 => 0x1,
        3 => 0x2,
        4 => 0x3,
        7 => 0x4,
        8 => 0x5,
        _ => 0x6,
    }
}

/// The compute instance profiles a GPU instance of `gi` offers: the whole instance, and one compute slice
/// when it has several.
pub fn ci_profiles(gi: &MigProfile) -> Vec<CiProfile> {
    let whole = CiProfile { nvml_profile: ci_nvml_profile(gi.slices), slices: gi.slices };
    let one = CiProfile { nvml_profile: ci_nvml_profile(1), slices: 1 };
    if gi.slices > 1 { vec![one, whole] } else { vec![whole] }
}

/// The profile `nvml_profile` of a GPU instance of `gi`, if it offers it.
pub fn ci_profile(gi: &MigProfile, nvml_profile: u32) -> Option<CiProfile> {
    ci_profiles(gi).into_iter().find(|p| p.nvml_profile == nvml_profile)
}

/// SMs of a compute instance of `ci` in a GPU instance of `gi` on a `model`: the whole instance's, or for one
/// slice the model's 1-slice profile's.
pub fn ci_sm_count(model: &Profile, gi: &MigProfile, ci: CiProfile) -> u32 {
    if ci.slices == gi.slices {
        return gi.sm_count;
    }
    let one = model.mig_profiles.iter().filter(|m| m.slices == 1).map(|m| m.sm_count).min();
    one.unwrap_or(gi.sm_count / gi.slices.max(1)) * ci.slices
}

/// The compute instance profile's name: `MIG 3g.40gb` for the whole instance, `MIG 1c.3g.40gb` for a part.
pub fn ci_name(gi: &MigProfile, ci: CiProfile) -> String {
    if ci.slices == gi.slices { format!("MIG {}", gi.name) } else { format!("MIG {}c.{}", ci.slices, gi.name) }
}

/// Where a new compute instance of `ci` goes among `existing` ones of the GPU instance: the lowest free
/// compute slice (`Insufficient` when none is).
pub fn choose_ci_start(ci: CiProfile, gi: &MigProfile, existing: &[ComputeInstance]) -> Result<u32, MigError> {
    let used = existing.iter().fold(0, |m, c| m | mask(c.start, c.profile.slices));
    (0..=gi.slices - ci.slices)
        .step_by(ci.slices as usize)
        .find(|&s| used & mask(s, ci.slices) == 0)
        .ok_or(MigError::Insufficient)
}

/// How many more compute instances of `ci` fit among `existing`.
pub fn ci_remaining_capacity(ci: CiProfile, gi: &MigProfile, existing: &[ComputeInstance]) -> u32 {
    let used = existing.iter().fold(0, |m, c| m | mask(c.start, c.profile.slices));
    (0..=gi.slices - ci.slices).step_by(ci.slices as usize).filter(|&s| used & mask(s, ci.slices) == 0).count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile;

    fn p(model: &str, id: u32) -> &'static MigProfile {
        profile::find(model).unwrap().mig_profiles.iter().find(|m| m.id == id).unwrap()
    }

    fn place(list: &mut Vec<GpuInstance>, profile: &'static MigProfile) -> Result<u32, MigError> {
        let start = choose_placement(profile, list)?;
        list.push(GpuInstance { id: gpu_instance_id(profile, start), profile, start });
        Ok(start)
    }

    #[test]
    fn seven_small_instances_then_full() {
        let mut gis = Vec::new();
        let one = p("h100", 19);
        assert_eq!(remaining_capacity(one, &gis), 7);
        for expected in (0..7).rev() {
            assert_eq!(place(&mut gis, one), Ok(expected));
        }
        assert_eq!(place(&mut gis, one), Err(MigError::Insufficient));
        let ids: Vec<u32> = gis.iter().map(|g| g.id).collect();
        assert_eq!(ids, [13, 12, 11, 10, 9, 8, 7]);
        assert_eq!(remaining_capacity(p("h100", 0), &gis), 0);
    }

    #[test]
    fn halves_and_mixed_shapes() {
        let mut gis = Vec::new();
        assert_eq!(place(&mut gis, p("a100", 9)), Ok(4), "3g takes the upper half first");
        assert_eq!(remaining_capacity(p("a100", 5), &gis), 1, "4g still fits below");
        assert_eq!(remaining_capacity(p("a100", 19), &gis), 4);
        assert_eq!(place(&mut gis, p("a100", 5)), Ok(0));
        assert_eq!(remaining_capacity(p("a100", 19), &gis), 0);
        assert_eq!(check_placement(p("a100", 19), 3, &gis), Err(MigError::Insufficient));
        assert_eq!(check_placement(p("a100", 14), 1, &[]), Err(MigError::Invalid), "2g starts are even");
        assert_eq!(check_placement(p("a100", 19), 7, &[]), Err(MigError::Invalid), "no 1g on the 8th slice");
    }

    #[test]
    fn one_media_instance_per_device() {
        let mut gis = Vec::new();
        assert_eq!(remaining_capacity(p("h100", 20), &gis), 1);
        place(&mut gis, p("h100", 20)).unwrap();
        assert_eq!(remaining_capacity(p("h100", 20), &gis), 0);
        assert_eq!(remaining_capacity(p("h100", 19), &gis), 6);
    }

    #[test]
    fn compute_instances() {
        let gi = p("h100", 9);
        let profiles = ci_profiles(gi);
        assert_eq!(profiles.iter().map(|c| (c.nvml_profile, c.slices)).collect::<Vec<_>>(), [(0, 1), (2, 3)]);
        let whole = profiles[1];
        assert_eq!(ci_name(gi, whole), "MIG 3g.40gb");
        assert_eq!(ci_name(gi, profiles[0]), "MIG 1c.3g.40gb");
        assert_eq!(ci_sm_count(profile::find("h100").unwrap(), gi, profiles[0]), 16);
        let mut cis = Vec::new();
        assert_eq!(ci_remaining_capacity(profiles[0], gi, &cis), 3);
        let start = choose_ci_start(profiles[0], gi, &cis).unwrap();
        cis.push(ComputeInstance { id: start, profile: profiles[0], start, serial: 1 });
        assert_eq!(choose_ci_start(whole, gi, &cis), Err(MigError::Insufficient));
        assert_eq!(ci_remaining_capacity(profiles[0], gi, &cis), 2);
        assert_eq!(ci_profiles(p("h100", 19)).len(), 1);
    }
}
