//! Giving back what dead processes held: liveness that an error cannot fake, the claiming tags that say
//! who is filling or clearing a process slot, the scan over process slots, and the once-a-second gate that
//! amortizes the scan over allocations. Shared by the shim (which scans when it allocates) and the daemon
//! (which scans on its own, so a vGPU nobody allocates in is cleaned too).
//!
//! Liveness: a process is dead only when the kernel says so — `kill(pid, 0)` answers `ESRCH`, `/proc/PID`
//! is gone (`ENOENT`/`ESRCH`) while `kill` agrees, it is a zombie, or its start time differs from the one it
//! registered (its pid was reused). Any other failure (a process at its descriptor limit cannot open
//! `/proc`, `EMFILE`) leaves it alive: a reclaim must never free what a live process holds.
//!
//! Claiming tags: a slot's owner word holds [`CLAIMING`] | low bits of the claimer's start time | the
//! claimer's pid, with the claimer's pid namespace, while a process fills it (joining) or clears it
//! (reclaiming). A process killed in the middle leaves its tag; a later scanner that finds the tag's
//! process dead takes the slot over with its own tag and finishes the job (clearing is idempotent), so no
//! slot is ever stuck.
//!
//! Pid namespaces: pids and tags are judged by this process's `/proc` only when they are of its own pid
//! namespace; others by a [`Foreign`] judge ([`pid_ns`]): a tenant leaves them alone, the daemon, which
//! sees its child namespaces, looks them up.

// The tag's marker bit is part of the layout (a slot's owner word); re-exported with the rest of the tags.
pub use super::layout::{CLAIMING, is_tag};
use super::layout::{MAX_DEVICES, ProcSlot, Region, VgpuSlot, owner};
use super::pid_ns::{self, Foreign};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Minimum time between two amortized scans of one vGPU.
pub const INTERVAL_NS: u64 = 1_000_000_000;

/// Bits of a claiming tag holding the claimer's pid.
const PID_BITS: u32 = 22;
const PID_MASK: u32 = (1 << PID_BITS) - 1;
/// Bits of a claiming tag holding the low bits of the claimer's start time (against pid reuse).
const START_MASK: u32 = (1 << (31 - PID_BITS)) - 1;
/// Attempts at reading `/proc/PID/stat` before an unreadable file is taken for "cannot tell".
const STAT_ATTEMPTS: usize = 3;

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stat {
    /// The state letter and start time (fields 3 and 22).
    Found(u8, u64),
    /// No such process (`ENOENT` or `ESRCH`).
    Gone,
    /// The file could not be read or parsed: nothing is known.
    Unknown,
}

/// Reads `/proc/PID/stat` through `read` (the file's contents, or the error opening or reading it).
fn stat_with(pid: u32, read: &dyn Fn(&str) -> std::io::Result<String>) -> Stat {
    let text = match read(&format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) if no_such_process(&e) => return Stat::Gone,
        Err(_) => return Stat::Unknown,
    };
    // The command name (field 2) may hold spaces and parentheses; the fields after it follow the last ')'.
    let parsed = text.rfind(')').and_then(|at| {
        let mut fields = text[at + 1..].split_whitespace();
        let state = *fields.next()?.as_bytes().first()?;
        let start = fields.nth(18)?.parse().ok()?;
        Some((state, start))
    });
    parsed.map_or(Stat::Unknown, |(state, start)| Stat::Found(state, start))
}

/// Whether reading a `/proc/PID` file failed because the process does not exist (`ENOENT` or `ESRCH`), as
/// opposed to any other failure, which tells nothing.
pub fn no_such_process(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// What `/proc/PID/stat` says of `pid` (one attempt).
pub(super) fn read_stat(pid: u32) -> Stat {
    stat_with(pid, &read_proc)
}

/// The real reader of `/proc` files.
fn read_proc(path: &str) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// `kill(pid, 0)`: `Some(false)` when no such process exists (`ESRCH`), `Some(true)` when it exists (even
/// one this user may not signal, `EPERM`), `None` when the call tells nothing. Opens no descriptor.
pub fn exists(pid: u32) -> Option<bool> {
    if pid == 0 || pid > PID_MASK {
        return Some(false);
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process exists. `pid` is positive (checked
    // above), so it names one process, never a process group.
    match unsafe { libc::kill(pid as libc::pid_t, 0) } {
        0 => Some(true),
        _ => match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(false),
            Some(libc::EPERM) => Some(true),
            _ => None,
        },
    }
}

/// Whether `pid` runs, is not a zombie and has a start time `started` accepts, reading `/proc` through
/// `read`. Only a certain death counts (see the module documentation): when nothing can be known, alive.
fn alive_with(pid: u32, started: impl Fn(u64) -> bool, read: &dyn Fn(&str) -> std::io::Result<String>) -> bool {
    if exists(pid) == Some(false) {
        return false;
    }
    for _ in 0..STAT_ATTEMPTS {
        match stat_with(pid, read) {
            Stat::Found(state, start) => return started(start) && state != b'Z' && state != b'X',
            // It exited since `kill` saw it, or this `/proc` does not show it (hidepid, another namespace):
            // only `kill` can tell which.
            Stat::Gone => return exists(pid) != Some(false),
            Stat::Unknown => {}
        }
    }
    true
}

/// The kernel's start time of `pid` (clock ticks after boot), which tells a live process from a later
/// one that reused its pid; `None` when it cannot be read.
pub fn start_time(pid: u32) -> Option<u64> {
    (0..STAT_ATTEMPTS).find_map(|_| match stat_with(pid, &read_proc) {
        Stat::Found(_, start) => Some(start),
        _ => None,
    })
}

/// True unless `pid` is certainly not the process that registered with start time `start`: it is gone,
/// a zombie (it will never release anything itself), or another process that reused the pid. An error
/// reading `/proc` is not death.
pub fn is_alive(pid: u32, start: u64) -> bool {
    alive_with(pid, |s| s == start, &read_proc)
}

/// This process's claiming tag: [`CLAIMING`], the low bits of its start time and its pid; `None` when its
/// start time cannot be read (then it claims nothing: a tag with wrong start bits could be taken for a
/// dead claimer's while it works). Cached per pid (a forked child computes its own).
pub fn own_tag() -> Option<u32> {
    static CACHED: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let cached = CACHED.load(Ordering::Relaxed);
    if cached >> 32 == pid as u64 && cached != 0 {
        return Some(cached as u32);
    }
    let tag = claim_tag(pid, start_time(pid)?)?;
    CACHED.store((pid as u64) << 32 | tag as u64, Ordering::Relaxed);
    Some(tag)
}

/// The claiming tag of process `pid` started at `start`; `None` for a pid no Linux process can have.
pub fn claim_tag(pid: u32, start: u64) -> Option<u32> {
    (pid != 0 && pid <= PID_MASK).then_some(CLAIMING | ((start as u32 & START_MASK) << PID_BITS) | pid)
}

/// True unless the process that wrote claiming tag `tag` is certainly dead (see [`is_alive`]).
pub fn tag_alive(tag: u32) -> bool {
    tag_alive_with(tag, &read_proc)
}

fn tag_alive_with(tag: u32, read: &dyn Fn(&str) -> std::io::Result<String>) -> bool {
    let bits = (tag >> PID_BITS) & START_MASK;
    alive_with(tag & PID_MASK, |s| s as u32 & START_MASK == bits, read)
}

/// True unless whoever owner word `owner` names (an owner of start time `start`, or a claimer's tag) is
/// certainly dead; a free slot (0) has nobody to be alive. A process of another pid namespace than this
/// one's is judged by `foreign` ([`pid_ns`]).
pub fn owner_alive(owner: u64, start: u64, foreign: &dyn Foreign) -> bool {
    let (ns, word) = (owner::ns(owner), owner::word(owner));
    let own = pid_ns::is_own(ns);
    match word {
        0 => true,
        w if is_tag(w) && own => tag_alive(w),
        w if is_tag(w) => {
            let bits = (w >> PID_BITS) & START_MASK;
            foreign.alive(ns, w & PID_MASK, &|s| s as u32 & START_MASK == bits)
        }
        pid if own => is_alive(pid, start),
        pid => foreign.alive(ns, pid, &|s| s == start),
    }
}

/// This process's owner word for a slot it claims: its namespace and claiming tag ([`own_tag`]).
pub fn own_claim() -> Option<u64> {
    Some(owner::pack(pid_ns::own(), own_tag()?))
}

/// Takes a word holding a claiming tag (a slot's `pid`, the vGPU's `measuring`) from a claimer found dead:
/// a CAS from the tag seen to `mine`, so of several scanners exactly one takes it over.
pub fn take_over(word: &AtomicU32, seen: u32, mine: u32) -> bool {
    word.compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Relaxed).is_ok()
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

/// Frees a slot the caller has claimed (its owner word is the caller's tag) of `vgpu`: its bytes go back (the
/// vGPU's usage is the sum of its slots), what its launches had in the vGPU's window leaves it, and its
/// soft-mode figures are zeroed, so that a killed process leaves nothing counted in its vGPU's totals.
/// Zeroing is idempotent: whoever takes over from a clearer killed halfway simply clears again.
pub fn clear(p: &ProcSlot, vgpu: &VgpuSlot) {
    for d in 0..MAX_DEVICES {
        p.used[d].store(0, Ordering::SeqCst);
    }
    p.pending.store(0, Ordering::SeqCst);
    p.wanted.store(0, Ordering::Release);
    // Out of the window before out of the slot: a clearer killed in between leaves the slot's share for
    // whoever takes over to subtract again (at worst a window briefly wider, as it stops at zero), rather
    // than a share no slot records any more, which would narrow the vGPU's window for good.
    let inflight = p.inflight_ns.load(Ordering::Acquire).max(0);
    let _ = vgpu
        .live
        .sched
        .inflight_ns
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| Some(w.saturating_sub(inflight).max(0)));
    p.inflight_ns.store(0, Ordering::Release);
    p.soft.reset(0, 0);
    p.flags.store(0, Ordering::Relaxed);
    p.start_time.store(0, Ordering::Relaxed);
    p.owner.store(0, Ordering::Release);
}

/// Reclaims every slot of `vgpu` whose owner, or whose claimer (a process killed while joining or while
/// reclaiming), is certainly dead (judged by `foreign` when of another pid namespace), skipping process
/// slot `skip` (the caller's). Returns how many were found. Two scanners never clear one slot for the same death: each takes it by a CAS to its own tag.
/// Without a tag of its own (its start time unreadable) the caller reclaims nothing.
pub fn reclaim_vgpu(vgpu: &VgpuSlot, skip: Option<usize>, foreign: &dyn Foreign) -> usize {
    let Some(mine) = own_claim() else { return 0 };
    let mut found = 0;
    for (i, p) in vgpu.live.procs.iter().enumerate() {
        let word = p.owner.load(Ordering::Acquire);
        if word == 0 || word == mine || Some(i) == skip {
            continue;
        }
        if owner_alive(word, p.start_time.load(Ordering::Relaxed), foreign) {
            continue;
        }
        if p.owner.compare_exchange(word, mine, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            clear(p, vgpu);
            found += 1;
        }
    }
    found
}

/// Reclaims the dead processes of every vGPU of `region` (which must be mapped writable throughout),
/// judging those of other pid namespaces by `foreign`.
pub fn reclaim_dead(region: &Region, foreign: &dyn Foreign) -> usize {
    region.vgpus.iter().map(|v| reclaim_vgpu(v, None, foreign)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pid_ns::Unseen;

    /// A zeroed region structure, leaked (all-zero is a valid value of every region structure).
    fn zeroed<T>() -> &'static T {
        // SAFETY: the region structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<T>::new_zeroed().assume_init() })
    }

    /// A child that exited and was reaped: its pid and start time name no process.
    fn dead_process() -> (u32, u64) {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid).unwrap_or(1);
        child.wait().unwrap();
        (pid, start)
    }

    #[test]
    fn own_process_is_alive_and_others_are_told_apart() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        assert!(is_alive(pid, start));
        assert!(!is_alive(pid, start + 1), "same pid, another start time: a reused pid");
        assert!(!is_alive(u32::MAX - 1, start));
        let (dead, dead_start) = dead_process();
        assert!(!is_alive(dead, dead_start));
    }

    #[test]
    fn a_zombie_is_dead() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid);
        // Not reaped (std never reaps on its own): a zombie once it exits.
        let zombie = (0..2000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            matches!(stat_with(pid, &read_proc), Stat::Found(b'Z', _))
        });
        assert!(zombie, "the child exited");
        assert!(!is_alive(pid, start.unwrap_or(0)));
        drop(child);
    }

    #[test]
    fn an_unreadable_proc_is_not_death() {
        let pid = std::process::id();
        let start = start_time(pid).unwrap();
        let emfile = |_: &str| Err(std::io::Error::from_raw_os_error(libc::EMFILE));
        let garbage = |_: &str| Ok(String::from("not a stat line"));
        assert!(alive_with(pid, |s| s == start, &emfile), "a reader at its descriptor limit keeps its peers");
        assert!(alive_with(pid, |s| s == start, &garbage), "an unparsable file tells nothing");
        assert!(tag_alive_with(own_tag().unwrap(), &emfile));
        // kill(pid, 0) still tells a gone process, without any descriptor.
        let (dead, dead_start) = dead_process();
        assert!(!alive_with(dead, |s| s == dead_start, &emfile));
        // /proc saying "no such process" is believed only when kill agrees.
        let enoent = |_: &str| Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert!(alive_with(pid, |s| s == start, &enoent), "a process /proc hides but kill sees lives");
        assert!(!alive_with(dead, |s| s == dead_start, &enoent));
    }

    #[test]
    fn claiming_tags_name_their_claimer() {
        let mine = own_tag().unwrap();
        assert!(is_tag(mine) && mine & PID_MASK == std::process::id());
        assert!(tag_alive(mine));
        let (dead, dead_start) = dead_process();
        let theirs = claim_tag(dead, dead_start).unwrap();
        assert!(is_tag(theirs) && !tag_alive(theirs));
        let start = start_time(std::process::id()).unwrap();
        let reused = claim_tag(std::process::id(), start + 1).unwrap();
        assert!(!tag_alive(reused), "our pid with another start time: a dead claimer whose pid we reuse");
        assert_eq!(claim_tag(0, 1), None);
        assert_eq!(claim_tag(PID_MASK + 1, 1), None);
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
        let (dead, dead_start) = dead_process();
        let me = std::process::id();
        let v = &r.vgpus[2];
        for (slot, pid, start, bytes) in [(0, me, start_time(me).unwrap(), 100), (1, dead, dead_start, 300)] {
            let p = &v.live.procs[slot];
            p.start_time.store(start, Ordering::Relaxed);
            p.used[3].store(bytes, Ordering::Relaxed);
            p.flags.store(crate::flags::SOFT, Ordering::Relaxed);
            p.soft.resident.store(bytes, Ordering::Relaxed);
            p.soft.swap_out_ns.store(7, Ordering::Relaxed);
            p.soft.evicted_seq.store(3, Ordering::Relaxed);
            p.set_owner(0, pid);
        }
        assert_eq!(v.soft_totals().resident, 400);
        v.live.procs_hwm.store(2, Ordering::Relaxed);
        assert_eq!(v.used(3), 400);
        assert_eq!(reclaim_vgpu(&r.vgpus[1], None, &Unseen), 0, "another vGPU's processes are left alone");
        assert_eq!(reclaim_vgpu(v, Some(1), &Unseen), 0, "the caller's own slot is skipped");
        assert_eq!(reclaim_dead(r, &Unseen), 1);
        assert_eq!(v.used(3), 100);
        assert_eq!(v.live.procs[1].word(), 0);
        let gone = &v.live.procs[1];
        assert_eq!(
            (gone.soft.resident.load(Ordering::Relaxed), gone.soft.swap_out_ns.load(Ordering::Relaxed)),
            (0, 0),
            "a killed process leaves no soft-mode figures behind"
        );
        assert!(!gone.is_soft() && gone.soft.evicted_seq.load(Ordering::Relaxed) == 0);
        assert_eq!((v.soft_totals().resident, v.soft_totals().swap_out_ns), (100, 7));
        assert_eq!(reclaim_dead(r, &Unseen), 0, "nothing left to reclaim");
        assert_eq!(v.live.procs[0].word(), me);
    }

    #[test]
    fn slots_left_claimed_by_killed_claimers_are_taken_over_and_cleared() {
        let v: &VgpuSlot = zeroed();
        v.live.procs_hwm.store(4, Ordering::Relaxed);
        let (dead, dead_start) = dead_process();
        let dead_tag = claim_tag(dead, dead_start).unwrap();
        // Slot 0: a joiner killed while filling its slot. Slot 1: a reclaimer killed halfway through
        // clearing a dead owner's slot (bytes and pending reservations left). Slot 2: a live claimer
        // (this process) at work. Slot 3: a live owner.
        let leftovers = [(0, dead_tag, 0, 0), (1, dead_tag, 300, 20), (2, own_tag().unwrap(), 50, 0)];
        for (slot, word, bytes, pending) in leftovers {
            let p = &v.live.procs[slot];
            p.used[0].store(bytes, Ordering::Relaxed);
            p.pending.store(pending, Ordering::Relaxed);
            p.set_owner(0, word);
        }
        let owner = &v.live.procs[3];
        owner.start_time.store(start_time(std::process::id()).unwrap(), Ordering::Relaxed);
        owner.used[0].store(7, Ordering::Relaxed);
        owner.set_owner(pid_ns::own(), std::process::id());
        assert_eq!(v.used(0), 357);
        assert_eq!(v.attached().count(), 1, "claimed slots are nobody's yet");
        assert_eq!(reclaim_vgpu(v, None, &Unseen), 2);
        assert_eq!(v.used(0), 57, "only what live processes hold is left");
        assert_eq!(v.live.procs[1].pending.load(Ordering::Relaxed), 0);
        assert_eq!(v.live.procs[0].word(), 0, "freed for the next joiner");
        assert_eq!(v.live.procs[2].word(), own_tag().unwrap(), "a live claimer keeps its slot");
        assert_eq!(reclaim_vgpu(v, None, &Unseen), 0);
    }

    /// A judge of other namespaces that records what it is asked and answers `dead` for pid 7.
    struct Judge(std::sync::Mutex<Vec<(u32, u32, bool)>>);

    impl Foreign for Judge {
        fn alive(&self, ns: u32, pid: u32, started: &dyn Fn(u64) -> bool) -> bool {
            self.0.lock().unwrap().push((ns, pid, started(0x1234)));
            pid != 7
        }
    }

    #[test]
    fn processes_of_another_pid_namespace_are_judged_by_the_foreign_judge_alone() {
        let v: &VgpuSlot = zeroed();
        v.live.procs_hwm.store(4, Ordering::Relaxed);
        let other = pid_ns::own().wrapping_add(1);
        // Pid 1 there, alive, though pid 1 here has another start time; pid 7 there, dead; a tag of pid 7
        // there; and the same dead pid 7 recorded in this namespace, which this process judges itself.
        let (dead, dead_start) = dead_process();
        let slots = [(other, 1, 0x1234), (other, 7, 0x1234), (other, claim_tag(7, 0x1234).unwrap(), 0)];
        for (i, (ns, word, start)) in slots.into_iter().enumerate() {
            let p = &v.live.procs[i];
            p.start_time.store(start, Ordering::Relaxed);
            p.used[0].store(10, Ordering::Relaxed);
            p.set_owner(ns, word);
        }
        let here = &v.live.procs[3];
        here.start_time.store(dead_start, Ordering::Relaxed);
        here.set_owner(pid_ns::own(), dead);
        assert_eq!(reclaim_vgpu(v, None, &Unseen), 1, "a tenant frees only its own namespace's dead");
        assert_eq!(here.word(), 0);
        assert_eq!(v.live.procs[0].word(), 1, "pid 1 of the other namespace is not judged here");
        let judge = Judge(Default::default());
        assert_eq!(reclaim_vgpu(v, None, &judge), 2, "pid 7 there and its tag");
        assert_eq!(v.live.procs[0].word(), 1);
        assert_eq!(v.used(0), 10);
        let asked = judge.0.lock().unwrap().clone();
        assert_eq!(asked, [(other, 1, true), (other, 7, true), (other, 7, true)], "namespace, pid there, start");
    }
}
