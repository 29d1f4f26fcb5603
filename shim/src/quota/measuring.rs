//! First contexts of a vGPU measured one at a time: while a device's context cost is unknown, the process
//! whose claiming tag is in the vGPU's `measuring` word creates and measures one (holding headroom reserved,
//! see [`crate::contexts`]) while the others wait for the cost it publishes. A measurer that died is found
//! by its tag and its turn taken over; one that stays silent longer than [`PATIENCE_NS`] is measured
//! alongside (the headroom each holds still keeps the quota).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tessera_region::futex;
use tessera_region::reclaim;
use tessera_region::{VgpuSlot, context_cost};

/// Longest a process waits for another to measure (creating a context takes well under a second; a
/// measurer stopped in a debugger should not hang every other process of its vGPU).
pub const PATIENCE_NS: u64 = 30_000_000_000;
/// How often a waiter checks that the measurer still lives (the measurer wakes waiters when done).
const CHECK: Duration = Duration::from_millis(50);

/// What a process does about its first context on a device.
pub enum FirstContext {
    /// Reserve this cost (the vGPU's measured one) before creating it.
    Known(u64),
    /// Measure it, holding the vGPU's turn until this is dropped.
    Measure(Turn),
}

/// A turn at measuring: the `measuring` word holds this process's tag until it is dropped (`None`: the turn
/// is not the vGPU's, e.g. a private quota, or one taken out of patience).
pub struct Turn {
    word: Option<(&'static AtomicU32, u32)>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some((word, tag)) = self.word {
            let _ = word.compare_exchange(tag, 0, Ordering::AcqRel, Ordering::Relaxed);
            futex::wake_all(word);
        }
    }
}

/// The cost of a context on device `dev` as the vGPU knows it.
pub fn known(vgpu: &VgpuSlot, dev: usize) -> Option<u64> {
    context_cost::decode(vgpu.live.context_cost[dev].load(Ordering::Acquire))
}

/// Records `cost` as the vGPU's context cost on device `dev` unless one is recorded already.
pub fn publish(vgpu: &VgpuSlot, dev: usize, cost: u64) {
    let _ = vgpu.live.context_cost[dev].compare_exchange(
        0,
        context_cost::encode(cost),
        Ordering::AcqRel,
        Ordering::Relaxed,
    );
}

/// Waits until the cost on device `dev` is known or this process may measure it (`shared`: the vGPU is
/// shared with other processes through the region; a private one is measured at once).
pub fn first_context(vgpu: &'static VgpuSlot, dev: usize, shared: bool) -> FirstContext {
    let word = &vgpu.live.measuring;
    let (Some(mine), true) = (reclaim::own_tag(), shared) else {
        return known(vgpu, dev).map_or(FirstContext::Measure(Turn { word: None }), FirstContext::Known);
    };
    let deadline = futex::monotonic_ns().saturating_add(PATIENCE_NS);
    loop {
        if let Some(c) = known(vgpu, dev) {
            return FirstContext::Known(c);
        }
        let seen = word.load(Ordering::Acquire);
        let ours = match seen {
            0 => word.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Relaxed).is_ok(),
            // Another thread of this process: contexts are made one at a time per process, so a leftover.
            w if w == mine => true,
            w if !reclaim::tag_alive(w) => reclaim::take_over(word, w, mine),
            _ if futex::monotonic_ns() >= deadline => {
                crate::log::warn(format_args!(
                    "the process measuring a context's cost on device {dev} for this vGPU has not finished in {} \
                     s; measuring alongside it",
                    PATIENCE_NS / 1_000_000_000
                ));
                return FirstContext::Measure(Turn { word: None });
            }
            w => {
                futex::wait(word, w, CHECK);
                false
            }
        };
        if ours {
            let turn = Turn { word: Some((word, mine)) };
            // The previous measurer may have published and left between the check and the CAS.
            return known(vgpu, dev).map_or(FirstContext::Measure(turn), FirstContext::Known);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::accounting::tests::zeroed;
    use super::*;

    #[test]
    fn one_measurer_at_a_time_and_the_cost_once_published_is_known() {
        let v: &'static VgpuSlot = zeroed();
        // Another process measures (a live child stands for it): this one waits for its figure.
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let tag = reclaim::claim_tag(other.id(), reclaim::start_time(other.id()).unwrap()).unwrap();
        v.live.measuring.store(tag, Ordering::Relaxed);
        let waiter = std::thread::spawn(move || match first_context(v, 2, true) {
            FirstContext::Known(c) => c,
            FirstContext::Measure(_) => panic!("measured while another process measures"),
        });
        std::thread::sleep(Duration::from_millis(120));
        assert!(!waiter.is_finished(), "waits while the measurer lives");
        publish(v, 2, 500);
        drop(Turn { word: Some((&v.live.measuring, tag)) });
        assert_eq!(waiter.join().unwrap(), 500, "the waiter woke to the published cost");
        other.kill().unwrap();
        other.wait().unwrap();
        publish(v, 2, 600);
        assert_eq!(known(v, 2), Some(500), "the first measurement stands");
        publish(v, 3, 0);
        assert_eq!(known(v, 3), Some(0), "a context measured as free is known");
        // Nobody measuring and nothing known: this process measures, holding the word until done.
        let FirstContext::Measure(turn) = first_context(v, 4, true) else { panic!("nothing is known") };
        assert_eq!(v.live.measuring.load(Ordering::Relaxed), reclaim::own_tag().unwrap());
        drop(turn);
        assert_eq!(v.live.measuring.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_dead_measurers_turn_is_taken_over() {
        let v: &'static VgpuSlot = zeroed();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let (pid, start) = (child.id(), reclaim::start_time(child.id()).unwrap_or(1));
        child.wait().unwrap();
        v.live.measuring.store(reclaim::claim_tag(pid, start).unwrap(), Ordering::Relaxed);
        let FirstContext::Measure(turn) = first_context(v, 0, true) else { panic!("nothing is known") };
        assert_eq!(v.live.measuring.load(Ordering::Relaxed), reclaim::own_tag().unwrap());
        drop(turn);
        assert_eq!(v.live.measuring.load(Ordering::Relaxed), 0);
    }
}
