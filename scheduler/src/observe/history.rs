//! What each vGPU and each device achieved over the last second and the last ten seconds, for the `stats`
//! request. Every device's refill loop records, at most every [`SAMPLE_NS`] on its existing tick, the
//! device time its [`Charger`] has charged to each slot (the daemon's own count, which no tenant can
//! write) into a ring of the last [`KEPT`] samples: a fixed buffer allocated once, under a lock held for
//! a copy of 66 integers, and not taken at all on the ticks in between. A device's busy time is the sum
//! over its slots (the ledger never charges the same nanosecond twice).

use crate::compute::charger::Charger;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use tessera_client::Achieved;
use tessera_region::{MAX_DEVICES, MAX_VGPUS};

/// Least time between two samples.
pub const SAMPLE_NS: u64 = 100_000_000;
/// The longer window.
pub const LONG_NS: u64 = 10_000_000_000;
/// The shorter window.
pub const SHORT_NS: u64 = 1_000_000_000;
/// Samples kept: enough to span [`LONG_NS`] with a sample to spare.
pub const KEPT: usize = (LONG_NS / SAMPLE_NS) as usize + 2;

/// One sample of a device.
#[derive(Clone, Copy)]
struct Sample {
    at_ns: u64,
    /// Bit `i`: slot `i` is a managed vGPU of the device.
    members: u64,
    /// Device time charged to each member slot's vGPU since it became a member.
    charged: [u64; MAX_VGPUS],
}

/// A device's last samples, oldest first from `next` on once full.
struct Ring {
    samples: Vec<Sample>,
    next: usize,
}

impl Ring {
    /// The samples, oldest first.
    fn ordered(&self) -> impl DoubleEndedIterator<Item = &Sample> + Clone {
        let (newer, older) = self.samples.split_at(self.next.min(self.samples.len()));
        older.iter().chain(newer)
    }
}

/// Every device's ring, kept in the daemon's [`State`](crate::state::State): each device's loop writes
/// its own, `stats` reads them.
pub struct Rings {
    rings: [Mutex<Option<Ring>>; MAX_DEVICES],
    /// When each device's next sample is due: the ticks before it take no lock.
    due: [AtomicU64; MAX_DEVICES],
}

impl Default for Rings {
    fn default() -> Rings {
        Rings { rings: [const { Mutex::new(None) }; MAX_DEVICES], due: [const { AtomicU64::new(0) }; MAX_DEVICES] }
    }
}

impl Rings {
    fn ring(&self, device: usize) -> MutexGuard<'_, Option<Ring>> {
        self.rings[device].lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records device `device`'s sample at `now_ns`, if one is due, from its charger.
    pub fn record(&self, device: u32, charger: &Charger, now_ns: u64) {
        let d = device as usize;
        if d >= MAX_DEVICES || now_ns < self.due[d].load(Ordering::Relaxed) {
            return;
        }
        self.due[d].store(now_ns + SAMPLE_NS, Ordering::Relaxed);
        // Membership as the charger saw it at its last charge, so that a sample's members and counts agree.
        let members = (0..MAX_VGPUS).filter(|&i| charger.is_member(i)).fold(0u64, |m, i| m | 1 << i);
        self.put(d, now_ns, members, |slot| charger.charged_ns(slot));
    }

    /// Stores a sample in device `d`'s ring.
    fn put(&self, d: usize, at_ns: u64, members: u64, charged: impl Fn(usize) -> u64) {
        let mut guard = self.ring(d);
        let ring = guard.get_or_insert_with(|| Ring { samples: Vec::with_capacity(KEPT), next: 0 });
        let mut sample = Sample { at_ns, members, charged: [0; MAX_VGPUS] };
        for (slot, c) in sample.charged.iter_mut().enumerate() {
            *c = charged(slot);
        }
        if ring.samples.len() < KEPT {
            ring.samples.push(sample);
        } else {
            ring.samples[ring.next] = sample;
            ring.next = (ring.next + 1) % KEPT;
        }
    }
}

/// What a device achieved over the two windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The share of the device's time some kernel ran.
    pub busy: Achieved,
    /// The share each slot's kernels took (0 for slots not on the device now).
    pub slots: [Achieved; MAX_VGPUS],
    /// The time the 1 s figures cover (less just after the daemon started), ns.
    pub span_1s_ns: u64,
    /// The time the 10 s figures cover, ns.
    pub span_10s_ns: u64,
    /// Device time charged to each slot's vGPU since it became a member under this daemon, as of the
    /// last sample (0 for slots not on the device now).
    pub charged_ns: [u64; MAX_VGPUS],
}

impl Rings {
    /// What device `device` and its slots achieved over the last [`SHORT_NS`] and [`LONG_NS`] of samples.
    pub fn read(&self, device: u32) -> Reading {
        let mut reading = Reading {
            busy: Achieved::default(),
            slots: [Achieved::default(); MAX_VGPUS],
            span_1s_ns: 0,
            span_10s_ns: 0,
            charged_ns: [0; MAX_VGPUS],
        };
        let d = device as usize;
        if d >= MAX_DEVICES {
            return reading;
        }
        let guard = self.ring(d);
        let Some(ring) = guard.as_ref() else { return reading };
        if let Some(last) = ring.ordered().next_back() {
            for (slot, charged) in reading.charged_ns.iter_mut().enumerate() {
                if last.members & 1 << slot != 0 {
                    *charged = last.charged[slot];
                }
            }
        }
        for (window, long) in [(SHORT_NS, false), (LONG_NS, true)] {
            let (span, busy, slots) = window_of(ring, window);
            let set = |a: &mut Achieved, pct: f64| if long { a.last_10s_pct = pct } else { a.last_1s_pct = pct };
            set(&mut reading.busy, busy);
            for (a, pct) in reading.slots.iter_mut().zip(slots) {
                set(a, pct);
            }
            if long {
                reading.span_10s_ns = span;
            } else {
                reading.span_1s_ns = span;
            }
        }
        reading
    }
}

/// The span covered and the busy and per-slot shares (percent) over the last `window` of `ring`. A slot
/// counts only from the sample since which it has been a member without a break, so that a vGPU just
/// placed in a slot is not given what the slot's previous vGPU took.
fn window_of(ring: &Ring, window: u64) -> (u64, f64, [f64; MAX_VGPUS]) {
    let mut shares = [0.0; MAX_VGPUS];
    let Some(last) = ring.ordered().next_back() else { return (0, 0.0, shares) };
    // Samples are taken on ticks a little later than due: half a period of slack keeps a full window.
    let inside: Vec<&Sample> = ring.ordered().filter(|s| last.at_ns - s.at_ns <= window + SAMPLE_NS / 2).collect();
    let first = inside[0];
    let span = last.at_ns - first.at_ns;
    if span == 0 {
        return (0, 0.0, shares);
    }
    let pct = |ns: u64| ns as f64 / span as f64 * 100.0;
    let sum = |s: &Sample| s.charged.iter().fold(0u64, |a, &c| a.saturating_add(c));
    let busy = pct(sum(last).saturating_sub(sum(first)));
    for (slot, share) in shares.iter_mut().enumerate() {
        let bit = 1u64 << slot;
        let Some(from) = inside.iter().rev().take_while(|s| s.members & bit != 0).last() else { continue };
        *share = pct(last.charged[slot].saturating_sub(from.charged[slot]));
    }
    (span, busy, shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn shares_over_one_and_ten_seconds_from_a_ring_that_wraps() {
        let rings = Rings::default();
        let d = 15;
        // Slot 0 takes half the device for 20 s; slot 1 a quarter, but only in the last 2 s, in a slot
        // whose previous vGPU had run up 5 s (which must not count).
        for k in 0..=200u64 {
            let at = 1_000 * MS + k * SAMPLE_NS;
            let members = if k >= 180 { 0b11 } else { 0b01 };
            rings.put(d, at, members, |slot| match slot {
                0 => k * SAMPLE_NS / 2,
                1 if k >= 180 => 5_000 * MS + (k - 180) * SAMPLE_NS / 4,
                1 => 5_000 * MS,
                _ => 0,
            });
        }
        let r = rings.read(d as u32);
        assert_eq!((r.span_1s_ns, r.span_10s_ns), (SHORT_NS, LONG_NS));
        assert!((r.slots[0].last_1s_pct - 50.0).abs() < 1e-9 && (r.slots[0].last_10s_pct - 50.0).abs() < 1e-9);
        assert!((r.slots[1].last_1s_pct - 25.0).abs() < 1e-9, "{:?}", r.slots[1]);
        assert!((r.slots[1].last_10s_pct - 5.0).abs() < 1e-9, "2 s at 25% over 10 s: {:?}", r.slots[1]);
        assert!((r.busy.last_1s_pct - 75.0).abs() < 1e-9, "{:?}", r.busy);
        assert!((r.busy.last_10s_pct - 55.0).abs() < 1e-9, "{:?}", r.busy);
        assert_eq!(r.charged_ns[..3], [10_000 * MS, 5_500 * MS, 0], "the last sample's counts, members only");
        assert_eq!(rings.read(14).span_10s_ns, 0, "a device never sampled reads as nothing");
    }
}
