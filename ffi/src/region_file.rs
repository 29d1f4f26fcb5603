//! The region file (layout in [`crate::region`]): opened and checked under `flock` (created complete, see
//! [`crate::region_open`]); its slots claimed and configured only while [`Locked`] holds the lock. One
//! implementation for the shim (a process joining a vGPU by name, [`attach`]) and the daemon (which
//! creates and configures vGPUs it then marks [`flags::MANAGED`]).
//!
//! A managed vGPU's quota is the daemon's: a process joining it with another `TESSERA_MEMORY_LIMIT` is
//! refused, one without adopts it, and the slot is never reused for another name while it is managed. An
//! unmanaged vGPU (created by the first process naming it) takes the limits of whoever joins it when no
//! process is attached, and its slot may be reused for another name once nobody is attached.
//!
//! A managed vGPU's live area is its own file ([`live_path`]), which the daemon creates for the vGPU's
//! user ([`RegionFile::map_live`]); a process joining the vGPU maps the region read-only and only that file
//! writable over it, so that it can change neither its own configuration nor another vGPU's state.
//!
//! Where these files are by default, and how they are created and checked so that no other user can plant
//! one, is [`crate::region_open`]'s.

use crate::flock::FileLock;
use crate::reclaim;
use crate::region::{
    AREA, DEFAULT_WINDOW_NS, LAYOUT_SIZE, MAX_DEVICES, MAX_VGPUS, NAME_LEN, PROCS_PER_VGPU, ProcSlot, Region,
    UNLIMITED, VERSION, VgpuSlot, encode_name, flags, live_offset, state,
};
pub use crate::region_open::Access;
use crate::region_open::{DEFAULT_REGION_NAME, check_header, checked_dir, header_matches, open_live, open_region};
use crate::secure_fs::DirKind;
use crate::units::format_size;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

/// Per-device limits, [`UNLIMITED`] where none is set.
pub type Limits = [u64; MAX_DEVICES];

/// The default region: `tessera.region` in the user's own directory in shared memory,
/// [`crate::region_open::default_dir`] (`TESSERA_REGION` overrides it).
pub fn default_path() -> String {
    crate::region_open::default_dir().join(DEFAULT_REGION_NAME).to_string_lossy().into_owned()
}

/// Describes limits for messages: `512.0 MiB on every device`, `0=1.0 GiB, 1=2.0 GiB`, `no limit`.
pub fn describe(limits: &Limits) -> String {
    if limits.iter().all(|&l| l == limits[0]) {
        return if limits[0] == UNLIMITED {
            "no limit".into()
        } else {
            format!("{} on every device", format_size(limits[0]))
        };
    }
    let set: Vec<String> = limits
        .iter()
        .enumerate()
        .filter(|(_, l)| **l != UNLIMITED)
        .map(|(d, l)| format!("{d}={}", format_size(*l)))
        .collect();
    format!("{} (no limit elsewhere)", set.join(", "))
}

/// A vGPU slot's limits.
pub fn limits_of(v: &VgpuSlot) -> Limits {
    std::array::from_fn(|d| v.config.limit[d].load(Ordering::Acquire))
}

/// Sets a vGPU slot's limits.
pub fn set_limits(v: &VgpuSlot, limits: &Limits) {
    for (slot, &l) in v.config.limit.iter().zip(limits) {
        slot.store(l, Ordering::Release);
    }
}

/// Starts a slot's usage figures over (peak, context costs, and any measuring turn a killed process left):
/// only for a slot no process is attached to.
pub fn reset_usage(v: &VgpuSlot) {
    let live = &v.live;
    for d in 0..MAX_DEVICES {
        live.peak[d].store(0, Ordering::Relaxed);
        live.context_cost[d].store(0, Ordering::Relaxed);
    }
    live.measuring.store(0, Ordering::Relaxed);
    live.last_reclaim_ns.store(0, Ordering::Relaxed);
}

/// Puts a slot's compute-share settings and state back to their defaults (device 0, share 0, normal
/// priority, no flags, no tokens, the default window, no memory wanted or swap time charged), keeping
/// `epoch` and the pager's request numbers (futex words and counters only ever incremented).
pub fn reset_sched(v: &VgpuSlot) {
    let c = &v.config;
    c.device.store(0, Ordering::Relaxed);
    c.share.store(0, Ordering::Relaxed);
    c.priority.store(crate::region::priority::NORMAL, Ordering::Relaxed);
    c.flags.store(0, Ordering::Release);
    c.window_ns.store(DEFAULT_WINDOW_NS, Ordering::Relaxed);
    let s = &v.live.sched;
    s.waiters.store(0, Ordering::Relaxed);
    s.tokens.store(0, Ordering::Relaxed);
    s.inflight_ns.store(0, Ordering::Relaxed);
    for counter in [&s.last_launch_ns, &s.launches, &s.device_ns, &s.wait_ns, &s.last_refill_ns] {
        counter.store(0, Ordering::Relaxed);
    }
    for c in &s.charged_ns {
        c.store(0, Ordering::Relaxed);
    }
    v.live.pager.swap_charged_ns.store(0, Ordering::Relaxed);
}

/// True when the daemon manages the slot.
pub fn is_managed(v: &VgpuSlot) -> bool {
    v.flags() & flags::MANAGED != 0
}

/// The path of slot `index`'s live file, for the region file at `region`.
pub fn live_path(region: &str, index: usize) -> String {
    format!("{region}.vgpu{index:02}")
}

/// The shared mapping of a whole region file; unmapped when dropped (with whatever was mapped over it).
struct Mapping(NonNull<Region>);

// SAFETY: the mapping is shared memory; every field written after initialization is an atomic, except
// names, which are written only under the file lock (see `Locked::name_slot`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; nothing borrowed from it outlives the owning RegionFile.
        unsafe { libc::munmap(self.0.as_ptr().cast(), LAYOUT_SIZE) };
    }
}

/// An open, checked region file and its mapping.
pub struct RegionFile {
    file: File,
    map: Mapping,
    path: String,
    writable: bool,
    /// What the directory holding it may be trusted with (whether the daemon may replace a live file).
    dir: DirKind,
    /// `flock` excludes other open files, not other threads using this one: they take this first.
    threads: Mutex<()>,
}

impl RegionFile {
    /// Opens the region at `path` for a user's processes that share it as peers ([`Access::Peer`]).
    pub fn open(path: &str) -> Result<RegionFile, String> {
        RegionFile::open_as(path, Access::Peer)
    }

    /// Opens the region at `path` as `access` says, creating it complete when it is missing (and may be
    /// created), in a directory checked for it ([`crate::region_open`]); an existing file must be a
    /// version-[`VERSION`] region of this layout, owned as `access` requires. Errors name the file and what
    /// to do.
    pub fn open_as(path: &str, access: Access) -> Result<RegionFile, String> {
        let fail = |what: &str, e: std::io::Error| format!("region file {path}: {what}: {e}");
        let dir = checked_dir(std::path::Path::new(path)).map_err(|e| format!("region file {path}: {e}"))?;
        let (file, writable) = open_region(path, access, dir)?;
        let lock = if writable { FileLock::new(&file) } else { FileLock::shared(&file) };
        let lock = lock.map_err(|e| fail("cannot lock", e))?;
        let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
        if len != LAYOUT_SIZE as u64 {
            return Err(format!(
                "region file {path} has {len} bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}: it is \
                 truncated, foreign or from another Tessera version; remove it (no Tessera program may be running) \
                 or set TESSERA_REGION"
            ));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let map = map(&file, prot).map_err(|e| fail("cannot map", e))?;
        // SAFETY: `map` covers the whole file and lives until the end of this function or in the result; the
        // header is read only (atomic magic, integers written before the file was linked into place).
        check_header(unsafe { &map.0.as_ref().head.header }, path)?;
        drop(lock);
        Ok(RegionFile { file, map, path: path.to_string(), writable, dir, threads: Mutex::new(()) })
    }

    /// The file's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The region, for lock-free atomic access.
    pub fn region(&self) -> &Region {
        // SAFETY: checked or initialized in `open`; mapped as long as `self` lives.
        unsafe { self.map.0.as_ref() }
    }

    /// Takes the file lock (and excludes this process's other threads) to claim or configure slots; a
    /// read-only file takes the shared lock, enough to read names.
    pub fn lock(&self) -> Result<Locked<'_>, String> {
        let threads = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let file = if self.writable { FileLock::new(&self.file) } else { FileLock::shared(&self.file) };
        let file = file.map_err(|e| format!("region file {}: cannot lock: {e}", self.path))?;
        Ok(Locked { owner: self, _threads: threads, _file: file })
    }

    /// Maps slot `index`'s live file over the slot's live area of this mapping (the daemon's: it reads and
    /// writes every managed vGPU's state where its processes do). With `owner`, the file must be that user's
    /// and is created for it (mode 0600) when it does not exist, starting from what the region's own area
    /// holds; without, it must exist and be this user's.
    pub fn map_live(&self, index: usize, owner: Option<u32>) -> Result<(), String> {
        let from = owner.map(|uid| (uid, &self.region().vgpus[index].live));
        let live = open_live(&live_path(&self.path, index), index, self.dir, from)?;
        // SAFETY: the area lies inside our mapping, which we own; the live file has AREA bytes.
        unsafe { overlay(self.map.0.as_ptr(), index, &live, libc::PROT_READ | libc::PROT_WRITE, 0) }
            .map_err(|e| format!("{}: cannot map: {e}", live_path(&self.path, index)))
    }

    /// Maps the region file's own live area of slot `index` back in place of its live file and removes
    /// that file (the vGPU is gone).
    pub fn unmap_live(&self, index: usize) -> Result<(), String> {
        let prot = if self.writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: as in `map_live`; the region file has LAYOUT_SIZE bytes.
        unsafe { overlay(self.map.0.as_ptr(), index, &self.file, prot, live_offset(index)) }
            .map_err(|e| format!("region file {}: cannot map: {e}", self.path))?;
        match std::fs::remove_file(live_path(&self.path, index)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: cannot remove: {e}", live_path(&self.path, index)))
            }
            _ => Ok(()),
        }
    }

    /// Keeps the mapping for the rest of the process (the shim's slots live as long as the program).
    pub fn leak(self) -> &'static Region {
        let RegionFile { map, .. } = self;
        let base = map.0;
        std::mem::forget(map);
        // SAFETY: the mapping is never unmapped now; checked or initialized in `open`.
        unsafe { &*base.as_ptr() }
    }
}

/// Maps the whole region file shared, with protection `prot` (`PROT_READ`, with `PROT_WRITE` to change it).
fn map(file: &File, prot: libc::c_int) -> std::io::Result<Mapping> {
    // SAFETY: a fresh shared mapping of LAYOUT_SIZE bytes of an open file that has that size.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), LAYOUT_SIZE, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    match NonNull::new(p.cast::<Region>()) {
        Some(base) if p != libc::MAP_FAILED => Ok(Mapping(base)),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Maps [`AREA`] bytes of `file` from `offset` over slot `index`'s live area of the mapping at `base`.
///
/// # Safety
/// `base` is a whole-region mapping the caller owns; nothing may hold a non-atomic reference into the area.
unsafe fn overlay(
    base: *mut Region,
    index: usize,
    file: &File,
    prot: libc::c_int,
    offset: usize,
) -> std::io::Result<()> {
    // SAFETY: per the contract the target range lies inside the caller's mapping, so MAP_FIXED replaces only
    // our own pages; the live offset is a multiple of AREA, hence of the page size.
    let p = unsafe {
        let at = base.cast::<u8>().add(live_offset(index));
        libc::mmap(at.cast(), AREA, prot, libc::MAP_SHARED | libc::MAP_FIXED, file.as_raw_fd(), offset as libc::off_t)
    };
    if p == libc::MAP_FAILED { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// The region while this process holds its lock: slots may be found, claimed, named and freed.
pub struct Locked<'a> {
    owner: &'a RegionFile,
    _threads: MutexGuard<'a, ()>,
    _file: FileLock<'a>,
}

impl Locked<'_> {
    /// The region (derived afresh after every name written under the lock).
    pub fn region(&self) -> &Region {
        self.owner.region()
    }

    /// The region file, for mapping live files.
    pub fn file(&self) -> &RegionFile {
        self.owner
    }

    /// The region file's path, for messages.
    pub fn path(&self) -> &str {
        self.owner.path()
    }

    /// The configured vGPU slot named `name`.
    pub fn find(&self, name: &[u8; NAME_LEN]) -> Option<usize> {
        self.region().vgpus.iter().position(|v| v.state() == state::READY && v.config.name == *name)
    }

    /// Pids of the processes attached to vGPU `index` (dead ones count until [`Locked::reclaim_dead`]).
    pub fn attached_pids(&self, index: usize) -> Vec<u32> {
        self.region().vgpus[index].attached().map(|(_, pid, _)| pid).collect()
    }

    /// Gives back what dead processes of every vGPU held; returns how many were found.
    pub fn reclaim_dead(&self) -> usize {
        reclaim::reclaim_dead(self.region())
    }

    /// A slot for a new vGPU `name`: a free one, else an unmanaged one no process is attached to. It is
    /// named, its usage and compute-share state start over, and it is marked ready with no limit; the
    /// caller configures it before releasing the lock. `None` when every slot is taken.
    pub fn claim_slot(&self, name: &[u8; NAME_LEN]) -> Option<usize> {
        let region = self.region();
        let free = region.vgpus.iter().position(|v| v.state() == state::FREE);
        let idle = || (0..MAX_VGPUS).find(|&i| !is_managed(&region.vgpus[i]) && !region.vgpus[i].has_processes());
        let index = free.or_else(idle)?;
        let v = &region.vgpus[index];
        // Out of sight of other processes while it is renamed: nobody is attached and, not ready, no
        // process finds it by name.
        v.config.state.store(state::FREE, Ordering::Release);
        reset_sched(v);
        reset_usage(v);
        set_limits(v, &[UNLIMITED; MAX_DEVICES]);
        self.name_slot(index, name);
        self.region().vgpus[index].config.state.store(state::READY, Ordering::Release);
        Some(index)
    }

    /// Writes slot `index`'s name.
    fn name_slot(&self, index: usize, name: &[u8; NAME_LEN]) {
        let base = self.owner.map.0.as_ptr();
        // SAFETY: we hold the file lock and the thread lock; the slot is not ready and nobody is attached, and
        // names are read only under the lock, through references derived after this write.
        unsafe { std::ptr::addr_of_mut!((*base).vgpus[index].config.name).write(*name) };
    }

    /// Frees slot `index` (the caller checked nobody is attached): it is no longer found by name.
    pub fn free_slot(&self, index: usize) {
        let v = &self.region().vgpus[index];
        v.config.flags.store(0, Ordering::Release);
        v.config.state.store(state::FREE, Ordering::Release);
    }
}

/// Claims a process slot of `vgpu` for this process: pid CAS 0 → this process's claiming tag, fill,
/// publish the pid (killed halfway, it leaves its tag, which the next scanner finds dead and clears). The
/// slot records the vGPU's memory mode now ([`flags::SOFT`]), which the process keeps for its life, and
/// starts at the vGPU's current pager requests (a new process has nothing to swap out or defragment).
fn claim_process(vgpu: &VgpuSlot, name: &str) -> Result<usize, String> {
    let pid = std::process::id();
    let unreadable = || format!("cannot read /proc/{pid}/stat (is /proc mounted?)");
    let start = reclaim::start_time(pid).ok_or_else(unreadable)?;
    let tag = reclaim::own_tag().ok_or_else(unreadable)?;
    let pager = &vgpu.live.pager;
    for (i, p) in vgpu.live.procs.iter().enumerate() {
        if p.pid.compare_exchange(0, tag, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            // Before the slot can hold anything: whoever sums the vGPU's usage from now on reads it.
            vgpu.live.procs_hwm.fetch_max(i as u32 + 1, Ordering::SeqCst);
            p.start_time.store(start, Ordering::Relaxed);
            // A free slot holds nothing (whoever freed it zeroed it first); zeroed again all the same.
            for u in &p.used {
                u.store(0, Ordering::SeqCst);
            }
            p.pending.store(0, Ordering::SeqCst);
            p.wanted.store(0, Ordering::Relaxed);
            p.inflight_ns.store(0, Ordering::Relaxed);
            p.soft.reset(pager.evict_seq.load(Ordering::Acquire), pager.defrag_seq.load(Ordering::Acquire));
            p.flags.store(vgpu.flags() & flags::SOFT, Ordering::Release);
            p.pid.store(pid, Ordering::Release);
            return Ok(i);
        }
    }
    Err(format!("all {PROCS_PER_VGPU} process slots of vGPU {name:?} are in use"))
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
    let locked = file.lock()?;
    if file.writable {
        locked.reclaim_dead();
    }
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
    reclaim::reclaim_vgpu(vgpu, None);
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

/// vGPU `name`'s [`flags`] as the region at `path` holds them now, without joining it or changing anything:
/// the file is opened and mapped read-only (never created) and searched under a shared lock, since names are
/// written under the exclusive one. `Ok(None)` when there is no such vGPU; an error names the file. For
/// deciding what a vGPU allows before a program's CUDA libraries start (the tensor-core policy).
pub fn vgpu_flags(path: &str, name: &str) -> Result<Option<u32>, String> {
    let encoded = encode_name(name).ok_or_else(|| format!("{name:?} is not a vGPU name"))?;
    let fail = |what: &str, e: std::io::Error| format!("region file {path}: {what}: {e}");
    let file =
        crate::secure_fs::open_nofollow(std::path::Path::new(path), false).map_err(|e| fail("cannot open", e))?;
    crate::region_open::check_readable(&file.metadata().map_err(|e| fail("cannot stat", e))?, path)?;
    let _lock = FileLock::shared(&file).map_err(|e| fail("cannot lock", e))?;
    let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
    if len != LAYOUT_SIZE as u64 {
        return Err(format!(
            "region file {path} has {len} bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}"
        ));
    }
    let map = map(&file, libc::PROT_READ).map_err(|e| fail("cannot map", e))?;
    // SAFETY: the mapping covers the whole file and lives until the end of this function; Region is atomics
    // and integers, valid for any bits, and is only read: plain reads of what is written under the lock we
    // hold, and atomic loads of at most 8 bytes, which read-only memory allows.
    let region = unsafe { map.0.as_ref() };
    if !header_matches(&region.header) {
        return Err(format!("region file {path} is not a version-{VERSION} Tessera region"));
    }
    let slot = region.vgpus.iter().find(|v| v.state() == state::READY && v.config.name == encoded);
    Ok(slot.map(VgpuSlot::flags))
}

/// How long the daemon's heartbeat may be silent before it counts as gone (it beats at least every
/// 100 ms while it lives).
pub const DAEMON_SILENCE_NS: u64 = 2_000_000_000;

/// The pid of the daemon managing `region` when one is alive at `now_ns`: it says so, its process exists and
/// its heartbeat is recent (a killed daemon's pid, reused by another process, does not count for long).
pub fn live_daemon(region: &Region, now_ns: u64) -> Option<u32> {
    let pid = region.daemon.pid.load(Ordering::Acquire);
    let beat = region.daemon.heartbeat_ns.load(Ordering::Acquire);
    let exists = pid != 0 && std::path::Path::new(&format!("/proc/{pid}")).exists();
    (exists && now_ns.saturating_sub(beat) < DAEMON_SILENCE_NS).then_some(pid)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> String {
        let p = std::env::temp_dir().join(format!("tessera-region-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p.to_string_lossy().into_owned()
    }

    fn limits(bytes: u64) -> Limits {
        [bytes; MAX_DEVICES]
    }

    #[test]
    fn creates_joins_and_shares_one_vgpu() {
        let path = temp("share");
        let a = attach(&path, "team", Some(&limits(1 << 30))).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LAYOUT_SIZE as u64);
        let b = attach(&path, "team", None).unwrap();
        assert_eq!(a.vgpu_index, b.vgpu_index);
        assert_ne!(a.me_index, b.me_index);
        assert_eq!(b.vgpu.config.limit[3].load(Ordering::Relaxed), 1 << 30, "adopted");
        let c = attach_with_share(&path, "other", None, true).unwrap();
        assert_ne!(c.vgpu_index, a.vgpu_index);
        assert_eq!(c.vgpu.config.limit[0].load(Ordering::Relaxed), UNLIMITED, "a share, no memory quota");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn conflicting_limit_is_refused_while_the_vgpu_is_in_use() {
        let path = temp("conflict");
        let _a = attach(&path, "team", Some(&limits(1 << 30))).unwrap();
        let e = attach(&path, "team", Some(&limits(2 << 30))).err().unwrap();
        assert!(e.contains("conflicts") && e.contains(&path) && e.contains("1.0 GiB"), "{e}");
        attach(&path, "team", Some(&limits(1 << 30))).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_managed_vgpu_keeps_its_limit_and_its_slot() {
        let path = temp("managed");
        let file = RegionFile::open(&path).unwrap();
        let name = encode_name("svc").unwrap();
        let index = {
            let locked = file.lock().unwrap();
            let i = locked.claim_slot(&name).unwrap();
            let v = &locked.region().vgpus[i];
            set_limits(v, &limits(1 << 30));
            v.config.flags.store(flags::MANAGED, Ordering::Release);
            locked.file().map_live(i, Some(uid())).unwrap();
            i
        };
        // The daemon and the joining process share the live state; the configuration is the daemon's.
        file.region().vgpus[index].live.sched.tokens.store(77, Ordering::Release);
        // Nobody attached, yet another limit is refused and none adopts the daemon's.
        let e = attach(&path, "svc", Some(&limits(2 << 30))).err().unwrap();
        assert!(e.contains("set by the Tessera daemon") && e.contains("tessera vgpu set svc"), "{e}");
        let a = attach(&path, "svc", None).unwrap();
        assert_eq!((a.vgpu_index as usize, a.vgpu.config.limit[0].load(Ordering::Relaxed)), (index, 1 << 30));
        assert_eq!(a.vgpu.live.sched.tokens.load(Ordering::Acquire), 77);
        a.me.used[0].store(5, Ordering::Release);
        assert_eq!(file.region().vgpus[index].live.procs[a.me_index.unwrap()].used[0].load(Ordering::Acquire), 5);
        assert!(read_only(&a.vgpu.config) && !read_only(&a.vgpu.live), "only the live area is writable");
        attach(&path, "svc", Some(&limits(1 << 30))).unwrap();
        // Every other slot taken by idle unmanaged vGPUs: a new name reuses one of those, never the managed one.
        for n in 0..MAX_VGPUS - 1 {
            let locked = file.lock().unwrap();
            locked.claim_slot(&encode_name(&format!("idle{n}")).unwrap()).unwrap();
        }
        let locked = file.lock().unwrap();
        let reused = locked.claim_slot(&encode_name("late").unwrap()).unwrap();
        assert_ne!(reused, index);
        assert_eq!(locked.find(&name), Some(index));
        drop(locked);
        // A live file of another slot, or no vGPU file at all, is refused by name.
        std::fs::rename(live_path(&path, index), live_path(&path, 60)).unwrap();
        let e = attach(&path, "svc", None).err().unwrap();
        assert!(e.contains(&live_path(&path, index)) && e.contains("cannot open"), "{e}");
        std::fs::copy(live_path(&path, 60), live_path(&path, index)).unwrap();
        std::fs::copy(live_path(&path, 60), live_path(&path, 61)).unwrap();
        assert!(file.map_live(61, None).unwrap_err().contains("of slot"));
        file.unmap_live(index).unwrap();
        assert!(std::fs::metadata(live_path(&path, index)).is_err(), "removed with its vGPU");
        for f in [path.clone(), live_path(&path, 60), live_path(&path, 61)] {
            std::fs::remove_file(f).unwrap();
        }
    }

    fn uid() -> u32 {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    }

    /// Whether the page holding `x` is mapped without write permission (from /proc/self/maps).
    fn read_only<T>(x: &T) -> bool {
        let at = std::ptr::from_ref(x) as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|l| {
            let mut parts = l.split_whitespace();
            let range = parts.next().unwrap();
            let perms = parts.next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
            (a..b).contains(&at) && perms.starts_with("r-")
        })
    }

    #[test]
    fn while_a_daemon_lives_unknown_names_are_refused() {
        let path = temp("daemon");
        let file = RegionFile::open(&path).unwrap();
        let d = &file.region().daemon;
        d.pid.store(std::process::id(), Ordering::Release);
        d.heartbeat_ns.store(crate::futex::monotonic_ns(), Ordering::Release);
        let e = attach(&path, "nosuch", None).err().unwrap();
        assert!(e.contains("no vGPU \"nosuch\"") && e.contains("tessera vgpu create nosuch"), "{e}");
        // A silent daemon is gone: processes may create vGPUs again.
        d.heartbeat_ns.store(crate::futex::monotonic_ns().saturating_sub(DAEMON_SILENCE_NS), Ordering::Release);
        attach(&path, "nosuch", Some(&limits(1 << 30))).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn without_a_daemon_a_process_with_no_limit_cannot_set_up_a_vgpu() {
        let path = temp("nolimit");
        let e = attach(&path, "typo", None).err().unwrap();
        assert!(e.contains("\"typo\"") && e.contains(&path), "{e}");
        assert!(e.contains("tessera vgpu create typo") && e.contains("TESSERA_MEMORY_LIMIT"), "{e}");
        assert!(e.contains("TESSERA_COMPUTE_SHARE"), "{e}");
        let file = RegionFile::open(&path).unwrap();
        assert_eq!(file.lock().unwrap().find(&encode_name("typo").unwrap()), None, "no slot was made");
        // Left behind by a process that had a limit and is gone: still no way in without one.
        let gone = attach(&path, "left", Some(&limits(1 << 30))).unwrap();
        gone.me.pid.store(0, Ordering::Release);
        assert!(attach(&path, "left", None).err().unwrap().contains("tessera vgpu create left"));
        attach_with_share(&path, "left", None, true).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn foreign_and_truncated_files_are_refused_by_name() {
        let path = temp("foreign");
        std::fs::write(&path, b"not a region").unwrap();
        let e = attach(&path, "x", None).err().unwrap();
        assert!(e.contains(&path) && e.contains("truncated"), "{e}");
        std::fs::write(&path, vec![0xAB; LAYOUT_SIZE]).unwrap();
        let e = attach(&path, "x", None).err().unwrap();
        assert!(e.contains(&path) && e.contains(&format!("not a version-{VERSION}")), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = attach("/nonexistent-dir/region", "x", None).err().unwrap();
        assert!(e.contains("/nonexistent-dir/region"), "{e}");
    }

    #[test]
    fn flags_are_read_without_joining_or_creating() {
        let path = temp("peek");
        assert!(vgpu_flags(&path, "svc").unwrap_err().contains(&path));
        assert!(std::fs::metadata(&path).is_err(), "never created by a reader");
        let file = RegionFile::open(&path).unwrap();
        {
            let locked = file.lock().unwrap();
            let i = locked.claim_slot(&encode_name("svc").unwrap()).unwrap();
            locked.region().vgpus[i].config.flags.store(flags::MANAGED | flags::TENSOR_CORES_OFF, Ordering::Release);
        }
        assert_eq!(vgpu_flags(&path, "svc"), Ok(Some(flags::MANAGED | flags::TENSOR_CORES_OFF)));
        assert_eq!(vgpu_flags(&path, "other"), Ok(None));
        let v = &file.region().vgpus;
        assert!(v.iter().all(|v| v.live.procs.iter().all(|p| p.pid.load(Ordering::Relaxed) == 0)), "nothing joined");
        drop(file);
        std::fs::write(&path, b"not a region").unwrap();
        assert!(vgpu_flags(&path, "svc").unwrap_err().contains("bytes"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_joining_process_takes_the_mode_of_the_moment_and_the_current_requests() {
        let path = temp("soft");
        let file = RegionFile::open(&path).unwrap();
        let index = file.lock().unwrap().claim_slot(&encode_name("svc").unwrap()).unwrap();
        let v = &file.region().vgpus[index];
        let hard = attach(&path, "svc", Some(&limits(1 << 30))).unwrap();
        v.config.flags.store(flags::SOFT, Ordering::Release);
        v.live.pager.request(crate::region::PagerRequest::Evict);
        v.live.pager.request(crate::region::PagerRequest::Defrag);
        v.live.pager.request(crate::region::PagerRequest::Defrag);
        let soft = attach(&path, "svc", None).unwrap();
        assert!(!hard.me.is_soft() && soft.me.is_soft(), "the mode is read once, when joining");
        assert_eq!(
            (soft.me.soft.evicted_seq.load(Ordering::Relaxed), soft.me.soft.defragged_seq.load(Ordering::Relaxed)),
            (1, 2)
        );
        assert_eq!(v.lagging(crate::region::PagerRequest::Defrag, 2).next(), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn limits_are_described_for_people() {
        assert_eq!(describe(&limits(UNLIMITED)), "no limit");
        assert_eq!(describe(&limits(512 << 20)), "512.0 MiB on every device");
        let mut l = limits(UNLIMITED);
        l[0] = 1 << 30;
        assert_eq!(describe(&l), "0=1.0 GiB (no limit elsewhere)");
    }
}
