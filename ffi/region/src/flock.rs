//! Exclusive `flock` on a shared file while it is created, checked or joined. The simulated GPU's state
//! is set up under it, so a second process never sees a half-initialized header (Tessera's region is
//! created complete instead, see [`crate::open`], and checked and joined under it); afterwards
//! every access is atomic and needs no lock.
//!
//! Any process that can open a file can `flock` it, and keeps the lock while it is stopped: a file others
//! can open is locked with [`FileLock::within`] or [`FileLock::shared_within`], which give up after a while
//! instead of waiting for ever ([`FileLock::new`] and [`FileLock::shared`] block without a bound, for files
//! only this user's own processes lock).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Holds `flock(LOCK_EX)` (or `LOCK_SH`) on a file until dropped.
pub struct FileLock<'a>(&'a File);

/// Longest pause between two attempts of [`retry_until`]: the lock is held for milliseconds when
/// all is well, so the first attempts come quickly and later ones back off.
const MAX_PAUSE: Duration = Duration::from_millis(20);

impl<'a> FileLock<'a> {
    /// Blocks until the lock on `file` is ours (without a bound: see the module doc).
    pub fn new(file: &'a File) -> std::io::Result<Self> {
        Self::take(file, libc::LOCK_EX)
    }

    /// Blocks until `file` is ours to read: shared with other readers, exclusive of every [`FileLock::new`]
    /// holder (for a reader that only looks, without claiming or changing anything).
    pub fn shared(file: &'a File) -> std::io::Result<Self> {
        Self::take(file, libc::LOCK_SH)
    }

    /// The exclusive lock on `file` if no other open file holds a lock on it now; `Ok(None)` otherwise.
    pub fn try_exclusive(file: &'a File) -> std::io::Result<Option<Self>> {
        Self::try_take(file, libc::LOCK_EX)
    }

    /// The shared lock on `file` if no other open file holds the exclusive lock now; `Ok(None)` otherwise.
    pub fn try_shared(file: &'a File) -> std::io::Result<Option<Self>> {
        Self::try_take(file, libc::LOCK_SH)
    }

    /// The exclusive lock on `file` if it can be had within `timeout`; `Ok(None)` when others kept it
    /// (shared or exclusive) all that time.
    pub fn within(file: &'a File, timeout: Duration) -> std::io::Result<Option<Self>> {
        retry_until(Instant::now() + timeout, || Self::try_exclusive(file))
    }

    /// The shared lock on `file` if it can be had within `timeout`; `Ok(None)` when another kept the
    /// exclusive lock all that time.
    pub fn shared_within(file: &'a File, timeout: Duration) -> std::io::Result<Option<Self>> {
        retry_until(Instant::now() + timeout, || Self::try_shared(file))
    }

    fn try_take(file: &'a File, operation: libc::c_int) -> std::io::Result<Option<Self>> {
        match Self::take(file, operation | libc::LOCK_NB) {
            Ok(lock) => Ok(Some(lock)),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn take(file: &'a File, operation: libc::c_int) -> std::io::Result<Self> {
        loop {
            // SAFETY: flock on a valid open descriptor.
            if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
                return Ok(FileLock(file));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Calls `attempt` until it gives something or `deadline` passes, pausing between calls (briefly at first,
/// up to [`MAX_PAUSE`]); `Ok(None)` when the deadline passed.
pub fn retry_until<T>(
    deadline: Instant,
    mut attempt: impl FnMut() -> std::io::Result<Option<T>>,
) -> std::io::Result<Option<T>> {
    let mut pause = Duration::from_micros(100);
    loop {
        if let Some(got) = attempt()? {
            return Ok(Some(got));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// A process holding a `flock` on a file, as `/proc/locks` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// The process that took the lock.
    pub pid: u32,
    /// An exclusive (`LOCK_EX`) lock; shared otherwise.
    pub exclusive: bool,
}

/// Readings of `/proc/locks` [`holders`] makes before it believes that nobody holds a file.
const READINGS: usize = 5;

/// Who holds a `flock` on `file` (waiters excluded), from `/proc/locks`: the kernel's record, which no
/// user can forge. `None` when `file` cannot be looked at; empty when no holder was found. Sorted, each
/// holder once.
///
/// The kernel writes `/proc/locks` a page at a time, finding where it left off by counting records, so a
/// reading made while other processes take and drop locks can skip records (tens of tenants starting and
/// ending beside a stopped holder made the holder of a lock held for seconds go missing) or read one twice.
/// A reading that finds no holder is therefore made again, up to [`READINGS`] times.
pub fn holders(file: &File) -> Option<Vec<Holder>> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let key = (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino());
    let mut found = Vec::new();
    for _ in 0..READINGS {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        found = locks.lines().filter_map(|line| holder_in(line, key)).collect();
        found.sort_unstable();
        found.dedup();
        if !found.is_empty() {
            break;
        }
    }
    Some(found)
}

/// The holder a `/proc/locks` line records for the file `(major, minor, inode)`, if it is such a record:
/// `1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF` (waiters are `1: -> FLOCK ...`).
fn holder_in(line: &str, (major, minor, inode): (u32, u32, u64)) -> Option<Holder> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 6 || f[1] != "FLOCK" {
        return None;
    }
    let id: Vec<&str> = f[5].split(':').collect();
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    let same = id.len() == 3
        && hex(id[0]) == Some(major)
        && hex(id[1]) == Some(minor)
        && id[2].parse::<u64>().ok() == Some(inode);
    let pid = f[4].parse::<u32>().ok().filter(|&pid| pid != 0)?;
    same.then_some(Holder { pid, exclusive: f[3] == "WRITE" })
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the lock taken in `new` on the same descriptor.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_gives_up_while_another_holds_the_file_and_succeeds_once_it_is_free() {
        let path = std::env::temp_dir().join(format!("tessera-flock-test-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        // Two opens: flock excludes open files, even of one process.
        let (mine, theirs) = (File::open(&path).unwrap(), File::open(&path).unwrap());
        let held = FileLock::shared(&theirs).unwrap();
        let t = Instant::now();
        assert!(FileLock::within(&mine, Duration::from_millis(50)).unwrap().is_none(), "a reader holds it");
        assert!(t.elapsed() >= Duration::from_millis(50), "it tried for the whole time");
        drop(held);
        assert!(FileLock::within(&mine, Duration::from_millis(50)).unwrap().is_some());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn holders_are_read_from_the_kernels_records_of_the_file_only() {
        let key = (0, 0x1a, 5678);
        assert_eq!(
            holder_in("1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF", key),
            Some(Holder { pid: 1234, exclusive: true })
        );
        assert_eq!(
            holder_in("2: FLOCK  ADVISORY  READ 77 00:1a:5678 0 EOF", key),
            Some(Holder { pid: 77, exclusive: false })
        );
        for other in [
            "1: -> FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF",
            "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5679 0 EOF",
            "1: FLOCK  ADVISORY  WRITE 1234 00:1b:5678 0 EOF",
            "1: POSIX  ADVISORY  WRITE 1234 00:1a:5678 0 EOF",
            "1: FLOCK  ADVISORY  WRITE 0 00:1a:5678 0 EOF",
            "1: FLOCK",
        ] {
            assert_eq!(holder_in(other, key), None, "{other}");
        }
        let path = std::env::temp_dir().join(format!("tessera-flock-holders-test-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let (mine, theirs) = (File::open(&path).unwrap(), File::open(&path).unwrap());
        assert_eq!(holders(&mine), Some(vec![]));
        let held = FileLock::new(&theirs).unwrap();
        assert_eq!(holders(&mine), Some(vec![Holder { pid: std::process::id(), exclusive: true }]));
        drop(held);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_holder_is_found_while_other_processes_take_and_drop_locks() {
        // More than a page of records after the held file's (newer locks come first in /proc/locks), and
        // locks taken and dropped meanwhile: one reading per lookup missed the holder in 3 to 108 of 1000.
        let dir = std::env::temp_dir().join(format!("tessera-flock-churn-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = |name: String| File::create(dir.join(name)).unwrap();
        let (mine, theirs) = (open("held".into()), File::open(dir.join("held")).unwrap());
        let _held = FileLock::new(&theirs).unwrap();
        let others: Vec<File> = (0..150).map(|i| open(format!("other{i}"))).collect();
        let _others: Vec<FileLock> = others.iter().map(|f| FileLock::shared(f).unwrap()).collect();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (stop, churning) = (&stop, (0..40).map(|i| open(format!("churn{t}-{i}"))).collect::<Vec<_>>());
                scope.spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let locks: Vec<FileLock> = churning.iter().map(|f| FileLock::shared(f).unwrap()).collect();
                        drop(locks);
                    }
                });
            }
            let missed = (0..1000).filter(|_| holders(&mine).is_none_or(|h| h.is_empty())).count();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(missed, 0, "the holder was missed in {missed} of 1000 lookups");
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shared_within_waits_out_only_an_exclusive_holder() {
        let path = std::env::temp_dir().join(format!("tessera-flock-shared-test-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let (mine, theirs) = (File::open(&path).unwrap(), File::open(&path).unwrap());
        let reader = FileLock::shared(&theirs).unwrap();
        assert!(FileLock::shared_within(&mine, Duration::from_millis(50)).unwrap().is_some(), "readers share");
        drop(reader);
        let held = FileLock::new(&theirs).unwrap();
        assert!(FileLock::shared_within(&mine, Duration::from_millis(50)).unwrap().is_none(), "a writer holds it");
        drop(held);
        assert!(FileLock::shared_within(&mine, Duration::from_millis(50)).unwrap().is_some());
        let _ = std::fs::remove_file(&path);
    }
}
