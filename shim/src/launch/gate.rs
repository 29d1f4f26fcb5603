//! The gate of this process: admission ([`admission`](super::admission)) on its vGPU's record, the
//! sleep on the `epoch` futex word when a launch may not go yet, the running estimates of launches'
//! device time, and the settling of what an admitted launch was charged once its time is measured:
//! by the daemon, from the vGPU's timeline, for a managed vGPU ([`Gate::publish`]); by the process
//! itself otherwise ([`Gate::settle`]).
//!
//! A managed vGPU's process writes only its vGPU's live area (the rest of the region is mapped
//! read-only): it rings its `bell` where an unmanaged one would set its device's `high` hold or wake other
//! vGPUs itself, and the daemon does that.

use super::admission::{
    Admission, Bucket, HIGH_BUSY_NS, HIGH_IDLE_NS, Kind, drop_stale_window, now_ns, ring, try_take,
};
use super::outage;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;
use tessera_region::futex;
use tessera_region::timeline::Record;
use tessera_region::{DeviceSched, ProcSlot, Region, Sched, VgpuSlot, flags, priority};

/// Longest single sleep of a waiting launch: whoever grants tokens or changes the state wakes it at
/// once; this only bounds the wait should a waker die between its update and its wake.
pub const LIVENESS_NS: u64 = 2_000_000;
/// The estimate of a launch's device time before anything has been measured.
pub const INITIAL_ESTIMATE_NS: i64 = 100_000;
/// The smallest estimate: a launch always counts against the window, so it stays bounded.
pub const MIN_ESTIMATE_NS: i64 = 1_000;
/// Weight of a new measurement in the running estimate: 1/`EWMA_DIVISOR`.
pub const EWMA_DIVISOR: i64 = 8;

/// The running estimate of one kind of launch: an exponentially weighted moving average of measured
/// device time. Written by the measurement thread only, read by every launch.
pub struct Estimate(AtomicI64, AtomicBool);

impl Estimate {
    /// The initial estimate.
    pub const fn new() -> Estimate {
        Estimate(AtomicI64::new(INITIAL_ESTIMATE_NS), AtomicBool::new(false))
    }

    /// Whether a measurement has been folded in.
    pub fn learned(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    /// Folds in one measurement, the first replacing the initial guess outright.
    pub fn seed_or_update(&self, measured_ns: i64) {
        if self.1.swap(true, Ordering::Relaxed) {
            self.update(measured_ns);
        } else {
            self.0.store(measured_ns.max(MIN_ESTIMATE_NS), Ordering::Relaxed);
        }
    }

    /// The current estimate.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Folds in one measurement with weight 1/[`EWMA_DIVISOR`].
    pub fn update(&self, measured_ns: i64) {
        let old = self.get();
        let new = old + (measured_ns - old) / EWMA_DIVISOR;
        self.0.store(new.max(MIN_ESTIMATE_NS), Ordering::Relaxed);
    }
}

/// The gate of this process: its vGPU's slot, the region it is in (none for a bucket of its own), its
/// standalone share and its process slot.
pub struct Gate {
    vgpu: &'static VgpuSlot,
    region: Option<&'static Region>,
    share: Option<u32>,
    estimates: [Estimate; 2],
    /// This process's estimates from launches measured on their own (never a batch's mean, which a stream
    /// that ran dry unseen would inflate): what batching judges whether a stream is still busy by.
    singles: [Estimate; 2],
    /// What this process has in the vGPU's window: its slot's `inflight_ns`, which whoever reclaims the
    /// slot of a killed process takes out of the window (given back at exit, see [`Gate::release_all`]).
    mine: &'static AtomicI64,
}

impl Gate {
    /// A gate on `vgpu`, a slot of `region` if any, for the process of slot `me`.
    pub fn new(
        vgpu: &'static VgpuSlot,
        region: Option<&'static Region>,
        share: Option<u32>,
        me: &'static ProcSlot,
    ) -> Gate {
        Gate {
            vgpu,
            region,
            share,
            estimates: [Estimate::new(), Estimate::new()],
            singles: [Estimate::new(), Estimate::new()],
            mine: &me.inflight_ns,
        }
    }

    fn sched(&self) -> &'static Sched {
        &self.vgpu.live.sched
    }

    fn managed(&self) -> bool {
        self.vgpu.flags() & flags::MANAGED != 0
    }

    /// Whether the daemon charges this vGPU's device time from its timeline (it manages the vGPU and is
    /// not [away](outage::away)), so that finished launches are to be [published](Gate::publish).
    pub fn publishes(&self) -> bool {
        self.publishes_at(now_ns())
    }

    fn publishes_at(&self, now: u64) -> bool {
        self.region.is_some_and(|r| self.managed() && outage::away(&r.daemon, now).is_none())
    }

    /// Folds `measured` into this process's own estimate of launches of `kind` (a managed vGPU's launches
    /// take the daemon's figure once it has one).
    /// The first measurement replaces the initial guess outright.
    pub fn learn(&self, kind: Kind, measured: i64) {
        self.estimates[kind as usize].seed_or_update(measured);
    }

    /// The most admitted launch `a` of `kind` may be charged when its thread was held up around it (see
    /// `HELD_UP_NS`), its span then possibly holding host time besides the kernel's: the estimate, once
    /// one has been learned (the daemon's figure, or this process's measurements), else nothing. The
    /// initial guess must not bound it: on a loaded host where every launch is held up, the guess would
    /// never be corrected and each launch would be charged a fraction of its device time.
    pub fn held_up_bound(&self, a: &Admission, kind: Kind) -> Option<i64> {
        let by_daemon = self.managed() && self.sched().charged_ns[kind as usize].load(Ordering::Relaxed) > 0;
        (by_daemon || self.estimates[kind as usize].learned()).then(|| a.estimate.max(self.estimate(kind)))
    }

    /// Folds `measured`, the device time of a launch of `kind` measured on its own, into the estimate
    /// batches go by: what a kernel takes back to back (`queued`: it waited for the stream's previous
    /// one). A launch on an idle stream also counts the stream's start-up, so it only seeds the estimate.
    pub fn learn_single(&self, kind: Kind, measured: i64, queued: bool) {
        let e = &self.singles[kind as usize];
        if queued || !e.learned() {
            e.seed_or_update(measured);
        }
    }

    /// What a launch of `kind` is estimated to keep its stream busy, back to back: the lower of the
    /// [estimate](Gate::estimate) and what launches measured on their own took. Batches judge by it whether
    /// a stream may have run dry; too low, it only makes them stop sooner, never charges idle time.
    pub fn gap_estimate(&self, kind: Kind) -> i64 {
        let e = &self.singles[kind as usize];
        let charged = self.estimate(kind);
        if e.learned() { charged.min(e.get()) } else { charged }
    }

    /// Hands admitted launch `a` (or batch of `launches`), which ran over `span` (start and end, monotonic
    /// ns), to the daemon, and
    /// settles it: the tokens it took stay taken until the daemon charges its device time and gives them
    /// back (both in one addition), and its launches' estimate follows what the daemon charges; it leaves
    /// the window. `bound`: the most it may be charged, when its span may hold host time besides the
    /// kernel's. False, with nothing settled, when it could not be published.
    pub fn publish(&self, a: &Admission, kind: Kind, launches: u16, span: (u64, u64), bound: Option<i64>) -> bool {
        if self.region.is_none() {
            return false;
        }
        let bound_ns = bound.map_or(0, |b| b.clamp(1, u32::MAX.into()) as u32);
        let (start_ns, end_ns) = span;
        let record = Record { start_ns, end_ns, charged: a.charged, kind: kind as u16, launches, bound_ns };
        if !self.vgpu.live.timeline.publish(&record) {
            return false;
        }
        if a.window > 0 {
            self.unwindow(a.device, a.window);
        }
        self.notify();
        true
    }

    /// The estimate of a launch of `kind`: what the daemon charges such launches of a managed vGPU, once it
    /// has charged one; what this process measured otherwise.
    pub fn estimate(&self, kind: Kind) -> i64 {
        let charged = self.sched().charged_ns[kind as usize].load(Ordering::Relaxed);
        if self.managed() && charged > 0 { charged.max(MIN_ESTIMATE_NS) } else { self.estimates[kind as usize].get() }
    }

    /// Whether launches may be measured a batch at a time ([`batch`](super::batch)): the daemon manages the
    /// vGPU and says it is alone on its device, and it is neither suspended nor `high` (whose holds follow
    /// each launch). One load of the flags, and of the priority.
    pub fn batching(&self) -> bool {
        let f = self.vgpu.flags();
        f & (flags::MANAGED | flags::ALONE | flags::SUSPENDED) == flags::MANAGED | flags::ALONE
            && self.vgpu.config.priority.load(Ordering::Relaxed) < priority::HIGH
    }

    /// The vGPU's window (most queued-but-unfinished device time).
    pub fn window(&self) -> i64 {
        self.vgpu.config.window()
    }

    /// Takes tokens and window for `count` launches on `device` estimated at `per` ns each, waiting as a
    /// single launch would (for tokens, or while the window is full); `None`
    /// as soon as the vGPU stops [batching](Gate::batching) or the daemon is away. Counted as one launch
    /// until [`Gate::used`] says how many there were.
    pub fn reserve(&self, device: usize, per: i64, count: u32) -> Option<Admission> {
        let (bucket, need) = (self.bucket(device), per.saturating_mul(count.into()));
        // Admitted as a single launch would be (while the window is not full), so that batching never
        // makes a program wait where launching one by one would not.
        let fits = |now| {
            if !self.batching() || !self.publishes_at(now) {
                return Ok(None);
            }
            try_take(&bucket, now, need, true, device).map(Some)
        };
        match fits(now_ns()) {
            Ok(a) => a,
            Err(_) => self.wait_for(true, fits),
        }
    }

    /// What `n` launches of a reservation `r` for launches of `per` ns used: the tokens of those not made
    /// go back at once, and the result is their admission, holding `window` of the window (what of the
    /// reservation's window is still counted).
    pub fn used(&self, r: &Admission, per: i64, n: u32, window: i64) -> Admission {
        let s = self.sched();
        let used = per.saturating_mul(n.into());
        if r.charged > used {
            s.tokens.fetch_add(r.charged - used, Ordering::AcqRel);
        }
        s.launches.fetch_add(u64::from(n).wrapping_sub(1), Ordering::Relaxed);
        Admission { device: r.device, estimate: used, charged: r.charged.min(used), window }
    }

    /// Takes `ns` of this process's work out of the window (work a thread reserved room for and left).
    pub fn release_window(&self, ns: i64) {
        self.unwindow(self.vgpu.config.device.load(Ordering::Relaxed) as usize, ns);
        self.notify();
    }

    /// Whether launches on `device` pass this gate: a managed vGPU's share is of its own device only.
    pub fn governs(&self, device: usize) -> bool {
        !self.managed() || self.vgpu.config.device.load(Ordering::Relaxed) as usize == device
    }

    fn device(&self, device: usize) -> Option<&'static DeviceSched> {
        self.region.and_then(|r| r.devices.get(device))
    }

    fn bucket(&self, device: usize) -> Bucket<'static> {
        Bucket {
            vgpu: self.vgpu,
            device: self.device(device),
            daemon: self.region.map(|r| &r.daemon),
            share: self.share,
            mine: self.mine,
        }
    }

    /// Admits a launch of `kind` on `device`, waiting as long as it must (see the module documentation).
    pub fn admit(&self, device: usize, kind: Kind, measured: bool) -> Admission {
        let estimate = self.estimate(kind);
        match try_take(&self.bucket(device), now_ns(), estimate, measured, device) {
            Ok(a) => a,
            Err(_) => self.wait(device, estimate, measured),
        }
    }

    /// The slow path: sleeps on `epoch` until the launch is admitted (see [`Gate::wait_for`]).
    #[cold]
    fn wait(&self, device: usize, estimate: i64, measured: bool) -> Admission {
        let bucket = self.bucket(device);
        self.wait_for(measured, |now| try_take(&bucket, now, estimate, measured, device))
    }

    /// Sleeps on `epoch` until `attempt` (at the time given) succeeds, counted in `waiters`, waking the
    /// daemon (through `bell`) each time it goes to sleep. Adds the time waited to `wait_ns`. `measured`:
    /// the attempt waits for the window, whose count is dropped if nothing of the vGPU finishes for long.
    fn wait_for<T>(&self, measured: bool, mut attempt: impl FnMut(u64) -> Result<T, Option<u64>>) -> T {
        let s = self.sched();
        let start = now_ns();
        let mut progress = (start, s.device_ns.load(Ordering::Acquire));
        loop {
            // Read before the check: a grant after the check changes it, so the sleep returns at once.
            let epoch = s.epoch.load(Ordering::SeqCst);
            let now = now_ns();
            let until = match attempt(now) {
                Ok(a) => {
                    s.wait_ns.fetch_add(now - start, Ordering::Relaxed);
                    return a;
                }
                Err(until) => until,
            };
            if measured {
                drop_stale_window(self.vgpu, now, &mut progress);
            }
            s.waiters.fetch_add(1, Ordering::SeqCst);
            // The daemon grants tokens (a `high` vGPU waits only for its window, which needs nobody).
            if self.managed() && self.vgpu.config.priority.load(Ordering::Relaxed) < priority::HIGH {
                ring(s);
            }
            let sleep = until.map_or(LIVENESS_NS, |u| u.saturating_sub(now).min(LIVENESS_NS));
            futex::wait(&s.epoch, epoch, Duration::from_nanos(sleep));
            s.waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Takes `estimate` out of the window; a `high` vGPU then renews its hold on `device` if work is
    /// left, or shortens it to [`HIGH_IDLE_NS`] from now if none is, waking the launches waiting in the
    /// region so that they sleep until the new end of the hold (a managed one tells the daemon instead,
    /// which holds the device for it).
    fn unwindow(&self, device: usize, estimate: i64) {
        let s = self.sched();
        // Only what this process still holds: at exit it gives back everything at once.
        if self.mine.load(Ordering::Acquire) < estimate {
            return;
        }
        // The vGPU's window first, this process's record last: killed in between, its record is taken out
        // of the window once more when its slot is reclaimed, which can only leave the window wider than
        // its live processes' parts, never narrower. Never below zero: a count dropped as stale must not
        // leave the window wider for good.
        let before = s.inflight_ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some((x - estimate).max(0)));
        let _ = self.mine.fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| Some((m - estimate).max(0)));
        let left = before.map_or(0, |x| (x - estimate).max(0));
        if self.vgpu.config.priority.load(Ordering::Relaxed) < priority::HIGH {
            return;
        }
        if self.managed() {
            if left == 0 {
                ring(s);
            }
            return;
        }
        if let Some(d) = self.device(device) {
            let now = now_ns();
            if left > 0 {
                d.high_until_ns.fetch_max(now + HIGH_BUSY_NS, Ordering::AcqRel);
            } else {
                d.high_until_ns.fetch_min(now + HIGH_IDLE_NS, Ordering::AcqRel);
                for v in self.region.iter().flat_map(|r| &r.vgpus) {
                    if v.live.sched.waiters.load(Ordering::SeqCst) > 0 {
                        v.live.sched.wake_waiters();
                    }
                }
            }
        }
    }

    /// Settles an admitted launch that `measured` took: corrects the tokens it took, takes it out of the
    /// window, adds its charge to `device_ns`, updates the estimate of `kind` and wakes waiters. A managed
    /// vGPU's launch (its daemon away, or its record unpublishable) is charged at most its estimate, the
    /// daemon's figure: what it measured also holds the time it queued behind other vGPUs' kernels.
    /// `learn`: whether `measured` may be learned from (not when it may overstate the kernel).
    pub fn settle(&self, a: &Admission, kind: Kind, measured: i64, launches: u16, learn: bool) {
        let s = self.sched();
        let charge = if self.managed() { measured.min(a.estimate) } else { measured };
        if a.charged != 0 {
            s.tokens.fetch_add(a.charged - charge, Ordering::AcqRel);
        }
        if a.window > 0 {
            self.unwindow(a.device, a.window);
        }
        s.device_ns.fetch_add(charge.max(0) as u64, Ordering::Relaxed);
        if learn {
            self.learn(kind, measured / i64::from(launches.max(1)));
        }
        self.notify();
    }

    /// Settles a launch that will not be measured: it stays charged its estimate.
    pub fn settle_unmeasured(&self, a: &Admission) {
        let s = self.sched();
        if a.window > 0 {
            self.unwindow(a.device, a.window);
            self.notify();
        }
        s.device_ns.fetch_add(a.estimate.max(0) as u64, Ordering::Relaxed);
    }

    /// Gives back everything a launch the driver refused took.
    pub fn refund(&self, a: &Admission) {
        let s = self.sched();
        s.tokens.fetch_add(a.charged, Ordering::AcqRel);
        if a.window > 0 {
            self.unwindow(a.device, a.window);
        }
        s.launches.fetch_sub(1, Ordering::Relaxed);
        self.notify();
    }

    /// Gives back whatever this process still has in the vGPU's window (at exit: work whose measurement
    /// will never be settled must not narrow the window of the vGPU's other processes).
    pub fn release_all(&self) {
        let mine = self.mine.load(Ordering::Acquire);
        if mine > 0 {
            // The window first, the record last (see `unwindow`).
            let _ =
                self.sched().inflight_ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some((x - mine).max(0)));
            let _ = self.mine.fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| Some((m - mine).max(0)));
            self.notify();
        }
    }

    /// Announces a state change of the vGPU to its waiting launches ([`Sched::wake_waiters`]).
    fn notify(&self) {
        self.sched().wake_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::launch::admission::tests::zeroed;

    #[test]
    fn settling_corrects_tokens_window_and_usage() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        s.tokens.store(1_000_000, Ordering::Relaxed);
        let gate = Gate::new(v, None, None, &v.live.procs[0]);
        let a = gate.admit(0, Kind::Kernel, true);
        assert_eq!(a.estimate, INITIAL_ESTIMATE_NS);
        assert_eq!(v.live.procs[0].inflight_ns.load(Ordering::Relaxed), INITIAL_ESTIMATE_NS, "the process's part");
        gate.settle(&a, Kind::Kernel, 50_000, 1, true);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 950_000, "charged what it measured");
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 0);
        assert_eq!(v.live.procs[0].inflight_ns.load(Ordering::Relaxed), 0);
        assert_eq!(s.device_ns.load(Ordering::Relaxed), 50_000);
        assert_eq!(s.epoch.load(Ordering::Relaxed), 1);
        let learnt = 50_000;
        assert_eq!(gate.estimates[0].get(), learnt, "the first measurement replaces the initial guess");
        // A managed vGPU settling itself is charged at most the estimate: its span holds time queued behind
        // other vGPUs' kernels, which only the daemon tells apart. Its own estimate learns the span.
        let b = gate.admit(0, Kind::Kernel, true);
        gate.settle(&b, Kind::Kernel, 300_000, 1, true);
        assert_eq!(s.tokens.load(Ordering::Relaxed), 950_000 - learnt);
        assert_eq!(gate.estimates[0].get(), learnt + (300_000 - learnt) / 8);
        // Unmanaged, what it measured.
        v.config.flags.store(0, Ordering::Relaxed);
        let c = gate.admit(0, Kind::Graph, true);
        gate.settle(&c, Kind::Graph, 300_000, 1, true);
        assert_eq!(s.device_ns.load(Ordering::Relaxed), 50_000 + learnt as u64 + 300_000);
        let d = gate.admit(0, Kind::Graph, true);
        gate.refund(&d);
        assert_eq!(s.launches.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_held_up_launch_is_bounded_only_by_a_learned_estimate() {
        let v: &VgpuSlot = zeroed();
        let gate = Gate::new(v, None, Some(30), &v.live.procs[0]);
        v.live.sched.tokens.store(1_000_000, Ordering::Relaxed);
        let a = gate.admit(0, Kind::Kernel, true);
        assert_eq!(gate.held_up_bound(&a, Kind::Kernel), None, "the initial guess bounds nothing");
        // Its span, not learned from: the estimate is still unlearned, and the whole span is charged.
        gate.settle(&a, Kind::Kernel, 2_000_000, 1, false);
        assert!(!gate.estimates[0].learned());
        assert_eq!(v.live.sched.device_ns.load(Ordering::Relaxed), 2_000_000);
        let b = gate.admit(0, Kind::Kernel, true);
        gate.settle(&b, Kind::Kernel, 1_500_000, 1, true);
        let c = gate.admit(0, Kind::Kernel, true);
        assert_eq!(c.estimate, 1_500_000);
        assert_eq!(gate.held_up_bound(&c, Kind::Kernel), Some(1_500_000));
        assert_eq!(gate.held_up_bound(&a, Kind::Kernel), Some(1_500_000), "the estimate now, if larger");
    }

    #[test]
    fn a_managed_launch_is_published_and_its_tokens_stay_taken_for_the_daemon() {
        let region: &'static Region = zeroed();
        let v = &region.vgpus[5];
        let s = &v.live.sched;
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        s.tokens.store(1_000_000, Ordering::Relaxed);
        let gate = Gate::new(v, Some(region), None, &v.live.procs[0]);
        assert!(!gate.publishes(), "the daemon has been silent for ever: nobody would charge the timeline");
        region.daemon.heartbeat_ns.store(now_ns(), Ordering::Relaxed);
        assert!(gate.publishes());
        let a = gate.admit(0, Kind::Kernel, true);
        assert!(gate.publish(&a, Kind::Graph, 1, (1_000_000, 1_500_000), Some(200_000)));
        let record = Record {
            start_ns: 1_000_000,
            end_ns: 1_500_000,
            charged: INITIAL_ESTIMATE_NS,
            kind: 1,
            launches: 1,
            bound_ns: 200_000,
        };
        assert_eq!(v.live.timeline.read(0), tessera_region::timeline::Slot::Ready(record));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 1_000_000 - INITIAL_ESTIMATE_NS, "until the daemon charges");
        assert_eq!((s.inflight_ns.load(Ordering::Relaxed), s.device_ns.load(Ordering::Relaxed)), (0, 0));
        // Launches take what the daemon charges as their estimate, once it has charged one.
        s.charged_ns[0].store(300_000, Ordering::Relaxed);
        assert_eq!(gate.admit(0, Kind::Kernel, true).estimate, 300_000);
        assert_eq!(gate.admit(0, Kind::Graph, true).estimate, INITIAL_ESTIMATE_NS);
        // Without the daemon's management, or outside the region, nothing is published.
        v.config.flags.store(0, Ordering::Relaxed);
        assert!(!gate.publishes());
        assert_eq!(gate.admit(0, Kind::Kernel, true).estimate, INITIAL_ESTIMATE_NS, "its own estimate");
        assert!(!Gate::new(zeroed(), None, Some(30), zeroed()).publishes());
    }

    #[test]
    fn the_estimate_converges_and_stays_positive() {
        let e = Estimate::new();
        for _ in 0..100 {
            e.update(2_000_000);
        }
        assert!((e.get() - 2_000_000).abs() < 2_000, "{}", e.get());
        for _ in 0..200 {
            e.update(0);
        }
        assert_eq!(e.get(), MIN_ESTIMATE_NS);
    }

    #[test]
    fn a_waiting_launch_wakes_when_tokens_are_granted() {
        let v: &'static VgpuSlot = zeroed();
        let s = &v.live.sched;
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        let waiter =
            std::thread::spawn(move || Gate::new(v, None, None, &v.live.procs[0]).admit(0, Kind::Kernel, false));
        while s.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let granted = now_ns();
        s.tokens.store(1_000_000, Ordering::SeqCst);
        s.wake_waiters();
        let a = waiter.join().unwrap();
        assert_eq!(a.charged, INITIAL_ESTIMATE_NS);
        assert!(s.last_launch_ns.load(Ordering::Relaxed) >= granted);
        assert!(s.wait_ns.load(Ordering::Relaxed) > 0);
        assert!(s.bell.load(Ordering::Relaxed) > 0, "the daemon was told");
    }

    #[test]
    fn a_high_vgpus_hold_ends_shortly_after_its_last_work() {
        let high: &VgpuSlot = zeroed();
        high.config.priority.store(priority::HIGH, Ordering::Relaxed);
        let region: &'static Region = zeroed();
        region.devices[0].high_until_ns.store(u64::MAX, Ordering::Relaxed);
        region.vgpus[3].live.sched.waiters.store(1, Ordering::Relaxed);
        let gate = Gate::new(high, Some(region), None, &high.live.procs[0]);
        let a = gate.admit(0, Kind::Kernel, true);
        let b = gate.admit(0, Kind::Kernel, true);
        let before = now_ns();
        gate.settle(&a, Kind::Kernel, 300, 1, true);
        assert_eq!(region.devices[0].high_until_ns.load(Ordering::Relaxed), u64::MAX, "work is left: still held");
        gate.settle(&b, Kind::Kernel, 300, 1, true);
        let until = region.devices[0].high_until_ns.load(Ordering::Relaxed);
        assert!(until >= before + HIGH_IDLE_NS && until <= now_ns() + HIGH_IDLE_NS, "{until}");
        assert_eq!(region.vgpus[3].live.sched.epoch.load(Ordering::Relaxed), 1, "waiting launches are told");
        // A managed one rings the daemon when its last work is done, and leaves the hold to it.
        high.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        region.devices[0].high_until_ns.store(u64::MAX, Ordering::Relaxed);
        let c = gate.admit(0, Kind::Kernel, true);
        let bell = high.live.sched.bell.load(Ordering::Relaxed);
        gate.settle(&c, Kind::Kernel, 300, 1, true);
        assert_eq!(high.live.sched.bell.load(Ordering::Relaxed), bell + 1);
        assert_eq!(region.devices[0].high_until_ns.load(Ordering::Relaxed), u64::MAX);
    }

    #[test]
    fn at_exit_a_process_gives_back_its_share_of_the_window_once() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        s.inflight_ns.store(1_000, Ordering::Relaxed);
        let gate = Gate::new(v, None, None, &v.live.procs[0]);
        let a = gate.admit(0, Kind::Kernel, true);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 1_000 + INITIAL_ESTIMATE_NS);
        gate.release_all();
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 1_000, "another process's work stays counted");
        gate.settle(&a, Kind::Kernel, 300, 1, true);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 1_000, "not given back twice");
    }

    #[test]
    fn the_window_count_never_goes_below_zero() {
        let v: &VgpuSlot = zeroed();
        let s = &v.live.sched;
        let gate = Gate::new(v, None, None, &v.live.procs[0]);
        let a = gate.admit(0, Kind::Kernel, true);
        s.inflight_ns.store(0, Ordering::Relaxed);
        gate.settle(&a, Kind::Kernel, 300, 1, true);
        assert_eq!(s.inflight_ns.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_batch_reserves_for_all_its_launches_and_gives_back_what_it_did_not_use() {
        let region: &'static Region = zeroed();
        let v = &region.vgpus[2];
        let s = &v.live.sched;
        s.tokens.store(1_000_000, Ordering::Relaxed);
        let gate = Gate::new(v, Some(region), None, &v.live.procs[0]);
        // Not managed, not alone, or the daemon silent: no batches.
        assert!(!gate.batching() && gate.reserve(0, 10_000, 8).is_none());
        v.config.flags.store(flags::MANAGED | flags::ALONE, Ordering::Relaxed);
        assert!(gate.batching());
        assert!(gate.reserve(0, 10_000, 8).is_none(), "nobody would charge its span");
        region.daemon.heartbeat_ns.store(now_ns(), Ordering::Relaxed);
        let r = gate.reserve(0, 10_000, 8).expect("tokens and window for 8 launches");
        assert_eq!((r.charged, r.window), (80_000, 80_000));
        assert_eq!((s.tokens.load(Ordering::Relaxed), s.inflight_ns.load(Ordering::Relaxed)), (920_000, 80_000));
        // 3 launches made: the other 5 launches' tokens go back at once; the window stays until settled.
        let used = gate.used(&r, 10_000, 3, r.window);
        assert_eq!((used.estimate, used.charged, used.window), (30_000, 30_000, 80_000));
        assert_eq!(s.tokens.load(Ordering::Relaxed), 970_000);
        assert_eq!(s.launches.load(Ordering::Relaxed), 3);
        gate.settle_unmeasured(&used);
        assert_eq!((s.inflight_ns.load(Ordering::Relaxed), s.device_ns.load(Ordering::Relaxed)), (0, 30_000));
        // A suspended or `high` vGPU does not batch.
        v.config.flags.store(flags::MANAGED | flags::ALONE | flags::SUSPENDED, Ordering::Relaxed);
        assert!(!gate.batching());
        v.config.flags.store(flags::MANAGED | flags::ALONE, Ordering::Relaxed);
        v.config.priority.store(priority::HIGH, Ordering::Relaxed);
        assert!(!gate.batching());
    }

    #[test]
    fn the_gap_estimate_is_the_lower_of_the_charged_and_the_back_to_back_one() {
        let v: &VgpuSlot = zeroed();
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        let gate = Gate::new(v, None, None, &v.live.procs[0]);
        assert_eq!(gate.gap_estimate(Kind::Kernel), INITIAL_ESTIMATE_NS);
        gate.learn_single(Kind::Kernel, 300_000, false);
        assert_eq!(gate.gap_estimate(Kind::Kernel), INITIAL_ESTIMATE_NS, "the charged estimate is lower");
        gate.learn_single(Kind::Kernel, 9_000, false);
        assert_eq!(gate.singles[0].get(), 300_000, "a launch on an idle stream only seeds it");
        gate.learn_single(Kind::Kernel, 20_000, true);
        assert_eq!(gate.singles[0].get(), 300_000 + (20_000 - 300_000) / EWMA_DIVISOR, "back to back: learnt");
        assert_eq!(gate.gap_estimate(Kind::Kernel), INITIAL_ESTIMATE_NS);
        v.live.sched.charged_ns[0].store(5_000, Ordering::Relaxed);
        assert_eq!(gate.gap_estimate(Kind::Kernel), 5_000);
    }
}
