//! Where `tessera` finds its libraries: `libtessera.so` and the simulated GPU's libraries, always together
//! in one folder. This module alone decides it, for every command (`run`, `info`, `daemon`, `simgpu`,
//! the demo). The folder is `TESSERA_LIB_DIR` when set (and nothing else, so a wrong value is an error,
//! not a silent fallback), else the first of these, relative to the running executable:
//!
//! - `<exe dir>/../lib/tessera`: an installed `tessera` (`tools/install.sh`: `PREFIX/bin/tessera`);
//! - `<exe dir>`: the build tree (`target/release/tessera`);
//! - `<exe dir>/..`: test programs of the build tree (`target/release/deps/...`).
//!
//! A library loaded into another program (the cluster provider, `libaccelerator_tessera.so`, inside a
//! hypervisor) is not beside that program: it calls [`anchor_at`] with its own file once, and the
//! folders are then tried relative to that file instead of the executable.

use crate::simgpu_dir::{DRIVER_FILE, NVML_FILE};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// File name of the shim.
pub const SHIM: &str = "libtessera.so";

/// The files a library folder must hold (the simulated cuBLAS is optional: only programs that load
/// cuBLAS need it).
const REQUIRED: [&str; 3] = [SHIM, DRIVER_FILE, NVML_FILE];

/// The folder below the installation prefix that holds the libraries (`PREFIX/lib/tessera`).
pub const INSTALLED: &str = "lib/tessera";

/// The file the folders are found from instead of the executable (see [`anchor_at`]).
static ANCHOR: OnceLock<PathBuf> = OnceLock::new();

/// Finds the library folder from `file` (a library's own path) rather than from the running executable,
/// for the rest of the process; the first call wins.
pub fn anchor_at(file: PathBuf) {
    let _ = ANCHOR.set(file);
}

/// Why the library folder is not found.
#[derive(Debug, thiserror::Error)]
pub enum LibDirError {
    /// The running executable's path is unknown (`/proc/self/exe`), so there is nothing to look beside.
    #[error("cannot locate the tessera executable: {0}")]
    NoExecutable(#[source] std::io::Error),
    /// `TESSERA_LIB_DIR` is set but empty.
    #[error("TESSERA_LIB_DIR is empty; give the folder holding libtessera.so or unset it")]
    OverrideEmpty,
    /// The folder `TESSERA_LIB_DIR` names lacks some of the libraries.
    #[error(
        "TESSERA_LIB_DIR={} lacks {}; point it at the folder holding {} (an install's lib/tessera, or \
         target/release after `cargo build --release`), or unset it",
        .dir.display(),
        .lacking.join(", "),
        REQUIRED.join(", ")
    )]
    OverrideIncomplete {
        /// The folder `TESSERA_LIB_DIR` names.
        dir: PathBuf,
        /// The files it lacks.
        lacking: Vec<&'static str>,
    },
    /// No folder tried holds all the libraries (without `TESSERA_LIB_DIR`).
    #[error(
        "{} not found together in any of {}; install Tessera with tools/install.sh, build it with `cargo \
         build --release --workspace`, or set TESSERA_LIB_DIR",
        REQUIRED.join(", "),
        .tried.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFound {
        /// The folders looked in, in order.
        tried: Vec<PathBuf>,
    },
    /// The folder found has no absolute path (`canonicalize` failed).
    #[error("{}: {source}", .dir.display())]
    Unresolved {
        /// The folder found.
        dir: PathBuf,
        /// Why its absolute path is unknown.
        #[source]
        source: std::io::Error,
    },
    /// The simulated GPU's folder of links (`<lib dir>/simgpu`) cannot be created or refreshed.
    #[error("cannot create {}/simgpu: {source}", .dir.display())]
    SimgpuFolder {
        /// The library folder.
        dir: PathBuf,
        /// Why the folder or a link in it cannot be made.
        #[source]
        source: std::io::Error,
    },
}

/// The library folder of this `tessera`, as an absolute path; see the module documentation.
pub fn lib_dir() -> Result<PathBuf, LibDirError> {
    let exe = match ANCHOR.get() {
        Some(file) => file.clone(),
        None => std::env::current_exe().map_err(LibDirError::NoExecutable)?,
    };
    find(&exe, std::env::var_os("TESSERA_LIB_DIR"))
}

/// `libtessera.so` in [`lib_dir`].
pub fn shim() -> Result<PathBuf, LibDirError> {
    Ok(lib_dir()?.join(SHIM))
}

/// The folder of links that makes programs load the simulated GPU (`<lib dir>/simgpu`, see
/// [`crate::simgpu_dir`]), created or refreshed if needed (an install creates it, so a read-only system install works).
pub fn simgpu_folder() -> Result<PathBuf, LibDirError> {
    let dir = lib_dir()?;
    crate::simgpu_dir::prepare(&dir).map_err(|source| LibDirError::SimgpuFolder { dir, source })
}

/// The folders tried for executable `exe`, in order, without an override.
fn candidates(exe: &Path) -> Vec<PathBuf> {
    let Some(bin) = exe.parent() else { return Vec::new() };
    let mut list = vec![bin.join("..").join(INSTALLED), bin.to_path_buf()];
    list.extend(bin.parent().map(Path::to_path_buf));
    list
}

/// The files of [`REQUIRED`] that `dir` lacks.
fn missing(dir: &Path) -> Vec<&'static str> {
    REQUIRED.into_iter().filter(|f| !dir.join(f).is_file()).collect()
}

/// The library folder for executable `exe`, with `override_dir` the value of `TESSERA_LIB_DIR`.
fn find(exe: &Path, override_dir: Option<OsString>) -> Result<PathBuf, LibDirError> {
    let absolute =
        |dir: &Path| dir.canonicalize().map_err(|source| LibDirError::Unresolved { dir: dir.to_path_buf(), source });
    if let Some(dir) = override_dir {
        if dir.is_empty() {
            return Err(LibDirError::OverrideEmpty);
        }
        let dir = PathBuf::from(dir);
        return match missing(&dir) {
            lacking if lacking.is_empty() => absolute(&dir),
            lacking => Err(LibDirError::OverrideIncomplete { dir, lacking }),
        };
    }
    let tried = candidates(exe);
    match tried.iter().find(|d| missing(d).is_empty()) {
        Some(dir) => absolute(dir),
        None => Err(LibDirError::NotFound { tried }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh temporary directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-lib-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn put_libraries(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        for f in REQUIRED {
            std::fs::write(dir.join(f), b"").unwrap();
        }
    }

    #[test]
    fn an_installed_tessera_finds_lib_tessera_beside_its_bin() {
        let root = scratch("installed");
        put_libraries(&root.join("lib/tessera"));
        std::fs::create_dir_all(root.join("bin")).unwrap();
        let found = find(&root.join("bin/tessera"), None).unwrap();
        assert_eq!(found, root.join("lib/tessera").canonicalize().unwrap());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_build_tree_and_its_test_programs_find_target_release() {
        let root = scratch("build");
        put_libraries(&root);
        std::fs::create_dir_all(root.join("deps")).unwrap();
        assert_eq!(find(&root.join("tessera"), None).unwrap(), root.canonicalize().unwrap());
        assert_eq!(find(&root.join("deps/probe-1234"), None).unwrap(), root.canonicalize().unwrap());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn the_override_wins_and_a_wrong_one_is_an_error_naming_it() {
        let root = scratch("override");
        put_libraries(&root.join("lib/tessera"));
        put_libraries(&root.join("elsewhere"));
        let exe = root.join("bin/tessera");
        let found = find(&exe, Some(root.join("elsewhere").into())).unwrap();
        assert_eq!(found, root.join("elsewhere").canonicalize().unwrap());
        let e = find(&exe, Some(root.join("bin").into())).unwrap_err();
        assert!(
            matches!(&e, LibDirError::OverrideIncomplete { dir, lacking } if *dir == root.join("bin") && *lacking == REQUIRED),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "TESSERA_LIB_DIR={} lacks libtessera.so, libsimcuda.so, libsimnvml.so; point it at the folder holding \
                 libtessera.so, libsimcuda.so, libsimnvml.so (an install's lib/tessera, or target/release after \
                 `cargo build --release`), or unset it",
                root.join("bin").display()
            )
        );
        let e = find(&exe, Some("".into())).unwrap_err();
        assert!(matches!(e, LibDirError::OverrideEmpty), "{e:?}");
        assert_eq!(e.to_string(), "TESSERA_LIB_DIR is empty; give the folder holding libtessera.so or unset it");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn not_found_names_every_folder_tried() {
        let root = scratch("missing");
        std::fs::write(root.join(SHIM), b"").unwrap(); // the shim alone is not enough
        let e = find(&root.join("bin/tessera"), None).unwrap_err();
        let LibDirError::NotFound { tried } = &e else { panic!("{e:?}") };
        assert_eq!(*tried, candidates(&root.join("bin/tessera")));
        let text = e.to_string();
        for tried in tried {
            assert!(text.contains(&tried.display().to_string()), "{text}");
        }
        assert!(
            text.starts_with("libtessera.so, libsimcuda.so, libsimnvml.so not found together in any of "),
            "{text}"
        );
        assert!(text.contains("install.sh") && text.contains("TESSERA_LIB_DIR"), "{text}");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn a_folder_that_does_not_resolve_and_a_simgpu_folder_that_cannot_be_made_name_their_path() {
        let e = LibDirError::Unresolved {
            dir: "/nonexistent/lib".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert!(e.to_string().starts_with("/nonexistent/lib: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let e = LibDirError::SimgpuFolder {
            dir: "/usr/lib/tessera".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(e.to_string().starts_with("cannot create /usr/lib/tessera/simgpu: "), "{e}");
    }
}
