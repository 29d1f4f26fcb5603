//! What programs outside the daemon (the CLI's demo, the benches) need of its reading of the region and of
//! its arithmetic, so as to judge the daemon by its own rule: where a vGPU is, what the daemon's device loop
//! sees of a vGPU at a moment, and how it splits a device among vGPUs for an interval. Each is the daemon's
//! own function, not a copy.

use crate::compute::device_loop;
use tessera_region::VgpuSlot;
use tessera_region::file::Locked;

/// One vGPU as the daemon's token algorithm sees it, and the grants of each of them for an interval: the
/// policy crate's, which the daemon applies.
pub use tessera_policy::refill::{Vgpu, plan};

/// The slot of the vGPU named `name` in the region (read under its lock), if it is there.
pub fn find(locked: &Locked, name: &str) -> Option<usize> {
    crate::vgpus::slots::find(locked, name)
}

/// vGPU `v` at `now_ns` (`tessera_region::futex::monotonic_ns`) as the device loop reads it before it grants
/// tokens (settings, launches waiting, work queued, the last launch), its processes taken as attached (a
/// caller samples only while its processes run).
pub fn demand(v: &VgpuSlot, now_ns: u64) -> Vgpu {
    device_loop::view(v, &device_loop::observe(v, now_ns, true), now_ns)
}
