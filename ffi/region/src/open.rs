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
use crate::secure_fs::{self, CreateError, DirKind, FileProblem, SecureFsError, create_complete, euid, file_problem};
use crate::secure_fs::{describe_user, open_nofollow, reopen_writable};
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
pub fn checked_dir(path: &Path) -> Result<DirKind, SecureFsError> {
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

/// Why a region file, a vGPU's live file or the region's lock file could not be opened, created or used
/// ([`open_region`], [`check_readable`], [`check_header`], [`open_live`], [`open_lock`]). Each names the
/// file and the remedy; a program decides by the variant (the file is missing, planted, of another
/// version...).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Creating a file safely failed ([`crate::secure_fs`]; it names the file).
    #[error(transparent)]
    SecureFs(#[from] SecureFsError),
    /// A system call on the region file failed (`op` says which: "cannot stat", "cannot open for writing"...).
    #[error("region file {path}: {op}: {source}")]
    RegionIo {
        /// The region file.
        path: String,
        /// What was being done, for the message.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The region's directory is another user's, who could replace the files in it: only a joining process
    /// may use a region there.
    #[error(
        "region file {path}: its directory belongs to {}, who could replace the files in it; keep the region in \
         a directory of your own or root's (the default is)",
        describe_user(*.owner)
    )]
    ForeignDir {
        /// The region file.
        path: String,
        /// The directory's owner.
        owner: u32,
    },
    /// The region file does not exist, and it is not this user's to create: its directory is another's.
    #[error(
        "region file {path} does not exist, and its directory belongs to {}, so this user does not create it; \
         set TESSERA_REGION to the daemon's region",
        describe_user(*.owner)
    )]
    Missing {
        /// The region file.
        path: String,
        /// The directory's owner.
        owner: u32,
    },
    /// The region file is a symbolic link, which is never followed.
    #[error(
        "region file {path} is a symbolic link, which Tessera never follows (another user could point it \
         anywhere); remove it or set TESSERA_REGION to the file itself"
    )]
    RegionSymlink {
        /// The region file.
        path: String,
    },
    /// The region file is not a regular file (a joining process reads only a regular file).
    #[error("region file {path} is not a regular file; remove it or set TESSERA_REGION")]
    RegionNotRegular {
        /// The region file.
        path: String,
    },
    /// The region file is not fit to use ([`FileProblem`]: another owner, writable by others, more names...):
    /// another user may have planted it.
    #[error(
        "region file {path} {problem}: another user may have created it to take the vGPUs' limits over, so it is \
         not used; remove it (as root) or set TESSERA_REGION to a file in a directory of your own"
    )]
    RegionPlanted {
        /// The region file.
        path: String,
        /// What is wrong with it.
        problem: FileProblem,
    },
    /// The region file was replaced each time it was opened.
    #[error("region file {path} kept being replaced while it was opened; retry")]
    RegionKeptReplaced {
        /// The region file.
        path: String,
    },
    /// The region file's header is all zeros: Tessera never leaves one so, so it did not create the file.
    #[error(
        "region file {path} has no header (it is all zeros there), which Tessera never leaves: it was not created \
         by Tessera; remove it (no Tessera program may be running) or set TESSERA_REGION"
    )]
    NoHeader {
        /// The region file.
        path: String,
    },
    /// The region file's magic is not a Tessera region's.
    #[error(
        "region file {path} is not a version-{VERSION} Tessera region (magic {magic:#x}, version {version}); \
         remove it (no Tessera program may be running) or set TESSERA_REGION"
    )]
    BadMagic {
        /// The region file.
        path: String,
        /// The magic it holds.
        magic: u64,
        /// The version it holds.
        version: u32,
    },
    /// The region file is a Tessera region of another version or layout (another Tessera wrote it).
    #[error(
        "region file {path} is not a version-{VERSION} Tessera region (magic {magic:#x}, version {version}); \
         remove it (no Tessera program may be running) or set TESSERA_REGION"
    )]
    UnsupportedVersion {
        /// The region file.
        path: String,
        /// The magic it holds ([`MAGIC`]).
        magic: u64,
        /// The version it holds (this one's when only the layout differs).
        version: u32,
    },
    /// A new region file could not be sized.
    #[error("cannot size a new region: {source}")]
    SizeNew {
        /// What `ftruncate` said.
        source: std::io::Error,
    },
    /// A new region file's header could not be written.
    #[error("cannot write a new region's header: {source}")]
    WriteHeader {
        /// What writing it said.
        source: std::io::Error,
    },
    /// A file left in the daemon's private directory could not be removed.
    #[error("{}: cannot remove it: {source}", .path.display())]
    Remove {
        /// The file.
        path: PathBuf,
        /// What removing it said.
        source: std::io::Error,
    },
    /// A system call on a vGPU's live file failed ("cannot open", "cannot stat").
    #[error("{path}: {op}: {source}")]
    LiveIo {
        /// The live file.
        path: String,
        /// What was being done, for the message.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// A vGPU's live file is a symbolic link.
    #[error("{path} is a symbolic link, which Tessera never follows; remove it")]
    LiveSymlink {
        /// The live file.
        path: String,
    },
    /// A vGPU's live file is not fit to use: another user may have planted it.
    #[error(
        "{path} {problem}: another user may have created it to reach this vGPU's state, so it is not used; remove \
         it (as root) and create the vGPU again"
    )]
    LivePlanted {
        /// The live file.
        path: String,
        /// What is wrong with it.
        problem: FileProblem,
    },
    /// A vGPU's live file was replaced each time it was opened.
    #[error("{path} kept being replaced while it was opened; retry")]
    LiveKeptReplaced {
        /// The live file.
        path: String,
    },
    /// A new live file could not be given to its vGPU's user.
    #[error("cannot give it to uid {uid}: {source}")]
    GiveLive {
        /// The vGPU's user.
        uid: u32,
        /// What `fchown` said.
        source: std::io::Error,
    },
    /// A new live file's content could not be written.
    #[error("cannot write it: {source}")]
    WriteLive {
        /// What writing it said.
        source: std::io::Error,
    },
    /// A live file is not a Tessera vGPU file: wrong size or magic.
    #[error("{path} is not a Tessera vGPU file ({len} bytes); remove it and restart the daemon")]
    NotLiveFile {
        /// The live file.
        path: String,
        /// Its size in bytes.
        len: u64,
    },
    /// A live file is of another version, or of another slot.
    #[error(
        "{path} is a version-{version} file of slot {slot}, not a version-{VERSION} file of slot {expected}; remove \
         it and restart the daemon"
    )]
    LiveMismatch {
        /// The live file.
        path: String,
        /// The version it holds.
        version: u32,
        /// The slot it holds.
        slot: u32,
        /// The slot it should be of.
        expected: usize,
    },
    /// A system call on the region's lock file failed ("cannot create it", "cannot open", "cannot stat").
    #[error("lock file {path}: {op}: {source}")]
    LockIo {
        /// The lock file.
        path: String,
        /// What was being done, for the message.
        op: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The lock file is a symbolic link.
    #[error("lock file {path} is a symbolic link, which Tessera never follows; remove it")]
    LockSymlink {
        /// The lock file.
        path: String,
    },
    /// The lock file is not fit to use: another user may have planted it.
    #[error(
        "lock file {path} {problem}: another user may have created it to hold this region's slots locked, so it \
         is not used; remove it (as root)"
    )]
    LockPlanted {
        /// The lock file.
        path: String,
        /// What is wrong with it.
        problem: FileProblem,
    },
    /// The lock file was replaced each time it was opened.
    #[error("lock file {path} kept being replaced while it was opened; retry")]
    LockKeptReplaced {
        /// The lock file.
        path: String,
    },
}

impl OpenError {
    /// True when the file (region, live or lock file) does not exist: an `open` failed with `ENOENT`, or a
    /// region file is [`OpenError::Missing`].
    pub fn is_not_found(&self) -> bool {
        match self {
            OpenError::Missing { .. } => true,
            OpenError::RegionIo { source, .. }
            | OpenError::LiveIo { source, .. }
            | OpenError::LockIo { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            _ => false,
        }
    }
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
pub fn open_region(path: &str, access: Access, dir: DirKind) -> Result<(File, bool), OpenError> {
    let p = Path::new(path);
    let fail = |op: &'static str, source: std::io::Error| OpenError::RegionIo { path: path.to_string(), op, source };
    let mode = 0o600;
    let replaceable = access == Access::Daemon && dir == DirKind::Private;
    if let (DirKind::Foreign(owner), Access::Daemon | Access::Peer) = (dir, access) {
        // Its owner could replace the region, or a vGPU's file, with one of its own.
        return Err(OpenError::ForeignDir { path: path.to_string(), owner });
    }
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let DirKind::Foreign(owner) = dir {
                    return Err(OpenError::Missing { path: path.to_string(), owner });
                }
                match create_complete(p, mode, initialize).map_err(CreateError::into_inner)? {
                    Some(f) => return Ok((f, true)),
                    None => continue,
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(OpenError::RegionSymlink { path: path.to_string() });
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
            Some(problem) => return Err(OpenError::RegionPlanted { path: path.to_string(), problem }),
        }
        let file = reopen_writable(&file, p).map_err(|e| fail("cannot open for writing", e))?;
        if access == Access::Daemon {
            // Readers granted by an earlier daemon are granted again as it places their vGPUs.
            secure_fs::set_readers(&file, &[]).map_err(|e| fail("cannot make it private", e))?;
        }
        return Ok((file, true));
    }
    Err(OpenError::RegionKeptReplaced { path: path.to_string() })
}

/// An existing region file as a joining process may use it: its own written, root's or one named by
/// `TESSERA_REGION` read-only.
fn open_joined(file: File, meta: &std::fs::Metadata, path: &str) -> Result<(File, bool), OpenError> {
    check_readable(meta, path)?;
    if meta.uid() != euid() {
        return Ok((file, false));
    }
    match reopen_writable(&file, Path::new(path)) {
        Ok(writable) => Ok((writable, true)),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok((file, false)),
        Err(source) => Err(OpenError::RegionIo { path: path.to_string(), op: "cannot open for writing", source }),
    }
}

/// Refuses a region file a process may not even read from: not a regular file, writable by users other
/// than its owner, or another user's (not root's) at the default path, which is this user's own (one named
/// by `TESSERA_REGION` may be the daemon's user's).
pub fn check_readable(meta: &std::fs::Metadata, path: &str) -> Result<(), OpenError> {
    if !meta.file_type().is_file() {
        return Err(OpenError::RegionNotRegular { path: path.to_string() });
    }
    if let Some(problem) = writable_by_others(meta) {
        return Err(OpenError::RegionPlanted { path: path.to_string(), problem });
    }
    let owner = meta.uid();
    if owner == euid() || owner == 0 || Path::new(path) != default_dir().join(DEFAULT_REGION_NAME) {
        return Ok(());
    }
    Err(OpenError::RegionPlanted { path: path.to_string(), problem: FileProblem::NeitherOwnNorRoot { owner } })
}

/// What is wrong with a region file other users may write (their limits would be anyone's to change).
fn writable_by_others(meta: &std::fs::Metadata) -> Option<FileProblem> {
    let mode = meta.mode() & 0o7777;
    (mode & 0o022 != 0).then_some(FileProblem::WritableByOthers { mode })
}

/// The default region's name in the [`default_dir`].
pub const DEFAULT_REGION_NAME: &str = "tessera.region";

/// Removes what is at `p` (a leftover of the wrong owner in the daemon's private directory).
fn remove(p: &Path) -> Result<(), OpenError> {
    std::fs::remove_file(p).map_err(|source| OpenError::Remove { path: p.to_path_buf(), source })
}

/// Sizes a new region file and writes its header (the rest stays zero, and sparse).
fn initialize(file: &File) -> Result<(), OpenError> {
    file.set_len(LAYOUT_SIZE as u64).map_err(|source| OpenError::SizeNew { source })?;
    let at = offset_of!(Region, head) + offset_of!(Head, header);
    let mut header = [0u8; std::mem::size_of::<Header>()];
    let mut put = |field: usize, bytes: &[u8]| header[field..field + bytes.len()].copy_from_slice(bytes);
    put(offset_of!(Header, magic), &MAGIC.to_le_bytes());
    put(offset_of!(Header, version), &VERSION.to_le_bytes());
    put(offset_of!(Header, layout_size), &(LAYOUT_SIZE as u32).to_le_bytes());
    put(offset_of!(Header, max_devices), &(MAX_DEVICES as u32).to_le_bytes());
    put(offset_of!(Header, max_vgpus), &(MAX_VGPUS as u32).to_le_bytes());
    put(offset_of!(Header, max_procs), &(PROCS_PER_VGPU as u32).to_le_bytes());
    file.write_all_at(&header, at as u64).map_err(|source| OpenError::WriteHeader { source })
}

/// Checks the header of a mapped region: any header but a finished version-[`VERSION`] region's of this
/// layout, all zeros included, is an error naming the file and the remedy ([`OpenError::NoHeader`],
/// [`OpenError::BadMagic`], or [`OpenError::UnsupportedVersion`] for a Tessera region of another version or
/// layout).
pub fn check_header(h: &Header, path: &str) -> Result<(), OpenError> {
    if header_matches(h) {
        return Ok(());
    }
    let (magic, version) = (h.magic.load(std::sync::atomic::Ordering::Acquire), h.version);
    let path = path.to_string();
    Err(match () {
        () if magic == 0 && version == 0 => OpenError::NoHeader { path },
        () if magic == MAGIC => OpenError::UnsupportedVersion { path, magic, version },
        () => OpenError::BadMagic { path, magic, version },
    })
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
pub fn open_live(path: &str, index: usize, dir: DirKind, create: Option<(u32, &VgpuLive)>) -> Result<File, OpenError> {
    let p = Path::new(path);
    let fail = |op: &'static str, source: std::io::Error| OpenError::LiveIo { path: path.to_string(), op, source };
    let owner = create.map_or_else(euid, |(uid, _)| uid);
    let replaceable = create.is_some() && dir == DirKind::Private;
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create.is_some() => {
                let Some((uid, from)) = create else { unreachable!("matched on is_some") };
                let fill = |f: &File| fill_live(f, index, uid, from);
                match create_complete(p, 0o600, fill).map_err(CreateError::into_inner)? {
                    Some(f) => return Ok(f),
                    None => continue,
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(OpenError::LiveSymlink { path: path.to_string() });
            }
            Err(e) => return Err(fail("cannot open", e)),
        };
        match file_problem(&file.metadata().map_err(|e| fail("cannot stat", e))?, owner, Some(0o600)) {
            None => {}
            Some(_) if replaceable => {
                remove(p)?;
                continue;
            }
            Some(problem) => return Err(OpenError::LivePlanted { path: path.to_string(), problem }),
        }
        let file = reopen_writable(&file, p).map_err(|e| fail("cannot open", e))?;
        check_live(&file, path, index)?;
        return Ok(file);
    }
    Err(OpenError::LiveKeptReplaced { path: path.to_string() })
}

/// Writes a new live file of slot `index` for user `uid`: a copy of `from` with its magic, version and slot.
fn fill_live(file: &File, index: usize, uid: u32, from: &VgpuLive) -> Result<(), OpenError> {
    // SAFETY: `VgpuLive` is plain old data (integers and atomics) of AREA bytes or less; read as bytes.
    let bytes =
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(from).cast::<u8>(), std::mem::size_of::<VgpuLive>()) };
    let mut image = bytes.to_vec();
    let mut put = |at: usize, bytes: &[u8]| image[at..at + bytes.len()].copy_from_slice(bytes);
    put(offset_of!(VgpuLive, magic), &LIVE_MAGIC.to_le_bytes());
    put(offset_of!(VgpuLive, version), &VERSION.to_le_bytes());
    put(offset_of!(VgpuLive, slot), &(index as u32).to_le_bytes());
    image.resize(AREA, 0);
    std::os::unix::fs::fchown(file, Some(uid), None).map_err(|source| OpenError::GiveLive { uid, source })?;
    file.write_all_at(&image, 0).map_err(|source| OpenError::WriteLive { source })
}

/// Checks that `file` is a live file of slot `index` of this version.
fn check_live(file: &File, path: &str, index: usize) -> Result<(), OpenError> {
    let len = file
        .metadata()
        .map_err(|source| OpenError::LiveIo { path: path.to_string(), op: "cannot stat", source })?
        .len();
    let mut head = [0u8; offset_of!(VgpuLive, context_cost)];
    let read = file.read_exact_at(&mut head, 0);
    let field = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or_default());
    let magic = &head[offset_of!(VgpuLive, magic)..][..8];
    if len != AREA as u64 || read.is_err() || magic != LIVE_MAGIC.to_le_bytes() {
        return Err(OpenError::NotLiveFile { path: path.to_string(), len });
    }
    let (version, slot) = (field(offset_of!(VgpuLive, version)), field(offset_of!(VgpuLive, slot)));
    if version != VERSION || slot != index as u32 {
        return Err(OpenError::LiveMismatch { path: path.to_string(), version, slot, expected: index });
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
pub fn open_lock(path: &str, dir: DirKind) -> Result<File, OpenError> {
    let p = Path::new(path);
    let fail = |op: &'static str, source: std::io::Error| OpenError::LockIo { path: path.to_string(), op, source };
    for _ in 0..3 {
        let file = match open_nofollow(p, false) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match secure_fs::create_exclusive(p, 0o600) {
                Ok(f) => return Ok(f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(fail("cannot create it", e)),
            },
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(OpenError::LockSymlink { path: path.to_string() });
            }
            Err(e) => return Err(fail("cannot open", e)),
        };
        let meta = file.metadata().map_err(|e| fail("cannot stat", e))?;
        match file_problem(&meta, euid(), Some(0o600)) {
            None => return Ok(file),
            Some(_) if dir == DirKind::Private => remove(p)?,
            Some(problem) => return Err(OpenError::LockPlanted { path: path.to_string(), problem }),
        }
    }
    Err(OpenError::LockKeptReplaced { path: path.to_string() })
}

/// The path of slot `index`'s live file, for the region file at `region`.
pub fn live_path(region: &str, index: usize) -> String {
    format!("{region}.vgpu{index:02}")
}

#[cfg(test)]
mod tests {
    use super::super::attach::{AttachError, attach};
    use super::super::file::{RegionError, RegionFile};
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
            RegionFile::open_as(&path, Access::Daemon).err().unwrap().to_string(),
            RegionFile::open(&path).err().unwrap().to_string(),
            attach(&path, "x", None).err().unwrap().to_string(),
        ] {
            assert!(e.contains(&path) && e.contains("all zeros") && e.contains("remove it"), "{e}");
        }
        let e = RegionFile::open(&path).err().unwrap();
        assert!(matches!(&e, RegionError::Open(OpenError::NoHeader { path: p }) if *p == path), "{e:?}");
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
        for e in
            [RegionFile::open(&link).err().unwrap().to_string(), attach(&link, "x", None).err().unwrap().to_string()]
        {
            assert!(e.contains(&link) && e.contains("symbolic link"), "{e}");
        }
        let e = attach(&link, "x", None).err().unwrap();
        assert!(matches!(e, AttachError::Region(RegionError::Open(OpenError::RegionSymlink { .. }))), "{e:?}");
        // A symbolic link as the directory is refused too.
        let linked_dir = d.with_extension("dirlink");
        let _ = std::fs::remove_file(&linked_dir);
        std::os::unix::fs::symlink(&d, &linked_dir).unwrap();
        let through = linked_dir.join("r.region").to_string_lossy().into_owned();
        let e = attach(&through, "x", None).err().unwrap();
        let dir_link = matches!(&e, AttachError::Region(RegionError::Dir { source: SecureFsError::DirSymlink { dir }, .. })
            if *dir == linked_dir);
        assert!(dir_link, "{e:?}");
        let e = e.to_string();
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
            let problem = FileProblem::Owner { owner: OTHER, expected: euid() };
            assert!(
                matches!(&e, RegionError::Open(OpenError::RegionPlanted { problem: p, .. }) if *p == problem),
                "{e:?}"
            );
            let e = e.to_string();
            assert!(e.contains(&path) && e.contains(&format!("belongs to uid {OTHER}")), "{e}");
        }
        // Writable by others, even one's own is refused.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = attach(&path, "x", None).err().unwrap().to_string();
        assert!(e.contains(&path) && e.contains("mode 0666"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A joining process named it: it may read it, never write it.
        let (_, writable) = open_region(&path, Access::Joiner, DirKind::Trusted).unwrap();
        assert!(!writable);
        let e = attach(&path, "x", None).err().unwrap();
        assert!(matches!(&e, AttachError::NotFoundReadOnly { name, .. } if name == "x"), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("no vGPU \"x\"") && e.contains("may not change"), "{e}");
        // Nor is a region in a directory of another user, who could replace it, used but by joining processes.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&d, Some(OTHER), None).unwrap();
        assert!(!open_region(&path, Access::Joiner, DirKind::Foreign(OTHER)).unwrap().1, "read, never written");
        std::os::unix::fs::chown(&path, Some(euid()), None).unwrap();
        let e = RegionFile::open_as(&path, Access::Daemon).err().unwrap();
        assert!(matches!(e, RegionError::Open(OpenError::ForeignDir { owner: OTHER, .. })), "{e:?}");
        let e = e.to_string();
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
        let e = file.map_live(3, Some(euid())).unwrap_err().to_string();
        assert!(e.contains(&live) && e.contains(&format!("belongs to uid {OTHER}")), "{e}");
        std::fs::remove_file(&live).unwrap();
        file.map_live(3, Some(euid())).unwrap();
        // A joining process refuses its vGPU's file with another mode, or a second name.
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = open_live(&live, 3, DirKind::Trusted, None).unwrap_err();
        let mode = FileProblem::Mode { mode: 0o644, expected: 0o600 };
        assert!(matches!(&e, OpenError::LivePlanted { problem, .. } if *problem == mode), "{e:?}");
        let e = e.to_string();
        assert!(e.contains(&live) && e.contains("mode 0644"), "{e}");
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&live, d.join("second")).unwrap();
        assert!(open_live(&live, 3, DirKind::Trusted, None).unwrap_err().to_string().contains("2 names"));
        // In the daemon's private directory the daemon replaces what it will not use.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        let file = RegionFile::open_as(&path, Access::Daemon).unwrap();
        file.map_live(3, Some(OTHER)).unwrap();
        let meta = std::fs::metadata(&live).unwrap();
        assert_eq!((meta.uid(), meta.nlink(), meta.mode() & 0o7777), (OTHER, 1, 0o600));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
