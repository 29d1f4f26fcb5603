//! The admission test every launch passes on its vGPU's slot (settings in its
//! [`VgpuConfig`](tessera_region::VgpuConfig), the bucket in its [`Sched`]): a handful of atomic loads
//! and read-modify-writes, no lock, system call or allocation (but one wake-up of the daemon when a managed
//! `high` vGPU starts having work, and a look whether the daemon still exists when a suspended vGPU's
//! daemon has long been silent).
//!
//! A launch goes when the vGPU is not suspended (or its suspension lapsed, see
//! [`outage::suspension_holds`]), no `high` vGPU has work on the launch's device (unless the vGPU is
//! `high` itself), the bucket holds tokens (only when it is token-limited: managed by the
//! daemon, or given a standalone share, and not `high`) and its queued-but-unfinished device time is
//! below its window. It then takes the estimate of its device time from both `tokens` and the window
//! (`inflight_ns`); once the work has run it leaves the window, and the device time it took replaces the
//! estimate in the bucket: charged by the daemon for a managed vGPU
//! ([`Gate::publish`](super::gate::Gate::publish)), by the process otherwise
//! ([`Gate::settle`](super::gate::Gate::settle)).

use super::{outage, standalone};
use std::sync::atomic::{AtomicI64, Ordering};
use tessera_region::futex;
use tessera_region::{Daemon, DeviceSched, Sched, VgpuSlot, flags, priority};

/// How long a `high` vGPU holds lower priorities on its device after it last launched or had work
/// finish with more still queued. Work delayed behind lower-priority work already queued keeps it held;
/// only a single stretch of more than this without any of its work finishing lets it lapse (what lower
/// priorities then queue is bounded by their windows). A process that dies holds it this long at most.
pub const HIGH_BUSY_NS: u64 = 10_000_000;
/// How long the hold lasts once the `high` vGPU's last measured work has finished: lower priorities
/// continue this long after it goes idle, plus their wake-up (within 1 ms in all).
pub const HIGH_IDLE_NS: u64 = 300_000;
/// What a launch is, for its estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One kernel (`cuLaunchKernel`, `Ex`, cooperative).
    Kernel = 0,
    /// A whole graph (`cuGraphLaunch`), measured as one.
    Graph = 1,
}

/// What an admitted launch took, to be settled when its device time is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Device ordinal of the launch.
    pub device: usize,
    /// Estimated device time.
    pub estimate: i64,
    /// Tokens taken (the estimate, or 0 when the vGPU is not token-limited).
    pub charged: i64,
    /// What it holds of the window (`inflight_ns`): its estimate when measured (only measured launches
    /// count in the window), 0 otherwise; for a batch, what is left of its reservation's.
    pub window: i64,
}

/// Monotonic nanoseconds (`CLOCK_MONOTONIC`, read through the vDSO: no system call), the clock of every
/// timestamp in the region.
pub use tessera_region::futex::monotonic_ns as now_ns;

/// What a launch is admitted on: its vGPU's slot, the records of its device and of the daemon (in the
/// shared region, when there is one), its standalone share, and this process's part of the vGPU's window
/// (its process slot's `inflight_ns`).
#[derive(Clone, Copy)]
pub struct Bucket<'a> {
    /// The vGPU's slot.
    pub vgpu: &'a VgpuSlot,
    /// The launch's device's scheduling record.
    pub device: Option<&'a DeviceSched>,
    /// The daemon's record (its heartbeat).
    pub daemon: Option<&'a Daemon>,
    /// `TESSERA_COMPUTE_SHARE`.
    pub share: Option<u32>,
    /// This process's part of the window: added to before the vGPU's window, taken from after it.
    pub mine: &'a AtomicI64,
}

/// One admission attempt at `now` for a launch estimated at `estimate`, counted in the window when
/// `measured`. `Err` carries when the launch may be admitted (`None`: when someone wakes it).
pub fn try_take(b: &Bucket, now: u64, estimate: i64, measured: bool, device: usize) -> Result<Admission, Option<u64>> {
    let v = b.vgpu;
    let (c, s) = (&v.config, &v.live.sched);
    let flags = c.flags.load(Ordering::Acquire);
    // A managed vGPU's suspension is its daemon's: held while it lives (see `outage::suspension_holds`).
    let by_daemon = flags & flags::MANAGED != 0;
    if flags & flags::SUSPENDED != 0 && !(by_daemon && b.daemon.is_some_and(|d| !outage::suspension_holds(d, now))) {
        return Err(None);
    }
    let managed = flags & flags::MANAGED != 0;
    let high = c.priority.load(Ordering::Relaxed) >= priority::HIGH;
    if let Some(d) = b.device {
        if high && managed {
            // The daemon holds the device for it (the region is read-only here): told once, on arrival
            // (no use ringing while it is away).
            if d.high_until_ns.load(Ordering::Acquire) <= now && b.daemon.is_none_or(|d| outage::away(d, now).is_none())
            {
                ring(s);
            }
        } else if high {
            // Waiting or not, it has work: lower priorities on the device stop taking tokens.
            d.high_until_ns.fetch_max(now + HIGH_BUSY_NS, Ordering::AcqRel);
        } else {
            let until = d.high_until_ns.load(Ordering::Acquire);
            if until > now {
                return Err(Some(until));
            }
        }
    }
    let standalone = b.share.filter(|_| !managed);
    let limited = !high && (managed || standalone.is_some());
    if limited {
        if let Some(pct) = standalone {
            standalone::refill(s, pct, now, standalone::burst(c.window()));
        }
        let mut tokens = s.tokens.load(Ordering::Acquire);
        // An empty bucket of a managed vGPU whose daemon is away: refilled here, at its configured share.
        let away = (managed && tokens <= 0).then(|| b.daemon.and_then(|d| outage::away(d, now))).flatten();
        let pct = match away {
            Some(beat) => {
                let pct = c.share.load(Ordering::Relaxed);
                outage::refill(s, pct, now, standalone::burst(c.window()), beat);
                tokens = s.tokens.load(Ordering::Acquire);
                Some(pct)
            }
            None => standalone,
        };
        if tokens <= 0 {
            return Err(pct.map(|pct| tessera_policy::ready_at(tokens, pct, now)));
        }
    }
    if measured && s.inflight_ns.load(Ordering::Acquire) >= c.window() {
        return Err(None);
    }
    if limited {
        s.tokens.fetch_sub(estimate, Ordering::AcqRel);
    }
    if measured {
        // This process's record first: killed before the vGPU's window counts the launch, its record is
        // subtracted from the window by whoever reclaims its slot, which can only leave the window wider
        // than its live processes' parts, never narrower.
        b.mine.fetch_add(estimate, Ordering::AcqRel);
        s.inflight_ns.fetch_add(estimate, Ordering::AcqRel);
    }
    s.last_launch_ns.fetch_max(now, Ordering::Relaxed);
    s.launches.fetch_add(1, Ordering::Relaxed);
    Ok(Admission {
        device,
        estimate,
        charged: if limited { estimate } else { 0 },
        window: if measured { estimate } else { 0 },
    })
}

/// Rings `s`'s bell: wakes the daemon, which listens to the bells of its vGPUs.
pub fn ring(s: &Sched) {
    s.bell.fetch_add(1, Ordering::SeqCst);
    futex::wake_all(&s.bell);
}

/// After this long with the window full and none of the vGPU's work finishing, the window's count is
/// taken for the leftover of a process that died with work in flight, and dropped.
pub const STALE_WINDOW_NS: u64 = 1_000_000_000;

/// Drops `s`'s window count when it has been full for [`STALE_WINDOW_NS`] without any work of the vGPU
/// finishing (`progress`: since when `device_ns` has had its value). A live process's work that is
/// merely long then lets one more launch queue behind it, and its own completions subtract no further
/// than zero.
pub fn drop_stale_window(v: &VgpuSlot, now: u64, progress: &mut (u64, u64)) {
    let s = &v.live.sched;
    let done = s.device_ns.load(Ordering::Acquire);
    if done != progress.1 {
        *progress = (now, done);
        return;
    }
    let inflight = s.inflight_ns.load(Ordering::Acquire);
    if now - progress.0 >= STALE_WINDOW_NS
        && inflight >= v.config.window()
        && s.inflight_ns.compare_exchange(inflight, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        crate::log::warn(format_args!(
            "dropping {inflight} ns of unfinished device work nothing has completed for a second (left by a process \
             that died?)"
        ));
        progress.0 = now;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tessera_region::DEFAULT_WINDOW_NS;

    /// A zeroed record (all-zero is a valid value of every region structure), leaked.
    pub fn zeroed<T>() -> &'static T {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<T>::new_zeroed().assume_init() })
    }

    const NOW: u64 = 1_000_000_000_000;

    /// `v`'s bucket, with this process's part of the window in its first process slot.
    fn bucket<'a>(v: &'a VgpuSlot, d: Option<&'a DeviceSched>, share: Option<u32>) -> Bucket<'a> {
        Bucket { vgpu: v, device: d, daemon: None, share, mine: &v.live.procs[0].inflight_ns }
    }

    fn take(v: &VgpuSlot, d: Option<&DeviceSched>, share: Option<u32>, est: i64) -> Result<Admission, Option<u64>> {
        try_take(&bucket(v, d, share), NOW, est, true, 0)
    }

    #[test]
    fn an_unlimited_vgpu_is_only_windowed() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        for i in 0..10 {
            let a = take(v, None, None, 100_000).unwrap();
            assert_eq!((a.charged, a.window), (0, 100_000), "launch {i}");
        }
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), DEFAULT_WINDOW_NS as i64);
        assert_eq!(take(v, None, None, 100_000), Err(None), "the default 1 ms window is full");
        assert_eq!(s.tokens.load(Ordering::Relaxed), 0, "no tokens taken");
        assert_eq!(s.launches.load(Ordering::Relaxed), 10);
        let a = try_take(&bucket(v, None, None), NOW, 100_000, false, 0).unwrap();
        assert_eq!(a.window, 0, "an unmeasured launch is not held by the window");
    }

    #[test]
    fn a_managed_vgpu_needs_tokens_and_waits_for_a_grant() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        assert_eq!(take(v, None, Some(50), 100), Err(None), "the daemon's share wins over a standalone one");
        s.tokens.store(150, Ordering::Relaxed);
        let a = take(v, None, None, 100).unwrap();
        assert_eq!(a.charged, 100);
        take(v, None, None, 100).unwrap();
        assert_eq!(s.tokens.load(Ordering::Relaxed), -50, "the last launch may overdraw");
        assert_eq!(take(v, None, None, 100), Err(None));
    }

    #[test]
    fn a_managed_vgpu_whose_daemon_is_away_refills_itself_at_its_share() {
        let (v, daemon): (&VgpuSlot, &Daemon) = (zeroed(), zeroed());
        let s = &v.live.sched;
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        v.config.share.store(30, Ordering::Relaxed);
        let b = Bucket { daemon: Some(daemon), ..bucket(v, None, None) };
        // The daemon beat 1 ms ago: its bucket waits for its grants.
        daemon.heartbeat_ns.store(NOW - 1_000_000, Ordering::Relaxed);
        assert_eq!(try_take(&b, NOW, 100, true, 0), Err(None));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 0);
        // Silent since: 30% of the time after its last beat, at most the burst (2 ms).
        let beat = NOW - tessera_policy::outage::AWAY_NS;
        daemon.heartbeat_ns.store(beat, Ordering::Relaxed);
        let a = try_take(&b, NOW, 100, true, 0).unwrap();
        assert_eq!(a.charged, 100);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 2_000_000 - 100);
        assert_eq!(s.last_refill_ns.load(Ordering::Relaxed), NOW);
        // Empty again: it waits exactly until its share refills it.
        s.tokens.store(-299, Ordering::Relaxed);
        assert_eq!(try_take(&b, NOW, 100, true, 0), Err(Some(NOW + 1_000)));
        let later = try_take(&b, NOW + 1_000, 100, true, 0).unwrap();
        assert_eq!((later.charged, s.tokens.load(Ordering::Relaxed)), (100, 1 - 100));
        // The daemon is back (a restart beats first): its grants again, nothing local.
        daemon.heartbeat_ns.store(NOW + 1_000, Ordering::Relaxed);
        s.tokens.store(0, Ordering::Relaxed);
        assert_eq!(try_take(&b, NOW + 2_000_000, 100, true, 0), Err(None));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 0);
        assert_eq!(
            (s.inflight_ns.load(Ordering::Relaxed), b.mine.load(Ordering::Relaxed)),
            (200, 200),
            "this process's part of the window is counted with it"
        );
    }

    #[test]
    fn a_managed_vgpus_suspension_lapses_only_once_its_daemon_is_gone() {
        let (v, daemon): (&VgpuSlot, &Daemon) = (zeroed(), zeroed());
        v.config.flags.store(flags::MANAGED | flags::SUSPENDED, Ordering::Relaxed);
        v.config.share.store(50, Ordering::Relaxed);
        let b = Bucket { daemon: Some(daemon), ..bucket(v, None, None) };
        let at = |now| try_take(&b, now, 100, false, 0);
        // A daemon that beat at NOW and then stopped (its pid cleared): held within the grace, not after.
        daemon.heartbeat_ns.store(NOW, Ordering::Relaxed);
        assert_eq!(at(NOW + tessera_policy::outage::SUSPENSION_GRACE_NS - 1), Err(None));
        assert!(at(NOW + tessera_policy::outage::SUSPENSION_GRACE_NS).is_ok(), "gone: it runs at its share");
        // The same suspension of a vGPU no daemon manages (set by whoever shares the region) holds.
        v.config.flags.store(flags::SUSPENDED, Ordering::Relaxed);
        assert_eq!(at(NOW + tessera_policy::outage::SUSPENSION_GRACE_NS), Err(None));
    }

    #[test]
    fn suspended_and_high_priority_hold_launches() {
        let (v, d): (&VgpuSlot, &DeviceSched) = (zeroed(), zeroed());
        v.config.flags.store(flags::SUSPENDED, Ordering::Relaxed);
        assert_eq!(take(v, Some(d), None, 100), Err(None));
        v.config.flags.store(0, Ordering::Relaxed);
        d.high_until_ns.store(NOW + 500, Ordering::Relaxed);
        assert_eq!(take(v, Some(d), None, 100), Err(Some(NOW + 500)), "waits until the high vGPU's hold ends");
        d.high_until_ns.store(NOW, Ordering::Relaxed);
        assert!(take(v, Some(d), None, 100).is_ok(), "continues once it has passed");

        // A high vGPU of its own holds the device itself; a managed one rings the daemon, which holds it.
        let high: &VgpuSlot = zeroed();
        high.config.priority.store(priority::HIGH, Ordering::Relaxed);
        let a = take(high, Some(d), None, 300).unwrap();
        assert_eq!(a.charged, 0, "high is not token-limited");
        assert_eq!(d.high_until_ns.load(Ordering::Relaxed), NOW + HIGH_BUSY_NS);
        assert!(take(v, Some(d), None, 100).is_err());
        d.high_until_ns.store(NOW, Ordering::Relaxed);
        high.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        take(high, Some(d), None, 300).unwrap();
        assert_eq!(d.high_until_ns.load(Ordering::Relaxed), NOW, "left to the daemon");
        assert_eq!(high.live.sched.bell.load(Ordering::Relaxed), 1, "which is told");
        d.high_until_ns.store(NOW + 1, Ordering::Relaxed);
        take(high, Some(d), None, 300).unwrap();
        assert_eq!(high.live.sched.bell.load(Ordering::Relaxed), 1, "once");
    }

    #[test]
    fn standalone_refills_by_share_up_to_the_burst_and_knows_when_to_wake() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        // The first refill (from the epoch) fills the burst: max(2 × 1 ms window, 2 ms).
        take(v, None, Some(25), 2_000_000).unwrap();
        assert_eq!(s.tokens.load(Ordering::Relaxed), 0);
        // 25% of 1 ms later: 250 µs of tokens.
        let later = NOW + 1_000_000;
        let a = try_take(&bucket(v, None, Some(25)), later, 400_000, false, 0).unwrap();
        assert_eq!(a.charged, 400_000);
        assert_eq!(s.tokens.load(Ordering::Relaxed), -150_000);
        // A deficit of 150 µs (+1 ns) takes 600 µs at 25%.
        assert_eq!(try_take(&bucket(v, None, Some(25)), later, 1, false, 0), Err(Some(later + 600_004)));
    }

    #[test]
    fn a_window_left_full_by_a_dead_process_is_dropped_after_a_second() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        s.inflight_ns.store(5_000_000, Ordering::Relaxed);
        let mut progress = (NOW, 0);
        drop_stale_window(v, NOW + STALE_WINDOW_NS - 1, &mut progress);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 5_000_000, "not yet");
        s.device_ns.store(7, Ordering::Relaxed);
        drop_stale_window(v, NOW + STALE_WINDOW_NS, &mut progress);
        assert_eq!(progress, (NOW + STALE_WINDOW_NS, 7), "work finished: a live vGPU");
        drop_stale_window(v, NOW + 2 * STALE_WINDOW_NS, &mut progress);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 0, "a second with nothing finishing");
    }
}
