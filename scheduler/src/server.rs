//! The daemon's unix socket: created mode 0600, so only its owner may manage vGPUs (a connection from
//! another user is refused as well, by its credentials), in a directory checked as the region's is (see
//! [`tessera_ffi::region::open`]); a socket left by a dead daemon is replaced, one a live daemon listens on
//! is an error naming its pid (from the kernel's credentials of the connection). A socket of another user
//! is never connected to or removed, unless it is in the daemon's private directory, where it can only be
//! a leftover: it is an error naming its owner. Each connection sends JSON request lines and gets
//! one JSON reply line for each (see [`crate::protocol`] and `docs/protocol.md`).

use crate::caller::Caller;
use crate::logger::say;
use crate::manager::Manager;
use crate::protocol::{self, Error, ErrorCode, MAX_LINE, Reply};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_ffi::region::open::checked_dir;
use tessera_ffi::secure_fs::{self, DirKind};

/// How long a connection may stay silent before the daemon drops it.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The credentials of the process at the other end of `stream`, as the kernel recorded them.
pub fn peer(stream: &UnixStream) -> Option<Caller> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes one ucred into our buffer, whose size we pass; the descriptor is open.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(Caller { pid: cred.pid as u32, uid: cred.uid, gid: cred.gid })
}

/// Checks that nothing serves at `path` (removing a dead daemon's socket), in a directory fit for it: a
/// live daemon there is an error, as is another user's socket outside the daemon's private directory.
pub fn claim_path(path: &Path) -> Result<(), String> {
    let dir = checked_dir(path).map_err(|e| format!("socket {}: {e} (or set TESSERA_SOCKET)", path.display()))?;
    if let DirKind::Foreign(owner) = dir {
        return Err(format!(
            "socket {}: its directory belongs to {}; set TESSERA_SOCKET to a path in a directory of your own",
            path.display(),
            secure_fs::describe_user(owner)
        ));
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("socket {}: {e}", path.display())),
    };
    if !meta.file_type().is_socket() {
        return Err(format!("{} exists and is not a socket; remove it or set TESSERA_SOCKET", path.display()));
    }
    if meta.uid() != secure_fs::euid() {
        if dir == DirKind::Private {
            return std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove the leftover socket {}: {e}", path.display()));
        }
        return Err(format!(
            "socket {} belongs to {}, not to the daemon's user: another user may have created it to pose as the \
             daemon; remove it (as root) or set TESSERA_SOCKET to a path in a directory of your own",
            path.display(),
            secure_fs::describe_user(meta.uid())
        ));
    }
    match UnixStream::connect(path) {
        Ok(s) => {
            let pid = peer(&s).map_or_else(|| "unknown".to_string(), |c| c.pid.to_string());
            Err(format!("daemon already running (pid {pid}), listening on {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove the stale socket {} of a dead daemon: {e}", path.display())),
        Err(e) => Err(format!("socket {}: {e}", path.display())),
    }
}

/// The listening socket; removed when dropped.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

impl Server {
    /// Listens on `path` (see [`claim_path`]), mode 0600.
    pub fn bind(path: &Path) -> Result<Server, String> {
        claim_path(path)?;
        // Created without group and other permissions from the start: no window for another user to connect.
        // SAFETY: umask has no memory-safety preconditions; it swaps the process's file-creation mask, which
        // is restored at once (the daemon binds before it starts its threads).
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above, restoring the mask.
        unsafe { libc::umask(old) };
        let listener = bound.map_err(|e| format!("cannot listen on {}: {e} (set TESSERA_SOCKET)", path.display()))?;
        let server = Server { listener, path: path.to_path_buf() };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot restrict {} to its owner: {e}", path.display()))?;
        Ok(server)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections, each on a thread of its own, for ever. Running out of descriptors, memory or
    /// threads refuses the connection at hand (see [`Shedder`]) and goes on serving the others.
    pub fn serve(&self, manager: Arc<Manager>) -> Result<(), String> {
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut shedder = Shedder::new();
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        shedder.shed(&self.listener, &e);
                        continue;
                    }
                    // The client went away before it was accepted, or a signal: nothing to do.
                    Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EAGAIN) => continue,
                    _ => return Err(format!("accepting on {}: {e}", self.path.display())),
                },
            };
            let manager = Arc::clone(&manager);
            let spawned = std::thread::Builder::new().name("connection".into()).spawn(move || {
                let caller = peer(&stream).filter(|c| c.uid == me || c.uid == 0);
                // A request that panics loses its connection (the client sees it closed) and is logged; the
                // other threads go on (the configuration's lock is taken again despite the panic).
                let conversation = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let _ = converse(stream, &manager, caller);
                }));
                if let Err(payload) = conversation {
                    let why = crate::daemon::panic_message(payload.as_ref());
                    say!("tessera daemon: a request failed ({why}); its connection was closed, still serving");
                }
            });
            // The closure, and with it the connection, is dropped: the client sees it closed.
            if let Err(e) = spawned {
                shedder.refused(&format!("cannot start a thread for a connection ({e})"));
            }
        }
    }
}

/// How long the accept loop pauses when it could not even refuse a connection.
const BACKOFF: Duration = Duration::from_millis(10);
/// Least time between two log lines about refused connections.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Refuses connections the daemon has no resources for, and says so in a rate-limited log line. It keeps
/// a spare descriptor: out of descriptors, it closes the spare, accepts the pending connection with it,
/// answers it an error and closes it, then takes the spare again; so the client gets an answer instead of
/// waiting in the backlog, and the accept loop does not spin on a connection it cannot take.
struct Shedder {
    spare: Option<std::fs::File>,
    refused: u64,
    logged: Option<Instant>,
}

impl Shedder {
    fn new() -> Shedder {
        Shedder { spare: Self::spare(), refused: 0, logged: None }
    }

    fn spare() -> Option<std::fs::File> {
        std::fs::File::open("/dev/null").ok()
    }

    /// Refuses the connection `listener` could not accept for lack of resources (`error`).
    fn shed(&mut self, listener: &UnixListener, error: &std::io::Error) {
        let reason = format!("cannot accept a connection ({error}; raise the daemon's `ulimit -n`)");
        self.refused(&reason);
        let answered = self.spare.take().is_some() && {
            let accepted = listener.accept();
            if let Ok((mut stream, _)) = accepted {
                let e = format!("the daemon is out of resources: {reason}; try again");
                let answer = Reply::failure(&Error::new(ErrorCode::Unavailable, e));
                if let Ok(mut text) = serde_json::to_string(&answer) {
                    text.push('\n');
                    let _ = stream.set_write_timeout(Some(BACKOFF));
                    let _ = stream.write_all(text.as_bytes());
                }
                true
            } else {
                false
            }
        };
        self.spare = Self::spare();
        if !answered || self.spare.is_none() {
            std::thread::sleep(BACKOFF);
        }
    }

    /// Counts a refused connection, logging at most every [`LOG_EVERY`] how many were refused and why.
    fn refused(&mut self, reason: &str) {
        self.refused += 1;
        if self.logged.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            say!("tessera daemon: refused {} connection(s): {reason}; still serving", self.refused);
            self.refused = 0;
            self.logged = Some(Instant::now());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers every request line of one connection, from `caller` (`None`: a caller not allowed to manage
/// vGPUs, or whose credentials could not be read).
fn converse(stream: UnixStream, manager: &Manager, caller: Option<Caller>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(IDLE_TIMEOUT))?;
    // One descriptor per connection (no clone to write with), none that can fail to be had once accepted.
    let mut writer = &stream;
    let mut reader = BufReader::new(&stream);
    loop {
        let mut line = String::new();
        let n = (&mut reader).take(MAX_LINE as u64 + 1).read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        let failed = |code, message: String| Reply::failure(&Error::new(code, message));
        let response = match &caller {
            None => failed(
                ErrorCode::PermissionDenied,
                "permission denied: only the daemon's owner may manage vGPUs".into(),
            ),
            Some(_) if n > MAX_LINE => failed(ErrorCode::BadRequest, format!("request longer than {MAX_LINE} bytes")),
            Some(caller) => match protocol::parse(&line) {
                Ok(request) => manager.handle_from(request, caller),
                Err(e) => Reply::failure(&e),
            },
        };
        let mut text = serde_json::to_string(&response).map_err(std::io::Error::other)?;
        text.push('\n');
        writer.write_all(text.as_bytes())?;
        if caller.is_none() || n > MAX_LINE {
            return Ok(());
        }
    }
}
