//! NVML queries beyond `tessera info`'s, for the cluster provider: a device's identity (UUID, minor
//! number, NUMA node, PCIe link, VBIOS), its topology to another device, its running processes and its
//! live metrics. Each is `None` when the library lacks the call or answers an error (models without the
//! sensor answer `NVML_ERROR_NOT_SUPPORTED`).

use crate::nvml::{Device, Nvml, ok};
use std::ffi::{CStr, CString, c_char, c_uint};
use tessera_ffi::nvml::{NVML_CLOCK_SM, NVML_TEMPERATURE_GPU, NvmlDevice, NvmlMemory, NvmlProcessInfo, NvmlReturn};
use tessera_ffi::nvml::{NVML_ERROR_INSUFFICIENT_SIZE, NvmlPciInfo, NvmlUtilization};

/// `NVML_PCIE_UTIL_TX_BYTES` / `NVML_PCIE_UTIL_RX_BYTES` of `nvmlPcieUtilCounter_t`.
const PCIE_TX: u32 = 0;
const PCIE_RX: u32 = 1;

/// NVML's `nvmlGpuTopologyLevel_t`: the closest common ancestor of two devices' PCI paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyLevel {
    /// `NVML_TOPOLOGY_INTERNAL` (0): the same board.
    Internal,
    /// `NVML_TOPOLOGY_SINGLE` (10): one PCIe switch.
    Single,
    /// `NVML_TOPOLOGY_MULTIPLE` (20): several switches, no host bridge.
    Multiple,
    /// `NVML_TOPOLOGY_HOSTBRIDGE` (30): the same host bridge.
    HostBridge,
    /// `NVML_TOPOLOGY_NODE` (40): the same NUMA node.
    Node,
    /// `NVML_TOPOLOGY_SYSTEM` (50): across NUMA nodes.
    System,
}

impl TopologyLevel {
    /// The level of NVML value `v`.
    fn from_nvml(v: u32) -> Option<TopologyLevel> {
        Some(match v {
            0 => TopologyLevel::Internal,
            10 => TopologyLevel::Single,
            20 => TopologyLevel::Multiple,
            30 => TopologyLevel::HostBridge,
            40 => TopologyLevel::Node,
            50 => TopologyLevel::System,
            _ => return None,
        })
    }
}

/// One process using a device, as `nvmlDeviceGetComputeRunningProcesses_v3` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningProcess {
    /// Its pid.
    pub pid: u32,
    /// Device memory it uses, in bytes (0 when NVML cannot tell).
    pub used_bytes: u64,
}

impl Nvml {
    /// `nvmlDeviceGetCount_v2`.
    pub fn device_count(&self) -> Option<u32> {
        let f: unsafe extern "C" fn(*mut c_uint) -> NvmlReturn = self.symbol("nvmlDeviceGetCount_v2")?;
        let mut n = 0;
        // SAFETY: a valid out-pointer.
        ok(unsafe { f(&mut n) })?;
        Some(n)
    }

    /// `nvmlDeviceGetHandleByIndex_v2`: the device NVML numbers `index` (PCI bus order).
    pub fn device_at(&self, index: u32) -> Option<Device<'_>> {
        let f: unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn =
            self.symbol("nvmlDeviceGetHandleByIndex_v2")?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: an index and a valid out-pointer.
        ok(unsafe { f(index, &mut handle) })?;
        Some(Device { nvml: self, handle })
    }

    /// `nvmlDeviceGetHandleByUUID`: the device (or MIG device) with UUID `uuid`.
    pub fn device_by_uuid(&self, uuid: &str) -> Option<Device<'_>> {
        let f: unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn =
            self.symbol("nvmlDeviceGetHandleByUUID")?;
        let text = CString::new(uuid).ok()?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a valid out-pointer.
        ok(unsafe { f(text.as_ptr(), &mut handle) })?;
        Some(Device { nvml: self, handle })
    }
}

impl Device<'_> {
    /// A string query of the form `f(device, char *buf, unsigned int length)`.
    fn string(&self, name: &str) -> Option<String> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn = self.nvml.symbol(name)?;
        let mut buf = [0 as c_char; 128];
        // SAFETY: NVML's handle and a buffer of the length passed.
        ok(unsafe { f(self.handle, buf.as_mut_ptr(), buf.len() as c_uint) })?;
        buf[buf.len() - 1] = 0;
        // SAFETY: NUL-terminated (the last byte was just set).
        Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// `nvmlDeviceGetUUID`: `GPU-...`, or `MIG-...` for a MIG device.
    pub fn uuid(&self) -> Option<String> {
        self.string("nvmlDeviceGetUUID")
    }

    /// `nvmlDeviceGetName`.
    pub fn name(&self) -> Option<String> {
        self.string("nvmlDeviceGetName")
    }

    /// `nvmlDeviceGetPciInfo_v3`: the PCI bus id, `domain:bus:device.function`.
    pub fn pci_bus_id(&self) -> Option<String> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut NvmlPciInfo) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetPciInfo_v3")?;
        // SAFETY: a plain C struct of integers and chars, for which all zeroes is a valid value.
        let mut info: NvmlPciInfo = unsafe { std::mem::zeroed() };
        // SAFETY: NVML's handle and a valid out-pointer.
        ok(unsafe { f(self.handle, &mut info) })?;
        let end = info.bus_id.iter().position(|&b| b == 0).unwrap_or(info.bus_id.len());
        Some(String::from_utf8_lossy(&info.bus_id[..end]).into_owned())
    }

    /// `nvmlDeviceGetCudaComputeCapability`.
    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut i32, *mut i32) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetCudaComputeCapability")?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: NVML's handle and two valid out-pointers.
        ok(unsafe { f(self.handle, &mut major, &mut minor) })?;
        Some((major, minor))
    }

    /// SMs: CUDA cores (`nvmlDeviceGetNumGpuCores`) over the cores per SM of the compute capability.
    pub fn sm_count(&self) -> Option<u32> {
        let per_sm = crate::precision::cuda_cores_per_sm(self.compute_capability()?)?;
        Some(self.cuda_cores()? / per_sm)
    }

    /// `nvmlDeviceGetVbiosVersion`.
    pub fn vbios_version(&self) -> Option<String> {
        self.string("nvmlDeviceGetVbiosVersion")
    }

    /// `nvmlDeviceGetMinorNumber`: N of `/dev/nvidiaN`.
    pub fn minor_number(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetMinorNumber")
    }

    /// NVML answers `NVML_ERROR_GPU_IS_LOST` for it (fallen off the bus, or otherwise inaccessible),
    /// asked with `nvmlDeviceGetMinorNumber`, which every other device answers.
    pub fn is_lost(&self) -> bool {
        let Some(f) =
            self.nvml.symbol::<unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn>("nvmlDeviceGetMinorNumber")
        else {
            return false;
        };
        let mut minor = 0;
        // SAFETY: NVML's handle and a valid out-pointer.
        (unsafe { f(self.handle, &mut minor) }) == tessera_ffi::nvml::NVML_ERROR_GPU_IS_LOST
    }

    /// `nvmlDeviceGetNumaNodeId`.
    pub fn numa_node(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetNumaNodeId")
    }

    /// `nvmlDeviceGetMaxPcieLinkGeneration`.
    pub fn pcie_generation(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetMaxPcieLinkGeneration").filter(|&g| g > 0)
    }

    /// `nvmlDeviceGetMaxPcieLinkWidth`.
    pub fn pcie_width(&self) -> Option<u32> {
        self.uint("nvmlDeviceGetMaxPcieLinkWidth").filter(|&w| w > 0)
    }

    /// `nvmlDeviceGetPowerUsage`, in watts.
    pub fn power_watts(&self) -> Option<f64> {
        self.uint("nvmlDeviceGetPowerUsage").map(|mw| f64::from(mw) / 1000.0)
    }

    /// A query of the form `f(device, unsigned int selector, unsigned int *out)`.
    fn uint_of(&self, name: &str, selector: u32) -> Option<u32> {
        let f: unsafe extern "C" fn(NvmlDevice, u32, *mut c_uint) -> NvmlReturn = self.nvml.symbol(name)?;
        let mut v = 0;
        // SAFETY: NVML's handle, an enum value and a valid out-pointer.
        ok(unsafe { f(self.handle, selector, &mut v) })?;
        Some(v)
    }

    /// `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, in °C.
    pub fn temperature_c(&self) -> Option<u32> {
        self.uint_of("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
    }

    /// `nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)`, in MHz.
    pub fn max_sm_clock_mhz(&self) -> Option<u32> {
        self.uint_of("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM).filter(|&v| v > 0)
    }

    /// `nvmlDeviceGetPcieThroughput`: (received, transmitted) over the last 20 ms, in bytes per second.
    pub fn pcie_throughput(&self) -> Option<(u64, u64)> {
        let rx = self.uint_of("nvmlDeviceGetPcieThroughput", PCIE_RX)?;
        let tx = self.uint_of("nvmlDeviceGetPcieThroughput", PCIE_TX)?;
        Some((u64::from(rx) * 1024, u64::from(tx) * 1024))
    }

    /// `nvmlDeviceGetUtilizationRates`: (GPU busy, memory busy) in percent.
    pub fn utilization(&self) -> Option<(u32, u32)> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut NvmlUtilization) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetUtilizationRates")?;
        let mut u = NvmlUtilization { gpu: 0, memory: 0 };
        // SAFETY: NVML's handle and a valid out-pointer.
        ok(unsafe { f(self.handle, &mut u) })?;
        Some((u.gpu, u.memory))
    }

    /// `nvmlDeviceGetMemoryInfo`: (total, used) in bytes.
    pub fn memory(&self) -> Option<(u64, u64)> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetMemoryInfo")?;
        let mut m = NvmlMemory { total: 0, free: 0, used: 0 };
        // SAFETY: NVML's handle and a valid out-pointer.
        ok(unsafe { f(self.handle, &mut m) })?;
        Some((m.total, m.used))
    }

    /// `nvmlDeviceGetTopologyCommonAncestor` with `other`.
    pub fn common_ancestor(&self, other: &Device<'_>) -> Option<TopologyLevel> {
        let f: unsafe extern "C" fn(NvmlDevice, NvmlDevice, *mut c_uint) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetTopologyCommonAncestor")?;
        let mut level = 0;
        // SAFETY: two NVML handles and a valid out-pointer.
        ok(unsafe { f(self.handle, other.handle, &mut level) })?;
        TopologyLevel::from_nvml(level)
    }

    /// `nvmlDeviceGetComputeRunningProcesses_v3`: the processes with a context on the device.
    pub fn running_processes(&self) -> Option<Vec<RunningProcess>> {
        let f: unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfo) -> NvmlReturn =
            self.nvml.symbol("nvmlDeviceGetComputeRunningProcesses_v3")?;
        let mut room = 64usize;
        loop {
            // SAFETY: a plain C struct of integers, for which all zeroes is a valid value.
            let mut list = vec![unsafe { std::mem::zeroed::<NvmlProcessInfo>() }; room];
            let mut count = room as c_uint;
            // SAFETY: NVML's handle, the count of entries `list` holds, and `list`.
            let code = unsafe { f(self.handle, &mut count, list.as_mut_ptr()) };
            if code == NVML_ERROR_INSUFFICIENT_SIZE && room < 65536 {
                room = (count as usize).max(room * 2);
                continue;
            }
            ok(code)?;
            list.truncate(count as usize);
            // NVML reports "not available" memory as all ones.
            let used = |b: u64| if b == u64::MAX { 0 } else { b };
            return Some(
                list.iter().map(|p| RunningProcess { pid: p.pid, used_bytes: used(p.used_gpu_memory) }).collect(),
            );
        }
    }
}
