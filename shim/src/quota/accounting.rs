//! The quota arithmetic on a vGPU slot and the process's own slot: a reservation is announced in the
//! process's `pending` bytes before the vGPU's usage is summed, so that racing reservations never sum past
//! `limit`, and only then moved to the process's `used`; subtraction never wraps below zero.

use std::sync::atomic::Ordering;
use tessera_region::reclaim::sub;
use tessera_region::{ProcSlot, VgpuSlot};

/// A reservation the quota cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The device's quota.
    pub limit: u64,
    /// Bytes in use when the request was refused.
    pub used: u64,
    /// Bytes other processes (or threads) were reserving at that moment, counted against the request.
    pub pending: u64,
}

/// Takes `bytes` on device `dev`. The process's own slot is the one record (a process killed at any point
/// leaves charged only what its slot shows, and reclaiming the slot gives it back): the bytes go to its
/// `pending` first, then the vGPU's usage and every reservation in progress are summed
/// ([`VgpuSlot::charged`]); within the limit they move to `used` (added there before they leave `pending`),
/// otherwise they leave `pending` and the request is refused. Sequentially consistent throughout: of two
/// racing reservations the later one sees the earlier's bytes, so the vGPU's `used` never sums past its
/// limit (racers may both be refused, never both admitted).
pub fn reserve(vgpu: &VgpuSlot, me: &ProcSlot, dev: usize, bytes: u64) -> Result<(), Refused> {
    let limit = vgpu.config.limit[dev].load(Ordering::Acquire);
    let refused = |charged: u64| {
        let used = vgpu.used(dev);
        Refused { limit, used, pending: charged.saturating_sub(used) }
    };
    if me.pending.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_add(bytes)).is_err() {
        return Err(refused(vgpu.charged(dev)));
    }
    let total = vgpu.charged(dev);
    if total > limit || total == u64::MAX {
        sub(&me.pending, bytes);
        return Err(refused(total.saturating_sub(bytes)));
    }
    // Cannot overflow: `used[dev]` is part of `total`, which is less than u64::MAX.
    me.used[dev].fetch_add(bytes, Ordering::SeqCst);
    sub(&me.pending, bytes);
    // The sum is read slot by slot while others move bytes, so it may count bytes one slot gave back and
    // another took since: never more than the limit really is in use, which bounds the peak. Written only
    // when higher: most allocations do not make a new peak, and a read is cheaper than a read-modify-write.
    let (peak, now) = (&vgpu.live.peak[dev], vgpu.used(dev).min(limit));
    if now > peak.load(Ordering::Relaxed) {
        peak.fetch_max(now, Ordering::Relaxed);
    }
    Ok(())
}

/// Takes as much of `bytes` on device `dev` as the quota has room for now (for reserving headroom while a
/// context's unknown cost is measured); returns what it took, 0 when the quota is full.
pub fn reserve_up_to(vgpu: &VgpuSlot, me: &ProcSlot, dev: usize, bytes: u64) -> u64 {
    // Others may take room between the sum and the reservation: try again with what is left then.
    for _ in 0..8 {
        let room = vgpu.config.limit[dev].load(Ordering::Acquire).saturating_sub(vgpu.charged(dev)).min(bytes);
        if room == 0 {
            return 0;
        }
        if reserve(vgpu, me, dev, room).is_ok() {
            return room;
        }
    }
    0
}

/// Gives back `bytes` taken with [`reserve`].
pub fn release(me: &ProcSlot, dev: usize, bytes: u64) {
    sub(&me.used[dev], bytes);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tessera_region::{PROCS_PER_VGPU, UNLIMITED};

    /// A zeroed slot of any region type, leaked (all-zero is a valid value of every region structure).
    pub fn zeroed<T>() -> &'static T {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<T>::new_zeroed().assume_init() })
    }

    fn slots(limit: u64) -> (&'static VgpuSlot, &'static ProcSlot) {
        let v: &VgpuSlot = zeroed();
        for l in &v.config.limit {
            l.store(UNLIMITED, Ordering::Relaxed);
        }
        v.config.limit[0].store(limit, Ordering::Relaxed);
        v.live.procs_hwm.store(PROCS_PER_VGPU as u32, Ordering::Relaxed);
        (v, &v.live.procs[0])
    }

    #[test]
    fn exactly_the_limit_fits_one_byte_more_does_not() {
        let (v, me) = slots(1000);
        assert_eq!(reserve(v, me, 0, 1000), Ok(()));
        assert_eq!(reserve(v, me, 0, 1), Err(Refused { limit: 1000, used: 1000, pending: 0 }));
        release(me, 0, 400);
        assert_eq!(reserve(v, me, 0, 401), Err(Refused { limit: 1000, used: 600, pending: 0 }));
        assert_eq!(reserve(v, me, 0, 400), Ok(()));
        assert_eq!(v.live.peak[0].load(Ordering::Relaxed), 1000);
        assert_eq!(me.used[0].load(Ordering::Relaxed), 1000);
        // Other devices are unlimited; a total reaching the "unlimited" marker, or overflowing, is refused.
        assert_eq!(reserve(v, me, 1, u64::MAX - 1), Ok(()));
        assert!(reserve(v, me, 1, 1).is_err());
        assert!(reserve(v, me, 1, u64::MAX).is_err());
        assert_eq!(me.used[1].load(Ordering::Relaxed), u64::MAX - 1, "refusals take their addition back");
        assert_eq!(me.pending.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn release_never_wraps() {
        let (v, me) = slots(10);
        reserve(v, me, 0, 5).unwrap();
        release(me, 0, 50);
        assert_eq!((v.used(0), me.used[0].load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn a_reservation_cut_short_is_counted_against_others_never_as_usage() {
        let (v, me) = slots(1000);
        let killed = &v.live.procs[1];
        // A process killed between announcing 300 bytes and moving them to its `used`.
        killed.pending.store(300, Ordering::SeqCst);
        assert_eq!(v.used(0), 0, "nothing is in use");
        assert_eq!(reserve(v, me, 0, 701), Err(Refused { limit: 1000, used: 0, pending: 300 }));
        assert_eq!(reserve(v, me, 0, 700), Ok(()));
        assert_eq!(reserve_up_to(v, me, 0, 500), 0, "no room left");
        // Reclaiming the dead slot (zeroing it) gives the room back.
        killed.pending.store(0, Ordering::SeqCst);
        assert_eq!(reserve_up_to(v, me, 0, 500), 300);
        assert_eq!(reserve_up_to(v, me, 0, 500), 0);
        assert_eq!(v.used(0), 1000);
    }

    #[test]
    fn racing_processes_never_sum_past_the_limit_not_even_for_an_instant() {
        const LIMIT: u64 = 1 << 20;
        let (v, _) = slots(LIMIT);
        // What is really in use at any moment cannot be read from the slots (a sum read slot by slot may
        // count bytes one process gave back and another took since). `live` never counts more than is in
        // use: bytes are added after their reservation succeeds and taken off before they are released;
        // so `live` past the limit is an overshoot.
        let live: &'static std::sync::atomic::AtomicU64 = Box::leak(Box::default());
        let over: &'static std::sync::atomic::AtomicU64 = Box::leak(Box::default());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    // Each thread plays one process, with a slot of its own in the vGPU.
                    let me = &v.live.procs[t];
                    let mut held = Vec::new();
                    for i in 0..20_000u64 {
                        let bytes = 1 + (i * 7919 + t as u64 * 104_729) % 65_536;
                        if reserve(v, me, 0, bytes).is_ok() {
                            held.push(bytes);
                            over.fetch_max(live.fetch_add(bytes, Ordering::SeqCst) + bytes, Ordering::SeqCst);
                        }
                        if i % 3 == 0
                            && let Some(b) = held.pop()
                        {
                            live.fetch_sub(b, Ordering::SeqCst);
                            release(me, 0, b);
                        }
                    }
                    let mine = me.used[0].load(Ordering::Relaxed);
                    assert_eq!(mine, held.iter().sum::<u64>());
                    for b in held {
                        live.fetch_sub(b, Ordering::SeqCst);
                        release(me, 0, b);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let seen = over.load(Ordering::SeqCst);
        assert!(seen <= LIMIT, "usage reached {seen}, over the limit of {LIMIT}");
        assert_eq!(v.used(0), 0);
        let peak = v.live.peak[0].load(Ordering::Relaxed);
        assert!(peak <= LIMIT && peak > LIMIT / 2, "the quota was contended: peak {peak}");
    }
}
