//! The process-wide gate `cuCheckpointProcessLock` closes: while it is closed every driver entry point
//! blocks before doing anything, until `cuCheckpointProcessUnlock` opens it again.
//!
//! Each thread owns a word saying whether it is inside the driver. Entering stores 1 to the thread's own
//! word and then loads the gate word; closing stores the gate word and then loads every thread's word
//! (both sequentially consistent, so at least one side sees the other: a thread never slips in unseen).
//! The open path thus writes no cache line another thread writes, and reads one that only changes at a
//! lock or an unlock.

use crate::driver::Driver;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tessera_region::futex;

/// 1 while the gate is closed; the futex word blocked threads sleep on.
static CLOSED: AtomicU32 = AtomicU32::new(0);

/// Every thread's inside-the-driver word (threads that ended drop theirs).
static THREADS: Mutex<Vec<Weak<AtomicU32>>> = Mutex::new(Vec::new());

struct Slot {
    /// Nesting depth of driver calls on this thread (only the outermost one is gated).
    depth: Cell<u32>,
    /// 1 while this thread is inside an outermost driver call.
    inside: Arc<AtomicU32>,
}

thread_local! {
    static SLOT: Slot = {
        let inside = Arc::new(AtomicU32::new(0));
        THREADS.lock().push(Arc::downgrade(&inside));
        Slot { depth: Cell::new(0), inside }
    };
}

/// Marks the calling thread inside the driver for as long as it lives; created by every entry point.
pub(crate) struct Inside(());

impl Inside {
    /// Enters the driver, first waiting while the gate is closed.
    pub(crate) fn enter() -> Inside {
        // A thread being torn down has no slot any more; its last calls are not gated.
        let _ = SLOT.try_with(|s| {
            let depth = s.depth.get();
            s.depth.set(depth + 1);
            if depth > 0 {
                return;
            }
            loop {
                s.inside.store(1, Ordering::SeqCst);
                if CLOSED.load(Ordering::SeqCst) == 0 {
                    return;
                }
                s.inside.store(0, Ordering::SeqCst);
                while CLOSED.load(Ordering::Acquire) != 0 {
                    futex::wait(&CLOSED, 1, Duration::from_secs(1));
                }
            }
        });
        Inside(())
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = SLOT.try_with(|s| {
            let depth = s.depth.get().saturating_sub(1);
            s.depth.set(depth);
            if depth == 0 {
                s.inside.store(0, Ordering::Release);
            }
        });
    }
}

/// True when no thread is inside the driver and every stream of every context has finished its work.
fn quiet(d: &Driver) -> bool {
    let mut threads = THREADS.lock();
    threads.retain(|w| w.strong_count() > 0);
    if threads.iter().filter_map(Weak::upgrade).any(|w| w.load(Ordering::SeqCst) != 0) {
        return false;
    }
    drop(threads);
    d.contexts.all().iter().all(|(_, ctx)| ctx.all_streams().iter().all(|s| s.idle()))
}

/// Closes the gate and waits until the driver is quiet (no call inside, all submitted work done). With a
/// deadline that passes first, opens the gate again and returns false.
pub(crate) fn close(d: &Driver, deadline: Option<Instant>) -> bool {
    CLOSED.store(1, Ordering::SeqCst);
    loop {
        if quiet(d) {
            return true;
        }
        if deadline.is_some_and(|t| Instant::now() >= t) {
            open();
            return false;
        }
        // Leaving calls and draining streams wake nobody: a millisecond's poll is far below what a lock
        // costs anyway (the work it waits for).
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Opens the gate and wakes every thread blocked at it.
pub(crate) fn open() {
    CLOSED.store(0, Ordering::SeqCst);
    futex::wake_all(&CLOSED);
}
