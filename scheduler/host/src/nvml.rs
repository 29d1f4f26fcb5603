//! NVML, loaded with `libloading`: the one loader of Tessera's programs ([`Nvml::load`]), used by `tessera
//! info`, the cluster provider library, the device plugin, and the daemon's sensors and per-process usage
//! (the shim has its own, inside the process it serves). The library is the one that goes with the driver
//! in use (the simulated one beside the simulated driver, else the machine's `libnvidia-ml.so.1` or
//! `TESSERA_REAL_LIBNVML`: [`Origin::nvml_library`], as the daemon is given it). Calls inside NVML and
//! the lookups of its symbols bypass a shim preloaded in the process (see [`crate::dl`]).
//!
//! Here are the few queries the device document of `tessera info` needs; every one is optional: a
//! missing symbol or an error answer is `None`, which the document shows as `null`. More queries
//! (identity, topology, processes, metrics) are in `nvml_more`, MIG instances in `mig`. The daemon
//! resolves the entry points it calls every second once, with [`Nvml::function`] and [`Nvml::required`].

use crate::driver::Origin;
use libloading::Library;
use std::ffi::{CStr, c_char, c_uint};
use tessera_ffi::nvml::{
    GPU_INSTANCE_PROFILE_INFO_V2, NVML_CLOCK_MEM, NVML_DEVICE_ARCH_ADA, NVML_DEVICE_ARCH_AMPERE,
    NVML_DEVICE_ARCH_BLACKWELL, NVML_DEVICE_ARCH_HOPPER, NVML_DEVICE_ARCH_TURING, NVML_DEVICE_ARCH_VOLTA,
    NVML_DEVICE_MIG_ENABLE, NVML_SUCCESS, NvmlDevice, NvmlGpuInstanceProfileInfoV2, NvmlReturn,
};

/// `NVML_GPU_INSTANCE_PROFILE_*` values asked about: nvml.h numbers the profiles from 0 up and adds new
/// ones with new GPUs (`NVML_GPU_INSTANCE_PROFILE_COUNT` grows), so ask a margin beyond today's.
const MAX_PROFILE: u32 = 32;

/// One MIG GPU instance profile as NVML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigProfile {
    /// The profile's name without `MIG `, e.g. `1g.10gb`.
    pub name: String,
    /// NVML's profile id (the ID column of `nvidia-smi mig -lgip`).
    pub id: u32,
    /// GPU slices one instance takes.
    pub slices: u32,
    /// Instances of it that fit on the device.
    pub instances: u32,
    /// SMs of one instance.
    pub sm_count: u32,
    /// Memory of one instance in bytes.
    pub memory_bytes: u64,
}

/// What NVML tells about MIG on one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Mig {
    /// MIG mode is on now (instances can be created); otherwise it must be enabled first.
    pub enabled: bool,
    /// The GPU instance profiles.
    pub profiles: Vec<MigProfile>,
}

/// Why NVML cannot be loaded or a call of it failed; each names the library as it was given to
/// [`Nvml::load`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlError {
    /// The library does not load: the loader finds no such file (no NVML on this machine), or it is not
    /// a library the loader can load.
    #[error("cannot load {library}: {reason}")]
    NotFound {
        /// The library, as given to [`Nvml::load`].
        library: String,
        /// The loader's message (`dlerror`).
        reason: String,
    },
    /// The library lacks an entry point (`nvmlInit_v2` when it is not NVML at all).
    #[error("{library}: {symbol} is missing")]
    MissingSymbol {
        /// The library.
        library: String,
        /// The entry point it lacks.
        symbol: String,
    },
    /// `nvmlInit_v2` answered an error.
    #[error("{library}: nvmlInit_v2 returned {code}")]
    InitFailed {
        /// The library.
        library: String,
        /// The `nvmlReturn_t` it answered.
        code: NvmlReturn,
    },
    /// A call about device `device` (its index) answered an error.
    #[error("{library}: {call}({device}) returned {code}")]
    CallFailed {
        /// The library.
        library: String,
        /// The entry point called, e.g. `nvmlDeviceGetHandleByIndex_v2`.
        call: &'static str,
        /// The device's index.
        device: u32,
        /// The `nvmlReturn_t` it answered.
        code: NvmlReturn,
    },
}

/// NVML, loaded and initialized.
pub struct Nvml {
    loaded: Loaded,
}

/// The NVML library, loaded (initialized or not).
struct Loaded {
    /// Kept open while `Loaded` lives; its symbols are looked up through `handle`.
    _lib: Library,
    /// The `dlopen` handle of `_lib`.
    handle: usize,
    /// The library's file (for messages).
    name: String,
}

impl Loaded {
    /// The entry point `name`, typed as `F` (see [`Nvml::symbol`]).
    fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        assert_eq!(size_of::<F>(), size_of::<*mut std::ffi::c_void>(), "F is a function pointer type");
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: the handle of the library `self` keeps open.
        let address = unsafe { crate::dl::symbol(self.handle as *mut std::ffi::c_void, &name) };
        // SAFETY: F is the documented signature of `name` in nvml.h (every caller names its type), a
        // function pointer of the same size as the address.
        (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut std::ffi::c_void, F>(&address) })
    }

    /// [`Loaded::symbol`], or an error naming the library and the entry point.
    fn required<F: Copy>(&self, symbol: &str) -> Result<F, NvmlError> {
        self.symbol(symbol)
            .ok_or_else(|| NvmlError::MissingSymbol { library: self.name.clone(), symbol: symbol.to_string() })
    }
}

/// A device of [`Nvml`].
pub struct Device<'a> {
    pub(crate) nvml: &'a Nvml,
    pub(crate) handle: NvmlDevice,
}

impl Nvml {
    /// Loads the NVML that goes with a driver of `origin` and initializes it; `None` when there is none or
    /// it does not initialize.
    pub fn open(origin: &Origin) -> Option<Nvml> {
        Nvml::open_library(&origin.nvml_library())
    }

    /// Loads NVML from `name` (a path, or a file name the loader looks up) and initializes it; `None`
    /// when it does not load or initialize.
    pub fn open_library(name: &str) -> Option<Nvml> {
        Nvml::load(name).ok()
    }

    /// Loads NVML from `name` (a path, or a file name the loader looks up) and initializes it (it is shut
    /// down when dropped); the error names the library and what failed: `cannot load <name>: <why>`
    /// ([`NvmlError::NotFound`]), `<name>: nvmlInit_v2 is missing` ([`NvmlError::MissingSymbol`]),
    /// `<name>: nvmlInit_v2 returned <code>` ([`NvmlError::InitFailed`]).
    pub fn load(name: &str) -> Result<Nvml, NvmlError> {
        // Its own symbols first (RTLD_DEEPBIND): calls inside NVML must not go through a shim preloaded in
        // this process (whose NVML hooks answer for a vGPU, and whose first call fixes its configuration).
        let flags = libc::RTLD_NOW | libc::RTLD_DEEPBIND;
        // SAFETY: loading NVML runs its initializers, as every NVML client does.
        let raw = unsafe { libloading::os::unix::Library::open(Some(name), flags) }
            .map_err(|e| NvmlError::NotFound { library: name.to_string(), reason: e.to_string() })?
            .into_raw();
        // SAFETY: the handle `into_raw` just gave back, owned again by the Library.
        let lib: Library = unsafe { libloading::os::unix::Library::from_raw(raw) }.into();
        let loaded = Loaded { _lib: lib, handle: raw as usize, name: name.to_string() };
        let init: unsafe extern "C" fn() -> NvmlReturn = loaded.required("nvmlInit_v2")?;
        // SAFETY: no arguments.
        match unsafe { init() } {
            NVML_SUCCESS => Ok(Nvml { loaded }),
            code => Err(NvmlError::InitFailed { library: name.to_string(), code }),
        }
    }

    /// The library's file as it was given to [`Nvml::load`] (for messages).
    pub fn name(&self) -> &str {
        &self.loaded.name
    }

    /// The entry point `name`, typed as `F`, for a caller that calls it many times (the daemon's sensors);
    /// `None` when this NVML lacks it. Looked up with libc's own `dlsym` ([`crate::dl`]), never the shim's.
    ///
    /// # Safety
    /// `F` is the function-pointer type of `name` in nvml.h, and the pointer is not called after `self`
    /// is dropped.
    pub unsafe fn function<F: Copy>(&self, name: &str) -> Option<F> {
        self.symbol(name)
    }

    /// [`Nvml::function`], with an error naming the library and the entry point when it lacks it
    /// (`<library>: <name> is missing`, [`NvmlError::MissingSymbol`]).
    ///
    /// # Safety
    /// As [`Nvml::function`].
    pub unsafe fn required<F: Copy>(&self, name: &str) -> Result<F, NvmlError> {
        self.loaded.required(name)
    }

    /// NVML's handles of devices `0..count` (`nvmlDeviceGetHandleByIndex_v2`); the error names the
    /// library and the device that failed ([`NvmlError::CallFailed`]).
    pub fn handles(&self, count: u32) -> Result<Vec<NvmlDevice>, NvmlError> {
        const CALL: &str = "nvmlDeviceGetHandleByIndex_v2";
        let by_index: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn = self.loaded.required(CALL)?;
        (0..count)
            .map(|index| {
                let mut handle: NvmlDevice = std::ptr::null_mut();
                // SAFETY: an index and a valid out-pointer.
                match unsafe { by_index(index, &mut handle) } {
                    NVML_SUCCESS => Ok(handle),
                    code => {
                        Err(NvmlError::CallFailed { library: self.name().to_string(), call: CALL, device: index, code })
                    }
                }
            })
            .collect()
    }

    /// The entry point `name`, typed as `F`: the caller names the function-pointer type of `name` in nvml.h.
    /// Looked up with libc's own `dlsym` ([`crate::dl`]), never the shim's.
    pub(crate) fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        self.loaded.symbol(name)
    }

    /// A string query of the form `f(char *buf, unsigned int length)`.
    fn system_string(&self, name: &str) -> Option<String> {
        let f: unsafe extern "C" fn(*mut c_char, c_uint) -> NvmlReturn = self.symbol(name)?;
        let mut buf = [0 as c_char; 96];
        // SAFETY: the buffer holds 96 bytes, as passed.
        ok(unsafe { f(buf.as_mut_ptr(), buf.len() as c_uint) })?;
        // SAFETY: NVML NUL-terminates within the buffer on success.
        Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// The file NVML was loaded from, as the loader names it (`dladdr` of `nvmlInit_v2`).
    pub fn file(&self) -> Option<std::path::PathBuf> {
        let init: unsafe extern "C" fn() -> NvmlReturn = self.symbol("nvmlInit_v2")?;
        // SAFETY: a zeroed Dl_info is a valid out-value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: an address inside the loaded library and a valid out-pointer.
        if unsafe { libc::dladdr(init as *const libc::c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dladdr's NUL-terminated file name.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        use std::os::unix::ffi::OsStrExt;
        Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
    }

    /// `nvmlSystemGetDriverVersion`: the display driver release, e.g. `580.65.06`.
    pub fn driver_version(&self) -> Option<String> {
        self.system_string("nvmlSystemGetDriverVersion")
    }

    /// `nvmlSystemGetNVMLVersion`.
    pub fn version(&self) -> Option<String> {
        self.system_string("nvmlSystemGetNVMLVersion")
    }

    /// The NVML device at PCI bus id `bus_id` (`nvmlDeviceGetHandleByPciBusId_v2`): CUDA and NVML may
    /// number devices differently, the bus id names the same one in both.
    pub fn device(&self, bus_id: &str) -> Option<Device<'_>> {
        let f: unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn =
            self.symbol("nvmlDeviceGetHandleByPciBusId_v2")?;
        let text = std::ffi::CString::new(bus_id).ok()?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a valid out-pointer.
        ok(unsafe { f(text.as_ptr(), &mut handle) })?;
        Some(Device { nvml: self, handle })
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        if let Some(shutdown) = self.symbol::<unsafe extern "C" fn() -> NvmlReturn>("nvmlShutdown") {
            // SAFETY: no arguments; balances the successful nvmlInit_v2 of `open`.
            unsafe { shutdown() };
        }
    }
}

impl Device<'_> {
    /// A query of the form `f(device, unsigned int *out)`.
    pub(crate) fn uint(&self, name: &str) -> Option<u32> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn = self.nvml.symbol(name)?;
        let mut v = 0;
        // SAFETY: NVML's handle and a valid out-pointer.
        ok(unsafe { f(self.handle, &mut v) })?;
        Some(v)
    }

    /// `nvmlDeviceGetNumGpuCores`: CUDA cores.
    pub fn cuda_cores(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetNumGpuCores").filter(|&n| n > 0)
    }

    /// `nvmlDeviceGetMemoryBusWidth`, in bits.
    pub fn memory_bus_width(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetMemoryBusWidth").filter(|&n| n > 0)
    }

    /// `nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)`, in MHz.
    pub fn max_memory_clock_mhz(&self) -> Option<u32> {
        let f: unsafe extern "C" fn(NvmlDevice, u32, *mut c_uint) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetMaxClockInfo")?;
        let mut v = 0;
        // SAFETY: NVML's handle, a clock domain and a valid out-pointer.
        ok(unsafe { f(self.handle, NVML_CLOCK_MEM, &mut v) })?;
        Some(v).filter(|&v| v > 0)
    }

    /// `nvmlDeviceGetArchitecture`, by name.
    pub fn architecture(&self) -> Option<&'static str> {
        Some(match self.uint("nvmlDeviceGetArchitecture")? {
            NVML_DEVICE_ARCH_VOLTA => "Volta",
            NVML_DEVICE_ARCH_TURING => "Turing",
            NVML_DEVICE_ARCH_AMPERE => "Ampere",
            NVML_DEVICE_ARCH_ADA => "Ada",
            NVML_DEVICE_ARCH_HOPPER => "Hopper",
            NVML_DEVICE_ARCH_BLACKWELL => "Blackwell",
            _ => return None,
        })
    }

    /// MIG on this device: `None` when the device has no MIG (`nvmlDeviceGetMigMode` answers an error,
    /// `NVML_ERROR_NOT_SUPPORTED` on models without it), else its mode and GPU instance profiles
    /// (`nvmlDeviceGetGpuInstanceProfileInfoV`, which answers whether MIG is on or not).
    pub fn mig(&self) -> Option<Mig> {
        let mode: unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetMigMode")?;
        let (mut current, mut pending) = (0, 0);
        // SAFETY: NVML's handle and two valid out-pointers.
        ok(unsafe { mode(self.handle, &mut current, &mut pending) })?;
        let info: Option<unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstanceProfileInfoV2) -> NvmlReturn> =
            self.nvml.symbol("nvmlDeviceGetGpuInstanceProfileInfoV");
        let profiles = info.map_or_else(Vec::new, |f| (0..MAX_PROFILE).filter_map(|p| self.profile(f, p)).collect());
        Some(Mig { enabled: current == NVML_DEVICE_MIG_ENABLE, profiles })
    }
}

impl Device<'_> {
    /// GPU instance profile `profile` through `f` (`nvmlDeviceGetGpuInstanceProfileInfoV`); `None` when the
    /// device does not have it.
    fn profile(
        &self,
        f: unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstanceProfileInfoV2) -> NvmlReturn,
        profile: u32,
    ) -> Option<MigProfile> {
        // SAFETY: a plain C struct of integers and chars, for which all zeroes is a valid value.
        let mut p: NvmlGpuInstanceProfileInfoV2 = unsafe { std::mem::zeroed() };
        p.version = GPU_INSTANCE_PROFILE_INFO_V2;
        // SAFETY: NVML's handle and a v2 struct with its version set.
        ok(unsafe { f(self.handle, profile, &mut p) })?;
        if p.instance_count == 0 {
            return None;
        }
        p.name[p.name.len() - 1] = 0;
        // SAFETY: NUL-terminated (the last byte was just set).
        let name = unsafe { CStr::from_ptr(p.name.as_ptr()) }.to_string_lossy();
        Some(MigProfile {
            name: name.strip_prefix("MIG ").unwrap_or(&name).to_string(),
            id: p.id,
            slices: p.slice_count,
            instances: p.instance_count,
            sm_count: p.multiprocessor_count,
            memory_bytes: p.memory_size_mb << 20,
        })
    }
}

/// `Some(())` for `NVML_SUCCESS`.
pub(crate) fn ok(code: NvmlReturn) -> Option<()> {
    (code == NVML_SUCCESS).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_that_fails_names_the_library_and_what_failed() {
        let e = Nvml::load("/nonexistent/libnvidia-ml.so.1").err().unwrap();
        assert!(e.to_string().starts_with("cannot load /nonexistent/libnvidia-ml.so.1: "), "{e}");
        // Any library without NVML's entry points: the C library, already loaded in this process.
        assert_eq!(Nvml::load("libc.so.6").err().unwrap().to_string(), "libc.so.6: nvmlInit_v2 is missing");
        assert!(Nvml::open_library("libc.so.6").is_none());
    }

    #[test]
    fn callers_can_match_what_failed() {
        // NVML absent: not found, with the library and the loader's reason.
        match Nvml::load("/nonexistent/libnvidia-ml.so.1").err().unwrap() {
            NvmlError::NotFound { library, reason } => {
                assert_eq!(library, "/nonexistent/libnvidia-ml.so.1");
                assert!(reason.contains("No such file"), "{reason}");
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(
            Nvml::load("libc.so.6").err().unwrap(),
            NvmlError::MissingSymbol { library: "libc.so.6".into(), symbol: "nvmlInit_v2".into() }
        );
        let init = NvmlError::InitFailed { library: "libnvidia-ml.so.1".into(), code: 9 };
        assert_eq!(init.to_string(), "libnvidia-ml.so.1: nvmlInit_v2 returned 9");
        let call = NvmlError::CallFailed {
            library: "libnvidia-ml.so.1".into(),
            call: "nvmlDeviceGetHandleByIndex_v2",
            device: 2,
            code: 15,
        };
        assert_eq!(call.to_string(), "libnvidia-ml.so.1: nvmlDeviceGetHandleByIndex_v2(2) returned 15");
    }
}
