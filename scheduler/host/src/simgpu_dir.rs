//! The simulated GPU's folder inside Tessera's library folder: `<lib dir>/simgpu`, holding links named as
//! the NVIDIA libraries (`libcuda.so.1`, `libnvidia-ml.so.1`, `libcublas.so.12` and the unversioned names
//! linkers look for) to the simulated libraries beside it. A program with this folder first on its
//! loader path runs on the simulated GPU.
//!
//! It is part of the library folder's layout ([`crate::lib_dir`] requires the simulated driver and NVML
//! there, `tools/install.sh` installs them), which every Tessera program relies on without the simulator:
//! the cluster provider library and the device plugin fall back on the simulated NVML on a machine without
//! a GPU. The simulator's own side of it (the environment a simulated program gets, finding the build
//! folder for the tests) is `simgpu_host::libdir`'s.

use std::io;
use std::path::{Path, PathBuf};

/// File cargo builds for the simulated driver.
pub const DRIVER_FILE: &str = "libsimcuda.so";
/// File cargo builds for the simulated NVML.
pub const NVML_FILE: &str = "libsimnvml.so";
/// File cargo builds for the simulated cuBLAS.
pub const CUBLAS_FILE: &str = "libsimcublas.so";
/// Name of the folder created beside them.
pub const FOLDER: &str = "simgpu";

/// `(link name, target file)` pairs the folder holds.
const LINKS: [(&str, &str); 6] = [
    ("libcuda.so.1", DRIVER_FILE),
    ("libcuda.so", DRIVER_FILE),
    ("libnvidia-ml.so.1", NVML_FILE),
    ("libnvidia-ml.so", NVML_FILE),
    ("libcublas.so.12", CUBLAS_FILE),
    ("libcublas.so", CUBLAS_FILE),
];

/// Creates (or refreshes) `build_dir/simgpu` and returns its path. Safe to call from many processes at once.
pub fn prepare(build_dir: &Path) -> io::Result<PathBuf> {
    let folder = build_dir.join(FOLDER);
    std::fs::create_dir_all(&folder)?;
    for (link, target) in LINKS {
        let path = folder.join(link);
        let wanted = Path::new("..").join(target);
        if std::fs::read_link(&path).is_ok_and(|t| t == wanted) {
            continue;
        }
        // Create under a unique name (per process and per call: threads of one process may race here
        // too), then rename over: concurrent callers never see a missing link.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = folder.join(format!(".{link}.{}.{seq}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&wanted, &tmp)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(folder)
}
