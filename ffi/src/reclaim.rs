//! Giving back what dead processes held: liveness by pid and start time, the scan over process slots,
//! and the once-a-second gate that amortizes the scan over allocations. Shared by the shim (which scans
//! when it allocates) and the daemon (which scans on its own, so a vGPU nobody allocates in is cleaned too).

use crate::region::{MAX_DEVICES, ProcSlot, Region, VgpuSlot};
use std::sync::atomic::{AtomicU64, Ordering};

/// Minimum time between two amortized scans of one vGPU.
pub const INTERVAL_NS: u64 = 1_000_000_000;

/// A process slot's `pid` while it is being claimed, filled or reclaimed.
pub const CLAIMING: u32 = u32::MAX;

/// State letter and start time (fields 3 and 22 of `/proc/PID/stat`); `None` when there is no such process.
fn stat(pid: u32) -> Option<(u8, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses; the fields after it follow the last ')'.
    let mut fields = text[text.rfind(')')? + 1..].split_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The kernel's start time of `pid` (clock ticks after boot), which tells a live process from a later
/// one that reused its pid.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, start)| start)
}

/// True when `pid` still runs and is the process that registered with `start`. A zombie (exited or
/// killed, not yet reaped) counts as dead: it will never release anything itself.
pub fn is_alive(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((state, s)) if s == start && state != b'Z' && state != b'X')
}

/// Monotonic nanoseconds shared by every process of the machine (the coarse clock: a vDSO read, no
/// system call, which is all a once-a-second gate needs).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into our timespec; CLOCK_MONOTONIC_COARSE exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// True (once per [`INTERVAL_NS`], for exactly one caller of all processes) when `vgpu` is due for a scan.
pub fn due(vgpu: &VgpuSlot, now: u64) -> bool {
    let last = vgpu.live.last_reclaim_ns.load(Ordering::Relaxed);
    now.saturating_sub(last) >= INTERVAL_NS
        && vgpu.live.last_reclaim_ns.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// Subtracts `v`, stopping at zero instead of wrapping.
pub fn sub(a: &AtomicU64, v: u64) {
    let _ = a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| Some(x.saturating_sub(v)));
}

/// Frees a slot the caller owns (its `pid` is [`CLAIMING`]) of `vgpu`: its bytes go back (the vGPU's usage
/// is the sum of its slots), what its launches had in the vGPU's window leaves it, and its soft-mode
/// figures are zeroed, so that a killed process leaves nothing counted in its vGPU's totals.
pub fn clear(p: &ProcSlot, vgpu: &VgpuSlot) {
    for d in 0..MAX_DEVICES {
        p.used[d].store(0, Ordering::SeqCst);
    }
    let inflight = p.inflight_ns.swap(0, Ordering::AcqRel).max(0);
    let _ = vgpu
        .live
        .sched
        .inflight_ns
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| Some(w.saturating_sub(inflight).max(0)));
    p.soft.reset(0, 0);
    p.flags.store(0, Ordering::Relaxed);
    p.start_time.store(0, Ordering::Relaxed);
    p.pid.store(0, Ordering::Release);
}

/// Reclaims every dead process of `vgpu`, skipping process slot `skip` (the caller's). Returns how many
/// were found. Two scanners never subtract the same bytes twice: each dead slot is claimed by a CAS first.
pub fn reclaim_vgpu(vgpu: &VgpuSlot, skip: Option<usize>) -> usize {
    let mut found = 0;
    for (i, pid, p) in vgpu.attached() {
        if Some(i) == skip || is_alive(pid, p.start_time.load(Ordering::Relaxed)) {
            continue;
        }
        if p.pid.compare_exchange(pid, CLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            clear(p, vgpu);
            found += 1;
        }
    }
    found
}

/// Reclaims the dead processes of every vGPU of `region` (which must be mapped writable throughout).
pub fn reclaim_dead(region: &Region) -> usize {
    region.vgpus.iter().map(|v| reclaim_vgpu(v, None)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zeroed region structure, leaked (all-zero is a valid value of every region structure).
    fn zeroed<T>() -> &'static T {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<T>::new_zeroed().assume_init() })
    }

    #[test]
    fn own_process_is_alive_and_others_are_told_apart() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(is_alive(pid, start));
        assert!(!is_alive(pid, start + 1), "same pid, another start time: a reused pid");
        assert!(!is_alive(u32::MAX - 1, start));
    }

    #[test]
    fn gate_opens_once_per_interval() {
        let v: &VgpuSlot = zeroed();
        let now = now_ns().max(INTERVAL_NS);
        assert!(due(v, now));
        assert!(!due(v, now + 1));
        assert!(due(v, now + INTERVAL_NS));
    }

    #[test]
    fn dead_processes_are_reclaimed_once_and_live_ones_kept() {
        let r: &Region = zeroed();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        let dead_start = start_time(dead).unwrap_or(1);
        child.wait().unwrap();
        let me = std::process::id();
        let v = &r.vgpus[2];
        for (slot, pid, start, bytes) in [(0, me, start_time(me).unwrap(), 100), (1, dead, dead_start, 300)] {
            let p = &v.live.procs[slot];
            p.start_time.store(start, Ordering::Relaxed);
            p.used[3].store(bytes, Ordering::Relaxed);
            p.flags.store(crate::region::flags::SOFT, Ordering::Relaxed);
            p.soft.resident.store(bytes, Ordering::Relaxed);
            p.soft.swap_out_ns.store(7, Ordering::Relaxed);
            p.soft.evicted_seq.store(3, Ordering::Relaxed);
            p.pid.store(pid, Ordering::Release);
        }
        assert_eq!(v.soft_totals().resident, 400);
        v.live.procs_hwm.store(2, Ordering::Relaxed);
        assert_eq!(v.used(3), 400);
        assert_eq!(reclaim_vgpu(&r.vgpus[1], None), 0, "another vGPU's processes are left alone");
        assert_eq!(reclaim_vgpu(v, Some(1)), 0, "the caller's own slot is skipped");
        assert_eq!(reclaim_dead(r), 1);
        assert_eq!(v.used(3), 100);
        assert_eq!(v.live.procs[1].pid.load(Ordering::Relaxed), 0);
        let gone = &v.live.procs[1];
        assert_eq!(
            (gone.soft.resident.load(Ordering::Relaxed), gone.soft.swap_out_ns.load(Ordering::Relaxed)),
            (0, 0),
            "a killed process leaves no soft-mode figures behind"
        );
        assert!(!gone.is_soft() && gone.soft.evicted_seq.load(Ordering::Relaxed) == 0);
        assert_eq!((v.soft_totals().resident, v.soft_totals().swap_out_ns), (100, 7));
        assert_eq!(reclaim_dead(r), 0, "nothing left to reclaim");
        assert_eq!(v.live.procs[0].pid.load(Ordering::Relaxed), me);
    }
}
