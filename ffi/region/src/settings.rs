//! A vGPU slot's settings as the claiming code and the daemon change them: its memory limits, its usage
//! and compute-share state started over, and whether the daemon manages it.

use super::layout::{DEFAULT_WINDOW_NS, MAX_DEVICES, UNLIMITED, VgpuSlot, flags, priority};
use std::sync::atomic::Ordering;
use tessera_ffi::units::format_size;

/// Per-device limits, [`UNLIMITED`] where none is set.
pub type Limits = [u64; MAX_DEVICES];

/// Describes limits for messages: `512.0 MiB on every device`, `0=1.0 GiB, 1=2.0 GiB`, `no limit`.
pub fn describe(limits: &Limits) -> String {
    if limits.iter().all(|&l| l == limits[0]) {
        return if limits[0] == UNLIMITED {
            "no limit".into()
        } else {
            format!("{} on every device", format_size(limits[0]))
        };
    }
    let set: Vec<String> = limits
        .iter()
        .enumerate()
        .filter(|(_, l)| **l != UNLIMITED)
        .map(|(d, l)| format!("{d}={}", format_size(*l)))
        .collect();
    format!("{} (no limit elsewhere)", set.join(", "))
}

/// A vGPU slot's limits.
pub fn limits_of(v: &VgpuSlot) -> Limits {
    std::array::from_fn(|d| v.config.limit[d].load(Ordering::Acquire))
}

/// Sets a vGPU slot's limits.
pub fn set_limits(v: &VgpuSlot, limits: &Limits) {
    for (slot, &l) in v.config.limit.iter().zip(limits) {
        slot.store(l, Ordering::Release);
    }
}

/// Starts a slot's usage figures over (peak, context costs, and any measuring turn a killed process left):
/// only for a slot no process is attached to.
pub fn reset_usage(v: &VgpuSlot) {
    let live = &v.live;
    for d in 0..MAX_DEVICES {
        live.peak[d].store(0, Ordering::Relaxed);
        live.context_cost[d].store(0, Ordering::Relaxed);
    }
    live.measuring.store(0, Ordering::Relaxed);
    live.last_reclaim_ns.store(0, Ordering::Relaxed);
}

/// Puts a slot's compute-share settings and state back to their defaults (device 0, share 0, normal
/// priority, no flags, no tokens, the default window, no memory wanted or swap time charged), keeping
/// `epoch` and the pager's request numbers (futex words and counters only ever incremented).
pub fn reset_sched(v: &VgpuSlot) {
    let c = &v.config;
    c.device.store(0, Ordering::Relaxed);
    c.share.store(0, Ordering::Relaxed);
    c.priority.store(priority::NORMAL, Ordering::Relaxed);
    c.flags.store(0, Ordering::Release);
    c.window_ns.store(DEFAULT_WINDOW_NS, Ordering::Relaxed);
    let s = &v.live.sched;
    s.waiters.store(0, Ordering::Relaxed);
    s.tokens.store(0, Ordering::Relaxed);
    s.inflight_ns.store(0, Ordering::Relaxed);
    for counter in [&s.last_launch_ns, &s.launches, &s.device_ns, &s.wait_ns, &s.last_refill_ns] {
        counter.store(0, Ordering::Relaxed);
    }
    for c in &s.charged_ns {
        c.store(0, Ordering::Relaxed);
    }
    v.live.pager.swap_charged_ns.store(0, Ordering::Relaxed);
}

/// True when the daemon manages the slot.
pub fn is_managed(v: &VgpuSlot) -> bool {
    v.flags() & flags::MANAGED != 0
}
