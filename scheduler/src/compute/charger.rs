//! Charging one device's vGPUs for the kernels that finished: the daemon reads the timeline of each of
//! the device's managed vGPUs (where their shims publish every finished kernel, see
//! `tessera_region::timeline`), has the device's [`Ledger`] work out each kernel's device time from the order
//! of completions of them all, and applies the result to the vGPUs' records in one atomic addition each:
//! `device_ns` grows by the device time, `tokens` by the estimate the launch took less the device time (for
//! launches that took tokens). Each vGPU's `charged_ns` follows the device time of its launches of each
//! kind (a moving average), which its launches take as their estimate.
//!
//! Where it has read to is kept in each timeline, and what it has charged up to in the device's record,
//! so that a restarted daemon neither misses nor charges twice what was published meanwhile.

use std::sync::atomic::Ordering;
use tessera_policy::ledger::{self, Change, Ledger};
use tessera_region::timeline::{Reader, Record};
use tessera_region::{MAX_VGPUS, Region, VgpuSlot, flags, state};

/// Weight of a new charge in a vGPU's `charged_ns`: 1/`EWMA_DIVISOR`.
pub const EWMA_DIVISOR: i64 = 8;

/// The charging state of one device, kept from tick to tick.
pub struct Charger {
    device: u32,
    readers: Vec<Option<Reader>>,
    ledger: Ledger,
    records: Vec<Record>,
    changes: Vec<Change>,
    /// Device time charged to each slot since the charger started (the daemon's own count, which no
    /// tenant can write, unlike its `device_ns`).
    charged: Vec<u64>,
    /// Each slot's `charged` when its present vGPU became a member of the device, so that a vGPU placed
    /// in a slot is not counted what the slot's previous vGPU took.
    joined: Vec<u64>,
}

/// Whether slot `v` is a managed vGPU of `device`.
pub fn member(v: &VgpuSlot, device: u32) -> bool {
    v.state() == state::READY && v.flags() & flags::MANAGED != 0 && v.config.device.load(Ordering::Acquire) == device
}

impl Charger {
    /// The charger of device `device`, continuing where a previous daemon stopped.
    pub fn new(region: &Region, device: u32) -> Charger {
        let charged = region.devices.get(device as usize).map_or(0, |d| d.charged_end_ns.load(Ordering::Acquire));
        Charger {
            device,
            readers: (0..MAX_VGPUS).map(|_| None).collect(),
            ledger: Ledger::new(charged),
            records: Vec::new(),
            changes: Vec::new(),
            charged: vec![0; MAX_VGPUS],
            joined: vec![0; MAX_VGPUS],
        }
    }

    /// Whether slot `slot` held a managed vGPU of the device at the last [`Charger::charge`].
    pub fn is_member(&self, slot: usize) -> bool {
        self.readers.get(slot).is_some_and(Option::is_some)
    }

    /// Device time charged to slot `slot`'s vGPU since it became a member of the device under this
    /// charger (0 for a slot that is not a member).
    pub fn charged_ns(&self, slot: usize) -> u64 {
        if !self.is_member(slot) {
            return 0;
        }
        self.charged[slot] - self.joined[slot]
    }

    /// Charges the kernels the device's vGPUs published since the last call, at `now_ns`.
    pub fn charge(&mut self, region: &Region, now_ns: u64) {
        let Some(dev) = region.devices.get(self.device as usize) else { return };
        self.changes.clear();
        for (i, v) in region.vgpus.iter().enumerate() {
            if !member(v, self.device) {
                self.readers[i] = None;
                continue;
            }
            let t = &v.live.timeline;
            if self.readers[i].is_none() {
                self.joined[i] = self.charged[i];
            }
            let reader = self.readers[i].get_or_insert_with(|| Reader::resume(t));
            self.records.clear();
            reader.read(t, now_ns, &mut self.records);
            for r in &mut self.records {
                // The tenant writes its timeline: a kernel cannot end after now (a later end would move the
                // device's charged end past its neighbours' kernels), nor start after it ends.
                r.end_ns = r.end_ns.min(now_ns);
                r.start_ns = r.start_ns.min(r.end_ns);
                let ns = self.ledger.charge(i as u32, &(&*r).into(), &mut self.changes).min(i64::MAX as u64) as i64;
                // A batch's launches are estimated at their mean.
                let ns = ns / i64::from(r.launches.max(1));
                if let Some(estimate) = v.live.sched.charged_ns.get(r.kind as usize) {
                    let e = estimate.load(Ordering::Relaxed);
                    let next = if e <= 0 { ns } else { e + (ns - e) / EWMA_DIVISOR };
                    estimate.store(next.max(1), Ordering::Relaxed);
                }
            }
        }
        self.ledger.forget(now_ns);
        dev.charged_end_ns.store(self.ledger.charged_end_ns(), Ordering::Release);
        let mut totals = [(0i64, 0i64); MAX_VGPUS];
        ledger::sum(&self.changes, &mut totals);
        for ((v, &(device_ns, tokens)), charged) in region.vgpus.iter().zip(&totals).zip(&mut self.charged) {
            if (device_ns, tokens) == (0, 0) || v.state() != state::READY {
                continue;
            }
            *charged = charged.saturating_add_signed(device_ns);
            let s = &v.live.sched;
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
            v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
            v.config.state.store(state::READY, Ordering::Relaxed);
        }
        let mut charger = Charger::new(r, 0);
        let ring = |i: usize| &r.vgpus[i].live.timeline;
        // Serial engine, 500 µs kernels alternating from 1 ms on; each queued 1 ms before it ran (its start
        // event) and charged a 300 µs estimate at launch.
        let kernel = |k: u64| {
            let end = MS + (k + 1) * MS / 2;
            Record { start_ns: end - 3 * MS / 2, end_ns: end, charged: 300_000, kind: 0, launches: 1, bound_ns: 0 }
        };
        for k in 0..8 {
            assert!(ring((k % 2) as usize).publish(&kernel(k)));
        }
        charger.charge(r, 10 * MS);
        let device = |i: usize| r.vgpus[i].live.sched.device_ns.load(Ordering::Relaxed);
        let tokens = |i: usize| r.vgpus[i].live.sched.tokens.load(Ordering::Relaxed);
        // The first kernel found the device idle since its start event (1.5 ms); the others ran 500 µs.
        assert_eq!((device(0), device(1)), (3 * MS / 2 + 3 * (MS / 2), 4 * (MS / 2)));
        assert_eq!(tokens(1), 4 * (300_000 - 500_000));
        assert_eq!(r.vgpus[1].live.sched.charged_ns[0].load(Ordering::Relaxed), (MS / 2) as i64, "the estimate");
        assert_eq!(ring(1).tail.load(Ordering::Relaxed), 4);
        assert_eq!(r.devices[0].charged_end_ns.load(Ordering::Relaxed), 5 * MS);
        // A daemon restarted on the region continues after what was charged.
        assert!(ring(1).publish(&Record {
            start_ns: 4 * MS,
            end_ns: 6 * MS,
            charged: 0,
            kind: 1,
            launches: 1,
            bound_ns: 0
        }));
        Charger::new(r, 0).charge(r, 11 * MS);
        assert_eq!(device(1), 3 * MS);
        assert_eq!(tokens(1), 4 * (300_000 - 500_000), "not token-limited: tokens untouched");
        assert_eq!(r.vgpus[1].live.sched.charged_ns[1].load(Ordering::Relaxed), MS as i64, "graphs apart");
        // A slot that is no longer a vGPU of the device is not charged.
        r.vgpus[1].config.state.store(state::FREE, Ordering::Relaxed);
        assert!(ring(1).publish(&Record {
            start_ns: 6 * MS,
            end_ns: 7 * MS,
            charged: 5,
            kind: 0,
            launches: 1,
            bound_ns: 0
        }));
        Charger::new(r, 0).charge(r, 12 * MS);
        assert_eq!(device(1), 3 * MS);
    }

    #[test]
    fn a_record_dated_in_the_future_or_absurd_moves_no_neighbours_charges() {
        let r = region();
        for v in &r.vgpus[20..22] {
            v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
            v.config.state.store(state::READY, Ordering::Relaxed);
        }
        let mut charger = Charger::new(r, 0);
        let device = |i: usize| r.vgpus[i].live.sched.device_ns.load(Ordering::Relaxed);
        // The tenant of slot 20 publishes a kernel ending in a year, with an absurd estimate.
        let forged = Record { start_ns: 0, end_ns: u64::MAX / 2, charged: i64::MIN, kind: 0, launches: 1, bound_ns: 0 };
        assert!(r.vgpus[20].live.timeline.publish(&forged));
        charger.charge(r, 10 * MS);
        assert_eq!(r.devices[0].charged_end_ns.load(Ordering::Relaxed), 10 * MS, "charged up to now, not beyond");
        assert_eq!(device(20), 10 * MS, "charged to itself, up to now");
        // Its neighbour's next kernel is charged exactly its own time.
        let honest =
            Record { start_ns: 11 * MS, end_ns: 12 * MS, charged: MS as i64, kind: 0, launches: 1, bound_ns: 0 };
        assert!(r.vgpus[21].live.timeline.publish(&honest));
        charger.charge(r, 13 * MS);
        assert_eq!((device(21), r.vgpus[21].live.sched.tokens.load(Ordering::Relaxed)), (MS, 0));
    }

    #[test]
    fn a_vgpu_placed_in_a_reused_slot_counts_only_its_own_charges() {
        let r = region();
        let v = &r.vgpus[30];
        let ready = || v.config.state.store(state::READY, Ordering::Relaxed);
        let free = || v.config.state.store(state::FREE, Ordering::Relaxed);
        v.config.flags.store(flags::MANAGED, Ordering::Relaxed);
        ready();
        let mut charger = Charger::new(r, 0);
        let kernel = |start: u64| Record {
            start_ns: start,
            end_ns: start + MS,
            charged: MS as i64,
            kind: 0,
            launches: 1,
            bound_ns: 0,
        };
        assert!(v.live.timeline.publish(&kernel(MS)));
        charger.charge(r, 5 * MS);
        assert!(charger.is_member(30) && !charger.is_member(31));
        assert_eq!(charger.charged_ns(30), MS);
        // The vGPU is removed: the slot is no member and counts nothing.
        free();
        charger.charge(r, 6 * MS);
        assert_eq!((charger.is_member(30), charger.charged_ns(30)), (false, 0));
        // Another vGPU takes the slot: it starts from nothing, not from its predecessor's millisecond.
        ready();
        assert!(v.live.timeline.publish(&kernel(7 * MS)));
        charger.charge(r, 10 * MS);
        assert_eq!(charger.charged_ns(30), MS);
    }
}
