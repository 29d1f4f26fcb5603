//! A process joining a vGPU by name ([`attach`]): the shim's way into the region, checked against the
//! limits the process gives and those the vGPU has.
//!
//! A managed vGPU's quota is the daemon's: a process joining it with another `TESSERA_MEMORY_LIMIT` is
//! refused, one without adopts it, and the slot is never reused for another name while it is managed. An
//! unmanaged vGPU (created by the first process naming it) takes the limits of whoever joins it when no
//! process is attached, and its slot may be reused for another name once nobody is attached. A process
//! joining a managed vGPU maps the region read-only and only the vGPU's live file writable over it, so
//! that it can change neither its own configuration nor another vGPU's state.
//!
//! A process of the region's owner joins under the owner's lock ([`RegionFile::lock`]). A process of
//! another user (a tenant of a `--user` vGPU) may not lock the region, and takes no lock of it: it finds
//! its vGPU without one ([`find_settled`]), then checks that the slot is still that vGPU's and claims its
//! process slot under the shared lock of the vGPU's live file, which only its user and the daemon can
//! open, and whose exclusive lock the daemon holds while it removes the vGPU.

use super::claim::{ClaimError, claim_process};
use super::file::{LOCK_TIMEOUT, Locked, RegionError, RegionFile, find_settled, map, overlay};
use super::layout::live_offset;
use super::layout::{Daemon, MAX_DEVICES, MAX_VGPUS, NAME_LEN, ProcSlot, Region, UNLIMITED, VgpuSlot, encode_name};
use super::open::{Access, OpenError, live_path, open_live};
use super::pid_ns::{self, Unseen};
use super::reclaim;
use super::settings::{Limits, describe, is_managed, limits_of, reset_usage, set_limits};
use crate::flock::FileLock;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a tenant of another user retries a vGPU it found halfway through a change by the daemon (its
/// slot named but not yet configured, its live file not yet made, or replaced meanwhile): the daemon makes
/// such a change in milliseconds.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a process could not join a vGPU ([`attach`], [`attach_with_share`]). Each names the vGPU or the
/// file, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The name is not one a vGPU may have.
    #[error("{name:?} is not a vGPU name")]
    BadName {
        /// The name.
        name: String,
    },
    /// The region file could not be opened, mapped or locked ([`RegionFile`]).
    #[error(transparent)]
    Region(#[from] RegionError),
    /// The vGPU's live file could not be opened or is not fit to use (it belongs to the user the vGPU was
    /// created for).
    #[error("cannot join vGPU {name:?}: {source} (a vGPU's file belongs to the user it was created for)")]
    Live {
        /// The vGPU.
        name: String,
        /// What is wrong with its live file.
        source: OpenError,
    },
    /// The vGPU's live file was not there (being made or removed by the daemon) for as long as this
    /// process retried.
    #[error(transparent)]
    LiveMissing(OpenError),
    /// Others held the vGPU's live file's lock for longer than this process waits.
    #[error(
        "{path} has been locked for more than {} s by {holders}; only this user's processes and the daemon can \
         lock it: resume or end the holder, then try again",
        .timeout.as_secs()
    )]
    LiveHeld {
        /// The live file.
        path: String,
        /// How long this process waited.
        timeout: Duration,
        /// The pids holding it, from `/proc/locks`.
        pids: Vec<u32>,
        /// Who holds it, for people ([`super::file::describe_holders`]).
        holders: String,
    },
    /// The vGPU was changed (removed, made anew) each time this process tried to join it.
    #[error("vGPU {name:?} kept changing while this process joined it; retry")]
    KeptChanging {
        /// The vGPU.
        name: String,
    },
    /// No process slot could be claimed ([`ClaimError`]).
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The vGPU is not managed by a daemon and this process gives no limit: it would run unlimited.
    #[error(
        "vGPU {name:?} is not managed by a Tessera daemon (region file {path}) and this process gives no limit of \
         its own, so it would run without limits; either start the daemon (`tessera daemon`) and create it \
         (`tessera vgpu create {name} --device N --memory SIZE --share PCT`), or give a limit with \
         TESSERA_MEMORY_LIMIT or TESSERA_COMPUTE_SHARE"
    )]
    Unlimited {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
    },
    /// There is no such vGPU, and the daemon, which manages the region, is the one to create it.
    #[error(
        "there is no vGPU {name:?}: the Tessera daemon (pid {daemon}) manages the vGPUs of region file {path}; \
         create it with `tessera vgpu create {name} ...` or pick one from `tessera vgpu list`"
    )]
    NotFound {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
        /// The daemon's pid.
        daemon: u32,
    },
    /// There is no such vGPU, and this user may not add one to the region (another user's).
    #[error("there is no vGPU {name:?} in region file {path}, which this user may not change")]
    NotFoundReadOnly {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
    },
    /// Every vGPU slot is in use: no new vGPU can be added.
    #[error(
        "region file {path}: all {MAX_VGPUS} vGPU slots are in use by running processes or the daemon; cannot add \
         {name:?}"
    )]
    NoFreeSlot {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
    },
    /// The region is read-only for this user and the vGPU is not the daemon's: nothing could be charged.
    #[error("region file {path} is read-only for this user and vGPU {name:?} is not managed by the Tessera daemon")]
    ReadOnlyUnmanaged {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
    },
    /// The process's memory limit differs from the quota the daemon set for the vGPU.
    #[error(
        "TESSERA_MEMORY_LIMIT ({}) conflicts with vGPU {name:?} in region file {path}, whose quota ({}) is set by \
         the Tessera daemon; leave TESSERA_MEMORY_LIMIT unset to adopt it, or change it with `tessera vgpu set \
         {name} --memory SIZE`",
        describe(.limits),
        describe(.quota)
    )]
    ManagedQuota {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
        /// The process's limits.
        limits: Box<Limits>,
        /// The vGPU's quota.
        quota: Box<Limits>,
    },
    /// The process's memory limit differs from the quota of an unmanaged vGPU other processes share.
    #[error(
        "TESSERA_MEMORY_LIMIT ({}) conflicts with vGPU {name:?} in region file {path}, whose quota is {} and which \
         {holders} running process(es) share; use the same limit, none (to adopt it), or another TESSERA_VGPU",
        describe(.limits),
        describe(.quota)
    )]
    QuotaConflict {
        /// The vGPU.
        name: String,
        /// The region file.
        path: String,
        /// The process's limits.
        limits: Box<Limits>,
        /// The vGPU's quota.
        quota: Box<Limits>,
        /// How many processes share it.
        holders: usize,
    },
}

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
pub fn attach(path: &str, name: &str, limits: Option<&Limits>) -> Result<Attached, AttachError> {
    attach_with_share(path, name, limits, false)
}

/// Opens (creating if needed) the region at `path`, joins vGPU `name` with `limits` (`None`: adopt the
/// vGPU's) and claims a process slot. The mapping lives as long as the process: for a vGPU the daemon
/// manages, the region read-only and the vGPU's live file (which this user must own) over its slot.
/// `own_share`: the process has a standalone compute share (`TESSERA_COMPUTE_SHARE`), a limit of its own
/// like `limits`; with neither, it may only join a vGPU that has limits already (see [`join`]).
pub fn attach_with_share(
    path: &str,
    name: &str,
    limits: Option<&Limits>,
    own_share: bool,
) -> Result<Attached, AttachError> {
    let encoded = encode_name(name).ok_or_else(|| AttachError::BadName { name: name.to_string() })?;
    let file = RegionFile::open_as(path, Access::Joiner)?;
    if !file.writable {
        return attach_read_only(file, path, name, &encoded, limits, own_share);
    }
    {
        // Before the lock, which others wait for meanwhile: reclaiming reads `/proc` for every process of
        // every vGPU, and is safe without it (slots are freed by compare-and-swap).
        reclaim::reclaim_dead(file.region(), &Unseen);
    }
    let locked = file.lock()?;
    // VGPUs the daemon made since the file was opened: their names are in configuration files.
    file.refresh_confs();
    let index = join(&locked, locked.find(&encoded), name, limits, own_share)?;
    let managed = is_managed(&locked.region().vgpus[index]);
    let region: &'static Region = if managed {
        let live = open_live(&live_path(path, index), index, file.dir, None)
            .map_err(|source| AttachError::Live { name: name.to_string(), source })?;
        map_joined(&file, index, &live)?
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

/// [`attach_with_share`] for a region this user may only read (another user's, normally the daemon's):
/// without any lock of the region, see the module doc. Retries for at most [`SETTLE_TIMEOUT`] while the
/// vGPU is found halfway through a change.
fn attach_read_only(
    file: RegionFile,
    path: &str,
    name: &str,
    encoded: &[u8; NAME_LEN],
    limits: Option<&Limits>,
    own_share: bool,
) -> Result<Attached, AttachError> {
    let settle = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let unsettled = match try_attach_read_only(&file, path, name, encoded, limits, own_share)? {
            Ok(attached) => return Ok(attached),
            Err(unsettled) => unsettled,
        };
        if Instant::now() >= settle {
            return Err(unsettled);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One try of [`attach_read_only`]: `Ok(Err(why))` when the vGPU was found halfway through a change (try
/// again), `Err` when joining it is refused.
fn try_attach_read_only(
    file: &RegionFile,
    path: &str,
    name: &str,
    encoded: &[u8; NAME_LEN],
    limits: Option<&Limits>,
    own_share: bool,
) -> Result<Result<Attached, AttachError>, AttachError> {
    let threads = file.guard();
    file.refresh_confs();
    let found = find_settled(file.region(), encoded);
    let Some(index) = found.filter(|&i| is_managed(&file.region().vgpus[i])) else {
        // Not there, or not configured yet: join says why it will not do (unless it is only being made).
        // (join refuses both: a region this user may only read has no slot for a new vGPU, nor an unmanaged one.)
        let e = match join(&threads, found, name, limits, own_share) {
            Err(e) => e,
            Ok(_) => AttachError::KeptChanging { name: name.to_string() },
        };
        return if found.is_some() { Ok(Err(e)) } else { Err(e) };
    };
    let live_at = live_path(path, index);
    let live = match open_live(&live_at, index, file.dir, None) {
        Ok(live) => live,
        // Being made or removed by the daemon.
        Err(e) if std::path::Path::new(&live_at).symlink_metadata().is_err() => {
            return Ok(Err(AttachError::LiveMissing(e)));
        }
        Err(source) => return Err(AttachError::Live { name: name.to_string(), source }),
    };
    let held = FileLock::shared_within(&live, LOCK_TIMEOUT).map_err(|source| RegionError::FileIo {
        path: live_at.clone(),
        op: "cannot lock",
        source,
    })?;
    let Some(held) = held else {
        let (pids, holders) = super::file::holders_of(&live);
        return Err(AttachError::LiveHeld { path: live_at, timeout: LOCK_TIMEOUT, pids, holders });
    };
    // Under the live file's lock the daemon removes nothing: the slot must still be this vGPU's, and the
    // file still the one at its path.
    let same_file = match (live.metadata(), std::fs::symlink_metadata(&live_at)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    };
    if !same_file || find_settled(file.region(), encoded) != Some(index) || !is_managed(&file.region().vgpus[index]) {
        return Ok(Err(AttachError::KeptChanging { name: name.to_string() }));
    }
    join(&threads, Some(index), name, limits, own_share)?;
    let region = map_joined(file, index, &live)?;
    let vgpu = &region.vgpus[index];
    reclaim::reclaim_vgpu(vgpu, None, &Unseen);
    let me_index = claim_process(vgpu, name)?;
    drop(held);
    Ok(Ok(Attached {
        region: Some(region),
        vgpu,
        vgpu_index: index as u32,
        me: &vgpu.live.procs[me_index],
        me_index: Some(me_index),
    }))
}

/// The mapping a process joining managed vGPU `index` keeps for its life: the region file read-only, with
/// the configuration files it may read mapped over their slots (its vGPU's among them) and `live`, the
/// vGPU's live file, writable over the vGPU's live area.
fn map_joined(file: &RegionFile, index: usize, live: &std::fs::File) -> Result<&'static Region, RegionError> {
    let path = &file.path;
    let map = map(&file.file, libc::PROT_READ).map_err(|source| RegionError::Io {
        path: path.clone(),
        op: "cannot map",
        source,
    })?;
    let owner = super::conf::owner_of(&file.file);
    let mut confs = std::collections::BTreeMap::new();
    let read = (libc::PROT_READ, libc::PROT_READ);
    // SAFETY: a fresh mapping of our own; nothing references it yet.
    unsafe { super::conf::overlay_confs(map.0.as_ptr(), &file.file, path, owner, read, &mut confs) };
    // SAFETY: as above.
    unsafe { overlay(map.0.as_ptr(), live_offset(index), live, libc::PROT_READ | libc::PROT_WRITE, 0) }
        .map_err(|source| RegionError::FileIo { path: live_path(path, index), op: "cannot map", source })?;
    let base = map.0;
    std::mem::forget(map);
    // SAFETY: never unmapped now; the header was checked when `file` was opened.
    Ok(unsafe { &*base.as_ptr() })
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

/// The slot `found` for vGPU `name` checked against `limits`, or a new slot configured with them (refused
/// while a daemon manages the region: its vGPUs are created with `tessera vgpu create`). A process with no
/// limit of its own (no `limits`, no `own_share`) may not set up a vGPU no daemon manages: it would run
/// unlimited, say after a typo in `TESSERA_VGPU`.
fn join(
    locked: &Locked,
    found: Option<usize>,
    name: &str,
    limits: Option<&Limits>,
    own_share: bool,
) -> Result<usize, AttachError> {
    let (name, path) = (name.to_string(), locked.path().to_string());
    let Some(i) = found else {
        if let Some(daemon) = live_daemon(locked.region(), crate::futex::monotonic_ns()) {
            return Err(AttachError::NotFound { name, path, daemon });
        }
        if !locked.file().writable {
            return Err(AttachError::NotFoundReadOnly { name, path });
        }
        if limits.is_none() && !own_share {
            return Err(AttachError::Unlimited { name, path });
        }
        let Some(encoded) = encode_name(&name) else { return Err(AttachError::BadName { name }) };
        let Some(i) = locked.claim_slot(&encoded) else { return Err(AttachError::NoFreeSlot { name, path }) };
        set_limits(&locked.region().vgpus[i], limits.unwrap_or(&[UNLIMITED; MAX_DEVICES]));
        return Ok(i);
    };
    let v = &locked.region().vgpus[i];
    let holders = v.attached().count();
    let current = limits_of(v);
    let managed = is_managed(v);
    if !managed && !locked.file().writable {
        return Err(AttachError::ReadOnlyUnmanaged { name, path });
    }
    match limits {
        Some(l) if *l != current && managed => {
            Err(AttachError::ManagedQuota { name, path, limits: Box::new(*l), quota: Box::new(current) })
        }
        Some(l) if *l != current && holders > 0 => {
            Err(AttachError::QuotaConflict { name, path, limits: Box::new(*l), quota: Box::new(current), holders })
        }
        _ if holders > 0 => Ok(i),
        // A managed vGPU's usage is the daemon's to reset; an unmanaged one, with nobody attached, starts
        // over and takes the limits of whoever joins: like a new one, only from a process that has some.
        _ if managed => Ok(i),
        None if !own_share => Err(AttachError::Unlimited { name, path }),
        _ => {
            reset_usage(v);
            set_limits(v, limits.unwrap_or(&current));
            Ok(i)
        }
    }
}
