//! Validating the process slots of a managed vGPU, which live in a file its tenant can write: a slot
//! names a process attached to the vGPU only if that process is alive, runs as the vGPU's user and maps
//! the vGPU's live file (every process that joins a managed vGPU does, before it publishes its pid). A
//! slot the daemon positively knows to be false — the process is gone, belongs to another user (pid 1 of
//! root planted in a user's vGPU), or does not map the file — is freed as a dead process's would be (see
//! [`tessera_ffi::region::reclaim::clear`]): its bytes go back and it no longer blocks `tessera vgpu rm`.
//!
//! Nothing is freed on doubt: an error reading `/proc` other than "no such process" keeps the slot
//! (liveness is never inferred from a failure to look).

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering;
use tessera_ffi::region::pid_ns::ProcView;
use tessera_ffi::region::reclaim::{clear, no_such_process, own_claim};
use tessera_ffi::region::{VgpuSlot, owner};

/// A file as `/proc/PID/maps` names it: its device's major and minor numbers and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode number.
    pub inode: u64,
}

impl FileId {
    /// The identity of the file at `path`, if it can be read.
    pub fn of(path: &str) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        let dev = m.dev();
        Some(FileId { major: libc::major(dev), minor: libc::minor(dev), inode: m.ino() })
    }
}

/// Why a slot's process is not one of the vGPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// No such process.
    Gone,
    /// A process of another user (none of its uids is the vGPU's user).
    Foreign {
        /// Its real uid.
        uid: u32,
    },
    /// A process of the vGPU's user that does not map the vGPU's live file: it never joined.
    Detached,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Gone => write!(f, "no such process"),
            Finding::Foreign { uid } => write!(f, "a process of uid {uid}, not of the vGPU's user"),
            Finding::Detached => write!(f, "a process that does not map the vGPU's file"),
        }
    }
}

/// The uids (real, effective, saved, filesystem) of `pid` from the `Uid:` line of `/proc/PID/status`
/// (not the owner of `/proc/PID`, which is root's for a non-dumpable process). `Err(true)`: no such
/// process; `Err(false)`: it could not be read.
pub fn uids(pid: u32) -> Result<Vec<u32>, bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| no_such_process(&e))?;
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:")).ok_or(false)?;
    let ids: Vec<u32> = line.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    if ids.is_empty() { Err(false) } else { Ok(ids) }
}

/// Whether `maps` (the text of a `/proc/PID/maps`) has a mapping of file `file`.
pub fn maps_file(maps: &str, file: FileId) -> bool {
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace().skip(3);
        let (Some(dev), Some(inode)) = (fields.next(), fields.next()) else { return false };
        let Some((major, minor)) = dev.split_once(':') else { return false };
        inode.parse::<u64>() == Ok(file.inode)
            && u32::from_str_radix(major, 16) == Ok(file.major)
            && u32::from_str_radix(minor, 16) == Ok(file.minor)
    })
}

/// What the daemon positively knows against `pid` being a process attached to a vGPU of user `owner`
/// whose live file is `live` (`None` when that file cannot be identified: the mapping is not checked).
/// `None`: nothing is known against it, the slot is kept.
pub fn judge(pid: u32, owner: u32, live: Option<FileId>) -> Option<Finding> {
    match uids(pid) {
        Err(true) => return Some(Finding::Gone),
        Err(false) => return None,
        Ok(ids) if !ids.contains(&owner) => return Some(Finding::Foreign { uid: ids[0] }),
        Ok(_) => {}
    }
    let live = live?;
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(maps) if !maps_file(&maps, live) => Some(Finding::Detached),
        Err(e) if no_such_process(&e) => Some(Finding::Gone),
        _ => None,
    }
}

/// A process slot [`judge`] found false: its index, the owner word it had ([`owner`]) and why.
pub type Stray = (usize, u64, Finding);

/// The process slots of `v` (a vGPU of user `owner` whose live file is `live`) that [`judge`] finds false.
/// Reads `/proc` for each: called with no lock held, so that a slow read holds up nobody. A process of
/// another pid namespace is judged by its pid here, as `view` finds it; one `view` cannot find is left to
/// the reclaim of dead processes, which knows whether it can see its namespace.
pub fn judge_slots(v: &VgpuSlot, owner: u32, live: Option<FileId>, view: &ProcView) -> Vec<Stray> {
    v.attached()
        .filter_map(|(i, pid, p)| {
            let word = p.owner.load(Ordering::Acquire);
            let here = view.here(owner::ns(word), pid, p.start_time.load(Ordering::Acquire))?;
            judge(here, owner, live).map(|finding| (i, word, finding))
        })
        .collect()
}

/// Frees each of `strays` (found by [`judge_slots`]) whose slot still names the same process, as a dead
/// process's slot is freed; returns the pids freed (as the slots named them) and why.
pub fn free(v: &VgpuSlot, strays: &[Stray]) -> Vec<(u32, Finding)> {
    let mut freed = Vec::new();
    // The daemon's own claiming tag: were it killed while clearing, the next scanner takes the slot over.
    let Some(tag) = own_claim() else { return freed };
    for &(i, word, finding) in strays {
        let p = &v.live.procs[i];
        // Claimed first, as reclaim does: two cleaners never give the same bytes back twice.
        if p.owner.compare_exchange(word, tag, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            clear(p, v);
            freed.push((owner::word(word), finding));
        }
    }
    freed
}

/// Frees every process slot of `v` (a vGPU of user `owner` whose live file is `live`) that [`judge`]
/// finds false, as a dead process's slot is freed; returns the pids freed and why.
pub fn free_strays(v: &VgpuSlot, owner: u32, live: Option<FileId>) -> Vec<(u32, Finding)> {
    free(v, &judge_slots(v, owner, live, &ProcView::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ffi::region::reclaim::start_time;

    fn slot() -> &'static VgpuSlot {
        // SAFETY: VgpuSlot is integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<VgpuSlot>::new_zeroed().assume_init() })
    }

    fn uid() -> u32 {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    }

    /// A file of this test, mapped by this process while the returned mapping lives.
    fn mapped(tag: &str) -> (FileId, memmap::Map) {
        let path = std::env::temp_dir().join(format!("tessera-integrity-{}-{tag}", std::process::id()));
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let map = memmap::Map::new(&file);
        let id = FileId::of(path.to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        (id, map)
    }

    /// A minimal read-only mapping, unmapped on drop.
    mod memmap {
        use std::os::fd::AsRawFd;

        pub struct Map(*mut libc::c_void);

        impl Map {
            pub fn new(file: &std::fs::File) -> Map {
                // SAFETY: maps 4096 bytes of a file we opened, read-only and shared; checked below.
                let p = unsafe {
                    libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0)
                };
                assert_ne!(p, libc::MAP_FAILED);
                Map(p)
            }
        }

        impl Drop for Map {
            fn drop(&mut self) {
                // SAFETY: unmaps exactly the mapping made in `new`.
                unsafe { libc::munmap(self.0, 4096) };
            }
        }
    }

    #[test]
    fn maps_lines_are_matched_by_device_and_inode() {
        let maps = "7f00-7f10 rw-s 00000000 00:1a 4242                       /dev/shm/r.vgpu03\n\
                    7f10-7f20 r--p 00000000 fd:01 77 /usr/lib/libc.so.6\n\
                    7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n";
        assert!(maps_file(maps, FileId { major: 0, minor: 0x1a, inode: 4242 }));
        assert!(maps_file(maps, FileId { major: 0xfd, minor: 1, inode: 77 }));
        assert!(!maps_file(maps, FileId { major: 0, minor: 0x1b, inode: 4242 }), "another device");
        assert!(!maps_file(maps, FileId { major: 0, minor: 0x1a, inode: 4243 }), "another file");
        assert!(!maps_file("garbage\n\n", FileId { major: 0, minor: 0, inode: 0 }));
    }

    #[test]
    fn processes_are_judged_by_user_liveness_and_mapping() {
        let me = std::process::id();
        let (live, map) = mapped("judge");
        assert_eq!(judge(me, uid(), Some(live)), None, "a process of the user mapping the file");
        assert_eq!(judge(me, uid(), None), None, "the mapping cannot be checked: kept");
        assert_eq!(judge(me, uid().wrapping_add(4242), Some(live)), Some(Finding::Foreign { uid: uid() }));
        let other = FileId { inode: live.inode.wrapping_add(1), ..live };
        assert_eq!(judge(me, uid(), Some(other)), Some(Finding::Detached));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert_eq!(judge(dead, uid(), Some(live)), Some(Finding::Gone));
        drop(map);
        assert_eq!(judge(me, uid(), Some(live)), Some(Finding::Detached), "unmapped: no longer attached");
    }

    #[test]
    fn false_slots_are_freed_with_their_bytes_and_true_ones_kept() {
        let v = slot();
        let (live, _map) = mapped("free");
        let me = std::process::id();
        let mut stranger = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let plant = |v: &VgpuSlot, i: usize, pid: u32, bytes: u64| {
            let p = &v.live.procs[i];
            p.start_time.store(start_time(pid).unwrap_or(1), Ordering::Relaxed);
            p.used[0].store(bytes, Ordering::Relaxed);
            p.set_owner(0, pid);
        };
        plant(v, 0, me, 100);
        plant(v, 5, stranger.id(), 1 << 30);
        v.live.procs_hwm.store(6, Ordering::Relaxed);
        assert_eq!(v.used(0), 100 + (1 << 30));
        // This process is the vGPU's user's and maps its file; the other one is the user's too, live, but
        // never joined (it does not map the file).
        let freed = free_strays(v, uid(), Some(live));
        assert_eq!(freed, [(stranger.id(), Finding::Detached)]);
        assert_eq!(v.live.procs[5].word(), 0);
        assert_eq!(v.used(0), 100, "the planted bytes are given back");
        assert_eq!(v.attached().map(|(_, pid, _)| pid).collect::<Vec<_>>(), [me]);
        assert!(free_strays(v, uid(), Some(live)).is_empty());
        // pid 1, for a vGPU of another user than pid 1's.
        let owner = if uid() == 0 { 4242 } else { uid() };
        let w = slot();
        plant(w, 7, 1, 5);
        assert_eq!(free_strays(w, owner, None), [(1, Finding::Foreign { uid: 0 })]);
        let _ = stranger.kill();
        let _ = stranger.wait();
    }
}
