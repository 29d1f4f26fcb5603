//! The host's sysfs: where it is, reading its attributes and links, and [`write_attr`], the ONE place
//! Tessera writes to it (every bind, unbind, override, probe, mdev create and remove goes through it).

use crate::{Error, ErrorCode};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The variable naming sysfs's root (tests point it at a simulated tree).
pub const ROOT_VAR: &str = "TESSERA_SYSFS_ROOT";

/// A sysfs tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The tree at [`ROOT_VAR`] (default `/sys`); an empty or relative value is an error naming it.
    pub fn from_env() -> Result<Sysfs, Error> {
        Sysfs::from_value(std::env::var_os(ROOT_VAR))
    }

    /// The tree named by `value`, the value of [`ROOT_VAR`] (`None`: unset, `/sys`).
    pub fn from_value(value: Option<std::ffi::OsString>) -> Result<Sysfs, Error> {
        match value {
            None => Ok(Sysfs::at("/sys")),
            Some(v) if Path::new(&v).is_absolute() => Ok(Sysfs::at(v)),
            Some(v) => Err(Error::new(
                ErrorCode::Invalid,
                format!("{ROOT_VAR}={:?} is not an absolute path (it names the sysfs root, normally /sys)", v),
            )),
        }
    }

    /// The tree rooted at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// Its root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (e.g. `bus/pci/devices`) under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The PCI device directory of `address` (through `bus/pci/devices`).
    pub fn pci_device(&self, address: &str) -> PathBuf {
        self.path("bus/pci/devices").join(address)
    }

    /// The directory of PCI driver `driver`.
    pub fn pci_driver(&self, driver: &str) -> PathBuf {
        self.path("bus/pci/drivers").join(driver)
    }

    /// Names in directory `dir`, sorted (none when it does not exist).
    pub fn names(&self, dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// An attribute's text without its trailing newline (`None` when it cannot be read).
pub fn read(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    Some(String::from_utf8_lossy(&bytes).trim_end_matches(['\n', '\0']).trim().to_string())
}

/// A hexadecimal attribute (`0x10de`).
pub fn read_hex(path: &Path) -> Option<u32> {
    let text = read(path)?;
    u32::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

/// The last component of where link `path` points (`nvidia` for `driver -> ../../bus/pci/drivers/nvidia`).
pub fn link_name(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// Whether this process may write `path` (`access(W_OK)`: the check the preflights make).
pub fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Writes `value` to attribute `path` as the kernel expects: the file is opened for writing only (never
/// created or truncated: sysfs has neither, and on a plain tree creating would invent a file where the
/// kernel answers ENOENT) and `value` is written whole with ONE `write(2)`. The error names the path,
/// the value and the errno; EACCES and EPERM say root is needed.
pub fn write_attr(path: &Path, value: &str) -> Result<(), Error> {
    let fail = |e: std::io::Error| {
        let errno = e.raw_os_error().unwrap_or(0);
        let name = errno_name(errno);
        let (code, hint) = match errno {
            libc::EACCES | libc::EPERM => (ErrorCode::PermissionDenied, " (needs root)"),
            libc::EBUSY => (ErrorCode::InUse, ""),
            libc::ENOENT | libc::ENODEV => (ErrorCode::NotFound, ""),
            libc::EINVAL | libc::EEXIST | libc::EUSERS => (ErrorCode::Invalid, ""),
            _ => (ErrorCode::Unavailable, ""),
        };
        Error::new(code, format!("writing {:?} to {}: {e} ({name}){hint}", value, path.display()))
    };
    let mut file = std::fs::OpenOptions::new().write(true).open(path).map_err(fail)?;
    let n = file.write(value.as_bytes()).map_err(fail)?;
    if n != value.len() {
        return Err(Error::new(
            ErrorCode::Unavailable,
            format!("writing {:?} to {}: the kernel took {n} of {} bytes", value, path.display(), value.len()),
        ));
    }
    Ok(())
}

/// The symbolic name of an errno the kernel answers sysfs writes with.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ENODEV => "ENODEV",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::EEXIST => "EEXIST",
        libc::EUSERS => "EUSERS",
        libc::EIO => "EIO",
        libc::ENOSPC => "ENOSPC",
        _ => "errno",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_attr_never_creates_and_names_path_value_and_errno() {
        let dir = std::env::temp_dir().join(format!("tessera-sysfs-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("bind");
        let e = write_attr(&missing, "0000:10:00.0").unwrap_err();
        assert!(e.message.contains("ENOENT") && e.message.contains("0000:10:00.0"), "{e}");
        assert!(!missing.exists(), "never created");
        std::fs::write(&missing, "").unwrap();
        write_attr(&missing, "vfio-pci").unwrap();
        assert_eq!(read(&missing).as_deref(), Some("vfio-pci"));
        assert!(writable(&missing));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_root_must_be_absolute() {
        let e = Sysfs::from_value(Some("relative/sys".into())).unwrap_err();
        assert!(e.message.contains(ROOT_VAR) && e.message.contains("absolute"), "{e}");
        assert!(Sysfs::from_value(Some("".into())).is_err());
        assert_eq!(Sysfs::from_value(None).unwrap().root(), Path::new("/sys"));
        assert_eq!(Sysfs::from_value(Some("/tmp/x".into())).unwrap().root(), Path::new("/tmp/x"));
    }
}
