//! The region file processes of one vGPU share: created, checked and joined under `flock` (as simgpu's
//! state file is); the vGPU slot claimed by name and a process slot by pid. Also the private quota of a
//! process started without `TESSERA_VGPU`, which goes through the same accounting on slots of its own.

use super::reclaim::{self, CLAIMING};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering;
use tessera_ffi::flock::FileLock;
use tessera_ffi::region::{
    Header, LAYOUT_SIZE, MAGIC, MAX_DEVICES, MAX_PROCS, MAX_VGPUS, ProcSlot, Region, UNLIMITED, VERSION, VgpuSlot,
    encode_name, state,
};
use tessera_ffi::units::format_size;

/// Per-device limits, [`UNLIMITED`] where none is set.
pub type Limits = [u64; MAX_DEVICES];

/// The slots a process accounts in.
pub struct Attached {
    /// The shared region, or `None` for a private quota.
    pub region: Option<&'static Region>,
    /// The vGPU's slot.
    pub vgpu: &'static VgpuSlot,
    /// Its index in the region (0 for a private quota).
    pub vgpu_index: u32,
    /// This process's slot.
    pub me: &'static ProcSlot,
    /// Its index in the region (`None` for a private quota).
    pub me_index: Option<usize>,
}

/// A quota of this process's own, never shared: slots in private memory.
pub fn private(limits: &Limits) -> Attached {
    // SAFETY: VgpuSlot and ProcSlot are integers and atomics, for which all-zero is a valid value.
    let (vgpu, me) = unsafe {
        (Box::leak(Box::<VgpuSlot>::new_zeroed().assume_init()), Box::leak(Box::<ProcSlot>::new_zeroed().assume_init()))
    };
    for (slot, &l) in vgpu.limit.iter().zip(limits) {
        slot.store(l, Ordering::Relaxed);
    }
    vgpu.state.store(state::READY, Ordering::Release);
    Attached { region: None, vgpu, vgpu_index: 0, me, me_index: None }
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

/// Opens (creating if needed, mode 0600: one user's processes share it) the region at `path`, joins vGPU
/// `name` (creating it with `limits`, or adopting its limits when `limits` is `None`) and claims a process
/// slot. The mapping lives as long as the process.
pub fn attach(path: &str, name: &str, limits: Option<&Limits>) -> Result<Attached, String> {
    let encoded = encode_name(name).ok_or_else(|| format!("{name:?} is not a vGPU name"))?;
    let fail = |what: &str, e: std::io::Error| format!("region file {path}: {what}: {e}");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| fail("cannot open (set TESSERA_REGION to a writable path)", e))?;
    let _lock = FileLock::new(&file).map_err(|e| fail("cannot lock", e))?;
    let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
    let fresh = len == 0;
    if fresh {
        file.set_len(LAYOUT_SIZE as u64).map_err(|e| fail("cannot size", e))?;
    } else if len != LAYOUT_SIZE as u64 {
        return Err(format!(
            "region file {path} has {len} bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}: it is truncated, \
             foreign or from another Tessera version; remove it (no Tessera program may be running) or set TESSERA_REGION"
        ));
    }
    let base = map(&file).map_err(|e| fail("cannot map", e))?;
    // SAFETY: `base` maps LAYOUT_SIZE bytes of the file for the life of the process; we hold the lock.
    let result = unsafe { join(base, fresh, path, &encoded, name, limits) };
    if result.is_err() {
        // SAFETY: nothing refers to the mapping when joining failed; unmapping exactly what `map` mapped.
        unsafe { libc::munmap(base.cast(), LAYOUT_SIZE) };
    }
    result
}

/// Maps the whole region file shared, read-write.
fn map(file: &File) -> std::io::Result<*mut Region> {
    // SAFETY: a fresh shared mapping of LAYOUT_SIZE bytes of an open file that has that size.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            LAYOUT_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED { Err(std::io::Error::last_os_error()) } else { Ok(p.cast()) }
}

/// Checks (or initializes) the header, reclaims dead processes, then finds or configures the vGPU and
/// claims a process slot.
///
/// # Safety
/// `base` maps a whole region file, and the caller holds its `flock`.
unsafe fn join(
    base: *mut Region,
    fresh: bool,
    path: &str,
    encoded: &[u8; tessera_ffi::region::NAME_LEN],
    name: &str,
    limits: Option<&Limits>,
) -> Result<Attached, String> {
    // SAFETY: the header lies at the start of the mapping; read through the raw pointer, no reference.
    let (magic, version, layout) =
        unsafe { ((*base).header.magic.load(Ordering::Acquire), (*base).header.version, (*base).header.layout_size) };
    // A creator that died before writing the magic (which comes last) left a region nobody ever used.
    if fresh || (magic == 0 && version == 0 && layout == 0) {
        // SAFETY: we hold the lock and the magic is unset, so no other process reads the region.
        unsafe { initialize(base) };
    } else {
        // SAFETY: as above.
        let h: &Header = unsafe { &(*base).header };
        let matches = magic == MAGIC
            && h.version == VERSION
            && h.layout_size as usize == LAYOUT_SIZE
            && h.max_devices as usize == MAX_DEVICES
            && h.max_vgpus as usize == MAX_VGPUS
            && h.max_procs as usize == MAX_PROCS;
        if !matches {
            return Err(format!(
                "region file {path} is not a version-{VERSION} Tessera region (magic {magic:#x}, version {version}); \
                 remove it (no Tessera program may be running) or set TESSERA_REGION"
            ));
        }
    }
    // SAFETY: initialized and checked; every later access to shared fields is atomic.
    let region: &'static Region = unsafe { &*base };
    reclaim::reclaim_dead(region, None, None);
    let index = vgpu_slot(region, path, encoded, name, limits)?;
    // Names are written under the lock only, through the raw pointer; `region` is re-derived after.
    if region.vgpus[index].name != *encoded {
        // SAFETY: we hold the lock; the slot is idle (no process is attached), so nobody reads its name.
        unsafe { std::ptr::addr_of_mut!((*base).vgpus[index].name).write(*encoded) };
    }
    // SAFETY: as above.
    let region: &'static Region = unsafe { &*base };
    let vgpu = &region.vgpus[index];
    vgpu.state.store(state::READY, Ordering::Release);
    let me_index = claim_process(region, index as u32, path)?;
    Ok(Attached {
        region: Some(region),
        vgpu,
        vgpu_index: index as u32,
        me: &region.procs[me_index],
        me_index: Some(me_index),
    })
}

/// Writes a fresh header (magic last) over a zeroed region.
///
/// # Safety
/// `base` maps a whole region; the caller holds the lock and nobody else uses the region.
unsafe fn initialize(base: *mut Region) {
    // SAFETY: per the contract, the whole mapping is ours to write.
    unsafe {
        base.cast::<u8>().write_bytes(0, LAYOUT_SIZE);
        let h = std::ptr::addr_of_mut!((*base).header);
        (*h).version = VERSION;
        (*h).layout_size = LAYOUT_SIZE as u32;
        (*h).max_devices = MAX_DEVICES as u32;
        (*h).max_vgpus = MAX_VGPUS as u32;
        (*h).max_procs = MAX_PROCS as u32;
        (*h).magic.store(MAGIC, Ordering::Release);
    }
}

/// Live processes attached to vGPU `index` (dead ones were just reclaimed).
fn attached(region: &Region, index: usize) -> usize {
    region
        .procs
        .iter()
        .filter(|p| p.pid.load(Ordering::Acquire) != 0 && p.vgpu.load(Ordering::Relaxed) as usize == index)
        .count()
}

fn limits_of(v: &VgpuSlot) -> Limits {
    std::array::from_fn(|d| v.limit[d].load(Ordering::Acquire))
}

/// The vGPU slot named `name`, checked against `limits`; or a free (or idle) slot configured for it.
/// A vGPU nobody is attached to takes the limits of whoever attaches next, and its usage starts over.
fn vgpu_slot(
    region: &Region,
    path: &str,
    encoded: &[u8; tessera_ffi::region::NAME_LEN],
    name: &str,
    limits: Option<&Limits>,
) -> Result<usize, String> {
    let ready = |v: &VgpuSlot| v.state.load(Ordering::Acquire) == state::READY;
    let existing = region.vgpus.iter().position(|v| ready(v) && v.name == *encoded);
    if let Some(i) = existing {
        let holders = attached(region, i);
        let current = limits_of(&region.vgpus[i]);
        match limits {
            Some(l) if *l != current && holders > 0 => {
                return Err(format!(
                    "TESSERA_MEMORY_LIMIT ({}) conflicts with vGPU {name:?} in region file {path}, whose quota is {} \
                     and which {holders} running process(es) share; use the same limit, none (to adopt it), or \
                     another TESSERA_VGPU",
                    describe(l),
                    describe(&current)
                ));
            }
            _ if holders == 0 => configure(&region.vgpus[i], limits.copied().unwrap_or(current)),
            _ => {}
        }
        return Ok(i);
    }
    let free = region.vgpus.iter().position(|v| v.state.load(Ordering::Acquire) == state::FREE);
    let idle = || (0..MAX_VGPUS).find(|&i| attached(region, i) == 0);
    let i = free.or_else(idle).ok_or_else(|| {
        format!("region file {path}: all {MAX_VGPUS} vGPU slots are in use by running processes; cannot add {name:?}")
    })?;
    configure(&region.vgpus[i], limits.copied().unwrap_or([UNLIMITED; MAX_DEVICES]));
    Ok(i)
}

/// Sets an idle slot's limits and starts its usage over (bytes left by a process killed mid-update).
fn configure(v: &VgpuSlot, limits: Limits) {
    for (d, limit) in limits.into_iter().enumerate() {
        v.limit[d].store(limit, Ordering::Release);
        v.used[d].store(0, Ordering::Release);
        v.peak[d].store(0, Ordering::Relaxed);
    }
    v.last_reclaim_ns.store(0, Ordering::Relaxed);
}

/// Claims a process slot for this process on vGPU `vgpu`: pid CAS 0 → claiming, fill, publish the pid.
fn claim_process(region: &Region, vgpu: u32, path: &str) -> Result<usize, String> {
    let pid = std::process::id();
    let start = reclaim::start_time(pid).ok_or_else(|| format!("cannot read /proc/{pid}/stat (is /proc mounted?)"))?;
    for (i, p) in region.procs.iter().enumerate() {
        if p.pid.compare_exchange(0, CLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            p.vgpu.store(vgpu, Ordering::Relaxed);
            p.start_time.store(start, Ordering::Relaxed);
            for u in &p.used {
                u.store(0, Ordering::Relaxed);
            }
            p.pid.store(pid, Ordering::Release);
            return Ok(i);
        }
    }
    Err(format!("region file {path}: all {MAX_PROCS} process slots are in use"))
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
        assert_eq!(b.vgpu.limit[3].load(Ordering::Relaxed), 1 << 30, "adopted");
        let c = attach(&path, "other", None).unwrap();
        assert_ne!(c.vgpu_index, a.vgpu_index);
        assert_eq!(c.vgpu.limit[0].load(Ordering::Relaxed), UNLIMITED);
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
    fn limits_are_described_for_people() {
        assert_eq!(describe(&limits(UNLIMITED)), "no limit");
        assert_eq!(describe(&limits(512 << 20)), "512.0 MiB on every device");
        let mut l = limits(UNLIMITED);
        l[0] = 1 << 30;
        assert_eq!(describe(&l), "0=1.0 GiB (no limit elsewhere)");
    }
}
