//! A managed vGPU's configuration (its name, quota, share and flags: [`VgpuConfig`]) in a file of its own,
//! so that only the users who need it can read it. The region file must be readable by every user with a
//! `--user` vGPU (its tenants read the daemon's record and the devices' scheduling state), so it must not
//! hold the names and settings of the vGPUs of other users.
//!
//! - The daemon creates slot `index`'s file ([`conf_path`]) complete, owned by itself, mode 0600, readable
//!   through a POSIX ACL by the vGPU's user alone ([`crate::secure_fs::set_readers`]; a file system
//!   without ACLs is refused, naming the file), and maps it over the slot's [`VgpuConfig`] area of its
//!   mapping. It ends with a trailer: [`CONF_MAGIC`], [`VERSION`] and the slot.
//! - In the region file itself the slot's area then holds a placeholder ([`hide`]): ready, managed, named
//!   [`HIDDEN_NAME`] (bytes no name can be) and without limits, so that a process that cannot read the
//!   file neither finds the vGPU by name nor takes its slot for another vGPU.
//! - Every process that maps the region maps, over each slot the region file shows hidden, that slot's
//!   file if it may read it ([`overlay_confs`]): the daemon's own user's processes all of them, a tenant
//!   of a `--user` vGPU its own vGPU's alone. A file that is not the region owner's, is writable by other
//!   users, has other names or a wrong trailer is never mapped.

use super::file::overlay;
use super::layout::{AREA, CONF_MAGIC, CONF_TRAILER_LEN, HIDDEN_NAME, MAX_VGPUS, Region, VERSION, VgpuConfig};
use super::layout::{config_offset, flags, state};
use crate::secure_fs::set_readers;
use crate::secure_fs::{CreateError, DirKind, SecureFsError, create_complete, euid, file_problem, open_nofollow};
use std::collections::BTreeMap;
use std::fs::File;
use std::mem::offset_of;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::Ordering;

/// The configuration file of slot `index` of the region at `region`.
pub fn conf_path(region: &str, index: usize) -> String {
    format!("{region}.conf{index:02}")
}

/// Whether `c`, a slot's area as the region file itself holds it, is the placeholder of a managed vGPU
/// whose configuration is in a file of its own.
pub fn is_hidden(c: &VgpuConfig) -> bool {
    c.state.load(Ordering::Acquire) == state::READY
        && c.flags.load(Ordering::Acquire) & flags::MANAGED != 0
        && c.name == HIDDEN_NAME
}

/// Writes the placeholder into slot `index`'s configuration area of the region file `region` (through the
/// file: the daemon's mapping shows the configuration file there).
pub fn hide(region: &File, index: usize) -> std::io::Result<()> {
    let mut image = vec![0u8; std::mem::size_of::<VgpuConfig>()];
    let mut put = |at: usize, bytes: &[u8]| image[at..at + bytes.len()].copy_from_slice(bytes);
    put(offset_of!(VgpuConfig, state), &state::READY.to_le_bytes());
    put(offset_of!(VgpuConfig, name), &HIDDEN_NAME);
    put(offset_of!(VgpuConfig, flags), &flags::MANAGED.to_le_bytes());
    region.write_all_at(&image, config_offset(index) as u64)
}

/// The bytes of configuration `c`, as a file or the region holds them.
pub fn bytes_of(c: &VgpuConfig) -> &[u8] {
    // SAFETY: `VgpuConfig` is plain old data (integers and atomics) of fewer than AREA bytes; read as bytes.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(c).cast::<u8>(), std::mem::size_of::<VgpuConfig>()) }
}

/// The bytes of a configuration file of slot `index` holding `from`: the structure, then zeros, then the
/// trailer.
fn image(from: &VgpuConfig, index: usize) -> Vec<u8> {
    let mut image = bytes_of(from).to_vec();
    image.resize(AREA, 0);
    image[AREA - CONF_TRAILER_LEN..].copy_from_slice(&image_trailer(index));
    image
}

/// Why a managed vGPU's configuration file could not be made or shared ([`create`], [`set_reader`]).
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// The file's file system keeps no POSIX ACLs, so the file cannot be made readable by one more user.
    #[error(
        "{path}: its file system keeps no POSIX ACLs, so it cannot be made readable by uid {uid} alone; keep the \
         region on a file system that has them (tmpfs, as /dev/shm, does)"
    )]
    NoAcl {
        /// The configuration file.
        path: String,
        /// The user who was to read it (0 for none).
        uid: u32,
    },
    /// Setting the file's readers failed otherwise.
    #[error("{path}: cannot let uid {uid} read it: {source}")]
    Reader {
        /// The configuration file.
        path: String,
        /// The user who was to read it (0 for none).
        uid: u32,
        /// What setting its ACL said.
        source: std::io::Error,
    },
    /// Creating the file failed ([`crate::secure_fs::create_complete`]).
    #[error(transparent)]
    Create(#[from] SecureFsError),
    /// The new file's content could not be written.
    #[error("cannot write it: {source}")]
    Write {
        /// What writing it said.
        source: std::io::Error,
    },
    /// A file left at its path in the daemon's private directory could not be removed.
    #[error("{path}: cannot remove a leftover: {source}")]
    RemoveLeftover {
        /// The configuration file.
        path: String,
        /// What removing it said.
        source: std::io::Error,
    },
    /// A file is at its path already, in a directory other users may write: it is not replaced.
    #[error("{path} exists already, in a directory other users may write; remove it (as root) and retry")]
    Exists {
        /// The configuration file.
        path: String,
    },
    /// Other processes kept creating a file at its path first.
    #[error("{path} kept being created by another process; retry")]
    KeptCreated {
        /// The configuration file.
        path: String,
    },
}

/// Lets `reader` (besides the file's owner) read the configuration file `file` at `path`, and nobody else.
pub fn set_reader(file: &File, path: &str, reader: Option<u32>) -> Result<(), ConfError> {
    let readers: Vec<u32> = reader.into_iter().collect();
    let (path, uid) = (path.to_string(), reader.unwrap_or_default());
    set_readers(file, &readers).map_err(|source| match source.kind() {
        std::io::ErrorKind::Unsupported => ConfError::NoAcl { path, uid },
        _ => ConfError::Reader { path, uid, source },
    })
}

/// Creates the configuration file of slot `index` (at `path`, in a directory of kind `dir`) holding `from`,
/// owned by this user and readable by `reader` too; read and written. A file left at `path` (a daemon
/// stopped between creating one and removing it) is replaced in the daemon's private directory.
pub fn create(
    path: &str,
    index: usize,
    dir: DirKind,
    from: &VgpuConfig,
    reader: Option<u32>,
) -> Result<File, ConfError> {
    let p = Path::new(path);
    for _ in 0..3 {
        let fill = |f: &File| f.write_all_at(&image(from, index), 0).map_err(|source| ConfError::Write { source });
        match create_complete(p, 0o600, fill).map_err(CreateError::into_inner)? {
            Some(file) => {
                if let Err(e) = set_reader(&file, path, reader) {
                    let _ = std::fs::remove_file(p);
                    return Err(e);
                }
                return Ok(file);
            }
            None if dir == DirKind::Private => {
                std::fs::remove_file(p)
                    .map_err(|source| ConfError::RemoveLeftover { path: path.to_string(), source })?;
            }
            None => return Err(ConfError::Exists { path: path.to_string() }),
        }
    }
    Err(ConfError::KeptCreated { path: path.to_string() })
}

/// Opens slot `index`'s configuration file at `path` if this process may read it (and write it, with
/// `write`) and it is fit to map: a regular file of `owner` (the region file's) with one name, writable by
/// nobody else, of [`AREA`] bytes, with the trailer of slot `index` of this version. `None` otherwise.
pub fn open(path: &str, index: usize, owner: u32, write: bool) -> Option<File> {
    let file = open_nofollow(Path::new(path), write).ok()?;
    let meta = file.metadata().ok()?;
    if file_problem(&meta, owner, None).is_some() || meta.mode() & 0o022 != 0 || meta.len() != AREA as u64 {
        return None;
    }
    let mut trailer = [0u8; CONF_TRAILER_LEN];
    file.read_exact_at(&mut trailer, (AREA - CONF_TRAILER_LEN) as u64).ok()?;
    (trailer == image_trailer(index)).then_some(file)
}

/// The trailer of slot `index`'s file.
fn image_trailer(index: usize) -> [u8; CONF_TRAILER_LEN] {
    let mut t = [0u8; CONF_TRAILER_LEN];
    t[..8].copy_from_slice(&CONF_MAGIC.to_le_bytes());
    t[8..12].copy_from_slice(&VERSION.to_le_bytes());
    t[12..16].copy_from_slice(&(index as u32).to_le_bytes());
    t
}

/// Brings the configuration files mapped in the whole-region mapping at `base` (of `region`, the region
/// file at `path`, owned by `owner`, mapped with `region_prot`) up to date: each slot the region file shows
/// hidden gets its file mapped over it with `prot` when this process may read it (writable files with
/// `PROT_WRITE` in `prot`); a file mapped before that was removed or replaced since gives way to the region
/// file's own area (mapped with `region_prot` again), then to what is there now. `known` holds, per slot,
/// the inode of the file mapped there; it is kept up to date.
///
/// # Safety
/// `base` is a whole-region mapping of `region` the caller owns; nothing may hold a non-atomic reference
/// into any configuration area.
pub(super) unsafe fn overlay_confs(
    base: *mut Region,
    region: &File,
    path: &str,
    owner: u32,
    (region_prot, prot): (libc::c_int, libc::c_int),
    known: &mut BTreeMap<usize, u64>,
) {
    let write = prot & libc::PROT_WRITE != 0;
    for index in 0..MAX_VGPUS {
        let at = conf_path(path, index);
        // Only a file mapped already is looked at by name; any other slot only when the region hides it.
        if let Some(&ino) = known.get(&index) {
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.ino() == ino) {
                continue;
            }
            // Removed or replaced: the region file's own area first, then whatever the slot is now.
            // SAFETY: per the contract; the region file has LAYOUT_SIZE bytes.
            if unsafe { overlay(base, config_offset(index), region, region_prot, config_offset(index)) }.is_err() {
                continue;
            }
            known.remove(&index);
        }
        // SAFETY: the area lies in the caller's mapping; only atomics and bytes are read.
        if !is_hidden(unsafe { &(*base).vgpus[index].config }) {
            continue;
        }
        let Some(file) = open(&at, index, owner, write) else { continue };
        let Ok(meta) = file.metadata() else { continue };
        // SAFETY: per the contract; the file has AREA bytes.
        if unsafe { overlay(base, config_offset(index), &file, prot, 0) }.is_ok() {
            known.insert(index, meta.ino());
        }
    }
}

/// The user who owns the daemon's files: this process's when it created `region`.
pub fn owner_of(region: &File) -> u32 {
    region.metadata().map_or_else(|_| euid(), |m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_names_the_slot_and_version_and_no_name_is_the_placeholders() {
        // SAFETY: VgpuConfig is integers and atomics, valid when zero.
        let c: VgpuConfig = unsafe { std::mem::zeroed() };
        let img = image(&c, 7);
        assert_eq!(img.len(), AREA);
        assert_eq!(img[AREA - CONF_TRAILER_LEN..], image_trailer(7));
        assert_ne!(image_trailer(7), image_trailer(8));
        assert!(!is_hidden(&c), "a free slot is not hidden");
        assert!(std::str::from_utf8(&HIDDEN_NAME).is_err(), "no vGPU name (text) can be the placeholder's");
    }
}
