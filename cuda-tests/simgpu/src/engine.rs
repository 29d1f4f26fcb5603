//! The execution engine of one simulated device: one kernel at a time, first come first served across
//! every process of the machine (a time-sliced GPU without MPS).
//!
//! A ticket lock in the state file orders kernels. Waiters sleep on a futex on the `now_serving` word, so a
//! waiting stream burns no core and wakes as soon as the engine is handed on.
//!
//! Simulated time runs on the engine's own clock, which follows the shared monotonic clock but never
//! inherits the host's wake-up lateness: a kernel starts (in simulated time) when it was ready or when the
//! previous kernel ended, whichever is later, and a `spin` sleeps to an absolute deadline from there. A
//! late wake-up shortens the next sleep instead of adding up, so kernels take exactly their simulated
//! duration and the engine is never idle between back-to-back kernels.

use crate::futex;
use crate::kernels::{Call, sleep_until};
use crate::process;
use crate::state::{DeviceState, ENGINE_SLOTS, SharedState, now_ns};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often a waiter checks that the queue position being served still has a live owner.
const LIVENESS_CHECK: Duration = Duration::from_millis(20);
/// How often the waiter next in line checks it. A real driver tears a dead process's context down, and with
/// it the kernel it had on the engine, as soon as the process is gone; the next in line checking often
/// keeps the engine's idle time after a kill near that (it then takes the turn itself), while the waiters
/// further back stay asleep.
const NEXT_IN_LINE_CHECK: Duration = Duration::from_millis(1);
/// A queue position whose owner never announced itself is skipped after this long.
const UNCLAIMED_TIMEOUT_NS: u64 = 1_000_000_000;

/// Simulated start and end of a kernel on the engine's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// When the kernel started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// Runs `call` on device `ordinal`'s engine once every earlier kernel on the machine has finished.
/// `ready_ns` is when the kernel became ready in its stream's simulated time.
///
/// # Safety
/// As [`Call::run`]: every range the call touches must be mapped for the duration.
pub unsafe fn run(state: &SharedState, ordinal: usize, ready_ns: u64, call: &Call) -> Span {
    let dev = state.device(ordinal);
    let ticket = dev.next_ticket.fetch_add(1, Ordering::AcqRel);
    let pid = process::own_pid();
    dev.tickets[ticket as usize % ENGINE_SLOTS].store((ticket as u64) << 32 | pid as u64, Ordering::Release);
    wait_for_turn(dev, ticket);
    let start_ns = dev.clock_ns.load(Ordering::Acquire).max(ready_ns).min(now_ns());
    let end_ns = match *call {
        Call::Sleep(ns) => {
            sleep_until(start_ns + ns);
            start_ns + ns
        }
        Call::StampedSleep { ns, out } => {
            sleep_until(start_ns + ns);
            // SAFETY: forwarded from this function's contract: out..out+16 is mapped and writable
            // (`Call::ranges`); device pointers may be unaligned.
            unsafe {
                (out as *mut u64).write_unaligned(start_ns);
                (out as *mut u64).add(1).write_unaligned(start_ns + ns);
            }
            start_ns + ns
        }
        Call::Uncomputed { ns, .. } => {
            // SAFETY: forwarded from this function's contract (the poisoned ranges).
            unsafe { call.run() };
            dev.uncomputed.fetch_add(1, Ordering::Relaxed);
            sleep_until(start_ns + ns);
            start_ns + ns
        }
        _ => {
            let t = now_ns();
            // SAFETY: forwarded from this function's contract.
            unsafe { call.run() };
            start_ns + (now_ns() - t)
        }
    };
    dev.clock_ns.fetch_max(end_ns, Ordering::AcqRel);
    // A waiter may have skipped us if it judged us dead; only hand on a turn we still hold.
    if dev.now_serving.compare_exchange(ticket, ticket.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        futex::wake_all(&dev.now_serving);
    }
    state.record_busy(ordinal, end_ns - start_ns, end_ns);
    let span = Span { start_ns, end_ns };
    let uncomputed = match call {
        Call::Uncomputed { name, .. } => Some(&**name),
        _ => None,
    };
    crate::trace::record(ordinal, ready_ns, span, uncomputed);
    span
}

fn wait_for_turn(dev: &DeviceState, ticket: u32) {
    let mut stuck_since: Option<(u32, u64)> = None;
    loop {
        let serving = dev.now_serving.load(Ordering::Acquire);
        if serving == ticket {
            return;
        }
        let next_in_line = serving.wrapping_add(1) == ticket;
        futex::wait(&dev.now_serving, serving, if next_in_line { NEXT_IN_LINE_CHECK } else { LIVENESS_CHECK });
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
