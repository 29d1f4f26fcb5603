//! Pid namespaces. A process in a container records the pid it sees, which means nothing in another pid
//! namespace: the daemon (which runs in the host's, or a parent, namespace) reads a tenant's pid 7 as
//! whatever process the host calls 7. So every process slot also records the inode of its owner's pid
//! namespace ([`super::layout::owner`]); a scanner judges a pid by its own `/proc` only when the
//! namespace is its own, and otherwise asks a [`Foreign`] judge: a tenant cannot see other namespaces
//! ([`Unseen`]: alive), the daemon looks them up in its `/proc` ([`ProcView`]), which shows every process
//! of its own namespace's descendants with its pid at every level (`NSpid` in `/proc/PID/status`).

use super::layout::ProcSlot;
use super::reclaim::{Stat, read_stat};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The inode of the initial pid namespace (the kernel's `PROC_PID_INIT_INO`): a process in it sees every
/// process of the machine.
pub const INITIAL: u32 = 0xEFFF_FFFC;

/// The inode of the pid namespace of process `pid` as this process's `/proc` shows it (`/proc/PID/ns/pid`
/// is a link to `pid:[INODE]`; its target's inode number is that), `None` when it cannot be read.
pub fn of(pid: &str) -> Option<u32> {
    let meta = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
    u32::try_from(meta.ino()).ok()
}

/// This process's pid namespace (0 when `/proc/self/ns/pid` cannot be read). Cached per pid: a child
/// forked after `unshare(CLONE_NEWPID)` is in a new one, and has a new pid to tell it by.
pub fn own() -> u32 {
    static CACHED: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let cached = CACHED.load(Ordering::Relaxed);
    if cached >> 32 == pid as u64 && cached as u32 != 0 {
        return cached as u32;
    }
    let ns = of("self").unwrap_or(0);
    CACHED.store((pid as u64) << 32 | ns as u64, Ordering::Relaxed);
    ns
}

/// Whether pids recorded with namespace `ns` name processes of this process's `/proc`: `ns` is its own,
/// or unknown (0: the writer could not read its namespace; taken for the reader's, as before namespaces
/// were recorded).
pub fn is_own(ns: u32) -> bool {
    ns == 0 || ns == own()
}

/// How a scanner judges a process of a pid namespace other than its own: `pid` is the process's pid in
/// namespace `ns`, `started` accepts the start time it registered. True unless it is certainly dead.
pub trait Foreign {
    /// Whether process `pid` of namespace `ns` may be alive.
    fn alive(&self, ns: u32, pid: u32, started: &dyn Fn(u64) -> bool) -> bool;
}

/// A judge that cannot see other namespaces (a tenant in its container): every process there may be
/// alive, and is left to a scanner that can see it (the daemon).
pub struct Unseen;

impl Foreign for Unseen {
    fn alive(&self, _ns: u32, _pid: u32, _started: &dyn Fn(u64) -> bool) -> bool {
        true
    }
}

/// One process of another namespace, as this process's `/proc` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    /// Its pid here.
    here: u32,
    /// Its start time.
    start: u64,
    /// Its state letter (`Z`: a zombie).
    state: u8,
}

/// What this process's `/proc` shows of the processes of other pid namespaces, read once (see
/// [`ProcView`] for when).
#[derive(Debug, Default)]
pub struct Scan {
    /// By (namespace, pid in it): the processes seen (a pid may be seen twice if reused mid-scan).
    by_pid: HashMap<(u32, u32), Vec<Seen>>,
    /// The namespaces of which at least one process was seen: all their processes are visible here.
    visible: HashSet<u32>,
    /// This process is in the initial namespace: a namespace it does not see has no process left.
    sees_all: bool,
}

impl Scan {
    /// Reads `/proc`: for every process of another namespace than this process's, its namespace, its pid
    /// there (the last field of `NSpid`), its pid here, start time and state. Processes that exit while
    /// it reads are skipped; one alive throughout is listed (the kernel lists `/proc` by pid).
    pub fn read() -> Scan {
        let own = own();
        let mut scan = Scan { sees_all: own == INITIAL, ..Scan::default() };
        let Ok(dir) = std::fs::read_dir("/proc") else { return scan };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(here) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Some(ns) = of(&here.to_string()) else { continue };
            if ns == own {
                continue;
            }
            let Some(inner) = innermost_pid(here) else { continue };
            let Stat::Found(state, start) = read_stat(here) else { continue };
            scan.visible.insert(ns);
            scan.by_pid.entry((ns, inner)).or_default().push(Seen { here, start, state });
        }
        scan
    }

    /// The pid here of process `pid` of namespace `ns` started as `started` accepts, if it is seen alive.
    pub fn here(&self, ns: u32, pid: u32, started: &dyn Fn(u64) -> bool) -> Option<u32> {
        let seen = self.by_pid.get(&(ns, pid))?;
        seen.iter().find(|s| started(s.start) && s.state != b'Z' && s.state != b'X').map(|s| s.here)
    }

    /// True unless process `pid` of namespace `ns` is certainly dead: its namespace is visible here and
    /// it is not among its live processes, or (seen from the initial namespace) the namespace is gone.
    pub fn alive(&self, ns: u32, pid: u32, started: &dyn Fn(u64) -> bool) -> bool {
        if self.here(ns, pid, started).is_some() {
            return true;
        }
        !(self.visible.contains(&ns) || self.sees_all)
    }
}

/// The last pid of the `NSpid` line of `/proc/PID/status`: the process's pid in its own namespace.
fn innermost_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The daemon's judge: `/proc` read at most once, when a process of another namespace is first judged.
/// Make one per pass over the slots, so that a pass sees one consistent picture and costs one scan at most.
#[derive(Default)]
pub struct ProcView {
    scan: OnceLock<Scan>,
}

impl ProcView {
    /// A view that has not read `/proc` yet.
    pub fn new() -> ProcView {
        ProcView::default()
    }

    fn scan(&self) -> &Scan {
        self.scan.get_or_init(Scan::read)
    }

    /// The pid, as this process sees it, of the process a slot records as `pid` in namespace `ns` with
    /// start time `start`: `pid` itself for this process's namespace; `None` when it cannot be seen alive.
    pub fn here(&self, ns: u32, pid: u32, start: u64) -> Option<u32> {
        if is_own(ns) {
            return Some(pid);
        }
        self.scan().here(ns, pid, &|s| s == start)
    }

    /// The pid here of the process attached to slot `p`, else the pid its slot records (one of a namespace
    /// this view cannot see, or not seen alive, which the reclaim of dead processes deals with).
    pub fn pid_of(&self, p: &ProcSlot, pid: u32) -> u32 {
        self.here(p.ns(), pid, p.start_time.load(Ordering::Acquire)).unwrap_or(pid)
    }
}

impl Foreign for ProcView {
    fn alive(&self, ns: u32, pid: u32, started: &dyn Fn(u64) -> bool) -> bool {
        self.scan().alive(ns, pid, started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn own_namespace_is_read_and_unknown_counts_as_own() {
        assert_ne!(own(), 0, "/proc/self/ns/pid is readable here");
        assert_eq!(of("self"), Some(own()));
        assert!(is_own(0) && is_own(own()) && !is_own(own().wrapping_add(1)));
    }

    #[test]
    fn an_unseen_namespace_is_dead_only_for_a_scanner_that_sees_all() {
        let scan = Scan { sees_all: false, ..Scan::default() };
        assert!(scan.alive(42, 7, &|_| true), "cannot tell: alive");
        let scan = Scan { sees_all: true, ..Scan::default() };
        assert!(!scan.alive(42, 7, &|_| true), "no process left in it");
    }

    #[test]
    fn a_visible_namespace_tells_its_dead_reused_and_zombie_pids() {
        let mut scan = Scan::default();
        scan.visible.insert(5);
        scan.by_pid.insert((5, 1), vec![Seen { here: 100, start: 10, state: b'S' }]);
        scan.by_pid.insert((5, 2), vec![Seen { here: 101, start: 11, state: b'Z' }]);
        assert!(scan.alive(5, 1, &|s| s == 10));
        assert_eq!(scan.here(5, 1, &|s| s == 10), Some(100));
        assert!(!scan.alive(5, 1, &|s| s == 9), "another start time: the pid was reused");
        assert!(!scan.alive(5, 2, &|s| s == 11), "a zombie");
        assert!(!scan.alive(5, 3, &|_| true), "not among the namespace's processes");
        assert!(scan.alive(6, 1, &|_| true), "another namespace, not seen: cannot tell");
    }

    /// A process in a new pid namespace (`unshare`, as root or through a user namespace), seen from here.
    #[test]
    fn a_process_in_a_child_namespace_is_found_by_its_pid_there() {
        let child = Command::new("unshare")
            .args(["--user", "--map-root-user", "--pid", "--fork", "sleep", "30"])
            .stdin(Stdio::null())
            .spawn();
        let Ok(mut child) = child else { panic!("unshare(1) is needed (util-linux)") };
        // The sleeping process is `unshare`'s child, pid 1 of the new namespace.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let found = loop {
            let scan = Scan::read();
            let hit = scan
                .by_pid
                .iter()
                .find(|((_, inner), seen)| *inner == 1 && seen.iter().any(|s| parent_of(s.here) == Some(child.id())));
            if let Some((&(ns, _), seen)) = hit {
                break Some((ns, seen[0], scan));
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let _ = child.kill();
        let _ = child.wait();
        let (ns, seen, scan) = found.expect("the namespaced process is seen with pid 1 there");
        assert_ne!(ns, own());
        assert!(scan.alive(ns, 1, &|s| s == seen.start));
        assert!(!scan.alive(ns, 2, &|_| true), "its namespace is visible: pid 2 there does not exist");
        assert_eq!(ProcView::new().here(own(), 7, 0), Some(7), "own namespace: the pid is ours");
    }

    /// The parent pid of `pid` (field 4 of `/proc/PID/stat`).
    fn parent_of(pid: u32) -> Option<u32> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        text[text.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
    }
}
