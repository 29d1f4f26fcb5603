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

/// Takes `bytes` on device `dev`: the vGPU's counter first (the gate every process passes through), then
/// the process's mirror. A process killed between the two leaves the bytes counted in the vGPU until the
/// vGPU is idle again: erring that way can shrink a quota for a while but never lets it overshoot.
pub fn reserve(vgpu: &VgpuSlot, me: &ProcSlot, dev: usize, bytes: u64) -> Result<(), Refused> {
    let limit = vgpu.config.limit[dev].load(Ordering::Acquire);
    match vgpu.live.used[dev]
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(bytes).filter(|&n| n <= limit))
    {
        Ok(before) => {
            me.used[dev].fetch_add(bytes, Ordering::AcqRel);
            vgpu.live.peak[dev].fetch_max(before + bytes, Ordering::Relaxed);
            Ok(())
        }
        Err(used) => Err(Refused { limit, used }),
    }
}

/// Gives back `bytes` taken with [`reserve`]: the process's mirror first, for the same reason.
pub fn release(vgpu: &VgpuSlot, me: &ProcSlot, dev: usize, bytes: u64) {
    sub(&me.used[dev], bytes);
    sub(&vgpu.live.used[dev], bytes);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tessera_ffi::region::UNLIMITED;

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
        (v, zeroed())
    }

    #[test]
    fn exactly_the_limit_fits_one_byte_more_does_not() {
        let (v, me) = slots(1000);
        assert_eq!(reserve(v, me, 0, 1000), Ok(()));
        assert_eq!(reserve(v, me, 0, 1), Err(Refused { limit: 1000, used: 1000 }));
        release(v, me, 0, 400);
        assert_eq!(reserve(v, me, 0, 401), Err(Refused { limit: 1000, used: 600 }));
        assert_eq!(reserve(v, me, 0, 400), Ok(()));
        assert_eq!(v.live.peak[0].load(Ordering::Relaxed), 1000);
        assert_eq!(me.used[0].load(Ordering::Relaxed), 1000);
        // Other devices are unlimited; overflow is refused, not wrapped.
        assert_eq!(reserve(v, me, 1, u64::MAX), Ok(()));
        assert!(reserve(v, me, 1, 1).is_err());
    }

    #[test]
    fn release_never_wraps() {
        let (v, me) = slots(10);
        reserve(v, me, 0, 5).unwrap();
        release(v, me, 0, 50);
        assert_eq!((v.live.used[0].load(Ordering::Relaxed), me.used[0].load(Ordering::Relaxed)), (0, 0));
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
                            assert!(v.live.used[0].load(Ordering::Relaxed) <= 1 << 20);
                            held.push(bytes);
                        }
                        if i % 3 == 0
                            && let Some(b) = held.pop()
                        {
                            release(v, me, 0, b);
                        }
                    }
                    let mine = me.used[0].load(Ordering::Relaxed);
                    assert_eq!(mine, held.iter().sum::<u64>());
                    for b in held {
                        release(v, me, 0, b);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(v.live.used[0].load(Ordering::Relaxed), 0);
        assert!(v.live.peak[0].load(Ordering::Relaxed) <= 1 << 20);
    }
}
