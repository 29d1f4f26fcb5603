//! Which vGPUs are alone on their device: [`flags::ALONE`] set on a managed vGPU when no other vGPU of its
//! device has been active (launched, or had work queued or waiting) within [`fairness::ACTIVE_NS`], cleared
//! otherwise; written every tick of the device's loop.
//!
//! Why it matters: the daemon charges each kernel by the device-wide order of completions, which needs the
//! end of every kernel of every vGPU while several share the device. A vGPU alone on its device cannot have
//! another vGPU's kernel run between two of its own, so its shims may measure its launches a batch at a time
//! (one completion event per batch instead of one per launch): exactly the same charge, a fraction of the
//! cost. The flag is cleared at the tick after another vGPU shows activity (within a millisecond, at the
//! pace of a device with work), so only what the alone vGPU batched in that millisecond can straddle the
//! newcomer's first kernels.

use std::sync::atomic::Ordering;
use tessera_policy::fairness;
use tessera_policy::refill::Observed;
use tessera_region::{Region, flags};

/// Sets [`flags::ALONE`] on each of `members` (slot indices of one device's managed vGPUs, seen at `now_ns`
/// as `seen`) that is the only active one, and clears it on the others.
pub fn mark(region: &Region, members: &[usize], seen: &[Observed], now_ns: u64) {
    let active: Vec<bool> = seen.iter().map(|o| o.active_within(now_ns, fairness::ACTIVE_NS)).collect();
    for (k, &i) in members.iter().enumerate() {
        let others = active.iter().enumerate().any(|(j, &a)| a && j != k);
        let f = &region.vgpus[i].config.flags;
        if others {
            f.fetch_and(!flags::ALONE, Ordering::AcqRel);
        } else if f.load(Ordering::Relaxed) & flags::ALONE == 0 {
            f.fetch_or(flags::ALONE, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region() -> &'static Region {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Region>::new_zeroed().assume_init() })
    }

    #[test]
    fn only_a_vgpu_without_active_neighbours_is_alone() {
        let r = region();
        let now = 10 * fairness::ACTIVE_NS;
        let idle = Observed { processes: true, ..Observed::default() };
        let busy = Observed { inflight_ns: 5, ..idle };
        let alone = |i: usize| r.vgpus[i].flags() & flags::ALONE != 0;
        mark(r, &[3, 7], &[busy, idle], now);
        assert!(alone(3) && !alone(7), "7 would start beside a busy neighbour");
        let launched = Observed { last_launch_ns: now - fairness::ACTIVE_NS / 2, ..idle };
        mark(r, &[3, 7], &[busy, launched], now);
        assert!(!alone(3) && !alone(7));
        // The neighbour's last launch grows old: 3 is alone again; other flags are kept.
        r.vgpus[3].config.flags.fetch_or(flags::MANAGED, Ordering::Relaxed);
        mark(r, &[3, 7], &[busy, launched], now + fairness::ACTIVE_NS);
        assert!(alone(3) && !alone(7));
        assert_ne!(r.vgpus[3].flags() & flags::MANAGED, 0);
    }
}
