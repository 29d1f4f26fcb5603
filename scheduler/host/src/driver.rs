//! The CUDA driver in use and the NVML that goes with it: the machine's ([`machine_driver`],
//! [`machine_nvml`], as the shim and the daemon find them), else the simulated ones in Tessera's library
//! folder ([`crate::lib_dir`], [`crate::simgpu_dir`]); and a driver loaded for a program's own use
//! (`tessera info`, the device plugin).

use crate::lib_dir::LibDirError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint};
use std::path::PathBuf;

/// The machine's CUDA driver library: `TESSERA_REAL_LIBCUDA`, else `libcuda.so.1` on the loader's path
/// (as the shim finds it).
pub fn machine_driver() -> String {
    std::env::var("TESSERA_REAL_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".to_string())
}

/// The machine's NVML: `TESSERA_REAL_LIBNVML` when set, else `libnvidia-ml.so.1` on the loader's path (as
/// the shim loads it). A daemon on the simulated GPU is given the simulated NVML instead (see `tessera
/// daemon`).
pub fn machine_nvml() -> String {
    std::env::var("TESSERA_REAL_LIBNVML").unwrap_or_else(|_| "libnvidia-ml.so.1".into())
}

/// Where the driver in use came from.
pub enum Origin {
    /// The machine's own driver.
    Real,
    /// The simulated driver, with its library folder.
    Simulated(std::path::PathBuf),
}

impl Origin {
    /// The driver library itself: the simulated one in its folder, else the machine's
    /// (`TESSERA_REAL_LIBCUDA`, or `libcuda.so.1` on the loader's path).
    pub fn driver_library(&self) -> String {
        match self {
            Origin::Simulated(folder) => folder.join("libcuda.so.1").to_string_lossy().into_owned(),
            Origin::Real => machine_driver(),
        }
    }

    /// The NVML library that goes with this driver: the simulated one beside the simulated driver, else
    /// the machine's (`TESSERA_REAL_LIBNVML`, or `libnvidia-ml.so.1` on the loader's path).
    pub fn nvml_library(&self) -> String {
        match self {
            Origin::Simulated(folder) => folder.join("libnvidia-ml.so.1").to_string_lossy().into_owned(),
            Origin::Real => machine_nvml(),
        }
    }
}

/// Why no driver is loaded or a driver call failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// No driver: the machine's does not load (or is the simulated one) and the simulated driver's
    /// library folder is not found (the error says where it was looked for) or not made.
    #[error(transparent)]
    NoDriver(#[from] LibDirError),
    /// The simulated driver in its folder does not load.
    #[error("cannot load the simulated driver from {}: {reason}", .folder.display())]
    SimulatedNotLoadable {
        /// The simulated GPU's folder (`<lib dir>/simgpu`).
        folder: PathBuf,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// A driver library does not load.
    #[error("cannot load {library}: {reason}")]
    NotLoadable {
        /// The library, as given to the loader (e.g. `libcuda.so.1`).
        library: String,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// The driver lacks an entry point.
    #[error("{symbol}: {reason}")]
    MissingSymbol {
        /// The entry point, e.g. `cuDeviceGetUuid_v2`.
        symbol: String,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// A driver call answered an error.
    #[error("{call} failed with CUDA error {code}")]
    CallFailed {
        /// What was called, e.g. `cuInit` (with what it was asked for, e.g. `cuModuleGetFunction(spin)`).
        call: String,
        /// The `CUresult` it answered.
        code: u32,
    },
}

/// A loaded driver with the handful of entry points the CLI needs.
pub struct Driver {
    lib: Library,
    /// Real or simulated.
    pub origin: Origin,
}

/// `CUresult`, as an integer.
type Res = c_uint;

impl Driver {
    /// Loads the real driver if present, else the simulated one.
    pub fn load() -> Result<Driver, DriverError> {
        if let Some(lib) = open_real() {
            return Ok(Driver { lib, origin: Origin::Real });
        }
        let folder = crate::lib_dir::simgpu_folder()?;
        // SAFETY: our own simulated driver; its initializers only set up Rust statics.
        let lib = unsafe { Library::new(folder.join("libcuda.so.1")) }
            .map_err(|e| DriverError::SimulatedNotLoadable { folder: folder.clone(), reason: e.to_string() })?;
        Ok(Driver { lib, origin: Origin::Simulated(folder) })
    }

    /// The driver a CUDA program would load: `libcuda.so.1` on the loader's path (the simulated one when
    /// `tessera run` put it there), with the shim's entry points when the shim is preloaded.
    pub fn for_program() -> Result<Driver, DriverError> {
        let lib = open_library("libcuda.so.1")?;
        let origin = if lib_is_simulated(&lib) {
            Origin::Simulated(crate::lib_dir::simgpu_folder().unwrap_or_default())
        } else {
            Origin::Real
        };
        Ok(Driver { lib, origin })
    }

    /// The entry point `name`, typed as `F`: the caller names the function-pointer type of `name` in cuda.h.
    pub fn call<F: Copy>(&self, name: &str) -> Result<F, DriverError> {
        // SAFETY: F is the documented signature of `name` in cuda.h (every caller names its type).
        let found = unsafe { self.lib.get::<F>(name.as_bytes()).map(|s| *s) };
        found.map_err(|e| DriverError::MissingSymbol { symbol: name.to_string(), reason: e.to_string() })
    }

    /// `cuInit(0)`.
    pub fn init(&self) -> Result<(), DriverError> {
        let f: unsafe extern "C" fn(c_uint) -> Res = self.call("cuInit")?;
        // SAFETY: plain integer argument.
        check("cuInit", unsafe { f(0) })
    }

    /// Number of devices.
    pub fn device_count(&self) -> Result<i32, DriverError> {
        let f: unsafe extern "C" fn(*mut c_int) -> Res = self.call("cuDeviceGetCount")?;
        let mut n = 0;
        // SAFETY: valid out-pointer.
        check("cuDeviceGetCount", unsafe { f(&mut n) })?;
        Ok(n)
    }

    /// Device name.
    pub fn name(&self, dev: i32) -> Result<String, DriverError> {
        self.device_string("cuDeviceGetName", dev)
    }

    /// A device's string from `symbol`, a driver call of the form `(char *out, int len, CUdevice dev)`
    /// that NUL-terminates within `len` (`cuDeviceGetName`, `cuDeviceGetPCIBusId`).
    fn device_string(&self, symbol: &str, dev: i32) -> Result<String, DriverError> {
        let f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Res = self.call(symbol)?;
        // Names are under 100 bytes and bus ids 13 (as the driver documents); room to spare.
        let mut buf = [0 as c_char; 128];
        // SAFETY: the buffer holds 128 bytes, as passed.
        check(symbol, unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, dev) })?;
        // SAFETY: the driver NUL-terminates within the buffer.
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// Total memory in bytes.
    pub fn total_memory(&self, dev: i32) -> Result<u64, DriverError> {
        let f: unsafe extern "C" fn(*mut usize, c_int) -> Res = self.call("cuDeviceTotalMem_v2")?;
        let mut v = 0usize;
        // SAFETY: valid out-pointer.
        check("cuDeviceTotalMem_v2", unsafe { f(&mut v, dev) })?;
        Ok(v as u64)
    }

    /// An integer device attribute.
    pub fn attribute(&self, dev: i32, attr: c_int) -> Result<i32, DriverError> {
        let f: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> Res = self.call("cuDeviceGetAttribute")?;
        let mut v = 0;
        // SAFETY: valid out-pointer; the attribute is passed as its C integer value.
        check("cuDeviceGetAttribute", unsafe { f(&mut v, attr, dev) })?;
        Ok(v)
    }

    /// `cuDeviceGetPCIBusId`: `domain:bus:device.function`, e.g. `0000:10:00.0`.
    pub fn pci_bus_id(&self, dev: i32) -> Result<String, DriverError> {
        self.device_string("cuDeviceGetPCIBusId", dev)
    }

    /// `cuDeviceGetUuid_v2`, in NVIDIA's textual form `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid(&self, dev: i32) -> Result<String, DriverError> {
        let f: unsafe extern "C" fn(*mut [u8; 16], c_int) -> Res = self.call("cuDeviceGetUuid_v2")?;
        let mut bytes = [0u8; 16];
        // SAFETY: `CUuuid` is 16 bytes, which `bytes` holds.
        check("cuDeviceGetUuid_v2", unsafe { f(&mut bytes, dev) })?;
        let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]))
    }

    /// `cuDriverGetVersion`.
    pub fn version(&self) -> Result<i32, DriverError> {
        let f: unsafe extern "C" fn(*mut c_int) -> Res = self.call("cuDriverGetVersion")?;
        let mut v = 0;
        // SAFETY: valid out-pointer.
        check("cuDriverGetVersion", unsafe { f(&mut v) })?;
        Ok(v)
    }
}

/// The driver library `library` (a path, or a file name the loader looks up), loaded.
fn open_library(library: &str) -> Result<Library, DriverError> {
    // SAFETY: loading the CUDA driver runs its initializers, which is what every CUDA program does.
    unsafe { Library::new(library) }
        .map_err(|e| DriverError::NotLoadable { library: library.to_string(), reason: e.to_string() })
}

/// The machine's real driver, as the shim would find it (`TESSERA_REAL_LIBCUDA`, else `libcuda.so.1` on
/// the loader's path), unless that is the simulated one.
fn open_real() -> Option<Library> {
    let name = std::env::var_os("TESSERA_REAL_LIBCUDA").unwrap_or_else(|| "libcuda.so.1".into());
    // SAFETY: loading the system CUDA driver runs its initializers, which is what every CUDA program does.
    let lib = unsafe { Library::new(name) }.ok()?;
    (!lib_is_simulated(&lib)).then_some(lib)
}

/// True when the machine has a real NVIDIA driver (otherwise programs run on the simulated GPU).
pub fn real_driver_present() -> bool {
    open_real().is_some()
}

/// The simulated driver exports a marker the real one does not have.
fn lib_is_simulated(lib: &Library) -> bool {
    // SAFETY: only checks for the symbol's presence; nothing is called.
    unsafe { lib.get::<*const ()>(b"simgpu_marker").is_ok() }
}

/// `Ok` for `CUDA_SUCCESS`, else an error naming `what` and the code ([`DriverError::CallFailed`]).
pub fn check(what: &str, code: Res) -> Result<(), DriverError> {
    if code == 0 { Ok(()) } else { Err(DriverError::CallFailed { call: what.to_string(), code }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_does_not_exist_is_not_loadable_with_its_path() {
        let Err(e) = open_library("/nonexistent/libcuda.so.1") else { panic!("loaded") };
        match &e {
            DriverError::NotLoadable { library, reason } => {
                assert_eq!(library, "/nonexistent/libcuda.so.1");
                assert!(reason.contains("No such file"), "{reason}");
            }
            e => panic!("{e:?}"),
        }
        assert!(e.to_string().starts_with("cannot load /nonexistent/libcuda.so.1: "), "{e}");
    }

    #[test]
    fn callers_can_match_a_missing_entry_point_and_a_failed_call() {
        // Any library without the driver's entry points: the C library, already loaded in this process.
        let d = Driver { lib: open_library("libc.so.6").unwrap(), origin: Origin::Real };
        match d.init().unwrap_err() {
            DriverError::MissingSymbol { symbol, reason } => {
                assert_eq!(symbol, "cuInit");
                assert!(reason.contains("cuInit"), "{reason}");
            }
            e => panic!("{e:?}"),
        }
        assert!(d.device_count().unwrap_err().to_string().starts_with("cuDeviceGetCount: "));
        assert!(check("cuInit", 0).is_ok());
        let e = check("cuModuleGetFunction(spin)", 500).unwrap_err();
        assert!(
            matches!(&e, DriverError::CallFailed { call, code: 500 } if call == "cuModuleGetFunction(spin)"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "cuModuleGetFunction(spin) failed with CUDA error 500");
    }

    #[test]
    fn no_library_folder_is_no_driver_and_says_what_the_folder_error_says() {
        let e = DriverError::from(LibDirError::OverrideEmpty);
        assert!(matches!(e, DriverError::NoDriver(LibDirError::OverrideEmpty)), "{e:?}");
        assert_eq!(e.to_string(), LibDirError::OverrideEmpty.to_string());
    }
}
