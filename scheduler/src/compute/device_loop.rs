//! The refill loop of one device: every millisecond while any vGPU there has demand (at absolute
//! deadlines, so it does not drift), else every [`IDLE_NS`]; and at once when a process rings its vGPU's
//! `bell` — a launch that must wait while the device is idle, or a `high` vGPU that starts or stops having
//! work, or when a vGPU is configured or removed. While the loop ticks every millisecond anyway, another
//! vGPU's bell makes it tick early only when the device idles for want of tokens ([`starved`]): most
//! wake-ups would only make ticks more frequent, not grant more, but on an idle device whose vGPUs all
//! wait for tokens a tick charges what finished and grants at once what waiting would have
//! ([`refill::catch_up`]), instead of leaving the engine idle until the next deadline.
//!
//! Each tick first has the device's [`Charger`] charge the kernels that finished since the last one (their
//! device time taken from `tokens`, the launches' estimates given back); then it reads the device's
//! managed vGPUs from the region (clearing what processes that died left in a vGPU's window once none is
//! left), sets the device's `high` hold from what its `high` vGPUs are doing, asks
//! [`refill::plan`] for their grants (the whole interval, split by share), adds them to the buckets and
//! wakes waiting launches, and marks which vGPU is [alone](crate::compute::alone) on the device; on an idle device it
//! then lets the first waiting vGPU go at once
//! ([`refill::catch_up`]). Between the charge and the refill, the device's [`SwapOuts`] finds memory for
//! soft vGPUs whose processes wait for it (a process rings its vGPU's bell when it starts waiting), and
//! charges them the swap-out time it costs others; while it is at work the loop keeps the 1 ms pace.

use crate::compute::charger::{Charger, member};
use crate::memory::swap_out::SwapOuts;
use crate::state::State;
use crate::tenants::audit::Credits;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use tessera_policy::fairness::{self, Member};
use tessera_policy::refill::{self, Observed, Vgpu};
use tessera_region::futex;
use tessera_region::pid_ns;
use tessera_region::reclaim::{self, reclaim_vgpu};
use tessera_region::{DeviceSched, MAX_VGPUS, ProcSlot, Region, Sched, VgpuSlot, flags, priority};

/// Tick period while a vGPU on the device has demand.
pub const TICK_NS: u64 = 1_000_000;
/// Tick period while none has (the heartbeat still advances).
pub const IDLE_NS: u64 = 100_000_000;
/// Longest interval one tick grants for (a stalled daemon does not hand out a flood).
pub const MAX_DT_NS: u64 = 100_000_000;
/// How long a `high` vGPU's hold on its device lasts past each tick that found it with work: renewed every
/// tick, it outlives a daemon that died by this much at most.
pub const HIGH_HOLD_NS: u64 = 3 * TICK_NS;
/// How long after a `high` vGPU's last launch, with nothing of it queued any more, it still counts as
/// having work (a program between two launches).
pub const HIGH_IDLE_NS: u64 = 300_000;
/// Least time between two looks, by the loop, at whether the processes of a vGPU whose window blocks its
/// launches are alive (see [`release_dead_windows`]).
pub const LIVENESS_CHECK_NS: u64 = 5_000_000;

/// A word bumped whenever a vGPU is configured or removed, kept in the daemon's
/// [`State`](crate::state::State). Every loop listens to it, so that a vGPU created (or moved to the
/// device) while the loop sleeps at the idle pace, whose bell that sleep does not listen to, has its
/// first waiting launch heard at once rather than at the next idle tick.
#[derive(Default)]
pub struct Roster(AtomicU32);

impl Roster {
    /// Tells the device loops that vGPUs were configured or removed.
    pub fn changed(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.0);
    }
}

/// The managed vGPU slots of device `device`.
pub fn members(region: &Region, device: u32) -> Vec<usize> {
    (0..MAX_VGPUS).filter(|&i| member(&region.vgpus[i], device)).collect()
}

/// The last launch of `s` as of `now_ns`. Its tenant writes it: a time later than the tick in progress
/// could have seen (launches race with the tick, by microseconds) is no launch at all, so that a `high`
/// vGPU cannot hold the device idle by a launch dated in the future; a time just ahead is now.
fn last_launch(s: &Sched, now_ns: u64) -> u64 {
    match s.last_launch_ns.load(Ordering::Acquire) {
        t if t > now_ns.saturating_add(TICK_NS) => 0,
        t => t.min(now_ns),
    }
}

/// Sets device `dev`'s hold from its `high` vGPUs `highs` at `now_ns`: held while one has work, released
/// (and the device's waiting launches woken) once none has. Returns when to look again at the latest:
/// when an idle `high` vGPU's last launch stops counting.
fn hold(region: &Region, dev: &DeviceSched, members: &[usize], now_ns: u64, credits: &Credits) -> Option<u64> {
    let mut recheck = None;
    let mut active = false;
    for &i in members {
        let v = &region.vgpus[i];
        if v.config.priority.load(Ordering::Relaxed) < priority::HIGH || v.flags() & flags::SUSPENDED != 0 {
            continue;
        }
        let s = &v.live.sched;
        let last = last_launch(s, now_ns);
        if s.inflight_ns.load(Ordering::Acquire) > 0 || s.waiters.load(Ordering::Acquire) > 0 {
            active = true;
        } else if last != 0 && now_ns < last + HIGH_IDLE_NS {
            active = true;
            recheck = Some(recheck.map_or(last + HIGH_IDLE_NS, |r: u64| r.min(last + HIGH_IDLE_NS)));
        }
    }
    if active {
        dev.high_until_ns.fetch_max(now_ns + HIGH_HOLD_NS, Ordering::AcqRel);
    } else if dev.high_until_ns.load(Ordering::Acquire) > now_ns {
        dev.high_until_ns.store(now_ns, Ordering::Release);
        for &i in members {
            restart(&region.vgpus[i], i, credits);
            crate::vgpus::slots::notify(&region.vgpus[i].live.sched);
        }
    }
    recheck
}

/// Gives back at once what processes that died left in the window of a vGPU whose launches it blocks:
/// launches wait and the window is full, or the vGPU is `high` (work in its window holds the device).
/// At most every [`LIVENESS_CHECK_NS`] (`last`: when it last looked), one `kill(pid, 0)` per attached
/// process, no more; when one is gone, the vGPU's dead processes are reclaimed, which takes their parts
/// out of the window. A process killed but not reaped yet (a zombie, which `kill` still reaches) is left
/// to the once-a-second reclaim. Returns whether any process was reclaimed.
fn release_dead_windows(v: &VgpuSlot, now_ns: u64, last: &mut u64) -> bool {
    let (c, s) = (&v.config, &v.live.sched);
    let inflight = s.inflight_ns.load(Ordering::Acquire);
    let blocked = (s.waiters.load(Ordering::Acquire) > 0 && inflight >= c.window())
        || (c.priority.load(Ordering::Relaxed) >= priority::HIGH && inflight > 0);
    if !blocked || now_ns.saturating_sub(*last) < LIVENESS_CHECK_NS {
        return false;
    }
    *last = now_ns;
    // Only a certain death counts (`kill(pid, 0)` saying "no such process"); opens no descriptor. A pid of
    // another pid namespace means nothing to `kill` here: those are left to the once-a-second reclaim.
    let gone = |pid, p: &ProcSlot| pid_ns::is_own(p.ns()) && reclaim::exists(pid) == Some(false);
    v.attached().any(|(_, pid, p)| gone(pid, p)) && reclaim_vgpu(v, None, &pid_ns::Unseen) > 0
}

/// At the end of a hold, lets a lower-priority vGPU whose launches wait go at once with a window's worth
/// of work at its share: its bucket is raised to `share% × window` if below. A launch takes its whole
/// estimate from whatever the bucket holds, so a vGPU held to its share by tokens usually entered the hold
/// in debt; left so, it would wait for refills while the device, just emptied by the `high` vGPU, idles.
/// What this gives is at most one window's worth per hold; capped vGPUs are left to their share.
fn restart(v: &VgpuSlot, index: usize, credits: &Credits) {
    let (c, s) = (&v.config, &v.live.sched);
    let f = v.flags();
    if c.priority.load(Ordering::Relaxed) >= priority::HIGH
        || f & (flags::CAP | flags::SUSPENDED) != 0
        || s.waiters.load(Ordering::Acquire) == 0
    {
        return;
    }
    let level = c.window().saturating_mul(c.share.load(Ordering::Relaxed).min(100) as i64) / 100;
    let before = s.tokens.fetch_max(level, Ordering::AcqRel);
    credits.credit(index, level.saturating_sub(before).max(0));
}

/// The per-device state the loop keeps from tick to tick.
pub struct Device {
    /// Charges finished kernels.
    pub charger: Charger,
    /// Finds memory for soft vGPUs.
    pub swap_outs: SwapOuts,
    /// Each slot's [`fairness`] lag.
    lags: Vec<i64>,
    /// Each slot's charged device time ([`Charger::charged_ns`]) at the last tick.
    device_ns: Vec<u64>,
    /// When the loop last looked at whether each slot's processes are alive.
    checked: Vec<u64>,
    /// The daemon's state, where the loop counts the tokens it grants (for the audit).
    state: Arc<State>,
}

impl Device {
    /// The state of device `device`, continuing where a previous daemon stopped, in the daemon whose
    /// state is `state`.
    pub fn new(region: &Region, device: u32, state: Arc<State>) -> Device {
        Device {
            charger: Charger::new(region, device),
            swap_outs: SwapOuts::new(device),
            lags: vec![0; MAX_VGPUS],
            device_ns: vec![0; MAX_VGPUS],
            checked: vec![0; MAX_VGPUS],
            state,
        }
    }

    /// The token adjustment of each of `members` (whose views are `views`, and which take part in the
    /// tick where `part` says so) for this tick, from the device time each was charged since the last
    /// (see [`fairness`]).
    fn settle(&mut self, members: &[usize], views: &[Vgpu], recent: &[bool], part: &[bool]) -> Vec<i64> {
        let tick: Vec<Member> = members
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                // The daemon's own count: a tenant can write its `device_ns`, and would look owed time.
                let total = self.charger.charged_ns(i);
                let used = total.saturating_sub(std::mem::replace(&mut self.device_ns[i], total));
                let v = &views[k];
                Member { share: v.share, competes: part[k] && !v.cap && recent[k], demand: v.demand, used_ns: used }
            })
            .collect();
        let mut lags: Vec<i64> = members.iter().map(|&i| self.lags[i]).collect();
        let adjust = fairness::settle(&mut lags, &tick);
        self.lags.iter_mut().for_each(|l| *l = 0);
        for (&i, lag) in members.iter().zip(lags) {
            self.lags[i] = lag;
        }
        adjust
    }
}

/// What the loop reads of vGPU `v` at `now_ns` (`processes`: whether any process is attached).
pub fn observe(v: &VgpuSlot, now_ns: u64, processes: bool) -> Observed {
    let s = &v.live.sched;
    Observed {
        waiters: s.waiters.load(Ordering::Acquire),
        inflight_ns: s.inflight_ns.load(Ordering::Acquire),
        last_launch_ns: last_launch(s, now_ns),
        processes,
    }
}

/// The algorithm's view of vGPU `v`, observed as `seen` at `now_ns`.
pub fn view(v: &VgpuSlot, seen: &Observed, now_ns: u64) -> Vgpu {
    let c = &v.config;
    let f = v.flags();
    let tokens = v.live.sched.tokens.load(Ordering::Acquire);
    Vgpu {
        share: c.share.load(Ordering::Relaxed),
        priority: c.priority.load(Ordering::Relaxed),
        cap: f & flags::CAP != 0,
        suspended: f & flags::SUSPENDED != 0,
        demand: seen.demand(now_ns),
        busy: seen.busy(),
        room: refill::room(tokens, refill::burst(c.window_ns.load(Ordering::Relaxed))),
        waiting: seen.processes && seen.waiters > 0,
        tokens,
    }
}

/// Adds `grant` (negative: takes) to slot `i`'s bucket, held to its burst; counts what the daemon gave
/// for the audit and wakes the vGPU's waiting launches when they may go.
fn grant(v: &VgpuSlot, i: usize, grant: i64, credits: &Credits) {
    let s = &v.live.sched;
    let burst = refill::burst(v.config.window_ns.load(Ordering::Relaxed));
    let before = s
        .tokens
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            let after = refill::refill(t, grant, burst);
            (after != t).then_some(after)
        })
        .unwrap_or_else(|t| t);
    let after = refill::refill(before, grant, burst);
    // What the daemon gave (a bucket a tenant filled beyond the burst is only put back to it).
    credits.credit(i, after.saturating_sub(before.min(burst)));
    if refill::should_wake(before, after, s.waiters.load(Ordering::Acquire)) {
        crate::vgpus::slots::notify(s);
    }
}

/// Grants device `dev`'s `members` what [`refill::catch_up`] gives them at `now_ns`, when the device is
/// idle (no member has work queued; `seen`: what was read of them). Returns whether it granted anything.
fn catch_up(
    region: &Region,
    dev: &DeviceSched,
    members: &[usize],
    seen: &[Observed],
    now_ns: u64,
    credits: &Credits,
) -> bool {
    if seen.iter().any(|o| o.inflight_ns > 0) {
        return false;
    }
    let views: Vec<Vgpu> = members.iter().zip(seen).map(|(&i, o)| view(&region.vgpus[i], o, now_ns)).collect();
    let grants = refill::catch_up(&views, dev.high_until_ns.load(Ordering::Acquire) > now_ns);
    for (&i, &g) in members.iter().zip(&grants).filter(|(_, g)| **g > 0) {
        grant(&region.vgpus[i], i, g.min(i64::MAX as u64) as i64, credits);
    }
    grants.iter().any(|&g| g > 0)
}

/// Whether device `device` idles at `now_ns` while its vGPUs wait for tokens that [`refill::catch_up`]
/// would grant: the loop then ticks at once instead of at its next deadline. Reads only.
fn starved(region: &Region, device: u32, now_ns: u64) -> bool {
    let Some(dev) = region.devices.get(device as usize) else { return false };
    let members = members(region, device);
    let seen: Vec<Observed> =
        members.iter().map(|&i| observe(&region.vgpus[i], now_ns, region.vgpus[i].has_processes())).collect();
    if seen.iter().any(|o| o.inflight_ns > 0) {
        return false;
    }
    let views: Vec<Vgpu> = members.iter().zip(&seen).map(|(&i, o)| view(&region.vgpus[i], o, now_ns)).collect();
    refill::catch_up(&views, dev.high_until_ns.load(Ordering::Acquire) > now_ns).iter().any(|&g| g > 0)
}

/// One tick of device `device` (whose state is `state`) for an interval of `dt_ns` ending at `now_ns`:
/// charges what finished, finds memory for soft vGPUs waiting for it, holds or releases the device for
/// `high` vGPUs, then refills, and on an idle device grants at once what waiting for tokens would
/// ([`refill::catch_up`]). Returns whether a vGPU there has demand or swap-outs are under way (the loop
/// then keeps the 1 ms pace) and when to look again at the latest for the hold.
pub fn tick(region: &Region, device: u32, state: &mut Device, now_ns: u64, dt_ns: u64) -> (bool, Option<u64>) {
    state.charger.charge(region, now_ns);
    let members = members(region, device);
    let Some(dev) = region.devices.get(device as usize) else { return (false, None) };
    let swapping = state.swap_outs.tick(region, &members, now_ns);
    let recheck = hold(region, dev, &members, now_ns, &state.state.credits);
    let checked = &mut state.checked;
    let mut seen = Vec::with_capacity(members.len());
    let (views, recent): (Vec<Vgpu>, Vec<bool>) = members
        .iter()
        .map(|&i| {
            let v = &region.vgpus[i];
            let s = &v.live.sched;
            if release_dead_windows(v, now_ns, &mut checked[i]) {
                crate::vgpus::slots::notify(s);
            }
            let processes = v.has_processes();
            if !processes {
                // What processes killed mid-launch left counted (their work was never settled) goes with them.
                s.inflight_ns.store(0, Ordering::Release);
                s.waiters.store(0, Ordering::Release);
            }
            let o = observe(v, now_ns, processes);
            let recent = o.last_launch_ns != 0 && o.active_within(now_ns, fairness::ACTIVE_NS);
            seen.push(o);
            (view(v, &o, now_ns), recent)
        })
        .unzip();
    crate::compute::alone::mark(region, &members, &seen, now_ns);
    let held = dev.high_until_ns.load(Ordering::Acquire) > now_ns;
    let grants = refill::plan(&views, dt_ns, held);
    let adjust = state.settle(&members, &views, &recent, &refill::takes_part(&views, held));
    for ((&i, g), adjust) in members.iter().zip(grants).zip(adjust) {
        grant(&region.vgpus[i], i, (g.min(i64::MAX as u64) as i64).saturating_add(adjust), &state.state.credits);
    }
    catch_up(region, dev, &members, &seen, now_ns, &state.state.credits);
    (swapping || views.iter().any(|v| v.demand), recheck)
}

/// The words to listen to on device `device` and the values they hold now: `roster`'s, then every managed
/// vGPU's bell, or only the `high` ones' when `only_high`.
fn bells<'a>(region: &'a Region, device: u32, only_high: bool, roster: &'a Roster) -> Vec<(&'a AtomicU32, u32)> {
    let roster = (&roster.0, roster.0.load(Ordering::SeqCst));
    let members = members(region, device)
        .into_iter()
        .map(|i| &region.vgpus[i])
        .filter(|v| !only_high || v.config.priority.load(Ordering::Relaxed) >= priority::HIGH)
        .map(|v| (&v.live.sched.bell, v.live.sched.bell.load(Ordering::Acquire)));
    std::iter::once(roster).chain(members).collect()
}

/// The loop's pace: when it ticks next and which bells it listens to until then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pace {
    /// Ticking every [`TICK_NS`], listening only to the `high` vGPUs' bells.
    fast: bool,
    /// When the next tick is due.
    deadline: u64,
}

impl Pace {
    /// The pace after a tick at `now` that found `demand` (or swap-outs under way).
    ///
    /// Every tick grants for the time elapsed since the last, so ticking sooner gains nothing: launches
    /// waiting for tokens (which ring each time they go back to sleep) wait for the tick, and a tick a
    /// bell caused early keeps the next deadline where it was. A tick that finds no demand after a fast
    /// wait keeps the fast pace once more: that wait did not listen to every bell, so a launch that began
    /// to wait meanwhile (after the tick read its vGPU) has rung unheard, and the idle pace would leave it
    /// waiting for [`IDLE_NS`]. The next wait listens to every bell, read before its tick.
    fn after_tick(self, now: u64, demand: bool) -> Pace {
        let deadline = match demand || self.fast {
            true if self.deadline > now && self.deadline <= now + TICK_NS => self.deadline,
            true => (self.deadline + TICK_NS).clamp(now, now + TICK_NS),
            false => now + IDLE_NS,
        };
        Pace { fast: demand, deadline }
    }
}

/// Runs device `device`'s loop until `stop` is set (checked at least every [`IDLE_NS`]).
pub fn run(region: &Region, device: u32, shared: Arc<State>, stop: &AtomicBool) {
    let mut state = Device::new(region, device, Arc::clone(&shared));
    let mut last = futex::monotonic_ns();
    let mut pace = Pace { fast: false, deadline: last };
    while !stop.load(Ordering::Acquire) {
        // Read before the tick: a bell rung after it changes the value, so the wait returns at once.
        let mut listening = bells(region, device, false, &shared.roster);
        let urgent = bells(region, device, true, &shared.roster);
        let now = futex::monotonic_ns();
        let (demand, recheck) = tick(region, device, &mut state, now, (now - last).min(MAX_DT_NS));
        state.state.history.record(device, &state.charger, now);
        last = now;
        region.daemon.heartbeat_ns.fetch_max(now, Ordering::AcqRel);
        pace = pace.after_tick(now, demand);
        let wake = recheck.map_or(pace.deadline, |r| r.min(pace.deadline));
        loop {
            futex::wait_any_until(&listening, wake);
            if !pace.fast || stop.load(Ordering::Acquire) || futex::monotonic_ns() >= wake {
                break;
            }
            if urgent.iter().any(|(w, v)| w.load(Ordering::SeqCst) != *v) {
                break;
            }
            // Another vGPU's bell: worth a tick only when the device idles for want of tokens. Read
            // before the look, so that a bell rung after it ends the next wait.
            listening = bells(region, device, false, &shared.roster);
            if starved(region, device, futex::monotonic_ns()) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn region() -> &'static Region {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Region>::new_zeroed().assume_init() })
    }

    /// Slot `i`: managed, on device 0 with `share`, a process attached (in process slot 3), `waiters`
    /// waiting.
    fn managed(r: &Region, i: usize, share: u32, waiters: u32) {
        let v = &r.vgpus[i];
        v.config.state.store(tessera_region::state::READY, Ordering::Relaxed);
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        v.config.share.store(share, Ordering::Relaxed);
        v.config.priority.store(priority::NORMAL, Ordering::Relaxed);
        v.config.window_ns.store(MS, Ordering::Relaxed);
        v.live.sched.waiters.store(waiters, Ordering::Relaxed);
        attach(v, 3, std::process::id());
    }

    /// Attaches process `pid` (alive or not) in process slot `slot` of `v`.
    fn attach(v: &VgpuSlot, slot: usize, pid: u32) {
        let start = tessera_region::reclaim::start_time(pid).unwrap_or(1);
        v.live.procs[slot].start_time.store(start, Ordering::Relaxed);
        v.live.procs[slot].set_owner(0, pid);
    }

    fn tokens(r: &Region, i: usize) -> i64 {
        r.vgpus[i].live.sched.tokens.load(Ordering::Relaxed)
    }

    #[test]
    fn the_loop_goes_idle_only_after_a_wait_that_heard_every_bell() {
        let idle = Pace { fast: false, deadline: 10 * MS };
        let busy = idle.after_tick(10 * MS, true);
        assert_eq!(busy, Pace { fast: true, deadline: 11 * MS });
        assert_eq!(busy.after_tick(11 * MS, true).deadline, 12 * MS, "absolute deadlines, 1 ms apart");
        assert_eq!(busy.after_tick(10 * MS + MS / 2, true).deadline, 11 * MS, "an early tick keeps the deadline");
        // Demand gone after a wait that heard only `high` bells: one more fast tick, listening to all.
        let lapsed = busy.after_tick(11 * MS, false);
        assert_eq!(lapsed, Pace { fast: false, deadline: 12 * MS });
        assert_eq!(lapsed.after_tick(12 * MS, false), Pace { fast: false, deadline: 12 * MS + IDLE_NS });
    }

    #[test]
    fn a_vgpu_configured_wakes_the_loops_whatever_they_listen_to() {
        let r = region();
        // The waiting thread outlives this function's borrows: its state lives as long as the region.
        let shared: &'static State = Box::leak(Box::default());
        let listening = bells(r, 0, true, &shared.roster);
        let (done, woken) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            futex::wait_any_until(&listening, futex::monotonic_ns() + 60_000_000_000);
            let _ = done.send(());
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        shared.roster.changed();
        assert!(woken.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the loop slept on");
    }

    #[test]
    fn ticks_grant_by_share_clamp_to_the_burst_and_wake() {
        let r = region();
        managed(r, 0, 30, 1);
        managed(r, 1, 70, 1);
        managed(r, 2, 0, 0);
        r.vgpus[2].config.device.store(1, Ordering::Relaxed);
        let epoch = r.vgpus[0].live.sched.epoch.load(Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        assert!(tick(r, 0, state, 10 * MS, MS).0);
        assert_eq!((tokens(r, 0), tokens(r, 1), tokens(r, 2)), (300_000, 700_000, 0));
        assert_eq!(r.vgpus[0].live.sched.epoch.load(Ordering::Relaxed), epoch + 1, "waiters are woken");
        for _ in 0..10 {
            tick(r, 0, state, 11 * MS, MS);
        }
        assert_eq!((tokens(r, 0), tokens(r, 1)), (2 * MS as i64, 2 * MS as i64), "held to the burst");
        // Debt stays debt while the device is busy; an idle vGPU gets nothing and the tick reports no demand.
        r.vgpus[0].live.sched.tokens.store(-5 * MS as i64, Ordering::Relaxed);
        r.vgpus[0].live.sched.inflight_ns.store(MS as i64, Ordering::Relaxed);
        r.vgpus[1].live.sched.waiters.store(0, Ordering::Relaxed);
        assert!(tick(r, 0, state, 12 * MS, MS).0);
        assert_eq!(tokens(r, 0), -4 * MS as i64);
        r.vgpus[0].live.sched.inflight_ns.store(0, Ordering::Relaxed);
        r.vgpus[0].live.sched.waiters.store(0, Ordering::Relaxed);
        assert!(!tick(r, 0, state, 20 * MS, MS).0);
        assert_eq!(tokens(r, 0), -4 * MS as i64);
    }

    #[test]
    fn an_idle_device_whose_vgpus_wait_for_tokens_lets_the_first_go_at_once() {
        let r = region();
        managed(r, 0, 30, 1);
        managed(r, 1, 70, 1);
        let sched = |i: usize| &r.vgpus[i].live.sched;
        let state = &mut Device::new(r, 0, Arc::default());
        // Both in debt after long kernels, nothing queued: the engine idles until the 30% one has paid
        // 100 µs at 300 µs per ms. The loop, woken by their bells, ticks at once (1 µs after the last
        // tick, which grants next to nothing by itself) and grants those 333 µs now.
        sched(0).tokens.store(-99_999, Ordering::Relaxed);
        sched(1).tokens.store(-3 * MS as i64, Ordering::Relaxed);
        let epoch = sched(0).epoch.load(Ordering::Relaxed);
        assert!(starved(r, 0, 10 * MS));
        tick(r, 0, state, 10 * MS, 1_000);
        assert!(tokens(r, 0) > 0, "the 30% vGPU goes: {}", tokens(r, 0));
        assert!(sched(0).epoch.load(Ordering::Relaxed) > epoch, "its launch is woken");
        let gained = tokens(r, 1) + 3 * MS as i64;
        assert!((233_000..234_100).contains(&gained), "the 70% one gets its share of the same time: {gained}");
        assert!(!starved(r, 0, 10 * MS), "a vGPU has tokens now: no more catching up");
        // Work queued on the device: nobody is starved, debt stays debt.
        sched(0).tokens.store(-(MS as i64), Ordering::Relaxed);
        sched(1).inflight_ns.store(MS as i64, Ordering::Relaxed);
        assert!(!starved(r, 0, 11 * MS));
        tick(r, 0, state, 11 * MS, 1_000);
        assert!(tokens(r, 0) < 0);
        // A vGPU between launches (launched 100 µs ago, nothing queued, not waiting) is about to queue
        // work of its own: the device is not left to the other.
        sched(1).inflight_ns.store(0, Ordering::Relaxed);
        sched(1).waiters.store(0, Ordering::Relaxed);
        sched(1).last_launch_ns.store(12 * MS - 100_000, Ordering::Relaxed);
        assert!(!starved(r, 0, 12 * MS));
        // It has not launched for longer than counts as demand: the waiting one goes.
        assert!(starved(r, 0, 15 * MS));
        tick(r, 0, state, 15 * MS, 1_000);
        assert!(tokens(r, 0) > 0);
    }

    #[test]
    fn a_soft_vgpu_short_of_memory_keeps_the_pace_and_gets_an_idle_ones() {
        let r = region();
        managed(r, 0, 50, 0);
        managed(r, 1, 50, 0);
        for v in &r.vgpus[..2] {
            v.config.flags.store(flags::MANAGED | flags::SOFT, Ordering::Relaxed);
            v.config.limit[0].store(u64::MAX, Ordering::Relaxed);
            v.live.procs[3].flags.store(flags::SOFT, Ordering::Relaxed);
        }
        r.vgpus[1].live.procs[3].soft.resident.store(1 << 20, Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        assert!(!tick(r, 0, state, 100 * MS, MS).0, "nobody wants anything: the idle pace");
        r.vgpus[0].live.procs[3].wanted.store(tessera_region::wanted::pack(0, 4096), Ordering::Relaxed);
        assert!(tick(r, 0, state, 101 * MS, MS).0, "swap-outs are under way: the fast pace");
        assert_eq!(r.vgpus[1].live.pager.evict_seq.load(Ordering::Relaxed), 1, "the idle vGPU is asked");
    }

    #[test]
    fn a_high_vgpu_with_work_holds_the_device_and_its_release_wakes_the_others() {
        let r = region();
        managed(r, 0, 50, 1);
        managed(r, 1, 50, 0);
        let h = &r.vgpus[1];
        h.config.priority.store(priority::HIGH, Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        let until = |r: &Region| r.devices[0].high_until_ns.load(Ordering::Relaxed);
        // Launched just now, nothing queued: held, and looked at again when that launch stops counting.
        h.live.sched.last_launch_ns.store(10 * MS, Ordering::Relaxed);
        assert_eq!(tick(r, 0, state, 10 * MS, MS).1, Some(10 * MS + HIGH_IDLE_NS));
        assert_eq!(until(r), 10 * MS + HIGH_HOLD_NS);
        assert_eq!(tokens(r, 0), 0, "the normal vGPU gets nothing while held");
        // Work queued: the hold is renewed.
        h.live.sched.inflight_ns.store(1, Ordering::Relaxed);
        tick(r, 0, state, 12 * MS, MS);
        assert_eq!(until(r), 12 * MS + HIGH_HOLD_NS);
        // Idle: released at once, and the waiting launch of the other is told.
        h.live.sched.inflight_ns.store(0, Ordering::Relaxed);
        let epoch = r.vgpus[0].live.sched.epoch.load(Ordering::Relaxed);
        assert_eq!(tick(r, 0, state, 13 * MS, MS).1, None);
        assert_eq!(until(r), 13 * MS);
        assert!(r.vgpus[0].live.sched.epoch.load(Ordering::Relaxed) > epoch);
        assert!(tokens(r, 0) > 0);
    }

    #[test]
    fn what_a_tenant_writes_in_its_bucket_is_put_back_and_never_counted_as_granted() {
        let r = region();
        managed(r, 9, 30, 1);
        let shared: Arc<State> = Arc::default();
        let state = &mut Device::new(r, 0, Arc::clone(&shared));
        let credited = |slot| shared.credits.credited(slot);
        let before = credited(9);
        tick(r, 0, state, 10 * MS, MS);
        assert_eq!((tokens(r, 9), credited(9) - before), (MS as i64, MS as i64), "alone: the whole interval");
        // Filled beyond the burst by its tenant: put back to the burst, and no grant counted.
        r.vgpus[9].live.sched.tokens.store(i64::MAX, Ordering::Relaxed);
        tick(r, 0, state, 11 * MS, MS);
        assert_eq!((tokens(r, 9), credited(9) - before), (2 * MS as i64, MS as i64));
        // Kept full by its tenant: nothing given.
        tick(r, 0, state, 12 * MS, MS);
        assert_eq!(credited(9) - before, MS as i64);
    }

    #[test]
    fn absurd_figures_in_a_tenants_file_grant_no_more_than_the_interval() {
        let r = region();
        managed(r, 14, 30, u32::MAX);
        let s = &r.vgpus[14].live.sched;
        let shared: Arc<State> = Arc::default();
        let state = &mut Device::new(r, 0, Arc::clone(&shared));
        let before = shared.credits.credited(14);
        for (k, (written, inflight)) in [(i64::MIN, i64::MAX), (i64::MAX, i64::MIN), (-1, 1)].into_iter().enumerate() {
            s.tokens.store(written, Ordering::Relaxed);
            s.inflight_ns.store(inflight, Ordering::Relaxed);
            s.last_launch_ns.store(u64::MAX - k as u64, Ordering::Relaxed);
            s.device_ns.store(u64::MAX, Ordering::Relaxed);
            tick(r, 0, state, (10 + k as u64) * MS, MS);
            assert!(tokens(r, 14) <= 2 * MS as i64, "held to the burst");
        }
        assert!(shared.credits.credited(14) - before <= 3 * MS as i64, "never more than the intervals");
    }

    #[test]
    fn a_tenant_rewinding_its_device_time_is_owed_nothing() {
        use tessera_region::timeline::Record;
        let r = region();
        managed(r, 12, 50, 1);
        managed(r, 13, 50, 1);
        let shared: Arc<State> = Arc::default();
        let state = &mut Device::new(r, 0, Arc::clone(&shared));
        let credited = |slot| shared.credits.credited(slot);
        let before = (credited(12), credited(13));
        for k in 0..40 {
            let now = (10 + k) * MS;
            // Each launched a 500 µs kernel (its estimate taken), which ran and is published; 12's tenant
            // then writes its device time back to zero.
            for (i, start) in [(12, now - MS), (13, now - MS / 2)] {
                let s = &r.vgpus[i].live.sched;
                s.tokens.fetch_sub(500_000, Ordering::Relaxed);
                s.last_launch_ns.store(now, Ordering::Relaxed);
                let kernel = Record {
                    start_ns: start,
                    end_ns: start + MS / 2,
                    charged: 500_000,
                    kind: 0,
                    launches: 1,
                    bound_ns: 0,
                };
                assert!(r.vgpus[i].live.timeline.publish(&kernel));
            }
            tick(r, 0, state, now, MS);
            r.vgpus[12].live.sched.device_ns.store(0, Ordering::Relaxed);
        }
        let granted = (credited(12) - before.0, credited(13) - before.1);
        assert_eq!(granted.0, granted.1, "both took half the device: {granted:?}");
    }

    #[test]
    fn a_high_vgpus_launch_dated_in_the_future_holds_nothing() {
        let r = region();
        managed(r, 10, 50, 1);
        managed(r, 11, 50, 0);
        let h = &r.vgpus[11];
        h.config.priority.store(priority::HIGH, Ordering::Relaxed);
        h.live.sched.last_launch_ns.store(u64::MAX, Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        assert_eq!(tick(r, 0, state, 10 * MS, MS).1, None, "no recheck, no overflow");
        assert_eq!(r.devices[0].high_until_ns.load(Ordering::Relaxed), 0, "not held");
        assert_eq!(tokens(r, 10), MS as i64, "the other vGPU gets the device");
        // Just ahead of the tick (a launch racing with it): a launch now.
        h.live.sched.last_launch_ns.store(20 * MS + 1_000, Ordering::Relaxed);
        tick(r, 0, state, 20 * MS, MS);
        assert_eq!(r.devices[0].high_until_ns.load(Ordering::Relaxed), 20 * MS + HIGH_HOLD_NS);
    }

    #[test]
    fn a_vgpu_waiting_at_the_end_of_a_hold_restarts_with_its_share_of_a_window() {
        let r = region();
        managed(r, 0, 40, 1);
        managed(r, 1, 30, 1);
        managed(r, 2, 30, 0);
        r.vgpus[1].config.flags.fetch_or(flags::CAP, Ordering::Relaxed);
        let h = &r.vgpus[3];
        managed(r, 3, 0, 0);
        h.config.priority.store(priority::HIGH, Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        h.live.sched.inflight_ns.store(1, Ordering::Relaxed);
        tick(r, 0, state, 10 * MS, MS);
        // Entered the hold in debt, as a launch leaves a bucket held to its share.
        for i in 0..3 {
            r.vgpus[i].live.sched.tokens.store(-400_000, Ordering::Relaxed);
        }
        h.live.sched.inflight_ns.store(0, Ordering::Relaxed);
        tick(r, 0, state, 11 * MS, 0);
        assert_eq!(r.devices[0].high_until_ns.load(Ordering::Relaxed), 11 * MS, "released");
        assert_eq!(tokens(r, 0), 400_000, "40% of its 1 ms window, to go at once");
        assert_eq!(tokens(r, 1), -400_000, "a capped vGPU keeps to its share");
        assert_eq!(tokens(r, 2), -400_000, "nothing waits: nothing given");
    }

    #[test]
    fn a_window_a_dead_process_blocks_is_given_back_at_the_next_tick() {
        let r = region();
        managed(r, 0, 100, 1);
        let v = &r.vgpus[0];
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        attach(v, 5, dead);
        child.wait().unwrap();
        // The live process (slot 3) has 400 µs in the window, the dead one 600 µs: full, and a launch waits.
        v.live.procs[3].inflight_ns.store(400_000, Ordering::Relaxed);
        v.live.procs[5].inflight_ns.store(600_000, Ordering::Relaxed);
        v.live.sched.inflight_ns.store(1_000_000, Ordering::Relaxed);
        v.live.procs_hwm.store(6, Ordering::Relaxed);
        let state = &mut Device::new(r, 0, Arc::default());
        let epoch = v.live.sched.epoch.load(Ordering::Relaxed);
        tick(r, 0, state, 10 * MS, MS);
        assert_eq!(v.live.sched.inflight_ns.load(Ordering::Relaxed), 400_000, "the dead process's part left");
        assert_eq!(v.live.procs[5].word(), 0, "its slot is free");
        assert_eq!(v.live.procs[3].word(), std::process::id(), "the live one stays");
        assert!(v.live.sched.epoch.load(Ordering::Relaxed) > epoch, "the waiting launch is told");
        // Not looked at again before LIVENESS_CHECK_NS, nor while the window does not block anything.
        attach(v, 5, dead);
        v.live.sched.inflight_ns.store(1_000_000, Ordering::Relaxed);
        tick(r, 0, state, 10 * MS + LIVENESS_CHECK_NS - 1, MS);
        assert_eq!(v.live.procs[5].word(), dead, "rate-limited");
        v.live.sched.waiters.store(0, Ordering::Relaxed);
        tick(r, 0, state, 20 * MS, MS);
        assert_eq!(v.live.procs[5].word(), dead, "nothing waits: nothing looked at");
    }
}
