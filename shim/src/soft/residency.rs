//! Whether the process's soft memory is on the device, and the holds that keep it there while a launch
//! or copy is being submitted.
//!
//! Taking a hold is two atomic operations (count in, check the state), no lock and no system call. To
//! move data the pager [`stop`](Residency::stop)s: it marks the memory as moving, which sends new callers
//! to the slow path, and waits for the holds already taken to be given back; after that, and a device
//! synchronization, nothing of the program touches the memory until the state is set again.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;
use tessera_region::futex;

/// Every live page is on the device.
pub const RESIDENT: u32 = 0;
/// The pager is moving data; callers wait.
pub const MOVING: u32 = 1;
/// Some pages are in host memory; the next launch or copy brings them back.
pub const SWAPPED: u32 = 2;

/// The residency state and the count of holds.
#[derive(Default)]
pub struct Residency {
    state: AtomicU32,
    holds: AtomicU32,
}

/// A launch or copy in submission: the memory stays where it is until this is dropped.
pub struct Hold<'a>(&'a Residency);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, SeqCst) == 1 && self.0.state.load(SeqCst) == MOVING {
            futex::wake_all(&self.0.holds);
        }
    }
}

impl Residency {
    /// A hold, if the memory is resident.
    pub fn try_hold(&self) -> Option<Hold<'_>> {
        self.holds.fetch_add(1, SeqCst);
        let hold = Hold(self);
        (self.state.load(SeqCst) == RESIDENT).then_some(hold)
    }

    /// The state.
    pub fn state(&self) -> u32 {
        self.state.load(SeqCst)
    }

    /// Sets the state (after moving data).
    pub fn set(&self, state: u32) {
        self.state.store(state, SeqCst);
    }

    /// Marks the memory as moving and waits until no hold is left.
    pub fn stop(&self) {
        self.state.store(MOVING, SeqCst);
        loop {
            let holds = self.holds.load(SeqCst);
            if holds == 0 {
                return;
            }
            futex::wait(&self.holds, holds, Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn holds_are_refused_while_not_resident_and_stop_waits_for_them() {
        let r = Arc::new(Residency::default());
        let h = r.try_hold().unwrap();
        let r2 = r.clone();
        let stopper = std::thread::spawn(move || {
            r2.stop();
            std::time::Instant::now()
        });
        std::thread::sleep(Duration::from_millis(30));
        assert!(!stopper.is_finished(), "stop waits for the hold");
        assert!(r.try_hold().is_none(), "no new hold while moving");
        let released = std::time::Instant::now();
        drop(h);
        assert!(stopper.join().unwrap() >= released);
        r.set(SWAPPED);
        assert!(r.try_hold().is_none());
        r.set(RESIDENT);
        assert!(r.try_hold().is_some());
    }
}
