//! `AccelGetProcessInformation`: every process on every device, from NVML's running processes joined with
//! Tessera's accounting (the daemon's `stats`): a process in a vGPU reports its vGPU's achieved share of
//! the last second as its compute utilization, the memory it holds, and its vGPU's quota as reserved.

use crate::abi::current::ProcessInformation;
use crate::context::Context;
use crate::text::put;
use std::collections::BTreeMap;

/// One process on one device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    /// Its pid.
    pub pid: u32,
    /// The device's UUID.
    pub device_uuid: String,
    /// Compute utilization, percent.
    pub compute_pct: f64,
    /// SMs of the device.
    pub sms: u64,
    /// Device memory it holds, bytes.
    pub used: u64,
    /// Its vGPU's quota, bytes (0 outside a vGPU).
    pub reserved: u64,
}

/// Every process on every device, by device then pid.
pub fn list(ctx: &Context) -> Vec<Process> {
    let stats = crate::daemon::client().and_then(|c| c.stats(None).ok());
    let mut all = Vec::new();
    for gpu in &ctx.gpus {
        let mut by_pid: BTreeMap<u32, Process> = BTreeMap::new();
        let fresh = |pid| Process { pid, device_uuid: gpu.uuid.clone(), sms: u64::from(gpu.sms), ..Process::default() };
        for p in ctx.nvml_device(gpu).and_then(|d| d.running_processes()).unwrap_or_default() {
            by_pid.entry(p.pid).or_insert_with(|| fresh(p.pid)).used = p.used_bytes;
        }
        for v in stats.iter().flat_map(|s| &s.vgpus).filter(|v| v.device == gpu.index) {
            for p in &v.processes {
                let entry = by_pid.entry(p.pid).or_insert_with(|| fresh(p.pid));
                entry.used = entry.used.max(p.used);
                entry.reserved = v.memory.quota;
                entry.compute_pct = v.achieved.last_1s_pct.clamp(0.0, 100.0);
            }
        }
        all.extend(by_pid.into_values());
    }
    all
}

/// Writes `p` into the ABI's struct (the same in both ABIs).
pub fn fill(out: &mut ProcessInformation, p: &Process) {
    put(&mut out.process_id, &p.pid.to_string());
    put(&mut out.device_uuid, &p.device_uuid);
    out.compute_utilization_percent = p.compute_pct;
    out.total_sms = p.sms;
    out.active_sms = ((p.compute_pct / 100.0) * p.sms as f64).round() as u64;
    out.memory_used_bytes = p.used;
    out.memory_reserved_bytes = p.reserved;
    out.memory_utilization_percent =
        if p.reserved > 0 { (p.used as f64 / p.reserved as f64 * 100.0).min(100.0) } else { 0.0 };
}
