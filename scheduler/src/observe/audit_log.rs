//! The audit log: one line for every request that changes something (created, changed, suspended,
//! resumed, removed ...) and for every request refused, naming who asked (uid and pid, from the kernel's
//! credentials of the connection, see [`crate::api::caller`]), what was asked and what came of it; and one for
//! every tenant process seen joining or leaving a vGPU. Requests that only read and succeed are not
//! recorded (`stats` is polled at 10 Hz).
//!
//! Events go through `tracing` (target [`TARGET`]) to stderr and, with `tessera daemon --audit-log
//! PATH`, to that file too (created mode 0600, never through a symbolic link, appended to). Neither
//! destination is written by the thread that records: the formatted line is handed to
//! [`crate::observe::logger`]'s writing threads, so a full stderr pipe or a slow disk never holds up a request
//! (lines beyond the queue are dropped, and the next line written says how many).

use crate::api::caller::Caller;
use crate::api::protocol::{Error, Reply, Request};
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, filter};

/// The `tracing` target of audit events.
pub const TARGET: &str = "tessera::audit";

/// Why the audit log cannot be written where asked.
#[derive(Debug, thiserror::Error)]
pub enum AuditLogError {
    /// The path is a symbolic link.
    #[error("audit log {}: is a symbolic link; give the file itself", .0.display())]
    SymbolicLink(PathBuf),
    /// The file cannot be opened or created.
    #[error("audit log {}: cannot open: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file's metadata cannot be read.
    #[error("audit log {}: cannot read its metadata: {source}", path.display())]
    Metadata {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The path is a directory, a device, a socket...
    #[error("audit log {}: is not a regular file", .0.display())]
    NotRegular(PathBuf),
    /// The file is another user's.
    #[error(
        "audit log {}: belongs to {}, not to the daemon's user; give a file of the daemon's user",
        path.display(),
        tessera_region::secure_fs::describe_user(*owner)
    )]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// Others' permissions cannot be taken away.
    #[error("audit log {}: cannot make it readable by its owner only: {source}", path.display())]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file cannot be written to by the logger.
    #[error(transparent)]
    Sink(#[from] crate::observe::logger::SinkError),
}

/// Opens `file` for the audit log (see [`open`]) if given, and makes the audit log's subscriber the
/// process's (once: a second call keeps the first subscriber, and is not an error).
pub fn init(file: Option<&Path>) -> Result<(), AuditLogError> {
    let to_file = match file {
        Some(path) => {
            crate::observe::logger::open_file(open(path)?)?;
            true
        }
        None => false,
    };
    let ours = || filter::filter_fn(|meta| meta.target().starts_with("tessera"));
    let stderr = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Destination::Stderr).with_filter(ours());
    let file = to_file
        .then(|| tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Destination::File).with_filter(ours()));
    let subscriber = tracing_subscriber::registry().with(stderr).with(file);
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// The audit log file at `path`, opened to append: created mode 0600 when missing; never through a
/// symbolic link (`O_NOFOLLOW`); when it exists, it must be a regular file of the daemon's user, and is
/// made 0600 (what the daemon records is not for other users).
pub fn open(path: &Path) -> Result<std::fs::File, AuditLogError> {
    let path_buf = || path.to_path_buf();
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => AuditLogError::SymbolicLink(path_buf()),
            _ => AuditLogError::Open { path: path_buf(), source },
        })?;
    let meta = file.metadata().map_err(|source| AuditLogError::Metadata { path: path_buf(), source })?;
    if !meta.file_type().is_file() {
        return Err(AuditLogError::NotRegular(path_buf()));
    }
    if meta.uid() != tessera_region::secure_fs::euid() {
        return Err(AuditLogError::Owner { path: path_buf(), owner: meta.uid() });
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|source| AuditLogError::Permissions { path: path_buf(), source })?;
    }
    Ok(file)
}

/// Records `request`, made by `caller` and answered `reply`, if it is audited: any request that changes
/// something, and any that failed.
pub fn request(caller: &Caller, request: &Request, reply: &Reply) {
    let changes = !matches!(
        request,
        Request::Version
            | Request::Stats { .. }
            | Request::List
            | Request::Show { .. }
            | Request::Devices
            | Request::MdevTypes
            | Request::MdevList
    );
    if reply.ok && !changes {
        return;
    }
    let what = serde_json::to_value(request).unwrap_or(Value::Null);
    let op = what.get("op").and_then(Value::as_str).unwrap_or("?").to_string();
    let vgpu = what
        .get("name")
        .or_else(|| what.get("spec").and_then(|s| s.get("name")))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let (uid, pid) = (caller.uid, caller.pid);
    if reply.ok {
        let done = match request {
            Request::Create { .. } => "vGPU created",
            Request::Set { .. } => "vGPU changed",
            Request::Suspend { .. } => "vGPU suspended",
            Request::Resume { .. } => "vGPU resumed",
            Request::Rm { .. } => "vGPU removed",
            _ => "request carried out",
        };
        tracing::info!(target: TARGET, uid, pid, op, vgpu, request = %what, result = "ok", "{done}");
    } else {
        let code = reply.code.map_or("error", |c| c.as_str());
        let why = reply.error.as_deref().unwrap_or("");
        let result = format!("refused ({code}): {why}");
        tracing::warn!(target: TARGET, uid, pid, op, vgpu, request = %what, result, "request refused");
    }
}

/// Records a request refused before it could be read or carried out (by the server: a caller who may
/// not manage vGPUs, a line that is not a request), from `caller` when its credentials are known.
pub fn refused(caller: Option<&Caller>, error: &Error) {
    let (uid, pid) = caller.map_or((None, None), |c| (Some(c.uid), Some(c.pid)));
    let result = format!("refused ({}): {}", error.code.as_str(), error.message);
    tracing::warn!(target: TARGET, uid, pid, result, "request refused");
}

/// Records that process `pid` (of user `uid`, when known) joined vGPU `vgpu`.
pub fn tenant_joined(vgpu: &str, pid: u32, uid: Option<u32>) {
    tracing::info!(target: TARGET, vgpu, pid, uid, "tenant joined");
}

/// Records that process `pid` is no longer attached to vGPU `vgpu` (it exited, or its slot was freed).
pub fn tenant_left(vgpu: &str, pid: u32) {
    tracing::info!(target: TARGET, vgpu, pid, "tenant left");
}

/// Where the formatter's lines go: the logger's queues.
#[derive(Clone, Copy)]
enum Destination {
    Stderr,
    File,
}

impl<'a> MakeWriter<'a> for Destination {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { to: *self, text: Vec::new() }
    }
}

/// One event's text, gathered while it is formatted and queued whole when dropped.
struct Line {
    to: Destination,
    text: Vec<u8>,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let mut text = String::from_utf8_lossy(&self.text).into_owned();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        match self.to {
            Destination::Stderr => crate::observe::logger::to_stderr(text),
            Destination::File => crate::observe::logger::to_file(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-audit-log-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_file_is_private_appended_and_never_a_link() {
        let d = scratch("open");
        let path = d.join("audit.log");
        std::fs::write(&path, "earlier\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut f = open(&path).unwrap();
        f.write_all(b"later\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "earlier\nlater\n", "appended");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let new = d.join("new.log");
        open(&new).unwrap();
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o600, "created 0600");
        let link = d.join("link.log");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = open(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link") && e.contains("link.log"), "{e}");
        let e = open(&d).unwrap_err().to_string();
        assert!(e.contains("cannot open") || e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
