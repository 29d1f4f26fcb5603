//! What `AccelGetAllDevices` (and the earlier `GetAllDevices`) reports of each device: identity from the
//! CUDA driver and NVML, `maxTflops` from the per-architecture table (`tessera_host::precision`),
//! properties (compute capability, MIG mode and profiles, the Tessera vGPUs on it), and capabilities.

use crate::abi::current::{DeviceProperties, ExtendedDeviceInfo, MAX_DEVICE_PROPERTIES, VirtualizationCapabilities};
use crate::abi::legacy;
use crate::context::{Context, Gpu};
use crate::text::put;
use tessera_host::precision;

/// Most workers on one device: a worker is one vGPU, and the region holds this many.
pub const MAX_WORKERS: u32 = tessera_region::MAX_VGPUS as u32;

/// Everything reported of one device, before it is written into either ABI's struct.
#[derive(Debug, Clone)]
pub struct Report {
    /// The driver's facts.
    pub gpu: Gpu,
    /// Display driver version.
    pub driver_version: String,
    /// VBIOS version.
    pub firmware: String,
    /// `/dev/nvidiaN`.
    pub device_node: String,
    /// NUMA node, -1 when unknown.
    pub numa_node: i32,
    /// Peak dense FP16 TFLOPS.
    pub max_tflops: f64,
    /// PCIe generation and width (0 when unknown).
    pub pcie: (u32, u32),
    /// Key-value properties.
    pub properties: Vec<(String, String)>,
    /// Capabilities.
    pub capabilities: VirtualizationCapabilities,
}

/// The report of every device, with the daemon's vGPUs when it answers.
pub fn reports(ctx: &Context) -> Vec<Report> {
    let vgpus = crate::daemon::client().and_then(|c| c.list().ok());
    ctx.gpus.iter().map(|g| report(ctx, g, vgpus.as_deref())).collect()
}

/// The report of `gpu`; `vgpus` is the daemon's list, `None` without a daemon.
fn report(ctx: &Context, gpu: &Gpu, vgpus: Option<&[tessera_client::VgpuStatus]>) -> Report {
    let nv = ctx.nvml_device(gpu);
    let mig = nv.as_ref().and_then(|n| n.mig());
    let mut properties = vec![
        ("computeCapability".to_string(), format!("{}.{}", gpu.cc.0, gpu.cc.1)),
        ("pciBusId".into(), gpu.bus_id.clone()),
        ("smCount".into(), gpu.sms.to_string()),
        ("smClockMHz".into(), gpu.clock_mhz.to_string()),
        ("tflopsBasis".into(), "dense FP16, SMs x SM clock x ops per SM per clock of the architecture".into()),
    ];
    if let Some(arch) = nv.as_ref().and_then(|n| n.architecture()) {
        properties.push(("architecture".into(), arch.into()));
    }
    let mig_mode = match &mig {
        None => "unsupported",
        Some(m) if m.enabled => "enabled",
        Some(_) => "disabled",
    };
    properties.push(("migMode".into(), mig_mode.into()));
    if let Some(m) = &mig {
        let names: Vec<String> = m.profiles.iter().map(|p| format!("{}(id {})", p.name, p.id)).collect();
        properties.push(("migProfiles".into(), names.join(",")));
    }
    let on_device = vgpus.map(|list| {
        list.iter().filter(|v| v.spec.device == gpu.index).map(|v| v.spec.name.clone()).collect::<Vec<_>>().join(",")
    });
    properties.push(("tesseraVgpus".into(), on_device.unwrap_or_else(|| "(no daemon)".into())));
    properties.push(("tesseraDriver".into(), driver_kind(ctx).into()));
    let max_partitions = mig.as_ref().and_then(|m| m.profiles.iter().map(|p| p.instances).max()).unwrap_or(0);
    Report {
        driver_version: ctx.nvml.driver_version().unwrap_or_default(),
        firmware: nv.as_ref().and_then(|n| n.vbios_version()).unwrap_or_default(),
        device_node: format!("/dev/nvidia{}", nv.as_ref().and_then(|n| n.minor_number()).unwrap_or(gpu.index)),
        numa_node: nv.as_ref().and_then(|n| n.numa_node()).and_then(|n| i32::try_from(n).ok()).unwrap_or(-1),
        max_tflops: precision::peak_tflops(gpu.cc, gpu.sms, gpu.clock_mhz),
        pcie: (
            nv.as_ref().and_then(|n| n.pcie_generation()).unwrap_or(0),
            nv.as_ref().and_then(|n| n.pcie_width()).unwrap_or(0),
        ),
        properties,
        capabilities: VirtualizationCapabilities {
            supports_partitioning: mig.is_some(),
            supports_soft_isolation: true,
            supports_hard_isolation: true,
            supports_snapshot: crate::snapshot::SUPPORTED,
            supports_metrics: true,
            supports_remoting: false,
            max_partitions,
            max_workers_per_device: MAX_WORKERS,
        },
        gpu: gpu.clone(),
    }
}

/// `real` or `simulated`.
fn driver_kind(ctx: &Context) -> &'static str {
    if ctx.simulated { "simulated" } else { "real" }
}

/// Fills `props` with `list` (at most [`MAX_DEVICE_PROPERTIES`]).
fn put_properties(props: &mut DeviceProperties, list: &[(String, String)]) {
    props.count = list.len().min(MAX_DEVICE_PROPERTIES);
    for (slot, (k, v)) in props.properties.iter_mut().zip(list) {
        put(&mut slot.key, k);
        put(&mut slot.value, v);
    }
}

/// Writes `r` into the current ABI's struct.
pub fn fill(out: &mut ExtendedDeviceInfo, r: &Report) {
    let b = &mut out.basic;
    put(&mut b.uuid, &r.gpu.uuid);
    put(&mut b.vendor, "NVIDIA");
    put(&mut b.model, &r.gpu.name);
    put(&mut b.driver_version, &r.driver_version);
    put(&mut b.firmware_version, &r.firmware);
    put(&mut b.device_node, &r.device_node);
    b.index = r.gpu.index as i32;
    b.numa_node = r.numa_node;
    b.total_memory_bytes = r.gpu.memory;
    b.total_compute_units = u64::from(r.gpu.sms);
    b.max_tflops = r.max_tflops;
    (b.pcie_gen, b.pcie_width) = r.pcie;
    put_properties(&mut out.props, &r.properties);
    out.virtualization_capabilities = r.capabilities;
}

/// Writes `r` into the earlier ABI's struct.
pub fn fill_legacy(out: &mut legacy::ExtendedDeviceInfo, r: &Report) {
    let b = &mut out.basic;
    put(&mut b.uuid, &r.gpu.uuid);
    put(&mut b.vendor, "NVIDIA");
    put(&mut b.model, &r.gpu.name);
    put(&mut b.driver_version, &r.driver_version);
    put(&mut b.firmware_version, &r.firmware);
    b.index = r.gpu.index as i32;
    b.numa_node = r.numa_node;
    b.total_memory_bytes = r.gpu.memory;
    b.total_compute_units = u64::from(r.gpu.sms);
    b.max_tflops = r.max_tflops;
    (b.pcie_gen, b.pcie_width) = r.pcie;
    put_properties(&mut out.props, &r.properties);
    out.virtualization_capabilities = r.capabilities;
}
