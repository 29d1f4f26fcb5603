//! What the driver says of each device, for the device fields of `stats`: its name and UUID (read once)
//! and its utilization, power draw and temperature (read by the `sensors` thread every [`PERIOD`] and
//! kept here, so a `stats` request or a scrape only copies the last reading instead of calling NVML).
//!
//! NVML is loaded by `tessera_host::nvml` from the library the daemon is given (`Options::nvml`: the one
//! that goes with its driver), as [`crate::tenants::nvml_usage`] loads it. Each query is looked up on its own: a
//! driver without one (or a device answering it with an error, e.g. `NVML_ERROR_NOT_SUPPORTED` for power
//! on some boards) leaves that field unknown, and the others are still read.

use crate::state::State;
use std::ffi::{c_char, c_uint};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tessera_ffi::nvml::{
    NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_SUCCESS,
    NVML_TEMPERATURE_GPU, NvmlDevice, NvmlPciInfo, NvmlReturn, NvmlUtilization,
};
use tessera_host::nvml::{Nvml, NvmlError};
use tessera_region::MAX_DEVICES;

/// Time between two readings: NVML's utilization covers about a second, so reading more often tells
/// nothing new.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Room for a name or a UUID, whichever is longer.
const TEXT_LEN: usize = if NVML_DEVICE_UUID_V2_BUFFER_SIZE > NVML_DEVICE_NAME_V2_BUFFER_SIZE {
    NVML_DEVICE_UUID_V2_BUFFER_SIZE
} else {
    NVML_DEVICE_NAME_V2_BUFFER_SIZE
};

type Text = unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn;
type Utilization = unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> NvmlReturn;
type Power = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
type Temperature = unsafe extern "C" fn(NvmlDevice, u32, *mut c_uint) -> NvmlReturn;
type PciInfo = unsafe extern "C" fn(NvmlDevice, *mut NvmlPciInfo) -> NvmlReturn;
type MigMode = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn;

/// One device's figures, as last read; `None` where the driver did not tell.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Model name (empty when unknown).
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: Option<String>,
    /// NVML's `gpu` utilization, percent.
    pub utilization_pct: Option<f64>,
    /// Board power draw, watts.
    pub power_watts: Option<f64>,
    /// GPU temperature, °C.
    pub temperature_c: Option<f64>,
    /// PCI address as sysfs names it (`0000:10:00.0`), from `nvmlDeviceGetPciInfo_v3` (read once).
    pub pci_bus_id: Option<String>,
    /// MIG mode is on (`nvmlDeviceGetMigMode`); `None` on a device without MIG.
    pub mig: Option<bool>,
}

/// The last reading of each device, by ordinal (empty until NVML was opened); kept in the daemon's
/// [`State`](crate::state::State), written by [`Sensors`] alone.
#[derive(Default)]
pub struct Latest(Mutex<Vec<Reading>>);

impl Latest {
    /// Device `device`'s last reading (all unknown when there is none).
    pub fn get(&self, device: u32) -> Reading {
        // A reading is replaced whole, so a poisoned lock still guards a consistent list.
        let latest = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        latest.get(device as usize).cloned().unwrap_or_default()
    }

    /// Every device's last reading, by ordinal (empty until NVML was opened).
    pub fn all(&self) -> Vec<Reading> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces every device's reading with `readings`.
    fn set(&self, readings: Vec<Reading>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = readings;
    }
}

/// The PCI address NVML gives `handle`, in sysfs's form (`None` when the query fails or is missing).
fn pci_bus_id(query: Option<PciInfo>, handle: NvmlDevice) -> Option<String> {
    // SAFETY: nvmlPciInfo_t is plain data (integers and byte arrays), valid all zero.
    let mut info: NvmlPciInfo = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer for one nvmlPciInfo_t (the v3 layout the `_v3` entry writes).
    let rc = unsafe { query?(handle, &mut info) };
    (rc == NVML_SUCCESS).then(|| format!("{:04x}:{:02x}:{:02x}.0", info.domain, info.bus, info.device))
}

/// NVML, loaded, with the queries it has and the devices' handles.
pub struct Sensors {
    /// Kept loaded while the queries may be called.
    _nvml: Nvml,
    queries: Queries,
    handles: Vec<NvmlDevice>,
    /// The daemon's state, where the readings are kept.
    state: Arc<State>,
}

/// The queries read every [`PERIOD`], each `None` when the library lacks it.
#[derive(Default)]
struct Queries {
    mig: Option<MigMode>,
    utilization: Option<Utilization>,
    power: Option<Power>,
    temperature: Option<Temperature>,
}

// SAFETY: the handles are NVML's opaque, process-wide device handles, valid on any thread; the value is
// used by one thread at a time (it is moved into the sensors thread).
unsafe impl Send for Sensors {}

/// Text an NVML query writes into a buffer (`None` when it fails or is missing).
fn text(query: Option<Text>, handle: NvmlDevice) -> Option<String> {
    let mut buf = [0 as c_char; TEXT_LEN];
    // SAFETY: `buf` holds `buf.len()` bytes, the length passed; the handle is NVML's.
    let rc = unsafe { query?(handle, buf.as_mut_ptr(), buf.len() as c_uint) };
    if rc != NVML_SUCCESS {
        return None;
    }
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

impl Sensors {
    /// Loads NVML, opens devices `0..devices` and reads their names and UUIDs; the error names the
    /// library and the call that failed.
    pub fn open(name: &str, devices: u32, state: Arc<State>) -> Result<Sensors, NvmlError> {
        let nvml = Nvml::load(name)?;
        // SAFETY: each type is the entry point's signature in nvml.h; the pointers are called only while
        // `nvml` is loaded (the queries are kept with it, the others are used here only).
        let (pci_info, device_name, uuid, queries) = unsafe {
            (
                nvml.function::<PciInfo>("nvmlDeviceGetPciInfo_v3"),
                nvml.function::<Text>("nvmlDeviceGetName"),
                nvml.function::<Text>("nvmlDeviceGetUUID"),
                Queries {
                    mig: nvml.function::<MigMode>("nvmlDeviceGetMigMode"),
                    utilization: nvml.function::<Utilization>("nvmlDeviceGetUtilizationRates"),
                    power: nvml.function::<Power>("nvmlDeviceGetPowerUsage"),
                    temperature: nvml.function::<Temperature>("nvmlDeviceGetTemperature"),
                },
            )
        };
        let handles = nvml.handles(devices.min(MAX_DEVICES as u32))?;
        let readings = handles
            .iter()
            .map(|&handle| {
                let mut reading = Reading {
                    name: text(device_name, handle).unwrap_or_default(),
                    uuid: text(uuid, handle).filter(|u| !u.is_empty()),
                    pci_bus_id: pci_bus_id(pci_info, handle),
                    ..Reading::default()
                };
                queries.read(handle, &mut reading);
                reading
            })
            .collect();
        state.sensors.set(readings);
        Ok(Sensors { _nvml: nvml, queries, handles, state })
    }

    /// Reads every device again every [`PERIOD`] until `stop` is set.
    pub fn run(self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(PERIOD);
            let mut readings: Vec<Reading> =
                (0..self.handles.len() as u32).map(|d| self.state.sensors.get(d)).collect();
            for (&handle, reading) in self.handles.iter().zip(readings.iter_mut()) {
                self.queries.read(handle, reading);
            }
            self.state.sensors.set(readings);
        }
    }
}

impl Queries {
    /// Reads the utilization, power, MIG mode and temperature of the device of `handle` into `reading`.
    fn read(&self, handle: NvmlDevice, reading: &mut Reading) {
        reading.utilization_pct = self.utilization.and_then(|query| {
            let mut u = NvmlUtilization::default();
            // SAFETY: a valid out-pointer for one nvmlUtilization_t; the handle is NVML's.
            (unsafe { query(handle, &mut u) } == NVML_SUCCESS).then_some(f64::from(u.gpu.min(100)))
        });
        reading.power_watts = self.power.and_then(|query| {
            let mut mw: c_uint = 0;
            // SAFETY: a valid out-pointer; the handle is NVML's.
            (unsafe { query(handle, &mut mw) } == NVML_SUCCESS).then_some(f64::from(mw) / 1000.0)
        });
        reading.mig = self.mig.and_then(|query| {
            let (mut current, mut pending): (c_uint, c_uint) = (0, 0);
            // SAFETY: two valid out-pointers; the handle is NVML's.
            (unsafe { query(handle, &mut current, &mut pending) } == NVML_SUCCESS)
                .then_some(current == NVML_DEVICE_MIG_ENABLE)
        });
        reading.temperature_c = self.temperature.and_then(|query| {
            let mut c: c_uint = 0;
            // SAFETY: a valid out-pointer; the handle is NVML's.
            (unsafe { query(handle, NVML_TEMPERATURE_GPU, &mut c) } == NVML_SUCCESS).then_some(f64::from(c))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_without_the_queries_leaves_the_figures_unknown() {
        // No query is called: the handle is never used.
        let mut reading = Reading { utilization_pct: Some(1.0), power_watts: Some(1.0), ..Reading::default() };
        Queries::default().read(std::ptr::null_mut(), &mut reading);
        assert_eq!(reading, Reading::default());
        assert_eq!(text(None, std::ptr::null_mut()), None);
    }
}
