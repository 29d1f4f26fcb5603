//! The resource slots Tessera can offer on this host, side by side as BEP-1000 wants them: whole devices
//! (`cuda.device`), MIG GPU instances by profile (`cuda.mig-<profile>`), and Tessera's fractional vGPUs
//! (`cuda.shares`, a fraction of a device's time, with `cuda.mem`, device memory). The fractional limits
//! are the daemon's own: the region's slots and the share rules.

use super::device::Facts;
use serde_json::{Value, json};
use tessera_region::{MAX_DEVICES, MAX_VGPUS};

/// Smallest share a vGPU may have, in percent: the daemon's own rule (shares of it to 100 summing to at
/// most 100 per device), so a device holds at most `100 / MIN_SHARE_PERCENT` vGPUs by shares alone.
pub use tessera_scheduler::config::MIN_SHARE as MIN_SHARE_PERCENT;

/// Most fractional vGPUs device `dev` can hold: the region's vGPU slots ([`MAX_VGPUS`], all of which may
/// sit on one device) or what the smallest share allows, whichever is fewer; `None` for a device the
/// region does not cover (ordinals from [`MAX_DEVICES`] on).
pub fn fractional_limit(dev: i32) -> Option<u32> {
    let covered = usize::try_from(dev).is_ok_and(|d| d < MAX_DEVICES);
    covered.then(|| (MAX_VGPUS as u32).min(100 / MIN_SHARE_PERCENT))
}

/// The slots of a host with `devices`.
pub fn resource_slots(devices: &[Facts]) -> Vec<Value> {
    let ids = |list: &[&Facts]| list.iter().map(|f| f.index.to_string()).collect::<Vec<_>>();
    let all: Vec<&Facts> = devices.iter().collect();
    let mut slots = vec![json!({
        "slot_name": "cuda.device",
        "slot_type": "count",
        "capacity": devices.len(),
        "devices": ids(&all),
        "ready": true,
        "description": "whole devices",
    })];

    // One slot per MIG profile name, over the devices that offer it, in the order first seen.
    let mut names: Vec<&str> = Vec::new();
    for p in devices.iter().filter_map(|f| f.mig.as_ref()).flat_map(|m| &m.profiles) {
        if !names.contains(&p.name.as_str()) {
            names.push(&p.name);
        }
    }
    for name in names {
        let with: Vec<(&Facts, u32, bool)> = devices
            .iter()
            .filter_map(|f| {
                let m = f.mig.as_ref()?;
                m.profiles.iter().find(|p| p.name == name).map(|p| (f, p.instances, m.enabled))
            })
            .collect();
        let on: Vec<&Facts> = with.iter().map(|(f, _, _)| *f).collect();
        slots.push(json!({
            "slot_name": format!("cuda.mig-{name}"),
            "slot_type": "count",
            "capacity": with.iter().map(|(_, n, _)| n).sum::<u32>(),
            "devices": ids(&on),
            // Instances exist only once MIG mode is on; until then the slot is what enabling it would offer.
            "ready": with.iter().all(|(_, _, enabled)| *enabled),
            "description": format!("MIG GPU instances of profile {name}; a device split by MIG is not a whole device"),
        }));
    }

    let shared: Vec<&Facts> = devices.iter().filter(|f| fractional_limit(f.index).is_some()).collect();
    if !shared.is_empty() {
        slots.push(json!({
            "slot_name": "cuda.shares",
            "slot_type": "fraction",
            "capacity": shared.len(),
            "devices": ids(&shared),
            "ready": true,
            "description": format!(
                "fractions of a device's time (Tessera vGPUs; 1.0 = a whole device, steps of {}, at most {} vGPUs \
                 per device)",
                f64::from(MIN_SHARE_PERCENT) / 100.0,
                fractional_limit(0).unwrap_or(0)
            ),
        }));
        slots.push(json!({
            "slot_name": "cuda.mem",
            "slot_type": "bytes",
            "capacity": shared.iter().map(|f| f.memory).sum::<u64>(),
            "devices": ids(&shared),
            "ready": true,
            "description": "device memory of Tessera vGPUs (hard quotas fit in their device's memory; soft-mode vGPUs \
                            may oversubscribe it)",
        }));
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_scheduler::config::{Config, VgpuSpec};

    /// The limit is the daemon's: it accepts that many 1% vGPUs on one device, and refuses one more.
    #[test]
    fn the_fractional_limit_is_what_the_daemon_accepts() {
        let max = fractional_limit(0).unwrap();
        assert_eq!(max, 64);
        let devices = [80u64 << 30];
        let spec = |i: u32| VgpuSpec::new(&format!("v{i}"), 0, 1 << 30, MIN_SHARE_PERCENT);
        let mut config = Config::default();
        for i in 0..max {
            config = config.create(spec(i), &devices).unwrap_or_else(|e| panic!("vGPU {i}: {e}"));
        }
        assert!(config.create(spec(max), &devices).is_err(), "one more than the limit was accepted");
        let below = VgpuSpec::new("tiny", 0, 1 << 30, MIN_SHARE_PERCENT - 1);
        assert!(Config::default().create(below, &devices).is_err(), "a share below the minimum was accepted");
        assert_eq!(fractional_limit(MAX_DEVICES as i32), None);
    }

    #[test]
    fn slots_of_a_mixed_host() {
        use tessera_host::nvml::{Mig, MigProfile};
        let profile = |name: &str, instances| MigProfile {
            name: name.into(),
            id: 19,
            slices: 1,
            instances,
            sm_count: 16,
            memory_bytes: 10 << 30,
        };
        let devices = [
            Facts {
                index: 0,
                memory: 80 << 30,
                mig: Some(Mig { enabled: false, profiles: vec![profile("1g.10gb", 7)] }),
            },
            Facts { index: 1, memory: 4 << 30, mig: None },
        ];
        let slots = resource_slots(&devices);
        let names: Vec<&str> = slots.iter().map(|s| s["slot_name"].as_str().unwrap()).collect();
        assert_eq!(names, ["cuda.device", "cuda.mig-1g.10gb", "cuda.shares", "cuda.mem"]);
        assert_eq!(slots[0]["capacity"], 2);
        assert_eq!(slots[1]["capacity"], 7);
        assert_eq!(slots[1]["devices"], json!(["0"]));
        assert_eq!(slots[1]["ready"], false);
        assert_eq!(slots[3]["capacity"], (84u64 << 30));
    }
}
