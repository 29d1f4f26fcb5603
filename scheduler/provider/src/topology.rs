//! `AccelGetAllDevicesTopology`: for every device, every other device and the closest common ancestor of
//! their PCI paths (`nvmlDeviceGetTopologyCommonAncestor`), as `nvidia-smi topo -m` shows it. A pair NVML
//! cannot place is `TOPO_LEVEL_UNKNOWN`.

use crate::abi::current::*;
use crate::abi::legacy;
use crate::context::Context;
use crate::text::put;
use tessera_host::nvml_more::TopologyLevel;

/// The ABI's level of NVML's.
fn level(l: Option<TopologyLevel>) -> TopoLevel {
    match l {
        Some(TopologyLevel::Internal) => TOPO_LEVEL_INTERNAL,
        Some(TopologyLevel::Single) => TOPO_LEVEL_SINGLE_SWITCH,
        Some(TopologyLevel::Multiple) => TOPO_LEVEL_MULTI_SWITCH,
        Some(TopologyLevel::HostBridge) => TOPO_LEVEL_HOST_BRIDGE,
        Some(TopologyLevel::Node) => TOPO_LEVEL_NUMA_NODE,
        Some(TopologyLevel::System) => TOPO_LEVEL_SYSTEM,
        None => TOPO_LEVEL_UNKNOWN,
    }
}

/// Fills `out` with every device (at most [`MAX_TOPOLOGY_DEVICES`]) and its peers.
pub fn fill(ctx: &Context, out: &mut ExtendedDeviceTopology) {
    let gpus = &ctx.gpus[..ctx.gpus.len().min(MAX_TOPOLOGY_DEVICES)];
    let handles: Vec<_> = gpus.iter().map(|g| ctx.nvml_device(g)).collect();
    out.device_count = gpus.len();
    for (i, (gpu, row)) in gpus.iter().zip(out.devices.iter_mut()).enumerate() {
        put(&mut row.device_uuid, &gpu.uuid);
        row.device_index = gpu.index as i32;
        row.numa_node =
            handles[i].as_ref().and_then(|h| h.numa_node()).and_then(|n| i32::try_from(n).ok()).unwrap_or(-1);
        let mut count = 0;
        for (j, peer) in gpus.iter().enumerate().filter(|&(j, _)| j != i) {
            let node = &mut row.peers[count];
            put(&mut node.peer_uuid, &peer.uuid);
            node.peer_index = peer.index as i32;
            node.topo_level = match (&handles[i], &handles[j]) {
                (Some(a), Some(b)) => level(a.common_ancestor(b)),
                _ => TOPO_LEVEL_UNKNOWN,
            };
            count += 1;
        }
        row.peer_count = count;
    }
}

/// Fills the earlier ABI's topology with the devices of `indices`: `NOT_FOUND` for an index there is not.
pub fn fill_legacy(
    ctx: &Context,
    indices: &[i32],
    out: &mut legacy::ExtendedDeviceTopology,
) -> Result<(), crate::guard::Fail> {
    if indices.len() > out.devices.len() {
        return Err(crate::guard::Fail::invalid(format!("at most {} devices", out.devices.len())));
    }
    for (slot, &i) in out.devices.iter_mut().zip(indices) {
        let gpu = usize::try_from(i).ok().and_then(|i| ctx.gpus.get(i)).ok_or_else(|| {
            crate::guard::Fail::new(ACCEL_ERROR_NOT_FOUND, format!("no device {i} (there are {})", ctx.gpus.len()))
        })?;
        put(&mut slot.device_uuid, &gpu.uuid);
        slot.numa_node =
            ctx.nvml_device(gpu).and_then(|h| h.numa_node()).and_then(|n| i32::try_from(n).ok()).unwrap_or(-1);
    }
    out.device_count = indices.len();
    put(&mut out.topology_type, "PCIe");
    Ok(())
}
