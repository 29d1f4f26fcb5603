//! A process joining a vGPU by name ([`attach`]): the shim's way into the region, checked against the
//! limits the process gives and those the vGPU has.
//!
//! A managed vGPU's quota is the daemon's: a process joining it with another `TESSERA_MEMORY_LIMIT` is
//! refused, one without adopts it, and the slot is never reused for another name while it is managed. An
//! unmanaged vGPU (created by the first process naming it) takes the limits of whoever joins it when no
//! process is attached, and its slot may be reused for another name once nobody is attached. A process
//! joining a managed vGPU maps the region read-only and only the vGPU's live file writable over it, so
//! that it can change neither its own configuration nor another vGPU's state.

use super::claim::claim_process;
use super::file::{Locked, RegionFile, map, overlay};
use super::layout::{Daemon, MAX_DEVICES, MAX_VGPUS, NAME_LEN, ProcSlot, Region, UNLIMITED, VgpuSlot, encode_name};
use super::open::{Access, live_path, open_live};
use super::pid_ns::{self, Unseen};
use super::reclaim;
use super::settings::{Limits, describe, is_managed, limits_of, reset_usage, set_limits};
use std::sync::atomic::Ordering;

/// The slots a process accounts in.
pub struct Attached {
    /// The shared region, or `None` for a private quota. For a managed vGPU, mapped read-only but for the
    /// vGPU's live area.
    pub region: Option<&'static Region>,
    /// The vGPU's slot.
    pub vgpu: &'static VgpuSlot,
    /// Its index in the region (0 for a private quota).
    pub vgpu_index: u32,
    /// This process's slot.
    pub me: &'static ProcSlot,
    /// Its index among the vGPU's process slots.
    pub me_index: Option<usize>,
}

/// [`attach_with_share`] for a process without a compute share of its own.
pub fn attach(path: &str, name: &str, limits: Option<&Limits>) -> Result<Attached, String> {
    attach_with_share(path, name, limits, false)
}

/// Opens (creating if needed) the region at `path`, joins vGPU `name` with `limits` (`None`: adopt the
/// vGPU's) and claims a process slot. The mapping lives as long as the process: for a vGPU the daemon
/// manages, the region read-only and the vGPU's live file (which this user must own) over its slot.
/// `own_share`: the process has a standalone compute share (`TESSERA_COMPUTE_SHARE`), a limit of its own
/// like `limits`; with neither, it may only join a vGPU that has limits already (see [`join`]).
pub fn attach_with_share(path: &str, name: &str, limits: Option<&Limits>, own_share: bool) -> Result<Attached, String> {
    let encoded = encode_name(name).ok_or_else(|| format!("{name:?} is not a vGPU name"))?;
    let file = RegionFile::open_as(path, Access::Joiner)?;
    if file.writable {
        // Before the lock, which others wait for meanwhile: reclaiming reads `/proc` for every process of
        // every vGPU, and is safe without it (slots are freed by compare-and-swap).
        reclaim::reclaim_dead(file.region(), &Unseen);
    }
    let locked = file.lock()?;
    let index = join(&locked, &encoded, name, limits, own_share)?;
    let managed = is_managed(&locked.region().vgpus[index]);
    let region: &'static Region = if managed {
        let live = open_live(&live_path(path, index), index, file.dir, None).map_err(|e| {
            format!("cannot join vGPU {name:?}: {e} (a vGPU's file belongs to the user it was created for)")
        })?;
        let map = map(&file.file, libc::PROT_READ).map_err(|e| format!("region file {path}: cannot map: {e}"))?;
        // SAFETY: a fresh mapping of our own; nothing references it yet.
        unsafe { overlay(map.0.as_ptr(), index, &live, libc::PROT_READ | libc::PROT_WRITE, 0) }
            .map_err(|e| format!("{}: cannot map: {e}", live_path(path, index)))?;
        let base = map.0;
        std::mem::forget(map);
        // SAFETY: never unmapped now; the header was checked when `file` was opened.
        unsafe { &*base.as_ptr() }
    } else {
        // SAFETY: the mapping outlives `locked`: it is leaked, never unmapped, right after.
        unsafe { &*std::ptr::from_ref(locked.region()) }
    };
    let vgpu = &region.vgpus[index];
    reclaim::reclaim_vgpu(vgpu, None, &Unseen);
    let me_index = claim_process(vgpu, name)?;
    drop(locked);
    if !managed {
        file.leak();
    }
    Ok(Attached {
        region: Some(region),
        vgpu,
        vgpu_index: index as u32,
        me: &vgpu.live.procs[me_index],
        me_index: Some(me_index),
    })
}

/// How long the daemon's heartbeat may be silent before it counts as gone (it beats at least every
/// 100 ms while it lives).
pub const DAEMON_SILENCE_NS: u64 = 2_000_000_000;

/// The pid of the daemon managing `region` when one is alive at `now_ns`: it says so, its process is not
/// known to be gone ([`daemon_gone`]) and its heartbeat is recent (a killed daemon's pid, reused by another
/// process, does not count for long).
pub fn live_daemon(region: &Region, now_ns: u64) -> Option<u32> {
    let pid = region.daemon.pid.load(Ordering::Acquire);
    let beat = region.daemon.heartbeat_ns.load(Ordering::Acquire);
    (!daemon_gone(&region.daemon) && now_ns.saturating_sub(beat) < DAEMON_SILENCE_NS).then_some(pid)
}

/// Whether the daemon's process is certainly gone: it cleared its pid, or its pid is of this process's
/// pid namespace and `kill(pid, 0)` finds no such process. A daemon of another namespace (a tenant in a
/// container, the daemon on the host) cannot be looked up by pid: only its heartbeat tells.
pub fn daemon_gone(daemon: &Daemon) -> bool {
    let pid = daemon.pid.load(Ordering::Acquire);
    pid == 0 || (pid_ns::is_own(daemon.pid_ns.load(Ordering::Acquire)) && reclaim::exists(pid) == Some(false))
}

/// The slot of vGPU `name` checked against `limits`, or a new slot configured with them (refused while a
/// daemon manages the region: its vGPUs are created with `tessera vgpu create`). A process with no limit
/// of its own (no `limits`, no `own_share`) may not set up a vGPU no daemon manages: it would run
/// unlimited, say after a typo in `TESSERA_VGPU`.
fn join(
    locked: &Locked,
    encoded: &[u8; NAME_LEN],
    name: &str,
    limits: Option<&Limits>,
    own_share: bool,
) -> Result<usize, String> {
    let path = locked.path();
    let unlimited = || {
        format!(
            "vGPU {name:?} is not managed by a Tessera daemon (region file {path}) and this process gives no limit \
             of its own, so it would run without limits; either start the daemon (`tessera daemon`) and create it \
             (`tessera vgpu create {name} --device N --memory SIZE --share PCT`), or give a limit with \
             TESSERA_MEMORY_LIMIT or TESSERA_COMPUTE_SHARE"
        )
    };
    let Some(i) = locked.find(encoded) else {
        if let Some(pid) = live_daemon(locked.region(), crate::futex::monotonic_ns()) {
            return Err(format!(
                "there is no vGPU {name:?}: the Tessera daemon (pid {pid}) manages the vGPUs of region file {path}; \
                 create it with `tessera vgpu create {name} ...` or pick one from `tessera vgpu list`"
            ));
        }
        if !locked.file().writable {
            return Err(format!("there is no vGPU {name:?} in region file {path}, which this user may not change"));
        }
        if limits.is_none() && !own_share {
            return Err(unlimited());
        }
        let i = locked.claim_slot(encoded).ok_or_else(|| {
            format!(
                "region file {path}: all {MAX_VGPUS} vGPU slots are in use by running processes or the daemon; \
                 cannot add {name:?}"
            )
        })?;
        set_limits(&locked.region().vgpus[i], limits.unwrap_or(&[UNLIMITED; MAX_DEVICES]));
        return Ok(i);
    };
    let v = &locked.region().vgpus[i];
    let holders = v.attached().count();
    let current = limits_of(v);
    let managed = is_managed(v);
    if !managed && !locked.file().writable {
        return Err(format!(
            "region file {path} is read-only for this user and vGPU {name:?} is not managed by the Tessera daemon"
        ));
    }
    match limits {
        Some(l) if *l != current && managed => Err(format!(
            "TESSERA_MEMORY_LIMIT ({}) conflicts with vGPU {name:?} in region file {path}, whose quota ({}) is set \
             by the Tessera daemon; leave TESSERA_MEMORY_LIMIT unset to adopt it, or change it with `tessera vgpu \
             set {name} --memory SIZE`",
            describe(l),
            describe(&current)
        )),
        Some(l) if *l != current && holders > 0 => Err(format!(
            "TESSERA_MEMORY_LIMIT ({}) conflicts with vGPU {name:?} in region file {path}, whose quota is {} and \
             which {holders} running process(es) share; use the same limit, none (to adopt it), or another \
             TESSERA_VGPU",
            describe(l),
            describe(&current)
        )),
        _ if holders > 0 => Ok(i),
        // A managed vGPU's usage is the daemon's to reset; an unmanaged one, with nobody attached, starts
        // over and takes the limits of whoever joins: like a new one, only from a process that has some.
        _ if managed => Ok(i),
        None if !own_share => Err(unlimited()),
        _ => {
            reset_usage(v);
            set_limits(v, limits.unwrap_or(&current));
            Ok(i)
        }
    }
}
