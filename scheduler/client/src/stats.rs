//! The monitoring figures a `stats` request returns: per vGPU and per device, what a `top`, a metrics
//! exporter or a cluster plugin reads. Shares are in percent of the device's time; "achieved" ones come
//! from the daemon's own measure of device time (the order of kernel completions), sampled every 100 ms
//! into a ring that covers the last 10 s.

use crate::spec::{Mode, Priority};
use serde::{Deserialize, Serialize};

/// Every vGPU's and device's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// The daemon's monotonic clock when the figures were read, ns.
    pub at_ns: u64,
    /// The vGPUs, in creation order.
    pub vgpus: Vec<VgpuStats>,
    /// The devices, by ordinal.
    pub devices: Vec<DeviceStats>,
}

/// A share of a device's time achieved over the last second and the last ten seconds, in percent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Achieved {
    /// Over the last second.
    pub last_1s_pct: f64,
    /// Over the last ten seconds.
    pub last_10s_pct: f64,
}

/// One vGPU's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// Its quota.
    pub quota: u64,
    /// In use by its processes.
    pub used: u64,
    /// Peak of `used`.
    pub peak: u64,
    /// Soft mode: device memory holding its processes' live pages.
    pub resident: u64,
    /// Soft mode: its live pages in host memory.
    pub swapped: u64,
    /// Soft mode: device memory held but not used by a live page.
    pub pooled: u64,
    /// Soft mode: device memory its processes wait for now.
    pub wanted: u64,
    /// Device memory of its checkpointed processes, held in host memory since a `snapshot` (part of
    /// `used`, which stays their quota, but not on the device).
    #[serde(default)]
    pub snapshot: u64,
}

/// One process attached to a vGPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    /// Its pid.
    pub pid: u32,
    /// It joined in soft memory mode.
    pub soft: bool,
    /// Device memory it uses, in bytes.
    pub used: u64,
    /// Its command name (`/proc/PID/comm` as the daemon sees it; empty when unknown, e.g. an older
    /// daemon or a process gone meanwhile).
    #[serde(default)]
    pub command: String,
    /// Checkpointed by a `snapshot`: its device memory is in host memory until `resume`.
    #[serde(default)]
    pub snapshotted: bool,
}

/// One vGPU's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VgpuStats {
    /// Its name.
    pub name: String,
    /// Its device.
    pub device: u32,
    /// Its configured share, in percent.
    pub share: u32,
    /// Held to its share.
    pub cap: bool,
    /// Its priority.
    pub priority: Priority,
    /// Its memory mode.
    pub mode: Mode,
    /// Suspended (by a request or by the audit).
    pub suspended: bool,
    /// Some of its processes (all, after a whole-vGPU `snapshot`) are checkpointed.
    #[serde(default)]
    pub snapshotted: bool,
    /// The share of its device's time its kernels took.
    pub achieved: Achieved,
    /// Tokens in its bucket (ns of device time; negative: debt).
    pub tokens_ns: i64,
    /// Device time queued and not finished yet (estimated).
    pub inflight_ns: i64,
    /// Kernel launches so far.
    pub launches: u64,
    /// Device time its kernels took so far, as its processes count it.
    pub device_ns: u64,
    /// Device time the daemon charged its kernels since the vGPU became a member of its device under this
    /// daemon (the daemon's own count from the order of completions, which no tenant can write; it starts
    /// again at 0 when the daemon restarts), as of the last 100 ms sample.
    #[serde(default)]
    pub charged_ns: u64,
    /// Time its launches spent waiting for tokens so far.
    pub wait_ns: u64,
    /// Its memory.
    pub memory: MemoryStats,
    /// The processes attached.
    pub processes: Vec<ProcessStats>,
}

/// One device's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Its ordinal.
    pub device: u32,
    /// Its model name as the driver reports it (empty when unknown).
    #[serde(default)]
    pub name: String,
    /// Its UUID (`GPU-…`, NVML), when NVML tells it.
    #[serde(default)]
    pub uuid: Option<String>,
    /// The driver's own utilization figure (NVML `gpu` utilization, percent over its last sample
    /// period), when NVML tells it. Tessera's own measure is `busy`.
    #[serde(default)]
    pub utilization_pct: Option<f64>,
    /// Board power draw in watts, when NVML tells it.
    #[serde(default)]
    pub power_watts: Option<f64>,
    /// GPU temperature in degrees Celsius, when NVML tells it.
    #[serde(default)]
    pub temperature_c: Option<f64>,
    /// Its PCI address as sysfs names it (`0000:10:00.0`), when the driver tells it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// Its memory, in bytes.
    pub memory_total: u64,
    /// Device memory its vGPUs' processes use, in bytes (checkpointed processes' memory, in host memory,
    /// is not counted).
    pub memory_used: u64,
    /// Sum of its vGPUs' configured shares, in percent.
    pub share_configured: u32,
    /// The share of its time some vGPU's kernel ran.
    pub busy: Achieved,
    /// How much time the `last_1s` figures cover, ns: a second, less just after the daemon started.
    pub span_1s_ns: u64,
    /// How much time the `last_10s` figures cover, ns.
    pub span_10s_ns: u64,
    /// Its vGPUs' names.
    pub vgpus: Vec<String>,
}
