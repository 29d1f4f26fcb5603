//! The `stats` request: every vGPU's and device's figures, read from the region's counters (atomics, no
//! lock: a read polled at 10 Hz must not queue behind processes attaching) and from [`crate::observe::history`]'s
//! rings of achieved device time, and the driver's figures of each device from [`crate::observe::sensors`]' last
//! reading.

use crate::observe::history;
use crate::state::State;
use crate::vgpus::config::VgpuSpec;
use std::sync::atomic::Ordering;
use tessera_client::{DeviceStats, MemoryStats, ProcessStats, Stats, VgpuStats};
use tessera_region::futex::monotonic_ns;
use tessera_region::pid_ns::ProcView;
use tessera_region::{MAX_DEVICES, Region, VgpuSlot, encode_name, state};

/// The slot of vGPU `name` in `region`, if it has one.
fn slot<'a>(region: &'a Region, name: &str) -> Option<(usize, &'a VgpuSlot)> {
    let encoded = encode_name(name)?;
    region.vgpus.iter().enumerate().find(|(_, v)| v.state() == state::READY && v.config.name == encoded)
}

/// Process `pid`'s command name, or empty when it cannot be read (gone meanwhile, another namespace).
fn command_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end().to_owned()).unwrap_or_default()
}

/// The figures of the configured vGPUs `specs` (only `only` and its device when given) on a machine whose
/// devices have `devices` bytes each.
pub fn stats(region: &Region, state: &State, specs: &[VgpuSpec], devices: &[u64], only: Option<&VgpuSpec>) -> Stats {
    let at_ns = monotonic_ns();
    let ordinals: Vec<u32> = match only {
        Some(spec) => vec![spec.device],
        None => (0..devices.len().min(MAX_DEVICES) as u32).collect(),
    };
    let readings: Vec<history::Reading> = ordinals.iter().map(|&d| state.history.read(d)).collect();
    let reading = |device: u32| ordinals.iter().position(|&d| d == device).map(|k| &readings[k]);
    // Processes are named by their pids here (a container's pid 1 is not this namespace's).
    let view = ProcView::new();
    let vgpus: Vec<VgpuStats> = specs
        .iter()
        .filter(|s| only.is_none_or(|o| o.name == s.name))
        .map(|spec| {
            let mut st = VgpuStats {
                name: spec.name.clone(),
                device: spec.device,
                share: spec.share,
                cap: spec.cap,
                priority: spec.priority,
                mode: spec.mode,
                suspended: spec.suspended,
                memory: MemoryStats { quota: spec.memory, ..MemoryStats::default() },
                ..VgpuStats::default()
            };
            let Some((index, v)) = slot(region, &spec.name) else { return st };
            if let Some(r) = reading(spec.device) {
                st.achieved = r.slots[index];
                st.charged_ns = r.charged_ns[index];
            }
            let d = spec.device as usize;
            let s = &v.live.sched;
            st.tokens_ns = s.tokens.load(Ordering::Acquire);
            st.inflight_ns = s.inflight_ns.load(Ordering::Acquire);
            st.launches = s.launches.load(Ordering::Acquire);
            st.device_ns = s.device_ns.load(Ordering::Acquire);
            st.wait_ns = s.wait_ns.load(Ordering::Acquire);
            let soft = v.soft_totals();
            st.memory.used = v.used(d);
            st.memory.peak = v.live.peak.get(d).map_or(0, |p| p.load(Ordering::Acquire));
            st.memory.resident = soft.resident;
            st.memory.swapped = soft.swapped;
            st.memory.pooled = soft.pooled;
            st.memory.wanted = v.wanted(d);
            st.processes = v
                .attached()
                .map(|(_, pid, p)| (view.pid_of(p, pid), p))
                .map(|(pid, p)| ProcessStats {
                    pid,
                    soft: p.is_soft(),
                    used: p.used.get(d).map_or(0, |u| u.load(Ordering::Acquire)),
                    command: command_of(pid),
                    // Written by the manager, which knows the snapshots.
                    snapshotted: false,
                })
                .collect();
            st
        })
        .collect();
    let devices = ordinals
        .iter()
        .zip(&readings)
        .map(|(&device, r)| {
            // Every vGPU of the device, also those `only` leaves out of `vgpus`.
            let used = specs
                .iter()
                .filter(|s| s.device == device)
                .filter_map(|s| slot(region, &s.name))
                .fold(0u64, |sum, (_, v)| sum.saturating_add(v.used(device as usize)));
            // The driver's figures as the sensors thread last read them (no NVML call here).
            let nvml = state.sensors.get(device);
            DeviceStats {
                device,
                name: nvml.name,
                uuid: nvml.uuid,
                utilization_pct: nvml.utilization_pct,
                power_watts: nvml.power_watts,
                temperature_c: nvml.temperature_c,
                pci_bus_id: nvml.pci_bus_id,
                memory_total: devices.get(device as usize).copied().unwrap_or(0),
                memory_used: used,
                share_configured: specs.iter().filter(|s| s.device == device).map(|s| s.share).sum(),
                busy: r.busy,
                span_1s_ns: r.span_1s_ns,
                span_10s_ns: r.span_10s_ns,
                vgpus: specs.iter().filter(|s| s.device == device).map(|s| s.name.clone()).collect(),
            }
        })
        .collect();
    Stats { at_ns, vgpus, devices }
}
