//! The refill loop of one device: every millisecond while any vGPU there has demand (at absolute
//! deadlines, so it does not drift), else every [`IDLE_NS`], and at once when a launch that must wait
//! wakes it through the device's `demand` futex word (while it ticks every millisecond anyway, such
//! wake-ups are not waited for: they would only make ticks more frequent, not grant more).
//!
//! Each tick first has the device's [`Charger`] charge the kernels that finished since the last one (their
//! device time taken from `tokens`, the launches' estimates given back); then it reads the device's
//! managed vGPUs from the region, asks [`refill::plan`] for their grants (the whole interval, split by
//! share), adds them to the buckets and wakes waiting launches.

use crate::charger::Charger;
use crate::refill::{self, Observed, Vgpu};
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_ffi::futex;
use tessera_ffi::reclaim::CLAIMING;
use tessera_ffi::region::{MAX_VGPUS, Region, flags, state};

/// Tick period while a vGPU on the device has demand.
pub const TICK_NS: u64 = 1_000_000;
/// Tick period while none has (the heartbeat still advances).
pub const IDLE_NS: u64 = 100_000_000;
/// Longest interval one tick grants for (a stalled daemon does not hand out a flood).
pub const MAX_DT_NS: u64 = 100_000_000;

/// Which vGPU slots have at least one process attached.
fn with_processes(region: &Region) -> [bool; MAX_VGPUS] {
    let mut found = [false; MAX_VGPUS];
    for p in &region.procs {
        let pid = p.pid.load(Ordering::Acquire);
        let v = p.vgpu.load(Ordering::Relaxed) as usize;
        if pid != 0 && pid != CLAIMING && v < MAX_VGPUS {
            found[v] = true;
        }
    }
    found
}

/// One tick of device `device` (whose charger is `charger`) for an interval of `dt_ns` ending at
/// `now_ns`: charges what finished, then refills. Returns true when a vGPU there has demand (the loop then
/// keeps the 1 ms pace).
pub fn tick(region: &Region, device: u32, charger: &mut Charger, now_ns: u64, dt_ns: u64) -> bool {
    charger.charge(region, device, now_ns);
    let procs = with_processes(region);
    let members: Vec<usize> = (0..MAX_VGPUS)
        .filter(|&i| {
            let v = &region.vgpus[i];
            v.state.load(Ordering::Acquire) == state::READY
                && v.sched.flags.load(Ordering::Acquire) & flags::MANAGED != 0
                && v.sched.device.load(Ordering::Acquire) == device
        })
        .collect();
    let views: Vec<Vgpu> = members
        .iter()
        .map(|&i| {
            let s = &region.vgpus[i].sched;
            let f = s.flags.load(Ordering::Acquire);
            let burst = refill::burst(s.window_ns.load(Ordering::Relaxed));
            let seen = Observed {
                waiters: s.waiters.load(Ordering::Acquire),
                inflight_ns: s.inflight_ns.load(Ordering::Acquire),
                last_launch_ns: s.last_launch_ns.load(Ordering::Acquire),
                processes: procs[i],
            };
            Vgpu {
                share: s.share.load(Ordering::Relaxed),
                priority: s.priority.load(Ordering::Relaxed),
                cap: f & flags::CAP != 0,
                suspended: f & flags::SUSPENDED != 0,
                demand: seen.demand(now_ns),
                busy: seen.busy(),
                room: refill::room(s.tokens.load(Ordering::Acquire), burst),
            }
        })
        .collect();
    let hold = region.devices.get(device as usize).is_some_and(|d| d.high_until_ns.load(Ordering::Acquire) > now_ns);
    let grants = refill::plan(&views, dt_ns, hold);
    for (&i, grant) in members.iter().zip(grants) {
        let s = &region.vgpus[i].sched;
        let burst = refill::burst(s.window_ns.load(Ordering::Relaxed));
        let before = s
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                let after = refill::refill(t, grant, burst);
                (after != t).then_some(after)
            })
            .unwrap_or_else(|t| t);
        let after = refill::refill(before, grant, burst);
        if refill::should_wake(before, after, s.waiters.load(Ordering::Acquire)) {
            crate::slots::notify(s);
        }
    }
    views.iter().any(|v| v.demand)
}

/// Runs device `device`'s loop until `stop` is set (checked at least every [`IDLE_NS`]).
pub fn run(region: &Region, device: u32, stop: &AtomicBool) {
    let Some(dev) = region.devices.get(device as usize) else { return };
    let mut charger = Charger::new(region, device);
    let mut last = futex::monotonic_ns();
    let mut deadline = last;
    while !stop.load(Ordering::Acquire) {
        let seen = dev.demand.load(Ordering::Acquire);
        let now = futex::monotonic_ns();
        let busy = tick(region, device, &mut charger, now, (now - last).min(MAX_DT_NS));
        last = now;
        region.daemon.heartbeat_ns.fetch_max(now, Ordering::AcqRel);
        if busy {
            // Every tick grants for the time elapsed since the last, so ticking sooner gains nothing: launches
            // waiting for tokens (which wake the daemon each time they go back to sleep) wait for the tick.
            deadline = (deadline + TICK_NS).max(now);
            futex::sleep_until(deadline);
        } else {
            deadline = now + IDLE_NS;
            futex::wait_until(&dev.demand, seen, deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ffi::region::priority;

    const MS: u64 = 1_000_000;

    fn region() -> &'static Region {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Region>::new_zeroed().assume_init() })
    }

    /// Slot `i`: managed, on device 0 with `share`, a process attached, `waiters` waiting.
    fn managed(r: &Region, i: usize, share: u32, waiters: u32) {
        let v = &r.vgpus[i];
        v.state.store(state::READY, Ordering::Relaxed);
        v.sched.flags.store(flags::MANAGED, Ordering::Relaxed);
        v.sched.share.store(share, Ordering::Relaxed);
        v.sched.priority.store(priority::NORMAL, Ordering::Relaxed);
        v.sched.window_ns.store(MS, Ordering::Relaxed);
        v.sched.waiters.store(waiters, Ordering::Relaxed);
        r.procs[i].vgpu.store(i as u32, Ordering::Relaxed);
        r.procs[i].pid.store(1000 + i as u32, Ordering::Release);
    }

    fn tokens(r: &Region, i: usize) -> i64 {
        r.vgpus[i].sched.tokens.load(Ordering::Relaxed)
    }

    #[test]
    fn ticks_grant_by_share_clamp_to_the_burst_and_wake() {
        let r = region();
        managed(r, 0, 30, 1);
        managed(r, 1, 70, 1);
        managed(r, 2, 0, 0);
        r.vgpus[2].sched.device.store(1, Ordering::Relaxed);
        let epoch = r.vgpus[0].sched.epoch.load(Ordering::Relaxed);
        let charger = &mut Charger::new(r, 0);
        assert!(tick(r, 0, charger, 10 * MS, MS));
        assert_eq!((tokens(r, 0), tokens(r, 1), tokens(r, 2)), (300_000, 700_000, 0));
        assert_eq!(r.vgpus[0].sched.epoch.load(Ordering::Relaxed), epoch + 1, "waiters are woken");
        for _ in 0..10 {
            tick(r, 0, charger, 11 * MS, MS);
        }
        assert_eq!((tokens(r, 0), tokens(r, 1)), (2 * MS as i64, 2 * MS as i64), "held to the burst");
        // Debt stays debt; an idle vGPU gets nothing and the tick reports no demand.
        r.vgpus[0].sched.tokens.store(-5 * MS as i64, Ordering::Relaxed);
        r.vgpus[1].sched.waiters.store(0, Ordering::Relaxed);
        assert!(tick(r, 0, charger, 12 * MS, MS));
        assert_eq!(tokens(r, 0), -4 * MS as i64);
        r.vgpus[0].sched.waiters.store(0, Ordering::Relaxed);
        assert!(!tick(r, 0, charger, 20 * MS, MS));
        assert_eq!(tokens(r, 0), -4 * MS as i64);
    }
}
