//! The daemon's once-a-second watch over what tenants can write: it frees process slots that name no
//! process of their vGPU ([`crate::tenants::integrity`]), counts again the memory of processes whose counts fell
//! short of the driver's, and stops counting what unverified process slots claim while the driver lists
//! no memory of their process ([`crate::memory::recount`]), then audits each device's vGPUs against the driver's
//! per-process figures and suspends those that took more than the daemon granted them ([`crate::tenants::audit`]).

use crate::compute::device_loop;
use crate::memory::recount::Recount;
use crate::observe::logger::say;
use crate::state::State;
use crate::tenants::audit::{Auditor, Member};
use crate::tenants::integrity;
use crate::tenants::nvml_usage::ProcessUsage;
use crate::vgpus::manager::Manager;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_region::pid_ns::ProcView;
use tessera_region::{Region, flags};

/// Time between two rounds.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Runs the tenant checks until `stop` is set; without `usage` (NVML could not be loaded) it only frees slots.
/// The audit reads the tokens the device loops granted from the daemon's `state`.
pub fn run(
    manager: &Manager,
    region: &Region,
    mut usage: Option<ProcessUsage>,
    devices: u32,
    state: &Arc<State>,
    stop: &AtomicBool,
) {
    let mut auditors: Vec<Auditor> = (0..devices).map(|_| Auditor::new(Arc::clone(state))).collect();
    let mut recounts: Vec<Recount> = (0..devices).map(|_| Recount::default()).collect();
    let mut failing = vec![false; devices as usize];
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(PERIOD);
        let doubted = manager.free_strays();
        let Some(usage) = usage.as_mut() else { continue };
        let owners = manager.owners();
        // One view of `/proc` per round, for every device's recount and audit: the driver names processes
        // by their pids here, not by those of their containers.
        let view = &ProcView::new();
        for (device, (auditor, recount)) in auditors.iter_mut().zip(&mut recounts).enumerate() {
            let sampled = usage.sample(device).and_then(|(used, ns)| Ok((used, ns, usage.memory(device)?)));
            let (used, elapsed_ns, held) = match sampled {
                Ok(sample) => sample,
                Err(e) => {
                    // Said once per outage: the audit of the device pauses meanwhile.
                    if !std::mem::replace(&mut failing[device], true) {
                        say!("tessera daemon: warning: audit of device {device} paused: {e}");
                    }
                    continue;
                }
            };
            failing[device] = false;
            let members: Vec<Member> = device_loop::members(region, device as u32)
                .into_iter()
                .filter_map(|slot| {
                    let v = &region.vgpus[slot];
                    let owner = owners.iter().find(|&&(s, _)| s == slot)?.1;
                    let (c, suspended) = (&v.config, v.flags() & flags::SUSPENDED != 0);
                    let (priority, share) = (c.priority.load(Ordering::Relaxed), c.share.load(Ordering::Relaxed));
                    Some(Member { slot, owner, priority, share, suspended })
                })
                .collect();
            let attached: Vec<(usize, u32)> = (0..devices)
                .flat_map(|d| device_loop::members(region, d))
                .flat_map(|slot| region.vgpus[slot].attached().map(move |(_, pid, p)| (slot, view.pid_of(p, pid))))
                .collect();
            let slots: Vec<usize> = members.iter().map(|m| m.slot).collect();
            for r in recount.round(region, device, &slots, &held, view) {
                let name = String::from_utf8_lossy(region.vgpus[r.vgpu].name_bytes()).into_owned();
                say!(
                    "tessera daemon: vGPU {name:?}: pid {} holds {} bytes of device {device} but its slot counted {}; \
                     counted again",
                    r.pid,
                    r.held,
                    r.counted
                );
            }
            for u in recount.uncount_phantoms(region, device, &doubted, &held, view) {
                let name = String::from_utf8_lossy(region.vgpus[u.vgpu].name_bytes()).into_owned();
                say!(
                    "tessera daemon: vGPU {name:?}: process slot of pid {} counted {} bytes of device {device}, \
                     which the driver does not see it hold, and its process cannot be verified; no longer counted",
                    u.pid,
                    u.counted
                );
            }
            let owner_of = |pid| integrity::uids(pid).ok().map(|ids| ids[0]);
            for (slot, overuse) in auditor.round(&members, &attached, &used, owner_of, elapsed_ns) {
                manager.audit_suspend(slot, device as u32, &overuse);
            }
        }
    }
}
