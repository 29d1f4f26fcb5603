//! What every call needs, opened once (by `AccelInit`, or by the first call that needs it) and closed by
//! `AccelShutdown`: NVML and the device list it gives, and the vGPUs created for the caller's limits (which
//! `AccelShutdown` removes). The library never initializes CUDA in the calling process: a worker that sets
//! its own limits before `cuInit` must still be free to join the vGPU they made (the shim reads
//! `TESSERA_VGPU` at its first CUDA call).
//!
//! NVML is the one that goes with the driver programs load: `TESSERA_REAL_LIBNVML`, else
//! `libnvidia-ml.so.1` on the loader's path (the simulated one where the simulated GPU's folder is on it),
//! else the simulated NVML of Tessera's library folder, found beside this library.

use crate::abi::current::{ACCEL_ERROR_NOT_FOUND, ACCEL_ERROR_OPERATION_FAILED};
use crate::guard::Fail;
use parking_lot::{Mutex, RwLock};
use std::path::PathBuf;
use std::sync::Arc;
use tessera_host::driver::Origin;
use tessera_host::lib_dir::LibDirError;
use tessera_host::nvml::{Device, Nvml};

/// One device as NVML describes it.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// NVML's index (PCI bus order: CUDA's ordinal with `CUDA_DEVICE_ORDER=PCI_BUS_ID`), the `device` of
    /// a vGPU.
    pub index: u32,
    /// `GPU-...`.
    pub uuid: String,
    /// Model name.
    pub name: String,
    /// PCI bus id.
    pub bus_id: String,
    /// Device memory, in bytes.
    pub memory: u64,
    /// SMs (0 when NVML cannot tell).
    pub sms: u32,
    /// Compute capability.
    pub cc: (i32, i32),
    /// Peak SM clock, in MHz.
    pub clock_mhz: u32,
}

/// The opened NVML and devices, and the vGPUs made for the caller's limits, from `AccelInit` (or the first
/// call that needs them) to `AccelShutdown`.
pub struct Context {
    /// NVML.
    pub nvml: Nvml,
    /// True when it is the simulated GPU's.
    pub simulated: bool,
    /// The devices, by index.
    pub gpus: Vec<Gpu>,
    /// The vGPUs this process created for its limits ([`crate::limits`]), removed by `AccelShutdown`
    /// ([`crate::limits::release`]).
    pub created: Mutex<Vec<String>>,
}

/// Why NVML or its device list cannot be opened (the calls fail with `ACCEL_ERROR_OPERATION_FAILED`).
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The machine's NVML does not load, and the simulated GPU's folder is not found.
    #[error("no NVML: {machine} does not load, and the simulated GPU's is not found: {source}")]
    NoSimulatedGpu {
        /// The machine's NVML library.
        machine: String,
        /// Why the simulated GPU's folder is not found.
        source: LibDirError,
    },
    /// Neither the machine's NVML nor the simulated one initializes.
    #[error("no NVML: neither {machine} nor {simulated} initializes")]
    NoNvml {
        /// The machine's NVML library.
        machine: String,
        /// The simulated GPU's NVML library.
        simulated: String,
    },
    /// NVML does not give the number of devices.
    #[error("nvmlDeviceGetCount_v2 failed")]
    DeviceCount,
    /// NVML has no handle for a device it counted.
    #[error("NVML has no device {0}")]
    NoDevice(u32),
    /// NVML does not describe a device it counted.
    #[error("NVML does not describe device {0}")]
    Undescribed(u32),
}

impl From<ContextError> for Fail {
    fn from(e: ContextError) -> Fail {
        Fail::new(ACCEL_ERROR_OPERATION_FAILED, e.to_string())
    }
}

/// The open context, if any. Process-wide because the C ABI has no handle: `AccelInit` and every later call
/// name no context, so the library keeps the one it opened for the whole process, until `AccelShutdown`.
static CONTEXT: RwLock<Option<Arc<Context>>> = RwLock::new(None);

/// The context, opened now if needed.
pub fn get() -> Result<Arc<Context>, Fail> {
    if let Some(c) = CONTEXT.read().as_ref() {
        return Ok(c.clone());
    }
    let mut slot = CONTEXT.write();
    if let Some(c) = slot.as_ref() {
        return Ok(c.clone());
    }
    let opened = Arc::new(open()?);
    *slot = Some(opened.clone());
    Ok(opened)
}

/// Closes the context (calls in flight keep theirs until they finish); returns it, if one was open.
pub fn close() -> Option<Arc<Context>> {
    CONTEXT.write().take()
}

/// The NVML to use; see the module documentation.
fn open_nvml() -> Result<Nvml, ContextError> {
    let machine = tessera_host::driver::machine_nvml();
    if let Some(n) = Nvml::open_library(&machine) {
        return Ok(n);
    }
    if let Some(file) = own_file() {
        tessera_host::lib_dir::anchor_at(file);
    }
    let folder = match tessera_host::lib_dir::simgpu_folder() {
        Ok(folder) => folder,
        Err(source) => return Err(ContextError::NoSimulatedGpu { machine, source }),
    };
    let simulated = Origin::Simulated(folder).nvml_library();
    Nvml::open_library(&simulated).ok_or(ContextError::NoNvml { machine, simulated })
}

/// Opens NVML and the device list.
fn open() -> Result<Context, ContextError> {
    let nvml = open_nvml()?;
    let count = nvml.device_count().ok_or(ContextError::DeviceCount)?;
    let mut gpus = Vec::new();
    for i in 0..count {
        let dev = nvml.device_at(i).ok_or(ContextError::NoDevice(i))?;
        gpus.push(describe(&dev, i).ok_or(ContextError::Undescribed(i))?);
    }
    let simulated = loaded_file("libsimnvml").is_some();
    crate::log::line(
        "INFO",
        &format!(
            "{} device(s) through {} ({})",
            gpus.len(),
            nvml.name(),
            if simulated { "simulated" } else { "NVIDIA" }
        ),
    );
    Ok(Context { nvml, simulated, gpus, created: Mutex::new(Vec::new()) })
}

/// Device `index` as NVML describes it.
fn describe(dev: &Device<'_>, index: u32) -> Option<Gpu> {
    let cc = dev.compute_capability()?;
    Some(Gpu {
        index,
        uuid: dev.uuid()?,
        name: dev.name()?,
        bus_id: dev.pci_bus_id()?,
        memory: dev.memory()?.0,
        sms: dev.sm_count().unwrap_or(0),
        cc,
        clock_mhz: dev.max_sm_clock_mhz().unwrap_or(0),
    })
}

impl Context {
    /// The device with UUID `uuid`: `NOT_FOUND` naming the devices there are otherwise.
    pub fn gpu(&self, uuid: &str) -> Result<&Gpu, Fail> {
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(uuid)).ok_or_else(|| {
            let known: Vec<&str> = self.gpus.iter().map(|g| g.uuid.as_str()).collect();
            Fail::new(ACCEL_ERROR_NOT_FOUND, format!("no device {uuid}; the devices are {}", known.join(", ")))
        })
    }

    /// NVML's handle of `gpu`.
    pub fn nvml_device(&self, gpu: &Gpu) -> Option<Device<'_>> {
        self.nvml.device_at(gpu.index)
    }
}

/// The first file mapped into this process whose name starts with `prefix` (`/proc/self/maps`).
pub fn loaded_file(prefix: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find_map(|path| {
        let name = path.rsplit('/').next().unwrap_or("");
        (path.starts_with('/') && name.starts_with(prefix)).then(|| PathBuf::from(path))
    })
}

/// This library's own file (`dladdr` of one of its functions), so the library folder is found beside
/// it rather than beside the hypervisor's executable.
fn own_file() -> Option<PathBuf> {
    // SAFETY: a zeroed Dl_info is a valid out-value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of a function of this library and a valid out-pointer.
    let found = unsafe { libc::dladdr(own_file as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's NUL-terminated file name.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    use std::os::unix::ffi::OsStrExt;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}
