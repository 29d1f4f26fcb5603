//! `attributes`: what the driver reports about itself and every device.

use super::context;
use crate::args::Args;
use crate::fail::{During, Outcome};
use cudarc::driver::sys::CUdevice_attribute as A;
use cudarc::driver::{CudaContext, result, sys};
use serde_json::{Value, json};
use std::ffi::{CStr, CString, c_char};

/// Reports the driver version, the device count and each device's figures.
pub fn run(_args: &Args) -> Outcome {
    result::init().during("cuInit")?;
    let mut version = 0;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }.during("cuDriverGetVersion")?;
    let count = CudaContext::device_count().during("cuDeviceGetCount")?;
    let devices = (0..count as usize).map(device).collect::<Outcome<Vec<Value>>>()?;
    Ok(json!({ "driver_version": version, "device_count": count, "devices": devices }))
}

/// Formats a UUID as NVIDIA prints it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn uuid_string(uuid: &sys::CUuuid) -> String {
    let h: String = uuid.bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// `cuDeviceGetPCIBusId` and the ordinal `cuDeviceGetByPCIBusId` maps that text back to.
fn pci_bus_id(dev: sys::CUdevice) -> Outcome<(String, i32)> {
    let mut buf = [0 as c_char; 32];
    // SAFETY: the buffer holds `buf.len()` bytes, which the driver NUL-terminates within.
    unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }.during("cuDeviceGetPCIBusId")?;
    // SAFETY: NUL-terminated by the driver within the buffer.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    let c_text = CString::new(text.clone()).expect("no NUL inside");
    let mut back = -1;
    // SAFETY: a NUL-terminated bus id and a valid output pointer.
    unsafe { sys::cuDeviceGetByPCIBusId(&mut back, c_text.as_ptr()) }.during("cuDeviceGetByPCIBusId")?;
    Ok((text, back))
}

fn device(ordinal: usize) -> Outcome {
    let ctx = context(ordinal)?;
    let attr = |a: A| ctx.attribute(a).during(&format!("cuDeviceGetAttribute({a:?})"));
    let (major, minor) = ctx.compute_capability().during("compute capability")?;
    let (free, total_info) = ctx.mem_get_info().during("cuMemGetInfo")?;
    let (bus_id, by_bus_id) = pci_bus_id(ctx.cu_device())?;
    Ok(json!({
        "ordinal": ordinal,
        "name": ctx.name().during("cuDeviceGetName")?,
        "total_memory": ctx.total_mem().during("cuDeviceTotalMem")?,
        "mem_info_total": total_info,
        "mem_info_free": free,
        "sm_count": attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        "compute_capability": [major, minor],
        "clock_khz": attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        "memory_clock_khz": attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        "memory_bus_width": attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        "l2_cache_bytes": attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        "max_threads_per_block": attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        "max_threads_per_sm": attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        "warp_size": attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        "unified_addressing": attr(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
        "vmm_supported": attr(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)?,
        "memory_pools_supported": attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?,
        "pci_domain": attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        "pci_bus": attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        "pci_device": attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        "uuid": uuid_string(&ctx.uuid().during("cuDeviceGetUuid")?),
        "pci_bus_id": bus_id,
        "ordinal_by_pci_bus_id": by_bus_id,
    }))
}
