//! Validating the process slots of a managed vGPU, which live in a file its tenant can write: a slot
//! names a process attached to the vGPU only if that process is alive, runs as the vGPU's user and maps
//! the vGPU's live file (every process that joins a managed vGPU does, before it publishes its pid). A
//! slot the daemon positively knows to be false — the process is gone, belongs to another user (pid 1 of
//! root planted in a user's vGPU), or does not map the file — is freed as a dead process's would be (see
//! [`tessera_region::reclaim::clear`]): its bytes go back and it no longer blocks `tessera vgpu rm`.
//!
//! Nothing is freed on doubt: an error reading `/proc` other than "no such process" keeps the slot
//! (liveness is never inferred from a failure to look). But only a **verified** process (seen mapping the
//! file) blocks `tessera vgpu rm`: a slot whose process cannot be verified (its `/proc/PID/maps` cannot be
//! read, as root's pid 1 in a VM or container, or is larger than the daemon reads) is ignored there, so a
//! tenant cannot keep its vGPU for ever by planting such a pid.
//!
//! Bounded cost, whatever a tenant maps: a process's `/proc/PID/maps` (which a tenant can make as large as
//! `vm.max_map_count` mappings allow, with long file names) is read at most [`PROCESS_BUDGET`] bytes, and a
//! pass at most its budget ([`ROUND_BUDGET`] for the tenant checks, [`REQUEST_BUDGET`] for `rm`); the verdict is
//! kept per process (pid and start time) and live file by a [`Verifier`], so a verified process is read
//! once in its life, however many slots name it, and an unverifiable one once per [`RETRY`].

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_region::pid_ns::ProcView;
use tessera_region::reclaim::{clear, no_such_process, own_claim, start_time};
use tessera_region::{VgpuSlot, owner};

/// Bytes of one process's `/proc/PID/maps` read at most: 65,530 mappings (the kernel's default
/// `vm.max_map_count`) of ordinary libraries and files fit (about 80 bytes each); a map larger than that
/// leaves its process unverifiable.
pub const PROCESS_BUDGET: u64 = 16 << 20;
/// Bytes of `/proc/PID/maps` one round of the tenant checks reads at most (about 0.1 s of the kernel's time):
/// processes left over are read in later rounds (the verdicts already reached are kept).
pub const ROUND_BUDGET: u64 = 16 << 20;
/// Bytes of `/proc/PID/maps` a request (`rm`) reads at most, so that it answers within a fraction of a
/// second: a process not verified by then does not block it.
pub const REQUEST_BUDGET: u64 = 4 << 20;
/// How long the daemon goes by an "unverifiable" verdict before reading the process again.
pub const RETRY: Duration = Duration::from_secs(30);

/// A file as `/proc/PID/maps` names it: its device's major and minor numbers and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Inode number.
    pub inode: u64,
}

impl FileId {
    /// The identity of the file at `path`, if it can be read.
    pub fn of(path: &str) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        let dev = m.dev();
        Some(FileId { major: libc::major(dev), minor: libc::minor(dev), inode: m.ino() })
    }
}

/// Why a slot's process is not one of the vGPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    /// No such process.
    Gone,
    /// A process of another user (none of its uids is the vGPU's user).
    Foreign {
        /// Its real uid.
        uid: u32,
    },
    /// A process of the vGPU's user that does not map the vGPU's live file: it never joined.
    Detached,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Gone => write!(f, "no such process"),
            Finding::Foreign { uid } => write!(f, "a process of uid {uid}, not of the vGPU's user"),
            Finding::Detached => write!(f, "a process that does not map the vGPU's file"),
        }
    }
}

/// The uids (real, effective, saved, filesystem) of `pid` from the `Uid:` line of `/proc/PID/status`
/// (not the owner of `/proc/PID`, which is root's for a non-dumpable process). `Err(true)`: no such
/// process; `Err(false)`: it could not be read.
pub fn uids(pid: u32) -> Result<Vec<u32>, bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| no_such_process(&e))?;
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:")).ok_or(false)?;
    let ids: Vec<u32> = line.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    if ids.is_empty() { Err(false) } else { Ok(ids) }
}

/// Whether `line` (one line of a `/proc/PID/maps`) is a mapping of file `file`.
fn line_maps(line: &[u8], file: FileId) -> bool {
    let Ok(line) = std::str::from_utf8(line) else {
        // Only the path (the last field) may be anything but ASCII: the fields before it are all we read.
        let end = line.iter().position(|&b| b == b'/').unwrap_or(line.len());
        return std::str::from_utf8(&line[..end]).is_ok_and(|l| line_maps(l.as_bytes(), file));
    };
    let mut fields = line.split_whitespace().skip(3);
    let (Some(dev), Some(inode)) = (fields.next(), fields.next()) else { return false };
    let Some((major, minor)) = dev.split_once(':') else { return false };
    inode.parse::<u64>() == Ok(file.inode)
        && u32::from_str_radix(major, 16) == Ok(file.major)
        && u32::from_str_radix(minor, 16) == Ok(file.minor)
}

/// Whether `maps` (the text of a `/proc/PID/maps`) has a mapping of file `file`.
#[cfg(test)] // Only the tests use it.
pub fn maps_file(maps: &str, file: FileId) -> bool {
    maps.lines().any(|line| line_maps(line.as_bytes(), file))
}

/// What reading a process's `/proc/PID/maps`, within a budget, found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A mapping of the file.
    Mapped,
    /// The whole map, without a mapping of the file.
    NotMapped,
    /// The budget ran out first.
    Over,
    /// No such process.
    Gone,
    /// The file cannot be read (not allowed to: another user's process, or one the daemon may not trace).
    Unreadable,
}

/// Reads `source` (a `/proc/PID/maps`) until a mapping of `file`, its end, or `limit` bytes; returns what
/// it found and the bytes it read.
pub fn scan_maps(source: &mut dyn Read, file: FileId, limit: u64) -> (Scan, u64) {
    let mut buf = vec![0u8; 64 << 10];
    let (mut filled, mut read) = (0usize, 0u64);
    // The rest of a line too long for the buffer, whose start was dropped: not a line of its own (a file
    // name may hold what looks like fields).
    let mut rest_of_long = false;
    loop {
        if read >= limit {
            return (Scan::Over, read);
        }
        let room = (buf.len() - filled).min(usize::try_from(limit - read).unwrap_or(usize::MAX));
        let n = match source.read(&mut buf[filled..filled + room]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if no_such_process(&e) => return (Scan::Gone, read),
            Err(_) => return (Scan::Unreadable, read),
        };
        read += n as u64;
        let end = filled + n;
        // Whole lines only; the tail of a line cut by the buffer moves to its front.
        let complete = if n == 0 { end } else { buf[..end].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) };
        let skip = usize::from(complete > 0 && std::mem::take(&mut rest_of_long));
        if buf[..complete].split(|&b| b == b'\n').skip(skip).any(|line| line_maps(line, file)) {
            return (Scan::Mapped, read);
        }
        if n == 0 {
            return (Scan::NotMapped, read);
        }
        if complete == 0 && end == buf.len() {
            // One line longer than the buffer (no real mapping is): it is skipped, not a reason to stop.
            filled = 0;
            rest_of_long = true;
            continue;
        }
        buf.copy_within(complete..end, 0);
        filled = end - complete;
    }
}

/// Why the daemon cannot tell whether a slot's process is attached to its vGPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doubt {
    /// Its `/proc/PID/maps` or `/proc/PID/status` cannot be read.
    Unreadable,
    /// Its map is longer than [`PROCESS_BUDGET`].
    TooLarge,
    /// The pass's budget ran out before it was read (it is, in a later round).
    Deferred,
    /// The vGPU's live file cannot be identified.
    NoFile,
    /// The daemon's `/proc` does not show it (a pid namespace it cannot see).
    Unseen,
}

impl std::fmt::Display for Doubt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Doubt::Unreadable => "its /proc files cannot be read",
            Doubt::TooLarge => "its memory map is larger than the daemon reads",
            Doubt::Deferred => "not checked yet",
            Doubt::NoFile => "the vGPU's file cannot be identified",
            Doubt::Unseen => "not seen in the daemon's /proc",
        })
    }
}

/// What the daemon knows of a slot's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A process of the vGPU's user mapping its live file: attached.
    Verified,
    /// Nothing known either way: the slot is kept, but blocks no `rm`.
    Unverified(Doubt),
    /// Known false: the slot is freed.
    False(Finding),
}

/// Whether the daemon vouches for a process slot (its index and owner word) without looking at `/proc`.
pub type Vouched<'a> = &'a dyn Fn(usize, u64) -> bool;

/// A process slot judged: its index, the owner word it had ([`owner`]) and the verdict.
pub type Judged = (usize, u64, Verdict);

/// A process slot found false: its index, the owner word it had and why.
pub type Stray = (usize, u64, Finding);

/// The false slots of `judged`.
pub fn strays(judged: &[Judged]) -> Vec<Stray> {
    judged
        .iter()
        .filter_map(|&(i, word, v)| if let Verdict::False(f) = v { Some((i, word, f)) } else { None })
        .collect()
}

/// The slots of `judged` whose process could not be verified (slot index, owner word, why): they do not
/// block `rm`.
pub fn unverified(judged: &[Judged]) -> Vec<(usize, u64, Doubt)> {
    judged
        .iter()
        .filter_map(|&(i, word, v)| if let Verdict::Unverified(d) = v { Some((i, word, d)) } else { None })
        .collect()
}

/// A verdict kept from pass to pass.
#[derive(Debug, Clone, Copy)]
enum Known {
    /// For the life of the process.
    Verified,
    /// Until the instant given.
    Doubt(Doubt, Instant),
    /// For the pass given only (the process may join later: a slot is freed, never the process).
    False(Finding, u64),
}

/// A process (its pid as the daemon sees it and its start time) and a vGPU's live file.
type Key = (u32, u64, FileId);

/// The daemon's verdicts on processes, kept from pass to pass (see the module documentation).
#[derive(Default)]
pub struct Verifier {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    known: HashMap<Key, (Known, u64)>,
    pass: u64,
}

impl Verifier {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the daemon knows of `pid` being a process attached to a vGPU of user `owner` whose live file is
    /// `live`, reading its `/proc/PID/maps` (through `open`) within `budget` bytes, which it lowers.
    pub fn judge_with(
        &self,
        pid: u32,
        owner: u32,
        live: Option<FileId>,
        budget: &mut u64,
        open: &dyn Fn(u32) -> std::io::Result<Box<dyn Read>>,
    ) -> Verdict {
        match uids(pid) {
            Err(true) => return Verdict::False(Finding::Gone),
            Err(false) => return Verdict::Unverified(Doubt::Unreadable),
            Ok(ids) if !ids.contains(&owner) => return Verdict::False(Finding::Foreign { uid: ids[0] }),
            Ok(_) => {}
        }
        let Some(live) = live else { return Verdict::Unverified(Doubt::NoFile) };
        let Some(start) = start_time(pid) else { return Verdict::Unverified(Doubt::Unreadable) };
        let key = (pid, start, live);
        let now = Instant::now();
        {
            let mut state = self.state();
            let pass = state.pass;
            if let Some((known, seen)) = state.known.get_mut(&key) {
                *seen = pass;
                match *known {
                    Known::Verified => return Verdict::Verified,
                    Known::Doubt(d, until) if now < until => return Verdict::Unverified(d),
                    Known::False(f, at) if at == pass => return Verdict::False(f),
                    _ => {}
                }
            }
        }
        if *budget == 0 {
            return Verdict::Unverified(Doubt::Deferred);
        }
        let limit = PROCESS_BUDGET.min(*budget);
        let (scan, read) = match open(pid) {
            Ok(mut file) => scan_maps(&mut *file, live, limit),
            Err(e) if no_such_process(&e) => (Scan::Gone, 0),
            Err(_) => (Scan::Unreadable, 0),
        };
        *budget = budget.saturating_sub(read);
        let mut state = self.state();
        let pass = state.pass;
        let (known, verdict) = match scan {
            Scan::Mapped => (Some(Known::Verified), Verdict::Verified),
            Scan::NotMapped => (Some(Known::False(Finding::Detached, pass)), Verdict::False(Finding::Detached)),
            Scan::Gone => (None, Verdict::False(Finding::Gone)),
            Scan::Over if limit < PROCESS_BUDGET => (None, Verdict::Unverified(Doubt::Deferred)),
            Scan::Over => (Some(Known::Doubt(Doubt::TooLarge, now + RETRY)), Verdict::Unverified(Doubt::TooLarge)),
            Scan::Unreadable => {
                (Some(Known::Doubt(Doubt::Unreadable, now + RETRY)), Verdict::Unverified(Doubt::Unreadable))
            }
        };
        if let Some(known) = known {
            state.known.insert(key, (known, pass));
        }
        verdict
    }

    /// [`Verifier::judge_with`] reading the real `/proc/PID/maps`.
    pub fn judge(&self, pid: u32, owner: u32, live: Option<FileId>, budget: &mut u64) -> Verdict {
        self.judge_with(pid, owner, live, budget, &|pid| {
            Ok(Box::new(std::fs::File::open(format!("/proc/{pid}/maps"))?) as Box<dyn Read>)
        })
    }

    /// Every process slot of `v` (a vGPU of user `owner` whose live file is `live`) judged, reading at most
    /// `budget` bytes of maps (lowered by what was read). A slot `vouched` for (its index and owner word:
    /// a process that joined through the socket, see [`crate::tenants::joins`]) is verified without any read. Reads
    /// `/proc`: called with no lock held, so that a slow read holds up nobody. A process of another pid namespace is judged by its pid here, as
    /// `view` finds it; one `view` cannot find is unverified (and left to the reclaim of dead processes,
    /// which knows whether it can see its namespace).
    pub fn judge_slots(
        &self,
        v: &VgpuSlot,
        owner: u32,
        live: Option<FileId>,
        view: &ProcView,
        vouched: Vouched,
        budget: &mut u64,
    ) -> Vec<Judged> {
        v.attached()
            .map(|(i, pid, p)| {
                let word = p.owner.load(Ordering::Acquire);
                if vouched(i, word) {
                    return (i, word, Verdict::Verified);
                }
                let verdict = match view.here(owner::ns(word), pid, p.start_time.load(Ordering::Acquire)) {
                    Some(here) => self.judge(here, owner, live, budget),
                    None => Verdict::Unverified(Doubt::Unseen),
                };
                (i, word, verdict)
            })
            .collect()
    }

    /// Ends a pass over every vGPU: verdicts on processes no slot named in it are forgotten (the process
    /// is gone, or no longer named), so that the verifier holds at most one entry per slot.
    pub fn end_pass(&self) {
        let mut state = self.state();
        let pass = state.pass;
        state.known.retain(|_, (_, seen)| *seen == pass);
        state.pass += 1;
    }
}

/// What the daemon positively knows against `pid` being a process attached to a vGPU of user `owner`
/// whose live file is `live` (`None` when that file cannot be identified: the mapping is not checked),
/// reading its whole map if need be. `None`: nothing is known against it, the slot is kept.
#[cfg(test)] // Only the tests use it.
pub fn judge(pid: u32, owner: u32, live: Option<FileId>) -> Option<Finding> {
    let mut budget = PROCESS_BUDGET;
    match Verifier::default().judge(pid, owner, live, &mut budget) {
        Verdict::False(f) => Some(f),
        _ => None,
    }
}

/// Frees each of `strays` (found by [`Verifier::judge_slots`]) whose slot still names the same process,
/// as a dead process's slot is freed; returns the pids freed (as the slots named them) and why.
pub fn free(v: &VgpuSlot, strays: &[Stray]) -> Vec<(u32, Finding)> {
    let mut freed = Vec::new();
    // The daemon's own claiming tag: were it killed while clearing, the next scanner takes the slot over.
    let Some(tag) = own_claim() else { return freed };
    for &(i, word, finding) in strays {
        let p = &v.live.procs[i];
        // Claimed first, as reclaim does: two cleaners never give the same bytes back twice.
        if p.owner.compare_exchange(word, tag, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            clear(p, v);
            freed.push((owner::word(word), finding));
        }
    }
    freed
}

/// Frees every process slot of `v` (a vGPU of user `owner` whose live file is `live`) found false, as a
/// dead process's slot is freed; returns the pids freed and why.
#[cfg(test)] // Only the tests use it.
pub fn free_strays(v: &VgpuSlot, owner: u32, live: Option<FileId>) -> Vec<(u32, Finding)> {
    let mut budget = ROUND_BUDGET;
    let judged = Verifier::default().judge_slots(v, owner, live, &ProcView::new(), &|_, _| false, &mut budget);
    free(v, &strays(&judged))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> &'static VgpuSlot {
        // SAFETY: VgpuSlot is integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<VgpuSlot>::new_zeroed().assume_init() })
    }

    fn uid() -> u32 {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    }

    /// A file of this test, mapped by this process while the returned mapping lives.
    fn mapped(tag: &str) -> (FileId, memmap::Map) {
        let path = std::env::temp_dir().join(format!("tessera-integrity-{}-{tag}", std::process::id()));
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let map = memmap::Map::new(&file);
        let id = FileId::of(path.to_str().unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        (id, map)
    }

    /// A minimal read-only mapping, unmapped on drop.
    mod memmap {
        use std::os::fd::AsRawFd;

        pub struct Map(*mut libc::c_void);

        impl Map {
            pub fn new(file: &std::fs::File) -> Map {
                // SAFETY: maps 4096 bytes of a file we opened, read-only and shared; checked below.
                let p = unsafe {
                    libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0)
                };
                assert_ne!(p, libc::MAP_FAILED);
                Map(p)
            }
        }

        impl Drop for Map {
            fn drop(&mut self) {
                // SAFETY: unmaps exactly the mapping made in `new`.
                unsafe { libc::munmap(self.0, 4096) };
            }
        }
    }

    #[test]
    fn maps_lines_are_matched_by_device_and_inode() {
        let maps = "7f00-7f10 rw-s 00000000 00:1a 4242                       /dev/shm/r.vgpu03\n\
                    7f10-7f20 r--p 00000000 fd:01 77 /usr/lib/libc.so.6\n\
                    7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n";
        assert!(maps_file(maps, FileId { major: 0, minor: 0x1a, inode: 4242 }));
        assert!(maps_file(maps, FileId { major: 0xfd, minor: 1, inode: 77 }));
        assert!(!maps_file(maps, FileId { major: 0, minor: 0x1b, inode: 4242 }), "another device");
        assert!(!maps_file(maps, FileId { major: 0, minor: 0x1a, inode: 4243 }), "another file");
        assert!(!maps_file("garbage\n\n", FileId { major: 0, minor: 0, inode: 0 }));
    }

    #[test]
    fn processes_are_judged_by_user_liveness_and_mapping() {
        let me = std::process::id();
        let (live, map) = mapped("judge");
        assert_eq!(judge(me, uid(), Some(live)), None, "a process of the user mapping the file");
        assert_eq!(judge(me, uid(), None), None, "the mapping cannot be checked: kept");
        assert_eq!(judge(me, uid().wrapping_add(4242), Some(live)), Some(Finding::Foreign { uid: uid() }));
        let other = FileId { inode: live.inode.wrapping_add(1), ..live };
        assert_eq!(judge(me, uid(), Some(other)), Some(Finding::Detached));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert_eq!(judge(dead, uid(), Some(live)), Some(Finding::Gone));
        drop(map);
        assert_eq!(judge(me, uid(), Some(live)), Some(Finding::Detached), "unmapped: no longer attached");
    }

    #[test]
    fn false_slots_are_freed_with_their_bytes_and_true_ones_kept() {
        let v = slot();
        let (live, _map) = mapped("free");
        let me = std::process::id();
        let mut stranger = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let plant = |v: &VgpuSlot, i: usize, pid: u32, bytes: u64| {
            let p = &v.live.procs[i];
            p.start_time.store(start_time(pid).unwrap_or(1), Ordering::Relaxed);
            p.used[0].store(bytes, Ordering::Relaxed);
            p.set_owner(0, pid);
        };
        plant(v, 0, me, 100);
        plant(v, 5, stranger.id(), 1 << 30);
        v.live.procs_hwm.store(6, Ordering::Relaxed);
        assert_eq!(v.used(0), 100 + (1 << 30));
        // This process is the vGPU's user's and maps its file; the other one is the user's too, live, but
        // never joined (it does not map the file).
        let freed = free_strays(v, uid(), Some(live));
        assert_eq!(freed, [(stranger.id(), Finding::Detached)]);
        assert_eq!(v.live.procs[5].word(), 0);
        assert_eq!(v.used(0), 100, "the planted bytes are given back");
        assert_eq!(v.attached().map(|(_, pid, _)| pid).collect::<Vec<_>>(), [me]);
        assert!(free_strays(v, uid(), Some(live)).is_empty());
        // pid 1, for a vGPU of another user than pid 1's.
        let owner = if uid() == 0 { 4242 } else { uid() };
        let w = slot();
        plant(w, 7, 1, 5);
        assert_eq!(free_strays(w, owner, None), [(1, Finding::Foreign { uid: 0 })]);
        let _ = stranger.kill();
        let _ = stranger.wait();
    }

    /// A `/proc/PID/maps` of `n` anonymous mappings followed by one of `file`.
    fn long_map(n: usize, file: FileId) -> Vec<u8> {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!("{:x}-{:x} rw-p 00000000 00:00 0 \n", 0x1000 * i, 0x1000 * i + 0x800));
        }
        text.push_str(&format!(
            "7f00-7f10 rw-s 00000000 {:02x}:{:02x} {} /dev/shm/x\n",
            file.major, file.minor, file.inode
        ));
        text.into_bytes()
    }

    #[test]
    fn a_map_is_read_within_its_budget_across_buffer_boundaries() {
        let file = FileId { major: 0, minor: 0x1a, inode: 4242 };
        let text = long_map(20_000, file);
        let len = text.len() as u64;
        assert!(len > 256 << 10, "several buffers long");
        assert_eq!(scan_maps(&mut &text[..], file, u64::MAX), (Scan::Mapped, len));
        let other = FileId { inode: 4243, ..file };
        assert_eq!(scan_maps(&mut &text[..], other, u64::MAX), (Scan::NotMapped, len));
        let (scan, read) = scan_maps(&mut &text[..], file, len / 2);
        assert_eq!((scan, read), (Scan::Over, len / 2), "never more than the budget is read");
        // A reader handing out a few bytes at a time cuts lines anywhere.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(7).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        assert_eq!(scan_maps(&mut Trickle(&text), file, u64::MAX).0, Scan::Mapped);
        // A line longer than the buffer (a path of 100 kB) is skipped; a non-UTF-8 path does not matter.
        let mut odd = format!("1000-2000 r--p 00000000 00:01 5 /{}\n", "a".repeat(100 << 10)).into_bytes();
        odd.extend_from_slice(b"2000-3000 r--p 00000000 00:1a 4242 /\xff\xfe\n");
        assert_eq!(scan_maps(&mut &odd[..], file, u64::MAX).0, Scan::Mapped);
        // The end of a long name that looks like a mapping of the file is not taken for one.
        let forged = format!("1000-2000 r--p 00000000 00:01 5 /{} a b c 00:1a 4242 x\n", "a".repeat(100 << 10));
        assert_eq!(scan_maps(&mut forged.as_bytes(), file, u64::MAX).0, Scan::NotMapped);
        assert_eq!(scan_maps(&mut Trickle(forged.as_bytes()), file, u64::MAX).0, Scan::NotMapped);
    }

    /// Opens `text` as a process's maps, counting the opens in `count`.
    fn opener(text: Vec<u8>, count: &std::cell::Cell<u32>) -> impl Fn(u32) -> std::io::Result<Box<dyn Read>> + '_ {
        move |_| {
            count.set(count.get() + 1);
            Ok(Box::new(std::io::Cursor::new(text.clone())) as Box<dyn Read>)
        }
    }

    #[test]
    fn a_process_is_verified_once_and_a_large_or_unreadable_map_is_doubted_not_reread() {
        let me = std::process::id();
        let live = FileId { major: 0, minor: 0x1a, inode: 4242 };
        let v = Verifier::default();
        let opens = std::cell::Cell::new(0);
        // 60,000 mappings before the file's (3 MB): read once, whatever the number of slots naming it.
        let big = long_map(60_000, live);
        let read = opener(big.clone(), &opens);
        let mut budget = ROUND_BUDGET;
        for _ in 0..90 {
            assert_eq!(v.judge_with(me, uid(), Some(live), &mut budget, &read), Verdict::Verified);
        }
        assert_eq!((opens.get(), budget), (1, ROUND_BUDGET - big.len() as u64));
        v.end_pass();
        assert_eq!(v.judge_with(me, uid(), Some(live), &mut budget, &read), Verdict::Verified);
        assert_eq!(opens.get(), 1, "kept from pass to pass");
        // Not named in a pass: forgotten.
        v.end_pass();
        v.end_pass();
        assert_eq!(v.judge_with(me, uid(), Some(live), &mut ROUND_BUDGET.clone(), &read), Verdict::Verified);
        assert_eq!(opens.get(), 2);

        // A pass whose budget is spent defers the process to a later one, without a verdict.
        let v = Verifier::default();
        let mut low = 1000;
        assert_eq!(v.judge_with(me, uid(), Some(live), &mut low, &read), Verdict::Unverified(Doubt::Deferred));
        assert_eq!(low, 0);
        assert_eq!(v.judge_with(me, uid(), Some(live), &mut low, &read), Verdict::Unverified(Doubt::Deferred));
        assert_eq!(v.judge_with(me, uid(), Some(live), &mut ROUND_BUDGET.clone(), &read), Verdict::Verified);

        // A map beyond the process's budget (long file names) is doubted, and not read again before RETRY.
        let huge = opener(long_map((PROCESS_BUDGET / 40) as usize, live), &opens);
        let v = Verifier::default();
        let before = opens.get();
        let mut budget = u64::MAX;
        for _ in 0..3 {
            assert_eq!(v.judge_with(me, uid(), Some(live), &mut budget, &huge), Verdict::Unverified(Doubt::TooLarge));
        }
        assert_eq!((opens.get() - before, u64::MAX - budget), (1, PROCESS_BUDGET));

        // Unreadable (the daemon may not read it): doubted, once.
        let v = Verifier::default();
        let denied = |_| -> std::io::Result<Box<dyn Read>> { Err(std::io::Error::from_raw_os_error(libc::EACCES)) };
        for _ in 0..3 {
            assert_eq!(
                v.judge_with(me, uid(), Some(live), &mut budget, &denied),
                Verdict::Unverified(Doubt::Unreadable)
            );
        }
        // Known false, whatever the map: another user's process, or a map without the file.
        assert_eq!(
            v.judge_with(me, uid().wrapping_add(1), Some(live), &mut budget, &denied),
            Verdict::False(Finding::Foreign { uid: uid() })
        );
        let other = FileId { inode: 1, ..live };
        assert_eq!(v.judge_with(me, uid(), Some(other), &mut budget, &read), Verdict::False(Finding::Detached));
        assert_eq!(v.judge_with(me, uid(), None, &mut budget, &read), Verdict::Unverified(Doubt::NoFile));
    }

    #[test]
    fn unverified_slots_are_kept_but_listed_apart_from_false_and_verified_ones() {
        let v = slot();
        let (live, _map) = mapped("unverified");
        let me = std::process::id();
        let (dead, _) = {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let id = child.id();
            child.wait().unwrap();
            (id, ())
        };
        for (i, pid) in [(0, me), (1, dead)] {
            let p = &v.live.procs[i];
            p.start_time.store(start_time(pid).unwrap_or(1), Ordering::Relaxed);
            p.set_owner(0, pid);
        }
        v.live.procs_hwm.store(2, Ordering::Relaxed);
        let verifier = Verifier::default();
        let judged =
            verifier.judge_slots(v, uid(), Some(live), &ProcView::new(), &|_, _| false, &mut ROUND_BUDGET.clone());
        assert_eq!(judged.len(), 2);
        assert_eq!(judged[0].2, Verdict::Verified);
        assert_eq!(strays(&judged).iter().map(|s| (s.0, s.2)).collect::<Vec<_>>(), [(1, Finding::Gone)]);
        assert!(unverified(&judged).is_empty());
        // The budget spent, this process is verified all the same (kept from before); a new verifier defers it.
        let judged = verifier.judge_slots(v, uid(), Some(live), &ProcView::new(), &|_, _| false, &mut 0);
        assert_eq!(judged[0].2, Verdict::Verified);
        let judged = Verifier::default().judge_slots(v, uid(), Some(live), &ProcView::new(), &|_, _| false, &mut 0);
        assert_eq!(unverified(&judged), [(0, v.live.procs[0].owner.load(Ordering::Relaxed), Doubt::Deferred)]);
    }
}
