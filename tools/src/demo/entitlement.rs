//! What each vGPU of the demo was entitled to, and whether it got it.
//!
//! The policy is the daemon's own: at every moment the device is split by [`inspect::plan`], the function
//! the daemon's device loop grants tokens with, given which vGPUs have demand at that moment. So a vGPU without
//! demand is entitled to nothing; each one with demand to its share; the rest (idle vGPUs' shares, the
//! share nobody holds) goes to the uncapped ones with demand in proportion to their shares, the highest
//! priority first; a capped vGPU never to more than its share, and while a capped vGPU is idle nobody
//! gets its share; while a `high` vGPU has work (or the device's hold after it lasts) only the `high`
//! vGPUs take part. The demo samples every vGPU's demand in the region as the daemon reads it (launches
//! waiting, work queued, a launch within the last 2 ms) every [`SAMPLE`], splits each interval by the plan
//! with buckets of unlimited room, and adds up: over the run, the policy's share of a vGPU is the sum
//! divided by the time sampled.
//!
//! Having demand is not asking for the whole of what the policy allows: a program that launches one
//! kernel at a time leaves gaps (its own CPU time between kernels). What a vGPU asked is what it got plus
//! what the scheduler held back: the time its launches waited for tokens (for a load that launches one
//! kernel at a time, a held launch delays its work by as long). So a vGPU is [`entitled`] to the smaller
//! of the policy's share and what it asked; one that was never held got all it asked for.
//!
//! Met or missed: the achieved share (engine time, from the simulated GPU) against the entitlement, in
//! percentage points of the device, within [`TOLERANCE`]: sampling misses demand shorter than its period,
//! and the engine runs kernels of 1 ms whole, so a few points either way are measure, not policy. A
//! capped vGPU also misses when it got more than its share.

use std::time::{Duration, Instant};
use tessera_scheduler::inspect::{self, Vgpu};

/// How often the demand is sampled.
pub const SAMPLE: Duration = Duration::from_millis(5);
/// How far below its entitlement (or, capped, above its share) a vGPU may be and still have met it, in
/// percentage points.
pub const TOLERANCE: f64 = 5.0;

/// The vGPUs of one device at one moment, as the daemon's plan sees them.
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was read.
    pub at: Instant,
    /// Each vGPU (same order as the demo's).
    pub vgpus: Vec<Vgpu>,
    /// The device's hold by a `high` vGPU.
    pub hold: bool,
}

/// The part of the device each vGPU of `sample` is entitled to (0 to 1), by the daemon's plan with
/// buckets of unlimited room.
pub fn split(sample: &Sample) -> Vec<f64> {
    const DT: u64 = 1_000_000_000;
    let ideal: Vec<Vgpu> = sample.vgpus.iter().map(|v| Vgpu { room: u64::MAX, ..*v }).collect();
    inspect::plan(&ideal, DT, sample.hold).into_iter().map(|ns| ns as f64 / DT as f64).collect()
}

/// Running totals of the samples: time sampled, and per vGPU the time it had demand and the device
/// time it was entitled to, in ns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Time the samples cover.
    pub sampled_ns: f64,
    /// Per vGPU, time with demand.
    pub demand_ns: Vec<f64>,
    /// Per vGPU, device time it was entitled to.
    pub entitled_ns: Vec<f64>,
}

/// Adds up [`Sample`]s: each counts for the time since the previous one.
#[derive(Debug, Default)]
pub struct Ledger {
    totals: Totals,
    last: Option<Instant>,
}

impl Ledger {
    /// Counts `sample` for the time since the previous one (the first only starts the clock).
    pub fn record(&mut self, sample: &Sample) {
        let n = sample.vgpus.len();
        let t = &mut self.totals;
        t.demand_ns.resize(n, 0.0);
        t.entitled_ns.resize(n, 0.0);
        if let Some(last) = self.last.replace(sample.at) {
            let ns = sample.at.saturating_duration_since(last).as_nanos() as f64;
            t.sampled_ns += ns;
            for (i, part) in split(sample).into_iter().enumerate() {
                t.entitled_ns[i] += part * ns;
                t.demand_ns[i] += if sample.vgpus[i].demand { ns } else { 0.0 };
            }
        }
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        self.totals.clone()
    }
}

/// Per vGPU, percent of the time between `start` and `end` it had demand, and the share it was entitled
/// to.
pub fn between(start: &Totals, end: &Totals) -> (Vec<f64>, Vec<f64>) {
    let ns = end.sampled_ns - start.sampled_ns;
    let pct = |now: &[f64], then: &[f64]| -> Vec<f64> {
        (0..now.len())
            .map(|i| if ns > 0.0 { (now[i] - then.get(i).copied().unwrap_or(0.0)) / ns * 100.0 } else { 0.0 })
            .collect()
    };
    (pct(&end.demand_ns, &start.demand_ns), pct(&end.entitled_ns, &start.entitled_ns))
}

/// What a vGPU is entitled to, in percent: the `policy` share given the demand of all, but no more than it
/// asked: what it `achieved` plus the time it was `held` waiting for tokens (percent of the run).
pub fn entitled(policy: f64, achieved: f64, held: f64) -> f64 {
    policy.min(achieved + held)
}

/// Whether a vGPU got what it was entitled to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Within [`TOLERANCE`].
    Met,
    /// This many points below its entitlement.
    Missed(f64),
    /// Capped, this many points above its share.
    OverCap(f64),
}

impl Verdict {
    /// The verdict on `achieved` against `entitled` (percent), for a vGPU capped at `cap` percent if any.
    pub fn of(achieved: f64, entitled: f64, cap: Option<f64>) -> Verdict {
        match cap {
            Some(share) if achieved > share + TOLERANCE => Verdict::OverCap(achieved - share),
            _ if achieved < entitled - TOLERANCE => Verdict::Missed(entitled - achieved),
            _ => Verdict::Met,
        }
    }

    /// `met`, `missed by 7.5 pts`, `over cap by 6.0 pts`.
    pub fn text(self) -> String {
        match self {
            Verdict::Met => "met".into(),
            Verdict::Missed(p) => format!("missed by {p:.1} pts"),
            Verdict::OverCap(p) => format!("over cap by {p:.1} pts"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_region::priority;

    fn vgpu(share: u32, prio: u32, cap: bool, demand: bool) -> Vgpu {
        Vgpu { share, priority: prio, cap, suspended: false, demand, busy: demand, room: 0, waiting: false, tokens: 0 }
    }

    /// The demo's three vGPUs: inference (50% high), training (30%), notebook (20% cap).
    fn demo(inference_busy: bool, hold: bool) -> Sample {
        Sample {
            at: Instant::now(),
            vgpus: vec![
                vgpu(50, priority::HIGH, false, inference_busy),
                vgpu(30, priority::NORMAL, false, true),
                vgpu(20, priority::NORMAL, true, true),
            ],
            hold,
        }
    }

    #[test]
    fn the_split_is_the_daemons_plan_given_demand() {
        // A high vGPU with work takes the device; the others wait.
        assert_eq!(split(&demo(true, true)), [1.0, 0.0, 0.0]);
        // Idle, it is entitled to nothing: its share goes to the uncapped training; notebook keeps its cap.
        assert_eq!(split(&demo(false, false)), [0.0, 0.8, 0.2]);
        // Still held just after its burst: nobody.
        assert_eq!(split(&demo(false, true)), [0.0, 0.0, 0.0]);
        // An idle capped vGPU keeps the others to their shares.
        let s = Sample {
            vgpus: vec![vgpu(50, priority::NORMAL, false, true), vgpu(20, priority::NORMAL, true, false)],
            ..demo(false, false)
        };
        assert_eq!(split(&s), [0.5, 0.0]);
    }

    #[test]
    fn the_ledger_weighs_each_sample_by_its_interval() {
        let t0 = Instant::now();
        let mut ledger = Ledger::default();
        let at = |ms: u64, busy: bool| Sample { at: t0 + Duration::from_millis(ms), ..demo(busy, busy) };
        let start = ledger.totals();
        // 200 ms of inference's burst, then 300 ms of its pause: 40% / 48% / 12%.
        ledger.record(&at(0, true));
        ledger.record(&at(200, true));
        ledger.record(&at(500, false));
        let (demand, entitled) = between(&start, &ledger.totals());
        assert_eq!(demand.iter().map(|d| d.round()).collect::<Vec<_>>(), [40.0, 100.0, 100.0]);
        assert_eq!(entitled.iter().map(|e| e.round()).collect::<Vec<_>>(), [40.0, 48.0, 12.0]);
    }

    #[test]
    fn a_vgpu_is_entitled_to_no_more_than_it_asked() {
        // Never held: it got all it asked, though the policy allowed more.
        assert_eq!(entitled(40.0, 30.0, 0.0), 30.0);
        // Held a little: what it got plus that.
        assert_eq!(entitled(40.0, 30.0, 2.5), 32.5);
        // Held much (always busy): the policy's share.
        assert_eq!(entitled(48.0, 45.0, 30.0), 48.0);
    }

    #[test]
    fn verdicts_allow_the_tolerance_and_no_more() {
        assert_eq!(Verdict::of(40.0, 44.9, None), Verdict::Met);
        assert_eq!(Verdict::of(60.0, 44.9, None), Verdict::Met, "more than entitled is no miss");
        assert_eq!(Verdict::of(30.0, 40.0, None), Verdict::Missed(10.0));
        assert_eq!(Verdict::of(24.0, 20.0, Some(20.0)), Verdict::Met);
        assert_eq!(Verdict::of(26.0, 20.0, Some(20.0)), Verdict::OverCap(6.0));
        assert_eq!(Verdict::Missed(7.25).text(), "missed by 7.2 pts");
        assert_eq!(Verdict::OverCap(6.0).text(), "over cap by 6.0 pts");
        assert_eq!(Verdict::Met.text(), "met");
    }
}
