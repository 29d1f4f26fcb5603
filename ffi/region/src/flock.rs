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
