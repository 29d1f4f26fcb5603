//! `AccelGetDeviceMetrics`: NVML's live figures of a device (power, temperature, PCIe throughput,
//! utilization, memory used) and, as extra metrics, Tessera's accounting from the daemon's `stats`: the
//! device's vGPUs, their configured shares, quotas, resident and swapped memory, and each vGPU's achieved
//! share (`tessera.vgpu.<name>.achievedPercent`).

use crate::abi::current::{DeviceMetrics, MAX_EXTRA_METRICS};
use crate::context::{Context, Gpu};
use crate::text::put;
use tessera_client::Stats;

/// Writes the metrics of `gpu` into `out`; `stats` is the daemon's, `None` without a daemon.
pub fn fill(ctx: &Context, gpu: &Gpu, stats: Option<&Stats>, out: &mut DeviceMetrics) {
    let nv = ctx.nvml_device(gpu);
    let device = stats.and_then(|s| s.devices.iter().find(|d| d.device == gpu.index));
    put(&mut out.device_uuid, &gpu.uuid);
    out.power_usage_watts =
        nv.as_ref().and_then(|n| n.power_watts()).or(device.and_then(|d| d.power_watts)).unwrap_or(0.0);
    out.temperature_celsius = nv
        .as_ref()
        .and_then(|n| n.temperature_c())
        .map(f64::from)
        .or(device.and_then(|d| d.temperature_c))
        .unwrap_or(0.0);
    (out.pcie_rx_bytes, out.pcie_tx_bytes) = nv.as_ref().and_then(|n| n.pcie_throughput()).unwrap_or((0, 0));
    let utilization = nv.as_ref().and_then(|n| n.utilization());
    out.utilization_percent = utilization
        .map(|(g, _)| g)
        .or(device.and_then(|d| d.utilization_pct).map(|u| u.round().clamp(0.0, 100.0) as u32))
        .unwrap_or(0);
    out.memory_used_bytes =
        nv.as_ref().and_then(|n| n.memory()).map(|(_, used)| used).or(device.map(|d| d.memory_used)).unwrap_or(0);

    let mut extra: Vec<(String, f64)> = vec![("memoryTotalBytes".into(), gpu.memory as f64)];
    if let Some((_, mem_busy)) = utilization {
        extra.push(("memoryBusyPercent".into(), f64::from(mem_busy)));
    }
    extra.push(("tessera.daemon".into(), if stats.is_some() { 1.0 } else { 0.0 }));
    if let Some(s) = stats {
        let vgpus: Vec<_> = s.vgpus.iter().filter(|v| v.device == gpu.index).collect();
        let sum = |f: &dyn Fn(&tessera_client::VgpuStats) -> u64| vgpus.iter().map(|v| f(v)).sum::<u64>() as f64;
        extra.push(("tessera.vgpus".into(), vgpus.len() as f64));
        extra.push(("tessera.shareConfiguredPercent".into(), f64::from(vgpus.iter().map(|v| v.share).sum::<u32>())));
        extra.push(("tessera.busyPercent".into(), device.map_or(0.0, |d| d.busy.last_1s_pct)));
        extra.push(("tessera.quotaBytes".into(), sum(&|v| v.memory.quota)));
        extra.push(("tessera.usedBytes".into(), sum(&|v| v.memory.used)));
        extra.push(("tessera.residentBytes".into(), sum(&|v| v.memory.resident)));
        extra.push(("tessera.swappedBytes".into(), sum(&|v| v.memory.swapped)));
        extra.push(("tessera.processes".into(), vgpus.iter().map(|v| v.processes.len()).sum::<usize>() as f64));
        for v in &vgpus {
            extra.push((format!("tessera.vgpu.{}.achievedPercent", v.name), v.achieved.last_1s_pct));
        }
    }
    out.extra_metrics_count = extra.len().min(MAX_EXTRA_METRICS);
    for (slot, (k, v)) in out.extra_metrics.iter_mut().zip(&extra) {
        put(&mut slot.key, k);
        slot.value = *v;
    }
}
