//! Memory counts a tenant lowered: a process's slot says how many bytes it holds on its vGPU's device, and
//! the vGPU's usage (which every allocation through the shim is checked against) is the sum of the slots
//! below `procs_hwm`; both are in the tenant's file, so zeroing a count or lowering the mark would let its
//! processes allocate past the quota. The daemon raises the mark back over every attached slot, and
//! compares each hard-mode process's count with what the driver says it holds (NVML): a shortfall beyond
//! [`TOLERANCE`] seen in two rounds in a row (an honest process's count leads the driver's: the shim
//! reserves before it allocates) is counted again in the slot, and what the daemon added is taken back as
//! the driver's figure falls again (memory freed, or counted in ways the shim does not, such as a driver's
//! rounding). Soft-mode processes hold pooled chunks the quota does not count, so they are left out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_region::Region;
use tessera_region::pid_ns::ProcView;
use tessera_region::reclaim::sub;

/// Shortfall below which a count is believed.
pub const TOLERANCE: u64 = 64 << 20;

/// Rounds in a row in which the driver lists no memory of an unverified process (see
/// [`Recount::uncount_phantoms`]) before its count is dropped: longer than any context creation takes, so
/// that the footprint a joining process counts before its context exists is not taken back.
pub const PHANTOM_ROUNDS: u32 = 3;

/// A process slot, told apart from a later process in it.
type Key = (usize, usize, u32);

/// What the daemon counted again for a process: the bytes the driver says it holds, and its count before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    /// The vGPU's slot.
    pub vgpu: usize,
    /// The process.
    pub pid: u32,
    /// Bytes the driver says it holds.
    pub held: u64,
    /// Bytes its slot counted.
    pub counted: u64,
}

/// The recount of one device, kept from round to round.
#[derive(Default)]
pub struct Recount {
    /// Shortfalls seen last round, not counted again yet.
    short: HashMap<Key, u64>,
    /// Bytes the daemon added to each process's count.
    added: HashMap<Key, u64>,
    /// Unverified processes counting bytes the driver does not list: rounds seen so in a row.
    phantom: HashMap<Key, u32>,
}

/// Bytes an unverified process slot counted on a device where the driver lists no memory of its process,
/// no longer counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uncounted {
    /// The vGPU's slot.
    pub vgpu: usize,
    /// The process, as its slot names it.
    pub pid: u32,
    /// Bytes its slot counted.
    pub counted: u64,
}

/// Adds `n` to `a`, stopping at the top.
fn add(a: &AtomicU64, n: u64) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some(x.saturating_add(n)));
}

impl Recount {
    /// One round over device `dev`'s managed vGPUs `members`, given the bytes each process holds there
    /// (`held`: pid as `view` sees it, bytes). Returns the counts it raised.
    pub fn round(
        &mut self,
        region: &Region,
        dev: usize,
        members: &[usize],
        held: &[(u32, u64)],
        view: &ProcView,
    ) -> Vec<Repair> {
        let mut short = HashMap::new();
        let mut added = HashMap::new();
        let mut repairs = Vec::new();
        for &index in members {
            let v = &region.vgpus[index];
            if let Some((last, _, _)) = v.attached().last() {
                v.live.procs_hwm.fetch_max(last as u32 + 1, Ordering::SeqCst);
            }
            for (i, pid, p) in v.attached().filter(|(_, _, p)| !p.is_soft()) {
                let key = (index, i, pid);
                let Some(counted) = p.used.get(dev) else { continue };
                let mut mine = self.added.get(&key).copied().unwrap_or(0);
                // The driver names processes by their pids here: one of a namespace not seen is left as is.
                let Some(here) = view.here(p.ns(), pid, p.start_time.load(Ordering::Acquire)) else {
                    if mine > 0 {
                        added.insert(key, mine);
                    }
                    continue;
                };
                let driver = held.iter().find(|&&(p, _)| p == here).map_or(0, |&(_, b)| b);
                let count = counted.load(Ordering::Acquire);
                if count > driver && mine > 0 {
                    // The driver's figure fell: what the daemon added goes back first.
                    let back = mine.min(count - driver);
                    sub(counted, back);
                    mine -= back;
                } else if driver.saturating_sub(count) > TOLERANCE {
                    let gap = driver - count;
                    match self.short.get(&key) {
                        Some(&before) => {
                            let more = before.min(gap);
                            add(counted, more);
                            mine += more;
                            repairs.push(Repair { vgpu: index, pid, held: driver, counted: count });
                        }
                        None => drop(short.insert(key, gap)),
                    }
                }
                if mine > 0 {
                    added.insert(key, mine);
                }
            }
        }
        self.short = short;
        self.added = added;
        repairs
    }

    /// Drops the counts of device `dev` that unverified process slots (`doubted`: vGPU slot, process slot,
    /// owner word; see [`crate::tenants::integrity`]) keep while the driver lists no memory of their process there
    /// (`held`: pid as `view` sees it, bytes) for [`PHANTOM_ROUNDS`] rounds in a row: a slot naming a
    /// process that holds nothing on the device (pid 1, planted by a tenant) no longer counts against its
    /// vGPU's quota for as long as that process lives. A verified process is believed (the recount above
    /// handles its shortfalls); one whose pid the daemon cannot see is left as it is.
    pub fn uncount_phantoms(
        &mut self,
        region: &Region,
        dev: usize,
        doubted: &[(usize, usize, u64)],
        held: &[(u32, u64)],
        view: &ProcView,
    ) -> Vec<Uncounted> {
        let mut phantom = HashMap::new();
        let mut dropped = Vec::new();
        for &(index, i, word) in doubted {
            let Some(p) = region.vgpus.get(index).and_then(|v| v.live.procs.get(i)) else { continue };
            let (Some(pid), Some(counted)) = (p.attached_pid(), p.used.get(dev)) else { continue };
            if p.owner.load(Ordering::Acquire) != word {
                continue;
            }
            let count = counted.load(Ordering::Acquire);
            let Some(here) = view.here(p.ns(), pid, p.start_time.load(Ordering::Acquire)) else { continue };
            if count == 0 || held.iter().any(|&(q, b)| q == here && b > 0) {
                continue;
            }
            let key = (index, i, pid);
            let rounds = self.phantom.get(&key).copied().unwrap_or(0) + 1;
            if rounds >= PHANTOM_ROUNDS {
                sub(counted, count);
                dropped.push(Uncounted { vgpu: index, pid, counted: count });
            } else {
                phantom.insert(key, rounds);
            }
        }
        self.phantom = phantom;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_region::flags;

    const MIB: u64 = 1 << 20;

    fn region() -> &'static Region {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Region>::new_zeroed().assume_init() })
    }

    #[test]
    fn a_zeroed_count_is_counted_again_after_two_rounds_and_given_back_as_memory_is_freed() {
        let r = region();
        let v = &r.vgpus[2];
        let (p, q) = (&v.live.procs[0], &v.live.procs[1]);
        p.set_owner(0, 100);
        q.set_owner(0, 101);
        let counted = |p: &tessera_region::ProcSlot| p.used[1].load(Ordering::Relaxed);
        // Both honest: 300 MiB held, counted 300 (and 301 counted for a reservation in progress).
        p.used[1].store(300 * MIB, Ordering::Relaxed);
        q.used[1].store(301 * MIB, Ordering::Relaxed);
        v.live.procs_hwm.store(2, Ordering::Relaxed);
        let mut rc = Recount::default();
        let held = [(100, 300 * MIB), (101, 300 * MIB), (7, 900 * MIB)];
        for _ in 0..3 {
            assert!(rc.round(r, 1, &[2], &held, &ProcView::new()).is_empty());
        }
        // The tenant zeroes its counts: the first round notes it, the second counts it again.
        p.used[1].store(0, Ordering::Relaxed);
        v.live.procs_hwm.store(0, Ordering::Relaxed);
        assert!(rc.round(r, 1, &[2], &held, &ProcView::new()).is_empty(), "one round may be an allocation in progress");
        let repairs = rc.round(r, 1, &[2], &held, &ProcView::new());
        assert_eq!(repairs, [Repair { vgpu: 2, pid: 100, held: 300 * MIB, counted: 0 }]);
        assert_eq!((counted(p), v.used(1)), (300 * MIB, 601 * MIB), "the mark is raised over both slots again");
        assert!(rc.round(r, 1, &[2], &held, &ProcView::new()).is_empty(), "counted: nothing more to do");
        // It frees 200 MiB (its shim subtracts what it counted itself, nothing): the daemon's part goes back.
        let held = [(100, 100 * MIB), (101, 300 * MIB)];
        rc.round(r, 1, &[2], &held, &ProcView::new());
        assert_eq!((counted(p), v.used(1)), (100 * MIB, 401 * MIB));
        // Within the tolerance, or a soft-mode process: believed.
        p.used[1].store(100 * MIB - TOLERANCE, Ordering::Relaxed);
        q.flags.store(flags::SOFT, Ordering::Relaxed);
        q.used[1].store(0, Ordering::Relaxed);
        for _ in 0..3 {
            assert!(rc.round(r, 1, &[2], &held, &ProcView::new()).is_empty());
        }
        assert_eq!(counted(q), 0);
    }

    #[test]
    fn an_unverified_slot_counting_what_the_driver_does_not_list_stops_counting_after_three_rounds() {
        let r = region();
        let v = &r.vgpus[3];
        let (p, q) = (&v.live.procs[0], &v.live.procs[1]);
        p.set_owner(0, 1);
        q.set_owner(0, 100);
        p.used[0].store(512 * MIB, Ordering::Relaxed);
        q.used[0].store(300 * MIB, Ordering::Relaxed);
        v.live.procs_hwm.store(2, Ordering::Relaxed);
        let word = |p: &tessera_region::ProcSlot| p.owner.load(Ordering::Relaxed);
        // Both unverified; the driver lists pid 100 (its memory held), not pid 1.
        let doubted = [(3, 0, word(p)), (3, 1, word(q))];
        let held = [(100, 300 * MIB)];
        let mut rc = Recount::default();
        for _ in 1..PHANTOM_ROUNDS {
            assert!(rc.uncount_phantoms(r, 0, &doubted, &held, &ProcView::new()).is_empty());
        }
        let dropped = rc.uncount_phantoms(r, 0, &doubted, &held, &ProcView::new());
        assert_eq!(dropped, [Uncounted { vgpu: 3, pid: 1, counted: 512 * MIB }]);
        assert_eq!(v.used(0), 300 * MIB, "only what the driver lists is counted");
        // A round in which the process holds memory starts the count of rounds over; a slot since taken by
        // another process is not touched.
        p.used[0].store(MIB, Ordering::Relaxed);
        rc.uncount_phantoms(r, 0, &doubted, &held, &ProcView::new());
        rc.uncount_phantoms(r, 0, &doubted, &[(1, MIB)], &ProcView::new());
        rc.uncount_phantoms(r, 0, &doubted, &held, &ProcView::new());
        assert_eq!(v.used(0), 301 * MIB);
        p.set_owner(0, 2);
        for _ in 0..PHANTOM_ROUNDS {
            assert!(rc.uncount_phantoms(r, 0, &doubted, &held, &ProcView::new()).is_empty());
        }
    }
}
