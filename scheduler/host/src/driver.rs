//! The CUDA driver in use and the NVML that goes with it: the machine's ([`machine_driver`],
//! [`machine_nvml`], as the shim and the daemon find them), else the simulated ones in Tessera's library
//! folder ([`crate::lib_dir`], [`crate::simgpu_dir`]); and a driver loaded for a program's own use
//! (`tessera info`, the device plugin).

use libloading::Library;
use std::ffi::{c_char, c_int, c_uint};

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
    pub fn load() -> Result<Driver, String> {
        if let Some(lib) = open_real() {
            return Ok(Driver { lib, origin: Origin::Real });
        }
        let folder = crate::lib_dir::simgpu_folder()?;
        // SAFETY: our own simulated driver; its initializers only set up Rust statics.
        let lib = unsafe { Library::new(folder.join("libcuda.so.1")) }
            .map_err(|e| format!("cannot load the simulated driver from {}: {e}", folder.display()))?;
        Ok(Driver { lib, origin: Origin::Simulated(folder) })
    }

    /// The driver a CUDA program would load: `libcuda.so.1` on the loader's path (the simulated one when
    /// `tessera run` put it there), with the shim's entry points when the shim is preloaded.
    pub fn for_program() -> Result<Driver, String> {
        // SAFETY: loading the CUDA driver runs its initializers, which is what every CUDA program does.
        let lib = unsafe { Library::new("libcuda.so.1") }.map_err(|e| format!("cannot load libcuda.so.1: {e}"))?;
        let origin = if lib_is_simulated(&lib) {
            Origin::Simulated(crate::lib_dir::simgpu_folder().unwrap_or_default())
        } else {
            Origin::Real
        };
        Ok(Driver { lib, origin })
    }

    /// The entry point `name`, typed as `F`: the caller names the function-pointer type of `name` in cuda.h.
    pub fn call<F: Copy>(&self, name: &str) -> Result<F, String> {
        // SAFETY: F is the documented signature of `name` in cuda.h (every caller names its type).
        unsafe { self.lib.get::<F>(name.as_bytes()).map(|s| *s).map_err(|e| format!("{name}: {e}")) }
    }

    /// `cuInit(0)`.
    pub fn init(&self) -> Result<(), String> {
        let f: unsafe extern "C" fn(c_uint) -> Res = self.call("cuInit")?;
        // SAFETY: plain integer argument.
        check("cuInit", unsafe { f(0) })
    }

    /// Number of devices.
    pub fn device_count(&self) -> Result<i32, String> {
        let f: unsafe extern "C" fn(*mut c_int) -> Res = self.call("cuDeviceGetCount")?;
        let mut n = 0;
        // SAFETY: valid out-pointer.
        check("cuDeviceGetCount", unsafe { f(&mut n) })?;
        Ok(n)
    }

    /// Device name.
    pub fn name(&self, dev: i32) -> Result<String, String> {
        self.device_string("cuDeviceGetName", dev)
    }

    /// A device's string from `symbol`, a driver call of the form `(char *out, int len, CUdevice dev)`
    /// that NUL-terminates within `len` (`cuDeviceGetName`, `cuDeviceGetPCIBusId`).
    fn device_string(&self, symbol: &str, dev: i32) -> Result<String, String> {
        let f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Res = self.call(symbol)?;
        // Names are under 100 bytes and bus ids 13 (as the driver documents); room to spare.
        let mut buf = [0 as c_char; 128];
        // SAFETY: the buffer holds 128 bytes, as passed.
        check(symbol, unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, dev) })?;
        // SAFETY: the driver NUL-terminates within the buffer.
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// Total memory in bytes.
    pub fn total_memory(&self, dev: i32) -> Result<u64, String> {
        let f: unsafe extern "C" fn(*mut usize, c_int) -> Res = self.call("cuDeviceTotalMem_v2")?;
        let mut v = 0usize;
        // SAFETY: valid out-pointer.
        check("cuDeviceTotalMem_v2", unsafe { f(&mut v, dev) })?;
        Ok(v as u64)
    }

    /// An integer device attribute.
    pub fn attribute(&self, dev: i32, attr: c_int) -> Result<i32, String> {
        let f: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> Res = self.call("cuDeviceGetAttribute")?;
        let mut v = 0;
        // SAFETY: valid out-pointer; the attribute is passed as its C integer value.
        check("cuDeviceGetAttribute", unsafe { f(&mut v, attr, dev) })?;
        Ok(v)
    }

    /// `cuDeviceGetPCIBusId`: `domain:bus:device.function`, e.g. `0000:10:00.0`.
    pub fn pci_bus_id(&self, dev: i32) -> Result<String, String> {
        self.device_string("cuDeviceGetPCIBusId", dev)
    }

    /// `cuDeviceGetUuid_v2`, in NVIDIA's textual form `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid(&self, dev: i32) -> Result<String, String> {
        let f: unsafe extern "C" fn(*mut [u8; 16], c_int) -> Res = self.call("cuDeviceGetUuid_v2")?;
        let mut bytes = [0u8; 16];
        // SAFETY: `CUuuid` is 16 bytes, which `bytes` holds.
        check("cuDeviceGetUuid_v2", unsafe { f(&mut bytes, dev) })?;
        let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]))
    }

    /// `cuDriverGetVersion`.
    pub fn version(&self) -> Result<i32, String> {
        let f: unsafe extern "C" fn(*mut c_int) -> Res = self.call("cuDriverGetVersion")?;
        let mut v = 0;
        // SAFETY: valid out-pointer.
        check("cuDriverGetVersion", unsafe { f(&mut v) })?;
        Ok(v)
    }
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

/// `Ok` for `CUDA_SUCCESS`, else an error naming `what` and the code.
pub fn check(what: &str, code: Res) -> Result<(), String> {
    if code == 0 { Ok(()) } else { Err(format!("{what} failed with CUDA error {code}")) }
}
