//! Where the region's files are and how they are opened, so that no other user can plant one (see
//! [`crate::secure_fs`]).
//!
//! - The default directory, `/dev/shm/tessera-<uid>` ([`default_dir`]), holds the default region, its
//!   vGPUs' live files, the daemon's lock and its socket. It is created mode 0711 and must be this user's,
//!   not a symbolic link and writable by nobody else: other users may reach a file in it whose name they
//!   know (a tenant of a `--user` vGPU maps the region read-only and its own live file) but can neither
//!   list it nor create anything in it. It is the same path in every session of the user (unlike
//!   `$XDG_RUNTIME_DIR`, which also stays closed to other users), so the daemon and its processes agree.
//!   Any other directory is checked ([`secure_fs::check_dir`]).
//! - A region file is created complete: its header is written into a temporary file that is then linked
//!   into place, never over an existing file. So a header that is not a finished region's (all zeros
//!   included) was never written by Tessera, and is refused with a message naming the file.
//! - An existing region file is written only by its owner. The daemon and a user's peer processes use it
//!   only if it is their own (the daemon replaces one of another owner in its own private directory); a
//!   process joining a vGPU maps another user's region read-only, and only root's or one named by
//!   `TESSERA_REGION` (the default path is this user's own).
//! - Who may read the daemon's region: its owner, and exactly the users of its `--user` vGPUs, whose
//!   tenants map it read-only (mode 0600 and a POSIX ACL naming them, [`secure_fs::set_readers`], kept by
//!   [`super::file::RegionFile::map_live`]). It holds no managed vGPU's name or settings: those are in each
//!   vGPU's configuration file, readable by the vGPU's user alone ([`super::conf`]).
//! - The lock under which slots are claimed and configured is not the region file's (anyone who may read a
//!   file may `flock` it) but its [`lock_path`] file, mode 0600, which only the region's owner can open
//!   ([`open_lock`]): no other user can hold up the daemon or a tenant's start.
//! - A vGPU's live file must be a regular file of the vGPU's user, mode 0600, with one name; the daemon
//!   creates it complete for that user, and replaces one that is not so in its own private directory
//!   (elsewhere it refuses it, naming the file and its owner).

use super::layout::{AREA, Head, Header, LAYOUT_SIZE, LIVE_MAGIC, MAGIC, MAX_DEVICES, MAX_VGPUS, PROCS_PER_VGPU};
use super::layout::{Region, VERSION, VgpuLive};
use crate::secure_fs::{self, DirKind, create_complete, euid, file_problem, open_nofollow, reopen_writable};
use std::fs::File;
use std::mem::offset_of;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Mode of the [`default_dir`]: its owner's, which others may traverse but neither list nor write.
pub const DEFAULT_DIR_MODE: u32 = 0o711;

/// The directory of the default region, socket and lock: `/dev/shm/tessera-<uid>`.
pub fn default_dir() -> PathBuf {
    PathBuf::from(format!("/dev/shm/tessera-{}", euid()))
}

/// Prepares the directory that holds `path` for Tessera's files: the [`default_dir`] is created when
/// missing and must be this user's own ([`secure_fs::ensure_private_dir`]); any other is checked
/// ([`secure_fs::check_dir`]).
pub fn checked_dir(path: &Path) -> Result<DirKind, String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if dir == default_dir() {
        secure_fs::ensure_private_dir(dir, DEFAULT_DIR_MODE)?;
        return Ok(DirKind::Private);
    }
    secure_fs::check_dir(dir)
}

/// Who opens a region file, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read and written, created with mode 0600 if missing: one user's processes share it, as peers.
    Peer,
    /// Read and written by the daemon, created (or changed) to mode 0600, with no ACL: the users of its
    /// `--user` vGPUs are then let read it, one by one ([`super::file::RegionFile::map_live`]).
    Daemon,
    /// A process joining a vGPU: written if it is this user's file, else only read (root's, or any named by
    /// `TESSERA_REGION`); created, as a peer's, when missing.
    Joiner,
}

/// Opens the region file at `path` (in a directory of kind `dir`, see [`checked_dir`]) as `access` says,
/// creating it complete when it is missing: `(file, writable)`. Errors name the file and the remedy.
pub fn open_region(path: &str, access: Access, dir: DirKind) -> Result<(File, bool), String> {
    let p = Path::new(path);
    let fail = |what: &str, e: std::io::Error| format!("region file {path}: {what}: {e}");
    let mode = 0o600;
    let replaceable = access == Access::Daemon && dir == DirKind::Private;
    if let (DirKind::Foreign(owner), Access::Daemon | Access::Peer) = (dir, access) {
        // Its owner could replace the region, or a vGPU's file, with one of its own.
        return Err(format!(
            "region file {path}: its directory belongs to {}, who could replace the files in it; keep the region in \
             a directory of your own or root's (the default is)",
            secure_fs::describe_user(owner)
        ));
    }
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let DirKind::Foreign(owner) = dir {
                    return Err(format!(
                        "region file {path} does not exist, and its directory belongs to {}, so this user does not \
                         create it; set TESSERA_REGION to the daemon's region",
                        secure_fs::describe_user(owner)
                    ));
                }
                match create_complete(p, mode, initialize)? {
                    Some(f) => return Ok((f, true)),
                    None => continue,
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(format!(
                    "region file {path} is a symbolic link, which Tessera never follows (another user could point \
                     it anywhere); remove it or set TESSERA_REGION to the file itself"
                ));
            }
            Err(e) => return Err(fail("cannot open (set TESSERA_REGION to a usable path)", e)),
        };
        let meta = file.metadata().map_err(|e| fail("cannot stat", e))?;
        if access == Access::Joiner {
            return open_joined(file, &meta, path);
        }
        match file_problem(&meta, euid(), None).or_else(|| writable_by_others(&meta)) {
            None => {}
            Some(_) if replaceable => {
                remove(p)?;
                continue;
            }
            Some(problem) => return Err(planted(path, &problem)),
        }
        let file = reopen_writable(&file, p).map_err(|e| fail("cannot open for writing", e))?;
        if access == Access::Daemon {
            // Readers granted by an earlier daemon are granted again as it places their vGPUs.
            secure_fs::set_readers(&file, &[]).map_err(|e| fail("cannot make it private", e))?;
        }
        return Ok((file, true));
    }
    Err(format!("region file {path} kept being replaced while it was opened; retry"))
}

/// An existing region file as a joining process may use it: its own written, root's or one named by
/// `TESSERA_REGION` read-only.
fn open_joined(file: File, meta: &std::fs::Metadata, path: &str) -> Result<(File, bool), String> {
    check_readable(meta, path)?;
    if meta.uid() != euid() {
        return Ok((file, false));
    }
    match reopen_writable(&file, Path::new(path)) {
        Ok(writable) => Ok((writable, true)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok((file, false)),
        Err(e) => Err(format!("region file {path}: cannot open for writing: {e}")),
    }
}

/// Refuses a region file a process may not even read from: not a regular file, writable by users other
/// than its owner, or another user's (not root's) at the default path, which is this user's own (one named
/// by `TESSERA_REGION` may be the daemon's user's).
pub fn check_readable(meta: &std::fs::Metadata, path: &str) -> Result<(), String> {
    if !meta.file_type().is_file() {
        return Err(format!("region file {path} is not a regular file; remove it or set TESSERA_REGION"));
    }
    if let Some(problem) = writable_by_others(meta) {
        return Err(planted(path, &problem));
    }
    let owner = meta.uid();
    if owner == euid() || owner == 0 || Path::new(path) != default_dir().join(DEFAULT_REGION_NAME) {
        return Ok(());
    }
    Err(planted(path, &format!("belongs to {}, neither this user nor root", secure_fs::describe_user(owner))))
}

/// What is wrong with a region file other users may write (their limits would be anyone's to change).
fn writable_by_others(meta: &std::fs::Metadata) -> Option<String> {
    let mode = meta.mode() & 0o7777;
    (mode & 0o022 != 0).then(|| format!("may be written by users other than its owner (mode {mode:04o})"))
}

/// The default region's name in the [`default_dir`].
pub const DEFAULT_REGION_NAME: &str = "tessera.region";

/// The message for a region file Tessera will not use because of `problem`.
fn planted(path: &str, problem: &str) -> String {
    format!(
        "region file {path} {problem}: another user may have created it to take the vGPUs' limits over, so it is \
         not used; remove it (as root) or set TESSERA_REGION to a file in a directory of your own"
    )
}

/// Removes what is at `p` (a leftover of the wrong owner in the daemon's private directory).
fn remove(p: &Path) -> Result<(), String> {
    std::fs::remove_file(p).map_err(|e| format!("{}: cannot remove it: {e}", p.display()))
}

/// Sizes a new region file and writes its header (the rest stays zero, and sparse).
fn initialize(file: &File) -> Result<(), String> {
    file.set_len(LAYOUT_SIZE as u64).map_err(|e| format!("cannot size a new region: {e}"))?;
    let at = offset_of!(Region, head) + offset_of!(Head, header);
    let mut header = [0u8; std::mem::size_of::<Header>()];
    let mut put = |field: usize, bytes: &[u8]| header[field..field + bytes.len()].copy_from_slice(bytes);
    put(offset_of!(Header, magic), &MAGIC.to_le_bytes());
    put(offset_of!(Header, version), &VERSION.to_le_bytes());
    put(offset_of!(Header, layout_size), &(LAYOUT_SIZE as u32).to_le_bytes());
    put(offset_of!(Header, max_devices), &(MAX_DEVICES as u32).to_le_bytes());
    put(offset_of!(Header, max_vgpus), &(MAX_VGPUS as u32).to_le_bytes());
    put(offset_of!(Header, max_procs), &(PROCS_PER_VGPU as u32).to_le_bytes());
    file.write_all_at(&header, at as u64).map_err(|e| format!("cannot write a new region's header: {e}"))
}

/// Checks the header of a mapped region: any header but a finished version-[`VERSION`] region's of this
/// layout, all zeros included, is an error naming the file and the remedy.
pub fn check_header(h: &Header, path: &str) -> Result<(), String> {
    if header_matches(h) {
        return Ok(());
    }
    let (magic, version) = (h.magic.load(std::sync::atomic::Ordering::Acquire), h.version);
    let what = if magic == 0 && version == 0 {
        "has no header (it is all zeros there), which Tessera never leaves: it was not created by Tessera".to_string()
    } else {
        format!("is not a version-{VERSION} Tessera region (magic {magic:#x}, version {version})")
    };
    Err(format!("region file {path} {what}; remove it (no Tessera program may be running) or set TESSERA_REGION"))
}

/// True when `h` is the header of a finished version-[`VERSION`] region of this layout.
pub fn header_matches(h: &Header) -> bool {
    h.magic.load(std::sync::atomic::Ordering::Acquire) == MAGIC
        && h.version == VERSION
        && h.layout_size as usize == LAYOUT_SIZE
        && h.max_devices as usize == MAX_DEVICES
        && h.max_vgpus as usize == MAX_VGPUS
        && h.max_procs as usize == PROCS_PER_VGPU
}

/// Opens slot `index`'s live file at `path` (in a directory of kind `dir`), read and write, and checks it:
/// a regular file of its user (`create`'s uid, else this process's), mode 0600, one name. With
/// `create = Some((uid, from))` (the daemon), a missing file is created complete for user `uid` holding a
/// copy of `from`, and in the daemon's private directory one that fails the checks is replaced.
pub fn open_live(path: &str, index: usize, dir: DirKind, create: Option<(u32, &VgpuLive)>) -> Result<File, String> {
    let p = Path::new(path);
    let fail = |what: &str, e: std::io::Error| format!("{path}: {what}: {e}");
    let owner = create.map_or_else(euid, |(uid, _)| uid);
    let replaceable = create.is_some() && dir == DirKind::Private;
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create.is_some() => {
                let Some((uid, from)) = create else { unreachable!("matched on is_some") };
                match create_complete(p, 0o600, |f| fill_live(f, index, uid, from))? {
                    Some(f) => return Ok(f),
                    None => continue,
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(format!("{path} is a symbolic link, which Tessera never follows; remove it"));
            }
            Err(e) => return Err(fail("cannot open", e)),
        };
        match file_problem(&file.metadata().map_err(|e| fail("cannot stat", e))?, owner, Some(0o600)) {
            None => {}
            Some(_) if replaceable => {
                remove(p)?;
                continue;
            }
            Some(problem) => {
                return Err(format!(
                    "{path} {problem}: another user may have created it to reach this vGPU's state, so it is not \
                     used; remove it (as root) and create the vGPU again"
                ));
            }
        }
        let file = reopen_writable(&file, p).map_err(|e| fail("cannot open", e))?;
        check_live(&file, path, index)?;
        return Ok(file);
    }
    Err(format!("{path} kept being replaced while it was opened; retry"))
}

/// Writes a new live file of slot `index` for user `uid`: a copy of `from` with its magic, version and slot.
fn fill_live(file: &File, index: usize, uid: u32, from: &VgpuLive) -> Result<(), String> {
    // SAFETY: `VgpuLive` is plain old data (integers and atomics) of AREA bytes or less; read as bytes.
    let bytes =
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(from).cast::<u8>(), std::mem::size_of::<VgpuLive>()) };
    let mut image = bytes.to_vec();
    let mut put = |at: usize, bytes: &[u8]| image[at..at + bytes.len()].copy_from_slice(bytes);
    put(offset_of!(VgpuLive, magic), &LIVE_MAGIC.to_le_bytes());
    put(offset_of!(VgpuLive, version), &VERSION.to_le_bytes());
    put(offset_of!(VgpuLive, slot), &(index as u32).to_le_bytes());
    image.resize(AREA, 0);
    std::os::unix::fs::fchown(file, Some(uid), None).map_err(|e| format!("cannot give it to uid {uid}: {e}"))?;
    file.write_all_at(&image, 0).map_err(|e| format!("cannot write it: {e}"))
}

/// Checks that `file` is a live file of slot `index` of this version.
fn check_live(file: &File, path: &str, index: usize) -> Result<(), String> {
    let len = file.metadata().map_err(|e| format!("{path}: cannot stat: {e}"))?.len();
    let mut head = [0u8; offset_of!(VgpuLive, context_cost)];
    let read = file.read_exact_at(&mut head, 0);
    let field = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or_default());
    let magic = &head[offset_of!(VgpuLive, magic)..][..8];
    if len != AREA as u64 || read.is_err() || magic != LIVE_MAGIC.to_le_bytes() {
        return Err(format!("{path} is not a Tessera vGPU file ({len} bytes); remove it and restart the daemon"));
    }
    let (version, slot) = (field(offset_of!(VgpuLive, version)), field(offset_of!(VgpuLive, slot)));
    if version != VERSION || slot != index as u32 {
        return Err(format!(
            "{path} is a version-{version} file of slot {slot}, not a version-{VERSION} file of slot {index}; remove \
             it and restart the daemon"
        ));
    }
    Ok(())
}

/// The default region: `tessera.region` in the user's own directory in shared memory,
/// [`default_dir`] (`TESSERA_REGION` overrides it).
pub fn default_path() -> String {
    default_dir().join(DEFAULT_REGION_NAME).to_string_lossy().into_owned()
}

/// The lock file of the region file at `region`: what its owner's processes (the daemon, peers, joining
/// tenants of its own) `flock` to claim, name, free or configure slots. Not the region file itself, which
/// the users of `--user` vGPUs may read, hence lock.
pub fn lock_path(region: &str) -> String {
    format!("{region}.claims")
}

/// Opens (creating it, mode 0600, when missing) the lock file at `path` (in a directory of kind `dir`)
/// for `flock`: it must be a regular file of this user's, mode 0600, with one name, so that no other user
/// can open it, hence lock it. In the daemon's private directory one that is not so is replaced; elsewhere
/// it is refused, naming the file and its owner.
pub fn open_lock(path: &str, dir: DirKind) -> Result<File, String> {
    let p = Path::new(path);
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match secure_fs::create_exclusive(p, 0o600) {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("lock file {path}: cannot create it: {e}")),
            },
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(format!("lock file {path} is a symbolic link, which Tessera never follows; remove it"));
            }
            Err(e) => return Err(format!("lock file {path}: cannot open: {e}")),
        };
        let meta = file.metadata().map_err(|e| format!("lock file {path}: cannot stat: {e}"))?;
        match file_problem(&meta, euid(), Some(0o600)) {
            None => return Ok(file),
            Some(_) if dir == DirKind::Private => remove(p)?,
            Some(problem) => {
                return Err(format!(
                    "lock file {path} {problem}: another user may have created it to hold this region's slots \
                     locked, so it is not used; remove it (as root)"
                ));
            }
        }
    }
    Err(format!("lock file {path} kept being replaced while it was opened; retry"))
}

/// The path of slot `index`'s live file, for the region file at `region`.
pub fn live_path(region: &str, index: usize) -> String {
    format!("{region}.vgpu{index:02}")
}

#[cfg(test)]
mod tests {
    use super::super::attach::attach;
    use super::super::file::RegionFile;
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A user other than the test's (root's, in CI): `nobody`.
    const OTHER: u32 = 65534;

    /// A fresh directory of mode `mode` for test `tag`, and the region path in it.
    fn dir(tag: &str, mode: u32) -> (PathBuf, String) {
        let d = std::env::temp_dir().join(format!("tessera-open-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let region = d.join("r.region").to_string_lossy().into_owned();
        (d, region)
    }

    #[test]
    fn a_zeroed_region_is_refused_by_name_and_left_alone() {
        let (d, path) = dir("zero", 0o755);
        std::fs::write(&path, vec![0u8; LAYOUT_SIZE]).unwrap();
        for e in [
            RegionFile::open_as(&path, Access::Daemon).err().unwrap(),
            RegionFile::open(&path).err().unwrap(),
            attach(&path, "x", None).err().unwrap(),
        ] {
            assert!(e.contains(&path) && e.contains("all zeros") && e.contains("remove it"), "{e}");
        }
        assert!(std::fs::read(&path).unwrap().iter().all(|&b| b == 0), "the file is left as it was");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_new_region_appears_complete_and_symbolic_links_are_refused() {
        let (d, path) = dir("link", 0o755);
        RegionFile::open_as(&path, Access::Daemon).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "no temporary file is left");
        let link = d.join("l.region").to_string_lossy().into_owned();
        std::os::unix::fs::symlink(&path, &link).unwrap();
        for e in [RegionFile::open(&link).err().unwrap(), attach(&link, "x", None).err().unwrap()] {
            assert!(e.contains(&link) && e.contains("symbolic link"), "{e}");
        }
        // A symbolic link as the directory is refused too.
        let linked_dir = d.with_extension("dirlink");
        let _ = std::fs::remove_file(&linked_dir);
        std::os::unix::fs::symlink(&d, &linked_dir).unwrap();
        let through = linked_dir.join("r.region").to_string_lossy().into_owned();
        let e = attach(&through, "x", None).err().unwrap();
        assert!(e.contains(linked_dir.to_str().unwrap()) && e.contains("symbolic link"), "{e}");
        std::fs::remove_file(&linked_dir).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_users_region_is_refused_or_replaced_and_only_read_by_joiners() {
        // A sticky shared directory, like /dev/shm: another user's file is refused by name and owner.
        let (d, path) = dir("foreign", 0o1777);
        RegionFile::open(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(OTHER), None).unwrap();
        for e in [RegionFile::open_as(&path, Access::Daemon).err().unwrap(), RegionFile::open(&path).err().unwrap()] {
            assert!(e.contains(&path) && e.contains(&format!("belongs to uid {OTHER}")), "{e}");
        }
        // Writable by others, even one's own is refused.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = attach(&path, "x", None).err().unwrap();
        assert!(e.contains(&path) && e.contains("mode 0666"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A joining process named it: it may read it, never write it.
        let (_, writable) = open_region(&path, Access::Joiner, DirKind::Trusted).unwrap();
        assert!(!writable);
        let e = attach(&path, "x", None).err().unwrap();
        assert!(e.contains("no vGPU \"x\"") && e.contains("may not change"), "{e}");
        // Nor is a region in a directory of another user, who could replace it, used but by joining processes.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&d, Some(OTHER), None).unwrap();
        assert!(!open_region(&path, Access::Joiner, DirKind::Foreign(OTHER)).unwrap().1, "read, never written");
        std::os::unix::fs::chown(&path, Some(euid()), None).unwrap();
        let e = RegionFile::open_as(&path, Access::Daemon).err().unwrap();
        assert!(e.contains(&format!("directory belongs to uid {OTHER}")), "{e}");
        std::os::unix::fs::chown(&d, Some(euid()), None).unwrap();
        std::os::unix::fs::chown(&path, Some(OTHER), None).unwrap();
        // The daemon's private directory: another owner's file is a leftover, replaced by a new region.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        RegionFile::open_as(&path, Access::Daemon).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), euid());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_live_file_must_be_its_users_alone() {
        let (d, path) = dir("live", 0o1777);
        let file = RegionFile::open_as(&path, Access::Daemon).unwrap();
        let live = live_path(&path, 3);
        // Planted by another user in a shared directory: refused, naming it and its owner.
        std::fs::write(&live, vec![0u8; AREA]).unwrap();
        std::os::unix::fs::chown(&live, Some(OTHER), None).unwrap();
        let e = file.map_live(3, Some(euid())).unwrap_err();
        assert!(e.contains(&live) && e.contains(&format!("belongs to uid {OTHER}")), "{e}");
        std::fs::remove_file(&live).unwrap();
        file.map_live(3, Some(euid())).unwrap();
        // A joining process refuses its vGPU's file with another mode, or a second name.
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = open_live(&live, 3, DirKind::Trusted, None).unwrap_err();
        assert!(e.contains(&live) && e.contains("mode 0644"), "{e}");
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&live, d.join("second")).unwrap();
        assert!(open_live(&live, 3, DirKind::Trusted, None).unwrap_err().contains("2 names"));
        // In the daemon's private directory the daemon replaces what it will not use.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        let file = RegionFile::open_as(&path, Access::Daemon).unwrap();
        file.map_live(3, Some(OTHER)).unwrap();
        let meta = std::fs::metadata(&live).unwrap();
        assert_eq!((meta.uid(), meta.nlink(), meta.mode() & 0o7777), (OTHER, 1, 0o600));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
