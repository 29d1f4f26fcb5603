//! Hard limits are a vGPU's memory quota and compute share on the device, set through the daemon's API.
//! Which vGPU: the earlier ABI names the worker (`workerId` is the vGPU's name); the current one means
//! the calling process, whose vGPU is its `TESSERA_VGPU` when that names a vGPU on the device (or none
//! yet: it is created), else `accel-<pid>-gpu<N>`, created on the first limit, and then `TESSERA_VGPU` is
//! set for the process when it had none, so the shim joins that vGPU at `cuInit`.

use crate::abi::current::*;
use crate::context::{Context, Gpu};
use crate::guard::{Fail, Outcome};
use tessera_client::{Change, Client, ErrorCode, VgpuSpec};

/// Whose limit is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The calling process.
    Caller,
    /// The worker of this id (its vGPU has the same name).
    Worker(String),
}

/// What is limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Memory quota, in bytes.
    Memory(u64),
    /// Compute share, in percent.
    Share(u32),
}

/// Checks `limit`'s range: `INVALID_PARAM` for 0 bytes, or a share of 0 or above 100.
pub fn check(limit: Limit) -> Outcome {
    match limit {
        Limit::Memory(0) => Err(Fail::invalid("a memory limit of 0 bytes")),
        Limit::Share(0) => Err(Fail::invalid("a compute limit of 0%")),
        Limit::Share(s) if s > 100 => Err(Fail::invalid(format!("a compute limit of {s}% (1 to 100)"))),
        _ => Ok(()),
    }
}

/// Sets `limit` for `target` on the device `device_uuid`.
pub fn set(ctx: &Context, target: &Target, device_uuid: &str, limit: Limit) -> Outcome {
    check(limit)?;
    let gpu = ctx.gpu(device_uuid)?;
    let client = crate::daemon::required("a hard limit")?;
    let (name, exists) = vgpu_for(&client, target, gpu)?;
    if exists {
        let change = match limit {
            Limit::Memory(m) => Change { memory: Some(m), ..Change::default() },
            Limit::Share(s) => Change { share: Some(s), ..Change::default() },
        };
        client.set(&name, change).map_err(|e| refused(&name, e))?;
    } else {
        create(ctx, &client, gpu, &name, limit)?;
        if *target == Target::Caller && std::env::var_os("TESSERA_VGPU").is_none() {
            let (k, v) = (c"TESSERA_VGPU", std::ffi::CString::new(name.clone()).unwrap_or_default());
            // SAFETY: both strings are NUL-terminated; the ABI calls limits once at worker start, before
            // the worker's threads read the environment.
            unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
        }
    }
    crate::log::line("INFO", &format!("vGPU {name} on {}: {limit:?}", gpu.uuid));
    Ok(())
}

/// The vGPU `target` means on `gpu`, and whether it exists.
fn vgpu_for(client: &Client, target: &Target, gpu: &Gpu) -> Result<(String, bool), Fail> {
    let mine = format!("accel-{}-gpu{}", std::process::id(), gpu.index);
    let wanted = match target {
        Target::Worker(id) => id.clone(),
        Target::Caller => std::env::var("TESSERA_VGPU").ok().filter(|v| !v.is_empty()).unwrap_or(mine.clone()),
    };
    match client.show(&wanted) {
        Ok(v) if v.spec.device == gpu.index => Ok((wanted, true)),
        Ok(v) if *target == Target::Caller => {
            crate::log::line(
                "INFO",
                &format!("TESSERA_VGPU={wanted} is on device {}, not {}; using vGPU {mine}", v.spec.device, gpu.index),
            );
            Ok((mine.clone(), client.show(&mine).is_ok()))
        }
        Ok(v) => Err(Fail::invalid(format!("worker {wanted}'s vGPU is on device {}, not {}", v.spec.device, gpu.uuid))),
        Err(e) if e.code == ErrorCode::NotFound => Ok((wanted, false)),
        Err(e) => Err(Fail::new(ACCEL_ERROR_OPERATION_FAILED, format!("vgpu show {wanted}: {}", e.message))),
    }
}

/// Creates vGPU `name` on `gpu` with `limit`, and what is left on the device for the other figure; notes it
/// in `ctx` for `AccelShutdown` to remove.
fn create(ctx: &Context, client: &Client, gpu: &Gpu, name: &str, limit: Limit) -> Outcome {
    let list =
        client.list().map_err(|e| Fail::new(ACCEL_ERROR_OPERATION_FAILED, format!("vgpu list: {}", e.message)))?;
    let on_device: Vec<_> = list.iter().filter(|v| v.spec.device == gpu.index).collect();
    let share_left = 100u32.saturating_sub(on_device.iter().map(|v| v.spec.share).sum());
    let memory_left = gpu.memory.saturating_sub(
        on_device.iter().filter(|v| v.spec.mode == tessera_client::Mode::Hard).map(|v| v.spec.memory).sum(),
    );
    let (memory, share) = match limit {
        Limit::Memory(m) => (m, share_left),
        Limit::Share(s) => (memory_left, s),
    };
    if share == 0 || memory == 0 {
        return Err(Fail::new(
            ACCEL_ERROR_RESOURCE_EXHAUSTED,
            format!(
                "device {} has no share or memory left for a new vGPU ({share_left}% and {memory_left} bytes)",
                gpu.uuid
            ),
        ));
    }
    client.create(VgpuSpec::new(name, gpu.index, memory, share)).map_err(|e| refused(name, e))?;
    ctx.created.lock().push(name.to_string());
    Ok(())
}

/// The ABI's code for the daemon refusing a change of `name`.
fn refused(name: &str, e: tessera_client::Error) -> Fail {
    let code = match e.code {
        ErrorCode::ResourceExhausted => ACCEL_ERROR_RESOURCE_EXHAUSTED,
        ErrorCode::Invalid => ACCEL_ERROR_INVALID_PARAM,
        ErrorCode::NotFound => ACCEL_ERROR_NOT_FOUND,
        _ => ACCEL_ERROR_OPERATION_FAILED,
    };
    Fail::new(code, format!("vGPU {name}: {}", e.message))
}

/// Removes the vGPUs this process created while `ctx` was open (at `AccelShutdown`); a daemon that is gone is
/// not an error.
pub fn release(ctx: &Context) {
    let names = std::mem::take(&mut *ctx.created.lock());
    let Some(client) = crate::daemon::client() else { return };
    for name in names {
        if let Err(e) = client.remove(&name) {
            crate::log::line("WARN", &format!("vGPU {name} was not removed: {}", e.message));
        }
    }
}
