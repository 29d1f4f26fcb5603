//! The slots a process accounts in: a vGPU's in the shared region file, joined by name through the one
//! implementation the daemon uses too ([`tessera_region::attach`]), or the private quota of a process
//! started without `TESSERA_VGPU`, which goes through the same accounting on slots of its own.

pub use tessera_region::attach::{Attached, attach_with_share};
pub use tessera_region::settings::{Limits, describe};

use std::sync::atomic::Ordering;
use tessera_region::{VgpuSlot, state};

/// A quota of this process's own, never shared: a slot in private memory, whose first process slot is
/// this process's.
pub fn private(limits: &Limits) -> Attached {
    // SAFETY: VgpuSlot is integers and atomics, for which all-zero is a valid value.
    let vgpu: &'static VgpuSlot = unsafe { Box::leak(Box::<VgpuSlot>::new_zeroed().assume_init()) };
    vgpu.live.procs_hwm.store(1, Ordering::Release);
    let me = &vgpu.live.procs[0];
    for (slot, &l) in vgpu.config.limit.iter().zip(limits) {
        slot.store(l, Ordering::Relaxed);
    }
    vgpu.config.state.store(state::READY, Ordering::Release);
    Attached { region: None, vgpu, vgpu_index: 0, me, me_index: None }
}
