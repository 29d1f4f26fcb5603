//! Exclusive `flock` on a shared file while it is created, checked or joined. The simulated GPU's state
//! is set up under it, so a second process never sees a half-initialized header (Tessera's region is
//! created complete instead, see [`crate::region::open`], and checked and joined under it); afterwards
//! every access is atomic and needs no lock.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Holds `flock(LOCK_EX)` (or `LOCK_SH`) on a file until dropped.
pub struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    /// Blocks until the lock on `file` is ours.
    pub fn new(file: &'a File) -> std::io::Result<Self> {
        Self::take(file, libc::LOCK_EX)
    }

    /// Blocks until `file` is ours to read: shared with other readers, exclusive of every [`FileLock::new`]
    /// holder (for a reader that only looks, without claiming or changing anything).
    pub fn shared(file: &'a File) -> std::io::Result<Self> {
        Self::take(file, libc::LOCK_SH)
    }

    fn take(file: &'a File, operation: libc::c_int) -> std::io::Result<Self> {
        // SAFETY: flock on a valid open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock(file))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: releases the lock taken in `new` on the same descriptor.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
