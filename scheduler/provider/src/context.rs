//! What every call needs, opened once (by `AccelInit`, or by the first call that needs it) and closed by
//! `AccelShutdown`: NVML and the device list it gives. The library never initializes CUDA in the calling
//! process: a worker that sets its own limits before `cuInit` must still be free to join the vGPU they
//! made (the shim reads `TESSERA_VGPU` at its first CUDA call).
//!
//! NVML is the one that goes with the driver programs load: `TESSERA_REAL_LIBNVML`, else
//! `libnvidia-ml.so.1` on the loader's path (the simulated one where the simulated GPU's folder is on it),
//! else the simulated NVML of Tessera's library folder, found beside this library.

use crate::abi::current::{ACCEL_ERROR_NOT_FOUND, ACCEL_ERROR_OPERATION_FAILED};
use crate::guard::Fail;
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_host::driver::Origin;
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

/// The opened NVML and devices.
pub struct Context {
    /// NVML.
    pub nvml: Nvml,
    /// True when it is the simulated GPU's.
    pub simulated: bool,
    /// The devices, by index.
    pub gpus: Vec<Gpu>,
}

/// The open context, if any.
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
    let opened = Arc::new(open().map_err(|e| Fail::new(ACCEL_ERROR_OPERATION_FAILED, e))?);
    *slot = Some(opened.clone());
    Ok(opened)
}

/// Closes the context (calls in flight keep theirs until they finish).
pub fn close() {
    *CONTEXT.write() = None;
}

/// The NVML to use; see the module documentation.
fn open_nvml() -> Result<Nvml, String> {
    let machine = tessera_host::driver::machine_nvml();
    if let Some(n) = Nvml::open_library(&machine) {
        return Ok(n);
    }
    if let Some(file) = own_file() {
        tessera_host::lib_dir::anchor_at(file);
    }
    let folder = tessera_host::lib_dir::simgpu_folder()
        .map_err(|e| format!("no NVML: {machine} does not load, and the simulated GPU's is not found: {e}"))?;
    let simulated = Origin::Simulated(folder).nvml_library();
    Nvml::open_library(&simulated).ok_or_else(|| format!("no NVML: neither {machine} nor {simulated} initializes"))
}

/// Opens NVML and the device list.
fn open() -> Result<Context, String> {
    let nvml = open_nvml()?;
    let count = nvml.device_count().ok_or("nvmlDeviceGetCount_v2 failed")?;
    let mut gpus = Vec::new();
    for i in 0..count {
        let dev = nvml.device_at(i).ok_or_else(|| format!("NVML has no device {i}"))?;
        gpus.push(describe(&dev, i).ok_or_else(|| format!("NVML does not describe device {i}"))?);
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
    Ok(Context { nvml, simulated, gpus })
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
