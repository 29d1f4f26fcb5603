//! The process slots the daemon itself vouches for: a process joining a managed vGPU claims a process slot
//! in the vGPU's live file (which its user can write, so a slot there proves nothing) and then sends a
//! `join` request naming it; the daemon checks the connection's peer credentials (`SO_PEERCRED`: the pid,
//! translated by the kernel into the daemon's pid namespace, and the uid) against the slot and the vGPU's
//! user, opens a pidfd on the process and records the slot here, in its own memory and in a file of its
//! state directory that no tenant can write.
//!
//! A recorded slot is the strongest evidence the daemon has: it blocks `tessera vgpu rm` without any read
//! of the process's `/proc` files (whatever the process maps, and even when it made itself unreadable
//! with `PR_SET_DUMPABLE`), and the pidfd tells the moment the process ends, whoever reuses its pid after
//! ([`Joins::reap`]). A slot not recorded here is judged by [`crate::tenants::integrity`], which frees it when it is
//! positively false and never lets it block `rm` unless it verified the process maps the vGPU's file.
//!
//! Invariants: at most one record per (vGPU slot, process slot), so the table is bounded by the region's
//! size; a record holds the owner word the slot had when it was recorded, and counts only while the slot
//! still holds that word (a slot freed and claimed again by another process is not that process's).
//! The file is rewritten (atomically, without `fsync`: a machine that restarts has no tenants left) on
//! every change, and read back when the daemon starts: a record whose process is gone, or whose pid now
//! names a process with another start time, is dropped then.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tessera_region::reclaim::start_time;

/// The first line of the file.
const HEADER: &str = "tessera-joins 1";

/// A process slot: the vGPU's slot index and the process slot's index in it.
pub type SlotKey = (usize, usize);

/// One process the daemon recorded as the owner of a process slot.
#[derive(Debug)]
struct Joined {
    /// The slot's owner word when the process joined ([`tessera_region::owner`]).
    word: u64,
    /// Its pid, in the daemon's namespace.
    pid: u32,
    /// Its start time (`/proc/PID/stat`), against pid reuse when the record is read back.
    start: u64,
    /// Readable once the process has ended.
    pidfd: OwnedFd,
}

/// Why a `join` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// The pidfd could not be opened: the process ended meanwhile, or the kernel has no pidfds.
    #[error("cannot follow process {pid}: {why}")]
    NoPidfd {
        /// The process.
        pid: u32,
        /// The system's error.
        why: String,
    },
    /// The process's start time cannot be read, or is not the one its slot recorded.
    #[error("process {pid} is not the one that claimed the slot (its start time differs, or cannot be read)")]
    NotTheClaimer {
        /// The process.
        pid: u32,
    },
}

/// The daemon's record of joined processes (see the module documentation).
pub struct Joins {
    table: Mutex<HashMap<SlotKey, Joined>>,
    /// Where the table is kept across daemon restarts (`None`: only in memory, in tests).
    file: Option<PathBuf>,
}

/// Opens a pidfd on `pid`.
fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process of `pidfd` has ended (its pidfd polls readable). An error polling is not an end.
fn ended(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, a zero timeout: poll returns at once.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

impl Joins {
    /// An empty table kept in memory only.
    #[cfg(test)] // Only the tests use it.
    pub fn in_memory() -> Joins {
        Joins { table: Mutex::default(), file: None }
    }

    /// The table kept in `file`, with the records it holds whose process still runs (with the start time
    /// recorded), written back at once. A missing file is an empty table; an unreadable or malformed one
    /// too, said in the log: the processes it named are judged as any unrecorded slot is.
    pub fn load(file: &Path) -> Joins {
        let joins = Joins { table: Mutex::default(), file: Some(file.to_path_buf()) };
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            // Written at once, so that the state directory holds the same files for the daemon's whole life.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                crate::observe::logger::say!(
                    "tessera daemon: {}: cannot read: {e}; no joined process kept",
                    file.display()
                );
                return joins;
            }
        };
        let mut lines = text.lines();
        if !text.is_empty() && lines.next() != Some(HEADER) {
            crate::observe::logger::say!(
                "tessera daemon: {}: not a file of joined processes ({HEADER:?} expected first); ignored",
                file.display()
            );
            return joins;
        }
        {
            let mut table = joins.table();
            for line in lines {
                let fields: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
                let &[vgpu, slot, word, pid, start] = fields.as_slice() else { continue };
                let (Ok(vgpu), Ok(slot), Ok(pid)) = (usize::try_from(vgpu), usize::try_from(slot), u32::try_from(pid))
                else {
                    continue;
                };
                let Ok(pidfd) = pidfd_open(pid) else { continue };
                // After the pidfd is open: the start time read now is that of the process it follows.
                if start_time(pid) == Some(start) && table.len() < MAX_RECORDS {
                    table.insert((vgpu, slot), Joined { word, pid, start, pidfd });
                }
            }
            joins.save(&table);
        }
        joins
    }

    fn table(&self) -> MutexGuard<'_, HashMap<SlotKey, Joined>> {
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records process `pid` (in the daemon's namespace, started at `start` as its slot says) as the owner
    /// of process slot `key`, whose owner word is `word`; replaces any earlier record of that slot.
    pub fn admit(&self, key: SlotKey, word: u64, pid: u32, start: u64) -> Result<(), JoinError> {
        let pidfd = pidfd_open(pid).map_err(|e| JoinError::NoPidfd { pid, why: e.to_string() })?;
        // Read after the pidfd is open: if `pid` is still the process that claimed the slot now, the pidfd
        // follows that process.
        if start_time(pid) != Some(start) {
            return Err(JoinError::NotTheClaimer { pid });
        }
        let mut table = self.table();
        table.insert(key, Joined { word, pid, start, pidfd });
        self.save(&table);
        Ok(())
    }

    /// Whether process slot `key`, holding owner word `word`, was recorded with that word and its process
    /// has not ended.
    pub fn vouches(&self, key: SlotKey, word: u64) -> bool {
        self.table().get(&key).is_some_and(|j| j.word == word && !ended(&j.pidfd))
    }

    /// The pid (in the daemon's namespace) of the process recorded in slot `key` with owner word `word`:
    /// what the tests look records up by.
    #[cfg(test)]
    fn pid(&self, key: SlotKey, word: u64) -> Option<u32> {
        self.table().get(&key).filter(|j| j.word == word).map(|j| j.pid)
    }

    /// Forgets the records of slots whose process has ended, or whose slot no longer holds the word
    /// recorded (`word_now` reads a slot's owner word; `None`: the vGPU slot is gone); returns the ended
    /// ones (slot and word), which the caller frees as dead processes' slots.
    pub fn reap(&self, word_now: impl Fn(SlotKey) -> Option<u64>) -> Vec<(SlotKey, u64)> {
        let mut ended_slots = Vec::new();
        let mut table = self.table();
        let before = table.len();
        table.retain(|&key, j| {
            if word_now(key) != Some(j.word) {
                return false;
            }
            if ended(&j.pidfd) {
                ended_slots.push((key, j.word));
                return false;
            }
            true
        });
        if table.len() != before {
            self.save(&table);
        }
        ended_slots
    }

    /// Writes the table to its file (the daemon's alone, 0600), atomically but without `fsync`: a join
    /// waits for no disk; a failure is said in the log, and the records stay in memory.
    /// Called with the table's lock held, so that two saves never write their snapshots out of order.
    fn save(&self, table: &HashMap<SlotKey, Joined>) {
        let Some(file) = &self.file else { return };
        let mut text = format!("{HEADER}\n");
        for (&(vgpu, slot), j) in table.iter() {
            text.push_str(&format!("{vgpu} {slot} {} {} {}\n", j.word, j.pid, j.start));
        }
        if let Err(e) = tessera_region::secure_fs::replace_unsynced(file, 0o600, text.as_bytes()) {
            crate::observe::logger::say!("tessera daemon: warning: {e}; joined processes are kept in memory only");
        }
    }
}

/// Most records kept: one per process slot of the region.
const MAX_RECORDS: usize = tessera_region::MAX_VGPUS * tessera_region::PROCS_PER_VGPU;

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn child() -> std::process::Child {
        Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap()
    }

    #[test]
    fn a_joined_process_is_vouched_for_until_it_ends_and_then_reaped() {
        let joins = Joins::in_memory();
        let mut c = child();
        let pid = c.id();
        let start = start_time(pid).unwrap();
        joins.admit((3, 7), 42, pid, start).unwrap();
        assert!(joins.vouches((3, 7), 42));
        assert!(!joins.vouches((3, 7), 43), "another owner word is another process");
        assert!(!joins.vouches((3, 8), 42));
        assert_eq!(joins.reap(|_| Some(42)), vec![]);
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(!joins.vouches((3, 7), 42), "its pidfd says it ended");
        assert_eq!(joins.reap(|_| Some(42)), vec![((3, 7), 42)]);
        assert_eq!(joins.pid((3, 7), 42), None, "reaped once");
    }

    #[test]
    fn a_join_with_another_start_time_is_refused() {
        let joins = Joins::in_memory();
        let mut c = child();
        let start = start_time(c.id()).unwrap();
        assert_eq!(joins.admit((0, 0), 1, c.id(), start + 1), Err(JoinError::NotTheClaimer { pid: c.id() }));
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(matches!(joins.admit((0, 0), 1, c.id(), start), Err(JoinError::NoPidfd { .. })), "reaped: no pidfd");
    }

    #[test]
    fn records_survive_a_restart_while_their_process_runs_and_no_longer() {
        let dir = std::env::temp_dir().join(format!("tessera-joins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("joins");
        let (mut a, mut b) = (child(), child());
        let joins = Joins::load(&file);
        joins.admit((1, 2), 10, a.id(), start_time(a.id()).unwrap()).unwrap();
        joins.admit((1, 3), 11, b.id(), start_time(b.id()).unwrap()).unwrap();
        drop(joins);
        b.kill().unwrap();
        b.wait().unwrap();
        let again = Joins::load(&file);
        assert!(again.vouches((1, 2), 10));
        assert_eq!(again.pid((1, 3), 11), None, "its process ended while the daemon was down");
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 2, "rewritten without it: {text}");
        std::fs::write(&file, "something else\n1 2 10 1 1\n").unwrap();
        assert_eq!(Joins::load(&file).pid((1, 2), 10), None, "a file of another kind is not trusted");
        a.kill().unwrap();
        a.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
