//! The daemon's unix socket: created mode 0600, so only its owner may manage vGPUs (a connection from
//! another user is refused as well, by its credentials), in a directory checked as the region's is (see
//! [`tessera_region::open`]); a socket left by a dead daemon is replaced, one a live daemon listens on
//! is an error naming its pid (from the kernel's credentials of the connection). A socket of another user
//! is never connected to or removed, unless it is in the daemon's private directory, where it can only be
//! a leftover: it is an error naming its owner. Each connection sends JSON request lines and gets
//! one JSON reply line for each (see [`crate::api::protocol`] and `docs/protocol.md`).
//!
//! It holds against a hostile local user: one event loop serves every connection (no thread each), under
//! deadlines a trickle of bytes cannot stretch ([`conversation`]); each user's connections are capped,
//! with room kept for the daemon's user and root ([`admission`]); requests run on a bounded pool of
//! threads; [`policy`] says who may ask what.

pub mod admission;
pub mod conversation;
pub mod policy;
mod shedder;

use crate::api::accept::Failure;
use crate::api::caller::Caller;
use crate::api::protocol::ErrorCode;
use crate::vgpus::manager::Manager;
use admission::{Admission, Caps};
use conversation::{DEADLINES, Handler};
use policy::Policy;
use shedder::Shedder;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_region::open::checked_dir;
use tessera_region::secure_fs::{self, DirKind, SecureFsError};

/// Threads of the event loop (reading and writing every connection; the work per byte is small).
const IO_THREADS: usize = 2;
/// The most threads carrying out requests at once (they may wait on locks and fsyncs; more wait in
/// line, while the event loop goes on reading and answering refusals).
const REQUEST_THREADS: usize = 16;

/// The credentials of the process at the other end of `stream`, as the kernel recorded them.
pub fn peer(stream: &impl AsRawFd) -> Option<Caller> {
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

/// Why the daemon cannot take or serve its socket; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The socket's directory cannot be checked or is unfit.
    #[error("socket {}: {source} (or set TESSERA_SOCKET)", path.display())]
    Dir {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: SecureFsError,
    },
    /// The directory is another user's, who could replace the socket.
    #[error(
        "socket {}: its directory belongs to {}; set TESSERA_SOCKET to a path in a directory of your own",
        path.display(),
        secure_fs::describe_user(*owner)
    )]
    ForeignDir {
        /// The socket.
        path: PathBuf,
        /// The directory's owner.
        owner: u32,
    },
    /// The path cannot be looked at or connected to.
    #[error("socket {}: {source}", path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Something else than a socket is there.
    #[error("{} exists and is not a socket; remove it or set TESSERA_SOCKET", .0.display())]
    NotSocket(PathBuf),
    /// Another user's socket, outside the daemon's private directory.
    #[error(
        "socket {} belongs to {}, not to the daemon's user: another user may have created it to pose as the \
         daemon; remove it (as root) or set TESSERA_SOCKET to a path in a directory of your own",
        path.display(),
        secure_fs::describe_user(*owner)
    )]
    ForeignSocket {
        /// The socket.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// Another user's socket in the private directory cannot be removed.
    #[error("cannot remove the leftover socket {}: {source}", path.display())]
    Leftover {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A live daemon answers there.
    #[error("daemon already running (pid {}), listening on {}", pid.map_or_else(|| "unknown".into(), |p| p.to_string()), path.display())]
    Running {
        /// The socket.
        path: PathBuf,
        /// The daemon's pid, if the kernel said.
        pid: Option<u32>,
    },
    /// A dead daemon's socket cannot be removed.
    #[error("cannot remove the stale socket {} of a dead daemon: {source}", path.display())]
    Stale {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The socket cannot be bound.
    #[error("cannot listen on {}: {source} (set TESSERA_SOCKET)", path.display())]
    Listen {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Group and others cannot be kept out.
    #[error("cannot restrict {} to its owner: {source}", path.display())]
    Restrict {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The socket cannot be served (its event loop, its descriptor).
    #[error("cannot serve {}: {source}", path.display())]
    Serve {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The listener failed for good.
    #[error("accepting on {}: {source}", path.display())]
    Accept {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Checks that nothing serves at `path` (removing a dead daemon's socket), in a directory fit for it: a
/// live daemon there is an error, as is another user's socket outside the daemon's private directory.
pub fn claim_path(path: &Path) -> Result<(), SocketError> {
    let at = || path.to_path_buf();
    let dir = checked_dir(path).map_err(|source| SocketError::Dir { path: at(), source })?;
    if let DirKind::Foreign(owner) = dir {
        return Err(SocketError::ForeignDir { path: at(), owner });
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(SocketError::Io { path: at(), source }),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotSocket(at()));
    }
    if meta.uid() != secure_fs::euid() {
        if dir == DirKind::Private {
            return std::fs::remove_file(path).map_err(|source| SocketError::Leftover { path: at(), source });
        }
        return Err(SocketError::ForeignSocket { path: at(), owner: meta.uid() });
    }
    match UnixStream::connect(path) {
        Ok(s) => Err(SocketError::Running { path: at(), pid: peer(&s).map(|c| c.pid) }),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|source| SocketError::Stale { path: at(), source })
        }
        Err(source) => Err(SocketError::Io { path: at(), source }),
    }
}

/// The listening socket; removed when dropped.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

impl Server {
    /// Listens on `path` (see [`claim_path`]), mode 0600.
    pub fn bind(path: &Path) -> Result<Server, SocketError> {
        claim_path(path)?;
        // Created without group and other permissions from the start: no window for another user to connect.
        // SAFETY: umask has no memory-safety preconditions; it swaps the process's file-creation mask, which
        // is restored at once (the daemon binds before it starts its threads).
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(path);
        // SAFETY: as above, restoring the mask.
        unsafe { libc::umask(old) };
        let listener = bound.map_err(|source| SocketError::Listen { path: path.to_path_buf(), source })?;
        let server = Server { listener, path: path.to_path_buf() };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|source| SocketError::Restrict { path: path.to_path_buf(), source })?;
        Ok(server)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections for ever (see the module's documentation). Running out of descriptors or
    /// memory refuses the connection at hand (see `shedder`) and goes on serving the others.
    pub fn serve(&self, manager: Arc<Manager>) -> Result<(), SocketError> {
        let handler: Handler = Arc::new(move |request, caller| manager.handle_from(request, caller));
        self.serve_with(handler, Policy::of_this_process(), Caps::of_this_process())
    }

    /// [`Server::serve`] with the request handler, rules and caps given.
    pub fn serve_with(&self, handler: Handler, policy: Policy, caps: Caps) -> Result<(), SocketError> {
        let failed = |source| SocketError::Serve { path: self.path.clone(), source };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .max_blocking_threads(REQUEST_THREADS)
            .thread_name("socket")
            .enable_io()
            .enable_time()
            .build()
            .map_err(failed)?;
        // A second descriptor of the same socket, for the runtime to own (this one is removed on drop).
        let listener = self.listener.try_clone().and_then(|l| l.set_nonblocking(true).map(|()| l)).map_err(failed)?;
        let served = runtime.block_on(async {
            let listener = tokio::net::UnixListener::from_std(listener).map_err(failed)?;
            let admission = Admission::new(caps, policy);
            let mut shedder = Shedder::new();
            loop {
                let stream = match listener.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => match Failure::of(&e) {
                        Failure::Shortage => {
                            shedder.shed(&listener, &e).await;
                            continue;
                        }
                        // The client went away before it was accepted, or a signal: nothing to do.
                        Failure::Passing => continue,
                        Failure::Broken => return Err(SocketError::Accept { path: self.path.clone(), source: e }),
                    },
                };
                let Some(caller) = peer(&stream) else {
                    shedder.refused("its credentials could not be read");
                    let e = "permission denied: the daemon cannot read the connection's credentials".to_string();
                    shedder::refuse(stream, ErrorCode::PermissionDenied, e);
                    continue;
                };
                match admission.admit(caller.uid) {
                    Ok(ticket) => {
                        let handler = Arc::clone(&handler);
                        tokio::spawn(async move {
                            conversation::converse(stream, caller, policy, handler, DEADLINES).await;
                            drop(ticket);
                        });
                    }
                    Err(refusal) => {
                        shedder.refused(&refusal.to_string());
                        shedder::refuse(stream, ErrorCode::Unavailable, refusal.to_string());
                    }
                }
            }
        });
        // Not waiting for requests still being carried out: the daemon stops on this error.
        runtime.shutdown_background();
        served
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
