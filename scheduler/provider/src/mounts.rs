//! `AccelGetVendorMountLibs`: the files a container needs to run CUDA programs under Tessera, each mounted
//! at the same path inside: the shim (`libtessera.so`, from Tessera's library folder), and the CUDA driver
//! and NVML libraries in use: the NVML file this library loaded, `libcuda.so.1` beside it (the driver
//! installs both in one folder; the simulated GPU's folder of links holds both too), and the files they
//! resolve to.

use crate::context::Context;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Library files whose names start with these are the driver's and NVML's (real or simulated).
const DRIVER_FILES: [&str; 4] = ["libcuda.so", "libnvidia-ml.so", "libsimcuda", "libsimnvml"];

/// The host paths to mount, in a stable order.
pub fn list(ctx: &Context) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Ok(dir) = tessera_host::lib_dir::lib_dir() {
        let shim = dir.join(tessera_host::lib_dir::SHIM);
        if shim.is_file() {
            paths.push(shim);
        }
    }
    // The NVML as named when loaded (a link in a library folder), else the file mapped.
    let nvml = ctx.nvml.file().filter(|p| p.is_absolute());
    if let Some(nvml) = nvml {
        if let Some(dir) = nvml.parent() {
            let cuda = dir.join("libcuda.so.1");
            if cuda.exists() {
                paths.push(cuda.clone());
                paths.extend(cuda.canonicalize().ok());
            }
        }
        paths.extend(nvml.canonicalize().ok());
        paths.push(nvml);
    }
    paths.extend(loaded_driver_files());
    let mut seen = BTreeSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    paths
}

/// The driver and NVML files mapped into this process (`/proc/self/maps`).
fn loaded_driver_files() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut files = BTreeSet::new();
    for line in maps.lines() {
        let Some(path) = line.split_whitespace().nth(5) else { continue };
        let name = path.rsplit('/').next().unwrap_or("");
        if path.starts_with('/') && DRIVER_FILES.iter().any(|f| name.starts_with(f)) {
            files.insert(PathBuf::from(path));
        }
    }
    files.into_iter().collect()
}
