//! Creating and opening the files Tessera shares between processes of different users (the region, the
//! vGPUs' live files, the daemon's lock) so that no other user can plant one: nothing is followed through
//! a symbolic link, a file is created only with `O_EXCL` in a directory checked to be safe (its owner
//! ours or root's, writable by nobody else unless sticky), a file that exists is checked by its owner,
//! type, mode and link count before it is used, and a file that must be complete when others first see
//! it is written under a temporary name and linked into place, never replacing anything.

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// This process's effective uid: whose the files it creates are.
pub fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// A user for messages: `uid 998 (tessera-test-b)`, or `uid 998` when the name is not in /etc/passwd.
pub fn describe_user(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|l| {
        let mut fields = l.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then_some(name)
    });
    match name {
        Some(n) => format!("uid {uid} ({n})"),
        None => format!("uid {uid}"),
    }
}

/// What a directory Tessera creates files in may be trusted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirKind {
    /// Ours and writable by nobody else: whatever is in it was put there by this user (or by root), so a
    /// file of the wrong owner in it is a leftover that may be removed.
    Private,
    /// Ours or root's, and either writable by nobody else or sticky (like `/tmp`): other users may add
    /// names but not replace ours, so files are created with `O_EXCL` and existing ones are checked.
    Trusted,
    /// Another user's, writable by nobody else: files in it may be read, but never created.
    Foreign(u32),
}

/// Why a directory or file could not be used or made safely ([`check_dir`], [`ensure_private_dir`],
/// [`create_complete`], [`replace_atomically`]). Each names the directory or file; the messages are the
/// ones people read, the variants what a program decides by.
#[derive(Debug, thiserror::Error)]
pub enum SecureFsError {
    /// The directory could not be looked at (it does not exist, say: see the source's kind).
    #[error("directory {}: {source}", .dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What `lstat` said.
        source: std::io::Error,
    },
    /// The directory is a symbolic link, which another user could point elsewhere.
    #[error(
        "directory {} is a symbolic link: Tessera keeps its files only in a real directory, which another user \
         cannot point elsewhere; name the directory it points to instead",
        .dir.display()
    )]
    DirSymlink {
        /// The link.
        dir: PathBuf,
    },
    /// What should be a directory is not one.
    #[error("{} is not a directory", .dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
    /// The directory may be written by users other than its owner and is not sticky.
    #[error(
        "directory {} (owner {}, mode {mode:04o}) may be written by other users and is not sticky: they could \
         replace Tessera's files in it; use a directory only its owner may write",
        .dir.display(),
        describe_user(*.owner)
    )]
    DirWritable {
        /// The directory.
        dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// Its permission bits (`0o7777` of its mode).
        mode: u32,
    },
    /// The directory could not be created.
    #[error("cannot create directory {}: {source}", .dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What `mkdir` said.
        source: std::io::Error,
    },
    /// The directory is another user's, or writable by others: not this user's private directory.
    #[error(
        "directory {} belongs to {} with mode {mode:04o}, not to this user ({}) and writable only by it: another \
         user may have created it to take Tessera's files over; remove it (as root), or set the path variables \
         to a directory of your own",
        .dir.display(),
        describe_user(*.owner),
        describe_user(*.user)
    )]
    DirNotPrivate {
        /// The directory.
        dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// This process's effective uid, whose it should be.
        user: u32,
    },
    /// No temporary file could be created beside the file being made.
    #[error("{}: cannot create a temporary file beside it: {source}", .path.display())]
    Temporary {
        /// The file being made.
        path: PathBuf,
        /// What creating the temporary file said.
        source: std::io::Error,
    },
    /// The complete file could not be linked into place.
    #[error("{}: cannot link it into place: {source}", .path.display())]
    Link {
        /// The file being made.
        path: PathBuf,
        /// What `link` said.
        source: std::io::Error,
    },
    /// The new content could not be written (or synced).
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        /// The file being replaced.
        path: PathBuf,
        /// What writing it said.
        source: std::io::Error,
    },
    /// The new file could not be renamed over the old one.
    #[error("{}: cannot replace: {source}", .path.display())]
    Replace {
        /// The file being replaced.
        path: PathBuf,
        /// What `rename` said.
        source: std::io::Error,
    },
    /// The directory of the replaced file could not be synced.
    #[error("{}: cannot sync its directory: {source}", .path.display())]
    SyncDir {
        /// The file replaced.
        path: PathBuf,
        /// What opening or syncing its directory said.
        source: std::io::Error,
    },
}

/// Checks the directory `dir` (not followed if it is a symbolic link): refused when it is a symbolic link,
/// not a directory, or writable by users other than its owner without being sticky or root's or ours.
pub fn check_dir(dir: &Path) -> Result<DirKind, SecureFsError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| SecureFsError::Dir { dir: dir.into(), source })?;
    if meta.file_type().is_symlink() {
        return Err(SecureFsError::DirSymlink { dir: dir.into() });
    }
    if !meta.is_dir() {
        return Err(SecureFsError::NotADirectory { dir: dir.into() });
    }
    let mode = meta.mode();
    let others_write = mode & 0o022 != 0;
    let sticky = mode & libc::S_ISVTX != 0;
    let (owner, me) = (meta.uid(), euid());
    match () {
        () if owner == me && !others_write => Ok(DirKind::Private),
        () if (owner == me || owner == 0) && (!others_write || sticky) => Ok(DirKind::Trusted),
        () if !others_write => Ok(DirKind::Foreign(owner)),
        () => Err(SecureFsError::DirWritable { dir: dir.into(), owner, mode: mode & 0o7777 }),
    }
}

/// Creates directory `dir` with `mode` when it is missing (never through a symbolic link) and checks it is
/// [`DirKind::Private`]: ours, not a symbolic link, writable by nobody else. Otherwise an error names it,
/// its owner and its mode.
pub fn ensure_private_dir(dir: &Path, mode: u32) -> Result<(), SecureFsError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(SecureFsError::CreateDir { dir: dir.into(), source }),
    }
    match check_dir(dir)? {
        DirKind::Private => Ok(()),
        _ => {
            let meta =
                std::fs::symlink_metadata(dir).map_err(|source| SecureFsError::Dir { dir: dir.into(), source })?;
            Err(SecureFsError::DirNotPrivate {
                dir: dir.into(),
                owner: meta.uid(),
                mode: meta.mode() & 0o7777,
                user: euid(),
            })
        }
    }
}

/// Opens `path` (read-only, or read and write with `write`) without following a symbolic link and without
/// blocking on a FIFO; close-on-exec.
pub fn open_nofollow(path: &Path, write: bool) -> std::io::Result<File> {
    let access = if write { libc::O_RDWR } else { libc::O_RDONLY };
    open_raw(path, access | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC, 0)
}

/// Creates `path` with exactly `mode` (whatever the umask), failing if anything, even a dangling symbolic
/// link, exists under that name; read and write, close-on-exec.
pub fn create_exclusive(path: &Path, mode: u32) -> std::io::Result<File> {
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let file = open_raw(path, flags, mode)?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(file)
}

fn open_raw(path: &Path, flags: libc::c_int, mode: u32) -> std::io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated path; the returned descriptor, if any, is ours alone.
    let fd = unsafe { libc::open(c.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Reopens `file`, opened at `path` read-only, for reading and writing, checking the name still leads to
/// the same file (none swapped in meanwhile).
pub fn reopen_writable(file: &File, path: &Path) -> std::io::Result<File> {
    let writable = open_nofollow(path, true)?;
    let (a, b) = (file.metadata()?, writable.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(std::io::Error::other("it was replaced while being opened"));
    }
    Ok(writable)
}

/// What is wrong with an existing file for Tessera to use it ([`file_problem`]), shown as the words that
/// follow the file's name in a message: `belongs to uid 998 (b), not to uid 1000 (a)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileProblem {
    /// Not a regular file (a directory, a FIFO, a device...).
    #[error("is not a regular file")]
    NotRegular,
    /// Another user's file.
    #[error("belongs to {}, not to {}", describe_user(*.owner), describe_user(*.expected))]
    Owner {
        /// Its owner's uid.
        owner: u32,
        /// Whose it should be.
        expected: u32,
    },
    /// More than one name: a hard link elsewhere would let its creator reach it.
    #[error("has {links} names (hard links), not one")]
    Links {
        /// How many names it has.
        links: u64,
    },
    /// Another mode.
    #[error("has mode {mode:04o}, not {expected:04o}")]
    Mode {
        /// Its permission bits.
        mode: u32,
        /// The mode it should have.
        expected: u32,
    },
    /// Writable by users other than its owner.
    #[error("may be written by users other than its owner (mode {mode:04o})")]
    WritableByOthers {
        /// Its permission bits.
        mode: u32,
    },
    /// Another user's, neither this process's user nor root, where only theirs will do.
    #[error("belongs to {}, neither this user nor root", describe_user(*.owner))]
    NeitherOwnNorRoot {
        /// Its owner's uid.
        owner: u32,
    },
}

/// What is wrong with an existing file for Tessera to use it as `owner`'s: not a regular file, another
/// owner, more than one name (a hard link elsewhere would let its creator reach it), or a mode other
/// than `mode`. `None` when nothing is.
pub fn file_problem(meta: &Metadata, owner: u32, mode: Option<u32>) -> Option<FileProblem> {
    if !meta.file_type().is_file() {
        return Some(FileProblem::NotRegular);
    }
    if meta.uid() != owner {
        return Some(FileProblem::Owner { owner: meta.uid(), expected: owner });
    }
    if meta.nlink() != 1 {
        return Some(FileProblem::Links { links: meta.nlink() });
    }
    match mode {
        Some(m) if meta.mode() & 0o7777 != m => Some(FileProblem::Mode { mode: meta.mode() & 0o7777, expected: m }),
        _ => None,
    }
}

/// Why [`create_complete`] made no file: creating or linking it failed, or `fill` did.
#[derive(Debug, thiserror::Error)]
pub enum CreateError<E> {
    /// The temporary file could not be created, or linked into place.
    #[error(transparent)]
    Fs(#[from] SecureFsError),
    /// What `fill` returned, as it returned it.
    #[error("{0}")]
    Fill(E),
}

impl<E: From<SecureFsError>> CreateError<E> {
    /// The error as `fill`'s type, which can hold a [`SecureFsError`] too.
    pub fn into_inner(self) -> E {
        match self {
            CreateError::Fs(e) => e.into(),
            CreateError::Fill(e) => e,
        }
    }
}

/// Creates `path` with `mode` complete: `fill` writes it under a temporary name (created `O_EXCL` beside
/// it), which is then hard-linked to `path` (never replacing a file there) and removed. `Ok(None)` when
/// `path` appeared meanwhile (another process created it first); errors of its own name `path`, and
/// `fill`'s are returned as they are ([`CreateError::Fill`]).
pub fn create_complete<E>(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&File) -> Result<(), E>,
) -> Result<Option<File>, CreateError<E>> {
    let (temp, file) =
        create_temporary(path, mode).map_err(|source| SecureFsError::Temporary { path: path.into(), source })?;
    let linked = fill(&file).map_err(CreateError::Fill).and_then(|()| match std::fs::hard_link(&temp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(SecureFsError::Link { path: path.into(), source }.into()),
    });
    let _ = std::fs::remove_file(&temp);
    Ok(linked?.then_some(file))
}

/// A new file beside `path`, named after it and this process, created `O_EXCL` (another name is tried if a
/// dead process of the same pid, or another user, left one).
fn create_temporary(path: &Path, mode: u32) -> std::io::Result<(std::path::PathBuf, File)> {
    let mut attempt = 0u32;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".new-{}-{attempt}", std::process::id()));
        let temp = std::path::PathBuf::from(name);
        match create_exclusive(&temp, mode) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Replaces `path` with `bytes` atomically: they are written to a temporary file created `O_EXCL` (never
/// following a link) beside it with `mode`, synced, renamed over `path`, and the directory is synced, so
/// a process killed at any moment leaves the old file or the new one, never a mix. Errors name `path`.
pub fn replace_atomically(path: &Path, mode: u32, bytes: &[u8]) -> Result<(), SecureFsError> {
    replace(path, mode, bytes, true)
}

/// [`replace_atomically`] without waiting for the disk: a process killed at any moment leaves the old file
/// or the new one, but a machine that stops may lose the change (for records that do not outlive the
/// machine's processes, so that no request waits for an `fsync`).
pub fn replace_unsynced(path: &Path, mode: u32, bytes: &[u8]) -> Result<(), SecureFsError> {
    replace(path, mode, bytes, false)
}

fn replace(path: &Path, mode: u32, bytes: &[u8], durable: bool) -> Result<(), SecureFsError> {
    use std::io::Write;
    let (temp, mut file) =
        create_temporary(path, mode).map_err(|source| SecureFsError::Temporary { path: path.into(), source })?;
    if let Err(source) = file.write_all(bytes).and_then(|()| if durable { file.sync_all() } else { Ok(()) }) {
        let _ = std::fs::remove_file(&temp);
        return Err(SecureFsError::Write { path: path.into(), source });
    }
    std::fs::rename(&temp, path).map_err(|source| {
        let _ = std::fs::remove_file(&temp);
        SecureFsError::Replace { path: path.into(), source }
    })?;
    if !durable {
        return Ok(());
    }
    // The rename itself is durable once the directory is. A bare file name's parent is "" (the current
    // directory), which cannot be opened by that name.
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| SecureFsError::SyncDir { path: path.into(), source })?;
    Ok(())
}

/// The name of the extended attribute holding a file's POSIX access ACL.
const ACL_XATTR: &[u8] = b"system.posix_acl_access\0";

/// Makes `file` readable and writable by its owner, readable by exactly the users `readers` (others than
/// the owner; each once) and by nobody else: mode 0600 with no ACL when there are none, else a POSIX access
/// ACL (`user::rw-`, `user:UID:r--` each, `group::---`, `mask::r--`, `other::---`, the kernel's binary form
/// of `system.posix_acl_access`). An error of kind `Unsupported` when the file system keeps no ACLs.
pub fn set_readers(file: &File, readers: &[u32]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let owner = file.metadata()?.uid();
    let mut users: Vec<u32> = readers.iter().copied().filter(|&u| u != owner).collect();
    users.sort_unstable();
    users.dedup();
    if users.is_empty() {
        // SAFETY: a NUL-terminated attribute name and a valid open descriptor.
        if unsafe { libc::fremovexattr(file.as_raw_fd(), ACL_XATTR.as_ptr().cast()) } != 0 {
            let e = std::io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) {
                return Err(e);
            }
        }
        return file.set_permissions(std::fs::Permissions::from_mode(0o600));
    }
    // Tags and permissions of <linux/posix_acl_xattr.h> and <linux/posix_acl.h>.
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const NONE: u16 = 0;
    const READ: u16 = 4;
    const READ_WRITE: u16 = 6;
    // Entries sorted by tag, then by id, as the kernel requires; only named users carry an id.
    let mut entries = vec![(USER_OBJ, READ_WRITE, u32::MAX)];
    entries.extend(users.iter().map(|&uid| (USER, READ, uid)));
    entries.extend([(GROUP_OBJ, NONE, u32::MAX), (MASK, READ, u32::MAX), (OTHER, NONE, u32::MAX)]);
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    // SAFETY: a NUL-terminated name, a buffer of `acl.len()` bytes and a valid open descriptor.
    let set =
        unsafe { libc::fsetxattr(file.as_raw_fd(), ACL_XATTR.as_ptr().cast(), acl.as_ptr().cast(), acl.len(), 0) };
    match set {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                Err(std::io::Error::new(std::io::ErrorKind::Unsupported, e))
            }
            e => Err(e),
        },
    }
}

/// The pid holding an exclusive `flock` on `file`, from `/proc/locks` ([`crate::flock::holders`]: the
/// kernel's record, which no user can forge), when it is found and the process still exists.
pub fn flock_holder(file: &File) -> Option<u32> {
    let holders = crate::flock::holders(file)?;
    holders.iter().find(|h| h.exclusive && Path::new(&format!("/proc/{}", h.pid)).exists()).map(|h| h.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-securefs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn directories_are_classified_and_symbolic_links_refused() {
        let d = scratch("dirs");
        ensure_private_dir(&d, 0o711).unwrap();
        assert_eq!(std::fs::symlink_metadata(&d).unwrap().mode() & 0o7777, 0o711);
        assert!(matches!(check_dir(&d), Ok(DirKind::Private)));
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = ensure_private_dir(&link, 0o711).unwrap_err();
        assert!(matches!(&e, SecureFsError::DirSymlink { dir } if *dir == link), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("symbolic link") && e.contains(link.to_str().unwrap()), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_dir(&d).unwrap_err();
        assert!(matches!(e, SecureFsError::DirWritable { mode: 0o777, .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("not sticky") && e.contains("0777"), "{e}");
        let e = ensure_private_dir(&d, 0o711).unwrap_err().to_string();
        assert!(e.contains("not sticky"), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(check_dir(&d), Ok(DirKind::Trusted)));
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_are_created_complete_and_never_replaced() {
        let d = scratch("create");
        ensure_private_dir(&d, 0o700).unwrap();
        let path = d.join("f");
        let made =
            create_complete(&path, 0o644, |f| std::io::Write::write_all(&mut &*f, b"whole").map_err(|e| e.to_string()));
        let file = made.unwrap().expect("created");
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert_eq!(file_problem(&file.metadata().unwrap(), euid(), Some(0o644)), None);
        let again =
            create_complete(&path, 0o644, |f| std::io::Write::write_all(&mut &*f, b"other").map_err(|e| e.to_string()));
        assert!(again.unwrap().is_none(), "an existing file is never replaced");
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1, "no temporary file is left");
        // A symbolic link is neither followed nor replaced.
        let link = d.join("l");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(open_nofollow(&link, false).unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(create_exclusive(&link, 0o600).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
        // A second name is a problem, as another owner or mode is.
        std::fs::hard_link(&path, d.join("h")).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(file_problem(&meta, euid(), None), Some(FileProblem::Links { links: 2 }));
        assert!(file_problem(&meta, euid(), None).unwrap().to_string().contains("2 names"));
        let other = file_problem(&meta, euid() + 1, None).unwrap();
        assert_eq!(other, FileProblem::Owner { owner: euid(), expected: euid() + 1 });
        assert!(other.to_string().contains("belongs to"));
        std::fs::remove_file(d.join("h")).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let mode = file_problem(&meta, euid(), Some(0o600)).unwrap();
        assert_eq!(mode, FileProblem::Mode { mode: 0o644, expected: 0o600 });
        assert_eq!(mode.to_string(), "has mode 0644, not 0600");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_holder_of_a_lock_is_read_from_the_kernel() {
        let d = scratch("lock");
        ensure_private_dir(&d, 0o700).unwrap();
        let file = create_exclusive(&d.join("lock"), 0o600).unwrap();
        assert_eq!(flock_holder(&file), None);
        let _held = crate::flock::FileLock::new(&file).unwrap();
        assert_eq!(flock_holder(&file), Some(std::process::id()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn readers_are_granted_by_acl_and_taken_back() {
        let d = scratch("acl");
        ensure_private_dir(&d, 0o700).unwrap();
        let file = create_exclusive(&d.join("r"), 0o600).unwrap();
        let acl_size = || {
            use std::os::fd::AsRawFd;
            // SAFETY: a NUL-terminated name, no buffer (asks for the size), a valid descriptor.
            unsafe { libc::fgetxattr(file.as_raw_fd(), ACL_XATTR.as_ptr().cast(), std::ptr::null_mut(), 0) }
        };
        let mode = || file.metadata().unwrap().mode() & 0o7777;
        match set_readers(&file, &[65534, 65533, 65534, euid()]) {
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                eprintln!("no ACLs in {}: not checked", d.display());
            }
            r => {
                r.unwrap();
                // Version, then owner, two named users, group, mask, other: 6 entries of 8 bytes.
                assert_eq!(acl_size(), 4 + 6 * 8);
                assert_eq!(mode(), 0o640, "the group bits show the mask: read");
            }
        }
        set_readers(&file, &[euid()]).unwrap();
        assert_eq!((acl_size(), mode()), (-1, 0o600));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
