//! Charging device time from the device-wide order of completions (pure).
//!
//! A kernel's events span its stream's time: on a time-sliced GPU that includes waiting behind other
//! vGPUs' kernels. But the engine runs one kernel at a time, so once every kernel's absolute start and end
//! are known (the shims publish them on their vGPUs' timelines), the time kernel `k` really had the engine is
//! exactly `end(k) - max(start(k), end of the kernel that ended just before it)`, or 0 if that is negative.
//! Summed over a vGPU this is its device time; summed over the device, the time the engine was busy:
//! nothing is charged twice, and time the device was idle is charged to nobody.
//!
//! Records arrive in the order their processes publish them, not in the order the kernels ended. The
//! ledger keeps the kernels of the last [`HORIZON_NS`] sorted by end and charges each record as it arrives
//! against the kernel ending just before it; when a record arrives late (something ending after it has
//! been charged already), the kernel ending just after it is re-charged against it, and the difference
//! given back. So charges land at once and are exact whatever the arrival order within the horizon. A
//! record that ended before everything remembered is charged its own span (its neighbours are
//! forgotten), which never undercharges.
//!
//! A record whose launching thread was held up around the launch (`Kernel::bound_ns`) may span host
//! time besides its kernel's: before its submission, or after its kernel ended, which an idle stream's end
//! event then timestamps late. It is charged as any other but never more than its bound (its launch's
//! estimate), so a preempted tenant is not charged the idle engine; what its kernel really displaced is
//! then charged to the kernel that ended next, at most one kernel's time per such record.
//!
//! Ends closer than [`MAPPING_ERROR_NS`] are ambiguous. Each process maps its events onto the host clock
//! through a reference event of its own, so two processes' times may be off against each other (by tens of
//! ns to a few µs). An empty kernel queued behind another vGPU's kernel runs in no time when that one ends,
//! at the same instant; placed a little before it, it would be charged the long kernel, and the long one
//! next to nothing. When two ends are that close, one of the two kernels had the engine for next to no
//! time after the other ended: either the one ending first by the clocks ran its span and the other the
//! gap, or the other way round. Each record carries what its launches were estimated to take (the tokens
//! they took): the ledger keeps the order under which the two charges come closer to the two estimates
//! (summing the differences), so the empty kernel follows the long one, and two short kernels a few µs
//! apart keep their order. Why not by when each became ready (the engine runs kernels first come, first
//! served): a record's start says when its kernel could start at the earliest, but on the simulated driver
//! a stream's host thread takes its turn on the engine only once it runs, which on a loaded host is
//! hundreds of µs later, and a real GPU interleaves contexts; measured, ordering by readiness charged
//! wrongly where the clocks had it right. Limits: a record without an estimate (a vGPU without tokens,
//! `high`) keeps the order of the clocks; a kernel far shorter or longer than its vGPU's estimate may be
//! placed on the wrong side of a neighbour ending within the error, which moves one kernel's time to the
//! other, as the clocks' order could before; and each kernel is still off by up to the clocks' error, as
//! every span is.
//!
//! Limits: on a GPU that runs kernels of several contexts at once the rule is an approximation (a kernel
//! ending inside another's span is charged from the completion before it). Kernels of processes that
//! publish nothing (not managed by the daemon) are invisible: time a managed kernel spent waiting behind
//! one is charged to it.

use std::collections::VecDeque;

/// One finished kernel (or batch of launches measured as one span) as the ledger charges it: what a shim
/// published on its vGPU's timeline (`tessera_region::timeline::Record`), less what no charge depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    /// When the kernel could start (monotonic ns).
    pub start_ns: u64,
    /// When it ended (monotonic ns).
    pub end_ns: u64,
    /// Tokens its launch took (0: not token-limited): the estimate of what it takes.
    pub charged: i64,
    /// 0, or the most it may be charged: its launching thread was held up around the launch, so its span
    /// may hold host time besides the kernel.
    pub bound_ns: u32,
}

/// The device time of a kernel that ran from `start_ns` to `end_ns` on its stream and whose predecessor
/// on a serial engine ended at `prev_end_ns`: the time it had the engine (0 if it ended first).
pub fn exclusive(start_ns: u64, end_ns: u64, prev_end_ns: u64) -> u64 {
    end_ns.saturating_sub(start_ns.max(prev_end_ns))
}

/// How long (by end time) the ledger remembers charged kernels, to place late records among them.
pub const HORIZON_NS: u64 = 1_000_000_000;
/// Most kernels remembered.
pub const MAX_KEPT: usize = 16_384;
/// How far two processes' event times may be off against each other: each maps its events through a
/// reference whose host time is known within half the 10 µs its `cuEventRecord` may take (the shim's
/// `clock::TIGHT_NS`), so two differ by up to 10 µs, plus the float resolution of elapsed times and the
/// drift between re-bases. Ends closer than this are ordered as the module doc says.
pub const MAPPING_ERROR_NS: u64 = 12_000;

/// A kernel charged already.
#[derive(Clone, Copy, Debug)]
struct Charged {
    start_ns: u64,
    end_ns: u64,
    vgpu: u32,
    /// Whether its vGPU's tokens pay for it (its launch took tokens).
    limited: bool,
    /// Device time charged so far.
    ns: u64,
    /// What its launches were estimated to take (the tokens they took), if they took any.
    estimate: Option<u64>,
}

/// Whether two kernels whose ends are within the clocks' error, `earlier` ending first by the clocks, are
/// better charged the other way round: the later one its span since `prev_ns` (the end before both) and
/// the earlier one nothing, rather than the earlier one its span and the later one the gap between the
/// ends. Decided by which pair of charges comes closer to the two estimates; false without both.
fn ends_swapped(earlier: Span, later: Span, prev_ns: u64) -> bool {
    let (Some(e1), Some(e2)) = (earlier.estimate, later.estimate) else { return false };
    let own = |k: Span| k.end_ns.saturating_sub(k.start_ns.max(prev_ns));
    let as_is = own(earlier).abs_diff(e1) + later.end_ns.saturating_sub(earlier.end_ns).abs_diff(e2);
    let swapped = own(later).abs_diff(e2) + e1;
    swapped < as_is
}

/// A kernel's span and estimate, for [`ends_swapped`].
#[derive(Clone, Copy, Debug)]
struct Span {
    start_ns: u64,
    end_ns: u64,
    estimate: Option<u64>,
}

impl Charged {
    fn span(&self) -> Span {
        Span { start_ns: self.start_ns, end_ns: self.end_ns, estimate: self.estimate }
    }
}

/// One change to a vGPU's accounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// vGPU slot index.
    pub vgpu: u32,
    /// Device time to add to `device_ns` (negative: charged too much before).
    pub device_ns: i64,
    /// Tokens to add (the estimate given back, less the device time charged).
    pub tokens: i64,
}

/// The charged kernels of one device.
#[derive(Debug, Default)]
pub struct Ledger {
    kept: VecDeque<Charged>,
    /// End of the latest kernel forgotten (or charged by a previous daemon): nothing before it is known.
    floor_ns: u64,
    /// Records that arrived older than everything remembered (charged their own span).
    pub stale: u64,
}

impl Ledger {
    /// A ledger for a device whose kernels were charged up to `charged_end_ns` (by a previous daemon).
    pub fn new(charged_end_ns: u64) -> Ledger {
        Ledger { kept: VecDeque::new(), floor_ns: charged_end_ns, stale: 0 }
    }

    /// The latest end charged (what a restarted daemon continues from).
    pub fn charged_end_ns(&self) -> u64 {
        self.kept.back().map_or(self.floor_ns, |c| c.end_ns)
    }

    /// Charges record `r` of vGPU `vgpu`, appending the changes to make to `out` (one for `r`, and one for
    /// each kernel it re-charges: the one ending after it when `r` arrived late, and those placed after it
    /// by the ambiguous-end rule of the module doc). Returns the device time charged for `r`.
    pub fn charge(&mut self, vgpu: u32, r: &Kernel, out: &mut Vec<Change>) -> u64 {
        let limited = r.charged > 0;
        let estimate = u64::try_from(r.charged).ok().filter(|&e| e > 0);
        let mapped_end = r.end_ns.max(r.start_ns);
        let mine = Span { start_ns: r.start_ns, end_ns: mapped_end, estimate };
        let mut end = mapped_end;
        let mut pos = self.kept.partition_point(|c| c.end_ns <= end);
        let prev_at = |kept: &VecDeque<Charged>, i: usize| if i == 0 { self.floor_ns } else { kept[i - 1].end_ns };
        // The kernel ending just after `r`, within the error, ended first: `r` ends when it does, after it.
        if let Some(k) = self.kept.get(pos).copied()
            && k.end_ns - mapped_end <= MAPPING_ERROR_NS
            && ends_swapped(mine, k.span(), prev_at(&self.kept, pos))
        {
            end = k.end_ns;
            pos = self.kept.partition_point(|c| c.end_ns <= end);
        }
        // The kernel ending just before `r`, within the error, ended after it: it moves after `r`, ending
        // when `r` ends.
        let mut first = pos;
        if end == mapped_end
            && let Some(k) = pos.checked_sub(1).map(|i| self.kept[i])
            && mapped_end - k.end_ns <= MAPPING_ERROR_NS
            && ends_swapped(k.span(), mine, prev_at(&self.kept, pos - 1))
        {
            first = pos - 1;
        }
        let from = if first == 0 && end <= self.floor_ns {
            // Older than anything remembered: its neighbours are gone.
            self.stale += 1;
            r.start_ns
        } else {
            r.start_ns.max(prev_at(&self.kept, first)).min(end)
        };
        // A bounded record's span may hold host time besides the kernel (see `Kernel::bound_ns`): it is
        // charged its bound at most, and keeps its place by end. A later record ending inside its span
        // re-charges it below, as any other: the minimum is kept.
        let ns = match u64::from(r.bound_ns) {
            0 => end - from,
            bound => (end - from).min(bound),
        };
        self.kept.insert(first, Charged { start_ns: r.start_ns, end_ns: end, vgpu, limited, ns, estimate });
        // The kernels moved after `r` (now at first + 1 ..= pos), then the one ending after them all: each
        // is re-charged from `r`'s end, keeping the smaller charge.
        for i in first + 1..=pos + 1 {
            let Some(next) = self.kept.get_mut(i) else { break };
            if i <= pos {
                next.end_ns = end;
            }
            let fixed = exclusive(next.start_ns, next.end_ns, end).min(next.ns);
            let back = (next.ns - fixed) as i64;
            if back > 0 {
                next.ns = fixed;
                out.push(Change { vgpu: next.vgpu, device_ns: -back, tokens: if next.limited { back } else { 0 } });
            }
        }
        let tokens = if limited { r.charged.saturating_sub(ns.min(i64::MAX as u64) as i64) } else { 0 };
        out.push(Change { vgpu, device_ns: ns.min(i64::MAX as u64) as i64, tokens });
        ns
    }

    /// Forgets kernels that ended more than [`HORIZON_NS`] before `now_ns`, and the oldest beyond
    /// [`MAX_KEPT`].
    pub fn forget(&mut self, now_ns: u64) {
        let limit = now_ns.saturating_sub(HORIZON_NS);
        while let Some(c) = self.kept.front().filter(|c| c.end_ns < limit || self.kept.len() > MAX_KEPT) {
            self.floor_ns = self.floor_ns.max(c.end_ns);
            self.kept.pop_front();
        }
    }
}

/// Adds up `changes` per vGPU (for one atomic update of each), in `totals` indexed by slot.
pub fn sum(changes: &[Change], totals: &mut [(i64, i64)]) {
    for c in changes {
        if let Some(t) = totals.get_mut(c.vgpu as usize) {
            t.0 = t.0.saturating_add(c.device_ns);
            t.1 = t.1.saturating_add(c.tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn rec(vgpu: u32, start_us: u64, end_us: u64, charged_us: i64) -> (u32, Kernel) {
        (vgpu, Kernel { start_ns: start_us * US, end_ns: end_us * US, charged: charged_us * US as i64, bound_ns: 0 })
    }

    /// Charges `records` in the given order and returns each vGPU's (device_ns, tokens) totals.
    fn charge_all(l: &mut Ledger, records: &[(u32, Kernel)]) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        for (v, r) in records {
            l.charge(*v, r, &mut out);
        }
        let mut totals = vec![(0, 0); 4];
        sum(&out, &mut totals);
        totals
    }

    /// Two vGPUs' kernels interleaved on a serial engine, each 500 µs of engine time; every start event
    /// is when the kernel was queued, long before it ran.
    fn interleaved() -> Vec<(u32, Kernel)> {
        let mut v = Vec::new();
        for k in 0..10u64 {
            let end = 1_000 + 500 * (k + 1);
            // Queued 1.5 ms before it ended: 1 ms of that waiting behind the other vGPU.
            v.push(rec((k % 2) as u32, end - 1_500, end, 400));
        }
        v
    }

    #[test]
    fn interleaved_kernels_are_each_charged_their_own_time() {
        let mut l = Ledger::new(0);
        let totals = charge_all(&mut l, &interleaved());
        // The first kernel finds the device idle since its start event: its whole span (1.5 ms). Every
        // later one exactly its 500 µs.
        assert_eq!(totals[0].0, (1_500 + 4 * 500) as i64 * US as i64);
        assert_eq!(totals[1].0, 5 * 500 * US as i64);
        // Tokens: the 400 µs estimates given back, the device time taken.
        assert_eq!(totals[1].1, 5 * (400 - 500) * US as i64);
        assert_eq!(l.charged_end_ns(), 6_000 * US);
    }

    #[test]
    fn idle_gaps_are_charged_to_nobody() {
        let mut l = Ledger::new(0);
        // A: 0-100; idle 100-300; B queued at 250, runs 300-400; A queued at 350, waits, runs 400-450.
        let totals = charge_all(&mut l, &[rec(0, 0, 100, 1), rec(1, 300, 400, 1), rec(0, 350, 450, 1)]);
        assert_eq!((totals[0].0, totals[1].0), (150 * US as i64, 100 * US as i64));
    }

    #[test]
    fn out_of_order_arrival_within_the_horizon_is_charged_exactly() {
        let in_order = charge_all(&mut Ledger::new(0), &interleaved());
        let mut shuffled = interleaved();
        // Late publishers: reverse pairs, and one record arriving after three that ended later.
        shuffled.swap(2, 3);
        shuffled.swap(6, 7);
        let late = shuffled.remove(4);
        shuffled.insert(7, late);
        let mut l = Ledger::new(0);
        assert_eq!(charge_all(&mut l, &shuffled), in_order);
        // Entirely reversed too.
        let reversed: Vec<(u32, Kernel)> = interleaved().into_iter().rev().collect();
        assert_eq!(charge_all(&mut Ledger::new(0), &reversed), in_order);
    }

    #[test]
    fn a_bounded_record_is_charged_its_bound_at_most_in_any_arrival_order() {
        // vGPU 0's thread was held up: its events span 0-2000 µs, its kernel ran 0-300 (bound 300). vGPU 1's
        // kernel queued at 100 ran 300-800; the engine idled until vGPU 1's next kernel, 1900-2600.
        let mut bounded = rec(0, 0, 2_000, 300);
        bounded.1.bound_ns = 300_000;
        let records = [rec(1, 100, 800, 500), bounded, rec(1, 1_900, 2_600, 500)];
        let in_order = charge_all(&mut Ledger::new(0), &records);
        // Unbounded, vGPU 0 would be charged the idle engine (800-2000).
        assert_eq!(in_order[0].0, 300 * US as i64);
        let mut unbounded = records;
        unbounded[1].1.bound_ns = 0;
        assert_eq!(charge_all(&mut Ledger::new(0), &unbounded)[0].0, 1_200 * US as i64);
        // What vGPU 0's kernel displaced goes to the kernel ending next (700 for 500), and the one
        // straddling its late end loses what preceded that end (600 for 700): one kernel's time at most.
        assert_eq!(in_order[1].0, (700 + 600) as i64 * US as i64);
        let mut reversed = records;
        reversed.reverse();
        assert_eq!(charge_all(&mut Ledger::new(0), &reversed), in_order);
    }

    #[test]
    fn a_high_vgpus_kernels_move_no_tokens() {
        let mut l = Ledger::new(0);
        let totals = charge_all(&mut l, &[rec(0, 0, 100, 0), rec(1, 0, 300, 50)]);
        assert_eq!(totals[0], (100 * US as i64, 0));
        assert_eq!(totals[1], (200 * US as i64, -150 * US as i64));
    }

    #[test]
    fn a_restarted_daemon_continues_from_the_charged_end_and_forgets_old_kernels() {
        let mut l = Ledger::new(1_000 * US);
        let totals = charge_all(&mut l, &[rec(0, 500, 1_200, 100)]);
        assert_eq!(totals[0].0, 200 * US as i64, "what the previous daemon charged is not charged again");
        l.forget(1_200 * US + HORIZON_NS + 1);
        assert!(l.kept.is_empty());
        assert_eq!(l.charged_end_ns(), 1_200 * US);
        // Beyond the horizon a late kernel is charged its own span; a current one as usual.
        charge_all(&mut l, &[rec(1, 1_300, 1_400, 1)]);
        let totals = charge_all(&mut l, &[rec(2, 900, 1_100, 1)]);
        assert_eq!((totals[2].0, l.stale), (200 * US as i64, 1));
    }

    /// A record of vGPU `vgpu` with times in ns, to place ends a fraction of a µs apart, and its launch's
    /// estimate (the tokens it took; 0: none).
    fn rec_ns(vgpu: u32, start_ns: u64, end_ns: u64, estimate_ns: i64) -> (u32, Kernel) {
        (vgpu, Kernel { start_ns, end_ns, charged: estimate_ns, bound_ns: 0 })
    }

    /// Every arrival order of `records`.
    fn orders(records: &[(u32, Kernel)]) -> Vec<Vec<(u32, Kernel)>> {
        if records.len() <= 1 {
            return vec![records.to_vec()];
        }
        let mut all = Vec::new();
        for i in 0..records.len() {
            let mut rest = records.to_vec();
            let head = rest.remove(i);
            for mut tail in orders(&rest) {
                tail.insert(0, head);
                all.push(tail);
            }
        }
        all
    }

    /// Device time charged to vGPUs 0 and 1 for `records` in every arrival order in which each vGPU's own
    /// arrive in the order they ended (each process publishes its own in order), checked by `check`.
    fn in_every_order(records: &[(u32, Kernel)], check: impl Fn(i64, i64) -> bool) {
        for order in orders(records) {
            let own_order = |v: u32| order.iter().filter(|(g, _)| *g == v).is_sorted_by_key(|(_, r)| r.end_ns);
            if !own_order(0) || !own_order(1) {
                continue;
            }
            let totals = charge_all(&mut Ledger::new(0), &order);
            assert!(check(totals[0].0, totals[1].0), "arrival order {order:?}: charged {totals:?}");
        }
    }

    #[test]
    fn an_empty_kernel_mapped_just_before_the_kernel_it_waited_for_is_charged_nothing() {
        // vGPU 0's 500 µs kernel ran 0-500 µs. vGPU 1's empty kernel (estimated 1 µs) became ready at 100 µs,
        // waited, and ran in no time when vGPU 0's ended; its process's clock placed that end 1.6 µs early.
        // Before, the order of the clocks charged vGPU 1 398.4 µs and vGPU 0 1.6 µs.
        let busy = rec_ns(0, 0, 500 * US, 500 * US as i64);
        let empty = rec_ns(1, 100 * US, 500 * US - 1_600, 1_000);
        in_every_order(&[busy, empty], |a, b| (a, b) == (500 * US as i64, 0));
        // With a kernel of vGPU 1 after both (ready at 400 µs, ran 500-700 µs): charged its 200 µs.
        let after = rec_ns(1, 400 * US, 700 * US, 1_000);
        in_every_order(&[busy, empty, after], |a, b| (a, b) == (500 * US as i64, 200 * US as i64));
    }

    #[test]
    fn empty_kernels_queued_behind_each_other_follow_the_busy_kernels_they_waited_for() {
        // vGPU 0 keeps its stream full of 500 µs kernels. vGPU 1 launches empty kernels on a stream of its
        // own: each runs when one of vGPU 0's ends, and the next becomes ready then, at the same instant as
        // vGPU 0's next. vGPU 1's clock is off by `off` against vGPU 0's, either way round.
        for off in [-1_600i64, 1_600] {
            let at = |ns: u64| ns.checked_add_signed(off).unwrap();
            let records = [
                rec_ns(0, 0, 500 * US, 500 * US as i64),
                rec_ns(0, 500 * US, 1_000 * US, 500 * US as i64),
                rec_ns(0, 1_000 * US, 1_500 * US, 500 * US as i64),
                rec_ns(1, 100 * US, at(500 * US), 1_000),
                rec_ns(1, at(500 * US), at(1_000 * US), 1_000),
                rec_ns(1, at(1_000 * US), at(1_500 * US), 1_000),
            ];
            // Off by the clocks' error at most per kernel, never by one of vGPU 0's kernels.
            in_every_order(&records, |a, b| a >= (1_500 * US - 3 * 1_600) as i64 && b <= 3 * 1_600);
        }
    }

    #[test]
    fn ends_within_the_error_keep_the_clocks_order_unless_the_estimates_say_otherwise() {
        // Short kernels of two vGPUs back to back, 5 and 6 µs, ends a few µs apart: as the clocks say.
        let records = [
            rec_ns(0, 0, 5 * US, 5_000),
            rec_ns(1, US, 11 * US, 6_000),
            rec_ns(0, 2 * US, 16 * US, 5_000),
            rec_ns(1, 12 * US, 22 * US, 6_000),
        ];
        in_every_order(&records, |a, b| (a, b) == (10 * US as i64, 12 * US as i64));
        // Without estimates (vGPUs without tokens): as the clocks say, even for an empty kernel.
        let busy = rec_ns(0, 0, 500 * US, 0);
        let empty = rec_ns(1, 100 * US, 500 * US - 1_600, 0);
        in_every_order(&[busy, empty], |a, b| (a, b) == (1_600, 398_400));
        // Ends further apart than the error: as the clocks say, whatever the estimates.
        let far = rec_ns(1, 100 * US, 500 * US - 2 * MAPPING_ERROR_NS, 1_000);
        in_every_order(&[rec_ns(0, 0, 500 * US, 500 * US as i64), far], |a, _| a == 2 * MAPPING_ERROR_NS as i64);
    }
}
