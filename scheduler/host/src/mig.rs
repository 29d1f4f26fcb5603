//! MIG instances through NVML, as `nvidia-smi mig -cgi P -C` makes them: a GPU instance of a profile and
//! one compute instance spanning it, which together are one MIG device (`MIG-<uuid>`) a CUDA program
//! selects with `CUDA_VISIBLE_DEVICES`. The calls are nvml.h's (R470+), the structs `tessera_ffi::nvml`'s.

use crate::nvml::{Device, ok};
use std::ffi::c_uint;
use tessera_ffi::nvml::{
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS, NvmlComputeInstance, NvmlComputeInstanceInfo, NvmlComputeInstanceProfileInfo, NvmlDevice,
    NvmlGpuInstance, NvmlGpuInstanceInfo, NvmlReturn,
};

/// `NVML_COMPUTE_INSTANCE_PROFILE_*` values asked about (0..COUNT, with a margin for newer GPUs).
const MAX_CI_PROFILE: u32 = 16;

/// A zeroed GPU instance info, for NVML to fill.
fn gi_info_zero() -> NvmlGpuInstanceInfo {
    // SAFETY: a plain C struct of integers and a pointer, for which all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Why a MIG operation did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigError {
    /// The device or the library has no MIG, or MIG mode is off.
    NotSupported(String),
    /// No room on the device for another instance of the profile.
    NoRoom(String),
    /// No such instance.
    NotFound(String),
    /// NVML refused.
    Failed(String),
}

/// A MIG device made by [`Device::create_mig_instance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// The GPU instance's id.
    pub gpu_instance: u32,
    /// The compute instance's id within it.
    pub compute_instance: u32,
    /// The MIG device's UUID (`MIG-...`), when NVML lists it.
    pub uuid: Option<String>,
}

/// A failed call `what` with NVML code `code`, classified.
fn failure(what: &str, code: NvmlReturn) -> MigError {
    let text = format!("{what} failed with NVML error {code}");
    match code {
        NVML_ERROR_NOT_SUPPORTED => MigError::NotSupported(text),
        NVML_ERROR_INSUFFICIENT_RESOURCES => MigError::NoRoom(text),
        _ => MigError::Failed(text),
    }
}

impl Device<'_> {
    /// The entry point `name` or a `NotSupported` error naming it.
    fn mig_call<F: Copy>(&self, name: &str) -> Result<F, MigError> {
        self.nvml.symbol(name).ok_or_else(|| MigError::NotSupported(format!("{} has no {name}", self.nvml.name())))
    }

    /// Creates a GPU instance of profile `profile_id` (`NVML_GPU_INSTANCE_PROFILE_*`) and one compute
    /// instance spanning it.
    pub fn create_mig_instance(&self, profile_id: u32) -> Result<MigInstance, MigError> {
        let create_gi: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn =
            self.mig_call("nvmlDeviceCreateGpuInstance")?;
        let mut gi: NvmlGpuInstance = std::ptr::null_mut();
        // SAFETY: NVML's handle, a profile id and a valid out-pointer.
        let code = unsafe { create_gi(self.handle, profile_id, &mut gi) };
        if code != NVML_SUCCESS {
            return Err(failure("nvmlDeviceCreateGpuInstance", code));
        }
        match self.fill_gpu_instance(gi) {
            Ok(done) => Ok(done),
            Err(e) => {
                // Leave nothing half made.
                if let Ok(destroy) =
                    self.mig_call::<unsafe extern "C" fn(NvmlGpuInstance) -> NvmlReturn>("nvmlGpuInstanceDestroy")
                {
                    // SAFETY: the GPU instance just created.
                    unsafe { destroy(gi) };
                }
                Err(e)
            }
        }
    }

    /// Creates the compute instance spanning GPU instance `gi` and names the MIG device.
    fn fill_gpu_instance(&self, gi: NvmlGpuInstance) -> Result<MigInstance, MigError> {
        let gi_info: unsafe extern "C" fn(NvmlGpuInstance, *mut NvmlGpuInstanceInfo) -> NvmlReturn =
            self.mig_call("nvmlGpuInstanceGetInfo")?;
        let mut info = gi_info_zero();
        // SAFETY: a GPU instance handle and a valid out-pointer.
        let code = unsafe { gi_info(gi, &mut info) };
        if code != NVML_SUCCESS {
            return Err(failure("nvmlGpuInstanceGetInfo", code));
        }
        let ci_profile: unsafe extern "C" fn(
            NvmlGpuInstance,
            c_uint,
            c_uint,
            *mut NvmlComputeInstanceProfileInfo,
        ) -> NvmlReturn = self.mig_call("nvmlGpuInstanceGetComputeInstanceProfileInfo")?;
        // The compute instance profile with the most slices the GPU instance offers spans it.
        let best = (0..MAX_CI_PROFILE)
            .filter_map(|p| {
                let mut ci = NvmlComputeInstanceProfileInfo::default();
                // SAFETY: a GPU instance handle, two enum values and a valid out-pointer.
                ok(unsafe { ci_profile(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut ci) })?;
                (ci.instance_count > 0).then_some(ci)
            })
            .max_by_key(|ci| ci.slice_count)
            .ok_or_else(|| MigError::Failed(format!("GPU instance {} offers no compute instance profile", info.id)))?;
        let create_ci: unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance) -> NvmlReturn =
            self.mig_call("nvmlGpuInstanceCreateComputeInstance")?;
        let mut ci: NvmlComputeInstance = std::ptr::null_mut();
        // SAFETY: a GPU instance handle, a profile id and a valid out-pointer.
        let code = unsafe { create_ci(gi, best.id, &mut ci) };
        if code != NVML_SUCCESS {
            return Err(failure("nvmlGpuInstanceCreateComputeInstance", code));
        }
        let ci_id = self.compute_instance_id(ci).unwrap_or(0);
        let uuid = self.mig_devices().into_iter().find(|(g, c, _)| *g == info.id && *c == ci_id).map(|(_, _, u)| u);
        Ok(MigInstance { gpu_instance: info.id, compute_instance: ci_id, uuid })
    }

    /// The id of compute instance `ci` (`nvmlComputeInstanceGetInfo_v2`).
    fn compute_instance_id(&self, ci: NvmlComputeInstance) -> Option<u32> {
        let f: unsafe extern "C" fn(NvmlComputeInstance, *mut NvmlComputeInstanceInfo) -> NvmlReturn =
            self.nvml.symbol("nvmlComputeInstanceGetInfo_v2")?;
        // SAFETY: a plain C struct of integers and pointers, for which all zeroes is a valid value.
        let mut info: NvmlComputeInstanceInfo = unsafe { std::mem::zeroed() };
        // SAFETY: a compute instance handle and a valid out-pointer.
        ok(unsafe { f(ci, &mut info) })?;
        Some(info.id)
    }

    /// The MIG devices on this device: (GPU instance id, compute instance id, UUID).
    pub fn mig_devices(&self) -> Vec<(u32, u32, String)> {
        let max = self.uint("nvmlDeviceGetMaxMigDeviceCount").unwrap_or(0);
        let Some(by_index) =
            self.nvml.symbol::<unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlDevice) -> NvmlReturn>(
                "nvmlDeviceGetMigDeviceHandleByIndex",
            )
        else {
            return Vec::new();
        };
        (0..max)
            .filter_map(|i| {
                let mut handle: NvmlDevice = std::ptr::null_mut();
                // SAFETY: NVML's handle, an index and a valid out-pointer.
                ok(unsafe { by_index(self.handle, i, &mut handle) })?;
                let mig = Device { nvml: self.nvml, handle };
                Some((
                    mig.uint("nvmlDeviceGetGpuInstanceId")?,
                    mig.uint("nvmlDeviceGetComputeInstanceId")?,
                    mig.uuid()?,
                ))
            })
            .collect()
    }

    /// Destroys GPU instance `gpu_instance` of profile `profile_id` and its compute instances.
    pub fn destroy_mig_instance(&self, profile_id: u32, gpu_instance: u32) -> Result<(), MigError> {
        let instances = self.gpu_instances(profile_id)?;
        let gi_info: unsafe extern "C" fn(NvmlGpuInstance, *mut NvmlGpuInstanceInfo) -> NvmlReturn =
            self.mig_call("nvmlGpuInstanceGetInfo")?;
        let found = instances.into_iter().find(|&gi| {
            let mut info = NvmlGpuInstanceInfo { id: u32::MAX, ..gi_info_zero() };
            // SAFETY: a GPU instance handle NVML listed and a valid out-pointer.
            ok(unsafe { gi_info(gi, &mut info) }).is_some() && info.id == gpu_instance
        });
        let gi = found.ok_or_else(|| {
            MigError::NotFound(format!("no GPU instance {gpu_instance} of profile {profile_id} on the device"))
        })?;
        self.destroy_gpu_instance(gi)
    }

    /// Destroys the most recently listed GPU instance of profile `profile_id`.
    pub fn destroy_any_mig_instance(&self, profile_id: u32) -> Result<(), MigError> {
        let gi = self
            .gpu_instances(profile_id)?
            .pop()
            .ok_or_else(|| MigError::NotFound(format!("no GPU instance of profile {profile_id} on the device")))?;
        self.destroy_gpu_instance(gi)
    }

    /// The GPU instances of profile `profile_id` (`nvmlDeviceGetGpuInstances`).
    fn gpu_instances(&self, profile_id: u32) -> Result<Vec<NvmlGpuInstance>, MigError> {
        let list: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance, *mut c_uint) -> NvmlReturn =
            self.mig_call("nvmlDeviceGetGpuInstances")?;
        let mut handles = vec![std::ptr::null_mut(); 64];
        let mut count: c_uint = 0;
        // SAFETY: NVML's handle, a profile id, room for 64 handles (more than any GPU has) and a count.
        let code = unsafe { list(self.handle, profile_id, handles.as_mut_ptr(), &mut count) };
        if code != NVML_SUCCESS {
            return Err(failure("nvmlDeviceGetGpuInstances", code));
        }
        handles.truncate((count as usize).min(64));
        Ok(handles)
    }

    /// Destroys the compute instances of `gi`, then `gi`.
    fn destroy_gpu_instance(&self, gi: NvmlGpuInstance) -> Result<(), MigError> {
        let list: unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance, *mut c_uint) -> NvmlReturn =
            self.mig_call("nvmlGpuInstanceGetComputeInstances")?;
        let destroy_ci: unsafe extern "C" fn(NvmlComputeInstance) -> NvmlReturn =
            self.mig_call("nvmlComputeInstanceDestroy")?;
        for profile in 0..MAX_CI_PROFILE {
            let mut cis = vec![std::ptr::null_mut(); 16];
            let mut count: c_uint = 0;
            // SAFETY: a GPU instance handle, a profile id, room for 16 handles and a count.
            if unsafe { list(gi, profile, cis.as_mut_ptr(), &mut count) } != NVML_SUCCESS {
                continue;
            }
            for &ci in cis.iter().take((count as usize).min(16)) {
                // SAFETY: a compute instance NVML listed.
                let code = unsafe { destroy_ci(ci) };
                if code != NVML_SUCCESS {
                    return Err(failure("nvmlComputeInstanceDestroy", code));
                }
            }
        }
        let destroy_gi: unsafe extern "C" fn(NvmlGpuInstance) -> NvmlReturn =
            self.mig_call("nvmlGpuInstanceDestroy")?;
        // SAFETY: a GPU instance NVML listed, now without compute instances.
        let code = unsafe { destroy_gi(gi) };
        if code != NVML_SUCCESS {
            return Err(failure("nvmlGpuInstanceDestroy", code));
        }
        Ok(())
    }
}
