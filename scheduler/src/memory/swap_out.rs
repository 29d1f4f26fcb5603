//! Swap-outs on one device (soft memory mode): when the processes of a soft vGPU wait for device
//! memory the device does not have (the sum of their slots' `wanted` for the device, announced by a ring of its
//! `bell`), the daemon asks soft vGPUs of the device that are not running to swap their pages out to host
//! memory, and charges the requester the time they spend doing it, so that shares stay fair: the vGPU that
//! needed the memory pays for making room, not the ones that made it.
//!
//! Each tick of the device loop (see [`crate::compute::device_loop`]) first charges what earlier requests cost so far, then reads the
//! device's vGPUs into [`Seen`] values and lets [`choose`] (pure) pick the victims:
//! - only soft vGPUs with processes attached and live pages resident in device memory, other than the
//!   requesters, and only when they are not running ([`Stall`]): suspended first, then idle (longest idle
//!   first), then waiting for tokens; among equals, lower priority first. A hard-mode vGPU is never asked:
//!   its memory is not virtualized;
//! - enough of them that their resident bytes cover what each requester wants, less what requests made
//!   for it earlier still cover (a victim still swapping out, or one that finished less than
//!   [`SETTLE_NS`] ago, before the requester's next retry);
//! - a victim asked once is not asked again until it carried the request out (every attached soft-mode
//!   process's `evicted_seq` reached it) or [`REASK_NS`] passed.
//!
//! Asking bumps the victim's `pager.evict_seq`, then `pager.seq`, and wakes its processes' pager threads.
//! From then on, whatever its processes' `swap_out_ns` grows by is charged to the requester the request
//! was made for (`sched.tokens` less, `pager.swap_charged_ns` more), until the victim has carried it out
//! (or [`CHARGE_NS`] passed). A soft vGPU left with no process attached has its `want` cleared: it is what
//! processes killed while they waited left behind.

use std::sync::atomic::Ordering;
use tessera_region::{MAX_VGPUS, PagerRequest, Region, VgpuSlot, flags};

/// How long a soft vGPU with nothing queued must have gone without a launch to count as idle, and be
/// asked to swap out. Far longer than the gaps between the launches of a program at work (the device loop takes
/// a launch 2 ms old for demand), so a running program's pages are not swapped out under it only to be
/// swapped back in at its next launch; short enough that a requester, retrying for a while, gets the
/// memory of a program that paused.
pub const IDLE_NS: u64 = 20_000_000;
/// How long a victim may take to carry out a request before it may be asked again.
pub const REASK_NS: u64 = 1_000_000_000;
/// How long the bytes a victim freed still count toward its requester's want after it carried the
/// request out: the requester notices only at its next retry (every few ms), and until then its want
/// still includes them. Asking more victims meanwhile would swap out memory nobody needs.
pub const SETTLE_NS: u64 = 50_000_000;
/// Longest the swap-out time of a victim that never says it finished is charged to its requester.
pub const CHARGE_NS: u64 = 10_000_000_000;

/// Why a vGPU is not running, in the order victims are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stall {
    /// Suspended: it cannot run before it is resumed.
    Suspended,
    /// Nothing queued and no launch for [`IDLE_NS`].
    Idle,
    /// Its launches wait for tokens.
    Waiting,
}

/// What the swap-outs read of one vGPU of the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its slot index.
    pub index: usize,
    /// In soft mode ([`flags::SOFT`]).
    pub soft: bool,
    /// Processes are attached.
    pub processes: bool,
    /// Suspended.
    pub suspended: bool,
    /// Its priority (`tessera_region::priority`).
    pub priority: u32,
    /// Launches waiting for tokens.
    pub waiters: u32,
    /// Device time queued and not finished.
    pub inflight_ns: i64,
    /// Last launch (monotonic ns; 0: never).
    pub last_launch_ns: u64,
    /// Device memory holding its live pages.
    pub resident: u64,
    /// Device memory its processes wait for on the device.
    pub want: u64,
    /// Asked to swap out less than [`REASK_NS`] ago and not done yet: not asked again.
    pub pending: bool,
    /// The requester an earlier request of this vGPU was made for, and how many bytes it still counts for
    /// toward that requester's want.
    pub covers: Option<(usize, u64)>,
}

impl Seen {
    /// Why it is not running at `now_ns`, with how long it has been idle; `None` while it runs (or might:
    /// work queued, or a launch within [`IDLE_NS`]).
    pub fn stall(&self, now_ns: u64) -> Option<(Stall, u64)> {
        let idle_for = now_ns.saturating_sub(self.last_launch_ns);
        if self.suspended {
            Some((Stall::Suspended, idle_for))
        } else if self.inflight_ns <= 0 && idle_for >= IDLE_NS {
            Some((Stall::Idle, idle_for))
        } else if self.waiters > 0 {
            Some((Stall::Waiting, idle_for))
        } else {
            None
        }
    }

    /// A vGPU whose processes wait for memory.
    fn requester(&self) -> bool {
        self.soft && self.processes && self.want > 0
    }
}

/// A request to make: `victim` swaps out for `requester` (slot indices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Who swaps out.
    pub victim: usize,
    /// Who it is for (and pays for it).
    pub requester: usize,
}

/// The victims to ask at `now_ns`, each with the requester it is for: requesters by priority (highest
/// first), each given victims in order until their resident bytes, with what earlier requests still cover,
/// reach its want.
pub fn choose(seen: &[Seen], now_ns: u64) -> Vec<Ask> {
    let mut requesters: Vec<&Seen> = seen.iter().filter(|s| s.requester()).collect();
    requesters.sort_by_key(|s| (std::cmp::Reverse(s.priority), s.index));
    let mut victims: Vec<(Stall, u64, &Seen)> = seen
        .iter()
        .filter(|s| s.soft && s.processes && s.resident > 0 && s.want == 0 && !s.pending)
        .filter_map(|s| s.stall(now_ns).map(|(stall, idle_for)| (stall, idle_for, s)))
        .collect();
    victims.sort_by_key(|&(stall, idle_for, s)| {
        let longest_idle_first = if stall == Stall::Idle { std::cmp::Reverse(idle_for) } else { std::cmp::Reverse(0) };
        (stall, longest_idle_first, s.priority, std::cmp::Reverse(s.resident), s.index)
    });
    let mut victims = victims.into_iter().map(|(_, _, s)| s);
    let mut asks = Vec::new();
    for r in requesters {
        let covered: u64 =
            seen.iter().filter_map(|s| s.covers).filter(|&(req, _)| req == r.index).map(|(_, bytes)| bytes).sum();
        let mut need = r.want.saturating_sub(covered);
        while need > 0 {
            let Some(v) = victims.next() else { return asks };
            asks.push(Ask { victim: v.index, requester: r.index });
            need = need.saturating_sub(v.resident);
        }
    }
    asks
}

/// A request made to one victim, followed until it is carried out.
#[derive(Debug)]
struct Asked {
    requester: usize,
    /// Its number (`pager.evict_seq`).
    number: u32,
    at_ns: u64,
    /// The victim's resident bytes when asked: what it frees.
    bytes: u64,
    /// When the daemon saw it carried out.
    done_ns: Option<u64>,
    /// Per process slot: the pid and the `swap_out_ns` charged up to (pid 0: none).
    swap_out: Vec<(u32, u64)>,
}

/// The swap-outs of one device, kept from tick to tick.
#[derive(Debug)]
pub struct SwapOuts {
    device: usize,
    /// By victim slot index.
    asked: Vec<Option<Asked>>,
}

/// Per process slot of `v`: the attached pid (0: none) and its `swap_out_ns`.
fn swap_out(v: &VgpuSlot) -> Vec<(u32, u64)> {
    v.live
        .procs
        .iter()
        .map(|p| match p.attached_pid() {
            Some(pid) => (pid, p.soft.swap_out_ns.load(Ordering::Acquire)),
            None => (0, 0),
        })
        .collect()
}

/// Whether slot `v` is a soft vGPU of `device` the daemon manages.
fn soft_member(v: &VgpuSlot, device: u32) -> bool {
    crate::compute::charger::member(v, device) && v.flags() & flags::SOFT != 0
}

/// Charges `requester` `ns` of swap-out time: its tokens go down by that much (stopping at the lowest
/// value rather than wrapping), its `swap_charged_ns` up.
pub fn charge(requester: &VgpuSlot, ns: u64) {
    if ns == 0 {
        return;
    }
    let s = &requester.live.sched;
    let debit = i64::try_from(ns).unwrap_or(i64::MAX);
    let _ = s.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| Some(t.saturating_sub(debit)));
    requester.live.pager.swap_charged_ns.fetch_add(ns, Ordering::AcqRel);
}

impl SwapOuts {
    /// The swap-outs of device `device`.
    pub fn new(device: u32) -> SwapOuts {
        SwapOuts { device: device as usize, asked: (0..MAX_VGPUS).map(|_| None).collect() }
    }

    /// One round at `now_ns` over the device's managed vGPU slots `members`: charges what earlier requests
    /// cost since the last round, then asks the victims [`choose`] picks. Returns whether it is at work (a
    /// vGPU wants memory, or a request is followed): the device loop keeps its fast pace meanwhile.
    pub fn tick(&mut self, region: &Region, members: &[usize], now_ns: u64) -> bool {
        let device = self.device as u32;
        for (victim, entry) in self.asked.iter_mut().enumerate() {
            let Some(a) = entry else { continue };
            let (v, r) = (&region.vgpus[victim], &region.vgpus[a.requester]);
            if !soft_member(v, device) || !crate::compute::charger::member(r, device) {
                *entry = None;
                continue;
            }
            // Whether it is done is read before the figures: a process publishes its number after them.
            let done = a.done_ns.is_some() || v.lagging(PagerRequest::Evict, a.number).next().is_none();
            if a.done_ns.is_none() {
                charge(r, settle(&mut a.swap_out, &swap_out(v)));
            }
            if done && a.done_ns.is_none() {
                a.done_ns = Some(now_ns);
            }
            let settled = a.done_ns.is_some_and(|d| now_ns.saturating_sub(d) >= SETTLE_NS);
            if settled || now_ns.saturating_sub(a.at_ns) >= CHARGE_NS {
                *entry = None;
            }
        }
        let seen: Vec<Seen> = members.iter().map(|&i| self.see(region, i, now_ns)).collect();
        for ask in choose(&seen, now_ns) {
            let v = &region.vgpus[ask.victim];
            let bytes = seen.iter().find(|s| s.index == ask.victim).map_or(0, |s| s.resident);
            // The baseline is read before asking: the victim may start at once.
            let swap_out = swap_out(v);
            let number = v.live.pager.request(PagerRequest::Evict);
            self.asked[ask.victim] =
                Some(Asked { requester: ask.requester, number, at_ns: now_ns, bytes, done_ns: None, swap_out });
        }
        seen.iter().any(Seen::requester) || self.asked.iter().any(Option::is_some)
    }

    /// Reads slot `index` (a managed vGPU of the device).
    fn see(&self, region: &Region, index: usize, now_ns: u64) -> Seen {
        let v = &region.vgpus[index];
        let (c, s) = (&v.config, &v.live.sched);
        let f = v.flags();
        let processes = v.has_processes();
        let resident = v.soft_totals().resident;
        let (pending, covers) = match &self.asked[index] {
            None => (false, None),
            Some(a) => match a.done_ns {
                None if now_ns.saturating_sub(a.at_ns) < REASK_NS => (true, Some((a.requester, resident))),
                None => (false, None),
                Some(_) => (false, Some((a.requester, a.bytes))),
            },
        };
        Seen {
            index,
            soft: f & flags::SOFT != 0,
            processes,
            suspended: f & flags::SUSPENDED != 0,
            priority: c.priority.load(Ordering::Relaxed),
            waiters: s.waiters.load(Ordering::Acquire),
            inflight_ns: s.inflight_ns.load(Ordering::Acquire),
            last_launch_ns: s.last_launch_ns.load(Ordering::Acquire),
            resident,
            // A process can only want memory within its quota: a larger figure is not to be believed.
            want: v.wanted(self.device).min(c.limit[self.device].load(Ordering::Relaxed)),
            pending,
            covers,
        }
    }
}

/// The swap-out time to charge between `charged` (per process slot: pid and `swap_out_ns` charged up to,
/// updated) and `now` (the same, read now). A slot whose pid changed starts over from what it holds now:
/// a process that joined later was not asked.
pub fn settle(charged: &mut [(u32, u64)], now: &[(u32, u64)]) -> u64 {
    let mut total = 0u64;
    for (c, &(pid, ns)) in charged.iter_mut().zip(now) {
        if c.0 == pid && pid != 0 {
            total = total.saturating_add(ns.saturating_sub(c.1));
        }
        *c = (pid, ns);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_region::{priority, state, wanted};

    const MS: u64 = 1_000_000;
    const NOW: u64 = 10_000 * MS;

    /// A soft vGPU with processes, idle for a second, holding `resident` bytes.
    fn idle(index: usize, resident: u64) -> Seen {
        Seen {
            index,
            soft: true,
            processes: true,
            priority: priority::NORMAL,
            last_launch_ns: NOW - 1_000 * MS,
            resident,
            ..Seen::default()
        }
    }

    fn wanting(index: usize, want: u64) -> Seen {
        Seen { want, last_launch_ns: NOW, ..idle(index, 0) }
    }

    fn victims(asks: &[Ask]) -> Vec<usize> {
        asks.iter().map(|a| a.victim).collect()
    }

    #[test]
    fn hard_vgpus_and_running_ones_are_never_asked() {
        let hard = Seen { soft: false, ..idle(1, 1 << 30) };
        let running = Seen { inflight_ns: 5, last_launch_ns: NOW, ..idle(2, 1 << 30) };
        let launched_lately = Seen { last_launch_ns: NOW - IDLE_NS + 1, ..idle(3, 1 << 30) };
        let empty = idle(4, 0);
        let nobody = Seen { processes: false, ..idle(5, 1 << 30) };
        let also_wanting = Seen { want: 1, ..idle(6, 1 << 30) };
        let seen = [wanting(0, 100), hard, running, launched_lately, empty, nobody, also_wanting];
        assert_eq!(choose(&seen, NOW), []);
        assert_eq!(launched_lately.stall(NOW + 1), Some((Stall::Idle, IDLE_NS)));
        let hard_requester = Seen { soft: false, ..wanting(0, 100) };
        assert_eq!(choose(&[hard_requester, idle(1, 1 << 30)], NOW), [], "only a soft vGPU's want counts");
    }

    #[test]
    fn victims_come_suspended_then_longest_idle_then_waiting_lower_priority_first() {
        let waiting_low = Seen { waiters: 2, last_launch_ns: NOW, priority: priority::LOW, ..idle(1, 10) };
        let waiting_high = Seen { waiters: 2, last_launch_ns: NOW, priority: priority::HIGH, ..idle(2, 10) };
        let idle_long = Seen { last_launch_ns: 0, ..idle(3, 10) };
        let idle_short = idle(4, 10);
        let suspended_normal = Seen { suspended: true, last_launch_ns: NOW, inflight_ns: 9, ..idle(5, 10) };
        let suspended_low = Seen { priority: priority::LOW, ..suspended_normal };
        let seen = [
            wanting(0, 1 << 40),
            waiting_high,
            waiting_low,
            idle_short,
            idle_long,
            suspended_normal,
            Seen { index: 6, ..suspended_low },
        ];
        assert_eq!(victims(&choose(&seen, NOW)), [6, 5, 3, 4, 1, 2]);
        assert!(choose(&seen, NOW).iter().all(|a| a.requester == 0));
    }

    #[test]
    fn victims_are_taken_until_their_resident_bytes_cover_the_want() {
        let seen = [wanting(0, 250), idle(1, 100), idle(2, 100), idle(3, 100), idle(4, 100)];
        assert_eq!(victims(&choose(&seen, NOW)), [1, 2, 3]);
        let seen = [wanting(0, 200), idle(1, 100), idle(2, 100), idle(3, 100)];
        assert_eq!(victims(&choose(&seen, NOW)), [1, 2]);
        // Two requesters, the higher priority served first; each victim is asked for one of them only.
        let high = Seen { priority: priority::HIGH, ..wanting(5, 150) };
        let seen = [wanting(0, 50), idle(1, 100), idle(2, 100), idle(3, 100), high];
        let asks = choose(&seen, NOW);
        assert_eq!(
            asks,
            [Ask { victim: 1, requester: 5 }, Ask { victim: 2, requester: 5 }, Ask { victim: 3, requester: 0 }]
        );
        // Not enough anywhere: everyone that can is asked.
        assert_eq!(victims(&choose(&[wanting(0, 1000), idle(1, 100)], NOW)), [1]);
    }

    #[test]
    fn a_victim_still_at_it_is_not_asked_again_and_what_it_frees_counts() {
        let pending = Seen { pending: true, covers: Some((0, 100)), ..idle(1, 100) };
        let seen = [wanting(0, 150), pending, idle(2, 100), idle(3, 100)];
        assert_eq!(victims(&choose(&seen, NOW)), [2], "1 is pending and covers 100 of the 150");
        let seen = [wanting(0, 100), pending, idle(2, 100)];
        assert_eq!(choose(&seen, NOW), [], "covered");
        // What 1 covers is another requester's: 0 needs its own.
        let seen = [wanting(0, 100), Seen { covers: Some((9, 100)), ..pending }, idle(2, 100)];
        assert_eq!(victims(&choose(&seen, NOW)), [2]);
    }

    fn region() -> &'static Region {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Region>::new_zeroed().assume_init() })
    }

    /// Slot `i`: a managed soft vGPU of device 0 with one soft process (pid `1000 + i`) holding `resident`
    /// bytes, idle since time 0.
    fn soft(r: &Region, i: usize, resident: u64) {
        let v = &r.vgpus[i];
        v.config.state.store(state::READY, Ordering::Relaxed);
        v.config.flags.store(flags::MANAGED | flags::SOFT, Ordering::Relaxed);
        v.config.limit[0].store(u64::MAX, Ordering::Relaxed);
        let p = &v.live.procs[2];
        p.flags.store(flags::SOFT, Ordering::Relaxed);
        p.soft.resident.store(resident, Ordering::Relaxed);
        p.set_owner(0, 1000 + i as u32);
    }

    /// Makes slot `i`'s process (see [`soft`]) want `bytes` of device 0 (0: nothing).
    fn want(r: &Region, i: usize, bytes: u64) {
        let word = if bytes == 0 { 0 } else { wanted::pack(0, bytes) };
        r.vgpus[i].live.procs[2].wanted.store(word, Ordering::Release);
    }

    #[test]
    fn victims_are_asked_once_and_their_swap_time_is_charged_to_the_requester() {
        let r = region();
        soft(r, 0, 0);
        soft(r, 1, 300);
        soft(r, 2, 300);
        soft(r, 3, 300);
        r.vgpus[3].config.flags.store(flags::MANAGED, Ordering::Relaxed);
        want(r, 0, 200);
        r.vgpus[0].live.sched.tokens.store(1_000, Ordering::Relaxed);
        let members = [0, 1, 2, 3];
        let mut b = SwapOuts::new(0);
        let (v1, v3) = (&r.vgpus[1], &r.vgpus[3]);
        let seq = v1.live.pager.seq.load(Ordering::Relaxed);
        assert!(b.tick(r, &members, NOW));
        assert_eq!(v1.live.pager.evict_seq.load(Ordering::Relaxed), 1, "asked");
        assert_eq!(v1.live.pager.seq.load(Ordering::Relaxed), seq + 1, "and woken");
        assert_eq!(r.vgpus[2].live.pager.evict_seq.load(Ordering::Relaxed), 0, "300 bytes cover 200");
        assert_eq!(v3.live.pager.evict_seq.load(Ordering::Relaxed), 0, "hard mode: never asked");
        // Still at it a tick later: neither asked again nor replaced; 400 ns of swapping charged so far.
        let p = &v1.live.procs[2];
        p.soft.swap_out_ns.store(400, Ordering::Release);
        b.tick(r, &members, NOW + MS);
        assert_eq!(v1.live.pager.evict_seq.load(Ordering::Relaxed), 1);
        assert_eq!(r.vgpus[2].live.pager.evict_seq.load(Ordering::Relaxed), 0);
        let requester = &r.vgpus[0].live;
        assert_eq!(requester.sched.tokens.load(Ordering::Relaxed), 600);
        assert_eq!(requester.pager.swap_charged_ns.load(Ordering::Relaxed), 400);
        // Done: the rest is charged, and the freed bytes still count until the requester retried.
        p.soft.swap_out_ns.store(1_500, Ordering::Release);
        p.soft.resident.store(0, Ordering::Release);
        p.soft.evicted_seq.store(1, Ordering::Release);
        b.tick(r, &members, NOW + 2 * MS);
        assert_eq!(requester.sched.tokens.load(Ordering::Relaxed), -500);
        assert_eq!(requester.pager.swap_charged_ns.load(Ordering::Relaxed), 1_500);
        assert_eq!(r.vgpus[2].live.pager.evict_seq.load(Ordering::Relaxed), 0, "what 1 freed covers the want");
        // Swapping 1 does later on its own is not charged to anyone.
        p.soft.swap_out_ns.store(9_000, Ordering::Release);
        b.tick(r, &members, NOW + 3 * MS);
        assert_eq!(requester.pager.swap_charged_ns.load(Ordering::Relaxed), 1_500);
        // The requester still wants memory once that settled: the next victim is asked.
        b.tick(r, &members, NOW + 2 * MS + SETTLE_NS);
        assert_eq!(r.vgpus[2].live.pager.evict_seq.load(Ordering::Relaxed), 1);
        // The requester got its memory: nothing more is asked, and once the last request settles the
        // swap-outs rest.
        want(r, 0, 0);
        r.vgpus[2].live.procs[2].soft.evicted_seq.store(1, Ordering::Release);
        assert!(b.tick(r, &members, NOW + 3 * MS + SETTLE_NS));
        assert!(!b.tick(r, &members, NOW + 3 * MS + 2 * SETTLE_NS));
    }

    #[test]
    fn a_silent_victim_is_asked_again_after_a_while_and_a_dead_requesters_want_is_cleared() {
        let r = region();
        soft(r, 0, 0);
        soft(r, 1, 300);
        want(r, 0, 100);
        let mut b = SwapOuts::new(0);
        b.tick(r, &[0, 1], NOW);
        b.tick(r, &[0, 1], NOW + REASK_NS - 1);
        assert_eq!(r.vgpus[1].live.pager.evict_seq.load(Ordering::Relaxed), 1);
        b.tick(r, &[0, 1], NOW + REASK_NS);
        assert_eq!(r.vgpus[1].live.pager.evict_seq.load(Ordering::Relaxed), 2, "asked again");
        // A want larger than the quota is held to the quota.
        r.vgpus[0].config.limit[0].store(50, Ordering::Relaxed);
        assert_eq!(b.see(r, 0, NOW).want, 50);
        // The requester's process is gone: its want goes with it, and nobody is asked for it.
        r.vgpus[0].live.procs[2].set_owner(0, 0);
        b.tick(r, &[0, 1], NOW + 3 * REASK_NS);
        assert_eq!(r.vgpus[0].wanted(0), 0);
        assert_eq!(r.vgpus[1].live.pager.evict_seq.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn swap_time_is_settled_per_process_and_newcomers_start_over() {
        let mut charged = vec![(10, 100), (11, 50), (0, 0)];
        assert_eq!(settle(&mut charged, &[(10, 130), (12, 500), (13, 7)]), 30);
        assert_eq!(charged, [(10, 130), (12, 500), (13, 7)]);
        assert_eq!(settle(&mut charged, &[(10, 130), (12, 510), (0, 0)]), 10);
        let r = region();
        soft(r, 0, 0);
        r.vgpus[0].live.sched.tokens.store(i64::MIN + 5, Ordering::Relaxed);
        charge(&r.vgpus[0], 100);
        assert_eq!(r.vgpus[0].live.sched.tokens.load(Ordering::Relaxed), i64::MIN, "saturates");
    }
}
