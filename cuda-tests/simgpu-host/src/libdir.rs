//! The folder that makes any program load the simulated GPU: `libcuda.so.1` and `libnvidia-ml.so.1`
//! (plus the unversioned names linkers look for), pointing at the libraries cargo built. Its layout (the
//! files, the links, [`prepare`]) is the library folder's, `tessera_host::simgpu_dir`, re-exported here;
//! this module adds what only simulated programs and the tests need: their environment, and the build
//! folder.

use std::io;
use std::path::{Path, PathBuf};
pub use tessera_host::simgpu_dir::{CUBLAS_FILE, DRIVER_FILE, FOLDER, NVML_FILE, prepare};

/// Finds the folder holding the built libraries, for the tests and benchmarks: `TESSERA_LIB_DIR` if set,
/// else beside `exe` or in its parent (test binaries live in `target/<profile>/deps`), else
/// `../lib/tessera` beside it (the layout `tools/install.sh` makes). The `tessera` command decides with
/// its own `lib_dir` module, which also requires `libtessera.so` there.
pub fn find_build_dir(exe: &Path) -> io::Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("TESSERA_LIB_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    if let Some(dir) = exe.parent() {
        candidates.push(dir.to_path_buf());
        if let Some(up) = dir.parent() {
            candidates.push(up.to_path_buf());
            candidates.push(up.join("lib/tessera"));
        }
    }
    candidates.iter().find(|d| d.join(DRIVER_FILE).is_file() && d.join(NVML_FILE).is_file()).cloned().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{DRIVER_FILE} and {NVML_FILE} not found in {candidates:?}; build them with `cargo build --release` \
                     or set TESSERA_LIB_DIR"
            ),
        )
    })
}

/// Environment that makes a program use the simulated GPU: the library folder first on
/// `LD_LIBRARY_PATH` (keeping what was there), plus every `SIMGPU_` default.
pub fn environment(folder: &Path, ld_library_path: Option<&str>) -> Vec<(String, String)> {
    let mut path = folder.to_string_lossy().into_owned();
    if let Some(old) = ld_library_path.filter(|p| !p.is_empty()) {
        path = format!("{path}:{old}");
    }
    vec![
        ("LD_LIBRARY_PATH".into(), path),
        ("SIMGPU_DEVICES".into(), crate::config::DEFAULT_DEVICES.into()),
        ("SIMGPU_KERNEL_TIME".into(), crate::config::DEFAULT_KERNEL_TIME.into()),
        ("SIMGPU_STATE".into(), crate::config::default_state_path()),
    ]
}

/// Shell `export` lines for [`environment`]; `SIMGPU_` values already set in the shell are kept.
pub fn export_lines(folder: &Path) -> String {
    let mut out = String::new();
    for (k, v) in environment(folder, None) {
        let v = escape(&v);
        if k == "LD_LIBRARY_PATH" {
            out.push_str(&format!("export LD_LIBRARY_PATH=\"{v}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\"\n"));
        } else {
            out.push_str(&format!("export {k}=\"${{{k}:-{v}}}\"\n"));
        }
    }
    out
}

/// Escapes `s` for use inside double quotes in a POSIX shell.
fn escape(s: &str) -> String {
    s.chars().fold(String::new(), |mut out, c| {
        if matches!(c, '"' | '\\' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
        out
    })
}
