//! Devices: enumeration, names, UUIDs, memory and attributes, from the configured profiles.

use crate::driver::driver;
use crate::guard::{CuRes, c_str, ensure, entry, out};
use simgpu::DeviceConfig;
use std::ffi::{c_char, c_int};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUdevice, CUdevice_attribute as A, CUuuid};

fn config(dev: CUdevice) -> CuRes<&'static DeviceConfig> {
    let d = driver()?;
    Ok(d.device_config(d.device(dev)?))
}

/// Copies `text` into a caller buffer of `len` bytes, NUL-terminated and truncated to fit.
fn write_string(dst: *mut c_char, len: c_int, text: &str) -> CuRes {
    ensure(!dst.is_null() && len > 0)?;
    let n = text.len().min(len as usize - 1);
    // SAFETY: the caller's buffer holds `len` bytes; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), dst as *mut u8, n);
        *dst.add(n) = 0;
    }
    Ok(())
}

/// `cuDeviceGet`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CuResult {
    entry(|| {
        driver()?.device(ordinal)?;
        out(dev, ordinal)
    })
}

/// `cuDeviceGetCount`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CuResult {
    entry(|| out(count, driver()?.visible.len() as c_int))
}

/// `cuDeviceGetName`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CuResult {
    entry(|| write_string(name, len, config(dev)?.profile.name))
}

fn uuid(out_uuid: *mut CUuuid, dev: CUdevice) -> CuRes {
    let d = driver()?;
    // A MIG device reports its `MIG-` UUID.
    out(out_uuid as *mut [u8; 16], d.visible[d.device(dev)?].uuid())
}

/// `cuDeviceGetUuid`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetUuid(u: *mut CUuuid, dev: CUdevice) -> CuResult {
    entry(|| uuid(u, dev))
}

/// `cuDeviceGetUuid_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetUuid_v2(u: *mut CUuuid, dev: CUdevice) -> CuResult {
    entry(|| uuid(u, dev))
}

/// `cuDeviceTotalMem_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CuResult {
    entry(|| out(bytes, config(dev)?.total_memory as usize))
}

/// `cuDeviceComputeCapability` (deprecated but still exported).
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) -> CuResult {
    entry(|| {
        let (ma, mi) = config(dev)?.profile.compute_capability;
        out(major, ma as c_int)?;
        out(minor, mi as c_int)
    })
}

/// The value of a device attribute, or `None` for attributes the simulation does not know.
pub fn attribute(c: &DeviceConfig, attr: c_int) -> Option<c_int> {
    let p = c.profile;
    let (major, minor) = p.compute_capability;
    let is = |a: A| a as c_int == attr;
    let smem_per_sm = if major >= 9 {
        233_472
    } else if minor == 0 {
        167_936
    } else {
        102_400
    };
    let table: &[(A, c_int)] = &[
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, i32::MAX),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535),
        (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152),
        (A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536),
        (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
        (A::CU_DEVICE_ATTRIBUTE_MAX_PITCH, i32::MAX),
        (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536),
        (A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE, p.clock_khz as c_int),
        (A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512),
        (A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1),
        (A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c.sm_count as c_int),
        (A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1),
        (A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED, p.mig_capable as c_int),
        (A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, c.pci_bus() as c_int),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, p.memory_clock_khz as c_int),
        (A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, p.memory_bus_width as c_int),
        (A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, p.l2_cache_bytes as c_int),
        (A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, if minor == 0 { 2048 } else { 1536 }),
        (A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2),
        (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major as c_int),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor as c_int),
        (A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, smem_per_sm),
        (A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536),
        (A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1),
        (A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, smem_per_sm - 1024),
        (A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 1),
        // Shared memory the system keeps of each block (1 KiB since compute capability 8.0), and thread
        // block clusters (9.0 on): libraries choose their kernels by them (cuBLASLt among them).
        (A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024),
        (A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, (major >= 9) as c_int),
        (A::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
        (A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0),
        (A::CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0),
    ];
    table.iter().find(|(a, _)| is(*a)).map(|(_, v)| *v)
}

/// `cuDeviceGetAttribute`: known attributes from the profile, 0 for other valid ones.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attr: c_int, dev: CUdevice) -> CuResult {
    entry(|| {
        let c = config(dev)?;
        ensure(attr > 0 && attr < A::CU_DEVICE_ATTRIBUTE_MAX as c_int)?;
        let known = attribute(c, attr);
        if known.is_none() && crate::guard::tracing() {
            eprintln!("simgpu: cuDeviceGetAttribute({attr}) is not simulated: 0");
        }
        out(value, known.unwrap_or(0))
    })
}

/// `cuDeviceGetPCIBusId`: `domain:bus:device.function`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CuResult {
    entry(|| write_string(bus_id, len, &format!("0000:{:02X}:00.0", config(dev)?.pci_bus())))
}

/// `cuDeviceGetByPCIBusId`: accepts 4- or 8-digit domains, any case.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, bus_id: *const c_char) -> CuResult {
    entry(|| {
        let d = driver()?;
        let text = c_str(bus_id)?;
        let mut parts = text.split([':', '.']);
        let (domain, bus) = (parts.next(), parts.next());
        let domain = domain.and_then(|s| u32::from_str_radix(s, 16).ok());
        let bus = bus.and_then(|s| u32::from_str_radix(s, 16).ok());
        match (domain, bus) {
            (Some(0), Some(bus)) => {
                let i = d.visible.iter().position(|v| v.config.pci_bus() == bus).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
                out(dev, i as CUdevice)
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `cuDeviceCanAccessPeer`: simulated devices share one address space.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CuResult {
    entry(|| {
        config(dev)?;
        config(peer)?;
        out(can, (dev != peer) as c_int)
    })
}
