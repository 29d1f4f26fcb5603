//! The daemon's side of the region: placing each configured vGPU in a slot marked
//! [`flags::MANAGED`], writing its quota and compute-share settings there (live: running processes read
//! them on their next allocation or launch) and mapping its live file (created for the vGPU's user, so
//! that only that user's processes can join it), freeing slots, and reading back each vGPU's usage. Every
//! function here runs under the region's lock ([`Locked`]).

use crate::api::protocol::VgpuStatus;
use crate::compute::device_loop::Roster;
use crate::observe::logger::say;
use crate::vgpus::config::{VgpuSpec, bytes, priority_value, region_flags};
use std::sync::atomic::Ordering;
use tessera_region::file::{LIVE_LOCK_TIMEOUT, Locked, RegionError};
use tessera_region::pid_ns::ProcView;
use tessera_region::settings::{is_managed, set_limits};
use tessera_region::{MAX_DEVICES, Sched, UNLIMITED, VgpuSlot, encode_name, flags};

/// The slot of vGPU `name`, if the region has one.
pub fn find(locked: &Locked, name: &str) -> Option<usize> {
    encode_name(name).and_then(|n| locked.find(&n))
}

/// Why a vGPU's slot cannot be placed, changed or freed.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The slot's processes use more than the quota asked for.
    #[error(
        "vGPU {name:?} uses {} on device {device}; its quota cannot be lowered to {}: free memory or stop its \
         processes first",
        bytes(*used),
        bytes(*memory)
    )]
    OverQuota {
        /// The vGPU.
        name: String,
        /// Its device.
        device: u32,
        /// Bytes its processes use there now.
        used: u64,
        /// The quota asked for.
        memory: u64,
    },
    /// The name cannot be written into a slot.
    #[error("{0:?} is not a vGPU name")]
    BadName(String),
    /// Every slot is taken.
    #[error("region file {region}: all vGPU slots are in use by running processes or the daemon; cannot add {name:?}")]
    Full {
        /// The region file.
        region: String,
        /// The vGPU that has no slot.
        name: String,
    },
    /// The vGPU has no slot in the region (expected to have one).
    #[error("vGPU {name:?} has no slot in region file {region}")]
    Missing {
        /// The vGPU.
        name: String,
        /// The region file.
        region: String,
    },
    /// Processes are attached to the vGPU being removed.
    #[error(
        "vGPU {name:?} has {} process(es) attached (pid {}); stop them first, or suspend the vGPU",
        pids.len(),
        pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    Attached {
        /// The vGPU.
        name: String,
        /// Its processes.
        pids: Vec<u32>,
    },
    /// A vGPU's files in the region could not be mapped, locked or unmapped.
    #[error(transparent)]
    Region(#[from] RegionError),
}

/// Checks that `memory` on `spec`'s device holds what the slot's processes use now.
fn check_fits(v: &VgpuSlot, spec: &VgpuSpec, memory: u64) -> Result<(), SlotError> {
    let used = v.used(spec.device as usize);
    if used > memory {
        return Err(SlotError::OverQuota { name: spec.name.clone(), device: spec.device, used, memory });
    }
    Ok(())
}

/// Finds or claims the slot of `spec` and configures it. An existing slot keeps its usage and tokens (a
/// restarted daemon re-attaches to running processes); an unmanaged vGPU of that name, created by
/// processes before the daemon knew it, is taken over when its usage fits the quota, or always when
/// `force` (at start-up, where the configuration wins and a warning is printed).
pub fn place(locked: &Locked, spec: &VgpuSpec, force: bool, roster: &Roster) -> Result<usize, SlotError> {
    let encoded = encode_name(&spec.name).ok_or_else(|| SlotError::BadName(spec.name.clone()))?;
    let index = match locked.find(&encoded) {
        Some(i) => {
            let v = &locked.region().vgpus[i];
            if let Err(e) = check_fits(v, spec, spec.memory) {
                if !force {
                    return Err(e);
                }
                say!("tessera daemon: warning: {e}; its processes cannot allocate until they are under it");
            }
            // A slot placed by an earlier daemon (or an unmanaged one taken over): its file, its reader.
            locked.file().map_conf(i, Some(owner(spec)))?;
            i
        }
        None => {
            let claimed = locked.claim_slot_with(&encoded, |i| locked.file().map_conf(i, Some(owner(spec))));
            claimed?.ok_or_else(|| SlotError::Full { region: locked.path().to_string(), name: spec.name.clone() })?
        }
    };
    locked.file().map_live(index, Some(owner(spec)))?;
    configure(&locked.region().vgpus[index], spec, roster);
    Ok(index)
}

/// The user of `spec`'s vGPU, whose its live file is: the one named, else the daemon's own.
pub fn owner(spec: &VgpuSpec) -> u32 {
    // SAFETY: getuid cannot fail.
    spec.user.unwrap_or_else(|| unsafe { libc::getuid() })
}

/// Changes the memory quota of `spec`'s slot to `spec.memory`, unless the vGPU uses more than that now.
pub fn set_memory(locked: &Locked, index: usize, spec: &VgpuSpec, roster: &Roster) -> Result<(), SlotError> {
    let v = &locked.region().vgpus[index];
    check_fits(v, spec, spec.memory)?;
    configure(v, spec, roster);
    Ok(())
}

/// Writes `spec` into slot `v`: the quota on its device (no limit elsewhere) and the compute share, then
/// tells waiting launches, and the device loops (`roster`), that the state changed.
pub fn configure(v: &VgpuSlot, spec: &VgpuSpec, roster: &Roster) {
    let mut limits = [UNLIMITED; MAX_DEVICES];
    limits[spec.device as usize] = spec.memory;
    set_limits(v, &limits);
    let c = &v.config;
    c.device.store(spec.device, Ordering::Relaxed);
    c.share.store(spec.share, Ordering::Relaxed);
    c.priority.store(priority_value(spec.priority), Ordering::Relaxed);
    c.window_ns.store(spec.window_ns, Ordering::Relaxed);
    // The audit's mark stays while the vGPU stays suspended.
    let audit = if spec.suspended { c.flags.load(Ordering::Acquire) & flags::AUDIT } else { 0 };
    c.flags.store(region_flags(spec) | audit, Ordering::Release);
    notify(&v.live.sched);
    roster.changed();
}

/// Tells the vGPU's waiting launches that its state changed (they re-read it): [`Sched::wake_waiters`].
pub fn notify(s: &Sched) {
    s.wake_waiters();
}

/// Frees the slot of vGPU `name` unless processes are attached to it, other than those of the process
/// slots `ignored` (slot index and owner word: slots whose process the daemon could not verify, see
/// [`crate::tenants::integrity`]) that still name the same process.
pub fn remove(locked: &Locked, name: &str, ignored: &[(usize, u64)], roster: &Roster) -> Result<(), SlotError> {
    let Some(index) = find(locked, name) else { return Ok(()) };
    // Tenants of other users join under its live file's shared lock, not the region's: none joins meanwhile.
    let _joining = locked.file().lock_live(index, LIVE_LOCK_TIMEOUT)?;
    let view = ProcView::new();
    locked.reclaim_dead(&view);
    let pids: Vec<u32> = locked.region().vgpus[index]
        .attached()
        .filter(|(i, _, p)| !ignored.contains(&(*i, p.owner.load(Ordering::Acquire))))
        .map(|(_, pid, p)| view.pid_of(p, pid))
        .collect();
    if !pids.is_empty() {
        return Err(SlotError::Attached { name: name.to_string(), pids });
    }
    locked.free_slot(index);
    notify(&locked.region().vgpus[index].live.sched);
    roster.changed();
    locked.file().unmap_live(index)?;
    Ok(locked.file().unmap_conf(index, false)?)
}

/// Hands back to processes every managed slot the configuration does not name (a state file removed or
/// replaced while the daemon was down): it becomes an ordinary vGPU, freed when nobody uses it.
pub fn release_unknown(locked: &Locked, known: &[VgpuSpec]) {
    for index in 0..locked.region().vgpus.len() {
        let v = &locked.region().vgpus[index];
        if !is_managed(v) || known.iter().any(|s| encode_name(&s.name).is_some_and(|n| n == v.config.name)) {
            continue;
        }
        let name = String::from_utf8_lossy(v.name_bytes()).into_owned();
        if !v.has_processes() {
            locked.free_slot(index);
            if let Err(e) = locked.file().unmap_live(index).and_then(|()| locked.file().unmap_conf(index, false)) {
                say!("tessera daemon: {e}");
            }
        } else {
            v.config.flags.fetch_and(!flags::MANAGED, Ordering::AcqRel);
            // Its processes' peers must find it by name in the region file itself now.
            if let Err(e) = locked.file().unmap_conf(index, true) {
                say!("tessera daemon: {e}");
            }
        }
        notify(&v.live.sched);
        say!("tessera daemon: vGPU {name:?} is in the region but not in the configuration; no longer managed");
    }
}

/// The status of `spec`, read from its slot.
pub fn status(locked: &Locked, spec: &VgpuSpec) -> VgpuStatus {
    let mut st = VgpuStatus { spec: spec.clone(), ..VgpuStatus::default() };
    let Some(index) = find(locked, &spec.name) else { return st };
    let v = &locked.region().vgpus[index];
    let d = spec.device as usize;
    st.used = v.used(d);
    st.peak = v.live.peak[d].load(Ordering::Acquire);
    st.processes = locked.attached_pids(index, &ProcView::new());
    let s = &v.live.sched;
    st.tokens_ns = s.tokens.load(Ordering::Acquire);
    st.inflight_ns = s.inflight_ns.load(Ordering::Acquire);
    st.launches = s.launches.load(Ordering::Acquire);
    st.device_ns = s.device_ns.load(Ordering::Acquire);
    st.wait_ns = s.wait_ns.load(Ordering::Acquire);
    st.soft_processes = v.attached().filter(|(_, _, p)| p.is_soft()).count() as u32;
    let soft = v.soft_totals();
    st.resident = soft.resident;
    st.pooled = soft.pooled;
    st.fragmented = soft.fragmented;
    st.fragmentation_pct = soft.fragmentation_pct();
    st.swapped = soft.swapped;
    st.swap_out_ns = soft.swap_out_ns;
    st.swap_in_ns = soft.swap_in_ns;
    let pager = &v.live.pager;
    st.swap_charged_ns = pager.swap_charged_ns.load(Ordering::Acquire);
    st.wanted = v.wanted(d);
    st
}
