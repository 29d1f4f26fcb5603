//! The region file (layout in [`super::layout`]): opened and checked (it is created complete, see
//! [`super::open`]) and mapped; [`Locked`] holds its owner's lock while slots are claimed or configured
//! ([`super::claim`]). A managed vGPU's live area is its own file ([`super::open::live_path`]), which the
//! daemon creates for the vGPU's user and maps over the slot ([`RegionFile::map_live`]).
//!
//! Locks: anyone who can open a file can `flock` it, and a stopped process keeps the lock. So the lock
//! that serialises claiming and configuring slots is on the region's [`lock_path`] file, which only the
//! region's owner can open ([`open_lock`]); the region file itself is never locked (the users of its
//! `--user` vGPUs may read it). A tenant of another user takes no lock of the region at all: it finds its
//! vGPU without one and checks what it found under the shared lock of its own vGPU's live file, whose
//! exclusive lock the daemon takes to remove the vGPU ([`RegionFile::lock_live`]). No lock here is waited
//! for longer than [`LOCK_TIMEOUT`] (the daemon's requests use shorter bounds of their own), after which
//! the error names the file, the processes holding it and what to do.

use super::conf;
use super::conf::ConfError;
use super::layout::config_offset;
use super::layout::{AREA, LAYOUT_SIZE, NAME_LEN, Region, VERSION, VgpuSlot, encode_name, live_offset, state};
use super::open::OpenError;
use super::open::open_region;
use super::open::{Access, check_header, checked_dir, header_matches, live_path, lock_path, open_live, open_lock};
use crate::flock::FileLock;
use crate::secure_fs::{DirKind, SecureFsError};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Longest anything here waits for the region file's lock. It is held for milliseconds (while a process
/// joins a vGPU, or the daemon names or frees a slot), so a wait this long means its holder is stopped
/// (SIGSTOP, a debugger) or holds it on purpose; a process starting on a host loaded many times over still
/// gets it well within this.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the daemon waits for a vGPU's live file's lock before removing the vGPU: its tenants hold
/// the shared lock for milliseconds while they join.
pub const LIVE_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a region file could not be opened, mapped, locked or changed ([`RegionFile`], [`vgpu_flags`]). Each
/// names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// The region's directory is not fit for it ([`crate::secure_fs::check_dir`]).
    #[error("region file {path}: {source}")]
    Dir {
        /// The region file.
        path: String,
        /// What is wrong with its directory.
        source: SecureFsError,
    },
    /// The region file, or its lock file, could not be opened or created, or is not fit to use
    /// ([`super::open`]: missing, planted, not a region of this version...).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A system call on the region file failed (`op` says which: "cannot stat", "cannot map"...).
    #[error("region file {path}: {op}: {source}")]
    Io {
        /// The region file.
        path: String,
        /// What was being done, for the message.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The region file's own area could not be written or mapped back over a slot.
    #[error("region file {path}: {source}")]
    Restore {
        /// The region file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The region file has another size than a region of this version and layout has.
    #[error(
        "region file {path} has {len} bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}: it is \
         truncated, foreign or from another Tessera version; remove it (no Tessera program may be running) or set \
         TESSERA_REGION"
    )]
    WrongSize {
        /// The region file.
        path: String,
        /// Its size in bytes.
        len: u64,
    },
    /// Read without joining ([`vgpu_flags`]): the region file has another size than a region of this
    /// version has.
    #[error("region file {path} has {len} bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}")]
    PeekSize {
        /// The region file.
        path: String,
        /// Its size in bytes.
        len: u64,
    },
    /// Read without joining ([`vgpu_flags`]): the region file's header is not a region's of this version.
    #[error("region file {path} is not a version-{VERSION} Tessera region")]
    PeekHeader {
        /// The region file.
        path: String,
    },
    /// A system call on a slot's live or configuration file failed ("cannot open", "cannot lock",
    /// "cannot map", "cannot remove").
    #[error("{path}: {op}: {source}")]
    FileIo {
        /// The live or configuration file.
        path: String,
        /// What was being done, for the message.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// A slot's configuration file could not be looked at.
    #[error("{path}: {source}")]
    Stat {
        /// The configuration file.
        path: String,
        /// What `fstat` said.
        source: std::io::Error,
    },
    /// A slot's configuration file could not be made or shared ([`super::conf`]).
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// The region's lock file could not be locked.
    #[error("lock file {path}: cannot lock: {source}")]
    Lock {
        /// The lock file.
        path: String,
        /// What `flock` said.
        source: std::io::Error,
    },
    /// Others held a file's lock for longer than the wait allowed: its holder is stopped, or holds it on
    /// purpose.
    #[error(
        "{path} has been locked for more than {} ms by {holders}; Tessera's processes hold that lock for \
         milliseconds, so its holder is stopped or holds it on purpose: resume it (kill -CONT PID) or end it, \
         then try again",
        .timeout.as_millis()
    )]
    Held {
        /// The file whose lock was held.
        path: String,
        /// How long this process waited.
        timeout: Duration,
        /// The pids holding it, from `/proc/locks` (none when they were not found).
        pids: Vec<u32>,
        /// Who holds it, for people ([`describe_holders`]).
        holders: String,
    },
    /// The users who may read the daemon's region file could not be set.
    #[error("region file {path}: cannot let uids {uids:?} read it: {source}")]
    Readers {
        /// The region file.
        path: String,
        /// The users.
        uids: Vec<u32>,
        /// What setting its ACL said.
        source: std::io::Error,
    },
    /// The name is not one a vGPU may have.
    #[error("{name:?} is not a vGPU name")]
    BadName {
        /// The name.
        name: String,
    },
}

/// The shared mapping of a whole region file; unmapped when dropped (with whatever was mapped over it).
pub(super) struct Mapping(pub(super) NonNull<Region>);

// SAFETY: the mapping is shared memory; every field written after initialization is an atomic, except
// names, which are written only under the file lock (see `Locked::name_slot` in `claim`).
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
    pub(super) file: File,
    pub(super) map: Mapping,
    pub(super) path: String,
    pub(super) writable: bool,
    /// What the directory holding it may be trusted with (whether the daemon may replace a live file).
    pub(super) dir: DirKind,
    /// How it was opened: the daemon's lets the users of its vGPUs read it.
    access: Access,
    /// Its [`lock_path`] file, opened on the first [`RegionFile::lock`] of a writable region.
    claims: OnceLock<File>,
    /// The users of the vGPUs whose live files are mapped (by slot): for the daemon, who may read the file.
    readers: Mutex<BTreeMap<usize, u32>>,
    /// The configuration files mapped over slots (slot → inode), see [`super::conf`].
    confs: Mutex<BTreeMap<usize, u64>>,
    /// `flock` excludes other open files, not other threads using this one: they take this first.
    threads: Mutex<()>,
}

impl RegionFile {
    /// Opens the region at `path` for a user's processes that share it as peers ([`Access::Peer`]).
    pub fn open(path: &str) -> Result<RegionFile, RegionError> {
        RegionFile::open_as(path, Access::Peer)
    }

    /// Opens the region at `path` as `access` says, creating it complete when it is missing (and may be
    /// created), in a directory checked for it ([`super::open`]); an existing file must be a
    /// version-[`VERSION`] region of this layout, owned as `access` requires. Errors name the file and what
    /// to do. No lock is taken: a region appears complete, and its header never changes.
    pub fn open_as(path: &str, access: Access) -> Result<RegionFile, RegionError> {
        let fail = |op: &'static str, source: std::io::Error| RegionError::Io { path: path.to_string(), op, source };
        let dir = checked_dir(std::path::Path::new(path))
            .map_err(|source| RegionError::Dir { path: path.to_string(), source })?;
        let (file, writable) = open_region(path, access, dir)?;
        let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
        if len != LAYOUT_SIZE as u64 {
            return Err(RegionError::WrongSize { path: path.to_string(), len });
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let map = map(&file, prot).map_err(|e| fail("cannot map", e))?;
        // SAFETY: `map` covers the whole file and lives until the end of this function or in the result; the
        // header is read only (atomic magic, integers written before the file was linked into place).
        check_header(unsafe { &map.0.as_ref().head.header }, path)?;
        let region = RegionFile {
            file,
            map,
            path: path.to_string(),
            writable,
            dir,
            access,
            claims: OnceLock::new(),
            readers: Mutex::default(),
            confs: Mutex::default(),
            threads: Mutex::new(()),
        };
        region.refresh_confs();
        Ok(region)
    }

    /// Maps over each hidden slot the configuration file this process may read, as it is now (a vGPU
    /// created or removed by the daemon since): see [`conf::overlay_confs`]. Written through by the daemon
    /// alone; read-only for every other process.
    pub fn refresh_confs(&self) {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let region_prot = if self.writable { rw } else { libc::PROT_READ };
        let prot = if self.access == Access::Daemon { rw } else { libc::PROT_READ };
        let mut known = self.confs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let owner = conf::owner_of(&self.file);
        let base = self.map.0.as_ptr();
        // SAFETY: our own whole-region mapping; configuration areas are read through atomics and bytes only.
        unsafe { conf::overlay_confs(base, &self.file, &self.path, owner, (region_prot, prot), &mut known) };
    }

    /// The daemon's: gives slot `index` a configuration file of its own, readable by `reader` too (see
    /// [`super::conf`]): created from what the slot's area shows now, mapped over it, and the slot hidden
    /// in the region file. A slot that has its file already only has its reader set again.
    pub fn map_conf(&self, index: usize, reader: Option<u32>) -> Result<(), RegionError> {
        let path = conf::conf_path(&self.path, index);
        let reader = reader.filter(|&uid| uid != crate::secure_fs::euid());
        let mut known = self.confs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let fail = |op: &'static str, source: std::io::Error| RegionError::FileIo { path: path.clone(), op, source };
        if known.contains_key(&index) {
            let file = crate::secure_fs::open_nofollow(std::path::Path::new(&path), true)
                .map_err(|e| fail("cannot open", e))?;
            return Ok(conf::set_reader(&file, &path, reader)?);
        }
        let file = conf::create(&path, index, self.dir, &self.region().vgpus[index].config, reader)?;
        let meta = file.metadata().map_err(|source| RegionError::Stat { path: path.clone(), source })?;
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        // SAFETY: the area lies inside our mapping, which we own; the file has AREA bytes.
        unsafe { overlay(self.map.0.as_ptr(), config_offset(index), &file, libc::PROT_READ | libc::PROT_WRITE, 0) }
            .map_err(|e| fail("cannot map", e))?;
        known.insert(index, inode);
        conf::hide(&self.file, index).map_err(|source| RegionError::Io {
            path: self.path.clone(),
            op: "cannot write",
            source,
        })
    }

    /// The daemon's: maps the region file's own area back over slot `index`'s configuration and removes
    /// the slot's configuration file. With `keep`, the configuration is copied into the region file first
    /// (the slot becomes an ordinary vGPU, seen by every process); otherwise the slot is left free.
    pub fn unmap_conf(&self, index: usize, keep: bool) -> Result<(), RegionError> {
        let mut known = self.confs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if known.remove(&index).is_none() {
            return Ok(());
        }
        let fail = |source: std::io::Error| RegionError::Restore { path: self.path.clone(), source };
        if keep {
            let bytes = conf::bytes_of(&self.region().vgpus[index].config);
            self.file.write_all_at(bytes, config_offset(index) as u64).map_err(fail)?;
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: our own mapping; the region file has LAYOUT_SIZE bytes.
        unsafe { overlay(self.map.0.as_ptr(), config_offset(index), &self.file, prot, config_offset(index)) }
            .map_err(fail)?;
        if !keep {
            let c = &self.region().vgpus[index].config;
            c.flags.store(0, Ordering::Release);
            c.state.store(state::FREE, Ordering::Release);
        }
        let path = conf::conf_path(&self.path, index);
        match std::fs::remove_file(&path) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(RegionError::FileIo { path, op: "cannot remove", source })
            }
            _ => Ok(()),
        }
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

    /// Takes the owner's lock ([`lock_path`]; and excludes this process's other threads) to claim or
    /// configure slots. Waits at most [`LOCK_TIMEOUT`], as [`RegionFile::lock_within`] does.
    pub fn lock(&self) -> Result<Locked<'_>, RegionError> {
        self.lock_within(LOCK_TIMEOUT)
    }

    /// Takes the owner's lock, as [`RegionFile::lock`] does, if it can be had within `timeout`; otherwise
    /// an error naming the processes holding it (the owner's processes hold it for milliseconds, unless one
    /// is stopped). A region this user may not write has no lock of its: the result excludes this process's
    /// other threads only ([`Locked::exclusive`] is false), and names read through it are only read as
    /// [`find_settled`] does.
    pub fn lock_within(&self, timeout: Duration) -> Result<Locked<'_>, RegionError> {
        if !self.writable {
            return Ok(self.guard());
        }
        let claims = self.claims()?;
        let fail = |source: std::io::Error| RegionError::Lock { path: lock_path(&self.path), source };
        // The thread lock only while trying: this process's other threads are not held up by the wait.
        let attempt = || {
            let threads = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            Ok(FileLock::try_exclusive(claims)?.map(|file| Locked {
                owner: self,
                _threads: threads,
                _file: Some(file),
            }))
        };
        match crate::flock::retry_until(Instant::now() + timeout, attempt).map_err(fail)? {
            Some(locked) => Ok(locked),
            None => Err(held_too_long(&lock_path(&self.path), claims, timeout)),
        }
    }

    /// The [`lock_path`] file, opened (or created) once.
    fn claims(&self) -> Result<&File, RegionError> {
        if let Some(f) = self.claims.get() {
            return Ok(f);
        }
        let file = open_lock(&lock_path(&self.path), self.dir)?;
        // A thread that raced us set its own: both are the same file, either will do.
        Ok(self.claims.get_or_init(|| file))
    }

    /// Slot `index`'s live file, locked exclusively (waiting at most `timeout`): while the result lives, no
    /// process is joining the vGPU (a joining tenant of another user checks and claims under the shared
    /// lock of that file, which it and the daemon alone can open). For the daemon, before it checks that
    /// nobody is attached and frees the slot. `Ok(None)` when the vGPU has no live file.
    pub fn lock_live(&self, index: usize, timeout: Duration) -> Result<Option<LiveLock>, RegionError> {
        let path = live_path(&self.path, index);
        let fail = |op: &'static str, source: std::io::Error| RegionError::FileIo { path: path.clone(), op, source };
        let file = match crate::secure_fs::open_nofollow(std::path::Path::new(&path), false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail("cannot open", e)),
        };
        // Released by `LiveLock`'s drop, explicitly (see there).
        let locked = FileLock::within(&file, timeout).map_err(|e| fail("cannot lock", e))?;
        match locked.map(std::mem::forget) {
            Some(()) => Ok(Some(LiveLock(file))),
            None => Err(held_too_long(&path, &file, timeout)),
        }
    }

    /// The region with this process's other threads excluded but not other processes: enough to read
    /// slots and to change what is only ever changed atomically (limits, shares, flags, process slots),
    /// never to name, free or map slots. For the daemon, the only writer of names while it runs, so that
    /// no other process holding the file lock can hold up its reads.
    pub fn guard(&self) -> Locked<'_> {
        let threads = self.threads.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        Locked { owner: self, _threads: threads, _file: None }
    }

    /// Maps slot `index`'s live file over the slot's live area of this mapping (the daemon's: it reads and
    /// writes every managed vGPU's state where its processes do). With `owner`, the file must be that user's
    /// and is created for it (mode 0600) when it does not exist, starting from what the region's own area
    /// holds; without, it must exist and be this user's.
    ///
    /// For the daemon's region, the vGPU's user may then read the region file (its tenants map it), as long
    /// as the live file stays mapped ([`RegionFile::unmap_live`]).
    pub fn map_live(&self, index: usize, owner: Option<u32>) -> Result<(), RegionError> {
        let from = owner.map(|uid| (uid, &self.region().vgpus[index].live));
        let live = open_live(&live_path(&self.path, index), index, self.dir, from)?;
        // SAFETY: the area lies inside our mapping, which we own; the live file has AREA bytes.
        unsafe { overlay(self.map.0.as_ptr(), live_offset(index), &live, libc::PROT_READ | libc::PROT_WRITE, 0) }
            .map_err(|source| RegionError::FileIo { path: live_path(&self.path, index), op: "cannot map", source })?;
        match owner {
            Some(uid) => self.set_reader(index, Some(uid)),
            None => Ok(()),
        }
    }

    /// Records `reader` as the user of slot `index` (none: the slot has no user now) and, for the daemon's
    /// region, lets exactly the recorded users read the file ([`crate::secure_fs::set_readers`]). Where the
    /// file system keeps no ACLs, the file is made readable by all (mode 0644): its tenants must read it,
    /// and it holds no managed vGPU's name or settings ([`super::conf`], whose files are never so).
    fn set_reader(&self, index: usize, reader: Option<u32>) -> Result<(), RegionError> {
        if self.access != Access::Daemon {
            return Ok(());
        }
        let mut readers = self.readers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match reader {
            Some(uid) => readers.insert(index, uid),
            None => readers.remove(&index),
        };
        let uids: Vec<u32> = readers.values().copied().collect();
        match crate::secure_fs::set_readers(&self.file, &uids) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                use std::os::unix::fs::PermissionsExt;
                self.file.set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|source| RegionError::Io {
                    path: self.path.clone(),
                    op: "cannot chmod",
                    source,
                })
            }
            Err(source) => Err(RegionError::Readers { path: self.path.clone(), uids, source }),
        }
    }

    /// Maps the region file's own live area of slot `index` back in place of its live file and removes
    /// that file (the vGPU is gone).
    pub fn unmap_live(&self, index: usize) -> Result<(), RegionError> {
        let prot = if self.writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: as in `map_live`; the region file has LAYOUT_SIZE bytes.
        unsafe { overlay(self.map.0.as_ptr(), live_offset(index), &self.file, prot, live_offset(index)) }
            .map_err(|source| RegionError::Io { path: self.path.clone(), op: "cannot map", source })?;
        self.set_reader(index, None)?;
        match std::fs::remove_file(live_path(&self.path, index)) {
            Err(source) if source.kind() != std::io::ErrorKind::NotFound => {
                Err(RegionError::FileIo { path: live_path(&self.path, index), op: "cannot remove", source })
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
pub(super) fn map(file: &File, prot: libc::c_int) -> std::io::Result<Mapping> {
    // SAFETY: a fresh shared mapping of LAYOUT_SIZE bytes of an open file that has that size.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), LAYOUT_SIZE, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    match NonNull::new(p.cast::<Region>()) {
        Some(base) if p != libc::MAP_FAILED => Ok(Mapping(base)),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Maps [`AREA`] bytes of `file` from `offset` over the area at byte `at` of the mapping at `base` (a
/// slot's live or configuration area: [`live_offset`], [`config_offset`]).
///
/// # Safety
/// `base` is a whole-region mapping the caller owns, `at` the offset of one of its areas; nothing may hold a
/// non-atomic reference into the area.
pub(super) unsafe fn overlay(
    base: *mut Region,
    at: usize,
    file: &File,
    prot: libc::c_int,
    offset: usize,
) -> std::io::Result<()> {
    // SAFETY: per the contract the target range lies inside the caller's mapping, so MAP_FIXED replaces only
    // our own pages; area offsets are multiples of AREA, hence of the page size.
    let p = unsafe {
        let at = base.cast::<u8>().add(at);
        libc::mmap(at.cast(), AREA, prot, libc::MAP_SHARED | libc::MAP_FIXED, file.as_raw_fd(), offset as libc::off_t)
    };
    if p == libc::MAP_FAILED { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// A live file locked exclusively ([`RegionFile::lock_live`]), until dropped.
pub struct LiveLock(File);

impl Drop for LiveLock {
    fn drop(&mut self) {
        // SAFETY: flock on the descriptor we own. Explicit: a lock lasts as long as its open file, which a
        // mapping would keep open.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The slot of vGPU `name` (encoded) in `region`, read without any lock, as a process that may not lock
/// the region reads it: a slot counts only when it is ready both before and after its name is read, so
/// that a name being written (only ever while the slot is not ready) is never taken for another. A slot
/// freed and named anew meanwhile may still be read; the caller checks what it found under the lock of
/// the vGPU's live file ([`RegionFile::lock_live`]).
pub fn find_settled(region: &Region, name: &[u8; NAME_LEN]) -> Option<usize> {
    region.vgpus.iter().position(|v| {
        if v.config.state.load(Ordering::Acquire) != state::READY {
            return false;
        }
        // SAFETY: the name lies in the mapping `region` borrows; read as bytes, whatever another process
        // writes at the same time (a torn read is discarded below, or by the caller's check).
        let read = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(v.config.name)) };
        std::sync::atomic::fence(Ordering::Acquire);
        read == *name && v.config.state.load(Ordering::Acquire) == state::READY
    })
}

/// The region while this process holds its lock: slots may be found, claimed, named and freed.
pub struct Locked<'a> {
    pub(super) owner: &'a RegionFile,
    _threads: MutexGuard<'a, ()>,
    /// `None` for a [`RegionFile::guard`]: other processes are not excluded.
    _file: Option<FileLock<'a>>,
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

    /// True when other processes are excluded too (the file lock is held), as naming, freeing and mapping
    /// slots require.
    pub fn exclusive(&self) -> bool {
        self._file.is_some()
    }
}

/// `file`'s shared lock, if it can be had within `timeout`; otherwise an error naming the file at `path`
/// and who holds it.
fn lock_file<'f>(file: &'f File, path: &str, timeout: Duration) -> Result<FileLock<'f>, RegionError> {
    let locked = FileLock::shared_within(file, timeout).map_err(|source| RegionError::FileIo {
        path: path.to_string(),
        op: "cannot lock",
        source,
    })?;
    match locked {
        Some(lock) => Ok(lock),
        None => Err(held_too_long(path, file, timeout)),
    }
}

/// The error for a file whose lock others held longer than `timeout`: the file, the holders and what to
/// do.
fn held_too_long(path: &str, file: &File, timeout: Duration) -> RegionError {
    let (pids, holders) = holders_of(file);
    RegionError::Held { path: path.to_string(), timeout, pids, holders }
}

/// The pids holding a `flock` on `file` ([`holder_pids`]; none when it cannot be looked at) and who they
/// are, for people ([`describe_holders`]), from one reading of `/proc/locks`.
pub(super) fn holders_of(file: &File) -> (Vec<u32>, String) {
    let pids = holder_pids(file);
    let described = describe_pids(pids.as_deref());
    (pids.unwrap_or_default(), described)
}

/// Who holds a `flock` on `file`, from `/proc/locks` (the kernel's record): each
/// holder's pid, command and, when it is not running, its state, e.g. `pid 42 (simgpu-probe, stopped)`.
pub fn describe_holders(file: &File) -> String {
    describe_pids(holder_pids(file).as_deref())
}

/// [`describe_holders`] for the holders [`holder_pids`] found (`None`: the file could not be looked at).
fn describe_pids(holders: Option<&[u32]>) -> String {
    let Some(holders) = holders else { return "another process".into() };
    if holders.is_empty() {
        return "another process (not found in /proc/locks)".into();
    }
    let described: Vec<String> = holders.iter().map(|&pid| describe_process(pid)).collect();
    described.join(", ")
}

/// The pids holding a `flock` (shared or exclusive) on `file`, from `/proc/locks` ([`crate::flock::holders`]),
/// sorted, each once; `None` when `file` cannot be looked at.
pub fn holder_pids(file: &File) -> Option<Vec<u32>> {
    let mut pids: Vec<u32> = crate::flock::holders(file)?.iter().map(|h| h.pid).collect();
    // Sorted by pid already; a process holding the file through two open files is named once.
    pids.dedup();
    Some(pids)
}

/// `pid N (COMMAND)`, with its state when it is not running or sleeping (`stopped`, `in uninterruptible
/// sleep`, ...), from `/proc/PID/stat`.
fn describe_process(pid: u32) -> String {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return format!("pid {pid}") };
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { return format!("pid {pid}") };
    let command = &stat[open + 1..close];
    let state = match stat[close + 1..].split_whitespace().next() {
        Some("T") => ", stopped",
        Some("t") => ", stopped by a debugger",
        Some("D") => ", in uninterruptible sleep",
        Some("Z") => ", a zombie",
        _ => "",
    };
    format!("pid {pid} ({command}{state})")
}

/// vGPU `name`'s [`flags`] as the region at `path` holds them now, without joining it or changing anything:
/// the file is opened and mapped read-only (never created) and searched without a lock ([`find_settled`]),
/// or, when it is this user's own, under the shared lock of its [`lock_path`] file when that exists (names
/// are written under the exclusive one). `Ok(None)` when there is no such vGPU; an error names the file.
/// For deciding what a vGPU allows before a program's CUDA libraries start (the tensor-core policy). Waits
/// at most [`LOCK_TIMEOUT`] for the lock.
pub fn vgpu_flags(path: &str, name: &str) -> Result<Option<u32>, RegionError> {
    vgpu_flags_within(path, name, LOCK_TIMEOUT)
}

/// [`vgpu_flags`], waiting at most `timeout` for the file's lock.
pub fn vgpu_flags_within(path: &str, name: &str, timeout: Duration) -> Result<Option<u32>, RegionError> {
    let encoded = encode_name(name).ok_or_else(|| RegionError::BadName { name: name.to_string() })?;
    let fail = |op: &'static str, source: std::io::Error| RegionError::Io { path: path.to_string(), op, source };
    let file =
        crate::secure_fs::open_nofollow(std::path::Path::new(path), false).map_err(|e| fail("cannot open", e))?;
    let meta = file.metadata().map_err(|e| fail("cannot stat", e))?;
    super::open::check_readable(&meta, path)?;
    let claims = lock_path(path);
    let claims = match crate::secure_fs::open_nofollow(std::path::Path::new(&claims), false) {
        Ok(f) if std::os::unix::fs::MetadataExt::uid(&meta) == crate::secure_fs::euid() => Some((claims, f)),
        _ => None,
    };
    let _lock = claims.as_ref().map(|(at, f)| lock_file(f, at, timeout)).transpose()?;
    let len = file.metadata().map_err(|e| fail("cannot stat", e))?.len();
    if len != LAYOUT_SIZE as u64 {
        return Err(RegionError::PeekSize { path: path.to_string(), len });
    }
    let map = map(&file, libc::PROT_READ).map_err(|e| fail("cannot map", e))?;
    // SAFETY: our own whole-region mapping, not referenced yet.
    unsafe {
        let read = (libc::PROT_READ, libc::PROT_READ);
        conf::overlay_confs(map.0.as_ptr(), &file, path, conf::owner_of(&file), read, &mut BTreeMap::new())
    };
    // SAFETY: the mapping covers the whole file and lives until the end of this function; Region is atomics
    // and integers, valid for any bits, and is only read: plain reads of what is written under the lock we
    // hold, and atomic loads of at most 8 bytes, which read-only memory allows.
    let region = unsafe { map.0.as_ref() };
    if !header_matches(&region.header) {
        return Err(RegionError::PeekHeader { path: path.to_string() });
    }
    Ok(find_settled(region, &encoded).map(|i| VgpuSlot::flags(&region.vgpus[i])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `e` says the file at `path` was held too long by this process (another open file of it).
    fn names_the_holder(e: &RegionError, path: &str) -> bool {
        let me = std::process::id();
        let held = matches!(e, RegionError::Held { path: p, pids, .. } if p == path && *pids == [me]);
        let e = e.to_string();
        held && e.contains(&format!("{path} has been locked for more than 200 ms by pid {me}"))
            && e.contains("kill -CONT")
    }

    #[test]
    fn a_lock_on_the_region_file_holds_nothing_up_and_the_owners_lock_gives_up_after_its_timeout() {
        let path = std::env::temp_dir().join(format!("tessera-region-lock-test-{}", std::process::id()));
        let path = path.to_string_lossy().into_owned();
        let _ = std::fs::remove_file(&path);
        let short = Duration::from_millis(200);
        let joined = RegionFile::open(&path).unwrap();
        // The region file locked, as any user who may read it could: nothing waits for that lock.
        let region = File::open(&path).unwrap();
        let on_region = FileLock::new(&region).unwrap();
        let t = Instant::now();
        RegionFile::open(&path).unwrap();
        assert!(joined.lock_within(short).unwrap().exclusive());
        assert_eq!(vgpu_flags_within(&path, "a", short).unwrap(), None);
        assert!(t.elapsed() < short, "{:?}", t.elapsed());
        drop(on_region);
        // The owner's lock file, which only the owner can open, held (as a stopped process of the owner's
        // would keep it; flock excludes open files, even of one process): each gives up after its timeout.
        let claims = lock_path(&path);
        let meta = std::fs::metadata(&claims).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777, 0o600);
        let other = File::open(&claims).unwrap();
        let held = FileLock::new(&other).unwrap();
        let t = Instant::now();
        let e = joined.lock_within(short).err().expect("locked while held");
        assert!(names_the_holder(&e, &claims), "{e}");
        let e = vgpu_flags_within(&path, "a", short).expect_err("read while held");
        assert!(names_the_holder(&e, &claims), "{e}");
        assert!(t.elapsed() >= 2 * short && t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        drop(held);
        assert!(joined.lock_within(short).unwrap().exclusive());
        assert_eq!(vgpu_flags_within(&path, "a", short).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&claims).unwrap();
    }

    #[test]
    fn a_live_file_locked_by_a_joiner_holds_up_its_removal_only() {
        let path = std::env::temp_dir().join(format!("tessera-live-lock-test-{}", std::process::id()));
        let path = path.to_string_lossy().into_owned();
        let _ = std::fs::remove_file(&path);
        let short = Duration::from_millis(200);
        let file = RegionFile::open(&path).unwrap();
        assert!(file.lock_live(2, short).unwrap().is_none(), "no live file, nothing to lock");
        file.map_live(2, Some(crate::secure_fs::euid())).unwrap();
        let live = File::open(live_path(&path, 2)).unwrap();
        let joining = FileLock::shared(&live).unwrap();
        let e = file.lock_live(2, short).err().expect("locked while a joiner holds it");
        assert!(names_the_holder(&e, &live_path(&path, 2)), "{e}");
        assert!(file.lock_live(3, short).unwrap().is_none(), "other slots are not held up");
        drop(joining);
        let removing = file.lock_live(2, short).unwrap().expect("locked");
        assert!(FileLock::try_shared(&live).unwrap().is_none(), "a joiner waits while it is removed");
        drop(removing);
        assert!(FileLock::try_shared(&live).unwrap().is_some());
        file.unmap_live(2).unwrap();
        std::fs::remove_file(&path).unwrap();
        let _ = std::fs::remove_file(lock_path(&path));
    }
}
