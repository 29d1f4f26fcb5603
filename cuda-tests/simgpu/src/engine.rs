//! The execution engine of one simulated device: one kernel at a time, first come first served across
//! every process of the machine (a time-sliced GPU without MPS).
//!
//! A ticket lock in the state file orders kernels. Waiters sleep on a futex on the `now_serving` word, so a
//! waiting stream burns no core and wakes as soon as the engine is handed on.

use crate::futex;
use crate::process;
use crate::state::{DeviceState, ENGINE_SLOTS, SharedState, now_ns};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often a waiter checks that the queue position ahead of it still has a live owner.
const LIVENESS_CHECK: Duration = Duration::from_millis(20);
/// A queue position whose owner never announced itself is skipped after this long.
const UNCLAIMED_TIMEOUT_NS: u64 = 1_000_000_000;

/// Engine time a kernel took, with its start and end on the shared monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// When the kernel got the engine.
    pub start_ns: u64,
    /// When it gave the engine back.
    pub end_ns: u64,
}

/// Runs `work` on device `ordinal`'s engine once every earlier kernel on the machine has finished.
pub fn run<R>(state: &SharedState, ordinal: usize, work: impl FnOnce() -> R) -> (R, Span) {
    let dev = state.device(ordinal);
    let ticket = dev.next_ticket.fetch_add(1, Ordering::AcqRel);
    let pid = process::own_pid();
    dev.tickets[ticket as usize % ENGINE_SLOTS].store((ticket as u64) << 32 | pid as u64, Ordering::Release);
    wait_for_turn(dev, ticket);
    let start_ns = now_ns();
    let result = work();
    let end_ns = now_ns();
    // A waiter may have skipped us if it judged us dead; only hand on a turn we still hold.
    if dev.now_serving.compare_exchange(ticket, ticket.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        futex::wake_all(&dev.now_serving);
    }
    state.record_busy(ordinal, end_ns - start_ns, end_ns);
    (result, Span { start_ns, end_ns })
}

fn wait_for_turn(dev: &DeviceState, ticket: u32) {
    let mut stuck_since: Option<(u32, u64)> = None;
    loop {
        let serving = dev.now_serving.load(Ordering::Acquire);
        if serving == ticket {
            return;
        }
        futex::wait(&dev.now_serving, serving, LIVENESS_CHECK);
        if dev.now_serving.load(Ordering::Acquire) != serving {
            stuck_since = None;
            continue;
        }
        // The position being served has not moved for a while: skip it if its owner is gone.
        let slot = dev.tickets[serving as usize % ENGINE_SLOTS].load(Ordering::Acquire);
        let owner_dead = if (slot >> 32) as u32 == serving {
            !process::is_running(slot as u32)
        } else {
            let now = now_ns();
            match stuck_since {
                Some((s, since)) if s == serving => now - since > UNCLAIMED_TIMEOUT_NS,
                _ => {
                    stuck_since = Some((serving, now));
                    false
                }
            }
        };
        if owner_dead
            && dev
                .now_serving
                .compare_exchange(serving, serving.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            futex::wake_all(&dev.now_serving);
        }
    }
}
