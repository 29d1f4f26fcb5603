//! Charging one device's vGPUs for the kernels that finished: the daemon reads the device's timeline
//! (where the shims publish every finished kernel of a managed vGPU, see `tessera_ffi::timeline`), has
//! the [`Ledger`] work out each kernel's device time, and applies the result to the vGPUs' records in one
//! atomic addition each: `device_ns` grows by the device time, `tokens` by the estimate the launch took
//! less the device time (for launches that took tokens).
//!
//! Where it has read to and what it has charged up to are kept in the timeline itself, so that a
//! restarted daemon neither misses nor charges twice what was published meanwhile.

use crate::ledger::{self, Change, Ledger};
use std::sync::atomic::Ordering;
use tessera_ffi::region::{MAX_VGPUS, Region, state};
use tessera_ffi::timeline::{Reader, Record};

/// The charging state of one device, kept from tick to tick.
pub struct Charger {
    reader: Reader,
    ledger: Ledger,
    records: Vec<Record>,
    changes: Vec<Change>,
}

impl Charger {
    /// The charger of device `device`, continuing where a previous daemon stopped.
    pub fn new(region: &Region, device: u32) -> Charger {
        let (reader, ledger) = match region.timelines.get(device as usize) {
            Some(t) => (Reader::resume(t), Ledger::new(t.charged_end_ns.load(Ordering::Acquire))),
            None => (Reader::default(), Ledger::default()),
        };
        Charger { reader, ledger, records: Vec::new(), changes: Vec::new() }
    }

    /// Charges the kernels published on device `device`'s timeline since the last call, at `now_ns`.
    pub fn charge(&mut self, region: &Region, device: u32, now_ns: u64) {
        let Some(t) = region.timelines.get(device as usize) else { return };
        self.records.clear();
        self.changes.clear();
        self.reader.read(t, now_ns, &mut self.records);
        for r in &self.records {
            self.ledger.charge(r, &mut self.changes);
        }
        self.ledger.forget(now_ns);
        t.charged_end_ns.store(self.ledger.charged_end_ns(), Ordering::Release);
        let mut totals = [(0i64, 0i64); MAX_VGPUS];
        ledger::sum(&self.changes, &mut totals);
        for (v, &(device_ns, tokens)) in region.vgpus.iter().zip(&totals) {
            if (device_ns, tokens) == (0, 0) || v.state.load(Ordering::Acquire) != state::READY {
                continue;
            }
            let s = &v.sched;
            if tokens != 0 {
                s.tokens.fetch_add(tokens, Ordering::AcqRel);
            }
            let _ = s
                .device_ns
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| Some(d.saturating_add_signed(device_ns)));
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

    #[test]
    fn finished_kernels_are_charged_their_device_time_and_give_their_estimates_back() {
        let r = region();
        for v in &r.vgpus[..2] {
            v.state.store(state::READY, Ordering::Relaxed);
        }
        let mut charger = Charger::new(r, 0);
        let t = &r.timelines[0];
        // Serial engine, 500 µs kernels alternating from 1 ms on; each queued 1 ms before it ran (its start
        // event) and charged a 300 µs estimate at launch. vGPU 1's records arrive first.
        let kernel = |k: u64| {
            let end = MS + (k + 1) * MS / 2;
            Record { start_ns: end - 3 * MS / 2, end_ns: end, charged: 300_000, vgpu: (k % 2) as u32 }
        };
        for k in (1..8).step_by(2).chain((0..8).step_by(2)) {
            assert!(t.publish(&kernel(k)));
        }
        charger.charge(r, 0, 10 * MS);
        let device = |i: usize| r.vgpus[i].sched.device_ns.load(Ordering::Relaxed);
        let tokens = |i: usize| r.vgpus[i].sched.tokens.load(Ordering::Relaxed);
        // The first kernel found the device idle since its start event (1.5 ms); the others ran 500 µs.
        assert_eq!((device(0), device(1)), (3 * MS / 2 + 3 * (MS / 2), 4 * (MS / 2)));
        assert_eq!(tokens(1), 4 * (300_000 - 500_000));
        assert_eq!(t.tail.load(Ordering::Relaxed), 8);
        assert_eq!(t.charged_end_ns.load(Ordering::Relaxed), 5 * MS);
        // A daemon restarted on the region continues after what was charged.
        assert!(t.publish(&Record { start_ns: 4 * MS, end_ns: 6 * MS, charged: 0, vgpu: 1 }));
        Charger::new(r, 0).charge(r, 0, 11 * MS);
        assert_eq!(device(1), 3 * MS);
        assert_eq!(tokens(1), 4 * (300_000 - 500_000), "not token-limited: tokens untouched");
        // A slot that is no longer a vGPU is not charged.
        r.vgpus[1].state.store(state::FREE, Ordering::Relaxed);
        assert!(t.publish(&Record { start_ns: 6 * MS, end_ns: 7 * MS, charged: 5, vgpu: 1 }));
        Charger::new(r, 0).charge(r, 0, 12 * MS);
        assert_eq!(device(1), 3 * MS);
    }
}
