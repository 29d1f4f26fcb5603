//! Processes using a device, as the running-process queries report them.

use simgpu::SharedState;
use std::sync::atomic::Ordering;
use tessera_ffi::nvml::{INSTANCE_ID_NONE, NvmlProcessInfoV1, NvmlProcessInfoV2};
use tessera_region::pid_ns::ProcView;

/// One process's use of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Process id.
    pub pid: u32,
    /// Device memory it holds (allocations and context reservations), in bytes.
    pub bytes: u64,
}

/// Every live registered process holding memory or a context on device `ordinal`, in state-file order.
/// Processes that died are reclaimed first, so they never appear.
pub fn running(state: &SharedState, ordinal: usize) -> Vec<Usage> {
    state.reclaim_dead();
    let view = ProcView::new();
    state
        .processes()
        .filter_map(|p| {
            // The entry may be freed or reclaimed between the listing and here. NVML names a process by its
            // pid on the host, as the reader sees it.
            let pid = p.pid_here(&view)?;
            let bytes = p.memory[ordinal].load(Ordering::Acquire);
            let contexts = p.contexts[ordinal].load(Ordering::Acquire);
            (bytes > 0 || contexts > 0).then_some(Usage { pid, bytes })
        })
        .collect()
}

impl From<Usage> for NvmlProcessInfoV1 {
    fn from(u: Usage) -> Self {
        NvmlProcessInfoV1 { pid: u.pid, used_gpu_memory: u.bytes }
    }
}

impl From<Usage> for NvmlProcessInfoV2 {
    fn from(u: Usage) -> Self {
        NvmlProcessInfoV2 {
            pid: u.pid,
            used_gpu_memory: u.bytes,
            gpu_instance_id: INSTANCE_ID_NONE,
            compute_instance_id: INSTANCE_ID_NONE,
        }
    }
}
