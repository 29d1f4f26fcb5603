//! Partitions are MIG instances, made and removed through NVML (`tessera_host::mig`). A template is a
//! MIG GPU instance profile, by name (`1g.10gb`, or `MIG 1g.10gb`) or by NVML profile id (`19`). Assigning
//! one creates a GPU instance of the profile and a compute instance spanning it, and returns the MIG
//! device's UUID and the environment a worker needs to use it (`CUDA_VISIBLE_DEVICES=MIG-...`).

use crate::abi::current::*;
use crate::context::Context;
use crate::guard::{Fail, Outcome};
use crate::text::put;
use tessera_host::mig::MigError;
use tessera_host::nvml::Device;

/// A created partition: the MIG device and the environment that selects it.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// The MIG device's UUID (`MIG-...`).
    pub uuid: String,
    /// `KEY=VALUE` entries for the worker.
    pub env: Vec<String>,
}

/// The ABI's code for a MIG failure.
fn fail(e: MigError) -> Fail {
    match e {
        MigError::NotSupported(m) => Fail::new(ACCEL_ERROR_NOT_SUPPORTED, m),
        MigError::NoRoom(m) => Fail::new(ACCEL_ERROR_RESOURCE_EXHAUSTED, m),
        MigError::NotFound(m) => Fail::new(ACCEL_ERROR_NOT_FOUND, m),
        MigError::Failed(m) => Fail::new(ACCEL_ERROR_OPERATION_FAILED, m),
    }
}

/// The NVML device of `device_uuid` with MIG mode on, and the profile id of `template` on it.
fn mig_device<'a>(ctx: &'a Context, template: &str, device_uuid: &str) -> Result<(Device<'a>, u32), Fail> {
    let gpu = ctx.gpu(device_uuid)?;
    let dev = ctx
        .nvml_device(gpu)
        .ok_or_else(|| Fail::new(ACCEL_ERROR_NOT_SUPPORTED, "partitions need NVML, which did not load"))?;
    let mig = dev
        .mig()
        .ok_or_else(|| Fail::new(ACCEL_ERROR_NOT_SUPPORTED, format!("{} ({}) has no MIG", gpu.uuid, gpu.name)))?;
    if !mig.enabled {
        return Err(Fail::new(
            ACCEL_ERROR_NOT_SUPPORTED,
            format!("MIG mode is off on {}; enable it first (`nvidia-smi -i {} -mig 1`)", gpu.uuid, gpu.index),
        ));
    }
    let wanted = template.strip_prefix("MIG ").unwrap_or(template);
    let profile = mig.profiles.iter().find(|p| p.name == wanted || p.id.to_string() == wanted).ok_or_else(|| {
        let names: Vec<&str> = mig.profiles.iter().map(|p| p.name.as_str()).collect();
        Fail::new(
            ACCEL_ERROR_NOT_FOUND,
            format!("no MIG profile {template} on {}; it has {}", gpu.uuid, names.join(", ")),
        )
    })?;
    Ok((dev, profile.id))
}

/// Creates a partition of `template` on device `device_uuid`.
pub fn assign(ctx: &Context, template: &str, device_uuid: &str) -> Result<Partition, Fail> {
    let (dev, profile) = mig_device(ctx, template, device_uuid)?;
    let made = dev.create_mig_instance(profile).map_err(fail)?;
    // Without a listed MIG UUID, CUDA also accepts the MIG-<parent>/<GI>/<CI> form.
    let uuid =
        made.uuid.unwrap_or_else(|| format!("MIG-{device_uuid}/{}/{}", made.gpu_instance, made.compute_instance));
    crate::log::line("INFO", &format!("partition {uuid} ({template}) created on {device_uuid}"));
    Ok(Partition {
        env: vec![
            format!("CUDA_VISIBLE_DEVICES={uuid}"),
            format!("NVIDIA_VISIBLE_DEVICES={uuid}"),
            format!("TESSERA_MIG_GPU_INSTANCE={}", made.gpu_instance),
            format!("TESSERA_MIG_COMPUTE_INSTANCE={}", made.compute_instance),
        ],
        uuid,
    })
}

/// Writes `p` into the current ABI's result.
pub fn fill(out: &mut PartitionResult, p: &Partition) {
    out.r#type = PARTITION_TYPE_ENVIRONMENT_VARIABLE;
    put(&mut out.device_uuid, &p.uuid);
    for env in out.env_vars.iter_mut() {
        env.fill(0);
    }
    for (slot, e) in out.env_vars.iter_mut().zip(&p.env) {
        put(slot, e);
    }
    out.device_node_count = 0;
}

/// Removes a partition of `template`: `uuid` is the partition's own (`MIG-...`, as assigned), or its
/// device's, which removes the last-made instance of the template there.
pub fn remove(ctx: &Context, template: &str, uuid: &str) -> Outcome {
    if uuid.starts_with("MIG-") {
        for gpu in &ctx.gpus {
            let Some(dev) = ctx.nvml_device(gpu) else { continue };
            let Some((gi, _, _)) = dev.mig_devices().into_iter().find(|(_, _, u)| u == uuid) else { continue };
            let (dev, profile) = mig_device(ctx, template, &gpu.uuid)?;
            dev.destroy_mig_instance(profile, gi).map_err(fail)?;
            crate::log::line("INFO", &format!("partition {uuid} ({template}) removed"));
            return Ok(());
        }
        return Err(Fail::new(ACCEL_ERROR_NOT_FOUND, format!("no partition {uuid}")));
    }
    let (dev, profile) = mig_device(ctx, template, uuid)?;
    dev.destroy_any_mig_instance(profile).map_err(fail)?;
    crate::log::line("INFO", &format!("a partition of {template} removed from {uuid}"));
    Ok(())
}
