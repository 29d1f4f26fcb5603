//! `libsimsysfs.so`: preloaded into a process under test, it interposes `write(2)`. When `SIMSYSFS_ROOT`
//! is set, a write to a regular file under that root that is a kernel attribute is not written: the
//! simulated kernel (`simsysfs::on_write`) performs its effect on the tree, and the call returns the count
//! or -1 with the kernel's errno. Every other write goes to the real `write`.

use std::cell::Cell;
use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use simsysfs::Reaction;

/// Signature of `write(2)`.
type WriteFn = unsafe extern "C" fn(libc::c_int, *const libc::c_void, libc::size_t) -> libc::ssize_t;

/// The next `write` after ours (libc's), resolved on first use.
static REAL_WRITE: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
/// The simulated root, when active.
struct Root {
    /// `realpath(SIMSYSFS_ROOT)`.
    path: PathBuf,
    /// The filesystem it is on: a file on another one cannot be under it (saves the `readlink`).
    dev: u64,
}

/// The root, or `None` when `SIMSYSFS_ROOT` is unset, empty or missing: inactive.
static ROOT: OnceLock<Option<Root>> = OnceLock::new();

thread_local! {
    /// Set while this thread is inside the simulated kernel: its own file writes go straight to the
    /// real `write` (no recursion).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// libc's `write`, looked up once; racing first calls store the same value.
fn real_write() -> Option<WriteFn> {
    let mut p = REAL_WRITE.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition after this library.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"write".as_ptr()) };
        if p.is_null() {
            return None;
        }
        REAL_WRITE.store(p, Ordering::Release);
    }
    // SAFETY: `p` is the address of libc's `write`, whose signature is `WriteFn`.
    Some(unsafe { std::mem::transmute::<*mut libc::c_void, WriteFn>(p) })
}

/// Calls the real `write`, or fails with ENOSYS when it cannot be found (never happens with a libc).
fn pass(fd: libc::c_int, buf: *const libc::c_void, count: libc::size_t) -> libc::ssize_t {
    match real_write() {
        // SAFETY: the caller's arguments, unchanged, to the function they meant to call.
        Some(f) => unsafe { f(fd, buf, count) },
        None => fail(libc::ENOSYS),
    }
}

/// Sets `errno` and returns -1.
fn fail(errno: i32) -> libc::ssize_t {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// The simulated root, read from the environment once.
fn root() -> Option<&'static Root> {
    ROOT.get_or_init(|| {
        let value = std::env::var_os(simsysfs::ROOT_ENV).filter(|v| !v.is_empty())?;
        let path = std::fs::canonicalize(value).ok()?;
        let dev = std::fs::metadata(&path).ok()?.dev();
        Some(Root { path, dev })
    })
    .as_ref()
}

/// The path under the root an fd names, when it is a regular file there.
fn attribute_path(fd: libc::c_int, root: &Root) -> Option<PathBuf> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`, which lives for the call.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    if st.st_dev != root.dev {
        return None;
    }
    let link = format!("/proc/self/fd/{fd}\0");
    let link = CStr::from_bytes_with_nul(link.as_bytes()).ok()?;
    let mut buf = [0u8; libc::PATH_MAX as usize];
    // SAFETY: readlink writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::readlink(link.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 || n as usize >= buf.len() {
        return None;
    }
    let path = Path::new(OsStr::from_bytes(&buf[..n as usize]));
    path.strip_prefix(&root.path).ok().map(Path::to_path_buf)
}

/// The simulated kernel's answer for a write, `None` when the real `write` should do it.
fn simulate(fd: libc::c_int, buf: *const libc::c_void, count: libc::size_t) -> Option<libc::ssize_t> {
    let root = root()?;
    let rel = attribute_path(fd, root)?;
    let data: &[u8] = if count == 0 || buf.is_null() {
        &[]
    } else {
        // SAFETY: write(2)'s contract: `buf` holds `count` readable bytes.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) }
    };
    INSIDE.with(|i| i.set(true));
    let reaction = simsysfs::on_write(&root.path, &rel, data);
    INSIDE.with(|i| i.set(false));
    match reaction {
        Reaction::NotAttribute => None,
        Reaction::Done => Some(count as libc::ssize_t),
        Reaction::Failed(e) => Some(fail(e)),
        Reaction::Kill => {
            // SAFETY: signals our own process; SIGKILL does not return.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            Some(fail(libc::EINTR))
        }
    }
}

/// The interposed `write(2)`.
///
/// # Safety
/// As `write(2)`: `buf` holds `count` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: libc::c_int, buf: *const libc::c_void, count: libc::size_t) -> libc::ssize_t {
    // A nested write from inside the simulated kernel, or a thread being torn down (no thread-local),
    // goes straight through.
    if INSIDE.try_with(|i| i.get()).unwrap_or(true) {
        return pass(fd, buf, count);
    }
    match std::panic::catch_unwind(|| simulate(fd, buf, count)) {
        Ok(Some(r)) => r,
        Ok(None) => pass(fd, buf, count),
        Err(_) => {
            let _ = INSIDE.try_with(|i| i.set(false));
            fail(libc::EIO)
        }
    }
}
