//! What every call needs, opened once (by `AccelInit`, or by the first call that needs it) and closed by
//! `AccelShutdown`: the CUDA driver in use (the machine's, else the simulated one from the library folder
//! beside this library), the NVML that goes with it, and the device list, numbered as CUDA numbers them
//! (the ordinals vGPUs name).

use crate::abi::current::ACCEL_ERROR_OPERATION_FAILED;
use crate::guard::Fail;
use parking_lot::RwLock;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_ffi::sys::CUdevice_attribute as A;
use tessera_hwinfo::driver::Driver;
use tessera_hwinfo::nvml::{Device, Nvml};

/// One device as the CUDA driver describes it.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// CUDA ordinal (the `device` of a vGPU).
    pub index: u32,
    /// `GPU-...`.
    pub uuid: String,
    /// Model name.
    pub name: String,
    /// PCI bus id, which names the same device in NVML.
    pub bus_id: String,
    /// Device memory, in bytes.
    pub memory: u64,
    /// SMs.
    pub sms: u32,
    /// Compute capability.
    pub cc: (i32, i32),
    /// Peak SM clock, in MHz.
    pub clock_mhz: u32,
}

/// The opened driver, NVML and devices.
pub struct Context {
    /// The CUDA driver in use.
    pub driver: Driver,
    /// Its NVML, when it has one that initializes.
    pub nvml: Option<Nvml>,
    /// The devices, by CUDA ordinal.
    pub gpus: Vec<Gpu>,
    /// This library's file, when the loader tells.
    pub library: Option<PathBuf>,
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

/// Opens the driver, NVML and device list.
fn open() -> Result<Context, String> {
    let library = own_file();
    if let Some(file) = &library {
        tessera_hwinfo::lib_dir::anchor_at(file.clone());
    }
    let driver = Driver::load()?;
    driver.init()?;
    let nvml = Nvml::open(&driver.origin);
    let mut gpus = Vec::new();
    for dev in 0..driver.device_count()? {
        gpus.push(describe(&driver, nvml.as_ref(), dev).map_err(|e| format!("device {dev}: {e}"))?);
    }
    crate::log::line(
        "INFO",
        &format!(
            "{} device(s) on the {} driver, NVML {}",
            gpus.len(),
            if matches!(driver.origin, tessera_hwinfo::driver::Origin::Real) { "NVIDIA" } else { "simulated" },
            nvml.as_ref().map_or("unavailable".to_string(), |n| n.name.clone())
        ),
    );
    Ok(Context { driver, nvml, gpus, library })
}

/// Device `dev` as the driver describes it.
fn describe(d: &Driver, nvml: Option<&Nvml>, dev: i32) -> Result<Gpu, String> {
    let attr = |a: A| d.attribute(dev, a as i32);
    let bus_id = d.pci_bus_id(dev)?;
    let nvml_clock = nvml.and_then(|n| n.device(&bus_id)).and_then(|n| n.max_sm_clock_mhz());
    // CU_DEVICE_ATTRIBUTE_CLOCK_RATE is in kHz.
    let clock_mhz =
        nvml_clock.unwrap_or_else(|| (attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE).unwrap_or(0).max(0) / 1000) as u32);
    Ok(Gpu {
        index: dev as u32,
        uuid: d.uuid(dev)?,
        name: d.name(dev)?,
        bus_id,
        memory: d.total_memory(dev)?,
        sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
        cc: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        clock_mhz,
    })
}

impl Context {
    /// The device with UUID `uuid`: `NOT_FOUND` naming the devices there are otherwise.
    pub fn gpu(&self, uuid: &str) -> Result<&Gpu, Fail> {
        self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(uuid)).ok_or_else(|| {
            let known: Vec<&str> = self.gpus.iter().map(|g| g.uuid.as_str()).collect();
            Fail::new(
                crate::abi::current::ACCEL_ERROR_NOT_FOUND,
                format!("no device {uuid}; the devices are {}", known.join(", ")),
            )
        })
    }

    /// NVML's handle of `gpu`, when NVML is there.
    pub fn nvml_device(&self, gpu: &Gpu) -> Option<Device<'_>> {
        self.nvml.as_ref()?.device(&gpu.bus_id)
    }
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
