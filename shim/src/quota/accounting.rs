//! The quota arithmetic on a vGPU slot and the process's own slot: a compare-and-swap loop that never
//! lets `used` pass `limit`, and checked subtraction that never wraps below zero.

use std::sync::atomic::Ordering;
use tessera_ffi::reclaim::sub;
use tessera_ffi::region::{ProcSlot, VgpuSlot};

/// A reservation the quota cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The device's quota.
    pub limit: u64,
    /// Bytes in use when the request was refused.
    pub used: u64,
}

/// Takes `bytes` on device `dev`: the process's own record first, which is the source of truth (a process
/// killed at any point leaves charged only what its slot shows, and reclaiming the slot gives it back),
/// then the vGPU's usage summed over every process slot; over the limit the addition is taken back and the
/// request refused. Sequentially consistent on both sides: of two racing reservations, the later adder
/// sees the earlier one's bytes, so the vGPU never overshoots (it may refuse both, never admit both).
pub fn reserve(vgpu: &VgpuSlot, me: &ProcSlot, dev: usize, bytes: u64) -> Result<(), Refused> {
    let limit = vgpu.config.limit[dev].load(Ordering::Acquire);
    if me.used[dev].fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| u.checked_add(bytes)).is_err() {
        return Err(Refused { limit, used: vgpu.used(dev) });
    }
    let total = vgpu.used(dev);
    if total > limit || total == u64::MAX {
        sub(&me.used[dev], bytes);
        return Err(Refused { limit, used: total.saturating_sub(bytes) });
    }
    vgpu.live.peak[dev].fetch_max(total, Ordering::Relaxed);
    Ok(())
}

/// Gives back `bytes` taken with [`reserve`].
pub fn release(me: &ProcSlot, dev: usize, bytes: u64) {
    sub(&me.used[dev], bytes);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tessera_ffi::region::{PROCS_PER_VGPU, UNLIMITED};

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
        assert_eq!(reserve(v, me, 0, 1), Err(Refused { limit: 1000, used: 1000 }));
        release(me, 0, 400);
        assert_eq!(reserve(v, me, 0, 401), Err(Refused { limit: 1000, used: 600 }));
        assert_eq!(reserve(v, me, 0, 400), Ok(()));
        assert_eq!(v.live.peak[0].load(Ordering::Relaxed), 1000);
        assert_eq!(me.used[0].load(Ordering::Relaxed), 1000);
        // Other devices are unlimited; a total reaching the "unlimited" marker, or overflowing, is refused.
        assert_eq!(reserve(v, me, 1, u64::MAX - 1), Ok(()));
        assert!(reserve(v, me, 1, 1).is_err());
        assert!(reserve(v, me, 1, u64::MAX).is_err());
        assert_eq!(me.used[1].load(Ordering::Relaxed), u64::MAX - 1, "refusals take their addition back");
    }

    #[test]
    fn release_never_wraps() {
        let (v, me) = slots(10);
        reserve(v, me, 0, 5).unwrap();
        release(me, 0, 50);
        assert_eq!((v.used(0), me.used[0].load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn racing_threads_never_overshoot() {
        let (v, _) = slots(1 << 20);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    let me: &ProcSlot = zeroed();
                    let mut held = Vec::new();
                    for i in 0..20_000u64 {
                        let bytes = 1 + (i * 7919) % 4096;
                        if reserve(v, me, 0, bytes).is_ok() {
                            assert!(v.used(0) <= 1 << 20);
                            held.push(bytes);
                        }
                        if i % 3 == 0
                            && let Some(b) = held.pop()
                        {
                            release(me, 0, b);
                        }
                    }
                    let mine = me.used[0].load(Ordering::Relaxed);
                    assert_eq!(mine, held.iter().sum::<u64>());
                    for b in held {
                        release(me, 0, b);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(v.used(0), 0);
        assert!(v.live.peak[0].load(Ordering::Relaxed) <= 1 << 20);
    }
}
