//! Topology exports: how far apart two devices are, the GPUs near a device or a CPU, peer-to-peer status,
//! NUMA node and CPU/memory affinity, all from the documented layout of [`simgpu::topology`] (pairs of
//! devices behind a PCIe switch, two NUMA nodes from 4 devices on, no NVLink).

use crate::{guard, handles, out};
use simgpu::topology::Topology;
use std::ffi::{c_uint, c_ulong};
use tessera_ffi::nvml::{
    NVML_AFFINITY_SCOPE_NODE, NVML_AFFINITY_SCOPE_SOCKET, NVML_ERROR_INVALID_ARGUMENT, NVML_P2P_CAPS_INDEX_NVLINK,
    NVML_P2P_CAPS_INDEX_UNKNOWN, NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, NVML_P2P_STATUS_NOT_SUPPORTED,
    NVML_P2P_STATUS_OK, NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_MULTIPLE, NVML_TOPOLOGY_NODE,
    NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_SYSTEM, NvmlDevice, NvmlReturn,
};

fn topology(rt: &crate::runtime::Runtime) -> Topology {
    Topology::of_host(rt.config.devices.len())
}

/// `nvmlDeviceGetTopologyCommonAncestor`: the `NVML_TOPOLOGY_*` level where the two devices' paths meet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: NvmlDevice,
    device2: NvmlDevice,
    path_info: *mut u32,
) -> NvmlReturn {
    guard::device(device1, |rt, a| {
        let b = rt.device(handles::ordinal(device2)?)?;
        let level = topology(rt).common_ancestor(a.ordinal as usize, b.ordinal as usize);
        // SAFETY: `path_info` is NULL or writable (crate safety contract).
        unsafe { out::write(path_info, level) }
    })
}

/// Answers a device list the way the topology queries do: with `*count` 0, the number of devices (and
/// `device_array` may be NULL); otherwise up to `*count` handles, and `*count` set to how many.
///
/// # Safety
/// `count` is NULL or readable and writable; `device_array` is NULL or holds `*count` elements.
unsafe fn write_devices(count: *mut c_uint, device_array: *mut NvmlDevice, ordinals: &[usize]) -> out::Outcome {
    if count.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL; readable (caller's guarantee).
    let room = unsafe { count.read() } as usize;
    if room == 0 {
        // SAFETY: writable (caller's guarantee).
        return unsafe { out::write(count, ordinals.len() as c_uint) };
    }
    if device_array.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let n = room.min(ordinals.len());
    for (i, &o) in ordinals[..n].iter().enumerate() {
        // SAFETY: i < n <= *count elements the caller provides.
        unsafe { device_array.add(i).write(handles::handle(o)) };
    }
    // SAFETY: writable (caller's guarantee).
    unsafe { out::write(count, n as c_uint) }
}

/// `nvmlDeviceGetTopologyNearestGpus`: the other devices whose path to this one meets at `level` or closer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyNearestGpus(
    device: NvmlDevice,
    level: u32,
    count: *mut c_uint,
    device_array: *mut NvmlDevice,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        let levels = [
            NVML_TOPOLOGY_INTERNAL,
            NVML_TOPOLOGY_SINGLE,
            NVML_TOPOLOGY_MULTIPLE,
            NVML_TOPOLOGY_HOSTBRIDGE,
            NVML_TOPOLOGY_NODE,
            NVML_TOPOLOGY_SYSTEM,
        ];
        if !levels.contains(&level) {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let t = topology(rt);
        let me = dev.ordinal as usize;
        let near: Vec<usize> = (0..t.devices).filter(|&o| o != me && t.common_ancestor(me, o) <= level).collect();
        // SAFETY: the caller's pointers, as nvml.h documents them (crate safety contract).
        unsafe { write_devices(count, device_array, &near) }
    })
}

/// `nvmlSystemGetTopologyGpuSet`: the devices whose CPU affinity includes CPU `cpu_number`;
/// `NVML_ERROR_INVALID_ARGUMENT` for a CPU the host does not have.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetTopologyGpuSet(
    cpu_number: c_uint,
    count: *mut c_uint,
    device_array: *mut NvmlDevice,
) -> NvmlReturn {
    guard::initialized(|rt| {
        let t = topology(rt);
        let cpu = cpu_number as usize;
        if cpu >= t.cpus {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let set: Vec<usize> = (0..t.devices).filter(|&o| t.node_cpus(t.node_of(o)).contains(&cpu)).collect();
        // SAFETY: the caller's pointers, as nvml.h documents them (crate safety contract).
        unsafe { write_devices(count, device_array, &set) }
    })
}

/// `nvmlDeviceGetP2PStatus`: PCIe reads, writes, atomics and the PCI capability work between devices of one
/// NUMA node (`NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED` across nodes); NVLink never
/// (`NVML_P2P_STATUS_NOT_SUPPORTED`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: NvmlDevice,
    device2: NvmlDevice,
    p2p_index: u32,
    p2p_status: *mut u32,
) -> NvmlReturn {
    guard::device(device1, |rt, a| {
        let b = rt.device(handles::ordinal(device2)?)?;
        if p2p_index >= NVML_P2P_CAPS_INDEX_UNKNOWN {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let level = topology(rt).common_ancestor(a.ordinal as usize, b.ordinal as usize);
        let status = if p2p_index == NVML_P2P_CAPS_INDEX_NVLINK {
            NVML_P2P_STATUS_NOT_SUPPORTED
        } else if level <= NVML_TOPOLOGY_NODE {
            NVML_P2P_STATUS_OK
        } else {
            NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        };
        // SAFETY: `p2p_status` is NULL or writable (crate safety contract).
        unsafe { out::write(p2p_status, status) }
    })
}

/// `nvmlDeviceGetNumaNodeId`: the device's NUMA node.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(device: NvmlDevice, node: *mut c_uint) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        // SAFETY: `node` is NULL or writable (crate safety contract).
        unsafe { out::write(node, topology(rt).node_of(dev.ordinal as usize) as c_uint) }
    })
}

/// Fills the caller's bitmask of `words` words (64 bits each on 64-bit Linux) with the bits in `bits`.
///
/// # Safety
/// `mask` is NULL or holds `words` writable words.
unsafe fn write_mask(mask: *mut c_ulong, words: c_uint, bits: impl Iterator<Item = usize>) -> out::Outcome {
    if mask.is_null() || words == 0 {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let per_word = c_ulong::BITS as usize;
    // SAFETY: `words` writable words at `mask` (caller's guarantee), zeroed before bits are set.
    unsafe {
        std::ptr::write_bytes(mask, 0, words as usize);
        for bit in bits.filter(|b| b / per_word < words as usize) {
            *mask.add(bit / per_word) |= 1 << (bit % per_word);
        }
    }
    Ok(())
}

/// `nvmlDeviceGetCpuAffinity`: the CPUs of the device's NUMA node, as a bitmask of `cpu_set_size` words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinity(
    device: NvmlDevice,
    cpu_set_size: c_uint,
    cpu_set: *mut c_ulong,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        let t = topology(rt);
        // SAFETY: the caller's array of `cpu_set_size` words (crate safety contract).
        unsafe { write_mask(cpu_set, cpu_set_size, t.node_cpus(t.node_of(dev.ordinal as usize))) }
    })
}

/// Checks an `nvmlAffinityScope_t`: a node and a socket are the same thing on the simulated host.
fn check_scope(scope: u32) -> out::Outcome {
    if scope == NVML_AFFINITY_SCOPE_NODE || scope == NVML_AFFINITY_SCOPE_SOCKET {
        Ok(())
    } else {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
}

/// `nvmlDeviceGetCpuAffinityWithinScope`: as [`nvmlDeviceGetCpuAffinity`], for either scope.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCpuAffinityWithinScope(
    device: NvmlDevice,
    cpu_set_size: c_uint,
    cpu_set: *mut c_ulong,
    scope: u32,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        check_scope(scope)?;
        let t = topology(rt);
        // SAFETY: the caller's array of `cpu_set_size` words (crate safety contract).
        unsafe { write_mask(cpu_set, cpu_set_size, t.node_cpus(t.node_of(dev.ordinal as usize))) }
    })
}

/// `nvmlDeviceGetMemoryAffinity`: the device's NUMA node, as a bitmask of `node_set_size` words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryAffinity(
    device: NvmlDevice,
    node_set_size: c_uint,
    node_set: *mut c_ulong,
    scope: u32,
) -> NvmlReturn {
    guard::device(device, |rt, dev| {
        check_scope(scope)?;
        let node = topology(rt).node_of(dev.ordinal as usize);
        // SAFETY: the caller's array of `node_set_size` words (crate safety contract).
        unsafe { write_mask(node_set, node_set_size, std::iter::once(node)) }
    })
}
