//! Snapshot and resume through the daemon's `snapshot` and `resume` requests (docs/protocol.md): the
//! processes stop at a kernel boundary, their device memory goes to host memory and is given back to
//! the device on resume, at the same addresses. A list of processes is grouped by the vGPU each is in
//! (one request per vGPU, naming its pids); a device means every vGPU on it, each as a whole (those with
//! nothing to resume are left alone).

use crate::abi::current::*;
use crate::context::Context;
use crate::guard::{Fail, Outcome};
use std::collections::BTreeMap;
use tessera_client::{Client, ErrorCode};

/// Whether devices can be snapshotted (reported in their capabilities).
pub const SUPPORTED: bool = true;

/// What to snapshot or resume: processes, or a whole device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// These processes.
    Processes(Vec<i32>),
    /// Every vGPU on this device.
    Device(String),
}

/// Snapshots (`resume` false) or resumes `scope`.
pub fn run(ctx: &Context, scope: &Scope, resume: bool) -> Outcome {
    let what = if resume { "resume" } else { "snapshot" };
    let client = crate::daemon::required(what)?;
    let list =
        client.list().map_err(|e| Fail::new(ACCEL_ERROR_OPERATION_FAILED, format!("vgpu list: {}", e.message)))?;
    // (vGPU, pids): empty pids for a whole vGPU.
    let mut work: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    match scope {
        Scope::Processes(pids) => {
            for &pid in pids {
                let pid = u32::try_from(pid).map_err(|_| Fail::invalid(format!("pid {pid}")))?;
                let vgpu = list
                    .iter()
                    .find(|v| v.processes.contains(&pid) || v.snapshot_pids.contains(&pid))
                    .ok_or_else(|| Fail::new(ACCEL_ERROR_NOT_FOUND, format!("process {pid} is in no vGPU")))?;
                work.entry(vgpu.spec.name.clone()).or_default().push(pid);
            }
        }
        Scope::Device(uuid) => {
            let gpu = ctx.gpu(uuid)?;
            for v in list.iter().filter(|v| v.spec.device == gpu.index) {
                if !resume || v.snapshotted || v.spec.suspended {
                    work.insert(v.spec.name.clone(), Vec::new());
                }
            }
        }
    }
    for (name, pids) in &work {
        request(&client, name, pids, resume)?;
        crate::log::line(
            "INFO",
            &format!("{what} of vGPU {name} {}", if pids.is_empty() { "(whole)".into() } else { format!("{pids:?}") }),
        );
    }
    Ok(())
}

/// One `snapshot` or `resume` request.
fn request(client: &Client, name: &str, pids: &[u32], resume: bool) -> Outcome {
    let result = if resume { client.resume(name, pids) } else { client.snapshot(name, pids) };
    result.map(drop).map_err(|e| {
        let code = match e.code {
            ErrorCode::NotFound => ACCEL_ERROR_NOT_FOUND,
            ErrorCode::ResourceExhausted => ACCEL_ERROR_RESOURCE_EXHAUSTED,
            ErrorCode::Unavailable => ACCEL_ERROR_NOT_SUPPORTED,
            _ => ACCEL_ERROR_OPERATION_FAILED,
        };
        Fail::new(code, format!("vGPU {name}: {}", e.message))
    })
}
